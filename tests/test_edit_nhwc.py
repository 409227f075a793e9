"""`onnx2edge nhwc`: NHWC image inputs / outputs, at most one Transpose per image input and
output, Transposes of the model's own that meet the boundary ones cancel; every result is
verified against the original in onnxruntime (inside `nhwc`, and again here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge.cli import main
from onnx2edge.edit.nhwc import count_transposes, nhwc, optimize_transposes
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.frontend.loader import infer_shapes
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.runtime import ort_run

F = TensorProto.FLOAT
FIXTURES = Path(__file__).parent / "fixtures" / "torch"


def save(tmp_path, name, nodes, inputs, outputs, inits=()):  # noqa: ANN001, ANN201
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / f"{name}.onnx"
    onnx.save(m, p)
    return p


def check_nhwc(src, out, n_boundary):  # noqa: ANN001, ANN201
    res = nhwc(src, out)
    assert res["verify"]["ok"]
    orig, new = onnx.load(src), onnx.load(out)
    # independent re-check: the NHWC model on transposed inputs = the original, transposed
    rng = np.random.default_rng(7)
    feeds = {}
    for vi in orig.graph.input:
        shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    ref = ort_run(orig, feeds)
    got = ort_run(
        new,
        {k: (v.transpose(0, 2, 3, 1) if k in res["nhwc_inputs"] else v) for k, v in feeds.items()},
    )
    for k, r in ref.items():
        o = got[k].transpose(0, 3, 1, 2) if k in res["nhwc_outputs"] else got[k]
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)
    assert res["transposes"]["after"] <= n_boundary + res["transposes"]["before"]
    return res


def test_plain_nchw_model_gets_one_transpose_per_boundary(tmp_path):
    rng = np.random.default_rng(0)
    src = save(
        tmp_path,
        "plain",
        [
            helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [("x", [1, 3, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [("w", rng.standard_normal((4, 3, 3, 3)))],
    )
    res = check_nhwc(src, tmp_path / "o.onnx", 2)
    assert res["transposes"]["after"] == 2
    new = onnx.load(tmp_path / "o.onnx")
    assert [d.dim_value for d in new.graph.input[0].type.tensor_type.shape.dim] == [1, 8, 8, 3]
    assert [d.dim_value for d in new.graph.output[0].type.tensor_type.shape.dim] == [1, 8, 8, 4]


def test_model_layout_transposes_cancel(tmp_path):
    """TensorFlow-style: the model itself goes NCHW -> NHWC for agnostic ops (Relu, Add of a
    per-channel constant, Softmax over channels, Concat, ReduceMean) and back before Conv:
    the boundary Transpose cancels the model's, and the ops get remapped axes / constants."""
    rng = np.random.default_rng(1)
    src = save(
        tmp_path,
        "tfstyle",
        [
            helper.make_node("Transpose", ["x"], ["t0"], perm=[0, 2, 3, 1]),
            helper.make_node("Relu", ["t0"], ["r"]),
            helper.make_node("Add", ["r", "bias"], ["a"]),
            helper.make_node("Softmax", ["a"], ["sm"], axis=-1),
            helper.make_node("Transpose", ["x"], ["t2"], perm=[0, 2, 3, 1]),
            helper.make_node("Concat", ["sm", "t2"], ["cat"], axis=3),
            helper.make_node("ReduceMean", ["cat"], ["mean"], axes=[1, 2], keepdims=1),
            helper.make_node("Mul", ["cat", "mean"], ["scaled"]),
            helper.make_node("Transpose", ["scaled"], ["t1"], perm=[0, 3, 1, 2]),
            helper.make_node("Conv", ["t1", "w"], ["y"], kernel_shape=[1, 1]),
        ],
        [("x", [1, 3, 8, 8])],
        [("y", [1, 4, 8, 8])],
        [("bias", rng.standard_normal(3)), ("w", rng.standard_normal((4, 6, 1, 1)))],
    )
    res = check_nhwc(src, tmp_path / "o.onnx", 2)
    assert res["transposes"]["before"] == 3
    # input side: all cancelled; output side: the one before Conv stays, plus the output's
    assert res["transposes"]["after"] == 2
    ops = [n.op_type for n in onnx.load(tmp_path / "o.onnx").graph.node]
    assert ops.index("Transpose") > ops.index("Concat")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_in_nhwc_section_is_remapped(tmp_path, mode):
    """x -> NHWC -> Resize(scales 1,2,2,1) -> back: the Resize runs on the NCHW data with
    permuted scales and both model Transposes cancel."""
    src = save(
        tmp_path,
        f"rs_{mode}",
        [
            helper.make_node("Transpose", ["x"], ["t0"], perm=[0, 2, 3, 1]),
            helper.make_node("Resize", ["t0", "", "sc"], ["r"], mode=mode),
            helper.make_node("Transpose", ["r"], ["y"], perm=[0, 3, 1, 2]),
        ],
        [("x", [1, 3, 4, 5])],
        [("y", [1, 3, 8, 10])],
        [("sc", np.array([1, 2, 2, 1]))],
    )
    res = check_nhwc(src, tmp_path / "o.onnx", 2)
    assert res["transposes"] == {"before": 2, "after": 0}


def test_optimize_transposes_keeps_useless_moves_undone(tmp_path):
    src = save(
        tmp_path,
        "lone",
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
            helper.make_node("Relu", ["t"], ["y"]),
        ],
        [("x", [1, 3, 4, 4])],
        [("y", [1, 4, 4, 3])],
    )
    g = graph_from_model(infer_shapes(onnx.load(src)))
    assert optimize_transposes(g) is g and count_transposes(g) == 1


@pytest.mark.parametrize(
    "name,n_out", [("resize_decoder.torchscript", 1), ("mobilenetv3_block.dynamo", 0)]
)
def test_torch_exports(tmp_path, name, n_out):
    res = check_nhwc(FIXTURES / f"{name}.onnx", tmp_path / "o.onnx", 1 + n_out)
    assert res["transposes"]["after"] == 1 + n_out and len(res["nhwc_outputs"]) == n_out


def test_seed_network_unet(tmp_path):
    from onnx2edge.bench import zoo

    src = tmp_path / "unet.onnx"
    zoo.save("unet_small", src)
    res = check_nhwc(src, tmp_path / "o.onnx", 2)
    assert res["transposes"] == {"before": 0, "after": 2}


def test_refusals(tmp_path, capsys):
    src = save(
        tmp_path, "vec", [helper.make_node("Relu", ["x"], ["y"])], [("x", [2, 3])], [("y", [2, 3])]
    )
    with pytest.raises(Onnx2EdgeError, match="no rank-4"):
        nhwc(src, tmp_path / "o.onnx")
    assert main(["nhwc", str(src), "-o", str(tmp_path / "o.onnx"), "--inputs", "x"]) == 2
    assert "not a rank-4" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()
