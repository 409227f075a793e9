"""The one exception type users see: its message is the whole one-line diagnosis."""


class Onnx2EdgeError(Exception):
    """A user-facing error. The CLI prints `onnx2edge: error: <message>` and exits non-zero.

    Messages name the file / node / op / opset involved and say what the user can do.
    """


class UnsupportedError(Onnx2EdgeError):
    """A model uses something a target cannot express (op, opset, dtype, attribute)."""
