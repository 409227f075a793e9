"""The strided few-input-channel first-layer kernel (backends/c/kernels/conv/conv_stem.py) against
onnxruntime at every ISA the C backend emits: x86-64-v2 (portable C), x86-64-v3 (AVX2),
native (AVX-512 where present) and aarch64 (NEON, under qemu).

One model holds the kernel's edges on small maps: strides 2, 3, 4 and a mixed (2, 3) stride;
kernels 3x3, 5x5, 7x7 and 5x3; symmetric, asymmetric and no padding; output widths that
leave partial vectors of 16 / 8 / 4 lanes and rows of 1 to 8 vectors; channel counts that
leave partial channel blocks (M = 13, 20); 1, 3 and 4 input channels; no bias; a batch of 2;
fused Relu, Clip (with and without a max: both applied to the accumulators), LeakyRelu,
Sigmoid (a loop after the store) and none; and NaN / +-Inf inputs (they must reach the same
outputs as in onnxruntime)."""

from __future__ import annotations

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

LABEL = "Conv: stem conv (strided, few input channels)"

# name: (N, C, M, H, W, (kh, kw), (sh, sw), pads t l b r, bias, activation)
CASES = {
    "a": (1, 3, 32, 33, 45, (3, 3), (2, 2), (1, 1, 1, 1), True, "Relu"),  # MobileNet-like
    "b": (1, 3, 20, 29, 70, (7, 7), (2, 2), (3, 3, 3, 3), True, None),  # ResNet-like, M % 8
    "c": (2, 3, 13, 47, 87, (5, 5), (4, 4), (0, 0, 0, 0), False, "Clip"),  # stride 4, M < 16
    "d": (1, 4, 24, 18, 100, (5, 3), (2, 3), (2, 0, 1, 2), True, "LeakyRelu"),  # mixed stride
    "e": (1, 1, 16, 21, 55, (3, 3), (3, 3), (0, 1, 0, 0), True, "Sigmoid"),  # stride 3, gray
    "f": (1, 3, 40, 9, 230, (3, 3), (2, 2), (0, 0, 0, 0), True, "Relu"),  # 114 px: 8 vectors
    # Clip without a max (clamps +Inf to the largest float), on partial channel blocks
    "g": (1, 3, 20, 23, 61, (7, 7), (2, 2), (3, 3, 3, 3), True, "ClipMin"),
    # MobileNetV3's stem: HardSwish on the accumulators (O2E_STEM_CLAMP_HSWISH), partial block
    "h": (1, 3, 20, 37, 58, (3, 3), (2, 2), (1, 1, 1, 1), True, "HardSwish"),
}


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, (N, C, M, H, W, k, s, pads, has_b, act) in CASES.items():
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        x.flat[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf] * 2
        feeds[f"x{name}"] = x
        w = (rng.standard_normal((M, C, *k)) / np.sqrt(C * k[0] * k[1])).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        OH = (H + pads[0] + pads[2] - k[0]) // s[0] + 1
        OW = (W + pads[1] + pads[3] - k[1]) // s[1] + 1
        ins.append(vi(f"x{name}", [N, C, H, W]))
        outs.append(vi(f"y{name}", [N, M, OH, OW]))
        c = f"c{name}"
        nodes.append(
            helper.make_node(
                "Conv", conv_in, [c], kernel_shape=list(k), strides=list(s), pads=list(pads)
            )
        )
        nodes.append(act_node(act, c, f"y{name}", alpha=0.1))
    inits += act_inits()
    return save(make_model(nodes, ins, outs, inits, opset=14), tmp_path / "stem.onnx"), feeds


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


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_stem_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(LABEL) == len(CASES), kernels  # every case takes the path
    _check(api.run(tmp_path / "out", feeds, options={"arch": arch}), path, feeds)


def test_stem_threads_and_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows split across 3 threads under ASan / UBSan: the vectors past a row's end read the
    planes' slack, never outside the arena, and results do not change."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    _check(run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path), path, feeds)


def test_other_layers_keep_their_kernels(tmp_path: Path) -> None:
    """Stride 1, many input channels, narrow maps, grouped layers and 11x11 / 4 (AlexNet, NIN:
    the GEMM was faster) are not stems."""
    rng = np.random.default_rng(3)
    nodes, ins, outs, inits = [], [], [], []
    # name: (C, M, H, W, stride, group)
    # name: (C, M, H, W, k, stride, group)
    shapes = {"s1": (3, 32, 20, 40, 3, 1, 1), "wide_c": (16, 32, 20, 40, 3, 2, 1)}
    shapes |= {"narrow": (3, 32, 20, 20, 3, 2, 1), "grouped": (4, 32, 20, 40, 3, 2, 2)}
    shapes |= {"alexnet": (3, 32, 40, 90, 11, 4, 1)}  # 363 taps: the GEMM measured faster
    for name, (C, M, H, W, k, s, g) in shapes.items():
        inits.append(tensor(f"w{name}", rng.standard_normal((M, C // g, k, k)).astype(np.float32)))
        ins.append(vi(f"x{name}", [1, C, H, W]))
        nodes.append(
            helper.make_node(
                "Conv", [f"x{name}", f"w{name}"], [f"y{name}"], strides=[s, s], group=g
            )
        )
        outs.append(vi(f"y{name}", [1, M, (H - k) // s + 1, (W - k) // s + 1]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "o.onnx")
    assert LABEL not in api.convert(path, "c", tmp_path / "out").stats["kernels"]
