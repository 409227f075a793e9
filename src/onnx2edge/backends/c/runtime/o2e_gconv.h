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
 * O2E_GC_NB output pixels in plain C loops of constant trip count, which the compiler turns
 * into vector FMAs with the tile in registers (16 zmm at AVX-512, 8 ymm at AVX2, 16 q at NEON).
 */
#ifndef O2E_GCONV_H
#define O2E_GCONV_H
#include <stddef.h>
#include <string.h>

#include "o2e_gemm.h"

#define O2E_GC_MB 8
#define O2E_GC_KMAX 576 /* taps a group at most (conv_grouped.MAX_K) */
#define O2E_GC_NBMAX 32 /* the widest tile: the planes' slack (conv_grouped.NB_MAX) */
/* 16 accumulators at AVX-512 (32 zmm); 8 elsewhere: AVX2's 16 ymm cannot also hold 2 x 8
 * (gcc spilled the tile to the stack), NEON's 32 q registers hold 16 */
#if defined(__AVX512F__)
#define O2E_GC_NB 32
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
  float *ws;         /* per thread ws_per floats: the group's phase planes, O2E_GC_NBMAX
                      * floats of slack, the wide output [ceil(mg / 8) * 8][nq rounded up] */
  size_t ws_per;
  o2e_gconv_split_fn split;
  int cg, mg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW, HQ, WQ;
  o2e_act act;
} o2e_gconv_args;

/* wide[r][0 .. O2E_GC_NB) = sum_k a[k][r] x b[off[k] .. + O2E_GC_NB) for the 8 rows r of a
 * panel: a is [K][8] (8 output channels a tap), wide's rows are ldw apart. */
static void o2e_gconv_tile_(const float *restrict a, const float *restrict b,
                            const int *restrict off, int K, float *restrict wide, size_t ldw)
{
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

/* d[0..n) = act(s + bias + r): one output row out of the wide tile rows (vector loops; Relu,
 * the common case, inline, keeping NaN; the other kinds by o2e_act_n_). */
static void o2e_gconv_row_(float *d, const float *restrict s, const float *r, int n, float bias,
                           o2e_act act)
{
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
  float *wide = buf + nplanes + O2E_GC_NBMAX; /* [mblk * 8][ldw] */
  int off[O2E_GC_KMAX];
  for (int k = 0; k < K; ++k) {
    const int c = k / khw, ky = k / a->kw % a->kh, kx = k % a->kw;
    const int ry = ky * a->dh, rx = kx * a->dw;
    off[k] = (int)(c * plane) + ((ry % a->sh * a->sw + rx % a->sw) * a->HQ + ry / a->sh) * a->WQ +
             rx / a->sw;
  }
  for (int g = g0; g < g1; ++g) {
    memset(buf, 0, (nplanes + O2E_GC_NBMAX) * sizeof(float));
    for (int c = 0; c < a->cg; ++c)
      a->split(a->x + ((size_t)g * a->cg + c) * a->H * a->W, a->H, a->W, a->pt, a->pl, a->HQ,
               a->WQ, buf + c * plane);
    for (int mb = 0; mb < mblk; ++mb) {
      const float *wp = a->w + ((size_t)g * mblk + mb) * K * O2E_GC_MB;
      for (int q0 = 0; q0 < nq; q0 += O2E_GC_NB)
        o2e_gconv_tile_(wp, buf + q0, off, K, wide + (size_t)mb * O2E_GC_MB * ldw + q0, ldw);
    }
    for (int m = 0; m < a->mg; ++m) {
      const size_t row = (size_t)(g * a->mg + m) * P;
      const float bv = a->bias ? a->bias[g * a->mg + m] : 0.0f;
      for (int oh = 0; oh < a->OH; ++oh)
        o2e_gconv_row_(a->y + row + (size_t)oh * a->OW, wide + (size_t)m * ldw + (size_t)oh * a->WQ,
                       a->res ? a->res + row + (size_t)oh * a->OW : NULL, a->OW, bv, a->act);
    }
  }
}

/* The whole convolution of one image; `threaded`: split the groups across the pool (inline:
 * builds below AVX-512 include the header but take the implicit GEMM, conv_grouped.py). */
static inline void o2e_gconv(const o2e_gconv_args *a, int group, int threaded)
{
  if (threaded)
    o2e_parallel_for(group, o2e_gconv_groups, (void *)a);
  else
    o2e_gconv_groups((void *)a, 0, group);
}

#endif /* O2E_GCONV_H */
