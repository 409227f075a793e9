"""`NodeContext` is a narrow interface (issue 32, item 3): an op or kernel sees the graph, its
node, the conversion's options read-only, the analyses about its node and small recording
methods, never the emitter behind them (`ctx.model` was the whole ModelEmitter, the root of
the emitter <-> ops import circle).

Read from the source (ast): no module of ops/, kernels/, strategy.py or headers.py reads
`.model` or `._emitter` off anything (an alias such as `em = ctx.model` reads it too), asks
getattr for it by name, or imports ModelEmitter.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from onnx2edge import frontend
from onnx2edge.api import DEFAULT_PASSES
from onnx2edge.backends.c import emitter as emitter_mod
from onnx2edge.backends.c import phases
from onnx2edge.backends.c.backend import CBackend
from onnx2edge.backends.c.emitter import ModelEmitter, NodeContext
from onnx2edge.passes import run_passes

C = Path(emitter_mod.__file__).parent
FORBIDDEN = {"model", "_emitter"}
BY_NAME = {"getattr", "setattr", "hasattr", "delattr", "vars"}


def _op_modules() -> list[Path]:
    return sorted(
        [
            *(C / "ops").rglob("*.py"),
            *(C / "kernels").rglob("*.py"),
            C / "strategy.py",
            C / "headers.py",
        ]
    )


def reaches_past(source: str) -> list[str]:
    """Where `source` reaches past NodeContext into the emitter (line: what)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and n.attr in FORBIDDEN:
            found.append(f"{n.lineno}: .{n.attr}")
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in BY_NAME
            and any(isinstance(a, ast.Constant) and a.value in FORBIDDEN for a in n.args)
        ):
            found.append(
                f"{n.lineno}: {n.func.id}(..., {FORBIDDEN & {a.value for a in n.args if isinstance(a, ast.Constant)}})"
            )
        elif isinstance(n, ast.ImportFrom) and any(a.name == "ModelEmitter" for a in n.names):
            found.append(f"{n.lineno}: imports ModelEmitter")
    return found


def test_the_scan_sees_each_way_in() -> None:
    assert reaches_past("x = ctx.model.device")
    assert reaches_past("em = ctx.model\nem.runtime_files.add('h')")
    assert reaches_past("ctx._emitter.kernels")
    assert reaches_past("getattr(ctx, 'model')")
    assert reaches_past("from ..emitter import ModelEmitter")
    assert not reaches_past("ctx.device.is_mcu\nctx.require_runtime('o2e_gemm.h')")


@pytest.mark.parametrize("path", _op_modules(), ids=lambda p: str(p.relative_to(C)))
def test_ops_and_kernels_see_only_the_interface(path: Path) -> None:
    assert reaches_past(path.read_text()) == [], f"{path.relative_to(C)} reaches past NodeContext"


def _context() -> tuple[ModelEmitter, NodeContext]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = run_passes(
        frontend.load(model, quiet=True), (*DEFAULT_PASSES, *CBackend.required_passes)
    )
    em, _ = phases.emit_model(graph)
    return em, NodeContext(em, graph.nodes[0], 0)


def test_node_context_has_no_public_emitter() -> None:
    em, ctx = _context()
    assert not hasattr(NodeContext, "model") and not hasattr(ctx, "model")
    public_fields = {f.name for f in dataclasses.fields(NodeContext) if not f.name.startswith("_")}
    assert public_fields == {
        "node",
        "step",
        "scratch_requests",
        "early_writes",
        "extra_reads",
        "unwritten",
    }
    for name in dir(ctx):
        if not name.startswith("_"):
            value = getattr(ctx, name)
            assert value is not em and not isinstance(value, ModelEmitter), name
    assert "_emitter" not in repr(ctx)


def test_options_are_read_only_and_records_reach_the_emitter() -> None:
    em, ctx = _context()
    assert ctx.device is em.device and ctx.max_threads == em.max_threads
    assert dict(ctx.kernel_options) == dict(em.kernel_options)
    with pytest.raises(TypeError):
        ctx.kernel_options["sparse"] = "force"  # type: ignore[index]
    ctx.require_runtime("o2e_gemm.h")
    ctx.record_strategy("winner", [("loser", "too narrow")])
    ctx.offer_residual("res")
    ctx.claim_pool("gap", "means")
    assert "o2e_gemm.h" in em.runtime_files
    assert em.layer_strategies["r"] == "winner"
    assert em.kernel_refusals["r"] == [("loser", "too narrow")]
    assert em.residual_candidates["y"] == ("res", 0)
    assert em.pooled_by["gap"] == "r" and ctx.early_writes == ["means"]
    assert ctx.layout_role is None and ctx.concat_alias("x") is None
