"""Issue 29, "the first hour of a new user": the frictions a new user hit through the README's
commands and the Python API, each reproduced here first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError

from conftest import EXAMPLE

SRC = Path(__file__).resolve().parent.parent / "src"


def _py(code: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter: the lazy API exports depend on what was imported before."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )


# --- 3. the Python API -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "first",
    [
        "onnx2edge.convert(M, 'c', OUT)",  # imports the api, which imports the verify module
        "from onnx2edge.verify import compare",  # the submodule imported before any API call
    ],
)
def test_api_verify_callable_after_other_imports(first: str, tmp_path: Path) -> None:
    r = _py(
        f"import onnx2edge\nM, OUT = {str(EXAMPLE)!r}, {str(tmp_path / 'o')!r}\n{first}\n"
        "rep = onnx2edge.verify(M)\nprint(rep.ok, callable(onnx2edge.verify))\n"
        "from onnx2edge.verify import compare, VerifyReport\nprint(callable(compare))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"], r.stdout


def test_api_accepts_model_proto(tmp_path: Path) -> None:
    m = onnx.load(EXAMPLE)
    res = api.convert(m, "c", tmp_path / "c")
    manifest = json.loads((tmp_path / "c" / "onnx2edge.json").read_text())
    # named by its graph, not by the protobuf's text
    assert manifest["model"].startswith(m.graph.name) and "ir_version" not in manifest["model"]
    assert res.files
    assert api.verify(m, target="c").ok
    assert api.inspect(m)["total_macs"] == 1_724_736
    assert api.check(m, "c")["totals"]["unsupported"] == 0
    q = api.quantize(m, tmp_path / "q.onnx", mode="fp16")
    assert q.output.is_file() and q.size_before > 0
    api.export_weights(m, tmp_path / "w")
    assert (tmp_path / "w" / "index.json").is_file()


@pytest.mark.parametrize(
    "target, options, words",
    [
        ("c", {"wieghts": "fp16"}, ["'wieghts'", "did you mean 'weights'"]),
        ("c", {"gpu_only": True}, ["'gpu_only'", "mps", "not c"]),
        ("coreml", {"optimize": "size"}, ["'optimize'", "target c", "not coreml"]),
        ("mps", {"bogus": 1}, ["'bogus'", "mps takes"]),
    ],
)
def test_api_refuses_unknown_options(
    target: str, options: dict, words: list[str], tmp_path: Path
) -> None:
    for call in (
        lambda: api.convert(EXAMPLE, target, tmp_path / "o", options=options),
        lambda: api.verify(EXAMPLE, target=target, options=options),
    ):
        with pytest.raises(Onnx2EdgeError) as e:
            call()
        msg = str(e.value)
        assert all(w in msg for w in words), msg
        assert "\n" not in msg
    assert not (tmp_path / "o").exists()


def test_api_fp16_spellings(tmp_path: Path) -> None:
    """One spelling of fp16 for every target: `fp16=True` on C means weights fp16, and
    `weights='fp16'` on Core ML means its fp16."""
    api.convert(EXAMPLE, "c", tmp_path / "c", options={"fp16": True})
    m = json.loads((tmp_path / "c" / "onnx2edge.json").read_text())
    assert m["options"].get("weights") == "fp16", m["options"]
    with pytest.raises(Onnx2EdgeError, match="fp16"):
        api.convert(EXAMPLE, "c", tmp_path / "d", options={"fp16": True, "weights": "fp32"})


# --- 4. flags of another target -------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "onnx2edge.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def _refused(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx2edge: error: "), r.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_cli_fp16_spelt_either_way(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert _cli("convert", str(EXAMPLE), "--target", "c", "--fp16", "-o", str(out)).returncode == 0
    assert json.loads((out / "onnx2edge.json").read_text())["options"]["weights"] == "fp16"
    assert "static const uint16_t" in (out / "model.c").read_text()  # fp16 weights stored


def test_cli_coreml_weights_fp16(tmp_path: Path) -> None:
    pytest.importorskip("coremltools")
    out = tmp_path / "ml"
    r = _cli(
        "convert", str(EXAMPLE), "--target", "coreml", "--format", "neuralnetwork",
        "--weights", "fp16", "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "onnx2edge.json").read_text())["options"]["fp16"] is True


@pytest.mark.parametrize(
    "args, words",
    [
        (["convert", "--target", "c", "--gpu-only"], ["--gpu-only", "mps", "not c"]),
        (["convert", "--target", "c", "--format", "mlprogram"], ["--format", "coreml"]),
        (["convert", "--target", "mps", "--optimize", "size"], ["--optimize", "--target c"]),
        (["convert", "--target", "c", "--fp16", "--weights", "fp32"], ["fp16", "fp32"]),
        (["verify", "--fp16"], ["--fp16", "not onnx"]),
    ],
)
def test_cli_refuses_flags_of_another_target(
    args: list[str], words: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "o"
    cmd = [args[0], str(EXAMPLE), *args[1:], *(["-o", str(out)] if args[0] == "convert" else [])]
    _refused(_cli(*cmd), *words)
    assert not out.exists()
