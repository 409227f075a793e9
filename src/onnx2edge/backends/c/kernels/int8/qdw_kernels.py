"""Call sites of runtime/o2e_qdw.h: the int8 depthwise convolution vectorised across channels
(o2e_qdwc) and the quantized Add (o2e_qadd). A helper module (it registers no op), used by
qgemm_kernels.py (QLinearConv, depthwise) and qint8.py (o2e QAdd)."""

from __future__ import annotations

import numpy as np

from .....passes.qdq_int8 import Int8Plan
from ...emitter import NodeContext, c_literal
from ..gemm.gemm import plan_threads
from ..par_split import PAR_MIN_US as PAR_MIN_US  # the int8 modules' (and tests') name
from ..par_split import (
    RATE_INT8_BYTES,
    RATE_INT8_DW,
    RATE_INT8_LUT,
    RATE_INT8_MACS,
    min_work,
    split,
)

HEADER = "o2e_qdw.h"
CB = 16  # O2E_QDWC_CB: channels per block (one AVX-512 register of int32 sums)
PAR_BYTES = 4096  # O2E_QPAR_BYTES: the element-wise kernels' unit of a thread split

# The int8 kernels' thresholds: PAR_MIN_US of each kernel's single-thread rate (the one rule
# for every kernel's split, ../par_split.py).
PAR_MIN_MACS = min_work(RATE_INT8_MACS)
PAR_MIN_DW = min_work(RATE_INT8_DW)
PAR_MIN_BYTES = min_work(RATE_INT8_BYTES)
PAR_MIN_LUT = min_work(RATE_INT8_LUT)
SLOT_ALIGN = 64  # per-thread scratch slots start on cache lines


def slot_bytes(n: int) -> int:
    return -(-max(n, 1) // SLOT_ALIGN) * SLOT_ALIGN


PAR = "o2e_parallel_for"
PAR_THREAD = "o2e_parallel_for, o2e_parallel_thread"


def units_wrapper(ctx: NodeContext, name: str, args_type: str, call: str) -> str:
    """A work-unit function of one layer's geometry: `call` (an always_inline *_k_ body of the
    runtime, given `a`, `u0`, `u1` and the dimensions as constants) in a static function that
    o2e_parallel_for can call; shared by the layers of the same geometry. Its name."""
    ctx.helper(
        name,
        f"static void {name}(void *arg, int u0, int u1) {{\n"
        f"  const {args_type} *a = (const {args_type} *)arg;\n"
        f"  {call};\n}}",
    )
    return name


def use_runtime(ctx: NodeContext) -> None:
    ctx.helper("o2e_qdw_include", f'#include "{HEADER}"')
    ctx.require_runtime(HEADER)


def _pad16(v: np.ndarray) -> np.ndarray:
    """Pad the first axis to a multiple of CB with zeros."""
    n = -(-v.shape[0] // CB) * CB
    out = np.zeros((n, *v.shape[1:]), v.dtype)
    out[: v.shape[0]] = v
    return out


def pack_depthwise(w: np.ndarray) -> np.ndarray:
    """int8 [C, T] (T taps) -> int32 [ceil(C/16)][T][16], zero past C (o2e_qdwc's layout)."""
    C, T = w.shape
    wp = _pad16(w.astype(np.int32))
    return np.ascontiguousarray(wp.reshape(-1, CB, T).transpose(0, 2, 1))


def tap_offsets(kh: int, kw: int, dh: int, dw: int, wp: int) -> np.ndarray:
    """Offset of tap (ky, kx) in the plane of Wp 16-lane pixels, in int16 elements."""
    ky, kx = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    return ((ky * dh * wp + kx * dw) * CB).reshape(-1).astype(np.int32)


def depthwise_bias(bias: np.ndarray, w: np.ndarray, xz: int) -> np.ndarray:
    """bias - xz * sum_t w[c][t] as int32 (wrapping, as the kernel's sums do): o2e_qdwc's plane
    holds the bytes x, not x - xz, so the zero point's share of every sum moves here."""
    b = bias.astype(np.int64) - xz * w.astype(np.int64).sum(axis=1)
    return ((b + 2**31) % 2**32 - 2**31).astype(np.int32)


def depthwise_consts(
    ctx: NodeContext,
    plan: Int8Plan,
    kernel: tuple[int, int],
    dl: list[int],
    wp: int,
    prefix: str = "",
) -> tuple[str, str, str, str]:
    """o2e_qdwc's constants as C symbols: packed weights, tap offsets into a plane of wp
    pixels, the bias with the input zero point's share and the scales (prefix: a name part,
    for a node that holds another node's depthwise layer, qdwpw.py)."""
    xz = plan.x_zp + (128 if plan.x_signed else 0)
    return (
        ctx.weight(prefix + "qWc", pack_depthwise(plan.w)),
        ctx.weight(prefix + "qtap", tap_offsets(kernel[0], kernel[1], dl[0], dl[1], wp)),
        ctx.weight(prefix + "qbias16", _pad16(depthwise_bias(plan.bias, plan.w, xz))),
        ctx.weight(prefix + "qscale16", _pad16(plan.scale.astype(np.float32))),
    )


def depthwise(
    ctx: NodeContext,
    plan: Int8Plan,
    kernel: tuple[int, int],
    st: list[int],
    dl: list[int],
    pads: list[int],
) -> str:
    """QLinearConv with one channel per group, batch by batch."""
    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    kh, kw = kernel
    hp = (OH - 1) * st[0] + (kh - 1) * dl[0] + 1
    wp = (OW - 1) * st[1] + (kw - 1) * dl[1] + 1
    use_runtime(ctx)
    xz = plan.x_zp + (128 if plan.x_signed else 0)
    flip = "0x80" if plan.x_signed else "0"
    geo = f"{kh}, {kw}, {st[0]}, {st[1]}, {pads[0]}, {pads[1]}, {dl[0]}, {dl[1]}"
    if ctx.device.is_mcu:
        # channel by channel into an int16 plane (o2e_qdwn: SMLAD on tap pairs with the DSP
        # extension): no channel-block transposes, which a microcontroller has no vectors for
        ctx.kernel("int8 depthwise (channel planes)")
        w = ctx.weight("qWc", pack_depthwise(plan.w))
        bias = ctx.weight("qbias16", _pad16(depthwise_bias(plan.bias, plan.w, xz)))
        sc = ctx.weight("qscale16", _pad16(plan.scale.astype(np.float32)))
        plane = ctx.scratch(hp * wp * 2, "uint8_t")
        return (
            f"for (size_t n = 0; n < {N}; ++n)\n"
            f"  o2e_qdwn({C}, {H}, {W}, {OH}, {OW}, {geo}, "
            f"(const uint8_t *){x.sym} + n * {C * H * W}, {flip}, {xz}, {w}, {bias}, {sc}, "
            f"{plan.y_zp}, {plan.lo}, {plan.hi}, (uint8_t *){y.sym} + n * {C * OH * OW}, {plane});"
        )
    ctx.kernel("int8 depthwise (channel blocks)")
    w, off, bias, sc = depthwise_consts(ctx, plan, kernel, dl, wp)
    tile_bytes = -(-OH * OW // 16) * 16 * CB
    blocks = -(-C // CB)
    if split(ctx, N * C * (H * W + OH * OW * kh * kw), blocks, PAR_MIN_DW):
        # channel blocks across threads, each with its own plane + tile (o2e_qdwc_mt)
        pbytes = slot_bytes(hp * wp * CB)
        slot = slot_bytes(pbytes + tile_bytes)
        ws = ctx.scratch(slot * plan_threads(ctx), "uint8_t")
        dims = f"{C}, {H}, {W}, {OH}, {OW}, {geo}"
        units = units_wrapper(
            ctx,
            "o2e_qdu_" + dims.replace(", ", "_"),
            "o2e_qdwc_par_args",
            f"o2e_qdwc_units_k_(a, u0, u1, {dims})",
        )
        return (
            f"for (size_t n = 0; n < {N}; ++n)\n"
            f"  o2e_qdwc_mt({C}, {H}, {W}, {OH}, {OW}, {geo}, "
            f"(const uint8_t *){x.sym} + n * {C * H * W}, {flip}, {xz}, {w}, {off}, {bias}, "
            f"{sc}, {plan.y_zp}, {plan.lo}, {plan.hi}, (uint8_t *){y.sym} + n * {C * OH * OW}, "
            f"{ws}, {slot}, {pbytes}, {PAR_THREAD}, {units});"
        )
    plane = ctx.scratch(hp * wp * CB, "uint8_t")
    tile = ctx.scratch(tile_bytes, "uint8_t")
    return (
        f"for (size_t n = 0; n < {N}; ++n)\n"
        f"  o2e_qdwc({C}, {H}, {W}, {OH}, {OW}, {geo}, (const uint8_t *){x.sym} + n * {C * H * W}, "
        f"{flip}, {xz}, {w}, {off}, {bias}, {sc}, {plan.y_zp}, {plan.lo}, {plan.hi}, "
        f"(uint8_t *){y.sym} + n * {C * OH * OW}, {plane}, {tile});"
    )


def qadd_constants(
    sa: float, za: int, sb: float, zb: int, sc: float, zc: int
) -> tuple[np.float32, np.float32, np.float32]:
    """sa / sc, sb / sc and the fixed part zc - (sa/sc * za + sb/sc * zb), each step in float32
    as onnxruntime's x86 QLinearAdd computes them (its compiler fuses the sum of products into
    one fma: checked against onnxruntime over every pair of input bytes, tests/test_c_qdw.py).
    float64 holds the exact fma here (a 24-bit by 9-bit product plus a float32), rounded once."""
    f32 = np.float32
    rac, rbc = f32(f32(sa) / f32(sc)), f32(f32(sb) / f32(sc))
    inner = f32(np.float64(rac) * np.float64(za) + np.float64(f32(rbc * f32(zb))))
    return rac, rbc, f32(f32(zc) - inner)


def qadd(
    ctx: NodeContext, s: tuple[float, float, float], z: tuple[int, int, int], bounds: tuple
) -> str:
    """o2e QAdd of same-shaped tensors a (input 0) and b (input 3)."""
    a, b, y = ctx.x(0), ctx.x(3), ctx.y(0)
    rac, rbc, fixed = qadd_constants(s[0], z[0], s[1], z[1], s[2], z[2])
    sgn = 1 if np.dtype(y.dtype).name == "int8" else 0
    lit = [c_literal(np.float32(v), np.float32) for v in (rac, rbc, fixed)]
    use_runtime(ctx)
    ctx.kernel("int8 add (vector)")
    mt = split(ctx, y.size, -(-y.size // PAR_BYTES), PAR_MIN_BYTES)
    return (
        f"o2e_qadd{'_mt' if mt else ''}({y.size}, (const uint8_t *){a.sym}, "
        f"(const uint8_t *){b.sym}, {sgn}, {lit[0]}, {lit[1]}, {lit[2]}, {int(bounds[0])}, "
        f"{int(bounds[1])}, (uint8_t *){y.sym}{', ' + PAR if mt else ''});"
    )


def try_quantize(ctx: NodeContext, per_tensor: bool, qdtype: np.dtype) -> str | None:
    """QuantizeLinear of float32 to uint8 / int8 with one scale: o2e_qquant (vectorised), or
    None for every other case (the reference loop)."""
    x, s, y = ctx.x(0), ctx.x(1), ctx.y(0)
    yn = np.dtype(y.dtype).name
    if not per_tensor or yn not in ("uint8", "int8") or x.size == 0:
        return None
    if np.dtype(x.dtype) != np.float32 or np.dtype(s.dtype) != np.float32 or qdtype != np.float32:
        return None
    zp = "0"
    if ctx.has_input(2):
        z = ctx.x(2)
        if np.dtype(z.dtype).name != yn:
            return None
        zp = f"(int32_t){z.sym}[0]"
    lo, hi = (-128, 127) if yn == "int8" else (0, 255)
    use_runtime(ctx)
    ctx.kernel("quantize (vector)")
    return (
        f"o2e_qquant({x.size}, (const float *){x.sym}, {s.sym}[0], {zp}, {lo}, {hi}, "
        f"(uint8_t *){y.sym});"
    )


def qlut(ctx: NodeContext, n: int, src: str, lut: str, dst: str) -> str:
    """o2e_qlut over n bytes (split in PAR_BYTES blocks across threads when it pays)."""
    use_runtime(ctx)
    if split(ctx, n, -(-n // PAR_BYTES), PAR_MIN_LUT):
        return f"o2e_qlut_mt({n}, {src}, {lut}, {dst}, {PAR});"
    return f"o2e_qlut({n}, {src}, {lut}, {dst});"
