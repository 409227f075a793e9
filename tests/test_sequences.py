"""Sequences and optionals lowered to tensors (frontend/sequences.py): the lowered model gives
onnxruntime's numbers of the original, and the C built from it matches onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.frontend.sequences import lower_sequences

from conftest import make_model, save, tensor, vi

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _seq_vi(name: str, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, None)


def test_split_at_concat_inside_a_tensor_model_matches_ort(tmp_path: Path) -> None:
    """No sequence at the model's edge: SplitToSequence, SequenceInsert/Erase/At, Length and
    ConcatFromSequence (new_axis) all become tensor ops."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "minus1"], ["last"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
        helper.make_node("ConcatFromSequence", ["cols"], ["stacked"], axis=0, new_axis=1),
    ]
    inits = [
        tensor("split", np.array([2, 4], np.int64)),
        tensor("zero", np.array(0, np.int64)),
        tensor("minus1", np.array(-1, np.int64)),
    ]
    outs = [vi("last", [3, 6]), vi("n", [], I64), vi("stacked", [6, 3])]
    path = save(make_model(nodes, [vi("x", [3, 6])], outs, inits, opset=18), tmp_path / "m.onnx")
    rep = api.verify(path, target="c")
    assert rep.ok, rep.format()


def test_sequence_input_and_output_become_one_tensor_per_element() -> None:
    """A sequence input of 3 elements is inputs s_0..s_2, a sequence output one output each;
    SequenceMap's body is inlined per element; the lowered model gives ort's numbers."""
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "body",
        [vi("a", ["N"]), vi("b", ["N"])],
        [vi("c", ["N"])],
    )
    node = helper.make_node("SequenceMap", ["s", "t"], ["y"], body=body)
    model = make_model([node], [_seq_vi("s"), vi("t", [4])], [_seq_vi("y")], opset=17)
    rng = np.random.default_rng(0)
    elems = [rng.standard_normal(4).astype(np.float32) for _ in range(3)]
    t = rng.standard_normal(4).astype(np.float32)
    want = _ort(model, {"s": elems, "t": t})[0]
    low = lower_sequences(model, {"s": [(np.float32, (4,))] * 3})
    assert [i.name for i in low.graph.input] == ["s_0", "s_1", "s_2", "t"]
    assert [o.name for o in low.graph.output] == ["y_0", "y_1", "y_2"]
    got = _ort(low, {"s_0": elems[0], "s_1": elems[1], "s_2": elems[2], "t": t})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_loop_carrying_a_sequence_is_unrolled() -> None:
    """A Loop whose state is a sequence: unrolled with its count known (here a constant)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F32),
            helper.make_node("Unsqueeze", ["fi", "ax"], ["e"]),
            helper.make_node("SequenceInsert", ["seq_in", "e"], ["seq_out"]),
        ],
        "body",
        [vi("i", [], I64), vi("cond_in", [], TensorProto.BOOL), _seq_vi("seq_in")],
        [vi("cond_out", [], TensorProto.BOOL), _seq_vi("seq_out")],
        [tensor("ax", np.array([0], np.int64))],
    )
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F32),
        helper.make_node("Loop", ["n", "c", "empty"], ["seq"], body=body),
        helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0),
    ]
    inits = [tensor("n", np.array(4, np.int64)), tensor("c", np.array(True))]
    model = make_model(nodes, [], [vi("y", [4])], inits, opset=17)
    low = lower_sequences(model)
    assert not any(n.op_type == "Loop" for n in low.graph.node)
    np.testing.assert_array_equal(_ort(low, {})[0], [0, 1, 2, 3])


def test_run_time_position_is_refused_with_its_reason() -> None:
    node = helper.make_node("SequenceAt", ["s", "p"], ["y"])
    model = make_model([node], [_seq_vi("s"), vi("p", [], I64)], [vi("y", [2])], opset=17)
    with pytest.raises(Onnx2EdgeError, match="position must be known at conversion"):
        lower_sequences(model, {"s": [(np.float32, (2,))] * 2})
    with pytest.raises(Onnx2EdgeError, match="length and element shapes must be known"):
        lower_sequences(model)
