"""Issue 11, frontend half: each failure new users met on exporters' models, as its own test.

- shapes computed at run time through Shape -> Gather -> Cast -> Mul/Div -> Concat chains,
  including a second Reshape that reads the first one's shape (needs fold + infer iterated);
- declared dims of -1, 0, '' and '?' are dynamic;
- declared output shapes that contradict the real ones give a note, not a refusal;
- `--fix-input` binds an input so an If on it folds away and the input leaves the API;
- If on a run-time condition: only the taken branch runs in C (more in test_control_flow.py);
  a clear refusal when the branches' shapes differ; Loop with a constant trip count unrolled;
- a shape that stays dynamic names itself and the node that makes it so.
Every conversion is checked against onnxruntime through the C backend.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx2edge import api
from onnx2edge.cli import main
from onnx2edge.errors import Onnx2EdgeError, UnsupportedError
from onnx2edge.frontend import load
from onnx2edge.frontend.loader import parse_fixed_inputs

from conftest import make_model, save, tensor, vi


def _i64(name: str, v: object) -> onnx.TensorProto:
    return tensor(name, np.array(v, np.int64))


def paddle_chain(first_dim: object = "batch", out_shape: object = None) -> onnx.ModelProto:
    """paddle2onnx's attention Reshape: the target is computed from the input's shape through
    float arithmetic, and a second Reshape reads the first's output shape."""
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        h.make_node("Cast", ["t"], ["tf"], to=T.FLOAT),
        h.make_node("Mul", ["tf", "four"], ["t4"]),
        h.make_node("Cast", ["t4"], ["ti"], to=T.INT64),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Concat", ["bu", "ti", "m1"], ["shp"], axis=0),
        h.make_node("Reshape", ["x", "shp"], ["r"], name="reshape2_27"),
        h.make_node("Shape", ["r"], ["s2"]),
        h.make_node("Slice", ["s2", "ax0", "two"], ["s2a"]),
        h.make_node("ReduceProd", ["s2a"], ["n"], keepdims=1),
        h.make_node("Concat", ["n", "m1"], ["shp2"], axis=0),
        h.make_node("Reshape", ["r", "shp2"], ["r2"]),
        h.make_node("Transpose", ["r2"], ["y"], perm=[1, 0]),
    ]
    inits = [
        _i64("i0", 0),
        _i64("i1", 1),
        tensor("four", np.array([4.0], np.float32)),
        _i64("m1", [-1]),
        _i64("ax0", [0]),
        _i64("two", [2]),
    ]
    return make_model(
        nodes,
        [vi("x", [first_dim, "seq", 16])],
        [vi("y", out_shape or [None, None])],
        inits,
        opset=13,
    )


def test_runtime_shape_chain_is_specialised(tmp_path: Path) -> None:
    path = save(paddle_chain(), tmp_path / "chain.onnx")
    g = load(path, input_shapes={"x": (2, 5, 16)}, quiet=True)
    assert [n.op_type for n in g.nodes] == ["Reshape", "Reshape", "Transpose"]
    assert g.shape_of("y") == (4, 40)
    assert all(g.is_const(n.inputs[1]) for n in g.nodes if n.op_type == "Reshape")
    rep = api.verify(path, target="c", input_shapes={"x": (2, 5, 16)}, work_dir=tmp_path / "o")
    assert rep.ok, rep.format()


@pytest.mark.parametrize("declared", [-1, 0, "", "?"], ids=["minus1", "zero", "empty", "qmark"])
def test_declared_dynamic_dims(tmp_path: Path, declared: object) -> None:
    m = paddle_chain(first_dim=declared)
    if declared == "":  # make_tensor_value_info turns "" into an unset dim; write it by hand
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = ""
    path = save(m, tmp_path / "m.onnx")
    g = load(path, input_shapes={"x": (3, 2, 16)}, quiet=True)
    assert g.shape_of("x") == (3, 2, 16)
    assert g.shape_of("y") == (4, 24)


def test_declared_output_shape_that_lies_gives_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = save(paddle_chain(out_shape=[1, "seqlen"]), tmp_path / "m.onnx")
    out = tmp_path / "c"
    assert (
        main(["convert", str(path), "--target", "c", "-o", str(out), "--input-shape", "x=2x5x16"])
        == 0
    )
    err = capsys.readouterr().err
    assert "output 'y' is declared [1, '?'] but is [4, 40]; using [4, 40]" in err
    rep = api.verify(path, target="c", input_shapes={"x": (2, 5, 16)}, work_dir=tmp_path / "o")
    assert rep.ok, rep.format()


def sample_rate_if() -> onnx.ModelProto:
    """`If (sr == 16000)` with branch-specific internal and output shapes (as speech models)."""

    def branch(name: str, shape: list[int]) -> onnx.GraphProto:
        return h.make_graph(
            [
                h.make_node("Constant", [], [f"{name}_s"], value=tensor("v", np.array(shape))),
                h.make_node("Reshape", ["x", f"{name}_s"], [f"{name}_r"]),
                h.make_node("ReduceSum", [f"{name}_r", "ax2"], [f"{name}_y"], keepdims=0),
            ],
            name,
            [],
            [vi(f"{name}_y", [None, None])],
        )

    nodes = [
        h.make_node("Equal", ["sr", "k16000"], ["c"]),
        h.make_node(
            "If",
            ["c"],
            ["y"],
            name="resample_if",
            then_branch=branch("then", [1, 4, 8]),
            else_branch=branch("else", [1, 8, 4]),
        ),
    ]
    inits = [_i64("k16000", 16000), _i64("ax2", [2])]
    return make_model(
        nodes, [vi("x", [1, 32]), vi("sr", [], T.INT64)], [vi("y", [None, None])], inits, 13
    )


@pytest.mark.parametrize("sr,shape", [("16000", (1, 4)), ("8000", (1, 8))])
def test_fix_input_folds_the_if_away(tmp_path: Path, sr: str, shape: tuple) -> None:
    path = save(sample_rate_if(), tmp_path / "sr.onnx")
    fixed = parse_fixed_inputs([f"sr={sr}"])
    g = load(path, fixed_inputs=fixed, quiet=True)
    assert g.inputs == ("x",) and g.shape_of("y") == shape
    assert not any(n.op_type in ("If", "Equal") for n in g.nodes)
    out = tmp_path / "c"
    rep = api.verify(path, target="c", fixed_inputs=fixed, work_dir=out)
    assert rep.ok, rep.format()
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    assert manifest["fixed_inputs"]["sr"]["values"] == [int(sr)]


def test_fix_input_cli_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(sample_rate_if(), tmp_path / "sr.onnx")
    np.save(tmp_path / "sr.npy", np.array(16000, np.int64))
    for value in ("16000", str(tmp_path / "sr.npy")):
        assert main(["verify", str(path), "--target", "c", "--fix-input", f"sr={value}"]) == 0
    assert main(["inspect", str(path), "--fix-input", "sr=16000"]) == 0
    capsys.readouterr()
    for bad, msg in [
        ("nope=1", "'nope', which is not an input"),
        ("sr=16000.5", "not a fraction"),
        ("sr=abc", "VALUE must be a number"),
        ("sr=1,2,3", "does not fit input 'sr'"),
    ]:
        assert (
            main(
                [
                    "convert",
                    str(path),
                    "--target",
                    "c",
                    "-o",
                    str(tmp_path / "x"),
                    "--fix-input",
                    bad,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / "x").exists()


def test_runtime_if_with_different_branch_shapes_is_refused(tmp_path: Path) -> None:
    path = save(sample_rate_if(), tmp_path / "sr.onnx")
    with pytest.raises(UnsupportedError, match=r"node 'resample_if' \(op If\).*float\[1, 4\] vs"):
        load(path, quiet=True)


def runtime_if() -> onnx.ModelProto:
    def br(name: str, op: str) -> onnx.GraphProto:
        return h.make_graph(
            [h.make_node(op, ["x"], [f"{name}_y"])], name, [], [vi(f"{name}_y", [None, None])]
        )

    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node(
            "If",
            ["c"],
            ["y"],
            name="sign_if",
            then_branch=br("then", "Relu"),
            else_branch=br("else", "Neg"),
        ),
    ]
    return make_model(
        nodes, [vi("x", [1, 32])], [vi("y", [1, 32])], [tensor("zero", np.array(0, np.float32))], 13
    )


def test_runtime_if_selects_in_c(tmp_path: Path) -> None:
    path = save(runtime_if(), tmp_path / "rt.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    assert "If" not in {n.op_type for n in load(path, quiet=True).nodes}
    for sign, expect in ((1.0, lambda x: np.maximum(x, 0)), (-1.0, lambda x: -x)):
        # inputs that take each branch; both checked against onnxruntime and by hand
        x = (sign * np.abs(np.random.default_rng(0).standard_normal((1, 32)))).astype(np.float32)
        rep = api.verify(path, target="c", inputs={"x": x}, work_dir=tmp_path / f"o{sign}")
        assert rep.ok, rep.format()
        np.testing.assert_array_equal(api.run(out, {"x": x})["y"], expect(x))


def constant_loop(trips: int = 3) -> onnx.ModelProto:
    """torch's exporters write fixed-count Python loops as Loop(M=const, cond=true)."""
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            h.make_node("Add", ["acc_in", "fi"], ["a1"]),
            h.make_node("Mul", ["a1", "x"], ["acc_out"]),
            h.make_node("Identity", ["acc_out"], ["scan_out"]),
        ],
        "body",
        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("acc_in", [2, 3])],
        [vi("cond_out", [], T.BOOL), vi("acc_out", [2, 3]), vi("scan_out", [2, 3])],
    )
    nodes = [h.make_node("Loop", ["M", "true", "x"], ["final", "stack"], name="loop", body=body)]
    inits = [_i64("M", trips), tensor("true", np.array(True))]
    return make_model(
        nodes, [vi("x", [2, 3])], [vi("final", [2, 3]), vi("stack", [trips, 2, 3])], inits, 13
    )


def test_constant_loop_is_unrolled(tmp_path: Path) -> None:
    path = save(constant_loop(), tmp_path / "loop.onnx")
    g = load(path, quiet=True)
    assert "Loop" not in {n.op_type for n in g.nodes}
    assert g.shape_of("stack") == (3, 2, 3)
    rep = api.verify(path, target="c", work_dir=tmp_path / "o")
    assert rep.ok, rep.format()


def test_dynamic_shape_names_tensor_and_node(tmp_path: Path) -> None:
    # the Reshape target comes from a runtime integer input: nothing can make it static
    nodes = [
        h.make_node("Reshape", ["x", "shape"], ["r"], name="reshape_by_input"),
        h.make_node("Relu", ["r"], ["y"]),
    ]
    m = make_model(
        nodes, [vi("x", [2, 6]), vi("shape", [2], T.INT64)], [vi("y", [None, None])], opset=13
    )
    path = save(m, tmp_path / "dyn.onnx")
    with pytest.raises(Onnx2EdgeError) as e:
        api.convert(path, "c", tmp_path / "o")
    msg = str(e.value)
    assert "node 'reshape_by_input' (op Reshape) makes 'r' from the run-time values" in msg
    assert "--fix-input" in msg
    # ... and binding the input resolves it
    rep = api.verify(
        path, target="c", fixed_inputs={"shape": np.array([3, 4])}, work_dir=tmp_path / "o2"
    )
    assert rep.ok, rep.format()


def test_scan_is_unrolled(tmp_path: Path) -> None:
    """A running sum over the sequence axis, read in reverse, outputs stacked on axis 1."""
    body = h.make_graph(
        [
            h.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
            h.make_node("Tanh", ["acc_out"], ["yt"]),
        ],
        "body",
        [vi("acc_in", [2]), vi("xt", [2])],
        [vi("acc_out", [2]), vi("yt", [2])],
    )
    scan = h.make_node(
        "Scan",
        ["init", "x"],
        ["final", "ys"],
        name="scan",
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[1],
        scan_output_axes=[1],
    )
    m = make_model(
        [scan], [vi("init", [2]), vi("x", [5, 2])], [vi("final", [2]), vi("ys", [2, 5])], opset=13
    )
    path = save(m, tmp_path / "scan.onnx")
    g = load(path, quiet=True)
    assert "Scan" not in {n.op_type for n in g.nodes} and g.shape_of("ys") == (2, 5)
    rep = api.verify(path, target="c", work_dir=tmp_path / "o")
    assert rep.ok, rep.format()


def test_div_chain_slice_and_expand_targets(tmp_path: Path) -> None:
    """TorchScript's `d // heads` (integer Div) and paddle's float `t / 2` (Cast -> Div ->
    Cast) in a Reshape target, a Slice end and an Expand shape read from Shape."""
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        h.make_node("Gather", ["s", "i2"], ["d"], axis=0),
        h.make_node("Cast", ["t"], ["tf"], to=T.FLOAT),
        h.make_node("Div", ["tf", "two_f"], ["half_f"]),
        h.make_node("Cast", ["half_f"], ["half"], to=T.INT64),
        h.make_node("Div", ["d", "four"], ["dh"]),
        *[h.make_node("Unsqueeze", [v, "ax0"], [f"{v}_u"]) for v in ("b", "half", "dh")],
        h.make_node("Concat", ["b_u", "two", "half_u", "four_1", "dh_u"], ["shp"], axis=0),
        h.make_node("Reshape", ["x", "shp"], ["r"]),
        h.make_node("Sub", ["half_u", "one"], ["end"]),
        h.make_node("Slice", ["r", "zero_1", "end", "ax2"], ["sl"]),
        h.make_node("Shape", ["sl"], ["sl_shape"]),
        h.make_node("Expand", ["bias", "sl_shape"], ["bias_x"]),
        h.make_node("Add", ["sl", "bias_x"], ["y"]),
    ]
    inits = [
        *[_i64(k, v) for k, v in {"i0": 0, "i1": 1, "i2": 2, "four": 4}.items()],
        *[_i64(k, [v]) for k, v in {"ax0": 0, "ax2": 2, "two": 2, "four_1": 4}.items()],
        *[_i64(k, [v]) for k, v in {"one": 1, "zero_1": 0}.items()],
        tensor("two_f", np.array(2.0, np.float32)),
        tensor("bias", np.arange(4, dtype=np.float32)),
    ]
    m = make_model(nodes, [vi("x", ["b", "t", 16])], [vi("y", [None] * 5)], inits, opset=13)
    path = save(m, tmp_path / "div.onnx")
    g = load(path, input_shapes={"x": (3, 6, 16)}, quiet=True)
    assert g.shape_of("y") == (3, 2, 2, 4, 4)
    assert [n.op_type for n in g.nodes] == ["Reshape", "Slice", "Add"]
    rep = api.verify(path, target="c", input_shapes={"x": (3, 6, 16)}, work_dir=tmp_path / "o")
    assert rep.ok, rep.format()
