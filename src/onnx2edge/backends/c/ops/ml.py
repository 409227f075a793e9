"""ai.onnx.ml ops with plain tensor inputs and outputs: Binarizer and ArrayFeatureExtractor.

(The ml ops on maps, sequences or strings, ZipMap, DictVectorizer, ..., have no C form here.)
"""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import elementwise

DOMAIN = "ai.onnx.ml"


def _numeric(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind not in "fiu":
        return f"{node.op_type} takes a numeric tensor"
    return None


@register_op(f"{DOMAIN}:Binarizer", check=_numeric)
def binarizer(ctx: NodeContext) -> str:
    """y = x > threshold ? 1 : 0 in x's type (NaN > threshold is false: 0, as the ONNX
    reference; onnxruntime refuses NaN input)."""
    x = ctx.x(0)
    th = c_literal(float(ctx.attr("threshold", 0.0)), x.dtype if x.dtype.kind == "f" else "float64")
    return elementwise(ctx, [x], ctx.y(0), f"a > {th} ? 1 : 0")


def _afe_check(node: Node, graph: Graph) -> str | None:
    if (why := _numeric(node, graph)) is not None:
        return why
    t = graph.type_of(node.inputs[1])
    if t is None or t.dtype.name != "int64":
        return "ArrayFeatureExtractor indices must be int64"
    return None


@register_op(f"{DOMAIN}:ArrayFeatureExtractor", check=_afe_check)
def array_feature_extractor(ctx: NodeContext) -> str:
    """y[..., j] = x[..., idx[j]] (a 1-D x gives one row); an index out of [0, last dim) is an
    error in onnxruntime: here it reads nothing and writes 0."""
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    last = x.shape[-1]
    rows = x.size // last if last else 0
    k = idx.size
    return f"""for (size_t r = 0; r < {rows}; ++r)
  for (size_t j = 0; j < {k}; ++j) {{
    const int64_t i = {idx.sym}[j];
    {y.sym}[r * {k} + j] = (i >= 0 && i < {last}) ? {x.sym}[r * {last} + (size_t)i] : 0;
  }}"""
