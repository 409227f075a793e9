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


def import_model(path: str | Path) -> onnx.ModelProto:
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
