/* o2e_stem_lanes.h - tiles and the 16-channel store of the channel-lanes stem (kernels/conv/conv_stem_lanes.py).
 * Static C moved out of kernels/conv/conv_stem_lanes.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_STEM_LANES_H
#define O2E_STEM_LANES_H
#include <stddef.h>
#include "o2e_stem_vectors.h"

/* Tiles of the channel-lanes stem (kernels/conv/conv_stem_lanes.py): O2E_CNV vectors of O2E_SL
 * channels x O2E_CP output pixels. */
#if defined(__AVX512F__)
#define O2E_CNV 3
#define O2E_CP 8
#elif defined(__AVX2__) && defined(__FMA__)
#define O2E_CNV 2
#define O2E_CP 6
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define O2E_CNV 4
#define O2E_CP 6
#else
#define O2E_CNV 2
#define O2E_CP 4
#endif
#define O2E_CB (O2E_CNV * O2E_SL)
/* The end of a tap: without it gcc interleaved the next taps' loads and broadcasts with this
 * tap's FMAs and spilled accumulators (AlexNet's 11x11 / 4 tile: 268 stack moves, 1.86 ->
 * 1.35 ms); a compiler barrier only, no instruction. */
#if defined(__GNUC__) || defined(__clang__)
#define O2E_TAP_END() __asm__ __volatile__("" ::: "memory")
#else
#define O2E_TAP_END() ((void)0)
#endif

#if defined(__AVX512F__) && defined(__AVX512VL__)
/* r[p]: pixel p (< 8) of 16 channels; writes the first P (mask mk) pixels of the first nl
 * (<= 16) channel rows at y, rows ys apart. unpack / shuffle: u[j] lane k = channel 4k + j,
 * pixels 0..3, u[4 + j] lane k = the same channel, pixels 4..7. */
static inline __attribute__((always_inline)) void o2e_stl_store16(const __m512 *r, __mmask8 mk,
    int nl, float *restrict y, size_t ys)
{
  __m512 t[8], u[8];
  for (int h = 0; h < 2; h++) {
    const __m512 *q = r + 4 * h;
    t[4 * h] = _mm512_unpacklo_ps(q[0], q[1]);
    t[4 * h + 1] = _mm512_unpackhi_ps(q[0], q[1]);
    t[4 * h + 2] = _mm512_unpacklo_ps(q[2], q[3]);
    t[4 * h + 3] = _mm512_unpackhi_ps(q[2], q[3]);
    u[4 * h] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) {
    /* [a0 b0 a1 b1] and [a2 b2 a3 b3]: channel rows j, 4 + j and 8 + j, 12 + j */
    const __m512 lo = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[j], u[4 + j], 0x44),
                                           _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), 0xD8);
    const __m512 hi = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE),
                                           _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE), 0xD8);
    const __m256 row[4] = {
        _mm512_castps512_ps256(lo),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1)),
        _mm512_castps512_ps256(hi),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1))};
    for (int k = 0; k < 4; k++)
      if (4 * k + j < nl) _mm256_mask_storeu_ps(y + (size_t)(4 * k + j) * ys, mk, row[k]);
  }
}
#endif

#endif /* O2E_STEM_LANES_H */
