"""onnx2edge: ONNX models -> verified, fast inference code for edge devices.

The Python API mirrors the CLI: `inspect`, `to_json`/`from_json`, `export_weights`/
`import_weights`, `convert`, `run`, `verify`, `quantize`, `compare_quantized` (see
`onnx2edge.api`).
"""

__version__ = "0.1.0"

from .errors import Onnx2EdgeError, UnsupportedError  # noqa: E402

_API = (
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
)


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the API loads on first use
    """`onnx2edge.convert` and friends import `onnx2edge.api` (onnx, numpy, every pass and
    backend) when first touched, so `import onnx2edge.cli` and `onnx2edge --help` stay quick.

    Importing the submodule `onnx2edge.verify` makes Python set the package attribute
    `verify` to that module, which would hide the function from then on: every API function
    is therefore bound here once the API is loaded (and the module itself is callable, for
    code that imported it before touching the API)."""
    if name in _API:
        from . import api

        globals().update({n: getattr(api, n) for n in _API})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Onnx2EdgeError", "UnsupportedError", *_API]
