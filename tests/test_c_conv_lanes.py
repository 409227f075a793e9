"""Direct convolution with output channels in the vector lanes (backends/c/kernels/conv/conv_lanes.py):
1xk / kx1 / kxk layers against onnxruntime - widths that leave partial pixel tiles, channel counts
that leave a partial 32-channel block, pads, bias or none, fused activations, batch 2 - in the
portable, native (AVX-512), AVX2 (x86-64-v3) and threaded builds, and under ASan/UBSan."""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ISA_CFLAGS, THREADED, assert_sanitized_run_matches_ort
from conv_models import conv_model

LANES = "Conv: direct conv (output channels in lanes)"


# the layer under test, with a Relu unless a case says otherwise (tests/conv_models.py)
_model = functools.partial(conv_model, seed=11, act="Relu")


CASES = {
    "1x7_inception": {"C": 96, "M": 80, "H": 17, "W": 17, "k": (1, 7), "pads": (0, 3, 0, 3)},
    "7x1_inception": {
        "C": 96,
        "M": 64,
        "H": 17,
        "W": 17,
        "k": (7, 1),
        "pads": (3, 0, 3, 0),
        "act": None,
    },
    "1x3_wide_asym_no_bias": {
        "C": 200,
        "M": 70,
        "H": 5,
        "W": 29,
        "k": (1, 3),
        "pads": (1, 0, 0, 2),
        "bias": False,
        "act": "Sigmoid",
    },
    "5x1_batch2": {
        "C": 128,
        "M": 96,
        "H": 12,
        "W": 14,
        "k": (5, 1),
        "pads": (0, 0, 0, 0),
        "batch": 2,
    },
    # AlexNet's conv2 / conv4: two groups, each its own layer
    "grouped_5x5_batch2": {
        "C": 48,
        "M": 160,
        "H": 13,
        "W": 15,
        "k": (5, 5),
        "pads": (2, 2, 2, 2),
        "group": 2,
        "batch": 2,
    },
    # ResNet's downsampling 3x3 / 2 and a mixed (2, 1) stride: taps read phase planes
    "3x3_stride2": {
        "C": 64,
        "M": 96,
        "H": 29,
        "W": 30,
        "k": (3, 3),
        "pads": (1, 1, 1, 1),
        "strides": (2, 2),
    },
    "3x5_stride2x1_asym": {
        "C": 40,
        "M": 64,
        "H": 17,
        "W": 16,
        "k": (3, 5),
        "pads": (0, 2, 1, 1),
        "strides": (2, 1),
        "act": None,
    },
    "5x5_pad2": {
        "C": 24,
        "M": 64,
        "H": 13,
        "W": 27,
        "k": (5, 5),
        "pads": (2, 2, 2, 2),
        "act": "LeakyRelu",
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lanes_conv_matches_onnxruntime(tmp_path: Path, case: str) -> None:
    path = _model(tmp_path / "m.onnx", **CASES[case])
    assert api.convert(path, "c", tmp_path / "out").stats["kernels"].get(LANES) == 1
    for flags in (*ISA_CFLAGS, THREADED):
        rep = api.verify(path, target="c", options={"cflags": flags} if flags else None)
        assert rep.ok, (flags, rep)


@pytest.mark.parametrize(
    "shape",
    [
        {
            "C": 16,
            "M": 64,
            "H": 9,
            "W": 17,
            "k": (1, 7),
            "pads": (0, 3, 0, 3),
        },  # 112 taps per output
        {
            "C": 128,
            "M": 64,
            "H": 9,
            "W": 8,
            "k": (1, 7),
            "pads": (0, 3, 0, 3),
        },  # rows under one tile
    ],
)
def test_small_layers_keep_the_gemm(tmp_path: Path, shape: dict) -> None:
    path = _model(tmp_path / "m.onnx", **shape)
    assert LANES not in api.convert(path, "c", tmp_path / "out").stats["kernels"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc with sanitizer runtimes")
def test_lanes_conv_sanitizers_clean(tmp_path: Path) -> None:
    assert_sanitized_run_matches_ort(
        _model(tmp_path / "m.onnx", **CASES["1x3_wide_asym_no_bias"]), tmp_path / "out"
    )


# k x 1 filters (stride 1, >= 12 output rows) run as 1 x k on the transposed map: width pads,
# a partial 32-lane block, groups, batch 2, with the next block's weights prefetched; NaN / +-Inf
# in the input, every ISA.
TRANSPOSED = {
    "7x1_wpad_m70": {"C": 80, "M": 70, "H": 13, "W": 11, "k": (7, 1), "pads": (2, 1, 4, 2)},
    "3x1_grouped_batch2": {
        "C": 336,
        "M": 128,
        "H": 12,
        "W": 12,
        "k": (3, 1),
        "pads": (1, 0, 1, 0),
        "group": 2,
        "batch": 2,
        "act": "LeakyRelu",
    },
}


def _nonfinite_feeds(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    feeds = {}
    for i in onnx.load(path).graph.input:
        x = rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
        x = x.astype(np.float32)
        x.flat[[5, x.size // 3, x.size - 2]] = [np.nan, np.inf, -np.inf]
        feeds[i.name] = x
    return feeds


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", sorted(TRANSPOSED))
def test_kx1_transposed_matches_onnxruntime(tmp_path: Path, case: str, arch: str) -> None:
    path = _model(tmp_path / "m.onnx", **TRANSPOSED[case])
    out = tmp_path / "out"
    assert api.convert(path, "c", out).stats["kernels"].get(LANES) == 1
    code = (out / "model.c").read_text()
    assert "o2e_lanes_pad_transposed" in code
    # the next block's weights prefetched (small working set): o2e_lanes_geom's prefetch flag
    geom = re.search(r"o2e_lanes_rows\(\(o2e_lanes_geom\)\{(.*?)\}", code)
    assert geom is not None
    assert re.sub(r"O2E_LANES_NT\(\d+, \d+\)", "NT", geom.group(1)).split(", ")[7] == "1"
    feeds = _nonfinite_feeds(path)
    got = api.run(out, feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    for k in ref:  # NaN where onnxruntime has NaN, the same infinities, close elsewhere
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(ref[k]), err_msg=k)
        inf = np.isinf(ref[k])
        np.testing.assert_array_equal(got[k][inf], ref[k][inf], err_msg=k)
        fin = np.isfinite(ref[k])
        r = compare(k, np.where(fin, got[k], 0), np.where(fin, ref[k], 0), 1e-4, 1e-5)
        assert r.ok, (r.max_abs, r.max_rel)
        assert np.isnan(ref[k]).any()  # the non-finite inputs reached the output


def test_short_kx1_keeps_rows(tmp_path: Path) -> None:
    """5x1 with 8 output rows: transposed rows would be narrower than a tile, so it is not."""
    path = _model(tmp_path / "m.onnx", **CASES["5x1_batch2"])
    out = tmp_path / "out"
    assert api.convert(path, "c", out).stats["kernels"].get(LANES) == 1
    assert "o2e_lanes_pad_transposed" not in (out / "model.c").read_text()
