/* o2e_gconv.h - grouped convolutions with few channels per group (kernels/conv/conv_grouped.py;
 * issue 34: RegNetX's 3x3 layers, 8 input and 8 output channels per group).
 *
 *   y[g*mg + m][p] = act(b[g*mg + m] + sum_k w[g][m][k] . x_g[tap k of p] + r[g*mg + m][p])
 *
 * The implicit GEMM ran one product per group (M = 8, K = 72) one after the other, each
 * splitting its few columns across the threads and packing its B panel again: at 2 threads
 * RegNetX-200MF lost to onnxruntime by 1.67x where it was even at 1. Here the work items are
 * groups: each thread takes whole groups, splits the group's input into zero-bordered phase
 * planes in its own slot of the workspace (stride 1: one padded plane a channel), in which
 * every tap of an output is a fixed offset away, and multiplies them by the group's weights,
 * packed at conversion time as [group][ceil(mg / 8)][K][8]. A tile is 8 output channels x
 * O2E_GC_NB output pixels with its accumulators in registers (per ISA below).
 */
#ifndef O2E_GCONV_H
#define O2E_GCONV_H
#include <stddef.h>
#include <string.h>

#include "o2e_gemm.h"

#define O2E_GC_MB 8
#define O2E_GC_KMAX 576 /* taps a group at most (conv_grouped.MAX_K) */
#define O2E_GC_NBMAX 32 /* the widest tile (conv_grouped.NB_MAX) */
/* zeros past a thread's planes (conv_grouped.SLACK): the last tile reads up to O2E_GC_NB - 1
 * floats past the last position, which is up to O2E_GC_NBMAX floats past the planes when rows
 * share their pad column (conv_grouped.plane_row) */
#define O2E_GC_SLACK (2 * O2E_GC_NBMAX)
/* Tile width in output pixels per ISA (the tile is 8 output channels x O2E_GC_NB):
 *   AVX-512: 8 x 32, plain C below (16 zmm accumulators of 32; gcc keeps them in registers);
 *   AVX2+FMA: two passes of 4 channels x 24 (12 ymm accumulators, 3 of pixels, 1 broadcast
 *     weight: all 16 ymm; 7 loads a step for 12 FMAs, where 8 x 8 took 9 loads for 8 FMAs
 *     and was 1.6x slower than the implicit GEMM), intrinsics: gcc spilled an 8 x 16 plain-C
 *     tile to the stack;
 *   NEON (aarch64): 8 x 12, intrinsics (24 q accumulators, 3 of pixels, the 8 weights of a
 *     tap in 2 q read by lane: 29 of 32 q, 5 loads a step for 24 FMAs);
 *   other builds: 8 x 8 plain C. */
#if defined(__AVX512F__)
#define O2E_GC_NB 32
#elif defined(O2E_GEMM_AVX2)
#define O2E_GC_NB 24
#elif defined(O2E_GEMM_NEON)
#define O2E_GC_NB 12
#else
#define O2E_GC_NB 8
#endif

/* Copies one (H x W) channel into the sh x sw phase planes of its zero-padded version
 * (pool2d.phase_split's helpers: plane (a, b) at planes + (a*sw + b)*HQ*WQ holds
 * xpad[r*sh + a][q*sw + b] at [r][q]; only input pixels are written). */
typedef void (*o2e_gconv_split_fn)(const float *restrict x, int H, int W, int pt, int pl, int HQ,
                                   int WQ, float *restrict planes);

typedef struct {
  const float *x;    /* one image, [C][H][W] */
  const float *w;    /* [group][ceil(mg / 8)][K][8], rows past mg zero */
  const float *bias; /* [M] or NULL */
  const float *res;  /* [M][P] or NULL */
  float *y;          /* [M][P] */
  float *ws;         /* per thread ws_per floats: the group's phase planes, O2E_GC_SLACK
                      * floats of slack, the wide output [ceil(mg / 8) * 8][nq rounded up] */
  size_t ws_per;
  o2e_gconv_split_fn split;
  int cg, mg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW, HQ, WQ;
  o2e_act act;
} o2e_gconv_args;

/* wide[r][0 .. O2E_GC_NB) = sum_k a[k][r] x b[off[k] .. + O2E_GC_NB) for the 8 rows r of a
 * panel: a is [K][8] (8 output channels a tap), wide's rows are ldw apart. */
#if defined(O2E_GEMM_AVX2) && !defined(__AVX512F__)
#define O2E_GC_VW 8 /* floats a vector: the last tile of a row range is 1 to 3 vectors wide */
/* nv (1 to 3, a constant once inlined) vectors of 8 pixels */
O2E_GEMM_INL void o2e_gconv_tile_v_(const float *restrict a, const float *restrict b,
                                    const int *restrict off, int K, float *restrict wide,
                                    size_t ldw, const int nv)
{
  for (int h = 0; h < O2E_GC_MB; h += 4) { /* two half panels of 4 output channels */
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    const float *restrict ak = a + h;
    for (int k = 0; k < K; ++k, ak += O2E_GC_MB) {
      const float *restrict bk = b + off[k];
      const __m256 b0 = _mm256_loadu_ps(bk);
      const __m256 b1 = nv > 1 ? _mm256_loadu_ps(bk + 8) : b0;
      const __m256 b2 = nv > 2 ? _mm256_loadu_ps(bk + 16) : b0;
#define O2E_GC_ROW_(r)                                                                           \
  do {                                                                                           \
    const __m256 w = _mm256_broadcast_ss(ak + r);                                                \
    c##r##0 = _mm256_fmadd_ps(w, b0, c##r##0);                                                   \
    if (nv > 1) c##r##1 = _mm256_fmadd_ps(w, b1, c##r##1);                                       \
    if (nv > 2) c##r##2 = _mm256_fmadd_ps(w, b2, c##r##2);                                       \
  } while (0)
      O2E_GC_ROW_(0);
      O2E_GC_ROW_(1);
      O2E_GC_ROW_(2);
      O2E_GC_ROW_(3);
#undef O2E_GC_ROW_
    }
    float *restrict d = wide + (size_t)h * ldw;
#define O2E_GC_STORE_(r)                                                                         \
  do {                                                                                           \
    _mm256_storeu_ps(d + (size_t)r * ldw, c##r##0);                                              \
    if (nv > 1) _mm256_storeu_ps(d + (size_t)r * ldw + 8, c##r##1);                              \
    if (nv > 2) _mm256_storeu_ps(d + (size_t)r * ldw + 16, c##r##2);                             \
  } while (0)
    O2E_GC_STORE_(0);
    O2E_GC_STORE_(1);
    O2E_GC_STORE_(2);
    O2E_GC_STORE_(3);
#undef O2E_GC_STORE_
  }
}
#elif defined(O2E_GEMM_NEON)
#define O2E_GC_VW 4
/* nv (1 to 3, a constant once inlined) vectors of 4 pixels */
O2E_GEMM_INL void o2e_gconv_tile_v_(const float *restrict a, const float *restrict b,
                                    const int *restrict off, int K, float *restrict wide,
                                    size_t ldw, const int nv)
{
  float32x4_t c[O2E_GC_MB][3];
  for (int r = 0; r < O2E_GC_MB; ++r) c[r][0] = c[r][1] = c[r][2] = vdupq_n_f32(0.0f);
  for (int k = 0; k < K; ++k) {
    const float *restrict bk = b + off[k];
    const float32x4_t b0 = vld1q_f32(bk);
    const float32x4_t b1 = nv > 1 ? vld1q_f32(bk + 4) : b0;
    const float32x4_t b2 = nv > 2 ? vld1q_f32(bk + 8) : b0;
    const float32x4_t a0 = vld1q_f32(a + (size_t)k * O2E_GC_MB);
    const float32x4_t a1 = vld1q_f32(a + (size_t)k * O2E_GC_MB + 4);
#define O2E_GC_ROW_(r, av, lane)                                                                 \
  do {                                                                                           \
    c[r][0] = vfmaq_laneq_f32(c[r][0], b0, av, lane);                                            \
    if (nv > 1) c[r][1] = vfmaq_laneq_f32(c[r][1], b1, av, lane);                                \
    if (nv > 2) c[r][2] = vfmaq_laneq_f32(c[r][2], b2, av, lane);                                \
  } while (0)
    O2E_GC_ROW_(0, a0, 0);
    O2E_GC_ROW_(1, a0, 1);
    O2E_GC_ROW_(2, a0, 2);
    O2E_GC_ROW_(3, a0, 3);
    O2E_GC_ROW_(4, a1, 0);
    O2E_GC_ROW_(5, a1, 1);
    O2E_GC_ROW_(6, a1, 2);
    O2E_GC_ROW_(7, a1, 3);
#undef O2E_GC_ROW_
  }
  for (int r = 0; r < O2E_GC_MB; ++r) {
    vst1q_f32(wide + (size_t)r * ldw, c[r][0]);
    if (nv > 1) vst1q_f32(wide + (size_t)r * ldw + 4, c[r][1]);
    if (nv > 2) vst1q_f32(wide + (size_t)r * ldw + 8, c[r][2]);
  }
}
#endif

#if defined(O2E_GC_VW)
/* A tile of `n` pixels at most O2E_GC_NB: the last of a range takes as few vectors as cover
 * it (RegNetX's 7x7 maps: 61 flat positions in 2 x 24 + 16 rather than 3 x 24 on AVX2). */
static void o2e_gconv_tile_(const float *restrict a, const float *restrict b,
                            const int *restrict off, int K, float *restrict wide, size_t ldw,
                            int n)
{
  if (n > 2 * O2E_GC_VW)
    o2e_gconv_tile_v_(a, b, off, K, wide, ldw, 3);
  else if (n > O2E_GC_VW)
    o2e_gconv_tile_v_(a, b, off, K, wide, ldw, 2);
  else
    o2e_gconv_tile_v_(a, b, off, K, wide, ldw, 1);
}
#else
static void o2e_gconv_tile_(const float *restrict a, const float *restrict b,
                            const int *restrict off, int K, float *restrict wide, size_t ldw,
                            int n)
{
  (void)n; /* always O2E_GC_NB wide */
  float acc[O2E_GC_MB][O2E_GC_NB];
  for (int r = 0; r < O2E_GC_MB; ++r)
    for (int j = 0; j < O2E_GC_NB; ++j) acc[r][j] = 0.0f;
  for (int k = 0; k < K; ++k) {
    const float *restrict bk = b + off[k];
    const float *restrict ak = a + (size_t)k * O2E_GC_MB;
    for (int r = 0; r < O2E_GC_MB; ++r)
      for (int j = 0; j < O2E_GC_NB; ++j) acc[r][j] += ak[r] * bk[j];
  }
  for (int r = 0; r < O2E_GC_MB; ++r)
    for (int j = 0; j < O2E_GC_NB; ++j) wide[(size_t)r * ldw + j] = acc[r][j];
}
#endif

/* d[0..n) = act(s + bias + r): one output row out of the wide tile rows (vector loops; Relu,
 * the common case, inline in one pass, keeping NaN; the other kinds by o2e_act_n_). */
static void o2e_gconv_row_(float *d, const float *restrict s, const float *r, int n, float bias,
                           o2e_act act)
{
  if (!r && act.kind == O2E_ACT_RELU) {
    for (int i = 0; i < n; ++i) {
      const float v = s[i] + bias;
      d[i] = v < 0.0f ? 0.0f : v;
    }
    return;
  }
  if (r)
    for (int i = 0; i < n; ++i) d[i] = s[i] + bias + r[i];
  else
    for (int i = 0; i < n; ++i) d[i] = s[i] + bias;
  if (act.kind == O2E_ACT_RELU)
    for (int i = 0; i < n; ++i) d[i] = d[i] < 0.0f ? 0.0f : d[i];
  else
    o2e_act_n_(d, (size_t)n, act);
}

/* Groups [g0, g1). A group's input becomes phase planes, in which tap (c, ky, kx) of output
 * (oh, ow) sits at a fixed offset from oh*WQ + ow: the flat index q = oh*WQ + ow runs in whole
 * tiles over (OH - 1)*WQ + OW positions into a wide buffer (no im2col: a 7x7 map's rows of 7
 * made that cost more than the products), whose rows then drop the columns ow >= OW as the
 * epilogue stores them. */
static void o2e_gconv_groups(void *arg, int g0, int g1)
{
  const o2e_gconv_args *a = (const o2e_gconv_args *)arg;
  const int khw = a->kh * a->kw, K = a->cg * khw, P = a->OH * a->OW;
  const int mblk = (a->mg + O2E_GC_MB - 1) / O2E_GC_MB;
  const size_t plane = (size_t)a->sh * a->sw * a->HQ * a->WQ, nplanes = a->cg * plane;
  const int nq = (a->OH - 1) * a->WQ + a->OW;
  const size_t ldw = (size_t)(nq + O2E_GC_NB - 1) / O2E_GC_NB * O2E_GC_NB;
  float *buf = a->ws + a->ws_per * (size_t)o2e_parallel_thread();
  float *wide = buf + nplanes + O2E_GC_SLACK; /* [mblk * 8][ldw] */
  int off[O2E_GC_KMAX];
  for (int k = 0; k < K; ++k) {
    const int c = k / khw, ky = k / a->kw % a->kh, kx = k % a->kw;
    const int ry = ky * a->dh, rx = kx * a->dw;
    off[k] = (int)(c * plane) + ((ry % a->sh * a->sw + rx % a->sw) * a->HQ + ry / a->sh) * a->WQ +
             rx / a->sw;
  }
  for (int g = g0; g < g1; ++g) {
    memset(buf, 0, (nplanes + O2E_GC_SLACK) * sizeof(float));
    for (int c = 0; c < a->cg; ++c)
      a->split(a->x + ((size_t)g * a->cg + c) * a->H * a->W, a->H, a->W, a->pt, a->pl, a->HQ,
               a->WQ, buf + c * plane);
    for (int mb = 0; mb < mblk; ++mb) {
      const float *wp = a->w + ((size_t)g * mblk + mb) * K * O2E_GC_MB;
      for (int q0 = 0; q0 < nq; q0 += O2E_GC_NB)
        o2e_gconv_tile_(wp, buf + q0, off, K, wide + (size_t)mb * O2E_GC_MB * ldw + q0, ldw,
                        nq - q0);
    }
    /* Without a residual, rows are stored in whole vectors of 8: the floats written past a
     * row's end belong to the group's later rows (next channel's rows), stored after it;
     * rows within 8 floats of the group's end are exact (the next group may be another
     * thread's, or past y).
     * (7x7 maps: a row of 7 otherwise never reached the vector loop.) With one, y may share
     * the residual's buffer, whose next row is still to be read: exact rows. */
    const int wn = a->res ? a->OW : (a->OW + 7) & ~7, gend = a->mg * P;
    for (int m = 0; m < a->mg; ++m) {
      const size_t row = (size_t)(g * a->mg + m) * P;
      const float bv = a->bias ? a->bias[g * a->mg + m] : 0.0f;
      for (int oh = 0; oh < a->OH; ++oh) {
        const int at = m * P + oh * a->OW; /* the row's start in the group's output */
        o2e_gconv_row_(a->y + row + (size_t)oh * a->OW, wide + (size_t)m * ldw + (size_t)oh * a->WQ,
                       a->res ? a->res + row + (size_t)oh * a->OW : NULL,
                       at + wn <= gend ? wn : a->OW, bv, a->act);
      }
    }
  }
}

/* The whole convolution of one image; `threaded`: split the groups across the pool (inline:
 * x86-64-v2 and portable builds include the header but take the implicit GEMM on maps of 16
 * outputs or more, conv_grouped.py). */
static inline void o2e_gconv(const o2e_gconv_args *a, int group, int threaded)
{
  if (threaded)
    o2e_parallel_for(group, o2e_gconv_groups, (void *)a);
  else
    o2e_gconv_groups((void *)a, 0, group);
}

#endif /* O2E_GCONV_H */
