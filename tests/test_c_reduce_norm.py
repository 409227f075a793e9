"""C backend: reductions, normalisations, the softmax family, losses, Einsum, TopK and scans,
each a small hand-built model verified against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2edge import api

from conftest import make_model, save, tensor, vi

F32, F64, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64


def _verify(tmp_path: Path, nodes, inputs, outputs, inits=(), opset: int = 18, feeds=None) -> None:  # noqa: ANN001
    path = save(make_model(nodes, inputs, outputs, inits, opset=opset), tmp_path / "m.onnx")
    rep = api.verify(path, target="c", inputs=feeds or {})
    assert rep.ok, rep.format()


def _reduced_shape(shape: list[int], axes: list[int], keepdims: int) -> list[int]:
    axes = [a % len(shape) for a in axes] or list(range(len(shape)))
    if keepdims:
        return [1 if d in axes else n for d, n in enumerate(shape)]
    return [n for d, n in enumerate(shape) if d not in axes]


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], [1, 3], []], ids=str)
def test_reduce_mean_axes(tmp_path: Path, axes: list[int], keepdims: int) -> None:
    shape = [2, 3, 4, 5]
    ins = ["x", "axes"] if axes else ["x"]
    inits = [tensor("axes", np.array(axes, np.int64))] if axes else []
    node = helper.make_node("ReduceMean", ins, ["y"], keepdims=keepdims)
    _verify(
        tmp_path, [node], [vi("x", shape)], [vi("y", _reduced_shape(shape, axes, keepdims))], inits
    )


REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]


@pytest.mark.parametrize("opset", [11, 18])
def test_every_reduce_op(tmp_path: Path, opset: int) -> None:
    """Each Reduce op over axes [0, 2] of a 3-D tensor: `axes` an attribute at opset 11, an input at 18."""
    nodes, outs, inits = [], [], []
    for op in REDUCE_OPS:
        as_input = opset >= (13 if op == "ReduceSum" else 18)
        ins = ["xp" if op in ("ReduceLogSum",) else "x"] + (["axes"] if as_input else [])
        kw = {} if as_input else {"axes": [0, 2]}
        nodes.append(helper.make_node(op, ins, [op], keepdims=0, **kw))
        outs.append(vi(op, [3]))
    if opset >= 13:
        inits.append(tensor("axes", np.array([0, 2], np.int64)))
    nodes.insert(0, helper.make_node("Abs", ["x"], ["xp"]))  # ReduceLogSum needs a positive sum
    _verify(tmp_path, nodes, [vi("x", [2, 3, 4])], outs, inits, opset=opset)


def test_reduce_axes_at_run_time(tmp_path: Path) -> None:
    """`axes` a graph input: the generated code reads it and folds each element into its output."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
        helper.make_node("ReduceLogSumExp", ["x", "axes"], ["l"], keepdims=1),
        helper.make_node("ReduceMax", ["x", "axes"], ["m"], keepdims=0),
    ]
    outs = [vi("s", [3]), vi("l", [1, 3, 1]), vi("m", [3])]
    feeds = {"axes": np.array([0, -1], np.int64)}
    _verify(tmp_path, nodes, [vi("x", [2, 3, 4]), vi("axes", [2], I64)], outs, feeds=feeds)


def test_reduce_integers_and_noop(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("ReduceSum", ["x", "a1"], ["s"], keepdims=1),
        helper.make_node("ReduceMax", ["x", "a1"], ["m"], keepdims=0),
        helper.make_node("ReduceMin", ["x"], ["mn"], keepdims=0),
        helper.make_node("ReduceProd", ["x", "a1"], ["p"], keepdims=0),
        helper.make_node("ReduceSum", ["x", "none"], ["same"], noop_with_empty_axes=1),
    ]
    inits = [tensor("a1", np.array([1], np.int64)), tensor("none", np.array([], np.int64))]
    outs = [
        vi("s", [3, 1], I32),
        vi("m", [3], I32),
        vi("mn", [], I32),
        vi("p", [3], I32),
        vi("same", [3, 4], I32),
    ]
    feeds = {"x": np.arange(-5, 7, dtype=np.int32).reshape(3, 4)}
    _verify(tmp_path, nodes, [vi("x", [3, 4], I32)], outs, inits, feeds=feeds)


def test_argmax_argmin(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
        helper.make_node("ArgMax", ["x"], ["b"], axis=1, keepdims=1, select_last_index=1),
        helper.make_node("ArgMin", ["x"], ["c"], axis=-1, keepdims=1),
        helper.make_node("ArgMin", ["x"], ["d"], axis=0, keepdims=0, select_last_index=1),
    ]
    x = np.array(
        [[[1, 3], [3, 0], [3, 0]], [[2, 2], [2, 2], [0, 5]]], np.float32
    )  # ties on purpose
    outs = [
        vi("a", [2, 2], I64),
        vi("b", [2, 1, 2], I64),
        vi("c", [2, 3, 1], I64),
        vi("d", [3, 2], I64),
    ]
    _verify(tmp_path, nodes, [vi("x", [2, 3, 2])], outs, opset=13, feeds={"x": x})


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k(tmp_path: Path, largest: int) -> None:
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)]
    x = np.random.default_rng(1).integers(0, 4, (2, 6, 3)).astype(np.float32)  # many ties
    outs = [vi("v", [2, 3, 3]), vi("i", [2, 3, 3], I64)]
    _verify(
        tmp_path,
        nodes,
        [vi("x", [2, 6, 3])],
        outs,
        [tensor("k", np.array([3], np.int64))],
        feeds={"x": x},
    )


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(tmp_path: Path, exclusive: int, reverse: int) -> None:
    nodes = [
        helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse),
        helper.make_node("CumSum", ["xi", "ax"], ["yi"], exclusive=exclusive, reverse=reverse),
    ]
    ins = [vi("x", [2, 3, 4]), vi("xi", [2, 3, 4], I64)]
    outs = [vi("y", [2, 3, 4]), vi("yi", [2, 3, 4], I64)]
    _verify(tmp_path, nodes, ins, outs, [tensor("ax", np.array(1, np.int32))], opset=14)


def test_cumsum_axis_at_run_time(tmp_path: Path) -> None:
    nodes = [helper.make_node("CumSum", ["x", "ax"], ["y"], reverse=1)]
    feeds = {"ax": np.array(-1, np.int64)}
    _verify(
        tmp_path,
        nodes,
        [vi("x", [2, 3, 4], F64), vi("ax", [], I64)],
        [vi("y", [2, 3, 4], F64)],
        opset=14,
        feeds=feeds,
    )


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_axis_1_of_4d(tmp_path: Path, op: str, opset: int) -> None:
    """Axis 1 of a 4-D tensor: the [2, 60] coercion before opset 13, one axis from 13 on."""
    nodes = [helper.make_node(op, ["x"], ["y"], axis=1)]
    _verify(tmp_path, nodes, [vi("x", [2, 3, 4, 5])], [vi("y", [2, 3, 4, 5])], opset=opset)


def test_softmax_float64_large_values(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"]),
        helper.make_node("LogSoftmax", ["x"], ["z"]),
    ]
    x = np.array([[1000.0, 1001.0, 999.0], [-1e3, 0.0, 5.0]])
    outs = [vi("y", [2, 3], F64), vi("z", [2, 3], F64)]
    _verify(tmp_path, nodes, [vi("x", [2, 3], F64)], outs, opset=13, feeds={"x": x})


def test_layer_norm_3d_with_statistics(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    inits = [
        tensor("s", rng.standard_normal((4, 5)).astype(np.float32)),
        tensor("b", rng.standard_normal(5).astype(np.float32)),
    ]
    nodes = [
        helper.make_node(
            "LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1, epsilon=1e-3
        )
    ]
    outs = [vi("y", [3, 4, 5]), vi("mean", [3, 1, 1]), vi("inv", [3, 1, 1])]
    _verify(tmp_path, nodes, [vi("x", [3, 4, 5])], outs, inits, opset=17)


def test_rms_and_group_norm(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    inits = [
        tensor("w", rng.standard_normal(6).astype(np.float32)),
        tensor("gs", rng.standard_normal(4).astype(np.float32)),
        tensor("gb", rng.standard_normal(4).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("RMSNormalization", ["x", "w"], ["r"], axis=-1),
        helper.make_node("GroupNormalization", ["x", "gs", "gb"], ["g"], num_groups=2),
    ]
    outs = [vi("r", [2, 4, 3, 6]), vi("g", [2, 4, 3, 6])]
    _verify(tmp_path, nodes, [vi("x", [2, 4, 3, 6])], outs, inits, opset=23)


def test_other_normalisations(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    c = lambda n, a: tensor(n, a.astype(np.float32))  # noqa: E731
    inits = [
        c("s", rng.standard_normal(3)),
        c("b", rng.standard_normal(3)),
        c("m", rng.standard_normal(3)),
        c("v", rng.uniform(0.5, 2, 3)),
    ]
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["inorm"]),
        helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"], axes=[0, 2]),
        helper.make_node("LpNormalization", ["x"], ["l1"], axis=1, p=1),
        helper.make_node("LpNormalization", ["x"], ["l2"], axis=-1, p=2),
        helper.make_node("LRN", ["x"], ["lrn"], size=3, alpha=1e-3, beta=0.6, bias=1.5),
        # runtime statistics: the BN cannot be folded into constants
        helper.make_node("Abs", ["sv"], ["sv_pos"]),
        helper.make_node(
            "BatchNormalization", ["x", "s", "b", "m", "sv_pos"], ["bn"], epsilon=1e-3
        ),
    ]
    shape = [2, 3, 4, 5]
    outs = [vi(n, shape) for n in ("inorm", "mvn", "l1", "l2", "lrn", "bn")]
    _verify(tmp_path, nodes, [vi("x", shape), vi("sv", [3])], outs, inits, opset=15)


@pytest.mark.parametrize(
    ("equation", "shapes", "out"),
    [
        ("bij, bjk -> bik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5]),
        ("...ii->...i", [[2, 3, 3]], [2, 3]),
        ("ij,jk", [[3, 4], [4, 2]], [3, 2]),
        ("i,i", [[5], [5]], []),
        ("ij->", [[3, 4]], []),
        ("b...c,c->b...", [[2, 3, 4, 5], [5]], [2, 3, 4]),
    ],
)
def test_einsum(tmp_path: Path, equation: str, shapes: list[list[int]], out: list[int]) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    nodes = [helper.make_node("Einsum", names, ["y"], equation=equation)]
    _verify(
        tmp_path,
        nodes,
        [vi(n, s) for n, s in zip(names, shapes, strict=True)],
        [vi("y", out)],
        opset=12,
    )


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_losses(tmp_path: Path, reduction: str) -> None:
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 5, (3, 4)).astype(np.int64)
    labels[0, 0] = 2  # ignored below
    inits = [tensor("w", rng.uniform(0.5, 2, 5).astype(np.float32))]
    nodes = [
        helper.make_node(
            "SoftmaxCrossEntropyLoss",
            ["x", "t", "w"],
            ["sce", "logp"],
            reduction=reduction,
            ignore_index=2,
        ),
        helper.make_node("LogSoftmax", ["x"], ["ls"], axis=1),
        helper.make_node("NegativeLogLikelihoodLoss", ["ls", "t"], ["nll"], reduction=reduction),
    ]
    loss_shape = [3, 4] if reduction == "none" else []
    outs = [vi("sce", loss_shape), vi("logp", [3, 5, 4]), vi("nll", loss_shape)]
    _verify(
        tmp_path,
        nodes,
        [vi("x", [3, 5, 4]), vi("t", [3, 4], I64)],
        outs,
        inits,
        opset=13,
        feeds={"t": labels},
    )


def test_det(tmp_path: Path) -> None:
    nodes = [helper.make_node("Det", ["x"], ["y"])]
    _verify(tmp_path, nodes, [vi("x", [3, 4, 4])], [vi("y", [3])], opset=11)
