"""The separable MaxPool / AveragePool kernels (kernels/pool/pool_rows.py) at every ISA: x86-64-v2 (portable C),
x86-64-v3 (AVX2), native (AVX-512 here) and aarch64 (NEON, under qemu).

One model holds every geometry (strides 1 and 2 and 3 for rows, pads, ceil_mode, auto_pad,
odd sizes, maps narrower and wider than a vector block, rows whose last block needs a masked
or padded read), AveragePool with count_include_pad 0 and 1. Finite inputs are compared with
onnxruntime (AveragePool within float rounding: rows are summed first). NaN / +-Inf inputs give
AveragePool's NaN / Inf pattern of onnxruntime; for MaxPool they are compared with a numpy reference of the documented rule (a NaN tap is ignored, as C's fmaxf does; a
window is NaN only when all its taps inside the input are NaN), since onnxruntime's own MaxPool
has no consistent NaN rule and returns -FLT_MAX for some all -inf edge windows (see the
module docstring of pool_rows.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.kernels.pool import pool_rows
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, build_and_run, make_model, save, vi

CASES = [  # (input shape, attributes)
    ((1, 3, 111, 111), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((2, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 54, 54), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 28, 28), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 3, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 2, 40, 41), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 35, 37), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 2, 24, 70), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 9, 33), dict(kernel_shape=[2, 3], strides=[3, 1], pads=[1, 0, 0, 2])),
    ((1, 2, 17, 70), dict(kernel_shape=[5, 4], strides=[1, 2], pads=[2, 3, 1, 1], ceil_mode=1)),
    ((1, 2, 5, 5), dict(kernel_shape=[1, 1], strides=[2, 2])),
    ((1, 1, 1, 1), dict(kernel_shape=[1, 1])),
    ((1, 2, 6, 19), dict(kernel_shape=[3, 3], strides=[1, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 6, 19), dict(kernel_shape=[3, 7], strides=[2, 1], auto_pad="SAME_LOWER")),
]


def _avg(a: dict, inc: int) -> dict:
    return a | {"count_include_pad": inc}


def _model(tmp: Path) -> Path:
    """MaxPool y<k>, AveragePool a<k> (count_include_pad 0) and p<k> (1) of every case."""
    nodes, outs = [], []
    for k, (_, a) in enumerate(CASES):
        nodes.append(helper.make_node("MaxPool", [f"x{k}"], [f"y{k}"], **a))
        nodes.append(helper.make_node("AveragePool", [f"x{k}"], [f"a{k}"], **_avg(a, 0)))
        nodes.append(helper.make_node("AveragePool", [f"x{k}"], [f"p{k}"], **_avg(a, 1)))
        outs += [f"y{k}", f"a{k}", f"p{k}"]
    inputs = [vi(f"x{k}", list(s)) for k, (s, _) in enumerate(CASES)]
    m = make_model(nodes, inputs, [vi(o, None) for o in outs], opset=19)
    return save(onnx.shape_inference.infer_shapes(m), tmp / "maxpools.onnx")


def _begin_pads(a: dict, shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Top and left pads of a case (explicit, or auto_pad's SAME split)."""
    if "auto_pad" not in a:
        return list(a.get("pads", [0, 0, 0, 0])[:2])
    pads = []
    for d in range(2):
        s, k = a.get("strides", [1, 1])[d], a["kernel_shape"][d]
        total = max((out[2 + d] - 1) * s + k - shape[2 + d], 0)
        pads.append(total // 2 if a["auto_pad"] == "SAME_UPPER" else total - total // 2)
    return pads


def _fmax_pool(x: np.ndarray, a: dict, out: tuple[int, ...]) -> np.ndarray:
    """MaxPool by the kernel's rule: taps outside the input and NaN taps are ignored."""
    (kh, kw), (sh, sw) = a["kernel_shape"], a.get("strides", [1, 1])
    pt, pl = _begin_pads(a, x.shape, out)
    y = np.full(out, np.nan, np.float32)
    for oh in range(out[2]):
        for ow in range(out[3]):
            r0, c0 = oh * sh - pt, ow * sw - pl
            win = x[:, :, max(r0, 0) : r0 + kh, max(c0, 0) : c0 + kw].reshape(*out[:2], -1)
            ok = ~np.isnan(win)
            best = np.where(ok, win, -np.inf).max(axis=2)
            y[:, :, oh, ow] = np.where(ok.any(axis=2), best, np.nan)
    return y


def _inputs(mode: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {}
    for k, (shape, _) in enumerate(CASES):
        x = rng.standard_normal(shape).astype(np.float32)
        f = x.reshape(-1)
        if mode == "special":  # scattered NaN, +inf, -inf
            for v, frac in ((np.nan, 7), (np.inf, 11), (-np.inf, 9)):
                f[rng.choice(f.size, max(1, f.size // frac), replace=False)] = v
        elif mode == "mostly_nan":  # windows of NaN only, and -inf only, next to numbers
            f[:] = np.nan
            f[::5] = -np.inf
            f[::13] = rng.standard_normal(f[::13].size)
        feeds[f"x{k}"] = x
    return feeds


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("pool_rows")
    path = _model(tmp)
    with pytest.MonkeyPatch.context() as mp:  # every kernel with its prefetches (big inputs)
        mp.setattr(pool_rows, "PREFETCH_MIN_BYTES", 0)
        res = api.convert(path, "c", tmp / "out")
    # the kernels' wrappers ask runtime/o2e_pool_rows.h for its prefetching variant (pf = 1)
    assert "_pf(void *arg, int i0, int i1)" in (tmp / "out" / "model.c").read_text()
    io = json.loads((tmp / "out" / "onnx2edge.json").read_text())
    shapes = {o["name"]: o["shape"] for o in io["outputs"]}
    # narrow AveragePools (OW <= 8, kw <= 3) stay on pool2d.py's planes, by design
    narrow = sum(
        2 for k, (_, a) in enumerate(CASES) if shapes[f"y{k}"][3] <= 8 and a["kernel_shape"][1] <= 3
    )
    want = {
        "MaxPool: separable rows": len(CASES),
        "AveragePool: separable rows": 2 * len(CASES) - narrow,
        "AveragePool: 2-D phase planes": narrow,
    }
    assert res.stats["kernels"] == want, res.stats["kernels"]
    return path, tmp / "out"


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_maxpool_rows_every_isa(converted: tuple[Path, Path], arch: str) -> None:
    path, out = converted
    model = onnx.load(path)
    finite = _inputs("finite")
    ref = ort_run(model, finite)
    got = build_and_run(out, arch, finite)
    for k in range(len(CASES)):
        assert np.array_equal(got[f"y{k}"], ref[f"y{k}"]), (arch, CASES[k])
        for o in (f"a{k}", f"p{k}"):  # row sums then column sums: another rounding order
            np.testing.assert_allclose(got[o], ref[o], rtol=1e-5, atol=1e-6, err_msg=f"{arch} {o}")
    for mode in ("special", "mostly_nan"):
        x = _inputs(mode)
        got = build_and_run(out, arch, x)
        for k, (_, a) in enumerate(CASES):
            want = _fmax_pool(x[f"x{k}"], a, ref[f"y{k}"].shape)
            assert np.array_equal(got[f"y{k}"], want, equal_nan=True), (arch, mode, CASES[k])
        r = ort_run(model, x)  # AveragePool: NaN / +-inf where onnxruntime has them
        for o in (f"{p}{k}" for p in "ap" for k in range(len(CASES))):
            assert np.array_equal(np.isnan(got[o]), np.isnan(r[o])), (arch, mode, o)
            assert np.array_equal(np.isinf(got[o]), np.isinf(r[o])), (arch, mode, o)
            assert np.array_equal(
                np.signbit(got[o][np.isinf(r[o])]), np.signbit(r[o][np.isinf(r[o])])
            )
