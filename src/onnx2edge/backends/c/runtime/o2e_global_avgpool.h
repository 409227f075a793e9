/* o2e_global_avgpool.h - GlobalAveragePool over planes (kernels/pool/pool2d.py).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_GLOBAL_AVGPOOL_H
#define O2E_GLOBAL_AVGPOOL_H
#include <stddef.h>
#include "o2e_win2d.h"

/* GlobalAveragePool over planes [i0, i1) of W elements each (pool2d.py). Sixteen partial sums
 * (one vector register) instead of one running sum: float addition is not reassociated by
 * the compiler, so a single accumulator would serialise on the add latency. */
static void o2e_global_avgpool(void *arg, int i0, int i1)
{
  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int S = a->W;
  for (int i = i0; i < i1; ++i) {
    const float *restrict xc = a->x + (size_t)i * S;
    float part[16] = {0.0f}, acc = 0.0f;
    /* The tail starts at a bound computed up front, not where the blocked loop left k: with
     * k carried over, gcc on 32-bit targets (arm-none-eabi -O2) rewrites the dead tail's
     * `k < S` as `k != S` before it folds k = S, sees a loop of 2^32 turns whose address
     * would wrap, and reports "iteration 1073741823 invokes undefined behavior"
     * (-Waggressive-loop-optimizations, an error under -Werror); the code was correct. */
    const int S16 = S - S % 16;
    for (int k = 0; k < S16; k += 16)
      for (int l = 0; l < 16; ++l) part[l] += xc[k + l];
    for (int k = S16; k < S; ++k) acc += xc[k];
    for (int l = 0; l < 16; ++l) acc += part[l];
    a->y[i] = acc / (float)S;
  }
}

#endif /* O2E_GLOBAL_AVGPOOL_H */
