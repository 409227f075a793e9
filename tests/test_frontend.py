"""Frontend: loading, checks, symbolic dims, constant folding, inspect."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError, UnsupportedError
from onnx2edge.frontend import load, parse_input_shapes

from conftest import LIGHT_MODELS, make_model, save, tensor, vi


def test_light_models_present() -> None:
    assert len(LIGHT_MODELS) == 9


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_light_models_load_static_and_folded(path: Path) -> None:
    g = load(path, quiet=True)
    # ConstantOfShape weights are folded into initializers
    assert not any(n.op_type in ("ConstantOfShape", "Constant") for n in g.nodes)
    for n in g.nodes:
        for o in n.outputs:
            if not (g.consumers(o) or o in g.outputs):
                continue  # e.g. Dropout's unused mask
            t = g.type_of(o)
            assert t is not None and t.is_static, f"{n.name}: {o} not static"


def test_resnet50_macs() -> None:
    path = next(p for p in LIGHT_MODELS if p.stem == "light_resnet50")
    info = api.inspect(path)
    assert abs(info["total_macs"] - 4.09e9) / 4.09e9 < 0.01
    assert info["total_params"] == 25_610_154
    assert info["op_histogram"]["Conv"] == 53
    conv = next(n for n in info["nodes"] if n["op"] == "Conv")
    assert set(conv) >= {"name", "op", "output_shapes", "params", "macs"}


def test_macs_by_hand() -> None:
    # Conv 1x8x10x10 from 3 channels, 3x3 kernel, pad 1: 8*10*10 * 3*3*3 MACs
    w = np.ones((8, 3, 3, 3), np.float32)
    m = make_model(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1, 1, 1, 1]),
            helper.make_node("MatMul", ["y", "m"], ["z"], name="mm"),
            helper.make_node("ConvTranspose", ["z", "wt"], ["t"], name="ct", strides=[2, 2]),
        ],
        [vi("x", [1, 3, 10, 10])],
        [vi("t", None)],
        [
            tensor("w", w),
            tensor("m", np.ones((10, 4), np.float32)),
            tensor("wt", np.ones((8, 2, 2, 2), np.float32)),
        ],
    )
    from onnx2edge.analysis import inspect_graph
    from onnx2edge.frontend.loader import infer_shapes
    from onnx2edge.ir.proto import graph_from_model

    info = inspect_graph(graph_from_model(infer_shapes(m)))
    macs = {n["name"]: n["macs"] for n in info["nodes"]}
    assert macs["c"] == 8 * 10 * 10 * 27
    assert macs["mm"] == 8 * 10 * 4 * 10
    assert macs["ct"] == 8 * 10 * 4 * (2 * 2 * 2)


def test_macs_survive_fusion() -> None:
    # bench --profile reads MACs on the optimised graph, where Conv+Add+Relu is one
    # o2e.ConvAddAct: its MACs are the Conv's (the GFLOP/s column was 0 for fused nodes)
    path = next(p for p in LIGHT_MODELS if p.stem == "light_resnet50")
    from onnx2edge.analysis import node_macs

    g = api.prepare(path, "c")
    fused = [n for n in g.nodes if n.op_type in ("ConvAct", "ConvAddAct")]
    assert fused and all(node_macs(g, n) > 0 for n in fused)
    total = sum(node_macs(g, n) for n in g.nodes)
    assert abs(total - api.inspect(path)["total_macs"]) / total < 1e-6


def _torch_style_reshape_model() -> onnx.ModelProto:
    """x:[N,4,6] -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape, as torch exports."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"], name="unsq"),
        helper.make_node("Concat", ["nu", "m1"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        helper.make_node(
            "ConstantOfShape",
            ["wshape"],
            ["w"],
            name="cos",
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]),
        ),
        helper.make_node("MatMul", ["y", "w"], ["z"], name="mm"),
    ]
    return make_model(
        nodes,
        [vi("x", ["N", 4, 6])],
        [vi("z", ["N", 3])],
        [
            tensor("i0", np.array(0, np.int64)),
            tensor("ax0", np.array([0], np.int64)),
            tensor("m1", np.array([-1], np.int64)),
            tensor("wshape", np.array([24, 3], np.int64)),
        ],
    )


def test_fold_shape_subgraph_with_fixed_input_shape(tmp_path: Path) -> None:
    path = save(_torch_style_reshape_model(), tmp_path / "m.onnx")
    g = load(path, input_shapes={"x": (2, 4, 6)})
    assert [n.op_type for n in g.nodes] == ["Reshape", "MatMul"]
    assert g.shape_of("z") == (2, 3)
    assert g.const("w").shape == (24, 3)
    rep = api.verify(path, input_shapes={"x": (2, 4, 6)}, per_layer=True)
    assert rep.ok and rep.outputs[0].max_abs == 0.0


def test_symbolic_dim_defaults_to_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(_torch_style_reshape_model(), tmp_path / "m.onnx")
    g = load(path)
    assert g.shape_of("x") == (1, 4, 6)
    assert "set to 1" in capsys.readouterr().err


def test_fold_does_not_mutate_input_graph(tmp_path: Path) -> None:
    from onnx2edge.frontend.loader import infer_shapes, load_model
    from onnx2edge.ir.proto import graph_from_model
    from onnx2edge.passes import fold_constants

    path = save(_torch_style_reshape_model(), tmp_path / "m.onnx")
    g = graph_from_model(infer_shapes(load_model(path)))
    before = (g.nodes, dict(g.initializers))
    fold_constants(g)
    assert g.nodes == before[0] and g.initializers.keys() == before[1].keys()


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("x", "expected NAME=DIMS"),
        ("x=1xa", "must be integers"),
        ("x=0x3", "must be positive"),
        ("=1", "expected"),
    ],
)
def test_bad_input_shape_spec(spec: str, msg: str) -> None:
    with pytest.raises(Onnx2EdgeError, match=msg):
        parse_input_shapes([spec])


def test_bad_input_shape_for_model(tmp_path: Path) -> None:
    path = save(_torch_style_reshape_model(), tmp_path / "m.onnx")
    with pytest.raises(Onnx2EdgeError, match="not an input"):
        load(path, input_shapes={"nope": (1,)})
    with pytest.raises(Onnx2EdgeError, match="rank 2"):
        load(path, input_shapes={"x": (1, 4)})
    with pytest.raises(Onnx2EdgeError, match="fixed to 4"):
        load(path, input_shapes={"x": (1, 5, 6)})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(Onnx2EdgeError, match="no such file"):
        load(tmp_path / "missing.onnx")


def test_truncated_file(tmp_path: Path, example: Path) -> None:
    p = tmp_path / "t.onnx"
    p.write_bytes(example.read_bytes()[:5000])
    with pytest.raises(Onnx2EdgeError, match="truncated or corrupt"):
        load(p)


def test_garbage_and_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "g.onnx"
    p.write_bytes(b"\xff\xfe this is not protobuf at all \x00\x01")
    with pytest.raises(Onnx2EdgeError, match="not a valid ONNX model|not an ONNX model"):
        load(p)
    p.write_bytes(b"")
    with pytest.raises(Onnx2EdgeError, match="empty file"):
        load(p)


def test_unknown_ops_all_named(tmp_path: Path) -> None:
    m = make_model(
        [
            helper.make_node("FancyOp", ["x"], ["y"], name="fancy1"),
            helper.make_node("Relu", ["y"], ["z"], name="r"),
            helper.make_node("OtherOp", ["z"], ["w"], name="other2"),
        ],
        [vi("x", [1])],
        [vi("w", [1])],
    )
    with pytest.raises(UnsupportedError) as e:
        load(save(m, tmp_path / "u.onnx"))
    msg = str(e.value)
    assert "fancy1" in msg and "FancyOp" in msg and "other2" in msg and "opset 17" in msg
    assert "\n" not in msg


def test_op_newer_than_opset(tmp_path: Path) -> None:
    # Gelu appeared in opset 20
    m = make_model(
        [helper.make_node("Gelu", ["x"], ["y"], name="g")], [vi("x", [2])], [vi("y", [2])], opset=17
    )
    with pytest.raises(UnsupportedError, match="node 'g' \\(op Gelu.*opset 17"):
        load(save(m, tmp_path / "g.onnx"))


@pytest.mark.parametrize("opset", [99])
def test_unsupported_opset(tmp_path: Path, opset: int) -> None:
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=opset
    )
    with pytest.raises(UnsupportedError, match=f"opset {opset} is not supported"):
        load(save(m, tmp_path / "o.onnx"))


def test_old_opset_is_converted_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Below opset 7, onnx's version converter upgrades the model (with a note); a model it
    cannot convert (Upsample-1's scales attribute in a broken form here) keeps the error."""
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=6
    )
    g = load(save(m, tmp_path / "o.onnx"))
    assert g.opset == 7 and [n.op_type for n in g.nodes] == ["Relu"]
    assert "opset 6 converted to 7" in capsys.readouterr().err
    bad = make_model(
        [helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 2.0])],
        [vi("x", [2, 2])],
        [vi("y", [2, 4])],
        opset=5,
    )
    with pytest.raises(UnsupportedError, match="opset 5 is not supported"):
        load(save(bad, tmp_path / "u.onnx"))


@pytest.mark.parametrize("opset", [7, 11, 13, 17, 21])
def test_opsets_in_range_load(tmp_path: Path, opset: int) -> None:
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["y", "x"], ["z"])],
        [vi("x", [2, 3])],
        [vi("z", [2, 3])],
        opset=opset,
    )
    g = load(save(m, tmp_path / "o.onnx"))
    assert g.opset == opset and g.shape_of("z") == (2, 3)


def _external_model(tmp_path: Path, location: str) -> Path:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [vi("x", [2, 3])],
        [vi("y", [2, 4])],
        [tensor("w", w)],
    )
    onnx.external_data_helper.convert_model_to_external_data(
        m, all_tensors_to_one_file=True, location="w.bin", size_threshold=0
    )
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path)  # writes w.bin beside it
    if location != "w.bin":
        m2 = onnx.load(path, load_external_data=False)
        for e in m2.graph.initializer[0].external_data:
            if e.key == "location":
                e.value = location
        path.write_bytes(m2.SerializeToString())
    return path


def test_external_data_loads(tmp_path: Path) -> None:
    g = load(_external_model(tmp_path, "w.bin"))
    assert np.array_equal(g.const("w"), np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("location", ["/etc/passwd", "../w.bin", "sub/../../w.bin"])
def test_external_data_escaping_folder_refused(tmp_path: Path, location: str) -> None:
    sub = tmp_path / "d"
    sub.mkdir()
    path = _external_model(sub, location)
    with pytest.raises(Onnx2EdgeError, match="absolute path|points outside"):
        load(path)


def test_external_data_truncated(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes((tmp_path / "w.bin").read_bytes()[:20])
    with pytest.raises(Onnx2EdgeError, match="truncated"):
        load(path)


def test_external_data_missing(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").unlink()
    with pytest.raises(Onnx2EdgeError, match="not found"):
        load(path)


def test_symbolic_spatial_dims_are_an_error(tmp_path: Path) -> None:
    """Issue 26, item 3: `set-shape --input-shape input=1x3xHxW` then `convert` used to make
    H and W 1 (a 1x1 image) and exit 0. Only the leading (batch) dimension may default; the
    error is one line, exit 2, naming the input and the --input-shape to give."""
    import subprocess
    import sys

    from onnx import TensorProto, helper

    w = np.full((4, 3, 3, 3), 0.1, np.float32)
    m = helper.make_model(
        helper.make_graph(
            [helper.make_node("Conv", ["input", "w"], ["y"], pads=[1, 1, 1, 1])],
            "g",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
            [onnx.numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    src, sym = save(m, tmp_path / "m.onnx"), tmp_path / "sym.onnx"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "onnx2edge.cli", *args]
        return subprocess.run(cmd, capture_output=True, text=True)

    assert (
        cli("set-shape", str(src), "--input-shape", "input=1x3xHxW", "-o", str(sym)).returncode == 0
    )
    dims = [
        d.dim_param or d.dim_value
        for d in onnx.load(str(sym)).graph.input[0].type.tensor_type.shape.dim
    ]
    assert dims == [1, 3, "H", "W"]
    out = tmp_path / "c"
    p = cli("convert", str(sym), "--target", "c", "-o", str(out))
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "'input'" in err[0] and "--input-shape input=1x3xHxW" in err[0], err[0]
    assert not out.exists()
    # given sizes, it converts; a symbolic batch alone still defaults to 1 with a note
    p = cli("convert", str(sym), "--target", "c", "-o", str(out), "--input-shape", "input=1x3x8x8")
    assert p.returncode == 0, p.stderr
    batch = tmp_path / "batch.onnx"
    assert (
        cli("set-shape", str(src), "--input-shape", "input=Nx3x8x8", "-o", str(batch)).returncode
        == 0
    )
    g = load(batch)
    assert g.shape_of("input") == (1, 3, 8, 8)
