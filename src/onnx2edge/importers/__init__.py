"""Models in other formats (TensorFlow Lite, OpenVINO IR) imported as ONNX.

`import_model(path)` is the one entry point; the frontend's `read_model_proto` calls it for
the suffixes in `IMPORTED_SUFFIXES`, so every command that reads a model reads these too.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from ..errors import Onnx2EdgeError

IMPORTED_SUFFIXES = {".tflite": "TFLite", ".xml": "OpenVINO IR"}


def model_format(path: str | Path) -> str | None:
    """'tflite', 'openvino' or None (an ONNX file) from the file's suffix."""
    suffix = Path(path).suffix.lower()
    return {".tflite": "tflite", ".xml": "openvino"}.get(suffix)


def _cancel_transposes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The layout Transposes an import leaves (TFLite's NHWC around NCHW convolutions, the
    ones OpenVINO's TFLite frontend writes) pushed through layout-agnostic ops until pairs
    meet and cancel: the `nhwc` command's optimiser, exact."""
    from ..edit.transposes import optimize_transposes
    from ..ir.onnx_shapes import infer_shapes
    from ..ir.proto import graph_from_model, model_from_graph

    if not any(n.op_type == "Transpose" for n in model.graph.node):
        return model
    out = model_from_graph(optimize_transposes(graph_from_model(infer_shapes(model))))
    out.producer_name, out.doc_string = model.producer_name, model.doc_string
    return out


def import_model(path: str | Path) -> onnx.ModelProto:
    return _cancel_transposes(_import(path))


def _import(path: str | Path) -> onnx.ModelProto:
    source = Path(path)
    if not source.is_file():
        raise Onnx2EdgeError(f"{source}: no such file")
    kind = model_format(source)
    if kind == "tflite":
        from .tflite import import_tflite

        return import_tflite(source)
    if kind == "openvino":
        from .openvino import import_openvino

        return import_openvino(source)
    raise Onnx2EdgeError(f"{source}: not a .tflite or OpenVINO .xml model")
