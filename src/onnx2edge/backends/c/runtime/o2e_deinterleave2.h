/* o2e_deinterleave2.h - o2e_deinterleave2 (kernels/pool/pool2d.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_DEINTERLEAVE2_H
#define O2E_DEINTERLEAVE2_H
#include "o2e_intrinsics.h"

/* unused: a header including several of these (o2e_phase_split.h) must not trip -Wunused-function */
#if defined(__GNUC__)
#define O2E_DEINTERLEAVE2_FN static __attribute__((unused))
#else
#define O2E_DEINTERLEAVE2_FN static
#endif

/* Splits n consecutive floats into their even (d0[k] = s[2k]) and odd (d1[k] = s[2k+1])
 * positions: the two column phases of a stride-2 window. AVX-512 reads 32 floats and writes
 * 16 + 16 with two permutes (the last block masked); AVX2 reads 16 and writes 8 + 8 (the
 * remainder by the plain loop); other targets use the plain loop. */
O2E_DEINTERLEAVE2_FN void o2e_deinterleave2(float *restrict d0, float *restrict d1, const float *restrict s, int n)
{
#if defined(__AVX512F__)
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  int k = 0;
  for (; 2 * k + 32 <= n; k += 16) {
    const __m512 lo = _mm512_loadu_ps(s + 2 * k), hi = _mm512_loadu_ps(s + 2 * k + 16);
    _mm512_storeu_ps(d0 + k, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_storeu_ps(d1 + k, _mm512_permutex2var_ps(lo, odd, hi));
  }
  if (2 * k < n) {
    const int r = n - 2 * k; /* 1 .. 31 floats left */
    const __mmask16 mlo = (__mmask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
    const __mmask16 mhi = (__mmask16)(r > 16 ? (1u << (r - 16)) - 1u : 0u);
    const __m512 lo = _mm512_maskz_loadu_ps(mlo, s + 2 * k);
    const __m512 hi = _mm512_maskz_loadu_ps(mhi, s + 2 * k + 16);
    _mm512_mask_storeu_ps(d0 + k, (__mmask16)((1u << ((r + 1) / 2)) - 1u), _mm512_permutex2var_ps(lo, even, hi));
    _mm512_mask_storeu_ps(d1 + k, (__mmask16)((1u << (r / 2)) - 1u), _mm512_permutex2var_ps(lo, odd, hi));
  }
#elif defined(__ARM_NEON) && defined(__aarch64__)
  /* NEON: ld2 splits 8 floats into their even and odd lanes in one instruction */
  int k = 0;
  for (; 2 * k + 8 <= n; k += 4) {
    const float32x4x2_t v = vld2q_f32(s + 2 * k);
    vst1q_f32(d0 + k, v.val[0]);
    vst1q_f32(d1 + k, v.val[1]);
  }
  for (; 2 * k < n; ++k) {
    d0[k] = s[2 * k];
    if (2 * k + 1 < n) d1[k] = s[2 * k + 1];
  }
#elif defined(__AVX2__) && defined(__FMA__)
  /* 16 floats -> 8 + 8: shufps picks even / odd within 128-bit lanes, vpermpd orders the lanes */
  int k = 0;
  for (; 2 * k + 16 <= n; k += 8) {
    const __m256 lo = _mm256_loadu_ps(s + 2 * k), hi = _mm256_loadu_ps(s + 2 * k + 8);
    _mm256_storeu_ps(d0 + k, _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(d1 + k, _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  for (; 2 * k < n; ++k) {
    d0[k] = s[2 * k];
    if (2 * k + 1 < n) d1[k] = s[2 * k + 1];
  }
#else
  for (int k = 0; 2 * k < n; ++k) {
    d0[k] = s[2 * k];
    if (2 * k + 1 < n) d1[k] = s[2 * k + 1];
  }
#endif
}

#endif /* O2E_DEINTERLEAVE2_H */
