"""weights export / import: one .npy per initializer, re-injection with checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError


def test_export_import_roundtrip_and_edit(tmp_path: Path, example: Path) -> None:
    d = api.export_weights(example, tmp_path / "w")
    index = json.loads((d / "index.json").read_text())
    names = [t["name"] for t in index["tensors"]]
    assert "conv1.weight" in names and len(names) == len(onnx.load(example).graph.initializer)
    entry = next(t for t in index["tensors"] if t["name"] == "fc.bias")
    np.save(d / entry["file"], np.full(10, 3.0, np.float32))
    out = api.import_weights(example, d, tmp_path / "new.onnx")
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    assert np.array_equal(w["fc.bias"], np.full(10, 3.0, np.float32))
    orig = {t.name: numpy_helper.to_array(t) for t in onnx.load(example).graph.initializer}
    assert np.array_equal(w["conv1.weight"], orig["conv1.weight"])


def _exported(tmp_path: Path, example: Path) -> tuple[Path, dict]:
    d = api.export_weights(example, tmp_path / "w")
    return d, json.loads((d / "index.json").read_text())


def test_import_wrong_shape(tmp_path: Path, example: Path) -> None:
    d, index = _exported(tmp_path, example)
    e = next(t for t in index["tensors"] if t["name"] == "fc.bias")
    np.save(d / e["file"], np.zeros(11, np.float32))
    with pytest.raises(Onnx2EdgeError, match=r"'fc.bias' has shape \[11\].*needs \[10\]"):
        api.import_weights(example, d, tmp_path / "o.onnx")
    assert not (tmp_path / "o.onnx").exists()


def test_import_wrong_dtype(tmp_path: Path, example: Path) -> None:
    d, index = _exported(tmp_path, example)
    e = next(t for t in index["tensors"] if t["name"] == "fc.bias")
    np.save(d / e["file"], np.zeros(10, np.float64))
    with pytest.raises(Onnx2EdgeError, match="dtype float64.*needs float32"):
        api.import_weights(example, d, tmp_path / "o.onnx")


def test_import_unknown_name(tmp_path: Path, example: Path) -> None:
    d, index = _exported(tmp_path, example)
    index["tensors"][0]["name"] = "no.such.tensor"
    (d / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        Onnx2EdgeError, match=r"tensors\[0\]: the model has no initializer 'no.such.tensor'"
    ):
        api.import_weights(example, d, tmp_path / "o.onnx")


def test_import_path_escape(tmp_path: Path, example: Path) -> None:
    d, index = _exported(tmp_path, example)
    index["tensors"][0]["file"] = "../../x.npy"
    (d / "index.json").write_text(json.dumps(index))
    with pytest.raises(Onnx2EdgeError, match="points outside"):
        api.import_weights(example, d, tmp_path / "o.onnx")
