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
    if (m > 0) o2e_deinterleave2(d + pl / 2, d1 + pl / 2, s, m);
  } else if (m > 0) {
    d1[pl / 2] = s[0];
    if (m > 1) o2e_deinterleave2(d + (pl + 1) / 2, d1 + (pl + 1) / 2, s + 1, m - 1);
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

/* Output row yr (OW columns) of one plane from the rows its window covers (rows[i]: the
 * padded row of tap row i, its sw phases RW floats apart); w: the plane's kh·kw weights. Every
 * lane computes b + w00·t00 + w01·t01 + ... as a chain of fused multiply-adds in row-major
 * tap order. */
static inline __attribute__((always_inline)) void o2e_dwr_row(const int kh, const int kw, const int sw,
    const int kind, const float *const *rows, int RW, const float *restrict w, float b, float lo,
    float hi, float *restrict yr, int OW)
{
#if defined(__AVX512F__)
  const __m512 vb = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  (void)zero; (void)vlo; (void)vhi;
  for (int ow = 0; ow < OW; ow += 16) {
    __m512 v = vb;
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; k++) {
      const int i = k / kw, j = k % kw;
      v = _mm512_fmadd_ps(_mm512_loadu_ps(rows[i] + (j % sw) * RW + j / sw + ow), _mm512_set1_ps(w[k]), v);
    }
    O2E_DWR_X86_ACT_(_mm512, __m512, kind, v, zero, vlo, vhi);
    if (ow + 16 <= OW) _mm512_storeu_ps(yr + ow, v);
    else _mm512_mask_storeu_ps(yr + ow, (__mmask16)((1u << (OW - ow)) - 1u), v);
  }
#elif defined(__ARM_NEON) && defined(__aarch64__)
  const float32x4_t vb = vdupq_n_f32(b), zero = vdupq_n_f32(0.0f);
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  for (int ow = 0; ow < OW; ow += 4) {
    float32x4_t v = vb;
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; k++) {
      const int i = k / kw, j = k % kw;
      v = vfmaq_n_f32(v, vld1q_f32(rows[i] + (j % sw) * RW + j / sw + ow), w[k]);
    }
    if (kind == O2E_DWR_RELU) v = vbslq_f32(vcltq_f32(v, zero), zero, v);
    if (kind == O2E_DWR_CLIP) v = vbslq_f32(vcltq_f32(v, vlo), vlo, vbslq_f32(vcgtq_f32(v, vhi), vhi, v));
    if (kind == O2E_DWR_HSIG) v = o2e_dwr_clamp01_(vfmaq_n_f32(vdupq_n_f32(hi), v, lo));
    if (kind == O2E_DWR_HSWISH) v = vmulq_f32(v, o2e_dwr_clamp01_(vfmaq_n_f32(vdupq_n_f32(0.5f), v, 1.0f / 6.0f)));
    if (ow + 4 <= OW) vst1q_f32(yr + ow, v);
    else { /* the last 1..3 columns: y has no slack */
      float t[4];
      vst1q_f32(t, v);
      for (int k = 0; ow + k < OW; ++k) yr[ow + k] = t[k];
    }
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 vb = _mm256_set1_ps(b), zero = _mm256_setzero_ps();
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  (void)zero; (void)vlo; (void)vhi;
  for (int ow = 0; ow < OW; ow += 8) {
    __m256 v = vb;
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; k++) {
      const int i = k / kw, j = k % kw;
      v = _mm256_fmadd_ps(_mm256_loadu_ps(rows[i] + (j % sw) * RW + j / sw + ow), _mm256_set1_ps(w[k]), v);
    }
    O2E_DWR_X86_ACT_(_mm256, __m256, kind, v, zero, vlo, vhi);
    if (ow + 8 <= OW) _mm256_storeu_ps(yr + ow, v);
    else _mm256_maskstore_ps(yr + ow, _mm256_cmpgt_epi32(_mm256_set1_epi32(OW - ow),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
  }
#else
  for (int ow = 0; ow < OW; ++ow) {
    float v = b;
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; k++) {
      const int i = k / kw, j = k % kw;
      v += w[k] * rows[i][(j % sw) * RW + j / sw + ow];
    }
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
    yr[ow] = v;
  }
#endif
}

/* The activation over the planes a kernel call wrote (common.act_tail), or NULL. */
typedef void (*o2e_dwr_tail_fn)(float *restrict p, size_t n);

/* Depthwise kh x kw convolution, stride sh x sw, over planes [i0, i1), from a ring of kh
 * zero-bordered input rows; a->WQ: floats per phase of a row buffer. The generated C calls it
 * with the filter size, stride and activation kind as literals (one copy per variant). */
static inline __attribute__((always_inline)) void o2e_dwrows(const int kh, const int kw, const int sh,
    const int sw, const int kind, const o2e_win2d_args *a, int i0, int i1, o2e_dwr_tail_fn tail)
{
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, pt = a->pt, pl = a->pl, RW = a->WQ;
  const int need = OW + (kw - 1) / sw; /* columns of each phase the taps read */
  const float lo = a->lo, hi = a->hi;
  float *restrict ring = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const float *zrow = ring + (size_t)(kh * sw) * RW; /* rows outside the input */
  for (size_t k = 0; k < (size_t)((kh + 1) * sw) * RW; ++k) ring[k] = 0.0f;
  for (int i = i0; i < i1; ++i) {
    const int c = i % a->C;
    const float *restrict wc = a->w + (size_t)c * (kh * kw);
    const float b = a->bias ? a->bias[c] : 0.0f;
    const float *restrict xc = a->x + (size_t)i * H * W;
    float *restrict yc = a->y + (size_t)i * OH * OW;
    int tag[O2E_DWR_MAXK]; /* the input row each ring slot holds (-1: none yet) */
    float w[O2E_DWR_MAXK * O2E_DWR_MAXK];
#pragma GCC unroll 64
    for (int k = 0; k < kh * kw; ++k) w[k] = wc[k];
    for (int k = 0; k < kh; ++k) tag[k] = -1;
    for (int oh = 0; oh < OH; ++oh) {
      const float *rows[O2E_DWR_MAXK];
      for (int t = 0; t < kh; ++t) {
        const int ih = oh * sh - pt + t;
        if (ih < 0 || ih >= H) {
          rows[t] = zrow;
          continue;
        }
        float *slot = ring + (size_t)(ih % kh) * sw * RW;
        if (tag[ih % kh] != ih) {
          o2e_dwr_fill(sw, slot, xc + (size_t)ih * W, W, pl, need, RW);
          tag[ih % kh] = ih;
        }
        rows[t] = slot;
      }
      o2e_dwr_row(kh, kw, sw, kind, rows, RW, w, b, lo, hi, yc + (size_t)oh * OW, OW);
    }
  }
  if (tail) tail(a->y + (size_t)i0 * OH * OW, (size_t)(i1 - i0) * OH * OW);
}

#endif /* O2E_DWROWS_H */
