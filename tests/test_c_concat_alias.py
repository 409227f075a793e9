"""Concat inputs written in place in their output's buffer (backends/c/concat_alias.py):
which inputs are aliased (single-reader arena tensors of a batch-1 concat) and which are still
copied (graph inputs, tensors read twice, nested concats, interleaved slices, graph outputs),
and dense blocks (every Concat a prefix of the block's last one: all views of its buffer),
each model checked against onnxruntime at every ISA (aarch64 under qemu), NaN / Inf included."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, build_and_run

IN_PLACE = "written in place"


def _model(path: Path, nodes: list, outputs: list[str], batch: int = 1) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 5, 7])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    m = helper.make_model(
        helper.make_graph(nodes, "concat_alias", [x], outs),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    onnx.save(m, path)
    return path


N = helper.make_node


def _unary(op: str, x: str, y: str) -> onnx.NodeProto:
    return N(op, [x], [y])


# case -> (nodes, outputs, batch, inputs written in place)
CASES = {
    # both producers write into the output; the concat copies nothing
    "two_inputs": (
        [
            _unary("Relu", "x", "a"),
            _unary("Neg", "x", "b"),
            N("Concat", ["a", "b"], ["y"], axis=1),
            N("Mul", ["y", "y"], ["z"]),
        ],
        ["z"],
        1,
        2,
    ),
    # the graph input, a tensor read twice and a repeated input are copied; "c" is in place
    "mixed": (
        [
            _unary("Relu", "x", "a"),
            _unary("Sigmoid", "x", "c"),
            N("Concat", ["x", "a", "c", "a"], ["y"], axis=-3),
            _unary("Neg", "y", "z"),
        ],
        ["z"],
        1,
        1,
    ),
    # the inner concat gets its inputs in place but is itself copied into the outer one
    "nested": (
        [
            _unary("Relu", "x", "p"),
            _unary("Neg", "x", "q"),
            N("Concat", ["p", "q"], ["inner"], axis=1),
            _unary("Abs", "x", "r"),
            N("Concat", ["inner", "r"], ["outer"], axis=1),
            _unary("Tanh", "outer", "z"),
        ],
        ["z"],
        1,
        3,
    ),
    # channels of a batch of 2 interleave (one run per image): copied
    "batch2": (
        [
            _unary("Relu", "x", "a"),
            _unary("Neg", "x", "b"),
            N("Concat", ["a", "b"], ["y"], axis=1),
            _unary("Neg", "y", "z"),
        ],
        ["z"],
        2,
        0,
    ),
    # along width: interleaved rows, copied; and a concat that is a graph output, copied
    "axis3_and_output": (
        [
            _unary("Relu", "x", "a"),
            _unary("Neg", "x", "b"),
            N("Concat", ["a", "b"], ["y"], axis=3),
            _unary("Exp", "x", "e"),
            _unary("Abs", "x", "f"),
            N("Concat", ["e", "f"], ["w"], axis=1),
            _unary("Neg", "y", "z"),
        ],
        ["z", "w"],
        1,
        0,
    ),
    # the concat's output is read after a later node reused the arena: its slices must stay
    "long_lived": (
        [
            _unary("Relu", "x", "a"),
            _unary("Exp", "x", "big"),
            _unary("Neg", "big", "b"),
            N("Concat", ["a", "b"], ["y"], axis=1),
            _unary("Sigmoid", "y", "s"),
            _unary("Tanh", "s", "t"),
            N("Concat", ["t", "y"], ["z"], axis=1),
        ],
        ["z"],
        1,
        2,
    ),
    # a dense block (DenseNet): every Concat's inputs are a prefix of the last one's, so
    # all are views of its buffer: a (3 concats), f1 (2) and f2 (1) in place, no copies
    "dense": (
        [
            _unary("Relu", "x", "a"),
            N("Concat", ["a"], ["c1"], axis=1),
            _unary("Neg", "c1", "f1"),
            N("Concat", ["a", "f1"], ["c2"], axis=1),
            _unary("Sigmoid", "c2", "f2"),
            N("Concat", ["a", "f1", "f2"], ["c3"], axis=1),
            _unary("Tanh", "c3", "z"),
        ],
        ["z"],
        1,
        6,
    ),
    # f1 also read by another node: not a dense chain; only f2 (one reader) in place
    "dense_extra_reader": (
        [
            _unary("Relu", "x", "a"),
            N("Concat", ["a"], ["c1"], axis=1),
            _unary("Neg", "c1", "f1"),
            N("Concat", ["a", "f1"], ["c2"], axis=1),
            _unary("Sigmoid", "c2", "f2"),
            N("Concat", ["a", "f1", "f2"], ["c3"], axis=1),
            _unary("Tanh", "c3", "z"),
            _unary("Abs", "f1", "w"),
        ],
        ["z", "w"],
        1,
        1,
    ),
}


def _inputs(batch: int, special: bool) -> dict[str, np.ndarray]:
    x = np.random.default_rng(5).standard_normal((batch, 3, 5, 7)).astype(np.float32)
    if special:
        x.reshape(-1)[[0, 9, 40, 77]] = [np.nan, np.inf, -np.inf, np.nan]
    return {"x": x}


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_inputs_are_written_in_place(tmp_path: Path, case: str) -> None:
    nodes, outputs, batch, n_in_place = CASES[case]
    path = _model(tmp_path / "m.onnx", nodes, outputs, batch)
    api.convert(path, "c", tmp_path / "out")
    assert (tmp_path / "out" / "model.c").read_text().count(IN_PLACE) == n_in_place


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize(
    "case", ["mixed", "nested", "long_lived", "axis3_and_output", "dense", "dense_extra_reader"]
)
def test_matches_onnxruntime(tmp_path: Path, case: str, arch: str) -> None:
    nodes, outputs, batch, _ = CASES[case]
    path = _model(tmp_path / "m.onnx", nodes, outputs, batch)
    api.convert(path, "c", tmp_path / "out")
    for special in (False, True):
        x = _inputs(batch, special)
        got = build_and_run(tmp_path / "out", arch, x)
        ref = ort_run(onnx.load(path), x)
        for name in outputs:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _qdq_concat(path: Path) -> Path:
    """int8 QDQ: two table ops (o2e QLut) feed a Concat whose output scale is the first one's
    (copied byte for byte: written in place, no copy) and not the second's (written in place,
    then requantized there by its table); a third table op reads the concat."""
    u8 = TensorProto.UINT8

    def q(x: str, y: str, s: str) -> list:
        return [N("QuantizeLinear", [x, s, "z"], [y])]

    def dq(x: str, y: str, s: str) -> onnx.NodeProto:
        return N("DequantizeLinear", [x, s, "z"], [y])

    nodes = [
        dq("xq", "xf", "s0"),
        N("Sigmoid", ["xf"], ["a"]), *q("a", "aq", "s1"),
        N("Tanh", ["xf"], ["b"]), *q("b", "bq", "s2"),
        dq("aq", "ad", "s1"), dq("bq", "bd", "s2"),
        N("Concat", ["ad", "bd"], ["c"], axis=1), *q("c", "cq", "s1"),
        dq("cq", "cd", "s1"), N("Relu", ["cd"], ["r"]), *q("r", "y", "s1"),
    ]  # fmt: skip
    inits = [
        helper.make_tensor("s0", TensorProto.FLOAT, [], [0.031]),
        helper.make_tensor("s1", TensorProto.FLOAT, [], [0.0047]),
        helper.make_tensor("s2", TensorProto.FLOAT, [], [0.0081]),
        helper.make_tensor("z", u8, [], [128]),
    ]
    g = helper.make_graph(
        nodes, "qconcat", [helper.make_tensor_value_info("xq", u8, [1, 3, 5, 7])],
        [helper.make_tensor_value_info("y", u8, None)], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.save(onnx.shape_inference.infer_shapes(m), path)
    return path


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_int8_concat_input_written_in_place(tmp_path: Path, arch: str) -> None:
    """o2e.QConcat: its inputs are placed like a Concat's; a requantization table is then
    applied in place (the table op's output is the concat's second half)."""
    path = _qdq_concat(tmp_path / "q.onnx")
    api.convert(path, "c", tmp_path / "out")
    code = (tmp_path / "out" / "model.c").read_text()
    assert "o2e.QConcat(" in code and code.count(IN_PLACE) == 1
    # the table op wrote bq at byte 105 of cq's buffer, where the lookup reads and writes
    offs = dict(re.findall(r"uint8_t \*const (T_\w+) = \(uint8_t \*\)\(o2e_arena \+ (\d+)\)", code))
    assert int(offs["T_bq"]) == int(offs["T_cq"]) + 105 and int(offs["T_aq"]) == int(offs["T_cq"])
    assert "o2e_qlut(105, (const uint8_t *)T_bq + o * 105" in code
    x = {"xq": np.random.default_rng(6).integers(0, 256, (1, 3, 5, 7)).astype(np.uint8)}
    got = build_and_run(tmp_path / "out", arch, x)["y"]
    assert np.array_equal(got, ort_run(onnx.load(path), x)["y"])
