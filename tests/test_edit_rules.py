"""Every rewrite rule on a small model: the matched op is gone, and onnxruntime computes the
same outputs on the original and the rewritten model (inputs include +-Inf / NaN for the
element-wise rules), or, for approximate rules, within the bound their note states."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge.edit import RULES, apply_rules
from onnx2edge.edit.model_io import to_model
from onnx2edge.frontend.loader import infer_shapes
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.runtime import ort_run

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17):  # noqa: ANN001, ANN201
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    return m


def unary(op, opset=17, shape=(2, 3, 4, 5), **attrs):  # noqa: ANN001, ANN201
    return model(
        [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", list(shape))], ["y"], opset=opset
    )


def feeds(m, special=True, seed=0):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(seed)
    out = {}
    inits = {t.name for t in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        a = (rng.standard_normal(shape) * 3).astype(np.float32)
        if special and a.size >= 8:
            a.reshape(-1)[:5] = [np.inf, -np.inf, 0.0, -0.0, 1e-40]
        out[vi.name] = a
    return out


def run_rule(name, m, *, special=True, tol=None):  # noqa: ANN001, ANN201
    g = graph_from_model(infer_shapes(m))
    new, log = apply_rules(g, [RULES[name]])
    assert new is not g and log[0]["rewritten"], f"{name} did not fire"
    for n in new.nodes:  # the naming convention `check` relies on
        assert n.name in {x.name for x in g.nodes} or "/" in n.name
    m2 = to_model(new)
    onnx.checker.check_model(m2)
    f = feeds(m, special)
    ref, ours = ort_run(m, f), ort_run(m2, f)
    worst = 0.0
    for k, r in ref.items():
        o = ours[k]
        assert o.shape == r.shape
        np.testing.assert_array_equal(np.isnan(o), np.isnan(r))
        fin = np.isfinite(r)
        np.testing.assert_array_equal(o[~fin], r[~fin])
        err = float(np.abs(o[fin].astype(np.float64) - r[fin]).max()) if fin.any() else 0.0
        worst = max(worst, err)
        bound = tol if tol is not None else 1e-6 * max(1.0, float(np.abs(r[fin]).max()))
        assert err <= bound, f"{name}: max abs error {err}"
    return new, worst


def ops(g):  # noqa: ANN001, ANN201
    return [n.op_type for n in g.nodes]


def test_hardswish_both_ways():
    g, _ = run_rule("hardswish_decompose", unary("HardSwish", 14))
    assert "HardSwish" not in ops(g) and "HardSigmoid" in ops(g)
    m = model(
        [
            helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["x", "h"], ["y"]),
        ],
        [("x", [2, 3, 4, 5])],
        ["y"],
        opset=14,
    )
    g, _ = run_rule("hardswish_fuse", m)
    assert ops(g) == ["HardSwish"]


def test_hardswish_relu6():
    g, _ = run_rule("hardswish_relu6", unary("HardSwish", 14), tol=1e-5)
    assert "Clip" in ops(g) and "HardSwish" not in ops(g)


def silu(opset):  # noqa: ANN001, ANN201
    return model(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])],
        [("x", [2, 3, 4, 5])],
        ["y"],
        opset=opset,
    )


def test_silu_to_hardswish_within_stated_bound():
    g, worst = run_rule("silu_to_hardswish", silu(14), tol=0.143)
    assert ops(g) == ["HardSwish"] and worst > 0.01  # it really is approximate


def test_swish_op_both_ways():
    pytest.importorskip("onnxruntime")
    g, _ = run_rule("silu_fuse", silu(24))
    assert ops(g) == ["Swish"]
    run_rule("silu_decompose", unary("Swish", 24, alpha=1.5))


@pytest.mark.parametrize("const_slope", [True, False])
def test_prelu_relu(const_slope):
    slope = np.linspace(-0.5, 0.7, 3).reshape(3, 1, 1)
    if const_slope:
        m = model(
            [helper.make_node("PRelu", ["x", "s"], ["y"])],
            [("x", [2, 3, 4, 5])],
            ["y"],
            [("s", slope)],
        )
    else:
        m = model(
            [helper.make_node("PRelu", ["x", "s"], ["y"])],
            [("x", [2, 3, 4, 5]), ("s", [3, 1, 1])],
            ["y"],
        )
    g, _ = run_rule("prelu_relu", m)
    assert "PRelu" not in ops(g)


def test_leakyrelu_maxmin():
    g, _ = run_rule("leakyrelu_maxmin", unary("LeakyRelu", alpha=0.1))
    assert {"Max", "Min"} <= set(ops(g)) and "LeakyRelu" not in ops(g)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_decompose(approximate):
    g, _ = run_rule(
        "gelu_decompose", unary("Gelu", 20, approximate=approximate), special=False, tol=2e-6
    )
    assert "Gelu" not in ops(g)


def test_gelu_tanh_and_erf_tanh_within_stated_bounds():
    _, worst = run_rule("gelu_tanh", unary("Gelu", 20), special=False, tol=4.8e-4)
    assert worst > 1e-5
    _, worst = run_rule(
        "gelu_erf", unary("Gelu", 20, approximate="tanh"), special=False, tol=4.8e-4
    )
    assert worst > 1e-5
    g, worst = run_rule("erf_tanh", unary("Erf"), tol=3.6e-4)
    assert "Erf" not in ops(g) and worst > 1e-5


def test_abs_relu():
    g, _ = run_rule("abs_relu", unary("Abs"))
    assert "Abs" not in ops(g)


@pytest.mark.parametrize("e", [2.0, 3.0, 5.0, 8.0, 0.5])
def test_pow_mul(e):
    m = model(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        [("x", [2, 3, 4, 5])],
        ["y"],
        [("e", np.array(e))],
    )
    special = e != 0.5  # sqrt of negatives is NaN on both sides; keep the check on finite values
    g, _ = run_rule("pow_mul", m, special=special, tol=None)
    assert "Pow" not in ops(g)


def test_sub_to_add():
    m = model(
        [helper.make_node("Sub", ["x", "c"], ["t"]), helper.make_node("Sub", ["t", "z"], ["y"])],
        [("x", [2, 3, 4, 5]), ("z", [1, 3, 1, 5])],
        ["y"],
        [("c", np.arange(5.0))],
    )
    g, _ = run_rule("sub_to_add", m)
    assert "Sub" not in ops(g)


def test_minmax_relu():
    m = model(
        [
            helper.make_node("Max", ["x", "zero"], ["a"]),
            helper.make_node("Min", ["zero", "x"], ["b"]),
            helper.make_node("Max", ["x", "z"], ["c"]),
            helper.make_node("Min", ["x", "half"], ["d"]),
        ],
        [("x", [2, 3, 4, 5]), ("z", [2, 3, 4, 5])],
        ["a", "b", "c", "d"],
        [("zero", np.array(0.0)), ("half", np.array(0.5))],
    )
    # Inf - Inf = NaN in the general forms: the finite-input contract is what the note states
    g, _ = run_rule("minmax_relu", m, special=False, tol=1e-6)
    assert "Max" not in ops(g) and "Min" not in ops(g)


def test_broadcast_explicit():
    m = model(
        [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Mul", ["t", "z"], ["y"])],
        [("x", [1, 3, 4, 4]), ("z", [1, 1, 4, 4])],
        ["y"],
        [("b", np.arange(3.0).reshape(3, 1, 1))],
    )
    g, _ = run_rule("broadcast_explicit", m)
    assert "Expand" in ops(g)
    assert all(v.shape == (1, 3, 4, 4) for v in g.initializers.values() if v.dtype == np.float32)


def test_gemm_conv_both_ways():
    rng = np.random.default_rng(1)
    m = model(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
        [("x", [2, 6])],
        ["y"],
        [("w", rng.standard_normal((4, 6))), ("c", rng.standard_normal(4))],
    )
    g, _ = run_rule("gemm_to_conv", m, special=False, tol=1e-5)
    assert "Conv" in ops(g) and "Gemm" not in ops(g)
    m = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])],
        [("x", [2, 8, 1, 1])],
        ["y"],
        [("w", rng.standard_normal((5, 8, 1, 1))), ("b", rng.standard_normal(5))],
    )
    g, _ = run_rule("conv_to_gemm", m, special=False, tol=1e-5)
    assert "Gemm" in ops(g) and "Conv" not in ops(g)


def test_matmul_add_gemm():
    rng = np.random.default_rng(2)
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["b", "t"], ["y"])],
        [("x", [3, 6])],
        ["y"],
        [("w", rng.standard_normal((6, 4))), ("b", rng.standard_normal((1, 4)))],
    )
    g, _ = run_rule("matmul_add_gemm", m, special=False, tol=1e-5)
    assert ops(g) == ["Gemm"]


def test_reshape_cleanup():
    m = model(
        [
            helper.make_node("Flatten", ["x"], ["f"], axis=1),
            helper.make_node("Reshape", ["f", "s"], ["r"]),
            helper.make_node("Relu", ["r"], ["q"]),
            helper.make_node("Reshape", ["q", "same"], ["y"]),
            helper.make_node("Reshape", ["q", "same"], ["z"]),
            helper.make_node("Add", ["z", "z"], ["w"]),
        ],
        [("x", [2, 3, 2, 2])],
        ["y", "w"],
        [("s", np.array([2, 12])), ("same", np.array([2, 12]))],
    )
    for t in m.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.int64), t.name))
    g, _ = run_rule("reshape_cleanup", m)
    # y keeps its Reshape (a graph output); the chain to r becomes one Reshape
    assert ops(g).count("Reshape") == 2 and "Flatten" not in ops(g)


@pytest.mark.parametrize(
    "mode,ctm,nm,scale",
    [
        ("nearest", "half_pixel", "round_prefer_floor", 2.0),
        ("nearest", "pytorch_half_pixel", "round_prefer_ceil", 3.0),
        ("nearest", "half_pixel", "round_prefer_ceil", 4.0),
        ("linear", "pytorch_half_pixel", "round_prefer_floor", 2.0),
    ],
)
def test_resize_normalize(mode, ctm, nm, scale):
    m = model(
        [
            helper.make_node(
                "Resize",
                ["x", "", "sc"],
                ["y"],
                mode=mode,
                coordinate_transformation_mode=ctm,
                nearest_mode=nm,
            )
        ],
        [("x", [1, 2, 5, 7])],
        ["y"],
        [("sc", np.array([1, 1, scale, scale]))],
    )
    g, _ = run_rule("resize_normalize", m, special=False)
    want = "asymmetric" if mode == "nearest" else "half_pixel"
    assert g.nodes[0].attr("coordinate_transformation_mode") == want


def test_resize_normalize_leaves_inexact_cases():
    m = model(
        [
            helper.make_node(
                "Resize",
                ["x", "", "sc"],
                ["y"],
                mode="nearest",
                coordinate_transformation_mode="align_corners",
            )
        ],
        [("x", [1, 2, 5, 7])],
        ["y"],
        [("sc", np.array([1, 1, 2.0, 2.0]))],
    )
    g = graph_from_model(infer_shapes(m))
    assert RULES["resize_normalize"].fn(g) is g


def test_rules_never_mutate_their_input():
    m = unary("HardSwish", 14)
    g = graph_from_model(infer_shapes(m))
    before = (g.nodes, dict(g.initializers))
    RULES["hardswish_relu6"].fn(g)
    assert (g.nodes, dict(g.initializers)) == before


@pytest.mark.parametrize("keepdims,opset", [(1, 17), (0, 17), (1, 18)])
def test_reducemean_to_gap(keepdims, opset):
    if opset >= 18:
        node = helper.make_node("ReduceMean", ["x", "ax"], ["y"], keepdims=keepdims)
        inits = [("ax", np.array([-1, 2]))]
    else:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=keepdims)
        inits = []
    m = model([node], [("x", [2, 3, 4, 5])], ["y"], opset=opset)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in inits
    )
    g, _ = run_rule("reducemean_to_gap", m, tol=1e-6)
    assert "GlobalAveragePool" in ops(g) and "ReduceMean" not in ops(g)


def test_rules_keep_initializers_read_inside_subgraphs():
    """An If branch reading an outer initializer: the rule rewrites a node elsewhere and the
    initializer survives (Graph.with_nodes alone would drop it)."""
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "outer"], ["b"])],
        "then",
        [],
        [helper.make_tensor_value_info("b", F, [2, 3, 4, 5])],
    )
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
        helper.make_node("Add", ["a", "y"], ["z"]),
    ]
    m = model(nodes, [("x", [2, 3, 4, 5])], ["z"], [("outer", np.ones((2, 3, 4, 5)))])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    g, _ = run_rule("abs_relu", m, special=False)
    assert "outer" in g.initializers


def test_transpose_cancel():
    m = model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
            helper.make_node("Relu", ["t"], ["r"]),
            helper.make_node("Add", ["r", "c"], ["a"]),
            helper.make_node("Transpose", ["a"], ["y"], perm=[0, 3, 1, 2]),
        ],
        [("x", [1, 3, 4, 5])],
        ["y"],
        [("c", np.arange(3.0))],
    )
    g, _ = run_rule("transpose_cancel", m)
    assert ops(g) == ["Relu", "Add"]
