"""onnx2edge: ONNX models -> verified, fast inference code for edge devices.

The Python API mirrors the CLI: `inspect`, `to_json`/`from_json`, `export_weights`/
`import_weights`, `convert`, `run`, `verify`, `quantize`, `compare_quantized` (see
`onnx2edge.api`).
"""

__version__ = "0.1.0"

from .api import (  # noqa: E402
    compare_quantized,
    convert,
    export_weights,
    from_json,
    import_weights,
    inspect,
    quantize,
    run,
    to_json,
    verify,
)
from .errors import Onnx2EdgeError, UnsupportedError  # noqa: E402

__all__ = [
    "Onnx2EdgeError",
    "UnsupportedError",
    "compare_quantized",
    "convert",
    "export_weights",
    "from_json",
    "import_weights",
    "inspect",
    "quantize",
    "run",
    "to_json",
    "verify",
]
