/* o2e_pool2d.h - MaxPool / AveragePool over phase planes for float32 NCHW (kernels/pool/pool2d.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a plane pool needs it (backends/c/headers.py); it compiles on its own. pool2d.py's docstring
 * explains the phase planes; o2e_phase_split.h fills them.
 *
 * o2e_pool_planes(arg, i0, i1, op, kh, kw, sh, sw, dh, dw) is always_inline: the generated
 * wrapper of a window geometry passes them as literal constants, so the tap loops unroll fully
 * (every tap a constant offset into its phase plane) and the op branches fold, as when the
 * geometry was generated into the C. Taps are applied in row-major order: a > b ? a : b for max
 * (NaN as the generic loop, -inf borders never win), a sum for AveragePool (zero borders add
 * nothing), divided in the compaction pass by a->dr[oh] * a->dc[ow]. NEON computes 4 vectors of
 * 4 outputs together, every tap applied to all of them before the next (independent chains for
 * in-order cores; each lane sees the portable loop's operations in its order). */
#ifndef O2E_POOL2D_H
#define O2E_POOL2D_H
#include <math.h>
#include <stddef.h>
#include "o2e_intrinsics.h"
#include "o2e_copy_row.h"
#include "o2e_phase_split.h"
#include "o2e_win2d.h"

#if defined(__GNUC__)
#define O2E_P2D_INL static inline __attribute__((always_inline, unused))
#define O2E_P2D_UNROLL _Pragma("GCC unroll 1024")
#else
#define O2E_P2D_INL static inline
#define O2E_P2D_UNROLL
#endif

enum { O2E_P2D_MAX, O2E_P2D_AVG };
#define O2E_P2D_VW 16 /* block of the wide loops (pool2d.VW) */

/* Offset of tap t (row-major over kh x kw) from the planes' start at output p = 0. */
O2E_P2D_INL size_t o2e_p2d_off_(int t, int kw, int sh, int sw, int dh, int dw, int HQ, int WQ)
{
  const int i = t / kw, j = t % kw;
  return (size_t)((i * dh) % sh * sw + (j * dw) % sw) * HQ * WQ + (size_t)((i * dh) / sh) * WQ + (j * dw) / sw;
}

O2E_P2D_INL float o2e_p2d_tap_(int op, float v, float t) { return op == O2E_P2D_MAX ? (t > v ? t : v) : v + t; }

/* The taps of one channel: out[p] for p < n (whole blocks of 16 when wide) from the planes at
 * src. Restrict parameters: the wide output follows the planes in the same scratch slot. */
O2E_P2D_INL void o2e_p2d_taps_(const float *restrict planes, float *restrict out, int n, int wide, int op,
    int nt, int kw, int sh, int sw, int dh, int dw, int HQ, int WQ)
{
  int p = 0;
#if defined(__ARM_NEON) && defined(__aarch64__)
  for (; wide ? p < n : p + O2E_P2D_VW <= n; p += O2E_P2D_VW) {
    float32x4_t v[4];
    O2E_P2D_UNROLL for (int u = 0; u < 4; ++u) v[u] = vld1q_f32(planes + o2e_p2d_off_(0, kw, sh, sw, dh, dw, HQ, WQ) + p + 4 * u);
    O2E_P2D_UNROLL for (int t = 1; t < nt; ++t) {
      const float *restrict s = planes + o2e_p2d_off_(t, kw, sh, sw, dh, dw, HQ, WQ) + p;
      float32x4_t x[4];
      O2E_P2D_UNROLL for (int u = 0; u < 4; ++u) x[u] = vld1q_f32(s + 4 * u);
      O2E_P2D_UNROLL for (int u = 0; u < 4; ++u)
        v[u] = op == O2E_P2D_MAX ? vbslq_f32(vcgtq_f32(x[u], v[u]), x[u], v[u]) : vaddq_f32(v[u], x[u]);
    }
    O2E_P2D_UNROLL for (int u = 0; u < 4; ++u) vst1q_f32(&out[p + 4 * u], v[u]);
  }
  for (; p < n; ++p) { /* a narrow output's last n % 16 (y has no slack there) */
    float v = planes[o2e_p2d_off_(0, kw, sh, sw, dh, dw, HQ, WQ) + p];
    O2E_P2D_UNROLL for (int t = 1; t < nt; ++t) v = o2e_p2d_tap_(op, v, planes[o2e_p2d_off_(t, kw, sh, sw, dh, dw, HQ, WQ) + p]);
    out[p] = v;
  }
#else
  if (wide) {
    for (int p0 = 0; p0 < n; p0 += O2E_P2D_VW)
      for (p = p0; p < p0 + O2E_P2D_VW; ++p) {
        float v = planes[o2e_p2d_off_(0, kw, sh, sw, dh, dw, HQ, WQ) + p];
        O2E_P2D_UNROLL for (int t = 1; t < nt; ++t) v = o2e_p2d_tap_(op, v, planes[o2e_p2d_off_(t, kw, sh, sw, dh, dw, HQ, WQ) + p]);
        out[p] = v;
      }
  } else {
    for (; p < n; ++p) {
      float v = planes[o2e_p2d_off_(0, kw, sh, sw, dh, dw, HQ, WQ) + p];
      O2E_P2D_UNROLL for (int t = 1; t < nt; ++t) v = o2e_p2d_tap_(op, v, planes[o2e_p2d_off_(t, kw, sh, sw, dh, dw, HQ, WQ) + p]);
      out[p] = v;
    }
  }
#endif
}

O2E_P2D_INL void o2e_pool_planes(void *arg, int i0, int i1, int op, int kh, int kw, int sh, int sw, int dh, int dw)
{
  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, HQ = a->HQ, WQ = a->WQ;
  /* WQ > OW (rows to compact) whenever the taps reach past one column; AveragePool always
   * divides in the compaction pass */
  const int wide = op == O2E_P2D_AVG || (kw - 1) * dw / sw != 0;
  float *restrict planes = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const size_t np = ((size_t)(sh * sw) * HQ * WQ + O2E_P2D_VW + 15) / 16 * 16;
  float *restrict yw = planes + np; /* the wide output (when rows need compaction) */
  const float fill = op == O2E_P2D_MAX ? -INFINITY : 0.0f;
  for (size_t k = 0; k < np; ++k) planes[k] = fill;
  for (int i = i0; i < i1; ++i) {
    float *restrict yc = a->y + (size_t)i * OH * OW;
    float *restrict out = wide ? yw : yc;
    o2e_phase_split(a->x + (size_t)i * H * W, H, W, a->pt, a->pl, HQ, WQ, planes, sh, sw);
    o2e_p2d_taps_(planes, out, wide ? (OH - 1) * WQ + OW : OH * OW, wide, op, kh * kw, kw, sh, sw, dh, dw, HQ, WQ);
    if (op == O2E_P2D_AVG) {
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) yc[oh * OW + ow] = yw[oh * WQ + ow] / (a->dr[oh] * a->dc[ow]);
    } else if (wide) {
      for (int oh = 0; oh < OH; ++oh) o2e_copy_row(yc + (size_t)oh * OW, yw + (size_t)oh * WQ, OW);
    }
  }
}

#endif /* O2E_POOL2D_H */
