/* o2e_copy_row.h - o2e_copy_row (kernels/pool/pool2d.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_COPY_ROW_H
#define O2E_COPY_ROW_H
#include "o2e_intrinsics.h"

/* unused: a header including several of these (o2e_phase_split.h) must not trip -Wunused-function */
#if defined(__GNUC__)
#define O2E_COPY_ROW_FN static __attribute__((unused))
#else
#define O2E_COPY_ROW_FN static
#endif

/* Copies n floats: one row of a feature map, 7 to a few hundred floats. Compilers turn a copy
 * loop into a memcpy call, which costs more than the copy itself for the short rows of small
 * maps (and makes the caller save its vector registers); AVX-512 moves a row in 16-float
 * blocks, the last one masked (masked-off lanes are neither read nor written). */
O2E_COPY_ROW_FN void o2e_copy_row(float *restrict d, const float *restrict s, int n)
{
#if defined(__AVX512F__)
  int q = 0;
  for (; q + 16 <= n; q += 16) _mm512_storeu_ps(d + q, _mm512_loadu_ps(s + q));
  if (q < n) {
    const __mmask16 m = (__mmask16)((1u << (n - q)) - 1u);
    _mm512_mask_storeu_ps(d + q, m, _mm512_maskz_loadu_ps(m, s + q));
  }
#elif defined(__ARM_NEON) && defined(__aarch64__)
  /* NEON: 16 floats per step in four q registers, then 4, then the last 0..3 one by one
   * (gcc would otherwise call memcpy, as above) */
  int q = 0;
  for (; q + 16 <= n; q += 16) {
    const float32x4_t v0 = vld1q_f32(s + q), v1 = vld1q_f32(s + q + 4);
    const float32x4_t v2 = vld1q_f32(s + q + 8), v3 = vld1q_f32(s + q + 12);
    vst1q_f32(d + q, v0);
    vst1q_f32(d + q + 4, v1);
    vst1q_f32(d + q + 8, v2);
    vst1q_f32(d + q + 12, v3);
  }
  for (; q + 4 <= n; q += 4) vst1q_f32(d + q, vld1q_f32(s + q));
  for (; q < n; ++q) d[q] = s[q];
#elif defined(__AVX2__) && defined(__FMA__)
  int q = 0;
  for (; q + 8 <= n; q += 8) _mm256_storeu_ps(d + q, _mm256_loadu_ps(s + q));
  if (q < n) { /* vmaskmov: masked-off lanes are neither read nor written either */
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - q), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(d + q, m, _mm256_maskload_ps(s + q, m));
  }
#else
  for (int q = 0; q < n; ++q) d[q] = s[q];
#endif
}

#endif /* O2E_COPY_ROW_H */
