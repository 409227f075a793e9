"""Backends: IR -> code for a target. Each registers itself in `BACKENDS` by name."""

from .base import BACKENDS, Backend, ConvertResult, get_backend, read_manifest, register_backend

__all__ = [
    "BACKENDS",
    "Backend",
    "ConvertResult",
    "get_backend",
    "read_manifest",
    "register_backend",
]
