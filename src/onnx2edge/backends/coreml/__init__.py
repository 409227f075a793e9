"""Core ML backend: `onnx2edge convert MODEL --target coreml --format neuralnetwork|mlprogram`."""

from .backend import CoreMLBackend

__all__ = ["CoreMLBackend"]
