"""int8 kernels for QLinearConv, QLinearMatMul and the internal o2e QGemm (runtime/o2e_qgemm.h).

`passes/qdq_int8.int8_plan` decides at conversion what a node needs (int8 weights minus their
zero point, float32 requantisation scales, int32 bias, the output clamp); here the weights are
packed in the kernel's layout ([ceil(M/8)][ceil(K/4)][8][4]) and the bias absorbs the
activation zero point: sum_k (x - xz) w = sum_k u w - (xz + off) sum_k w, with u the packed
byte (x, or x + 128 for int8 activations, flipped by xor 0x80 while packing). Activations are
packed at run time into 16-column panels, read from the input (1x1), a zero-point-bordered
copy (stride 1) or its phase planes (strided) at K row offsets (qgemm_kernels.py). Depthwise convolutions run o2e_qdwc (qdw_kernels.py). The quantization
reference loops in quant.py stay for everything else.
"""

from __future__ import annotations

import numpy as np

from ....passes.qdq_int8 import DOMAIN, int8_plan
from ....semantics.conv_geometry import pool_geometry
from ..emitter import NodeContext
from ..kernels.int8.qdw_kernels import qadd as qadd_vector
from ..kernels.int8.qgemm_kernels import _use, try_int8
from . import register_op


def _qgemm_check(node, graph) -> str | None:  # noqa: ANN001
    if node.domain != DOMAIN or int8_plan(graph, node) is None:
        return "QGemm (o2e) with operands the int8 kernels cannot run"
    return None


@register_op("o2e:QGemm", check=_qgemm_check)
def qgemm(ctx: NodeContext) -> str:
    """Written by passes/qdq_int8 only, which checks int8_plan first."""
    code = try_int8(ctx)
    if code is None:
        raise ValueError(f"{ctx.node.name}: QGemm the int8 kernels cannot run")
    return code


# --------------------------------------------------------------------------------------------
# element-wise ops between quantized layers (written by passes/qdq_int8)
# --------------------------------------------------------------------------------------------
def _internal(node, graph) -> str | None:  # noqa: ANN001
    return None if node.domain == DOMAIN else f"{node.op_type} outside the {DOMAIN} domain"


@register_op("o2e:QConcat", check=_internal)
def qconcat(ctx: NodeContext) -> str:
    """Concat of quantized tensors: inputs (x_i, table_i); a table requantizes x_i to the
    output's scale (QuantizeLinear(DequantizeLinear(v)) for each byte, see qdq_int8._lut),
    an empty one means the scales agree and the bytes are copied."""
    y = ctx.y(0)
    # QConcat's schema (semantics/fused.py) requires axis, as Concat's does
    axis = int(ctx.attr("axis")) % y.rank
    outer = int(np.prod(y.shape[:axis]))
    lines, off = [], 0
    row = int(np.prod(y.shape[axis:]))
    for i in range(0, ctx.n_inputs, 2):
        x = ctx.x(i)
        n = int(np.prod(x.shape[axis:]))
        src, dst = f"(const uint8_t *){x.sym} + o * {n}", f"(uint8_t *){y.sym} + o * {row} + {off}"
        if ctx.has_input(i + 1):
            lut = ctx.x(i + 1).sym
            lines.append(
                f"{{ const uint8_t *s = {src}; uint8_t *d = {dst};\n"
                f"  for (size_t j = 0; j < {n}; ++j) d[j] = (uint8_t){lut}[s[j]]; }}"
            )
        else:
            lines.append(f"memcpy({dst}, {src}, {n});")
        off += n
    ctx.kernel("int8 concat")
    body = "\n  ".join("\n  ".join(ln.split("\n")) for ln in lines)
    return f"for (size_t o = 0; o < {outer}; ++o) {{\n  {body}\n}}"


@register_op("o2e:QMaxPool", check=_internal)
def qmaxpool(ctx: NodeContext) -> str:
    """2-D MaxPool on quantized bytes (o2e_qmaxpool): the pass checked kernel, pads, strides
    (no dilation, no ceil mode)."""
    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    g = pool_geometry(ctx.node, x.shape, y.shape, ctx.graph.opset)
    (kh, kw), (sh, sw), pads = g.kernel, g.strides, g.pads
    qw = OW + (kw - 1) // sw + 1
    rp = OH + (kh - 1) // sh + 2
    plane = ctx.scratch(sh * sw * rp * qw, "uint8_t")
    acc = ctx.scratch(OH * qw, "uint8_t")
    flip = "0x80" if np.dtype(x.dtype).name == "int8" else "0"
    _use(ctx)
    ctx.kernel("int8 maxpool")
    return (
        f"for (size_t n = 0; n < {N}; ++n)\n"
        f"  o2e_qmaxpool({C}, {H}, {W}, {OH}, {OW}, {kh}, {kw}, {sh}, {sw}, {pads[0]}, {pads[1]}, "
        f"(const uint8_t *){x.sym} + n * {C * H * W}, {flip}, (uint8_t *){y.sym} + n * {C * OH * OW}, "
        f"{plane}, {acc});"
    )


@register_op("o2e:QAdd", check=_internal)
def qadd(ctx: NodeContext) -> str:
    """QLinearAdd as onnxruntime's x86 kernel (mlas qladd_avx2.cpp) computes it, vectorised
    (o2e_qadd, runtime/o2e_qdw.h); a fused Relu / Clip narrows the clamp
    (passes/qdq_int8._clamp_bounds). Mixed input types keep the scalar float loop of the
    reference formula saturate(round_half_even((sa * (a - za) + sb * (b - zb)) / sc) + zc)."""
    from ....passes.qdq_int8 import QRANGE, _clamp_bounds

    a, b, y = ctx.x(0), ctx.x(3), ctx.y(0)
    g = ctx.graph

    def s(i: int) -> float:
        return float(np.float32(g.const(ctx.node.inputs[i]).reshape(-1)[0]))

    def z(i: int) -> int:
        return int(g.const(ctx.node.inputs[i]).reshape(-1)[0])

    sa, sb, sc = (c_float(s(i)) for i in (1, 4, 6))
    za, zb, zc = z(2), z(5), z(7)
    yn = np.dtype(y.dtype).name
    bounds = _clamp_bounds(ctx.node, np.float32(s(6)), zc, yn) or QRANGE[yn]
    if a.dtype == b.dtype == y.dtype:
        # onnxruntime's x86 formula, vectorised (runtime/o2e_qdw.h)
        return qadd_vector(ctx, (s(1), s(4), s(6)), (za, zb, zc), bounds)
    lo, hi = (float(bounds[0] - zc), float(bounds[1] - zc))
    ctx.kernel("int8 add")
    return (
        f"for (size_t i = 0; i < {y.size}; ++i) {{\n"
        f"  float v = ({sa} * (float)((int32_t){a.sym}[i] - {za}) + "
        f"{sb} * (float)((int32_t){b.sym}[i] - {zb})) / {sc};\n"
        f"  v = v < {lo:.1f}f ? {lo:.1f}f : (v > {hi:.1f}f ? {hi:.1f}f : v);\n"
        f"  {y.sym}[i] = ({y.ctype})((int32_t)nearbyintf(v) + {zc});\n"
        "}"
    )


def c_float(v: float) -> str:
    from ..emitter import c_literal

    return c_literal(np.float32(v), np.float32)
