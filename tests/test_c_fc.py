"""Fully connected layers at batch 1 (backends/c/ops/matmul.py strategies `fc_skip_zeros`,
`fc_gemv`): the layout that skips zero inputs (o2e_fc_skip_zeros) against onnxruntime - inputs
after a ReLU, all-zero inputs, NaN and infinity propagation, fused activations, threads - and
when the packed GEMV stays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.frontend.loader import load_model
from onnx2edge.runtime import ort_run

from conftest import AVX2, ISA_CFLAGS, NATIVE, THREADED, make_model, save, tensor, vi

SKIP = "Gemm: fully connected, zero inputs skipped"
# layers taken as streamed from DRAM (from 3.5 MB of weights) on small layers: the AVX2 one-pass
# path over whole rows; L2 rather than L1 prefetches at every ISA
AVX2_STREAM = [*AVX2, "-DO2E_FC_STREAM=1"]
NATIVE_STREAM = [*NATIVE, "-DO2E_FC_STREAM=1"]
GEMV = "Gemm: fully connected as packed GEMV"


def _mlp(
    path: Path, K: int, N: int, *, act: str | None = "Relu", weights: np.ndarray | None = None
) -> Path:
    """x -> Relu -> Gemm(transB) [-> act] -> y."""
    rng = np.random.default_rng(5)
    w = (
        weights
        if weights is not None
        else (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu_in"),
        helper.make_node("Gemm", ["h", "w", "b"], ["g" if act else "y"], transB=1, name="fc"),
    ]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["g", "lo", "hi"], ["y"], name="act"))
    elif act:
        nodes.append(helper.make_node(act, ["g"], ["y"], name="act"))
    inits = [
        tensor("w", w),
        tensor("b", rng.standard_normal(N).astype(np.float32)),
        tensor("lo", np.array(-0.5, np.float32)),
        tensor("hi", np.array(0.5, np.float32)),
    ]
    return save(make_model(nodes, [vi("x", [1, K])], [vi("y", [1, N])], inits), path)


def _kernels(path: Path, out: Path) -> dict[str, int]:
    return api.convert(path, "c", out).stats["kernels"]


@pytest.mark.parametrize(
    ("K", "N", "act"),
    [
        (300, 500, "Relu"),
        (784, 1000, None),
        (64, 256, "Clip"),
        (40, 500, "Sigmoid"),
        (100, 700, None),
    ],
)
def test_skip_zeros_matches_onnxruntime(tmp_path: Path, K: int, N: int, act: str | None) -> None:
    path = _mlp(tmp_path / "m.onnx", K, N, act=act)
    assert _kernels(path, tmp_path / "out").get(SKIP) == 1
    for flags in (*ISA_CFLAGS, THREADED, AVX2_STREAM, NATIVE_STREAM):
        rep = api.verify(path, target="c", options={"cflags": flags} if flags else None)
        assert rep.ok, (flags, rep)


@pytest.mark.parametrize(
    "flags",
    [NATIVE, AVX2, AVX2_STREAM, NATIVE_STREAM],
    ids=["native", "avx2", "avx2_stream", "native_stream"],
)
@pytest.mark.parametrize("special", ["all_zero", "nan", "inf"])
def test_skip_zeros_edge_inputs(tmp_path: Path, special: str, flags: list[str]) -> None:
    """No input left, or a NaN / infinity among them: the same as the dense product."""
    path = _mlp(tmp_path / "m.onnx", 96, 512, act=None)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    x = np.random.default_rng(1).standard_normal((1, 96)).astype(np.float32)
    if special == "all_zero":
        x[:] = -1.0  # all zero after the ReLU: y is the bias
    else:
        x[0, 7] = np.nan if special == "nan" else np.inf
    got = api.run(out, {"x": x}, options={"cflags": flags})["y"]
    ref = ort_run(load_model(path), {"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(
        np.isinf(got), np.isinf(ref)
    )


def test_non_finite_weights_keep_the_dense_product(tmp_path: Path) -> None:
    """0·inf is NaN: with an infinite weight, skipping zero inputs would change the result."""
    w = (np.random.default_rng(2).standard_normal((512, 64)) * 0.1).astype(np.float32)
    w[3, 5] = np.inf
    path = _mlp(tmp_path / "m.onnx", 64, 512, act=None, weights=w)
    assert _kernels(path, tmp_path / "out") == {GEMV: 1}


def test_narrow_layers_keep_the_packed_gemv(tmp_path: Path) -> None:
    """10 outputs would pad to a 256-wide block: 25x the weight traffic."""
    path = _mlp(tmp_path / "m.onnx", 500, 10)
    assert _kernels(path, tmp_path / "out") == {GEMV: 1}
    rep = api.verify(path, target="c")
    assert rep.ok, rep
