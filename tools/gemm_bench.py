#!/usr/bin/env python3
"""Benchmark of the C GEMM engine (src/onnx2edge/backends/c/runtime/o2e_gemm.h).

Compiles a small C timing harness (clock_gettime, median of several runs) with
-O3 -march=native, once single-threaded and once with -DO2E_THREADS=<n>, and times, for a set
of conv-, FC- and small-shaped problems:

  o2e        o2e_sgemm with a plain row-major A (A packed block by block at run time)
  o2e packed o2e_sgemm_packed with A packed beforehand (how converted weights run)
  o2e 2T     o2e_sgemm_packed built with -DO2E_THREADS=<n>
  naive      the textbook i-j-k triple loop, same compiler flags
  numpy      np.matmul through OpenBLAS, 1 thread and <n> threads, with OPENBLAS_CORETYPE and
             OPENBLAS_L2_SIZE removed from that subprocess only so OpenBLAS picks its best
             kernel for this CPU; the kernel it picked (threadpoolctl) is printed

GFLOP/s counts 2*M*N*K flops; "% peak" is against the measured one-core FMA peak of the
widest vector ISA the compiler enables (or --peak). Prints a markdown table.

    python tools/gemm_bench.py [--reps 7] [--threads 2] [--shapes 256x3136x2304,...]

On a machine shared with other work, timings (and the threaded columns above all) are only
meaningful when the benchmark is not preempted: as root, run it as
`chrt -f 10 python tools/gemm_bench.py` (SCHED_FIFO; the kernel still keeps 5% for others).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "src" / "onnx2edge" / "backends" / "c" / "runtime"

DEFAULT_SHAPES = [
    (256, 3136, 2304),  # ResNet-50 layer2 3x3 conv (im2col)
    (64, 12544, 576),  # 3x3 conv, 64 channels, 112x112
    (512, 196, 4608),  # 3x3 conv, 512 channels, 14x14
    (1000, 1, 2048),  # ResNet-50 classifier, batch 1 (matrix-vector)
    (4096, 1, 25088),  # VGG fc6, batch 1 (matrix-vector, memory bound)
    (1000, 4, 2048),  # classifier, batch 4 (small N)
    (64, 3136, 64),  # 1x1 conv
    (32, 12544, 27),  # first 3x3 conv on RGB
    (16, 64, 27),  # small
    (8, 8, 8),  # tiny
    (30, 50, 20),  # small, odd
]

HARNESS = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "o2e_gemm.h"
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static void *alloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64)) { fprintf(stderr, "oom\n"); exit(1); }
  return p;
}
static void fill(float *p, size_t n, unsigned s) {
  size_t i;
  for (i = 0; i < n; i++) { s = s * 1103515245u + 12345u; p[i] = (float)((s >> 9) & 1023) / 512.0f - 1.0f; }
}
static void naive(int M, int N, int K, const float *A, const float *B, float *C) {
  int i, j, k;
  for (i = 0; i < M; i++)
    for (j = 0; j < N; j++) {
      float s = 0.0f;
      for (k = 0; k < K; k++) s += A[(size_t)i * K + k] * B[(size_t)k * N + j];
      C[(size_t)i * N + j] = s;
    }
}
/* One core's FMA peak: enough independent FMA chains to cover latency x throughput. */
static double peak_gflops(void) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#if defined(__AVX512F__)
  typedef __m512 V;
#define FMA_(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET_(x) _mm512_set1_ps(x)
  const double lanes = 16;
#else
  typedef __m256 V;
#define FMA_(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET_(x) _mm256_set1_ps(x)
  const double lanes = 8;
#endif
  /* distinct start values: identical chains would be merged into one by the compiler */
  V a0 = SET_(0.10f), a1 = SET_(0.11f), a2 = SET_(0.12f), a3 = SET_(0.13f), a4 = SET_(0.14f),
    a5 = SET_(0.15f), a6 = SET_(0.16f), a7 = SET_(0.17f), a8 = SET_(0.18f), a9 = SET_(0.19f),
    a10 = SET_(0.20f), a11 = SET_(0.21f);
  V x = SET_(0.999f), y = SET_(1e-6f);
  long n = 4000000, i;
  float sink[16];
  double t, best = 1e9;
  int trial;
  for (trial = 0; trial < 7; trial++) { /* best of 7: robust to other load on the machine */
  t = now();
  for (i = 0; i < n; i++) {
    a0 = FMA_(a0, x, y); a1 = FMA_(a1, x, y); a2 = FMA_(a2, x, y); a3 = FMA_(a3, x, y);
    a4 = FMA_(a4, x, y); a5 = FMA_(a5, x, y); a6 = FMA_(a6, x, y); a7 = FMA_(a7, x, y);
    a8 = FMA_(a8, x, y); a9 = FMA_(a9, x, y); a10 = FMA_(a10, x, y); a11 = FMA_(a11, x, y);
    __asm__ volatile("" : "+x"(x));
  }
  t = now() - t;
  if (t < best) best = t;
  }
  a0 = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  memcpy(sink, &a0, sizeof(float) * (size_t)lanes);
  if (sink[0] == 42.0f) printf("#\n");
  return (double)n * 12 * lanes * 2 / best / 1e9;
#else
  return 0.0;
#endif
}

int main(int argc, char **argv) {
  int reps = atoi(argv[1]), s;
  double naive_budget = atof(argv[2]);
  printf("kernel %s\n", o2e_gemm_kernel_name());
  printf("peak %.2f\n", peak_gflops());
  for (s = 3; s + 2 < argc; s += 3) {
    const int M = atoi(argv[s]), N = atoi(argv[s + 1]), K = atoi(argv[s + 2]);
    float *A = alloc(sizeof(float) * (size_t)M * K), *B = alloc(sizeof(float) * (size_t)K * N);
    float *C = alloc(sizeof(float) * (size_t)M * N), *P = alloc(sizeof(float) * o2e_packed_a_size(M, K));
    void *ws = alloc(o2e_sgemm_workspace(M, N, K));
    double flops = 2.0 * M * N * K, tg[64], tp[64], tn = -1;
    /* small problems: many calls per timing sample so the clock resolution does not matter */
    int inner = flops < 1e8 ? (int)(1e8 / flops) : 1, r, it;
    o2e_act act = {0, 0.0f, 0.0f};
    if (reps > 64) reps = 64;
    fill(A, (size_t)M * K, 1); fill(B, (size_t)K * N, 2);
    o2e_pack_a(M, K, A, K, P);
    o2e_sgemm(M, N, K, A, K, B, N, C, N, 0, NULL, NULL, NULL, 0, act, ws); /* warm-up */
    for (r = 0; r < reps; r++) {
      double t = now();
      for (it = 0; it < inner; it++) o2e_sgemm(M, N, K, A, K, B, N, C, N, 0, NULL, NULL, NULL, 0, act, ws);
      tg[r] = (now() - t) / inner;
    }
    o2e_sgemm_packed(M, N, K, P, B, N, C, N, 0, NULL, NULL, NULL, 0, act, ws);
    for (r = 0; r < reps; r++) {
      double t = now();
      for (it = 0; it < inner; it++) o2e_sgemm_packed(M, N, K, P, B, N, C, N, 0, NULL, NULL, NULL, 0, act, ws);
      tp[r] = (now() - t) / inner;
    }
    qsort(tg, (size_t)reps, sizeof(double), cmpd);
    qsort(tp, (size_t)reps, sizeof(double), cmpd);
    if (naive_budget > 0) {
      /* the naive loop runs at ~1-3 GFLOP/s: give it a fixed time budget */
      int n = (int)(naive_budget * 1e9 / flops), i;
      double best[9];
      if (n < 1) n = 1;
      if (n > 9) n = 9;
      for (i = 0; i < n; i++) {
        int inn = flops < 1e7 ? (int)(1e7 / flops) : 1;
        double t = now();
        for (it = 0; it < inn; it++) naive(M, N, K, A, B, C);
        best[i] = (now() - t) / inn;
      }
      qsort(best, (size_t)n, sizeof(double), cmpd);
      tn = best[n / 2];
    }
    printf("shape %d %d %d %.9g %.9g %.9g\n", M, N, K, tg[reps / 2], tp[reps / 2], tn);
    fflush(stdout);
    free(A); free(B); free(C); free(P); free(ws);
  }
  return 0;
}
"""

NUMPY_PROBE = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

shapes = json.loads(sys.argv[1]); reps = int(sys.argv[2]); threads = int(sys.argv[3])
info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
res = {"info": info, "times": {}}
rng = np.random.default_rng(0)
for m, n, k in shapes:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    out = []
    for nt in (1, threads):
        with threadpool_limits(limits=nt, user_api="blas"):
            np.matmul(a, b, out=c)
            flops = 2.0 * m * n * k
            inner = max(1, int(1e8 / flops))
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                for _ in range(inner):
                    np.matmul(a, b, out=c)
                ts.append((time.perf_counter() - t) / inner)
            ts.sort()
            out.append(ts[len(ts) // 2])
    res["times"][f"{m}x{n}x{k}"] = out
print(json.dumps(res))
"""


def compile_harness(tmp: Path, name: str, extra: list[str]) -> Path:
    src = tmp / "bench.c"
    src.write_text(HARNESS)
    exe = tmp / name
    cmd = ["gcc", "-std=c99", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror"]
    cmd += [*extra, "-I", str(RUNTIME), str(src), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def run_harness(exe: Path, shapes, reps: int, naive_budget: float) -> tuple[str, float, dict]:
    args = [str(exe), str(reps), str(naive_budget)]
    for m, n, k in shapes:
        args += [str(m), str(n), str(k)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    kernel, peak, times = "?", 0.0, {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "kernel":
            kernel = parts[1]
        elif parts[0] == "peak":
            peak = float(parts[1])
        elif parts[0] == "shape":
            m, n, k = (int(v) for v in parts[1:4])
            times[(m, n, k)] = tuple(float(v) for v in parts[4:7])
    return kernel, peak, times


def run_numpy(shapes, reps: int, threads: int) -> dict | None:
    env = dict(os.environ)
    # Full-speed OpenBLAS for this comparison only: let it detect the CPU itself.
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.pop("OMP_NUM_THREADS", None)
    cmd = [sys.executable, "-c", NUMPY_PROBE, json.dumps(shapes), str(reps), str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"numpy comparison failed:\n{r.stderr}", file=sys.stderr)
        return None
    return json.loads(r.stdout)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for item in text.split(","):
        m, n, k = (int(v) for v in item.lower().split("x"))
        shapes.append((m, n, k))
    return shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=parse_shapes, default=DEFAULT_SHAPES, help="MxNxK,...")
    ap.add_argument("--reps", type=int, default=7, help="timing samples per measurement (median)")
    ap.add_argument("--threads", type=int, default=2, help="threads of the threaded runs")
    ap.add_argument("--peak", type=float, default=0.0, help="one-core GFLOP/s peak (0: measure)")
    ap.add_argument("--naive-budget", type=float, default=1.0, help="~seconds per naive shape")
    ap.add_argument("--no-numpy", action="store_true")
    ap.add_argument("--cflags", default="", help="extra C flags (e.g. -DO2E_GEMM_KC=384)")
    args = ap.parse_args()
    shapes = args.shapes
    extra = args.cflags.split()
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        exe1 = compile_harness(tmp, "bench1", extra)
        exe2 = compile_harness(tmp, "benchn", [*extra, f"-DO2E_THREADS={args.threads}", "-pthread"])
        kernel, peak, t1 = run_harness(exe1, shapes, args.reps, args.naive_budget)
        _, _, tn = run_harness(exe2, shapes, args.reps, 0.0)
    peak = args.peak or peak
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    npres = None if args.no_numpy else run_numpy(shapes, args.reps, args.threads)

    def cell(flops: float, t: float, show_pct: bool = True) -> str:
        if t is None or t <= 0:
            return "-"
        g = flops / t / 1e9
        return f"{g:.1f} ({100 * g / peak:.0f}%)" if show_pct and peak else f"{g:.1f}"

    nt = args.threads
    print(f"o2e kernel: {kernel}; one-core peak: {peak:.1f} GFLOP/s; threads: {nt}")
    if load:
        print(f"load average during the run: {' '.join(load)} (other processes skew timings)")
    if npres:
        for i in npres["info"]:
            print(
                f"numpy BLAS: {i.get('internal_api')} {i.get('version')} "
                f"architecture={i.get('architecture')} (OPENBLAS_CORETYPE unset for this run)"
            )
    print()
    head = ["M x N x K", "o2e", "o2e packed", f"o2e packed {nt}T", "naive", "numpy 1T"]
    head.append(f"numpy {nt}T")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for m, n, k in shapes:
        flops = 2.0 * m * n * k
        tg, tp, tnv = t1[(m, n, k)]
        row = [f"{m} x {n} x {k}", cell(flops, tg), cell(flops, tp), cell(flops, tn[(m, n, k)][1])]
        row.append(cell(flops, tnv))
        if npres:
            a, b = npres["times"][f"{m}x{n}x{k}"]
            row += [cell(flops, a), cell(flops, b)]
        else:
            row += ["-", "-"]
        print("| " + " | ".join(row) + " |")
    print("\nGFLOP/s (percent of the one-core peak; threaded columns can exceed 100%).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
