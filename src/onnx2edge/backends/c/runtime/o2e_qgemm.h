/* o2e_qgemm.h - int8 matrix products for quantized convolutions and fully connected layers.
 *
 * Y[m][p] = requant(sum_k A[m][k] * B[k][p] + bias[m]) with
 *   A: int8 weights (zero point already subtracted), packed at conversion time as
 *      [ceil(M/8)][ceil(K/4)][8][4] (8 output channels x 4 consecutive k per step),
 *   B: uint8 activations (int8 ones are flipped to uint8 by xor 0x80 while packing; the
 *      conversion folds the -128 * sum_k A[m][k] into bias), packed at run time into
 *      panels of 16 columns [ceil(P/16)][ceil(K/4)][16][4],
 *   requant(v) = clamp(round_half_even((float)v * scale[m]) + zp, lo, hi), which is
 *      onnxruntime's MlasRequantizeOutput (float multiply, clamp, nearest-even) and also
 *      applies a fused Relu / Clip (lo, hi are their quantized bounds).
 * Every path is exact in int32 (the sums wrap as ONNX's integer ops allow):
 *   AVX-512 VNNI: vpdpbusd (u8 x s8 -> s32, no intermediate saturation);
 *   AVX2: the activation panels are packed as int16 (each byte zero-extended once, same
 *         [16][4] order, 128 bytes per step), each step's 8 x 4 weights sign-extended in
 *         two vpmovsxbw, one column's 4 activations broadcast as a qword and vpmaddwd into
 *         s32 pairs: exact (vpmaddubsw would saturate its s16 pair sums: 255 * 127 * 2 >
 *         32767; no weight-pair bound holds in practice, see o2e_qkernel);
 *   NEON with dot product: activations flipped back to s8 (x ^ 0x80), sdot, + 128 * rowsum;
 *   NEON: widened to s16, smlal;  portable C: the same sums in scalar code.
 * Depthwise convolutions have their own kernel (o2e_qdw): one int16 plane of (x - zp) with a
 * zero border per channel, int32 row accumulators that gcc vectorises on every target.
 */
#ifndef O2E_QGEMM_H
#define O2E_QGEMM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define O2E_Q_VNNI 1
#define O2E_QGEMM_KERNEL "avx512-vnni"
#elif defined(__AVX2__)
#include <immintrin.h>
#define O2E_Q_AVX2 1
#define O2E_QGEMM_KERNEL "avx2"
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#if defined(__ARM_FEATURE_DOTPROD)
#define O2E_Q_SDOT 1
#define O2E_QGEMM_KERNEL "neon-sdot"
#else
#define O2E_Q_NEON 1
#define O2E_QGEMM_KERNEL "neon"
#endif
#elif defined(__ARM_FEATURE_DSP) && defined(__ARM_FEATURE_SIMD32) && !defined(__aarch64__) &&   \
    !defined(O2E_Q_NO_DSP)
/* Cortex-M4 / M7 / M33 / M55 (Armv7E-M, Armv8-M Main with the DSP extension): SMLAD, two
 * 16 x 16 multiply-accumulates per instruction, on bytes widened by SXTB16 / UXTB16 */
#include <arm_acle.h>
#define O2E_Q_DSP 1
#define O2E_QGEMM_KERNEL "arm-dsp-smlad"
#else
#define O2E_QGEMM_KERNEL "portable"
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define O2E_QMR 8
#define O2E_QNR 16
/* bytes of one K4 step of a 16-column panel: 64 uint8, or 64 int16 on AVX2 and Arm DSP */
#if defined(O2E_Q_AVX2) || defined(O2E_Q_DSP)
#define O2E_QSTEP 128
#else
#define O2E_QSTEP 64
#endif

/* The packed weights are one stream read front to back (row blocks of 8 x K4 steps in
 * order), and a network's weights do not stay in cache between inferences (ResNet50's are
 * 26 MB): the kernels prefetch O2E_QPF bytes ahead of the step they read. Without it a
 * 512 x 4608 layer at 7 x 7 (ResNet50's res5 3 x 3) waited on DRAM at half speed, 0.65 ms
 * against 0.36 with it (AMD Zen 5, caches flushed before each call; 3-8 KB ahead measured
 * alike, 1 KB recovered half). */
#if defined(__x86_64__) && defined(__SSE__)
/* inline assembly: the address is past the end of a small layer's array, which gcc's
 * -Warray-bounds reports for _mm_prefetch (a prefetch never faults) */
#define O2E_QPF 4096
#define O2E_QPREFETCH(p) __asm__("prefetcht0 %c1(%0)" : : "r"(p), "i"(O2E_QPF))
#else
#define O2E_QPREFETCH(p) ((void)0)
#endif

/* 4 packed int8 weights read as one int32 (may_alias: the packed array is int8) */
typedef int32_t o2e_qi32 __attribute__((may_alias, aligned(1)));
typedef int64_t o2e_qi64 __attribute__((may_alias, aligned(1)));

static inline const char *o2e_qgemm_kernel_name(void) { return O2E_QGEMM_KERNEL; }

/* Bytes of the packed panels of a K x P activation matrix. */
#define O2E_QPANEL_BYTES(K, P) ((((size_t)(P) + 15) / 16) * (((size_t)(K) + 3) / 4) * O2E_QSTEP)

/* Store step k4 (16 columns x 4 k bytes, column-major) of a panel of K4 steps. AVX2 panels
 * are int16 and split into 4 sub-panels of 4 columns, [4][K4][4][4] (so one pass of
 * o2e_qkernel reads 32 contiguous bytes per step); the others are [K4][16][4] bytes. */
#if defined(O2E_Q_AVX2)
static inline void o2e_qstep_store(uint8_t *panel, size_t k4, size_t K4, const __m128i *v) {
  for (size_t i = 0; i < 4; ++i)
    _mm256_storeu_si256((__m256i *)(panel + (i * K4 + k4) * 32),
                        _mm256_cvtepu8_epi16(_mm_loadu_si128(v + i)));
}
#endif
#if defined(O2E_Q_DSP)
/* Arm DSP panels are int16, each column's 4 k in the order k0 k2 k1 k3: the words (k0, k2)
 * and (k1, k3) pair with SXTB16 of a weight word and of it rotated by 8 in one SMLAD each,
 * so the activations are widened once here instead of once per weight row. */
/* SXTB16 / UXTB16 of w rotated by 8 (the odd bytes) in one instruction: gcc 12 emits a
 * separate rotate for the C expression */
static inline __attribute__((always_inline)) int16x2_t o2e_qsxtb16_odd_(uint32_t w) {
  int16x2_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
  return r;
}
static inline __attribute__((always_inline)) uint32_t o2e_quxtb16_odd_(uint32_t w) {
  uint32_t r;
  __asm__("uxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
  return r;
}
static inline void o2e_qdsp_put4_(uint32_t *d, uint32_t w) {
  d[0] = (uint32_t)__uxtb16((uint8x4_t)w);
  d[1] = o2e_quxtb16_odd_(w);
}
#endif
static inline void o2e_qstep_put(uint8_t *panel, size_t k4, size_t K4, const uint8_t *blk) {
#if defined(O2E_Q_AVX2)
  o2e_qstep_store(panel, k4, K4, (const __m128i *)blk);
#elif defined(O2E_Q_DSP)
  (void)K4;
  uint32_t *d = (uint32_t *)(void *)(panel + k4 * O2E_QSTEP);
  for (int j = 0; j < 16; ++j) {
    uint32_t w;
    memcpy(&w, blk + 4 * j, 4);
    o2e_qdsp_put4_(d + 2 * j, w);
  }
#else
  (void)K4;
  memcpy(panel + k4 * 64, blk, 64);
#endif
}

#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
/* vpermt2b indices that transpose 4 rows of 32 bytes, held as (r0 | r1) and (r2 | r3), into the
 * two 16-column panels of one K4 step: byte 4 j + t of panel h is row t, column 16 h + j. */
static inline __m512i o2e_qtr4x32_idx_(int h) {
  uint8_t ix[64];
  for (int j = 0; j < 16; ++j)
    for (int t = 0; t < 4; ++t) ix[4 * j + t] = (uint8_t)((t >> 1) * 64 + (t & 1) * 32 + 16 * h + j);
  return _mm512_loadu_si512(ix);
}

/* One K4 step of two panels from 4 rows (r0 | r1), (r2 | r3): two vpermt2b and the flip, where
 * the 16-byte unpacks took 8 unpacks, 4 extracts, 4 xors and 8 stores per panel pair. */
static inline __attribute__((always_inline)) void o2e_qtr4x32_(__m512i r01, __m512i r23,
                                                               __m512i t0, __m512i t1,
                                                               __m512i f, uint8_t *pan0,
                                                               uint8_t *pan1) {
  _mm512_storeu_si512(pan0, _mm512_xor_si512(_mm512_permutex2var_epi8(r01, t0, r23), f));
  _mm512_storeu_si512(pan1, _mm512_xor_si512(_mm512_permutex2var_epi8(r01, t1, r23), f));
}

#endif

/* Pack B given as K rows of P bytes (row k at src + k * ld) into 16-column panels; the
 * padding columns / rows are zero (their weights are zero or their results unused). */
static inline void o2e_qpack_rows_at(const uint8_t *src, size_t ld, const int32_t *rowoff,
                                     size_t K, size_t P, uint8_t flip, uint8_t *dst) {
#define O2E_QSRC(k) (src + (rowoff ? (size_t)rowoff[k] : (k) * ld))
  const size_t K4 = (K + 3) / 4;
  size_t pv = 0; /* columns packed 32 at a time */
#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
  if (P >= 32) {
    const __m512i t0 = o2e_qtr4x32_idx_(0), t1 = o2e_qtr4x32_idx_(1);
    const __m512i f = _mm512_set1_epi8((char)flip);
    const size_t K4f = K / 4; /* steps of 4 rows inside K; a partial last one below */
    for (; pv + 32 <= P; pv += 32) {
      uint8_t *pan0 = dst + (pv / 16) * K4 * 64, *pan1 = pan0 + K4 * 64;
#define O2E_QPR_(k) _mm256_loadu_si256((const __m256i *)(O2E_QSRC(k) + pv))
#define O2E_QP2_(k)                                                                             \
  _mm512_inserti64x4(_mm512_castsi256_si512(O2E_QPR_(k)), O2E_QPR_((k) + 1), 1)
      for (size_t k4 = 0; k4 < K4f; ++k4)
        o2e_qtr4x32_(O2E_QP2_(4 * k4), O2E_QP2_(4 * k4 + 2), t0, t1, f, pan0 + k4 * 64,
                     pan1 + k4 * 64);
      if (K4f < K4) { /* rows past K: flip bytes, zero once flipped */
        __m256i r[4];
        for (size_t t = 0; t < 4; ++t)
          r[t] = 4 * K4f + t < K ? O2E_QPR_(4 * K4f + t) : _mm256_set1_epi8((char)flip);
        o2e_qtr4x32_(_mm512_inserti64x4(_mm512_castsi256_si512(r[0]), r[1], 1),
                     _mm512_inserti64x4(_mm512_castsi256_si512(r[2]), r[3], 1), t0, t1, f,
                     pan0 + K4f * 64, pan1 + K4f * 64);
      }
#undef O2E_QP2_
#undef O2E_QPR_
    }
  }
#endif
  for (size_t p0 = pv; p0 < P; p0 += 16) {
    uint8_t *panel = dst + (p0 / 16) * K4 * O2E_QSTEP;
    const size_t np = P - p0 < 16 ? P - p0 : 16;
    for (size_t k4 = 0; k4 < K4; ++k4) {
      const size_t k = k4 * 4;
#if defined(__SSE2__)
      if (np == 16 && k + 4 <= K) {
        /* 4 rows x 16 columns -> 16 columns x 4 rows: two rounds of byte / word unpacks */
        uint8_t *d = panel + k4 * O2E_QSTEP;
        const __m128i f = _mm_set1_epi8((char)flip);
        const __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(O2E_QSRC(k) + p0)), f);
        const __m128i r1 =
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)(O2E_QSRC(k + 1) + p0)), f);
        const __m128i r2 =
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)(O2E_QSRC(k + 2) + p0)), f);
        const __m128i r3 =
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)(O2E_QSRC(k + 3) + p0)), f);
        const __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);
        const __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);
#if defined(O2E_Q_AVX2)
        const __m128i v[4] = {_mm_unpacklo_epi16(a0, b0), _mm_unpackhi_epi16(a0, b0),
                              _mm_unpacklo_epi16(a1, b1), _mm_unpackhi_epi16(a1, b1)};
        o2e_qstep_store(panel, k4, K4, v);
        continue;
#endif
        _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi16(a0, b0));
        _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi16(a0, b0));
        _mm_storeu_si128((__m128i *)(d + 32), _mm_unpacklo_epi16(a1, b1));
        _mm_storeu_si128((__m128i *)(d + 48), _mm_unpackhi_epi16(a1, b1));
        continue;
      }
#elif defined(__ARM_NEON) && defined(__aarch64__)
      if (np == 16 && k + 4 <= K) {
        uint8_t *d = panel + k4 * O2E_QSTEP;
        const uint8x16_t f = vdupq_n_u8(flip);
        uint8x16x4_t r;
        r.val[0] = veorq_u8(vld1q_u8(O2E_QSRC(k) + p0), f);
        r.val[1] = veorq_u8(vld1q_u8(O2E_QSRC(k + 1) + p0), f);
        r.val[2] = veorq_u8(vld1q_u8(O2E_QSRC(k + 2) + p0), f);
        r.val[3] = veorq_u8(vld1q_u8(O2E_QSRC(k + 3) + p0), f);
        vst4q_u8(d, r); /* interleaves: column j gets rows k..k+3 */
        continue;
      }
#elif defined(O2E_Q_DSP)
      if (np == 16 && k + 4 <= K) {
        /* 4 rows x 4 columns per round: UXTB16 splits each row word into columns (0, 2) and
         * (1, 3) as halfwords, PKHBT / PKHTB pair rows (k0, k2) and (k1, k3) per column */
        uint32_t *d = (uint32_t *)(void *)(panel + k4 * O2E_QSTEP);
        const uint32_t f4 = 0x01010101u * flip;
        const uint8_t *s0 = O2E_QSRC(k) + p0, *s1 = O2E_QSRC(k + 1) + p0;
        const uint8_t *s2 = O2E_QSRC(k + 2) + p0, *s3 = O2E_QSRC(k + 3) + p0;
        for (int j = 0; j < 16; j += 4, d += 8) {
          uint32_t r0, r1, r2, r3;
          memcpy(&r0, s0 + j, 4), memcpy(&r1, s1 + j, 4);
          memcpy(&r2, s2 + j, 4), memcpy(&r3, s3 + j, 4);
          r0 ^= f4, r1 ^= f4, r2 ^= f4, r3 ^= f4;
          const uint32_t e0 = (uint32_t)__uxtb16((uint8x4_t)r0), o0 = o2e_quxtb16_odd_(r0);
          const uint32_t e1 = (uint32_t)__uxtb16((uint8x4_t)r1), o1 = o2e_quxtb16_odd_(r1);
          const uint32_t e2 = (uint32_t)__uxtb16((uint8x4_t)r2), o2 = o2e_quxtb16_odd_(r2);
          const uint32_t e3 = (uint32_t)__uxtb16((uint8x4_t)r3), o3 = o2e_quxtb16_odd_(r3);
#define O2E_QBT_(lo, hi) (((lo) & 0xFFFFu) | ((hi) << 16))
#define O2E_QTB_(lo, hi) (((hi) & 0xFFFF0000u) | ((lo) >> 16))
          d[0] = O2E_QBT_(e0, e2), d[1] = O2E_QBT_(e1, e3); /* column j: (k0, k2), (k1, k3) */
          d[2] = O2E_QBT_(o0, o2), d[3] = O2E_QBT_(o1, o3); /* j + 1 */
          d[4] = O2E_QTB_(e0, e2), d[5] = O2E_QTB_(e1, e3); /* j + 2 */
          d[6] = O2E_QTB_(o0, o2), d[7] = O2E_QTB_(o1, o3); /* j + 3 */
#undef O2E_QBT_
#undef O2E_QTB_
        }
        continue;
      }
#endif
      uint8_t blk[64];
      memset(blk, 0, 64);
      for (size_t t = 0; t < 4 && k + t < K; ++t)
        for (size_t j = 0; j < np; ++j) blk[j * 4 + t] = (uint8_t)(O2E_QSRC(k + t)[p0 + j] ^ flip);
      o2e_qstep_put(panel, k4, K4, blk);
    }
  }
#undef O2E_QSRC
}

static inline void o2e_qpack_rows(const uint8_t *src, size_t ld, size_t K, size_t P, uint8_t flip,
                                  uint8_t *dst) {
  o2e_qpack_rows_at(src, ld, (const int32_t *)0, K, P, flip, dst);
}

/* Stride-1 convolutions without im2col: the input copied into planes of Hp x Wp bytes with
 * a border of the zero point (Wp = OW + (kw - 1) * dw columns, one spare row), so row
 * (c, ky, kx) of the implicit matrix is that plane read from offset ky * dh * Wp + kx * dw
 * over OH * Wp "extended" columns (the last Wp - OW of each row are dropped by
 * o2e_qcompact). */
static inline void o2e_qpad(const uint8_t *x, size_t C, size_t H, size_t W, size_t Hp, size_t Wp,
                            int ph, int pw, uint8_t padv, uint8_t *out) {
  memset(out, padv, C * Hp * Wp);
  for (size_t c = 0; c < C; ++c)
    for (size_t iy = 0; iy < H; ++iy) {
      const long py = (long)iy + ph;
      if (py < 0 || py >= (long)Hp) continue;
      long a = 0, b = (long)W;
      if (pw < 0) a = -pw;
      if (b + pw > (long)Wp) b = (long)Wp - pw;
      if (b > a) memcpy(out + (c * Hp + (size_t)py) * Wp + a + pw, x + (c * H + iy) * W + a, (size_t)(b - a));
    }
}

/* Columns q of phase cp (input column q * sw + cp - pw) that fall inside a row of W. */
static inline void o2e_qphase_range(size_t W, size_t QW, int sw, int pw, int cp, size_t *qa,
                                    size_t *qb) {
  const long off = (long)cp - pw; /* input column of q = 0 */
  long a = off >= 0 ? 0 : (-off + sw - 1) / sw;
  long b = (long)W - off <= 0 ? 0 : ((long)W - off + sw - 1) / sw;
  if (b > (long)QW) b = (long)QW;
  if (a > b) a = b;
  *qa = (size_t)a, *qb = (size_t)b;
}

/* Strided convolutions without im2col: the input split into sh * sw phase planes per channel,
 * plane (c, a, b) holding the padded image's pixels (qy * sh + a, qx * sw + b) in Hq x Wq
 * bytes (border: the zero point), Wq = OW + ((kw - 1) * dw) / sw columns and Hq = OH +
 * ((kh - 1) * dh) / sh + 1 rows (one spare). Row (c, ky, kx) of the implicit matrix is then
 * plane (c, ky * dh % sh, kx * dw % sw) read from offset (ky * dh / sh) * Wq + kx * dw / sw over
 * OH * Wq extended columns, as o2e_qpad's planes for stride 1 (o2e_qcompact drops the last
 * Wq - OW of each row). The planes hold the input's bytes once, where im2col wrote kh * kw /
 * (sh * sw) times as many (2.25 x for 3 x 3 stride 2) with a scalar gather per byte. */
static inline void o2e_qphase(const uint8_t *x, size_t C, size_t H, size_t W, int sh, int sw,
                              int ph, int pw, size_t Hq, size_t Wq, uint8_t padv, uint8_t *out) {
  const size_t PS = Hq * Wq;
  memset(out, padv, C * (size_t)sh * (size_t)sw * PS);
  for (size_t c = 0; c < C; ++c)
    for (size_t iy = 0; iy < H; ++iy) {
      const size_t py = iy + (size_t)ph, qy = py / (size_t)sh;
      if (qy >= Hq) continue;
      const uint8_t *xr = x + (c * H + iy) * W;
      for (int cp = 0; cp < sw; ++cp) {
        size_t qa, qb;
        o2e_qphase_range(W, Wq, sw, pw, cp, &qa, &qb);
        uint8_t *d = out + ((c * (size_t)sh + py % (size_t)sh) * (size_t)sw + (size_t)cp) * PS +
                     qy * Wq;
        const uint8_t *sx = xr + cp - pw; /* input column of q = 0 (q >= qa is inside) */
        size_t q = qa;
        if (sw == 2) {
          /* 16 even bytes of 32: the last read (sx[2q + 31]) stays before sx[2 (qb - 1)] */
#if defined(__SSE2__)
          const __m128i m = _mm_set1_epi16(0xFF);
          for (; q + 16 < qb; q += 16) {
            const __m128i v0 = _mm_loadu_si128((const __m128i *)(sx + 2 * q));
            const __m128i v1 = _mm_loadu_si128((const __m128i *)(sx + 2 * q + 16));
            _mm_storeu_si128((__m128i *)(d + q),
                             _mm_packus_epi16(_mm_and_si128(v0, m), _mm_and_si128(v1, m)));
          }
#elif defined(__ARM_NEON) && defined(__aarch64__)
          for (; q + 16 < qb; q += 16) vst1q_u8(d + q, vld2q_u8(sx + 2 * q).val[0]);
#endif
        }
        for (; q < qb; ++q) d[q] = sx[q * (size_t)sw];
      }
    }
}

static inline void o2e_qcompact(const uint8_t *yext, size_t M, size_t OH, size_t OW, size_t Wp,
                                uint8_t *y) {
  for (size_t m = 0; m < M; ++m)
    for (size_t oy = 0; oy < OH; ++oy) memcpy(y + (m * OH + oy) * OW, yext + (m * OH + oy) * Wp, OW);
}


/* Pack B given as P rows of K bytes (a matrix product's activations [P][K]). */
static inline void o2e_qpack_cols(const uint8_t *src, size_t P, size_t K, uint8_t flip, uint8_t *dst) {
  const size_t K4 = (K + 3) / 4;
#if defined(O2E_Q_DSP)
  /* one word per column and step, straight into the int16 panel; only the columns the
   * kernel reads (up to an even count): a batch-1 layer packs one column, not 16 */
  const uint32_t f4 = 0x01010101u * flip;
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    uint8_t *panel = dst + (p0 / 16) * K4 * O2E_QSTEP;
    const size_t np = P - p0 < 16 ? P - p0 : 16, ne = (np + 1) & ~(size_t)1;
    for (size_t j = 0; j < ne; ++j) {
      const uint8_t *s = src + (p0 + j) * K;
      for (size_t k4 = 0; k4 < K4; ++k4) {
        uint32_t w = 0;
        if (j < np) {
          const size_t k = k4 * 4, nk = K - k < 4 ? K - k : 4;
          if (nk == 4) {
            memcpy(&w, s + k, 4);
            w ^= f4;
          } else {
            for (size_t t = 0; t < nk; ++t) w |= (uint32_t)(uint8_t)(s[k + t] ^ flip) << (8 * t);
          }
        }
        o2e_qdsp_put4_((uint32_t *)(void *)(panel + k4 * O2E_QSTEP + j * 8), w);
      }
    }
  }
  return;
#endif
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    uint8_t *panel = dst + (p0 / 16) * K4 * O2E_QSTEP;
    const size_t np = P - p0 < 16 ? P - p0 : 16;
    for (size_t k4 = 0; k4 < K4; ++k4) {
      uint8_t blk[64];
      const size_t k = k4 * 4, nk = K - k < 4 ? K - k : 4;
      if (np < 16 || nk < 4) memset(blk, 0, 64);
      for (size_t j = 0; j < np; ++j)
        for (size_t t = 0; t < nk; ++t) blk[j * 4 + t] = src[(p0 + j) * K + k + t] ^ flip;
      o2e_qstep_put(panel, k4, K4, blk);
    }
  }
}

#if defined(O2E_Q_DSP)
/* Rows r, r + 1 x columns j, j + 1 over K4 steps: four accumulators in registers; each step
 * loads one weight word (4 k) per row, splits it into the even and odd bytes as 16-bit pairs
 * (SXTB16, and SXTB16 of the word rotated by 8), and meets each column's int16 words (k0, k2)
 * and (k1, k3) in one SMLAD each: 16 multiply-accumulates in 2 + 4 loads, 4 SXTB16 and 8
 * SMLAD. The products of int8 and uint8 fit 16 x 16 bits and the sums wrap modulo 2^32 as
 * the portable kernel's: the same integers, bit for bit. */
static inline __attribute__((always_inline)) void o2e_qdsp_2x2_(size_t K4, const int8_t *a,
                                                                const uint8_t *b, int32_t *acc,
                                                                int r, size_t j) {
  int32_t c00 = 0, c01 = 0, c10 = 0, c11 = 0;
  const int8_t *ap = a + r * 4;
  const uint8_t *bp = b + j * 8;
  size_t k = K4;
  uint32_t x0e, x0o, x1e, x1o, w, t;
  /* inline assembly: 18 instructions per step, where gcc 12's C (rotates apart from SXTB16,
   * a spilled loop bound) took 19-20 and varied with -mcpu's scheduling. LDRD needs word
   * alignment: the panels (arena scratch) and packed weights are 64-byte aligned. */
#define O2E_QDSP_ROW_(c0, c1)                                                                   \
  "sxtb16 %[t], %[w]\n\t"                                                                       \
  "smlad %[" #c0 "], %[t], %[x0e], %[" #c0 "]\n\t"                                               \
  "smlad %[" #c1 "], %[t], %[x1e], %[" #c1 "]\n\t"                                               \
  "sxtb16 %[t], %[w], ror #8\n\t"                                                                \
  "smlad %[" #c0 "], %[t], %[x0o], %[" #c0 "]\n\t"                                               \
  "smlad %[" #c1 "], %[t], %[x1o], %[" #c1 "]\n\t"
#define O2E_QDSP_STEP_                                                                          \
  "ldrd %[x1e], %[x1o], [%[bp], #8]\n\t"                                                        \
  "ldrd %[x0e], %[x0o], [%[bp]], #128\n\t"                                                      \
  "ldr %[w], [%[ap], #4]\n\t" O2E_QDSP_ROW_(c10, c11) "ldr %[w], [%[ap]], #32\n\t"              \
      O2E_QDSP_ROW_(c00, c01)
#define O2E_QDSP_OPS_                                                                           \
  : [c00] "+r"(c00), [c01] "+r"(c01), [c10] "+r"(c10), [c11] "+r"(c11), [ap] "+r"(ap),          \
    [bp] "+r"(bp), [k] "+r"(k), [x0e] "=&r"(x0e), [x0o] "=&r"(x0o), [x1e] "=&r"(x1e),           \
    [x1o] "=&r"(x1o), [w] "=&r"(w), [t] "=&r"(t)                                                \
  :                                                                                             \
  : "cc", "memory"
  k = K4 / 2; /* two steps per iteration */
  if (k) __asm__("1:\n\t" O2E_QDSP_STEP_ O2E_QDSP_STEP_ "subs %[k], %[k], #1\n\t"
                 "bne 1b" O2E_QDSP_OPS_);
  if (K4 & 1) __asm__(O2E_QDSP_STEP_ O2E_QDSP_OPS_);
#undef O2E_QDSP_OPS_
#undef O2E_QDSP_STEP_
#undef O2E_QDSP_ROW_
  acc[r * 16 + j] = c00;
  acc[r * 16 + j + 1] = c01;
  acc[(r + 1) * 16 + j] = c10;
  acc[(r + 1) * 16 + j + 1] = c11;
}

/* One column (a fully connected layer at batch 1), rows r .. r + 3: the column's two words
 * per step serve four rows (each: a weight word, 2 SXTB16, 2 SMLAD), 21 instructions per 16
 * multiply-accumulates. Inline assembly: gcc 12 keeps the rotate apart from SXTB16 and loads
 * the weights one word at a time (25 per 16). K4 >= 1. */
static inline __attribute__((always_inline)) void o2e_qdsp_col4_(size_t K4, const int8_t *a,
                                                                 const uint8_t *b, int32_t *acc,
                                                                 int r, int packed) {
  int32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  const int8_t *ap = a + r * 4;
  const uint8_t *bp = b;
  size_t k = K4;
  uint32_t xe, xo, w0, w1, t;
#define O2E_QDSP_ROW_(w, c)                                                                     \
  "sxtb16 %[t], %[" #w "]\n\t"                                                                  \
  "smlad %[" #c "], %[t], %[xe], %[" #c "]\n\t"                                                  \
  "sxtb16 %[" #w "], %[" #w "], ror #8\n\t"                                                       \
  "smlad %[" #c "], %[" #w "], %[xo], %[" #c "]\n\t"
  /* b: a 16-column panel (step 128 bytes), or o2e_qgemv's packed vector (step 8) */
#define O2E_QDSP_COL_(bstep)                                                                    \
  __asm__("1:\n\t"                                                                              \
          "ldrd %[xe], %[xo], [%[bp]], #" bstep "\n\t"                                          \
          "ldrd %[w0], %[w1], [%[ap]], #8\n\t" O2E_QDSP_ROW_(w0, c0) O2E_QDSP_ROW_(w1, c1)     \
          "ldrd %[w0], %[w1], [%[ap]], #24\n\t" O2E_QDSP_ROW_(w0, c2) O2E_QDSP_ROW_(w1, c3)    \
          "subs %[k], %[k], #1\n\t"                                                             \
          "bne 1b"                                                                             \
          : [c0] "+r"(c0), [c1] "+r"(c1), [c2] "+r"(c2), [c3] "+r"(c3), [ap] "+r"(ap),          \
            [bp] "+r"(bp), [k] "+r"(k), [xe] "=&r"(xe), [xo] "=&r"(xo), [w0] "=&r"(w0),         \
            [w1] "=&r"(w1), [t] "=&r"(t)                                                        \
          :                                                                                     \
          : "cc", "memory")
  if (packed)
    O2E_QDSP_COL_("8");
  else
    O2E_QDSP_COL_("128");
#undef O2E_QDSP_COL_
#undef O2E_QDSP_ROW_
  acc[r * 16] = c0;
  acc[(r + 1) * 16] = c1;
  acc[(r + 2) * 16] = c2;
  acc[(r + 3) * 16] = c3;
}
#endif

#if !defined(O2E_Q_VNNI) && !defined(O2E_Q_AVX2) && !defined(O2E_Q_SDOT) && !defined(O2E_Q_NEON) && \
    !defined(O2E_Q_DSP)
/* The portable kernel on columns [0, nc) (inlined with nc = 16 a constant for full panels). */
static inline __attribute__((always_inline)) void o2e_qkernel_cols_(size_t K4, const int8_t *a,
                                                                    const uint8_t *b,
                                                                    int32_t *acc, size_t nc) {
  uint32_t c[8][16];
  memset(c, 0, sizeof c);
  for (size_t k = 0; k < K4; ++k, a += 32, b += 64)
    for (int r = 0; r < 8; ++r)
      for (size_t j = 0; j < nc; ++j)
        for (int t = 0; t < 4; ++t)
          c[r][j] += (uint32_t)((int32_t)a[r * 4 + t] * (int32_t)b[j * 4 + t]);
  for (int r = 0; r < 8; ++r)
    for (size_t j = 0; j < nc; ++j) acc[r * 16 + j] = (int32_t)c[r][j];
}
#endif

/* acc[r][j] (8 x 16 int32) = sum over K4 steps of a[k4][r][0..3] . b[k4][j][0..3] for the
 * columns j < ncol (AVX2 skips the 4-column passes past them; the others compute all 16) */
static inline void o2e_qkernel(size_t K4, const int8_t *a, const uint8_t *b, int32_t *acc,
                               size_t ncol) {
  (void)ncol;
#if defined(O2E_Q_VNNI)
  /* the weights are broadcast straight from memory (vpdpbusd's {1to16} operand): a
   * broadcast from a general register would compete with vpdpbusd for port 5. Inline
   * assembly for the reason given at o2e_qkernel2. */
#define O2E_QV1(r, i) "vpdpbusd " #r "*4(%[a])%{1to16%}, %[x], %[c" #i "]\n\t"
#define O2E_QV4(r0, p0, p1, p2, p3)                                                             \
  __asm__(O2E_QV1(r0, 0) O2E_QV1((r0 + 1), 1) O2E_QV1((r0 + 2), 2) O2E_QV1((r0 + 3), 3)         \
          : [c0] "+v"(p0), [c1] "+v"(p1), [c2] "+v"(p2), [c3] "+v"(p3)                          \
          : [a] "r"(a), [x] "v"(x)                                                              \
          : "memory")
  __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
          c7 = c0;
  for (size_t k = 0; k < K4; ++k, a += 32, b += 64) {
    const __m512i x = _mm512_loadu_si512((const void *)b);
    O2E_QPREFETCH(a);
    O2E_QV4(0, c0, c1, c2, c3);
    O2E_QV4(4, c4, c5, c6, c7);
  }
#undef O2E_QV4
#undef O2E_QV1
  _mm512_storeu_si512(acc, c0), _mm512_storeu_si512(acc + 16, c1);
  _mm512_storeu_si512(acc + 32, c2), _mm512_storeu_si512(acc + 48, c3);
  _mm512_storeu_si512(acc + 64, c4), _mm512_storeu_si512(acc + 80, c5);
  _mm512_storeu_si512(acc + 96, c6), _mm512_storeu_si512(acc + 112, c7);
#elif defined(O2E_Q_AVX2)
  /* b holds int16 sub-panels (o2e_qstep_store). 4 passes of 8 rows x 4 columns (11 ymm):
   * each step's 8 x 4 weights are sign-extended once per pass (rows 0-3, rows 4-7: dword
   * pairs (k0 k1), (k2 k3) of each row), a column's 4 activations are broadcast as one qword
   * from memory and vpmaddwd sums pairs exactly into int32; the inner loop is loads,
   * 2 vpmovsxbw, 8 vpmaddwd and 8 vpaddd per step. The two partial sums of a row are added
   * and the 8 x 4 tile transposed into acc's rows at the end.
   * (vpmaddubsw, twice the multiply-adds per instruction, saturates unless every weight pair
   * of a row has |w0| + |w1| <= 128 on each sign: no row of the zoo models' quantized layers
   * passes, about a quarter of their pairs do not, so it is not used.) */
  /* (gcc 12 copies every _mm256_add_epi32 accumulator through a spare register and the
   * stack here; GNU vector += and a do-while (K4 >= 1: K >= 1) keep them in place.) */
  typedef int o2e_v8si __attribute__((vector_size(32)));
  const int16_t *b16 = (const int16_t *)(const void *)b;
  for (int cq = 0; cq < 4 && (size_t)cq * 4 < ncol; ++cq) {
    o2e_v8si l0 = {0}, l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0, h3 = l0;
    const int8_t *ap = a;
    const int16_t *bp = b16 + cq * K4 * 16;
    size_t k = K4;
    do {
      if (cq == 0) O2E_QPREFETCH(ap);
      const __m256i wl = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)ap));
      const __m256i wh = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(ap + 16)));
      __m256i x = _mm256_set1_epi64x(*(const o2e_qi64 *)bp);
      l0 += (o2e_v8si)_mm256_madd_epi16(wl, x);
      h0 += (o2e_v8si)_mm256_madd_epi16(wh, x);
      x = _mm256_set1_epi64x(*(const o2e_qi64 *)(bp + 4));
      l1 += (o2e_v8si)_mm256_madd_epi16(wl, x);
      h1 += (o2e_v8si)_mm256_madd_epi16(wh, x);
      x = _mm256_set1_epi64x(*(const o2e_qi64 *)(bp + 8));
      l2 += (o2e_v8si)_mm256_madd_epi16(wl, x);
      h2 += (o2e_v8si)_mm256_madd_epi16(wh, x);
      x = _mm256_set1_epi64x(*(const o2e_qi64 *)(bp + 12));
      l3 += (o2e_v8si)_mm256_madd_epi16(wl, x);
      h3 += (o2e_v8si)_mm256_madd_epi16(wh, x);
      ap += 32, bp += 16;
    } while (--k);
    /* hadd: lane 0 rows 0 1 4 5, lane 1 rows 2 3 6 7; permute: rows 0..7 of one column */
#define O2E_QCOL(l, h) _mm256_permute4x64_epi64(_mm256_hadd_epi32((__m256i)l, (__m256i)h), 0xD8)
    const __m256i c0 = O2E_QCOL(l0, h0), c1 = O2E_QCOL(l1, h1), c2 = O2E_QCOL(l2, h2),
                  c3 = O2E_QCOL(l3, h3);
#undef O2E_QCOL
    /* 4 x 4 transposes in each 128-bit lane: lane 0 rows 0-3, lane 1 rows 4-7 */
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i u[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                          _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
    for (int r = 0; r < 4; ++r) {
      _mm_storeu_si128((__m128i *)(acc + r * 16 + cq * 4), _mm256_castsi256_si128(u[r]));
      _mm_storeu_si128((__m128i *)(acc + (r + 4) * 16 + cq * 4),
                       _mm256_extracti128_si256(u[r], 1));
    }
  }
#elif defined(O2E_Q_SDOT)
  /* 4 rows x 16 columns per pass; b ^ 0x80 = b - 128 as int8, corrected by the caller */
  const int8x16_t f = vdupq_n_s8((int8_t)-128);
  for (int rh = 0; rh < 2; ++rh) {
    int32x4_t c[4][4];
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 4; ++q) c[r][q] = vdupq_n_s32(0);
    const int8_t *ap = a + rh * 16;
    const uint8_t *bp = b;
    for (size_t k = 0; k < K4; ++k, ap += 32, bp += 64) {
      int8x16_t bv[4];
      for (int q = 0; q < 4; ++q) bv[q] = veorq_s8(vreinterpretq_s8_u8(vld1q_u8(bp + 16 * q)), f);
      const int8x16_t wv = vld1q_s8(ap); /* 4 rows x 4 k */
      for (int q = 0; q < 4; ++q) {
        c[0][q] = vdotq_laneq_s32(c[0][q], bv[q], wv, 0);
        c[1][q] = vdotq_laneq_s32(c[1][q], bv[q], wv, 1);
        c[2][q] = vdotq_laneq_s32(c[2][q], bv[q], wv, 2);
        c[3][q] = vdotq_laneq_s32(c[3][q], bv[q], wv, 3);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 4; ++q) vst1q_s32(acc + (rh * 4 + r) * 16 + q * 4, c[r][q]);
  }
#elif defined(O2E_Q_NEON)
  /* 4 rows x 16 columns per pass; vld4 splits the 4 k of each column, widened to int16 */
  for (int rh = 0; rh < 2; ++rh) {
    int32x4_t c[4][4];
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 4; ++q) c[r][q] = vdupq_n_s32(0);
    const int8_t *ap = a + rh * 16;
    const uint8_t *bp = b;
    for (size_t k = 0; k < K4; ++k, ap += 32, bp += 64) {
      const uint8x16x4_t bv = vld4q_u8(bp); /* val[t][j] = column j, k t */
      const int16x8_t w01 = vmovl_s8(vld1_s8(ap));     /* rows 0, 1 x 4 k */
      const int16x8_t w23 = vmovl_s8(vld1_s8(ap + 8)); /* rows 2, 3 x 4 k */
      for (int t = 0; t < 4; ++t) {
        const int16x8_t lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(bv.val[t])));
        const int16x8_t hi = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(bv.val[t])));
        const int16x4_t b0 = vget_low_s16(lo), b1 = vget_high_s16(lo);
        const int16x4_t b2 = vget_low_s16(hi), b3 = vget_high_s16(hi);
        const int16x4_t wa = vget_low_s16(w01), wb = vget_high_s16(w01);
        const int16x4_t wc = vget_low_s16(w23), wd = vget_high_s16(w23);
#define O2E_QROW(r, wr)                                                                        \
  c[r][0] = vmlal_n_s16(c[r][0], b0, wr[t]);                        \
  c[r][1] = vmlal_n_s16(c[r][1], b1, wr[t]);                                                   \
  c[r][2] = vmlal_n_s16(c[r][2], b2, wr[t]);                                                   \
  c[r][3] = vmlal_n_s16(c[r][3], b3, wr[t]);
        O2E_QROW(0, wa)
        O2E_QROW(1, wb)
        O2E_QROW(2, wc)
        O2E_QROW(3, wd)
#undef O2E_QROW
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 4; ++q) vst1q_s32(acc + (rh * 4 + r) * 16 + q * 4, c[r][q]);
  }
#elif defined(O2E_Q_DSP)
  /* column pairs up to ncol (a 16-column panel's padding columns are zeros: an odd last
   * column computes one unread neighbour) */
  const size_t nc = ncol < 16 ? ncol : 16;
  if (nc == 1) {
    o2e_qdsp_col4_(K4, a, b, acc, 0, 0);
    o2e_qdsp_col4_(K4, a, b, acc, 4, 0);
    return;
  }
  for (int r = 0; r < 8; r += 2)
    for (size_t j = 0; j < nc; j += 2) o2e_qdsp_2x2_(K4, a, b, acc, r, j);
#else
  /* only the ncol columns the caller reads: a batch-1 fully connected layer (ncol 1) did 16
   * times its work here (issue 31: the portable kernel is what a Cortex-M runs) */
  if (ncol >= 16)
    o2e_qkernel_cols_(K4, a, b, acc, 16);
  else
    o2e_qkernel_cols_(K4, a, b, acc, ncol);
#endif
}

#if defined(O2E_Q_VNNI)
/* Two adjacent panels (8 x 32): 16 accumulators, each weight broadcast serves two columns
 * blocks. b2 is the second panel. One step is inline assembly: with the intrinsics, gcc 12
 * compiled this loop (once inlined into a generated model, not in a small harness) with
 * accumulators copied between registers and spilled to the stack every step, which halved
 * its speed (1.1 against 0.57 ms on a 256x2304x224 product). AT&T order: vpdpbusd w, x, c
 * is c += x (u8) . w (s8) per dword. */
#define O2E_QV2(r, i)                                                                           \
  "vpbroadcastd " #r "*4(%[a]), %[t]\n\t"                                                     \
  "vpdpbusd %[t], %[x], %[c" #i "]\n\t"                                                         \
  "vpdpbusd %[t], %[y], %[d" #i "]\n\t"
/* rows r0..r0+3 of one step (an asm statement takes at most 30 operands, "+v" counts 2) */
#define O2E_QV4(r0, p0, p1, p2, p3, q0, q1, q2, q3)                                             \
  __asm__(O2E_QV2(r0, 0) O2E_QV2((r0 + 1), 1) O2E_QV2((r0 + 2), 2) O2E_QV2((r0 + 3), 3)                 \
          : [c0] "+v"(p0), [c1] "+v"(p1), [c2] "+v"(p2), [c3] "+v"(p3), [d0] "+v"(q0),          \
            [d1] "+v"(q1), [d2] "+v"(q2), [d3] "+v"(q3), [t] "=&v"(t)                          \
          : [a] "r"(a), [x] "v"(x), [y] "v"(y)                                                  \
          : "memory")
static inline void o2e_qkernel2(size_t K4, const int8_t *a, const uint8_t *b, const uint8_t *b2,
                                int32_t *acc, int32_t *acc2) {
  __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
          c7 = c0, d0 = c0, d1 = c0, d2 = c0, d3 = c0, d4 = c0, d5 = c0, d6 = c0, d7 = c0, t;
  for (size_t k = 0; k < K4; ++k, a += 32, b += 64, b2 += 64) {
    const __m512i x = _mm512_loadu_si512((const void *)b), y = _mm512_loadu_si512((const void *)b2);
    O2E_QPREFETCH(a);
    O2E_QV4(0, c0, c1, c2, c3, d0, d1, d2, d3);
    O2E_QV4(4, c4, c5, c6, c7, d4, d5, d6, d7);
  }
  _mm512_storeu_si512(acc, c0), _mm512_storeu_si512(acc + 16, c1);
  _mm512_storeu_si512(acc + 32, c2), _mm512_storeu_si512(acc + 48, c3);
  _mm512_storeu_si512(acc + 64, c4), _mm512_storeu_si512(acc + 80, c5);
  _mm512_storeu_si512(acc + 96, c6), _mm512_storeu_si512(acc + 112, c7);
  _mm512_storeu_si512(acc2, d0), _mm512_storeu_si512(acc2 + 16, d1);
  _mm512_storeu_si512(acc2 + 32, d2), _mm512_storeu_si512(acc2 + 48, d3);
  _mm512_storeu_si512(acc2 + 64, d4), _mm512_storeu_si512(acc2 + 80, d5);
  _mm512_storeu_si512(acc2 + 96, d6), _mm512_storeu_si512(acc2 + 112, d7);
}

/* o2e_qkernel2 with the requantisation done in registers, for output rows of contiguous
 * columns (yp = 1): the sums start from the bias (the same wrapping int32 sum as adding it
 * after), then o2e_qrequant_row's instructions per row and panel, stored straight to y (the
 * second panel's n2 columns masked; rows past mr not stored). A layer of small K (MobileNet's
 * expansions: K = 24, 32) spent as long storing the 16 accumulators and requantising them
 * from memory as computing them. */
static inline void o2e_qkernel2_rq(size_t K4, const int8_t *a, const uint8_t *b,
                                   const uint8_t *b2, const int32_t *bias, const float *scale,
                                   float flo, float fhi, int32_t zp, uint8_t *yo, size_t ym,
                                   size_t mr, size_t n2) {
  /* the tile's rows copied by a loop to mr: indexing bias[r] under (r < mr) for constant r
   * is what gcc's -Warray-bounds reports on a layer of fewer than 8 channels */
  int32_t bb[O2E_QMR] = {0};
  float ss[O2E_QMR] = {0};
  for (size_t r = 0; r < mr; ++r) bb[r] = bias[r], ss[r] = scale[r];
#define O2E_QB(r) _mm512_set1_epi32(bb[r])
  __m512i c0 = O2E_QB(0), c1 = O2E_QB(1), c2 = O2E_QB(2), c3 = O2E_QB(3), c4 = O2E_QB(4),
          c5 = O2E_QB(5), c6 = O2E_QB(6), c7 = O2E_QB(7), d0 = c0, d1 = c1, d2 = c2, d3 = c3,
          d4 = c4, d5 = c5, d6 = c6, d7 = c7, t;
#undef O2E_QB
  for (size_t k = 0; k < K4; ++k, a += 32, b += 64, b2 += 64) {
    const __m512i x = _mm512_loadu_si512((const void *)b), y = _mm512_loadu_si512((const void *)b2);
    O2E_QPREFETCH(a);
    O2E_QV4(0, c0, c1, c2, c3, d0, d1, d2, d3);
    O2E_QV4(4, c4, c5, c6, c7, d4, d5, d6, d7);
  }
  /* Two rows at a time: each sum scaled and held under hi - zp in float (min with the bound
   * first: a NaN gives NaN, converted to INT_MIN, so lo below, as max-then-min did), rounded,
   * + zp, then the four vectors narrowed by two saturating packs (int16, then uint8 or int8),
   * the lower bound applied to the bytes, and one vpermd puts each row's 32 bytes together:
   * the same bytes as clamping to [lo - zp, hi - zp] in float (rounding is monotonic and
   * the bounds are integers), in 4 fewer instructions per vector than vpmovdb's narrowing. */
  const __m512 hi = _mm512_set1_ps(fhi);
  const __m512i z = _mm512_set1_epi32(zp);
  const int sgn = flo + (float)zp < 0.0f; /* an int8 output: signed packs */
  const __m512i blo = _mm512_set1_epi8((char)(int32_t)(flo + (float)zp));
  const __m512i rowix = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __mmask32 k2 = (__mmask32)(0xFFFFu | (((1u << n2) - 1) << 16)); /* n2 <= 16 */
#define O2E_QRQ1(v, s)                                                                          \
  _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(hi, _mm512_mul_ps(_mm512_cvtepi32_ps(v), s))), z)
#define O2E_QRQ2(r, cv, dv, cw, dw)                                                             \
  if ((r) < mr) {                                                                               \
    const __m512 s0_ = _mm512_set1_ps(ss[r]), s1_ = _mm512_set1_ps(ss[(r) + 1]);              \
    const __m512i a_ = _mm512_packs_epi32(O2E_QRQ1(cv, s0_), O2E_QRQ1(dv, s0_));                \
    const __m512i b_ = _mm512_packs_epi32(O2E_QRQ1(cw, s1_), O2E_QRQ1(dw, s1_));                \
    __m512i q_ = sgn ? _mm512_max_epi8(_mm512_packs_epi16(a_, b_), blo)                         \
                     : _mm512_max_epu8(_mm512_packus_epi16(a_, b_), blo);                       \
    q_ = _mm512_permutexvar_epi32(rowix, q_);                                                   \
    if (n2 == O2E_QNR) { /* whole rows of 32: plain stores */                                   \
      _mm256_storeu_si256((__m256i *)(yo + (r) * ym), _mm512_castsi512_si256(q_));              \
      if ((r) + 1 < mr)                                                                         \
        _mm256_storeu_si256((__m256i *)(yo + ((r) + 1) * ym), _mm512_extracti64x4_epi64(q_, 1)); \
    } else {                                                                                    \
      _mm256_mask_storeu_epi8(yo + (r) * ym, k2, _mm512_castsi512_si256(q_));                   \
      if ((r) + 1 < mr)                                                                         \
        _mm256_mask_storeu_epi8(yo + ((r) + 1) * ym, k2, _mm512_extracti64x4_epi64(q_, 1));     \
    }                                                                                           \
  }
  O2E_QRQ2(0, c0, d0, c1, d1) O2E_QRQ2(2, c2, d2, c3, d3)
  O2E_QRQ2(4, c4, d4, c5, d5) O2E_QRQ2(6, c6, d6, c7, d7)
#undef O2E_QRQ2
#undef O2E_QRQ1
}
#undef O2E_QV4
#undef O2E_QV2
#endif

#if defined(O2E_Q_VNNI)
/* up to this many columns of a panel run as single columns (o2e_qkernel_col), not a panel */
#define O2E_QCOLS 3
/* One column (a matrix-vector product: a classifier's Gemm at batch 1), 8 rows: the column's
 * 4 bytes of each step broadcast against the step's 8 x 4 weights in one 256-bit vpdpbusd,
 * where o2e_qkernel would compute 16 columns for it. 4 accumulators over consecutive steps
 * hide vpdpbusd's latency. Writes acc[r * 16] (column 0 of o2e_qkernel's layout; b + 4 j and
 * acc + j: column j). */
static inline void o2e_qkernel_col(size_t K4, const int8_t *a, const uint8_t *b, int32_t *acc) {
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
#define O2E_QCOL1(c, i)                                                                          \
  c = _mm256_dpbusd_epi32(c, _mm256_set1_epi32(*(const o2e_qi32 *)(b + (i) * 64)),              \
                          _mm256_loadu_si256((const __m256i *)(a + (i) * 32)))
  for (size_t n = K4 / 4; n; --n, a += 128, b += 256) {
    O2E_QPREFETCH(a);
    O2E_QPREFETCH(a + 64);
    O2E_QCOL1(c0, 0);
    O2E_QCOL1(c1, 1);
    O2E_QCOL1(c2, 2);
    O2E_QCOL1(c3, 3);
  }
  for (size_t n = K4 % 4; n; --n, a += 32, b += 64) O2E_QCOL1(c0, 0);
#undef O2E_QCOL1
  int32_t t[8];
  _mm256_storeu_si256((__m256i *)t,
                      _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)));
  for (int r = 0; r < 8; ++r) acc[r * 16] = t[r];
}
#endif

#if defined(__arm__) && !defined(__aarch64__) && defined(__ARM_FP) && (__ARM_FP & 4) &&        \
    defined(__thumb2__)
/* Cortex-M with a single-precision FPU: float -> int32 rounded to nearest even in one VCVTR */
#define O2E_Q_VCVTR 1
#include <arm_acle.h> /* __usat / __ssat */
static inline int32_t o2e_qvcvtr_(float f) {
  float r;
  int32_t q;
  __asm__("vcvtr.s32.f32 %0, %1" : "=t"(r) : "t"(f));
  memcpy(&q, &r, 4);
  return q;
}
#endif

/* Requantization of one row of n sums: onnxruntime's order (float product, clamp to the
 * output range shifted by the zero point, round half to even, add the zero point). */
static inline void o2e_qrequant_row(const int32_t *acc, size_t n, int32_t bias, float scale,
                                    float flo, float fhi, int32_t zp, uint8_t *y, size_t ys) {
  size_t j = 0;
#if defined(O2E_Q_VNNI)
  if (ys == 1) {
    const __m512 s = _mm512_set1_ps(scale), lo = _mm512_set1_ps(flo), hi = _mm512_set1_ps(fhi);
    const __m512i b = _mm512_set1_epi32(bias), z = _mm512_set1_epi32(zp);
    for (; j + 16 <= n; j += 16) {
      const __m512i v = _mm512_add_epi32(_mm512_loadu_si512(acc + j), b);
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
      f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), z); /* MXCSR: nearest-even */
      _mm_storeu_si128((__m128i *)(y + j), _mm512_cvtepi32_epi8(q));
    }
    if (j < n) { /* the last 1..15 with masks */
      const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
      const __m512i v = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + j), b);
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
      f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), z);
      _mm_mask_storeu_epi8(y + j, k, _mm512_cvtepi32_epi8(q));
      return;
    }
  }
#elif defined(O2E_Q_AVX2)
  if (ys == 1) {
    /* the same order 16 at a time; the int32 results lie in [lo, hi] (within -128..255), so
     * vpackssdw keeps them and the low bytes are kept by the mask before vpackuswb */
    const __m256 s = _mm256_set1_ps(scale), lo = _mm256_set1_ps(flo), hi = _mm256_set1_ps(fhi);
    const __m256i b = _mm256_set1_epi32(bias), z = _mm256_set1_epi32(zp);
    const __m256i m8 = _mm256_set1_epi16(0xFF), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; j + 16 <= n; j += 16) {
      __m256 f0 = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + j)), b)),
          s);
      __m256 f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(
                                    _mm256_loadu_si256((const __m256i *)(acc + j + 8)), b)),
                                s);
      f0 = _mm256_min_ps(_mm256_max_ps(f0, lo), hi);
      f1 = _mm256_min_ps(_mm256_max_ps(f1, lo), hi);
      const __m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(f0), z); /* nearest-even */
      const __m256i q1 = _mm256_add_epi32(_mm256_cvtps_epi32(f1), z);
      /* lanes: (0-3, 8-11 | 4-7, 12-15) as int16, then bytes; dwords reordered to 0..15 */
      const __m256i w = _mm256_and_si256(_mm256_packs_epi32(q0, q1), m8);
      const __m256i v = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w, w), order);
      _mm_storeu_si128((__m128i *)(y + j), _mm256_castsi256_si128(v));
    }
  }
#elif defined(O2E_Q_VCVTR)
  /* VCVTR rounds in FPSCR's mode (round to nearest even, as nearbyintf: a library call on
   * the M4) and saturates; the clamp then moves after the rounding: the bounds are integers
   * and rounding is monotonic, so clamp(round(f)) = round(clamp(f)) for every f. */
  const int32_t ilo = (int32_t)flo, ihi = (int32_t)fhi;
#define O2E_QRQ_(j) o2e_qvcvtr_((float)(int32_t)((uint32_t)acc[j] + (uint32_t)bias) * scale)
#if defined(__ARM_FEATURE_SAT) && defined(__ARM_FEATURE_DSP)
  /* the full uint8 / int8 range (no fused Relu or Clip): one USAT / SSAT is the clamp (QADD:
   * VCVTR saturates at +-2^31, where q + zp would wrap) */
  if (ilo + zp == 0 && ihi + zp == 255) {
    for (; j < n; ++j) y[j * ys] = (uint8_t)__usat(__qadd(O2E_QRQ_(j), zp), 8);
    return;
  }
  if (ilo + zp == -128 && ihi + zp == 127) {
    for (; j < n; ++j) y[j * ys] = (uint8_t)__ssat(__qadd(O2E_QRQ_(j), zp), 8);
    return;
  }
#endif
  for (; j < n; ++j) {
    const int32_t q = O2E_QRQ_(j);
    y[j * ys] = (uint8_t)((q < ilo ? ilo : (q > ihi ? ihi : q)) + zp);
  }
#undef O2E_QRQ_
  return;
#endif
  for (; j < n; ++j) {
    float f = (float)(int32_t)((uint32_t)acc[j] + (uint32_t)bias) * scale;
    f = f < flo ? flo : (f > fhi ? fhi : f);
    y[j * ys] = (uint8_t)((int32_t)nearbyintf(f) + zp);
  }
}

#if defined(O2E_Q_DSP) && defined(O2E_Q_VCVTR) && defined(__ARM_FEATURE_SAT)
#define O2E_Q_DSP_FUSED 1
/* One sum requantised (o2e_qrequant_row's VCVTR path; mode 1: the full uint8 range, 2: int8;
 * 3 / 4: uint8 / int8 up to the top of the range, from lo = ilo + zp) */
static inline __attribute__((always_inline)) uint8_t o2e_qrq1_(int32_t v, int32_t b, float s,
                                                               int32_t ilo, int32_t ihi,
                                                               int32_t zp, int mode) {
  const int32_t q = o2e_qvcvtr_((float)(int32_t)((uint32_t)v + (uint32_t)b) * s);
  /* QADD: VCVTR saturates at +-2^31, where q + zp would wrap */
  if (mode == 1) return (uint8_t)__usat(__qadd(q, zp), 8);
  if (mode == 2) return (uint8_t)__ssat(__qadd(q, zp), 8);
  if (mode == 3 || mode == 4) { /* a fused Relu: the range's top, the zero point's bottom */
    const int32_t v = mode == 3 ? (int32_t)__usat(__qadd(q, zp), 8) : __ssat(__qadd(q, zp), 8);
    return (uint8_t)(v < ilo + zp ? ilo + zp : v);
  }
  return (uint8_t)((q < ilo ? ilo : (q > ihi ? ihi : q)) + zp);
}

/* Rows m0 .. m0 + 7 (those below M) x the np columns of one panel, each 2 x 2 tile
 * requantised as it leaves the registers (y: element (m0, p0)): no accumulator tile in
 * memory, the row pair's bias and scale loaded once per panel. */
static inline __attribute__((always_inline)) void o2e_qdsp_rows_(
    size_t M, size_t m0, size_t np, size_t K4, const int8_t *ap, const uint8_t *bp,
    const int32_t *bias, const float *scale, int32_t ilo, int32_t ihi, int32_t zp, uint8_t *y,
    size_t ym, size_t yp, int mode) {
  const size_t mr = M - m0 < O2E_QMR ? M - m0 : O2E_QMR;
  for (size_t r = 0; r < mr; r += 2) {
    const int two = r + 1 < mr;
    const int32_t b0 = bias[m0 + r], b1 = two ? bias[m0 + r + 1] : 0;
    const float s0 = scale[m0 + r], s1 = two ? scale[m0 + r + 1] : 0.0f;
    uint8_t *y0 = y + r * ym, *y1 = y0 + ym;
    for (size_t j = 0; j < np; j += 2) {
      int32_t t[32];
      o2e_qdsp_2x2_(K4, ap + r * 4, bp + j * 8, t, 0, 0);
      y0[j * yp] = o2e_qrq1_(t[0], b0, s0, ilo, ihi, zp, mode);
      if (j + 1 < np) y0[(j + 1) * yp] = o2e_qrq1_(t[1], b0, s0, ilo, ihi, zp, mode);
      if (two) {
        y1[j * yp] = o2e_qrq1_(t[16], b1, s1, ilo, ihi, zp, mode);
        if (j + 1 < np) y1[(j + 1) * yp] = o2e_qrq1_(t[17], b1, s1, ilo, ihi, zp, mode);
      }
    }
  }
}
#endif

/* Y = requant(A B + bias): M output channels, P columns, K depth. Element (m, p) of Y is at
 * y[m * ym + p * yp]. bias, rowsum (sum_k A[m][k], for the sdot path), scale: per m.
 * bpack: O2E_QPANEL_BYTES(K, P) bytes of packed B. (Blocking K so that a block of B stays in
 * L1 across the row tiles was measured slower on AVX-512 VNNI: 0.8 against 0.63 ms on a
 * 256x2304x196 product, the partial sums' loads and stores cost more than they save.) */
static inline void o2e_qgemm_cols_(size_t M, size_t P, size_t K, const int8_t *apack,
                                   const uint8_t *bpack, const int32_t *bias,
                                   const int32_t *rowsum, const float *scale, int32_t zp,
                                   int32_t lo, int32_t hi, uint8_t *y, size_t ym, size_t yp) {
  const size_t K4 = (K + 3) / 4;
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  int32_t acc[2][O2E_QMR * O2E_QNR] __attribute__((aligned(64)));
  (void)rowsum;
  for (size_t p0 = 0; p0 < P;) {
    const uint8_t *bp = bpack + (p0 / O2E_QNR) * K4 * O2E_QSTEP;
    size_t np = P - p0 < O2E_QNR ? P - p0 : O2E_QNR;
    int two = 0;
    (void)two;
#if defined(O2E_Q_VNNI)
    /* 17..19 columns left (a 7 x 7 map's 49 = 32 + 17): one panel, then the last 1..3 as
     * single columns, where a pair of panels computes 32 */
    two = P - p0 > O2E_QNR + O2E_QCOLS;
    if (two) np = P - p0 < 2 * O2E_QNR ? P - p0 : 2 * O2E_QNR;
#endif
    for (size_t m0 = 0; m0 < M; m0 += O2E_QMR) {
      const int8_t *ap = apack + (m0 / O2E_QMR) * K4 * 32;
      int32_t *t0 = acc[0], *t1 = acc[1];
#if defined(O2E_Q_DSP_FUSED)
      if (np >= 2) {
        const int32_t ilo = lo - zp, ihi = hi - zp;
        uint8_t *ym0 = y + m0 * ym + p0 * yp;
        if (lo == 0 && hi == 255)
          o2e_qdsp_rows_(M, m0, np, K4, ap, bp, bias, scale, ilo, ihi, zp, ym0, ym, yp, 1);
        else if (lo == -128 && hi == 127)
          o2e_qdsp_rows_(M, m0, np, K4, ap, bp, bias, scale, ilo, ihi, zp, ym0, ym, yp, 2);
        else if (lo >= 0 && hi == 255)
          o2e_qdsp_rows_(M, m0, np, K4, ap, bp, bias, scale, ilo, ihi, zp, ym0, ym, yp, 3);
        else if (lo >= -128 && hi == 127)
          o2e_qdsp_rows_(M, m0, np, K4, ap, bp, bias, scale, ilo, ihi, zp, ym0, ym, yp, 4);
        else
          o2e_qdsp_rows_(M, m0, np, K4, ap, bp, bias, scale, ilo, ihi, zp, ym0, ym, yp, 0);
        continue;
      }
#endif
#if defined(O2E_Q_VNNI)
      if (two && yp == 1) {
        o2e_qkernel2_rq(K4, ap, bp, bp + K4 * 64, bias + m0, scale + m0, flo, fhi, zp,
                        y + m0 * ym + p0, ym, M - m0 < O2E_QMR ? M - m0 : O2E_QMR, np - O2E_QNR);
        continue;
      }
      if (two)
        o2e_qkernel2(K4, ap, bp, bp + K4 * 64, acc[0], acc[1]);
      else if (np <= O2E_QCOLS)
        for (size_t j = 0; j < np; ++j) o2e_qkernel_col(K4, ap, bp + 4 * j, acc[0] + j);
      else
#endif
        o2e_qkernel(K4, ap, bp, acc[0], np);
      const size_t mr = M - m0 < O2E_QMR ? M - m0 : O2E_QMR;
      for (size_t r = 0; r < mr; ++r) {
        int32_t b = bias[m0 + r];
#if defined(O2E_Q_SDOT)
        b = (int32_t)((uint32_t)b + 128u * (uint32_t)rowsum[m0 + r]);
#endif
        uint8_t *yr = y + (m0 + r) * ym + p0 * yp;
        const size_t n0 = np < O2E_QNR ? np : O2E_QNR;
        o2e_qrequant_row(t0 + r * O2E_QNR, n0, b, scale[m0 + r], flo, fhi, zp, yr, yp);
        if (np > O2E_QNR)
          o2e_qrequant_row(t1 + r * O2E_QNR, np - O2E_QNR, b, scale[m0 + r], flo, fhi, zp,
                           yr + O2E_QNR * yp, yp);
      }
    }
    p0 += np;
  }
}

/* Columns wider than one pair of panels and at most two (a 7 x 7 map's 49): row tile after row
 * tile over all of them, so the second pair reads the tile's weights from L1 where a pass of
 * all the rows per pair streamed every weight again (ResNet50's 7 x 7 layers: 1 to 2.4 MB,
 * from L3). */
#define O2E_QWIDE(P) ((P) > 2 * O2E_QNR && (P) <= 4 * O2E_QNR)

static inline void o2e_qgemm(size_t M, size_t P, size_t K, const int8_t *apack, const uint8_t *bpack,
                      const int32_t *bias, const int32_t *rowsum, const float *scale,
                      int32_t zp, int32_t lo, int32_t hi, uint8_t *y, size_t ym, size_t yp) {
  if (O2E_QWIDE(P)) {
    const size_t K4 = (K + 3) / 4;
    for (size_t m0 = 0; m0 < M; m0 += O2E_QMR)
      o2e_qgemm_cols_(M - m0 < O2E_QMR ? M - m0 : O2E_QMR, P, K, apack + (m0 / O2E_QMR) * K4 * 32,
                      bpack, bias + m0, rowsum + m0, scale + m0, zp, lo, hi, y + m0 * ym, ym, yp);
    return;
  }
  o2e_qgemm_cols_(M, P, K, apack, bpack, bias, rowsum, scale, zp, lo, hi, y, ym, yp);
}

/* o2e_qgemm on activations packed 32 columns at a time (o2e_qpack_rows_at's source: K rows
 * at src + rowoff[k] or src + k * ld, P columns) into pk (O2E_QPANEL_BYTES(K, 32) bytes):
 * the chunk just packed is still in L1 / L2 when the kernel reads it, where a whole packed
 * matrix (up to megabytes, int16 on AVX2) is not, and the scratch is two panels. */
static inline void o2e_qgemm_rows(size_t M, size_t P, size_t K, const int8_t *apack,
                                  const uint8_t *src, size_t ld, const int32_t *rowoff,
                                  uint8_t flip, uint8_t *pk, const int32_t *bias,
                                  const int32_t *rowsum, const float *scale, int32_t zp,
                                  int32_t lo, int32_t hi, uint8_t *y, size_t ym, size_t yp) {
#if defined(O2E_Q_VNNI)
  if (O2E_QWIDE(P)) { /* pk: O2E_QPANEL_BYTES(K, 64) (kernels/int8/qgemm_kernels.py) */
    o2e_qpack_rows_at(src, ld, rowoff, K, P, flip, pk);
    o2e_qgemm(M, P, K, apack, pk, bias, rowsum, scale, zp, lo, hi, y, ym, yp);
    return;
  }
#endif
  for (size_t p0 = 0; p0 < P; p0 += 2 * O2E_QNR) {
    const size_t nc = P - p0 < 2 * O2E_QNR ? P - p0 : 2 * O2E_QNR;
    o2e_qpack_rows_at(src + p0, ld, rowoff, K, nc, flip, pk);
    o2e_qgemm(M, nc, K, apack, pk, bias, rowsum, scale, zp, lo, hi, y + p0 * yp, ym, yp);
  }
}


/* Whether o2e_qconv_planes computes only the real columns (AVX-512 VNNI + VBMI, and the widest
 * chunk of 32 columns spans at most 64 bytes of plane rows). */
static inline int o2e_qplanes_direct(size_t OW, size_t wp) {
#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
  return OW >= 1 && 31 + (31 / OW + 1) * (wp - OW) < 64;
#else
  (void)OW;
  (void)wp;
  return 0;
#endif
}

#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
/* Columns [p0, p0 + nc) (nc <= 32) of the real OH x OW output packed from the planes into the
 * two panels at pk, then o2e_qtr4x32_ per K4 step. A chunk over at most two output rows (every
 * chunk of a 28 x 28 or wider map): each k row's real columns are one or two runs of a plane
 * row, gathered by a masked load and a masked merging load wp - OW bytes on, rows k and k + 1
 * side by side by an insert (one run: no merging load; uint8 activations: no xor). Wider
 * spans: one masked load per row and a vpermt2b that compacts a pair of rows' real columns
 * into (r0 | r1), which cost more where both apply (ResNet50 int8's 56 x 56 3 x 3 layers 6 %
 * slower, its 7 x 7 stem 10 %; three runs per row at 14 x 14 measured no gain over it). */
static inline __attribute__((always_inline)) void o2e_qplanes_pack_(
    size_t OW, size_t wp, size_t K, const uint8_t *src,
                                     const int32_t *rowoff, uint8_t flip, size_t p0, size_t nc,
                                     uint8_t *pk) {
  const size_t K4 = (K + 3) / 4;
  const size_t e0 = (p0 / OW) * wp + p0 % OW;
  const __m512i t0 = o2e_qtr4x32_idx_(0), t1 = o2e_qtr4x32_idx_(1);
  const __m512i f = _mm512_set1_epi8((char)flip);
  const uint8_t *base = src + e0; /* base + rowoff[k]: one addressing mode */
  uint8_t *pan0 = pk, *pan1 = pk + K4 * 64;
  const size_t len1 = OW - p0 % OW; /* the chunk's columns in its first output row */
  if (nc <= len1 + OW) {
    const __m256i fh = _mm256_set1_epi8((char)flip);
    const size_t n1 = nc < len1 ? nc : len1;
    const __mmask32 m1 = n1 >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << n1) - 1);
    const __mmask32 m2 = (nc >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << nc) - 1)) & ~m1;
    const uint8_t *base2 = base + (wp - OW);
    /* rows past K: flip bytes, zero once flipped (their weights are zero anyway) */
#define O2E_QPH_(k)                                                                             \
  (k < K ? _mm256_mask_loadu_epi8(_mm256_maskz_loadu_epi8(m1, base + rowoff[k]), m2,            \
                                  base2 + rowoff[k])                                            \
         : fh)
#define O2E_QPH1_(k) (k < K ? _mm256_maskz_loadu_epi8(m1, base + rowoff[k]) : fh)
#define O2E_QPWX_(H, k) _mm512_inserti64x4(_mm512_castsi256_si512(H(k)), H((k) + 1), 1)
#define O2E_QPLOOPX_(H, fv)                                                                     \
  for (size_t k4 = 0; k4 < K4; ++k4)                                                            \
    o2e_qtr4x32_(O2E_QPWX_(H, 4 * k4), O2E_QPWX_(H, 4 * k4 + 2), t0, t1, fv, pan0 + k4 * 64,    \
                 pan1 + k4 * 64);
    /* one run (m2 empty) skips the merging loads; uint8 activations (flip 0) the xors */
    const __m512i z = _mm512_setzero_si512();
    if (m2 && flip)
      O2E_QPLOOPX_(O2E_QPH_, f)
    else if (m2)
      O2E_QPLOOPX_(O2E_QPH_, z)
    else if (flip)
      O2E_QPLOOPX_(O2E_QPH1_, f)
    else
      O2E_QPLOOPX_(O2E_QPH1_, z)
#undef O2E_QPLOOPX_
#undef O2E_QPWX_
#undef O2E_QPH1_
#undef O2E_QPH_
    return;
  }
  uint8_t idx[64];
  size_t span = 0;
  for (size_t j = 0; j < 32; ++j) {
    const size_t p = p0 + (j < nc ? j : 0);
    idx[j] = (uint8_t)((p / OW) * wp + p % OW - e0);
    idx[j + 32] = (uint8_t)(idx[j] + 64); /* the second row: vpermt2b's second source */
    if (idx[j] + 1u > span) span = idx[j] + 1u;
  }
  const __m512i ix = _mm512_loadu_si512(idx);
  const __mmask64 m = span >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << span) - 1);
#define O2E_QPL_(k) (k < K ? _mm512_maskz_loadu_epi8(m, base + rowoff[k]) : f)
  for (size_t k4 = 0; k4 < K4; ++k4) {
    const size_t k = k4 * 4;
    /* rows past K: flip bytes, zero once flipped (their weights are zero anyway) */
    const __m512i r01 = _mm512_permutex2var_epi8(O2E_QPL_(k), ix, O2E_QPL_(k + 1));
    const __m512i r23 = _mm512_permutex2var_epi8(O2E_QPL_(k + 2), ix, O2E_QPL_(k + 3));
    o2e_qtr4x32_(r01, r23, t0, t1, f, pan0 + k4 * 64, pan1 + k4 * 64);
  }
#undef O2E_QPL_
}
#endif

/* A stride-1 or strided convolution over o2e_qpad's / o2e_qphase's planes (rows of wp bytes,
 * OW of them real): the product over the OH * wp extended columns, then o2e_qcompact drops
 * the wp - OW extra ones per row into y (yext: M * OH * wp bytes of scratch). With AVX-512
 * VNNI and VBMI only the OH * OW real columns are computed: a chunk of 32 spans at most 64
 * bytes of a plane row (checked; else the extended path), loaded masked and compacted by one
 * vpermb per k row before the 4 x 16 byte transposes, and the results go straight to y.
 * ResNet50's 7 x 7 3 x 3 layers computed 63 columns for 49 (14 x 14: 224 for 196). */
static inline void o2e_qconv_planes(size_t M, size_t OH, size_t OW, size_t wp, size_t K,
                                    const int8_t *apack, const uint8_t *src,
                                    const int32_t *rowoff, uint8_t flip, uint8_t *pk,
                                    const int32_t *bias, const int32_t *rowsum,
                                    const float *scale, int32_t zp, int32_t lo, int32_t hi,
                                    uint8_t *yext, uint8_t *y) {
#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
  if (o2e_qplanes_direct(OW, wp)) {
    const size_t P = OH * OW;
    if (O2E_QWIDE(P)) { /* both pairs of panels packed (pk: O2E_QPANEL_BYTES(K, 64)) */
      const size_t K4 = (K + 3) / 4;
      o2e_qplanes_pack_(OW, wp, K, src, rowoff, flip, 0, 2 * O2E_QNR, pk);
      o2e_qplanes_pack_(OW, wp, K, src, rowoff, flip, 2 * O2E_QNR, P - 2 * O2E_QNR,
                        pk + 2 * K4 * 64);
      o2e_qgemm(M, P, K, apack, pk, bias, rowsum, scale, zp, lo, hi, y, P, 1);
      return;
    }
    for (size_t p0 = 0; p0 < P; p0 += 2 * O2E_QNR) {
      const size_t nc = P - p0 < 2 * O2E_QNR ? P - p0 : 2 * O2E_QNR;
      o2e_qplanes_pack_(OW, wp, K, src, rowoff, flip, p0, nc, pk);
      o2e_qgemm(M, nc, K, apack, pk, bias, rowsum, scale, zp, lo, hi, y + p0, P, 1);
    }
    return;
  }
#endif
  o2e_qgemm_rows(M, OH * wp, K, apack, src, 0, rowoff, flip, pk, bias, rowsum, scale, zp, lo, hi,
                 yext, OH * wp, 1);
  o2e_qcompact(yext, M, OH, OW, wp, y);
}

/* ---- two threads and more --------------------------------------------------------------
 * The generated code passes the threading runtime's o2e_parallel_for / o2e_parallel_thread
 * (runtime/o2e_gemm.h, included after this header) as pointers. Work units are (chunk of 32
 * columns, part of the output channels) pairs, chunk-major, so a thread's contiguous range
 * packs each chunk once; the channel parts (whole 8-row tiles) only split the small maps
 * (7 x 7: 2 chunks). Every output byte is the same sum over the same packed chunk with the
 * same requantisation whichever thread computes it: results do not depend on the split. */
#ifndef O2E_QPAR_TYPES
#define O2E_QPAR_TYPES
typedef void (*o2e_qpar_for)(int n, void (*fn)(void *ctx, int begin, int end), void *ctx);
typedef int (*o2e_qpar_thread)(void);
#endif
#define O2E_QPAR_UNITS 8 /* units a split aims at: O2E_PAR_CHUNKS per thread at 2 threads */

/* Channel parts of a product of M rows over nchunks column chunks: powers of two while the
 * units stay under O2E_QPAR_UNITS and each part keeps two 8-row tiles. */
static inline size_t o2e_qparts(size_t M, size_t nchunks) {
  const size_t tiles = (M + O2E_QMR - 1) / O2E_QMR;
  size_t parts = 1;
  while (nchunks * parts < O2E_QPAR_UNITS && tiles >= 4 * parts) parts *= 2;
  return parts;
}

typedef struct {
  size_t M, P, K; /* P: the columns computed (extended ones on the extended planes path) */
  const int8_t *apack;
  const uint8_t *src;
  size_t ld;
  const int32_t *rowoff;
  uint8_t flip;
  uint8_t *pk; /* slot bytes per thread */
  size_t slot;
  o2e_qpar_thread thread;
  const int32_t *bias, *rowsum;
  const float *scale;
  int32_t zp, lo, hi;
  uint8_t *y;
  size_t ym, yp;
  size_t parts, mpart; /* channel parts, rows per part (a multiple of O2E_QMR) */
  size_t OW, wp;        /* direct planes: real columns read from rows of wp bytes (else 0) */
} o2e_qgemm_par_args;

/* Units [u0, u1): the dimensions as arguments, so a model's per-layer wrapper
 * (kernels/int8/qgemm_kernels.py) passes them as constants and gets a specialised copy, as the
 * serial calls inlined into the model are (the generic o2e_qgemm_units_ reads them from a). */
static inline __attribute__((always_inline)) void o2e_qgemm_units_k_(
    const o2e_qgemm_par_args *a, int u0, int u1, size_t M, size_t P, size_t K, size_t ym,
    size_t yp, size_t OW, size_t wp) {
  const size_t K4 = (K + 3) / 4;
  uint8_t *pk = a->pk + a->slot * (size_t)(a->thread ? a->thread() : 0);
  size_t packed = (size_t)-1;
  (void)OW;
  (void)wp;
  for (int u = u0; u < u1; ++u) {
    const size_t chunk = (size_t)u / a->parts, part = (size_t)u % a->parts;
    const size_t p0 = chunk * 2 * O2E_QNR, m0 = part * a->mpart;
    const size_t nc = P - p0 < 2 * O2E_QNR ? P - p0 : 2 * O2E_QNR;
    if (m0 >= M) continue;
    const size_t mm = M - m0 < a->mpart ? M - m0 : a->mpart;
    if (packed != chunk) {
#if defined(O2E_Q_VNNI) && defined(__AVX512VBMI__)
      if (OW)
        o2e_qplanes_pack_(OW, wp, K, a->src, a->rowoff, a->flip, p0, nc, pk);
      else
#endif
        o2e_qpack_rows_at(a->src + p0, a->ld, a->rowoff, K, nc, a->flip, pk);
      packed = chunk;
    }
    o2e_qgemm(mm, nc, K, a->apack + (m0 / O2E_QMR) * K4 * 32, pk, a->bias + m0, a->rowsum + m0,
              a->scale + m0, a->zp, a->lo, a->hi, a->y + m0 * ym + p0 * yp, ym, yp);
  }
}

static inline void o2e_qgemm_units_(void *arg, int u0, int u1) {
  const o2e_qgemm_par_args *a = (const o2e_qgemm_par_args *)arg;
  o2e_qgemm_units_k_(a, u0, u1, a->M, a->P, a->K, a->ym, a->yp, a->OW, a->wp);
}

/* o2e_qconv_planes' units with its geometry as arguments: the real columns straight into y
 * (o2e_qplanes_direct) or the extended ones into yext. */
static inline __attribute__((always_inline)) void o2e_qplanes_units_k_(
    const o2e_qgemm_par_args *a, int u0, int u1, size_t M, size_t OH, size_t OW, size_t wp,
    size_t K) {
  const int d = o2e_qplanes_direct(OW, wp);
  const size_t P = d ? OH * OW : OH * wp;
  o2e_qgemm_units_k_(a, u0, u1, M, P, K, P, 1, d ? OW : 0, wp);
}

typedef void (*o2e_qunits_fn)(void *ctx, int begin, int end);

static inline void o2e_qgemm_par_(o2e_qgemm_par_args *a, o2e_qpar_for par, o2e_qunits_fn units) {
  const size_t nchunks = (a->P + 2 * O2E_QNR - 1) / (2 * O2E_QNR);
  const size_t tiles = (a->M + O2E_QMR - 1) / O2E_QMR;
  const o2e_qunits_fn fn = units ? units : o2e_qgemm_units_;
  a->parts = o2e_qparts(a->M, nchunks);
  a->mpart = (tiles + a->parts - 1) / a->parts * O2E_QMR;
  if (par)
    par((int)(nchunks * a->parts), fn, a);
  else
    fn(a, 0, (int)(nchunks * a->parts));
}

/* o2e_qgemm_rows split across threads: pk holds slot bytes (O2E_QPANEL_BYTES(K, 32) or more)
 * per thread. */
static inline void o2e_qgemm_rows_mt(size_t M, size_t P, size_t K, const int8_t *apack,
                                     const uint8_t *src, size_t ld, const int32_t *rowoff,
                                     uint8_t flip, uint8_t *pk, size_t slot,
                                     const int32_t *bias, const int32_t *rowsum,
                                     const float *scale, int32_t zp, int32_t lo, int32_t hi,
                                     uint8_t *y, size_t ym, size_t yp, o2e_qpar_for par,
                                     o2e_qpar_thread thread, o2e_qunits_fn units) {
  o2e_qgemm_par_args a = {.M = M, .P = P, .K = K, .apack = apack, .src = src, .ld = ld,
                          .rowoff = rowoff, .flip = flip, .pk = pk, .slot = slot,
                          .thread = thread, .bias = bias, .rowsum = rowsum, .scale = scale,
                          .zp = zp, .lo = lo, .hi = hi, .y = y, .ym = ym, .yp = yp};
  o2e_qgemm_par_(&a, par, units);
}

/* o2e_qconv_planes split across threads (pk: slot bytes per thread; yext as there). */
static inline void o2e_qconv_planes_mt(size_t M, size_t OH, size_t OW, size_t wp, size_t K,
                                       const int8_t *apack, const uint8_t *src,
                                       const int32_t *rowoff, uint8_t flip, uint8_t *pk,
                                       size_t slot, const int32_t *bias, const int32_t *rowsum,
                                       const float *scale, int32_t zp, int32_t lo, int32_t hi,
                                       uint8_t *yext, uint8_t *y, o2e_qpar_for par,
                                       o2e_qpar_thread thread, o2e_qunits_fn units) {
  if (o2e_qplanes_direct(OW, wp)) {
    o2e_qgemm_par_args a = {.M = M, .P = OH * OW, .K = K, .apack = apack, .src = src,
                            .rowoff = rowoff, .flip = flip, .pk = pk, .slot = slot,
                            .thread = thread, .bias = bias, .rowsum = rowsum, .scale = scale,
                            .zp = zp, .lo = lo, .hi = hi, .y = y, .ym = OH * OW, .yp = 1,
                            .OW = OW, .wp = wp};
    o2e_qgemm_par_(&a, par, units);
    return;
  }
  o2e_qgemm_rows_mt(M, OH * wp, K, apack, src, 0, rowoff, flip, pk, slot, bias, rowsum, scale, zp,
                    lo, hi, yext, OH * wp, 1, par, thread, units);
  o2e_qcompact(yext, M, OH, OW, wp, y);
}

/* G independent products (a grouped convolution) split across threads by group: group g
 * reads weights apack + g * asz, its rows of bias / rowsum / scale (Mg each), the source
 * src + g * ssz, and writes y + g * Mg * OH * OW. rowoff NULL: a 1x1 product over rows of
 * ld = OH * OW bytes (o2e_qgemm_rows); else o2e_qconv_planes (rows of wp). slot: the bytes
 * of each thread's panel scratch followed by its extended output (yoff on). */
typedef struct {
  size_t Mg, OH, OW, wp, K, asz, ssz;
  const int8_t *apack;
  const uint8_t *src;
  const int32_t *rowoff;
  uint8_t flip;
  uint8_t *ws;
  size_t slot, yoff;
  o2e_qpar_thread thread;
  const int32_t *bias, *rowsum;
  const float *scale;
  int32_t zp, lo, hi;
  uint8_t *y;
} o2e_qgroups_args;

static inline __attribute__((always_inline)) void o2e_qgroups_k_(const o2e_qgroups_args *a,
                                                                  int g0, int g1, size_t Mg,
                                                                  size_t OH, size_t OW, size_t wp,
                                                                  size_t K) {
  uint8_t *pk = a->ws + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const size_t P = OH * OW;
  for (size_t g = (size_t)g0; g < (size_t)g1; ++g) {
    const size_t m0 = g * Mg;
    if (!a->rowoff)
      o2e_qgemm_rows(Mg, P, K, a->apack + g * a->asz, a->src + g * a->ssz, P, NULL, a->flip, pk,
                     a->bias + m0, a->rowsum + m0, a->scale + m0, a->zp, a->lo, a->hi,
                     a->y + m0 * P, P, 1);
    else
      o2e_qconv_planes(Mg, OH, OW, wp, K, a->apack + g * a->asz, a->src + g * a->ssz, a->rowoff,
                       a->flip, pk, a->bias + m0, a->rowsum + m0, a->scale + m0, a->zp, a->lo,
                       a->hi, pk + a->yoff, a->y + m0 * P);
  }
}

static inline void o2e_qgroups_(void *arg, int g0, int g1) {
  const o2e_qgroups_args *a = (const o2e_qgroups_args *)arg;
  o2e_qgroups_k_(a, g0, g1, a->Mg, a->OH, a->OW, a->wp, a->K);
}

static inline void o2e_qgroups_mt(size_t G, size_t Mg, size_t OH, size_t OW, size_t wp, size_t K,
                                  const int8_t *apack, size_t asz, const uint8_t *src, size_t ssz,
                                  const int32_t *rowoff, uint8_t flip, uint8_t *ws, size_t slot,
                                  size_t yoff, const int32_t *bias, const int32_t *rowsum,
                                  const float *scale, int32_t zp, int32_t lo, int32_t hi,
                                  uint8_t *y, o2e_qpar_for par, o2e_qpar_thread thread,
                                  o2e_qunits_fn units) {
  o2e_qgroups_args a = {.Mg = Mg, .OH = OH, .OW = OW, .wp = wp, .K = K, .asz = asz,
                        .ssz = ssz, .apack = apack, .src = src, .rowoff = rowoff, .flip = flip,
                        .ws = ws, .slot = slot, .yoff = yoff, .thread = thread, .bias = bias,
                        .rowsum = rowsum, .scale = scale, .zp = zp, .lo = lo, .hi = hi, .y = y};
  const o2e_qunits_fn fn = units ? units : o2e_qgroups_;
  if (par)
    par((int)G, fn, &a);
  else
    fn(&a, 0, (int)G);
}

/* o2e_qgemm (B packed whole, o2e_qpack_cols) split across threads by parts of the M rows. */
typedef struct {
  size_t M, P, K, mpart;
  const int8_t *apack;
  const uint8_t *bpack;
  const int32_t *bias, *rowsum;
  const float *scale;
  int32_t zp, lo, hi;
  uint8_t *y;
  size_t ym, yp;
} o2e_qgemm_m_args;

static inline void o2e_qgemm_mparts_(void *arg, int q0, int q1) {
  const o2e_qgemm_m_args *a = (const o2e_qgemm_m_args *)arg;
  const size_t K4 = (a->K + 3) / 4;
  for (size_t q = (size_t)q0; q < (size_t)q1; ++q) {
    const size_t m0 = q * a->mpart;
    if (m0 >= a->M) continue;
    const size_t mm = a->M - m0 < a->mpart ? a->M - m0 : a->mpart;
    o2e_qgemm(mm, a->P, a->K, a->apack + (m0 / O2E_QMR) * K4 * 32, a->bpack, a->bias + m0,
              a->rowsum + m0, a->scale + m0, a->zp, a->lo, a->hi, a->y + m0 * a->ym, a->ym,
              a->yp);
  }
}

static inline void o2e_qgemm_mt(size_t M, size_t P, size_t K, const int8_t *apack,
                                const uint8_t *bpack, const int32_t *bias, const int32_t *rowsum,
                                const float *scale, int32_t zp, int32_t lo, int32_t hi, uint8_t *y,
                                size_t ym, size_t yp, o2e_qpar_for par) {
  const size_t tiles = (M + O2E_QMR - 1) / O2E_QMR;
  const size_t parts = tiles < O2E_QPAR_UNITS ? tiles : O2E_QPAR_UNITS;
  o2e_qgemm_m_args a = {.M = M, .P = P, .K = K, .mpart = (tiles + parts - 1) / parts * O2E_QMR,
                        .apack = apack, .bpack = bpack, .bias = bias, .rowsum = rowsum,
                        .scale = scale, .zp = zp, .lo = lo, .hi = hi, .y = y, .ym = ym, .yp = yp};
  if (par)
    par((int)parts, o2e_qgemm_mparts_, &a);
  else
    o2e_qgemm_mparts_(&a, 0, (int)parts);
}

/* A fully connected layer at batch 1 (convert --device): y[n * yn] = requant(sum_k A[n][k] x[k]
 * + bias[n]) for N outputs of K inputs, A packed as for o2e_qgemm. The Arm DSP build widens x
 * (bytes ^ flip) once into xs (O2E_QGEMV_BYTES(K): one int16 step of 8 bytes per 4 k, the
 * panel order) and runs 4 rows per pass over it; the portable build reads x directly. */
#define O2E_QGEMV_BYTES(K) ((((size_t)(K) + 3) / 4) * 8)
static inline void o2e_qgemv(size_t N, size_t K, const int8_t *apack, const uint8_t *x,
                             uint8_t flip, uint8_t *xs, const int32_t *bias, const float *scale,
                             int32_t zp, int32_t lo, int32_t hi, uint8_t *y, size_t yn) {
  const size_t K4 = (K + 3) / 4;
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  int32_t acc[O2E_QMR * O2E_QNR];
#if defined(O2E_Q_DSP)
  const uint32_t f4 = 0x01010101u * flip;
  for (size_t k4 = 0; k4 < K4; ++k4) {
    const size_t k = k4 * 4, nk = K - k < 4 ? K - k : 4;
    uint32_t w = 0;
    if (nk == 4) {
      memcpy(&w, x + k, 4);
      w ^= f4;
    } else {
      for (size_t t = 0; t < nk; ++t) w |= (uint32_t)(uint8_t)(x[k + t] ^ flip) << (8 * t);
    }
    o2e_qdsp_put4_((uint32_t *)(void *)(xs + k4 * 8), w);
  }
#else
  (void)xs;
#endif
  for (size_t m0 = 0; m0 < N; m0 += O2E_QMR) {
    const int8_t *ap = apack + (m0 / O2E_QMR) * K4 * 32;
    const size_t mr = N - m0 < O2E_QMR ? N - m0 : O2E_QMR;
#if defined(O2E_Q_DSP)
    o2e_qdsp_col4_(K4, ap, xs, acc, 0, 1);
    if (mr > 4) o2e_qdsp_col4_(K4, ap, xs, acc, 4, 1);
#else
    for (size_t r = 0; r < mr; ++r) {
      uint32_t c = 0;
      for (size_t k = 0; k < K; ++k)
        c += (uint32_t)((int32_t)ap[(k / 4) * 32 + r * 4 + k % 4] * (int32_t)(uint8_t)(x[k] ^ flip));
      acc[r * O2E_QNR] = (int32_t)c;
    }
#endif
    for (size_t r = 0; r < mr; ++r)
      o2e_qrequant_row(acc + r * O2E_QNR, 1, bias[m0 + r], scale[m0 + r], flo, fhi, zp,
                       y + (m0 + r) * yn, 1);
  }
}

/* ---- o2e_qgemm16: the int8 GEMM of a --device cortex-m55 conversion (Helium, issue 31) ----
 * MVE's VMLADAVA.S8 adds the 16 products of two int8 vectors to a scalar: it wants 16
 * consecutive k of a row and of a column. So the weights are packed at conversion time as
 * rows of K16 = K rounded up to 16 bytes ([ceil(M/4) * 4][K16], zeros past M and K), and the
 * activations, 16 columns at a time, as columns of K16 bytes (pk: O2E_QGEMM16_BYTES(K)), each
 * byte x ^ flip ^ 0x80 = x - 128 as int8 (x the uint8 after the flip; bias + 128 * rowsum
 * restores the sum, in wrapping int32 as the other kernels). 4 rows x 2 columns per pass:
 * 6 loads and 8 VMLADAVA per 16 k, 128 multiply-accumulates. Builds without MVE (a PC
 * verifying the conversion) run the same sums in C. Element (k, p) of the activation matrix
 * is at src[(rowoff ? rowoff[k] : k * ldk) + p * ldp]. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(O2E_Q_NO_MVE)
#include <arm_mve.h>
#define O2E_Q_MVE 1
#define O2E_Q_MVE_ 1
#else
#define O2E_Q_MVE_ 0
#endif
#define O2E_QK16(K) ((((size_t)(K) + 15) / 16) * 16)
#define O2E_QGEMM16_BYTES(K) (16 * O2E_QK16(K))
static inline void o2e_qgemm16(size_t M, size_t P, size_t K, const int8_t *a16, const uint8_t *src,
                               size_t ldk, const int32_t *rowoff, size_t ldp, uint8_t flip,
                               uint8_t *pk, const int32_t *bias, const int32_t *rowsum,
                               const float *scale, int32_t zp, int32_t lo, int32_t hi, uint8_t *y,
                               size_t ym, size_t yp) {
  const size_t K16 = O2E_QK16(K);
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  const uint8_t f = (uint8_t)(flip ^ 0x80u);
  int8_t *b = (int8_t *)(void *)pk;
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    const size_t nc = P - p0 < 16 ? P - p0 : 16;
    /* pack: column j's K16 bytes at b + j * K16 (k past K: zero, as the weights there) */
#if defined(O2E_Q_MVE)
    /* 8 columns of a row per round: bytes widened to 16-bit lanes, stored by a scatter of
     * their low bytes to the 8 columns (offsets j * K16) */
    const uint16x8_t soff = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)K16);
    const uint16x8_t fv = vdupq_n_u16(f);
#endif
#if defined(O2E_Q_MVE)
    if (!rowoff && ldk == 1) {
      /* [P][K] activations (a matrix product's): each column is K contiguous bytes, copied
       * 16 at a time (the last round predicated, zeros past K) */
      const uint8x16_t fv8 = vdupq_n_u8(f);
      for (size_t j = 0; j < nc; ++j) {
        const uint8_t *s = src + (p0 + j) * ldp;
        for (size_t k = 0; k < K16; k += 16) {
          const mve_pred16_t pr = vctp8q((uint32_t)(K - (k < K ? k : K)));
          vstrbq_u8((uint8_t *)(b + j * K16 + k), veorq_m_u8(vdupq_n_u8(0), vldrbq_z_u8(s + k, pr), fv8, pr));
        }
      }
    } else
#endif
    for (size_t k = 0; k < K; ++k) {
      const uint8_t *s = src + (rowoff ? (size_t)rowoff[k] : k * ldk) + p0 * ldp;
      size_t j = 0;
#if defined(O2E_Q_MVE)
      if (ldp == 1)
        for (; j + 8 <= nc; j += 8)
          vstrbq_scatter_offset_u16((uint8_t *)(b + j * K16 + k), soff,
                                    veorq_u16(vldrbq_u16(s + j), fv));
#endif
      for (; j < nc; ++j) b[j * K16 + k] = (int8_t)(s[j * ldp] ^ f);
    }
    if (K16 > K && (rowoff || ldk != 1 || O2E_Q_MVE_ + 0 == 0))
      for (size_t j = 0; j < nc; ++j) memset(b + j * K16 + K, 0, K16 - K);
    for (size_t m0 = 0; m0 < M; m0 += 4) {
      const int8_t *ar = a16 + m0 * K16;
      const size_t mr = M - m0 < 4 ? M - m0 : 4;
      int32_t bm[4];
      for (size_t r = 0; r < mr; ++r)
        bm[r] = (int32_t)((uint32_t)bias[m0 + r] + 128u * (uint32_t)rowsum[m0 + r]);
      for (size_t j = 0; j < nc; j += 2) {
        const int8_t *b0 = b + j * K16, *b1 = j + 1 < nc ? b0 + K16 : b0;
        int32_t c[4][2];
#if defined(O2E_Q_MVE)
        int32_t c00 = 0, c01 = 0, c10 = 0, c11 = 0, c20 = 0, c21 = 0, c30 = 0, c31 = 0;
        for (size_t k = 0; k < K16; k += 16) {
          const int8x16_t x0 = vldrbq_s8(b0 + k), x1 = vldrbq_s8(b1 + k);
          const int8x16_t w0 = vldrbq_s8(ar + k), w1 = vldrbq_s8(ar + K16 + k);
          const int8x16_t w2 = vldrbq_s8(ar + 2 * K16 + k), w3 = vldrbq_s8(ar + 3 * K16 + k);
          c00 = vmladavaq_s8(c00, w0, x0), c01 = vmladavaq_s8(c01, w0, x1);
          c10 = vmladavaq_s8(c10, w1, x0), c11 = vmladavaq_s8(c11, w1, x1);
          c20 = vmladavaq_s8(c20, w2, x0), c21 = vmladavaq_s8(c21, w2, x1);
          c30 = vmladavaq_s8(c30, w3, x0), c31 = vmladavaq_s8(c31, w3, x1);
        }
        if (mr == 4) {
          /* the 4 rows of a column requantised as one vector (VCVTN: round to nearest even,
           * as onnxruntime; the clamp after the rounding, as o2e_qrequant_row's VCVTR path)
           * and stored by a scatter to the rows' bytes */
          const int32x4_t bv = vldrwq_s32(bm);
          const float32x4_t sv = vldrwq_f32(scale + m0);
          const int32x4_t ilo = vdupq_n_s32(lo - zp), ihi = vdupq_n_s32(hi - zp);
          const int32x4_t zv = vdupq_n_s32(zp);
          const uint32x4_t yoff = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)ym);
          int32x4_t v0 = vdupq_n_s32(c00);
          v0 = vsetq_lane_s32(c10, v0, 1), v0 = vsetq_lane_s32(c20, v0, 2);
          v0 = vsetq_lane_s32(c30, v0, 3);
#define O2E_QRQ4_(v, p)                                                                        \
  do {                                                                                         \
    int32x4_t q_ = vcvtnq_s32_f32(vmulq_f32(vcvtq_f32_s32(vaddq_s32(v, bv)), sv));             \
    q_ = vaddq_s32(vminq_s32(vmaxq_s32(q_, ilo), ihi), zv);                                    \
    vstrbq_scatter_offset_s32((int8_t *)(y + m0 * ym + (p) * yp), yoff, q_);                   \
  } while (0)
          O2E_QRQ4_(v0, p0 + j);
          if (j + 1 < nc) {
            int32x4_t v1 = vdupq_n_s32(c01);
            v1 = vsetq_lane_s32(c11, v1, 1), v1 = vsetq_lane_s32(c21, v1, 2);
            v1 = vsetq_lane_s32(c31, v1, 3);
            O2E_QRQ4_(v1, p0 + j + 1);
          }
#undef O2E_QRQ4_
          continue;
        }
        c[0][0] = c00, c[0][1] = c01, c[1][0] = c10, c[1][1] = c11;
        c[2][0] = c20, c[2][1] = c21, c[3][0] = c30, c[3][1] = c31;
#else
        for (size_t r = 0; r < 4; ++r) {
          uint32_t s0 = 0, s1 = 0;
          for (size_t k = 0; k < K16; ++k) {
            s0 += (uint32_t)((int32_t)ar[r * K16 + k] * (int32_t)b0[k]);
            s1 += (uint32_t)((int32_t)ar[r * K16 + k] * (int32_t)b1[k]);
          }
          c[r][0] = (int32_t)s0, c[r][1] = (int32_t)s1;
        }
#endif
        const size_t ncj = j + 1 < nc ? 2 : 1;
        for (size_t r = 0; r < mr; ++r)
          for (size_t q = 0; q < ncj; ++q)
            o2e_qrequant_row(&c[r][q], 1, bm[r], scale[m0 + r], flo, fhi, zp,
                             y + (m0 + r) * ym + (p0 + j + q) * yp, 1);
      }
    }
  }
}

/* o2e_qgemm_rows' arguments (K rows at src + rowoff[k] or src + k * ld, P columns) */
static inline void o2e_qgemm16_rows(size_t M, size_t P, size_t K, const int8_t *a16,
                                    const uint8_t *src, size_t ld, const int32_t *rowoff,
                                    uint8_t flip, uint8_t *pk, const int32_t *bias,
                                    const int32_t *rowsum, const float *scale, int32_t zp,
                                    int32_t lo, int32_t hi, uint8_t *y, size_t ym, size_t yp) {
  o2e_qgemm16(M, P, K, a16, src, ld, rowoff, 1, flip, pk, bias, rowsum, scale, zp, lo, hi, y, ym,
              yp);
}

/* Depthwise convolution, one channel per group: w[c][kh * kw] int8 (zero point subtracted),
 * bias[c] int32 (no correction: the planes hold x - zp). Each channel is split into sh * sw
 * phase planes of (x - zp) with a zero border (a real zero), all RP rows of QW columns, so
 * every tap is one long contiguous multiply-add over OH * QW sums (columns past OW are
 * computed and dropped): loops gcc vectorises on every target. plane: int16 scratch of
 * O2E_QDW_PLANE(...) elements, acc: int32 scratch of OH * QW. */
#define O2E_QDW_QW(OW, kw, sw, dw) ((size_t)(OW) + ((size_t)((kw) - 1) * (dw)) / (sw) + 1)
#define O2E_QDW_RP(OH, kh, sh, dh) ((size_t)(OH) + ((size_t)((kh) - 1) * (dh)) / (sh) + 2)
static inline void o2e_qdw(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh, int kw,
                           int sh, int sw, int ph, int pw, int dh, int dw, const uint8_t *x,
                           uint8_t flip, int32_t xz, const int8_t *w, const int32_t *bias,
                           const float *scale, int32_t zp, int32_t lo, int32_t hi, uint8_t *y,
                           int16_t *plane, int32_t *acc) {
  const size_t QW = O2E_QDW_QW(OW, kw, sw, dw), RP = O2E_QDW_RP(OH, kh, sh, dh);
  const size_t PS = RP * QW, N = OH * QW;
  const float flo = (float)(lo - zp), fhi = (float)(hi - zp);
  for (size_t c = 0; c < C; ++c) {
    memset(plane, 0, (size_t)sh * sw * PS * sizeof(int16_t));
    const uint8_t *xc = x + c * H * W;
    for (size_t iy = 0; iy < H; ++iy) {
      const size_t py = iy + ph; /* row in the padded image */
      const size_t r = py / sh;
      if (r >= RP) continue;
      int16_t *prow = plane + (py % sh) * sw * PS + r * QW;
      const uint8_t *xr = xc + iy * W;
      for (int cp = 0; cp < sw; ++cp) { /* column phase: q * sw + cp - pw inside the row */
        size_t qa, qb;
        o2e_qphase_range(W, QW, sw, pw, cp, &qa, &qb);
        int16_t *d = prow + (size_t)cp * PS;
        const uint8_t *sx = xr + cp - pw;
        for (size_t q = qa; q < qb; ++q) d[q] = (int16_t)((int32_t)(uint8_t)(sx[q * sw] ^ flip) - xz);
      }
    }
    const int8_t *wc = w + c * (size_t)(kh * kw);
    for (size_t i = 0; i < N; ++i) acc[i] = 0;
    for (int ky = 0; ky < kh; ++ky)
      for (int kx = 0; kx < kw; ++kx) {
        const size_t ry = (size_t)ky * dh, rx = (size_t)kx * dw;
        const int16_t *src = plane + ((ry % sh) * sw + rx % sw) * PS + (ry / sh) * QW + rx / sw;
        const int32_t wv = wc[ky * kw + kx];
        for (size_t i = 0; i < N; ++i) acc[i] += wv * (int32_t)src[i];
      }
    for (size_t oy = 0; oy < OH; ++oy)
      o2e_qrequant_row(acc + oy * QW, OW, bias[c], scale[c], flo, fhi, zp, y + (c * OH + oy) * OW, 1);
  }
}

/* MaxPool on quantized bytes (2-D, no dilation): the order of int8 values is the order of
 * their bytes xor 0x80 as uint8, so both types run as uint8. Per channel, over a plane of
 * Hp = (OH - 1) * sh + kh rows of Wp = (OW - 1) * sw + kw bytes (the image itself when every
 * window is inside it: SqueezeNet's pools; else a copy with a border of 0, below every value,
 * so padding never wins, as in MaxPool, and ceil mode's last window reads border only where
 * it is past the image): t[p] = the max of plane[p .. p + kw) over the whole plane as one
 * contiguous loop (p near a row's end mixes in the next row: never read), then in place
 * t[p] = the max of t[p + k * Wp], k < kh, again one loop, and the output picks
 * t[oy * sh * Wp + ox * sw]. Long vpmaxub loops: the phase planes this replaced gathered
 * each byte into sh * sw planes first (SqueezeNet int8's three pools 0.22 -> 0.09 ms), and
 * a loop per output row of 111 bytes spent half its time in loop tails.
 * scratch: O2E_QMAXPOOL_SCRATCH bytes. */
#define O2E_QMAXPOOL_SCRATCH(OH, OW, kh, kw, sh, sw)                    \
  (2 * (((size_t)(OH) - 1) * (size_t)(sh) + (size_t)(kh)) *             \
   (((size_t)(OW) - 1) * (size_t)(sw) + (size_t)(kw)))

static inline void o2e_qmaxpool_plane(size_t Hp, size_t Wp, size_t OH, size_t OW, int kh,
                                      int kw, int sh, int sw, const uint8_t *restrict xc,
                                      uint8_t flip_in, uint8_t flip_out, uint8_t *restrict yc,
                                      uint8_t *restrict t) {
  const size_t n = Hp * Wp, nh = n - (size_t)(kw - 1), nv = nh - (size_t)(kh - 1) * Wp;
  if (kw == 3) {
    for (size_t p = 0; p < nh; ++p) {
      const uint8_t a = (uint8_t)(xc[p] ^ flip_in), b = (uint8_t)(xc[p + 1] ^ flip_in),
                    c = (uint8_t)(xc[p + 2] ^ flip_in);
      const uint8_t m = b > a ? b : a;
      t[p] = c > m ? c : m;
    }
  } else {
    for (size_t p = 0; p < nh; ++p) t[p] = (uint8_t)(xc[p] ^ flip_in);
    for (int k = 1; k < kw; ++k)
      for (size_t p = 0; p < nh; ++p) {
        const uint8_t v = (uint8_t)(xc[p + (size_t)k] ^ flip_in);
        t[p] = v > t[p] ? v : t[p];
      }
  }
  if (kh == 3) {
    const size_t W2 = 2 * Wp;
    for (size_t p = 0; p < nv; ++p) {
      const uint8_t a = t[p], b = t[p + Wp], c = t[p + W2];
      const uint8_t m = b > a ? b : a;
      t[p] = c > m ? c : m;
    }
  } else {
    /* a row at a time: row r takes rows r+1 .. r+kh-1 while they still hold their own maxima
       (a whole pass per k would feed row r+k's already-widened maximum into row r) */
    for (size_t p0 = 0; p0 < nv; p0 += Wp) {
      const size_t e = p0 + Wp < nv ? p0 + Wp : nv;
      for (int k = 1; k < kh; ++k) {
        const size_t o = (size_t)k * Wp;
        for (size_t p = p0; p < e; ++p) t[p] = t[p + o] > t[p] ? t[p + o] : t[p];
      }
    }
  }
  for (size_t oy = 0; oy < OH; ++oy) {
    const uint8_t *src = t + oy * (size_t)sh * Wp;
    uint8_t *yr = yc + oy * OW;
    if (sw == 2)
      for (size_t ox = 0; ox < OW; ++ox) yr[ox] = (uint8_t)(src[2 * ox] ^ flip_out);
    else
      for (size_t ox = 0; ox < OW; ++ox) yr[ox] = (uint8_t)(src[ox * (size_t)sw] ^ flip_out);
  }
}

static inline void o2e_qmaxpool(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh,
                                int kw, int sh, int sw, int ph, int pw, const uint8_t *x,
                                uint8_t flip, uint8_t *y, uint8_t *scratch) {
  const size_t Hp = (OH - 1) * (size_t)sh + (size_t)kh, Wp = (OW - 1) * (size_t)sw + (size_t)kw;
  uint8_t *t = scratch, *pad = scratch + Hp * Wp;
  if (ph == 0 && pw == 0 && Hp <= H && Wp <= W) {
    for (size_t c = 0; c < C; ++c)
      o2e_qmaxpool_plane(H, W, OH, OW, kh, kw, sh, sw, x + c * H * W, flip, flip,
                         y + c * OH * OW, t);
    return;
  }
  /* the image's rows [ra, rb) and columns [0, cw) land inside the padded plane */
  const size_t ra = (size_t)ph, rb = H + (size_t)ph < Hp ? H + (size_t)ph : Hp;
  const size_t cw = (size_t)pw >= Wp ? 0 : W + (size_t)pw < Wp ? W : Wp - (size_t)pw;
  memset(pad, 0, Hp * Wp);
  for (size_t c = 0; c < C; ++c) {
    const uint8_t *xc = x + c * H * W;
    for (size_t r = ra; r < rb; ++r) {
      const uint8_t *xr = xc + (r - ra) * W;
      uint8_t *pr = pad + r * Wp + pw;
      for (size_t i = 0; i < cw; ++i) pr[i] = (uint8_t)(xr[i] ^ flip);
    }
    o2e_qmaxpool_plane(Hp, Wp, OH, OW, kh, kw, sh, sw, pad, 0, flip, y + c * OH * OW, t);
  }
}

#endif /* O2E_QGEMM_H */
