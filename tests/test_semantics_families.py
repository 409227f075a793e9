"""The typed records of the remaining op families (semantics/pooling.py, shape_ops.py,
numeric.py, norms.py and records.py's Reduce / ArgMax / TopK): each record's claim - a
non-default attribute, and the opset difference it resolves - computed from the record in
numpy and checked against onnx's reference evaluator; inconsistent attributes raise the
project's error type (InvalidAttributes, an Onnx2EdgeError)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.ir import Graph, Node, TensorType, Value
from onnx2edge.ir.graph import Attr
from onnx2edge.semantics.attrs import gemm_attrs
from onnx2edge.semantics.conv_geometry import pool_geometry
from onnx2edge.semantics.invalid import InvalidAttributes
from onnx2edge.semantics.norms import group_norm_attrs, layer_norm_attrs, lp_norm_attrs, lrn_attrs
from onnx2edge.semantics.numeric import (
    cast_attrs,
    clip_attrs,
    gemm_dims,
    matmul_shape,
    quant_attrs,
)
from onnx2edge.semantics.pooling import pool_attrs
from onnx2edge.semantics.records import (
    arg_attrs,
    reduce_attrs,
    reduced_axes,
    topk_attrs,
)
from onnx2edge.semantics.reference import run_node
from onnx2edge.semantics.shape_ops import (
    axes_attr,
    axis_attr,
    depth_space_attrs,
    slice_attrs,
    split_attrs,
    transpose_perm,
)

RNG = np.random.default_rng(32)


def _node(op: str, inputs: tuple[str, ...] = ("x",), **attrs: object) -> Node:
    proto = oh.make_node(op, list(inputs), ["y"], **attrs)
    return Node(
        "n",
        op,
        tuple(inputs),
        ("y",),
        {a.name: Attr(a.type, oh.get_attribute_value(a)) for a in proto.attribute},
    )


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------
def _pool_numpy(node: Node, x: np.ndarray, opset: int) -> tuple[np.ndarray, np.ndarray]:
    """2-D pooling computed from the record and the geometry alone (values, MaxPool indices)."""
    pa = pool_attrs(node, opset, x.ndim)
    g = pool_geometry(node, x.shape, None, opset)
    N, C, H, W = x.shape
    OH, OW = g.out_spatial
    y = np.zeros((N, C, OH, OW), np.float32)
    idx = np.zeros((N, C, OH, OW), np.int64)
    for n in range(N):
        for c in range(C):
            for oh_ in range(OH):
                for ow_ in range(OW):
                    vals, where, cnt = [], [], 0
                    for kh in range(g.kernel[0]):
                        for kw in range(g.kernel[1]):
                            i = oh_ * g.strides[0] - g.pads[0] + kh * g.dilations[0]
                            j = ow_ * g.strides[1] - g.pads[1] + kw * g.dilations[1]
                            if 0 <= i < H and 0 <= j < W:
                                vals.append(x[n, c, i, j])
                                # storage_order 1 numbers the input column-major
                                flat = j * H + i if pa.storage_order else i * W + j
                                where.append(((n * C + c) * H * W) + flat)
                                cnt += 1
                            elif (
                                -g.pads[0] <= i < H + g.pads[2] and -g.pads[1] <= j < W + g.pads[3]
                            ):
                                cnt += pa.count_include_pad
                    if pa.op == "MaxPool":
                        k = int(np.argmax(vals))
                        y[n, c, oh_, ow_], idx[n, c, oh_, ow_] = vals[k], where[k]
                    elif pa.op == "AveragePool":
                        y[n, c, oh_, ow_] = np.sum(vals) / cnt
                    else:
                        y[n, c, oh_, ow_] = np.sum(np.abs(vals) ** pa.p) ** (1 / pa.p)
    return y, idx


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        ("AveragePool", 19, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", 11, {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]}),
        ("MaxPool", 12, {"kernel_shape": [2, 2], "storage_order": 1, "dilations": [1, 2]}),
        ("LpPool", 18, {"kernel_shape": [2, 2], "p": 3, "strides": [2, 2]}),
    ],
)
def test_pool_record_computes_what_the_reference_does(op: str, opset: int, attrs: dict) -> None:
    x = _x(1, 2, 5, 6)
    node = _node(op, **attrs)
    y, idx = _pool_numpy(node, x, opset)
    n_out = 2 if op == "MaxPool" else 1
    ref = run_node(op, [x], opset, attrs, n_outputs=n_out)
    np.testing.assert_allclose(y, ref[0], rtol=1e-5, atol=1e-6)
    if op == "MaxPool":
        np.testing.assert_array_equal(idx, ref[1])


def test_pool_record_opset_differences_and_validation() -> None:
    # dilations arrived on AveragePool in 19 (absent before: 1 per axis), LpPool's p is an
    # INT from opset 2 with default 2, count_include_pad only means something on AveragePool
    assert pool_attrs(_node("AveragePool", kernel_shape=[2, 2]), 18).dilations is None
    assert pool_attrs(_node("LpPool", kernel_shape=[2, 2]), 18).p == 2
    assert pool_attrs(_node("GlobalLpPool"), 2).is_global
    assert not pool_attrs(_node("MaxPool", kernel_shape=[2, 2]), 12).count_include_pad
    with pytest.raises(InvalidAttributes, match="pads has 2 values, 4 expected"):
        pool_attrs(_node("MaxPool", kernel_shape=[2, 2], pads=[1, 1]), 12, rank=4)
    with pytest.raises(InvalidAttributes, match="kernel_shape has 1 axes"):
        pool_attrs(_node("MaxPool", kernel_shape=[2]), 12, rank=4)
    with pytest.raises(Onnx2EdgeError, match="storage_order 2"):
        pool_attrs(_node("MaxPool", kernel_shape=[2, 2], storage_order=2), 12, rank=4)
    assert pool_attrs(_node("LpPool", kernel_shape=[2], p=1.5), 1).problem(3) is not None


# --------------------------------------------------------------------------------------------
# Gemm / MatMul
# --------------------------------------------------------------------------------------------
def test_gemm_record_and_dims_against_the_reference() -> None:
    a, b, c = _x(4, 3), _x(5, 4), _x(1, 5)
    attrs = {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}
    ga = gemm_attrs(_node("Gemm", ("a", "b", "c"), **attrs), 13)
    M, K, N = gemm_dims(ga, a.shape, b.shape)
    A = a.T if ga.trans_a else a
    B = b.T if ga.trans_b else b
    want = ga.alpha * A @ B + ga.beta * c
    assert (M, K, N) == (3, 4, 5)
    np.testing.assert_allclose(run_node("Gemm", [a, b, c], 13, attrs)[0], want, rtol=1e-5)
    # Gemm-6 and before take the same defaults (alpha = beta = 1, no transposes)
    d = gemm_attrs(_node("Gemm", ("a", "b", "c")), 6)
    assert (d.alpha, d.beta, d.trans_a, d.trans_b) == (1.0, 1.0, False, False)
    with pytest.raises(ValueError, match="inner sizes differ"):
        gemm_dims(d, (3, 4), (5, 2))


@pytest.mark.parametrize(
    ("a", "b"), [((2, 1, 3, 4), (5, 4, 2)), ((4,), (3, 4, 2)), ((2, 3, 4), (4,)), ((3,), (3,))]
)
def test_matmul_shape_broadcasts_as_the_reference(a: tuple, b: tuple) -> None:
    got = run_node("MatMul", [_x(*a), _x(*b)], 13)[0]
    assert matmul_shape(a, b) == got.shape


# --------------------------------------------------------------------------------------------
# Reduce*, ArgMax / ArgMin, TopK
# --------------------------------------------------------------------------------------------
def _graph(node: Node, opset: int, consts: dict[str, np.ndarray], x: np.ndarray) -> Graph:
    values = {
        "x": Value("x", TensorType(onnx.TensorProto.FLOAT, x.shape)),
        **{k: Value(k, TensorType(onnx.TensorProto.INT64, v.shape)) for k, v in consts.items()},
    }
    return Graph(
        name="g",
        nodes=(node,),
        inputs=("x",),
        outputs=("y",),
        values=values,
        initializers=consts,
        opset_imports={"": opset},
    )


@pytest.mark.parametrize(
    ("opset", "attrs", "axes_in", "want"),
    [
        (13, {"axes": [-1, 1], "keepdims": 0}, None, [1, 2]),  # an attribute before 18
        (18, {"keepdims": 0}, np.array([-1, 1]), [1, 2]),  # an input from 18
        (18, {"noop_with_empty_axes": 1}, None, []),  # none given: the identity
        (18, {}, None, [0, 1, 2]),  # none given: every axis
    ],
)
def test_reduce_axes_across_opsets(
    opset: int, attrs: dict, axes_in: np.ndarray | None, want: list[int]
) -> None:
    x = _x(2, 3, 4)
    inputs = ("x", "axes") if axes_in is not None else ("x",)
    node = _node("ReduceMean", inputs, **attrs)
    consts = {"axes": axes_in} if axes_in is not None else {}
    axes = reduced_axes(node, _graph(node, opset, consts, x), x.ndim)
    assert axes == want
    ra = reduce_attrs(node, opset)
    assert ra.axes_input == (opset >= 18)
    want_y = x if not axes else np.mean(x, axis=tuple(axes), keepdims=ra.keepdims)
    feeds = [x] + ([axes_in] if axes_in is not None else [])
    np.testing.assert_allclose(run_node("ReduceMean", feeds, opset, attrs)[0], want_y, rtol=1e-5)
    # ReduceSum took its axes as an input five opsets earlier
    assert reduce_attrs(_node("ReduceSum"), 13).axes_input
    with pytest.raises(InvalidAttributes, match="axes value 3"):
        reduce_attrs(_node("ReduceMean", axes=[3]), 13, rank=3)


def test_argmax_select_last_index_and_topk() -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    for opset, attrs in ((11, {"axis": 1}), (12, {"axis": -1, "select_last_index": 1})):
        aa = arg_attrs(_node("ArgMax", **attrs), opset, x.ndim)
        rev = x[:, ::-1]
        want = (
            x.shape[1] - 1 - np.argmax(rev, axis=aa.axis)
            if aa.select_last_index
            else np.argmax(x, aa.axis)
        )
        want = np.expand_dims(want, aa.axis) if aa.keepdims else want
        np.testing.assert_array_equal(run_node("ArgMax", [x], opset, attrs)[0], want)
    # TopK: k an attribute before 10, `largest` from 11 (1 before)
    assert topk_attrs(_node("TopK", k=2), 1).k == 2
    assert topk_attrs(_node("TopK", ("x", "k")), 10).largest
    ta = topk_attrs(_node("TopK", ("x", "k"), largest=0, axis=-2), 11, x.ndim)
    assert (ta.axis, ta.largest, ta.sorted, ta.k) == (0, False, True, None)
    vals = run_node("TopK", [x, np.array([1])], 11, {"largest": 0, "axis": -2}, n_outputs=2)[0]
    np.testing.assert_array_equal(vals, np.sort(x, axis=ta.axis)[:1])  # the smallest


# --------------------------------------------------------------------------------------------
# Normalisations
# --------------------------------------------------------------------------------------------
def test_layer_group_lrn_lp_norm_records() -> None:
    x = _x(2, 4, 3, 3)
    la = layer_norm_attrs(_node("LayerNormalization", ("x", "s"), axis=-2, epsilon=1e-3), 17, 4)
    assert (la.axis, la.stash_type) == (2, 1)
    red = tuple(range(la.axis, 4))
    s = _x(3, 3)
    want = (x - x.mean(red, keepdims=True)) / np.sqrt(x.var(red, keepdims=True) + la.epsilon) * s
    got = run_node("LayerNormalization", [x, s], 17, {"axis": -2, "epsilon": 1e-3})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    gn = group_norm_attrs(_node("GroupNormalization", num_groups=2), 21, channels=4)
    g = x.reshape(2, gn.num_groups, -1)
    want = (
        (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + gn.epsilon)
    ).reshape(x.shape)
    got = run_node(
        "GroupNormalization",
        [x, np.ones(4, np.float32), np.zeros(4, np.float32)],
        21,
        {"num_groups": 2},
    )[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # stash_type arrived in 21 with 1: GroupNormalization-18 means float32 statistics too
    assert group_norm_attrs(_node("GroupNormalization", num_groups=2), 18).stash_type == 1
    with pytest.raises(InvalidAttributes, match="4 channels do not split into 3 groups"):
        group_norm_attrs(_node("GroupNormalization", num_groups=3), 21, channels=4)

    # onnxruntime, not the evaluator: onnx 1.23's LRN loops over the batch, not the channels
    lr = lrn_attrs(_node("LRN", size=3, alpha=0.01, beta=0.5), 13)
    C = x.shape[1]
    sq = np.pad(x**2, ((0, 0), (lr.before, lr.after), (0, 0), (0, 0)))
    acc = sum(sq[:, k : k + C] for k in range(lr.size))
    want = x / (lr.bias + lr.alpha / lr.size * acc) ** lr.beta
    got = run_node("LRN", [x], 13, {"size": 3, "alpha": 0.01, "beta": 0.5}, engine="onnxruntime")
    np.testing.assert_allclose(got[0], want, rtol=1e-4)
    # the spec's window for an even size: floor((size-1)/2) before, ceil((size-1)/2) after
    even = lrn_attrs(_node("LRN", size=4), 13)
    assert (even.before, even.after, even.bias) == (1, 2, 1.0)

    lp = lp_norm_attrs(_node("LpNormalization", p=1, axis=1), 1, 4)
    want = x / np.abs(x).sum(axis=lp.axis, keepdims=True)
    # onnxruntime: onnx 1.23's evaluator sums x^p without the absolute value
    got = run_node("LpNormalization", [x], 1, {"p": 1, "axis": 1}, engine="onnxruntime")
    np.testing.assert_allclose(got[0], want, rtol=1e-5)
    with pytest.raises(InvalidAttributes, match="p 3"):
        lp_norm_attrs(_node("LpNormalization", p=3), 1, rank=4)


# --------------------------------------------------------------------------------------------
# Data movement: axis, perm, split, slice, squeeze, depth / space
# --------------------------------------------------------------------------------------------
def test_transpose_concat_flatten_gather_axes() -> None:
    x = _x(2, 3, 4)
    perm = transpose_perm(_node("Transpose"), 3)
    assert perm == (2, 1, 0)
    np.testing.assert_array_equal(run_node("Transpose", [x], 13)[0], x.transpose(perm))
    with pytest.raises(InvalidAttributes, match="not a permutation"):
        transpose_perm(_node("Transpose", perm=[0, 0, 1]), 3)
    # Flatten allows axis == rank (an [N, 1] result), Concat does not
    assert axis_attr(_node("Flatten", axis=3), 13, 3, inclusive=True) == 3
    assert run_node("Flatten", [x], 13, {"axis": 3})[0].shape == (24, 1)
    with pytest.raises(InvalidAttributes, match="axis 3 is outside"):
        axis_attr(_node("Concat", axis=3), 13, 3)
    assert axis_attr(_node("Gather", ("x", "i")), 13, 3) == 0  # the schema's default
    i = np.array([1, 0])
    a = axis_attr(_node("Gather", ("x", "i"), axis=-1), 13, 3)
    np.testing.assert_array_equal(run_node("Gather", [x, i], 13, {"axis": -1})[0], np.take(x, i, a))


def test_split_slice_squeeze_move_to_inputs() -> None:
    x = _x(2, 6)
    old = split_attrs(_node("Split", axis=1, split=[2, 4]), 11, 2)
    assert (old.axis, old.split) == (1, (2, 4))
    assert split_attrs(_node("Split", ("x", "s"), axis=1), 13).split is None  # input 1 from 13
    got = run_node("Split", [x], 11, {"axis": 1, "split": [2, 4]}, n_outputs=2)
    for part, want in zip(got, np.split(x, np.cumsum(old.split)[:-1], axis=old.axis), strict=True):
        np.testing.assert_array_equal(part, want)
    assert split_attrs(_node("Split", num_outputs=3), 18).num_outputs == 3

    sa = slice_attrs(_node("Slice", starts=[1, -3], ends=[2, 100]), 1)
    assert sa is not None and sa.axes == (0, 1) and sa.steps == (1, 1)
    want = x[tuple(slice(s, e) for s, e in zip(sa.starts, sa.ends, strict=True))]
    sl = run_node("Slice", [x], 9, {"starts": [1, -3], "ends": [2, 100]}, engine="onnxruntime")
    np.testing.assert_array_equal(sl[0], want)
    assert slice_attrs(_node("Slice", ("x", "s", "e")), 10) is None

    y = _x(1, 3, 1)
    sq = axes_attr(_node("Squeeze", axes=[-1]), 11, rank=3)
    assert sq == (2,)
    np.testing.assert_array_equal(run_node("Squeeze", [y], 11, {"axes": [-1]})[0], y.squeeze(sq))
    assert axes_attr(_node("Squeeze", ("x", "a")), 13) is None  # input 1 from 13
    with pytest.raises(InvalidAttributes, match="repeats"):
        axes_attr(_node("Unsqueeze", axes=[0, -4]), 11, rank=4)


@pytest.mark.parametrize(
    ("op", "opset", "mode"), [("DepthToSpace", 13, "CRD"), ("DepthToSpace", 1, None)]
)
def test_depth_to_space_mode(op: str, opset: int, mode: str | None) -> None:
    x = _x(1, 8, 2, 3)
    attrs = {"blocksize": 2, **({"mode": mode} if mode else {})}
    ds = depth_space_attrs(_node(op, **attrs), opset)
    assert ds.mode == (mode or "DCR")  # DepthToSpace-1 has no mode: DCR
    b, (N, C, H, W) = ds.blocksize, x.shape
    if ds.mode == "DCR":
        t = x.reshape(N, b, b, C // 4, H, W).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(N, C // 4, b, b, H, W).transpose(0, 1, 4, 2, 5, 3)
    want = t.reshape(N, C // 4, H * b, W * b)
    np.testing.assert_array_equal(run_node(op, [x], opset, attrs)[0], want)
    with pytest.raises(InvalidAttributes, match="unknown mode"):
        depth_space_attrs(_node(op, blocksize=2, mode="XYZ"), 13)


# --------------------------------------------------------------------------------------------
# Cast, Clip, QuantizeLinear / DequantizeLinear
# --------------------------------------------------------------------------------------------
def test_clip_bounds_are_attributes_before_11() -> None:
    x = np.array([np.inf, -np.inf, 5, -5, 0.5], np.float32)
    ca = clip_attrs(_node("Clip"), 6)
    assert not ca.from_inputs and ca.max == float(np.finfo(np.float32).max)
    # an absent Clip-6 bound is the float32 extreme: it clamps +-Inf
    want = np.clip(x, np.float32(ca.min), np.float32(ca.max))
    np.testing.assert_array_equal(run_node("Clip", [x], 6)[0], want)
    ca = clip_attrs(_node("Clip", min=-1.0), 6)
    np.testing.assert_array_equal(
        run_node("Clip", [x], 6, {"min": -1.0})[0], np.clip(x, ca.min, ca.max)
    )
    assert clip_attrs(_node("Clip", ("x", "lo")), 11).from_inputs


def test_cast_saturate_and_to() -> None:
    x = np.array([1e6, -1e6, 1.0], np.float32)
    f8 = onnx.TensorProto.FLOAT8E4M3FN
    for opset, attrs in ((19, {"to": f8}), (19, {"to": f8, "saturate": 0})):
        ca = cast_attrs(_node("Cast", **attrs), opset)
        got = run_node("Cast", [x], opset, attrs)[0].astype(np.float32)
        # saturate clamps to float8e4m3fn's largest finite value (448), else NaN
        assert (got[0] == 448.0) == ca.saturate and np.isnan(got[0]) != ca.saturate
    assert cast_attrs(_node("Cast", to=1), 13).saturate  # before 19: 19's default
    assert cast_attrs(_node("Cast", to=10), 13).dtype == np.float16
    with pytest.raises(InvalidAttributes, match="not an ONNX data type"):
        cast_attrs(_node("Cast", to=999), 13)


def test_quantize_axis_and_block_size() -> None:
    x = _x(2, 4)
    s = np.array([0.1, 0.2], np.float32)
    qa = quant_attrs(_node("QuantizeLinear", ("x", "s"), axis=0), 13)
    assert (qa.axis, qa.block_size, qa.saturate) == (0, 0, True)
    want = np.clip(np.rint(x / s.reshape(2, 1)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(run_node("QuantizeLinear", [x, s], 13, {"axis": 0})[0], want)
    # blocked scales (21): one scale per block_size elements along axis
    sb = np.array([[0.1, 0.3], [0.2, 0.4]], np.float32)
    qb = quant_attrs(_node("QuantizeLinear", ("x", "s"), axis=1, block_size=2), 21)
    full = np.repeat(sb, qb.block_size, axis=qb.scale_axis(2))
    want = np.clip(np.rint(x / full), 0, 255).astype(np.uint8)
    got = run_node("QuantizeLinear", [x, sb], 21, {"axis": 1, "block_size": 2})[0]
    np.testing.assert_array_equal(got, want)
    # before 13 there is no axis (the scale is a scalar): the nearest version's default, 1
    assert quant_attrs(_node("DequantizeLinear", ("x", "s")), 10).axis == 1
    assert quant_attrs(_node("QuantizeLinear", ("x", "s"), block_size=-1), 21).problem() is not None


def test_inconsistent_attributes_are_one_line_and_exit_2(tmp_path, capsys) -> None:  # noqa: ANN001
    """A record's InvalidAttributes reaches the user as the CLI's one-line error, exit 2,
    nothing written."""
    from onnx2edge.cli import main

    graph = oh.make_graph(
        [oh.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="XYZ")],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 2, 2])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert main(["convert", str(tmp_path / "m.onnx"), "--target", "c", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "onnx2edge: error: node 'd2s' (op DepthToSpace, opset 13): unknown mode 'XYZ' (DCR or CRD)"
    )
    assert "Traceback" not in "\n".join(err)
    assert not out.exists()


@pytest.mark.parametrize("bounds", [{}, {"min": -1.0}])
def test_c_clip_6_absent_bound_clamps_inf(tmp_path, bounds: dict) -> None:  # noqa: ANN001
    """The C backend reads Clip-6's bounds from the record: an absent bound is the schema's
    float32 extreme, so +-Inf clamp to +-FLT_MAX as in onnxruntime (it used to emit no clamp)."""
    from onnx2edge import api

    graph = oh.make_graph(
        [oh.make_node("Clip", ["x"], ["y"], name="clip", **bounds)],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 6)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    x = np.array([np.inf, -np.inf, np.nan, 2.5, -3.0, -0.0], np.float32)
    rep = api.verify(tmp_path / "m.onnx", target="c", inputs={"x": x}, rtol=0, atol=0)
    assert rep.ok, rep.format()
