"""Swift / MPSNNGraph backend: `onnx2edge convert MODEL --target mps`."""

from .backend import MPSBackend

__all__ = ["MPSBackend"]
