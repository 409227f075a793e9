"""Frontend: an ONNX file on disk -> a checked ModelProto -> the IR."""

from .loader import MAX_OPSET, MIN_OPSET, load, load_model, parse_input_shapes

__all__ = ["MAX_OPSET", "MIN_OPSET", "load", "load_model", "parse_input_shapes"]
