"""Gemm / MatMul kernels as a declared list of strategies (backends/c/ops/matmul.py
STRATEGIES, issue 10 item 4, as for Conv): the first one that does not refuse a node writes
it, `--kernels NAME=off` takes one out of the running (the next one then takes the node) and
the manifest records each node's strategy. Every strategy, and every fall-through, is checked
against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.backend import parse_kernels
from onnx2edge.backends.c.kernels.gemm.matmul_spec import AUTO, OFF
from onnx2edge.backends.c.ops import matmul as matmul_ops
from onnx2edge.errors import Onnx2EdgeError

from conftest import make_model, save, tensor, vi


def _w(rng: np.random.Generator, *shape: int, density: float = 1.0) -> np.ndarray:
    w = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    w[rng.random(w.shape) >= density] = 0
    return w


def _model(path: Path, case: str) -> Path:
    """One Gemm / MatMul node named "mm" (followed by a Relu the fusion pass moves into it)."""
    rng = np.random.default_rng(11)
    n = helper.make_node
    if case == "sparse":  # pruned fully connected layer at batch 1
        a, w, out = [1, 512], _w(rng, 512, 512, density=0.03), [1, 512]
        nodes = [n("Gemm", ["a", "w", "c"], ["t"], name="mm")]
        inits = [tensor("w", w), tensor("c", _w(rng, 512))]
    elif case == "fc_skip_zeros":  # 512 outputs: two whole blocks of 256
        a, w, out = [1, 64], _w(rng, 64, 512), [1, 512]
        nodes = [n("MatMul", ["a", "w"], ["t"], name="mm")]
        inits = [tensor("w", w)]
    elif case == "fc_gemv":  # 100 outputs: blocks of 256 would be mostly padding
        a, w, out = [1, 64], _w(rng, 100, 64), [1, 100]
        nodes = [n("Gemm", ["a", "w", "c"], ["t"], name="mm", transB=1, alpha=0.5, beta=2.0)]
        inits = [tensor("w", w), tensor("c", _w(rng, 100))]
    elif case == "gemm":
        a, w, out = [4, 64], _w(rng, 64, 40), [4, 40]
        nodes = [n("Gemm", ["a", "w", "c"], ["t"], name="mm")]
        inits = [tensor("w", w), tensor("c", _w(rng, 40))]
    elif case == "folded_gemm":  # a batch of rows times one 2-D B
        a, w, out = [2, 3, 64], _w(rng, 64, 40), [2, 3, 40]
        nodes = [n("MatMul", ["a", "w"], ["t"], name="mm")]
        inits = [tensor("w", w)]
    else:  # batched_gemm: B with a batch of its own
        a, w, out = [2, 3, 8], _w(rng, 2, 8, 5), [2, 3, 5]
        nodes = [n("MatMul", ["a", "w"], ["t"], name="mm")]
        inits = [tensor("w", w)]
    nodes.append(n("Relu", ["t"], ["y"], name="relu"))
    return save(make_model(nodes, [vi("a", a)], [vi("y", out)], inits, opset=17), path)


# strategy -> the one that takes the node when it is switched off (None: a fallback)
CASES = {
    "sparse": "fc_skip_zeros",
    "fc_skip_zeros": "fc_gemv",
    "fc_gemv": "gemm",
    "gemm": None,
    "folded_gemm": "batched_gemm",
    "batched_gemm": None,
}


def test_the_list_is_declared_once_and_ends_with_fallbacks() -> None:
    names = [s.name for s in matmul_ops.STRATEGIES]
    assert len(names) == len(set(names)) and set(CASES) == set(names)
    for s in matmul_ops.STRATEGIES:
        assert s.settings[0] == AUTO, s.name
        assert (OFF in s.settings) == (CASES[s.name] is not None), s.name
    for bad in ("gemm=off", "batched_gemm=off", "fc_gemv=2"):
        with pytest.raises(Onnx2EdgeError):
            parse_kernels(bad)
    assert parse_kernels("fc_gemv=off,sparse=force") == {"fc_gemv": "off", "sparse": "force"}


@pytest.mark.parametrize("name", list(CASES))
def test_each_strategy_and_its_fall_through(tmp_path: Path, name: str) -> None:
    """The node goes to `name` by default, to the next strategy with `name=off`; both
    outputs match onnxruntime and the manifest records the choice and the option."""
    path = _model(tmp_path / "m.onnx", name)
    runs = [("", name)]
    if CASES[name] is not None:
        runs.append((f"{name}=off", CASES[name]))
    for i, (kernels, want) in enumerate(runs):
        opts = {"kernels": kernels} if kernels else {}
        res = api.convert(path, "c", tmp_path / f"out{i}", options=opts)
        assert res.stats["layer_kernels"] == {"mm": want}, (kernels, res.stats["layer_kernels"])
        rep = api.verify(path, target="c", options=opts)
        assert rep.ok, (kernels, rep)
