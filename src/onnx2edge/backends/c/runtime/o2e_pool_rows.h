/* o2e_pool_rows.h - separable MaxPool / AveragePool by rows for float32 NCHW (kernels/pool/pool_rows.py).
 * Static C moved out of kernels/pool/pool_rows.py (issue 32): the generated model.c includes it
 * where a row pool needs it (backends/c/headers.py); it compiles on its own.
 *
 * A max (sum) over a kh x kw window is the max (sum) over its rows of each row's max (sum) over
 * its columns: every input row needed is read once, its row maxima h[ow] = max_j x[r][ow*sw - pl + j]
 * computed in blocks of outputs (stride 2: two vector loads deinterleaved by permutes, AVX-512
 * vpermt2ps, AVX2 shufps + vpermpd, NEON ld2), kept in a ring of kh rows; each output row is the
 * max (sum) of its window's rows. Edge blocks read lanes outside the row as the fill value (NaN
 * for max, ignored by the NaN-ignoring max; 0 for sums), through masked loads (AVX-512, AVX2) or
 * a copy of their span (other targets). See pool_rows.py for the NaN rule and the measurements.
 *
 * o2e_pool_rows(a, i0, i1, op, kh, kw, sh, sw, pf) is always_inline: the generated wrapper of a
 * window geometry passes its op and sizes as literal constants, so the tap loops unroll fully
 * and the op / stride branches fold, as when the geometry was generated into the C. Geometry:
 * kw <= 8, kh <= 16, sw 1 or 2, OW <= 16 * O2E_POOL_MAXB (pool_rows._refuse_rows). */
#ifndef O2E_POOL_ROWS_H
#define O2E_POOL_ROWS_H
#include <math.h>
#include <stddef.h>
#include "o2e_intrinsics.h"
#include "o2e_maxp.h"
#include "o2e_win2d.h"

#if defined(__GNUC__)
#define O2E_POOL_INL static inline __attribute__((always_inline, unused))
#define O2E_POOL_UNROLL _Pragma("GCC unroll 16")
#else
#define O2E_POOL_INL static inline
#define O2E_POOL_UNROLL
#endif

enum { O2E_POOL_MAX, O2E_POOL_AVG };
#define O2E_POOL_MAXB 64 /* blocks of 16 outputs per row at most (the lane masks' array) */
#define O2E_POOL_MAXKW 8
#define O2E_POOL_MAXKH 16

/* Offset of the l-th 16-float load of an AVX-512 block from its first column: the kw taps
 * (sw 1), or pairs (b, b + 16) for b = 0, 2, ... (sw 2). nl of them. */
O2E_POOL_INL int o2e_pool_rows_off_(int l, int sw) { return sw == 1 ? l : l / 2 * 2 + l % 2 * 16; }
O2E_POOL_INL int o2e_pool_rows_nl_(int kw, int sw) { return sw == 1 ? kw : (kw + 1) / 2 * 2; }
/* Floats a block of v outputs reads from its first tap on (the vector loads included). */
O2E_POOL_INL int o2e_pool_rows_span_(int kw, int sw, int v) {
  return sw == 2 ? (kw - 1) - (kw - 1) % 2 + 2 * v : kw - 1 + v;
}
O2E_POOL_INL float o2e_pool_f_(int op, float a, float b) { return op == O2E_POOL_MAX ? o2e_maxp(a, b) : a + b; }

#if defined(__AVX512F__)
O2E_POOL_INL __m512 o2e_pool_f16_(int op, __m512 a, __m512 b) {
  return op == O2E_POOL_MAX ? o2e_maxp16(a, b) : _mm512_add_ps(a, b);
}
/* load l of a block at s (lane mask m[l] when masked: lanes outside the row load as fill) */
O2E_POOL_INL __m512 o2e_pool_ld16_(const float *s, int l, int sw, int masked, __m512 fill, const unsigned short *m) {
  const int off = o2e_pool_rows_off_(l, sw);
  return masked ? _mm512_mask_loadu_ps(fill, (__mmask16)m[l], s + off) : _mm512_loadu_ps(s + off);
}
/* the 16 row maxima (sums) of a block whose first column is at s */
O2E_POOL_INL __m512 o2e_pool_block16_(const float *s, int op, int kw, int sw, int masked, __m512 fill,
                                      const unsigned short *m) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 v = o2e_pool_ld16_(s, 0, sw, masked, fill, m);
  if (sw == 1) {
    O2E_POOL_UNROLL
    for (int j = 1; j < kw; ++j) v = o2e_pool_f16_(op, v, o2e_pool_ld16_(s, j, sw, masked, fill, m));
  } else {
    O2E_POOL_UNROLL
    for (int b = 0; b < kw; b += 2) {
      const __m512 lo = o2e_pool_ld16_(s, b, sw, masked, fill, m), hi = o2e_pool_ld16_(s, b + 1, sw, masked, fill, m);
      const __m512 e = _mm512_permutex2var_ps(lo, even, hi);
      v = b == 0 ? e : o2e_pool_f16_(op, v, e);
      if (b + 1 < kw) v = o2e_pool_f16_(op, v, _mm512_permutex2var_ps(lo, odd, hi));
    }
  }
  return v;
}
#elif defined(__AVX2__) && defined(__FMA__)
O2E_POOL_INL __m256 o2e_pool_f8_(int op, __m256 a, __m256 b) {
  return op == O2E_POOL_MAX ? o2e_maxp8(a, b) : _mm256_add_ps(a, b);
}
/* 8 floats at s + off; masked: lanes outside the row [0, W) (c: the block's first column) as fill */
O2E_POOL_INL __m256 o2e_pool_ld8_(const float *s, int off, int masked, int c, int W, __m256 fill) {
  return masked ? o2e_ld8m(s + off, c + off, W, fill) : _mm256_loadu_ps(s + off);
}
O2E_POOL_INL __m256 o2e_pool_even8_(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                                                _MM_SHUFFLE(3, 1, 2, 0)));
}
O2E_POOL_INL __m256 o2e_pool_odd8_(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                                                _MM_SHUFFLE(3, 1, 2, 0)));
}
/* the 8 row maxima (sums) of a block whose first column is at s (column c of the row) */
O2E_POOL_INL __m256 o2e_pool_block8_(const float *s, int op, int kw, int sw, int masked, int c, int W, __m256 fill) {
  __m256 v = o2e_pool_ld8_(s, 0, masked, c, W, fill);
  if (sw == 1) {
    O2E_POOL_UNROLL
    for (int j = 1; j < kw; ++j) v = o2e_pool_f8_(op, v, o2e_pool_ld8_(s, j, masked, c, W, fill));
  } else {
    O2E_POOL_UNROLL
    for (int b = 0; b < kw; b += 2) {
      const __m256 lo = o2e_pool_ld8_(s, b, masked, c, W, fill), hi = o2e_pool_ld8_(s, b + 8, masked, c, W, fill);
      const __m256 e = o2e_pool_even8_(lo, hi);
      v = b == 0 ? e : o2e_pool_f8_(op, v, e);
      if (b + 1 < kw) v = o2e_pool_f8_(op, v, o2e_pool_odd8_(lo, hi));
    }
  }
  return v;
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
O2E_POOL_INL float32x4_t o2e_pool_f4_(int op, float32x4_t a, float32x4_t b) {
  return op == O2E_POOL_MAX ? vmaxnmq_f32(a, b) : vaddq_f32(a, b);
}
/* the 4 row maxima (sums) of the outputs whose first column is at s */
O2E_POOL_INL float32x4_t o2e_pool_block4_(const float *s, int op, int kw, int sw) {
  float32x4_t v = vld1q_f32(s);
  if (sw == 1) {
    O2E_POOL_UNROLL
    for (int j = 1; j < kw; ++j) v = o2e_pool_f4_(op, v, vld1q_f32(s + j));
  } else {
    O2E_POOL_UNROLL
    for (int b = 0; b < kw; b += 2) {
      const float32x4x2_t d = vld2q_f32(s + b);
      v = b == 0 ? d.val[0] : o2e_pool_f4_(op, v, d.val[0]);
      if (b + 1 < kw) v = o2e_pool_f4_(op, v, d.val[1]);
    }
  }
  return v;
}
#endif

/* h = row maxima (sums) of the OW outputs of one row, in blocks, straight from the input row x
 * (W floats) at first column c = ow0*sw - pl; lim: floats a block may read from x. */
O2E_POOL_INL void o2e_pool_rows_h_(float *restrict h, const float *restrict x, int W, int pl, int OW,
                                   const unsigned short *mk, size_t lim, int op, int kw, int sw)
{
  const float fill = op == O2E_POOL_MAX ? NAN : 0.0f; /* ignored by the combine */
#if defined(__AVX512F__)
  const int nl = o2e_pool_rows_nl_(kw, sw), span = o2e_pool_rows_span_(kw, sw, 16);
  const __m512 vfill = _mm512_set1_ps(fill);
  (void)W;
  for (int ow0 = 0; ow0 < OW; ow0 += 16) {
    const int c = ow0 * sw - pl;
    const float *s = x + c;
    const unsigned short *m = mk + (ow0 / 16) * nl;
    if (c >= 0 && (size_t)c + span <= lim)
      _mm512_storeu_ps(h + ow0, o2e_pool_block16_(s, op, kw, sw, 0, vfill, m));
    else /* edge block: lanes outside the row load as the fill (masked loads do not fault) */
      _mm512_storeu_ps(h + ow0, o2e_pool_block16_(s, op, kw, sw, 1, vfill, m));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const int span = o2e_pool_rows_span_(kw, sw, 8);
  const __m256 vfill = _mm256_set1_ps(fill);
  (void)mk;
  for (int ow0 = 0; ow0 < OW; ow0 += 8) {
    const int c = ow0 * sw - pl;
    const float *s = x + c;
    if (c >= 0 && (size_t)c + span <= lim)
      _mm256_storeu_ps(h + ow0, o2e_pool_block8_(s, op, kw, sw, 0, c, W, vfill));
    else /* edge block: lanes outside the row load as the fill (no copy: a vector load of
          * scalar stores would stall on store forwarding) */
      _mm256_storeu_ps(h + ow0, o2e_pool_block8_(s, op, kw, sw, 1, c, W, vfill));
  }
#else
  enum { V = 8 };
  const int span = o2e_pool_rows_span_(kw, sw, V);
  float t[2 * O2E_POOL_MAXKW + 2 * V]; /* the span of an edge block, at most 22 floats */
  (void)mk;
  for (int ow0 = 0; ow0 < OW; ow0 += V) {
    const int c = ow0 * sw - pl;
    const int edge = c < 0 || (size_t)c + span > lim;
    const float *s = edge ? t : x + c;
    if (edge) /* edge block: read a copy of its span, the fill outside the row */
      for (int k = 0; k < span; ++k) t[k] = c + k >= 0 && c + k < W ? x[c + k] : fill;
#if defined(__ARM_NEON) && defined(__aarch64__)
    vst1q_f32(h + ow0, o2e_pool_block4_(s, op, kw, sw));
    vst1q_f32(h + ow0 + 4, o2e_pool_block4_(s + 4 * sw, op, kw, sw));
#else
    for (int i = 0; i < V; ++i) {
      float v = s[i * sw];
      O2E_POOL_UNROLL
      for (int j = 1; j < kw; ++j) v = o2e_pool_f_(op, v, s[i * sw + j]);
      h[ow0 + i] = v;
    }
#endif
  }
#endif
}

/* y[0, n) = max (sum / (dr * dc)) over rows rows[0..nr) at [0, n), as whole blocks when `full`
 * (the block may write past n into positions rewritten later), else exactly n floats. */
O2E_POOL_INL void o2e_pool_rows_v_(float *restrict y, const float *const *rows, int nr, int n, int full,
                                   float dr, const float *dc, int op)
{
  const int avg = op == O2E_POOL_AVG;
  (void)dr; (void)dc;
#if defined(__AVX512F__)
  for (int o = 0; o < n; o += 16) {
    __m512 v = _mm512_loadu_ps(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = o2e_pool_f16_(op, v, _mm512_loadu_ps(rows[r] + o));
    if (avg) v = _mm512_div_ps(v, _mm512_mul_ps(_mm512_set1_ps(dr), _mm512_loadu_ps(dc + o)));
    if (full || o + 16 <= n) _mm512_storeu_ps(y + o, v);
    else _mm512_mask_storeu_ps(y + o, (__mmask16)((1u << (n - o)) - 1u), v);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (int o = 0; o < n; o += 8) {
    __m256 v = _mm256_loadu_ps(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = o2e_pool_f8_(op, v, _mm256_loadu_ps(rows[r] + o));
    if (avg) v = _mm256_div_ps(v, _mm256_mul_ps(_mm256_set1_ps(dr), _mm256_loadu_ps(dc + o)));
    if (full || o + 8 <= n) _mm256_storeu_ps(y + o, v);
    else {
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - o), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      _mm256_maskstore_ps(y + o, m, v);
    }
  }
#elif defined(__ARM_NEON) && defined(__aarch64__)
  int o = 0;
  for (; o + 4 <= n || (full && o < n); o += 4) {
    float32x4_t v = vld1q_f32(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = o2e_pool_f4_(op, v, vld1q_f32(rows[r] + o));
    if (avg) v = vdivq_f32(v, vmulq_f32(vdupq_n_f32(dr), vld1q_f32(dc + o)));
    vst1q_f32(y + o, v);
  }
  for (; o < n; ++o) {
    float v = rows[0][o];
    for (int r = 1; r < nr; ++r) v = o2e_pool_f_(op, v, rows[r][o]);
    if (avg) v = v / (dr * dc[o]);
    y[o] = v;
  }
#else
  (void)full;
  for (int o = 0; o < n; ++o) {
    float v = rows[0][o];
    for (int r = 1; r < nr; ++r) v = o2e_pool_f_(op, v, rows[r][o]);
    if (avg) v = v / (dr * dc[o]);
    y[o] = v;
  }
#endif
}

/* Planes [i0, i1) of a->x (a: o2e_win2d_args; a->C the number of planes, where the input ends;
 * a->WQ the ring row stride, OW rounded up to whole blocks): each needed input row's maxima go
 * to a ring of kh rows (this thread's scratch slot) once; each output row is the max of its
 * window's rows. pf: prefetch the input O2E_POOL_PF floats ahead. */
O2E_POOL_INL void o2e_pool_rows(void *arg, int i0, int i1, int op, int kh, int kw, int sh, int sw, int pf)
{
  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, pt = a->pt, pl = a->pl;
  const int OWp = a->WQ;
  float *restrict ring = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const float empty = op == O2E_POOL_MAX ? -INFINITY : 0.0f; /* a window of padding only */
  /* AVX-512: the lane masks of every block's loads, the same for every row */
#if defined(__AVX512F__)
  static const int offs1[O2E_POOL_MAXKW] = {0, 1, 2, 3, 4, 5, 6, 7}; /* o2e_pool_rows_off_ */
  static const int offs2[O2E_POOL_MAXKW] = {0, 16, 2, 18, 4, 20, 6, 22};
  const int *offs = sw == 1 ? offs1 : offs2;
  const int nl = o2e_pool_rows_nl_(kw, sw);
  unsigned short mk[O2E_POOL_MAXB * O2E_POOL_MAXKW];
  for (int b = 0; b * 16 < OW; ++b)
    for (int l = 0; l < nl; ++l) mk[b * nl + l] = o2e_lanes16(b * 16 * sw - pl + offs[l], W);
#else
  const unsigned short *mk = NULL;
#endif
  const size_t xn = (size_t)a->C * H * W;
  const int tail_ok = (OW - 1) * sw - pl + kw <= W;
  (void)pf;
  for (int i = i0; i < i1; ++i) {
    const float *restrict x = a->x + (size_t)i * H * W;
    float *restrict y = a->y + (size_t)i * OH * OW;
    int done = -1; /* rows below done + 1 are in the ring (or no longer needed) */
    for (int oh = 0; oh < OH; ++oh) {
      const int r0 = oh * sh - pt;
      const int lo = r0 > 0 ? r0 : 0, hi = r0 + kh < H ? r0 + kh : H;
      const float *rows[O2E_POOL_MAXKH + 1];
      float *yr = y + (size_t)oh * OW;
      for (int r = 0; r <= kh; ++r) rows[r] = NULL; /* kh + 1: one spare, as gcc's bounds check wants for kh = 1 */
      if (hi <= lo) { /* the window covers padding only */
        for (int o = 0; o < OW; ++o) yr[o] = empty;
        continue;
      }
      for (int r = lo; r < hi; ++r) {
        float *h = ring + (size_t)(r % kh) * OWp;
        if (r > done) {
          const float *xr = x + (size_t)r * W;
#if O2E_POOL_PF > 0
          /* the lines O2E_POOL_PF floats ahead: the next plane's rows on small maps, whose
           * short streams the hardware prefetcher picks up late */
          if (pf)
            for (size_t k = (size_t)(xr - a->x) + O2E_POOL_PF, e = k + W; k < e; k += 16)
              if (k < xn) __builtin_prefetch(a->x + k);
#endif
          /* floats a block may read from the row start: on into the next row (whose values
           * reach only lanes past OW) when no window overhangs the row's right end */
          o2e_pool_rows_h_(h, xr, W, pl, OW, mk, tail_ok ? xn - (size_t)(xr - a->x) : (size_t)W, op, kw, sw);
        }
        rows[r - lo] = h;
      }
      if (hi - 1 > done) done = hi - 1;
      o2e_pool_rows_v_(yr, rows, hi - lo, OW, (size_t)oh * OW + OWp <= (size_t)OH * OW,
                       a->dr ? a->dr[oh] : 1.0f, a->dc, op);
    }
  }
}

#endif /* O2E_POOL_ROWS_H */
