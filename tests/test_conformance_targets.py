"""The ONNX backend node tests through MPS (its CPU model of Metal) and Core ML (its evaluator
and Core ML's validator), against tests/conformance/<target>.expected.

The full runs are slow (a Swift build or a coremltools conversion per converted case): the
files are written by `onnx2edge conformance --target T --write-expected ...` (docs/conformance.md
says how long that takes); here a fixed subset runs, each case's status compared with its line
in the file, and the files are checked to cover every case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from onnx2edge.conformance.cases import collect_cases, expected_file, expected_line

ROOT = Path(__file__).resolve().parent.parent

# Cases that run every time: a few each target converts (and must pass) and a few it refuses
# (and must refuse for the recorded reason). Fixed names, so the subset is deterministic.
SUBSET = {
    "mps": (
        "test_maxpool_2d_default",
        "test_globalaveragepool",
        "test_relu",
        "test_conv_with_strides_padding",
        "test_gemm_default_single_elem_vector_bias",
        "test_lrn_default",
    ),
    "coreml": (
        "test_relu",
        "test_softmax_axis_1",
        "test_sigmoid",
        "test_maxpool_2d_default",
        "test_conv_with_strides_padding",
        "test_string_concat",
    ),
}


def _available(target: str) -> str | None:
    """Why `target`'s runner cannot run here (None: it can)."""
    if target == "mps":
        from onnx2edge.backends.mps import build
        from onnx2edge.errors import Onnx2EdgeError

        try:
            build.swiftc()
        except Onnx2EdgeError:
            return "swiftc not found: the MPS simulator cannot be built"
    if target == "coreml":
        try:
            import coremltools  # noqa: F401
        except ImportError:
            return "coremltools is in the dev extra"
    return None


def _expected(target: str) -> dict[str, str]:
    lines = (ROOT / expected_file(target)).read_text().splitlines()
    return {ln.split(" ", 1)[0]: ln for ln in lines if ln and not ln.startswith("#")}


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    return {c.name: c for c in collect_cases()}


@pytest.mark.parametrize("target", sorted(SUBSET))
def test_expected_file_lists_every_case(target: str, cases: dict[str, object]) -> None:
    expected = _expected(target)
    assert set(expected) == set(cases), (
        f"{expected_file(target)} lists {len(expected)} cases, onnx has {len(cases)}: "
        "regenerate it (its header says how)"
    )
    statuses = {ln.split(" ", 2)[1].rstrip(":") for ln in expected.values()}
    assert statuses <= {"passed", "checked", "failed", "unsupported"}
    assert re.search(r"passed$", "\n".join(expected.values()), re.M), "no case passes at all"


@pytest.mark.parametrize("target", sorted(SUBSET))
def test_subset_as_expected(target: str, cases: dict[str, object]) -> None:
    why = _available(target)
    if why:
        pytest.skip(why)
    from onnx2edge.conformance.runner import run_conformance

    expected = _expected(target)
    chosen = [cases[n] for n in SUBSET[target]]
    results = run_conformance(target, chosen, jobs=1)
    got = {r.name: expected_line(r) for r in results}
    diff = {n: (expected[n], got[n]) for n in got if got[n] != expected[n]}
    assert not diff, diff
    # the subset exercises both sides: some cases convert and pass, some are refused
    assert {r.status for r in results} >= {"passed", "unsupported"}, got
