/* o2e_qdw.h - int8 depthwise convolution across channels, and the quantized Add.
 *
 * o2e_qdwc: depthwise convolution (one input channel per group) vectorised across channels,
 * as onnxruntime's int8 depthwise kernel does in NHWC. The activations stay NCHW between
 * layers, so each block of 16 channels is copied into one padded plane of 16-lane pixels
 * (the bytes x, as uint8; a border of the zero point: a real zero), then every output pixel
 * is a sum over the taps of a 16-lane multiply-add in int32 (exact, as the GEMM kernels),
 * requantised in onnxruntime's order (float product, clamp, round half to even, zero point)
 * and written back to NCHW. The plane holds bytes rather than x - zp as int16: half the
 * memory and no widening while filling it (the fill, a 16 x 16 transpose per 16 pixels, is
 * most of a stride-2 layer's time); the conversion folds - zp * sum_t w[t] into the bias.
 * Weights: int32 [ceil(C/16)][kh * kw][16] (zero point subtracted, zero past C), bias (with
 * that correction) and scale padded to a multiple of 16.
 *
 * o2e_qadd: QLinearAdd as onnxruntime's x86 kernel (mlas qladd_avx2.cpp) computes it, every
 * step in float32: r = fma(a, sa / sc, fma(b, sb / sc, F)), F = zc - (sa/sc * za + sb/sc * zb)
 * (the constants are computed at conversion time), converted with round half to even and
 * saturated. fmaf gives the same single rounding on every target (a libm call without an FMA
 * unit, which only the x86-64-v2 build lacks).
 */
#ifndef O2E_QDW_H
#define O2E_QDW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define O2E_QD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define O2E_QD_AVX2 1
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#define O2E_QD_NEON 1
#endif

#if defined(__SSE2__)
#include <emmintrin.h>
#define O2E_QD_V128 1
typedef __m128i o2e_qd_v;
#define O2E_QD_LD(p) _mm_loadu_si128((const __m128i *)(p))
#define O2E_QD_ST(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define O2E_QD_ZIP1(a, b, e) _mm_unpacklo_epi##e(a, b)
#define O2E_QD_ZIP2(a, b, e) _mm_unpackhi_epi##e(a, b)
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define O2E_QD_V128 1
typedef uint8x16_t o2e_qd_v;
#define O2E_QD_LD(p) vld1q_u8((const uint8_t *)(p))
#define O2E_QD_ST(p, v) vst1q_u8((uint8_t *)(p), v)
#define O2E_QD_U_8(v) (v)
#define O2E_QD_ZIPN(f, a, b, e, t) vreinterpretq_u8_##t(f##_##t(vreinterpretq_##t##_u8(a), vreinterpretq_##t##_u8(b)))
#define O2E_QD_ZIP1(a, b, e) O2E_QD_ZIP_##e(vzip1q, a, b)
#define O2E_QD_ZIP2(a, b, e) O2E_QD_ZIP_##e(vzip2q, a, b)
#define O2E_QD_ZIP_8(f, a, b) f##_u8(a, b)
#define O2E_QD_ZIP_16(f, a, b) O2E_QD_ZIPN(f, a, b, 16, u16)
#define O2E_QD_ZIP_32(f, a, b) O2E_QD_ZIPN(f, a, b, 32, u32)
#define O2E_QD_ZIP_64(f, a, b) O2E_QD_ZIPN(f, a, b, 64, u64)
#endif

#define O2E_QDWC_CB 16

#if defined(O2E_QD_V128)
/* One merge stage of a 16 x 16 byte transpose: pairs of row groups interleaved at element
 * size E; v[g * nb + j] holds row group g, column block j (nb blocks before the stage). */
#define O2E_QD_STAGE(E, NB)                                                                     \
  do {                                                                                          \
    o2e_qd_v t_[16];                                                                            \
    for (int g = 0; g < 16 / (2 * (NB)); ++g)                                                   \
      for (int j = 0; j < (NB); ++j) {                                                          \
        const o2e_qd_v a_ = v[(2 * g) * (NB) + j], b_ = v[(2 * g + 1) * (NB) + j];             \
        t_[g * 2 * (NB) + 2 * j] = O2E_QD_ZIP1(a_, b_, E);                                      \
        t_[g * 2 * (NB) + 2 * j + 1] = O2E_QD_ZIP2(a_, b_, E);                                  \
      }                                                                                         \
    for (int i = 0; i < 16; ++i) v[i] = t_[i];                                                  \
  } while (0)

/* v[r] (row r: 16 bytes) -> v[c] (column c: the 16 rows' bytes) */
static inline __attribute__((always_inline)) void o2e_qd_tr16(o2e_qd_v *v) {
  O2E_QD_STAGE(8, 1);
  O2E_QD_STAGE(16, 2);
  O2E_QD_STAGE(32, 4);
  O2E_QD_STAGE(64, 8);
}
#endif

/* 16 int32 sums + bias -> bytes: clamp(round_half_even((float)v * scale), flo, fhi) + zp. */
static inline void o2e_qdwc_requant16(const int32_t *acc, const int32_t *bias, const float *scale,
                                      float flo, float fhi, int32_t zp, uint8_t *out) {
#if defined(O2E_QD_AVX512)
  const __m512i v = _mm512_add_epi32(_mm512_loadu_si512(acc), _mm512_loadu_si512(bias));
  __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(scale));
  f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(flo)), _mm512_set1_ps(fhi));
  const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(zp));
  _mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(q));
#elif defined(O2E_QD_AVX2)
  const __m256 l = _mm256_set1_ps(flo), h = _mm256_set1_ps(fhi);
  const __m256i z = _mm256_set1_epi32(zp);
  __m256i q[2];
  for (int k = 0; k < 2; ++k) {
    const __m256i v = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + 8 * k)),
                                       _mm256_loadu_si256((const __m256i *)(bias + 8 * k)));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(scale + 8 * k));
    f = _mm256_min_ps(_mm256_max_ps(f, l), h);
    q[k] = _mm256_add_epi32(_mm256_cvtps_epi32(f), z);
  }
  /* in [lo, hi]: the packs do not saturate; packs_epi32 interleaves the 128-bit halves */
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
  const __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
  _mm_storeu_si128((__m128i *)out, (int32_t)flo + zp < 0 ? _mm_packs_epi16(w0, w1) : _mm_packus_epi16(w0, w1));
#elif defined(O2E_QD_NEON)
  int16x8_t q16[2];
  for (int k = 0; k < 2; ++k) {
    int32x4_t q[2];
    for (int j = 0; j < 2; ++j) {
      const int32x4_t v = vaddq_s32(vld1q_s32(acc + 8 * k + 4 * j), vld1q_s32(bias + 8 * k + 4 * j));
      float32x4_t f = vmulq_f32(vcvtq_f32_s32(v), vld1q_f32(scale + 8 * k + 4 * j));
      f = vminq_f32(vmaxq_f32(f, vdupq_n_f32(flo)), vdupq_n_f32(fhi));
      q[j] = vaddq_s32(vcvtnq_s32_f32(f), vdupq_n_s32(zp));
    }
    q16[k] = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
  }
  vst1q_u8(out, vreinterpretq_u8_s8(vcombine_s8(vmovn_s16(q16[0]), vmovn_s16(q16[1]))));
#else
  for (int c = 0; c < O2E_QDWC_CB; ++c) {
    float f = (float)(int32_t)((uint32_t)acc[c] + (uint32_t)bias[c]) * scale[c];
    f = f < flo ? flo : (f > fhi ? fhi : f);
    out[c] = (uint8_t)((int32_t)nearbyintf(f) + zp);
  }
#endif
}

/* The input pixels of one block of 16 channels (cn of them real) into the interior of
 * plane[Hp][Wp][16] (bytes x ^ flip; the border, set to the zero point once, is never
 * written). Lanes past cn hold channel 0 again: their weights are zero. */
static inline void o2e_qdwc_fill(const uint8_t *x, size_t cn, size_t H, size_t W, size_t Hp,
                                 size_t Wp, int ph, int pw, uint8_t flip, uint8_t *plane) {
  const size_t CB = O2E_QDWC_CB, HW = H * W;
  size_t iy = 0, ix = 0; /* of pixel p */
#if defined(O2E_QD_V128)
  if (W >= 16) {
    /* row by row: 16 pixels of a row land side by side in the plane, no per-pixel bounds
     * (the flat loop below spends more on them than on the transposes) */
    const size_t n = Wp > (size_t)pw ? (Wp - (size_t)pw < W ? Wp - (size_t)pw : W) : 0;
    for (iy = 0; iy < H; ++iy) {
      const size_t py = iy + (size_t)ph;
      if (py >= Hp) break;
      uint8_t *d = plane + (py * Wp + (size_t)pw) * CB;
      for (size_t x0 = 0; x0 < n; x0 += 16) {
        o2e_qd_v v[16];
        const size_t np = n - x0 < 16 ? n - x0 : 16, p0 = iy * W + x0;
        for (size_t c = 0; c < 16; ++c) {
          const uint8_t *src = x + (c < cn ? c : 0) * HW + p0;
          if (p0 + 16 <= HW) { /* the lanes past the row are not stored */
            v[c] = O2E_QD_LD(src);
          } else {
            uint8_t tmp[16] = {0};
            memcpy(tmp, src, np);
            v[c] = O2E_QD_LD(tmp);
          }
        }
        o2e_qd_tr16(v);
#if defined(__SSE2__)
        const o2e_qd_v f = _mm_set1_epi8((char)flip);
        for (size_t j = 0; j < np; ++j) O2E_QD_ST(d + (x0 + j) * CB, _mm_xor_si128(v[j], f));
#else
        const o2e_qd_v f = vdupq_n_u8(flip);
        for (size_t j = 0; j < np; ++j) O2E_QD_ST(d + (x0 + j) * CB, veorq_u8(v[j], f));
#endif
      }
    }
    return;
  }
  for (size_t p0 = 0; p0 < HW; p0 += 16) {
    o2e_qd_v v[16];
    const size_t np = HW - p0 < 16 ? HW - p0 : 16;
    for (size_t c = 0; c < 16; ++c) {
      const uint8_t *src = x + (c < cn ? c : 0) * HW + p0;
      if (np == 16) {
        v[c] = O2E_QD_LD(src);
      } else {
        uint8_t tmp[16] = {0};
        memcpy(tmp, src, np);
        v[c] = O2E_QD_LD(tmp);
      }
    }
    o2e_qd_tr16(v); /* v[j]: pixel p0 + j, 16 channels */
    for (size_t j = 0; j < np; ++j) {
      const size_t py = iy + (size_t)ph, px = ix + (size_t)pw;
      if (py < Hp && px < Wp) {
#if defined(__SSE2__)
        O2E_QD_ST(plane + (py * Wp + px) * CB, _mm_xor_si128(v[j], _mm_set1_epi8((char)flip)));
#else
        O2E_QD_ST(plane + (py * Wp + px) * CB, veorq_u8(v[j], vdupq_n_u8(flip)));
#endif
      }
      if (++ix == W) ix = 0, ++iy;
    }
  }
#else
  for (size_t p = 0; p < HW; ++p) {
    const size_t py = iy + (size_t)ph, px = ix + (size_t)pw;
    if (py < Hp && px < Wp) {
      uint8_t *d = plane + (py * Wp + px) * CB;
      for (size_t c = 0; c < CB; ++c) d[c] = (uint8_t)(x[(c < cn ? c : 0) * HW + p] ^ flip);
    }
    if (++ix == W) ix = 0, ++iy;
  }
#endif
}

/* tile[P][16] (pixel-major bytes; rows up to a multiple of 16 readable) -> y[c][P], c < cn */
static inline void o2e_qdwc_store(const uint8_t *tile, size_t cn, size_t P, uint8_t *y) {
#if defined(O2E_QD_V128)
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    o2e_qd_v v[16];
    for (int j = 0; j < 16; ++j) v[j] = O2E_QD_LD(tile + (p0 + (size_t)j) * O2E_QDWC_CB);
    o2e_qd_tr16(v); /* v[c]: channel c, pixels p0 .. p0 + 15 */
    const size_t np = P - p0 < 16 ? P - p0 : 16;
    for (size_t c = 0; c < cn; ++c) {
      if (np == 16) {
        O2E_QD_ST(y + c * P + p0, v[c]);
      } else {
        uint8_t tmp[16];
        O2E_QD_ST(tmp, v[c]);
        memcpy(y + c * P + p0, tmp, np);
      }
    }
  }
#else
  for (size_t c = 0; c < cn; ++c)
    for (size_t p = 0; p < P; ++p) y[c * P + p] = tile[p * O2E_QDWC_CB + c];
#endif
}

/* acc[16] = sum over the T taps of w[t][0..15] * s[off[t]][0..15] */
static inline void o2e_qdwc_pixel(const uint8_t *s, const int32_t *off, size_t T, const int32_t *w,
                                  int32_t *acc) {
#if defined(O2E_QD_AVX512)
  __m512i a = _mm512_setzero_si512();
  for (size_t t = 0; t < T; ++t) {
    /* x zero-extended to 32 bits: vpmaddwd adds x * (int16)w + 0 * (w >> 16), exactly x * w,
     * in one uop where vpmulld takes two */
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + off[t])));
    a = _mm512_add_epi32(a, _mm512_madd_epi16(v, _mm512_loadu_si512(w + t * 16)));
  }
  _mm512_storeu_si512(acc, a);
#elif defined(O2E_QD_AVX2)
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  for (size_t t = 0; t < T; ++t) {
    const uint8_t *p = s + off[t];
    const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); /* see above */
    const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(v0, _mm256_loadu_si256((const __m256i *)(w + t * 16))));
    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(v1, _mm256_loadu_si256((const __m256i *)(w + t * 16 + 8))));
  }
  _mm256_storeu_si256((__m256i *)acc, a0);
  _mm256_storeu_si256((__m256i *)(acc + 8), a1);
#elif defined(O2E_QD_NEON)
  int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
  for (size_t t = 0; t < T; ++t) {
    const uint8x16_t u = vld1q_u8(s + off[t]);
    const int16x8_t v0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(u)));
    const int16x8_t v1 = vreinterpretq_s16_u16(vmovl_high_u8(u));
    const int32_t *wt = w + t * 16;
    a0 = vmlaq_s32(a0, vmovl_s16(vget_low_s16(v0)), vld1q_s32(wt));
    a1 = vmlaq_s32(a1, vmovl_s16(vget_high_s16(v0)), vld1q_s32(wt + 4));
    a2 = vmlaq_s32(a2, vmovl_s16(vget_low_s16(v1)), vld1q_s32(wt + 8));
    a3 = vmlaq_s32(a3, vmovl_s16(vget_high_s16(v1)), vld1q_s32(wt + 12));
  }
  vst1q_s32(acc, a0), vst1q_s32(acc + 4, a1), vst1q_s32(acc + 8, a2), vst1q_s32(acc + 12, a3);
#else
  /* four channels at a time, their sums in registers: summed through acc[] (which may alias
   * w for the compiler) every tap cost a load and a store per multiply-accumulate (14
   * instructions per MAC on a Cortex-M4, issue 31). Same wrapping integer sums. */
  for (int c0 = 0; c0 < O2E_QDWC_CB; c0 += 4) {
    uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t t = 0; t < T; ++t) {
      const uint8_t *p = s + off[t] + c0;
      const int32_t *wt = w + t * 16 + c0;
      a0 += (uint32_t)(wt[0] * (int32_t)p[0]);
      a1 += (uint32_t)(wt[1] * (int32_t)p[1]);
      a2 += (uint32_t)(wt[2] * (int32_t)p[2]);
      a3 += (uint32_t)(wt[3] * (int32_t)p[3]);
    }
    acc[c0] = (int32_t)a0, acc[c0 + 1] = (int32_t)a1, acc[c0 + 2] = (int32_t)a2;
    acc[c0 + 3] = (int32_t)a3;
  }
#endif
}

#if defined(O2E_QD_AVX512)
/* x * w per lane: x zero-extended to 32 bits, so the int16 pair product (x, 0) . (w lo, w hi)
 * is exactly x * w; AVX-512 VNNI's vpdpwssd adds it in one instruction (wrapping, as
 * vpaddd), else vpmaddwd + vpaddd */
#if defined(__AVX512VNNI__)
#define O2E_QD_MAC(a, v, w) _mm512_dpwssd_epi32(a, v, w)
#else
#define O2E_QD_MAC(a, v, w) _mm512_add_epi32(a, _mm512_madd_epi16(v, w))
#endif
#define O2E_QD_X(q) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q)))
/* 16 sums (bias included) -> 16 bytes at dst, o2e_qdwc_requant16's instructions (vs, vlo, vhi,
 * vz: scale, bounds and zero point as vectors in the caller) */
#define O2E_QD_RQ(a, dst)                                                                       \
  do {                                                                                          \
    __m512 f_ = _mm512_mul_ps(_mm512_cvtepi32_ps(a), vs);                                       \
    f_ = _mm512_min_ps(_mm512_max_ps(f_, vlo), vhi);                                            \
    const __m512i q_ = _mm512_add_epi32(_mm512_cvtps_epi32(f_), vz); /* nearest-even */         \
    _mm_storeu_si128((__m128i *)(dst), _mm512_cvtepi32_epi8(q_));                               \
  } while (0)
/* Every output pixel of one channel block into tile[P][16]: four pixels of a row per round
 * (each tap's weights loaded once for the four, four independent sums), the sums starting
 * from the bias, requantised as o2e_qdwc_requant16 (the same instructions). */
static inline void o2e_qdwc_rows_avx512_(const uint8_t *plane, size_t Wp, size_t OH, size_t OW,
                                         size_t sh, size_t sw, const int32_t *off, size_t T,
                                         const int32_t *wb, const int32_t *bias,
                                         const float *scale, float flo, float fhi, int32_t zp,
                                         uint8_t *t) {
  const size_t CB = O2E_QDWC_CB, d = sw * CB;
  const __m512i vb = _mm512_loadu_si512(bias), vz = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_loadu_ps(scale), vlo = _mm512_set1_ps(flo), vhi = _mm512_set1_ps(fhi);
  for (size_t oy = 0; oy < OH; ++oy) {
    const uint8_t *prow = plane + oy * sh * Wp * CB;
    size_t ox = 0;
    for (; ox + 4 <= OW; ox += 4, t += 4 * CB) {
      const uint8_t *p = prow + ox * d;
      __m512i a0 = vb, a1 = vb, a2 = vb, a3 = vb;
      for (size_t k = 0; k < T; ++k) {
        const __m512i wv = _mm512_loadu_si512(wb + k * 16);
        const uint8_t *q = p + off[k];
        a0 = O2E_QD_MAC(a0, O2E_QD_X(q), wv);
        a1 = O2E_QD_MAC(a1, O2E_QD_X(q + d), wv);
        a2 = O2E_QD_MAC(a2, O2E_QD_X(q + 2 * d), wv);
        a3 = O2E_QD_MAC(a3, O2E_QD_X(q + 3 * d), wv);
      }
      O2E_QD_RQ(a0, t);
      O2E_QD_RQ(a1, t + CB);
      O2E_QD_RQ(a2, t + 2 * CB);
      O2E_QD_RQ(a3, t + 3 * CB);
    }
    for (; ox < OW; ++ox, t += CB) {
      const uint8_t *p = prow + ox * d;
      __m512i a0 = vb;
      for (size_t k = 0; k < T; ++k)
        a0 = O2E_QD_MAC(a0, O2E_QD_X(p + off[k]), _mm512_loadu_si512(wb + k * 16));
      O2E_QD_RQ(a0, t);
    }
  }
}
#undef O2E_QD_X

#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define O2E_QD_VBMI 1
#define O2E_QD_MAXKH 7
/* Kernels 3 wide (dilation 1 across): the three taps of a kernel row meet in one vpdpbusd
 * (4 bytes x 4 int8 weights per lane, the fourth weight zero). The plane holds pixels of 16
 * channel bytes side by side, so taps kx = 0..2 (and one more) of an output are 64
 * contiguous bytes, [pixel][channel]; one vpermb turns them into [channel][pixel], the
 * 4-byte groups vpdpbusd multiplies (u8 x s8, the four products summed exactly and added
 * wrapping: the sums of the vpdpwssd path bit for bit). Three instructions per 3 taps of 16
 * channels where that path takes two per tap. The load is masked to the 48 bytes used (the
 * last output of the last row would read past the plane). Weight bytes per kernel row:
 * [16 channels][w0 w1 w2 0], built per channel block from the int32 weights. */
static inline void o2e_qdwc_rows3_vbmi_(const uint8_t *plane, size_t Wp, size_t OH, size_t OW,
                                        size_t sh, size_t sw, const int32_t *off, size_t kh,
                                        const int32_t *wb, const int32_t *bias,
                                        const float *scale, float flo, float fhi, int32_t zp,
                                        uint8_t *t) {
  const size_t CB = O2E_QDWC_CB, d = sw * CB;
  const __m512i vb = _mm512_loadu_si512(bias), vz = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_loadu_ps(scale), vlo = _mm512_set1_ps(flo), vhi = _mm512_set1_ps(fhi);
  /* byte 4 c + j of the result = byte 16 j + c of the 64 loaded */
  const __m512i perm = _mm512_set_epi32(0x3F2F1F0F, 0x3E2E1E0E, 0x3D2D1D0D, 0x3C2C1C0C,
                                        0x3B2B1B0B, 0x3A2A1A0A, 0x39291909, 0x38281808,
                                        0x37271707, 0x36261606, 0x35251505, 0x34241404,
                                        0x33231303, 0x32221202, 0x31211101, 0x30201000);
  const __mmask64 m48 = 0xFFFFFFFFFFFFull;
  __m512i wr[O2E_QD_MAXKH];
  size_t ro[O2E_QD_MAXKH];
  for (size_t ky = 0; ky < kh; ++ky) {
    int8_t wv[64];
    for (size_t c = 0; c < CB; ++c) {
      for (size_t j = 0; j < 3; ++j) wv[4 * c + j] = (int8_t)wb[(ky * 3 + j) * CB + c];
      wv[4 * c + 3] = 0;
    }
    wr[ky] = _mm512_loadu_si512(wv);
    ro[ky] = (size_t)off[ky * 3];
  }
#define O2E_QD_R3(q) _mm512_permutexvar_epi8(perm, _mm512_maskz_loadu_epi8(m48, q))
  for (size_t oy = 0; oy < OH; ++oy) {
    const uint8_t *prow = plane + oy * sh * Wp * CB;
    size_t ox = 0;
    for (; ox + 4 <= OW; ox += 4, t += 4 * CB) {
      const uint8_t *p = prow + ox * d;
      __m512i a0 = vb, a1 = vb, a2 = vb, a3 = vb;
      for (size_t ky = 0; ky < kh; ++ky) {
        const uint8_t *q = p + ro[ky];
        a0 = _mm512_dpbusd_epi32(a0, O2E_QD_R3(q), wr[ky]);
        a1 = _mm512_dpbusd_epi32(a1, O2E_QD_R3(q + d), wr[ky]);
        a2 = _mm512_dpbusd_epi32(a2, O2E_QD_R3(q + 2 * d), wr[ky]);
        a3 = _mm512_dpbusd_epi32(a3, O2E_QD_R3(q + 3 * d), wr[ky]);
      }
      O2E_QD_RQ(a0, t);
      O2E_QD_RQ(a1, t + CB);
      O2E_QD_RQ(a2, t + 2 * CB);
      O2E_QD_RQ(a3, t + 3 * CB);
    }
    /* the last OW % 4 (indexed from t: gcc, inlining with constants, flagged the pointer
     * stepping form with -Waggressive-loop-optimizations) */
    for (size_t j = 0; j < OW - ox; ++j) {
      const uint8_t *p = prow + (ox + j) * d;
      __m512i a0 = vb;
      for (size_t ky = 0; ky < kh; ++ky) a0 = _mm512_dpbusd_epi32(a0, O2E_QD_R3(p + ro[ky]), wr[ky]);
      O2E_QD_RQ(a0, t + j * CB);
    }
    t += (OW - ox) * CB;
  }
#undef O2E_QD_R3
}
#endif
#undef O2E_QD_RQ
#endif

#if defined(O2E_QD_AVX2)
/* o2e_qdwc_rows_avx512_ in 256-bit halves: four pixels of a row per round, each two sums of
 * 8 channels (eight accumulators starting from the bias, each tap's two weight vectors loaded
 * once for the four), requantised as o2e_qdwc_requant16's AVX2 path (the same instructions),
 * where the per-pixel o2e_qdwc_pixel stored its sums and reloaded them to requantise. */
#define O2E_QD_X8(q) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q)))
#define O2E_QD_MAC8(a, q, w) _mm256_add_epi32(a, _mm256_madd_epi16(O2E_QD_X8(q), w))
#define O2E_QD_RQ8(a0, a1, dst)                                                                 \
  do {                                                                                          \
    __m256 f0_ = _mm256_mul_ps(_mm256_cvtepi32_ps(a0), vs0);                                    \
    __m256 f1_ = _mm256_mul_ps(_mm256_cvtepi32_ps(a1), vs1);                                    \
    f0_ = _mm256_min_ps(_mm256_max_ps(f0_, vlo), vhi);                                          \
    f1_ = _mm256_min_ps(_mm256_max_ps(f1_, vlo), vhi);                                          \
    const __m256i w_ = _mm256_permute4x64_epi64(                                                \
        _mm256_packs_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(f0_), vz),                       \
                           _mm256_add_epi32(_mm256_cvtps_epi32(f1_), vz)),                      \
        0xD8);                                                                                  \
    const __m128i l_ = _mm256_castsi256_si128(w_), h_ = _mm256_extracti128_si256(w_, 1);        \
    _mm_storeu_si128((__m128i *)(dst), sgn ? _mm_packs_epi16(l_, h_) : _mm_packus_epi16(l_, h_)); \
  } while (0)
static inline void o2e_qdwc_rows_avx2_(const uint8_t *plane, size_t Wp, size_t OH, size_t OW,
                                       size_t sh, size_t sw, const int32_t *off, size_t T,
                                       const int32_t *wb, const int32_t *bias,
                                       const float *scale, float flo, float fhi, int32_t zp,
                                       uint8_t *t) {
  const size_t CB = O2E_QDWC_CB, d = sw * CB;
  const __m256i b0 = _mm256_loadu_si256((const __m256i *)bias);
  const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bias + 8));
  const __m256i vz = _mm256_set1_epi32(zp);
  const __m256 vs0 = _mm256_loadu_ps(scale), vs1 = _mm256_loadu_ps(scale + 8);
  const __m256 vlo = _mm256_set1_ps(flo), vhi = _mm256_set1_ps(fhi);
  const int sgn = (int32_t)flo + zp < 0; /* int8 outputs: the signed packs */
  for (size_t oy = 0; oy < OH; ++oy) {
    const uint8_t *prow = plane + oy * sh * Wp * CB;
    size_t ox = 0;
    for (; ox + 4 <= OW; ox += 4, t += 4 * CB) {
      const uint8_t *p = prow + ox * d;
      __m256i a0 = b0, a1 = b1, c0 = b0, c1 = b1, e0 = b0, e1 = b1, g0 = b0, g1 = b1;
      for (size_t k = 0; k < T; ++k) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(wb + k * 16));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(wb + k * 16 + 8));
        const uint8_t *q = p + off[k];
        a0 = O2E_QD_MAC8(a0, q, w0), a1 = O2E_QD_MAC8(a1, q + 8, w1);
        c0 = O2E_QD_MAC8(c0, q + d, w0), c1 = O2E_QD_MAC8(c1, q + d + 8, w1);
        e0 = O2E_QD_MAC8(e0, q + 2 * d, w0), e1 = O2E_QD_MAC8(e1, q + 2 * d + 8, w1);
        g0 = O2E_QD_MAC8(g0, q + 3 * d, w0), g1 = O2E_QD_MAC8(g1, q + 3 * d + 8, w1);
      }
      O2E_QD_RQ8(a0, a1, t);
      O2E_QD_RQ8(c0, c1, t + CB);
      O2E_QD_RQ8(e0, e1, t + 2 * CB);
      O2E_QD_RQ8(g0, g1, t + 3 * CB);
    }
    /* the last OW % 4, indexed from t (as o2e_qdwc_rows3_vbmi_'s, for gcc's
     * -Waggressive-loop-optimizations) */
    for (size_t j = 0; j < OW - ox; ++j) {
      const uint8_t *p = prow + (ox + j) * d;
      __m256i a0 = b0, a1 = b1;
      for (size_t k = 0; k < T; ++k) {
        const uint8_t *q = p + off[k];
        a0 = O2E_QD_MAC8(a0, q, _mm256_loadu_si256((const __m256i *)(wb + k * 16)));
        a1 = O2E_QD_MAC8(a1, q + 8, _mm256_loadu_si256((const __m256i *)(wb + k * 16 + 8)));
      }
      O2E_QD_RQ8(a0, a1, t + j * CB);
    }
    t += (OW - ox) * CB;
  }
}
#undef O2E_QD_RQ8
#undef O2E_QD_MAC8
#undef O2E_QD_X8
#endif

/* Rows / columns of the padded plane the outputs read. */
#define O2E_QDWC_HP(OH, kh, sh, dh) (((size_t)(OH) - 1) * (size_t)(sh) + ((size_t)(kh) - 1) * (size_t)(dh) + 1)
#define O2E_QDWC_WP(OW, kw, sw, dw) (((size_t)(OW) - 1) * (size_t)(sw) + ((size_t)(kw) - 1) * (size_t)(dw) + 1)

/* Depthwise convolution of one image: x [C][H][W] -> y [C][OH][OW]. off: kh * kw int32 tap
 * offsets into the plane ((ky * dh * Wp + kx * dw) * 16 bytes). xz: the input zero point as a
 * byte after the flip (the plane's border); bias includes - xz * sum_t w[t]. plane: Hp * Wp *
 * 16 bytes of scratch, tile: O2E_QDWC_TILE(OH * OW) bytes. */
#define O2E_QDWC_TILE(P) ((((size_t)(P) + 15) / 16) * 16 * O2E_QDWC_CB)
/* The outputs of one channel block from its filled plane into tile[OH * OW][16] (wb: the
 * block's weights; bias, scale: at its first channel): the kernel rows of the widest
 * instructions compiled in. */
static inline __attribute__((always_inline)) void o2e_qdwc_tile_(
    const uint8_t *plane, size_t Wp, size_t OH, size_t OW, int kh, int kw, int sh, int sw, int dw,
    const int32_t *wb, const int32_t *off, const int32_t *bias, const float *scale, float flo,
    float fhi, int32_t zp, uint8_t *t) {
  const size_t CB = O2E_QDWC_CB, T = (size_t)kh * (size_t)kw;
#if defined(O2E_QD_VBMI)
  if (kw == 3 && dw == 1 && kh <= O2E_QD_MAXKH) {
    o2e_qdwc_rows3_vbmi_(plane, Wp, OH, OW, (size_t)sh, (size_t)sw, off, (size_t)kh, wb, bias,
                         scale, flo, fhi, zp, t);
    return;
  }
#endif
#if defined(O2E_QD_AVX512)
  o2e_qdwc_rows_avx512_(plane, Wp, OH, OW, (size_t)sh, (size_t)sw, off, T, wb, bias, scale, flo,
                        fhi, zp, t);
  return;
#elif defined(O2E_QD_AVX2)
  o2e_qdwc_rows_avx2_(plane, Wp, OH, OW, (size_t)sh, (size_t)sw, off, T, wb, bias, scale, flo,
                      fhi, zp, t);
  return;
#endif
  int32_t acc[O2E_QDWC_CB] __attribute__((aligned(64)));
  for (size_t oy = 0; oy < OH; ++oy) {
    const uint8_t *prow = plane + oy * (size_t)sh * Wp * CB;
    for (size_t ox = 0; ox < OW; ++ox, t += CB) {
      o2e_qdwc_pixel(prow + ox * (size_t)sw * CB, off, T, wb, acc);
      o2e_qdwc_requant16(acc, bias, scale, flo, fhi, zp, t);
    }
  }
  (void)dw;
}

/* Channel blocks [b0, b1) of o2e_qdwc (blocks of O2E_QDWC_CB channels): independent, each in
 * the plane and tile given (o2e_qdwc_mt: one pair per thread). */
static inline void o2e_qdwc_blocks(size_t b0, size_t b1, size_t C, size_t H, size_t W, size_t OH,
                                   size_t OW, int kh, int kw, int sh, int sw, int ph, int pw,
                                   int dh, int dw, const uint8_t *x, uint8_t flip, int32_t xz,
                                   const int32_t *w, const int32_t *off, const int32_t *bias,
                                   const float *scale, int32_t zp, int32_t lo, int32_t hi,
                                   uint8_t *y, uint8_t *plane, uint8_t *tile) {
  const size_t CB = O2E_QDWC_CB, T = (size_t)kh * (size_t)kw, P = OH * OW;
  const size_t Hp = O2E_QDWC_HP(OH, kh, sh, dh), Wp = O2E_QDWC_WP(OW, kw, sw, dw);
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  memset(plane, (int)(uint8_t)xz, Hp * Wp * CB);
  memset(tile + P * CB, 0, O2E_QDWC_TILE(P) - P * CB);
  for (size_t c0 = b0 * CB; c0 < C && c0 < b1 * CB; c0 += CB) {
    const size_t cn = C - c0 < CB ? C - c0 : CB;
    o2e_qdwc_fill(x + c0 * H * W, cn, H, W, Hp, Wp, ph, pw, flip, plane);
    o2e_qdwc_tile_(plane, Wp, OH, OW, kh, kw, sh, sw, dw, w + (c0 / CB) * T * CB, off, bias + c0,
                   scale + c0, flo, fhi, zp, tile);
    o2e_qdwc_store(tile, cn, P, y + c0 * P);
  }
}

static inline void o2e_qdwc(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh, int kw,
                            int sh, int sw, int ph, int pw, int dh, int dw, const uint8_t *x,
                            uint8_t flip, int32_t xz, const int32_t *w, const int32_t *off,
                            const int32_t *bias, const float *scale, int32_t zp, int32_t lo,
                            int32_t hi, uint8_t *y, uint8_t *plane, uint8_t *tile) {
  o2e_qdwc_blocks(0, (C + O2E_QDWC_CB - 1) / O2E_QDWC_CB, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw,
                  dh, dw, x, flip, xz, w, off, bias, scale, zp, lo, hi, y, plane, tile);
}

/* ---- o2e_qdwn: depthwise convolution channel by channel (convert --device, issue 31) ----
 *
 * A microcontroller has no 16-byte vectors to transpose with, and o2e_qdwc's channel-block
 * plane, its per-pixel tap loop and the transposes back cost about 12 instructions per
 * multiply-accumulate on a Cortex-M4. Here each channel is copied once into a plane of int16
 * (the bytes x ^ flip, a border of xz, Hp x Wp: O2E_QDWN_PLANE bytes), and each output is
 * its kh x kw taps read from that plane, requantised and stored straight into NCHW y. With
 * the Arm DSP extension two taps of a row are one word of the plane and one SMLAD against
 * the channel's weight pair (packed per channel: a stack array of int16 pairs), the odd tap
 * one SMLABB; two outputs of a stride-1 row share the loads (the middle pair is an
 * unaligned word). The sums are the portable ones (bias already holds - xz * sum_t w[t]),
 * so every build gives the same bytes. w, bias, scale: o2e_qdwc's layouts. */
#define O2E_QDWN_PLANE(Hp, Wp) ((size_t)(Hp) * (size_t)(Wp) * sizeof(int16_t))
#define O2E_QDWN_MAXT 64 /* taps the weight pairs hold; larger kernels take the plain loop */

#if defined(__ARM_FEATURE_DSP) && defined(__ARM_FEATURE_SIMD32) && !defined(__aarch64__) &&  \
    !defined(O2E_Q_NO_DSP)
#include <arm_acle.h>
#define O2E_QDWN_DSP 1
#endif

#if defined(__arm__) && !defined(__aarch64__) && defined(__ARM_FP) && (__ARM_FP & 4) &&        \
    defined(__thumb2__)
/* float -> int32 rounded to nearest even (FPSCR's default mode) and saturated, in one VCVTR */
static inline int32_t o2e_qdwn_round_(float f) {
  float r;
  int32_t q;
  __asm__("vcvtr.s32.f32 %0, %1" : "=t"(r) : "t"(f));
  memcpy(&q, &r, 4);
  return q;
}
/* The clamp after the rounding: the bounds are integers and rounding is monotonic, so
 * clamp(round(f)) = round(clamp(f)) (onnxruntime's order) for every f. */
static inline __attribute__((always_inline)) uint8_t o2e_qdwn_rq_(int32_t v, float sc, int32_t ilo,
                                                                  int32_t ihi, int32_t zp) {
  const int32_t q = o2e_qdwn_round_((float)v * sc);
  return (uint8_t)((q < ilo ? ilo : (q > ihi ? ihi : q)) + zp);
}
#else
static inline uint8_t o2e_qdwn_rq_(int32_t v, float sc, int32_t ilo, int32_t ihi, int32_t zp) {
  float f = (float)v * sc;
  f = f < (float)ilo ? (float)ilo : (f > (float)ihi ? (float)ihi : f);
  return (uint8_t)((int32_t)nearbyintf(f) + zp);
}
#endif
#define O2E_QDWN_RQ(v, sc, ilo, ihi, zp) o2e_qdwn_rq_((int32_t)(v), sc, ilo, ihi, zp)

#if defined(O2E_QDWN_DSP) && defined(__ARM_FP) && (__ARM_FP & 4) && defined(__ARM_FEATURE_SAT)
/* mode 1: the full uint8 range, one USAT; 2: the full int8 range, one SSAT; 0: two bounds */
static inline __attribute__((always_inline)) uint8_t o2e_qdwn_rqm_(int32_t v, float sc, int32_t ilo,
                                                                   int32_t ihi, int32_t zp,
                                                                   int mode) {
  /* QADD: VCVTR saturates at +-2^31, where q + zp would wrap */
  if (mode == 1) return (uint8_t)__usat(__qadd(o2e_qdwn_round_((float)v * sc), zp), 8);
  if (mode == 2) return (uint8_t)__ssat(__qadd(o2e_qdwn_round_((float)v * sc), zp), 8);
  return o2e_qdwn_rq_(v, sc, ilo, ihi, zp);
}

/* One output row of a 3 x 3 stride-1 depthwise convolution (rows r0, r0 + rs, r0 + 2 rs of
 * the int16 plane): two outputs share each row's words (x0 x1) (x1 x2) (x2 x3): 6
 * multiply-accumulates in 3 loads, 2 SMLAD, SMLABB and SMLATB; the weights stay in registers
 * (w01: (w0, w1) of a row, w2: its last tap). */
static inline __attribute__((always_inline)) void o2e_qdwn3_row_(
    const int16_t *r0, size_t rs, size_t OW, int32_t wa, int32_t wb, int32_t wc, int32_t wd,
    int32_t we, int32_t wf, int32_t bc, float sc, int32_t ilo, int32_t ihi, int32_t zp, int mode,
    uint8_t *yr) {
  size_t ox = 0;
#define O2E_QDWN_TAPS_(r, w01, w2)                                                              \
  do {                                                                                          \
    int32_t p01, p12, p23;                                                                      \
    memcpy(&p01, (r), 4), memcpy(&p12, (r) + 1, 4), memcpy(&p23, (r) + 2, 4);                   \
    a0 = __smlad(p01, w01, a0);                                                                 \
    a1 = __smlad(p12, w01, a1);                                                                 \
    a0 = __smlabb(p23, w2, a0);                                                                 \
    a1 = __smlatb(p23, w2, a1);                                                                 \
  } while (0)
  for (; ox + 2 <= OW; ox += 2) {
    int32_t a0 = bc, a1 = bc;
    const int16_t *r = r0 + ox;
    O2E_QDWN_TAPS_(r, wa, wb);
    O2E_QDWN_TAPS_(r + rs, wc, wd);
    O2E_QDWN_TAPS_(r + 2 * rs, we, wf);
    yr[ox] = o2e_qdwn_rqm_(a0, sc, ilo, ihi, zp, mode);
    yr[ox + 1] = o2e_qdwn_rqm_(a1, sc, ilo, ihi, zp, mode);
  }
#undef O2E_QDWN_TAPS_
  if (ox < OW) {
    int32_t a = bc, p;
    const int16_t *r = r0 + ox;
    memcpy(&p, r, 4);
    a = __smlabb(r[2], wb, __smlad(p, wa, a));
    memcpy(&p, r + rs, 4);
    a = __smlabb(r[rs + 2], wd, __smlad(p, wc, a));
    memcpy(&p, r + 2 * rs, 4);
    a = __smlabb(r[2 * rs + 2], wf, __smlad(p, we, a));
    yr[ox] = o2e_qdwn_rqm_(a, sc, ilo, ihi, zp, mode);
  }
}

/* One output row of a 3 x 3 stride-2 depthwise convolution: one output per round (its rows'
 * pairs are 2 columns apart from the next output's), 9 taps in 6 loads and 6 MACs. */
static inline __attribute__((always_inline)) void o2e_qdwn3s2_row_(
    const int16_t *r0, size_t rs, size_t OW, int32_t wa, int32_t wb, int32_t wc, int32_t wd,
    int32_t we, int32_t wf, int32_t bc, float sc, int32_t ilo, int32_t ihi, int32_t zp, int mode,
    uint8_t *yr) {
  for (size_t ox = 0; ox < OW; ++ox) {
    int32_t a = bc, p;
    const int16_t *r = r0 + 2 * ox;
    memcpy(&p, r, 4);
    a = __smlabb(r[2], wb, __smlad(p, wa, a));
    memcpy(&p, r + rs, 4);
    a = __smlabb(r[rs + 2], wd, __smlad(p, wc, a));
    memcpy(&p, r + 2 * rs, 4);
    a = __smlabb(r[2 * rs + 2], wf, __smlad(p, we, a));
    yr[ox] = o2e_qdwn_rqm_(a, sc, ilo, ihi, zp, mode);
  }
}

/* Every output row of one channel of a 3 x 3 stride-2 depthwise convolution (wq: the
 * channel's weight pairs, o2e_qdwn's layout). A function of its own: inlined, gcc 12 spilled
 * the six weight registers to the stack (5.6 against 4.9 instructions per MAC). */
static __attribute__((noinline, unused)) void o2e_qdwn3_chan_(
    const int16_t *plane, size_t Wp, size_t OH, size_t OW, int sh, int sw, int dh,
    const int32_t *wq, int32_t bc, float sc, int32_t ilo, int32_t ihi, int32_t zp, uint8_t *yc) {
  const int mode =
      ilo + zp == 0 && ihi + zp == 255 ? 1 : (ilo + zp == -128 && ihi + zp == 127 ? 2 : 0);
  const size_t rs = (size_t)dh * Wp;
  const int32_t wa = wq[0], wb = wq[1], wc = wq[3], wd = wq[4], we = wq[6], wf = wq[7];
  for (size_t oy = 0; oy < OH; ++oy) {
    const int16_t *r0 = plane + oy * (size_t)sh * Wp;
    uint8_t *yr = yc + oy * OW;
#define O2E_QDWN_ROW_(m)                                                                        \
  do {                                                                                          \
    if (sw == 1)                                                                                \
      o2e_qdwn3_row_(r0, rs, OW, wa, wb, wc, wd, we, wf, bc, sc, ilo, ihi, zp, m, yr);          \
    else                                                                                        \
      o2e_qdwn3s2_row_(r0, rs, OW, wa, wb, wc, wd, we, wf, bc, sc, ilo, ihi, zp, m, yr);        \
  } while (0)
    if (mode == 2)
      O2E_QDWN_ROW_(2);
    else if (mode == 1)
      O2E_QDWN_ROW_(1);
    else
      O2E_QDWN_ROW_(0);
#undef O2E_QDWN_ROW_
  }
}
#define O2E_QDWN3 1
#endif

static inline void o2e_qdwn(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh, int kw,
                            int sh, int sw, int ph, int pw, int dh, int dw, const uint8_t *x,
                            uint8_t flip, int32_t xz, const int32_t *w, const int32_t *bias,
                            const float *scale, int32_t zp, int32_t lo, int32_t hi, uint8_t *y,
                            void *plane_) {
  const size_t CB = O2E_QDWC_CB, T = (size_t)kh * (size_t)kw;
  const size_t Hp = O2E_QDWC_HP(OH, kh, sh, dh), Wp = O2E_QDWC_WP(OW, kw, sw, dw);
  const int32_t ilo = lo - zp, ihi = hi - zp;
  int16_t *plane = (int16_t *)plane_;
  for (size_t i = 0; i < Hp * Wp; ++i) plane[i] = (int16_t)xz; /* the border, once */
  for (size_t c = 0; c < C; ++c) {
    const uint8_t *xc = x + c * H * W;
    for (size_t iy = 0; iy < H; ++iy) {
      const size_t py = iy + (size_t)ph;
      if (py >= Hp) continue;
      const size_t nx = W + (size_t)pw <= Wp ? W : Wp - (size_t)pw;
      int16_t *d = plane + py * Wp + (size_t)pw;
      const uint8_t *sx = xc + iy * W;
      for (size_t ix = 0; ix < nx; ++ix) d[ix] = (int16_t)(uint8_t)(sx[ix] ^ flip);
    }
    const int32_t *wc = w + (c / CB) * T * CB + c % CB; /* tap t at wc[t * CB] */
    const int32_t bc = bias[c];
    const float sc = scale[c];
    uint8_t *yc = y + c * OH * OW;
#if defined(O2E_QDWN_DSP)
    if (dw == 1 && T <= O2E_QDWN_MAXT) {
      /* per row ky: kw / 2 pairs (kx, kx + 1) as int16x2, then the odd last tap */
      int32_t wq[O2E_QDWN_MAXT];
      const int np = kw / 2;
      for (int ky = 0; ky < kh; ++ky) {
        const int32_t *wr = wc + (size_t)(ky * kw) * CB;
        for (int i = 0; i < np; ++i)
          wq[ky * kw + i] = (int32_t)(((uint32_t)wr[2 * i * CB] & 0xFFFFu) |
                                      ((uint32_t)wr[(2 * i + 1) * CB] << 16));
        if (kw & 1) wq[ky * kw + np] = wr[(kw - 1) * CB];
      }
#if defined(O2E_QDWN3)
      if (kh == 3 && kw == 3 && sw == 2) {
        o2e_qdwn3_chan_(plane, Wp, OH, OW, sh, sw, dh, wq, bc, sc, ilo, ihi, zp, yc);
        continue;
      }
      if (kh == 3 && kw == 3 && sw == 1) {
        /* inlined: fewer instructions than the call (measured 3.2 against 4.0 per MAC at
         * the DS-CNN's 25 x 5) */
        const int mode = ilo + zp == 0 && ihi + zp == 255 ? 1 : (ilo + zp == -128 && ihi + zp == 127 ? 2 : 0);
        const size_t rs = (size_t)dh * Wp;
        for (size_t oy = 0; oy < OH; ++oy) {
          const int16_t *r0 = plane + oy * (size_t)sh * Wp;
#define O2E_QDWN_ROW_(m)                                                                        \
  o2e_qdwn3_row_(r0, rs, OW, wq[0], wq[1], wq[3], wq[4], wq[6], wq[7], bc, sc, ilo, ihi, zp, m, \
                 yc + oy * OW)
          if (mode == 2)
            O2E_QDWN_ROW_(2);
          else if (mode == 1)
            O2E_QDWN_ROW_(1);
          else
            O2E_QDWN_ROW_(0);
#undef O2E_QDWN_ROW_
        }
        continue;
      }
#endif
      for (size_t oy = 0; oy < OH; ++oy) {
        const int16_t *prow = plane + oy * (size_t)sh * Wp;
        uint8_t *yr = yc + oy * OW;
        size_t ox = 0;
        if (sw == 1 && kw == 3) {
          /* two outputs: words (x0 x1) (x1 x2) (x2 x3) of each row, 6 MACs in 3 loads,
           * 2 SMLAD, SMLABB and SMLATB */
          for (; ox + 2 <= OW; ox += 2) {
            int32_t a0 = bc, a1 = bc;
            const int16_t *r = prow + ox;
            for (int ky = 0; ky < kh; ++ky, r += (size_t)dh * Wp) {
              int32_t p01, p12, p23;
              memcpy(&p01, r, 4), memcpy(&p12, r + 1, 4), memcpy(&p23, r + 2, 4);
              const int32_t w01 = wq[ky * 3], w2 = wq[ky * 3 + 1];
              a0 = __smlad(p01, w01, a0);
              a1 = __smlad(p12, w01, a1);
              a0 = __smlabb(p23, w2, a0);
              a1 = __smlatb(p23, w2, a1);
            }
            yr[ox] = O2E_QDWN_RQ(a0, sc, ilo, ihi, zp);
            yr[ox + 1] = O2E_QDWN_RQ(a1, sc, ilo, ihi, zp);
          }
        }
        for (; ox < OW; ++ox) {
          int32_t a = bc;
          const int16_t *r = prow + ox * (size_t)sw;
          for (int ky = 0; ky < kh; ++ky, r += (size_t)dh * Wp) {
            const int32_t *wk = wq + ky * kw;
            for (int i = 0; i < np; ++i) {
              int32_t pp;
              memcpy(&pp, r + 2 * i, 4);
              a = __smlad(pp, wk[i], a);
            }
            if (kw & 1) a = __smlabb(r[kw - 1], wk[np], a);
          }
          yr[ox] = O2E_QDWN_RQ(a, sc, ilo, ihi, zp);
        }
      }
      continue;
    }
#endif
    for (size_t oy = 0; oy < OH; ++oy)
      for (size_t ox = 0; ox < OW; ++ox) {
        uint32_t a = (uint32_t)bc;
        const int16_t *r = plane + oy * (size_t)sh * Wp + ox * (size_t)sw;
        for (int ky = 0; ky < kh; ++ky)
          for (int kx = 0; kx < kw; ++kx)
            a += (uint32_t)(wc[(size_t)(ky * kw + kx) * CB] *
                            (int32_t)r[(size_t)ky * dh * Wp + (size_t)kx * dw]);
        yc[oy * OW + ox] = O2E_QDWN_RQ(a, sc, ilo, ihi, zp);
      }
  }
}

/* y = saturate(round_half_even(fma(a, rac, fma(b, rbc, fixed)))) clamped to [lo, hi]; a, b, y
 * int8 when sgn (as bytes), else uint8. */
static inline void o2e_qadd(size_t n, const uint8_t *a, const uint8_t *b, int sgn, float rac,
                            float rbc, float fixed, int32_t lo, int32_t hi, uint8_t *y) {
  const float flo = (float)lo, fhi = (float)hi;
  size_t i = 0;
#if defined(O2E_QD_AVX512)
  {
    const __m512 ra = _mm512_set1_ps(rac), rb = _mm512_set1_ps(rbc), fx = _mm512_set1_ps(fixed);
    const __m512 l = _mm512_set1_ps(flo), h = _mm512_set1_ps(fhi);
    for (; i + 16 <= n; i += 16) {
      const __m128i va = _mm_loadu_si128((const __m128i *)(a + i));
      const __m128i vb = _mm_loadu_si128((const __m128i *)(b + i));
      const __m512i ia = sgn ? _mm512_cvtepi8_epi32(va) : _mm512_cvtepu8_epi32(va);
      const __m512i ib = sgn ? _mm512_cvtepi8_epi32(vb) : _mm512_cvtepu8_epi32(vb);
      __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), rb, fx);
      r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), ra, r);
      r = _mm512_min_ps(_mm512_max_ps(r, l), h);
      _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
  }
#elif defined(O2E_QD_AVX2)
  {
    const __m256 ra = _mm256_set1_ps(rac), rb = _mm256_set1_ps(rbc), fx = _mm256_set1_ps(fixed);
    const __m256 l = _mm256_set1_ps(flo), h = _mm256_set1_ps(fhi);
    for (; i + 8 <= n; i += 8) {
      const __m128i va = _mm_loadl_epi64((const __m128i *)(a + i));
      const __m128i vb = _mm_loadl_epi64((const __m128i *)(b + i));
      const __m256i ia = sgn ? _mm256_cvtepi8_epi32(va) : _mm256_cvtepu8_epi32(va);
      const __m256i ib = sgn ? _mm256_cvtepi8_epi32(vb) : _mm256_cvtepu8_epi32(vb);
      __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ib), rb, fx);
      r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), ra, r);
      r = _mm256_min_ps(_mm256_max_ps(r, l), h);
      __m256i q = _mm256_cvtps_epi32(r); /* in [lo, hi]: the packs do not saturate */
      q = _mm256_packs_epi32(q, q);
      q = _mm256_permute4x64_epi64(q, 0x08); /* the two 128-bit halves' low words together */
      const __m128i q16 = _mm256_castsi256_si128(q);
      const __m128i q8 = sgn ? _mm_packs_epi16(q16, q16) : _mm_packus_epi16(q16, q16);
      _mm_storel_epi64((__m128i *)(y + i), q8);
    }
  }
#elif defined(O2E_QD_NEON)
  {
    const float32x4_t ra = vdupq_n_f32(rac), rb = vdupq_n_f32(rbc), fx = vdupq_n_f32(fixed);
    const float32x4_t l = vdupq_n_f32(flo), h = vdupq_n_f32(fhi);
    for (; i + 8 <= n; i += 8) {
      int16x8_t wa, wb;
      if (sgn) {
        wa = vmovl_s8(vld1_s8((const int8_t *)(a + i)));
        wb = vmovl_s8(vld1_s8((const int8_t *)(b + i)));
      } else {
        wa = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(a + i)));
        wb = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(b + i)));
      }
      float32x4_t r0 = vfmaq_f32(fx, vcvtq_f32_s32(vmovl_s16(vget_low_s16(wb))), rb);
      float32x4_t r1 = vfmaq_f32(fx, vcvtq_f32_s32(vmovl_s16(vget_high_s16(wb))), rb);
      r0 = vfmaq_f32(r0, vcvtq_f32_s32(vmovl_s16(vget_low_s16(wa))), ra);
      r1 = vfmaq_f32(r1, vcvtq_f32_s32(vmovl_s16(vget_high_s16(wa))), ra);
      r0 = vminq_f32(vmaxq_f32(r0, l), h), r1 = vminq_f32(vmaxq_f32(r1, l), h);
      const int16x8_t q = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(r0)), vmovn_s32(vcvtnq_s32_f32(r1)));
      vst1_u8(y + i, vreinterpret_u8_s8(vmovn_s16(q)));
    }
  }
#endif
  const uint8_t *ae = a + n; /* the tail by pointers: see o2e_qquant */
  for (a += i, b += i, y += i; a < ae; ++a, ++b, ++y) {
    const float fa = sgn ? (float)(int8_t)*a : (float)*a;
    const float fb = sgn ? (float)(int8_t)*b : (float)*b;
    float r = fmaf(fa, rac, fmaf(fb, rbc, fixed));
    r = r < flo ? flo : (r > fhi ? fhi : r);
    *y = (uint8_t)(int32_t)nearbyintf(r);
  }
}

/* QuantizeLinear of float32 per tensor to 8 bits, as onnxruntime's MlasQuantizeLinear:
 * v = x / scale clamped to [lo - zp, hi - zp] (NaN to lo - zp), rounded half to even, + zp;
 * the result's byte is stored (int8 two's complement). */
static inline void o2e_qquant(size_t n, const float *x, float scale, int32_t zp, int32_t lo,
                              int32_t hi, uint8_t *y) {
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  size_t i = 0;
#if defined(O2E_QD_AVX512)
  {
    const __m512 s = _mm512_set1_ps(scale), l = _mm512_set1_ps(flo), h = _mm512_set1_ps(fhi);
    const __m512i z = _mm512_set1_epi32(zp);
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), s);
      v = _mm512_min_ps(_mm512_max_ps(v, l), h); /* maxps(NaN, l) is l */
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), z);
      _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtepi32_epi8(q));
    }
  }
#elif defined(O2E_QD_AVX2)
  {
    const __m256 s = _mm256_set1_ps(scale), l = _mm256_set1_ps(flo), h = _mm256_set1_ps(fhi);
    const __m256i z = _mm256_set1_epi32(zp);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), s);
      v = _mm256_min_ps(_mm256_max_ps(v, l), h); /* maxps(NaN, l) is l */
      __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), z);
      q = _mm256_packs_epi32(q, q); /* in [lo, hi]: no saturation */
      q = _mm256_permute4x64_epi64(q, 0x08);
      const __m128i q16 = _mm256_castsi256_si128(q);
      _mm_storel_epi64((__m128i *)(y + i), lo < 0 ? _mm_packs_epi16(q16, q16) : _mm_packus_epi16(q16, q16));
    }
  }
#elif defined(O2E_QD_NEON)
  {
    const float32x4_t s = vdupq_n_f32(scale), l = vdupq_n_f32(flo), h = vdupq_n_f32(fhi);
    const int32x4_t z = vdupq_n_s32(zp);
    for (; i + 8 <= n; i += 8) {
      /* vmaxnm: the number when the other is NaN */
      float32x4_t v0 = vminq_f32(vmaxnmq_f32(vdivq_f32(vld1q_f32(x + i), s), l), h);
      float32x4_t v1 = vminq_f32(vmaxnmq_f32(vdivq_f32(vld1q_f32(x + i + 4), s), l), h);
      const int32x4_t q0 = vaddq_s32(vcvtnq_s32_f32(v0), z), q1 = vaddq_s32(vcvtnq_s32_f32(v1), z);
      vst1_u8(y + i, vreinterpret_u8_s8(vmovn_s16(vcombine_s16(vmovn_s32(q0), vmovn_s32(q1)))));
    }
  }
#endif
  /* the tail by pointers: an index loop after the vector loop made gcc warn (a bogus
   * -Waggressive-loop-optimizations, an error under -Werror) once inlined with a constant n */
  const float *xe = x + n;
  for (x += i, y += i; x < xe; ++x, ++y) {
    float v = *x / scale;
    v = !(v >= flo) ? flo : (v > fhi ? fhi : v);
    *y = (uint8_t)((int32_t)nearbyintf(v) + zp);
  }
}

/* QLinearMul as onnxruntime's SSE2 / NEON kernels compute it (mlas qlmul.cpp): the integer
 * product (a - za) * (b - zb) in float32, times ratio = sa * sb / sc, plus (float)zc (two
 * roundings: the pin keeps -ffp-contract=fast from fusing them into an fma), rounded half to
 * even, saturated to [lo, hi] (an out-of-range float converts to INT32_MIN on x86, and
 * saturates on Arm, before the packing saturation). Rows of n bytes; b read at
 * b[r * bsr + i * bsi] (bsi 0: one value a row, squeeze-and-excitation's gate; bsi 1, bsr n:
 * one shape). sgn bit 0 / 1: a / b are int8. */
#if defined(__x86_64__) || defined(__i386__)
#define O2E_QM_PIN(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define O2E_QM_PIN(v) __asm__("" : "+w"(v))
#endif
static inline int32_t o2e_qmul1_(int32_t p, float ratio, float zcf) {
#if defined(O2E_QM_PIN)
  float t = (float)p * ratio;
  O2E_QM_PIN(t);
#else
  volatile float t = (float)p * ratio;
#endif
  const float u = t + zcf;
  if (!(u > -2147483648.0f && u < 2147483648.0f)) {
#if defined(__aarch64__) || defined(__arm__)
    return u > 0 ? INT32_MAX : INT32_MIN;
#else
    return INT32_MIN;
#endif
  }
  return (int32_t)nearbyintf(u);
}

static inline void o2e_qmul(size_t rows, size_t n, const uint8_t *a, const uint8_t *b, size_t bsr,
                            size_t bsi, int sgn, int32_t za, int32_t zb, float ratio, int32_t zc,
                            int32_t lo, int32_t hi, uint8_t *y) {
  const float zcf = (float)zc;
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t *ar = a + r * n, *br = b + r * bsr;
    uint8_t *yr = y + r * n;
    size_t i = 0;
#if defined(O2E_QD_AVX512)
    {
      const __m512i vza = _mm512_set1_epi32(za), vzb = _mm512_set1_epi32(zb);
      const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
      const __m512 vr = _mm512_set1_ps(ratio), vz = _mm512_set1_ps(zcf);
      for (; i + 16 <= n; i += 16) {
        const __m128i a8 = _mm_loadu_si128((const __m128i *)(ar + i));
        const __m512i av = (sgn & 1) ? _mm512_cvtepi8_epi32(a8) : _mm512_cvtepu8_epi32(a8);
        __m512i bv;
        if (bsi == 0) {
          bv = _mm512_set1_epi32((sgn & 2) ? (int32_t)(int8_t)br[0] : (int32_t)br[0]);
        } else {
          const __m128i b8 = _mm_loadu_si128((const __m128i *)(br + i));
          bv = (sgn & 2) ? _mm512_cvtepi8_epi32(b8) : _mm512_cvtepu8_epi32(b8);
        }
        const __m512i p = _mm512_mullo_epi32(_mm512_sub_epi32(av, vza), _mm512_sub_epi32(bv, vzb));
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(p), vr);
        O2E_QM_PIN(t);
        __m512i q = _mm512_cvtps_epi32(_mm512_add_ps(t, vz));
        q = _mm512_min_epi32(_mm512_max_epi32(q, vlo), vhi);
        _mm_storeu_si128((__m128i *)(yr + i), _mm512_cvtepi32_epi8(q));
      }
    }
#elif defined(O2E_QD_AVX2)
    {
      const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb);
      const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
      const __m256 vr = _mm256_set1_ps(ratio), vz = _mm256_set1_ps(zcf);
      for (; i + 8 <= n; i += 8) {
        const __m128i a8 = _mm_loadl_epi64((const __m128i *)(ar + i));
        const __m256i av = (sgn & 1) ? _mm256_cvtepi8_epi32(a8) : _mm256_cvtepu8_epi32(a8);
        __m256i bv;
        if (bsi == 0) {
          bv = _mm256_set1_epi32((sgn & 2) ? (int32_t)(int8_t)br[0] : (int32_t)br[0]);
        } else {
          const __m128i b8 = _mm_loadl_epi64((const __m128i *)(br + i));
          bv = (sgn & 2) ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8);
        }
        const __m256i p = _mm256_mullo_epi32(_mm256_sub_epi32(av, vza), _mm256_sub_epi32(bv, vzb));
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(p), vr);
        O2E_QM_PIN(t);
        __m256i q = _mm256_cvtps_epi32(_mm256_add_ps(t, vz));
        q = _mm256_min_epi32(_mm256_max_epi32(q, vlo), vhi); /* bytes: no saturation below */
        q = _mm256_packs_epi32(q, q);
        q = _mm256_permute4x64_epi64(q, 0x08);
        const __m128i q16 = _mm256_castsi256_si128(q);
        _mm_storel_epi64((__m128i *)(yr + i),
                         lo < 0 ? _mm_packs_epi16(q16, q16) : _mm_packus_epi16(q16, q16));
      }
    }
#elif defined(O2E_QD_NEON)
    {
      const int32x4_t vza = vdupq_n_s32(za), vzb = vdupq_n_s32(zb);
      const int32x4_t vlo = vdupq_n_s32(lo), vhi = vdupq_n_s32(hi);
      const float32x4_t vr = vdupq_n_f32(ratio), vz = vdupq_n_f32(zcf);
      for (; i + 8 <= n; i += 8) {
        const uint8x8_t a8 = vld1_u8(ar + i);
        const int16x8_t a16 = (sgn & 1) ? vmovl_s8(vreinterpret_s8_u8(a8))
                                        : vreinterpretq_s16_u16(vmovl_u8(a8));
        int16x8_t b16;
        if (bsi == 0) {
          b16 = vdupq_n_s16((sgn & 2) ? (int16_t)(int8_t)br[0] : (int16_t)br[0]);
        } else {
          const uint8x8_t b8 = vld1_u8(br + i);
          b16 = (sgn & 2) ? vmovl_s8(vreinterpret_s8_u8(b8)) : vreinterpretq_s16_u16(vmovl_u8(b8));
        }
        int32x4_t q[2];
        for (int h = 0; h < 2; ++h) {
          const int32x4_t av = vmovl_s16(h ? vget_high_s16(a16) : vget_low_s16(a16));
          const int32x4_t bv = vmovl_s16(h ? vget_high_s16(b16) : vget_low_s16(b16));
          const int32x4_t p = vmulq_s32(vsubq_s32(av, vza), vsubq_s32(bv, vzb));
          float32x4_t t = vmulq_f32(vcvtq_f32_s32(p), vr);
          O2E_QM_PIN(t);
          q[h] = vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vaddq_f32(t, vz)), vlo), vhi);
        }
        vst1_u8(yr + i, vreinterpret_u8_s8(vmovn_s16(vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1])))));
      }
    }
#endif
    /* the tail by pointers (see o2e_qquant) */
    const uint8_t *ae = ar + n;
    const uint8_t *bp = br + i * bsi;
    for (const uint8_t *ap = ar + i; ap < ae; ++ap, bp += bsi, ++i) {
      const int32_t av = (sgn & 1) ? (int32_t)(int8_t)*ap : (int32_t)*ap;
      const int32_t bv = (sgn & 2) ? (int32_t)(int8_t)*bp : (int32_t)*bp;
      const int32_t q = o2e_qmul1_((av - za) * (bv - zb), ratio, zcf);
      yr[i] = (uint8_t)(q < lo ? lo : (q > hi ? hi : q));
    }
  }
}

/* The column matrix of a 1x1 convolution without padding: x [C][H][W] sampled every sh rows
 * and sw columns into col [C][OH * OW] (im2col's result, without its per-tap bookkeeping;
 * stride 2 picks the even bytes 16 at a time). */
static inline void o2e_qsubsample(const uint8_t *x, size_t C, size_t H, size_t W, size_t OH,
                                  size_t OW, int sh, int sw, uint8_t *col) {
  for (size_t c = 0; c < C; ++c)
    for (size_t oy = 0; oy < OH; ++oy) {
      const uint8_t *xr = x + (c * H + oy * (size_t)sh) * W;
      uint8_t *r = col + (c * OH + oy) * OW;
      size_t ox = 0;
      if (sw == 2) {
#if defined(__SSE2__)
        const __m128i lo = _mm_set1_epi16(0x00FF);
        for (; ox + 16 <= OW && 2 * ox + 32 <= W; ox += 16) {
          const __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(xr + 2 * ox)), lo);
          const __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(xr + 2 * ox + 16)), lo);
          _mm_storeu_si128((__m128i *)(r + ox), _mm_packus_epi16(a, b));
        }
#elif defined(__ARM_NEON) && defined(__aarch64__)
        for (; ox + 16 <= OW && 2 * ox + 32 <= W; ox += 16) vst1q_u8(r + ox, vld2q_u8(xr + 2 * ox).val[0]);
#endif
      }
      for (; ox < OW; ++ox) r[ox] = xr[ox * (size_t)sw];
    }
}

/* y[i] = lut[x[i]] over n bytes: a quantized Concat's requantisation of an input to the
 * output's scale (QuantizeLinear(DequantizeLinear(v)) tabulated for every byte at conversion,
 * so exact by construction). AVX-512 VBMI: the 256-byte table in four registers, vpermi2b
 * looks up 64 bytes in each half (index bits 0-6) and bit 7 picks the half: 4 instructions
 * per 64 bytes where the scalar loop takes a load and a store per byte. */
static inline void o2e_qlut(size_t n, const uint8_t *x, const uint8_t *lut, uint8_t *y) {
  size_t i = 0;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  const __m512i t0 = _mm512_loadu_si512(lut), t1 = _mm512_loadu_si512(lut + 64);
  const __m512i t2 = _mm512_loadu_si512(lut + 128), t3 = _mm512_loadu_si512(lut + 192);
#define O2E_QLUT64(v)                                                                           \
  _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), _mm512_permutex2var_epi8(t0, v, t1),          \
                         _mm512_permutex2var_epi8(t2, v, t3))
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(x + i);
    _mm512_storeu_si512(y + i, O2E_QLUT64(v));
  }
  if (i < n) {
    const __mmask64 k = ((__mmask64)1 << (n - i)) - 1; /* n - i < 64 */
    const __m512i v = _mm512_maskz_loadu_epi8(k, x + i);
    _mm512_mask_storeu_epi8(y + i, k, O2E_QLUT64(v));
  }
#undef O2E_QLUT64
  return;
#endif
  for (; i < n; ++i) y[i] = lut[x[i]];
}

/* ---- two threads and more --------------------------------------------------------------
 * The generated code passes the threading runtime's o2e_parallel_for / o2e_parallel_thread
 * (runtime/o2e_gemm.h) as pointers. o2e_qdwc splits by channel blocks, each thread in its own
 * plane + tile slot; the element-wise kernels by rows (o2e_qmul's per-row gate) or by
 * O2E_QPAR_BYTES blocks, a multiple of every vector step, so each byte takes the same vector or
 * tail path as in one call over everything: results do not depend on the split. */
#ifndef O2E_QPAR_TYPES
#define O2E_QPAR_TYPES
typedef void (*o2e_qpar_for)(int n, void (*fn)(void *ctx, int begin, int end), void *ctx);
typedef int (*o2e_qpar_thread)(void);
#endif
#define O2E_QPAR_BYTES 4096

typedef struct {
  size_t C, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  const uint8_t *x;
  uint8_t flip;
  int32_t xz;
  const int32_t *w, *off, *bias;
  const float *scale;
  int32_t zp, lo, hi;
  uint8_t *y, *ws;
  size_t slot, tile; /* bytes per thread; the tile's offset in a slot */
  o2e_qpar_thread thread;
} o2e_qdwc_par_args;

/* Blocks [b0, b1) with the geometry as arguments: a model's per-layer wrapper
 * (kernels/int8/qdw_kernels.py) passes constants, as the serial call inlined into it does. */
static inline __attribute__((always_inline)) void o2e_qdwc_units_k_(
    const o2e_qdwc_par_args *a, int b0, int b1, size_t C, size_t H, size_t W, size_t OH,
    size_t OW, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  uint8_t *plane = a->ws + a->slot * (size_t)(a->thread ? a->thread() : 0);
  o2e_qdwc_blocks((size_t)b0, (size_t)b1, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, a->x,
                  a->flip, a->xz, a->w, a->off, a->bias, a->scale, a->zp, a->lo, a->hi, a->y,
                  plane, plane + a->tile);
}

static inline void o2e_qdwc_units_(void *arg, int b0, int b1) {
  const o2e_qdwc_par_args *a = (const o2e_qdwc_par_args *)arg;
  o2e_qdwc_units_k_(a, b0, b1, a->C, a->H, a->W, a->OH, a->OW, a->kh, a->kw, a->sh, a->sw, a->ph,
                    a->pw, a->dh, a->dw);
}

/* o2e_qdwc split by channel blocks: ws holds slot bytes per thread, the plane then (at tile)
 * the tile. */
static inline void o2e_qdwc_mt(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh, int kw,
                               int sh, int sw, int ph, int pw, int dh, int dw, const uint8_t *x,
                               uint8_t flip, int32_t xz, const int32_t *w, const int32_t *off,
                               const int32_t *bias, const float *scale, int32_t zp, int32_t lo,
                               int32_t hi, uint8_t *y, uint8_t *ws, size_t slot, size_t tile,
                               o2e_qpar_for par, o2e_qpar_thread thread,
                               void (*units)(void *ctx, int begin, int end)) {
  o2e_qdwc_par_args a = {.C = C, .H = H, .W = W, .OH = OH, .OW = OW, .kh = kh, .kw = kw,
                         .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw, .x = x,
                         .flip = flip, .xz = xz, .w = w, .off = off, .bias = bias,
                         .scale = scale, .zp = zp, .lo = lo, .hi = hi, .y = y, .ws = ws,
                         .slot = slot, .tile = tile, .thread = thread};
  const int nb = (int)((C + O2E_QDWC_CB - 1) / O2E_QDWC_CB);
  void (*fn)(void *, int, int) = units ? units : o2e_qdwc_units_;
  if (par)
    par(nb, fn, &a);
  else
    fn(&a, 0, nb);
}

/* The element-wise kernels' operands: one struct for o2e_qlut / o2e_qadd / o2e_qmul. */
typedef struct {
  size_t n, rows, bsr, bsi;
  const uint8_t *a, *b;
  int sgn;
  float f0, f1, f2;
  int32_t z0, z1, z2, lo, hi;
  uint8_t *y;
} o2e_qew_args;

static inline void o2e_qlut_units_(void *arg, int u0, int u1) {
  const o2e_qew_args *e = (const o2e_qew_args *)arg;
  const size_t i0 = (size_t)u0 * O2E_QPAR_BYTES;
  const size_t i1 = (size_t)u1 * O2E_QPAR_BYTES < e->n ? (size_t)u1 * O2E_QPAR_BYTES : e->n;
  o2e_qlut(i1 - i0, e->a + i0, e->b, e->y + i0);
}

static inline void o2e_qlut_mt(size_t n, const uint8_t *x, const uint8_t *lut, uint8_t *y,
                               o2e_qpar_for par) {
  o2e_qew_args e = {.n = n, .a = x, .b = lut, .y = y};
  const int nu = (int)((n + O2E_QPAR_BYTES - 1) / O2E_QPAR_BYTES);
  if (par)
    par(nu, o2e_qlut_units_, &e);
  else
    o2e_qlut_units_(&e, 0, nu);
}

static inline void o2e_qadd_units_(void *arg, int u0, int u1) {
  const o2e_qew_args *e = (const o2e_qew_args *)arg;
  const size_t i0 = (size_t)u0 * O2E_QPAR_BYTES;
  const size_t i1 = (size_t)u1 * O2E_QPAR_BYTES < e->n ? (size_t)u1 * O2E_QPAR_BYTES : e->n;
  o2e_qadd(i1 - i0, e->a + i0, e->b + i0, e->sgn, e->f0, e->f1, e->f2, e->lo, e->hi, e->y + i0);
}

static inline void o2e_qadd_mt(size_t n, const uint8_t *a, const uint8_t *b, int sgn, float rac,
                               float rbc, float fixed, int32_t lo, int32_t hi, uint8_t *y,
                               o2e_qpar_for par) {
  o2e_qew_args e = {.n = n, .a = a, .b = b, .sgn = sgn, .f0 = rac, .f1 = rbc, .f2 = fixed,
                    .lo = lo, .hi = hi, .y = y};
  const int nu = (int)((n + O2E_QPAR_BYTES - 1) / O2E_QPAR_BYTES);
  if (par)
    par(nu, o2e_qadd_units_, &e);
  else
    o2e_qadd_units_(&e, 0, nu);
}

/* o2e_qmul by rows when there are several (a row's bytes in one call), else by blocks. */
static inline void o2e_qmul_units_(void *arg, int u0, int u1) {
  const o2e_qew_args *e = (const o2e_qew_args *)arg;
  if (e->rows > 1) {
    const size_t r0 = (size_t)u0;
    o2e_qmul((size_t)(u1 - u0), e->n, e->a + r0 * e->n, e->b + r0 * e->bsr, e->bsr, e->bsi,
             e->sgn, e->z0, e->z1, e->f0, e->z2, e->lo, e->hi, e->y + r0 * e->n);
    return;
  }
  const size_t i0 = (size_t)u0 * O2E_QPAR_BYTES;
  const size_t i1 = (size_t)u1 * O2E_QPAR_BYTES < e->n ? (size_t)u1 * O2E_QPAR_BYTES : e->n;
  o2e_qmul(1, i1 - i0, e->a + i0, e->b + i0 * e->bsi, e->bsr, e->bsi, e->sgn, e->z0, e->z1, e->f0,
           e->z2, e->lo, e->hi, e->y + i0);
}

static inline void o2e_qmul_mt(size_t rows, size_t n, const uint8_t *a, const uint8_t *b,
                               size_t bsr, size_t bsi, int sgn, int32_t za, int32_t zb,
                               float ratio, int32_t zc, int32_t lo, int32_t hi, uint8_t *y,
                               o2e_qpar_for par) {
  o2e_qew_args e = {.n = n, .rows = rows, .bsr = bsr, .bsi = bsi, .a = a, .b = b, .sgn = sgn,
                    .f0 = ratio, .z0 = za, .z1 = zb, .z2 = zc, .lo = lo, .hi = hi, .y = y};
  const int nu = rows > 1 ? (int)rows : (int)((n + O2E_QPAR_BYTES - 1) / O2E_QPAR_BYTES);
  if (par)
    par(nu, o2e_qmul_units_, &e);
  else
    o2e_qmul_units_(&e, 0, nu);
}

#endif /* O2E_QDW_H */
