"""Strided k x k convolutions on the implicit GEMM (backends/c/kernels/conv/conv_gemm.py) with its wide
conv strips (O2E_GEMM_CONV_SB panels, runtime/o2e_gemm.h): RGB stems with >= 75 taps and >= 64
outputs (conv_stem.GEMM_MIN_K / GEMM_MIN_M) and the 3x3 / 2 layers, against onnxruntime at
every ISA, with NaN / Inf inputs, odd sizes, padding and fused activations / residuals."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ASAN, make_model, save, tensor, vi
from conv_models import act_inits, act_node

IMPLICIT = "Conv: implicit GEMM (im2col fused into B packing)"

# name: (C, M, H, W, k, stride, pads t l b r, activation, residual)
CASES = {
    # ResNet50 / GoogLeNet conv1 (7x7 / 2, 3 -> 64) on an odd map: several 192-column strips
    # and a partial last one; M = 72 leaves a partial 8-row panel
    "stem7": (3, 72, 45, 61, 7, 2, (3, 3, 3, 3), "Relu", False),
    "stem5": (3, 64, 31, 40, 5, 2, (2, 1, 2, 2), "Clip", False),  # asymmetric padding
    # 3x3 / 2 with a residual added in the GEMM epilogue (lanes refuses residuals)
    "s2res": (40, 48, 29, 27, 3, 2, (1, 1, 1, 1), "Relu", True),
    "s3": (16, 24, 23, 50, 3, 3, (0, 1, 1, 0), None, False),  # stride 3, one 16-column run
}


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, (C, M, H, W, k, s, pads, act, res) in CASES.items():
        x = rng.standard_normal((1, C, H, W)).astype(np.float32)
        x.flat[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf] * 2
        feeds[f"x{name}"] = x
        w = (rng.standard_normal((M, C, k, k)) / np.sqrt(C * k * k)).astype(np.float32)
        inits += [tensor(f"w{name}", w), tensor(f"b{name}", rng.standard_normal(M).astype("f4"))]
        OH = (H + pads[0] + pads[2] - k) // s + 1
        OW = (W + pads[1] + pads[3] - k) // s + 1
        ins.append(vi(f"x{name}", [1, C, H, W]))
        outs.append(vi(f"y{name}", [1, M, OH, OW]))
        conv = [f"x{name}", f"w{name}", f"b{name}"]
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": list(pads)}
        nodes.append(helper.make_node("Conv", conv, [f"c{name}"], **attrs))
        src = f"c{name}"
        if res:
            r = rng.standard_normal((1, M, OH, OW)).astype(np.float32)
            r.flat[:3] = [np.inf, -np.inf, np.nan]
            feeds[f"r{name}"] = r
            ins.append(vi(f"r{name}", [1, M, OH, OW]))
            nodes.append(helper.make_node("Add", [src, f"r{name}"], [f"a{name}"]))
            src = f"a{name}"
        nodes.append(act_node(act, src, f"y{name}"))
    inits += act_inits()
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "s2.onnx"), feeds


def _check(got: dict[str, np.ndarray], path: Path, feeds: dict[str, np.ndarray]) -> None:
    ref = ort_run(onnx.load(path), feeds)
    assert any(np.isnan(v).any() for v in ref.values())  # the NaN inputs reach outputs
    for k in ref:  # non-finite outputs where onnxruntime has them, finite ones close
        assert np.array_equal(np.isnan(got[k]), np.isnan(ref[k])), k
        assert np.array_equal(np.isposinf(got[k]), np.isposinf(ref[k])), k
        assert np.array_equal(np.isneginf(got[k]), np.isneginf(ref[k])), k
        fin = np.isfinite(ref[k])
        r = compare(k, got[k][fin], ref[k][fin], 1e-4, 1e-5)
        assert r.ok, (r.name, r.max_abs, r.max_rel)


def _layer_kernels(out: Path) -> dict[str, str]:
    import json

    return json.loads((out / "onnx2edge.json").read_text())["stats"]["layer_kernels"]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_strided_gemm_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    chosen = set(_layer_kernels(out).values())
    assert chosen == {"implicit_gemm"}, chosen  # stems included: >= 75 taps, >= 64 outputs
    _check(api.run(out, feeds, options={"arch": arch}), path, feeds)


def test_strided_gemm_threads_and_bounds(tmp_path: Path) -> None:
    """3 threads under ASan / UBSan: the wide strips' packing stays inside the workspace that
    gemm_pack.sgemm_workspace_bytes(conv=True) sized, results unchanged."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable

    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    _check(run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path), path, feeds)


def test_small_stems_keep_the_stem_kernel(tmp_path: Path) -> None:
    """3x3 RGB stems (27 taps) and stems with < 64 outputs stay on conv_stem.py (faster there)."""
    rng = np.random.default_rng(2)
    nodes, ins, outs, inits = [], [], [], []
    for name, (M, k) in {"k3": (64, 3), "m32": (32, 7)}.items():
        w = rng.standard_normal((M, 3, k, k)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        ins.append(vi(f"x{name}", [1, 3, 40, 64]))
        outs.append(vi(f"y{name}", [1, M, 20, 32]))
        attrs = {"strides": [2, 2], "pads": [k // 2] * 4}
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}"], [f"y{name}"], **attrs))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "small.onnx")
    api.convert(path, "c", tmp_path / "out")
    assert set(_layer_kernels(tmp_path / "out").values()) == {"stem"}


WS_SHAPES = [(64, 12544, 147), (72, 713, 147), (128, 784, 1152), (512, 49, 4608), (8, 17, 9)]


@pytest.mark.parametrize("march", ["x86-64-v2", "x86-64-v3", "native"])
def test_conv_workspace_within_the_python_bound(tmp_path: Path, march: str) -> None:
    """o2e_sgemm_conv_workspace (wider strips than o2e_sgemm_workspace) never exceeds
    sgemm_workspace_bytes(conv=True), which sizes the arena, at 1 and 4 threads."""
    import subprocess

    from onnx2edge.backends.c.gemm_pack import sgemm_workspace_bytes

    runtime = Path(api.__file__).parent / "backends" / "c" / "runtime"
    src = tmp_path / "ws.c"
    calls = "".join(
        f'printf("%zu\\n", o2e_sgemm_conv_workspace({m}, {n}, {k}));\n' for m, n, k in WS_SHAPES
    )
    src.write_text(f'#include <stdio.h>\n#include "o2e_gemm.h"\nint main(void) {{\n{calls}}}\n')
    for threads in (1, 4):
        exe = tmp_path / f"ws{threads}"
        flags = [f"-march={march}", f"-DO2E_THREADS={threads}", "-pthread", f"-I{runtime}"]
        subprocess.run(["gcc", "-O1", *flags, str(src), "-o", str(exe), "-lm"], check=True)
        got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
        for (m, n, k), ws in zip(WS_SHAPES, map(int, got.split()), strict=True):
            bound = sgemm_workspace_bytes(m, n, k, threads, conv=True)
            assert 0 < ws <= bound, (m, n, k, threads, ws, bound)


def test_portable_workspace_is_the_device_plan(tmp_path: Path) -> None:
    """A --device conversion sizes each GEMM workspace for the portable kernels on one thread
    (gemm_pack's `variants`): what o2e_gemm.h's portable build asks for, plain and conv,
    exactly when K <= KC_MIN (the short-K shapes whose packed B slice is K rows, not KC; above
    it the bound also holds the partial-sum tile a build with a lowered KC would add)."""
    import subprocess

    from onnx2edge.backends.c.gemm_pack import KC_MIN, sgemm_workspace_bytes

    runtime = Path(api.__file__).parent / "backends" / "c" / "runtime"
    shapes = [*WS_SHAPES, (64, 125, 40), (16, 64, 9), (32, 16, 144), (8, 300, 1000)]
    src = tmp_path / "ws.c"
    calls = "".join(
        f'printf("%zu %zu\\n", o2e_sgemm_workspace({m}, {n}, {k}), '
        f"o2e_sgemm_conv_workspace({m}, {n}, {k}));\n"
        for m, n, k in shapes
    )
    src.write_text(f'#include <stdio.h>\n#include "o2e_gemm.h"\nint main(void) {{\n{calls}}}\n')
    exe = tmp_path / "ws"
    flags = ["-march=x86-64-v2"] if platform.machine() in ("x86_64", "AMD64") else []
    subprocess.run(
        ["gcc", "-O1", *flags, f"-I{runtime}", str(src), "-o", str(exe), "-lm"], check=True
    )
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    for (m, n, k), line in zip(shapes, got.splitlines(), strict=True):
        for ws, conv in zip(map(int, line.split()), (False, True), strict=True):
            bound = sgemm_workspace_bytes(m, n, k, 1, conv=conv, variants=("portable",))
            assert 0 < ws <= bound, (m, n, k, conv, ws, bound)
            assert ws == bound or k > KC_MIN, (m, n, k, conv, ws, bound)
