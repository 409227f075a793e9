"""`onnx2edge bench`: the side-by-side harness on a small model, onnxruntime's per-node profile
matched to our nodes, and the suite document (gap tables, hand-written notes kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onnx2edge.bench import suite
from onnx2edge.bench.harness import bench_model, format_result, match_ort_nodes
from onnx2edge.cli import main
from onnx2edge.errors import Onnx2EdgeError


def test_ort_nodes_go_to_the_node_that_absorbed_them() -> None:
    ours = ["conv1", "fc1", "pool"]
    original = ["conv1", "conv1/bn", "conv1/relu", "pool", "fc1", "fc1/relu"]
    ort = {
        "conv1/relu_nchwc": {"ms": 1.0},  # named after the last fused node, a suffix added
        "conv1/bn": {"ms": 0.5},
        "pool": {"ms": 0.25},
        "fused fc1": {"ms": 2.0},  # a prefix word instead
        "ReorderOutput": {"ms": 0.125},  # inserted by onnxruntime
    }
    got, rest = match_ort_nodes(ours, original, ort)
    assert got == {"conv1": 1.5, "pool": 0.25, "fc1": 2.0}
    assert rest == 0.125


def test_a_longer_name_is_not_taken_for_a_prefix() -> None:
    got, rest = match_ort_nodes(
        ["conv1", "conv10"], ["conv1", "conv10"], {"conv10_nchwc": {"ms": 1.0}}
    )
    assert got == {"conv10": 1.0} and rest == 0.0


def test_bench_measures_both_sides_and_checks_the_outputs(example: Path, tmp_path: Path) -> None:
    r = bench_model(example, runs=3, warmup=1, work_dir=tmp_path, profile=True)
    assert r["ours_ms"] > 0 and r["ort_ms"] > 0
    assert r["ratio"] == pytest.approx(r["ours_ms"] / r["ort_ms"])
    assert r["accurate"], r["accuracy"]
    assert r["gemm_kernel"] in {"avx512", "avx2", "portable"}
    assert r["kernels"] and r["convert_s"] > 0 and r["build_s"] > 0
    # fused convolutions show their internal op (o2e.ConvAct, ConvAddAct)
    convs = [p for p in r["profile"] if p["op"] in ("Conv", "ConvAct", "ConvAddAct")]
    assert convs and all(p["ort_ms"] is not None and p["ms"] > 0 for p in convs)
    assert all(p["macs"] > 0 and p["gflops"] > 0 for p in convs)  # fused ops count their MACs
    text = format_result(r)
    assert "ratio ours/onnxruntime" in text and "onnxruntime optimised vs unoptimised" in text


def test_bench_cpu_clock_profiles_on_the_same_clock(example: Path, tmp_path: Path) -> None:
    # --cpu-clock --profile: the node timers read the thread CPU clock the runs are timed by
    r = bench_model(example, runs=3, warmup=1, work_dir=tmp_path, profile=True, cpu_clock=True)
    assert "-DO2E_PROF_CLOCK=CLOCK_THREAD_CPUTIME_ID" in r["cflags"]
    assert r["accurate"] and r["profile"] and sum(p["ms"] for p in r["profile"]) > 0


def test_bench_rounds_alternate_the_sides_and_keep_every_run(example: Path) -> None:
    # 5 runs in 2 rounds: 3 per round on each side, profiles averaged over the rounds
    said: list[str] = []
    r = bench_model(
        example, runs=5, warmup=1, profile=True, cpu_clock=True, rounds=2, log=said.append
    )
    assert r["rounds"] == 2 and r["runs"] == 6
    timing = [m for m in said if m.startswith("timing")]
    assert timing == [
        "timing ours: 3 runs, 1 thread(s) (round 1 of 2)",
        "timing onnxruntime: 3 runs, 1 thread(s) (round 1 of 2)",
        "timing ours: 3 runs, 1 thread(s) (round 2 of 2)",
        "timing onnxruntime: 3 runs, 1 thread(s) (round 2 of 2)",
    ]
    assert r["accurate"] and r["profile"] and all(p["ms"] > 0 for p in r["profile"])
    assert "6 runs in 2 alternating rounds" in format_result(r)


def test_bench_zero_rounds_is_a_clear_error(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", str(example), "--rounds", "0"]) == 2
    err = capsys.readouterr().err
    assert "--rounds must be at least 1" in err and "Traceback" not in err


def test_bench_cli_json(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(example), "--runs", "3", "--warmup", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"ours_ms", "ort_ms", "ratio", "ours_peak_rss_mb", "kernels"} <= set(out)


def test_bench_without_a_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) != 0
    err = capsys.readouterr().err
    assert "bench needs a MODEL" in err and "Traceback" not in err


def _result(
    name: str, threads: int, ratio: float, gaps: dict | None = None, arch: str = "native"
) -> dict:
    r = {
        "name": name,
        "threads": threads,
        "ours_ms": ratio,
        "ort_ms": 1.0,
        "ratio": ratio,
        "runs": 3,
        "target_ratio": suite.TARGETS.get(name),
        "convert_s": 0.1,
        "build_s": 1.0,
        "gemm_kernel": "avx512",
        "kernels": {"Conv: 1x1 as GEMM": 2},
        "cflags": "-O3",
        "onnxruntime": "x",
        "arch": arch,
        "accuracy": {"y": {"max_rel_error": 1e-6, "ort_spread_rel": 1e-7, "ok": True}},
    }
    if gaps:
        r["gaps"] = gaps
    return r


def test_suite_doc_lists_gaps_and_keeps_the_notes(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        f"old table\n{suite.NOTES_BEGIN}\nwhy MobileNet misses: measured here\n{suite.NOTES_END}\n"
    )
    profiled = {
        "profile": [
            {
                "node": "conv_a",
                "op": "Conv",
                "ms": 2.0,
                "ort_ms": 1.0,
                "gflops": 50.0,
                "shape": [1, 8, 7, 7],
            },
            {
                "node": "conv_b",
                "op": "Conv",
                "ms": 1.0,
                "ort_ms": 1.5,
                "gflops": 90.0,
                "shape": [1, 8, 7, 7],
            },
            {
                "node": "pool",
                "op": "MaxPool",
                "ms": 0.5,
                "ort_ms": None,
                "gflops": 0.0,
                "shape": [1, 8, 3, 3],
            },
        ],
        "ort_profile_unattributed_ms": 0.25,
    }
    gaps = suite.gap_nodes(profiled, n=2)
    assert [p["node"] for p in gaps["nodes"]] == ["conv_a", "pool"]
    assert gaps["ours_total_ms"] == 3.5 and gaps["ort_total_ms"] == 2.75
    results = [
        _result("mobilenet_v2", 1, 1.2, gaps),
        _result("mobilenet_v2", 2, 1.1),
        _result("resnet50", 1, 0.9),
    ]
    suite.write_doc(results, doc)
    text = doc.read_text()
    assert "old table" not in text
    assert "why MobileNet misses: measured here" in text
    assert "**mobilenet_v2** (ratio 1.20, target 0.9)" in text
    assert "| conv_a | Conv | 1x8x7x7 | 2.000 | 1.000 | 50 |" in text
    assert "| resnet50 | 0.90 | 1.00 | 0.90 ✓ |" in text
    assert "| mobilenet_v2 | 1.20 | 1.00 | 1.20 ✗ |" in text


def test_suite_doc_has_one_table_per_isa(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"{suite.NOTES_BEGIN}\nhost and conditions\n{suite.NOTES_END}\n")
    results = [
        _result("resnet50", 1, 1.3, arch="x86-64-v3"),
        _result("resnet50", 1, 0.95, arch="native"),
    ]
    suite.write_doc(results, doc)
    text = doc.read_text()
    assert text.count("host and conditions") == 1
    v3, native = (
        text.index("x86-64-v3 (AVX2 + FMA kernels)"),
        text.index("native (`-march=native`)"),
    )
    assert (
        v3
        < text.index("| resnet50 | 1.30 | 1.00 | 1.30 ✗ |")
        < native
        < text.index("| resnet50 | 0.95 |")
    )
    assert "--arch x86-64-v3" in text
    table = suite.format_table(results)
    assert "x86-64-v3 (AVX2 + FMA kernels):" in table and "| resnet50 | 0.95 |" in table


def test_bench_arch_builds_the_avx2_kernels(example: Path) -> None:
    r = bench_model(example, runs=3, warmup=1, arch="x86-64-v3", cpu_clock=True)
    assert r["gemm_kernel"] == "avx2" and "-march=x86-64-v3" in r["cflags"] and r["accurate"]
    assert (
        r["clock"] == "thread CPU time"
        and "-DO2E_BENCH_CPU_CLOCK" in r["cflags"]
        and r["ours_ms"] > 0
    )
    with pytest.raises(Onnx2EdgeError, match="one thread"):
        bench_model(example, runs=3, warmup=1, threads=2, cpu_clock=True)


def test_bench_unknown_arch_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--suite", "seed", "--arch", "x86-64-v3,pentium4"]) == 2
    err = capsys.readouterr().err
    assert "unknown --arch 'pentium4'" in err and "Traceback" not in err


def test_min_seconds_raises_the_runs_of_small_models(example: Path) -> None:
    r = bench_model(example, runs=3, warmup=1, min_seconds=0.05)
    assert 3 < r["runs"] <= 2000
    assert r["accurate"]
    # both sides warm up for about a quarter of min_seconds first, never below `warmup`
    assert 1 <= r["warmup"] <= 1000


def test_warmup_lasts_a_share_of_min_seconds() -> None:
    from onnx2edge.bench.harness import MAX_WARMUP, warmup_runs

    assert warmup_runs(2.0, 1.0) == 500  # 0.5 s of 1 ms runs
    assert warmup_runs(2.0, 100.0) == 5
    assert warmup_runs(2.0, 0.01) == MAX_WARMUP  # sub-millisecond models: capped


def test_fused_ops_count_their_base_ops_macs() -> None:
    """The gap tables' GFLOP/s: o2e.ConvAct / ConvAddAct / GemmAct / MatMulAct (and the int8
    QLinearConvAct / QGemmAct) count the multiply-accumulates of their base op, not 0."""
    import numpy as np
    from onnx import AttributeProto, helper

    from onnx2edge.analysis import node_macs
    from onnx2edge.api import DEFAULT_PASSES
    from onnx2edge.ir import Attr, Node
    from onnx2edge.ir.proto import graph_from_model
    from onnx2edge.passes import run_passes

    from conftest import make_model, tensor, vi

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "r"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["t"], name="relu2"),
        helper.make_node("Flatten", ["t"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g"], ["y"], transB=1, name="gemm"),
        helper.make_node("Sigmoid", ["y"], ["z"], name="sig"),
    ]
    inits = [
        tensor("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        tensor("b", np.zeros(8, np.float32)),
        tensor("w2", rng.standard_normal((8, 8, 1, 1)).astype(np.float32)),
        tensor("g", rng.standard_normal((10, 8 * 6 * 6)).astype(np.float32)),
    ]
    m = make_model(nodes, [vi("x", [1, 3, 6, 6])], [vi("z", [1, 10])], inits)
    plain = run_passes(graph_from_model(m), DEFAULT_PASSES)
    fused = run_passes(plain, ("fuse_residual", "fuse_activation"))
    ops = {n.name: n.op_type for n in fused.nodes}
    assert ops["conv"] == "ConvAct" and ops["conv2"] == "ConvAddAct" and ops["gemm"] == "GemmAct"
    want = {"conv": 8 * 36 * 27, "conv2": 8 * 36 * 8, "gemm": 10 * 288}
    for g in (plain, fused):
        got = {n.name: node_macs(g, n) for n in g.nodes if n.name in want}
        assert got == want, (g.nodes, got)
    # the int8 forms: o2e.QLinearConvAct reads its weights at input 3, o2e.QGemmAct is A x B
    relu = {"activation": Attr(AttributeProto.STRING, "Relu")}
    qconv = Node("qc", "QLinearConvAct", ("x", "s", "z", "w", "s", "z", "s", "z"), ("r",), relu,
                 domain="o2e")  # fmt: skip
    qgemm = Node("qg", "QGemmAct", ("f", "s", "z", "g", "s", "z", "s", "z"), ("z",), relu,
                 domain="o2e")  # fmt: skip
    assert node_macs(fused, qconv) == want["conv"]
    assert node_macs(fused, qgemm) == 10 * 288


def test_suite_doc_names_the_rounds_it_was_measured_with() -> None:
    # the command line a table was measured with says --rounds when it was not 1
    r = {**_result("resnet50", 1, 0.95), "clock": "thread CPU time", "rounds": 4}
    assert suite._cmd_extra([r]).endswith(" --cpu-clock --rounds 4")
    assert "--rounds" not in suite._cmd_extra([_result("resnet50", 1, 0.95)])


def test_suite_doc_never_keeps_a_stale_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib no chart is drawn, and one from an earlier run (old figures) is
    removed rather than left beside the new tables."""
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args, **kw):  # noqa: ANN002, ANN003, ANN202
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kw)

    doc = tmp_path / "benchmarks.md"
    stale = tmp_path / "benchmarks.png"
    stale.write_bytes(b"old chart")
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    suite.write_doc([_result("resnet50", 1, 0.9)], doc)
    assert not stale.exists()
    assert "![ratio chart]" not in doc.read_text()


def test_suite_runs_the_frontend_once_a_network(
    example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each thread count of a network and its gap profile bench the same loaded model (issue
    32, item 5): the frontend runs once a network, not once a bench run. The runs themselves
    are stood in for (bench_model is timed by the tests above); what is checked is the model
    each one gets."""
    from onnx2edge.frontend.handle import LoadedModel

    seen: list[tuple[object, int, bool]] = []

    def bench(model: object, *, threads: int = 1, profile: bool = False, **_: object) -> dict:
        seen.append((model, threads, profile))
        ms = {"ours_ms": 3.0, "ort_ms": 1.0, "ratio": 3.0, "threads": threads}
        return {**ms, "profile": [], "ort_profile_unattributed_ms": 0.0}

    monkeypatch.setattr(suite, "bench_model", bench)
    monkeypatch.setattr(suite, "_source", lambda *_: example)
    results = suite.run_suite(["resnet50"], threads=(1, 2))  # misses its 1.0 target: profiled
    assert [r["threads"] for r in results] == [1, 2] and "gaps" in results[0]
    assert [(t, p) for _, t, p in seen] == [(1, False), (1, True), (2, False)]
    (model,) = {id(m): m for m, _, _ in seen}.values()
    assert isinstance(model, LoadedModel) and model.source == example
