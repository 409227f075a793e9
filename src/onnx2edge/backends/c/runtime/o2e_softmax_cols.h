/* o2e_softmax_cols.h - Softmax / LogSoftmax of float32 over an axis that is not the last
 * (ops/norm.py): x viewed as [outer, n, inner], softmax over n for every (outer, inner).
 * YOLOv8's DFL head runs Softmax over axis 1 of [1, 16, 4, 8400]: a loop per column, striding
 * by `inner` through n values, runs scalar. Here a block of up to 64 neighbouring columns is
 * taken at once, so every loop runs along the contiguous inner axis and vectorises: the
 * maxima, then exp(x - max) with o2e_vmath.h's vectorised exp, stored and summed in double
 * (the generic loop's precision), then one multiply by 1 / sum (LogSoftmax: no store of the
 * exponentials, then x - (max + log(sum)) in double). Every loop vectorises (the caller's
 * model.c starts with o2e_vmath.h's no-trapping-math pragma). A NaN in a column makes that
 * column NaN (the sum is NaN); a column holding +Inf, or only -Inf, gives NaN (Inf - Inf), as
 * the generic loop and onnxruntime. */
#ifndef O2E_SOFTMAX_COLS_H
#define O2E_SOFTMAX_COLS_H
#include <math.h>
#include <stddef.h>
#include "o2e_vmath.h"

#define O2E_SMC_BLOCK 64

typedef struct {
  const float *x;
  float *y;
  size_t n, inner;
  int log;
} o2e_softmax_cols_args;

/* work items [t0, t1): item t is outer index t / blocks, columns from (t % blocks) * 64.
 * x and y do not overlap. */
static void o2e_softmax_cols(void *arg, int t0, int t1)
{
  const o2e_softmax_cols_args *a = (const o2e_softmax_cols_args *)arg;
  const size_t n = a->n, inner = a->inner;
  const size_t blocks = (inner + O2E_SMC_BLOCK - 1) / O2E_SMC_BLOCK;
  for (int t = t0; t < t1; ++t) {
    const size_t o = (size_t)t / blocks, i0 = ((size_t)t % blocks) * O2E_SMC_BLOCK;
    const size_t w = inner - i0 < O2E_SMC_BLOCK ? inner - i0 : O2E_SMC_BLOCK;
    const float *restrict xs = a->x + o * n * inner + i0;
    float *restrict ys = a->y + o * n * inner + i0;
    float m[O2E_SMC_BLOCK];
    double s[O2E_SMC_BLOCK];
    size_t j, l;
    /* a select, not fmaxf: it vectorises; a NaN is skipped here and makes the sum NaN below */
    for (l = 0; l < w; ++l) m[l] = -INFINITY;
    for (j = 0; j < n; ++j)
      for (l = 0; l < w; ++l) {
        const float v = xs[j * inner + l];
        m[l] = v > m[l] ? v : m[l];
      }
    for (l = 0; l < w; ++l) s[l] = 0.0;
    if (a->log) {
      for (j = 0; j < n; ++j)
        for (l = 0; l < w; ++l) s[l] += (double)o2e_expf(xs[j * inner + l] - m[l]);
      for (l = 0; l < w; ++l) s[l] = (double)m[l] + log(s[l]);
      for (j = 0; j < n; ++j)
        for (l = 0; l < w; ++l) ys[j * inner + l] = (float)((double)xs[j * inner + l] - s[l]);
      continue;
    }
    for (j = 0; j < n; ++j)
      for (l = 0; l < w; ++l) {
        const float e = o2e_expf(xs[j * inner + l] - m[l]);
        ys[j * inner + l] = e;
        s[l] += (double)e;
      }
    for (l = 0; l < w; ++l) m[l] = (float)(1.0 / s[l]);
    for (j = 0; j < n; ++j)
      for (l = 0; l < w; ++l) ys[j * inner + l] *= m[l];
  }
}

#endif /* O2E_SOFTMAX_COLS_H */
