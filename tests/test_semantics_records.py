"""The typed attribute records (semantics/records.py) say what ONNX means, checked against
onnx's reference evaluator / onnxruntime (semantics/reference.py), and read their defaults from
the schema (semantics/attrs.py), the nearest version's where an op version lacks the attribute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

from onnx2edge.ir import Node
from onnx2edge.ir.graph import Attr
from onnx2edge.semantics.attrs import default
from onnx2edge.semantics.records import (
    pad_attrs,
    reduce_attrs,
    resize_attrs,
    softmax_attrs,
)
from onnx2edge.semantics.reference import run_node


def _node(op: str, **attrs: object) -> Node:
    proto = oh.make_node(op, ["x"], ["y"], **attrs)
    return Node(
        "n",
        op,
        ("x",),
        ("y",),
        {a.name: Attr(a.type, oh.get_attribute_value(a)) for a in proto.attribute},
    )


def test_resize_defaults_come_from_the_schema() -> None:
    r = resize_attrs(_node("Resize"), 13)
    assert (r.mode, r.coordinate_transformation_mode, r.nearest_mode) == (
        "nearest",
        "half_pixel",
        "round_prefer_floor",
    )
    assert (r.cubic_coeff_a, r.exclude_outside, r.antialias, r.legacy) == (-0.75, 0, 0, False)
    # antialias / keep_aspect_ratio_policy arrived in opset 18, with the older behaviour
    assert resize_attrs(_node("Resize"), 13).keep_aspect_ratio_policy == "stretch"
    r = resize_attrs(
        _node("Resize", mode="linear", coordinate_transformation_mode="align_corners"), 19
    )
    assert (r.mode, r.coordinate_transformation_mode) == ("linear", "align_corners")


def test_resize_10_is_asymmetric_floor_when_upsampling() -> None:
    """The record's claim for Resize-10 (no coordinate_transformation_mode): asymmetric
    coordinates, nearest 'simple' = floor when upsampling; the half_pixel default of Resize-11+
    would give another image."""
    r = resize_attrs(_node("Resize"), 10)
    assert (r.legacy, r.coordinate_transformation_mode, r.nearest_mode) == (
        True,
        "asymmetric",
        "simple",
    )
    assert resize_attrs(_node("Upsample"), 9).legacy
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    for mode, nearest in (("nearest", "floor"), ("linear", "floor")):
        s = np.array([1, 1, 2.5, 2.5], np.float32)
        old = run_node("Resize", [x, s], 10, {"mode": mode}, engine="onnxruntime")[0]
        asym = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": nearest}
        now = run_node("Resize", [x, None, s], 13, {"mode": mode, **asym})[0]
        np.testing.assert_allclose(old, now, rtol=1e-6)
    half = run_node("Resize", [x, None, s], 13, {"mode": "linear"})[0]
    assert not np.allclose(old, half)  # the Resize-11+ default would differ


@pytest.mark.parametrize(("opset", "axis", "flattens"), [(11, 1, True), (13, -1, False)])
def test_softmax_axis_and_flattening_follow_the_opset(
    opset: int, axis: int, flattens: bool
) -> None:
    a = softmax_attrs(_node("Softmax"), opset)
    assert (a.axis, a.flattens) == (axis, flattens)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    y = run_node("Softmax", [x], opset, engine="onnxruntime")[0]  # the evaluator ignores -11
    summed = tuple(range(a.axis % 3, 3)) if a.flattens else (a.axis % 3,)
    np.testing.assert_allclose(y.sum(axis=summed), 1.0, rtol=1e-5)


def test_pad_and_reduce_records() -> None:
    assert pad_attrs(_node("Pad"), 13).mode == "constant"
    old = pad_attrs(_node("Pad", pads=[0, 1, 0, 1]), 2)
    assert (old.pads, old.value) == ((0, 1, 0, 1), 0.0)
    r = reduce_attrs(_node("ReduceMean"), 13)  # noop_with_empty_axes arrived in 18 with 0
    assert (r.axes, r.keepdims, r.noop_with_empty_axes) == (None, True, False)
    assert reduce_attrs(_node("ReduceMean", axes=[2, 3], keepdims=0), 13).axes == (2, 3)


def test_default_of_an_attribute_this_version_lacks() -> None:
    # added later with the older behaviour as its default
    assert default("Cast", "saturate", 13) == 1
    assert default("ArgMax", "select_last_index", 11) == 0
    assert default("TopK", "largest", 10) == 1
    # removed later: its last default is the newer behaviour
    assert default("BatchNormalization", "spatial", 15) == 1
    # became an input: absent means absent, not the old attribute's default
    assert default("Clip", "min", 13) is None
    # declared without a default at this version
    assert default("Resize", "axes", 19) is None
    # the opset-dependent default is the version's own
    assert (default("Softmax", "axis", 11), default("Softmax", "axis", 13)) == (1, -1)


def test_hardswish_decomposition_is_required_not_hand_copied() -> None:
    """HardSwish is decomposed once (passes/decompose.py), exactly as onnxruntime computes it
    (NaN, +-Inf, -0 included), by the backends without a native form - which then carry no
    emitter of their own for it; C keeps the op (one activation-table expression)."""
    from onnx2edge import frontend
    from onnx2edge.backends.c.backend import CBackend
    from onnx2edge.backends.coreml import mil, nn
    from onnx2edge.backends.coreml.backend import CoreMLBackend
    from onnx2edge.backends.mps.backend import MPSBackend
    from onnx2edge.backends.mps.ops.common import EMITTERS
    from onnx2edge.passes.decompose import decompose_hardswish

    for backend, emitters in (
        (MPSBackend, EMITTERS),
        (CoreMLBackend, {**mil.MIL_OPS, **nn.NN_OPS}),
    ):
        assert "decompose_hardswish" in backend.required_passes
        assert "HardSwish" not in emitters
    assert "decompose_hardswish" not in CBackend.required_passes

    x = np.array([np.nan, np.inf, -np.inf, -0.0, -3, -1.5, 0.25, 3, 7], np.float32)
    model = oh.make_model(
        oh.make_graph(
            [oh.make_node("HardSwish", ["x"], ["y"], name="hs")],
            "g",
            [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [9])],
            [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [9])],
        ),
        opset_imports=[oh.make_opsetid("", 14)],
    )
    g = decompose_hardswish(frontend.load(model, quiet=True))
    assert [n.op_type for n in g.nodes] == ["HardSigmoid", "Mul"]
    gate = g.nodes[0]
    assert g.type_of(gate.outputs[0]) == g.type_of("x")  # the new tensor is typed
    a = {k: v.value for k, v in gate.attrs.items()}
    hsig = run_node("HardSigmoid", [x], 14, a, engine="onnxruntime")[0]
    want = run_node("HardSwish", [x], 14, engine="onnxruntime")[0]
    with np.errstate(invalid="ignore"):  # -Inf * 0 is NaN, as HardSwish(-Inf) is
        np.testing.assert_array_equal(x * hsig, want)


def test_mish_decomposition_is_required_not_hand_copied() -> None:
    """Mish is decomposed once (passes/decompose.py) into ONNX's own definition, x *
    tanh(softplus(x)), by MPS and Core ML, which carry no Mish emitter of their own; C keeps
    the op (one activation-table expression). The parts, run by onnxruntime, give its Mish
    (NaN and +-Inf included)."""
    from onnx2edge import frontend
    from onnx2edge.backends.c.backend import CBackend
    from onnx2edge.backends.coreml import mil, nn
    from onnx2edge.backends.coreml.backend import CoreMLBackend
    from onnx2edge.backends.mps.backend import MPSBackend
    from onnx2edge.backends.mps.ops.common import EMITTERS
    from onnx2edge.passes.decompose import decompose_mish

    for backend, emitters in (
        (MPSBackend, EMITTERS),
        (CoreMLBackend, {**mil.MIL_OPS, **nn.NN_OPS}),
    ):
        assert "decompose_mish" in backend.required_passes
        assert "Mish" not in emitters
    assert "decompose_mish" not in CBackend.required_passes

    x = np.array([np.nan, np.inf, -np.inf, -0.0, -30, -3, -0.5, 0.25, 3, 30], np.float32)
    model = oh.make_model(
        oh.make_graph(
            [oh.make_node("Mish", ["x"], ["y"], name="m")],
            "g",
            [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [10])],
            [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [10])],
        ),
        opset_imports=[oh.make_opsetid("", 18)],
    )
    g = decompose_mish(frontend.load(model, quiet=True))
    assert [n.op_type for n in g.nodes] == ["Softplus", "Tanh", "Mul"]
    assert all(g.type_of(n.outputs[0]) == g.type_of("x") for n in g.nodes)  # typed
    sp = run_node("Softplus", [x], 18, engine="onnxruntime")[0]
    th = run_node("Tanh", [sp], 18, engine="onnxruntime")[0]
    want = run_node("Mish", [x], 18, engine="onnxruntime")[0]
    with np.errstate(invalid="ignore"):  # NaN * anything is NaN, as Mish(NaN) is
        got = x * th
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_resize_10_reaches_the_backends_as_asymmetric(tmp_path: Path) -> None:
    """The record, not a per-backend fallback, gives Resize-10 its meaning: the MPS CPU tail
    samples at asymmetric coordinates (the schema of Resize-11 would say half_pixel). Emit
    only: no Swift compiler needed."""
    from onnx2edge import api

    w = np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1)
    graph = oh.make_graph(
        [
            oh.make_node("Conv", ["x", "w"], ["c"], name="cv"),
            oh.make_node("Resize", ["c", "s"], ["y"], name="rs", mode="linear"),
        ],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 4, 4])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            onnx.numpy_helper.from_array(w, "w"),
            onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s"),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 10)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    api.convert(tmp_path / "m.onnx", "mps", tmp_path / "o")
    swift = "\n".join(f.read_text() for f in (tmp_path / "o").rglob("*.swift"))
    assert 'cpuResize(gpu_c, [1, 4, 8, 8], linear: true, transform: "asymmetric"' in swift


def test_recurrent_attrs() -> None:
    """RNN / GRU / LSTM read one record (C rnn.py, MPS's Swift cell): GRU-1's schema default
    direction is spelt 'foward' and means forward; layout arrived in opset 14 with 0."""
    from onnx2edge.semantics.rnn import recurrent_attrs

    gru1 = recurrent_attrs(_node("GRU"), 1)
    assert (gru1.direction, gru1.layout, gru1.clip, gru1.problem()) == ("forward", 0, None, None)
    lstm = recurrent_attrs(_node("LSTM", direction="bidirectional", input_forget=1, clip=3.0), 22)
    assert (lstm.num_directions, lstm.input_forget, lstm.linear_before_reset) == (2, True, False)
    assert lstm.clip == 3.0
    assert recurrent_attrs(_node("GRU", linear_before_reset=1), 14).linear_before_reset
    assert recurrent_attrs(_node("RNN", direction="sideways"), 14).problem() is not None
