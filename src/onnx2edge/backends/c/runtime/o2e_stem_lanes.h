/* o2e_stem_lanes.h - tiles and the 16-channel store of the channel-lanes stem (kernels/conv/conv_stem_lanes.py).
 * Static C moved out of kernels/conv/conv_stem_lanes.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_STEM_LANES_H
#define O2E_STEM_LANES_H
#include <stddef.h>
#include "o2e_stem_vectors.h"

/* Tiles of the channel-lanes stem (kernels/conv/conv_stem_lanes.py): O2E_CNV vectors of O2E_SL
 * channels x O2E_CP output pixels. */
#if defined(__AVX512F__)
#define O2E_CNV 3
#define O2E_CP 8
#elif defined(__AVX2__) && defined(__FMA__)
#define O2E_CNV 2
#define O2E_CP 6
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define O2E_CNV 4
#define O2E_CP 6
#else
#define O2E_CNV 2
#define O2E_CP 4
#endif
#define O2E_CB (O2E_CNV * O2E_SL)
/* The end of a tap: without it gcc interleaved the next taps' loads and broadcasts with this
 * tap's FMAs and spilled accumulators (AlexNet's 11x11 / 4 tile: 268 stack moves, 1.86 ->
 * 1.35 ms); a compiler barrier only, no instruction. */
#if defined(__GNUC__) || defined(__clang__)
#define O2E_TAP_END() __asm__ __volatile__("" ::: "memory")
#else
#define O2E_TAP_END() ((void)0)
#endif

#if defined(__AVX512F__) && defined(__AVX512VL__)
/* r[p]: pixel p (< 8) of 16 channels; writes the first P (mask mk) pixels of the first nl
 * (<= 16) channel rows at y, rows ys apart. unpack / shuffle: u[j] lane k = channel 4k + j,
 * pixels 0..3, u[4 + j] lane k = the same channel, pixels 4..7. */
static inline __attribute__((always_inline)) void o2e_stl_store16(const __m512 *r, __mmask8 mk,
    int nl, float *restrict y, size_t ys)
{
  __m512 t[8], u[8];
  for (int h = 0; h < 2; h++) {
    const __m512 *q = r + 4 * h;
    t[4 * h] = _mm512_unpacklo_ps(q[0], q[1]);
    t[4 * h + 1] = _mm512_unpackhi_ps(q[0], q[1]);
    t[4 * h + 2] = _mm512_unpacklo_ps(q[2], q[3]);
    t[4 * h + 3] = _mm512_unpackhi_ps(q[2], q[3]);
    u[4 * h] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) {
    /* [a0 b0 a1 b1] and [a2 b2 a3 b3]: channel rows j, 4 + j and 8 + j, 12 + j */
    const __m512 lo = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[j], u[4 + j], 0x44),
                                           _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), 0xD8);
    const __m512 hi = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE),
                                           _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE), 0xD8);
    const __m256 row[4] = {
        _mm512_castps512_ps256(lo),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1)),
        _mm512_castps512_ps256(hi),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1))};
    for (int k = 0; k < 4; k++)
      if (4 * k + j < nl) _mm256_mask_storeu_ps(y + (size_t)(4 * k + j) * ys, mk, row[k]);
  }
}
#endif

/* One layer's geometry (kernels/conv/conv_stem_lanes.py). The generated unit function passes it
 * as a literal to the always-inline o2e_stl_units, so every field is a compile-time constant
 * there (one copy per layer geometry, as when the C was pasted per layer). */
typedef struct {
  int C, KH, KW, SH, SW; /* input channels, kernel, stride */
  int HP, WP;            /* the input (or its zero-bordered copy) the tiles read */
  int M, OH, OW;         /* output channels, output map */
  int WB;                /* the weights' channel block: [M' / WB][c][kh][kw][WB] */
  int clamp;             /* O2E_STL_CLAMP_*: the fused activation on the accumulators */
  float lo, hi;          /* its bounds */
} o2e_stl_geom;
#define O2E_STL_CLAMP_ACT (-1) /* not a clamp: the scalar act of o2e_stl_units on each output */
#define O2E_STL_CLAMP_NONE 0
#define O2E_STL_CLAMP_LO 1   /* v < lo ? lo : v (Relu: lo = 0) */
#define O2E_STL_CLAMP_LOHI 2 /* then v > hi ? hi : v (Clip) */
/* The fused activation of one output (the activation table's expression), or NULL. */
typedef float (*o2e_stl_act_fn)(float v);
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define O2E_STL_FAST 1 /* the accumulators transposed in registers (o2e_stl_store16) */
#else
#define O2E_STL_FAST 0
#endif

/* One tile: channels [0, O2E_CB) of the weight block wp x P pixels of one output row;
 * xp: the input at (oh * SH, ow0 * SW). On the fast path (AVX-512 with VL, a clamp or no
 * activation) bias and activation are applied to the accumulators and each 16-channel vector
 * block is transposed in registers into its channel rows (yp: channel m0, row oh, column ow0);
 * else the sums go to t[p][O2E_CB]. */
static inline __attribute__((always_inline)) void o2e_stl_tile(const o2e_stl_geom g, const int P,
    const float *restrict xp, const float *restrict wp, float *restrict t, const float *restrict bp,
    int nl, float *restrict yp)
{
  o2e_sv acc[O2E_CP][O2E_CNV];
#pragma GCC unroll 8
  for (int p = 0; p < P; p++)
#pragma GCC unroll 4
    for (int v = 0; v < O2E_CNV; v++) acc[p][v] = o2e_sv_set1(0.0f);
  for (int c = 0; c < g.C; c++)
    for (int i = 0; i < g.KH; i++) {
      const float *restrict xr = xp + (size_t)c * (g.HP * g.WP) + (size_t)i * g.WP;
      const float *restrict wr = wp + (size_t)((c * g.KH + i) * g.KW) * g.WB;
#pragma GCC unroll 16
      for (int j = 0; j < g.KW; j++) {
        o2e_sv w[O2E_CNV];
#pragma GCC unroll 4
        for (int v = 0; v < O2E_CNV; v++) {
          w[v] = o2e_sv_load(wr + j * g.WB + v * O2E_SL);
          O2E_SREG(w[v]);
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
          o2e_sv b = o2e_sv_set1(xr[p * g.SW + j]);
          O2E_SREG(b);
#pragma GCC unroll 4
          for (int v = 0; v < O2E_CNV; v++) acc[p][v] = o2e_sv_fma(b, w[v], acc[p][v]);
        }
        O2E_TAP_END();
      }
    }
#if O2E_STL_FAST
  if (g.clamp >= O2E_STL_CLAMP_NONE) {
    const __mmask8 mk = (__mmask8)((1u << P) - 1u);
#pragma GCC unroll 4
    for (int v = 0; v < O2E_CNV; v++) {
      const int nv = nl - v * 16;
      if (nv <= 0) break;
      const __mmask16 mv = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1u);
      const __m512 bv = bp ? _mm512_maskz_loadu_ps(mv, bp + v * 16) : _mm512_setzero_ps();
      __m512 r[8];
#pragma GCC unroll 8
      for (int p = 0; p < 8; p++) {
        r[p] = p < P ? _mm512_add_ps(acc[p][v], bv) : _mm512_setzero_ps();
        if (g.clamp >= O2E_STL_CLAMP_LO) r[p] = o2e_sv_lo(r[p], g.lo);
        if (g.clamp >= O2E_STL_CLAMP_LOHI) r[p] = o2e_sv_hi(r[p], g.hi);
      }
      o2e_stl_store16(r, mk, nv, yp + (size_t)v * 16 * (g.OH * g.OW), (size_t)g.OH * g.OW);
    }
    return;
  }
#endif
  (void)bp, (void)nl, (void)yp;
#pragma GCC unroll 8
  for (int p = 0; p < P; p++)
#pragma GCC unroll 4
    for (int v = 0; v < O2E_CNV; v++) o2e_sv_store(t + p * O2E_CB + v * O2E_SL, acc[p][v]);
}

/* Units [u0, u1): (channel block, output row) pairs of one image; act: the fused activation
 * of one output where the accumulators do not take it (or NULL: none). */
static inline __attribute__((always_inline)) void o2e_stl_units(const o2e_stl_geom g,
    const o2e_stem_args *a, int u0, int u1, o2e_stl_act_fn act)
{
  const int NT = (g.OW + O2E_CP - 1) / O2E_CP;
  const int fast = O2E_STL_FAST && g.clamp >= O2E_STL_CLAMP_NONE;
  float t[O2E_CP * O2E_CB];
  for (int u = u0; u < u1; u++) {
    const int mb = u / g.OH, oh = u % g.OH, m0 = mb * O2E_CB;
    const int nl = g.M - m0 < O2E_CB ? g.M - m0 : O2E_CB;
    const float *wp = a->w + (size_t)(m0 / g.WB) * (g.C * g.KH * g.KW * g.WB) + m0 % g.WB;
    for (int q = 0; q < NT; q++) { /* balanced tiles: 55 pixels as 8 x 6 + 7 */
      /* g.OW % NT == 0: every tile as wide, a constant (gcc does not fold the difference) */
      const int ow0 = q * g.OW / NT, P = g.OW % NT == 0 ? g.OW / NT : (q + 1) * g.OW / NT - ow0;
      const float *xp = a->x + (size_t)oh * g.SH * g.WP + (size_t)ow0 * g.SW;
      const float *bp = a->bias ? a->bias + m0 : NULL;
      float *yp = a->y + ((size_t)m0 * g.OH + oh) * g.OW + ow0;
      switch (P) { /* one register-resident copy per width */
#if O2E_CP >= 8
      case 8: o2e_stl_tile(g, 8, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 7
      case 7: o2e_stl_tile(g, 7, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 6
      case 6: o2e_stl_tile(g, 6, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 5
      case 5: o2e_stl_tile(g, 5, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 4
      case 4: o2e_stl_tile(g, 4, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 3
      case 3: o2e_stl_tile(g, 3, xp, wp, t, bp, nl, yp); break;
#endif
#if O2E_CP >= 2
      case 2: o2e_stl_tile(g, 2, xp, wp, t, bp, nl, yp); break;
#endif
      default: o2e_stl_tile(g, 1, xp, wp, t, bp, nl, yp); break;
      }
      if (fast) continue;
      for (int l = 0; l < nl; l++) { /* into the NCHW rows: bias, activation */
        const float b = a->bias ? a->bias[m0 + l] : 0.0f;
        const size_t o = ((size_t)(m0 + l) * g.OH + oh) * g.OW + ow0;
        float *restrict yr = a->y + o;
        for (int p = 0; p < P; p++) {
          const float v = t[p * O2E_CB + l] + b;
          yr[p] = act ? act(v) : v;
        }
      }
    }
  }
}

/* Copies one image x (C x H x W) into the zero-bordered C x HP x WP buffer d the tiles read
 * (pt rows, pl columns of padding before it): the rows and columns the tiles read, so a tap
 * never tests the border. */
static inline void o2e_stl_pad(const float *restrict x, int C, int H, int W, int pt, int pl,
    int HP, int WP, float *restrict d)
{
  const int ncopy = W < WP - pl ? W : (WP - pl > 0 ? WP - pl : 0), nl = pl < WP ? pl : WP;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < HP; ++r) { /* padded row r: input row r - pt */
      float *restrict dr = d + ((size_t)c * HP + r) * WP;
      const int ih = r - pt;
      if (ih < 0 || ih >= H) {
        for (int q = 0; q < WP; ++q) dr[q] = 0.0f;
        continue;
      }
      const float *restrict s = x + ((size_t)c * H + ih) * W;
      for (int q = 0; q < nl; ++q) dr[q] = 0.0f;
      for (int q = 0; q < ncopy; ++q) dr[pl + q] = s[q];
      for (int q = pl + ncopy; q < WP; ++q) dr[q] = 0.0f;
    }
}

#endif /* O2E_STEM_LANES_H */
