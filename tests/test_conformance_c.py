"""ONNX backend node tests through the C backend (the backbone of C testing, as in onnx2c)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnx2edge.conformance.c import (
    EXPECTED_FILE,
    WRITE_EXPECTED,
    CaseResult,
    collect_cases,
    expected_diff,
    expected_text,
    run_conformance,
    stable_reason,
    summarize,
)

# A floor under the per-case list below; docs/conformance.md holds the current table.
MIN_PASSED = 1858
EXPECTED = Path(__file__).resolve().parent.parent / EXPECTED_FILE


@pytest.fixture(scope="module")
def results():  # noqa: ANN201
    return run_conformance(collect_cases())


def test_conformance_floor(results) -> None:  # noqa: ANN001
    s = summarize(results)
    assert s["total"] >= 1800
    assert s["passed"] >= MIN_PASSED, f"{s['passed']} passed, floor {MIN_PASSED}"


def test_each_case_as_expected(results) -> None:  # noqa: ANN001
    """tests/conformance/c.expected holds every case's status: a case that starts passing or
    stops passing (or is refused for another reason) fails here until the file is updated in
    the same commit, so the change is reviewed."""
    import onnx

    text = EXPECTED.read_text()
    diff = expected_diff(text, expected_text(results))
    note = (
        ""
        if f"(onnx {onnx.__version__})" in text.splitlines()[0]
        else (
            f"\nNote: the file was written with another onnx version (now {onnx.__version__}): "
            f"{text.splitlines()[0]}"
        )
    )
    assert not diff, (
        f"conformance differs from {EXPECTED_FILE} (- expected, + now):\n{diff}\n"
        f"If the change is intended, regenerate the file with:\n  {WRITE_EXPECTED}{note}"
    )


def test_expected_lines_are_stable() -> None:
    """Reasons keep no node name, path or address, so the file does not churn between runs."""
    r = CaseResult(
        "test_x",
        "Conv",
        "unsupported",
        "node '#3' (op Conv, opset 21): compile /tmp/tmpab12/case7.c at 0x7f00deadbeef\nmore",
    )
    assert stable_reason(r.detail) == "op Conv, opset 21: compile <path> at 0x?"
    text = expected_text([r, CaseResult("test_a", "Abs", "passed")])
    assert text.splitlines()[-2:] == [
        "test_a passed",
        "test_x unsupported: op Conv, opset 21: compile <path> at 0x?",
    ]
    assert expected_diff(text, text) == ""
    assert expected_diff(text, text.replace("test_a passed", "test_a unsupported: x")) == (
        "--- expected\n+++ actual\n-test_a passed\n+test_a unsupported: x\n"
    )


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

    rx = re.compile(
        r"test_(conv|maxpool|averagepool|relu|gemm|matmul|concat|softmax|reduce_sum|gather|slice|resize_upsample|pad|transpose|layer_norm|lstm|cast)"
    )
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
