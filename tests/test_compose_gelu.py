"""compose_gelu (passes/compose_gelu.py): the one matcher of GELU written out with Erf, as
torch exports F.gelu below opset 20, rewritten to a Gelu node of the same values (judged by
onnxruntime on both graphs), and left alone where the nodes mean something else."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx2edge.ir.proto import graph_from_model, model_from_graph
from onnx2edge.passes import run_passes
from onnx2edge.passes.compose_gelu import compose_gelu


def _const(name: str, v: float) -> onnx.NodeProto:
    t = helper.make_tensor(name, TensorProto.FLOAT, [], [v])
    return helper.make_node("Constant", [], [name], value=t)


def _pattern(scale: str = "div", order: str = "x_first", extra: bool = False) -> onnx.ModelProto:
    """x -> Relu -> t; GELU of t written out (scale: Div by sqrt 2 / Mul by 1/sqrt 2 /
    Div(sqrt 2, t), which is not GELU; order: Mul(t, a) then 0.5, or Mul(t, 0.5) then a);
    `extra`: the Erf's result is also a graph output."""
    n = [helper.make_node("Relu", ["x"], ["t"], name="relu")]
    if scale == "div":
        n += [_const("k", math.sqrt(2)), helper.make_node("Div", ["t", "k"], ["s"], name="div")]
    elif scale == "mul":
        n += [_const("k", 1 / math.sqrt(2)), helper.make_node("Mul", ["k", "t"], ["s"], name="mul")]
    else:
        n += [_const("k", math.sqrt(2)), helper.make_node("Div", ["k", "t"], ["s"], name="div")]
    n += [
        helper.make_node("Erf", ["s"], ["e"], name="erf"),
        _const("one", 1.0),
        helper.make_node("Add", ["one", "e"], ["a"], name="add"),
        _const("half", 0.5),
    ]
    if order == "x_first":
        n += [
            helper.make_node("Mul", ["t", "a"], ["m"], name="m1"),
            helper.make_node("Mul", ["m", "half"], ["y"], name="m2"),
        ]
    else:
        n += [
            helper.make_node("Mul", ["half", "t"], ["m"], name="m1"),
            helper.make_node("Mul", ["a", "m"], ["y"], name="m2"),
        ]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 5])]
    if extra:
        outs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3, 4, 5]))
    g = helper.make_graph(
        n, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])], outs
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _composed(model: onnx.ModelProto):
    return run_passes(graph_from_model(model), ("fold_constants", "infer_shapes", "compose_gelu"))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y"], {"x": x})[0]


@pytest.mark.parametrize("order", ["x_first", "half_first"])
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_erf_gelu_becomes_one_gelu_of_the_same_values(scale: str, order: str) -> None:
    model = _pattern(scale, order)
    g = _composed(model)
    assert [(n.op_type, n.name) for n in g.nodes] == [("Relu", "relu"), ("Gelu", "erf")]
    assert g.nodes[1].attr("approximate", "none") == "none"
    # ONNX's Gelu is opset 20: onnxruntime runs the rewritten graph at 20
    out = model_from_graph(g)
    del out.opset_import[:]
    out.opset_import.append(helper.make_opsetid("", 20))
    out.ir_version = 9
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32) * 4
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    want, got = _run(model, x), _run(out, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize(
    "kw", [{"scale": "reversed_div"}, {"extra": True}], ids=["sqrt2_over_t", "erf_is_output"]
)
def test_other_meanings_are_left_alone(kw: dict) -> None:
    g = graph_from_model(_pattern(**kw))
    g = run_passes(g, ("fold_constants", "infer_shapes"))
    assert compose_gelu(g) is g
