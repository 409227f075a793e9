"""Core ML's own validator in the Core ML tests: every .mlmodel / .mlpackage a test writes
must be VALID for `mlvalidate` (CoreML::Model::load -> validate, tools/coreml-validate).

`api.convert` already runs the validator on the file it writes (and fails on INVALID); the
autouse fixture `coreml_files_valid` re-checks, after each test, every Core ML file left in
the test's temporary folders, so files written any other way are judged too. Tests that write
an invalid file on purpose carry `@pytest.mark.coreml_invalid_on_purpose`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from onnx2edge.backends.coreml import validator

MLVALIDATE = validator.find()


def assert_valid(path: Path) -> None:
    """`path` (.mlmodel or .mlpackage) is VALID for Core ML's validator."""
    if MLVALIDATE is None:
        pytest.skip(validator.NOT_FOUND)
    verdict = validator.validate(path, MLVALIDATE)
    assert verdict is not None and verdict.valid, f"{path}: {verdict}"


def written_models(root: Path) -> list[Path]:
    """The Core ML files under root: .mlmodel files and .mlpackage folders (not the spec
    inside a package, which is the package's)."""
    found = [p for p in root.rglob("*.mlpackage") if p.is_dir()]
    found += [
        p for p in root.rglob("*.mlmodel") if not any(q.suffix == ".mlpackage" for q in p.parents)
    ]
    return sorted(found)


@pytest.fixture(autouse=True)
def coreml_files_valid(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if MLVALIDATE is None or request.node.get_closest_marker("coreml_invalid_on_purpose"):
        return
    roots = {v for v in request.node.funcargs.values() if isinstance(v, Path) and v.is_dir()}
    for root in sorted(roots):
        for path in written_models(root):
            verdict = validator.validate(path, MLVALIDATE)
            assert verdict is not None and verdict.valid, f"{path}: {verdict}"
