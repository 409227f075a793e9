"""Squeeze-and-excitation's global pool computed by the depthwise layer that feeds it (issue 34).

EfficientNet's and MobileNetV3's blocks read the depthwise layer's output twice: a
GlobalAveragePool for the gate (GAP -> FC -> act -> FC -> Sigmoid / HardSigmoid -> Mul) and
the gating Mul. The depthwise kernels (conv_dwrows.py, conv_depthwise.py) finish each call
with a pass over the planes they wrote (the activation they do not apply in registers,
common.act_tail); that pass also sums each plane while it is in L1 and writes the mean
straight into the GlobalAveragePool's output, so the pool no longer reads the tensor
(EfficientNet-B0: 17 such pools). The pool's output is then live from the depthwise layer's
step (NodeContext.claim_pool / early_writes: the arena plan keeps it apart from that layer's input and
output) and the pool node emits nothing (ops/pool.py `gap_fused`). The sums run in
o2e_global_avgpool's order (sixteen partial sums, then the tail), so the means are the
unfused pool's bit for bit.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext, Tensor
from .conv_spec import ConvSpec


def pool_target(ctx: NodeContext, spec: ConvSpec) -> tuple[str, Tensor] | None:
    """(pool node name, its output) when a float32 GlobalAveragePool reads this layer's
    output and the kernel may write its means: neither node under a run-time If guard, the
    output an arena tensor of [N, C, 1, 1], the layer NCHW or a blocked depthwise layer
    (conv_nchwc: o2e_nc_dw_units_ sums each output row while it is in L1)."""
    if (
        (spec.layout is not None and spec.layout.kind != "depthwise")
        or spec.y.dtype != np.float32
        or spec.nsp != 2
    ):
        return None
    if ctx.guarded(ctx.node.name):
        return None
    y = ctx.node.outputs[0]
    for node in ctx.graph.consumers(y):
        if node.op_type != "GlobalAveragePool" or node.domain not in ("", "ai.onnx"):
            continue
        if node.inputs[0] != y or ctx.guarded(node.name):
            continue
        out = ctx.tensor(node.outputs[0])
        if out.kind == "arena" and out.dtype == np.float32 and out.size == spec.N * spec.C:
            return node.name, out
    return None


def claim(ctx: NodeContext, pool: tuple[str, Tensor] | None) -> str:
    """Record that this layer writes the pool's means (call once its kernel is generated);
    the C pointer the kernel's `pool` field gets ("NULL" without a pool)."""
    if pool is None:
        return "NULL"
    name, out = pool
    ctx.claim_pool(name, out.name)
    return out.sym
