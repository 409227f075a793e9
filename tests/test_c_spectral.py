"""C backend: DFT, STFT and MelWeightMatrix (ops/spectral.py), and float16 / bfloat16 through
float-only ops (backends/c/widen.py), each a small model verified against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2edge import api

from conftest import make_model, save, tensor, vi

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _verify(tmp_path: Path, nodes, inputs, outputs, inits=(), opset=20, feeds=None, **kw) -> None:  # noqa: ANN001, ANN003
    path = save(make_model(nodes, inputs, outputs, inits, opset=opset), tmp_path / "m.onnx")
    rep = api.verify(path, target="c", inputs=feeds or {}, **kw)
    assert rep.ok, rep.format()


@pytest.mark.parametrize(
    ("inverse", "onesided", "complex_in", "length"),
    [(0, 0, 0, None), (0, 1, 0, None), (0, 0, 1, None), (1, 0, 1, None), (0, 0, 0, 12),
     (0, 1, 0, 5), (1, 1, 1, None)],
)  # fmt: skip
def test_dft_matches_onnxruntime(
    tmp_path: Path, inverse: int, onesided: int, complex_in: int, length: int | None
) -> None:
    """Along axis 1 of [2, 9, 3, c]: forward / inverse, real / complex, one-sided, a dft_length
    that zero-pads (12) or truncates (5), and the inverse real transform (irfft)."""
    n = 9 if not (inverse and onesided) else 5
    c = 2 if complex_in else 1
    x = np.random.default_rng(0).standard_normal((2, n, 3, c)).astype(np.float32)
    full = length or (2 * (n - 1) if inverse and onesided else n)
    k = full // 2 + 1 if onesided and not inverse else full
    inits = [tensor("axis", np.array(1, np.int64))]
    ins = ["x", "", "axis"]
    if length is not None:
        inits.append(tensor("len", np.array(length, np.int64)))
        ins[1] = "len"
    node = helper.make_node("DFT", ins, ["y"], inverse=inverse, onesided=onesided)
    co = 1 if inverse and onesided else 2
    _verify(
        tmp_path, [node], [vi("x", [2, n, 3, c])], [vi("y", [2, k, 3, co])], inits, feeds={"x": x},
        rtol=1e-4, atol=1e-4,
    )  # fmt: skip


@pytest.mark.parametrize("window", [False, True])
def test_stft_matches_onnxruntime(tmp_path: Path, window: bool) -> None:
    x = np.random.default_rng(1).standard_normal((2, 64, 1)).astype(np.float32)
    inits = [tensor("step", np.array(6, np.int64))]
    if window:
        inits.append(tensor("w", np.hanning(16).astype(np.float32)))
        ins = ["x", "step", "w"]
    else:
        inits.append(tensor("len", np.array(16, np.int64)))
        ins = ["x", "step", "", "len"]
    node = helper.make_node("STFT", ins, ["y"], onesided=1)
    _verify(
        tmp_path, [node], [vi("x", [2, 64, 1])], [vi("y", [2, 9, 9, 2])], inits, opset=17,
        feeds={"x": x}, rtol=1e-4, atol=1e-4,
    )  # fmt: skip


def test_mel_weight_matrix_matches_onnxruntime(tmp_path: Path) -> None:
    """The mel filters from run-time edge frequencies (the sizes are constants)."""
    inits = [
        tensor("mels", np.array(8, np.int64)),
        tensor("dft", np.array(64, np.int64)),
        tensor("rate", np.array(16000, np.int64)),
    ]
    node = helper.make_node("MelWeightMatrix", ["mels", "dft", "rate", "lo", "hi"], ["y"])
    feeds = {"lo": np.array(20.0, np.float32), "hi": np.array(7000.0, np.float32)}
    _verify(
        tmp_path, [node], [vi("lo", []), vi("hi", [])], [vi("y", [33, 8])], inits, opset=17,
        feeds=feeds,
    )  # fmt: skip


def test_float16_softmax_and_matmul_widen(tmp_path: Path) -> None:
    """float16 through MatMul and Softmax (computed in float32 between Casts), NaN and Inf
    included: onnxruntime's CPU kernels round each op's result the same way."""
    a = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float16)
    a[0, 0, 0], a[1, 2, 3], a[2, 1, 1] = np.nan, np.inf, -np.inf
    b = np.random.default_rng(3).standard_normal((3, 5, 6)).astype(np.float16)
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Softmax", ["m"], ["y"], axis=-1),
    ]
    _verify(
        tmp_path, nodes, [vi("a", [3, 4, 5], F16), vi("b", [3, 5, 6], F16)],
        [vi("y", [3, 4, 6], F16)], opset=18, feeds={"a": a, "b": b}, rtol=2e-3, atol=1e-3,
    )  # fmt: skip
