"""Backends: IR -> code for a target. Each registers itself in `BACKENDS` by name; importing
this package registers the built-in ones (c, mps, coreml), so `get_backend` and the CLI's
target lists see them all."""

# The built-in backends register themselves on import (after the names above exist).
from . import c as _c  # noqa: E402, F401, I001
from .base import (
    BACKENDS,
    Backend,
    BackendOption,
    ConvertResult,
    backend_names,
    get_backend,
    read_manifest,
    register_backend,
)

try:
    from . import mps as _mps  # noqa: E402, F401
except ImportError:  # the MPS backend needs nothing optional today; kept as get_backend had it
    pass
from . import coreml as _coreml  # noqa: E402, F401  (imports coremltools only when used)

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendOption",
    "ConvertResult",
    "backend_names",
    "get_backend",
    "read_manifest",
    "register_backend",
]
