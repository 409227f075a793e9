/* o2e_lanes.h - arguments and pixel tiles of the channel-lanes direct convolution (kernels/conv/conv_lanes.py).
 * Static C moved out of kernels/conv/conv_lanes.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_LANES_H
#define O2E_LANES_H

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

#endif /* O2E_LANES_H */
