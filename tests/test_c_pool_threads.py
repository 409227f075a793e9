"""Fast 2-D window kernels (kernels/pool/pool2d.py, kernels/conv/conv_depthwise.py and the im2col path of kernels/conv/conv_gemm.py) and the
generic `o2e_parallel_for` of runtime/o2e_gemm.h.

One ONNX model holds every case (pooling and depthwise geometries with padding, strides,
dilations, ceil_mode, auto_pad; im2col convolutions, one with a fused residual): it is
converted once and built several ways - portable C99 on one thread, native with two threads,
AddressSanitizer/UBSan with three threads, ThreadSanitizer - and every output is compared
with onnxruntime. The threaded builds are converted with the parallel threshold at zero, so
even the small cases are split across threads (uneven splits, fewer planes than threads).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.backends.c.kernels import par_split
from onnx2edge.backends.c.kernels.conv import conv_gemm
from onnx2edge.backends.c.kernels.pool import pool2d
from onnx2edge.runtime import ort_run

from conftest import ASAN, AVX2, NATIVE, make_model, save, tensor, vi

RUNTIME = (
    Path(__file__).resolve().parent.parent / "src" / "onnx2edge" / "backends" / "c" / "runtime"
)
WARN = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
TSAN = ["-O1", "-g", "-fsanitize=thread"]

# (kernel_shape, strides, pads or auto_pad, dilations, ceil_mode)
WINDOWS = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 2, 1], dilations=[2, 1]),
    dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 3], strides=[1, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[1, 1], strides=[2, 2]),
    dict(kernel_shape=[7, 7], pads=[3, 3, 3, 3]),
]
SHAPES = [(1, 7, 33, 31), (2, 3, 9, 11), (1, 1, 5, 6), (1, 4, 7, 7)]


def _no_ceil(w: dict) -> dict:
    return {k: v for k, v in w.items() if k != "ceil_mode"}


@pytest.fixture(scope="module")
def case_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict[str, str]]:
    """The model, its inputs, onnxruntime's outputs, and a description per output."""
    rng = np.random.default_rng(0)
    nodes, inputs, inits, feeds, what = [], [], [], {}, {}

    def add(
        op: str, shape: tuple[int, ...], attrs: dict, w: np.ndarray | None = None, extra: str = ""
    ) -> str:
        k = len(nodes)
        x = f"x{k}"
        inputs.append(vi(x, list(shape)))
        feeds[x] = rng.standard_normal(shape).astype(np.float32)
        ins = [x]
        if w is not None:
            inits.append(tensor(f"w{k}", w))
            inits.append(tensor(f"b{k}", rng.standard_normal(w.shape[0]).astype(np.float32)))
            ins += [f"w{k}", f"b{k}"]
        nodes.append(helper.make_node(op, ins, [f"y{k}"], **attrs))
        what[f"y{k}"] = f"{op} {shape} {attrs} {extra}"
        return f"y{k}"

    for shape in SHAPES:
        C = shape[1]
        for win in WINDOWS:
            add("MaxPool", shape, win)
            add("AveragePool", shape, win)
            add("AveragePool", shape, {**win, "count_include_pad": 1})
            kh, kw = win["kernel_shape"]
            add(
                "Conv",
                shape,
                {**_no_ceil(win), "group": C},
                rng.standard_normal((C, 1, kh, kw)).astype(np.float32),
            )
            add(
                "Conv", shape, _no_ceil(win), rng.standard_normal((5, C, kh, kw)).astype(np.float32)
            )
        add("GlobalAveragePool", shape, {})
    # a depthwise conv with a fused Clip (Relu6) and one with a fused Relu
    for act in ("Clip", "Relu"):
        y = add(
            "Conv",
            (1, 6, 14, 14),
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 6},
            rng.standard_normal((6, 1, 3, 3)).astype(np.float32),
            act,
        )
        k = len(nodes) - 1
        nodes[k].output[0] = f"c{k}"
        if act == "Clip":
            inits += [
                tensor(f"lo{k}", np.array(0, np.float32)),
                tensor(f"hi{k}", np.array(6, np.float32)),
            ]
            nodes.append(helper.make_node("Clip", [f"c{k}", f"lo{k}", f"hi{k}"], [y]))
        else:
            nodes.append(helper.make_node("Relu", [f"c{k}"], [y]))
    # an im2col conv whose residual Add is fused into the GEMM epilogue (blocked rows: offsets)
    y = add(
        "Conv",
        (1, 4, 20, 24),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "+ residual",
    )
    k = len(nodes) - 1
    nodes[k].output[0] = f"c{k}"
    inputs.append(vi(f"r{k}", [1, 8, 10, 12]))
    feeds[f"r{k}"] = rng.standard_normal((1, 8, 10, 12)).astype(np.float32)
    nodes.append(helper.make_node("Add", [f"c{k}", f"r{k}"], [y]))

    outs = list(what)
    m = make_model(nodes, inputs, [vi(o, None) for o in outs], inits, opset=19)
    ref = ort_run(m, feeds)
    m = make_model(nodes, inputs, [vi(o, list(ref[o].shape)) for o in outs], inits, opset=19)
    path = save(m, tmp_path_factory.mktemp("pool_threads") / "cases.onnx")
    return path, feeds, ref, what


def _convert(
    path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, *, par_min: int, block_bytes: int
) -> dict:
    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", par_min)
    if par_min == 0:  # pooling splits by the work-per-thread rule: every node threaded
        monkeypatch.setattr(par_split, "PAR_MIN_US", 0)
    monkeypatch.setattr(conv_gemm, "IM2COL_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(conv_gemm, "IM2COL_MIN_COLS", 1)
    res = api.convert(path, "c", out)
    assert res.stats["kernels"].get("MaxPool: 2-D phase planes", 0) > 0, res.stats["kernels"]
    assert res.stats["kernels"].get("MaxPool: separable rows", 0) > 0, res.stats["kernels"]
    assert res.stats["kernels"].get("AveragePool: separable rows", 0) > 0, res.stats["kernels"]
    assert res.stats["kernels"].get("Conv: depthwise direct", 0) > 0, res.stats["kernels"]
    return json.loads((out / "onnx2edge.json").read_text())


BUILDS = {
    # name: (gcc flags, parallel threshold, im2col block bytes)
    "portable_serial": (["-O2"], pool2d.PAR_MIN_WORK, conv_gemm.IM2COL_BLOCK_BYTES),
    "native_2threads": ([*NATIVE, "-DO2E_THREADS=2", "-pthread"], 0, 2000),
    "avx2_serial": (AVX2, pool2d.PAR_MIN_WORK, conv_gemm.IM2COL_BLOCK_BYTES),
    "avx2_asan_2threads": (["-march=x86-64-v3", *ASAN, "-DO2E_THREADS=2", "-pthread"], 0, 2000),
    "native_asan_3threads": (["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"], 0, 2000),
    "portable_asan_serial": ([*ASAN], 0, 2000),
    "native_tsan_2threads": ([*NATIVE[1:], *TSAN, "-DO2E_THREADS=2", "-pthread"], 0, 2000),
}


@pytest.mark.parametrize("build", list(BUILDS))
def test_window_kernels_match_onnxruntime(
    build: str,
    case_model: tuple[Path, dict, dict, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, feeds, ref, what = case_model
    flags, par_min, block_bytes = BUILDS[build]
    io = _convert(path, tmp_path / "out", monkeypatch, par_min=par_min, block_bytes=block_bytes)
    if "tsan" in build and not _tsan_works(tmp_path):
        pytest.skip("ThreadSanitizer is not usable here")
    code = (tmp_path / "out" / "model.c").read_text()
    if par_min == 0:
        assert "o2e_parallel_for(" in code and "o2e_im2col_rows, &a)" in code
    exe = build_executable(tmp_path / "out", flags, build)
    got = run_executable(exe, io, feeds, tmp_path)
    bad = []
    for spec in io["outputs"]:
        name = spec["name"]
        r, o = ref[name], got[name]
        err = float(np.abs(o - r).max() / max(1.0, float(np.abs(r).max()))) if r.size else 0.0
        if o.shape != r.shape or not err <= 1e-5:
            bad.append(f"{name} ({what[name]}): max error {err:.2e}")
    assert not bad, "\n".join(bad)


def _tsan_works(tmp: Path) -> bool:
    src = tmp / "t.c"
    src.write_text("int main(void) { return 0; }\n")
    p = subprocess.run(["gcc", *TSAN, str(src), "-o", str(tmp / "t")], capture_output=True)
    return (
        p.returncode == 0 and subprocess.run([str(tmp / "t")], capture_output=True).returncode == 0
    )


PARALLEL_FOR = r"""
#include <stdio.h>
#include "o2e_gemm.h"

typedef struct { int *hits, *thread_of; } job;

static void mark(void *p, int begin, int end) {
  job *j = (job *)p;
  const int t = o2e_parallel_thread();
  for (int i = begin; i < end; ++i) { j->hits[i] += 1; j->thread_of[i] = t; }
}

static void nested(void *p, int begin, int end) { /* an inner call runs on the calling thread */
  job *j = (job *)p;
  const int t = o2e_parallel_thread();
  for (int i = begin; i < end; ++i) {
    job inner = {j->hits + i, j->thread_of + i};
    o2e_parallel_for(1, mark, &inner);
    if (j->thread_of[i] != t) j->hits[i] = -100;
  }
}

static int hits[1000], thread_of[1000];
/* A[16][16] . B[16][1000]: enough column panels for the chunked column split */
static float A[16 * 16], B[16 * 1000], C[16 * 1000], ws[1 << 18];

static int gemm_ok(void) {
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 1000; ++j) {
      float r = 0.0f;
      for (int k = 0; k < 16; ++k) r += A[i * 16 + k] * B[k * 1000 + j];
      if (r != C[i * 1000 + j]) { printf("C[%d][%d] = %g, not %g\n", i, j, C[i * 1000 + j], r); return 0; }
    }
  return 1;
}

int main(void) {
  for (int i = 0; i < 16 * 16; ++i) A[i] = (float)(i % 7);
  for (int i = 0; i < 16 * 1000; ++i) B[i] = (float)(i % 5);
  if (o2e_parallel_thread() != 0) { printf("caller is not thread 0\n"); return 1; }
  for (int it = 0; it < 3000; ++it) {
    const int n = 1 + it % 1000;
    job j = {hits, thread_of};
    for (int i = 0; i < n; ++i) hits[i] = 0;
    o2e_parallel_for(n, it % 3 == 2 ? nested : mark, &j);
    for (int i = 0; i < n; ++i) {
      if (hits[i] != 1) { printf("n=%d: item %d ran %d times\n", n, i, hits[i]); return 1; }
      if (thread_of[i] < 0 || thread_of[i] >= O2E_THREADS) {
        printf("n=%d: item %d ran on thread %d\n", n, i, thread_of[i]); return 1;
      }
    }
    if (it % 7 == 0) { /* GEMMs and generic jobs share the pool */
      for (int i = 0; i < 16 * 1000; ++i) C[i] = -1.0f;
      o2e_sgemm(16, 1000, 16, A, 16, B, 1000, C, 1000, 0, NULL, NULL, NULL, 0, (o2e_act){0, 0.0f, 0.0f}, ws);
      if (!gemm_ok()) return 1;
    }
  }
  o2e_parallel_for(0, mark, NULL); /* no work: no call */
  printf("ok\n");
  return 0;
}
"""


@pytest.mark.parametrize(
    "flags",
    [
        ["-O2"],
        ["-O2", "-DO2E_THREADS=2", "-DO2E_GEMM_MT_FLOPS=0", "-pthread"],
        ["-O2", "-DO2E_THREADS=4", "-DO2E_GEMM_MT_FLOPS=0", "-DO2E_POOL_SPIN=0", "-pthread"],
        [*ASAN, "-DO2E_THREADS=3", "-DO2E_GEMM_MT_FLOPS=0", "-pthread"],
        [*TSAN, "-DO2E_THREADS=2", "-DO2E_GEMM_MT_FLOPS=0", "-pthread"],
        [
            "-O2",
            "-DO2E_THREADS=2",
            "-DO2E_GEMM_MT_FLOPS=0",
            "-DO2E_POOL_YIELD=0",
            "-D_POSIX_C_SOURCE=200809L",
            "-DO2E_POOL_STATS",
            "-pthread",
        ],
    ],
    ids=[
        "serial",
        "2threads",
        "4threads_nospin",
        "asan_3threads",
        "tsan_2threads",
        "2threads_stats",
    ],
)
def test_parallel_for(flags: list[str], tmp_path: Path) -> None:
    """Every index runs once, on a thread numbered 0 .. O2E_THREADS - 1; nesting does not deadlock."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    if "-fsanitize=thread" in flags and not _tsan_works(tmp_path):
        pytest.skip("ThreadSanitizer is not usable here")
    src = tmp_path / "pf.c"
    src.write_text(PARALLEL_FOR)
    exe = tmp_path / "pf"
    subprocess.run(["gcc", *WARN, *flags, f"-I{RUNTIME}", str(src), "-o", str(exe)], check=True)
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    if "-DO2E_POOL_STATS" in flags:  # the diagnosis counters account for every job run
        stats = json.loads(p.stderr.strip().splitlines()[-1])
        assert stats["regions"] > 0
        assert stats["caller_jobs"] + stats["worker_jobs"] >= stats["regions"]
        assert sum(stats["join_hist"]) == stats["regions"]


@pytest.mark.parametrize(
    "node, shape",
    [
        (
            helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
            [1, 8, 64, 64],
        ),
        (
            helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            [1, 8, 9, 9],
        ),
        (
            helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[3, 3]),
            [1, 8, 64, 64],
        ),
        (helper.make_node("GlobalAveragePool", ["x"], ["y"]), [2, 300, 17, 19]),
        (
            helper.make_node(
                "Conv", ["x", "w"], ["y"], kernel_shape=[2, 2], strides=[2, 2], group=8
            ),
            [1, 8, 64, 64],
        ),
    ],
    ids=["maxpool2x2s2", "avgpool3x3", "maxpool3x3s3", "gap", "depthwise2x2s2"],
)
@pytest.mark.parametrize(
    "flags", [["-O2"], [*NATIVE, "-DO2E_THREADS=2", "-pthread"]], ids=["portable", "native_threads"]
)
def test_single_op_model_builds_strict(
    node: onnx.NodeProto, shape: list[int], flags: list[str], tmp_path: Path
) -> None:
    """A model of one op gets only the helpers it uses (no unused static function under -Werror)."""
    inits = [tensor("w", np.full((shape[1], 1, 2, 2), 0.5, np.float32))] if node.input[1:] else []
    ones = {"x": np.ones(shape, np.float32)}
    ref = ort_run(make_model([node], [vi("x", shape)], [vi("y", None)], inits), ones)["y"]
    m = make_model([node], [vi("x", shape)], [vi("y", list(ref.shape))], inits)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    out = tmp_path / "out"
    api.convert(save(m, tmp_path / "m.onnx"), "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "m"), io, {"x": x}, tmp_path)["y"]
    ref = ort_run(m, {"x": x})["y"]
    assert np.abs(got - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max()))


def test_float32_only_and_indices_keep_the_generic_loop(tmp_path: Path) -> None:
    """MaxPool with Indices, LpPool, 1-D / 3-D pooling and double stay on pool.py's N-d loop."""
    cases = [
        (
            helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2]),
            [1, 2, 4, 4],
            TensorProto.FLOAT,
        ),
        (
            helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2]),
            [1, 2, 4, 4],
            TensorProto.FLOAT,
        ),
        (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2]), [1, 2, 4], TensorProto.FLOAT),
        (
            helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2]),
            [1, 2, 4, 4, 4],
            TensorProto.FLOAT,
        ),
        (
            helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2]),
            [1, 2, 4, 4],
            TensorProto.DOUBLE,
        ),
    ]
    for k, (node, shape, elem) in enumerate(cases):
        oshape = [*shape[:2], *(d - 1 for d in shape[2:])]
        outs = [vi(o, oshape, elem if o == "y" else TensorProto.INT64) for o in node.output]
        m = make_model([node], [vi("x", shape, elem)], outs)
        res = api.convert(save(m, tmp_path / f"m{k}.onnx"), "c", tmp_path / f"out{k}")
        assert not any("phase planes" in key for key in res.stats["kernels"]), (node.op_type, shape)
