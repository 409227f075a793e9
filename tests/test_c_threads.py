"""Threads chosen at run time (issue 30 item 4): `convert --max-threads N` sizes the arena's
per-thread workspaces for N (recorded in the manifest), `NAME_set_threads(ctx, n)` picks 1..N
for a context's runs in a build with the pool, with -8 beyond N and -9 for n > 1 in a build
without it; the pool runs any N (8 here, above the old compile-time limit of 4); a
single-threaded build references no pthread symbol at all."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import STRICT_FLAGS, compiler
from onnx2edge.cli import main
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("nm") is None, reason="needs gcc and nm"
)


def _model(tmp: Path) -> Path:
    """Convolutions wide enough that every GEMM splits across 8 threads (4,096 columns), a
    1,024-output fully-connected layer (its blocks go through o2e_parallel_for)."""
    rng = np.random.default_rng(5)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r3"]),
        helper.make_node("Gemm", ["r3", "w4"], ["y"], transB=1),
    ]
    inits = [
        tensor("w1", w(24, 3, 3, 3)),
        tensor("b1", w(24, 1)[:, 0]),
        tensor("w2", w(40, 24, 3, 3)),
        tensor("b2", w(40, 1)[:, 0]),
        tensor("w3", w(1024, 40)),
        tensor("b3", w(1024, 1)[:, 0]),
        tensor("w4", w(10, 1024)),
    ]
    m = make_model(nodes, [vi("x", [1, 3, 64, 64])], [vi("y", [1, 10])], inits)
    return save(m, tmp / "wide.onnx")


DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include "wide.h"
static float in[WIDE_INPUT_0_SIZE], out[WIDE_OUTPUT_0_SIZE];

static int tasks(void)  /* threads of this process (Linux) */
{
  int n = 0;
  struct dirent *e;
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int run(int n, const char *path)
{
  FILE *f;
  int rc = wide_set_threads(NULL, n);
  if (rc != 0) { printf("set_threads(%d) = %d\n", n, rc); return 1; }
  if (wide_get_threads(NULL) != n) return 1;
  if (wide_predict(in, out) != 0) return 1;
  f = fopen(path, "wb");
  if (!f || fwrite(out, sizeof out, 1, f) != 1) return 1;
  fclose(f);
  return 0;
}

int main(int argc, char **argv)
{
  FILE *f = fopen(argv[1], "rb");
  if (argc != 5 || !f || fread(in, sizeof in, 1, f) != 1) return 2;
  fclose(f);
  if (wide_init(NULL) != 0) return 3;
  printf("default %d\n", wide_get_threads(NULL));
  printf("rc0 %d rcmax1 %d rc2 %d\n", wide_set_threads(NULL, 0),
         wide_set_threads(NULL, WIDE_MAX_THREADS + 1), wide_set_threads(NULL, 2));
  if (run(1, argv[2])) return 4;
  printf("tasks1 %d\n", tasks());
  if (argv[3][0] == '-') return 0;  /* a build without the pool stops here */
  if (run(WIDE_MAX_THREADS, argv[3])) return 5;
  printf("tasksmax %d\n", tasks());
  if (run(3, argv[4])) return 6;
  return 0;
}
"""


def _build(out: Path, exe: Path, *flags: str) -> Path:
    (out / "driver.c").write_text(DRIVER)
    cmd = [compiler(), *STRICT_FLAGS, "-O2", *flags, f"-I{out}"]
    proc = subprocess.run(
        [*cmd, str(out / "driver.c"), str(out / "model.c"), "-o", str(exe), "-lm"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _run(exe: Path, x: np.ndarray, tmp: Path, threaded: bool) -> tuple[dict, list[np.ndarray]]:
    x.tofile(tmp / "x.bin")
    outs = [tmp / f"y{i}.bin" for i in range(3)]
    args = [str(outs[0]), str(outs[1]) if threaded else "-", str(outs[2])]
    proc = subprocess.run([str(exe), str(tmp / "x.bin"), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        facts.update({k: int(v) for k, v in zip(words[::2], words[1::2], strict=True)})
    ys = [np.fromfile(p, np.float32) for p in (outs if threaded else outs[:1])]
    return facts, ys


@needs_gcc
def test_eight_threads_at_run_time(tmp_path: Path) -> None:
    """--max-threads 8, a pool build whose default is 2: set_threads(8) runs on 8 threads (the
    process has 8 once the pool started), set_threads(1) and (3) too; every count gives the
    same bits (each output element is reduced by one thread in the same K order whatever the
    split) and matches onnxruntime. 0 and 9 are refused with -8."""
    src = _model(tmp_path)
    out = tmp_path / "c"
    res = api.convert(src, "c", out, options={"max_threads": 8, "name": "wide"})
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert manifest["options"]["max_threads"] == 8 and res.stats["max_threads"] == 8
    assert "#define WIDE_MAX_THREADS 8" in (out / "wide.h").read_text()
    exe = _build(out, tmp_path / "threads", "-DO2E_THREADS=2", "-pthread")
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    facts, (y1, y8, y3) = _run(exe, x, tmp_path, threaded=True)
    assert facts["default"] == 2
    assert facts["rc0"] == -8 and facts["rcmax1"] == -8 and facts["rc2"] == 0
    assert facts["tasks1"] == 1  # one thread asked for: no worker started
    assert facts["tasksmax"] == 8  # the caller and 7 workers
    assert np.array_equal(y1, y8) and np.array_equal(y1, y3)
    ref = ort_run(onnx.load(src), {"x": x})["y"].reshape(-1)
    assert np.abs(y8 - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))


@needs_gcc
def test_single_threaded_build_has_no_pthread(tmp_path: Path) -> None:
    """The default build of the default conversion (--max-threads 4, make without THREADS),
    and a --max-threads 1 conversion compiled without -pthread: no pthread symbol in the
    object; set_threads(2) there is -9, set_threads(1) works. A --max-threads 1 output
    built with a pool stops with the #error that names the option."""
    src = _model(tmp_path)
    for n in (4, 1):
        out = tmp_path / f"c{n}"
        api.convert(src, "c", out, options={"max_threads": n, "name": "wide"})
        proc = subprocess.run(["make", "-s", "-C", str(out), "libwide.a"], capture_output=True)
        assert proc.returncode == 0, proc.stderr
        syms = subprocess.run(
            ["nm", str(out / "wide.o")], capture_output=True, text=True, check=True
        ).stdout
        assert "pthread" not in syms
        exe = _build(out, tmp_path / f"single{n}")
        x = np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)
        facts, (y1,) = _run(exe, x, tmp_path, threaded=False)
        # 2 threads: beyond --max-threads 1 (-8), else refused by the pool-less build (-9)
        assert facts["default"] == 1 and facts["rc2"] == (-8 if n == 1 else -9)
        assert facts["tasks1"] == 1
        assert facts["rcmax1"] == -8
        ref = ort_run(onnx.load(src), {"x": x})["y"].reshape(-1)
        assert np.abs(y1 - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))
    proc = subprocess.run(
        [compiler(), "-c", "-DO2E_THREADS=2", "-pthread", str(tmp_path / "c1" / "model.c")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode != 0 and "--max-threads" in proc.stderr


def test_max_threads_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for bad in ("0", "257", "four"):
        rc = main(
            ["convert", str(_model(tmp_path)), "--target", "c", "-o", str(tmp_path / "o"),
             "--max-threads", bad]
        )  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "--max-threads" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_readme_and_header_document_threads(tmp_path: Path) -> None:
    out = tmp_path / "c"
    api.convert(_model(tmp_path), "c", out, options={"max_threads": 16, "name": "wide"})
    readme = (out / "README.md").read_text()
    header = (out / "wide.h").read_text()
    for text in (readme, header):
        assert "wide_set_threads" in text and "-8" in text and "-9" in text
    assert "16" in readme.split("## Threads")[1].split("##")[0]
    assert "#define WIDE_MAX_THREADS 16" in header
