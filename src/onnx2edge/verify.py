"""`onnx2edge.verify`: the comparison of `onnx2edge.compare` (re-exported: `from
onnx2edge.verify import compare` keeps working), and a module that is callable.

`onnx2edge.verify` names both this module and the API function `verify`: once the module is
imported, Python makes it the package attribute, so `onnx2edge.verify(...)` must still work
when this module was imported first (`from onnx2edge.verify import compare`). The comparison
lives in `compare.py`, which the API imports, so this module calling the API closes no circle.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .compare import (  # noqa: F401  (the public names, from before the split)
    SPREAD_FACTOR,
    TensorReport,
    VerifyReport,
    compare,
    compare_all,
    within_spread,
)


class _CallableModule(types.ModuleType):
    def __call__(self, model: Any, **kwargs: Any) -> VerifyReport:
        from .api import verify

        return verify(model, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
