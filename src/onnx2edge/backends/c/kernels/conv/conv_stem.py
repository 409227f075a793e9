"""Direct convolution for strided first layers ("stems") with few input channels: the RGB
stems of Inception-v3 and the MobileNets (3x3 / 2, 3 -> 32). (ResNet50's 7x7 / 2 3 -> 64 went
to the implicit GEMM once its conv strips widened: GEMM_MIN_K below.)
(SqueezeNet's 7x7 / 2 3 -> 96 and AlexNet's / NIN's 11x11 / 4 go to conv_stem_lanes.py,
output channels in the lanes, tried first.)

There K = C·kh·kw is 27..147 and the implicit GEMM (conv_gemm.py) spends most of its time
packing B: every input pixel is copied kh·kw / (sh·sw) times into the column matrix, for
only K·M FMAs per output column. Here nothing is packed but the input itself, once: each
channel is split into its sh x sw zero-bordered phase planes (kernels/pool/pool2d.py phase_split), so
tap (i, j) of output pixels ow .. ow + n reads plane (i % sh, j % sw) at row oh + i / sh,
columns ow + j / sw .. : consecutive floats, whatever the stride.

Output pixels are in the vector lanes (NCHW rows: the store is a plain vector store, no
transposition), MB output channels x VB vectors of one output row are accumulators that stay
in registers for the whole C x kh x kw loop; per tap VB input vectors are loaded and MB
weights broadcast, for MB·VB FMAs:

    y[m][oh][ow .. ow + L·VB) = b[m] + Σ_c Σ_i Σ_j w[c][i][j][m] · plane(c, i%sh, j%sw)[oh + i/sh][ow + j/sw ..]

Weights are rearranged at conversion time to [M' / 8][c][i][j][8] (M' = M rounded up to
24, zero past M): a block's MB (4 or 8) weights of one tap are adjacent and its taps one
sequential stream (with [c][i][j][M'] each tap was a line of its own: 147 / 363 lines per
block, ResNet50 conv1 2.16 -> 1.98 ms, SqueezeNet's 3.16 -> 2.92). Per ISA (compile time): AVX-512
MB = 8, VB <= 3 (24 zmm accumulators); AVX2 MB = 4, VB <= 3; NEON MB = 8, VB <= 3 (32 q
registers); portable C MB = 4, VB <= 2 on 4-float structs. A row is cut into balanced blocks
of whole vectors; the lanes past the row's end read the planes' zero slack and are not
stored (masked / partial stores). The bias starts each sum; a fused Relu / Clip clamps
the accumulators before the store (o2e_sv_lo / _hi, lane for lane the activation table's
expression, NaN and -0.0 included; 3-5 %), other activations run over each block just
stored, still in L1. Rows go in
bands of BAND: each channel block runs over the whole band, so a block writes MB channel
rows at a time (SqueezeNet's 96 rows 48 kB apart per output row thrashed the TLB: 1.9 ->
0.9 ms). Only the planes' borders are zeroed per call (clearing 1 MB of planes cost a tenth
of the 3x3 stems). Rows are independent: `o2e_parallel_for` splits them across threads,
same results for any split.

Measured (1 thread, thread CPU time, min of 5 interleaved rounds, shared machine; ms, this
kernel vs the implicit GEMM it replaces): native AVX-512 - SqueezeNet conv1 0.87 vs 1.99,
ResNet50 7x7 2.41 vs 2.74, Inception-v3 1a 0.58 vs 0.82, MobileNet 3x3 / 2 0.45 vs 0.51;
x86-64-v3 - 1.29 vs 2.92, 3.64 vs 4.47, 0.83 vs 2.25, 0.38 vs 0.57.
"""

from __future__ import annotations

import numpy as np

from .....semantics.activations import Activation, clip_bounds
from ...emitter import NodeContext, c_literal
from ...headers import include
from ...ops.common import act_expr
from ..gemm.gemm import _use_engine
from ..pool import pool2d
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

MAX_C = 4  # input channels: RGB(A) stems; more channels have enough K for the GEMM
# C·kh·kw. AlexNet's / NIN's 11x11 / 4 stems (363 taps) measured slower here than the
# implicit GEMM at native (AlexNet 2.61 vs 2.12 ms, NIN 2.53 vs 2.36) and tied at x86-64-v3:
# their K is large enough for the GEMM's packing to pay. ResNet50's 7x7 x 3 = 147 wins.
# Re-measured with the blocked weights and register clamps (min of 40, native): AlexNet
# 2.35 vs 1.86 ms - a 55-pixel row is 4 vectors of 16 (14 % idle lanes) cut into blocks of
# 2 (16 accumulators, 10 load uops per 16 FMAs); 12 channels x 2 vectors (24 accumulators)
# gave 2.31, still behind the GEMM.
MAX_K = 160
MIN_M = 8
MIN_OW = 16  # one AVX-512 vector per output row at least
MAX_STRIDE = 4
MAX_PLANES_BYTES = 8 << 20  # the phase planes live in the arena while the layer runs
M_ROUND = 24  # weight columns padded to a multiple of every ISA's MB (8, 4)
# With >= GEMM_MIN_K taps and >= GEMM_MIN_M outputs the implicit GEMM (conv_gemm.py, strips of
# O2E_GEMM_CONV_SB panels) takes the layer. tools/ab_nodes.py, minima, shared machine, ms, this
# kernel vs the GEMM: ResNet50's 7x7 / 2 3 -> 64 native 1.93 vs 1.95, x86-64-v3 3.05 vs 2.78,
# x86-64-v2 43.6 vs 14.9; 5x5 / 2 3 -> 64 native 1.01 vs 0.97, x86-64-v3 1.59 vs 1.49. The 3x3
# stems (27 taps: Inception-v3 3 -> 32, native 0.52 vs 0.60) stay here.
GEMM_MIN_K = 75
GEMM_MIN_M = 64
SLACK = 16  # floats after the planes: the last vector of a row may read past its end


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec)) is not None:
        return why
    if spec.nsp != 2 or spec.group != 1 or spec.dl != [1, 1] or spec.residual:
        return "not a 2-D convolution without groups, dilation or residual"
    kh, kw = spec.ks
    sh, sw = spec.st
    if max(sh, sw) < 2 or max(sh, sw) > MAX_STRIDE:
        return f"stride 1 or above {MAX_STRIDE} (stride-1 layers have the direct / GEMM kernels)"
    C, M = spec.C, spec.M
    OH, OW = spec.y.shape[2:]
    if C > MAX_C or C * kh * kw > MAX_K or M < MIN_M or OW < MIN_OW:
        return (
            f"needs <= {MAX_C} input channels, <= {MAX_K} taps, >= {MIN_M} outputs and "
            f">= {MIN_OW} output columns"
        )
    if C * kh * kw >= GEMM_MIN_K and M >= GEMM_MIN_M:
        return f">= {GEMM_MIN_K} taps and >= {GEMM_MIN_M} outputs: the implicit GEMM is as fast"
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, 1, 1)
    if (C * sh * sw * HQ * WQ + SLACK) * 4 > MAX_PLANES_BYTES:
        return "input phase planes too large for the arena"
    return None


NO_CLAMP = ("O2E_STEM_CLAMP_NONE", "0.0f", "0.0f")
# HardSwish in the header's vectors too (this kernel only, o2e_conv_stem.h: on the accumulators
# with 32 registers, over each block just stored with 16); the generated scalar pass over each
# block stayed scalar at x86-64-v3 (MobileNetV3's stem 0.42 -> 0.11 ms there)
HSWISH = ("O2E_STEM_CLAMP_HSWISH", "0.0f", "0.0f")


def _stem_act(act: Activation | None) -> tuple[str, str, str] | None:
    """register_act, and HardSwish, which o2e_conv_stem.h also runs in vectors."""
    if act is not None and act.op == "HardSwish":
        return HSWISH
    return register_act(act)


def register_act(act: Activation | None) -> tuple[str, str, str] | None:
    """The fused activation on the accumulators before the store, for the clamps (Relu, Clip
    with lo <= hi), as o2e_stem_geom's (clamp, lo, hi): o2e_sv_lo / _hi are `v < lo ? lo : v`
    / `v > hi ? hi : v` lane by lane (NaN and -0.0 kept, as the table's expression). None: an
    activation function after each block instead (_act_fn)."""
    lit = lambda x: c_literal(x, np.float32)  # noqa: E731
    if act is None:
        return NO_CLAMP
    if act.op == "Relu":
        return ("O2E_STEM_CLAMP_LO", "0.0f", "0.0f")
    lo, hi = clip_bounds(act.alpha, act.beta)  # a missing bound: the largest finite value
    if act.op == "Clip" and lo <= hi:
        return ("O2E_STEM_CLAMP_LOHI", lit(lo), lit(hi))
    return None


def _act_fn(ctx: NodeContext, spec: ConvSpec, name: str) -> str:
    """The fused activation over a block just stored (nm channel rows x n pixels, in L1), as
    the o2e_stem_act_fn `name`; "NULL" when the accumulators take it (register_act)."""
    if spec.act is None or _stem_act(spec.act) is not None:
        return "NULL"
    ctx.helper(
        name,
        f"""
static void {name}(float *restrict y, int nm, int n, size_t ys)
{{
  for (int m = 0; m < nm; m++) {{ /* the fused activation (the table's expression) */
    float *restrict yb = y + (size_t)m * ys;
    for (int p = 0; p < n; p++) {{ const float v = yb[p]; yb[p] = {act_expr(spec.act, "v")}; }}
  }}
}}
""",
    )
    return name


# Output rows per band (see o2e_stem_rows); a module constant so A/B runs can vary it.
BAND = 16


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, y, bias = spec.x, spec.y, spec.bias
    N, C, H, W = x.shape
    M = spec.M
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    pt, pl = spec.pads[0], spec.pads[1]
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, 1, 1)
    MP = -(-M // M_ROUND) * M_ROUND
    wc = np.zeros((MP, C, kh, kw), np.float32)
    assert spec.weights is not None
    wc[:M] = spec.weights.astype(np.float32)
    # blocks of 8 output channels, each block's taps one sequential stream: [M'/8][c][i][j][8]
    wc = np.ascontiguousarray(wc.reshape(MP // 8, 8, C, kh, kw).transpose(0, 2, 3, 4, 1))
    wsym = ctx.weight("stem", wc)
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_stem_vectors.h")
    include(ctx, "o2e_conv_stem.h")
    name = f"o2e_stem_{C}x{kh}x{kw}_s{sh}x{sw}_{M}_{OH}x{OW}_{ctx.step}"
    clamp, lo, hi = _stem_act(spec.act) or NO_CLAMP  # else: act, after each block
    act = _act_fn(ctx, spec, f"{name}_act")
    geom = f"{C}, {kh}, {kw}, {sh}, {sw}, {HQ}, {WQ}, {M}, {OH}, {OW}, {BAND}, {clamp}, {lo}, {hi}"
    ctx.helper(
        name,
        f"""
/* output rows [r0, r1): the layer's geometry as constants (one copy per layer) */
static void {name}(void *arg, int r0, int r1)
{{
  o2e_stem_rows((o2e_stem_geom){{{geom}}}, (const o2e_stem_args *)arg, r0, r1, {act});
}}
""",
    )
    split = pool2d.phase_split(ctx, sh, sw)
    ctx.kernel("stem conv (strided, few input channels)")
    plane = sh * sw * HQ * WQ
    nfl = C * plane + SLACK
    xp = ctx.scratch(nfl * 4)
    threaded = OH > 1 and M * OH * OW * C * kh * kw >= pool2d.PAR_MIN_WORK
    if threaded:
        _use_engine(ctx)
    run = f"o2e_parallel_for({OH}, {name}, &a);" if threaded else f"{name}(&a, 0, {OH});"
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n) {{",
            f"  memset({xp} + {C * plane}, 0, {SLACK * 4});",
            f"  for (int c = 0; c < {C}; ++c) {{",
            f"    o2e_stem_border({xp} + (size_t)c * {plane}, {sh}, {sw}, {H}, {W}, {pt}, {pl}, "
            f"{HQ}, {WQ});",
            f"    {split}({x.sym} + ((size_t)n * {C} + c) * {H * W}, "
            f"{H}, {W}, {pt}, {pl}, {HQ}, {WQ}, {xp} + (size_t)c * {plane});",
            "  }",
            f"  o2e_stem_args a = {{{xp}, {wsym}, {bias or 'NULL'}, "
            f"{y.sym} + (size_t)n * {M * OH * OW}}};",
            f"  {run}",
            "}",
        ]
    )


STRATEGY = register(ConvStrategy("stem", refuse, emit), rank=80)
