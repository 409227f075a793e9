"""Winograd F(2x2) / F(4x4) 3x3 convolutions (kernels/conv/winograd.py) at every ISA the C backend emits:
x86-64-v2 (SSE), x86-64-v3 (AVX2), native (AVX-512) and aarch64 (NEON, under qemu), against
onnxruntime, finite and with NaN / +-Inf in the input and the residual, position by position
(issue 29 item 8: a tile with a non-finite input is computed directly; it used to spread NaN
over the whole tile).

One model holds the edges the kernel choice (MIN_TILES_F4) and the transforms meet: odd maps
with edge tiles in both directions, no padding, asymmetric pads, few input channels (SqueezeNet's
squeeze outputs: 16), 13x13 (F(2x2) since 16 F(4x4) tiles are too few) and 17x19 (F(4x4)), a
residual followed by Clip, LeakyRelu, Relu, no bias, and an activation the output transform does
not apply (Sigmoid: a separate pass).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, make_model, save, tensor, vi
from conv_models import act_inits, act_node

# name: (C, M, H, W, pads (t, l, b, r), bias, residual, act, tile size expected)
CASES = {
    "f4_odd_relu": (16, 40, 17, 19, (1, 1, 1, 1), True, False, "Relu", 4),
    "f4_res_clip": (24, 32, 21, 18, (1, 1, 1, 1), True, True, "Clip", 4),
    "f4_valid_sigmoid": (8, 17, 23, 22, (0, 0, 0, 0), False, False, "Sigmoid", 4),
    "f2_13_leaky": (64, 48, 13, 13, (1, 1, 1, 1), True, False, "LeakyRelu", 2),
    "f2_asym_res": (32, 24, 12, 15, (2, 0, 1, 2), False, True, None, 2),
}


def _model(tmp_path: Path, nonfinite: bool) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, (C, M, H, W, p, has_b, res, act, _) in CASES.items():
        OH, OW = H + p[0] + p[2] - 2, W + p[1] + p[3] - 2
        x = rng.standard_normal((1, C, H, W)).astype(np.float32)
        if nonfinite:
            x[0, 1, 2, 3], x[0, C - 1, H - 1, W - 1], x[0, C // 2, 1, W // 2] = (
                np.nan,
                np.inf,
                -np.inf,
            )
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [1, C, H, W]))
        w = (rng.standard_normal((M, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        nodes.append(
            helper.make_node("Conv", conv_in, [cur], kernel_shape=[3, 3], pads=list(p), name=name)
        )
        if res:
            r = rng.standard_normal((1, M, OH, OW)).astype(np.float32) * 3
            if nonfinite:
                r[0, 0, 0, 0], r[0, M - 1, OH - 1, OW - 1] = np.nan, -np.inf
            feeds[f"r{name}"] = r
            ins.append(vi(f"r{name}", [1, M, OH, OW]))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(act_node(act, cur, f"y{name}"))
        outs.append(vi(f"y{name}", [1, M, OH, OW]))
    inits += act_inits()
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "wino.onnx"), feeds


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    for name in CASES:
        k = f"y{name}"
        # NaN exactly where onnxruntime has NaN, the same infinities, close elsewhere
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(ref[k]), err_msg=k)
        inf = np.isinf(ref[k])
        np.testing.assert_array_equal(got[k][inf], ref[k][inf], err_msg=k)
        ok = np.isfinite(ref[k])
        r = compare(k, np.where(ok, got[k], 0), np.where(ok, ref[k], 0), 1e-4, 1e-5)
        assert r.ok, (r.name, r.max_abs, r.max_rel)


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "nan_inf"])
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_winograd_matches_onnxruntime(tmp_path: Path, arch: str, nonfinite: bool) -> None:
    path, feeds = _model(tmp_path, nonfinite)
    stats = api.convert(path, "c", tmp_path / "out").stats
    want: dict[str, int] = {}
    for *_, m in CASES.values():
        label = f"Conv: winograd F({m}x{m},3x3)"
        want[label] = want.get(label, 0) + 1
    got_kernels = {k: v for k, v in stats["kernels"].items() if k.startswith("Conv: winograd")}
    assert got_kernels == want, stats["kernels"]
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    _check(got, ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_one_inf_stays_in_its_window(tmp_path: Path, arch: str, m: int) -> None:
    """Issue 29 item 8: one +Inf in the input made NaN of all m x m outputs of its Winograd tile;
    onnxruntime's direct convolution gives +-Inf in the outputs whose 3x3 window reads it, NaN
    where that window's weight is 0 (0 * Inf; a pruned weight), and finite values in the rest of
    the tile. Batch 2 (whole blocks per thread: the other variant of emit), a Relu (Inf stays,
    -Inf -> 0), the Inf on an edge tile and one NaN inside a tile."""
    C, M, H, W = 16, 24, 18, 18
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((M, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
    w[:5, 3, 1, 2] = 0.0  # outputs 0..4 multiply the Inf (channel 3) by 0 at one offset
    x = rng.standard_normal((2, C, H, W)).astype(np.float32)
    x[0, 3, 5, 6] = np.inf
    x[1, 3, 0, W - 1] = np.inf
    x[1, 9, 10, 9] = np.nan
    b = rng.standard_normal(M).astype(np.float32)
    model = make_model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [vi("x", [2, C, H, W])],
        [vi("y", [2, M, H, W])],
        [tensor("w", w), tensor("b", b)],
    )
    path = save(model, tmp_path / "m.onnx")
    out = tmp_path / "out"
    stats = api.convert(path, "c", out, options={"kernels": {"winograd": str(m)}}).stats
    assert stats["kernels"].get(f"Conv: winograd F({m}x{m},3x3)") == 1, stats["kernels"]
    assert "o2e_winograd_blocks_" in (out / "model.c").read_text()
    got = api.run(out, {"x": x}, options={"arch": arch})["y"]
    ref = ort_run(onnx.load(path), {"x": x})["y"]
    assert np.isposinf(ref).any() and np.isnan(ref).any()
    # the tile holding the Inf also has finite outputs in onnxruntime (those not reading it)
    assert np.isfinite(ref[0, :, 4:8, 4:8]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-4, atol=1e-5)
