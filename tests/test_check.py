"""`onnx2edge check`: per-node verdicts from the backends' own data, rules tried on refusals,
and the registry other targets plug into."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge import check as chk
from onnx2edge.cli import main
from onnx2edge.errors import Onnx2EdgeError

F = TensorProto.FLOAT


@pytest.fixture()
def mixed(tmp_path):  # noqa: ANN001, ANN201
    """Conv -> PRelu -> Erf -> Max -> Sub -> Gather (MPS: Erf and Max replaceable, Gather not)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node(
            "Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"
        ),
        helper.make_node("PRelu", ["c", "s"], ["p"], name="prelu"),
        helper.make_node("Erf", ["p"], ["e"], name="erf"),
        helper.make_node("Max", ["e", "p"], ["m"], name="max"),
        helper.make_node("Sub", ["m", "k"], ["d"], name="sub"),
        helper.make_node("Gather", ["d", "idx"], ["y"], axis=1, name="gather"),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array((rng.random((8, 1, 1)) * 0.3).astype(np.float32), "s"),
        numpy_helper.from_array(np.float32(0.25).reshape(()), "k"),
        numpy_helper.from_array(np.array([0, 2], np.int64), "idx"),
    ]
    g = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 2, 8, 8])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "mixed.onnx"
    onnx.save(m, path)
    return path


def by_node(rep):  # noqa: ANN001, ANN201
    return {e["node"]: e for e in rep["nodes"]}


def test_mps_verdicts_come_from_the_backend(mixed):
    rep = chk.check_model(mixed, "mps")
    e = by_node(rep)
    assert e["conv"]["status"] == "supported" and e["conv"]["placement"] == "gpu"
    assert e["erf"]["status"] == "replaceable" and e["erf"]["rule"] == "erf_tanh"
    assert e["max"]["status"] == "replaceable" and e["max"]["rule"] == "minmax_relu"
    assert e["gather"]["status"] == "unsupported" and "gather" in e["gather"]["reason"]
    assert e["gather"]["rule"] is None and e["gather"]["placement"] is None
    assert rep["totals"] == {"supported": 3, "replaceable": 2, "unsupported": 1}
    for entry in rep["nodes"]:
        assert set(entry) == set(chk.ENTRY_KEYS)
        assert entry["source"].endswith(".check")


def test_same_refusals_as_convert(mixed):
    """check's unsupported nodes are exactly the ones `convert` names when it refuses."""
    from onnx2edge import api

    # check's mps verdicts are MPSNNGraph's (convert --gpu-only); without it the CPU tail
    # takes those nodes, and check places them on the cpu
    with pytest.raises(Onnx2EdgeError) as ei:
        api.prepare(mixed, "mps", options={"gpu_only": True})
    entries = chk.check_model(mixed, "mps")["nodes"]
    refused = {e["node"] for e in entries if e["status"] != "supported" or e["placement"] == "cpu"}
    assert refused
    for name in refused:
        assert f"node '{name}'" in str(ei.value)


def test_c_supports_everything_here(mixed):
    rep = chk.check_model(mixed, "c")
    assert rep["totals"]["supported"] == 6 and rep["totals"]["unsupported"] == 0


def test_registry_is_one_line_and_lists_targets(mixed, capsys):
    def fake(graph):  # noqa: ANN001, ANN202
        return [
            {
                "node": n.name,
                "op": n.op_type,
                "status": "supported",
                "placement": "ane",
                "reason": "",
                "rule": None,
                "source": "test",
            }
            for n in graph.nodes
        ]

    try:
        chk.register_checker("fake-target")(fake)
        assert "fake-target" in chk.available_targets()
        assert chk.check_model(mixed, "fake-target")["totals"]["supported"] == 6
    finally:
        chk.CHECKERS.pop("fake-target", None)
    assert main(["check", str(mixed), "--target", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown check target 'nope'" in err
    assert all(t in err for t in chk.available_targets()) and "mps" in err


def test_malformed_checker_entry_is_caught(mixed):
    try:
        chk.register_checker("broken")(lambda g: [{"node": "x", "status": "maybe"}])
        with pytest.raises(ValueError, match="malformed"):
            chk.check_model(mixed, "broken")
    finally:
        chk.CHECKERS.pop("broken", None)


def test_cli_json_and_table(mixed, capsys):
    assert main(["check", str(mixed), "--target", "mps", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["target"] == "mps" and rep["totals"]["replaceable"] == 2
    assert main(["check", str(mixed), "--target", "mps"]) == 0
    out = capsys.readouterr().out
    assert "erf_tanh" in out and "1 unsupported" in out


def test_rewrite_for_mps_makes_the_model_convertible(mixed, tmp_path):
    """`rewrite --for mps` applies the rules check proposed; the result converts and verifies."""
    from onnx2edge.edit.rewrite import rewrite

    # drop the Gather (no MPS node for it) so the whole model can convert
    m = onnx.load(mixed)
    del m.graph.node[-1]
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("d", F, [1, 8, 8, 8]))
    src = tmp_path / "nogather.onnx"
    onnx.save(m, src)
    out = tmp_path / "mps.onnx"
    res = rewrite(src, out, target="mps")
    assert {e["rule"] for e in res["rules"] if e["rewritten"]} == {"erf_tanh", "minmax_relu"}
    assert res["verify"]["outputs"][0]["max_abs_error"] < 1e-3
    assert res["still_unsupported"] == []
    rep = chk.check_model(out, "mps")
    assert rep["totals"]["replaceable"] == 0 and rep["totals"]["unsupported"] == 0
    # with the Gather kept, the rewrite says what the target still refuses
    res = rewrite(mixed, tmp_path / "g.onnx", target="mps")
    # after the rewrites the Gather runs in the Swift CPU tail, so nothing is left refused
    assert res["still_unsupported"] == []
    rep = chk.check_model(tmp_path / "g.onnx", "mps")
    gather = next(e for e in rep["nodes"] if e["node"] == "gather")
    assert gather["placement"] == "cpu" and gather["reason"]
