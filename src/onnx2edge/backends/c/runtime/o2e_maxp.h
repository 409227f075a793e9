/* o2e_maxp.h - NaN-ignoring max and the vector helpers of the row pools (kernels/pool/pool_rows.py).
 * Static C moved out of kernels/pool/pool_rows.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_MAXP_H
#define O2E_MAXP_H
#include "o2e_intrinsics.h"

#ifndef O2E_POOL_PF
#define O2E_POOL_PF 1024 /* prefetch distance of the MaxPool rows kernel, in floats (0: none) */
#endif
/* Max of a and b ignoring NaN (C's fmaxf: NaN only when both are NaN), the same on every
 * target (pool_rows.py): AVX-512DQ vrangeps and NEON fmaxnm do this in one instruction; x86's
 * max returns its second operand when a NaN is involved, so a NaN b is replaced by a. */
static inline float o2e_maxp(float a, float b) { return (a > b || b != b) ? a : b; }
static inline float o2e_addf(float a, float b) { return a + b; }
#if defined(__AVX512F__)
static inline __m512 o2e_maxp16(__m512 a, __m512 b)
{
#if defined(__AVX512DQ__)
  return _mm512_range_ps(a, b, 5); /* max of the two, a NaN operand ignored */
#else
  return _mm512_mask_max_ps(a, _mm512_cmp_ps_mask(b, b, _CMP_ORD_Q), a, b);
#endif
}
/* lanes l of a 16-float load at x + c (c may be negative) with 0 <= c + l < n */
static inline __mmask16 o2e_lanes16(int c, int n)
{
  const int lo = c < 0 ? (-c < 16 ? -c : 16) : 0;
  const int hi = n - c < 0 ? 0 : (n - c > 16 ? 16 : n - c);
  return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 o2e_maxp8(__m256 a, __m256 b)
{
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}
/* 8 floats at p = x + c (c may be negative): lanes with 0 <= c + l < n from memory, the
 * others `fill` (vmaskmov neither reads nor faults on masked-off lanes) */
static inline __m256 o2e_ld8m(const float *p, int c, int n, __m256 fill)
{
  const __m256i i = _mm256_add_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i m = _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(-1)),
                                     _mm256_cmpgt_epi32(_mm256_set1_epi32(n), i));
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
#endif

#endif /* O2E_MAXP_H */
