"""The channel-lanes stem kernel (backends/c/kernels/conv/conv_stem_lanes.py: few input channels, >= 100
taps, output channels in the vector lanes) against onnxruntime at every ISA the C backend
emits: x86-64-v2 (portable C), x86-64-v3 (AVX2), native (AVX-512 where present) and aarch64
(NEON, under qemu).

One model holds the kernel's edges on small maps: AlexNet's 11x11 / 4, 7x7 / 2 with padding
(the zero-bordered copy), a mixed (2, 3) stride with asymmetric padding, stride 1; 1, 3 and
4 input channels; M = 47 (a partial 48-channel block) and 96 (two blocks); output widths that
leave partial tiles of 8 / 6 / 4 pixels (13, 23, 111); no bias; a batch of 2; fused Relu,
Clip and none (AVX-512: applied in registers before the transposing store, a partial
16-channel vector with M = 47) and LeakyRelu, Sigmoid (the scalar store); and NaN / +-Inf
inputs (they must reach the same outputs as in onnxruntime)."""

from __future__ import annotations

import json
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

LABEL = "Conv: stem conv (output channels in lanes)"

# name: (N, C, M, H, W, (kh, kw), (sh, sw), pads t l b r, bias, activation)
CASES = {
    "a": (1, 3, 96, 43, 59, (11, 11), (4, 4), (0, 0, 0, 0), False, "Relu"),  # AlexNet-like
    "b": (1, 3, 48, 29, 45, (7, 7), (2, 2), (3, 3, 3, 3), True, "LeakyRelu"),  # padded
    "c": (2, 4, 47, 18, 70, (5, 5), (2, 3), (2, 0, 1, 2), True, "Clip"),  # K = 100, M = 47
    "d": (1, 1, 96, 14, 30, (10, 10), (1, 1), (0, 0, 0, 0), False, "Sigmoid"),  # stride 1
    "e": (1, 3, 96, 15, 227, (7, 7), (2, 2), (0, 0, 0, 0), True, None),  # 111 px, SqueezeNet
}


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
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
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "stem_lanes.onnx")
    return path, feeds


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
def test_stem_lanes_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(LABEL) == len(CASES), kernels  # every case takes the path
    _check(api.run(tmp_path / "out", feeds, options={"arch": arch}), path, feeds)


def test_stem_lanes_threads_and_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Units split across 3 threads under ASan / UBSan: the broadcasts read inside the input
    (or its padded copy) and results do not change."""
    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    _check(run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path), path, feeds)


def test_stem_lanes_refusals(tmp_path: Path) -> None:
    """Fewer than 100 taps, M = 64 (a third of the second 48-channel block idle), many input
    channels and groups keep the other kernels."""
    rng = np.random.default_rng(3)
    nodes, ins, outs, inits = [], [], [], []
    # name: (C, M, H, W, k, stride, group)
    shapes = {"k75": (3, 96, 20, 40, 5, 2, 1), "m64": (3, 64, 20, 40, 7, 2, 1)}
    shapes |= {"wide_c": (16, 96, 20, 40, 7, 2, 1), "grouped": (4, 96, 20, 40, 7, 2, 2)}
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
