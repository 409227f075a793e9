"""1x1 convolutions on narrow maps with the output channels in the vector lanes (issue 9).

MobileNet v1/v2's pointwise layers on 7x7 maps, ResNet50's res5 1x1 layers: there the packed
GEMM (nn.py "1x1 as GEMM") puts the P = 49 output pixels in its 48-column (AVX-512) or
24-column (AVX2) strips, leaving the last strip mostly empty, and streams the whole weight
matrix (several MB) once per strip. runtime/o2e_conv1x1.h swaps the roles: 32 output channels
(16 or 8 at a time on narrower ISAs) in the lanes x up to 12 pixels in registers, the input
packed once per call into pixel tiles, K cut in slices that keep a tile's weights in L1. That
is the "1x1 GEMM micro-kernel with the output-channel dimension in the lanes" variant of
NCHWc: the tensors between layers stay NCHW, so no layout conversion is needed at either end
of a chain of such layers; only the finished tile is transposed (a scalar copy), which is why
K has to be large enough (MIN_K). Strided 1x1 layers (ResNet50's res5a downsample: 14x14 ->
7x7) subsample the input while packing it. Bias and Relu / Clip / LeakyRelu are applied in registers;
a residual and the activation after it in one vectorised pass over the finished rows.

Weights are rearranged at conversion time to 16-channel panels [Mp / 16][K][16] (M padded to a
multiple of 32), the same for every ISA, so one generated model.c runs with the AVX-512, AVX2,
NEON, SSE or plain C kernel of the header.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from .. import par_split
from ..gemm.gemm import _use_engine, act_struct, plan_threads, post_act
from ..pool import pool2d
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

HEADER = "o2e_conv1x1.h"
PANEL = 16  # O2E_PW_PANEL: channels per weight panel
MALIGN = 32  # O2E_PW_MALIGN: M is zero-padded to a multiple of this
PXMAX = 12  # O2E_PW_PXMAX: the widest pixel tile (scratch sizing)
# Maps up to 8x8. Measured per layer (1 thread, CPU time, this path / the packed GEMM, on an
# AVX-512 host at -march=native and at x86-64-v3), MobileNet / ResNet50 shapes K -> M:
#   7x7:   1024 -> 1024 0.82 / 0.72, 512 -> 1024 0.75 / 0.75, 160 -> 960 0.58 / 1.13,
#          960 -> 160 (+ residual) 0.71 / 0.88, 320 -> 1280 0.80 / 0.78, 2048 -> 512 0.75 / 0.83
#   14x14: 512 -> 512 1.01 / 1.07, 256 -> 512 1.31 / 0.84, 64 -> 384 1.30 / 1.09,
#          384 -> 64 (+ residual) 1.15 / 1.06, 1024 -> 256 1.21 / 1.16; 13x13 512 -> 1000 1.12 / 0.95
# At P = 196 the GEMM's strips are 94 % (AVX-512) / 98 % (AVX2) full and its B strip is reused
# by every weight panel; at P = 49 they are 77 % / 88 % full and the weights, several MB,
# stream from L3 once per strip.
MAX_P = 64
MIN_K = 128  # the transposing store costs ~PX x 32 scalar steps per tile, against K x PX FMAs
MIN_M = 32


# the portable loops' tiles (o2e_conv1x1.h without O2E_PW_VEC): what a --device build runs
SCALAR_PX = 4
SCALAR_SUB = 8


def include(ctx: NodeContext) -> None:
    """o2e_conv1x1.h; a --device conversion (device.py) builds its portable loops everywhere."""
    scalar = "#define O2E_PW_SCALAR\n" if ctx.device.is_mcu else ""
    ctx.helper("o2e_conv1x1_include", f'{scalar}#include "{HEADER}"\n')
    ctx.require_runtime(HEADER)


def scratch(ctx: NodeContext, K: int, P: int) -> tuple[str, str]:
    """The packed input (K x pixel tiles) and the per-thread partial sums (pixel tiles x a
    channel tile): for the widest tiles of any build, or the portable ones of a --device build
    (o2e_pw_ntiles_ tiles of SCALAR_PX pixels, SCALAR_SUB channels)."""
    if ctx.device.is_mcu:
        px = -(-P // SCALAR_PX) * SCALAR_PX
        return ctx.scratch(K * px * 4), ctx.scratch(plan_threads(ctx) * px * SCALAR_SUB * 4)
    xp = ctx.scratch(K * (P + PXMAX) * 4)
    return xp, ctx.scratch(plan_threads(ctx) * (P + PXMAX) * MALIGN * 4)  # per thread


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec, constant_bias=True)) is not None:
        return why  # the bias is padded at conversion time
    P = spec.y.shape[2] * spec.y.shape[3]
    if spec.nsp != 2 or spec.group != 1 or spec.ks != [1, 1] or any(spec.pads):
        return "not an unpadded 2-D 1x1 convolution without groups"
    if P > MAX_P or spec.C < MIN_K or spec.M < MIN_M:
        return f"map over {MAX_P} pixels, fewer than {MIN_K} inputs or {MIN_M} outputs"
    return None


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    """C statements for the whole node (every image of the batch in turn)."""
    x, w, y, st = spec.x, spec.w, spec.y, spec.st
    N, K, H, W = x.shape
    M = w.shape[0]
    P = y.shape[2] * y.shape[3]
    Mp = -(-M // MALIGN) * MALIGN
    wc = np.zeros((Mp, K), np.float32)
    wc[:M] = ctx.const(1).reshape(M, K)
    # [Mp / 16][K][16]: one panel's weights in the order a tile reads them
    wsym = ctx.weight(
        "lanes1x1", np.ascontiguousarray(wc.reshape(Mp // PANEL, PANEL, K).transpose(0, 2, 1))
    )
    bc = np.zeros(Mp, np.float32)  # padded, so the tile adds it as whole vectors
    if spec.has_bias:  # the constant padded (its own symbol is not named)
        bc[:M] = ctx.const(2).reshape(M)
    bsym = ctx.weight("bias1x1", bc)
    _use_engine(ctx)  # o2e_act, o2e_act1_, o2e_parallel_for
    include(ctx)
    ctx.kernel("1x1 on a narrow map (output channels in lanes)")
    xp, acc = scratch(ctx, K, P)
    act = spec.act
    act_c, post = act_struct(act)
    res = ctx.x(3).sym if spec.residual else None
    threaded = int(M * K * P >= pool2d.PAR_MIN_WORK and M > 32)
    off = "(size_t)n * " + str(M * P)
    lines = [
        f"for (int n = 0; n < {N}; ++n) {{",
        f"  const o2e_pw_args a = {{{x.sym} + (size_t)n * {K * H * W}, {wsym}, {xp}, {acc}, "
        f"{bsym}, {f'{res} + {off}' if res else 'NULL'}, {y.sym} + {off}, "
        f"{M}, {K}, {P}, {H * W}, {W}, {y.shape[3]}, {st[0]}, {st[1]}, {act_c}}};",
        f"  o2e_conv1x1_lanes(&a, {threaded});",
        "}",
    ]
    return "\n".join(lines) + post_act(act, post, N * M, P, y.sym, P)


STRATEGY = register(ConvStrategy("pointwise", refuse, emit), rank=110)


# --------------------------------------------------------------------------------------------
# 1x1 layers on 9x9 .. 14x14 maps (conv_gemm.py's "1x1 as GEMM"): at AVX2 the same tiles over
# the GEMM's packed weights, for layers with >= 1 MB of weights. The GEMM's 24-column strips
# leave 169 = 7 x 24 + 1 and 196 = 8 x 24 + 4 pixels a 1-4 column last strip, which
# o2e_gemm.h's narrow kernel (O2E_GEMM_NARROW) runs at 1 + nr loads per k; but the GEMM still
# reads all the weights once per strip (8 times), from L3 once they outgrow L2 next to the
# input, where these tiles read them once. Against the GEMM with that kernel (1 thread, CPU
# time minima of 5-8 interleaved rounds, tools/ab_nodes.py, this path / the GEMM, x86-64-v3 on
# an AVX-512 host), K -> M: in ResNet50 res4 1024 -> 256 0.90-0.92, 256 -> 1024 (+ residual)
# 0.99-1.01; one-layer models (weights warm in cache between runs) 13x13 512 -> 1000 0.88,
# 14x14 1024 -> 512 0.93, 256 -> 1024 (+ residual) 0.93, 512 -> 512 0.98, 1024 -> 256 1.02.
# Under 1 MB the GEMM is as fast or faster: SqueezeNet fire9 512 -> 64 1.03 (in the model),
# one-layer 13x13 256 -> 768 1.00, 384 -> 384 1.02. The same tiles over their own 16-channel
# panels were slower at K = 160 (1.04) and on 17x17 (768 -> 192: 1.11), and at AVX-512 on all
# of these (1.08-1.34: there the 48-column strips stay), so the generated C keeps both behind
# #if: one model.c still serves every ISA.
AVX2_MIN_P = MAX_P + 1
AVX2_MAX_P = 196
AVX2_MIN_K = 256
AVX2_MIN_WEIGHTS = 512 * 512  # M x K floats (1 MB)


def avx2_lanes(spec: ConvSpec) -> bool:
    """Whether a 1x1 GEMM layer runs the lanes kernel over its packed weights at AVX2."""
    P = spec.y.shape[2] * spec.y.shape[3]
    return (
        spec.group == 1
        and AVX2_MIN_P <= P <= AVX2_MAX_P
        and spec.C >= AVX2_MIN_K
        and spec.M >= MIN_M
        and spec.M * spec.C >= AVX2_MIN_WEIGHTS
    )


def avx2_branch(
    ctx: NodeContext,
    spec: ConvSpec,
    packed: str,
    xin: str,
    y: str,
    bias: str,
    res: str | None,
    gemm: str,
) -> str:
    """The GEMM statement `gemm` for one image, with the lanes kernel over the same packed
    weights in its place when compiled for AVX2 (o2e_conv1x1_lanes_packed_a)."""
    K, M = spec.C, spec.M
    H, W = spec.x.shape[2], spec.x.shape[3]
    P = spec.y.shape[2] * spec.y.shape[3]
    if ctx.device.is_mcu:  # no AVX2 in a --device build (device.py): the GEMM alone
        return gemm
    include(ctx)
    ctx.kernel("1x1 as GEMM: at AVX2 output channels in lanes over the packed weights")
    xp, acc = scratch(ctx, K, P)
    act_c, post = act_struct(spec.act)
    threaded = int(M * K * P >= pool2d.PAR_MIN_WORK and M > 32)
    lanes = (
        f"{{ const o2e_pw_args a = {{{xin}, {packed}, {xp}, {acc}, {bias}, {res or 'NULL'}, "
        f"{y}, {M}, {K}, {P}, {H * W}, {W}, {W}, 1, 1, {act_c}}}; "
        f"o2e_conv1x1_lanes_packed_a(&a, {threaded}); }}" + post_act(spec.act, post, M, P, y, P)
    )
    return f"\n#if defined(O2E_GEMM_AVX2)\n{lanes}\n#else\n{gemm}\n#endif\n"


# --------------------------------------------------------------------------------------------
# 1x1 layers with few input channels on wide maps (conv_gemm.py's "1x1 as GEMM"): at AVX-512
# the input rows read in place (o2e_conv1x1_rows_packed_a) over the GEMM's packed weights,
# where the GEMM would copy the whole input into its B strips for a K of 16-72. Standalone,
# 1 thread, CPU time, AMD EPYC AVX-512, this / the packed GEMM, M x P x K: 64 x 12544 x 16
# 0.87, 16 x 12544 x 16 0.87, 72 x 3136 x 24 0.91, 24 x 3136 x 72 0.92, 120 x 784 x 40 0.92
# (MobileNetV3's and EfficientNet's first blocks). A tile re-reads all of A (M x K floats) per
# 32-pixel strip, so A must stay in L1: ROWS_MAX_WEIGHTS. Register activations only (a vmath
# one stays in the GEMM's epilogue).
ROWS_MIN_P = 512
ROWS_MAX_K = 128
ROWS_MAX_WEIGHTS = 8192  # M x K floats: 32 KB
# its rate, multiply-adds a ns on one core (the 64 x 12544 x 16 layer: ~120), for the split rule
ROWS_RATE_MACS = 100


def avx512_rows(spec: ConvSpec) -> bool:
    """Whether a 1x1 GEMM layer reads its input in place at AVX-512."""
    P = spec.y.shape[2] * spec.y.shape[3]
    return (
        spec.group == 1
        and P >= ROWS_MIN_P
        and spec.C <= ROWS_MAX_K
        and spec.M * spec.C <= ROWS_MAX_WEIGHTS
        and not act_struct(spec.act, vmath=False)[1]
    )


def avx512_rows_branch(
    ctx: NodeContext,
    spec: ConvSpec,
    packed: str,
    xin: str,
    y: str,
    bias: str,
    res: str | None,
    gemm: str,
) -> str:
    """The GEMM statement `gemm` for one image, with the in-place rows kernel over the same
    packed weights in its place when compiled for AVX-512 (one model.c serves every ISA)."""
    if ctx.device.is_mcu:  # no AVX-512 in a --device build (device.py): the GEMM alone
        return gemm
    K, M = spec.C, spec.M
    P = spec.y.shape[2] * spec.y.shape[3]
    include(ctx)
    ctx.kernel("1x1 as GEMM: at AVX-512 input rows read in place")
    act_c, _ = act_struct(spec.act, vmath=False)
    strips = -(-P // 32)
    threaded = int(par_split.split_at(ctx, M * K * P, strips, ROWS_RATE_MACS))
    rows = (
        f"{{ const o2e_pwr_args a = {{{packed}, {xin}, {bias}, {res or 'NULL'}, {y}, "
        f"{M}, {K}, {P}, {act_c}}}; o2e_conv1x1_rows_packed_a(&a, {threaded}); }}"
    )
    return f"\n#if defined(O2E_GEMM_AVX512)\n{rows}\n#else\n{gemm}\n#endif\n"
