"""Backends come from the registry (issue 10 item 5): the CLI's targets and each target's
conversion options are read from `BACKENDS` and `Backend.options`, nowhere else."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from onnx2edge import api
from onnx2edge.backends import BACKENDS, Backend, BackendOption, backend_names, get_backend
from onnx2edge.check import available_targets
from onnx2edge.cli import build_parser, main


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def test_every_backend_is_a_target_everywhere() -> None:
    names = backend_names()
    assert {"c", "mps", "coreml"} <= set(names) and names == sorted(BACKENDS)
    assert set(_option(_subparser("convert"), "--target").choices) == set(names)
    assert set(_option(_subparser("verify"), "--target").choices) == {"onnx", *names}
    assert set(names) <= set(available_targets())  # check --target
    for name in names:
        assert get_backend(name).name == name  # run: the manifest's target finds its backend


def test_every_declared_option_is_a_flag_of_convert_and_verify() -> None:
    for cmd in ("convert", "verify"):
        parser = _subparser(cmd)
        for b in BACKENDS.values():
            for o in b.options:
                act = _option(parser, o.flag)
                assert act.dest == o.name
                assert (b.label or b.name) in (act.help or ""), (cmd, o.flag, act.help)
    assert "--blas" not in _subparser("convert").format_help()  # parsed, never read: gone


def test_options_reach_the_manifest_as_declared(tmp_path: Path, example: Path) -> None:
    """convert records the target's options (defaults included unless declared otherwise)
    and nothing of another target's; `--fp16` is C's `--weights fp16` (issue 29: one fp16
    spelling for every target, never a flag silently ignored)."""
    out = tmp_path / "c"
    assert main(["convert", str(example), "--target", "c", "-o", str(out), "--fp16"]) == 0
    opts = json.loads((out / "onnx2edge.json").read_text())["options"]
    # --max-threads: recorded with its default (the arena's per-thread workspaces depend on it)
    assert opts == {"optimize": "speed", "weights_file": False, "weights": "fp16", "max_threads": 4}
    out2 = tmp_path / "c2"
    args = ["--weights", "fp16", "--optimize", "size", "--kernels", "lanes=off,direct=off"]
    assert main(["convert", str(example), "--target", "c", "-o", str(out2), *args]) == 0
    opts = json.loads((out2 / "onnx2edge.json").read_text())["options"]
    assert opts == {
        "optimize": "size",
        "weights_file": False,
        "weights": "fp16",
        "kernels": "direct=off,lanes=off",
        "max_threads": 4,
    }


def test_a_new_backend_needs_no_cli_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering a backend adds it to the targets and its options to the flags."""

    class Toy(Backend):
        name = "toy"
        label = "Toy"
        options = (BackendOption("toy_level", "how toy", choices=("1", "2"), default="1"),)

        def unsupported(self, graph):  # noqa: ANN001, ANN201
            return []

        def emit(self, graph, out_dir, options):  # noqa: ANN001, ANN201
            raise NotImplementedError

        def run(self, out_dir, inputs, options):  # noqa: ANN001, ANN201
            raise NotImplementedError

    monkeypatch.setitem(BACKENDS, "toy", Toy)
    convert = _subparser("convert")
    assert "toy" in _option(convert, "--target").choices
    assert _option(convert, "--toy-level").choices == ("1", "2")
    a = convert.parse_args(["m.onnx", "--target", "toy", "-o", "out"])
    from onnx2edge.cli import _target_options

    assert _target_options(a, "toy") == {"toy_level": "1"}
    assert _target_options(a, "c") == {"weights_file": False, "optimize": "speed", "max_threads": 4}


def test_bad_kernels_option_is_refused_before_loading(tmp_path: Path) -> None:
    from onnx2edge.errors import Onnx2EdgeError

    with pytest.raises(Onnx2EdgeError, match="nosuch"):
        api.convert(
            tmp_path / "missing.onnx", "c", tmp_path / "o", options={"kernels": "nosuch=off"}
        )


def _refused_model() -> object:
    """A Conv (every backend takes it) then a node of an op none has (a custom domain's; the
    frontend would refuse it first, so the IR is built from the proto directly)."""
    from onnx import TensorProto, helper

    from onnx2edge.ir.proto import graph_from_model

    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Frob", ["c"], ["y"], name="frob", domain="com.example"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    return graph_from_model(m)


@pytest.mark.parametrize("target", ["c", "mps", "coreml"])
def test_backends_refuse_in_records(target: str) -> None:
    """Backend.check returns Refusal records (node, op, domain, opset, reason, fix); the text
    `convert` prints is `str(record)`, one format for every backend."""
    from onnx2edge.backends.refusal import Refusal
    from onnx2edge.passes import run_passes

    backend = get_backend(target)
    graph = run_passes(_refused_model(), backend.required_passes)
    refusals = backend.check(graph, {})
    assert refusals and all(isinstance(r, Refusal) for r in refusals)
    frob = [r for r in refusals if r.node == "frob"]
    assert frob, refusals
    r = frob[0]
    assert (r.op, r.domain, r.opset) == ("Frob", "com.example", 17) and r.reason
    assert str(r).startswith("node 'frob' (op com.example.Frob, opset 17): ")
    assert "conv" not in {x.node for x in refusals}
    assert backend.unsupported_for(graph, {}) == [str(x) for x in refusals]
    assert ("", "Conv") in backend.supported_ops


def test_check_consumes_records_and_backends_register_checkers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """check reads the records (no regex over text) and takes its targets from the backend
    registry: a new backend is a check target with no register_checker call."""
    import inspect

    from onnx2edge import check as chk
    from onnx2edge.backends.refusal import Refusal

    assert "import re" not in inspect.getsource(chk)

    class Picky(Backend):
        name = "picky"

        def check(self, graph, options=None):  # noqa: ANN001, ANN201
            return [
                Refusal.of(n, graph.opset, "picky refuses Relu", fix="use Clip")
                for n in graph.nodes
                if n.op_type == "Relu"
            ] + [Refusal.graph("and the model as a whole")]

        def emit(self, graph, out_dir, options):  # noqa: ANN001, ANN201
            raise NotImplementedError

        def run(self, out_dir, inputs, options):  # noqa: ANN001, ANN201
            raise NotImplementedError

    monkeypatch.setitem(BACKENDS, "picky", Picky)
    assert "picky" in available_targets() and "coreml-ane" in available_targets()
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rep = chk.check_model(m, "picky")
    by_node = {e["node"]: e for e in rep["nodes"]}
    assert by_node["r"]["status"] == "unsupported"
    # the reason and the fix stay apart (Refusal.fix): check shows both
    assert by_node["r"]["reason"] == "picky refuses Relu" and by_node["r"]["fix"] == "use Clip"
    assert by_node[None]["reason"] == "and the model as a whole"
    assert by_node["r"]["source"].endswith("Picky.check")
