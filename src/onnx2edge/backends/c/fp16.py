"""Which float32 constants `convert --weights fp16` stores as IEEE half.

Below the emitter and the writer (both ask), so neither imports the other for it.
"""

from __future__ import annotations

import numpy as np

# Small constants (scales, clip bounds, pads, -FLT_MAX sentinels) stay float32: they cost no
# flash worth saving and some must stay exact.
FP16_MIN_ELEMENTS = 64
FP16_MAX = 65504.0


def fp16_storable(arr: np.ndarray) -> bool:
    """True when `arr` is a float32 constant big enough to be worth halving and whose finite
    values all fit fp16's range."""
    if arr.dtype != np.float32 or arr.size < FP16_MIN_ELEMENTS:
        return False
    finite = arr[np.isfinite(arr)]
    return bool(finite.size == 0 or np.abs(finite).max() <= FP16_MAX)
