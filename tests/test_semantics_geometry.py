"""semantics/conv_geometry.py and attrs.py against onnx shape inference and onnxruntime.

Each case: the output size the geometry computes equals onnx shape inference and the shape
onnxruntime produces; for Conv / ConvTranspose the resolved pads, written back as explicit
pads with auto_pad NOTSET, give onnxruntime's exact output of the original node."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from onnx2edge.ir.proto import graph_from_model
from onnx2edge.semantics.attrs import attr, attrs, defaults, epsilon, gemm_attrs
from onnx2edge.semantics.conv_geometry import (
    conv_geometry,
    conv_transpose_geometry,
    geometry,
    pool_geometry,
    window_output,
)

OPSET = 19


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray]) -> onnx.ModelProto:
    x = inputs["x"]
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in inputs.items() if k != "x"],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m


def _run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    if any(
        a.name == "dilations" and any(v != 1 for v in a.ints) for a in m.graph.node[0].attribute
    ) and any(a.name == "auto_pad" and a.s.startswith(b"SAME") for a in m.graph.node[0].attribute):
        # onnxruntime refuses dilations with SAME padding: onnx's reference evaluator instead
        return ReferenceEvaluator(m).run(None, {"x": x})[0]
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _inferred(m: onnx.ModelProto) -> tuple[int, ...]:
    inf = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    t = inf.graph.output[0].type.tensor_type
    return tuple(d.dim_value for d in t.shape.dim)


def _ir_node(m: onnx.ModelProto):  # noqa: ANN202
    return graph_from_model(m).nodes[0]


CONV = [
    dict(),
    dict(pads=[1, 0, 2, 1], strides=[2, 3]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 1], dilations=[2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[3, 2], dilations=[1, 2]),
    dict(auto_pad="VALID", strides=[2, 2]),
    dict(dilations=[2, 3], pads=[2, 1, 0, 3]),
    dict(group=2, strides=[1, 2], pads=[1, 1, 1, 1]),
]


@pytest.mark.parametrize("kw", CONV, ids=[str(i) for i in range(len(CONV))])
@pytest.mark.parametrize("hw", [(7, 9), (8, 8), (5, 6)])
def test_conv_geometry_matches_onnxruntime(kw: dict, hw: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    g = kw.get("group", 1)
    x = rng.standard_normal((1, 4, *hw)).astype(np.float32)
    w = rng.standard_normal((6, 4 // g, 3, 2)).astype(np.float32)
    m = _model(oh.make_node("Conv", ["x", "w"], ["y"], **kw), {"x": x, "w": w})
    geo = conv_geometry(_ir_node(m), x.shape, w.shape)
    ref = _run(m, x)
    assert (1, 6, *geo.out_spatial) == ref.shape == _inferred(m)
    assert geo.group == g and geo.in_per_group == 4 // g and geo.out_per_group == 6 // g
    explicit = {k: v for k, v in kw.items() if k not in ("auto_pad", "pads")}
    m2 = _model(
        oh.make_node("Conv", ["x", "w"], ["y"], pads=list(geo.pads), **explicit), {"x": x, "w": w}
    )
    np.testing.assert_allclose(_run(m2, x), ref, rtol=1e-6, atol=1e-6)
    # given the output shape, the same pads
    assert conv_geometry(_ir_node(m), x.shape, w.shape, ref.shape) == geo


def test_conv_1d_and_3d() -> None:
    rng = np.random.default_rng(1)
    for shape, k in (((1, 2, 11), (3,)), ((1, 2, 5, 6, 7), (3, 2, 2))):
        x = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal((3, 2, *k)).astype(np.float32)
        n = len(k)
        m = _model(
            oh.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2] * n),
            {"x": x, "w": w},
        )
        geo = conv_geometry(_ir_node(m), x.shape, w.shape)
        assert (1, 3, *geo.out_spatial) == _run(m, x).shape
        assert geo.rank == n and len(geo.pads) == 2 * n


TRANSPOSE = [
    dict(strides=[2, 2]),
    dict(strides=[2, 3], pads=[1, 0, 0, 2], output_padding=[1, 2]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[3, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], output_shape=[12, 11]),
    dict(strides=[2, 2], output_shape=[10, 12], auto_pad="SAME_UPPER"),
    dict(strides=[1, 2], dilations=[2, 1], pads=[1, 1, 1, 1]),
    dict(group=2, strides=[2, 1]),
]


@pytest.mark.parametrize("kw", TRANSPOSE, ids=[str(i) for i in range(len(TRANSPOSE))])
def test_conv_transpose_geometry_matches_onnxruntime(kw: dict) -> None:
    rng = np.random.default_rng(2)
    g = kw.get("group", 1)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6 // g, 3, 3)).astype(np.float32)
    m = _model(oh.make_node("ConvTranspose", ["x", "w"], ["y"], **kw), {"x": x, "w": w})
    geo = conv_transpose_geometry(_ir_node(m), x.shape, w.shape)
    ref = _run(m, x)
    assert (1, 6, *geo.out_spatial) == ref.shape
    keep = {k: v for k, v in kw.items() if k in ("strides", "dilations", "group")}
    total = [ref.shape[2 + i] + geo.pads[i] + geo.pads[i + 2] for i in range(2)]
    full = [geo.strides[i] * (x.shape[2 + i] - 1) + geo.extent[i] for i in range(2)]
    opad = [t - f for t, f in zip(total, full, strict=True)]
    m2 = _model(
        oh.make_node(
            "ConvTranspose", ["x", "w"], ["y"], pads=list(geo.pads), output_padding=opad, **keep
        ),
        {"x": x, "w": w},
    )
    np.testing.assert_allclose(_run(m2, x), ref, rtol=0, atol=0)
    assert conv_transpose_geometry(_ir_node(m), x.shape, w.shape, ref.shape) == geo


POOL = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[3, 3], auto_pad="SAME_LOWER")),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1, pads=[0, 1, 0, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], auto_pad="VALID")),
    ("LpPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("GlobalAveragePool", dict()),
    ("GlobalMaxPool", dict()),
]


@pytest.mark.parametrize("op,kw", POOL, ids=[str(i) for i in range(len(POOL))])
@pytest.mark.parametrize("hw", [(7, 9), (8, 8)])
def test_pool_geometry_matches_onnxruntime(op: str, kw: dict, hw: tuple[int, int]) -> None:
    x = np.random.default_rng(3).standard_normal((1, 3, *hw)).astype(np.float32)
    m = _model(oh.make_node(op, ["x"], ["y"], **kw), {"x": x})
    geo = pool_geometry(_ir_node(m), x.shape)
    assert (1, 3, *geo.out_spatial) == _run(m, x).shape
    if not kw.get("ceil_mode"):
        # with ceil_mode onnx 1.23's inference keeps a window that starts in the end pad
        # (7x9 input, 3x2/2 pads 1: width 6) where onnxruntime drops it (5); we follow onnxruntime
        assert (1, 3, *geo.out_spatial) == _inferred(m)
    assert geometry(_ir_node(m), x.shape) == geo
    assert geo.ceil_mode == bool(kw.get("ceil_mode", 0))


def test_window_output_ceil_rule() -> None:
    # ceil would add a window starting in the end pad only: dropped (onnxruntime, PyTorch)
    assert window_output(6, 2, 2, 1, 0, 1, ceil_mode=True) == 3
    assert window_output(5, 2, 2, 1, 0, 0, ceil_mode=True) == 3
    assert window_output(5, 2, 2, 1, 0, 0) == 2


def test_attr_defaults_come_from_the_schema() -> None:
    bn = oh.make_node("BatchNormalization", list("xsbmv"), ["y"])
    m = onnx.ModelProto()
    assert defaults("BatchNormalization", 15)["epsilon"] == np.float32(1e-5)
    node = _ir_node(_model(oh.make_node("Relu", ["x"], ["y"]), {"x": np.zeros(1, np.float32)}))
    assert attrs(node) == {}
    del bn, m
    gemm = oh.make_node("Gemm", ["x", "w"], ["y"], transB=1, alpha=2.0)
    m = _model(gemm, {"x": np.zeros((1, 2), np.float32), "w": np.zeros((3, 2), np.float32)})
    ga = gemm_attrs(_ir_node(m))
    assert (ga.alpha, ga.beta, ga.trans_a, ga.trans_b) == (2.0, 1.0, False, True)
    ln = _model(
        oh.make_node("LeakyRelu", ["x"], ["y"]), {"x": np.zeros(1, np.float32)}
    )  # alpha default 0.01 (float32) from the schema
    assert attr(_ir_node(ln), "alpha") == float(np.float32(0.01))
    inn = oh.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    mi = _model(
        inn,
        {
            "x": np.zeros((1, 2, 3), np.float32),
            "s": np.ones(2, np.float32),
            "b": np.zeros(2, np.float32),
        },
    )
    assert epsilon(_ir_node(mi)) == float(np.float32(1e-5))
    # an explicit epsilon=1e-5 decodes to the same float32 value as the default
    inn2 = oh.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    mi2 = _model(
        inn2,
        {
            "x": np.zeros((1, 2, 3), np.float32),
            "s": np.ones(2, np.float32),
            "b": np.zeros(2, np.float32),
        },
    )
    assert epsilon(_ir_node(mi2)) == epsilon(_ir_node(mi))


def test_geometry_dispatches_fused_ops_on_their_base_op() -> None:
    """o2e.ConvTransposeAct is a ConvTranspose (output 2 * (5 - 1) + 3 = 11), o2e.QMaxPool a pool."""
    from onnx import AttributeProto

    from onnx2edge.ir import Attr, Node

    st = {"strides": Attr(AttributeProto.INTS, [2, 2])}
    deconv = Node("d", "ConvTransposeAct", ("x", "w"), ("y",), st, domain="o2e")
    g = geometry(deconv, (1, 4, 5, 5), (4, 3, 3, 3))
    assert (g.kind, g.out_spatial, g.out_channels) == ("conv_transpose", (11, 11), 3)
    ks = {"kernel_shape": Attr(AttributeProto.INTS, [3, 3]), **st}
    pool = Node("p", "QMaxPool", ("x",), ("y",), ks, domain="o2e")
    assert geometry(pool, (1, 4, 9, 9)).out_spatial == (4, 4)
