"""MaxUnpool: scatter each value of X to the flat position its index names, zeros elsewhere.

As the ONNX reference does, an index addresses the default output shape,
(in - 1) * stride - pads + kernel per spatial axis; with an output_shape input that is larger,
that block sits at the start of each axis of the bigger, zero-filled output (the spec's test
case; onnxruntime 1.31 reads the indices in the output_shape layout instead, so the two differ
when output_shape is given).
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import attr, ints
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import strides


def _check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind != "f":
        return "MaxUnpool takes float input"
    return None


def _inferred(node: Node, shape: tuple[int, ...]) -> tuple[int, ...]:
    k = [int(v) for v in attr(node, "kernel_shape")]  # required
    # no schema defaults: the spec's prose says stride 1 and no pads per axis
    s, p = ints(node, "strides", len(k), 1), ints(node, "pads", 2 * len(k), 0)
    sp = [(shape[d + 2] - 1) * s[d] - (p[d] + p[len(k) + d]) + k[d] for d in range(len(k))]
    return (shape[0], shape[1], *sp)


@register_op("MaxUnpool", check=_check)
def max_unpool(ctx: NodeContext) -> str:
    x, ind, y = ctx.x(0), ctx.x(1), ctx.y(0)
    inf = _inferred(ctx.node, x.shape)
    total = int(np.prod(inf, dtype=np.int64))
    if tuple(y.shape) == inf:
        place = "o = q;"
    else:  # decompose q in the inferred shape, recompose in the output's
        ist, ost = strides(inf), strides(y.shape)
        place = " ".join(
            f"o += (q / {a} % {d}) * {b};" for a, b, d in zip(ist, ost, inf, strict=True)
        )
    zero = c_literal(0, y.dtype)
    return f"""for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] = {zero};
for (size_t i = 0; i < {x.size}; ++i) {{
  const int64_t q = {ind.sym}[i];
  if (q < 0 || q >= {total}) continue;  /* out of range: ignored */
  int64_t o = 0;
  {place}
  {y.sym}[o] = {x.sym}[i];
}}"""
