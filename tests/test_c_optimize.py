"""`convert --optimize speed|size` (C target): size keeps the weights at about their ONNX size
(no Winograd-transformed copies), speed is the default; both are recorded in the manifest,
both match onnxruntime, and convert reports the weight (flash) and arena (RAM) bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError

from conftest import make_model, save, tensor, vi

WINOGRAD = "Conv: winograd"


def _convs(path: Path) -> Path:
    """Two 3x3 convolutions with 16 channels on 20x20: Winograd's case."""
    rng = np.random.default_rng(4)
    w1 = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    w2 = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="c1"
        ),
        helper.make_node("Relu", ["a"], ["b"], name="r1"),
        helper.make_node(
            "Conv", ["b", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="c2"
        ),
    ]
    return save(
        make_model(
            nodes,
            [vi("x", [1, 16, 20, 20])],
            [vi("y", [1, 16, 20, 20])],
            [tensor("w1", w1), tensor("w2", w2)],
        ),
        path,
    )


def test_size_keeps_onnx_weight_size_and_matches(tmp_path: Path) -> None:
    path = _convs(tmp_path / "m.onnx")
    speed = api.convert(path, "c", tmp_path / "speed").stats
    size = api.convert(path, "c", tmp_path / "size", options={"optimize": "size"}).stats
    assert any(k.startswith(WINOGRAD) for k in speed["kernels"]), speed["kernels"]
    assert not any(k.startswith(WINOGRAD) for k in size["kernels"]), size["kernels"]
    onnx_bytes = 2 * 16 * 16 * 9 * 4
    assert speed["onnx_weight_bytes"] == size["onnx_weight_bytes"] == onnx_bytes
    assert speed["weight_bytes"] > 1.5 * onnx_bytes  # transformed 3x3 weights: 16/9 or 36/9
    assert size["weight_bytes"] <= 1.05 * onnx_bytes
    assert size["arena_bytes"] > 0 and speed["optimize"] == "speed" and size["optimize"] == "size"
    manifest = json.loads((tmp_path / "size" / "onnx2edge.json").read_text())
    assert manifest["options"]["optimize"] == "size"
    rep = api.verify(path, target="c", options={"optimize": "size"})
    assert rep.ok, rep


def test_bad_optimize_value_is_a_clear_error(tmp_path: Path) -> None:
    path = _convs(tmp_path / "m.onnx")
    with pytest.raises(Onnx2EdgeError, match="optimize"):
        api.convert(path, "c", tmp_path / "out", options={"optimize": "fast"})
    assert not (tmp_path / "out").exists()  # nothing half-written
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnx2edge.cli",
            "convert",
            str(path),
            "--target",
            "c",
            "-o",
            str(tmp_path / "cli"),
            "--optimize",
            "size",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "footprint: flash 0.0" in p.stdout and "RAM 0.0" in p.stdout, p.stdout
