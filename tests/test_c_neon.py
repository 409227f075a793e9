"""The NEON (aarch64) paths of the generated C, cross-built and run under qemu-user.

Each kernel with a NEON block - the packed SGEMM micro-kernel and its epilogue, the packed and
plain GEMV, the fully connected layer that skips zero inputs (runtime/o2e_gemm.h) and the row
copy / stride-2 deinterleave of the phase planes that pooling and depthwise convolution share
(kernels/pool/pool2d.py) - is built twice with aarch64-linux-gnu-gcc: `-march=armv8-a` (NEON) and
`-march=armv8-a+nosimd` (no __ARM_NEON: the portable C99 kernels, not even auto-vectorised).
Both run under qemu-aarch64 and are compared with onnxruntime (and numpy for the GEMM engine)
and with each other. Winograd's transforms and the depthwise / pooling plane loops have no
intrinsics of their own (gcc vectorises them for NEON: fmla / ld4 in the disassembly); their
models are here so that the auto-vectorised code is checked on aarch64 too.

Shapes are small (qemu is slow) but cover every tile edge: M not a multiple of 8, N not a
multiple of 12 or 4, K with remainders of 4 and 16, partial FC blocks, odd maps and strides.
Timings under emulation mean nothing, so nothing here measures speed.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from test_gemm import GUARD, HARNESS, RUNTIME, SMALL_BLOCKS, THREADS, make_cases

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
pytestmark = pytest.mark.skipif(
    shutil.which(CC) is None or shutil.which(QEMU) is None,
    reason="needs aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu) and qemu-aarch64 (qemu-user)",
)
# static: qemu-user then needs no aarch64 sysroot (-L) to run the program
NEON_CFLAGS = ["-O3", "-march=armv8-a", "-ffp-contract=fast"]
NEON = [*NEON_CFLAGS, "-static"]
NOSIMD = ["-O3", "-march=armv8-a+nosimd", "-ffp-contract=fast", "-static"]
WARN = ["-std=c99", "-Wall", "-Wextra", "-Werror"]


# ---- the GEMM engine against numpy (the harness and cases of test_gemm.py) -------------------
GEMM_BUILDS = {
    "neon": ([*WARN, *NEON], 1, "neon"),
    "neon_small_threads": ([*WARN, *NEON, *SMALL_BLOCKS, *THREADS], 2, "neon"),
    "nosimd": ([*WARN, *NOSIMD], 1, "portable"),
}


@pytest.mark.parametrize("name", list(GEMM_BUILDS))
def test_gemm_engine_matches_numpy(tmp_path: Path, name: str) -> None:
    flags, threads, kernel = GEMM_BUILDS[name]
    src = tmp_path / "harness.c"
    src.write_text(HARNESS.replace("GUARD", str(GUARD)))
    exe = tmp_path / name
    cmd = [CC, *flags, "-I", str(RUNTIME), str(src), "-o", str(exe), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    cases = make_cases(seed=2, n_random=160)
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(struct.pack("<i", len(cases)) + b"".join(c.encode() for c in cases))
    r = subprocess.run(
        [QEMU, str(exe), str(inp), str(outp)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, f"{name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert f"kernel={kernel}" in r.stdout
    data = np.fromfile(outp, dtype=np.float32)
    pos = 0
    for c in cases:
        n = c.out_floats()
        c.check(data[pos : pos + n], threads)
        pos += n
    assert pos == data.size


# ---- whole models against onnxruntime -------------------------------------------------------
def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _conv(name: str, x: str, y: str, w: np.ndarray, inits: list, **attrs) -> onnx.NodeProto:  # noqa: ANN003
    inits += [
        tensor(f"{name}_w", w),
        tensor(f"{name}_b", _w(np.random.default_rng(len(inits)), w.shape[0])),
    ]
    return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], name=name, **attrs)


Part = tuple[list, list, list, list]  # nodes, inputs, outputs, initializers


def _gemm_part() -> Part:
    """1x1 conv (M = 19: a partial 8-row panel; N = 143: a partial 12-wide strip) + Relu, a
    strided 3x3 conv through im2col (K = 171) + Clip with a residual Add, and a batch-3 Gemm
    (N = 3 < 4 lanes)."""
    rng = np.random.default_rng(11)
    inits: list = []
    nodes = [
        _conv("c1", "x_gemm", "c1o", _w(rng, 19, 5, 1, 1), inits),
        helper.make_node("Relu", ["c1o"], ["r1"]),
        _conv("c2", "r1", "c2o", _w(rng, 21, 19, 3, 3), inits, strides=[2, 2], pads=[1, 1, 1, 1]),
        _conv("c3", "r1", "c3o", _w(rng, 21, 19, 1, 1), inits, strides=[2, 2]),
        helper.make_node("Add", ["c2o", "c3o"], ["s"]),
        helper.make_node("Clip", ["s", "g_lo", "g_hi"], ["gemm_conv"]),
        helper.make_node("Gemm", ["z_gemm", "gw", "gb"], ["gemm_batch3"], transB=1),
    ]
    inits += [
        tensor("g_lo", np.array(-0.6, np.float32)),
        tensor("g_hi", np.array(0.8, np.float32)),
        tensor("gw", _w(rng, 29, 45)),
        tensor("gb", _w(rng, 29)),
    ]
    return (
        nodes,
        [vi("x_gemm", [1, 5, 13, 11]), vi("z_gemm", [3, 45])],
        [vi("gemm_conv", [1, 21, 7, 6]), vi("gemm_batch3", [3, 29])],
        inits,
    )


def _depthwise_part() -> Part:
    """Depthwise 3x3 stride 1 + Relu, 3x3 stride 2 (odd map: the deinterleave's tail) + Clip
    (Relu6), 5x5 stride 1 without activation, 3x1 (the loop without compaction): dw rows; a
    3x3 stride 4 on 5x6 outputs: the plane kernel."""
    rng = np.random.default_rng(12)
    inits: list = []
    c = 6
    nodes = [
        _conv("d1", "x_dw", "d1o", _w(rng, c, 1, 3, 3), inits, group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d1o"], ["r1d"]),
        _conv(
            "d2",
            "r1d",
            "d2o",
            _w(rng, c, 1, 3, 3),
            inits,
            group=c,
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Clip", ["d2o", "d_lo", "d_hi"], ["dw_s2"]),
        _conv("d3", "x_dw", "dw_5x5", _w(rng, c, 1, 5, 5), inits, group=c, pads=[2, 2, 2, 2]),
        # one column per window: rows need no compaction (15 x 21 = 19 x 16 + 11: the tail)
        _conv("d4", "x_dw", "dw_3x1", _w(rng, c, 1, 3, 1), inits, group=c),
        # 5x6 outputs: rows under 7 keep the plane kernel (the others take dw rows)
        _conv(
            "d5", "x_dw", "dw_s4", _w(rng, c, 1, 3, 3), inits, group=c, strides=[4, 4], pads=[1] * 4
        ),
    ]
    inits += [tensor("d_lo", np.array(0.0, np.float32)), tensor("d_hi", np.array(6.0, np.float32))]
    return (
        nodes,
        [vi("x_dw", [1, c, 17, 21])],
        [
            vi("dw_s2", [1, c, 9, 11]),
            vi("dw_5x5", [1, c, 17, 21]),
            vi("dw_3x1", [1, c, 15, 21]),
            vi("dw_s4", [1, c, 5, 6]),
        ],
        inits,
    )


def _winograd_part() -> Part:
    """3x3 stride-1 conv, 8 -> 9 channels on an 18x21 map (edge tiles in both directions)."""
    rng = np.random.default_rng(13)
    inits: list = []
    nodes = [
        _conv("w1", "x_wino", "w1o", _w(rng, 9, 8, 3, 3), inits, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["w1o"], ["wino"]),
    ]
    return nodes, [vi("x_wino", [1, 8, 18, 21])], [vi("wino", [1, 9, 18, 21])], inits


def _pool_part() -> Part:
    """MaxPool 3x3/2 with padding (stride-2 planes, odd width), MaxPool 2x2/2, AveragePool
    3x3/1 (count_include_pad 0 and 1), GlobalAveragePool (29 = 16 + 13 elements), MaxPool 2x1/2x1,
    a dilated MaxPool and a column-stride-3 AveragePool (phase planes; the others run by rows)."""
    nodes = [
        helper.make_node(
            "MaxPool",
            ["x_pool"],
            ["max_3s2"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("MaxPool", ["x_pool"], ["max_2s2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node(
            "AveragePool", ["x_pool"], ["avg"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node(
            "AveragePool",
            ["x_pool"],
            ["avg_pad"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
        ),
        helper.make_node("GlobalAveragePool", ["g_pool"], ["gap"]),
        # one column per window: no compaction, 7 x 19 = 8 x 16 + 5 outputs (the tail)
        helper.make_node("MaxPool", ["x_pool"], ["max_2x1"], kernel_shape=[2, 1], strides=[2, 1]),
        # dilated: still on the phase planes (the other MaxPools run by rows, pool_rows.py)
        helper.make_node(
            "MaxPool",
            ["x_pool"],
            ["max_dil"],
            kernel_shape=[2, 2],
            dilations=[2, 2],
            strides=[1, 3],
        ),
        helper.make_node(
            "AveragePool", ["x_pool"], ["avg_s3"], kernel_shape=[2, 2], strides=[1, 3]
        ),
    ]
    outs = [
        vi("max_3s2", [1, 3, 8, 10]),
        vi("max_2s2", [1, 3, 7, 9]),
        vi("avg", [1, 3, 15, 19]),
        vi("avg_pad", [1, 3, 15, 19]),
        vi("gap", [1, 5, 1]),
        vi("max_2x1", [1, 3, 7, 19]),
        vi("max_dil", [1, 3, 13, 6]),
        vi("avg_s3", [1, 3, 14, 6]),
    ]
    return nodes, [vi("x_pool", [1, 3, 15, 19]), vi("g_pool", [1, 5, 29])], outs, []


def _fc_part() -> Part:
    """Relu -> Gemm (K = 300, N = 490: zero inputs skipped, 2 blocks of 256, the last partial)
    and a Gemm on a raw input (packed GEMV, K = 301, N = 37: remainders of 4 and 16)."""
    rng = np.random.default_rng(14)
    nodes = [
        helper.make_node("Relu", ["x_fc"], ["h"]),
        helper.make_node("Gemm", ["h", "w1", "b1"], ["fc_skip"], transB=1),
        helper.make_node("Gemm", ["z_fc", "w2", "b2"], ["fc_gemv"], transB=1),
    ]
    inits = [
        tensor("w1", _w(rng, 490, 300)),
        tensor("b1", _w(rng, 490)),
        tensor("w2", _w(rng, 37, 301)),
        tensor("b2", _w(rng, 37)),
    ]
    return (
        nodes,
        [vi("x_fc", [1, 300]), vi("z_fc", [1, 301])],
        [vi("fc_skip", [1, 490]), vi("fc_gemv", [1, 37])],
        inits,
    )


# kernel family -> (its part of the model, kernels the converter must pick for it)
def _pointwise_part() -> Part:
    """1x1 conv on a 7x7 map with output channels in the lanes (kernels/conv/conv_pointwise.py): M = 40
    (a partial 16-lane tile), K = 300 (two K slices), then Clip with a residual Add."""
    rng = np.random.default_rng(14)
    inits: list = []
    nodes = [
        _conv("pw", "x_pw", "pwo", _w(rng, 40, 300, 1, 1), inits),
        helper.make_node("Add", ["pwo", "r_pw"], ["pws"]),
        helper.make_node("Clip", ["pws", "pw_lo", "pw_hi"], ["pw_out"]),
    ]
    inits += [tensor("pw_lo", np.array(-0.5, np.float32)), tensor("pw_hi", np.array(1, np.float32))]
    return (
        nodes,
        [vi("x_pw", [1, 300, 7, 7]), vi("r_pw", [1, 40, 7, 7])],
        [vi("pw_out", [1, 40, 7, 7])],
        inits,
    )


PARTS = {
    "gemm": (_gemm_part, {"Conv: 1x1 as GEMM"}),
    "depthwise": (_depthwise_part, {"Conv: depthwise direct", "Conv: depthwise rows"}),
    "pointwise": (_pointwise_part, {"Conv: 1x1 on a narrow map (output channels in lanes)"}),
    "winograd": (_winograd_part, {"Conv: winograd F(4x4,3x3)"}),
    "pool": (
        _pool_part,
        {
            "MaxPool: 2-D phase planes",
            "MaxPool: separable rows",
            "AveragePool: 2-D phase planes",
            "AveragePool: separable rows",
            "GlobalAveragePool: vectorised sum",
        },
    ),
    "fc": (
        _fc_part,
        {"Gemm: fully connected, zero inputs skipped", "Gemm: fully connected as packed GEMV"},
    ),
}


def _inputs(io: dict, special: bool) -> dict[str, np.ndarray]:
    """Seeded normal inputs; `special` puts NaN, +inf and -inf at a few positions."""
    out = {}
    for s in io["inputs"]:
        x = np.random.default_rng(5).standard_normal(s["shape"]).astype(np.float32)
        if special:
            flat = x.reshape(-1)
            flat[[3, flat.size // 2]] = np.nan
            flat[flat.size // 3] = np.inf
            flat[-2] = -np.inf
        out[s["name"]] = x
    return out


class Built:
    """One model holding every part, converted once and cross-built twice (NEON, +nosimd):
    under qemu the builds, not the runs, are what takes time."""

    def __init__(self, tmp: Path) -> None:
        parts = [build() for build, _ in PARTS.values()]
        model = make_model(*(sum((p[i] for p in parts), []) for i in range(4)))
        self.path = save(model, tmp / "neon.onnx")
        self.out = tmp / "out"
        self.kernels = set(api.convert(self.path, "c", self.out).stats["kernels"])
        self.io = json.loads((self.out / "onnx2edge.json").read_text())
        self.exes = {
            tag: build_executable(self.out, flags, name=tag, cc=CC)
            for tag, flags in (("neon", NEON), ("nosimd", NOSIMD))
        }

    def run(self, special: bool) -> tuple[dict, dict, dict]:
        """(NEON, portable, onnxruntime) outputs by name."""
        x = _inputs(self.io, special)
        work = self.out / ("special" if special else "finite")
        work.mkdir(exist_ok=True)
        neon, nosimd = (
            run_executable(self.exes[t], self.io, x, work, runner=[QEMU])
            for t in ("neon", "nosimd")
        )
        return neon, nosimd, ort_run(onnx.load(self.path), x)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(tmp_path_factory.mktemp("neon"))


@pytest.fixture(scope="module")
def finite(built: Built) -> tuple[dict, dict, dict]:
    return built.run(special=False)


@pytest.fixture(scope="module")
def special(built: Built) -> tuple[dict, dict, dict]:
    return built.run(special=True)


def _names(part: str) -> list[str]:
    return [o.name for o in PARTS[part][0]()[2]]


@pytest.mark.parametrize("part", list(PARTS))
def test_neon_matches_onnxruntime(built: Built, finite: tuple, part: str) -> None:
    assert PARTS[part][1] <= built.kernels, built.kernels
    neon, nosimd, ref = finite
    for k in _names(part):
        want = ref[k]
        tol = 1e-4 * np.abs(want).max() + 1e-6
        assert np.abs(neon[k] - want).max() <= tol, (k, "neon")
        assert np.abs(nosimd[k] - want).max() <= tol, (k, "nosimd")
        if part in ("pool", "depthwise"):  # same operations in the same order
            assert np.array_equal(neon[k], nosimd[k]), k


@pytest.mark.parametrize("part", list(PARTS))
def test_neon_non_finite(special: tuple, part: str) -> None:
    """NaN and infinities in every input: the NEON build gives the NaN / inf pattern of the
    portable build (bit for bit where the order of operations is the same) and, except for
    MaxPool, of onnxruntime. onnxruntime's own MaxPool (MLAS) is not consistent with NaN:
    depending on where a NaN sits in a window it returns NaN, the window's other maximum or
    even -FLT_MAX, so no kernel can match it; ours drops a NaN unless it is a window's first
    tap, the same on every ISA. (Winograd computes a tile with a non-finite input directly, so
    it matches onnxruntime too: issue 29.)"""
    neon, nosimd, ref = special
    for k in _names(part):
        assert np.array_equal(np.isnan(neon[k]), np.isnan(nosimd[k])), k
        assert np.array_equal(np.isinf(neon[k]), np.isinf(nosimd[k])), k
        fin = np.isfinite(neon[k])
        scale = np.abs(nosimd[k][fin]).max() if fin.any() else 1.0
        assert np.abs(neon[k][fin] - nosimd[k][fin]).max(initial=0.0) <= 1e-4 * scale + 1e-6, k
        if part in ("pool", "depthwise"):
            assert np.array_equal(neon[k], nosimd[k], equal_nan=True), k
        if not k.startswith("max_"):
            assert np.array_equal(np.isnan(neon[k]), np.isnan(ref[k])), k
            assert np.array_equal(np.isinf(neon[k]), np.isinf(ref[k])), k


# ---- whole zoo models compile for aarch64 without warnings ----------------------------------
ZOO_FAST = ["mnist_mlp", "mobilenet_v2"]
ZOO_SLOW = ["squeezenet", "googlenet", "inception_v3", "resnet50", "unet_small"]


@pytest.mark.parametrize(
    "name", ZOO_FAST + [pytest.param(n, marks=pytest.mark.slow) for n in ZOO_SLOW]
)
def test_zoo_compiles_for_aarch64(tmp_path: Path, name: str) -> None:
    """No x86 intrinsic outside its guard and no warning in any NEON block: model.c compiles
    with -Wall -Wextra -Werror for NEON with the thread pool (compile only: running these
    models under qemu would take minutes)."""
    from onnx2edge.bench import zoo

    path = zoo.save(name, tmp_path / f"{name}.onnx")
    api.convert(path, "c", tmp_path / "out")
    obj = tmp_path / "model.o"
    cmd = [CC, *WARN, *NEON_CFLAGS, "-DO2E_THREADS=4", "-pthread", "-c",
           str(tmp_path / "out" / "model.c"), "-o", str(obj)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]
    assert obj.stat().st_size > 0
