"""C backend: ai.onnx.ml Binarizer / ArrayFeatureExtractor (ops/ml.py) and SwiGLU (ops/gated.py)
against onnxruntime; the optimizer updates of ai.onnx.preview.training (ops/training.py), which
onnxruntime's inference build does not run, against onnx's reference evaluator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.backend import CBackend

from conftest import save, tensor, vi


def _model(nodes, inputs, outputs, opsets, inits=()) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 9
    return m


def test_binarizer_inf_and_nan(tmp_path: Path) -> None:
    """Against onnxruntime with +-Inf; NaN (onnxruntime refuses it: 'Input data ... is NaN')
    gives 0, as the ONNX reference's x > threshold does."""
    x = np.array([[-1.0, 0.5, 0.5000001, 1.0], [np.inf, -np.inf, 2.0, 0.0]], np.float32)
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    m = _model([node], [vi("x", [2, 4])], [vi("y", [2, 4])], [("ai.onnx.ml", 1)])
    path = save(m, tmp_path / "m.onnx")
    rep = api.verify(path, target="c", inputs={"x": x}, rtol=0, atol=0)
    assert rep.ok, rep.format()
    out = api.convert(path, target="c", out_dir=tmp_path / "c")
    x[0, 3] = np.nan
    got = CBackend().run(out.out_dir, {"x": x}, {})["y"]
    np.testing.assert_array_equal(got, (x > 0.5).astype(np.float32))


def test_array_feature_extractor(tmp_path: Path) -> None:
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    m = _model(
        [node],
        [vi("x", [3, 5])],
        [vi("y", [3, 3])],
        [("ai.onnx.ml", 1), ("", 17)],
        [tensor("i", np.array([4, 0, 2], np.int64))],
    )
    rep = api.verify(save(m, tmp_path / "m.onnx"), target="c", rtol=0, atol=0)
    assert rep.ok, rep.format()


def test_swiglu_matches_formula_and_onnxruntime(tmp_path: Path) -> None:
    a = np.array([[-3.0, -0.5, 0.0, 2.0, np.nan, np.inf, -np.inf, 40.0]], np.float32)
    b = np.array([[1.0, 2.0, 3.0, -1.0, 1.0, 2.0, 1.0, 0.5]], np.float32)
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5)
    m = _model([node], [vi("a", [1, 8]), vi("b", [1, 8])], [vi("y", [1, 8])], [("", 28)])
    path = save(m, tmp_path / "m.onnx")
    out = api.convert(path, target="c", out_dir=tmp_path / "c")
    got = CBackend().run(out.out_dir, {"a": a, "b": b}, {})["y"]
    with np.errstate(all="ignore"):
        want = a / (1 + np.exp(-1.5 * a)) * b
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"onnxruntime does not run SwiGLU (opset 28): {str(e)[:80]}")
    np.testing.assert_allclose(got, sess.run(None, {"a": a, "b": b})[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", ["Adagrad", "Momentum", "Nesterov", "Adam"])
def test_training_updates_match_the_reference(tmp_path: Path, op: str) -> None:
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    states = {"Adagrad": 1, "Momentum": 1, "Nesterov": 1, "Adam": 2}[op]
    kw = {
        "Adagrad": {"decay_factor": 0.1, "norm_coefficient": 0.01},
        "Momentum": {"alpha": 0.9, "beta": 0.1, "mode": "standard", "norm_coefficient": 0.01},
        "Nesterov": {"alpha": 0.9, "beta": 0.1, "mode": "nesterov", "norm_coefficient": 0.01},
        "Adam": {"alpha": 0.8, "beta": 0.95, "norm_coefficient": 0.01, "epsilon": 1e-4},
    }[op]
    names = [f"{p}{k}" for p in ["X", "G", "S", "H"][: 2 + states] for k in (1, 2)]
    outs = [f"{p}{k}_new" for p in ["X", "S", "H"][: 1 + states] for k in (1, 2)]
    node = helper.make_node(
        "Momentum" if op == "Nesterov" else op,
        ["R", "T", *names],
        outs,
        domain="ai.onnx.preview.training",
        **kw,
    )
    ins = [vi("R", []), vi("T", [], TensorProto.INT64), *(vi(n, [2, 3]) for n in names)]
    m = _model([node], ins, [vi(o, [2, 3]) for o in outs], [("ai.onnx.preview.training", 1)])
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(3, np.int64)}
    feeds |= {n: rng.random((2, 3)).astype(np.float32) for n in names}
    path = save(m, tmp_path / "m.onnx")
    out = api.convert(path, target="c", out_dir=tmp_path / "c")
    got = CBackend().run(out.out_dir, feeds, {})
    want = ReferenceEvaluator(m).run(None, feeds)
    for o, w in zip(outs, want, strict=True):
        np.testing.assert_allclose(got[o], w, rtol=1e-5, atol=1e-6, err_msg=o)
