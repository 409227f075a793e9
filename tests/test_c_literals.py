"""The C literals of constant arrays: array_literal's bulk paths write exactly what c_literal
writes for each value (a constant's text must not depend on which path formatted it)."""

from __future__ import annotations

import numpy as np
import pytest

from onnx2edge.backends.c.emitter import array_literal, c_literal


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.bool_]
)
def test_integer_arrays_match_c_literal_per_value(dtype: type) -> None:
    rng = np.random.default_rng(0)
    if dtype is np.bool_:
        a = rng.integers(0, 2, 100).astype(bool)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, 500, endpoint=True, dtype=np.int64)
        a = a.astype(dtype)
        a[:2] = [info.min, info.max]
    assert array_literal(a, per_line=len(a)) == ", ".join(c_literal(v, dtype) for v in a)


def test_int32_min_keeps_its_macro() -> None:
    a = np.array([1, np.iinfo(np.int32).min, -3], np.int32)
    assert array_literal(a, per_line=3) == "1, INT32_MIN, -3"


def test_float_arrays_match_c_literal_per_value() -> None:
    a = np.array([0.0, -0.0, 1.5, 3e-38, 1e-45, np.nan, -np.inf, 65504.0], np.float32)
    assert array_literal(a, per_line=len(a)) == ", ".join(c_literal(v, np.float32) for v in a)
    finite = a[np.isfinite(a)]
    assert array_literal(finite, per_line=len(finite)) == ", ".join(
        c_literal(v, np.float32) for v in finite
    )
