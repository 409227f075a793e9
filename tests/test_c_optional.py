"""C backend: an optional(tensor) graph input is a plain tensor input (always present), read by
OptionalHasElement / OptionalGetElement (ops/optional.py), verified against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.backend import CBackend

from conftest import save, vi


def test_optional_tensor_input(tmp_path: Path) -> None:
    opt = helper.make_value_info(
        "o",
        helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [4])),
    )
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("OptionalGetElement", ["o"], ["t"]),
        helper.make_node("Neg", ["t"], ["y"]),
    ]
    g = helper.make_graph(nodes, "t", [opt], [vi("has", [], TensorProto.BOOL), vi("y", [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    x = np.array([1.0, -2.0, np.nan, np.inf], np.float32)
    # `verify` builds its reference graph without the frontend, which has no type for an
    # optional input: compare with onnxruntime directly
    out = api.convert(save(m, tmp_path / "m.onnx"), target="c", out_dir=tmp_path / "c")
    got = CBackend().run(out.out_dir, {"o": x}, {})
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    has, y = sess.run(["has", "y"], {"o": x})
    np.testing.assert_array_equal(got["has"], has)
    np.testing.assert_array_equal(got["y"], y)
