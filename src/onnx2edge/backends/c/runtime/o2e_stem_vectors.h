/* o2e_stem_vectors.h - the vector type and operations of the stem kernels (kernels/conv/conv_stem.py, conv_stem_lanes.py).
 * Static C moved out of kernels/conv/conv_stem.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_STEM_VECTORS_H
#define O2E_STEM_VECTORS_H
#include "o2e_intrinsics.h"

/* Vectors of the stem convolution (kernels/conv/conv_stem.py): O2E_SL lanes, blocks of O2E_SMB output
 * channels x <= O2E_SVB vectors of output pixels. */
#if defined(__AVX512F__)
typedef __m512 o2e_sv;
#define O2E_SL 16
#define O2E_SMB 8
#define O2E_SVB 3
#define o2e_sv_load(p) _mm512_loadu_ps(p)
#define o2e_sv_set1(x) _mm512_set1_ps(x)
#define o2e_sv_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define o2e_sv_mul(a, b) _mm512_mul_ps(a, b)
#define o2e_sv_store(p, v) _mm512_storeu_ps(p, v)
#define o2e_sv_store_n(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1u), v)
#define o2e_sv_lo(v, lo) _mm512_max_ps(_mm512_set1_ps(lo), v)
#define o2e_sv_hi(v, hi) _mm512_min_ps(_mm512_set1_ps(hi), v)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 o2e_sv;
#define O2E_SL 8
#define O2E_SMB 4
#define O2E_SVB 3
#define o2e_sv_load(p) _mm256_loadu_ps(p)
#define o2e_sv_set1(x) _mm256_set1_ps(x)
#define o2e_sv_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define o2e_sv_mul(a, b) _mm256_mul_ps(a, b)
#define o2e_sv_store(p, v) _mm256_storeu_ps(p, v)
#define o2e_sv_store_n(p, v, n) \
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v)
#define o2e_sv_lo(v, lo) _mm256_max_ps(_mm256_set1_ps(lo), v)
#define o2e_sv_hi(v, hi) _mm256_min_ps(_mm256_set1_ps(hi), v)
#elif defined(__ARM_NEON) && defined(__aarch64__)
typedef float32x4_t o2e_sv;
#define O2E_SL 4
#define O2E_SMB 8
#define O2E_SVB 3
#define o2e_sv_load(p) vld1q_f32(p)
#define o2e_sv_set1(x) vdupq_n_f32(x)
#define o2e_sv_fma(a, b, c) vfmaq_f32(c, a, b)
#define o2e_sv_mul(a, b) vmulq_f32(a, b)
#define o2e_sv_store(p, v) vst1q_f32(p, v)
#define o2e_sv_lo(v, lo) vbslq_f32(vcltq_f32(v, vdupq_n_f32(lo)), vdupq_n_f32(lo), v)
#define o2e_sv_hi(v, hi) vbslq_f32(vcgtq_f32(v, vdupq_n_f32(hi)), vdupq_n_f32(hi), v)
#else
/* plain C99: four floats the compiler may keep in registers or vectorise */
typedef struct { float f[4]; } o2e_sv;
#define O2E_SL 4
#define O2E_SMB 4
#define O2E_SVB 2
static inline o2e_sv o2e_sv_load(const float *p)
{
  o2e_sv v;
  for (int k = 0; k < 4; k++) v.f[k] = p[k];
  return v;
}
static inline o2e_sv o2e_sv_set1(float x)
{
  o2e_sv v;
  for (int k = 0; k < 4; k++) v.f[k] = x;
  return v;
}
static inline o2e_sv o2e_sv_fma(o2e_sv a, o2e_sv b, o2e_sv c)
{
  for (int k = 0; k < 4; k++) c.f[k] += a.f[k] * b.f[k];
  return c;
}
static inline o2e_sv o2e_sv_mul(o2e_sv a, o2e_sv b)
{
  for (int k = 0; k < 4; k++) a.f[k] *= b.f[k];
  return a;
}
static inline void o2e_sv_store(float *p, o2e_sv v)
{
  for (int k = 0; k < 4; k++) p[k] = v.f[k];
}
static inline o2e_sv o2e_sv_lo(o2e_sv v, float lo)
{
  for (int k = 0; k < 4; k++) v.f[k] = v.f[k] < lo ? lo : v.f[k];
  return v;
}
static inline o2e_sv o2e_sv_hi(o2e_sv v, float hi)
{
  for (int k = 0; k < 4; k++) v.f[k] = v.f[k] > hi ? hi : v.f[k];
  return v;
}
#endif
#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
/* the first n (< 4) lanes of v (lane by lane: a copy loop becomes a memcpy gcc then
 * warns about) */
static inline void o2e_sv_store_n(float *p, o2e_sv v, int n)
{
  float t[4];
  o2e_sv_store(t, v);
  if (n > 0) p[0] = t[0];
  if (n > 1) p[1] = t[1];
  if (n > 2) p[2] = t[2];
}
#endif
#if 8 % O2E_SMB != 0
#error "the stem weights come in blocks of 8 output channels: O2E_SMB must divide 8"
#endif
/* Keeps a loaded vector in a register: without it gcc folds a load into each FMA using it. */
#if (defined(__AVX512F__) || defined(__AVX2__)) && (defined(__GNUC__) || defined(__clang__))
#define O2E_SREG(v) __asm__("" : "+v"(v))
#else
#define O2E_SREG(v) ((void)0)
#endif
typedef struct {
  const float *x; /* phase planes of one image: [c][sh * sw][HQ][WQ], zero-bordered */
  const float *w; /* [M' / 8][c][kh][kw][8] */
  const float *bias;
  float *y; /* M x OH x OW */
} o2e_stem_args;

#endif /* O2E_STEM_VECTORS_H */
