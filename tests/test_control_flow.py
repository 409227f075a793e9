"""Issue 11, item 4, control flow in C. An If whose condition is only known at run time runs
only its taken branch (`if (cond) {...} else {...}`), each branch with its own static shapes.

- a sample-rate switch (`sr == 16000`) whose branches reshape to different internal shapes;
- branches that would fault if run when not taken (an out-of-range Gather, a division by
  zero), built with ASan + UBSan (float-divide-by-zero included) so a run of the wrong branch
  aborts the program;
- an If nested in a branch, reading tensors of the enclosing branch;
- branches whose outputs disagree in shape: one line naming the If, exit 2;
- tf2onnx's while loops (a Loop whose body computes its own exit condition): unrolled as many
  times as they run when the condition follows from constants, else the Loop is named.
Every run is compared with onnxruntime (inputs that take each branch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.cli import main
from onnx2edge.errors import UnsupportedError
from onnx2edge.runtime import ort_run

from conftest import ASAN, make_model, save, tensor, vi

# UBSan's `undefined` group leaves float division by zero out; the faulting branch needs it
GUARD_FLAGS = [*ASAN, "-fsanitize=float-divide-by-zero"]


def _i64(name: str, v: object) -> onnx.TensorProto:
    return tensor(name, np.array(v, np.int64))


def sample_rate_switch() -> onnx.ModelProto:
    """As speech models: 16 kHz audio framed 4 x 8, anything else 8 x 4; both give [1, 4]."""

    def branch(name: str, frames: list[int], axis: int) -> onnx.GraphProto:
        return h.make_graph(
            [
                h.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_frames"]),
                h.make_node("ReduceMax", [f"{name}_frames"], [f"{name}_m"], axes=[axis]),
                h.make_node("Reshape", [f"{name}_m", "out_shape"], [f"{name}_y"]),
            ],
            name,
            [],
            [vi(f"{name}_y", [1, 4])],
            initializer=[_i64(f"{name}_shape", frames)],
        )

    nodes = [
        h.make_node("Equal", ["sr", "k16000"], ["is16k"]),
        h.make_node(
            "If",
            ["is16k"],
            ["y"],
            name="sr_if",
            then_branch=branch("then", [4, 8], 1),
            else_branch=branch("else", [8, 4], 0),
        ),
    ]
    inits = [_i64("k16000", 16000), _i64("out_shape", [1, 4])]
    return make_model(
        nodes, [vi("x", [1, 32]), vi("sr", [], T.INT64)], [vi("y", [1, 4])], inits, 13
    )


def bounds_if() -> onnx.ModelProto:
    """then (k < 8): table[k] * x, out of range otherwise; else: x / max(k - 7, 0), a division
    by zero whenever k < 8."""
    then = h.make_graph(
        [
            h.make_node("Gather", ["table", "k"], ["row"], axis=0),
            h.make_node("Mul", ["row", "x"], ["t_y"]),
        ],
        "then",
        [],
        [vi("t_y", [4])],
    )
    els = h.make_graph(
        [
            h.make_node("Sub", ["k", "seven"], ["km"]),
            h.make_node("Max", ["km", "zero"], ["kc"]),
            h.make_node("Cast", ["kc"], ["kf"], to=T.FLOAT),
            h.make_node("Div", ["x", "kf"], ["e_y"]),
        ],
        "else",
        [],
        [vi("e_y", [4])],
    )
    nodes = [
        h.make_node("Less", ["k", "eight"], ["c"]),
        h.make_node("If", ["c"], ["y"], name="bounds_if", then_branch=then, else_branch=els),
    ]
    inits = [
        tensor("table", np.arange(32, dtype=np.float32).reshape(8, 4)),
        _i64("seven", 7),
        _i64("eight", 8),
        _i64("zero", 0),
    ]
    return make_model(nodes, [vi("x", [4]), vi("k", [], T.INT64)], [vi("y", [4])], inits, 13)


def nested_if() -> onnx.ModelProto:
    """If sum(x) > 0: a = relu(x), then (inner If on k < 4) table[k] * a or a * 2; else -x.
    The inner If reads `a`, a tensor of the enclosing branch, and `k` from the main graph."""
    inner_then = h.make_graph(
        [
            h.make_node("Gather", ["table", "k"], ["row"], axis=0),
            h.make_node("Mul", ["row", "a"], ["it_y"]),
        ],
        "inner_then",
        [],
        [vi("it_y", [4])],
    )
    inner_else = h.make_graph(
        [h.make_node("Mul", ["a", "two"], ["ie_y"])], "inner_else", [], [vi("ie_y", [4])]
    )
    outer_then = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["a"]),
            h.make_node("Less", ["k", "four"], ["kc"]),
            h.make_node(
                "If",
                ["kc"],
                ["t_y"],
                name="inner_if",
                then_branch=inner_then,
                else_branch=inner_else,
            ),
        ],
        "outer_then",
        [],
        [vi("t_y", [4])],
    )
    outer_else = h.make_graph(
        [h.make_node("Neg", ["x"], ["e_y"])], "outer_else", [], [vi("e_y", [4])]
    )
    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "fzero"], ["c"]),
        h.make_node(
            "If", ["c"], ["y"], name="outer_if", then_branch=outer_then, else_branch=outer_else
        ),
    ]
    inits = [
        tensor("table", np.arange(16, dtype=np.float32).reshape(4, 4)),
        tensor("two", np.array(2, np.float32)),
        tensor("fzero", np.array(0, np.float32)),
        _i64("four", 4),
    ]
    return make_model(nodes, [vi("x", [4]), vi("k", [], T.INT64)], [vi("y", [4])], inits, 13)


def _check_each(path: Path, out: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    """Sanitized program and the ctypes library both equal onnxruntime on every feed."""
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    exe = build_executable(out, GUARD_FLAGS, name="guarded")
    model = onnx.load(path)
    for feed in feeds:
        ref = ort_run(model, feed)["y"]
        np.testing.assert_allclose(run_executable(exe, io, feed, out)["y"], ref, rtol=1e-6)
        np.testing.assert_allclose(api.run(out, feed)["y"], ref, rtol=1e-6)


def test_sample_rate_switch_runs_one_branch(tmp_path: Path) -> None:
    path = save(sample_rate_switch(), tmp_path / "sr.onnx")
    x = np.random.default_rng(0).standard_normal((1, 32)).astype(np.float32)
    feeds = [{"x": x, "sr": np.array(sr, np.int64)} for sr in (16000, 8000)]
    _check_each(path, tmp_path / "c", feeds)
    code = (tmp_path / "c" / "model.c").read_text()
    # one block per branch, each with its own internal shape ([4, 8] vs [8, 4])
    assert re.search(r"^  if \(T_\w+\[0\]\) \{", code, re.M)
    assert re.search(r"^  if \(!T_\w+\[0\]\) \{", code, re.M)
    rep = api.verify(path, target="c", inputs=feeds[1], work_dir=tmp_path / "v")
    assert rep.ok, rep.format()


def test_branch_not_taken_is_not_run(tmp_path: Path) -> None:
    """k = 3 would divide by zero in the else branch, k = 10**12 read far out of the table in
    the then branch: the sanitized program aborts if either runs when not taken."""
    path = save(bounds_if(), tmp_path / "b.onnx")
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    feeds = [{"x": x, "k": np.array(k, np.int64)} for k in (3, 7, 8, 10**12)]
    _check_each(path, tmp_path / "c", feeds)


def test_nested_runtime_if(tmp_path: Path) -> None:
    path = save(nested_if(), tmp_path / "n.onnx")
    pos = np.array([1.0, -0.5, 2.0, 0.25], np.float32)
    feeds = [{"x": sign * pos, "k": np.array(k, np.int64)} for sign in (1, -1) for k in (2, 10**12)]
    _check_each(path, tmp_path / "c", feeds)
    code = (tmp_path / "c" / "model.c").read_text()
    # the inner If's blocks sit inside the outer one's
    assert re.search(r"^  if \(T_outer_if_cond\[0\]\) \{", code, re.M)
    assert re.search(r"^    if \(T_outer_if_then_inner_if_cond\[0\]\) \{", code, re.M)


def test_branches_of_different_output_shapes_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = sample_rate_switch()
    # the else branch now ends in [4, 1]: no static shape fits both
    else_g = next(a.g for a in m.graph.node[1].attribute if a.name == "else_branch")
    else_g.initializer.append(_i64("else_out", [4, 1]))
    else_g.node[2].input[1] = "else_out"
    else_g.output[0].CopyFrom(vi("else_y", [None, None]))
    path = save(m, tmp_path / "bad.onnx")
    assert main(["convert", str(path), "--target", "c", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "node 'sr_if' (op If)" in err and "float[1, 4] vs float[4, 1]" in err, err
    assert not (tmp_path / "o").exists()


def while_loop(exit_at: int | None) -> onnx.ModelProto:
    """tf2onnx's while loop: trip count n = len(x) from Shape, the body computes its own
    condition (counter < n and i + 1 < limit) and reads x[i] with a Gather; the scan output
    stacks 2 * x[i] + h. `exit_at`: a limit that ends the loop before n (None: limit n)."""
    body = h.make_graph(
        [
            h.make_node("Add", ["counter", "one"], ["counter_out"]),
            h.make_node("Add", ["i", "one"], ["i1"]),
            h.make_node("Less", ["counter_out", "n"], ["c1"]),
            h.make_node("Less", ["i1", "limit"], ["c2"]),
            h.make_node("And", ["c1", "c2"], ["cond_out"]),
            h.make_node("Gather", ["x", "i"], ["xi"], axis=0),
            h.make_node("Mul", ["xi", "two"], ["x2"]),
            h.make_node("Add", ["x2", "h_in"], ["h_out"]),
            h.make_node("Identity", ["h_out"], ["scan"]),
        ],
        "body",
        [vi("i", [], T.INT64), vi("cond", [], T.BOOL), vi("counter", [], T.INT64), vi("h_in", [3])],
        [vi("cond_out", [], T.BOOL), vi("counter_out", [], T.INT64), vi("h_out", [3])],
    )
    body.output.append(vi("scan", [3]))
    nodes = [
        h.make_node("Shape", ["x"], ["sx"]),
        h.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
        h.make_node("Less", ["zero", "n"], ["start"]),
        h.make_node("Identity", ["n" if exit_at is None else "exit_at"], ["limit"]),
        h.make_node(
            "Loop", ["n", "start", "zero", "h0"], ["count", "h", "ys"], name="while", body=body
        ),
    ]
    inits = [
        _i64("zero", 0),
        _i64("one", 1),
        _i64("exit_at", exit_at or 0),
        tensor("two", np.array(2, np.float32)),
        tensor("h0", np.zeros(3, np.float32)),
    ]
    return make_model(
        nodes,
        [vi("x", ["n", 3])],
        [vi("count", [], T.INT64), vi("h", [3]), vi("ys", [None, 3])],
        inits,
        13,
    )


@pytest.mark.parametrize("exit_at,runs", [(None, 6), (3, 3)])
def test_while_loop_with_a_condition_from_shapes(tmp_path: Path, exit_at: int | None, runs: int):
    """The body's own condition follows from constants once x's length is fixed: unrolled as
    many times as it runs (3 when the limit ends it early, with a [3, 3] scan output)."""
    from onnx2edge.frontend import load

    path = save(while_loop(exit_at), tmp_path / "w.onnx")
    g = load(path, input_shapes={"x": (6, 3)}, quiet=True)
    assert "Loop" not in {n.op_type for n in g.nodes} and g.shape_of("ys") == (runs, 3)
    rep = api.verify(path, target="c", input_shapes={"x": (6, 3)}, work_dir=tmp_path / "c")
    assert rep.ok, rep.format()


def test_while_loop_on_run_time_values_is_named(tmp_path: Path) -> None:
    m = while_loop(None)
    m.graph.input.append(vi("stop", [], T.INT64))  # the limit now comes at run time
    m.graph.node[3].input[0] = "stop"
    path = save(m, tmp_path / "w.onnx")
    with pytest.raises(UnsupportedError, match=r"node .while. \(op Loop\) makes .ys. data-dep"):
        api.convert(path, "c", tmp_path / "c", input_shapes={"x": (6, 3)})


def test_branches_share_arena_memory(tmp_path: Path) -> None:
    """The two sides of a run-time If never run together, so the planner lets their buffers
    overlap: three 16 KiB buffers live at once (x -> a -> b -> y on one side, the other side's
    result kept), not four; both sides still equal onnxruntime under ASan."""

    def br(name: str, op: str) -> onnx.GraphProto:
        return h.make_graph(
            [
                h.make_node(op, ["x"], [f"{name}_a"]),
                h.make_node("Mul", [f"{name}_a", "x"], [f"{name}_b"]),
                h.make_node("Add", [f"{name}_b", f"{name}_a"], [f"{name}_y"]),
            ],
            name,
            [],
            [vi(f"{name}_y", [1, 4096])],
        )

    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node(
            "If", ["c"], ["y"], then_branch=br("then", "Relu"), else_branch=br("else", "Neg")
        ),
    ]
    zero = tensor("zero", np.array(0, np.float32))
    m = make_model(nodes, [vi("x", [1, 4096])], [vi("y", [1, 4096])], [zero], 13)
    path = save(m, tmp_path / "a.onnx")
    x = np.abs(np.random.default_rng(0).standard_normal((1, 4096))).astype(np.float32)
    _check_each(path, tmp_path / "c", [{"x": x}, {"x": -x}])
    arena = re.search(r"Arena: (\d+) bytes", (tmp_path / "c" / "model.c").read_text())
    assert arena and int(arena.group(1)) <= 3 * (16384 + 64), arena


def _sr_branch_model() -> onnx.ModelProto:
    """A speech-style resampling switch: keep all of x at 16 kHz, else its first sr/1000
    samples -- a length computed from the input inside the branch (issue 26, item 4)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    then_g = h.make_graph(
        [h.make_node("Identity", ["x"], ["y_then"])],
        "then_g",
        [],
        [h.make_tensor_value_info("y_then", T.FLOAT, [1, None])],
    )
    else_g = h.make_graph(
        [
            h.make_node("Div", ["sr", "k1000"], ["n"]),
            h.make_node("Reshape", ["n", "one"], ["n1"]),
            h.make_node("Slice", ["x", "zero", "n1", "one"], ["y_else"]),
        ],
        "else_g",
        [],
        [h.make_tensor_value_info("y_else", T.FLOAT, [1, None])],
    )
    consts = {"k16": 16000, "k1000": 1000}
    inits = [nh.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
    inits += [nh.from_array(np.array([v], np.int64), k) for k, v in (("zero", 0), ("one", 1))]
    g = h.make_graph(
        [
            h.make_node("Equal", ["sr", "k16"], ["is16"]),
            h.make_node("If", ["is16"], ["y"], then_branch=then_g, else_branch=else_g),
            h.make_node("Relu", ["y"], ["output"]),
        ],
        "resample",
        [
            h.make_tensor_value_info("x", T.FLOAT, [1, 16]),
            h.make_tensor_value_info("sr", T.INT64, []),
        ],
        [h.make_tensor_value_info("output", T.FLOAT, [1, None])],
        inits,
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_data_dependent_if_names_the_deciding_input(tmp_path: Path) -> None:
    """The refusal names the input that decides the branch and the --fix-input to give: one
    line on stderr, exit 2, no onnxruntime log on the way."""
    import subprocess
    import sys

    path = tmp_path / "sr.onnx"
    onnx.save(_sr_branch_model(), str(path))
    cmd = [sys.executable, "-m", "onnx2edge.cli", "convert", str(path), "--target", "c"]
    p = subprocess.run([*cmd, "-o", str(tmp_path / "c")], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "input 'sr'" in lines[0] and "--fix-input sr=VALUE" in lines[0], lines[0]
    p = subprocess.run(
        [*cmd, "-o", str(tmp_path / "c"), "--fix-input", "sr=8000"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr


def test_verify_fix_input_feeds_the_original_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify --fix-input compares with onnxruntime on the ORIGINAL model, the value fed as an
    input (onnxruntime may reject the model with the value bound: its If inlining)."""
    from onnx2edge import api

    path = tmp_path / "sr.onnx"
    onnx.save(_sr_branch_model(), str(path))
    seen: list[tuple[set[str], dict[str, np.ndarray]]] = []
    real = api.ort_run

    def spy(model, feeds, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(({i.name for i in model.graph.input}, dict(feeds)))
        return real(model, feeds, *a, **k)

    monkeypatch.setattr(api, "ort_run", spy)
    for sr, n in ((8000, 8), (16000, 16)):
        seen.clear()
        rep = api.verify(
            path, target="c", fixed_inputs={"sr": np.array(sr)}, work_dir=tmp_path / str(sr)
        )
        assert rep.ok and rep.outputs[0].shape == (1, n) and rep.outputs[0].max_abs == 0, (
            rep.format()
        )
        inputs, feeds = seen[0]
        assert "sr" in inputs and int(feeds["sr"]) == sr
