"""C backend: the random ops (RandomUniform/Normal(Like), Bernoulli, Multinomial, training
Dropout). No reference can match their values, so each is judged by what the numbers must
satisfy: range, mean and spread on large tensors, within a few standard errors; and the C is
deterministic (same seed, same numbers; another seed, other numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run

from conftest import make_model, save, tensor, vi

N = 20000  # a standard error of 1/sqrt(12 N) = 0.002 for a uniform mean


def _run(tmp_path: Path, nodes, inputs, outputs, feeds, inits=(), opset: int = 22) -> dict:  # noqa: ANN001
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = save(make_model(nodes, inputs, outputs, inits, opset=opset), tmp_path / "m.onnx")
    api.convert(path, "c", tmp_path / "out")
    return build_and_run(tmp_path / "out", "native", feeds)


def _uniform(tmp_path: Path, seed: float | None) -> np.ndarray:
    kw = {} if seed is None else {"seed": seed}
    node = helper.make_node("RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0, **kw)
    return _run(tmp_path, [node], [vi("x", [N])], [vi("y", [N])], {"x": np.zeros(N, np.float32)})[
        "y"
    ]


def test_random_uniform_range_mean_spread(tmp_path: Path) -> None:
    y = _uniform(tmp_path, 3.0).astype(np.float64)
    assert y.min() >= -2.0 and y.max() < 3.0
    assert abs(y.mean() - 0.5) < 5 * 5 / np.sqrt(12 * N)
    assert abs(y.var() - 25 / 12) < 0.1
    counts = np.histogram(y, bins=10, range=(-2, 3))[0]
    assert np.all(np.abs(counts - N / 10) < 5 * np.sqrt(N / 10))  # flat


def test_random_is_deterministic_given_the_seed(tmp_path: Path) -> None:
    a = _uniform(tmp_path / "a", 1.0)
    b = _uniform(tmp_path / "b", 1.0)
    c = _uniform(tmp_path / "c", 2.0)
    np.testing.assert_array_equal(a, b)
    assert np.mean(a == c) < 0.01


@pytest.mark.parametrize("like", [True, False])
def test_random_normal_mean_and_scale(tmp_path: Path, like: bool) -> None:
    if like:
        node = helper.make_node("RandomNormalLike", ["x"], ["y"], mean=1.5, scale=2.0, seed=7.0)
        ins, feeds = [vi("x", [N], TensorProto.DOUBLE)], {"x": np.zeros(N)}
        out = vi("y", [N], TensorProto.DOUBLE)
    else:
        node = helper.make_node("RandomNormal", [], ["y"], mean=1.5, scale=2.0, shape=[N])
        ins, feeds, out = [], {}, vi("y", [N])
    y = _run(tmp_path, [node], ins, [out], feeds)["y"].astype(np.float64)
    assert abs(y.mean() - 1.5) < 5 * 2 / np.sqrt(N)
    assert abs(y.std() - 2.0) < 0.05
    assert abs(np.mean(np.abs(y - 1.5) < 2.0) - 0.6827) < 0.02  # one sigma


def test_bernoulli_frequency_follows_p(tmp_path: Path) -> None:
    p = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), N // 5)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=5.0, dtype=TensorProto.DOUBLE)
    y = _run(tmp_path, [node], [vi("p", [N])], [vi("y", [N], TensorProto.DOUBLE)], {"p": p})["y"]
    assert set(np.unique(y)) <= {0.0, 1.0}
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        f = y[p == np.float32(q)].mean()
        assert abs(f - q) < 5 * np.sqrt(q * (1 - q) / (N // 5)) + 1e-9, (q, f)


def test_multinomial_frequencies(tmp_path: Path) -> None:
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    logp = np.log(np.maximum(probs, 1e-300)).astype(np.float32)
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=N, seed=2.0)
    y = _run(
        tmp_path, [node], [vi("x", [2, 3])], [vi("y", [2, N], TensorProto.INT32)], {"x": logp}
    )["y"]
    for b in range(2):
        freq = np.bincount(y[b], minlength=3) / N
        assert np.all(np.abs(freq - probs[b]) < 5 * np.sqrt(probs[b] * (1 - probs[b]) / N) + 1e-9)


@pytest.mark.parametrize("ratio", [0.25, 0.75])
def test_training_dropout_keeps_1_minus_ratio_scaled(tmp_path: Path, ratio: float) -> None:
    x = np.random.default_rng(0).uniform(1, 2, N).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=0)
    inits = [tensor("r", np.array(ratio, np.float32)), tensor("t", np.array(True))]
    out = _run(
        tmp_path,
        [node],
        [vi("x", [N])],
        [vi("y", [N]), vi("m", [N], TensorProto.BOOL)],
        {"x": x},
        inits,
    )
    y, m = out["y"], out["m"].astype(bool)
    np.testing.assert_allclose(y[m], x[m] / (1 - ratio), rtol=1e-6)
    assert not y[~m].any()
    assert abs(m.mean() - (1 - ratio)) < 5 * np.sqrt(ratio * (1 - ratio) / N)


def test_dropout_training_flag_at_run_time(tmp_path: Path) -> None:
    """training_mode a graph input: false is the identity with an all-true mask."""
    x = np.arange(1, 101, dtype=np.float32)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"])
    ins = [vi("x", [100]), vi("r", [], TensorProto.FLOAT), vi("t", [], TensorProto.BOOL)]
    outs = [vi("y", [100]), vi("m", [100], TensorProto.BOOL)]
    off = _run(tmp_path / "a", [node], ins, outs, {"x": x, "r": np.float32(0.5), "t": False})
    np.testing.assert_array_equal(off["y"], x)
    assert off["m"].all()
    on = _run(tmp_path / "b", [node], ins, outs, {"x": x, "r": np.float32(0.5), "t": True})
    kept = on["m"].astype(bool)
    assert 0 < kept.sum() < 100
    np.testing.assert_allclose(on["y"][kept], 2 * x[kept])
