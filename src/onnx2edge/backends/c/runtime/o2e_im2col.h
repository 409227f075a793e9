/* o2e_im2col.h - blocked im2col (kernels/conv/conv_gemm.py).
 * Static C moved out of kernels/conv/conv_gemm.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_IM2COL_H
#define O2E_IM2COL_H
#include <stddef.h>

/* im2col: the input patches of a 2-D convolution as a matrix, zeros for padding. Row
 * r = (c*kh + ki)*kw + kj holds x[c][oh*sh - pt + ki*dh][ow*sw - pl + kj*dw] for the output
 * positions of rows [oh0, oh1), (oh1 - oh0)*OW columns. */
typedef struct {
  const float *x;
  float *col;
  int H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, oh0, oh1;
} o2e_im2col_args;

/* Rows [r0, r1) of the matrix: independent, so o2e_parallel_for can split them. Each row of
 * the input is copied in one stretch; the columns that fall in the padding are zeroed around
 * it instead of testing every element. */
static void o2e_im2col_rows(void *arg, int r0, int r1)
{
  const o2e_im2col_args *a = (const o2e_im2col_args *)arg;
  const int W = a->W, sw = a->sw, OW = a->OW;
  const size_t ld = (size_t)(a->oh1 - a->oh0) * OW;
  for (int r = r0; r < r1; ++r) {
    const int c = r / (a->kh * a->kw), ki = r / a->kw % a->kh, kj = r % a->kw;
    const int off = kj * a->dw - a->pl; /* input column of output column ow: ow*sw + off */
    int ow0 = off >= 0 ? 0 : (-off + sw - 1) / sw, ow1 = W > off ? (W - off + sw - 1) / sw : 0;
    float *dst = a->col + (size_t)r * ld;
    if (ow0 > OW) ow0 = OW;
    if (ow1 > OW) ow1 = OW;
    if (ow1 < ow0) ow1 = ow0;
    for (int oh = a->oh0; oh < a->oh1; ++oh) {
      const int ih = oh * a->sh - a->pt + ki * a->dh;
      float *restrict row = dst + (size_t)(oh - a->oh0) * OW;
      int ow = 0;
      if (ih < 0 || ih >= a->H) {
        for (; ow < OW; ++ow) row[ow] = 0.0f;
        continue;
      }
      {
        const float *restrict src = a->x + ((size_t)c * a->H + ih) * W;
        for (; ow < ow0; ++ow) row[ow] = 0.0f;
        if (sw == 1)
          for (; ow < ow1; ++ow) row[ow] = src[ow + off];
        else
          for (; ow < ow1; ++ow) row[ow] = src[ow * sw + off];
        for (; ow < OW; ++ow) row[ow] = 0.0f;
      }
    }
  }
}

#endif /* O2E_IM2COL_H */
