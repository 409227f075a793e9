"""An SE block's gate x * s folded into the NCHW 1x1 layer that reads its product (issue 34).

EfficientNet's first stages (112x112 .. 14x14, outside the channel-blocked chains of
nchwc_plan.py) gate the depthwise layer's output by a per-channel scale s and project the
product with a 1x1 convolution: Conv(x * s) = (W diag(s)) x. The gating Mul was a pass of its
own over the whole map (0.10 ms of EfficientNet-B0's 5.6 at AVX-512, its 112x112 one a 1.6 MB
read and write); here the Mul emits nothing and the 1x1 layer scales its M x C weights by s
first (at most 40 x 240 multiplies), then runs the GEMM with them read at run time over x.
The chains fold their gates the same way in o2e_nchwc.h (nchwc_plan.fold_gates).

The rounding differs from the graph's in the last place: x (s w) against (x s) w.

Taken for batch 1, a float32 x [1][C][H][W] times s [1][C][1][1] whose product only the
1x1 layer reads (as its input 0), a float32 constant weight, M <= H x W (the weights no
larger than the map, as nchwc_plan.fold_gates) and neither node in a chain.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .....ir import Graph, Node
from .....semantics.conv_geometry import conv_geometry
from .....semantics.fused import base_op
from ...emitter import NodeContext, Tensor
from .conv_spec import ConvSpec


def _gate_operands(mul: Node, graph: Graph) -> tuple[str, str] | None:
    """(x, s) when `mul` is x [1][C][H][W] * s [1][C][1][1] (float32, static), else None."""
    if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx"):
        return None
    if len(mul.inputs) != 2 or not all(mul.inputs) or mul.inputs[0] == mul.inputs[1]:
        return None
    ts = [graph.type_of(n) for n in (*mul.inputs, mul.outputs[0])]
    if any(t is None or not t.is_static or t.dtype != np.float32 for t in ts):
        return None
    a, b, y = (tuple(t.static_shape) for t in ts)  # type: ignore[union-attr]
    for x, s, xn, sn in ((a, b, *mul.inputs), (b, a, *mul.inputs[::-1])):
        if len(x) == 4 and x == y and x[0] == 1 and x[2] * x[3] > 1 and s == (1, x[1], 1, 1):
            return xn, sn
    return None


def _folding_conv(mul: Node, graph: Graph) -> Node | None:
    """The 1x1 layer `mul`'s product goes to when it can take the gate, else None."""
    if _gate_operands(mul, graph) is None or mul.outputs[0] in graph.outputs:
        return None
    readers = graph.consumers(mul.outputs[0])
    if len(readers) != 1:
        return None
    conv = readers[0]
    if base_op(conv) != "Conv" or conv.domain not in ("", "ai.onnx", "o2e"):
        return None
    if [i for i, t in enumerate(conv.inputs) if t == mul.outputs[0]] != [0]:
        return None
    w = graph.const(conv.inputs[1]) if len(conv.inputs) > 1 and conv.inputs[1] else None
    if w is None or w.dtype != np.float32 or w.ndim != 4:
        return None
    ts = [graph.type_of(n) for n in (conv.inputs[0], conv.outputs[0])]
    if any(t is None or not t.is_static for t in ts):
        return None
    xs, ys = (t.static_shape for t in ts)  # type: ignore[union-attr]
    g = conv_geometry(conv, xs, w.shape, ys, graph.opset)
    pointwise = g.kernel == (1, 1) and g.strides == (1, 1) and not any(g.pads)
    if not pointwise or g.group != 1 or any(d != 1 for d in g.dilations):
        return None
    if g.out_channels > xs[2] * xs[3]:
        # scaling M x C weights (and packing them at run time) would cost more than the
        # gate's C x P pass: MobileNetV3's 7x7 projections (as nchwc_plan.fold_gates)
        return None
    return conv


def folds(ctx: NodeContext) -> bool:
    """This Mul is an SE gate the 1x1 layer reading its product takes (it emits nothing)."""
    conv = _folding_conv(ctx.node, ctx.graph)
    return conv is not None and ctx.layout_role is None and ctx.layout_role_of(conv.name) is None


def gate_of(ctx: NodeContext) -> tuple[str, str] | None:
    """(x, s) of the SE gate this 1x1 layer takes (its input 0 is their product), or None."""
    if ctx.layout_role is not None:
        return None
    mul = ctx.graph.producer(ctx.node.inputs[0])
    conv = None if mul is None else _folding_conv(mul, ctx.graph)
    if mul is None or conv is None or conv.name != ctx.node.name:
        return None
    if ctx.layout_role_of(mul.name) is not None:
        return None
    return _gate_operands(mul, ctx.graph)


def gated_spec(ctx: NodeContext, spec: ConvSpec) -> tuple[ConvSpec, str]:
    """`spec` reading the gate's x, with weights W diag(s) computed at run time into a scratch
    buffer (the strategies that lay weights out at conversion refuse it; the GEMM 1x1 one
    reads them in place), and the C statements that compute them (before the layer's)."""
    gate = gate_of(ctx)
    assert gate is not None
    x, s = ctx.tensor(gate[0]), ctx.tensor(gate[1])
    ctx.also_reads(x.name, s.name)
    M, C = spec.M, spec.C
    w = spec.w.sym  # marks the constant weights as referenced (emitter.ConstTensor)
    ws = ctx.scratch(M * C * 4)
    wt = Tensor(f"{spec.w.name}#gated", ws, spec.w.shape, np.dtype(np.float32), "arena")
    code = (
        f"for (size_t m = 0; m < {M}; ++m)\n"
        f"  for (size_t c = 0; c < {C}; ++c) {ws}[m * {C} + c] = {w}[m * {C} + c] * {s.sym}[c];"
    )
    ctx.kernel("SE gate folded into the 1x1 layer's weights")
    return dataclasses.replace(spec, x=x, w=wt, weights=None), code
