"""Convolutions as one GEMM whose B operand is packed straight from the input (implicit
im2col, runtime/o2e_gemm.h `o2e_pack_b_conv_`): generated C against onnxruntime on the
geometries that reach it - kernels 1xk / kx1 / 5x5 / 11x11, strides, dilations, asymmetric
pads, groups, K longer than one K slice, output rows that straddle column panels - in the
portable build, the AVX-512/AVX2 build and a threaded one."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from onnx2edge import api

from conftest import ISA_CFLAGS, THREADED, assert_sanitized_run_matches_ort
from conv_models import conv_model

IMPLICIT = "Conv: implicit GEMM (im2col fused into B packing)"


# Stride-1 convolutions with few outputs or many taps have direct kernels (ops/conv_*.py):
# switched off here (convert --kernels), so the layers reach the GEMM paths
OFF = {"kernels": "direct=off,lanes=off"}


def _opts(flags: list[str] | None = None) -> dict:
    return {**OFF, "cflags": flags} if flags else OFF


# the layer under test; seed 7 as before the builder was shared (tests/conv_models.py)
_conv_model = functools.partial(conv_model, seed=7)


CASES = {
    # Inception-v3's 5x5 branch: K = 1200 spans several K slices
    "5x5_pad2_long_k": {
        "C": 48,
        "M": 64,
        "H": 35,
        "W": 35,
        "k": (5, 5),
        "pads": (2, 2, 2, 2),
        "act": "Relu",
    },
    "1x7_rows": {"C": 32, "M": 40, "H": 17, "W": 17, "k": (1, 7), "pads": (0, 3, 0, 3)},
    "7x1_cols": {
        "C": 32,
        "M": 40,
        "H": 17,
        "W": 17,
        "k": (7, 1),
        "pads": (3, 0, 3, 0),
        "act": "Relu",
    },
    # AlexNet conv1 in small: stride 4, every input column read through the strided copy
    "11x11_stride4": {
        "C": 3,
        "M": 16,
        "H": 59,
        "W": 63,
        "k": (11, 11),
        "strides": (4, 4),
        "pads": (2, 2, 2, 2),
    },
    "3x3_stride2_asym": {
        "C": 8,
        "M": 24,
        "H": 15,
        "W": 13,
        "k": (3, 3),
        "strides": (2, 2),
        "pads": (0, 1, 1, 0),
    },
    "3x3_dilation2": {
        "C": 6,
        "M": 10,
        "H": 12,
        "W": 19,
        "k": (3, 3),
        "dilations": (2, 2),
        "pads": (2, 2, 2, 2),
    },
    "pads_wider_than_kernel_reach": {
        "C": 4,
        "M": 9,
        "H": 6,
        "W": 7,
        "k": (2, 3),
        "pads": (3, 4, 2, 5),
    },
    "grouped_stride2": {
        "C": 16,
        "M": 24,
        "H": 14,
        "W": 18,
        "k": (3, 3),
        "strides": (2, 1),
        "group": 4,
        "pads": (1, 1, 1, 1),
    },
    "residual_relu_no_bias_batch2": {
        "C": 12,
        "M": 20,
        "H": 9,
        "W": 23,
        "k": (5, 3),
        "pads": (2, 1, 2, 1),
        "bias": False,
        "act": "Relu",
        "residual": True,
        "batch": 2,
    },
    "16_columns_exactly": {
        "C": 5,
        "M": 7,
        "H": 6,
        "W": 6,
        "k": (3, 3),
        "strides": (1, 1),
        "pads": (0, 0, 0, 0),
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_implicit_gemm_matches_onnxruntime(tmp_path: Path, case: str) -> None:
    path = _conv_model(tmp_path / "m.onnx", **CASES[case])
    assert api.convert(path, "c", tmp_path / "out", options=OFF).stats["kernels"].get(IMPLICIT) == 1
    for flags in ISA_CFLAGS:
        rep = api.verify(path, target="c", options=_opts(flags))
        assert rep.ok, (flags, rep)


@pytest.mark.parametrize(
    "case", ["5x5_pad2_long_k", "11x11_stride4", "residual_relu_no_bias_batch2"]
)
def test_implicit_gemm_threaded(tmp_path: Path, case: str) -> None:
    path = _conv_model(tmp_path / "m.onnx", **CASES[case])
    rep = api.verify(path, target="c", options=_opts(THREADED))
    assert rep.ok, rep


def test_tiny_outputs_keep_the_column_matrix(tmp_path: Path) -> None:
    """Under 16 output positions the engine's small-N paths read B in place: im2col stays."""
    path = _conv_model(tmp_path / "m.onnx", C=8, M=16, H=5, W=5, k=(3, 3))  # 3x3 = 9 outputs
    kernels = api.convert(path, "c", tmp_path / "out", options=OFF).stats["kernels"]
    assert kernels == {"Conv: im2col + GEMM": 1}
    for flags in ISA_CFLAGS:
        rep = api.verify(path, target="c", options=_opts(flags))
        assert rep.ok, (flags, rep)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc with sanitizer runtimes")
@pytest.mark.parametrize("case", ["pads_wider_than_kernel_reach", "11x11_stride4", "3x3_dilation2"])
def test_implicit_gemm_sanitizers_clean(tmp_path: Path, case: str) -> None:
    """The packing reads only inside the input, also on the AVX-512 masked-move path."""
    assert_sanitized_run_matches_ort(
        _conv_model(tmp_path / "m.onnx", **CASES[case]), tmp_path / "out", options=OFF
    )


@pytest.mark.parametrize("strides", [(2, 2), (1, 3)])
def test_strided_1x1_subsamples_then_multiplies(tmp_path: Path, strides: tuple[int, int]) -> None:
    """ResNet's projection shortcuts: one pixel in sh*sw is read, by a plain subsampling copy."""
    path = _conv_model(
        tmp_path / "m.onnx",
        C=40,
        M=24,
        H=15,
        W=14,
        k=(1, 1),
        strides=strides,
        residual=True,
        act="Relu",
    )
    kernels = api.convert(path, "c", tmp_path / "out", options=OFF).stats["kernels"]
    assert kernels.get("Conv: strided 1x1: subsample + GEMM") == 1, kernels
    for flags in (*ISA_CFLAGS, THREADED):
        rep = api.verify(path, target="c", options=_opts(flags))
        assert rep.ok, (flags, rep)
