"""int8 kernels for QLinearConv, QLinearMatMul and the internal o2e QGemm (runtime/o2e_qgemm.h).

`passes/qdq_int8.int8_plan` decides at conversion what a node needs (int8 weights minus their
zero point, float32 requantisation scales, int32 bias, the output clamp); here the weights are
packed in the kernel's layout ([ceil(M/8)][ceil(K/4)][8][4]) and the bias absorbs the
activation zero point: sum_k (x - xz) w = sum_k u w - (xz + off) sum_k w, with u the packed
byte (x, or x + 128 for int8 activations, flipped by xor 0x80 while packing). Activations are
packed at run time into 16-column panels (im2col first for kernels larger than 1x1 or with
stride / padding). Depthwise convolutions run o2e_qdw. The quantization reference loops in
quant.py stay for everything else.
"""

from __future__ import annotations

import numpy as np

from ....passes.qdq_int8 import DOMAIN, Int8Plan, int8_plan
from ..emitter import NodeContext
from . import register_op
from .conv_spec import conv_pads

HEADER = "o2e_qgemm.h"
MR, NR = 8, 16  # O2E_QMR / O2E_QNR


def _use(ctx: NodeContext) -> None:
    ctx.helper("o2e_qgemm_include", f'#include "{HEADER}"')
    ctx.model.runtime_files.add(HEADER)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """int8 [M, K] -> [ceil(M/8), ceil(K/4), 8, 4], zero padded (o2e_qkernel's A layout)."""
    M, K = w.shape
    m8, k4 = -(-M // MR), -(-K // 4)
    a = np.zeros((m8 * MR, k4 * 4), np.int8)
    a[:M, :K] = w
    return np.ascontiguousarray(a.reshape(m8, MR, k4, 4).transpose(0, 2, 1, 3))


def _panel_bytes(K: int, P: int) -> int:
    return -(-P // NR) * -(-K // 4) * 64


def _consts(ctx: NodeContext, plan: Int8Plan) -> tuple[str, str, str, str]:
    """Packed weights, corrected bias, row sums and scales as C symbols."""
    rowsum = plan.w.astype(np.int64).sum(axis=1)
    off = plan.x_zp + (128 if plan.x_signed else 0)
    bias = (plan.bias.astype(np.int64) - off * rowsum).astype(np.int64)
    bias = ((bias + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 wrap, as the kernels add
    return (
        ctx.weight("qA", pack_weights(plan.w)),
        ctx.weight("qbias", bias),
        ctx.weight("qrowsum", rowsum.astype(np.int32)),
        ctx.weight("qscale", plan.scale),
    )


def _clamp_args(plan: Int8Plan) -> str:
    return f"{plan.y_zp}, {plan.lo}, {plan.hi}"


def _flip(plan: Int8Plan) -> str:
    return "0x80" if plan.x_signed else "0"


def _conv(ctx: NodeContext, plan: Int8Plan) -> str:

    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    M, OH, OW = y.shape[1:]
    kh, kw = ctx.const(3).shape[2:]
    st = list(ctx.attr("strides", [1, 1]))
    dl = list(ctx.attr("dilations", [1, 1]))
    pads = conv_pads(ctx.node, (H, W), (OH, OW), [kh, kw], st, dl)
    geo = f"{kh}, {kw}, {st[0]}, {st[1]}, {pads[0]}, {pads[1]}, {dl[0]}, {dl[1]}"
    P = OH * OW
    xp, yp = f"(const uint8_t *){x.sym}", f"(uint8_t *){y.sym}"
    if plan.kind == "depthwise":
        ctx.kernel("int8 depthwise")
        w = ctx.weight("qW", plan.w)
        bias = ctx.weight("qbias", plan.bias)
        sc = ctx.weight("qscale", plan.scale)
        qw = OW + (kw - 1) * dl[1] // st[1] + 1
        rp = OH + (kh - 1) * dl[0] // st[0] + 2
        plane = ctx.scratch(st[0] * st[1] * rp * qw * 2, "int16_t")
        row = ctx.scratch(OH * qw * 4, "int32_t")
        xz = plan.x_zp + (128 if plan.x_signed else 0)
        return (
            f"for (size_t n = 0; n < {N}; ++n)\n"
            f"  o2e_qdw({C}, {H}, {W}, {OH}, {OW}, {geo}, {xp} + n * {C * H * W}, {_flip(plan)}, "
            f"{xz}, {w}, {bias}, {sc}, {_clamp_args(plan)}, {yp} + n * {M * P}, {plane}, {row});"
        )
    K = plan.w.shape[1]
    A, bias, rowsum, sc = _consts(ctx, plan)
    pointwise = kh == kw == 1 and st == [1, 1] and not any(pads)
    padv = plan.x_zp & 0xFF
    lines = [
        f"for (size_t n = 0; n < {N}; ++n) {{",
        f"  const uint8_t *xn = {xp} + n * {C * H * W};",
    ]
    if st == [1, 1] and not pointwise:
        # stride 1: padded planes read at K offsets, no column matrix (o2e_qpad)
        ctx.kernel("int8 padded-plane gemm")
        wp, hp = OW + (kw - 1) * dl[1], OH + (kh - 1) * dl[0] + 1
        pe = OH * wp
        c_, ky, kx = np.meshgrid(np.arange(C), np.arange(kh), np.arange(kw), indexing="ij")
        off = (c_ * hp * wp + ky * dl[0] * wp + kx * dl[1]).reshape(-1).astype(np.int32)
        offs = ctx.weight("qrowoff", off)
        padded = ctx.scratch(C * hp * wp, "uint8_t")
        pk = ctx.scratch(_panel_bytes(K, pe), "uint8_t")
        yext = ctx.scratch(M * pe, "uint8_t")
        lines += [
            f"  o2e_qpad(xn, {C}, {H}, {W}, {hp}, {wp}, {pads[0]}, {pads[1]}, (uint8_t){padv}, "
            f"{padded});",
            f"  o2e_qpack_rows_at({padded}, 0, {offs}, {K}, {pe}, {_flip(plan)}, {pk});",
            f"  o2e_qgemm({M}, {pe}, {K}, {A}, {pk}, {bias}, {rowsum}, {sc}, "
            f"{_clamp_args(plan)}, {yext}, {pe}, 1);",
            f"  o2e_qcompact({yext}, {M}, {OH}, {OW}, {wp}, {yp} + n * {M * P});",
            "}",
        ]
        return "\n".join(lines)
    ctx.kernel("int8 gemm 1x1" if pointwise else "int8 im2col gemm")
    pk = ctx.scratch(_panel_bytes(K, P), "uint8_t")
    src = "xn"
    if not pointwise:
        col = ctx.scratch(K * P, "uint8_t")
        lines.append(
            f"  o2e_qim2col(xn, {C}, {H}, {W}, {OH}, {OW}, {geo}, (uint8_t){padv}, {col});"
        )
        src = col
    lines += [
        f"  o2e_qpack_rows({src}, {P}, {K}, {P}, {_flip(plan)}, {pk});",
        f"  o2e_qgemm({M}, {P}, {K}, {A}, {pk}, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, "
        f"{yp} + n * {M * P}, {P}, 1);",
        "}",
    ]
    return "\n".join(lines)


def _matmul(ctx: NodeContext, plan: Int8Plan) -> str:
    a, y = ctx.x(0), ctx.y(0)
    K, N = plan.w.shape[1], plan.w.shape[0]
    R = a.size // K
    A, bias, rowsum, sc = _consts(ctx, plan)
    pk = ctx.scratch(_panel_bytes(K, R), "uint8_t")
    ctx.kernel("int8 gemm (matmul)")
    return (
        f"o2e_qpack_cols((const uint8_t *){a.sym}, {R}, {K}, {_flip(plan)}, {pk});\n"
        f"o2e_qgemm({N}, {R}, {K}, {A}, {pk}, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, "
        f"(uint8_t *){y.sym}, 1, {N});"
    )


def try_int8(ctx: NodeContext) -> str | None:
    """The int8 kernels' code for this node, or None when they cannot run it."""
    plan = int8_plan(ctx.graph, ctx.node)
    if plan is None:
        return None
    _use(ctx)
    return _conv(ctx, plan) if ctx.node.op_type == "QLinearConv" else _matmul(ctx, plan)


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
    axis = int(ctx.attr("axis", 0)) % y.rank
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
    kh, kw = ctx.attr("kernel_shape")
    sh, sw = ctx.attr("strides", [1, 1])
    pads = ctx.attr("pads", [0, 0, 0, 0])
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
    """QLinearAdd as onnxruntime's reference kernel (mlas qladd.cpp) computes it:
    saturate(round_half_even((sa * (a - za) + sb * (b - zb)) / sc) + zc), in float32; a fused
    Relu / Clip narrows the clamp (passes/qdq_int8._clamp_bounds)."""
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
