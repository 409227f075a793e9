/* o2e_conv1x1.h - 1x1 convolutions on narrow maps, output channels in the vector lanes
 * (kernels/conv/conv_pointwise.py chooses it; issue 9).
 *
 *   y[m][p] = act(b[m] + sum_k w[m][k] . x[k][p'] + r[m][p])   (NCHW, one image, P = OH*OW)
 *
 * where input pixel p' is output pixel p, or with strides its subsampled pixel.
 *
 * The packed GEMM puts the P output pixels in the vector lanes and register columns (48 per
 * AVX-512 strip, 24 per AVX2 strip). A 7x7 map (P = 49) then fills one strip and 1/16 of the
 * next, and every strip streams the whole weight matrix again: MobileNet's conv6/sep reads its
 * 4 MB of weights three times per call at AVX2. Here the roles are swapped: a tile holds
 * NV vectors of output channels (the lanes) x PX pixels (one register row each), so the lanes
 * are full whatever P is, and each weight is read once per pixel tile from L1/L2:
 *
 *   AVX-512  32 channels x 13 pixels: 26 accumulators + 2 weight vectors + 1 broadcast (32 zmm)
 *   AVX2     16 channels x  6 pixels: 12 accumulators + 2 weight vectors + 1 broadcast (16 ymm)
 *   NEON     16 channels x  6 pixels: 24 accumulators + 4 weight vectors (32 q registers)
 *   SSE      8 channels x  6 pixels: 12 accumulators + 2 + 1 (16 xmm)
 *   other    plain C over the same blocks.
 * Per K step a tile loads NV weight vectors and broadcasts PX pixels for NV*PX FMAs, so the
 * FMA units, not the loads, set the pace. The vector code is written once with GCC / clang
 * vector extensions (one native vector each, as in o2e_sparse.h); a*b+c contracts to FMA
 * under -ffp-contract=fast.
 *
 * Weights are rearranged at conversion time to panels of 16 channels, [Mp/16][K][16] with M
 * zero-padded to Mp, a multiple of 32 (bias likewise): a tile's weights are one or two
 * sequential streams whatever lane width the build has, and one generated model.c runs with
 * any of the kernels. The input is packed once per call into tiles of K x PX consecutive
 * floats (tile q: pixels [q*P/nt, (q+1)*P/nt), balanced so 49 pixels are 12+12+12+13 at
 * AVX-512, never a 1-pixel tile), shared by all threads. Bias and activation are applied to
 * the tile in registers; the finished tile is then transposed into the NCHW rows by a scalar
 * copy (the caller picks this path only where K is large enough for that copy to be a small
 * part of the tile). With a residual, the activation waits for a pass over the finished rows
 * of a channel tile (add, then activate: compare-and-select, which keeps NaN as the GEMM
 * epilogue's o2e_act1_ does).
 * Work units are tiles of channels: independent, split by o2e_parallel_for.
 * Results do not depend on the split or the thread count.
 */
#ifndef O2E_CONV1X1_H
#define O2E_CONV1X1_H

#include "o2e_gemm.h"

#define O2E_PW_PANEL 16 /* channels per weight panel: part of the converted weight format */
#define O2E_PW_MALIGN 32 /* M is zero-padded to a multiple of this in weights and bias */
#define O2E_PW_PXMAX 12  /* the scratch holds P + this pixels: enough for tiles of <= 13 */
#ifndef O2E_PW_KC /* K slice: the slice of a tile's weights stays in L1 (16 or 32 KB) */
#define O2E_PW_KC 256
#endif
#ifndef O2E_PW_PF /* prefetch the next K slice's weights: 0 off, 1 during the slice's first */
#define O2E_PW_PF 2 /* pixel tile, 2 spread over all its pixel tiles (see o2e_pw_units_) */
#endif
#ifndef O2E_PW_PF_LOC /* its cache level hint (__builtin_prefetch locality) */
#define O2E_PW_PF_LOC 2
#endif

/* O2E_PW_SCALAR: the portable loops on any host (a convert --device build: its scratch is
 * sized for their tiles, the same on the microcontroller and on the PC that verifies it) */
#if !defined(O2E_PW_SCALAR) && (defined(__GNUC__) || defined(__clang__)) &&                    \
    (defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__) ||                          \
     (defined(__ARM_NEON) && defined(__aarch64__)))
#define O2E_PW_VEC 1
#if defined(__AVX512F__)
#define O2E_PW_VW 16
#define O2E_PW_NV 2
#define O2E_PW_PX 13 /* 26 accumulators + 2 + 1 of 32 zmm: 49 pixels are 4 tiles, not 5 */
#elif defined(__AVX__)
#define O2E_PW_VW 8
#define O2E_PW_NV 2
#define O2E_PW_PX 6
#elif defined(__aarch64__)
#define O2E_PW_VW 4
#define O2E_PW_NV 4
#define O2E_PW_PX 6
#else
#define O2E_PW_VW 4
#define O2E_PW_NV 2
#define O2E_PW_PX 6
#endif
typedef float o2e_pwv __attribute__((vector_size(4 * O2E_PW_VW)));
typedef int32_t o2e_pwi __attribute__((vector_size(4 * O2E_PW_VW)));
#define O2E_PWV_LOAD(v, p) memcpy(&(v), (p), sizeof(o2e_pwv))
#define O2E_PWV_STORE(p, v) memcpy((p), &(v), sizeof(o2e_pwv))
#define O2E_PW_SUB (O2E_PW_VW * O2E_PW_NV) /* channels per tile */
#else
#define O2E_PW_VEC 0
#define O2E_PW_SUB 8
#define O2E_PW_PX 4
#endif

typedef struct {
  const float *x;    /* K x H x W input */
  const float *w;    /* [Mp / 16][K][16], Mp = M rounded up to 32, zero-padded */
  float *xp;         /* scratch: K * (P + O2E_PW_PXMAX) floats */
  float *acc;        /* scratch: (P + O2E_PW_PXMAX) * 32 floats per thread */
  const float *bias; /* Mp floats (zeros when the layer has none) */
  const float *res;  /* M x P added before the activation, or NULL; may be y itself */
  float *y;          /* M x P output */
  int M, K, P;       /* P = OH * OW output pixels */
  int HW, W, OW, sh, sw; /* input plane size and width, output width, strides */
  o2e_act act;
} o2e_pw_args;

/* A call's arguments and its weight layout: wfmt 0, the panels above; O2E_GEMM_MR, the GEMM's
 * packed A ([M8 / 8][K][8], M rounded up to 8: o2e_pack_a) with bias M floats or NULL and res
 * possibly y itself (kernels/conv/conv_gemm.py's 1x1 layers at AVX2: o2e_conv1x1_lanes_packed_a). */
typedef struct {
  o2e_pw_args a;
  int wfmt;
} o2e_pw_job_;

/* Weight rows a tile prefetches: rows q, q + step, q + 2 step, ... (< len) of the panels p[v],
 * one every `step` K steps (see o2e_pw_units_). */
typedef struct {
  const float *p[O2E_PW_SUB / 4 + 1];
  int q, step, len;
} o2e_pw_pf;

#if O2E_PW_VEC
/* x < 0 ? s : x, lane by lane, as the scalar o2e_act1_ (a NaN fails the comparison and passes) */
O2E_GEMM_INL o2e_pwv o2e_pw_sel_(o2e_pwi m, o2e_pwv s, o2e_pwv x) {
  return (o2e_pwv)(((o2e_pwi)s & m) | ((o2e_pwi)x & ~m));
}

/* t[p][l] = act(s[p][l] + sum_{k0 <= k < k1} w[k][l] . xp[k][p]) for l < O2E_PW_SUB, p < PN,
 * where s is bias[l] when bias != NULL (first K slice), else t's partial sums; act only on the
 * last slice without a residual (act != NULL). Vector v of the tile reads wb[v] + 16 k; xp
 * has row stride O2E_PW_PX. PN is a constant after inlining, so acc stays in registers. */
O2E_GEMM_INL void o2e_pw_tile_(const int PN, int k0, int k1, const float *const *wb, int ws,
                               const o2e_pw_pf *pf, const float *xp, const float *bias,
                               const o2e_act *act, float *t) {
  o2e_pwv acc[O2E_PW_PX][O2E_PW_NV], bv[O2E_PW_NV];
  int k, p, v;
  if (bias) {
#pragma GCC unroll 4
    for (v = 0; v < O2E_PW_NV; v++) O2E_PWV_LOAD(bv[v], bias + v * O2E_PW_VW);
#pragma GCC unroll 16
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < O2E_PW_NV; v++) acc[p][v] = bv[v];
  } else {
#pragma GCC unroll 16
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < O2E_PW_NV; v++) O2E_PWV_LOAD(acc[p][v], t + p * O2E_PW_SUB + v * O2E_PW_VW);
  }
  int cd = 0; /* K steps to the next prefetch */
  for (k = k0; k < k1; k++) {
    o2e_pwv wv[O2E_PW_NV];
    const float *xk = xp + (size_t)k * O2E_PW_PX;
#pragma GCC unroll 4
    for (v = 0; v < O2E_PW_NV; v++) O2E_PWV_LOAD(wv[v], wb[v] + (size_t)k * ws);
    if (pf && cd-- == 0) {
      const int r = k - k0 + pf->q;
      cd = pf->step - 1;
      if (r < pf->len) /* one line per panel row: the vectors of a 64-byte row share it */
#pragma GCC unroll 4
        for (v = 0; v < O2E_PW_NV; v++)
          if (v * O2E_PW_VW % O2E_PW_PANEL == 0 || ws != O2E_PW_PANEL)
            O2E_PREFETCH_(pf->p[v] + (size_t)r * ws, O2E_PW_PF_LOC);
    }
#pragma GCC unroll 16
    for (p = 0; p < PN; p++) {
      const float b = xk[p];
#pragma GCC unroll 4
      for (v = 0; v < O2E_PW_NV; v++) acc[p][v] += b * wv[v];
    }
  }
  if (act && act->kind && act->kind < O2E_ACT_VM_FIRST_) {
    const o2e_pwv z = {0}, lo = z + act->a, hi = z + act->b;
#pragma GCC unroll 16
    for (p = 0; p < PN; p++)
#pragma GCC unroll 4
      for (v = 0; v < O2E_PW_NV; v++) {
        o2e_pwv x = acc[p][v];
        if (act->kind == O2E_ACT_RELU)
          x = o2e_pw_sel_(x < z, z, x);
        else if (act->kind == O2E_ACT_CLIP)
          x = o2e_pw_sel_(x > hi, hi, o2e_pw_sel_(x < lo, lo, x));
        else if (act->kind == O2E_ACT_LEAKY_RELU)
          x = o2e_pw_sel_(x < z, x * lo, x);
        else { /* HardSigmoid (a x + b), HardSwish (x / 6 + 1 / 2), clamped as o2e_act1_ */
          const int hs = act->kind == O2E_ACT_HARD_SWISH;
          o2e_pwv t = hs ? x * (z + 1.0f / 6.0f) + 0.5f : x * lo + hi;
          t = o2e_pw_sel_(t < z, z, t);
          t = o2e_pw_sel_(t > z + 1.0f, z + 1.0f, t);
          x = hs ? x * t : t;
        }
        acc[p][v] = x;
      }
  }
#pragma GCC unroll 16
  for (p = 0; p < PN; p++)
#pragma GCC unroll 4
    for (v = 0; v < O2E_PW_NV; v++) O2E_PWV_STORE(t + p * O2E_PW_SUB + v * O2E_PW_VW, acc[p][v]);
  /* a vmath kind (SiLU, HardSwish, ...): over the tile just stored, still in L1 */
  if (act && act->kind >= O2E_ACT_VM_FIRST_) o2e_act_n_(t, (size_t)PN * O2E_PW_SUB, *act);
}

O2E_GEMM_FN void o2e_pw_tile_any_(int pn, int k0, int k1, const float *const *wb, int ws,
                                  const o2e_pw_pf *pf, const float *xp, const float *bias,
                                  const o2e_act *act, float *t) {
  switch (pn) { /* one register-resident copy per width */
#if O2E_PW_PX > 12
  case 13: o2e_pw_tile_(13, k0, k1, wb, ws, pf, xp, bias, act, t); return;
#endif
#if O2E_PW_PX > 6
  case 12: o2e_pw_tile_(12, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 11: o2e_pw_tile_(11, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 10: o2e_pw_tile_(10, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 9: o2e_pw_tile_(9, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 8: o2e_pw_tile_(8, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 7: o2e_pw_tile_(7, k0, k1, wb, ws, pf, xp, bias, act, t); return;
#endif
  case 6: o2e_pw_tile_(6, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 5: o2e_pw_tile_(5, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 4: o2e_pw_tile_(4, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 3: o2e_pw_tile_(3, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  case 2: o2e_pw_tile_(2, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  default: o2e_pw_tile_(1, k0, k1, wb, ws, pf, xp, bias, act, t); return;
  }
}
#else
O2E_GEMM_FN void o2e_pw_tile_any_(int pn, int k0, int k1, const float *const *wb, int ws,
                                  const o2e_pw_pf *pf, const float *xp, const float *bias,
                                  const o2e_act *act, float *t) {
  int k, p, l;
  (void)pf; /* no prefetch in the plain C kernel */
  if (bias)
    for (p = 0; p < pn; p++)
      for (l = 0; l < O2E_PW_SUB; l++) t[p * O2E_PW_SUB + l] = bias[l];
  for (k = k0; k < k1; k++)
    for (p = 0; p < pn; p++) {
      const float b = xp[(size_t)k * O2E_PW_PX + p];
      for (l = 0; l < O2E_PW_SUB; l++)
        t[p * O2E_PW_SUB + l] += b * wb[l / 4][(size_t)k * ws + l % 4];
    }
  if (act)
    for (k = 0; k < pn * O2E_PW_SUB; k++) t[k] = o2e_act1_(t[k], *act);
}
#endif

/* Balanced pixel tiles: tile q covers [q*P/nt, (q+1)*P/nt). */
O2E_GEMM_INL int o2e_pw_ntiles_(int P) { return (P + O2E_PW_PX - 1) / O2E_PW_PX; }

/* y[l][p] = t[p][l] for l < nl, p < pn (y row stride P). */
O2E_GEMM_FN void o2e_pw_store_(const float *restrict t, int nl, int pn, float *restrict y, int P) {
  int l, p;
  for (l = 0; l < nl; l++)
    for (p = 0; p < pn; p++) y[(size_t)l * P + p] = t[p * O2E_PW_SUB + l];
}

/* y[l][p] = act(y[l][p] + r[l][p]) over whole rows (l < nl, p < P): contiguous, so the
 * compiler vectorises it (compare and blend, which keep NaN as o2e_act1_ does). r may be y
 * itself (each element is read before it is written), so neither pointer is restrict. */
O2E_GEMM_FN void o2e_pw_residual_(int nl, int P, const float *r, float *y, o2e_act act) {
  const float lo = act.a, hi = act.b;
  const size_t n = (size_t)nl * P;
  size_t i;
  switch (act.kind) {
  case 0:
    for (i = 0; i < n; i++) y[i] = y[i] + r[i];
    break;
  case 1:
    for (i = 0; i < n; i++) {
      const float v = y[i] + r[i];
      y[i] = v < 0.0f ? 0.0f : v;
    }
    break;
  case 2:
    for (i = 0; i < n; i++) {
      float v = y[i] + r[i];
      v = v < lo ? lo : v;
      y[i] = v > hi ? hi : v;
    }
    break;
  case 3:
    for (i = 0; i < n; i++) {
      const float v = y[i] + r[i];
      y[i] = v < 0.0f ? v * lo : v;
    }
    break;
  default: /* vmath kinds: add, then activate, 512 floats at a time (they stay in L1) */
    for (i = 0; i < n; i += 512) {
      const size_t m = n - i < 512 ? n - i : 512;
      size_t j;
      for (j = 0; j < m; j++) y[i + j] = y[i + j] + r[i + j];
      o2e_act_n_(y + i, m, act);
    }
  }
}

/* y[l][p] = act(t[p][l] + r[l][p]) for l < nl, p < pn (row stride P): the packed-A path's
 * store, one element at a time, so that r may be y itself (kernels/conv/conv_gemm.py lets a 1x1
 * layer's output take its residual's buffer); o2e_act1_ is the GEMM epilogue's activation. */
O2E_GEMM_FN void o2e_pw_store_res_(const float *t, int nl, int pn, const float *r, float *y,
                                   int P, o2e_act act) {
  int l, p;
  for (l = 0; l < nl; l++)
    for (p = 0; p < pn; p++) {
      const size_t i = (size_t)l * P + p;
      y[i] = o2e_act1_(t[p * O2E_PW_SUB + l] + r[i], act);
    }
}

/* wb[v]: where vector v of channel tile u starts (its lanes' weights at k = 0), the row stride
 * of those rows returned. In the GEMM's packed A a vector past the last 8-row panel (M not a
 * multiple of 16) reads the last panel again: its lanes are never stored. */
O2E_GEMM_INL int o2e_pw_wb_(const o2e_pw_args *a, int wfmt, int u, const float **wb) {
  const int pw = wfmt ? wfmt : O2E_PW_PANEL, np = (a->M + pw - 1) / pw;
  int v;
  for (v = 0; v * 4 < O2E_PW_SUB; v++) { /* the panel row of each group of 4 lanes */
    const int c = u * O2E_PW_SUB + 4 * v, pi = c / pw < np ? c / pw : np - 1;
    wb[v] = a->w + (size_t)pi * a->K * pw + c % pw;
  }
#if O2E_PW_VEC
  for (v = 0; v < O2E_PW_NV; v++) wb[v] = wb[v * O2E_PW_VW / 4];
#endif
  return pw;
}

/* Tiles [u0, u1): tile u covers channels [u * O2E_PW_SUB, (u + 1) * O2E_PW_SUB), all pixels.
 * K is cut into O2E_PW_KC slices so that the tile's weights of a slice stay in L1 while every
 * pixel tile streams past them (as the GEMM's KC); partial sums wait in this thread's part of
 * a->acc, one PX x SUB block per pixel tile. The pixel tiles of a slice prefetch the weights
 * of the next slice (or of the next channel tile's first slice), tile q of nt the rows q,
 * q + nt, ..., so the misses spread over the whole slice: the weights, 1-4 MB on NIN's cccp7/8
 * and ResNet50's res5 layers, come from L3 or memory once per call, and the hardware
 * prefetchers, following two or more panel streams that restart every K slice, left the first
 * tile waiting for them (per node 0.90-0.95x at AVX-512; all in the first tile: 0.92-0.97x;
 * a whole channel tile ahead instead of a slice: 1.01-1.04x the slice-ahead time). */
O2E_GEMM_FN void o2e_pw_units_(void *arg, int u0, int u1) {
  const o2e_pw_args *a = &((const o2e_pw_job_ *)arg)->a;
  const int wfmt = ((const o2e_pw_job_ *)arg)->wfmt;
  const int P = a->P, K = a->K, nt = o2e_pw_ntiles_(P);
  const int units = (a->M + O2E_PW_SUB - 1) / O2E_PW_SUB;
  float *acc = a->acc + (size_t)o2e_parallel_thread() * nt * O2E_PW_PX * O2E_PW_SUB;
  const float *wb[O2E_PW_SUB / 4 + 1], *wn[O2E_PW_SUB / 4 + 1];
  o2e_pw_pf pf;
  int u, q, v, k0;
  for (u = u0; u < u1; u++) {
    const int m0 = u * O2E_PW_SUB, nl = a->M - m0 < O2E_PW_SUB ? a->M - m0 : O2E_PW_SUB;
    if (nl <= 0) continue; /* wholly in the zero padding past M */
    const int ws = o2e_pw_wb_(a, wfmt, u, wb);
    const float *bias = a->bias ? a->bias + m0 : NULL;
    float bpad[O2E_PW_SUB]; /* packed A: the bias is not padded to whole tiles */
    o2e_pw_wb_(a, wfmt, u + 1 < units ? u + 1 : u, wn);
    if (wfmt) {
      for (v = 0; v < O2E_PW_SUB; v++) bpad[v] = bias && v < nl ? bias[v] : 0.0f;
      bias = bpad;
    }
    for (k0 = 0; k0 < K; k0 += O2E_PW_KC) {
      const int k1 = K - k0 > O2E_PW_KC ? k0 + O2E_PW_KC : K, last = k1 == K;
      const int pf_on = O2E_PW_PF && (!last || u + 1 < units);
      for (v = 0; v * 4 < O2E_PW_SUB; v++)
        pf.p[v] = last ? wn[v] : wb[v] + (size_t)k1 * ws;
      pf.len = last ? (K < O2E_PW_KC ? K : O2E_PW_KC) : (K - k1 < O2E_PW_KC ? K - k1 : O2E_PW_KC);
      pf.step = O2E_PW_PF == 2 ? nt : 1;
      for (q = 0; q < nt; q++) {
        const int p0 = (int)((long)q * P / nt), pn = (int)((long)(q + 1) * P / nt) - p0;
        float *t = acc + (size_t)q * O2E_PW_PX * O2E_PW_SUB;
        pf.q = O2E_PW_PF == 2 ? q : 0;
        o2e_pw_tile_any_(pn, k0, k1, wb, ws, pf_on && (O2E_PW_PF == 2 || q == 0) ? &pf : NULL,
                         a->xp + (size_t)q * K * O2E_PW_PX, k0 ? NULL : bias,
                         last && !a->res ? &a->act : NULL, t);
        if (!last) continue;
        if (wfmt && a->res)
          o2e_pw_store_res_(t, nl, pn, a->res + (size_t)m0 * P + p0, a->y + (size_t)m0 * P + p0,
                            P, a->act);
        else /* transpose into NCHW rows */
          o2e_pw_store_(t, nl, pn, a->y + (size_t)m0 * P + p0, P);
      }
    }
    if (a->res && !wfmt) /* rows m0 .. m0 + nl are complete: add the residual, then act */
      o2e_pw_residual_(nl, P, a->res + (size_t)m0 * P, a->y + (size_t)m0 * P, a->act);
  }
}

/* Runs every tile of channels of a packed call (on the thread pool when `threaded`). */
O2E_GEMM_FN void o2e_pw_run_(const o2e_pw_args *a, int wfmt, int threaded) {
  o2e_pw_job_ j;
  const int units = (a->M + O2E_PW_SUB - 1) / O2E_PW_SUB;
  j.a = *a;
  j.wfmt = wfmt;
  if (threaded)
    o2e_parallel_for(units, o2e_pw_units_, (void *)&j);
  else
    o2e_pw_units_((void *)&j, 0, units);
}

/* One image: packs the input into pixel tiles, then runs every tile of channels (on the
 * thread pool when `threaded`, which the converter sets for layers worth the hand-off). */
O2E_GEMM_FN void o2e_conv1x1_lanes_fmt_(const o2e_pw_args *a, int wfmt, int threaded) {
  const int P = a->P, K = a->K, nt = o2e_pw_ntiles_(P);
  int q, k, p;
  for (q = 0; q < nt; q++) {
    const int p0 = (int)((long)q * P / nt), pn = (int)((long)(q + 1) * P / nt) - p0;
    float *d = a->xp + (size_t)q * K * O2E_PW_PX;
    size_t off[O2E_PW_PX]; /* input offset of each pixel of the tile (strided: subsampled) */
    for (p = 0; p < pn; p++)
      off[p] = (size_t)((p0 + p) / a->OW) * a->sh * a->W + (size_t)((p0 + p) % a->OW) * a->sw;
    for (k = 0; k < K; k++) {
      const float *xk = a->x + (size_t)k * a->HW;
      for (p = 0; p < pn; p++) d[(size_t)k * O2E_PW_PX + p] = xk[off[p]];
    }
  }
  o2e_pw_run_(a, wfmt, threaded);
}

O2E_GEMM_FN void o2e_conv1x1_lanes(const o2e_pw_args *a, int threaded) {
  o2e_conv1x1_lanes_fmt_(a, 0, threaded);
}

/* The same over the GEMM's packed weights (a->w from o2e_pack_a, a->bias M floats or NULL,
 * a->res may be a->y): kernels/conv/conv_gemm.py's 1x1 layers on 9x9 .. 14x14 maps at AVX2. */
O2E_GEMM_FN void o2e_conv1x1_lanes_packed_a(const o2e_pw_args *a, int threaded) {
  o2e_conv1x1_lanes_fmt_(a, O2E_GEMM_MR, threaded);
}

/* ---- k x k convolutions on narrow maps (kernels/conv/conv_narrow.py) ------------------------------
 * The same tiles for any 2-D kernel, stride, dilation and padding: K = C * KH * KW, and the
 * packing gathers the im2col column of each output pixel (zero where a tap falls in the
 * padding) into the pixel tiles, in the order of the ONNX weights (c, ky, kx). On a map of
 * <= 64 output pixels the packed GEMM's pixel strips are part empty and stream the whole
 * weight matrix once per strip (ResNet50 res5a_branch2b: 3x3 stride 2, 512 -> 512, 7x7
 * output, K = 4608); here each weight is read once per pixel tile with full lanes. */
typedef struct {
  int C, H, W;       /* input planes */
  int KH, KW, SH, SW, DH, DW, PT, PL; /* kernel, strides, dilations, begin pads */
  int OW;            /* output width */
} o2e_pwk_geom;

O2E_GEMM_FN void o2e_convkxk_lanes(const o2e_pw_args *a, const o2e_pwk_geom *g, int threaded) {
  const int P = a->P, K = a->K, nt = o2e_pw_ntiles_(P), taps = g->KH * g->KW;
  int q, c, t, p;
  for (q = 0; q < nt; q++) {
    const int p0 = (int)((long)q * P / nt), pn = (int)((long)(q + 1) * P / nt) - p0;
    float *d = a->xp + (size_t)q * K * O2E_PW_PX;
    int iy0[O2E_PW_PX] = {0}, ix0[O2E_PW_PX] = {0}; /* each pixel window's top-left input */
    for (p = 0; p < pn; p++) {
      iy0[p] = (p0 + p) / g->OW * g->SH - g->PT;
      ix0[p] = (p0 + p) % g->OW * g->SW - g->PL;
    }
    for (t = 0; t < taps; t++) {
      const int dy = t / g->KW * g->DH, dx = t % g->KW * g->DW;
      int off[O2E_PW_PX] = {0}; /* input offset of the tap per pixel, -1 in the padding */
      for (p = 0; p < pn; p++) {
        const int iy = iy0[p] + dy, ix = ix0[p] + dx;
        off[p] = iy >= 0 && iy < g->H && ix >= 0 && ix < g->W ? iy * g->W + ix : -1;
      }
      for (c = 0; c < g->C; c++) {
        const float *xc = a->x + (size_t)c * g->H * g->W;
        float *dk = d + ((size_t)c * taps + t) * O2E_PW_PX;
        for (p = 0; p < pn; p++) dk[p] = off[p] >= 0 ? xc[off[p]] : 0.0f;
      }
    }
  }
  o2e_pw_run_(a, 0, threaded);
}

/* ---- 1x1 layers with few input channels on wide maps, AVX-512 (kernels/conv/conv_gemm.py) ----
 *   y[m][p] = act(b[m] + sum_k A(m,k) . x[k][p] + r[m][p])   (NCHW, stride 1, one image)
 * over the GEMM's packed A ([M8 / 8][K][8]). MobileNetV3's and EfficientNet's first blocks
 * (16 -> 64 channels at 112x112, 24 -> 72 at 56x56, K <= 128): there the packed GEMM copies
 * the whole input into its B strips for a K of only 16-72. Here the input rows are read in
 * place: a tile is one 8-row panel of A x 32 pixels (16 zmm accumulators), per input channel
 * 2 pixel vectors loaded and 8 weights broadcast; all panels (M x K floats, <= 32 KB: the
 * converter's bound) run over one pixel strip before the next, so the weights stay in L1 and
 * each input strip is read once. Standalone, 1 thread, AMD EPYC (Zen 5), this / the packed
 * GEMM: 64 x 12544 x 16 0.87, 16 x 12544 x 16 0.87, 72 x 3136 x 24 0.91, 24 x 3136 x 72 0.92,
 * 120 x 784 x 40 0.92; in MobileNetV3-large (tools/ab_nodes.py, per-node minima) those layers
 * 0.76-0.89x. The last strip's pixels past P are masked. The residual (which may be y itself:
 * each element is read before it is written, in the same tile) and a register activation
 * (kinds 1-5, compare-and-select as o2e_act1_, so NaN passes) are applied before the store.
 * Work units are 32-pixel strips; results do not depend on the split. */
#if defined(O2E_GEMM_AVX512)
typedef struct {
  const float *A;    /* packed [M8 / 8][K][8] (o2e_pack_a, gemm_pack.pack_a) */
  const float *x;    /* K x P */
  const float *bias; /* M floats, or NULL */
  const float *res;  /* M x P, or NULL; may be y */
  float *y;          /* M x P */
  int M, K, P;
  o2e_act act;       /* kinds 0-5 */
} o2e_pwr_args;

#define O2E_PWR_PX 32 /* pixels per strip: two zmm */

O2E_GEMM_INL __m512 o2e_pwr_act_(__m512 x, const o2e_act *act) {
  const __m512 z = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 t;
  switch (act->kind) {
  case O2E_ACT_RELU:
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, z, _CMP_LT_OQ), z);
  case O2E_ACT_CLIP:
    t = _mm512_set1_ps(act->a);
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, t, _CMP_LT_OQ), t);
    t = _mm512_set1_ps(act->b);
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, t, _CMP_GT_OQ), t);
  case O2E_ACT_LEAKY_RELU:
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, z, _CMP_LT_OQ),
                              _mm512_mul_ps(x, _mm512_set1_ps(act->a)));
  case O2E_ACT_HARD_SIGMOID:
  case O2E_ACT_HARD_SWISH:
    t = act->kind == O2E_ACT_HARD_SWISH
            ? _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f))
            : _mm512_fmadd_ps(_mm512_set1_ps(act->a), x, _mm512_set1_ps(act->b));
    t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, z, _CMP_LT_OQ), z);
    t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, one, _CMP_GT_OQ), one);
    return act->kind == O2E_ACT_HARD_SWISH ? _mm512_mul_ps(x, t) : t;
  default:
    return x;
  }
}

O2E_GEMM_FN void o2e_pwr_strips_(void *arg, int s0, int s1) {
  const o2e_pwr_args *a = (const o2e_pwr_args *)arg;
  const int M = a->M, K = a->K, P = a->P;
  int s, m0, k, i;
  for (s = s0; s < s1; s++) {
    const int p0 = s * O2E_PWR_PX, r = P - p0;
    const __mmask16 k0 = (__mmask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
    const __mmask16 k1 = (__mmask16)(r >= 32 ? 0xFFFFu : r > 16 ? (1u << (r - 16)) - 1u : 0u);
    const float *xs = a->x + p0;
    for (m0 = 0; m0 < M; m0 += 8) {
      const float *ap = a->A + (size_t)m0 * K; /* panel m0 / 8: 8 K floats */
      const int mn = M - m0 < 8 ? M - m0 : 8;
      __m512 c0[8], c1[8];
#pragma GCC unroll 8
      for (i = 0; i < 8; i++)
        c0[i] = c1[i] = _mm512_set1_ps(a->bias && i < mn ? a->bias[m0 + i] : 0.0f);
      for (k = 0; k < K; k++) {
        const __m512 x0 = _mm512_maskz_loadu_ps(k0, xs + (size_t)k * P);
        const __m512 x1 = _mm512_maskz_loadu_ps(k1, xs + (size_t)k * P + 16);
#pragma GCC unroll 8
        for (i = 0; i < 8; i++) {
          const __m512 w = _mm512_set1_ps(ap[(size_t)k * 8 + i]);
          c0[i] = _mm512_fmadd_ps(w, x0, c0[i]);
          c1[i] = _mm512_fmadd_ps(w, x1, c1[i]);
        }
      }
      /* unrolled with constant indices, so c0 / c1 stay in registers (a loop to mn spilled
         them to the stack inside the K loop: 3x slower) */
#pragma GCC unroll 8
      for (i = 0; i < 8; i++) {
        const size_t o = (size_t)(m0 + i) * P + p0;
        __m512 y0 = c0[i], y1 = c1[i];
        if (i >= mn) break;
        if (a->res) {
          y0 = _mm512_add_ps(y0, _mm512_maskz_loadu_ps(k0, a->res + o));
          y1 = _mm512_add_ps(y1, _mm512_maskz_loadu_ps(k1, a->res + o + 16));
        }
        if (a->act.kind) {
          y0 = o2e_pwr_act_(y0, &a->act);
          y1 = o2e_pwr_act_(y1, &a->act);
        }
        _mm512_mask_storeu_ps(a->y + o, k0, y0);
        _mm512_mask_storeu_ps(a->y + o + 16, k1, y1);
      }
    }
  }
}

/* One image; on the thread pool when `threaded` (the converter's work rule). */
O2E_GEMM_FN void o2e_conv1x1_rows_packed_a(const o2e_pwr_args *a, int threaded) {
  const int strips = (a->P + O2E_PWR_PX - 1) / O2E_PWR_PX;
  if (threaded)
    o2e_parallel_for(strips, o2e_pwr_strips_, (void *)a);
  else
    o2e_pwr_strips_((void *)a, 0, strips);
}
#endif /* O2E_GEMM_AVX512 */

#endif /* O2E_CONV1X1_H */
