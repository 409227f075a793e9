"""ONNX backend node tests through the C backend (the backbone of C testing, as in onnx2c)."""

from __future__ import annotations

import pytest

from onnx2edge.backends.c.conformance import collect_cases, run_conformance, summarize

# Raised as coverage grows; docs/conformance.md holds the current table.
MIN_PASSED = 640


@pytest.fixture(scope="module")
def results():  # noqa: ANN201
    return run_conformance(collect_cases())


def test_conformance_floor(results) -> None:  # noqa: ANN001
    s = summarize(results)
    assert s["total"] >= 1800
    assert s["passed"] >= MIN_PASSED, f"{s['passed']} passed, floor {MIN_PASSED}"


def test_no_case_crashes(results) -> None:  # noqa: ANN001
    crashed = [r for r in results if "crash" in r.detail or "converter error" in r.detail]
    assert not crashed, crashed[:5]


def test_failures_are_explained(results) -> None:  # noqa: ANN001
    for r in results:
        if r.status != "passed":
            assert r.detail, r
