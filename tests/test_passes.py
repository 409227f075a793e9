"""Each pass: structure before/after, numerics against onnxruntime, input graph untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.frontend import load
from onnx2edge.ir.proto import model_from_graph
from onnx2edge.passes import (
    activation_of,
    eliminate_dead_nodes,
    fold_batchnorm,
    fuse_activation,
    fuse_residual,
    has_residual,
    remove_identity,
)
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

RNG = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _bn(name: str, c: int) -> tuple[list, list[str]]:
    ts = [
        tensor(f"{name}.g", RNG.uniform(0.5, 2, c).astype(np.float32)),
        tensor(f"{name}.b", _r(c)),
        tensor(f"{name}.m", _r(c)),
        tensor(f"{name}.v", RNG.uniform(0.2, 3, c).astype(np.float32)),
    ]
    return ts, [t.name for t in ts]


def _same_numerics(graph_before, graph_after, feeds) -> None:  # noqa: ANN001
    a = ort_run(model_from_graph(graph_before), feeds)
    b = ort_run(model_from_graph(graph_after), feeds)
    for k in a:
        assert np.abs(a[k] - b[k]).max() <= 1e-5 * max(1.0, np.abs(a[k]).max()), k


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "Gemm", "GemmT"])
def test_fold_batchnorm(tmp_path: Path, op: str) -> None:
    bn_t, bn_names = _bn("bn", 6)
    if op == "Conv":
        node = helper.make_node("Conv", ["x", "w", "b0"], ["t"], name="p", pads=[1] * 4, group=2)
        inits = [tensor("w", _r(6, 2, 3, 3)), tensor("b0", _r(6))]
        xs, ys = [1, 4, 5, 5], [1, 6, 5, 5]
    elif op == "ConvTranspose":
        node = helper.make_node(
            "ConvTranspose", ["x", "w"], ["t"], name="p", strides=[2, 2], group=2
        )
        inits = [tensor("w", _r(4, 3, 2, 2))]
        xs, ys = [1, 4, 5, 5], [1, 6, 10, 10]
    else:
        tb = int(op == "GemmT")
        node = helper.make_node(
            "Gemm", ["x", "w", "b0"], ["t"], name="p", transB=tb, alpha=0.5, beta=2.0
        )
        inits = [tensor("w", _r(6, 4) if tb else _r(4, 6)), tensor("b0", _r(6))]
        xs, ys = [3, 4], [3, 6]
    m = make_model(
        [node, helper.make_node("BatchNormalization", ["t", *bn_names], ["y"], name="bn")],
        [vi("x", xs)],
        [vi("y", ys)],
        inits + bn_t,
    )
    g = load(save(m, tmp_path / "m.onnx"))
    before = g.nodes
    f = fold_batchnorm(g)
    assert g.nodes == before  # input untouched
    assert [n.op_type for n in f.nodes] == [node.op_type]
    assert "w" not in f.initializers  # replaced by a new, unshared tensor
    _same_numerics(g, f, {"x": _r(*xs)})


def test_fold_batchnorm_keeps_shared_weights(tmp_path: Path) -> None:
    bn_t, bn_names = _bn("bn", 4)
    m = make_model(
        [
            helper.make_node("Conv", ["x", "w"], ["t"], name="c1"),
            helper.make_node("BatchNormalization", ["t", *bn_names], ["u"], name="bn"),
            helper.make_node("Conv", ["x", "w"], ["v"], name="c2"),  # shares w, no BN
            helper.make_node("Add", ["u", "v"], ["y"], name="add"),
        ],
        [vi("x", [1, 4, 3, 3])],
        [vi("y", [1, 4, 3, 3])],
        [tensor("w", _r(4, 4, 1, 1)), *bn_t],
    )
    g = load(save(m, tmp_path / "m.onnx"))
    f = fold_batchnorm(g)
    assert "w" in f.initializers and np.array_equal(f.initializers["w"], g.initializers["w"])
    _same_numerics(g, f, {"x": _r(1, 4, 3, 3)})


def _conv_relu_add_model(tmp_path: Path, conv_second: bool) -> Path:
    add_inputs = ["r", "c"] if conv_second else ["c", "r"]
    m = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="pre"),
            helper.make_node("Conv", ["r", "w", "b"], ["c"], name="conv", pads=[1] * 4),
            helper.make_node("Add", add_inputs, ["s"], name="add"),
            helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="relu6"),
        ],
        [vi("x", [1, 4, 6, 6])],
        [vi("y", [1, 4, 6, 6])],
        [
            tensor("w", _r(4, 4, 3, 3)),
            tensor("b", _r(4)),
            tensor("lo", np.array(0, np.float32)),
            tensor("hi", np.array(6, np.float32)),
        ],
    )
    return save(m, tmp_path / f"m{int(conv_second)}.onnx")


@pytest.mark.parametrize("conv_second", [False, True])
def test_fuse_residual_then_activation(tmp_path: Path, conv_second: bool) -> None:
    path = _conv_relu_add_model(tmp_path, conv_second)
    g = load(path)
    f = fuse_activation(fuse_residual(g))
    # an internal op with its own schema, not attributes smuggled onto Conv (semantics/fused.py)
    assert [(n.domain, n.op_type) for n in f.nodes] == [("", "Relu"), ("o2e", "ConvAddAct")]
    conv = f.nodes[1]
    assert has_residual(conv) and conv.inputs[3] == "r" and conv.outputs == ("y",)
    assert activation_of(conv) == ("Clip", 0.0, 6.0)
    # numerics through the C backend, which implements the fused epilogue
    assert api.verify(path, target="c", per_layer=True).ok


def test_fuse_activation_needs_single_consumer(tmp_path: Path) -> None:
    m = make_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
            helper.make_node("Sigmoid", ["c"], ["z"], name="sig"),
        ],
        [vi("x", [1, 2, 3, 3])],
        [vi("y", [1, 2, 3, 3]), vi("z", [1, 2, 3, 3])],
        [tensor("w", _r(2, 2, 1, 1))],
    )
    g = load(save(m, tmp_path / "m.onnx"))
    assert fuse_activation(g).nodes == g.nodes


def test_eliminate_dead_and_identity(tmp_path: Path) -> None:
    m = make_model(
        [
            helper.make_node("Identity", ["x"], ["i"], name="id"),
            helper.make_node("Dropout", ["i"], ["d"], name="drop"),
            helper.make_node("Relu", ["d"], ["y"], name="relu"),
            helper.make_node("Sigmoid", ["x"], ["unused"], name="dead"),
        ],
        [vi("x", [4])],
        [vi("y", [4])],
    )
    g = load(save(m, tmp_path / "m.onnx"))
    f = eliminate_dead_nodes(remove_identity(g))
    assert [n.op_type for n in f.nodes] == ["Relu"] and f.nodes[0].inputs == ("x",)
    _same_numerics(g, f, {"x": _r(4)})


def test_pass_named_again_runs_again() -> None:
    """The frontend's list starts with clean-ups that a backend's list names again at its end:
    each mention runs (the backend's fusions leave dead nodes only the second one removes)."""
    from onnx2edge.passes.registry import PASSES, pass_stages, register_pass, run_passes

    ran: list[str] = []
    for name in ("_t_a", "_t_b", "_t_c"):
        register_pass(name)(lambda g, name=name: (ran.append(name), g)[1])
    try:
        assert pass_stages(["_t_a", "_t_b", "_t_c", "_t_a", "_t_b"]) == [
            ["_t_a", "_t_b", "_t_c"],
            ["_t_a", "_t_b"],
        ]
        run_passes(load(_tiny_model()), ["_t_a", "_t_b", "_t_c", "_t_b"])
        assert ran == ["_t_a", "_t_b", "_t_c", "_t_b"]
    finally:
        for name in ("_t_a", "_t_b", "_t_c"):
            PASSES.pop(name)


def _tiny_model():
    x = vi("x", [1, 4])
    y = vi("y", [1, 4])
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
