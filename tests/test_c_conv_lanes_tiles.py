"""The lanes convolution's AVX-512 tiles of <= 10 pixels (backends/c/kernels/conv/conv_lanes.py PX512):
4 tiles on Inception-v3's 35-wide 5x5 layers where there were 3 of <= 12, and widths that
leave other tile counts and tails; checked against
onnxruntime with NaN / +-Inf in the input at x86-64-v2, x86-64-v3, native and aarch64 (qemu)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS
from conv_models import conv_model

LANES = "Conv: direct conv (output channels in lanes)"

CASES = {
    # Inception-v3 Mixed_5b.branch5x5_2 at a reduced height: 35 = 9 + 9 + 9 + 8
    "5x5_w35": {"C": 48, "M": 64, "H": 5, "W": 35, "k": (5, 5), "pads": (2, 2, 2, 2)},
    # 21 = 7 + 7 + 7 (2 tiles of <= 12 before), 72 output channels: a partial 32-lane block
    "5x5_w21_m72": {"C": 24, "M": 72, "H": 6, "W": 21, "k": (5, 5), "pads": (2, 2, 2, 2)},
    # 13 = 7 + 6; then a 3x3 / 2 on a 13-wide output
    "5x5_w13_leaky": {
        "C": 32,
        "M": 64,
        "H": 6,
        "W": 13,
        "k": (5, 5),
        "pads": (2, 2, 2, 2),
        "act": "LeakyRelu",
    },
    "3x3_s2_w27": {
        "C": 64,
        "M": 64,
        "H": 15,
        "W": 27,
        "k": (3, 3),
        "pads": (0, 0, 0, 0),
        "strides": (2, 2),
    },
}


def _feeds(path: Path, seed: int) -> dict[str, np.ndarray]:
    m = onnx.load(path)
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape).astype(np.float32)
        x.flat[[3, x.size // 2, x.size - 1]] = [np.nan, np.inf, -np.inf]
        feeds[i.name] = x
    return feeds


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_lanes_tiles_match_onnxruntime(tmp_path: Path, case: str, arch: str) -> None:
    path = conv_model(tmp_path / "m.onnx", seed=5, **{"act": "Relu", **CASES[case]})
    assert api.convert(path, "c", tmp_path / "out").stats["kernels"].get(LANES) == 1
    feeds = _feeds(path, 1)
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    for k in ref:  # NaN where onnxruntime has NaN, the same infinities, close elsewhere
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(ref[k]), err_msg=k)
        inf = np.isinf(ref[k])
        np.testing.assert_array_equal(got[k][inf], ref[k][inf], err_msg=k)
        fin = np.isfinite(ref[k])
        r = compare(k, np.where(fin, got[k], 0), np.where(fin, ref[k], 0), 1e-4, 1e-5)
        assert r.ok, (r.max_abs, r.max_rel)
        assert np.isnan(ref[k]).any()  # the non-finite inputs reached the output
