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
