/* o2e_lanes.h - arguments and pixel tiles of the channel-lanes direct convolution (kernels/conv/conv_lanes.py).
 * Static C moved out of kernels/conv/conv_lanes.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_LANES_H
#define O2E_LANES_H
#include <stddef.h>
#include "o2e_intrinsics.h"

/* Direct convolution, 32 output channels in the lanes x P output pixels (kernels/conv/conv_lanes.py). */
typedef struct {
  const float *x; /* zero-bordered input, C x Hp x Wp */
  const float *w; /* [M / 32][C][kh][kw][32] */
  float *t;       /* per-thread tile scratch: PX x 32 floats each */
  int C, Hp, Wp, kh, kw, OH, OW;
  float *y;          /* M x OH x OW output */
  const float *bias; /* M, or NULL */
} o2e_lanes_args;
/* Pixel tiles per output row: AVX-512 holds 10 pixels x 32 lanes in registers, AVX2 + FMA 6 x 16,
 * so an AVX2 row is cut straight into balanced tiles of <= 6 (27 pixels as 5,5,5,6,6, not as
 * 9 + 9 + 9 each split 5 + 4: fewer short tiles whose few FMA chains wait on each other). */
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define O2E_LANES_NT(wide, avx2) avx2
#else
#define O2E_LANES_NT(wide, avx2) wide
#endif

/* The tiles, with the filter size and stride as arguments: the generated C calls them from one
 * small function per kh x kw / sh x sw with literals (kernels/conv/conv_lanes.py), so the taps
 * of a channel unroll as when the constants were pasted in (a 7x1 filter otherwise pays the
 * loop overhead of a 1-tap inner loop). */
#if defined(__AVX512F__)
static inline __attribute__((always_inline)) void o2e_lanes_p(const int KH, const int KW, const int SH,
    const int SW, const int P, const o2e_lanes_args *a, int mb, int oh, int ow0, float *t)
{
  __m512 a0[12], a1[12];
  const float *wp = a->w + (size_t)mb * a->C * (KH * KW * 32);
  for (int p = 0; p < P; p++) a0[p] = a1[p] = _mm512_setzero_ps();
  for (int c = 0; c < a->C; c++) {
    const float *xc = a->x + (size_t)c * (SH * SW) * a->Hp * a->Wp + (size_t)oh * a->Wp + ow0;
#pragma GCC unroll 16
    for (int i = 0; i < KH; i++)
#pragma GCC unroll 16
      for (int j = 0; j < KW; j++) {
        const float *xr = xc + (size_t)((i % SH) * SW + j % SW) * a->Hp * a->Wp + (size_t)(i / SH) * a->Wp + j / SW;
        const __m512 w0 = _mm512_loadu_ps(wp + (i * KW + j) * 32), w1 = _mm512_loadu_ps(wp + (i * KW + j) * 32 + 16);
#pragma GCC unroll 12
        for (int p = 0; p < P; p++) {
          const __m512 b = _mm512_set1_ps(xr[p]);
          a0[p] = _mm512_fmadd_ps(b, w0, a0[p]);
          a1[p] = _mm512_fmadd_ps(b, w1, a1[p]);
        }
      }
    wp += KH * KW * 32;
  }
  for (int p = 0; p < P; p++) {
    _mm512_storeu_ps(t + 32 * p, a0[p]);
    _mm512_storeu_ps(t + 32 * p + 16, a1[p]);
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2: 16 ymm registers hold 16 lanes x P <= 6 pixels (12 accumulators + 2 weight vectors +
 * 1 broadcast); per tap 2 weight loads and P broadcasts feed 2·P FMAs. Lane half h (0, 1)
 * of the 32-lane block goes to t[p][16h .. 16h + 16]. The accumulators are named variables
 * and every weight / broadcast value is pinned to a register where it is loaded (empty asm):
 * with an array and free scheduling GCC hoisted the broadcasts of the next taps and spilled
 * accumulators (32 stack moves per 108 FMAs in the 3x3 / 2 tile, 49 per 300 in the 5x5). */
#define O2E_LANES_PIN_(v) __asm__("" : "+x"(v))
#define O2E_LANES_FMA_(p)                                                                        \
  if (P > p) {                                                                                   \
    __m256 b = _mm256_broadcast_ss(xr + p);                                                      \
    O2E_LANES_PIN_(b);                                                                           \
    a0##p = _mm256_fmadd_ps(b, w0, a0##p);                                                       \
    a1##p = _mm256_fmadd_ps(b, w1, a1##p);                                                       \
  }
#define O2E_LANES_ST_(p)                                                                         \
  if (P > p) {                                                                                   \
    _mm256_storeu_ps(t + 32 * p + 16 * h, a0##p);                                                \
    _mm256_storeu_ps(t + 32 * p + 16 * h + 8, a1##p);                                            \
  }
static inline __attribute__((always_inline)) void o2e_lanes_p(const int KH, const int KW, const int SH,
    const int SW, const int P, const o2e_lanes_args *a, int mb, int oh, int ow0, int h, float *t)
{
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a04 = a00, a05 = a00;
  __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00, a14 = a00, a15 = a00;
  const float *wp = a->w + (size_t)mb * a->C * (KH * KW * 32) + 16 * h;
  for (int c = 0; c < a->C; c++) {
    const float *xc = a->x + (size_t)c * (SH * SW) * a->Hp * a->Wp + (size_t)oh * a->Wp + ow0;
    /* the taps as one loop: as two (i, j) loops with KH, KW from the arguments gcc kept 5
     * more ymm spills per 3x3 / 2 tile than with the sizes pasted in as literals (0) */
#pragma GCC unroll 256
    for (int k = 0; k < KH * KW; k++) {
      const int i = k / KW, j = k % KW;
      const float *xr = xc + (size_t)((i % SH) * SW + j % SW) * a->Hp * a->Wp + (size_t)(i / SH) * a->Wp + j / SW;
      __m256 w0 = _mm256_loadu_ps(wp + k * 32), w1 = _mm256_loadu_ps(wp + k * 32 + 8);
      O2E_LANES_PIN_(w0);
      O2E_LANES_PIN_(w1);
      O2E_LANES_FMA_(0) O2E_LANES_FMA_(1) O2E_LANES_FMA_(2)
      O2E_LANES_FMA_(3) O2E_LANES_FMA_(4) O2E_LANES_FMA_(5)
    }
    wp += KH * KW * 32;
  }
  O2E_LANES_ST_(0) O2E_LANES_ST_(1) O2E_LANES_ST_(2) O2E_LANES_ST_(3) O2E_LANES_ST_(4) O2E_LANES_ST_(5)
}
#endif

/* One lane half h of a tile of P <= 6 pixels (AVX2 + FMA; a no-op elsewhere): the generated C
 * wraps it in a function of its own per filter size, which o2e_lanes_tile calls for each half. */
static inline __attribute__((always_inline)) void o2e_lanes_half(const int KH, const int KW, const int SH,
    const int SW, const o2e_lanes_args *a, int mb, int oh, int ow0, int P, int h, float *t)
{
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
  switch (P) { /* one register-resident copy per width */
  case 6: o2e_lanes_p(KH, KW, SH, SW, 6, a, mb, oh, ow0, h, t); return;
  case 5: o2e_lanes_p(KH, KW, SH, SW, 5, a, mb, oh, ow0, h, t); return;
  case 4: o2e_lanes_p(KH, KW, SH, SW, 4, a, mb, oh, ow0, h, t); return;
  case 3: o2e_lanes_p(KH, KW, SH, SW, 3, a, mb, oh, ow0, h, t); return;
  case 2: o2e_lanes_p(KH, KW, SH, SW, 2, a, mb, oh, ow0, h, t); return;
  default: o2e_lanes_p(KH, KW, SH, SW, 1, a, mb, oh, ow0, h, t); return;
  }
#else
  (void)KH, (void)KW, (void)SH, (void)SW, (void)a, (void)mb, (void)oh, (void)ow0, (void)P, (void)h, (void)t;
#endif
}
typedef void (*o2e_lanes_half_fn)(const o2e_lanes_args *a, int mb, int oh, int ow0, int P, int h, float *t);

/* Accumulates the tile (block mb, row oh, pixels [ow0, ow0 + P)) into t[p][32]; half: the
 * generated wrapper of o2e_lanes_half for this filter size (used by AVX2 + FMA builds). */
static inline __attribute__((always_inline)) void o2e_lanes_tile(const int KH, const int KW, const int SH,
    const int SW, const o2e_lanes_args *a, int mb, int oh, int ow0, int P, float *t, o2e_lanes_half_fn half)
{
#if defined(__AVX512F__)
  (void)half;
  switch (P) { /* one register-resident copy per width, up to 10 (conv_lanes.PX512) */
  case 10: o2e_lanes_p(KH, KW, SH, SW, 10, a, mb, oh, ow0, t); return;
  case 9: o2e_lanes_p(KH, KW, SH, SW, 9, a, mb, oh, ow0, t); return;
  case 8: o2e_lanes_p(KH, KW, SH, SW, 8, a, mb, oh, ow0, t); return;
  case 7: o2e_lanes_p(KH, KW, SH, SW, 7, a, mb, oh, ow0, t); return;
  case 6: o2e_lanes_p(KH, KW, SH, SW, 6, a, mb, oh, ow0, t); return;
  case 5: o2e_lanes_p(KH, KW, SH, SW, 5, a, mb, oh, ow0, t); return;
  case 4: o2e_lanes_p(KH, KW, SH, SW, 4, a, mb, oh, ow0, t); return;
  case 3: o2e_lanes_p(KH, KW, SH, SW, 3, a, mb, oh, ow0, t); return;
  case 2: o2e_lanes_p(KH, KW, SH, SW, 2, a, mb, oh, ow0, t); return;
  default: o2e_lanes_p(KH, KW, SH, SW, 1, a, mb, oh, ow0, t); return;
  }
#elif defined(__AVX2__) && defined(__FMA__)
  (void)KH, (void)KW, (void)SH, (void)SW;
  /* a tile of up to 12 pixels as two balanced halves of <= 6, each lane half in turn */
  const int P0 = P > 6 ? (P + 1) / 2 : P;
  for (int h = 0; h < 2; h++) {
    half(a, mb, oh, ow0, P0, h, t);
    if (P > P0) half(a, mb, oh, ow0 + P0, P - P0, h, t + 32 * P0);
  }
#else
  (void)half;
  const float *wp = a->w + (size_t)mb * a->C * (KH * KW * 32);
  for (int k = 0; k < P * 32; k++) t[k] = 0.0f;
  for (int c = 0; c < a->C; c++)
    for (int i = 0; i < KH; i++) {
      for (int j = 0; j < KW; j++, wp += 32)
        for (int p = 0; p < P; p++) {
          const float b = a->x[(size_t)(c * (SH * SW) + (i % SH) * SW + j % SW) * a->Hp * a->Wp +
                               (size_t)(oh + i / SH) * a->Wp + ow0 + j / SW + p];
          float *restrict tp = t + 32 * p;
          for (int l = 0; l < 32; l++) tp[l] += b * wp[l];
        }
    }
#endif
}

/* Writes x (H x W) into the transposed zero-bordered plane: xt[(w + pl) * Hp + h + pt] =
 * x[h][w] (Wp rows of Hp; the border keeps the zeros the caller set). */
static inline void o2e_lanes_pad_transposed(const float *restrict x, int H, int W, int pt, int pl,
    int Wp, int Hp, float *restrict xt)
{
  (void)Wp;
  for (int h = 0; h < H; h++)
    for (int w = 0; w < W; w++) xt[(size_t)(w + pl) * Hp + h + pt] = x[(size_t)h * W + w];
}

/* One layer's row loop (kernels/conv/conv_lanes.py), its geometry as arguments: the generated
 * row function calls it with literals. OH x OW: the output map as the tiles see it (transposed
 * for a k x 1 filter), ys0 / ys1: y strides of a tile's row and of its pixels; NT tiles per row
 * (O2E_LANES_NT); prefetch: pull the next block's weights (span floats) into L2 from the store
 * loops, pfk lines per channel stored, chunk floats per tile. */
typedef struct {
  int OH, OW, M, NT, ys0, ys1;
  int blocks, prefetch, span, chunk, pfk;
} o2e_lanes_geom;
typedef void (*o2e_lanes_tile_fn)(const o2e_lanes_args *a, int mb, int oh, int ow0, int P, float *t);
/* The fused activation of one output (the activation table's expression), or NULL. */
typedef float (*o2e_lanes_act_fn)(float v);

/* Units [u0, u1) (32-channel block, output row); t: this thread's tile scratch. The store loop
 * adds the bias and the activation, writing the tile into the NCHW output. Not in the tile
 * loop, the prefetch: there it cost GCC the broadcasts it keeps in registers (5x5 tile: 70 ->
 * 214 broadcasts per 500 FMAs). */
static inline __attribute__((always_inline)) void o2e_lanes_rows(const o2e_lanes_geom g,
    const o2e_lanes_args *a, float *t, int u0, int u1, o2e_lanes_tile_fn tile, o2e_lanes_act_fn act)
{
  for (int u = u0; u < u1; u++) {
    const int mb = u / g.OH, oh = u % g.OH, m = mb * 32, nl = g.M - m < 32 ? g.M - m : 32;
    for (int q = 0; q < g.NT; q++) { /* balanced tiles: 13 pixels as 7 + 6, not 12 + 1 */
      /* g.OW % g.NT == 0: every tile as wide, a constant (gcc does not fold the difference;
       * the inlined tile then keeps one width, not all) */
      const int ow0 = q * g.OW / g.NT;
      const int P = g.OW % g.NT == 0 ? g.OW / g.NT : (q + 1) * g.OW / g.NT - ow0;
      tile(a, mb, oh, ow0, P, t);
      const float *pf = g.prefetch && mb + 1 < g.blocks && (oh * g.NT + q + 1) * g.chunk <= g.span
          ? a->w + (size_t)(mb + 1) * g.span + (size_t)(oh * g.NT + q) * g.chunk : NULL;
      for (int l = 0; l < nl; l++) {
        if (pf)
          for (int k = 0; k < g.pfk; k++)
            __builtin_prefetch(pf + (size_t)(l * g.pfk + k) * 16, 0, 2);
        float *restrict yr =
            a->y + (size_t)(m + l) * (g.OH * g.OW) + (size_t)oh * g.ys0 + (size_t)ow0 * g.ys1;
        for (int p = 0; p < P; p++) {
          const float v = t[32 * p + l] + (a->bias ? a->bias[m + l] : 0.0f);
          yr[(size_t)p * g.ys1] = act ? act(v) : v;
        }
      }
    }
  }
}

#endif /* O2E_LANES_H */
