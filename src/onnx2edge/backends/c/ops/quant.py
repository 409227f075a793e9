"""Quantization: QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, and the integer
matrix product nn.py's MatMul can hand integer inputs to (`integer_matmul`).

The integer ops work as the ONNX reference does (onnx/reference/ops/op_qlinear_*.py): subtract
the zero points into int32, multiply-accumulate in int32, then requantize
`saturate(round_half_even(acc * (a_scale * b_scale / y_scale)) + y_zero_point)`, the multiplier
in the scales' type and the product in double, as numpy computes int32 * float32.
Zero points subtracted from constant weights are folded at conversion time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ....ir import Graph, Node
from ....passes.qdq_int8 import Int8Plan, int8_plan
from ....semantics.conv_geometry import conv_geometry
from ....semantics.fused import activation_of
from ....semantics.numeric import quant_attrs
from ..emitter import NodeContext, Tensor, ctype_of
from ..kernels.int8.qdw_kernels import try_quantize
from ..kernels.int8.qgemm_kernels import try_int8
from ..strategy import AUTO, Strategy, select
from . import register_op
from .common import elementwise, strides
from .dtypes import (
    FLOAT_FORMATS,
    allow_storage_dtypes,
    is_float,
    load_expr,
    loader,
    name_of,
    need,
    store_expr,
)

MATMUL_CHUNK = 256  # columns of C accumulated at once (a local array)

# saturation ranges of the integer quantized types (QuantizeLinear spec)
QRANGE = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}


def _view(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The same buffer seen with another shape (for broadcasting)."""
    return Tensor(t.name, t.sym, tuple(shape), t.dtype, t.kind)


def _int_buffer(
    ctx: NodeContext, name: str, shape: tuple[int, ...], dtype: type = np.int32
) -> Tensor:
    """Scratch memory of this node holding an integer tensor."""
    dt = np.dtype(dtype)
    sym = ctx.scratch(max(int(np.prod(shape)), 1) * dt.itemsize, ctype_of(dt))
    return Tensor(f"{ctx.node.name}_{name}", sym, tuple(shape), dt, "arena")


def _round_to(ctx: NodeContext, dtype: np.dtype, expr: str) -> str:
    """`expr` (float) rounded to float16 / bfloat16 as numpy rounds each float16 operation."""
    n = name_of(dtype)
    if n == "float16":
        return f"{need(ctx, 'o2e_h2f')}({need(ctx, 'o2e_f2h')}({expr}))"
    if n == "bfloat16":
        return f"{need(ctx, 'o2e_bf2f')}({need(ctx, 'o2e_f2bf')}({expr}))"
    return expr


# --------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# --------------------------------------------------------------------------------------------
def _granularity(
    node: Node, x_shape: tuple[int, ...], s_shape: tuple[int, ...], opset: int
) -> tuple[int, int]:
    """(axis, block): axis -1 means per tensor, block 0 per axis."""
    if int(np.prod(s_shape)) == 1 and len(s_shape) <= 1:
        return -1, 0
    qa = quant_attrs(node, opset)
    return qa.scale_axis(len(x_shape)), qa.block_size


def _qdq_check(node: Node, graph: Graph) -> str | None:
    x, s = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    if x is None or s is None or not x.is_static or not s.is_static:
        return None
    axis, block = _granularity(node, x.static_shape, s.static_shape, graph.opset)
    if (
        axis >= 0
        and not block
        and (len(s.static_shape) != 1 or s.static_shape[0] != x.static_shape[axis])
    ):
        return f"scale of shape {list(s.static_shape)} fits neither per-tensor nor per-axis quantization"
    y = graph.type_of(node.outputs[0])
    if (
        node.op_type == "QuantizeLinear"
        and y is not None
        and y.dtype.name not in QRANGE
        and y.dtype.name not in FLOAT_FORMATS
    ):
        return f"QuantizeLinear to {y.dtype.name} is not supported"
    if (
        node.op_type == "DequantizeLinear"
        and x.dtype.name not in QRANGE
        and x.dtype.name not in FLOAT_FORMATS
    ):
        if x.dtype.name != "int32":
            return f"DequantizeLinear of {x.dtype.name} is not supported"
    return None


def _qdq_loop(ctx: NodeContext, x: Tensor, scale: Tensor, body: Callable[[str, str], str]) -> str:
    """Loops over x; `body(xi, si)` gets the element index and its scale / zero-point index."""
    axis, block = _granularity(ctx.node, x.shape, scale.shape, ctx.graph.opset)
    if x.size == 0:
        return "/* empty tensor */"
    if axis < 0:
        return f"for (size_t i = 0; i < {x.size}; ++i) {{\n  {body('i', '0')}\n}}"
    outer, d, inner = int(np.prod(x.shape[:axis])), x.shape[axis], int(np.prod(x.shape[axis + 1 :]))
    if block:  # blocked: scale shape is x's with ceil(d / block) along the axis
        nb = -(-d // block)
        si = f"(o * {nb} + a / {block}) * {inner} + i"
    else:
        si = "a"
    return (
        f"for (size_t o = 0; o < {outer}; ++o)\n"
        f"  for (size_t a = 0; a < {d}; ++a)\n"
        f"    for (size_t i = 0; i < {inner}; ++i) {{\n"
        f"      const size_t xi = (o * {d} + a) * {inner} + i;\n"
        f"      {body('xi', si)}\n"
        "    }"
    )


def _quant_dtype(ctx: NodeContext, x: Tensor, scale: Tensor) -> np.dtype:
    """The type x / scale is computed in: `precision` if given, else numpy's promotion (the reference)."""
    p = quant_attrs(ctx.node, ctx.graph.opset).precision
    if p:
        from onnx.helper import tensor_dtype_to_np_dtype

        return np.dtype(tensor_dtype_to_np_dtype(p))
    try:
        return np.result_type(x.dtype, scale.dtype)
    except TypeError:
        return np.dtype(np.float32)


@register_op("QuantizeLinear", check=_qdq_check)
def quantize_linear(ctx: NodeContext) -> str:
    """y = saturate(round_half_even(x / y_scale) + y_zero_point); float8 targets saturate per
    `saturate`, float4 always (QuantizeLinear spec)."""
    x, s, y = ctx.x(0), ctx.x(1), ctx.y(0)
    zp = ctx.x(2) if ctx.has_input(2) else None
    qd = _quant_dtype(ctx, x, s)
    axis = _granularity(ctx.node, x.shape, s.shape, ctx.graph.opset)[0]
    if (code := try_quantize(ctx, axis < 0, qd)) is not None:
        return code
    ct = "double" if qd == np.float64 else "float"
    F = "" if ct == "double" else "f"
    yn = name_of(y.dtype)

    def body(xi: str, si: str) -> str:
        xv = f"({ct}){load_expr(ctx, x.dtype, f'{x.sym}[{xi}]')}"
        sv = f"({ct}){load_expr(ctx, s.dtype, f'{s.sym}[{si}]')}"
        q = _round_to(ctx, qd, f"{xv} / {sv}")
        if yn in QRANGE:
            lo, hi = QRANGE[yn]
            z = f" + ({ct}){load_expr(ctx, zp.dtype, f'{zp.sym}[{si}]')}" if zp is not None else ""
            v = f"const {ct} v = nearbyint{F}({q}){z};"
            # NaN fails both tests and lands on the minimum, as in the reference
            return f"{v} {y.sym}[{xi}] = {store_expr(ctx, y.dtype, f'!(v >= {lo}) ? {lo} : (v > {hi} ? {hi} : v)', src='int64_t')};"
        if yn == "float4_e2m1fn" and zp is not None:
            q = f"{q} + {load_expr(ctx, zp.dtype, f'{zp.sym}[{si}]')}"
        sat = quant_attrs(ctx.node, ctx.graph.opset).saturate
        return f"{y.sym}[{xi}] = {store_expr(ctx, y.dtype, q, src=ct, saturate=sat)};"

    return _qdq_loop(ctx, x, s, body)


@register_op("DequantizeLinear", check=_qdq_check)
def dequantize_linear(ctx: NodeContext) -> str:
    """y = (x - x_zero_point) * x_scale in float, stored in the output type (scale's, or
    output_dtype). Float8 and float4 inputs have no zero point to subtract (the reference)."""
    x, s, y = ctx.x(0), ctx.x(1), ctx.y(0)
    zp = ctx.x(2) if ctx.has_input(2) else None
    xn = name_of(x.dtype)

    def body(xi: str, si: str) -> str:
        xv = load_expr(ctx, x.dtype, f"{x.sym}[{xi}]")
        sv = load_expr(ctx, s.dtype, f"{s.sym}[{si}]")
        if zp is not None and not is_float(x.dtype):
            zv = load_expr(ctx, zp.dtype, f"{zp.sym}[{si}]")
            # integer subtraction is exact; int32 - int32 as onnxruntime does it
            dx = (
                f"(float)((int64_t){xv} - (int64_t){zv})"
                if xn in ("int32", "uint32")
                else f"(float)({xv} - {zv})"
            )
        else:
            dx = f"(float){xv}"
        return f"{y.sym}[{xi}] = {store_expr(ctx, y.dtype, f'{dx} * (float){sv}')};"

    return _qdq_loop(ctx, x, s, body)


@register_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext) -> str:
    """uint8 quantization with the range of x (stretched to include 0), as the spec's function."""
    x, y = ctx.x(0), ctx.y(0)
    ys = ctx.y(1).sym if ctx.has_output(1) else None
    yz = ctx.y(2).sym if ctx.has_output(2) else None
    lines = [
        "float mn = 0.0f, mx = 0.0f, scale, zp;",
        f"for (size_t i = 0; i < {x.size}; ++i) {{",
        f"  const float v = {x.sym}[i];",
        "  if (v < mn) mn = v;",
        "  if (v > mx) mx = v;",
        "}",
        "scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;",
        "zp = 0.0f - mn / scale;",
        "zp = nearbyintf(zp < 0.0f ? 0.0f : (zp > 255.0f ? 255.0f : zp));",
        f"for (size_t i = 0; i < {x.size}; ++i) {{",
        f"  const float v = nearbyintf({x.sym}[i] / scale) + zp;",
        f"  {y.sym}[i] = (uint8_t)(!(v >= 0.0f) ? 0.0f : (v > 255.0f ? 255.0f : v));",
        "}",
    ]
    if ys:
        lines.append(f"{ys}[0] = scale;")
    if yz:
        lines.append(f"{yz}[0] = (uint8_t)zp;")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# integer matrix products
# --------------------------------------------------------------------------------------------
def _minus_zero_point(
    ctx: NodeContext,
    name: str,
    t: Tensor,
    zp: Tensor | None,
    zp_shape: tuple[int, ...] | None = None,
) -> tuple[Tensor, str]:
    """t - zp (numpy broadcasting of zp against t): a folded constant when both are known, else
    code filling a scratch buffer. Returns the tensor and its code. 8-bit values minus 8-bit
    zero points fit int16, which halves the memory of folded weights against int32."""
    tc = ctx.graph.const(t.name) if t.kind == "const" else None
    zc = None if zp is None else (ctx.graph.const(zp.name) if zp.kind == "const" else None)
    zshape = zp_shape or (zp.shape if zp is not None else ())
    small = np.dtype(t.dtype).itemsize == 1 and (zp is None or np.dtype(zp.dtype).itemsize == 1)
    dt = np.dtype(np.int16 if small else np.int32)
    if tc is not None and (zp is None or zc is not None):
        v = tc.astype(np.int32) - (0 if zc is None else zc.astype(np.int32).reshape(zshape))
        return Tensor(t.name, ctx.weight(name, v.astype(dt)), t.shape, dt, "const"), ""
    buf = _int_buffer(ctx, name, t.shape, dt)
    ops = [t] if zp is None else [t, _view(zp, zshape)]
    expr = "(int32_t)a" if zp is None else "(int32_t)a - (int32_t)b"
    return buf, elementwise(ctx, ops, buf, expr)


def _matmul_code(a: Tensor, b: Tensor, y: Tensor, acc: str = "uint32_t") -> str:
    """y = a @ b (numpy.matmul, broadcast batch dims) for integer buffers, accumulated in the
    unsigned type `acc`: the accumulation wraps as the spec allows, without C's signed overflow."""
    ash, bsh = list(a.shape), list(b.shape)
    if len(ash) == 1:
        ash = [1, *ash]
    if len(bsh) == 1:
        bsh = [*bsh, 1]
    M, K, N = ash[-2], ash[-1], bsh[-1]
    batch = list(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
    nb = int(np.prod(batch)) if batch else 1
    if nb * M * N == 0:
        return "/* empty */"

    def bstrides(shape: list[int], mat: int) -> list[int]:
        pad = [1] * (len(batch) - len(shape)) + shape
        st = strides(tuple(pad)) if pad else []
        # a dim of size 1 in the broadcast batch is only ever index 0: no offset (and no d<i>
        # index, which is not declared when the whole batch is a single matrix)
        return [0 if pad[d] == 1 or batch[d] == 1 else st[d] * mat for d in range(len(batch))]

    a_st, b_st = bstrides(ash[:-2], M * K), bstrides(bsh[:-2], K * N)
    aoff, boff, rem, decl = [], [], "bi", []
    for d in reversed(range(len(batch))):
        if batch[d] == 1:
            continue
        decl.append(f"const size_t d{d} = {rem} % {batch[d]};")
        rem = f"({rem} / {batch[d]})"
        if a_st[d]:
            aoff.append(f"d{d} * {a_st[d]}")
        if b_st[d]:
            boff.append(f"d{d} * {b_st[d]}")
    # rows of C accumulate in a bounded local buffer, the inner loop streaming rows of B
    nj = min(N, MATMUL_CHUNK)
    if nj == N:
        row = f"""{acc} row[{N}] = {{0}};
    for (size_t k = 0; k < {K}; ++k) {{
      const {acc} av = ({acc})A[i * {K} + k];
      for (size_t j = 0; j < {N}; ++j) row[j] += av * ({acc})B[k * {N} + j];
    }}
    for (size_t j = 0; j < {N}; ++j) C[i * {N} + j] = ({y.ctype})row[j];"""
    else:
        row = f"""for (size_t j0 = 0; j0 < {N}; j0 += {nj}) {{
      const size_t nj = {N} - j0 < {nj} ? {N} - j0 : {nj};
      {acc} row[{nj}] = {{0}};
      for (size_t k = 0; k < {K}; ++k) {{
        const {acc} av = ({acc})A[i * {K} + k];
        for (size_t j = 0; j < nj; ++j) row[j] += av * ({acc})B[k * {N} + j0 + j];
      }}
      for (size_t j = 0; j < nj; ++j) C[i * {N} + j0 + j] = ({y.ctype})row[j];
    }}"""
    body = f"""const {a.ctype} *A = {a.sym} + {" + ".join(aoff) or "0"};
const {b.ctype} *B = {b.sym} + {" + ".join(boff) or "0"};
{y.ctype} *C = {y.sym}{f" + bi * {M * N}" if nb > 1 else ""};
for (size_t i = 0; i < {M}; ++i) {{
  {row.replace(chr(10) + "    ", chr(10) + "  ")}
}}"""
    if nb == 1:
        return "{\n" + _indent(body) + "\n}"
    return (
        f"for (size_t bi = 0; bi < {nb}; ++bi) {{\n" + _indent(" ".join(decl) + "\n" + body) + "\n}"
    )


def _indent(code: str) -> str:
    return "\n".join("  " + ln if ln else ln for ln in code.split("\n"))


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape with 1-D operands kept as matrices (the buffers are the same)."""
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    return (*np.broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])


def _zp_shape(zp: Tensor | None, along: int, rank: int) -> tuple[int, ...] | None:
    """A 1-D per-row / per-column zero point as a shape broadcasting along dim `along` (-2 rows, -1 columns)."""
    if zp is None or zp.size == 1 or len(zp.shape) != 1:
        return None
    shape = [1] * max(rank, 2)
    shape[along] = zp.shape[0]
    return tuple(shape)


def integer_matmul(ctx: NodeContext) -> str:
    """MatMul on integer types (int32 / int64 / uint32 / uint64 in the spec, any width here), for
    nn.py's MatMul to hand integer inputs to: numpy.matmul's wrap-around, accumulated in 64 bits
    for 64-bit outputs, else 32."""
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    acc = "uint64_t" if np.dtype(y.dtype).itemsize == 8 else "uint32_t"
    return _matmul_code(a, b, _view(y, _matmul_shape(a.shape, b.shape)), acc)


@register_op("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> str:
    """int32 (A - a_zero_point) @ (B - b_zero_point); b_zero_point may be per column."""
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    azp = ctx.x(2) if ctx.has_input(2) else None
    bzp = ctx.x(3) if ctx.has_input(3) else None
    a32, ca = _minus_zero_point(ctx, "A", a, azp, _zp_shape(azp, -2, a.rank))
    b32, cb = _minus_zero_point(ctx, "B", b, bzp, _zp_shape(bzp, -1, b.rank))
    return "\n".join(
        filter(None, [ca, cb, _matmul_code(a32, b32, _view(y, _matmul_shape(a.shape, b.shape)))])
    )


def _requantize(
    ctx: NodeContext,
    acc: Tensor,
    scales: list[Tensor],
    y: Tensor,
    yzp: Tensor | None,
    shapes: list[tuple[int, ...]],
) -> str:
    """y = saturate(round_half_even(acc * (s0 * s1 / s2)) + y_zp), broadcasting every operand.

    The multiplier is computed in the scales' type (float16 rounds each step, as numpy does);
    the product in double, as numpy computes int32 * float32."""
    st = scales[0].dtype
    lo, hi = QRANGE[name_of(y.dtype)]
    mult = _round_to(ctx, st, f"{_round_to(ctx, st, 'b * c')} / d")
    ops = [acc, *(_view(s, sh) for s, sh in zip(scales, shapes, strict=True))]
    z = ""
    if yzp is not None:
        ops.append(_view(yzp, shapes[2]))
        z = " + e"
    sat = ctx.helper(f"o2e_sat_{name_of(y.dtype)}", _sat_helper(name_of(y.dtype), lo, hi))
    v = f"nearbyint((double)a * (double)({mult})){z}"
    return elementwise(ctx, ops, y, v, load=loader(ctx), store=lambda e: f"({y.ctype}){sat}({e})")


def _sat_helper(name: str, lo: int, hi: int) -> str:
    return f"""/* saturate to the {name} range [{lo}, {hi}] (NaN -> {lo}) */
static inline double o2e_sat_{name}(double v) {{ return !(v >= {lo}) ? {lo} : (v > {hi} ? {hi} : v); }}"""


def _qmatmul_check(node: Node, graph: Graph) -> str | None:
    for i in (0, 3, 7):
        t = graph.type_of(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None
        if t is not None and t.dtype.name not in ("int8", "uint8"):
            return f"QLinearMatMul on {t.dtype.name} is not supported (int8 / uint8 only)"
    return None


@register_op("QLinearMatMul", check=_qmatmul_check)
def qlinear_matmul(ctx: NodeContext) -> str:
    fast = try_int8(ctx)
    if fast is not None:
        return fast
    a, asc, b, bsc, ysc, y = ctx.x(0), ctx.x(1), ctx.x(3), ctx.x(4), ctx.x(6), ctx.y(0)
    azp = ctx.x(2) if ctx.has_input(2) else None
    bzp = ctx.x(5) if ctx.has_input(5) else None
    yzp = ctx.x(7) if ctx.has_input(7) else None
    a32, ca = _minus_zero_point(ctx, "A", a, azp, _zp_shape(azp, -2, a.rank))
    b32, cb = _minus_zero_point(ctx, "B", b, bzp, _zp_shape(bzp, -1, b.rank))
    cshape = _matmul_shape(a.shape, b.shape)
    c32 = _int_buffer(ctx, "C", cshape)
    # per-row a_scale: [M] -> [M, 1]; per-column b_scale: [N] -> [1, N]; y per tensor
    shapes = [
        _zp_shape(asc, -2, len(cshape)) or asc.shape,
        _zp_shape(bsc, -1, len(cshape)) or bsc.shape,
        ysc.shape,
    ]
    req = _requantize(ctx, c32, [asc, bsc, ysc], _view(y, cshape), yzp, shapes)
    return "\n".join(filter(None, [ca, cb, _matmul_code(a32, b32, c32), req]))


# --------------------------------------------------------------------------------------------
# integer convolution
# --------------------------------------------------------------------------------------------
def _conv_int(ctx: NodeContext, x: Tensor, w: Tensor, y: Tensor, bias: Tensor | None) -> str:
    """Direct N-d convolution of integer buffers (zero padding) into int32, accumulating in
    wrapping 32 bits (ConvInteger spec)."""
    nsp = x.rank - 2
    N, C = x.shape[:2]
    M = w.shape[0]
    geo = conv_geometry(ctx.node, x.shape, w.shape, y.shape, ctx.graph.opset)
    ks, st, dl, pads, g = geo.kernel, geo.strides, geo.dilations, geo.pads, geo.group
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    cg, mg = C // g, M // g
    isz, osz, ksz = int(np.prod(in_sp)), int(np.prod(out_sp)), int(np.prod(ks))
    lines = [
        f"for (size_t n = 0; n < {N}; ++n)",
        f"  for (size_t m = 0; m < {M}; ++m) {{",
        f"    const size_t g = m / {mg};",
        f"    int32_t *yo = {y.sym} + (n * {M} + m) * {osz};",
    ]
    for d in range(nsp):
        lines.append("    " + "  " * d + f"for (long o{d} = 0; o{d} < {out_sp[d]}; ++o{d})")
    ind = "    " + "  " * nsp
    lines.append(ind + "{")
    lines.append(
        ind + f"  uint32_t acc = {f'(uint32_t){bias.sym}[m]' if bias is not None else '0'};"
    )
    lines.append(ind + f"  for (size_t c = 0; c < {cg}; ++c) {{")
    lines.append(ind + f"    const {x.ctype} *xc = {x.sym} + (n * {C} + g * {cg} + c) * {isz};")
    lines.append(ind + f"    const {w.ctype} *wc = {w.sym} + (m * {cg} + c) * {ksz};")
    for d in range(nsp):
        lines.append(ind + "    " + "  " * d + f"for (long k{d} = 0; k{d} < {ks[d]}; ++k{d}) {{")
        lines.append(
            ind
            + "    "
            + "  " * d
            + f"  const long i{d} = o{d} * {st[d]} - {pads[d]} + k{d} * {dl[d]};"
        )
        lines.append(ind + "    " + "  " * d + f"  if (i{d} < 0 || i{d} >= {in_sp[d]}) continue;")
    xoff = woff = "0"
    for d in range(nsp):
        xoff = f"({xoff} * {in_sp[d]} + i{d})" if xoff != "0" else f"i{d}"
        woff = f"({woff} * {ks[d]} + k{d})" if woff != "0" else f"k{d}"
    lines.append(ind + "    " + "  " * nsp + f"acc += (uint32_t)xc[{xoff}] * (uint32_t)wc[{woff}];")
    for d in reversed(range(nsp)):
        lines.append(ind + "    " + "  " * d + "}")
    lines.append(ind + "  }")
    yoff = "0"
    for d in range(nsp):
        yoff = f"({yoff} * {out_sp[d]} + o{d})" if yoff != "0" else f"o{d}"
    lines.append(ind + f"  yo[{yoff}] = (int32_t)acc;")
    lines.append(ind + "}")
    lines.append("  }")
    return "\n".join(lines)


def _conv_int_check(node: Node, graph: Graph) -> str | None:
    w = graph.type_of(node.inputs[1 if node.op_type == "ConvInteger" else 3])
    if w is None or w.shape is None or len(w.shape) < 3:
        return "weights of unknown rank"
    if activation_of(node) is not None and int8_plan(graph, node) is None:
        # o2e.QLinearConvAct: its clamp lives in the int8 kernels, the reference loops have none
        return "fused activation on a QLinearConv the int8 kernels cannot run"
    return None


def _conv_operands(
    ctx: NodeContext, xi: int, xzi: int, wi: int, wzi: int
) -> tuple[Tensor, Tensor, list[str]]:
    x, w = ctx.x(xi), ctx.x(wi)
    xzp = ctx.x(xzi) if ctx.has_input(xzi) else None
    wzp = ctx.x(wzi) if ctx.has_input(wzi) else None
    # w_zero_point may be per output channel: [M] -> [M, 1, 1, ...]
    wshape = (wzp.shape[0], *[1] * (w.rank - 1)) if wzp is not None and wzp.size > 1 else None
    x32, cx = _minus_zero_point(ctx, "X", x, xzp)
    w32, cw = _minus_zero_point(ctx, "W", w, wzp, wshape)
    return x32, w32, [c for c in (cx, cw) if c]


@register_op("ConvInteger", check=_conv_int_check)
def conv_integer(ctx: NodeContext) -> str:
    x32, w32, code = _conv_operands(ctx, 0, 2, 1, 3)
    return "\n".join([*code, _conv_int(ctx, x32, w32, ctx.y(0), None)])


@dataclass(frozen=True)
class QConvSpec:
    """A QLinearConv (or o2e.QLinearConvAct) as its strategies see it: the int8 kernels' plan
    (passes/qdq_int8.int8_plan; None when they cannot run it) and the conversion's options."""

    node: Node
    plan: Int8Plan | None = field(compare=False, repr=False)
    kernels: Mapping[str, str] = field(default_factory=dict)  # convert --kernels

    @classmethod
    def of(cls, ctx: NodeContext) -> QConvSpec:
        return cls(ctx.node, int8_plan(ctx.graph, ctx.node), ctx.kernel_options)


def _refuse_int8(spec: QConvSpec) -> str | None:
    if spec.plan is None:
        return (
            "operands the int8 kernels cannot run (passes/qdq_int8.int8_plan: constant weights, "
            "scales and zero points, int8/uint8 types, static shapes, 2-D, plain or depthwise)"
        )
    return None


def _emit_int8(ctx: NodeContext, spec: QConvSpec) -> str:
    code = try_int8(ctx)
    assert code is not None, "qgemm_kernels.try_int8 refused a plan int8_plan made"
    return code


def _take_any(spec: QConvSpec) -> str | None:
    return None


def _emit_reference(ctx: NodeContext, spec: QConvSpec) -> str:
    """ConvInteger plus the int32 bias, requantized with x_scale * w_scale[m] / y_scale: the
    reference loops, any QLinearConv."""
    y = ctx.y(0)
    x32, w32, code = _conv_operands(ctx, 0, 2, 3, 5)
    bias = ctx.x(8) if ctx.has_input(8) else None
    acc = _int_buffer(ctx, "acc", y.shape)
    xs, ws, ys = ctx.x(1), ctx.x(4), ctx.x(6)
    per_channel = (1, ws.size, *[1] * (y.rank - 2)) if ws.size > 1 else ws.shape
    yzp = ctx.x(7) if ctx.has_input(7) else None
    req = _requantize(ctx, acc, [xs, ws, ys], y, yzp, [xs.shape, per_channel, ys.shape])
    return "\n".join([*code, _conv_int(ctx, x32, w32, acc, bias), req])


# Preference order. The int8 kernels cannot be switched off: o2e.QLinearConvAct's clamp lives in
# them alone (the check refuses the node when they cannot run it).
QCONV_STRATEGIES: tuple[Strategy[QConvSpec], ...] = (
    Strategy("int8_gemm", _refuse_int8, _emit_int8, settings=(AUTO,)),
    Strategy("qconv_reference", _take_any, _emit_reference, settings=(AUTO,)),
)


@register_op("QLinearConv", check=_conv_int_check)
def qlinear_conv(ctx: NodeContext) -> str:
    """The int8 kernels (qint8.py) take it when they can (always for o2e.QLinearConvAct, see
    the check); the loops are the reference."""
    spec = QConvSpec.of(ctx)
    return select(ctx, QCONV_STRATEGIES, spec).emit(ctx, spec)


allow_storage_dtypes("QuantizeLinear", "DequantizeLinear", "QLinearMatMul")
