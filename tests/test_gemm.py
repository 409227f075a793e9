"""The C GEMM engine (backends/c/runtime/o2e_gemm.h) against numpy.

One small C program per build runs every case: the cases travel in one binary file and the
results come back in another, so each build is compiled once and the whole test takes
seconds. Builds: portable C99, native (-march=native), AVX2 forced on an AVX-512 machine,
tiny cache blocks plus two threads (so small shapes cross every K / N / M block boundary and
the threaded split), and AddressSanitizer/UBSan builds of the portable and native kernels.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onnx2edge.backends.c.gemm_pack import (
    KC_MIN,
    MR,
    pack_a,
    packed_a_size,
    sgemm_workspace_bytes,
)
from onnx2edge.host import cpu_flags

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "src" / "onnx2edge" / "backends" / "c" / "runtime"
HEADER = RUNTIME / "o2e_gemm.h"

WARN = ["-Wall", "-Wextra", "-Werror"]
PORTABLE = ["-std=c99", "-O2", *WARN]
NATIVE = ["-std=c99", "-O3", "-march=native", *WARN]
SMALL_BLOCKS = [
    "-DO2E_GEMM_KC=16",
    "-DO2E_GEMM_A_BYTES=4096",
    "-DO2E_GEMM_MC_MIN=16",
    "-DO2E_SN_KB=16",
    "-DO2E_GEMM_SB=3",
]
THREADS = ["-DO2E_THREADS=2", "-DO2E_GEMM_MT_FLOPS=0", "-pthread"]
SANITIZE = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

MODE_GEMM, MODE_PACKED, MODE_PACK, MODE_WS = 0, 1, 2, 3
F_BM, F_BN, F_R, F_R_IS_C = 1, 2, 4, 8
GUARD = 16  # sentinel floats on each side of C, checked by the harness

HARNESS = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "o2e_gemm.h"

static FILE *in_f;
static void rd(void *p, size_t n) {
  if (n && fread(p, 1, n, in_f) != n) { fprintf(stderr, "short read\n"); exit(2); }
}
static float *rdf(size_t n) { /* exact-size buffers so ASan sees any over-read */
  float *p = (float *)malloc(n ? n * sizeof(float) : 1);
  if (!p) exit(3);
  rd(p, n * sizeof(float));
  return p;
}

int main(int argc, char **argv) {
  FILE *out;
  int ncase, c, bad = 0;
  if (argc != 3) return 2;
  in_f = fopen(argv[1], "rb");
  out = fopen(argv[2], "wb");
  if (!in_f || !out) return 2;
  printf("kernel=%s\n", o2e_gemm_kernel_name());
  rd(&ncase, sizeof ncase);
  for (c = 0; c < ncase; c++) {
    int h[12];
    float ab[2];
    int mode, M, N, K, lda, ldb, ldc, ldr, acc, flags, i;
    o2e_act act;
    rd(h, sizeof h);
    rd(ab, sizeof ab);
    mode = h[0]; M = h[1]; N = h[2]; K = h[3]; lda = h[4]; ldb = h[5]; ldc = h[6];
    ldr = h[7]; acc = h[8]; flags = h[9];
    act.kind = h[10]; act.a = ab[0]; act.b = ab[1];
    if (mode == 3) { /* workspace query, as an int64 */
      long long ws = (long long)o2e_sgemm_workspace(M, N, K);
      fwrite(&ws, sizeof ws, 1, out);
    } else if (mode == 2) {
      float *a = rdf((size_t)M * lda);
      size_t np = o2e_packed_a_size(M, K);
      float *p = (float *)malloc(np ? np * sizeof(float) : 1);
      o2e_pack_a(M, K, a, lda, p);
      fwrite(p, sizeof(float), np, out);
      free(a); free(p);
    } else {
      float *a = rdf(mode == 1 ? o2e_packed_a_size(M, K) : (size_t)M * lda);
      float *b = rdf((size_t)K * ldb);
      float *cbuf = (float *)malloc(((size_t)M * ldc + 2 * GUARD) * sizeof(float));
      float *C = cbuf + GUARD, *bm = NULL, *bn = NULL, *R = NULL;
      size_t wsz = o2e_sgemm_workspace(M, N, K);
      void *ws = NULL;
      if (!cbuf || posix_memalign(&ws, 64, wsz ? wsz : 64)) return 3;
      for (i = 0; i < GUARD; i++) cbuf[i] = cbuf[GUARD + (size_t)M * ldc + i] = 12345.0f;
      rd(C, (size_t)M * ldc * sizeof(float));
      if (flags & 1) bm = rdf((size_t)M);
      if (flags & 2) bn = rdf((size_t)N);
      if (flags & 8) { R = C; ldr = ldc; }
      else if (flags & 4) R = rdf((size_t)M * ldr);
      if (mode == 1)
        o2e_sgemm_packed(M, N, K, a, b, ldb, C, ldc, acc, bm, bn, R, ldr, act, ws);
      else
        o2e_sgemm(M, N, K, a, lda, b, ldb, C, ldc, acc, bm, bn, R, ldr, act, ws);
      for (i = 0; i < GUARD; i++)
        if (cbuf[i] != 12345.0f || cbuf[GUARD + (size_t)M * ldc + i] != 12345.0f) bad = 1;
      if (bad) { fprintf(stderr, "case %d wrote outside C\n", c); return 4; }
      fwrite(C, sizeof(float), (size_t)M * ldc, out);
      free(a); free(b); free(cbuf); free(bm); free(bn);
      if (R != C) free(R);
      free(ws);
    }
  }
  fclose(out);
  printf("done %d\n", ncase);
  return 0;
}
"""


FLAGS = cpu_flags()
HAS_AVX2 = {"avx2", "fma"} <= FLAGS
HAS_AVX512 = "avx512f" in FLAGS
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def _asan_works(tmp: Path) -> bool:
    src = tmp / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    r = subprocess.run(
        ["gcc", *SANITIZE, str(src), "-o", str(tmp / "probe")], capture_output=True, text=True
    )
    return r.returncode == 0 and subprocess.run([str(tmp / "probe")]).returncode == 0


# ---- cases -----------------------------------------------------------------------------------
class Case:
    def __init__(self, rng: np.random.Generator, mode: int, m: int, n: int, k: int, **kw) -> None:
        self.mode, self.m, self.n, self.k = mode, m, n, k
        pad = kw.get("pad", (0, 0, 0, 0))
        self.lda, self.ldb, self.ldc, self.ldr = k + pad[0], n + pad[1], n + pad[2], n + pad[3]
        self.acc = int(kw.get("acc", 0))
        self.flags = kw.get("flags", 0)
        self.act = kw.get("act", (0, 0.0, 0.0))
        if mode == MODE_WS:  # a size query: no matrices
            return
        f32 = np.float32
        self.a = rng.standard_normal((m, self.lda)).astype(f32)
        self.b = rng.standard_normal((k, self.ldb)).astype(f32)
        self.c0 = rng.standard_normal((m, self.ldc)).astype(f32)
        self.bm = rng.standard_normal(m).astype(f32)
        self.bn = rng.standard_normal(n).astype(f32)
        self.r = rng.standard_normal((m, self.ldr)).astype(f32)

    def encode(self) -> bytes:
        hdr = [self.mode, self.m, self.n, self.k, self.lda, self.ldb, self.ldc, self.ldr]
        hdr += [self.acc, self.flags, self.act[0], 0]
        out = [struct.pack("<12i2f", *hdr, self.act[1], self.act[2])]
        if self.mode == MODE_PACK:
            out.append(self.a.tobytes())
            return b"".join(out)
        if self.mode == MODE_WS:
            return b"".join(out)
        if self.mode == MODE_PACKED:
            out.append(pack_a(self.a[:, : self.k]).tobytes())
        else:
            out.append(self.a.tobytes())
        out += [self.b.tobytes(), self.c0.tobytes()]
        if self.flags & F_BM:
            out.append(self.bm.tobytes())
        if self.flags & F_BN:
            out.append(self.bn.tobytes())
        if self.flags & F_R and not self.flags & F_R_IS_C:
            out.append(self.r.tobytes())
        return b"".join(out)

    def out_floats(self) -> int:
        if self.mode == MODE_WS:
            return 2
        if self.mode == MODE_PACK:
            return packed_a_size(self.m, self.k)
        return self.m * self.ldc

    def check(self, got: np.ndarray, threads: int = 1, sb: int = 1) -> None:
        m, n, k = self.m, self.n, self.k
        if self.mode == MODE_WS:
            ws = int(got.view(np.int64)[0])
            # sb: a build with O2E_GEMM_SB = sb strips (SMALL_BLOCKS; a generated model refuses
            # any above 1, gemm_pack.blocking_guard) packs sb times the default's B slice
            bound = (sgemm_workspace_bytes(m, n, k, threads) - 64) * sb + 64
            assert 0 < ws <= bound, f"workspace {m}x{n}x{k}: C needs {ws}, Python says {bound}"
            return
        if self.mode == MODE_PACK:
            want = pack_a(self.a[:, :k])
            assert got.tobytes() == want.tobytes(), f"pack_a differs for {m}x{k}"
            return
        got = got.reshape(m, self.ldc)
        a = self.a[:, :k].astype(np.float64)
        b = self.b[:, :n].astype(np.float64)
        c0 = self.c0[:, :n].astype(np.float64)
        x = a @ b
        scale = np.abs(a) @ np.abs(b)
        if self.flags & F_BM:
            x += self.bm[:, None]
            scale += np.abs(self.bm)[:, None]
        if self.flags & F_BN:
            x += self.bn[None, :]
            scale += np.abs(self.bn)[None, :]
        if self.flags & F_R:
            r = c0 if self.flags & F_R_IS_C else self.r[:, :n].astype(np.float64)
            x += r
            scale += np.abs(r)
        kind, pa, pb = self.act
        if kind == 1:
            x = np.maximum(x, 0.0)
        elif kind == 2:
            x = np.clip(x, pa, pb)
        elif kind == 3:
            x = np.where(x < 0, x * pa, x)
        if self.acc:
            x += c0
            scale += np.abs(c0)
        err = np.abs(got[:, :n] - x)
        tol = 1e-5 * (scale + 1.0)
        where = np.argwhere(err > tol)
        assert where.size == 0, (
            f"{self.describe()}: {len(where)} wrong, first at {tuple(where[0])}: "
            f"got {got[tuple(where[0])]}, want {x[tuple(where[0])]}"
        )
        # the padding between N and ldc must be untouched
        assert np.array_equal(got[:, n:], self.c0[:, n:]), f"{self.describe()}: wrote past N"

    def describe(self) -> str:
        return (
            f"mode={self.mode} M={self.m} N={self.n} K={self.k} ld=({self.lda},{self.ldb},"
            f"{self.ldc},{self.ldr}) acc={self.acc} flags={self.flags} act={self.act}"
        )


ACTS = [(0, 0.0, 0.0), (1, 0.0, 0.0), (2, -0.5, 0.75), (3, 0.1, 0.0)]
SIZES = [1, 2, 3, 5, 7, 8, 9, 13, 15, 16, 17, 23, 31, 32, 33, 47, 48, 49, 61, 64, 67, 70]


def make_cases(seed: int = 0, n_random: int = 220) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases: list[Case] = []

    def add(mode: int, m: int, n: int, k: int, **kw) -> None:
        cases.append(Case(rng, mode, m, n, k, **kw))

    # pack_a: bit-identical to the C packer, including lda > K and partial last panels
    for m, k in [(1, 1), (7, 3), (8, 8), (9, 5), (17, 70), (70, 13), (64, 1), (3, 67)]:
        add(MODE_PACK, m, 0, k, pad=(int(rng.integers(0, 4)), 0, 0, 0))
    # o2e_sgemm_workspace never exceeds the Python bound used to size static arenas
    for m, n, k in [
        (1, 1, 1),
        (70, 1, 613),
        (1000, 4, 2048),
        (512, 196, 4608),
        (7, 3, 700),
        (64, 12544, 576),
        (4096, 16, 25088),
        (5, 100, 161),
        (3, 13, 9),
        (256, 196, 128),  # 64 < K <= 256: a build with O2E_GEMM_KC=64 adds the M block's tile
        (384, 729, 96),
    ]:
        add(MODE_WS, m, n, k)
    # random shapes, paddings, epilogues; every act kind with every flag mix appears
    for i in range(n_random):
        m, n, k = (int(rng.choice(SIZES)) for _ in range(3))
        if i % 11 == 0:
            n = 1  # matrix-vector path
        if i % 13 == 0:
            k = 1
        pad = tuple(int(v) for v in rng.integers(0, 5, 4))
        flags = i % 8
        if flags & F_R and i % 3 == 0:
            flags |= F_R_IS_C  # in-place residual (R == C)
        add(i % 2, m, n, k, pad=pad, acc=(i // 2) % 2, flags=flags, act=ACTS[(i // 4) % 4])
    # larger shapes cross the default KC / NC blocks (partial sums held in C or in the
    # scratch tile T), the matrix-vector paths with long K, and N = 1 with a strided B
    for mode in (MODE_GEMM, MODE_PACKED):
        for acc, act, flags in [
            (0, ACTS[1], F_BM | F_R),
            (1, ACTS[0], F_BN | F_R),
            (1, ACTS[3], F_BM),
            (0, ACTS[2], F_R | F_R_IS_C),
        ]:
            add(mode, 37, 531, 300, pad=(1, 3, 2, 0), acc=acc, flags=flags, act=act)
        add(mode, 70, 1, 613, pad=(3, 2, 0, 1), acc=1, flags=F_BM | F_R, act=ACTS[1])
        add(mode, 9, 3, 700, acc=0, flags=F_BN, act=ACTS[2])
        add(mode, 1, 97, 40, flags=F_BM | F_BN, act=ACTS[3])
        add(mode, 5, 2, 1, flags=F_R, act=ACTS[1])
    # a narrow last strip (1..16 columns after full ones) over 24-row tiles of packed A,
    # with leftover 8-row panels and partial last panels
    for m, n, k, acc, flags, act in [
        (53, 49, 300, 0, F_BM | F_R, ACTS[1]),
        (200, 64, 40, 1, F_BN, ACTS[3]),
        (72, 97, 170, 0, F_R | F_R_IS_C, ACTS[2]),
        (30, 289, 7, 1, F_BM | F_BN | F_R, ACTS[0]),
    ]:
        add(MODE_PACKED, m, n, k, pad=(0, 1, 2, 3), acc=acc, flags=flags, act=act)
    return cases


# ---- build and run -----------------------------------------------------------------------------
# name -> (gcc flags, O2E_THREADS, reason to skip or None). The sanitizer builds use -O1: the
# instrumented -O3 AVX-512 build takes ~10 s to compile and finds nothing more.
_SKIP_AVX2 = None if HAS_AVX2 else "CPU lacks AVX2+FMA (native build)"
BUILDS: dict[str, tuple[list[str], int, str | None]] = {
    "portable": (PORTABLE, 1, None),
    "native": (NATIVE, 1, _SKIP_AVX2),
    "avx2": (
        [*NATIVE, "-mno-avx512f"],
        1,
        None if HAS_AVX512 else "AVX2 is forced only on AVX-512 CPUs (native covers it)",
    ),
    "native_small_threads": ([*NATIVE, *SMALL_BLOCKS, *THREADS], 2, _SKIP_AVX2),
    "portable_small_threads": ([*PORTABLE, *SMALL_BLOCKS, *THREADS], 2, None),
    # the lowest K slice a generated model may be built with (gemm_pack.KC_MIN): the workspace
    # cases check the Python bound still holds
    "native_kc_min": ([*NATIVE, f"-DO2E_GEMM_KC={KC_MIN}"], 1, _SKIP_AVX2),
    "portable_kc_min": ([*PORTABLE, f"-DO2E_GEMM_KC={KC_MIN}"], 1, None),
    "asan_portable": ([*PORTABLE, "-O1", *SANITIZE], 1, None),
    "asan_native": (
        [*NATIVE, "-O1", *SANITIZE, *SMALL_BLOCKS, *THREADS],
        2,
        _SKIP_AVX2,
    ),
}


class Builds:
    """Compiles every applicable build concurrently; `get` waits for one."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        src = tmp / "harness.c"
        src.write_text(HARNESS.replace("GUARD", str(GUARD)))
        self.asan = _asan_works(tmp)
        self.procs: dict[str, tuple[subprocess.Popen, list[str]]] = {}
        for name, (flags, _threads, skip) in BUILDS.items():
            if skip or (name.startswith("asan") and not self.asan):
                continue
            cmd = ["gcc", *flags, "-I", str(RUNTIME), str(src), "-o", str(tmp / name), "-lm"]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs[name] = (proc, cmd)

    def get(self, name: str) -> Path:
        skip = BUILDS[name][2]
        if skip:
            pytest.skip(skip)
        if name.startswith("asan") and not self.asan:
            pytest.skip("gcc cannot build or run AddressSanitizer binaries here")
        proc, cmd = self.procs[name]
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{err}"
        return self.tmp / name


def _sb(name: str) -> int:
    """O2E_GEMM_SB of a build in BUILDS."""
    flags = [f for f in BUILDS[name][0] if f.startswith("-DO2E_GEMM_SB=")]
    return int(flags[-1].split("=")[1]) if flags else 1


def run_cases(exe: Path, tmp: Path, cases: list[Case], threads: int = 1, sb: int = 1) -> str:
    inp, outp = tmp / f"{exe.name}.in", tmp / f"{exe.name}.out"
    inp.write_bytes(struct.pack("<i", len(cases)) + b"".join(c.encode() for c in cases))
    r = subprocess.run([str(exe), str(inp), str(outp)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{exe.name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    data = np.fromfile(outp, dtype=np.float32)
    pos = 0
    for c in cases:
        n = c.out_floats()
        c.check(data[pos : pos + n], threads, sb)
        pos += n
    assert pos == data.size
    return r.stdout


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return make_cases()


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    return Builds(tmp_path_factory.mktemp("gemm"))


def test_pack_a_layout() -> None:
    a = np.arange(3 * 10 * 4, dtype=np.float32).reshape(10, 12)
    p = pack_a(a)
    assert p.dtype == np.float32 and p.shape == (packed_a_size(10, 12),) == (2 * MR * 12,)
    # element (row 8p + i, column k) at p*8*K + k*8 + i; padding rows are zero
    for r in range(10):
        for k in range(12):
            assert p[(r // MR) * MR * 12 + k * MR + r % MR] == a[r, k]
    assert not p[MR * 12 :].reshape(12, MR)[:, 2:].any()
    conv = np.ones((16, 3, 3, 3), np.float32)  # conv weights flatten to (Cout, Cin*kh*kw)
    assert pack_a(conv).shape == (packed_a_size(16, 27),)
    assert packed_a_size(0, 5) == 0 and pack_a(np.zeros((0, 4), np.float32)).size == 0
    assert sgemm_workspace_bytes(64, 3136, 576, threads=2) > sgemm_workspace_bytes(64, 3136, 576)


@pytest.mark.parametrize("name", [n for n in BUILDS if not n.startswith("asan")])
def test_gemm_matches_numpy(builds: Builds, cases: list[Case], name: str, tmp_path: Path) -> None:
    exe = builds.get(name)
    out = run_cases(exe, tmp_path, cases, BUILDS[name][1], _sb(name))
    want = {"native": "avx512" if HAS_AVX512 else "avx2", "avx2": "avx2"}.get(name.split("_")[0])
    assert f"kernel={want or 'portable'}" in out


@pytest.mark.parametrize("name", [n for n in BUILDS if n.startswith("asan")])
def test_gemm_sanitizers(builds: Builds, name: str, tmp_path: Path) -> None:
    exe = builds.get(name)
    run_cases(exe, tmp_path, make_cases(seed=1, n_random=120), BUILDS[name][1], _sb(name))


@needs_gcc
def test_header_compiles_unused(tmp_path: Path) -> None:
    """Including the header without calling anything must not warn (all static helpers)."""
    src = tmp_path / "unused.c"
    src.write_text('#include "o2e_gemm.h"\nint main(void) { return 0; }\n')
    variants = [PORTABLE, [*PORTABLE, "-DO2E_THREADS=4", "-pthread"]]
    if HAS_AVX2:
        variants.append(NATIVE)
    for flags in variants:
        cmd = ["gcc", *flags, "-I", str(RUNTIME), str(src), "-o", str(tmp_path / "u")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
