/* o2e_dconv.h - arguments and register helpers of the direct convolution kernels (kernels/conv/conv_direct.py).
 * Static C moved out of kernels/conv/conv_direct.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_DCONV_H
#define O2E_DCONV_H

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
/* Arguments of a direct convolution kernel (conv_direct.py): one call computes output rows
 * [r0, r1) of the N*OH rows; the geometry is compiled into the kernel. */
typedef struct {
  const float *x, *w, *bias, *res;
  float *y;
} o2e_dconv_args;
/* Keeps a loaded vector in a register: without it gcc folds the load into each of the MB FMAs
 * that use it, which then issue MB loads instead of one. */
#if defined(__GNUC__) || defined(__clang__)
#define O2E_DCONV_REG(v) __asm__("" : "+v"(v))
#else
#define O2E_DCONV_REG(v) ((void)0)
#endif
#if defined(__AVX512F__)
/* The lanes l of a 16-float vector with 0 <= first + l < n. */
static inline __mmask16 o2e_dconv_mask16(int first, int n)
{
  int lo = -first, hi = n - first;
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#elif defined(__AVX2__) && defined(__FMA__)
/* The lanes l of an 8-float vector with 0 <= first + l < n (all bits set: lane on). */
static inline __m256i o2e_dconv_mask8(int first, int n)
{
  const __m256i i = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(first));
  return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(-1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(n), i));
}
#endif

#endif /* O2E_DCONV_H */
