"""C backend: NonMaxSuppression and Unique, whose output sizes depend on the values
(passes/bounded.py gives them an upper bound; `<prefix>_output_count(i)` reports the actual
extent), verified against onnxruntime through the generated library and its manifest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError

from conftest import make_model, save, tensor, vi

I64 = TensorProto.INT64


@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_onnxruntime(tmp_path: Path, center: int) -> None:
    """Random overlapping boxes, 2 batches x 3 classes, score threshold and a per-class limit;
    ties in score and a NaN score included."""
    rng = np.random.default_rng(7)
    xy = rng.random((2, 40, 2)).astype(np.float32) * 10
    wh = rng.random((2, 40, 2)).astype(np.float32) * 4 + 0.5
    boxes = np.concatenate([xy, wh], -1) if center else np.concatenate([xy, xy + wh], -1)
    scores = rng.random((2, 3, 40)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 6]
    scores[1, 2, 3] = np.nan
    inits = [
        tensor("m", np.array(7, np.int64)),
        tensor("iou", np.array(0.3, np.float32)),
        tensor("st", np.array(0.2, np.float32)),
    ]
    node = helper.make_node(
        "NonMaxSuppression", ["b", "s", "m", "iou", "st"], ["y"], center_point_box=center
    )
    m = make_model(
        [node], [vi("b", [2, 40, 4]), vi("s", [2, 3, 40])], [vi("y", ["n", 3], I64)], inits,
        opset=11,
    )  # fmt: skip
    rep = api.verify(save(m, tmp_path / "m.onnx"), target="c", inputs={"b": boxes, "s": scores})
    assert rep.ok, rep.format()


@pytest.mark.parametrize(("axis", "sort"), [(None, 1), (None, 0), (0, 1), (1, 1), (-1, 0)])
def test_unique_matches_onnxruntime(tmp_path: Path, axis: int | None, sort: int) -> None:
    x = np.array([[2, 1, 2, 1], [0, 5, 0, 5], [2, 1, 2, 1]], np.float32)
    kw = {} if axis is None else {"axis": axis}
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=sort, **kw)
    ys = ["u"] if axis is None else (["u", 4] if axis == 0 else [3, "u"])
    outs = [vi("y", ys), vi("i", ["u"], I64), vi("inv", ["k"], I64), vi("c", ["u"], I64)]
    m = make_model([node], [vi("x", [3, 4])], outs, opset=11)
    rep = api.verify(save(m, tmp_path / "m.onnx"), target="c", inputs={"x": x}, rtol=0, atol=0)
    assert rep.ok, rep.format()


def test_a_bounded_output_read_by_another_op_is_refused(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Unique", ["x"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
    ]
    m = make_model(nodes, [vi("x", [6])], [vi("z", [])], opset=11)
    with pytest.raises(Onnx2EdgeError, match="a graph output that no other node reads"):
        api.convert(save(m, tmp_path / "m.onnx"), target="c", out_dir=tmp_path / "c")
