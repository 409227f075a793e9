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
 * into vector FMAs with the tile in registers (16 zmm at AVX-512, 16 ymm at AVX2, 16 q at NEON).
 */
#ifndef O2E_GCONV_H
#define O2E_GCONV_H
#include <stddef.h>
#include <string.h>

#include "o2e_gemm.h"

#define O2E_GC_MB 8
#define O2E_GC_KMAX 576 /* taps a group at most (conv_grouped.MAX_K) */
#if defined(__AVX512F__)
#define O2E_GC_NB 32
#elif defined(__AVX__)
#define O2E_GC_NB 16
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
  float *ws;         /* per thread ws_per floats: the group's phase planes and O2E_GC_NB slack */
  size_t ws_per;
  o2e_gconv_split_fn split;
  int cg, mg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW, HQ, WQ;
  o2e_act act;
} o2e_gconv_args;

/* t = sum_k a[k] x b[off[k] .. + O2E_GC_NB): a is [K][8] (8 output channels a tap). */
static void o2e_gconv_tile_(const float *restrict a, const float *restrict b,
                            const int *restrict off, int K, float t[O2E_GC_MB][O2E_GC_NB])
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
  memcpy(t, acc, sizeof acc);
}

/* Groups [g0, g1). A group's input becomes phase planes, in which tap (c, ky, kx) of output
 * (oh, ow) sits at a fixed offset from oh*WQ + ow: the flat index q = oh*WQ + ow runs in whole
 * tiles over (OH - 1)*WQ + OW positions, and the columns ow >= OW are computed and dropped
 * (no im2col: a 7x7 map's rows of 7 made that cost more than the products). */
static void o2e_gconv_groups(void *arg, int g0, int g1)
{
  const o2e_gconv_args *a = (const o2e_gconv_args *)arg;
  const int khw = a->kh * a->kw, K = a->cg * khw, P = a->OH * a->OW;
  const int mblk = (a->mg + O2E_GC_MB - 1) / O2E_GC_MB;
  const size_t plane = (size_t)a->sh * a->sw * a->HQ * a->WQ;
  const int nq = (a->OH - 1) * a->WQ + a->OW;
  float *buf = a->ws + a->ws_per * (size_t)o2e_parallel_thread();
  int off[O2E_GC_KMAX];
  for (int k = 0; k < K; ++k) {
    const int c = k / khw, ky = k / a->kw % a->kh, kx = k % a->kw;
    const int ry = ky * a->dh, rx = kx * a->dw;
    off[k] = (int)(c * plane) + ((ry % a->sh * a->sw + rx % a->sw) * a->HQ + ry / a->sh) * a->WQ +
             rx / a->sw;
  }
  for (int g = g0; g < g1; ++g) {
    memset(buf, 0, a->ws_per * sizeof(float));
    for (int c = 0; c < a->cg; ++c)
      a->split(a->x + ((size_t)g * a->cg + c) * a->H * a->W, a->H, a->W, a->pt, a->pl, a->HQ,
               a->WQ, buf + c * plane);
    for (int q0 = 0; q0 < nq; q0 += O2E_GC_NB) {
      const int nb = nq - q0 < O2E_GC_NB ? nq - q0 : O2E_GC_NB;
      for (int mb = 0; mb < mblk; ++mb) {
        float t[O2E_GC_MB][O2E_GC_NB];
        const int m0 = g * a->mg + mb * O2E_GC_MB;
        const int mr = a->mg - mb * O2E_GC_MB < O2E_GC_MB ? a->mg - mb * O2E_GC_MB : O2E_GC_MB;
        o2e_gconv_tile_(a->w + ((size_t)g * mblk + mb) * K * O2E_GC_MB, buf + q0, off, K, t);
        for (int r = 0; r < mr; ++r) {
          const float bv = a->bias ? a->bias[m0 + r] : 0.0f;
          const size_t row = (size_t)(m0 + r) * P;
          int oh = q0 / a->WQ, ow = q0 % a->WQ;
          for (int j = 0; j < nb; ++j) {
            if (ow < a->OW) {
              const size_t o = row + (size_t)oh * a->OW + ow;
              float v = t[r][j] + bv;
              if (a->res) v += a->res[o];
              if (a->act.kind != O2E_ACT_NONE && a->act.kind < O2E_ACT_VM_FIRST_)
                v = o2e_act1_(v, a->act);
              a->y[o] = v;
            }
            if (++ow == a->WQ) ow = 0, ++oh;
          }
        }
      }
    }
    if (a->act.kind >= O2E_ACT_VM_FIRST_) /* the group's outputs, just stored */
      o2e_act_vm_n_(a->y + (size_t)g * a->mg * P, (size_t)a->mg * P, a->act);
  }
}

/* The whole convolution of one image; `threaded`: split the items across the pool. */
static void o2e_gconv(const o2e_gconv_args *a, int group, int threaded)
{
  if (threaded)
    o2e_parallel_for(group, o2e_gconv_groups, (void *)a);
  else
    o2e_gconv_groups((void *)a, 0, group);
}

#endif /* O2E_GCONV_H */
