"""Surgery commands: each result checked by onnx and run in onnxruntime against the original;
each refusal names the problem and writes nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge.cli import main
from onnx2edge.edit import surgery
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_run

F = TensorProto.FLOAT


@pytest.fixture()
def net(tmp_path):  # noqa: ANN001, ANN201
    """x[N,3,8,8] -> Conv -> Relu -> Identity -> GlobalAveragePool -> Flatten -> Gemm -> y,
    with a BatchNorm, a dead branch and a constant subgraph for simplify to find."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node(
            "Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"
        ),
        helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["i"], name="ident"),
        helper.make_node("GlobalAveragePool", ["i"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Mul", ["two", "two"], ["four"], name="const_mul"),
        helper.make_node("Gemm", ["f", "fw", "four"], ["y"], transB=1, name="fc"),
        helper.make_node("Sigmoid", ["r"], ["dead"], name="dead_branch"),
    ]
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)),
        "g": rng.random(4) + 0.5,
        "b": rng.standard_normal(4),
        "mu": rng.standard_normal(4) * 0.1,
        "var": rng.random(4) + 0.5,
        "fw": rng.standard_normal((5, 4)),
        "two": np.array([2.0]),
    }
    g = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, ["N", 5])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "net.onnx"
    onnx.save(m, path)
    return path


def x(n=1):  # noqa: ANN001, ANN201
    return {"x": np.random.default_rng(3).standard_normal((n, 3, 8, 8)).astype(np.float32)}


def ops(path):  # noqa: ANN001, ANN201
    return [n.op_type for n in onnx.load(path).graph.node]


def test_extract_and_its_refusals(net, tmp_path):
    out = tmp_path / "sub.onnx"
    surgery.extract(net, out, "r", "p")
    assert ops(out) == ["Identity", "GlobalAveragePool"]
    r = ort_run(onnx.load(net), x(), ["r", "p"]) if False else None  # noqa: F841
    full = onnx.load(net)
    full.graph.output.extend(
        [helper.make_empty_tensor_value_info("r"), helper.make_empty_tensor_value_info("p")]
    )
    ref = ort_run(full, x())
    got = ort_run(onnx.load(out), {"r": ref["r"]})
    np.testing.assert_allclose(got["p"], ref["p"], rtol=1e-6)
    surgery.extract(net, out, "r", "y")  # the Gemm's constant-only bias branch comes along
    assert "Mul" in ops(out)
    with pytest.raises(Onnx2EdgeError, match="also depend on x"):
        surgery.extract(net, tmp_path / "bad.onnx", "p", "dead")
    with pytest.raises(Onnx2EdgeError, match="no tensor named 'nope'"):
        surgery.extract(net, tmp_path / "bad.onnx", "r", "nope")
    assert not (tmp_path / "bad.onnx").exists()


def test_delete_nodes_bypass_and_refusal(net, tmp_path):
    out = tmp_path / "d.onnx"
    res = surgery.delete_nodes(net, out, "ident")
    assert res["bypassed"] == ["i"] and "Identity" not in ops(out)
    np.testing.assert_allclose(
        ort_run(onnx.load(out), x())["y"], ort_run(onnx.load(net), x())["y"], rtol=1e-6
    )
    with pytest.raises(Onnx2EdgeError, match="differ"):
        surgery.delete_nodes(net, tmp_path / "bad.onnx", "flat")  # 4-D in, 2-D out
    with pytest.raises(Onnx2EdgeError, match="no node named 'zzz'"):
        surgery.delete_nodes(net, tmp_path / "bad.onnx", "zzz")
    res = surgery.delete_nodes(net, out, "dead_branch")
    assert "Sigmoid" not in ops(out)


def test_rename_explicit_regex_and_collisions(net, tmp_path):
    out = tmp_path / "r.onnx"
    res = surgery.rename(net, out, tensors={"x": "image"}, node_regex=[("^(.*)$", r"net/\1")])
    m = onnx.load(out)
    assert m.graph.input[0].name == "image" and m.graph.node[0].name == "net/conv"
    assert res["tensors"] == {"x": "image"}
    np.testing.assert_allclose(
        ort_run(m, {"image": x()["x"]})["y"], ort_run(onnx.load(net), x())["y"], rtol=1e-6
    )
    with pytest.raises(Onnx2EdgeError, match="collides"):
        surgery.rename(net, tmp_path / "bad.onnx", tensors={"r": "c"})
    with pytest.raises(Onnx2EdgeError, match="no tensor named"):
        surgery.rename(net, tmp_path / "bad.onnx", tensors={"zz": "c"})
    with pytest.raises(Onnx2EdgeError, match="collides"):
        surgery.rename(net, tmp_path / "bad.onnx", tensor_regex=[("^[a-z]+$", "same")])
    assert not (tmp_path / "bad.onnx").exists()


def test_set_shape_batch_and_refusals(net, tmp_path):
    out = tmp_path / "s.onnx"
    res = surgery.set_shape(net, out, batch=4)
    assert res["inputs"] == {"x": "4x3x8x8"} and res["outputs"] == {"y": "4x5"}
    assert ort_run(onnx.load(out), x(4))["y"].shape == (4, 5)
    with pytest.raises(Onnx2EdgeError, match="rank"):
        surgery.set_shape(net, tmp_path / "bad.onnx", shapes={"x": [1, 3, 8]})
    # a model with a Reshape baked for batch 1 cannot take batch 2: refused, not written
    m = onnx.load(net)
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, 4], np.int64), "shp"))
    for n in m.graph.node:
        if n.name == "flat":
            n.CopyFrom(helper.make_node("Reshape", ["p", "shp"], ["f"], name="flat"))
    baked = tmp_path / "baked.onnx"
    onnx.save(m, baked)
    with pytest.raises(Onnx2EdgeError, match="set-shape"):
        surgery.set_shape(baked, tmp_path / "bad.onnx", batch=2)
    assert not (tmp_path / "bad.onnx").exists()


def test_add_output(net, tmp_path):
    out = tmp_path / "a.onnx"
    surgery.add_output(net, out, "r,p")
    res = ort_run(onnx.load(out), x())
    assert res["r"].shape == (1, 4, 8, 8) and res["p"].shape == (1, 4, 1, 1)
    with pytest.raises(Onnx2EdgeError, match="already an output"):
        surgery.add_output(net, out, "y")
    with pytest.raises(Onnx2EdgeError, match="no node produces"):
        surgery.add_output(net, out, "x")


def test_opset_verified_and_refused(net, tmp_path):
    out = tmp_path / "o.onnx"
    res = surgery.convert_opset(net, out, 19)
    assert res["verify"]["ok"] and onnx.load(out).opset_import[0].version == 19
    with pytest.raises(Onnx2EdgeError, match="outside"):
        surgery.convert_opset(net, out, 99)


def test_simplify_reports_and_verifies(net, tmp_path):
    out = tmp_path / "simp.onnx"
    res = surgery.simplify(net, out)
    assert res["verify"]["ok"]
    assert res["ops"]["BatchNormalization"] == -1 and res["ops"]["Identity"] == -1
    assert res["ops"]["Sigmoid"] == -1 and res["ops"]["Mul"] == -1
    assert res["nodes"][1] < res["nodes"][0]
    np.testing.assert_allclose(
        ort_run(onnx.load(out), x(2))["y"], ort_run(onnx.load(net), x(2))["y"], rtol=1e-5, atol=1e-6
    )


def test_constant_binds_and_folds(tmp_path):
    a = helper.make_node("Add", ["x", "bias"], ["t"])
    b = helper.make_node("Mul", ["t", "k"], ["y"])
    g = helper.make_graph(
        [a, b],
        "c",
        [helper.make_tensor_value_info(n, F, [2, 3]) for n in ("x", "bias")],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 2, np.float32), "k")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src, out = tmp_path / "c.onnx", tmp_path / "cb.onnx"
    onnx.save(m, src)
    res = surgery.bind_constant(src, out, {"bias": np.float32(0.5)})
    assert res["verify"]["ok"] and [i.name for i in onnx.load(out).graph.input] == ["x"]
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ort_run(onnx.load(out), {"x": xv})["y"], (xv + 0.5) * 2)
    with pytest.raises(Onnx2EdgeError, match="shape"):
        surgery.bind_constant(src, out, {"bias": np.zeros((3, 3), np.float32)})
    with pytest.raises(Onnx2EdgeError, match="not an input"):
        surgery.bind_constant(src, out, {"k": np.zeros((2, 3), np.float32)})


def test_cli_commands(net, tmp_path, capsys):
    o = str(tmp_path / "o.onnx")
    assert main(["simplify", str(net), "-o", o]) == 0
    assert "verified against the original" in capsys.readouterr().out
    assert main(["set-shape", str(net), "-o", o, "--input-shape", "x=Bx3x8x8"]) == 0
    assert "Bx3x8x8" in capsys.readouterr().out
    assert main(["rename", str(net), "-o", o, "--tensor", "y=logits"]) == 0
    assert main(["constant", str(net), "-o", o, "--value", "x=0.5"]) == 2  # N is symbolic
    assert "the input is Nx3x8x8" in capsys.readouterr().err
    assert main(["extract", str(net), "-o", o, "--inputs", "p", "--outputs", "dead"]) == 2
    assert "also depend on x" in capsys.readouterr().err
    assert main(["delete-nodes", str(net), "-o", o, "gap"]) == 2


def test_opset_down_needs_a_rewrite_first(tmp_path):
    """HardSwish has no version before 14: opset refuses and names the rule that removes it."""
    g = helper.make_graph(
        [helper.make_node("HardSwish", ["x"], ["y"])],
        "hs",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = tmp_path / "hs.onnx"
    onnx.save(m, src)
    with pytest.raises(Onnx2EdgeError, match="rewrite --rules hardswish_decompose first"):
        surgery.convert_opset(src, tmp_path / "o.onnx", 13)
    assert not (tmp_path / "o.onnx").exists()
    res = surgery.convert_opset(src, tmp_path / "o.onnx", 14)  # HardSwish exists there
    assert res["verify"]["ok"] and onnx.load(tmp_path / "o.onnx").opset_import[0].version == 14
