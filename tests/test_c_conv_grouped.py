"""Grouped convolutions with few channels a group (kernels/conv/conv_grouped.py,
runtime/o2e_gconv.h: (group, row block) work items, 8-channel register tiles), at every ISA
the C backend emits: x86-64-v2, x86-64-v3 (AVX2: 4x24 intrinsics tiles), native (AVX-512: 8x32)
and aarch64 (NEON: 8x12 intrinsics tiles, under qemu). At x86-64-v2 the layer's C takes the
implicit GEMM except on maps under 16 outputs ("tiny"), so that build checks both the #else
branch and the header's portable 8x8 tiles.

One model holds the edges of the items and tiles: RegNetX's 8 channels a group (stride 1 and
2), output channels per group not a multiple of the 8-row tile (3, 12) and above one tile
(20), pixel counts below one tile and between tiles (the zero-padded tail), several row
blocks a group, dilation, asymmetric pads, plane rows sharing their pad column (stride 1 and
row stride 2), a 1x3 kernel, no bias, a batch of 2, a residual add
followed by Clip, an activation applied by o2e_vmath.h (Sigmoid), and NaN / +-Inf in the input
and the residual.
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

LABEL = "Conv: grouped"

# name: (N, C, M, group, HxW, kernel, strides, pads (t, l, b, r), dilations, bias, residual, act)
CASES = {
    "regnet": (1, 32, 32, 4, (14, 14), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, False, "Relu"),
    "regnet_s2": (
        1,
        24,
        24,
        3,
        (15, 15),
        (3, 3),
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        True,
        False,
        "Relu",
    ),
    "m12": (2, 16, 48, 4, (9, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True, "Clip"),
    "m3_dil": (1, 8, 6, 2, (13, 11), (3, 3), (1, 2), (2, 1, 0, 2), (2, 1), True, False, "Sigmoid"),
    "m20_rows": (1, 8, 40, 2, (40, 40), (1, 3), (1, 1), (0, 1, 0, 1), (1, 1), True, False, None),
    "tiny": (1, 12, 12, 3, (4, 5), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True, False, "LeakyRelu"),
    # column stride 1: plane rows share their pad column (conv_grouped.plane_row), here with
    # pads l 2 / r 1 and a dilated row, and under a row stride of 2
    "shared_pad": (1, 16, 16, 2, (9, 12), (3, 3), (1, 1), (1, 2, 1, 1), (1, 2), True, True, "Relu"),
    "s2x1": (1, 16, 16, 2, (10, 9), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), True, False, "Relu"),
}


def _out(n: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def _model(tmp_path: Path, nonfinite: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, (N, C, M, g, (H, W), k, s, p, d, has_b, res, act) in CASES.items():
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
        cg = C // g
        w = (rng.standard_normal((M, cg, *k)) / np.sqrt(cg * k[0] * k[1])).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        attrs = dict(
            kernel_shape=list(k), strides=list(s), pads=list(p), dilations=list(d), group=g
        )
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
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "grouped.onnx"), feeds


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
def test_grouped_matches_onnxruntime(tmp_path: Path, arch: str, nonfinite: bool) -> None:
    path, feeds = _model(tmp_path, nonfinite)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert sum(v for k, v in kernels.items() if k.startswith(LABEL)) == len(CASES), kernels
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    _check(got, ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize(
    "flags",
    [
        ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"],
        ["-march=x86-64-v3", *ASAN, "-DO2E_THREADS=2", "-pthread"],  # AVX2 4x24 tiles
        ["-O2", "-DO2E_THREADS=2", "-pthread"],
    ],
    ids=["native_asan_3threads", "avx2_asan_2threads", "portable_2threads"],
)
def test_grouped_threads_and_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Items split across threads (each its own workspace slot), under ASan / UBSan: the
    im2col stays inside the input planes and its slot, and the results do not change."""
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _model(tmp_path, nonfinite=True)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    _check(got, ort_run(onnx.load(path), feeds))


def test_grouped_leaves_depthwise_and_wide_groups(tmp_path: Path) -> None:
    """Depthwise layers keep their kernels; a group of 128 channels (AlexNet-style, K = 1152)
    is a GEMM's shape and stays on the implicit GEMM; switched off, a RegNet layer goes back
    to it too."""
    rng = np.random.default_rng(3)
    shapes = {"dw": (16, 16, 16), "wide": (256, 256, 2), "regnet": (32, 32, 4)}  # C, M, group
    for name, (C, M, g) in shapes.items():
        w = rng.standard_normal((M, C // g, 3, 3)).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, group=g)
        m = make_model(
            [node], [vi("x", [1, C, 20, 20])], [vi("y", [1, M, 20, 20])], [tensor("w", w)]
        )
        path = save(m, tmp_path / f"{name}.onnx")
        kernels = api.convert(path, "c", tmp_path / name).stats["kernels"]
        taken = any(k.startswith(LABEL) for k in kernels)
        assert taken == (name == "regnet"), (name, kernels)
    off = api.convert(path, "c", tmp_path / "off", options={"kernels": "grouped=off"})
    assert not any(k.startswith(LABEL) for k in off.stats["kernels"]), off.stats["kernels"]
