"""Issue 29, "the first hour of a new user": the frictions a new user hit through the README's
commands and the Python API, each reproduced here first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError

from conftest import EXAMPLE, make_model, save, tensor, vi

SRC = Path(__file__).resolve().parent.parent / "src"


def _py(code: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter: the lazy API exports depend on what was imported before."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )


# --- 3. the Python API -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "first",
    [
        "onnx2edge.convert(M, 'c', OUT)",  # imports the api, which imports the verify module
        "from onnx2edge.verify import compare",  # the submodule imported before any API call
    ],
)
def test_api_verify_callable_after_other_imports(first: str, tmp_path: Path) -> None:
    r = _py(
        f"import onnx2edge\nM, OUT = {str(EXAMPLE)!r}, {str(tmp_path / 'o')!r}\n{first}\n"
        "rep = onnx2edge.verify(M)\nprint(rep.ok, callable(onnx2edge.verify))\n"
        "from onnx2edge.verify import compare, VerifyReport\nprint(callable(compare))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"], r.stdout


def test_api_accepts_model_proto(tmp_path: Path) -> None:
    m = onnx.load(EXAMPLE)
    res = api.convert(m, "c", tmp_path / "c")
    manifest = json.loads((tmp_path / "c" / "onnx2edge.json").read_text())
    # named by its graph, not by the protobuf's text
    assert manifest["model"].startswith(m.graph.name) and "ir_version" not in manifest["model"]
    assert res.files
    assert api.verify(m, target="c").ok
    assert api.inspect(m)["total_macs"] == 1_724_736
    assert api.check(m, "c")["totals"]["unsupported"] == 0
    q = api.quantize(m, tmp_path / "q.onnx", mode="fp16")
    assert q.output.is_file() and q.size_before > 0
    api.export_weights(m, tmp_path / "w")
    assert (tmp_path / "w" / "index.json").is_file()


@pytest.mark.parametrize(
    "target, options, words",
    [
        ("c", {"wieghts": "fp16"}, ["'wieghts'", "did you mean 'weights'"]),
        ("c", {"gpu_only": True}, ["'gpu_only'", "mps", "not c"]),
        ("coreml", {"optimize": "size"}, ["'optimize'", "target c", "not coreml"]),
        ("mps", {"bogus": 1}, ["'bogus'", "mps takes"]),
    ],
)
def test_api_refuses_unknown_options(
    target: str, options: dict, words: list[str], tmp_path: Path
) -> None:
    for call in (
        lambda: api.convert(EXAMPLE, target, tmp_path / "o", options=options),
        lambda: api.verify(EXAMPLE, target=target, options=options),
    ):
        with pytest.raises(Onnx2EdgeError) as e:
            call()
        msg = str(e.value)
        assert all(w in msg for w in words), msg
        assert "\n" not in msg
    assert not (tmp_path / "o").exists()


def test_api_verify_onnx_takes_no_options() -> None:
    with pytest.raises(Onnx2EdgeError, match="'weights'"):
        api.verify(EXAMPLE, options={"weights": "fp16"})


def test_api_fp16_spellings(tmp_path: Path) -> None:
    """One spelling of fp16 for every target: `fp16=True` on C means weights fp16, and
    `weights='fp16'` on Core ML means its fp16."""
    api.convert(EXAMPLE, "c", tmp_path / "c", options={"fp16": True})
    m = json.loads((tmp_path / "c" / "onnx2edge.json").read_text())
    assert m["options"].get("weights") == "fp16", m["options"]
    with pytest.raises(Onnx2EdgeError, match="fp16"):
        api.convert(EXAMPLE, "c", tmp_path / "d", options={"fp16": True, "weights": "fp32"})


# --- 4. flags of another target -------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "onnx2edge.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def _refused(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx2edge: error: "), r.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_cli_fp16_spelt_either_way(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert _cli("convert", str(EXAMPLE), "--target", "c", "--fp16", "-o", str(out)).returncode == 0
    assert json.loads((out / "onnx2edge.json").read_text())["options"]["weights"] == "fp16"
    assert "static const uint16_t" in (out / "model.c").read_text()  # fp16 weights stored


def test_cli_coreml_weights_fp16(tmp_path: Path) -> None:
    pytest.importorskip("coremltools")
    out = tmp_path / "ml"
    r = _cli(
        "convert", str(EXAMPLE), "--target", "coreml", "--format", "neuralnetwork",
        "--weights", "fp16", "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "onnx2edge.json").read_text())["options"]["fp16"] is True


@pytest.mark.parametrize(
    "args, words",
    [
        (["convert", "--target", "c", "--gpu-only"], ["--gpu-only", "mps", "not c"]),
        (["convert", "--target", "c", "--format", "mlprogram"], ["--format", "coreml"]),
        (["convert", "--target", "mps", "--optimize", "size"], ["--optimize", "--target c"]),
        (["convert", "--target", "c", "--fp16", "--weights", "fp32"], ["fp16", "fp32"]),
        (["verify", "--fp16"], ["--fp16", "not onnx"]),
    ],
)
def test_cli_refuses_flags_of_another_target(
    args: list[str], words: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "o"
    cmd = [args[0], str(EXAMPLE), *args[1:], *(["-o", str(out)] if args[0] == "convert" else [])]
    _refused(_cli(*cmd), *words)
    assert not out.exists()


# --- 1. verdicts that state what was checked --------------------------------------------------
def test_verdict_states_the_spread_rule_when_it_was_applied() -> None:
    from onnx2edge.verify import VerifyReport, compare, within_spread

    ref = np.linspace(-1, 1, 64, dtype=np.float32)
    plain = ref + np.float32(1e-3)  # onnxruntime's unoptimised run: 1e-3 away
    ours = ref + np.float32(1.5e-3)  # misses 1e-4, within 2x the spread
    rep = within_spread(compare("y", ours, ref, 1e-4, 1e-6), ours, plain, ref)
    exact = compare("k", np.arange(3), np.arange(3), 1e-4, 1e-6)
    v = VerifyReport("c", 1e-4, 1e-6, [rep, exact], ran_on="somewhere")
    last = v.format().splitlines()[-1]
    assert last.startswith("PASS: target c, ran on somewhere; tolerance "), last
    assert "y: max|err| <= 2x onnxruntime's own optimised-vs-unoptimised difference" in last
    assert "k: exact" in last
    d = v.as_dict()
    assert d["tolerance_applied"] == v.tolerance_applied and d["ran_on"] == "somewhere"
    assert "2x onnxruntime" in d["outputs"][0]["tolerance_applied"]
    plain_rep = VerifyReport("c", 1e-4, 1e-6, [compare("y", ref, ref, 1e-4, 1e-6)])
    assert plain_rep.tolerance_applied == "max|err| <= 1e-06 + 0.0001 * max|ref|"


def test_verify_says_what_the_c_ran_on(capsys: pytest.CaptureFixture[str]) -> None:
    from onnx2edge.cli import main

    assert main(["verify", str(EXAMPLE), "--target", "c", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ran_on"].startswith("the generated C compiled by") and "natively" in d["ran_on"]
    assert d["tolerance_applied"] == "max|err| <= 1e-06 + 0.0001 * max|ref|"
    assert main(["verify", str(EXAMPLE), "--target", "c"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("PASS: target c, ran on the generated C compiled by"), last


def test_verify_says_core_ml_ran_on_an_evaluator() -> None:
    pytest.importorskip("coremltools")
    rep = api.verify(EXAMPLE, target="coreml", options={"format": "neuralnetwork"})
    assert rep.ok and "NumPy evaluator of the Core ML spec" in rep.ran_on
    assert "not Core ML on Apple hardware" in rep.format().splitlines()[-1]


def test_verify_says_mps_ran_on_a_cpu_model() -> None:
    from onnx2edge.backends import get_backend

    # what the verdict states does not need swiftc; running it does (tests/test_mps.py)
    assert "CPU model of MPS (sim)" in get_backend("mps").describe_run(Path("."), {})


def _classifier(path: Path) -> Path:
    """Conv + Relu + Gemm with seeded weights: random inputs land in several classes (the
    example CNN's all land in one)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((10, 8 * 8 * 8)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1),
    ]
    m = make_model(
        nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 10])], [tensor("w", w), tensor("fc", fc)]
    )
    return save(m, path)


def _near_ties(model: Path, path: Path) -> Path:
    """Samples on both sides of the boundary between two classes, ever closer to it: top-1
    agreement there moves with the last bits of the arithmetic (how the model is run)."""
    from onnx2edge.runtime import ort_session

    sess = ort_session(onnx.load(model))
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((32, 1, 3, 8, 8)).astype(np.float32)
    cls = [int(sess.run(None, {"x": x})[0].argmax()) for x in xs]
    a, b = xs[0], next(x for x, c in zip(xs, cls, strict=True) if c != cls[0])
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        same = sess.run(None, {"x": (1 - mid) * a + mid * b})[0].argmax() == cls[0]
        lo, hi = (mid, hi) if same else (lo, mid)
    ts = np.concatenate([lo + s * np.linspace(-1, 1, 16) for s in (1e-2, 1e-3, 1e-4, 1e-5)])
    np.savez(path, x=np.stack([(1 - t) * a + t * b for t in ts]).astype(np.float32))
    return path


@pytest.mark.parametrize("mode", ["fp16", "static"])
def test_quantize_and_verify_reference_report_the_same_agreement(mode: str, tmp_path: Path) -> None:
    from onnx2edge.runtime import ort_session

    model = _classifier(tmp_path / "m.onnx")
    calib = _near_ties(model, tmp_path / "c.npz")
    res = api.quantize(model, tmp_path / "q.onnx", mode=mode, calib=calib)
    cmp = api.compare_quantized(tmp_path / "q.onnx", model, calib=calib)
    # the written model run as deployed, sample by sample, against the fp32 model
    x = np.load(calib)["x"]
    ref, q = ort_session(onnx.load(model)), ort_session(onnx.load(tmp_path / "q.onnx"))
    direct = np.mean(
        [q.run(None, {"x": s})[0].argmax() == ref.run(None, {"x": s})[0].argmax() for s in x]
    )
    assert res.metric_quantized == cmp.agreement == pytest.approx(direct), (
        res.metric_quantized,
        cmp.agreement,
        direct,
    )
    assert 0.5 <= direct < 1  # near ties: some samples flip


def test_verify_reference_prints_no_onnxruntime_error(tmp_path: Path) -> None:
    model = _classifier(tmp_path / "m.onnx")
    calib = _near_ties(model, tmp_path / "c.npz")
    api.quantize(model, tmp_path / "q.onnx", mode="static", calib=calib)
    r = _cli("verify", str(tmp_path / "q.onnx"), "--reference", str(model), "--calib", str(calib))
    assert r.returncode == 0, r.stderr
    assert "Attempt to replace" not in r.stderr and "[E:onnxruntime" not in r.stderr, r.stderr
    assert "top-1 agreement with the reference" in r.stdout


# --- 6. output people can use ------------------------------------------------------------------
def test_convert_json_and_plain_output(tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = _cli("convert", str(EXAMPLE), "--target", "c", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # one JSON document, progress on stderr
    assert Path(doc["manifest"]) == out / "onnx2edge.json" and Path(doc["manifest"]).is_file()
    assert doc["weight_bytes"] > 0 and doc["arena_bytes"] > 0
    assert sorted(p.name for p in out.iterdir()) == doc["files"]
    assert "onnx2edge: writing the C output" in r.stderr
    r = _cli("convert", str(EXAMPLE), "--target", "c", "-o", str(out))
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():  # no Python reprs
        assert not any(t in line for t in ("['", "{'", "True", "False", "None")), line
    # the runtime headers model.c includes, one comma-separated line
    runtime = next(ln for ln in r.stdout.splitlines() if ln.startswith("runtime_files: "))
    assert "o2e_gemm.h" in runtime.split(": ", 1)[1].split(", ")


def test_convert_core_ml_says_what_it_is_doing(tmp_path: Path) -> None:
    pytest.importorskip("coremltools")
    r = _cli("convert", str(EXAMPLE), "--target", "coreml", "-o", str(tmp_path / "ml"))
    assert r.returncode == 0, r.stderr
    for step in ("building the MIL program", "coremltools: ct.convert", "saving and validating"):
        assert f"onnx2edge: {step}" in r.stderr, r.stderr


def test_verify_a_converted_folder(tmp_path: Path) -> None:
    model = tmp_path / "tiny_cnn.onnx"
    model.write_bytes(EXAMPLE.read_bytes())
    out = tmp_path / "out"
    assert _cli("convert", str(model), "--target", "c", "-o", str(out)).returncode == 0
    r = _cli("verify", str(out), "--json")  # the model found beside the folder
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and d["target"] == "c" and "generated C" in d["ran_on"]
    # the folder's own code runs: a C file edited after convert is what gets verified
    c = out / "model.c"
    c.write_text(c.read_text().replace("#include", "#error edited\n#include", 1))
    assert _cli("verify", str(out)).returncode != 0
    # another model under the same name is not the one converted
    other = tmp_path / "elsewhere"
    other.mkdir()
    m = onnx.load(EXAMPLE)
    m.graph.initializer[0].float_data[:] = []  # weights changed: another model
    m.graph.initializer[0].raw_data = np.zeros(
        onnx.numpy_helper.to_array(onnx.load(EXAMPLE).graph.initializer[0]).shape, np.float32
    ).tobytes()
    onnx.save(m, other / "tiny_cnn.onnx")
    _refused(_cli("verify", str(out), "--source", str(other / "tiny_cnn.onnx")), "sha256")
    model.unlink()
    _refused(_cli("verify", str(out)), "tiny_cnn.onnx", "--source")
    _refused(_cli("verify", str(out), "--source", str(EXAMPLE), "--optimize", "size"), "--optimize")


def test_run_names_the_unknown_input(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert _cli("convert", str(EXAMPLE), "--target", "c", "-o", str(out)).returncode == 0
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    r = _cli("run", str(out), "--input", f"data={tmp_path / 'x.npy'}")
    _refused(r, "--input data", "not an input", "input (1x3x32x32, float32)")


def test_output_folders_have_normal_permissions(tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = subprocess.run(
        [sys.executable, "-m", "onnx2edge.cli", "convert", str(EXAMPLE), "--target", "c"]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        preexec_fn=lambda: os.umask(0o022),
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "model.c").stat().st_mode & 0o777 == 0o644


def test_quantize_fp16_leaks_no_library_warnings(tmp_path: Path) -> None:
    w = np.full((4, 4), 0.5, np.float32)
    w[0, 0], w[1, 1] = 1e-9, 3e4  # both clamped by the fp16 converter, which warns per value
    m = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [vi("x", [1, 4])],
        [vi("y", [1, 4])],
        [tensor("w", w)],
    )
    save(m, tmp_path / "m.onnx")
    r = _cli("quantize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "q.onnx"), "--mode", "fp16")
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "warn" not in r.stderr, r.stderr
    assert "2 weight value(s) outside float16's range are clamped" in r.stderr, r.stderr


def test_quantize_auto_progress_is_one_short_line_per_step(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_quantize import _fragile_mlp

    _fragile_mlp(tmp_path / "m.onnx")
    x = np.random.default_rng(4).standard_normal((128, 16)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x)
    r = _cli(
        "quantize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "q.onnx"), "--mode", "static",
        "--calib", str(tmp_path / "c.npz"), "--exclude", "auto",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in r.stderr.splitlines() if ": step " in ln]
    assert len(steps) >= 2, r.stderr
    for ln in steps + [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]:
        assert sum(n in ln for n in ("fc1", "fc2", "fc3")) <= 1, ln  # the node it adds only


# --- 5. "replaceable" only when the rule was run and checked ------------------------------------
def _residual(path: Path) -> Path:
    """ResNet's residual Add (the 16 Add nodes of resnet50 on --target coreml)."""
    w = np.random.default_rng(1).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "x"], ["y"], name="add"),
    ]
    return save(
        make_model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])], [tensor("w", w)]), path
    )


def _squeeze_excite(path: Path) -> Path:
    """MobileNetV3's squeeze-excite: C x H x W * C x 1 x 1 (the ANE does not broadcast it)."""
    w = np.random.default_rng(2).standard_normal((4, 4, 1, 1)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"], name="pool"),
        helper.make_node("Conv", ["p", "w"], ["c"], name="fc"),
        helper.make_node("HardSigmoid", ["c"], ["s"], name="gate", alpha=1 / 6),
        helper.make_node("Mul", ["x", "s"], ["y"], name="scale"),
    ]
    return save(
        make_model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])], [tensor("w", w)]), path
    )


def test_check_coreml_residual_add_is_supported_not_replaceable(tmp_path: Path) -> None:
    pytest.importorskip("coremltools")
    model = _residual(tmp_path / "r.onnx")
    add = next(e for e in api.check(model, "coreml")["nodes"] if e["op"] == "Add")
    # convert's own seed-004 replacement: nothing for `rewrite --for coreml` to do
    assert add["status"] == "supported" and add["rule"] is None, add
    res = api.rewrite(model, tmp_path / "o.onnx", target="coreml")
    assert res["still_unsupported"] == [], res["still_unsupported"]


def test_check_coreml_ane_proposes_no_rule_that_trades_one_refusal_for_another(
    tmp_path: Path,
) -> None:
    pytest.importorskip("coremltools")
    model = _squeeze_excite(tmp_path / "se.onnx")
    mul = next(e for e in api.check(model, "coreml-ane")["nodes"] if e["op"] == "Mul")
    assert mul["status"] == "unsupported" and mul["rule"] is None, mul
    res = api.rewrite(model, tmp_path / "o.onnx", target="coreml-ane")
    applied = [r["rule"] for r in res["rules"] if r["rewritten"]]
    assert "broadcast_explicit" not in applied  # it made an unsupported Expand of the Mul
    assert not [e for e in res["still_unsupported"] if e["op"] == "Expand"]


def test_check_confirms_a_rule_only_when_its_replacement_is_supported() -> None:
    """A checker's 'replaceable' stands only when its rule, run on a copy and checked again,
    leaves the node and what replaces it supported; else it is 'unsupported', saying why."""
    from onnx2edge import check as C
    from onnx2edge import frontend

    def checker(refuse_new: bool):  # noqa: ANN202 - Sub refused; the rule's nodes ('sub/...') too?
        def fn(graph):  # noqa: ANN001, ANN202
            return [
                {
                    "node": n.name,
                    "op": n.op_type,
                    "status": "unsupported"
                    if n.op_type == "Sub" or (refuse_new and "/" in n.name)
                    else "supported",
                    "placement": None,
                    "reason": "test",
                    "rule": None,
                    "source": "test",
                }
                for n in graph.nodes
            ]

        return fn

    m = make_model(
        [helper.make_node("Sub", ["x", "k"], ["y"], name="sub")],
        [vi("x", [1, 4])],
        [vi("y", [1, 4])],
        [tensor("k", np.ones((1, 4), np.float32))],
    )
    g = frontend.load(m, quiet=True)
    for refuse_new, status in ((False, "replaceable"), (True, "unsupported")):
        C.CHECKERS["test-target"] = checker(refuse_new)
        try:
            rows = [dict(r, status="replaceable", rule="sub_to_add") for r in checker(False)(g)]
            rows[0]["status"] = "replaceable"
            (row,) = C.confirm_replaceable(g, "test-target", rows)
        finally:
            del C.CHECKERS["test-target"]
        assert row["status"] == status, row
        assert (row["rule"] == "sub_to_add") == (status == "replaceable")
        assert ("tried on a copy" in row["reason"]) == (status == "unsupported")


# --- the README's commands, walked on the example model ---------------------------------------
def test_readme_walk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every command of the README's table on examples/tiny_cnn.onnx: exit 0, and every
    `--json` output is one JSON document."""
    from onnx2edge.cli import main

    m, t = str(EXAMPLE), tmp_path
    np.save(
        t / "x.npy", np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    )
    np.savez(
        t / "calib.npz",
        input=np.random.default_rng(1).standard_normal((8, 1, 3, 32, 32)).astype(np.float32),
    )
    walk: list[tuple[list[str], bool]] = [  # (arguments, prints JSON)
        (["inspect", m, "--json"], True),
        (["json", m, "-o", f"{t}/m.json"], False),
        (["from-json", f"{t}/m.json", "-o", f"{t}/back.onnx"], False),
        (["weights", "export", m, "-o", f"{t}/w"], False),
        (["weights", "import", m, f"{t}/w", "-o", f"{t}/wi.onnx"], False),
        (["verify", m, "--json"], True),
        (["verify", m, "--target", "c", "--json", "--input", f"input={t}/x.npy"], True),
        (["convert", m, "--target", "c", "-o", f"{t}/c", "--json"], True),
        (["convert", m, "--target", "c", "-o", f"{t}/c16", "--fp16"], False),
        (["run", f"{t}/c", "--input", f"input={t}/x.npy", "-o", f"{t}/y.npz"], False),
        (["verify", f"{t}/c", "--source", m, "--json"], True),
        (["quantize", m, "-o", f"{t}/q.onnx", "--mode", "static", "--calib", f"{t}/calib.npz", "--json"], True),
        (["verify", f"{t}/q.onnx", "--reference", m, "--calib", f"{t}/calib.npz", "--json"], True),
        (["check", m, "--target", "c", "--json"], True),
        (["rewrite", m, "-o", f"{t}/rw.onnx", "--for", "c", "--json"], True),
        (["extract", m, "-o", f"{t}/ex.onnx", "--inputs", "input", "--outputs", "logits"], False),
        (["rename", m, "-o", f"{t}/rn.onnx", "--tensor", "logits=scores"], False),
        (["set-shape", m, "-o", f"{t}/ss.onnx", "--batch", "2"], False),
        (["add-output", m, "-o", f"{t}/ao.onnx", "conv1.relu"], False),  # fmt: skip
        (["opset", m, "-o", f"{t}/op.onnx", "18", "--json"], True),
        (["simplify", m, "-o", f"{t}/si.onnx", "--json"], True),
        (["nhwc", m, "-o", f"{t}/nh.onnx", "--json"], True),
        (["prune", m, "-o", f"{t}/pr.onnx", "--sparsity", "0.5", "--json"], True),
        (["report", m, "-o", f"{t}/r.html"], False),
    ]  # fmt: skip
    for args, is_json in walk:
        capsys.readouterr()
        code = main(args)
        out = capsys.readouterr()
        assert code == 0, (args, out.err)
        if is_json:
            json.loads(out.out)  # one document, nothing else on stdout
        assert "Traceback" not in out.err, (args, out.err)


@pytest.mark.parametrize(
    "args",
    [
        ["convert", str(EXAMPLE), "-o", "OUT"],  # no --target
        ["convert", str(EXAMPLE), "--target", "tpu", "-o", "OUT"],
        ["convert", str(EXAMPLE), "--target", "c", "-o", "OUT", "--gpu-only"],
        ["convert", str(EXAMPLE), "--target", "coreml", "-o", "OUT", "--optimize", "size"],
        ["convert", "missing.onnx", "--target", "c", "-o", "OUT"],
        ["verify", str(EXAMPLE), "--target", "onnx", "--fp16"],
        ["verify", str(EXAMPLE), "--source", str(EXAMPLE)],
        ["run", "OUT"],  # not a converted folder
        ["inspect", str(EXAMPLE), "--input-shape", "input=1xfoo"],
        ["quantize", str(EXAMPLE), "-o", "Q.onnx", "--mode", "static"],  # no --calib
        ["check", str(EXAMPLE), "--target", "nosuch"],
        ["nosuch-command"],
        ["weights"],
    ],
)
def test_bad_invocations_are_one_line_exit_2(args: list[str], tmp_path: Path) -> None:
    args = [
        a.replace("OUT", str(tmp_path / "out")).replace("Q.onnx", str(tmp_path / "q.onnx"))
        for a in args
    ]
    _refused(_cli(*args))
    assert not (tmp_path / "out").exists() and not (tmp_path / "q.onnx").exists()


def test_verify_float16_core_ml_states_its_default_tolerance() -> None:
    """An ML Program computes in float16 by default (as coremltools): verify's default rtol
    follows the arithmetic and the verdict says why; float32 keeps 1e-4; --rtol wins."""
    pytest.importorskip("coremltools")
    from onnx2edge import api

    rep = api.verify(EXAMPLE, target="coreml")
    assert rep.ok and rep.rtol == 1e-2
    assert any("float16 arithmetic" in line for _, line in rep.details), rep.details
    assert "0.01 * max|ref|" in rep.format().splitlines()[-1]
    rep32 = api.verify(EXAMPLE, target="coreml", options={"precision": "fp32"})
    assert rep32.ok and rep32.rtol == 1e-4
    assert not any("by default" in line for _, line in rep32.details)
    assert api.verify(EXAMPLE, target="coreml", rtol=1e-3).rtol == 1e-3
