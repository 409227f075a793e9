/* o2e_softmax.h - Softmax / LogSoftmax of float32 rows over the last axis (ops/norm.py).
 * Attention's scores (Whisper: 6 heads x 1500 rows of 1500) make this one of a transformer's
 * largest element-wise passes. Three passes over a row that stays in L1: the maximum in 16
 * lanes, then exp(x - max) with o2e_vmath.h's vectorised exp, stored and summed in 16 float
 * lanes in the same loop, then one multiply by 1 / sum (LogSoftmax: no store of the
 * exponentials, then x - (max + log(sum))). The lanes are merged in double. Every loop
 * vectorises (the caller's model.c starts with o2e_vmath.h's no-trapping-math pragma).
 * NaN anywhere in a row makes the whole row NaN (the sum is NaN), as onnxruntime; a row holding
 * +Inf, or only -Inf, gives NaN (Inf - Inf) as onnxruntime. */
#ifndef O2E_SOFTMAX_H
#define O2E_SOFTMAX_H
#include <math.h>
#include <stddef.h>
#include "o2e_vmath.h"

/* rows [r0, r1) of n values: y[r] = softmax(x[r] * scale) (log: LogSoftmax): o2e.ScaledSoftmax,
 * 1 for a plain Softmax (an exact product). The maximum is taken of the rounded products, as
 * after a separate Mul; in exp(x * scale - max) the compiler may fuse the product into the
 * subtraction (-ffp-contract=fast: one rounding fewer, a relative change of at most
 * |x * scale - max| * 2^-24 in the exponential). x and y do not overlap. */
typedef struct {
  const float *x;
  float *y;
  size_t n;
  int log;
  float scale;
} o2e_softmax_args;

static void o2e_softmax_rows(void *arg, int r0, int r1)
{
  const o2e_softmax_args *a = (const o2e_softmax_args *)arg;
  const size_t n = a->n, n16 = n - n % 16;
  const float c = a->scale;
  for (int r = r0; r < r1; ++r) {
    const float *restrict xs = a->x + (size_t)r * n;
    float *restrict ys = a->y + (size_t)r * n;
    float m[16], s[16], mx = -INFINITY;
    double sum = 0.0;
    size_t j;
    int l;
    /* a select, not fmaxf: gcc turns it into max instructions; a NaN is skipped here and
     * turns the sum (so the row) into NaN below */
    for (l = 0; l < 16; ++l) m[l] = -INFINITY;
    for (j = 0; j < n16; j += 16)
#pragma GCC unroll 1 /* unrolled, the 16 maxima would be 16 scalar reductions; kept, a vector one */
      for (l = 0; l < 16; ++l) {
        const float t = xs[j + l] * c;
        m[l] = t > m[l] ? t : m[l];
      }
    for (l = 0; l < 16; ++l) mx = m[l] > mx ? m[l] : mx;
    for (j = n16; j < n; ++j) mx = xs[j] * c > mx ? xs[j] * c : mx;
    for (l = 0; l < 16; ++l) s[l] = 0.0f;
    if (a->log) {
      for (j = 0; j < n16; j += 16)
        for (l = 0; l < 16; ++l) s[l] += o2e_expf(xs[j + l] * c - mx);
      for (j = n16; j < n; ++j) sum += o2e_expf(xs[j] * c - mx);
      for (l = 0; l < 16; ++l) sum += s[l];
      {
        const double lse = mx + log(sum);
        for (j = 0; j < n; ++j) ys[j] = (float)(xs[j] * c - lse);
      }
      continue;
    }
    for (j = 0; j < n16; j += 16)
      for (l = 0; l < 16; ++l) {
        const float e = o2e_expf(xs[j + l] * c - mx);
        ys[j + l] = e;
        s[l] += e;
      }
    for (j = n16; j < n; ++j) {
      ys[j] = o2e_expf(xs[j] * c - mx);
      sum += ys[j];
    }
    for (l = 0; l < 16; ++l) sum += s[l];
    {
      const float inv = (float)(1.0 / sum);
      for (j = 0; j < n; ++j) ys[j] *= inv;
    }
  }
}

#endif /* O2E_SOFTMAX_H */
