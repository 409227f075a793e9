"""C backend: MatMul on float64 (a plain loop accumulating in double), batched and broadcast,
against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

from onnx2edge import api

from conftest import make_model, save, vi

F64 = TensorProto.DOUBLE


@pytest.mark.parametrize(
    ("a", "b", "y"),
    [([3, 4], [4, 5], [3, 5]), ([2, 1, 3, 4], [3, 4, 2], [2, 3, 3, 2]), ([4], [2, 4, 3], [2, 3])],
    ids=str,
)
def test_matmul_float64(tmp_path: Path, a: list[int], b: list[int], y: list[int]) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = make_model([node], [vi("a", a, F64), vi("b", b, F64)], [vi("y", y, F64)], opset=18)
    rep = api.verify(save(model, tmp_path / "m.onnx"), target="c")
    assert rep.ok, rep.format()
