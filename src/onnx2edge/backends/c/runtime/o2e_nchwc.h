/* o2e_nchwc.h - channel-blocked (NCHW16c) 1x1 and depthwise KxK convolutions on narrow maps
 * (kernels/conv/conv_nchwc.py writes the calls, backends/c/nchwc_plan.py decides which tensors are
 * blocked; issue 9).
 *
 * A blocked tensor of C channels, one image: [C/16][H][W][16], channel c of pixel p at
 * (c/16)*16*H*W + p*16 + c%16. 16 channels are one zmm (AVX-512), two ymm (AVX2), four q
 * (NEON) or four xmm (SSE): the block does not depend on the ISA, so one model.c compiles for
 * any of them.
 * A channel count Cn that is not a multiple of 16 (MobileNetV3's 72, 88, 120, ...) is stored
 * as whole blocks, C = Cn rounded up: the padding lanes past Cn are written (weights and bias
 * of 0) but their values are unspecified (0 x Inf is NaN) and no kernel lets them reach a
 * real channel: the 1x1 tiles read input channels < Kn only, the depthwise layer and the gate
 * are lane-wise, the pools write means of channels < Cn only (issue 34).
 *
 *   1x1:       y[m][p] = act(b[m] + sum_k w[m][k] . x[k][p] + r[m][p])
 *              a tile is NV vectors of output channels x PN pixels in registers; per input
 *              channel k one broadcast scalar per pixel and NV weight vectors. The input is
 *              read in either layout (blocked or NCHW: only the scalar's address differs) and
 *              the output written in either (blocked: whole vectors; NCHW: a transposing
 *              scalar store at the chain's exit), the residual and activation applied to
 *              each tile right after its store, while it is in L1. No packing, no K slices: a tile's weights (K x 16..32
 *              floats) come from L1/L2 once per pixel tile.
 *   depthwise: y[c][oy][ox] = act(b[c] + sum_{ky,kx} w[c][ky][kx] . x[c][iy][ix]),
 *              K x K (3, 5, 7), stride 1 or 2, pads <= K / 2, both sides blocked: channels
 *              in the lanes, a row of up to DWPX output pixels in registers, so narrow maps
 *              (7, 14 wide) need no per-plane edge code: taps falling in the padding are
 *              skipped per pixel on the edge tiles' first and last K / 2 pixels only (AVX2,
 *              stride 1: the K weights of a kernel row in registers, each input pixel of the
 *              tile's window loaded once, o2e_nc_dw_tile_s1_). A vmath
 *              activation (SiLU, ...) runs over each finished output row (in L1), and an SE
 *              block's pool (`pool`) sums the rows there too (issue 34).
 *   SE gate:   y[c][p] = x[c][p] * s[c] (an SE block's Mul inside a chain).
 *   GlobalAveragePool of a blocked input (the chain's exit before a 7x7 head): y[c] is the mean
 *              of channel c over the P pixels, written as [C] (a 1x1 map: the same in both
 *              layouts), so the layer before it stores whole vectors.
 * Weights are rearranged at conversion time: 1x1 [M/16][K][16] (an NCHW side of Kn / Mn
 * channels zero-padded to whole blocks), depthwise [C/16][K*K][16].
 * Activations: o2e_act kinds 1-5 (Relu, Clip, LeakyRelu, HardSigmoid, HardSwish) by compare
 * and select, so NaN passes as in o2e_act1_; the vmath kinds by o2e_act_vm_n_ over stored
 * rows / tiles.
 * Work units are blocks of output channels, split by o2e_parallel_for; results do not depend
 * on the split. Define O2E_NCHWC_SCALAR to build the portable loops on a vector-capable host
 * (the tests do).
 */
#ifndef O2E_NCHWC_H
#define O2E_NCHWC_H

#include "o2e_gemm.h"

#define O2E_NC_BLOCK 16

#if !defined(O2E_NCHWC_SCALAR) && (defined(__GNUC__) || defined(__clang__)) &&                \
    (defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__) ||                          \
     (defined(__ARM_NEON) && defined(__aarch64__)))
#define O2E_NC_VEC 1
#if defined(__AVX512F__)
#define O2E_NC_VW 16
#ifndef O2E_NC_NV
#define O2E_NC_NV 4 /* 1x1 tile: 64 channels x 6 pixels = 24 zmm accumulators */
#endif
#define O2E_NC_PX 6
/* narrower tiles (a layer's last 16, 32 or 48 channels: MobileNet v2's 32-, 96- and
 * 160-channel linear layers) take more pixels, so a tile still has 16-24 accumulators per
 * weight vector loaded */
#ifndef O2E_NC_PX1
#define O2E_NC_PX1 12
#endif
#ifndef O2E_NC_PX2
#define O2E_NC_PX2 12
#endif
#ifndef O2E_NC_PX3
#define O2E_NC_PX3 8
#endif
#define O2E_NC_DWPX 14
#elif defined(__AVX__)
#define O2E_NC_VW 8
#define O2E_NC_NV 2 /* 16 channels x 6 pixels = 12 ymm */
#define O2E_NC_PX 6
#define O2E_NC_DWPX 7
#elif defined(__aarch64__)
#define O2E_NC_VW 4
#define O2E_NC_NV 4 /* 16 channels x 6 pixels = 24 q */
#define O2E_NC_PX 6
#define O2E_NC_DWPX 14
#else
#define O2E_NC_VW 4
#define O2E_NC_NV 4 /* 16 channels x 3 pixels = 12 xmm */
#define O2E_NC_PX 3
#define O2E_NC_DWPX 7
#endif
typedef float o2e_ncv __attribute__((vector_size(4 * O2E_NC_VW)));
typedef int32_t o2e_nci __attribute__((vector_size(4 * O2E_NC_VW)));
#define O2E_NCV_LOAD(v, p) memcpy(&(v), (p), sizeof(o2e_ncv))
#define O2E_NCV_STORE(p, v) memcpy((p), &(v), sizeof(o2e_ncv))
#define O2E_NC_SUB (O2E_NC_VW * O2E_NC_NV) /* channels per 1x1 tile: 16 or 64 */
#if O2E_NC_VW == 16 /* the narrow tiles' pixel counts: 12, 8 or 6 (their switch cases) */
#define O2E_NC_PXMAX 12
#define O2E_NC_PW_CASES_PXN_(n) O2E_NC_PW_CASES_PXN__(n)
#define O2E_NC_PW_CASES_PXN__(n) O2E_NC_PW_CASES_##n
#define O2E_NC_PW_CASES_12 O2E_NC_PW_CASES12
#define O2E_NC_PW_CASES_8 O2E_NC_PW_CASES8
#define O2E_NC_PW_CASES_6 O2E_NC_PW_CASES
#define O2E_NC_PW_CASES_PX1 O2E_NC_PW_CASES_PXN_(O2E_NC_PX1)
#define O2E_NC_PW_CASES_PX2 O2E_NC_PW_CASES_PXN_(O2E_NC_PX2)
#define O2E_NC_PW_CASES_PX3 O2E_NC_PW_CASES_PXN_(O2E_NC_PX3)
#else
#define O2E_NC_PXMAX O2E_NC_PX
#endif
#else
#define O2E_NC_VEC 0
#define O2E_NC_SUB 16
#define O2E_NC_PX 4
#define O2E_NC_DWPX 8
#endif
/* K slice of a 1x1 layer with a blocked output (partial sums wait in y): a 64-channel tile's
 * slice is 64 KB of weights. Measured neutral against one slice on a 48 KB-L1 host; kept for
 * smaller caches (the tests build with a small one to cover it). */
#ifndef O2E_NC_KC
#define O2E_NC_KC 256
#endif

typedef struct {
  const float *x;    /* K x P input: blocked, or NCHW when !xblk */
  const float *w;    /* [M/16][K][16] */
  const float *bias; /* M floats (zeros when the layer has none) */
  const float *res;  /* M x P in y's layout, added before the activation, or NULL */
  float *y;          /* M x P output: blocked, or NCHW when !yblk */
  float *xs;         /* scratch, K x P floats: an NCHW input reordered to blocks */
  int M, K, P;       /* M, K: multiples of 16 (weights and bias zero-padded) */
  int xblk, yblk;
  o2e_act act;
  int Kn, Mn;        /* the real channel counts (< K, M on the NCHW side of a chain's edge) */
  const float *gate; /* K floats: an SE gate folded in (y = W (x * s) as (W s) x), or NULL */
  float *ws;         /* scratch, max(M, P) x K floats: the weights scaled by the gate (or,
                        below AVX-512, the gated input) */
} o2e_nc_pw_args;

typedef struct {
  const float *x;    /* blocked C x H x W */
  const float *w;    /* [C/16][K*K][16] */
  const float *bias; /* C floats */
  float *y;          /* blocked C x OH x OW */
  int C, H, W, OH, OW, sh, sw, pt, pl;
  o2e_act act;
  int K;             /* kernel size: 3, 5 or 7 (pads <= K / 2) */
  float *pool;       /* Cn floats: the means of y per channel (an SE block's pool), or NULL */
  int Cn;            /* the real channels (C: whole blocks; the lanes past Cn are padding) */
} o2e_nc_dw_args;

/* x * s[c] over a blocked C x P tensor (an SE block's gate, s of [Cn]: the padding lanes
 * past Cn are multiplied by 0) */
typedef struct {
  const float *x, *s;
  float *y;
  int C, P, Cn;
} o2e_nc_gate_args;

/* Balanced tiles of n items, at most `most` each: tile q covers [q*n/nt, (q+1)*n/nt). */
O2E_GEMM_INL int o2e_nc_ntiles_(int n, int most) { return (n + most - 1) / most; }

#if O2E_NC_VEC
/* m ? s : x, lane by lane (a NaN fails every comparison, so it passes as in o2e_act1_) */
O2E_GEMM_INL o2e_ncv o2e_nc_sel_(o2e_nci m, o2e_ncv s, o2e_ncv x) {
  return (o2e_ncv)(((o2e_nci)s & m) | ((o2e_nci)x & ~m));
}

O2E_GEMM_INL o2e_ncv o2e_nc_act_(o2e_ncv x, const o2e_act *act) {
  const o2e_ncv z = {0}, lo = z + act->a, hi = z + act->b;
  if (act->kind == O2E_ACT_RELU) return o2e_nc_sel_(x < z, z, x);
  if (act->kind == O2E_ACT_CLIP) return o2e_nc_sel_(x > hi, hi, o2e_nc_sel_(x < lo, lo, x));
  if (act->kind == O2E_ACT_LEAKY_RELU) return o2e_nc_sel_(x < z, x * lo, x);
  { /* HardSigmoid (a x + b), HardSwish (x / 6 + 1 / 2), clamped as o2e_act1_ */
    const int hs = act->kind == O2E_ACT_HARD_SWISH;
    o2e_ncv t = hs ? x * (z + 1.0f / 6.0f) + 0.5f : x * lo + hi;
    t = o2e_nc_sel_(t < z, z, t);
    t = o2e_nc_sel_(t > z + 1.0f, z + 1.0f, t);
    return hs ? x * t : t;
  }
}

/* y[i] = act(y[i] + r[i]) (r may be NULL) over nv vectors: a 1x1 tile's output just stored,
 * one block's PN pixels (blocked y) or the tile's buffer (an NCHW y), so the residual and
 * activation run while it is in L1 (kept out of the register tiles, whose many copies would
 * otherwise each carry it). Counted in whole vectors, as every caller's tile is: a scalar tail
 * loop here was dead code, and GCC 12 at -march=x86-64-v3 warned (-Werror) that a constant-
 * propagated copy of it could overflow its index. */
O2E_GEMM_FN void o2e_nc_epilogue_(float *y, const float *r, int nv, const o2e_act *act) {
  int i;
  const int rk = act->kind < O2E_ACT_VM_FIRST_ ? act->kind : 0; /* a register kind */
  if (r || rk)
    for (i = 0; i < nv; i++) {
      o2e_ncv s, t;
      O2E_NCV_LOAD(s, y + (size_t)i * O2E_NC_VW);
      if (r) {
        O2E_NCV_LOAD(t, r + (size_t)i * O2E_NC_VW);
        s += t;
      }
      if (rk) s = o2e_nc_act_(s, act);
      O2E_NCV_STORE(y + (size_t)i * O2E_NC_VW, s);
    }
  if (act->kind >= O2E_ACT_VM_FIRST_) /* SiLU, Sigmoid, ... */
    o2e_act_vm_n_(y, (size_t)nv * O2E_NC_VW, *act);
}

/* A finished tile t[p][l] (l < nl channels from m0, p < pn pixels from p0, rows of ld floats)
 * into NCHW rows: the layer leaves the chain. */
O2E_GEMM_FN void o2e_nc_store_nchw_(const float *t, int ld, int nl, int pn, float *y, int P) {
  int l, p;
  for (l = 0; l < nl; l++)
    for (p = 0; p < pn; p++) y[(size_t)l * P + p] = t[p * ld + l];
}

/* The residual of an NCHW output gathered into a tile t[p][l] (rows of ld floats), so the
 * tile's epilogue adds it before the activation. */
O2E_GEMM_FN void o2e_nc_add_nchw_(float *t, int ld, int nl, int pn, const float *r, int P) {
  int l, p;
  for (l = 0; l < nl; l++)
    for (p = 0; p < pn; p++) t[p * ld + l] += r[(size_t)l * P + p];
}

/* one input channel l of block kb: NV weight vectors times PN broadcast pixels */
#define O2E_NC_PW_STEP_                                                                        \
  {                                                                                            \
    _Pragma("GCC unroll 4") for (v = 0; v < NV; v++)                                           \
        O2E_NCV_LOAD(wv[v], wb[v] + wo + (size_t)l * O2E_NC_BLOCK);                            \
    _Pragma("GCC unroll 12") for (p = 0; p < PN; p++) {                                        \
      const float b = xb[p * O2E_NC_BLOCK + l];                                                \
      _Pragma("GCC unroll 4") for (v = 0; v < NV; v++) acc[p][v] += b * wv[v];                 \
    }                                                                                          \
  }

/* One 1x1 tile: channels [m0, m0 + NV*VW) x pixels [p0, p0 + PN), input channels
 * [k0, k1) of a blocked input. The first slice starts from the bias, later ones from the
 * partial sums in y (blocked outputs only: an NCHW output takes K in one slice). NV and PN are
 * constants after inlining, so the accumulators stay in registers. */
O2E_GEMM_INL void o2e_nc_pw_tile_(const int PN, const int NV, const o2e_nc_pw_args *a,
                                  const float *x, int m0, int p0, int k0, int k1) {
  o2e_ncv acc[O2E_NC_PXMAX][O2E_NC_NV], wv[O2E_NC_NV];
  const float *wb[O2E_NC_NV];
  float *yb[O2E_NC_NV];
  const int K = a->K, P = a->P;
  int kb, kn, l, p, v;
#pragma GCC unroll 4
  for (v = 0; v < NV; v++) {
    const int c = m0 + v * O2E_NC_VW;
    wb[v] = a->w + (size_t)(c / O2E_NC_BLOCK) * K * O2E_NC_BLOCK + c % O2E_NC_BLOCK;
    yb[v] = a->y + ((size_t)(c / O2E_NC_BLOCK) * P + p0) * O2E_NC_BLOCK + c % O2E_NC_BLOCK;
    O2E_NCV_LOAD(wv[v], a->bias + c);
  }
  if (k0 == 0) {
#pragma GCC unroll 12
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < NV; v++) acc[p][v] = wv[v];
  } else {
#pragma GCC unroll 12
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < NV; v++) O2E_NCV_LOAD(acc[p][v], yb[v] + (size_t)p * O2E_NC_BLOCK);
  }
  /* input channels past Kn (a padded block's lanes) are never read: their values are
   * unspecified (a padded output lane of the layer before, 0 x Inf = NaN) and 0 weights
   * would not cancel them */
  kn = a->Kn < k1 ? a->Kn : k1;
  for (kb = k0 / O2E_NC_BLOCK; kb * O2E_NC_BLOCK < kn; kb++) {
    const float *xb = x + ((size_t)kb * P + p0) * O2E_NC_BLOCK;
    const size_t wo = (size_t)kb * O2E_NC_BLOCK * O2E_NC_BLOCK;
    if (kn - kb * O2E_NC_BLOCK >= O2E_NC_BLOCK) {
      for (l = 0; l < O2E_NC_BLOCK; l++) O2E_NC_PW_STEP_
    } else {
      for (l = 0; l < kn - kb * O2E_NC_BLOCK; l++) O2E_NC_PW_STEP_
    }
  }
  if (a->yblk) {
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
#pragma GCC unroll 12
      for (p = 0; p < PN; p++) O2E_NCV_STORE(yb[v] + (size_t)p * O2E_NC_BLOCK, acc[p][v]);
    if (k1 == K) /* the last slice: residual and activation over the tile just stored (in L1:
                    one pass over the channel tile after the layer cost 5-11 % per layer) */
      for (v = 0; v < NV * O2E_NC_VW; v += O2E_NC_BLOCK) {
        const size_t o = ((size_t)((m0 + v) / O2E_NC_BLOCK) * P + p0) * O2E_NC_BLOCK;
        o2e_nc_epilogue_(a->y + o, a->res ? a->res + o : NULL, PN * (O2E_NC_BLOCK / O2E_NC_VW),
                         &a->act);
      }
  } else { /* K in one slice: the tile finished in a buffer, then transposed into y */
    float t[O2E_NC_PXMAX * O2E_NC_NV * O2E_NC_VW];
    const int ld = NV * O2E_NC_VW;
    const int nl = a->Mn - m0 < ld ? a->Mn - m0 : ld; /* the real channels */
#pragma GCC unroll 12
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < NV; v++) O2E_NCV_STORE(t + p * ld + v * O2E_NC_VW, acc[p][v]);
    if (a->res) o2e_nc_add_nchw_(t, ld, nl, PN, a->res + (size_t)m0 * P + p0, P);
    o2e_nc_epilogue_(t, NULL, PN * NV, &a->act);
    o2e_nc_store_nchw_(t, ld, nl, PN, a->y + (size_t)m0 * P + p0, P);
  }
}

/* ws = w[m][k] s[k] for output channels [m0, m0 + nl) (their whole blocks: [K][16] each, so
 * one contiguous range of w): an SE gate folded into the layer, scaled once per image instead
 * of a pass writing the gated tensor. (w s) x rounds as x s then w only up to the product's
 * last bit; NaN / Inf arise from the same operands (s is a gate in [0, 1]). */
O2E_GEMM_FN void o2e_nc_gate_w_(const o2e_nc_pw_args *a, int m0, int nl) {
  const float *w = a->w + (size_t)m0 * a->K;
  float *ws = a->ws + (size_t)m0 * a->K;
  int b, k, l;
  for (b = 0; b < nl / O2E_NC_BLOCK; b++)
    for (k = 0; k < a->Kn; k++) { /* the tiles read no channel past Kn (nor gate[k] there) */
      const float g = a->gate[k];
      const size_t o = ((size_t)b * a->K + k) * O2E_NC_BLOCK;
      for (l = 0; l < O2E_NC_BLOCK; l++) ws[o + l] = w[o + l] * g;
    }
}

/* `NV`-vector tiles over all pixels for input channels [k0, k1) (one copy per pixel count a
 * tile can have). */
#define O2E_NC_PW_CASE(n, NV)                                                                  \
  case n: o2e_nc_pw_tile_(n, NV, a, x, m0, p0, k0, k1); break;
#define O2E_NC_PW_ROW(NV, PX, CASES)                                                           \
  nt = o2e_nc_ntiles_(a->P, PX);                                                               \
  for (q = 0; q < nt; q++) {                                                                   \
    const int p0 = (int)((long)q * a->P / nt), pn = (int)((long)(q + 1) * a->P / nt) - p0;     \
    switch (pn) {                                                                              \
      CASES(NV)                                                                                \
    default: o2e_nc_pw_tile_(1, NV, a, x, m0, p0, k0, k1); break;                              \
    }                                                                                          \
  }
#if O2E_NC_PX > 3
#define O2E_NC_PW_CASES(NV)                                                                    \
  O2E_NC_PW_CASE(6, NV) O2E_NC_PW_CASE(5, NV) O2E_NC_PW_CASE(4, NV) O2E_NC_PW_CASE(3, NV)      \
  O2E_NC_PW_CASE(2, NV)
#define O2E_NC_PW_CASES8(NV)                                                                   \
  O2E_NC_PW_CASE(8, NV) O2E_NC_PW_CASE(7, NV) O2E_NC_PW_CASES(NV)
#define O2E_NC_PW_CASES12(NV)                                                                  \
  O2E_NC_PW_CASE(12, NV) O2E_NC_PW_CASE(11, NV) O2E_NC_PW_CASE(10, NV) O2E_NC_PW_CASE(9, NV)   \
  O2E_NC_PW_CASES8(NV)
#else
#define O2E_NC_PW_CASES(NV) O2E_NC_PW_CASE(3, NV) O2E_NC_PW_CASE(2, NV)
#endif

O2E_GEMM_FN void o2e_nc_pw_units_(void *arg, int u0, int u1) {
  const o2e_nc_pw_args *a0 = (const o2e_nc_pw_args *)arg;
  o2e_nc_pw_args ag = *a0; /* with the gated weights when a gate is folded in */
  const o2e_nc_pw_args *a = &ag;
  const int kc = a->yblk ? O2E_NC_KC : a->K; /* partial sums wait in a blocked y only */
  const float *x = a->xblk ? a->x : a->xs;
  int u, q, k0, nt;
  if (a0->gate) ag.w = a0->ws;
  for (u = u0; u < u1; u++) {
    const int m0 = u * O2E_NC_SUB;
    const int nl = a->M - m0 < O2E_NC_SUB ? a->M - m0 : O2E_NC_SUB;
    if (a0->gate) o2e_nc_gate_w_(a0, m0, nl);
    for (k0 = 0; k0 < a->K; k0 += kc) {
      const int k1 = a->K - k0 < kc ? a->K : k0 + kc;
      switch (nl / O2E_NC_VW) { /* the last tile of the layer may be narrower */
#if O2E_NC_VW == 16
      case 1: O2E_NC_PW_ROW(1, O2E_NC_PX1, O2E_NC_PW_CASES_PX1) break;
      case 2: O2E_NC_PW_ROW(2, O2E_NC_PX2, O2E_NC_PW_CASES_PX2) break;
      case 3: O2E_NC_PW_ROW(3, O2E_NC_PX3, O2E_NC_PW_CASES_PX3) break;
#endif
      default: O2E_NC_PW_ROW(O2E_NC_NV, O2E_NC_PX, O2E_NC_PW_CASES) break;
      }
    }
  }
}

#ifndef O2E_NC_DW_SLIDE
#define O2E_NC_DW_SLIDE (O2E_NC_VW == 8)
#endif
#if O2E_NC_DW_SLIDE
/* Stride 1 at AVX2 (16 vector registers): per kernel row, the KS weights in registers and each
 * input pixel of the window (PN + KS - 1) loaded once, then added into every accumulator it
 * feeds (pixel p takes input i with weight i - p): 1 load per KS FMAs instead of 1 per FMA.
 * Each accumulator still adds its taps in the order ky, then kx ascending: the same sums as
 * o2e_nc_dw_tile_. Registers: PN (<= 7) accumulators + KS (<= 7) weights + 1 input. */
O2E_GEMM_INL void o2e_nc_dw_tile_s1_(const int PN, const int KS, const o2e_nc_dw_args *a,
                                     const float *xb, const float *wb, const float *bb,
                                     float *yb, int oy, int ox0) {
  o2e_ncv acc[O2E_NC_DWPX], wv[7], xv;
  const int E = KS / 2;
  int ky, kx, i, p;
  O2E_NCV_LOAD(xv, bb);
#pragma GCC unroll 14
  for (p = 0; p < PN; p++) acc[p] = xv;
  for (ky = 0; ky < KS; ky++) {
    const int iy = oy * a->sh - a->pt + ky;
    const float *row;
    if (iy < 0 || iy >= a->H) continue;
    row = xb + (size_t)iy * a->W * O2E_NC_BLOCK;
#pragma GCC unroll 7
    for (kx = 0; kx < KS; kx++) O2E_NCV_LOAD(wv[kx], wb + (ky * KS + kx) * O2E_NC_BLOCK);
#pragma GCC unroll 14
    for (i = 0; i < PN + KS - 1; i++) {
      const int ix = ox0 - a->pl + i;
      /* only the window's first and last KS / 2 inputs can fall in the padding (pads <= KS /
         2, as in o2e_nc_dw_tile_) */
      if ((i < E || i >= PN + KS - 1 - E) && (ix < 0 || ix >= a->W)) continue;
      O2E_NCV_LOAD(xv, row + (size_t)ix * O2E_NC_BLOCK);
#pragma GCC unroll 7
      for (kx = 0; kx < KS; kx++)
        if (i - kx >= 0 && i - kx < PN) acc[i - kx] += xv * wv[kx];
    }
  }
  if (a->act.kind && a->act.kind < O2E_ACT_VM_FIRST_)
#pragma GCC unroll 14
    for (p = 0; p < PN; p++) acc[p] = o2e_nc_act_(acc[p], &a->act);
#pragma GCC unroll 14
  for (p = 0; p < PN; p++) O2E_NCV_STORE(yb + (size_t)p * O2E_NC_BLOCK, acc[p]);
}
#endif

/* One depthwise tile: VW channels of one block, output row oy, pixels [ox0, ox0 + PN), stride
 * S, kernel KS x KS; taps in the padding are skipped on the tile's first and last KS / 2 pixels
 * only (on 7- and 14-wide maps every tile touches an edge). A register activation is applied
 * before the store (a vmath one after the row, o2e_nc_dw_units_). */
O2E_GEMM_INL void o2e_nc_dw_tile_(const int PN, const int S, const int KS,
                                  const o2e_nc_dw_args *a, const float *xb, const float *wb,
                                  const float *bb, float *yb, int oy, int ox0) {
  o2e_ncv acc[O2E_NC_DWPX], wv, xv;
  const int E = KS / 2;
  int ky, kx, p;
#if O2E_NC_DW_SLIDE
  if (S == 1) {
    o2e_nc_dw_tile_s1_(PN, KS, a, xb, wb, bb, yb, oy, ox0);
    return;
  }
#endif
  O2E_NCV_LOAD(wv, bb);
#pragma GCC unroll 14
  for (p = 0; p < PN; p++) acc[p] = wv;
  for (ky = 0; ky < KS; ky++) {
    const int iy = oy * a->sh - a->pt + ky;
    const float *row;
    if (iy < 0 || iy >= a->H) continue;
    row = xb + (size_t)iy * a->W * O2E_NC_BLOCK;
#pragma GCC unroll 7
    for (kx = 0; kx < KS; kx++) {
      const int ix0 = ox0 * S - a->pl + kx;
      O2E_NCV_LOAD(wv, wb + (ky * KS + kx) * O2E_NC_BLOCK);
#pragma GCC unroll 14
      for (p = 0; p < PN; p++) {
        const int ix = ix0 + p * S;
        /* with pads <= KS / 2 only a tile's first and last KS / 2 pixels can reach into the
         * padding: ix >= p - pl >= 0 for p >= E, and pixel ox (<= OW - 1 - j, j = PN - 1 - p)
         * reads at most ix = W + pr - 1 - j S < W for j >= pr; so the inner pixels run
         * without a test once unrolled */
        if ((p < E || p >= PN - E) && (ix < 0 || ix >= a->W)) continue;
        O2E_NCV_LOAD(xv, row + (size_t)ix * O2E_NC_BLOCK);
        acc[p] += xv * wv;
      }
    }
  }
  if (a->act.kind && a->act.kind < O2E_ACT_VM_FIRST_) /* in registers: a second pass over
                                                         the block's rows cost 30-45 % here */
#pragma GCC unroll 14
    for (p = 0; p < PN; p++) acc[p] = o2e_nc_act_(acc[p], &a->act);
#pragma GCC unroll 14
  for (p = 0; p < PN; p++) O2E_NCV_STORE(yb + (size_t)p * O2E_NC_BLOCK, acc[p]);
}

#define O2E_NC_DW_CASE(n, S, KS)                                                               \
  case n: o2e_nc_dw_tile_(n, S, KS, a, xb, wb, bb, yb, oy, ox0); break;
#if O2E_NC_DWPX > 7
#define O2E_NC_DW_CASES(S, KS)                                                                 \
  O2E_NC_DW_CASE(14, S, KS) O2E_NC_DW_CASE(13, S, KS) O2E_NC_DW_CASE(12, S, KS)                \
  O2E_NC_DW_CASE(11, S, KS) O2E_NC_DW_CASE(10, S, KS) O2E_NC_DW_CASE(9, S, KS)                 \
  O2E_NC_DW_CASE(8, S, KS) O2E_NC_DW_CASE(7, S, KS) O2E_NC_DW_CASE(6, S, KS)                   \
  O2E_NC_DW_CASE(5, S, KS) O2E_NC_DW_CASE(4, S, KS) O2E_NC_DW_CASE(3, S, KS)                   \
  O2E_NC_DW_CASE(2, S, KS)
#else
#define O2E_NC_DW_CASES(S, KS)                                                                 \
  O2E_NC_DW_CASE(7, S, KS) O2E_NC_DW_CASE(6, S, KS) O2E_NC_DW_CASE(5, S, KS)                   \
  O2E_NC_DW_CASE(4, S, KS) O2E_NC_DW_CASE(3, S, KS) O2E_NC_DW_CASE(2, S, KS)
#endif
#define O2E_NC_DW_SWITCH(S, KS)                                                                \
  switch (pn) {                                                                                \
    O2E_NC_DW_CASES(S, KS)                                                                     \
  default: o2e_nc_dw_tile_(1, S, KS, a, xb, wb, bb, yb, oy, ox0); break;                       \
  }

/* One row of tiles (all VW-lane slices of the block), one copy per (stride, kernel size). */
O2E_GEMM_INL void o2e_nc_dw_row_(const o2e_nc_dw_args *a, int u, int oy) {
  const int nt = o2e_nc_ntiles_(a->OW, O2E_NC_DWPX), KK = a->K * a->K;
  int s, q;
  for (q = 0; q < nt; q++)
    for (s = 0; s < O2E_NC_BLOCK; s += O2E_NC_VW) {
      const float *xb = a->x + (size_t)u * O2E_NC_BLOCK * a->H * a->W + s;
      const float *wb = a->w + (size_t)u * KK * O2E_NC_BLOCK + s;
      const float *bb = a->bias + (size_t)u * O2E_NC_BLOCK + s;
      const int ox0 = (int)((long)q * a->OW / nt);
      const int pn = (int)((long)(q + 1) * a->OW / nt) - ox0;
      float *yb =
          a->y + ((size_t)u * a->OH * a->OW + (size_t)oy * a->OW + ox0) * O2E_NC_BLOCK + s;
      const int sel = (a->sw == 1 ? 0 : 3) + (a->K == 3 ? 0 : a->K == 5 ? 1 : 2);
      switch (sel) {
      case 0: O2E_NC_DW_SWITCH(1, 3) break;
      case 1: O2E_NC_DW_SWITCH(1, 5) break;
      case 2: O2E_NC_DW_SWITCH(1, 7) break;
      case 3: O2E_NC_DW_SWITCH(2, 3) break;
      case 4: O2E_NC_DW_SWITCH(2, 5) break;
      default: O2E_NC_DW_SWITCH(2, 7) break;
      }
    }
}

O2E_GEMM_FN void o2e_nc_dw_units_(void *arg, int u0, int u1) {
  const o2e_nc_dw_args *a = (const o2e_nc_dw_args *)arg;
  const size_t rn = (size_t)a->OW * O2E_NC_BLOCK; /* one output row of a block */
  int u, oy, l;
  size_t i;
  for (u = u0; u < u1; u++) {
    float sum[O2E_NC_BLOCK] = {0};
    for (oy = 0; oy < a->OH; oy++) {
      float *yr = a->y + ((size_t)u * a->OH + oy) * rn;
      o2e_nc_dw_row_(a, u, oy);
      if (a->act.kind >= O2E_ACT_VM_FIRST_) o2e_act_vm_n_(yr, rn, a->act); /* row in L1 */
      if (a->pool) /* the SE block's pool while the row is in L1: whole-vector adds */
        for (i = 0; i < rn; i += O2E_NC_BLOCK)
          for (l = 0; l < O2E_NC_BLOCK; l++) sum[l] += yr[i + l];
    }
    if (a->pool)
      for (l = 0; l < O2E_NC_BLOCK && u * O2E_NC_BLOCK + l < a->Cn; l++)
        a->pool[u * O2E_NC_BLOCK + l] = sum[l] / (float)(a->OH * a->OW);
  }
}
#else /* portable C: the same sums in the same order, lane by lane */
O2E_GEMM_FN void o2e_nc_pw_units_(void *arg, int u0, int u1) {
  const o2e_nc_pw_args *a = (const o2e_nc_pw_args *)arg;
  const int K = a->K, P = a->P;
  const size_t ls = a->xblk ? 1 : (size_t)P, ps = a->xblk ? O2E_NC_BLOCK : 1;
  int u, p, k, l;
  for (u = u0; u < u1; u++) {
    const float *w = a->w + (size_t)u * K * O2E_NC_BLOCK;
    for (p = 0; p < P; p++) {
      float acc[O2E_NC_BLOCK];
      for (l = 0; l < O2E_NC_BLOCK; l++) acc[l] = a->bias[u * O2E_NC_BLOCK + l];
      for (k = 0; k < a->Kn; k++) { /* the padded channels' weights are zeros */
        const float b = a->x[(size_t)(k / O2E_NC_BLOCK) * O2E_NC_BLOCK * P +
                             (size_t)(k % O2E_NC_BLOCK) * ls + (size_t)p * ps];
        const float g = a->gate ? a->gate[k] : 1.0f; /* a folded SE gate: (w s) x */
        for (l = 0; l < O2E_NC_BLOCK; l++) acc[l] += b * (w[(size_t)k * O2E_NC_BLOCK + l] * g);
      }
      /* a blocked y's padding lanes are written too (their value is never read) */
      for (l = 0; l < O2E_NC_BLOCK && (a->yblk || u * O2E_NC_BLOCK + l < a->Mn); l++) {
        const size_t i = a->yblk ? ((size_t)u * P + p) * O2E_NC_BLOCK + l
                                 : (size_t)(u * O2E_NC_BLOCK + l) * P + p;
        float s = acc[l];
        if (a->res) s += a->res[i];
        a->y[i] = o2e_act1_(s, a->act);
      }
    }
  }
}

O2E_GEMM_FN void o2e_nc_dw_units_(void *arg, int u0, int u1) {
  const o2e_nc_dw_args *a = (const o2e_nc_dw_args *)arg;
  const int KS = a->K;
  int u, oy, ox, ky, kx, l;
  for (u = u0; u < u1; u++) {
    float sum[O2E_NC_BLOCK] = {0};
    for (oy = 0; oy < a->OH; oy++)
      for (ox = 0; ox < a->OW; ox++) {
        float acc[O2E_NC_BLOCK];
        float *yp = a->y + ((size_t)u * a->OH * a->OW + (size_t)oy * a->OW + ox) * O2E_NC_BLOCK;
        for (l = 0; l < O2E_NC_BLOCK; l++) acc[l] = a->bias[u * O2E_NC_BLOCK + l];
        for (ky = 0; ky < KS; ky++) {
          const int iy = oy * a->sh - a->pt + ky;
          if (iy < 0 || iy >= a->H) continue;
          for (kx = 0; kx < KS; kx++) {
            const int ix = ox * a->sw - a->pl + kx;
            const float *xp, *wp;
            if (ix < 0 || ix >= a->W) continue;
            xp = a->x + ((size_t)u * a->H * a->W + (size_t)iy * a->W + ix) * O2E_NC_BLOCK;
            wp = a->w + ((size_t)u * KS * KS + ky * KS + kx) * O2E_NC_BLOCK;
            for (l = 0; l < O2E_NC_BLOCK; l++) acc[l] += xp[l] * wp[l];
          }
        }
        for (l = 0; l < O2E_NC_BLOCK; l++) {
          yp[l] = o2e_act1_(acc[l], a->act);
          sum[l] += yp[l];
        }
      }
    if (a->pool)
      for (l = 0; l < O2E_NC_BLOCK && u * O2E_NC_BLOCK + l < a->Cn; l++)
        a->pool[u * O2E_NC_BLOCK + l] = sum[l] / (float)(a->OH * a->OW);
  }
}
#endif

O2E_GEMM_FN void o2e_nchwc_gate(const o2e_nc_gate_args *a, int threaded);

/* One image of a 1x1 layer (on the thread pool when `threaded`: the converter sets it for
 * layers worth the hand-off). */
O2E_GEMM_FN void o2e_nchwc_conv1x1(const o2e_nc_pw_args *a, int threaded) {
  const int units = (a->M + O2E_NC_SUB - 1) / O2E_NC_SUB;
#if O2E_NC_VEC && !defined(__AVX512F__)
  if (a->gate) { /* narrower vectors: scaling the weights cost more than the gated input
                    (EfficientNet-B0's 14x14 projections 1.07-1.09x at x86-64-v3), so the
                    gated input x s goes to the scratch (K x P floats) and the layer reads it */
    const o2e_nc_gate_args ga = {a->x, a->gate, a->ws, a->K, a->P, a->Kn};
    o2e_nc_pw_args g = *a;
    o2e_nchwc_gate(&ga, threaded);
    g.x = a->ws, g.gate = NULL, g.ws = NULL;
    if (threaded)
      o2e_parallel_for(units, o2e_nc_pw_units_, (void *)&g);
    else
      o2e_nc_pw_units_((void *)&g, 0, units);
    return;
  }
#endif
#if O2E_NC_VEC
  if (!a->xblk) { /* entering the chain: reorder the input to blocks once, for every tile */
    const int P = a->P;
    int kb, p, l;
    for (kb = 0; kb < a->K / O2E_NC_BLOCK; kb++)
      for (p = 0; p < P; p++)
        for (l = 0; l < O2E_NC_BLOCK; l++) /* zeros for the channels past Kn */
          a->xs[((size_t)kb * P + p) * O2E_NC_BLOCK + l] =
              kb * O2E_NC_BLOCK + l < a->Kn ? a->x[((size_t)kb * O2E_NC_BLOCK + l) * P + p] : 0;
  }
#endif
  if (threaded)
    o2e_parallel_for(units, o2e_nc_pw_units_, (void *)a);
  else
    o2e_nc_pw_units_((void *)a, 0, units);
}

/* One image of a depthwise KxK layer, both sides blocked. */
O2E_GEMM_FN void o2e_nchwc_dw(const o2e_nc_dw_args *a, int threaded) {
  const int units = a->C / O2E_NC_BLOCK;
  if (threaded)
    o2e_parallel_for(units, o2e_nc_dw_units_, (void *)a);
  else
    o2e_nc_dw_units_((void *)a, 0, units);
}

/* GlobalAveragePool of one blocked image x [C/16][P][16] into y[Cn] (Cn <= C real channels,
 * the rest padding). Two interleaved partial
 * sums per lane (even / odd pixels: the adds do not wait on each other); the plain loops
 * vectorise over the 16 lanes at every ISA, so there is no ISA branch. */
O2E_GEMM_FN void o2e_nchwc_gap(const float *x, float *y, int C, int P, int Cn) {
  int b, p, l;
  for (b = 0; b < C / O2E_NC_BLOCK; b++) {
    const float *xb = x + (size_t)b * P * O2E_NC_BLOCK;
    float s0[O2E_NC_BLOCK] = {0}, s1[O2E_NC_BLOCK] = {0};
    for (p = 0; p + 1 < P; p += 2)
      for (l = 0; l < O2E_NC_BLOCK; l++) {
        s0[l] += xb[(size_t)p * O2E_NC_BLOCK + l];
        s1[l] += xb[(size_t)(p + 1) * O2E_NC_BLOCK + l];
      }
    if (p < P)
      for (l = 0; l < O2E_NC_BLOCK; l++) s0[l] += xb[(size_t)p * O2E_NC_BLOCK + l];
    for (l = 0; l < O2E_NC_BLOCK && b * O2E_NC_BLOCK + l < Cn; l++)
      y[b * O2E_NC_BLOCK + l] = (s0[l] + s1[l]) / (float)P;
  }
}

/* y = x * s[c] over one blocked image (an SE block's gating Mul inside a chain): a block's
 * 16 gates are one vector (the plain loop vectorises at every ISA). */
O2E_GEMM_FN void o2e_nc_gate_units_(void *arg, int u0, int u1) {
  const o2e_nc_gate_args *a = (const o2e_nc_gate_args *)arg;
  int u, p, l;
  for (u = u0; u < u1; u++) {
    const float *x = a->x + (size_t)u * a->P * O2E_NC_BLOCK, *s = a->s + u * O2E_NC_BLOCK;
    float *y = a->y + (size_t)u * a->P * O2E_NC_BLOCK;
    float sp[O2E_NC_BLOCK] = {0};
    if ((u + 1) * O2E_NC_BLOCK > a->Cn) { /* the padded block: s has Cn values */
      for (l = 0; u * O2E_NC_BLOCK + l < a->Cn; l++) sp[l] = s[l];
      s = sp;
    }
    for (p = 0; p < a->P; p++)
      for (l = 0; l < O2E_NC_BLOCK; l++)
        y[(size_t)p * O2E_NC_BLOCK + l] = x[(size_t)p * O2E_NC_BLOCK + l] * s[l];
  }
}

O2E_GEMM_FN void o2e_nchwc_gate(const o2e_nc_gate_args *a, int threaded) {
  const int units = a->C / O2E_NC_BLOCK;
  if (threaded)
    o2e_parallel_for(units, o2e_nc_gate_units_, (void *)a);
  else
    o2e_nc_gate_units_((void *)a, 0, units);
}

#endif /* O2E_NCHWC_H */
