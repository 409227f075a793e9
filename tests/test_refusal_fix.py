"""Refusal.fix (issue 32): a backend that knows the remedy for a refusal names the command,
`check` shows it, and running that command makes `check` pass for the model (end to end, on
tiny models, for each backend)."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.check import format_check
from onnx2edge.cli import main

from conftest import make_model, save, tensor, vi

TARGETS = ["c", "mps", "coreml"]


def _conv(out: str = "c") -> tuple[onnx.NodeProto, onnx.TensorProto]:
    w = np.random.RandomState(0).randn(4, 3, 3, 3).astype(np.float32)
    return helper.make_node("Conv", ["x", "w"], [out], pads=[1, 1, 1, 1], name="conv"), tensor(
        "w", w
    )


def _run_fix(fix: str, model: Path, out: Path, values: dict[str, str]) -> None:
    """Run the command a fix names, its placeholders filled; it must exist and succeed."""
    words = shlex.split(fix.split(" (", 1)[0])  # "(the C backend emits X)" is a comment
    assert words[0] == "onnx2edge", fix
    subst = {"MODEL": str(model), "OUT.onnx": str(out), "OUT/": str(out)}
    args = []
    for w in words[1:]:
        for k, v in values.items():
            w = w.replace(f"{k}=VALUE", f"{k}={v}")
        args.append(subst.get(w, w))
    assert "VALUE" not in " ".join(args) and "DIMS" not in " ".join(args), args
    assert main(args) == 0, args


def _entry(rep: dict, node: str) -> dict:
    return next(e for e in rep["nodes"] if e["node"] == node)


@pytest.mark.parametrize("target", TARGETS)
def test_runtime_reshape_fix_binds_the_shape_input(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if target == "coreml":
        pytest.importorskip("coremltools", reason="coremltools is in the dev extra")
    conv, w = _conv()
    nodes = [conv, helper.make_node("Reshape", ["c", "s"], ["y"], name="reshape")]
    m = make_model(
        nodes,
        [vi("x", [1, 3, 8, 8]), vi("s", [2], TensorProto.INT64)],
        [vi("y", ["a", "b"])],
        [w],
    )
    model = save(m, tmp_path / "m.onnx")
    rep = api.check(model, target)
    e = _entry(rep, "reshape")
    assert e["status"] == "unsupported" and "no static shape" in e["reason"], e
    # the reason says what is wrong, the fix what to run (not mixed into the reason)
    assert e["fix"] == "onnx2edge constant MODEL -o OUT.onnx --value s=VALUE", e
    assert f"fix: {e['fix']}" in format_check(rep)
    fixed = tmp_path / "fixed.onnx"
    _run_fix(e["fix"], model, fixed, {"s": "1,256"})
    capsys.readouterr()
    again = api.check(fixed, target)
    assert again["totals"]["unsupported"] == 0 and again["totals"]["replaceable"] == 0, again
    assert all(e["fix"] is None for e in again["nodes"])


@pytest.mark.parametrize("target", ["mps", "coreml"])
def test_op_no_backend_path_takes_fix_names_the_c_target(target: str, tmp_path: Path) -> None:
    # Core ML: no layer / MIL op for Abs at all; MPS: an image-free model has no GPU work.
    # Both name the C backend, which emits the op: `check --target c` then passes.
    if target == "coreml":
        pytest.importorskip("coremltools", reason="coremltools is in the dev extra")
    node = helper.make_node("Abs", ["x"], ["y"], name="abs")
    model = save(
        make_model([node], [vi("x", [1, 3, 8, 8])], [vi("y", [1, 3, 8, 8])]), tmp_path / "m.onnx"
    )
    rep = api.check(model, target)
    fixes = [e["fix"] for e in rep["nodes"] if e["status"] == "unsupported"]
    assert fixes and all(
        f and f.startswith("onnx2edge convert MODEL --target c -o OUT/") for f in fixes
    ), rep
    _run_fix(fixes[0], model, tmp_path / "out", {})
    assert (tmp_path / "out" / "onnx2edge.json").is_file()
    assert api.check(model, "c")["totals"]["unsupported"] == 0


def test_replaceable_node_fix_is_rewrite_for_the_target(tmp_path: Path) -> None:
    # MPS has no erf neuron; the rule check verified on a copy is applied by `rewrite --for`
    conv, w = _conv()
    nodes = [conv, helper.make_node("Erf", ["c"], ["y"], name="erf")]
    m = make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], [w])
    model = save(m, tmp_path / "m.onnx")
    rep = api.check(model, "mps")
    e = _entry(rep, "erf")
    assert (
        e["status"] == "replaceable" and e["fix"] == "onnx2edge rewrite MODEL -o OUT.onnx --for mps"
    )
    fixed = tmp_path / "fixed.onnx"
    _run_fix(e["fix"], model, fixed, {})
    again = api.check(fixed, "mps")
    assert again["totals"]["unsupported"] == 0 and again["totals"]["replaceable"] == 0, again


def test_convert_prints_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conv, w = _conv()
    nodes = [conv, helper.make_node("Reshape", ["c", "s"], ["y"], name="reshape")]
    m = make_model(
        nodes, [vi("x", [1, 3, 8, 8]), vi("s", [2], TensorProto.INT64)], [vi("y", ["a", "b"])], [w]
    )
    model = save(m, tmp_path / "m.onnx")
    assert main(["convert", str(model), "--target", "c", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "onnx2edge constant MODEL -o OUT.onnx --value s=VALUE" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
