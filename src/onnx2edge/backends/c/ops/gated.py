"""Gated activations: SwiGLU (opset 28), Y = Swish_alpha(A) * B with A and B of one shape.

float16 / bfloat16 reach it through backends/c/widen.py (computed in float32, rounded once).
"""

from __future__ import annotations

from ....ir import Graph, Node
from ....semantics.activations import vm
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import elementwise


def _swiglu_check(node: Node, graph: Graph) -> str | None:
    a, b = (graph.type_of(n) for n in node.inputs[:2])
    if a is None or b is None or a.dtype.name not in ("float32", "float64"):
        return "SwiGLU takes float input"
    if a.shape != b.shape:
        return "SwiGLU inputs A and B must have one shape (no broadcasting)"
    return None


@register_op("SwiGLU", check=_swiglu_check)
def swiglu(ctx: NodeContext) -> str:
    # Swish as the activation table writes it: NaN stays NaN, -Inf gives -Inf * 0 = NaN as
    # onnxruntime's Swish does
    y = ctx.y(0)
    f = "" if y.ctype == "double" else "f"
    alpha = c_literal(float(ctx.attr("alpha")), y.dtype)
    swish = f"a * {vm('sigmoid', f)}({alpha} * a)" if f else f"a / (1 + exp(-{alpha} * a))"
    return elementwise(ctx, [ctx.x(0), ctx.x(1)], y, f"{swish} * b")
