"""Import coremltools quietly.

On Linux coremltools logs, at import, that its native runtime (`libcoremlpython`) is missing:
that is expected here (Core ML cannot predict or compile off Apple platforms) and would
otherwise print eight lines on every `onnx2edge` command.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Any

from ...errors import Onnx2EdgeError


def coremltools() -> Any:
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    try:
        import coremltools as ct
    except ImportError as e:
        raise Onnx2EdgeError(
            "the coreml target needs coremltools: pip install 'onnx2edge[coreml]'"
        ) from e
    return ct


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """ct.convert draws tqdm progress bars on stderr for each pass pipeline and
    quantize_weights prints one line per layer on stdout; swallow both (errors still surface
    as exceptions)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        yield
