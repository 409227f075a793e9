"""`bench --against ort,openvino` and `bench --suite modern` (issue 34): OpenVINO's runner on tiny
onnx.helper models checked against onnxruntime, the best-of logic (a runtime that fails or
computes other outputs never wins), the tables (OpenVINO cells, ratio vs the faster runtime,
2-thread slowdowns flagged), the targets section and the int8 calibration. No timings asserted;
no torch needed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx2edge.bench import suite
from onnx2edge.bench.harness import (
    QUANT_SPREAD,
    QUANT_TOL,
    _openvino_result,
    bench_model,
    best_of,
    format_result,
    parse_against,
)
from onnx2edge.cli import main
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.frontend.handle import LoadedModel

from conftest import make_model, tensor, vi

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
needs_openvino = pytest.mark.skipif(
    not HAS_OPENVINO, reason="openvino not installed (pip install openvino: the dev extra has it)"
)


def _swish_softmax_model() -> onnx.ModelProto:
    """Conv + SiLU (Sigmoid·Mul) + HardSwish, then Softmax over the last axis: ops whose
    kernels differ between runtimes, small enough to run in milliseconds."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("HardSwish", ["m"], ["h"]),
        helper.make_node("Softmax", ["h"], ["y"], axis=-1),
    ]
    inits = [
        tensor("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3),
        tensor("b", rng.standard_normal(4).astype(np.float32) * 0.1),
    ]
    return make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], inits)


def _write(tmp_path: Path, m: onnx.ModelProto) -> tuple[Path, Path, np.ndarray]:
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return path, tmp_path / "x.npy", x


@needs_openvino
@pytest.mark.parametrize("threads", [1, 2])
def test_openvino_runner_matches_onnxruntime(tmp_path: Path, threads: int) -> None:
    from onnx2edge.bench.openvino_runner import load_outputs, run_openvino

    path, xfile, x = _write(tmp_path, _swish_softmax_model())
    r = run_openvino(
        path, {"x": xfile}, ["y"], tmp_path / "ov.npz", threads=threads, runs=3, warmup=1
    )
    assert "error" not in r, r
    assert len(r["times_ms"]) == 3 and all(t > 0 for t in r["times_ms"])
    assert r["overhead_ms"] > 0
    # what OpenVINO reports it compiled with: the settings the bench asks for
    assert r["threads"] == threads and r["precision"] == "f32"
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = load_outputs(tmp_path / "ov.npz")["y"]
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-6)


@needs_openvino
def test_bench_profile_has_openvinos_layer_times_beside_ours(tmp_path: Path) -> None:
    """--profile --against ort,openvino: OpenVINO's performance counters attributed to our
    nodes by name (its layers are the ONNX node's name plus a suffix), a column beside
    onnxruntime's."""
    m = _swish_softmax_model()
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type.lower()}{i}"  # what OpenVINO names its layers after
    path, _, _ = _write(tmp_path, m)
    r = bench_model(path, runs=3, warmup=1, against=("ort", "openvino"), profile=True)
    assert r["openvino"]["ok"]
    conv = next(p for p in r["profile"] if p["op"].startswith("Conv"))
    assert conv["ov_ms"] is not None and conv["ov_ms"] > 0
    assert r["ov_profile_unattributed_ms"] >= 0
    assert "OpenVINO" in format_result(r).split("GFLOP/s")[0].splitlines()[-1]


@needs_openvino
def test_openvino_runner_names_a_model_it_cannot_load(tmp_path: Path) -> None:
    from onnx2edge.bench.openvino_runner import run_openvino

    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    m = make_model([node], [vi("x", [1, 3, 8, 8])], [vi("y", [1, 3, 8, 8])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    path, xfile, _ = _write(tmp_path, m)
    r = run_openvino(path, {"x": xfile}, ["y"], tmp_path / "ov.npz", runs=2, warmup=1)
    assert set(r) >= {"error"} and "times_ms" not in r
    assert "NoSuchOp" in r["error"], r["error"]
    assert "\n" not in r["error"]


@needs_openvino
def test_bench_against_openvino_checks_its_outputs(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path, _swish_softmax_model())
    r = bench_model(path, runs=3, warmup=1, against=("ort", "openvino"))
    assert r["accurate"] and r["against"] == ["ort", "openvino"]
    ov = r["openvino"]
    assert ov["ok"] and ov["ms"] > 0 and ov["accuracy"]["y"]["max_rel_error"] < 1e-4
    assert ov["settings"]["threads"] == 1 and ov["settings"]["precision"] == "f32"
    want = min(r["ort_ms"], ov["ms"])
    assert r["best_ms"] == want
    assert r["best"] == ("OpenVINO" if ov["ms"] < r["ort_ms"] else "onnxruntime")
    assert r["ratio_best"] == pytest.approx(r["ours_ms"] / want)
    text = format_result(r)
    assert "OpenVINO    median" in text and f"(best: {r['best']})" in text


def test_bench_without_against_runs_no_openvino(example: Path) -> None:
    r = bench_model(example, runs=3, warmup=1)
    assert "openvino" not in r and r["best"] == "onnxruntime"
    assert r["ratio_best"] == r["ratio"]


# ---- best-of and the OpenVINO verdict --------------------------------------------------------
def test_the_faster_runtime_wins_only_when_its_outputs_agree() -> None:
    ok = {"ms": 1.0, "ok": True}
    assert best_of(2.0, 4.0, ok) == {"best": "OpenVINO", "best_ms": 1.0, "ratio_best": 2.0}
    assert best_of(2.0, 0.5, ok)["best"] == "onnxruntime"  # onnxruntime faster
    wrong = {"ms": 0.1, "ok": False, "error": "outputs differ from onnxruntime's"}
    assert best_of(2.0, 4.0, wrong) == {"best": "onnxruntime", "best_ms": 4.0, "ratio_best": 0.5}
    assert best_of(2.0, 4.0, {"error": "cannot load", "ok": False})["best"] == "onnxruntime"
    assert best_of(2.0, 4.0, None)["ratio_best"] == 0.5


def _ov_rounds(tmp_path: Path, y: np.ndarray) -> tuple[list[dict], Path]:
    np.savez(tmp_path / "ov.npz", y=y)
    rounds = [
        {"times_ms": [1.2, 1.0, 1.1], "overhead_ms": 0.1, "maxrss_kb": 2048, "version": "v"},
        {"times_ms": [1.3], "overhead_ms": 0.1, "maxrss_kb": 1024, "version": "v"},
    ]
    return rounds, tmp_path / "ov.npz"


def test_openvino_outputs_that_differ_are_not_compared_with(tmp_path: Path) -> None:
    ref = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    outs = [{"name": "y"}]
    rounds, f = _ov_rounds(tmp_path, ref + 1e-7)
    good = _openvino_result(rounds, f, outs, {"y": ref}, {"y": ref})
    assert good["ok"] and good["ms"] == pytest.approx(1.15 - 0.1)  # median of 4, overhead off
    assert good["peak_rss_mb"] == 2.0
    rounds, f = _ov_rounds(tmp_path, ref + 0.01)
    bad = _openvino_result(rounds, f, outs, {"y": ref}, {"y": ref})
    assert not bad["ok"] and bad["error"] == "outputs differ from onnxruntime's"
    # an int8 model: a few quantization steps off is OpenVINO's own rounding, far off is wrong
    near = _openvino_result(rounds, f, outs, {"y": ref}, {"y": ref}, quantized=True)
    assert near["ok"]
    rounds, f = _ov_rounds(tmp_path, ref + 2 * QUANT_TOL)
    assert not _openvino_result(rounds, f, outs, {"y": ref}, {"y": ref}, quantized=True)["ok"]
    # where onnxruntime's own int8 kernels and its unoptimised (float QDQ) run sit 0.1 apart,
    # 0.3 off is int8 rounding (MobileNetV2 int8's case); beyond QUANT_SPREAD times that is not
    plain = {"y": ref + 0.1}
    rounds, f = _ov_rounds(tmp_path, ref + 0.3)
    assert _openvino_result(rounds, f, outs, {"y": ref}, plain, quantized=True)["ok"]
    assert not _openvino_result(rounds, f, outs, {"y": ref}, plain)["ok"]  # float model
    rounds, f = _ov_rounds(tmp_path, ref + (QUANT_SPREAD + 0.5) * 0.1)
    assert not _openvino_result(rounds, f, outs, {"y": ref}, plain, quantized=True)["ok"]
    err = _openvino_result([{"error": "Unsupported op X"}], f, outs, {"y": ref}, {"y": ref})
    assert err == {"error": "Unsupported op X", "ok": False}


def test_against_takes_a_comma_list_and_always_keeps_onnxruntime() -> None:
    assert parse_against("ort") == ("ort",)
    assert parse_against("ort,openvino") == ("ort", "openvino")
    assert parse_against("OpenVINO") == ("ort", "openvino")  # the reference always runs
    with pytest.raises(Onnx2EdgeError, match="unknown runtime 'tvm'"):
        parse_against("ort,tvm")


def test_bench_cli_refuses_an_unknown_runtime(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", str(example), "--against", "ort,tvm"]) == 2
    err = capsys.readouterr().err
    assert "unknown runtime 'tvm'" in err and "Traceback" not in err
    assert main(["bench", str(example), "--int8"]) == 2
    assert "go with --suite" in capsys.readouterr().err


def test_suite_refuses_an_unknown_network() -> None:
    with pytest.raises(Onnx2EdgeError, match="as int8 only"):
        suite.run_suite(["resnet50"], suite="modern")
    with pytest.raises(Onnx2EdgeError, match="expected one of seed, modern"):
        suite.run_suite(["x"], suite="ancient")


# ---- tables and documents --------------------------------------------------------------------
def _r(
    name: str,
    threads: int,
    ours: float,
    ort_ms: float,
    ov: dict | None,
    suite_name: str = "modern",
    gaps: dict | None = None,
) -> dict:
    best = best_of(ours, ort_ms, ov)
    r = {
        "name": name,
        "suite": suite_name,
        "precision": "int8" if name.endswith(suite.INT8) else "fp32",
        "threads": threads,
        "ours_ms": ours,
        "ort_ms": ort_ms,
        "ratio": ours / ort_ms,
        **best,
        "runs": 3,
        "target_ratio": suite.target_for(name, suite_name),
        "convert_s": 0.1,
        "build_s": 1.0,
        "gemm_kernel": "avx512",
        "kernels": {"Conv: 1x1 as GEMM": 2},
        "cflags": "-O3",
        "onnxruntime": "1.x",
        "arch": "native",
        "accuracy": {"y": {"max_rel_error": 1e-6, "ort_spread_rel": 1e-7, "ok": True}},
    }
    if ov is not None:
        r["openvino"] = {"accuracy": {"y": {"max_rel_error": 1e-6}}, "version": "2026.4.1-x", **ov}
    if gaps:
        r["gaps"] = gaps
    return r


def _modern_results() -> list[dict]:
    gaps = {
        "ours_total_ms": 3.0,
        "ort_total_ms": 2.0,
        "nodes": [
            {
                "node": "se/mul",
                "op": "Mul",
                "ms": 1.0,
                "ort_ms": 0.25,
                "gflops": 0.0,
                "shape": [1, 8, 7, 7],
            }  # fmt: skip
        ],
    }
    return [
        # OpenVINO faster than onnxruntime: the ratio is against it
        _r("efficientnet_b0", 1, 9.0, 12.0, {"ms": 8.0, "ok": True}, gaps=gaps),
        _r("efficientnet_b0", 2, 10.0, 7.0, {"ms": 5.0, "ok": True}),
        # OpenVINO cannot load it: onnxruntime is the comparison
        _r("vit_tiny", 1, 9.0, 10.0, {"error": "Unsupported operation: Foo|Bar", "ok": False}),
        _r("vit_tiny", 2, 5.0, 6.0, {"error": "Unsupported operation: Foo|Bar", "ok": False}),
        # OpenVINO fast but wrong: not compared with
        _r("regnetx_200mf", 1, 3.0, 3.5, {"ms": 1.0, "ok": False}),
    ]


def test_modern_table_has_a_column_per_runtime_and_the_ratio_to_the_faster() -> None:
    table = suite.format_table(_modern_results())
    head = table.splitlines()[0]
    assert "OpenVINO 1T (ms)" in head and "OpenVINO 2T (ms)" in head and "ours 2T/1T time" in head
    # 9 / 8 against OpenVINO: over 0.9, missed; 2 threads slower than 1: flagged
    assert "| efficientnet_b0 | 9.00 | 12.00 | 8.00 | 1.12 (OV) ✗ | 0.9 |" in table
    assert "| 10.00 | 7.00 | 5.00 | 2.00 (OV) | 1.11 ⚠ slower at 2T |" in table
    assert (
        "| vit_tiny | 9.00 | 10.00 | cannot run: Unsupported operation: Foo/Bar | 0.90 (ORT) ✓ |"
        in table
    )
    assert "| 0.56 ⚠" not in table and "| 0.56 |" in table  # 5 / 9: faster at 2 threads
    assert "1.00 (wrong output, max rel err 1.0e-06: not compared) | 0.86 (ORT) ✓" in table
    assert suite.slower_at_two(_modern_results()) == ["efficientnet_b0"]


def test_seed_table_without_openvino_keeps_its_columns_and_adds_the_2t_time() -> None:
    rs = [_r("resnet50", 1, 0.9, 1.0, None, "seed"), _r("resnet50", 2, 1.0, 0.8, None, "seed")]
    table = suite.format_table(rs)
    assert "OpenVINO" not in table
    assert "| resnet50 | 0.90 | 1.00 | 0.90 ✓ | 1.0 | 1.00 | 0.80 | 1.25 | 1.39 | 1.11 ⚠ slower at 2T |" in table  # fmt: skip


def test_modern_doc_states_the_isa_the_targets_and_the_command(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks-modern.md"
    rs = _modern_results() + [
        {**_r("vit_tiny int8", 1, 2.0, 2.5, {"ms": 1.5, "ok": True}), "description": "ViT int8"},
    ]
    suite.write_doc(rs, doc)
    text = doc.read_text()
    assert text.startswith(
        "# Benchmarks: generated C vs onnxruntime and OpenVINO, today's edge networks"
    )
    assert (
        "`onnx2edge bench --suite modern --arch native --models efficientnet_b0,vit_tiny,"
        "regnetx_200mf --against ort,openvino --int8 --write-doc docs/benchmarks-modern.md`"
    ) in text
    assert f"ISA: {suite.host_isa()}" in text and "OpenVINO 2026.4.1" in text
    assert "`INFERENCE_NUM_THREADS`" in text and "`INFERENCE_PRECISION_HINT` f32" in text
    assert "int8 rows: the fp32 network quantized" in text
    assert "- vit_tiny int8: ViT int8" in text  # the networks described
    assert "| vit_tiny int8 | 2.00 | 2.50 | 1.50 | 1.33 (OV) | – |" in text  # no target: reported
    # the targets: each network met or missed, the miss pointing at its gap table
    assert "| efficientnet_b0 | 1.12 (OV) | 0.9 | missed: gap table below |" in text
    assert "| vit_tiny | 0.90 (ORT) | 1.0 | met |" in text
    assert "| regnetx_200mf | 0.86 (ORT) | 1.0 | met |" in text
    assert "2 of 3 met. Slower at 2 threads than at 1 (ours): efficientnet_b0." in text
    assert "**efficientnet_b0** (ratio 1.12 vs OpenVINO, target 0.9)" in text
    assert "| se/mul | Mul | 1x8x7x7 | 1.000 | 0.250 | 0 |" in text
    raw = text[text.index("```json") + 7 : text.index("```\n</details>")]
    assert len(json.loads(raw)) == len(rs)


def test_targets_of_the_modern_suite_and_int8() -> None:
    assert suite.target_for("efficientnet_b0", "modern") == 0.9
    assert suite.target_for("mobilenetv3_small", "modern") == 0.9
    assert suite.target_for("mobilenetv3_large", "modern") == 0.9
    assert all(
        suite.target_for(n, "modern") == 1.0
        for n in suite.MODERN_SUITE
        if n not in ("efficientnet_b0", "mobilenetv3_small", "mobilenetv3_large")
    )
    assert suite.target_for("mobilenet_v2", "seed") == 0.9
    for n in ("resnet50", "mobilenet_v2", "squeezenet"):
        assert suite.target_for(n + suite.INT8, "seed") == 1.0
    assert suite.target_for("vit_tiny" + suite.INT8, "modern") is None  # reported only


def test_int8_calibration_fits_every_input(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"]),
        helper.make_node("ReduceSum", ["e"], ["s"], keepdims=0),
        helper.make_node("Add", ["s", "x"], ["y"]),
    ]
    emb = np.ones((30, 4), np.float32)
    m = make_model(
        nodes,
        [vi("ids", [1, 6], TensorProto.INT64), vi("x", [4])],
        [vi("y", None)],
        [tensor("emb", emb)],
    )
    onnx.save(m, str(tmp_path / "m.onnx"))
    c = suite.calibration(tmp_path / "m.onnx", samples=5)
    assert set(c) == {"ids", "x"}
    assert c["ids"].shape == (5, 1, 6) and c["ids"].dtype == np.int64
    assert c["ids"].min() >= 0 and c["ids"].max() < 30  # valid token ids
    assert c["x"].shape == (5, 4) and c["x"].dtype == np.float32


@needs_openvino
def test_openvino_runs_the_int8_qdq_copy_close_to_onnxruntime(tmp_path: Path) -> None:
    """--int8: the project's static QDQ copy, run by OpenVINO (its own int8 kernels) and
    accepted against onnxruntime's int8 output."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    inits = [
        tensor("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3),
        tensor("b", rng.standard_normal(8).astype(np.float32) * 0.1),
    ]
    src = tmp_path / "f.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 8, 1, 1])], inits), src)
    q = suite.quantize_for_bench(src, tmp_path / "q.onnx")
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(q)).graph.node)
    r = bench_model(q, runs=3, warmup=1, against=("ort", "openvino"))
    assert r["accurate"] and r["openvino"]["ok"], r["openvino"]


def test_modern_suite_without_torch_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI has no torch: the modern suite says what it needs instead of a traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.delitem(sys.modules, "onnx2edge.bench.modern", raising=False)
    assert main(["bench", "--suite", "modern", "--models", "vit_tiny"]) == 2
    err = capsys.readouterr().err
    assert "exports its networks with torch, which is not installed" in err
    assert "Traceback" not in err


def test_suite_plans_which_networks_run_and_in_which_precision() -> None:
    seed = suite.suite_plan("seed", None, True)
    assert seed[: len(suite.SEED_SUITE)] == [("seed", n, False) for n in suite.SEED_SUITE]
    assert seed[len(suite.SEED_SUITE) :] == [("seed", n, True) for n in suite.SEED_INT8]
    assert suite.suite_plan("seed", ["vgg16"], True) == [
        ("seed", "vgg16", False),
        ("seed", "vgg16", True),
    ]
    modern = suite.suite_plan("modern", None, True)
    # every modern network fp32 then int8, then the seed int8 networks item 6 tracks
    assert [b for _, b, q in modern if not q] == suite.MODERN_SUITE
    assert modern[-3:] == [("seed", n, True) for n in suite.SEED_INT8]
    assert suite.suite_plan("modern", ["vit_tiny", "resnet50"], True) == [
        ("modern", "vit_tiny", False),
        ("modern", "vit_tiny", True),
        ("seed", "resnet50", True),
    ]
    with pytest.raises(Onnx2EdgeError, match="as int8 only"):
        suite.suite_plan("modern", ["resnet50"], False)
    with pytest.raises(Onnx2EdgeError, match="unknown network 'vgg16'"):
        suite.suite_plan("modern", ["vgg16"], True)
    # the command line a doc names reproduces the run
    rs = [
        _r("vit_tiny", 1, 1.0, 1.0, None),
        _r("vit_tiny int8", 1, 1.0, 1.0, None),
        _r("resnet50 int8", 1, 1.0, 1.0, None),
    ]
    assert suite._cmd_extra(rs) == " --models vit_tiny,resnet50 --int8"


def test_a_network_that_fails_keeps_its_row_and_the_rest_of_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An hour-long suite does not stop at one network our side cannot run: its rows say why,
    the others are timed, tabled and targeted as usual."""

    def fake_bench(model: LoadedModel, **kw) -> dict:  # noqa: ANN003
        if "vgg16" in model.source.name:  # the suite hands bench_model one loaded model
            raise Onnx2EdgeError("unsupported op Foo\nsecond line")
        return {k: v for k, v in _r("mnist_mlp", kw["threads"], 0.5, 1.0, None, "seed").items()}

    monkeypatch.setattr(suite, "bench_model", fake_bench)
    monkeypatch.setattr(suite.zoo, "save", lambda name, path: Path(path))
    said: list[str] = []
    rs = suite.run_suite(["vgg16", "mnist_mlp"], log=said.append)
    assert [(r["name"], r["threads"], "error" in r) for r in rs] == [
        ("vgg16", 1, True),
        ("vgg16", 2, True),
        ("mnist_mlp", 1, False),
        ("mnist_mlp", 2, False),
    ]
    assert rs[0]["error"] == "unsupported op Foo"
    assert any("vgg16: failed: unsupported op Foo" in m for m in said)
    table = suite.format_table(rs)
    assert "| mnist_mlp | 0.50 | 1.00 | 0.50 ✓ |" in table
    assert table.endswith("Did not run:\n- vgg16: failed: unsupported op Foo")
    doc = tmp_path / "b.md"
    suite.write_doc(rs, doc)
    text = doc.read_text()
    assert "--models vgg16,mnist_mlp" in text and "- vgg16: failed: unsupported op Foo" in text
    assert "| mnist_mlp | 0.50 | 0.7 | met |" in text


def test_suite_refuses_options_that_would_fail_every_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite goes on past a failing network, so an option that fails them all is refused
    before the first one: no hour of identical failed rows."""
    from onnx2edge.bench import ort_isa

    monkeypatch.setattr(ort_isa, "cpu_flags", lambda: frozenset())  # no CPUID faulting
    args = ["bench", "--suite", "seed", "--models", "mnist_mlp", "--arch", "x86-64-v3"]
    assert main([*args, "--ort-isa", "match"]) == 2
    assert "cannot make CPUID fault" in capsys.readouterr().err
    assert main([*args, "--rounds", "0"]) == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err
    assert main([*args, "--against", "ort,tvm"]) == 2
    assert "unknown runtime 'tvm'" in capsys.readouterr().err


def test_an_interrupted_suite_resumes_from_its_results_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench --suite --results FILE` writes each network's rows as it finishes; a second run
    with the same file times only what is missing (a row with an error runs again), keeps the
    rows of networks it was not asked for, and its doc holds every network asked for."""
    timed: list[str] = []
    fail = {"vgg16"}

    def fake_bench(model: LoadedModel, **kw) -> dict:  # noqa: ANN003
        name = model.source.stem
        timed.append(name)
        if name in fail:
            raise Onnx2EdgeError("unsupported op Foo")
        return {k: v for k, v in _r(name, kw["threads"], 0.5, 1.0, None, "seed").items()}

    monkeypatch.setattr(suite, "bench_model", fake_bench)
    monkeypatch.setattr(suite, "LoadedModel", lambda p, quiet=False: type("M", (), {"source": p}))
    monkeypatch.setattr(suite, "_source", lambda src, base, tmp, *_: tmp / f"{base}.onnx")
    res = tmp_path / "results.json"
    args = ["bench", "--suite", "seed", "--results", str(res)]
    assert main([*args, "--models", "mnist_mlp,vgg16"]) == 0
    assert timed == ["mnist_mlp", "mnist_mlp", "vgg16"]
    rows = json.loads(res.read_text())
    assert [(r["name"], r["threads"], "error" in r) for r in rows] == [
        ("mnist_mlp", 1, False),
        ("mnist_mlp", 2, False),
        ("vgg16", 1, True),
        ("vgg16", 2, True),
    ]
    timed.clear()
    fail.clear()
    assert main([*args, "--models", "vgg16"]) == 0
    assert timed == ["vgg16", "vgg16"]  # the failed network again, not the finished one
    rows = json.loads(res.read_text())
    assert sorted((r["name"], r["threads"], "error" in r) for r in rows) == [
        ("mnist_mlp", 1, False),
        ("mnist_mlp", 2, False),
        ("vgg16", 1, False),
        ("vgg16", 2, False),
    ]
    timed.clear()
    doc = tmp_path / "doc.md"
    assert main([*args, "--models", "mnist_mlp,vgg16", "--write-doc", str(doc)]) == 0
    assert timed == []
    text = doc.read_text()
    assert "| mnist_mlp | 0.50 |" in text and "| vgg16 | 0.50 |" in text
    capsys.readouterr()


def test_results_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(Onnx2EdgeError, match="not a results file"):
        suite.load_results(bad)
    bad.write_text("not json")
    with pytest.raises(Onnx2EdgeError, match="not a results file"):
        suite.load_results(bad)
    assert suite.load_results(tmp_path / "none.json") == []


def test_openvino_is_held_to_the_isa_of_an_avx2_build() -> None:
    """`bench --arch x86-64-v3` caps OpenVINO's oneDNN kernels at AVX2 (v2: SSE4.1) through
    oneDNN's ONEDNN_MAX_CPU_ISA; a native build leaves it the host's set."""
    from onnx2edge.bench.ort_isa import openvino_env

    assert openvino_env("x86-64-v3") == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert openvino_env("x86-64-v2") == {"ONEDNN_MAX_CPU_ISA": "SSE41"}
    assert openvino_env("native") == {} and openvino_env(None) == {}


def test_the_doc_says_openvino_was_held(tmp_path: Path) -> None:
    ov = {"ms": 0.9, "ok": True}
    r = {**_r("mobilenetv3_small", 1, 1.0, 1.1, ov), "arch": "x86-64-v3"}
    r["openvino_isa"] = "AVX2 (ONEDNN_MAX_CPU_ISA)"
    doc = tmp_path / "m.md"
    suite.write_doc([r], doc)
    assert "OpenVINO held to AVX2 (ONEDNN_MAX_CPU_ISA) like our build" in doc.read_text()
    suite.write_doc([{k: v for k, v in r.items() if k != "openvino_isa"}], doc)
    assert "OpenVINO held to" not in doc.read_text()
