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
from ....semantics.pooling import pool_attrs
from ....semantics.shape_ops import axis_attr
from ..emitter import NodeContext
from ..kernels.int8 import qdw_kernels as qdw
from ..kernels.int8.qdw_kernels import PAR, PAR_BYTES, split
from ..kernels.int8.qdw_kernels import qadd as qadd_vector
from ..kernels.int8.qdw_kernels import qlut as qlut_call
from ..kernels.int8.qdw_kernels import use_runtime as qdw_runtime
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
    an empty one means the scales agree and the bytes are copied. An input its producer wrote
    into its slice of y (concat_alias.py) is not copied, and its table is looked up in place."""
    y = ctx.y(0)
    # QConcat's schema (semantics/fused.py) requires axis, as Concat's does
    axis = axis_attr(ctx.node, ctx.graph.opset, y.rank)
    outer = int(np.prod(y.shape[:axis]))
    lines, off = [], 0
    row = int(np.prod(y.shape[axis:]))
    for i in range(0, ctx.n_inputs, 2):
        x = ctx.x(i)
        n = int(np.prod(x.shape[axis:]))
        src, dst = f"(const uint8_t *){x.sym} + o * {n}", f"(uint8_t *){y.sym} + o * {row} + {off}"
        if ctx.has_input(i + 1):
            # o2e_qlut: vpermi2b lookups where AVX-512 VBMI is compiled in (runtime/o2e_qdw.h)
            qdw_runtime(ctx)
            lut = ctx.x(i + 1).sym
            if outer == 1:  # batch 1: the table lookup may split across threads
                lines.append(qlut_call(ctx, n, src, f"(const uint8_t *){lut}", dst))
            else:
                lines.append(f"o2e_qlut({n}, {src}, (const uint8_t *){lut}, {dst});")
        elif outer == 1 and ctx.concat_alias(x.name) == (y.name, off):
            # its producer wrote it in place (concat_alias.py): SqueezeNet's fire modules
            lines.append(f"/* {x.sym}: written in place */")
        else:
            lines.append(f"memcpy({dst}, {src}, {n});")
        off += n
    ctx.kernel("int8 concat")
    body = "\n  ".join("\n  ".join(ln.split("\n")) for ln in lines)
    return f"for (size_t o = 0; o < {outer}; ++o) {{\n  {body}\n}}"


@register_op("o2e:QMul", check=_internal)
def qmul(ctx: NodeContext) -> str:
    """QLinearMul as onnxruntime's x86 / Arm kernels compute it (o2e_qmul, runtime/o2e_qdw.h;
    the reference float formula differs from them by a step at ties): B of A's shape, or
    one value per row (passes/qdq_int8.mul_rows: squeeze-and-excitation's gate)."""
    from ....passes.qdq_int8 import QRANGE, mul_rows

    a, b, y = ctx.x(0), ctx.x(3), ctx.y(0)
    g = ctx.graph

    def s(i: int) -> np.float32:
        return np.float32(g.const(ctx.node.inputs[i]).reshape(-1)[0])

    def z(i: int) -> int:
        return int(g.const(ctx.node.inputs[i]).reshape(-1)[0])

    # mlas: ScaleA * ScaleB / ScaleC in float32
    with np.errstate(all="ignore"):
        ratio = c_float(float(np.float32(s(1) * s(4)) / s(6)))
    rows = mul_rows(tuple(a.shape), tuple(b.shape))
    n = a.size // rows if rows else a.size
    bsr, bsi = (1, 0) if rows else (n, 1)
    sgn = (np.dtype(a.dtype).name == "int8") | 2 * (np.dtype(b.dtype).name == "int8")
    lo, hi = QRANGE[np.dtype(y.dtype).name]
    qdw_runtime(ctx)
    ctx.kernel("int8 mul (per-row)" if rows else "int8 mul")
    units = rows if rows and rows > 1 else -(-n // PAR_BYTES)
    mt = split(ctx, a.size, units, qdw.PAR_MIN_BYTES)
    return (
        f"o2e_qmul{'_mt' if mt else ''}({rows or 1}, {n}, (const uint8_t *){a.sym}, "
        f"(const uint8_t *){b.sym}, {bsr}, {bsi}, {sgn}, {z(2)}, {z(5)}, {ratio}, {z(7)}, {lo}, "
        f"{hi}, (uint8_t *){y.sym}{', ' + PAR if mt else ''});"
    )


@register_op("o2e:QLut", check=_internal)
def qlut(ctx: NodeContext) -> str:
    """An element-wise op between DequantizeLinear and QuantizeLinear as a 256-byte table
    (passes/qdq_int8._rewrite_lut, _gated_self): o2e_qlut, vpermi2b where VBMI is compiled in."""
    x, y = ctx.x(0), ctx.y(0)
    ctx.kernel("int8 table lookup")
    n = int(np.prod(x.shape))
    return qlut_call(
        ctx,
        n,
        f"(const uint8_t *){x.sym}",
        f"(const uint8_t *){ctx.x(1).sym}",
        f"(uint8_t *){y.sym}",
    )


@register_op("o2e:QMaxPool", check=_internal)
def qmaxpool(ctx: NodeContext) -> str:
    """2-D MaxPool on quantized bytes (o2e_qmaxpool): the pass checked kernel, pads, strides
    (no dilation; ceil mode only without pads)."""
    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    g = pool_geometry(ctx.node, x.shape, y.shape, ctx.graph.opset)
    (kh, kw), (sh, sw), pads = g.kernel, g.strides, g.pads
    # O2E_QMAXPOOL_SCRATCH: the window maxima and the padded channel, one plane each
    plane = ctx.scratch(2 * ((OH - 1) * sh + kh) * ((OW - 1) * sw + kw), "uint8_t")
    flip = "0x80" if np.dtype(x.dtype).name == "int8" else "0"
    _use(ctx)
    ctx.kernel("int8 maxpool")
    return (
        f"for (size_t n = 0; n < {N}; ++n)\n"
        f"  o2e_qmaxpool({C}, {H}, {W}, {OH}, {OW}, {kh}, {kw}, {sh}, {sw}, {pads[0]}, {pads[1]}, "
        f"(const uint8_t *){x.sym} + n * {C * H * W}, {flip}, (uint8_t *){y.sym} + n * {C * OH * OW}, "
        f"{plane});"
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


# --------------------------------------------------------------------------------------------
# average pools on quantized bytes (written by passes/qdq_int8): onnxruntime's QLinear kernels
# --------------------------------------------------------------------------------------------
def _qparam(ctx: NodeContext, i: int) -> tuple[np.float32, int]:
    g = ctx.graph
    s = np.float32(g.const(ctx.node.inputs[i]).reshape(-1)[0])
    z = ctx.node.inputs[i + 1] if i + 1 < len(ctx.node.inputs) else ""
    return s, int(g.const(z).reshape(-1)[0]) if z else 0


@register_op("o2e:QAveragePool", "o2e:QGlobalAveragePool", check=_internal)
def qavgpool(ctx: NodeContext) -> str:
    """Average pooling of quantized bytes, bit for bit onnxruntime's QLinearAveragePool /
    QLinearGlobalAveragePool (which its QDQ fusion runs for DQ -> pool -> Q):

    - whole-image window without padding (mlas qlgavgpool.cpp): an integer sum per channel,
      y = clamp(rint(float(sum - n * x_zp) * s), lo - y_zp, hi - y_zp) + y_zp with
      s = x_scale / (y_scale * n) in float32;
    - else (qlinear_pool.cc): the dequantized bytes x_scale * (x - x_zp) (a 256-entry float
      table, so no multiply-add is ever contracted) summed in float in window order, divided
      by the tap count, then clamp(nearbyint(v / y_scale + y_zp)).
    The arena holds bytes only; the float LUT is 1 KB of flash per non-global pool."""
    from ....passes.qdq_int8 import QRANGE, avg_pool_is_global, global_pool_scale

    x, y = ctx.x(0), ctx.y(0)
    xs, xz = _qparam(ctx, 1)
    ys, yz = _qparam(ctx, 3)
    lo, hi = QRANGE[np.dtype(y.dtype).name]
    shape = tuple(x.shape)
    N, C, n = shape[0], shape[1], int(np.prod(shape[2:]))
    ct = y.ctype
    if avg_pool_is_global(ctx.node, shape, ctx.graph.opset):
        s = global_pool_scale(float(xs), float(ys), n)
        if s is None:  # the pass checked it
            raise ValueError(f"{ctx.node.name}: scales onnxruntime refuses")
        ctx.kernel("int8 global average pool")
        return (
            f"for (size_t c = 0; c < {N * C}; ++c) {{\n"
            f"  const {ct} *p = {x.sym} + c * {n};\n"
            f"  int32_t acc = {-xz * n};\n"
            f"  float v;\n"
            f"  for (size_t i = 0; i < {n}; ++i) acc += p[i];\n"
            f"  v = (float)acc * {c_float(float(s))};\n"
            f"  v = v < {float(lo - yz):.1f}f ? {float(lo - yz):.1f}f : "
            f"(v > {float(hi - yz):.1f}f ? {float(hi - yz):.1f}f : v);\n"
            f"  {y.sym}[c] = ({ct})((int32_t)nearbyintf(v) + {yz});\n"
            "}"
        )
    g = pool_geometry(ctx.node, shape, y.shape, ctx.graph.opset)
    H, W = shape[2:]
    OH, OW = y.shape[2:]
    (kh, kw), (sh, sw) = g.kernel, g.strides
    pt, pl = g.pads[0], g.pads[1]
    include_pad = pool_attrs(ctx.node, ctx.graph.opset).count_include_pad
    # indexed by the byte's bit pattern: int8 -128..-1 are entries 128..255
    v = np.arange(256, dtype=np.uint8).view(np.dtype(x.dtype)).astype(np.int32)
    lut = (xs * (v - xz).astype(np.float32)).astype(np.float32)
    table = ", ".join(c_float(float(f)) for f in lut)
    count = f"{kh * kw}" if include_pad else "(h1 - h0) * (w1 - w0)"
    ctx.kernel("int8 average pool")
    return (
        f"static const float lut[256] = {{{table}}};\n"
        f"for (size_t c = 0; c < {N * C}; ++c) {{\n"
        f"  const uint8_t *p = (const uint8_t *){x.sym} + c * {H * W};\n"
        f"  {ct} *q = {y.sym} + c * {OH * OW};\n"
        f"  for (int oh = 0; oh < {OH}; ++oh) {{\n"
        f"    const int h0 = oh * {sh} - {pt} < 0 ? 0 : oh * {sh} - {pt};\n"
        f"    const int h1 = oh * {sh} - {pt} + {kh} > {H} ? {H} : oh * {sh} - {pt} + {kh};\n"
        f"    for (int ow = 0; ow < {OW}; ++ow) {{\n"
        f"      const int w0 = ow * {sw} - {pl} < 0 ? 0 : ow * {sw} - {pl};\n"
        f"      const int w1 = ow * {sw} - {pl} + {kw} > {W} ? {W} : ow * {sw} - {pl} + {kw};\n"
        f"      float acc = 0.0f;\n"
        f"      int32_t r;\n"
        f"      for (int h = h0; h < h1; ++h)\n"
        f"        for (int w = w0; w < w1; ++w) acc += lut[p[h * {W} + w]];\n"
        f"      acc = acc / (float)({count});\n"
        f"      r = (int32_t)nearbyintf(acc / {c_float(float(ys))} + {float(yz):.1f}f);\n"
        f"      q[oh * {OW} + ow] = ({ct})(r < {lo} ? {lo} : (r > {hi} ? {hi} : r));\n"
        "    }\n"
        "  }\n"
        "}"
    )
