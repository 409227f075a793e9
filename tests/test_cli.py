"""The CLI: exit codes, one-line errors without traceback, no partial output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from onnx2edge.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onnx2edge.cli", *args], capture_output=True, text=True
    )


def test_inspect_json(example: Path, capsys) -> None:  # noqa: ANN001
    assert main(["inspect", str(example), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"total_params", "total_macs", "nodes"} <= set(info)
    assert info["total_macs"] == sum(n["macs"] for n in info["nodes"]) == 1_724_736


def test_inspect_table(example: Path, capsys) -> None:  # noqa: ANN001
    assert main(["inspect", str(example)]) == 0
    out = capsys.readouterr().out
    assert "total MACs: 1,724,736" in out and "conv1" in out


def test_verify_exit_codes(example: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["verify", str(example)]) == 0
    np.save(tmp_path / "x.npy", np.ones((1, 3, 32, 32), np.float32))
    capsys.readouterr()
    assert main(["verify", str(example), "--input", f"input={tmp_path / 'x.npy'}", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["outputs"][0]["name"] == "logits"
    # the onnx target re-emits the same graph: exact, so zero tolerance passes
    assert main(["verify", str(example), "--rtol", "0", "--atol", "0"]) == 0


def test_errors_are_one_line(tmp_path: Path, example: Path) -> None:
    trunc = tmp_path / "t.onnx"
    trunc.write_bytes(example.read_bytes()[:3000])
    cases = [
        ["inspect", str(tmp_path / "missing.onnx")],
        ["inspect", str(trunc)],
        ["inspect", str(example), "--input-shape", "input=1xfoo"],
        ["verify", str(example), "--input", "input=nothere.npy"],
        ["from-json", str(tmp_path / "none.json"), "-o", str(tmp_path / "o.onnx")],
    ]
    for args in cases:
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("onnx2edge: error: "), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_debug_shows_traceback(tmp_path: Path) -> None:
    r = run_cli("--debug", "inspect", str(tmp_path / "missing.onnx"))
    assert r.returncode != 0 and "Traceback" in r.stderr
    r = run_cli("inspect", str(tmp_path / "missing.onnx"), "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_json_roundtrip_cli(tmp_path: Path, example: Path) -> None:
    assert main(["json", str(example), "-o", str(tmp_path / "m.json")]) == 0
    assert main(["from-json", str(tmp_path / "m.json"), "-o", str(tmp_path / "m.onnx")]) == 0
    import onnx

    a = onnx.load(example).SerializeToString(deterministic=True)
    assert onnx.load(tmp_path / "m.onnx").SerializeToString(deterministic=True) == a


def test_weights_cli(tmp_path: Path, example: Path) -> None:
    assert main(["weights", "export", str(example), "-o", str(tmp_path / "w")]) == 0
    assert (tmp_path / "w" / "index.json").is_file()
    assert (
        main(
            ["weights", "import", str(example), str(tmp_path / "w"), "-o", str(tmp_path / "m.onnx")]
        )
        == 0
    )
    assert (tmp_path / "m.onnx").read_bytes()


def test_help_and_argument_errors_import_no_heavy_module() -> None:
    """`import onnx2edge.cli`, `onnx2edge --help`, a command's --help and an argument error
    load neither onnxruntime, coremltools nor matplotlib (nor the API, the backends, the edit
    rules, onnx or numpy: only the command being run loads what its flags need), so they
    answer quickly."""
    import subprocess
    import sys

    heavy = (
        *("onnxruntime", "coremltools", "matplotlib"),
        *("onnx2edge.api", "onnx2edge.backends", "onnx2edge.edit", "onnx", "numpy"),
    )
    script = (
        "import sys\n"
        "from onnx2edge import cli\n"
        "for argv in ([], ['--help'], ['inspect', '--help'], ['bogus'], ['inspect']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]", out
    # convert's flags come from every backend's declaration: still none of the three
    script = script.replace("['inspect']):", "['inspect'], ['convert', '--help']):")
    script = script.replace(repr(heavy), repr(heavy[:3]))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]", out
