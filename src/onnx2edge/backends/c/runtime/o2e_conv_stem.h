/* o2e_conv_stem.h - the pixel-lanes stem convolution (kernels/conv/conv_stem.py): blocks, row loop, planes' borders.
 * Static C moved out of kernels/conv/conv_stem.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_CONV_STEM_H
#define O2E_CONV_STEM_H
#include <stddef.h>
#include "o2e_stem_vectors.h"

/* One layer's geometry. The generated row function passes it as a literal to the always-inline
 * o2e_stem_rows, so every field is a compile-time constant there: the tap loops unroll and the
 * plane offsets fold as when they were pasted into the C (one copy per layer geometry). */
typedef struct {
  int C, KH, KW, SH, SW; /* input channels, kernel, stride */
  int HQ, WQ;            /* one phase plane: HQ rows of WQ floats */
  int M, OH, OW;         /* output channels, output map */
  int band;              /* output rows per band: each channel block runs over a band */
  int clamp;             /* O2E_STEM_CLAMP_*: the fused Relu / Clip on the accumulators */
  float lo, hi;          /* its bounds */
} o2e_stem_geom;
#define O2E_STEM_CLAMP_NONE 0
#define O2E_STEM_CLAMP_LO 1   /* v < lo ? lo : v (Relu: lo = 0) */
#define O2E_STEM_CLAMP_LOHI 2 /* then v > hi ? hi : v (Clip) */
/* HardSwish v * min(1, max(0, v / 6 + 1/2)) as the GEMM epilogue's o2e_act1_ (1/6 a factor;
 * a NaN fails both tests and passes, -Inf gives -Inf * 0 = NaN). The generated scalar pass it
 * replaces stayed scalar at x86-64-v3 (MobileNetV3's 3 -> 16 stem 0.42 ms there). With 32
 * vector registers (AVX-512, NEON) on the accumulators (native 0.091 -> 0.065 ms); with 16
 * (AVX2, portable) in vectors over each block just stored (o2e_stem_hswish_, in L1:
 * x86-64-v3 0.113 ms, Relu's 0.104): on the accumulators its 2 constants spilled AVX2's 12
 * accumulators (0.15 ms). Thread CPU time, medians, loaded machine. */
#define O2E_STEM_CLAMP_HSWISH 3
#if defined(__AVX512F__) || (defined(__ARM_NEON) && defined(__aarch64__))
#define O2E_STEM_HSWISH_REGS 1
#else
#define O2E_STEM_HSWISH_REGS 0
#endif

/* HardSwish over nm channel rows (ys apart) of n pixels. */
static inline void o2e_stem_hswish_(float *restrict y, int nm, int n, size_t ys)
{
  const o2e_sv sixth = o2e_sv_set1(1.0f / 6.0f), half = o2e_sv_set1(0.5f);
  for (int m = 0; m < nm; m++) {
    float *restrict yb = y + (size_t)m * ys;
    int p = 0;
    for (; p + O2E_SL <= n; p += O2E_SL) {
      const o2e_sv v = o2e_sv_load(yb + p), t = o2e_sv_fma(v, sixth, half);
      o2e_sv_store(yb + p, o2e_sv_mul(v, o2e_sv_hi(o2e_sv_lo(t, 0.0f), 1.0f)));
    }
    for (; p < n; p++) {
      const float v = yb[p];
      float t = v * (1.0f / 6.0f) + 0.5f;
      t = t < 0.0f ? 0.0f : t;
      yb[p] = v * (t > 1.0f ? 1.0f : t);
    }
  }
}
/* Any other fused activation, over a block just stored (nm channel rows ys apart, n pixels,
 * still in L1): the generated C defines it with the activation table's expression. */
typedef void (*o2e_stem_act_fn)(float *restrict y, int nm, int n, size_t ys);

/* O2E_SMB output channels [m0, m0 + nm) x VB vectors of output row oh from column ow0 (n of
 * them inside the row); xp: the planes at (oh, ow0), wp: the weights at column m0. */
static inline __attribute__((always_inline)) void o2e_stem_block(const o2e_stem_geom g, const int VB,
    const float *restrict xp, const float *restrict wp, const float *restrict bp, float *restrict yp,
    int nm, int n)
{
  o2e_sv acc[O2E_SMB][O2E_SVB];
#pragma GCC unroll 16
  for (int m = 0; m < O2E_SMB; m++) {
    const o2e_sv b = o2e_sv_set1(bp && m < nm ? bp[m] : 0.0f);
#pragma GCC unroll 4
    for (int v = 0; v < VB; v++) acc[m][v] = b;
  }
  for (int c = 0; c < g.C; c++)
    for (int i = 0; i < g.KH; i++) {
      const float *restrict xr = xp + (size_t)(c * (g.SH * g.SW) + (i % g.SH) * g.SW) * (g.HQ * g.WQ) +
                                 (size_t)(i / g.SH) * g.WQ;
      const float *restrict wr = wp + (size_t)((c * g.KH + i) * g.KW) * 8;
#pragma GCC unroll 16
      for (int j = 0; j < g.KW; j++) {
        const float *restrict xj = xr + (size_t)(j % g.SW) * (g.HQ * g.WQ) + j / g.SW;
        o2e_sv xv[O2E_SVB];
#pragma GCC unroll 4
        for (int v = 0; v < VB; v++) {
          xv[v] = o2e_sv_load(xj + v * O2E_SL);
          O2E_SREG(xv[v]);
        }
#pragma GCC unroll 16
        for (int m = 0; m < O2E_SMB; m++) {
          o2e_sv w = o2e_sv_set1(wr[j * 8 + m]);
          O2E_SREG(w);
#pragma GCC unroll 4
          for (int v = 0; v < VB; v++) acc[m][v] = o2e_sv_fma(xv[v], w, acc[m][v]);
        }
      }
    }
#pragma GCC unroll 16
  for (int m = 0; m < O2E_SMB; m++) {
    if (m >= nm) break;
#pragma GCC unroll 4
    for (int v = 0; v < VB; v++) {
      if (g.clamp == O2E_STEM_CLAMP_LO || g.clamp == O2E_STEM_CLAMP_LOHI)
        acc[m][v] = o2e_sv_lo(acc[m][v], g.lo);
      if (g.clamp == O2E_STEM_CLAMP_LOHI) acc[m][v] = o2e_sv_hi(acc[m][v], g.hi);
      if (g.clamp == O2E_STEM_CLAMP_HSWISH && O2E_STEM_HSWISH_REGS) {
        const o2e_sv t = o2e_sv_fma(acc[m][v], o2e_sv_set1(1.0f / 6.0f), o2e_sv_set1(0.5f));
        acc[m][v] = o2e_sv_mul(acc[m][v], o2e_sv_hi(o2e_sv_lo(t, 0.0f), 1.0f));
      }
      float *restrict p = yp + (size_t)m * (g.OH * g.OW) + v * O2E_SL;
      const int r = n - v * O2E_SL;
      if (r >= O2E_SL)
        o2e_sv_store(p, acc[m][v]);
      else if (r > 0)
        o2e_sv_store_n(p, acc[m][v], r);
    }
  }
}

/* Output rows [r0, r1) of one image: every channel block, the row in balanced blocks; act
 * (or NULL) after each block. */
static inline __attribute__((always_inline)) void o2e_stem_rows(const o2e_stem_geom g,
    const o2e_stem_args *a, int r0, int r1, o2e_stem_act_fn act)
{
  const int NV = (g.OW + O2E_SL - 1) / O2E_SL, NB = (NV + O2E_SVB - 1) / O2E_SVB;
  /* bands of rows, each channel block over the whole band: the block writes O2E_SMB
   * channel rows (pages) at a time, not all M (96 rows 48 kB apart thrash the TLB) */
  for (int ob = r0; ob < r1; ob += g.band) {
    const int oe = ob + g.band < r1 ? ob + g.band : r1;
    for (int m0 = 0; m0 < g.M; m0 += O2E_SMB)
      for (int oh = ob; oh < oe; oh++) {
        const int nm = g.M - m0 < O2E_SMB ? g.M - m0 : O2E_SMB;
        const float *bp = a->bias ? a->bias + m0 : NULL;
        const float *wp = a->w + (size_t)(m0 / 8) * (g.C * g.KH * g.KW * 8) + m0 % 8;
        float *yr = a->y + (size_t)m0 * (g.OH * g.OW) + (size_t)oh * g.OW;
        for (int q = 0; q < NB; q++) {
          /* NV % NB == 0: every block as wide, a constant (as the switch below then is; gcc
           * does not fold (q + 1) * NV / NB - q * NV / NB once NV, NB come from g) */
          const int v0 = q * NV / NB, ow0 = v0 * O2E_SL;
          const int vb = NV % NB == 0 ? NV / NB : (q + 1) * NV / NB - v0;
          const int n = g.OW - ow0 < vb * O2E_SL ? g.OW - ow0 : vb * O2E_SL;
          const float *xp = a->x + (size_t)oh * g.WQ + ow0;
          switch (vb) { /* one register-resident copy per width */
#if O2E_SVB >= 4
          case 4: o2e_stem_block(g, 4, xp, wp, bp, yr + ow0, nm, n); break;
#endif
#if O2E_SVB >= 3
          case 3: o2e_stem_block(g, 3, xp, wp, bp, yr + ow0, nm, n); break;
#endif
          case 2: o2e_stem_block(g, 2, xp, wp, bp, yr + ow0, nm, n); break;
          default: o2e_stem_block(g, 1, xp, wp, bp, yr + ow0, nm, n); break;
          }
          if (act) act(yr + ow0, nm, n, (size_t)g.OH * g.OW);
          if (g.clamp == O2E_STEM_CLAMP_HSWISH && !O2E_STEM_HSWISH_REGS)
            o2e_stem_hswish_(yr + ow0, nm, n, (size_t)g.OH * g.OW);
        }
      }
  }
}

/* Zeroes what phase_split leaves of one channel's sh x sw planes (the padding and the
 * columns / rows past the input): the arena is shared, so this runs every call, and costs a
 * fraction of clearing the whole planes (1 MB for a 299x299 RGB input). */
static inline __attribute__((always_inline)) void o2e_stem_border(float *restrict planes, int sh, int sw,
    int H, int W, int pt, int pl, int HQ, int WQ)
{
  for (int a = 0; a < sh; ++a)
    for (int b = 0; b < sw; ++b) {
      float *restrict p = planes + (size_t)(a * sw + b) * HQ * WQ;
      /* the columns phase_split writes: source column q*sw + b - pl in [0, W) */
      int q0 = pl > b ? (pl - b + sw - 1) / sw : 0, q1 = (W + pl - b + sw - 1) / sw;
      if (q0 > WQ) q0 = WQ;
      if (q1 > WQ) q1 = WQ;
      if (q1 < q0) q1 = q0;
      for (int r = 0; r < HQ; ++r) {
        const int ih = r * sh + a - pt;
        float *restrict row = p + (size_t)r * WQ;
        if (ih < 0 || ih >= H) {
          for (int q = 0; q < WQ; ++q) row[q] = 0.0f;
        } else {
          for (int q = 0; q < q0; ++q) row[q] = 0.0f;
          for (int q = q1; q < WQ; ++q) row[q] = 0.0f;
        }
      }
    }
}

#endif /* O2E_CONV_STEM_H */
