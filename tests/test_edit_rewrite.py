"""`onnx2edge rewrite`: rule selection, automatic verification, refusals, CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge.cli import main
from onnx2edge.edit import RULES, register_rule
from onnx2edge.edit.rewrite import rewrite
from onnx2edge.edit.rules import Builder
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_run

F = TensorProto.FLOAT


@pytest.fixture()
def act(tmp_path):  # noqa: ANN001, ANN201
    nodes = [
        helper.make_node("HardSwish", ["x"], ["h"], name="hs"),
        helper.make_node("PRelu", ["h", "s"], ["p"], name="pr"),
        helper.make_node("Sub", ["p", "k"], ["y"], name="sub"),
    ]
    g = helper.make_graph(
        nodes,
        "act",
        [helper.make_tensor_value_info("x", F, ["N", 4, 3, 3])],
        [helper.make_tensor_value_info("y", F, ["N", 4, 3, 3])],
        [
            numpy_helper.from_array(
                np.linspace(0.1, 0.4, 4, dtype=np.float32).reshape(4, 1, 1), "s"
            ),
            numpy_helper.from_array(np.float32(1.5).reshape(()), "k"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "act.onnx"
    onnx.save(m, p)
    return p


def test_named_rules_verified(act, tmp_path):
    out = tmp_path / "o.onnx"
    res = rewrite(act, out, rules=["hardswish_decompose", "prelu_relu", "sub_to_add"])
    assert res["changed"] and res["verify"]["ok"] and res["verify"]["exact_rules_only"]
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert not ops & {"HardSwish", "PRelu", "Sub"}
    # symbolic batch kept in the written model; it runs at another batch size
    x = np.random.default_rng(0).standard_normal((3, 4, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(
        ort_run(onnx.load(out), {"x": x})["y"], ort_run(onnx.load(act), {"x": x})["y"], rtol=1e-6
    )


def test_exact_rule_that_breaks_numerics_is_refused(act, tmp_path):
    @register_rule("test_wrong", ops=("HardSwish",))
    def wrong(graph):  # noqa: ANN001, ANN202
        b = Builder(graph)
        for n in graph.nodes:
            if n.op_type == "HardSwish":
                b.add(n, "relu", "Relu", [n.inputs[0]], output=n.outputs[0])
            else:
                b.keep(n)
        return b.result()

    try:
        with pytest.raises(Onnx2EdgeError, match="differs from the original.*nothing written"):
            rewrite(act, tmp_path / "o.onnx", rules=["test_wrong"])
        assert not (tmp_path / "o.onnx").exists()
        res = rewrite(act, tmp_path / "o.onnx", rules=["test_wrong"], verify=False)
        assert "verify" not in res
    finally:
        RULES.pop("test_wrong")


def test_unknown_rule_and_missing_choice(act, tmp_path):
    with pytest.raises(Onnx2EdgeError, match="unknown rule nope"):
        rewrite(act, tmp_path / "o.onnx", rules=["nope"])
    with pytest.raises(Onnx2EdgeError, match="--rules"):
        rewrite(act, tmp_path / "o.onnx")


def test_cli(act, tmp_path, capsys):
    assert main(["rewrite", "--list", "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    assert {r["rule"] for r in rules} == set(RULES)
    assert all(r["note"] for r in rules)
    o = str(tmp_path / "o.onnx")
    assert main(["rewrite", str(act), "-o", o, "--rules", "sub_to_add,hardswish_relu6"]) == 0
    out = capsys.readouterr().out
    assert "sub_to_add: 1 node rewritten" in out and "[approximate]" in out and "verify ok" in out
    assert main(["rewrite", str(act), "-o", o, "--rules", "abs_relu", "--no-verify"]) == 0
    assert "no match" in capsys.readouterr().out
    assert main(["rewrite", str(act), "-o", o, "--for", "coreml"]) == 0  # a target with a checker
    assert main(["rewrite", str(act), "-o", o, "--for", "no-such-target"]) == 2


def test_per_layer_names_the_rewritten_node(act, tmp_path):
    """An approximate rule's node is the first divergence; exact rules leave every shared
    tensor equal."""
    res = rewrite(act, tmp_path / "o.onnx", rules=["hardswish_relu6", "prelu_relu"], per_layer=True)
    layers = {r["name"]: r for r in res["verify"]["layers"]}
    assert set(layers) == {"h", "p"}  # the tensors both models share (y is the output)
    assert layers["p"]["max_abs_error"] <= 1e-6


def test_input_shape_fixes_the_model_first(act, tmp_path):
    out = tmp_path / "o.onnx"
    res = rewrite(act, out, rules=["broadcast_explicit"], input_shapes={"x": (2, 4, 3, 3)})
    assert res["changed"] and res["verify"]["ok"]
    dims = [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 4, 3, 3]
