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


# --------------------------------------------------------------------------------------------
# LRN and Instance/GroupNormalization kernels (norm.py): vectorised, split across threads
# --------------------------------------------------------------------------------------------
def _run_c(tmp_path: Path, model, feeds: dict[str, np.ndarray]) -> tuple[dict, dict]:  # noqa: ANN001
    """Convert and run `model` with the default build; (outputs, kernels used)."""
    out = tmp_path / "out"
    res = api.convert(save(model, tmp_path / "m.onnx"), "c", out)
    return api.run(out, feeds), res.stats["kernels"]


def _lrn_ref(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """The ONNX LRN formula in float64 (onnxruntime has no even sizes and no float64 LRN), with
    the attributes as float32, as the model stores them."""
    alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
    C, lo = x.shape[1], (size - 1) // 2
    sq = np.square(x.astype(np.float64))
    s = np.stack([sq[:, max(0, c - lo) : c - lo + size].sum(axis=1) for c in range(C)], axis=1)
    return x / (bias + alpha / size * s) ** beta


def _max_rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize(
    ("size", "beta"),
    [(5, 0.75), (3, 0.75), (3, 0.5), (5, 1.0), (3, 0.6), (1, 0.75)],
    ids=lambda v: str(v),
)
def test_lrn_kernel_matches_onnxruntime(tmp_path: Path, size: int, beta: float) -> None:
    """beta 0.75 / 0.5 / 1 have exact short forms, other betas use powf; 143 and 400 pixels
    leave partial pixel blocks and vector tails; alpha large enough that the window counts."""
    nodes = [
        helper.make_node("LRN", [i], [o], size=size, alpha=0.5, beta=beta, bias=1.5)
        for i, o in (("x", "y"), ("z", "w"))
    ]
    rng = np.random.default_rng(6)
    feeds = {
        "x": (rng.standard_normal((2, 7, 13, 11)) * 2).astype(np.float32),
        "z": (rng.standard_normal((1, 9, 20, 20)) * 3).astype(np.float32),
    }
    ins = [vi("x", [2, 7, 13, 11]), vi("z", [1, 9, 20, 20])]
    outs = [vi("y", [2, 7, 13, 11]), vi("w", [1, 9, 20, 20])]
    _verify(tmp_path, nodes, ins, outs, feeds=feeds)


@pytest.mark.parametrize(
    ("size", "beta", "elem"),
    [(4, 0.75, F32), (2, 0.6, F32), (5, 0.75, F64), (4, 0.6, F64)],
    ids=["even4", "even2_pow", "f64", "f64_even_pow"],
)
def test_lrn_even_size_and_float64(tmp_path: Path, size: int, beta: float, elem: int) -> None:
    """Even sizes put one more channel after c than before; float64 keeps double throughout."""
    dt = np.float32 if elem == F32 else np.float64
    shape = [2, 6, 9, 17]
    x = (np.random.default_rng(7).standard_normal(shape) * 2).astype(dt)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=beta, bias=2.0)
    m = make_model([node], [vi("x", shape, elem)], [vi("y", shape, elem)])
    got, kernels = _run_c(tmp_path, m, {"x": x})
    assert kernels.get("LRN: channel window vectorised over pixels") == 1, kernels
    assert got["y"].dtype == dt
    err = _max_rel(got["y"], _lrn_ref(x, size, 0.3, beta, 2.0))
    assert err <= (2e-6 if dt == np.float32 else 1e-13), err


def _instance_norm_ref(x: np.ndarray, s: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    axes = tuple(range(2, x.ndim))
    mean, var = x64.mean(axis=axes, keepdims=True), x64.var(axis=axes, keepdims=True)
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    return (x64 - mean) / np.sqrt(var + eps) * s.reshape(bshape) + b.reshape(bshape)


def test_instance_norm_large_plane_large_mean(tmp_path: Path) -> None:
    """A 300x350 plane (not a whole number of blocks) whose mean is 1000x its spread: a float
    sum of squares would lose every digit of the variance; the fused Relu runs in the kernel."""
    rng = np.random.default_rng(8)
    shape = [2, 3, 300, 350]
    x = rng.standard_normal(shape) * 0.5 + np.array([1000.0, -300.0, 5.0]).reshape(1, 3, 1, 1)
    x = x.astype(np.float32)
    s = rng.standard_normal(3).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["t"], epsilon=1e-5),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    m = make_model(nodes, [vi("x", shape)], [vi("y", shape)], [tensor("s", s), tensor("b", b)])
    got, kernels = _run_c(tmp_path, m, {"x": x})
    assert kernels == {"InstanceNormalization: one-pass blocked moments + Relu": 1}, kernels
    ref = np.maximum(_instance_norm_ref(x, s, b, 1e-5), 0)
    assert _max_rel(got["y"], ref) <= 1e-6


def test_group_norm_and_fused_activations(tmp_path: Path) -> None:
    """GroupNormalization of 2-channel groups (opset 21: scale and bias per channel; the checker
    rejects opset-18 models); two InstanceNormalizations with a LeakyRelu and a HardSigmoid
    fused (their parameters are part of the kernel's name, so each gets its own kernel)."""
    rng = np.random.default_rng(9)
    C, groups = 6, 3
    f32 = lambda name, k: tensor(name, rng.standard_normal(k).astype(np.float32))  # noqa: E731
    inits = [f32("s", C), f32("b", C), f32("s6", C), f32("b6", C)]
    nodes = [
        helper.make_node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=groups),
        helper.make_node("InstanceNormalization", ["x", "s6", "b6"], ["i1"]),
        helper.make_node("LeakyRelu", ["i1"], ["y"], alpha=0.2),
        helper.make_node("InstanceNormalization", ["x", "b6", "s6"], ["i2"]),
        helper.make_node("HardSigmoid", ["i2"], ["z"], alpha=0.3, beta=0.4),
    ]
    shape = [2, C, 7, 45]
    feeds = {"x": (rng.standard_normal(shape) * 3 + 40).astype(np.float32)}
    outs = [vi(o, shape) for o in ("g", "y", "z")]
    _verify(tmp_path, nodes, [vi("x", shape)], outs, inits, 21, feeds)
    kernels = api.convert(tmp_path / "m.onnx", "c", tmp_path / "k").stats["kernels"]
    assert kernels == {
        "GroupNormalization: one-pass blocked moments": 1,
        "InstanceNormalization: one-pass blocked moments + LeakyRelu": 1,
        "InstanceNormalization: one-pass blocked moments + HardSigmoid": 1,
    }, kernels
    code = (tmp_path / "k" / "model.c").read_text()
    assert "static void o2e_group_norm_f32_leakyrelu_3e4ccccd_00000000(" in code


def test_instance_norm_float64_with_fused_activation(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    shape = [2, 3, 5, 301]
    x = rng.standard_normal(shape) * 2 + 1e4
    s, b = rng.standard_normal(3), rng.standard_normal(3)
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["t"], epsilon=1e-3),
        helper.make_node("Tanh", ["t"], ["y"]),
    ]
    m = make_model(
        nodes, [vi("x", shape, F64)], [vi("y", shape, F64)], [tensor("s", s), tensor("b", b)]
    )
    got, kernels = _run_c(tmp_path, m, {"x": x})
    assert kernels == {"InstanceNormalization: one-pass blocked moments + Tanh": 1}, kernels
    assert _max_rel(got["y"], np.tanh(_instance_norm_ref(x, s, b, 1e-3))) <= 1e-10


@pytest.mark.parametrize(
    "flags",
    [
        ["-O2"],
        ["-O3", "-march=native", "-ffp-contract=fast", "-DO2E_THREADS=2", "-pthread"],
        ["-march=native", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
        + ["-DO2E_THREADS=3", "-pthread"],
    ],
    ids=["portable_serial", "native_2threads", "asan_3threads"],
)
def test_norm_kernels_threads_and_portable_builds(
    tmp_path: Path, flags: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Converted with the parallel threshold at zero, so even these small ops are split across
    the threads (units of whole planes / pixel blocks); the portable build has no intrinsics."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.backends.c.kernels import par_split
    from onnx2edge.runtime import ort_run

    rng = np.random.default_rng(11)
    shape = [2, 5, 17, 19]
    inits = [
        tensor("s", rng.standard_normal(5).astype(np.float32)),
        tensor("b", rng.standard_normal(5).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("LRN", ["x"], ["l1"], size=5, alpha=0.4, beta=0.75, bias=1.0),
        helper.make_node("LRN", ["x"], ["l2"], size=3, alpha=0.4, beta=0.65, bias=1.0),
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["t"]),
        helper.make_node("Relu", ["t"], ["r"]),
    ]
    names = ["l1", "l2", "r"]
    m = make_model(nodes, [vi("x", shape)], [vi(n, shape) for n in names], inits)
    feeds = {"x": (rng.standard_normal(shape) * 2 + 1).astype(np.float32)}
    monkeypatch.setattr(par_split, "PAR_MIN_US", 0)  # norms split by the work-per-thread rule
    out = tmp_path / "out"
    api.convert(save(m, tmp_path / "m.onnx"), "c", out)
    code = (out / "model.c").read_text()
    assert code.count("o2e_parallel_for(") == 3, code
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "m"), io, feeds, tmp_path)
    ref = ort_run(m, feeds)
    for n in names:
        assert _max_rel(got[n], ref[n]) <= 1e-5, n
