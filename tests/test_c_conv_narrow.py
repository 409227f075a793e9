"""k x k convolutions on narrow maps, output channels in the lanes (kernels/conv/conv_narrow.py,
`o2e_convkxk_lanes` in runtime/o2e_conv1x1.h), at every ISA the C backend emits: x86-64-v2
(SSE vectors), x86-64-v3 (AVX2), native (AVX-512) and aarch64 (NEON, under qemu).

One model holds the edges of the im2col packing and of the tiles: strides 2 and 3, 1x3 / 3x1
kernels with one-sided pads, asymmetric pads, dilation, K across several K slices
(O2E_PW_KC = 256), M not a multiple of the 32-channel tile, pixel counts below one tile and
between tiles, a residual add followed by Clip, no bias, a batch of 2, an activation the tile
cannot apply (Sigmoid: a separate pass), and NaN / +-Inf in the input and the residual.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ASAN, make_model, save, tensor, vi
from conv_models import act_inits, act_node

LABEL = "Conv: k x k on a narrow map (output channels in lanes)"

# name: (N, C, M, input HxW, kernel, strides, pads (t, l, b, r), dilations, bias, residual, act)
CASES = {
    "s2": (1, 64, 40, (14, 14), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False, "Relu"),
    "row": (2, 48, 33, (8, 8), (1, 3), (1, 1), (0, 1, 0, 1), (1, 1), False, False, None),
    "col": (1, 64, 64, (8, 8), (3, 1), (1, 1), (1, 0, 1, 0), (1, 1), True, True, "Clip"),
    "dil": (1, 16, 32, (11, 13), (5, 5), (3, 3), (2, 2, 2, 2), (2, 2), True, False, "LeakyRelu"),
    "asym": (1, 32, 48, (7, 6), (3, 3), (2, 2), (1, 0, 0, 1), (1, 1), True, False, "Sigmoid"),
    "tiny": (1, 128, 96, (5, 5), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True, True, "Relu"),
}


def _out(n: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def _model(tmp_path: Path, nonfinite: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, (N, C, M, (H, W), k, s, p, d, has_b, res, act) in CASES.items():
        OH, OW = _out(H, k[0], s[0], p[0], p[2], d[0]), _out(W, k[1], s[1], p[1], p[3], d[1])
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        if nonfinite:
            x[0, 1, 2, 3], x[0, C - 1, H - 1, W - 1], x[N - 1, C // 2, 1, W // 2] = (
                np.nan,
                np.inf,
                -np.inf,
            )
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [N, C, H, W]))
        w = (rng.standard_normal((M, C, *k)) / np.sqrt(C * k[0] * k[1])).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p), dilations=list(d))
        nodes.append(helper.make_node("Conv", conv_in, [cur], **attrs))
        if res:
            r = rng.standard_normal((N, M, OH, OW)).astype(np.float32) * 3
            if nonfinite:
                r[0, 0, 0, 0], r[0, M - 1, OH - 1, OW - 1] = np.nan, -np.inf
            feeds[f"r{name}"] = r
            ins.append(vi(f"r{name}", [N, M, OH, OW]))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(act_node(act, cur, f"y{name}"))
        outs.append(vi(f"y{name}", [N, M, OH, OW]))
    inits += act_inits()
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "narrow.onnx"), feeds


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    for k in ref:  # NaN where onnxruntime has NaN, the same infinities, close elsewhere
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(ref[k]), err_msg=k)
        inf = np.isinf(ref[k])
        np.testing.assert_array_equal(got[k][inf], ref[k][inf], err_msg=k)
    fin = {k: np.where(np.isfinite(ref[k]), ref[k], 0) for k in ref}
    gfin = {k: np.where(np.isfinite(ref[k]), got[k], 0) for k in ref}
    bad = [r for r in (compare(k, gfin[k], fin[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "nan_inf"])
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_narrow_lanes_matches_onnxruntime(tmp_path: Path, arch: str, nonfinite: bool) -> None:
    path, feeds = _model(tmp_path, nonfinite)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(LABEL) == len(CASES), kernels  # every case takes the path
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    _check(got, ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize(
    "flags",
    [
        ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"],
        ["-O2", "-DO2E_THREADS=2", "-pthread"],
    ],
    ids=["native_asan_3threads", "portable_2threads"],
)
def test_narrow_lanes_threads_and_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Split across threads, under ASan / UBSan: the gathers stay inside the input planes
    (taps in the padding read nothing), and the results do not change."""
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _model(tmp_path, nonfinite=True)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    _check(got, ort_run(onnx.load(path), feeds))


def test_narrow_leaves_winograd_wide_maps_and_1x1(tmp_path: Path) -> None:
    """3x3 stride-1 layers stay on Winograd (faster on 7x7: measured 1.15x slower here), maps
    over 64 pixels and small K on their kernels, 1x1 layers on the pointwise path; switched
    off, a strided layer goes back to the implicit GEMM."""
    rng = np.random.default_rng(3)
    nodes, ins, outs, inits = [], [], [], []
    shapes = {  # name: (C, H, kernel, stride, pad) -> output
        "wino": (256, 7, 3, 1, 1),
        "wide": (256, 20, 3, 2, 1),
        "thin": (8, 7, 3, 2, 1),
        "one": (256, 7, 1, 1, 0),
    }
    for name, (C, H, k, s, p) in shapes.items():
        w = rng.standard_normal((64, C, k, k)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        ins.append(vi(f"x{name}", [1, C, H, H]))
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}"], [f"y{name}"], **attrs))
        OH = _out(H, k, s, p, p, 1)
        outs.append(vi(f"y{name}", [1, 64, OH, OH]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "g.onnx")
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert LABEL not in kernels, kernels
    nodes, ins, outs, inits = [], [], [], []
    w = rng.standard_normal((64, 256, 3, 3)).astype(np.float32)
    inits.append(tensor("w", w))
    ins.append(vi("x", [1, 256, 14, 14]))
    nodes.append(helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1] * 4))
    outs.append(vi("y", [1, 64, 7, 7]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "s.onnx")
    on = api.convert(path, "c", tmp_path / "on").stats["kernels"]
    off = api.convert(path, "c", tmp_path / "off", options={"kernels": "narrow=off"})
    assert on == {LABEL: 1}, on
    assert LABEL not in off.stats["kernels"], off.stats["kernels"]
