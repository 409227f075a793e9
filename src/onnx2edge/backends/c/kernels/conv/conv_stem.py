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

import re

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


# The vector type per ISA: lanes L, output channels per block MB, vectors per block VB.

# One block and the row loop, with the geometry as constants (one copy per layer geometry).
KERNEL = r"""
/* NAME_MB output channels [m0, m0 + nm) x VB vectors of output row oh from column ow0 (n of
 * them inside the row); xp: the planes at (oh, ow0), wp: the weights at column m0. */
#define NAME_MB O2E_SMB
#define NAME_VB O2E_SVB
static inline __attribute__((always_inline)) void NAME_b(const int VB, const float *restrict xp,
    const float *restrict wp, const float *restrict bp, float *restrict yp, int nm, int n)
{
  o2e_sv acc[NAME_MB][NAME_VB];
#pragma GCC unroll 16
  for (int m = 0; m < NAME_MB; m++) {
    const o2e_sv b = o2e_sv_set1(bp && m < nm ? bp[m] : 0.0f);
#pragma GCC unroll 4
    for (int v = 0; v < VB; v++) acc[m][v] = b;
  }
  for (int c = 0; c < CC; c++)
    for (int i = 0; i < KH; i++) {
      const float *restrict xr = xp + (size_t)(c * (SH * SW) + (i % SH) * SW) * (HQ * WQ) + (size_t)(i / SH) * WQ;
      const float *restrict wr = wp + (size_t)((c * KH + i) * KW) * 8;
#pragma GCC unroll 16
      for (int j = 0; j < KW; j++) {
        const float *restrict xj = xr + (size_t)(j % SW) * (HQ * WQ) + j / SW;
        o2e_sv xv[NAME_VB];
#pragma GCC unroll 4
        for (int v = 0; v < VB; v++) {
          xv[v] = o2e_sv_load(xj + v * O2E_SL);
          O2E_SREG(xv[v]);
        }
#pragma GCC unroll 16
        for (int m = 0; m < NAME_MB; m++) {
          o2e_sv w = o2e_sv_set1(wr[j * 8 + m]);
          O2E_SREG(w);
#pragma GCC unroll 4
          for (int v = 0; v < VB; v++) acc[m][v] = o2e_sv_fma(xv[v], w, acc[m][v]);
        }
      }
    }
#pragma GCC unroll 16
  for (int m = 0; m < NAME_MB; m++) {
    if (m >= nm) break;
#pragma GCC unroll 4
    for (int v = 0; v < VB; v++) {
      VACT
      float *restrict p = yp + (size_t)m * (OH * OW) + v * O2E_SL;
      const int r = n - v * O2E_SL;
      if (r >= O2E_SL)
        o2e_sv_store(p, acc[m][v]);
      else if (r > 0)
        o2e_sv_store_n(p, acc[m][v], r);
    }
  }
}

/* Output rows [r0, r1) of one image: every channel block, the row in balanced blocks. */
static void NAME(void *arg, int r0, int r1)
{
  const o2e_stem_args *a = (const o2e_stem_args *)arg;
  enum { NV = (OW + O2E_SL - 1) / O2E_SL, NB = (NV + NAME_VB - 1) / NAME_VB };
  /* bands of rows, each channel block over the whole band: the block writes NAME_MB
   * channel rows (pages) at a time, not all MM (96 rows 48 kB apart thrash the TLB) */
  for (int ob = r0; ob < r1; ob += BAND) {
    const int oe = ob + BAND < r1 ? ob + BAND : r1;
    for (int m0 = 0; m0 < MM; m0 += NAME_MB)
    for (int oh = ob; oh < oe; oh++) {
      const int nm = MM - m0 < NAME_MB ? MM - m0 : NAME_MB;
      const float *bp = a->bias ? a->bias + m0 : NULL;
      float *yr = a->y + (size_t)m0 * (OH * OW) + (size_t)oh * OW;
      for (int q = 0; q < NB; q++) {
        const int v0 = q * NV / NB, vb = (q + 1) * NV / NB - v0, ow0 = v0 * O2E_SL;
        const int n = OW - ow0 < vb * O2E_SL ? OW - ow0 : vb * O2E_SL;
        const float *xp = a->x + (size_t)oh * WQ + ow0;
        switch (vb) { /* one register-resident copy per width */
#if NAME_VB >= 4
        case 4: NAME_b(4, xp, a->w + (size_t)(m0 / 8) * (CC * KH * KW * 8) + m0 % 8, bp, yr + ow0, nm, n); break;
#endif
#if NAME_VB >= 3
        case 3: NAME_b(3, xp, a->w + (size_t)(m0 / 8) * (CC * KH * KW * 8) + m0 % 8, bp, yr + ow0, nm, n); break;
#endif
        case 2: NAME_b(2, xp, a->w + (size_t)(m0 / 8) * (CC * KH * KW * 8) + m0 % 8, bp, yr + ow0, nm, n); break;
        default: NAME_b(1, xp, a->w + (size_t)(m0 / 8) * (CC * KH * KW * 8) + m0 % 8, bp, yr + ow0, nm, n); break;
        }ACT
      }
    }
  }
}
"""


def register_act(act: Activation | None) -> str | None:
    """The fused activation on the accumulators before the store, for the clamps (Relu, Clip
    with lo <= hi): o2e_sv_lo / _hi are `v < lo ? lo : v` / `v > hi ? hi : v` lane by lane
    (NaN and -0.0 kept, as the table's expression). None: the loop of _act_loop instead."""
    if act is None:
        return ""
    lit = lambda x: c_literal(x, np.float32)  # noqa: E731
    if act.op == "Relu":
        return "acc[m][v] = o2e_sv_lo(acc[m][v], 0.0f);"
    lo, hi = clip_bounds(act.alpha, act.beta)  # a missing bound: the largest finite value
    if act.op == "Clip" and lo <= hi:
        return f"acc[m][v] = o2e_sv_hi(o2e_sv_lo(acc[m][v], {lit(lo)}), {lit(hi)});"
    return None


def _act_loop(spec: ConvSpec) -> str:
    """The fused activation over a block just stored (nm channels x n pixels, in L1)."""
    if spec.act is None or register_act(spec.act) is not None:
        return ""
    return f"""
        for (int m = 0; m < nm; m++) {{ /* the fused activation (the table's expression) */
          float *restrict yb = yr + (size_t)m * (OH * OW) + ow0;
          for (int p = 0; p < n; p++) {{ const float v = yb[p]; yb[p] = {act_expr(spec.act, "v")}; }}
        }}"""


# Output rows per band (see the row loop); a module constant so A/B runs can vary it.
BAND = 16


def _border(ctx: NodeContext, sh: int, sw: int) -> str:
    """The C helper zeroing what phase_split leaves of one channel's planes (the padding and
    the columns / rows past the input): the arena is shared, so this runs every call, and
    costs a fraction of clearing the whole planes (1 MB for a 299x299 RGB input)."""
    name = f"o2e_stem_border_s{sh}x{sw}"
    return ctx.helper(
        name,
        f"""
static void {name}(float *restrict planes, int H, int W, int pt, int pl, int HQ, int WQ)
{{
  for (int a = 0; a < {sh}; ++a)
    for (int b = 0; b < {sw}; ++b) {{
      float *restrict p = planes + (size_t)(a * {sw} + b) * HQ * WQ;
      /* the columns phase_split writes: source column q*{sw} + b - pl in [0, W) */
      int q0 = pl > b ? (pl - b + {sw - 1}) / {sw} : 0, q1 = (W + pl - b + {sw - 1}) / {sw};
      if (q0 > WQ) q0 = WQ;
      if (q1 > WQ) q1 = WQ;
      if (q1 < q0) q1 = q0;
      for (int r = 0; r < HQ; ++r) {{
        const int ih = r * {sh} + a - pt;
        float *restrict row = p + (size_t)r * WQ;
        if (ih < 0 || ih >= H) {{
          for (int q = 0; q < WQ; ++q) row[q] = 0.0f;
        }} else {{
          for (int q = 0; q < q0; ++q) row[q] = 0.0f;
          for (int q = q1; q < WQ; ++q) row[q] = 0.0f;
        }}
      }}
    }}
}}
""",
    )


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
    consts = {
        "CC": C,
        "KH": kh,
        "KW": kw,
        "SH": sh,
        "SW": sw,
        "HQ": HQ,
        "WQ": WQ,
        "MP": MP,
        "MM": M,
        "OH": OH,
        "OW": OW,
        "BAND": BAND,
    }
    body = KERNEL.replace("VACT", register_act(spec.act) or "").replace("ACT", _act_loop(spec))
    name = f"o2e_stem_{C}x{kh}x{kw}_s{sh}x{sw}_{M}_{OH}x{OW}_{ctx.step}"
    for k, v in consts.items():  # whole identifiers only (O2E_SL keeps its name)
        body = re.sub(rf"\b{k}\b", str(v), body)
    ctx.helper(name, body.replace("NAME", name))
    split = pool2d.phase_split(ctx, sh, sw)
    border = _border(ctx, sh, sw)
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
            f"    {border}({xp} + (size_t)c * {plane}, {H}, {W}, {pt}, {pl}, {HQ}, {WQ});",
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
