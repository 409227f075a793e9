"""ONNX backend node tests through the C backend (the backbone of C testing, as in onnx2c)."""

from __future__ import annotations

import pytest

from onnx2edge.backends.c.conformance import collect_cases, run_conformance, summarize

# Raised as coverage grows; docs/conformance.md holds the current table.
MIN_PASSED = 1700


@pytest.fixture(scope="module")
def results():  # noqa: ANN201
    return run_conformance(collect_cases())


def test_conformance_floor(results) -> None:  # noqa: ANN001
    s = summarize(results)
    assert s["total"] >= 1800
    assert s["passed"] >= MIN_PASSED, f"{s['passed']} passed, floor {MIN_PASSED}"


def test_no_case_fails(results) -> None:  # noqa: ANN001
    """Every case passes or is refused with a reason: none gives wrong numbers."""
    failed = [(r.name, r.detail) for r in results if r.status == "failed"]
    assert not failed, failed[:5]


def test_no_case_crashes(results) -> None:  # noqa: ANN001
    crashed = [r for r in results if "crash" in r.detail or "converter error" in r.detail]
    assert not crashed, crashed[:5]


def test_failures_are_explained(results) -> None:  # noqa: ANN001
    for r in results:
        if r.status != "passed":
            assert r.detail, r


def test_sanitizers_clean_on_a_subset(results) -> None:  # noqa: ANN001
    """A subset under -fsanitize=address,undefined (every case, with -m slow)."""
    import re

    rx = re.compile(r"test_(conv|maxpool|averagepool|relu|gemm|matmul|concat|softmax|reduce_sum|gather|slice|resize_upsample|pad|transpose|layer_norm|lstm|cast)")
    cases = [c for c in collect_cases() if rx.search(c.name)]
    plain = {r.name: r.status for r in results}
    sanitized = run_conformance(cases, sanitize=True)
    regressions = [(r.name, r.detail) for r in sanitized if r.status != plain[r.name]]
    assert not regressions, regressions[:5]


@pytest.mark.slow
def test_sanitizers_clean_everywhere(results) -> None:  # noqa: ANN001
    """Every node test case under the sanitizers (slow: ~2x the plain run)."""
    plain = {r.name: r.status for r in results}
    sanitized = run_conformance(collect_cases(), sanitize=True)
    regressions = [(r.name, r.detail) for r in sanitized if r.status != plain[r.name]]
    assert not regressions, regressions[:5]
