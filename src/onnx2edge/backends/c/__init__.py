"""The C backend: IR -> model.c / model.h (+ model_weights.bin), built and run for verification."""

from .backend import CBackend

__all__ = ["CBackend"]
