/* o2e_dwrows.h - the depthwise convolution over a ring of padded input rows (kernels/conv/conv_dwrows.py).
 * Static C moved out of kernels/conv/conv_dwrows.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_DWROWS_H
#define O2E_DWROWS_H
#include <stddef.h>
#include "o2e_intrinsics.h"
#include "o2e_win2d.h"
#include "o2e_copy_row.h"
#include "o2e_deinterleave2.h"

/* The activations applied in registers: the `gemm_kind` numbers of onnx2edge's activation
 * table (o2e_gemm.h's O2E_ACT_*); lo / hi are a->lo / a->hi (Clip's bounds, HardSigmoid's
 * alpha / beta). Any other activation runs after the planes (the tail of o2e_dwrows). */
#define O2E_DWR_NONE 0
#define O2E_DWR_RELU 1
#define O2E_DWR_CLIP 2
#define O2E_DWR_HSIG 4
#define O2E_DWR_HSWISH 5
#define O2E_DWR_MAXK 7 /* conv_dwrows.MAX_K: taps are unrolled, kh·kw of them */
#define O2E_DWR_MAXR 8 /* conv_dwrows.MAX_R: output rows a step */
#define O2E_DWR_MAXROWS ((O2E_DWR_MAXR - 1) * 2 + O2E_DWR_MAXK) /* ring slots: input rows a step */

/* o2e_deinterleave2 (d0[k] = s[2k], d1[k] = s[2k+1], n floats of s) inlined: a stride-2
 * layer fills every input row through it, and on 14 .. 56-float rows the call and its
 * remainder masks cost as much as the split (a fifth of a 5x5 stride-2 layer's time). */
static inline __attribute__((always_inline)) void o2e_dwr_deint2_(float *restrict d0, float *restrict d1,
    const float *restrict s, int n)
{
#if defined(__AVX512F__)
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int k = 0; 2 * k < n; k += 16) {
    const int r = n - 2 * k; /* floats left: whole vectors, then the masked remainder */
    const __mmask16 mlo = (__mmask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
    const __mmask16 mhi = (__mmask16)(r >= 32 ? 0xFFFFu : r > 16 ? (1u << (r - 16)) - 1u : 0u);
    const __m512 lo = _mm512_maskz_loadu_ps(mlo, s + 2 * k);
    const __m512 hi = _mm512_maskz_loadu_ps(mhi, s + 2 * k + 16);
    const __mmask16 m0 = (__mmask16)(r >= 32 ? 0xFFFFu : (1u << ((r + 1) / 2)) - 1u);
    const __mmask16 m1 = (__mmask16)(r >= 32 ? 0xFFFFu : (1u << (r / 2)) - 1u);
    _mm512_mask_storeu_ps(d0 + k, m0, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_mask_storeu_ps(d1 + k, m1, _mm512_permutex2var_ps(lo, odd, hi));
  }
#elif defined(__AVX2__) && defined(__FMA__) && !(defined(__ARM_NEON) && defined(__aarch64__))
  /* 16 floats -> 8 + 8 (o2e_deinterleave2's shuffles); the remainder by masked loads / stores */
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int k = 0; 2 * k < n; k += 8) {
    const int r = n - 2 * k;
    __m256 lo, hi;
    __m256i m0, m1;
    if (r >= 16) {
      lo = _mm256_loadu_ps(s + 2 * k);
      hi = _mm256_loadu_ps(s + 2 * k + 8);
      m0 = m1 = _mm256_set1_epi32(-1);
    } else {
      lo = _mm256_maskload_ps(s + 2 * k, _mm256_cmpgt_epi32(_mm256_set1_epi32(r), lane));
      hi = _mm256_maskload_ps(s + 2 * k + 8, _mm256_cmpgt_epi32(_mm256_set1_epi32(r - 8), lane));
      m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((r + 1) / 2), lane);
      m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r / 2), lane);
    }
    _mm256_maskstore_ps(d0 + k, m0, _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_maskstore_ps(d1 + k, m1, _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0))));
  }
#else
  o2e_deinterleave2(d0, d1, s, n);
#endif
}

/* One input row s (W floats) into the padded row buffer d (its sw phases RW floats apart);
 * only the columns the taps read (< need of each phase) are written, so the zero border stays. */
static inline __attribute__((always_inline)) void o2e_dwr_fill(const int sw, float *restrict d,
    const float *restrict s, int W, int pl, int need, int RW)
{
  if (sw == 1) {
    /* padded column q = iw + pl; the taps read q < OW + kw - 1 = need */
    const int n = W < need - pl ? W : need - pl;
    if (n > 0) o2e_copy_row(d + pl, s, n);
    return;
  }
  /* padded column iw + pl goes to phase (iw + pl) % 2 at (iw + pl) / 2; the taps read
   * columns < need of each phase */
  const int m = W < 2 * need - pl ? W : 2 * need - pl;
  float *restrict d1 = d + RW;
  if (pl % 2 == 0) {
    if (m > 0) o2e_dwr_deint2_(d + pl / 2, d1 + pl / 2, s, m);
  } else if (m > 0) {
    d1[pl / 2] = s[0];
    if (m > 1) o2e_dwr_deint2_(d + (pl + 1) / 2, d1 + (pl + 1) / 2, s + 1, m - 1);
  }
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
/* The register activations on x86: max(lo, v) / min(hi, v) with the bound first, so x86
 * returns v when it is NaN, as the scalar v < 0 ? 0 : v (and -0 stays -0); HardSigmoid /
 * HardSwish clamp t to [0, 1] the same way (a NaN t passes). */
#define O2E_DWR_X86_ACT_(p, T, kind, v, zero, vlo, vhi)                                         \
  do {                                                                                          \
    if ((kind) == O2E_DWR_RELU) v = p##_max_ps(zero, v);                                        \
    if ((kind) == O2E_DWR_CLIP) v = p##_max_ps(vlo, p##_min_ps(vhi, v));                        \
    if ((kind) == O2E_DWR_HSIG) {                                                               \
      T t = p##_fmadd_ps(v, vlo, vhi);                                                          \
      t = p##_max_ps(zero, p##_min_ps(p##_set1_ps(1.0f), t));                                   \
      v = t;                                                                                    \
    }                                                                                           \
    if ((kind) == O2E_DWR_HSWISH) {                                                             \
      T t = p##_fmadd_ps(v, p##_set1_ps(1.0f / 6.0f), p##_set1_ps(0.5f));                       \
      t = p##_max_ps(zero, p##_min_ps(p##_set1_ps(1.0f), t));                                   \
      v = p##_mul_ps(v, t);                                                                     \
    }                                                                                           \
  } while (0)
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
static inline __attribute__((always_inline)) float32x4_t o2e_dwr_clamp01_(float32x4_t t)
{
  const float32x4_t z = vdupq_n_f32(0.0f), one = vdupq_n_f32(1.0f);
  const float32x4_t inner = vbslq_f32(vcltq_f32(t, z), z, t);
  return vbslq_f32(vcgtq_f32(inner, one), one, inner);
}
#endif

/* The vector of the row loop: AVX-512 (16 lanes), NEON (4), AVX2 (8) or one float. */
#if defined(__AVX512F__)
typedef __m512 o2e_dwr_v;
#define O2E_DWR_VL 16
#define O2E_DWR_LD(p) _mm512_loadu_ps(p)
#define O2E_DWR_SET1(f) _mm512_set1_ps(f)
#define O2E_DWR_FMA(acc, x, w) _mm512_fmadd_ps(x, w, acc)
#elif defined(__ARM_NEON) && defined(__aarch64__)
typedef float32x4_t o2e_dwr_v;
#define O2E_DWR_VL 4
#define O2E_DWR_LD(p) vld1q_f32(p)
#define O2E_DWR_SET1(f) vdupq_n_f32(f)
#define O2E_DWR_FMA(acc, x, w) vfmaq_f32(acc, x, w)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 o2e_dwr_v;
#define O2E_DWR_VL 8
#define O2E_DWR_LD(p) _mm256_loadu_ps(p)
#define O2E_DWR_SET1(f) _mm256_set1_ps(f)
#define O2E_DWR_FMA(acc, x, w) _mm256_fmadd_ps(x, w, acc)
#else
typedef float o2e_dwr_v;
#define O2E_DWR_VL 1
#define O2E_DWR_LD(p) (*(p))
#define O2E_DWR_SET1(f) (f)
#define O2E_DWR_FMA(acc, x, w) ((acc) + (w) * (x))
#endif

/* The fused activation kind of v, then the first n (<= O2E_DWR_VL) lanes of v to y. */
static inline __attribute__((always_inline)) void o2e_dwr_store_(const int kind, o2e_dwr_v v, float lo,
    float hi, float *restrict y, int n)
{
#if defined(__AVX512F__)
  const __m512 zero = _mm512_setzero_ps(), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  (void)zero; (void)vlo; (void)vhi;
  O2E_DWR_X86_ACT_(_mm512, __m512, kind, v, zero, vlo, vhi);
  if (n >= 16) _mm512_storeu_ps(y, v);
  else _mm512_mask_storeu_ps(y, (__mmask16)((1u << n) - 1u), v);
#elif defined(__ARM_NEON) && defined(__aarch64__)
  const float32x4_t zero = vdupq_n_f32(0.0f), vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  if (kind == O2E_DWR_RELU) v = vbslq_f32(vcltq_f32(v, zero), zero, v);
  if (kind == O2E_DWR_CLIP) v = vbslq_f32(vcltq_f32(v, vlo), vlo, vbslq_f32(vcgtq_f32(v, vhi), vhi, v));
  if (kind == O2E_DWR_HSIG) v = o2e_dwr_clamp01_(vfmaq_n_f32(vdupq_n_f32(hi), v, lo));
  if (kind == O2E_DWR_HSWISH) v = vmulq_f32(v, o2e_dwr_clamp01_(vfmaq_n_f32(vdupq_n_f32(0.5f), v, 1.0f / 6.0f)));
  if (n >= 4) vst1q_f32(y, v);
  else { /* the last 1..3 columns: y has no slack */
    float t[4];
    vst1q_f32(t, v);
    for (int k = 0; k < n; ++k) y[k] = t[k];
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 zero = _mm256_setzero_ps(), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  (void)zero; (void)vlo; (void)vhi;
  O2E_DWR_X86_ACT_(_mm256, __m256, kind, v, zero, vlo, vhi);
  if (n >= 8) _mm256_storeu_ps(y, v);
  else _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
#else
  (void)n;
  if (kind == O2E_DWR_RELU) v = v < 0.0f ? 0.0f : v;
  if (kind == O2E_DWR_CLIP) v = v < lo ? lo : (v > hi ? hi : v);
  if (kind == O2E_DWR_HSIG) {
    float t = v * lo + hi;
    t = t < 0.0f ? 0.0f : t;
    t = t > 1.0f ? 1.0f : t;
    v = t;
  }
  if (kind == O2E_DWR_HSWISH) {
    float t = v * (1.0f / 6.0f) + 0.5f;
    t = t < 0.0f ? 0.0f : t;
    t = t > 1.0f ? 1.0f : t;
    v = v * t;
  }
  *y = v;
#endif
}

/* R consecutive output rows (yr: the first, OW columns each) of one plane from the
 * (R - 1)·sh + kh input rows their windows cover (rows[t]: the padded row of input row t of
 * the block, its sw phases RW floats apart); wv: the plane's kh·kw weights, broadcast. Each
 * loaded input vector feeds every output row whose window holds it (R rows: up to R taps a
 * load instead of one, and R independent chains of fused multiply-adds in flight). Every
 * lane still computes b + w00·t00 + w01·t01 + ... in row-major tap order: the input rows are
 * walked top down, so the taps of each output row come in that order. */
static inline __attribute__((always_inline)) void o2e_dwr_rows_(const int kh, const int kw, const int sh,
    const int sw, const int kind, const int R, const float *const *rows, int RW,
    const o2e_dwr_v *restrict wv, float b, float lo, float hi, float *restrict yr, int OW)
{
  for (int ow = 0; ow < OW; ow += O2E_DWR_VL) {
    o2e_dwr_v acc[O2E_DWR_MAXR];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = O2E_DWR_SET1(b);
#pragma GCC unroll 64
    for (int t = 0; t < (R - 1) * sh + kh; ++t) {
#pragma GCC unroll 16
      for (int j = 0; j < kw; ++j) {
        const o2e_dwr_v x = O2E_DWR_LD(rows[t] + (j % sw) * RW + j / sw + ow);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const int i = t - r * sh;
          if (i >= 0 && i < kh) acc[r] = O2E_DWR_FMA(acc[r], x, wv[i * kw + j]);
        }
      }
    }
    const int n = OW - ow < O2E_DWR_VL ? OW - ow : O2E_DWR_VL;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) o2e_dwr_store_(kind, acc[r], lo, hi, yr + (size_t)r * OW + ow, n);
  }
}

/* The activation over the planes a kernel call wrote (common.act_tail), or NULL. */
typedef void (*o2e_dwr_tail_fn)(float *restrict p, size_t n);

/* Output rows a step: r_wide where there are 32 vector registers (AVX-512, NEON: R
 * accumulators beside the 9 .. 25 broadcast weights), r_narrow on AVX2's 16 and the portable
 * loop (conv_dwrows.rows_per_step picks both for the layer's OH). */
#if defined(__AVX512F__) || (defined(__ARM_NEON) && defined(__aarch64__))
#define O2E_DWR_RSEL(r_wide, r_narrow) (r_wide)
#else
#define O2E_DWR_RSEL(r_wide, r_narrow) (r_narrow)
#endif

/* Depthwise kh x kw convolution, stride sh x sw, over planes [i0, i1), R output rows a step
 * (R <= OH), from a ring of NR = (R - 1)·sh + kh zero-bordered input rows (a->slot holds
 * NR + 1 rows of sw phases: the last one the zero row); a->WQ: floats per phase of a row
 * buffer. The generated C calls it with the filter size, stride, activation kind and both
 * choices of R as literals (one copy per variant). When R does not divide OH the last step
 * starts at OH - R: it recomputes a few rows (the same values) rather than run a second,
 * shorter variant. */
static inline __attribute__((always_inline)) void o2e_dwrows(const int kh, const int kw, const int sh,
    const int sw, const int kind, const int r_wide, const int r_narrow, const o2e_win2d_args *a,
    int i0, int i1, o2e_dwr_tail_fn tail)
{
  const int R = O2E_DWR_RSEL(r_wide, r_narrow);
  (void)r_wide; (void)r_narrow;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, pt = a->pt, pl = a->pl, RW = a->WQ;
  const int need = OW + (kw - 1) / sw; /* columns of each phase the taps read */
  const int NR = (R - 1) * sh + kh;
  const float lo = a->lo, hi = a->hi;
  float *restrict ring = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const float *zrow = ring + (size_t)(NR * sw) * RW; /* rows outside the input */
  for (size_t k = 0; k < (size_t)((NR + 1) * sw) * RW; ++k) ring[k] = 0.0f;
  for (int i = i0; i < i1; ++i) {
    const int c = i % a->C;
    const float *restrict wc = a->w + (size_t)c * (kh * kw);
    const float b = a->bias ? a->bias[c] : 0.0f;
    const float *restrict xc = a->x + (size_t)i * H * W;
    float *restrict yc = a->y + (size_t)i * OH * OW;
    int tag[O2E_DWR_MAXROWS]; /* the input row each ring slot holds (-1: none yet) */
    o2e_dwr_v wv[O2E_DWR_MAXK * O2E_DWR_MAXK];
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; ++k) wv[k] = O2E_DWR_SET1(wc[k]);
    for (int k = 0; k < NR; ++k) tag[k] = -1;
    for (int oh0 = 0; oh0 < OH; oh0 += R) {
      const int oh = oh0 + R <= OH ? oh0 : OH - R;
      const float *rows[O2E_DWR_MAXROWS];
      for (int t = 0; t < NR; ++t) {
        const int ih = oh * sh - pt + t;
        if (ih < 0 || ih >= H) {
          rows[t] = zrow;
          continue;
        }
        const int s = ih % NR;
        float *slot = ring + (size_t)s * sw * RW;
        if (tag[s] != ih) {
          o2e_dwr_fill(sw, slot, xc + (size_t)ih * W, W, pl, need, RW);
          tag[s] = ih;
        }
        rows[t] = slot;
      }
      o2e_dwr_rows_(kh, kw, sh, sw, kind, R, rows, RW, wv, b, lo, hi, yc + (size_t)oh * OW, OW);
    }
  }
  if (tail) tail(a->y + (size_t)i0 * OH * OW, (size_t)(i1 - i0) * OH * OW);
}

#endif /* O2E_DWROWS_H */
