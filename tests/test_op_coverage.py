"""What the C backend claims: every registered op has a callable emitter, every ONNX op is either
registered or listed in backends/c/ops/unsupported.py with its reason, and ops/TEMPLATE.py
(the recipe for a new op) still works when followed."""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c import ops
from onnx2edge.backends.c.ops.unsupported import HANDLED_BEFORE_C, UNSUPPORTED

from conftest import make_model, save, vi


def _onnx_ops() -> set[str]:
    """The default domain's ops in their latest version (deprecated ones included)."""
    return {s.name for s in onnx.defs.get_all_schemas() if s.domain in ("", "ai.onnx")}


def test_every_registered_op_has_an_emitter() -> None:
    registry = ops.load_all()
    assert registry
    for name, spec in registry.items():
        assert spec.name == name
        assert callable(spec.emit), name
        assert list(inspect.signature(spec.emit).parameters) == ["ctx"], name
        if spec.check is not None:
            assert callable(spec.check), name
            assert len(inspect.signature(spec.check).parameters) == 2, name


def test_every_onnx_op_is_registered_or_explained() -> None:
    registry = set(ops.load_all())
    onnx_ops = _onnx_ops()
    listed = set(UNSUPPORTED) | set(HANDLED_BEFORE_C)
    missing = sorted(onnx_ops - registry - listed)
    assert not missing, f"register these ops or list them in ops/unsupported.py: {missing}"
    stale = sorted(listed & registry)
    assert not stale, f"registered now: remove them from ops/unsupported.py: {stale}"
    unknown = sorted(listed - onnx_ops)
    assert not unknown, (
        f"not ONNX ops (default domain, opset {onnx.defs.onnx_opset_version()}): {unknown}"
    )
    assert not set(UNSUPPORTED) & set(HANDLED_BEFORE_C)
    for op, why in {**UNSUPPORTED, **HANDLED_BEFORE_C}.items():
        assert why.strip() and "\n" not in why, op


def _template_as(op_type: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Import ops/TEMPLATE.py with its op registered as `op_type` instead of the real one."""
    registry = {k: v for k, v in ops.load_all().items() if k != op_type}
    monkeypatch.setattr(ops, "C_OPS", registry)
    path = Path(ops.__file__).parent / "TEMPLATE.py"
    src = path.read_text()
    assert 'OP_TYPE = "MyOp"' in src
    mod = types.ModuleType(f"{ops.__name__}._template_under_test")
    mod.__file__, mod.__package__ = str(path), ops.__name__
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    exec(
        compile(src.replace('OP_TYPE = "MyOp"', f'OP_TYPE = "{op_type}"'), path, "exec"),
        mod.__dict__,
    )
    assert registry[op_type].emit is mod.my_op
    return mod


@pytest.mark.parametrize("alpha", [None, 0.25], ids=["default_alpha", "alpha"])
def test_template_is_a_working_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alpha: float | None
) -> None:
    """TEMPLATE.py's op has LeakyRelu's meaning: registered as LeakyRelu in place of the real
    emitter, the C it writes matches onnxruntime, NaN and Inf included."""
    _template_as("LeakyRelu", monkeypatch)
    kw = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node("LeakyRelu", ["x"], ["y"], **kw)
    path = save(
        make_model([node], [vi("x", [2, 7])], [vi("y", [2, 7])], opset=16), tmp_path / "m.onnx"
    )
    x = np.array(
        [
            [-3.5, -1e-3, 0.0, -0.0, 2.0, np.nan, np.inf],
            [-np.inf, 1e30, -1e30, 7.0, -7.0, 1.0, -1.0],
        ],
        np.float32,
    )
    out = tmp_path / "c"
    rep = api.verify(path, target="c", inputs={"x": x}, rtol=0, atol=0, work_dir=out)
    assert rep.ok, rep.format()
    assert "v < 0 ?" in (out / "model.c").read_text()  # the template's code, not the real emitter


def test_template_is_not_loaded() -> None:
    """load_all() skips the template: MyOp is no op of the backend."""
    assert "MyOp" not in ops.load_all()


def test_ops_the_conformance_run_refuses_are_listed() -> None:
    """Every op tests/conformance/c.expected reports without an emitter is in the table."""
    text = (Path(__file__).parent / "conformance" / "c.expected").read_text()
    refused = set(re.findall(r"unsupported: op (\w+), opset \d+: no C emitter for this op\b", text))
    assert refused, "c.expected lists no case refused for a missing emitter"
    assert refused <= set(UNSUPPORTED), sorted(refused - set(UNSUPPORTED))
