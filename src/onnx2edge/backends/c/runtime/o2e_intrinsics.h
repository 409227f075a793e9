/* o2e_intrinsics.h - the vector intrinsics of the build's ISA (AVX-512 / AVX2 + FMA: immintrin.h; AArch64 NEON: arm_neon.h).
 * Static C moved out of kernels/pool/pool2d.py (issue 32): the generated model.c includes it where
 * a kernel needs it (backends/c/headers.py); it compiles on its own. */
#ifndef O2E_INTRINSICS_H
#define O2E_INTRINSICS_H

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

#endif /* O2E_INTRINSICS_H */
