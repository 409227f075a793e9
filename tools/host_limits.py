#!/usr/bin/env python3
"""The two hardware ceilings the benchmark gaps are measured against, on this host's core.

- FMA peak (GFLOP/s): 12 independent chains of vector FMAs, built at each --arch (native:
  512-bit vectors where the CPU has AVX-512; x86-64-v3: 256-bit). A model's floor is its
  2 x MACs at this rate.
- Read bandwidth (GB/s): the best of 400 passes summing a buffer of each size (vector loads,
  4 chains), i.e. what streaming a layer's weights from the cache level that holds them costs.

Both are timed by thread CPU time, one thread. They bound what any kernel (ours or
onnxruntime's) can reach here; docs/benchmarks.md compares targets with them.

    python tools/host_limits.py --arch native,x86-64-v3 --bytes 3211264,16000000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef __AVX512F__
typedef __m512 V;
#define FMA _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define LOAD _mm512_load_ps
#define SET _mm512_set1_ps
#define W 16
#else
typedef __m256 V;
#define FMA _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define LOAD _mm256_load_ps
#define SET _mm256_set1_ps
#define W 8
#endif
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
  float out[16];
  if (argc < 2) { /* FMA peak */
    V a0 = SET(0.1f), a1 = SET(0.2f), a2 = SET(0.3f), a3 = SET(0.4f), a4 = SET(0.5f), a5 = SET(0.6f);
    V a6 = SET(0.7f), a7 = SET(0.8f), a8 = SET(0.9f), a9 = SET(1.0f), a10 = SET(1.1f), a11 = SET(1.2f);
    const V b = SET(0.999f), c = SET(0.0001f);
    const long n = 20000000;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
      double t = now();
      for (long i = 0; i < n; i++) {
        a0 = FMA(a0, b, c); a1 = FMA(a1, b, c); a2 = FMA(a2, b, c); a3 = FMA(a3, b, c);
        a4 = FMA(a4, b, c); a5 = FMA(a5, b, c); a6 = FMA(a6, b, c); a7 = FMA(a7, b, c);
        a8 = FMA(a8, b, c); a9 = FMA(a9, b, c); a10 = FMA(a10, b, c); a11 = FMA(a11, b, c);
      }
      t = now() - t;
      if (t < best) best = t;
    }
    V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));
    s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));
    _mm_storeu_ps(out, *(__m128 *)&s);
    printf("%.1f %g\n", (double)n * 12 * W * 2 / best / 1e9, out[0]);
    return 0;
  }
  {
    const size_t n = (size_t)atol(argv[1]) / 4 / (4 * W) * (4 * W);
    float *x = aligned_alloc(64, n * 4 + 64);
    V s0 = SET(0.0f), s1 = s0, s2 = s0, s3 = s0;
    double best = 1e9;
    for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7) * 1e-3f;
    for (int r = 0; r < 400; r++) {
      double t = now();
      for (size_t i = 0; i < n; i += 4 * W) {
        s0 = ADD(s0, LOAD(x + i));
        s1 = ADD(s1, LOAD(x + i + W));
        s2 = ADD(s2, LOAD(x + i + 2 * W));
        s3 = ADD(s3, LOAD(x + i + 3 * W));
      }
      t = now() - t;
      if (t < best) best = t;
    }
    s0 = ADD(ADD(s0, s1), ADD(s2, s3));
    _mm_storeu_ps(out, *(__m128 *)&s0);
    printf("%.1f %.2f %g\n", n * 4 / best / 1e9, best * 1e6, out[0]);
    return 0;
  }
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="native,x86-64-v3")
    ap.add_argument("--bytes", default="1048576,3211264,16000000,160000000")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "limits.c"
        src.write_text(SOURCE)
        for arch in a.arch.split(","):
            exe = Path(tmp) / f"limits-{arch}"
            subprocess.run(
                ["gcc", "-O2", f"-march={arch}", "-std=gnu11", str(src), "-o", str(exe)], check=True
            )
            peak = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
            print(f"{arch}: FMA peak {peak.split()[0]} GFLOP/s per core")
            for size in a.bytes.split(","):
                out = subprocess.run([exe, size], capture_output=True, text=True, check=True)
                gbs, us = out.stdout.split()[:2]
                print(f"{arch}: read {int(size) / 1e6:.1f} MB in {us} us: {gbs} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
