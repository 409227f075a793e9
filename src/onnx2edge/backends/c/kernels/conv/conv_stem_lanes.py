"""Direct convolution for first layers with few input channels, >= 100 taps and M near a
multiple of 48, output channels in the vector lanes: AlexNet's and NIN's 11x11 / 4 RGB stems
(3 -> 96, 363 taps per output) and SqueezeNet's 7x7 / 2 (3 -> 96, 147 taps).

There the pixel-lanes stem (conv_stem.py) lost to the implicit GEMM: a 54- or 55-pixel row
is 4 vectors of 16 (14 % idle lanes) cut into blocks of 2 (16 accumulators), and its 16
phase planes per channel are re-read from L2. Here, as in onnxruntime's NCHW-input NCHWc
kernel, the lanes hold output channels and each tap broadcasts input pixels read in place,
at any stride, from the input itself (a padded layer reads a zero-bordered copy of it):

    y[m .. m + CB][oh][ow + p] = b + Σ_c Σ_i Σ_j w[c][i][j][m .. m + CB] · x[c][oh·sh + i][(ow + p)·sw + j]

A tile is NV vectors of channels (CB = NV·L) x P output pixels of one row, NV·P
accumulators in registers for the whole C x kh x kw loop; per tap NV weight vectors are
loaded (one aligned stream per block) and P pixels broadcast, for NV·P FMAs. Per ISA
(compile time): AVX-512 3 x 16 lanes x 8 pixels (24 zmm accumulators, 11 loads per 24
FMAs), AVX2 2 x 8 x 6 (12 ymm), NEON 4 x 4 x 6 (24 q), portable C 2 x 4 x 4 on 4-float
structs. The filter rows are a loop (unrolled 11x11 taps over the tile widths would not fit
the uop cache), the taps of a row are unrolled. Weights are rearranged at conversion time to
[M' / 48][c][i][j][48] (M' = M rounded up to 48, zero past M): every ISA's CB (48, 16, 8)
divides 48. The finished tile goes through a small stack buffer into the NCHW output with
the bias and the fused activation (the activation table's expression); a residual is a pass
after (fuses_residual False). Work units
are (channel block, output row), split across threads by `o2e_parallel_for`: same results for
any split.

On AVX-512 (with VL) a fused Relu / Clip (or none) and the bias are applied to the
accumulators and each 16-channel vector block is transposed in registers (8 pixels x 16
channels -> 16 channel rows) and stored with masked 8-float stores: the scalar store loop
was a quarter of SqueezeNet's conv1.

Measured (1 thread, thread CPU time, min of 4 interleaved rounds x 10 runs, shared machine;
ms, this kernel vs what main ran): native AVX-512 - AlexNet conv1 1.31 vs 1.95 (implicit
GEMM), NIN 1.27 vs 1.80 (implicit GEMM), SqueezeNet 2.40 vs 3.21 (pixel-lanes stem);
x86-64-v3 - 2.25 vs 2.94, 2.07 vs 2.76, 4.14 vs 4.91.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ...headers import include
from ...ops.common import act_expr
from ..gemm.gemm import _use_engine
from ..pool import pool2d
from . import conv_stem
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

MAX_C = 4  # RGB(A) stems; more input channels have enough K per pixel for the GEMM
MIN_K = 100  # smaller kernels: the pixel-lanes stem measured faster
MIN_M = 16
MIN_OW = 8
WB = 48  # weight block: AVX-512's CB; the other ISAs' (16, 8) divide it
# idle lanes: M = 64 would run as 48 + 48 channels (ResNet50's 7x7 / 2 stem: 2.13 ms vs 1.94
# in the pixel-lanes stem; 64 x 6 tiles, 4 vectors, also 2.13)
MAX_IDLE = 0.1


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec)) is not None:
        return why
    if spec.nsp != 2 or spec.group != 1 or spec.dl != [1, 1]:
        return "not a 2-D convolution without groups or dilation"
    kh, kw = spec.ks
    C, M = spec.C, spec.M
    OW = spec.y.shape[3]
    if -(-M // WB) * WB > M * (1 + MAX_IDLE):
        return f"{M} outputs leave more than {MAX_IDLE:.0%} of the {WB}-channel blocks idle"
    if C > MAX_C or C * kh * kw < MIN_K or M < MIN_M or OW < MIN_OW:
        return (
            f"needs <= {MAX_C} input channels, >= {MIN_K} taps, >= {MIN_M} outputs and "
            f">= {MIN_OW} output columns"
        )
    return None


def _pad(ctx: NodeContext, spec: ConvSpec, HP: int, WP: int) -> tuple[str, str]:
    """(C statement copying image n into a zero-bordered HP x WP buffer, the buffer): the
    rows and columns the tiles read, so a tap never tests the border (o2e_stl_pad)."""
    x = spec.x
    _, C, H, W = x.shape
    pt, pl = spec.pads[0], spec.pads[1]
    buf = ctx.scratch(C * HP * WP * 4)
    src = f"{x.sym} + (size_t)n * {C * H * W}"
    return f"  o2e_stl_pad({src}, {C}, {H}, {W}, {pt}, {pl}, {HP}, {WP}, {buf});", buf


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, y, bias = spec.x, spec.y, spec.bias
    N, C, H, W = x.shape
    M = spec.M
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    MP = -(-M // WB) * WB
    wc = np.zeros((MP, C, kh, kw), np.float32)
    assert spec.weights is not None
    wc[:M] = spec.weights.astype(np.float32)
    # blocks of WB output channels, each block's taps one sequential stream: [M'/WB][c][i][j][WB]
    wc = np.ascontiguousarray(wc.reshape(MP // WB, WB, C, kh, kw).transpose(0, 2, 3, 4, 1))
    wsym = ctx.weight("stem_lanes", wc)
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_stem_vectors.h")
    include(ctx, "o2e_stem_lanes.h")
    padded = any(spec.pads)
    # the rows / columns the tiles read: the whole input when unpadded
    HP, WP = ((OH - 1) * sh + kh, (OW - 1) * sw + kw) if padded else (H, W)
    name = f"o2e_stem_lanes_{C}x{kh}x{kw}_s{sh}x{sw}_{M}_{OH}x{OW}_{ctx.step}"
    reg = conv_stem.register_act(spec.act)  # None: an activation the registers do not run
    clamp, lo, hi = ("O2E_STEM_CLAMP_ACT", "0.0f", "0.0f") if reg is None else reg
    clamp = clamp.replace("O2E_STEM_", "O2E_STL_")
    act = "NULL"  # the store loop's activation (every ISA but AVX-512 with VL, or not a clamp)
    if spec.act is not None:
        act = ctx.helper(
            f"{name}_act",
            f"\nstatic inline float {name}_act(float v) {{ return {act_expr(spec.act, 'v')}; }}\n",
        )
    geom = f"{C}, {kh}, {kw}, {sh}, {sw}, {HP}, {WP}, {M}, {OH}, {OW}, {WB}, {clamp}, {lo}, {hi}"
    ctx.helper(
        name,
        f"""
/* units [u0, u1): the layer's geometry as constants (one copy per layer) */
static void {name}(void *arg, int u0, int u1)
{{
  o2e_stl_units((o2e_stl_geom){{{geom}}}, (const o2e_stem_args *)arg, u0, u1, {act});
}}
""",
    )
    ctx.kernel("stem conv (output channels in lanes)")
    units = f"(({M} + O2E_CB - 1) / O2E_CB) * {OH}"  # (channel block, row); CB per ISA
    threaded = OH > 1 and M * OH * OW * C * kh * kw >= pool2d.PAR_MIN_WORK
    if threaded:
        _use_engine(ctx)
    run = f"o2e_parallel_for({units}, {name}, &a);" if threaded else f"{name}(&a, 0, {units});"
    if padded:
        fill, src = _pad(ctx, spec, HP, WP)
    else:
        fill, src = "", f"{x.sym} + (size_t)n * {C * H * W}"
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n) {{",
            *([fill] if fill else []),
            f"  o2e_stem_args a = {{{src}, {wsym}, {bias or 'NULL'}, "
            f"{y.sym} + (size_t)n * {M * OH * OW}}};",
            f"  {run}",
            "}",
        ]
    )


STRATEGY = register(ConvStrategy("stem_lanes", refuse, emit, fuses_residual=False), rank=70)
