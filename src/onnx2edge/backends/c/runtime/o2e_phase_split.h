/* o2e_phase_split.h - a channel into the phase planes of its padded version (kernels/pool/pool2d.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a plane kernel needs it (backends/c/headers.py); it compiles on its own.
 *
 * Plane (a, b) (at planes + (a*sw + b)*HQ*WQ) holds xpad[r*sh + a][q*sw + b] at [r][q]. Only input
 * pixels are written; the border keeps the fill value the caller set once per scratch slot.
 *
 * o2e_phase_split(x, H, W, pt, pl, HQ, WQ, planes, sh, sw) is always_inline: the generated
 * wrapper of a stride (pool2d.phase_split) passes sh and sw as literal constants, so the
 * divisions by the stride become shifts and the stride branches fold, as when the stride was
 * generated into the C. A column stride of 2 deinterleaves each row in one pass. */
#ifndef O2E_PHASE_SPLIT_H
#define O2E_PHASE_SPLIT_H
#include <stddef.h>
#include "o2e_intrinsics.h"
#include "o2e_copy_row.h"
#include "o2e_deinterleave2.h"

#if defined(__GNUC__)
#define O2E_PHASE_INL static inline __attribute__((always_inline, unused))
#else
#define O2E_PHASE_INL static inline
#endif

O2E_PHASE_INL void o2e_phase_split(const float *restrict x, int H, int W, int pt, int pl, int HQ,
    int WQ, float *restrict planes, int sh, int sw)
{
  if (sw == 2) {
    /* source columns whose padded column iw + pl falls inside the planes (q < WQ) */
    const int m = W < 2 * WQ - pl ? W : 2 * WQ - pl;
    for (int ih = 0; ih < H; ++ih) {
      const int ph = ih + pt, r = ph / sh;
      if (r >= HQ) break;
      {
        const float *restrict s = x + (size_t)ih * W;
        float *restrict d0 = planes + ((size_t)((ph % sh) * 2) * HQ + r) * WQ;
        float *restrict d1 = d0 + (size_t)HQ * WQ;
        if (pl % 2 == 0) {
          o2e_deinterleave2(d0 + pl / 2, d1 + pl / 2, s, m);
        } else if (m > 0) { /* column 0 is odd in the padded row */
          d1[pl / 2] = s[0];
          o2e_deinterleave2(d0 + (pl + 1) / 2, d1 + (pl + 1) / 2, s + 1, m - 1);
        }
      }
    }
    return;
  }
  for (int b = 0; b < sw; ++b) {
    /* columns q whose source iw = q*sw + b - pl lies in [0, W) */
    const int q0 = pl > b ? (pl - b + sw - 1) / sw : 0;
    int q1 = (W + pl - b + sw - 1) / sw;
    if (q1 > WQ) q1 = WQ;
    for (int ih = 0; ih < H; ++ih) {
      const int ph = ih + pt, r = ph / sh;
      if (r >= HQ) break;
      {
        const float *restrict s = x + (size_t)ih * W;
        float *restrict d = planes + ((size_t)((ph % sh) * sw + b) * HQ + r) * WQ;
        if (sw == 1)
          o2e_copy_row(d + q0, s + (q0 + b - pl), q1 - q0);
        else
          for (int q = q0; q < q1; ++q) d[q] = s[q * sw + b - pl];
      }
    }
  }
}

#endif /* O2E_PHASE_SPLIT_H */
