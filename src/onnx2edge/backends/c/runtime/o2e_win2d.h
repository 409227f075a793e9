/* o2e_win2d.h - arguments of the per-plane 2-D window kernels (kernels/pool/pool2d.py, pool_rows.py, conv_depthwise.py, conv_dwrows.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_WIN2D_H
#define O2E_WIN2D_H
#include <stddef.h>

/* Arguments of the per-plane 2-D window kernels (pooling, depthwise convolution): plane i of
 * the N*C planes reads x + i*H*W (channel i % C) and writes y + i*OH*OW. scratch holds one
 * slot of `slot` floats per thread: a kernel running on thread t (thread(), the pool's
 * o2e_parallel_thread, or NULL on one thread) uses slot t. */
typedef struct {
  const float *x, *w, *bias, *dr, *dc; /* dr, dc: AveragePool divisors per output row / column */
  float *y, *scratch;
  size_t slot;
  int (*thread)(void);
  int C, H, W, OH, OW, pt, pl, HQ, WQ;
  float lo, hi; /* Clip bounds of a fused activation */
  float *pool;   /* depthwise kernels: the mean of each output plane i goes to pool[i] (or NULL) */
} o2e_win2d_args;

#endif /* O2E_WIN2D_H */
