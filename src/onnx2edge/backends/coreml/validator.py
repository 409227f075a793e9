"""Core ML's own model validator (`mlvalidate`): the judge of whether Core ML loads a file.

`mlvalidate` is `CoreML::Model::load` -> `Model::validate`, the C++ validator inside
coremltools' native library on macOS, built for Linux from coremltools' public sources
(tools/coreml-validate/README.md). It prints `FILE<TAB>VALID|INVALID<TAB>message` per file.

Looked up in this order: the environment variable O2E_MLVALIDATE, the repository's
tools/coreml-validate/mlvalidate, ../shared/tools/coreml-validate/mlvalidate beside the
repository. Absent (an installed wheel, another OS): the checks are skipped and say so.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ENV = "O2E_MLVALIDATE"
_REPO = Path(__file__).resolve().parents[4]
CANDIDATES = (
    _REPO / "tools" / "coreml-validate" / "mlvalidate",
    _REPO.parent / "shared" / "tools" / "coreml-validate" / "mlvalidate",
)
NOT_FOUND = (
    f"Core ML's validator (mlvalidate) not found: set {ENV} or build "
    "tools/coreml-validate (Linux x86-64 binary in the repository)"
)


@dataclass(frozen=True)
class Verdict:
    valid: bool
    message: str  # the validator's own message ("" when VALID)

    def line(self) -> str:
        return "VALID" if self.valid else f"INVALID: {self.message}"


def find() -> Path | None:
    """The first runnable mlvalidate, or None."""
    return _find(os.environ.get(ENV) or "")


@functools.lru_cache(maxsize=8)
def _find(env: str) -> Path | None:
    # cached per value of the environment variable: a convert would otherwise start the
    # binary once more only to learn that it runs
    for p in ([Path(env)] if env else []) + list(CANDIDATES):
        if p.is_file() and os.access(p, os.X_OK) and _runs(p):
            return p
    return None


def _runs(p: Path) -> bool:
    # A binary for another OS / CPU is present in a fresh clone on macOS or arm64: it exists
    # but cannot execute, which means "absent" here.
    try:
        subprocess.run([str(p)], capture_output=True, timeout=30, check=False)
    except OSError:
        return False
    return True


def spec_file(path: Path) -> Path:
    """The protobuf spec inside a model: the .mlmodel itself, or an .mlpackage's
    Data/com.apple.CoreML/model.mlmodel (mlvalidate reads specs, not packages)."""
    path = Path(path)
    if path.is_dir():
        return path / "Data" / "com.apple.CoreML" / "model.mlmodel"
    return path


def validate(path: Path, exe: Path | None = None) -> Verdict | None:
    """Core ML's verdict on `path` (.mlmodel or .mlpackage); None when no validator runs."""
    exe = exe or find()
    if exe is None:
        return None
    spec = spec_file(path)
    if not spec.is_file():
        return Verdict(False, f"{spec}: no such file")
    r = subprocess.run(
        [str(exe), str(spec)], capture_output=True, text=True, timeout=120, check=False
    )
    fields = r.stdout.rstrip("\n").split("\t")
    if len(fields) < 2 or fields[1] not in ("VALID", "INVALID"):
        return Verdict(
            False,
            f"mlvalidate printed no verdict (exit {r.returncode}): "
            f"{(r.stdout + r.stderr).strip()[:300]}",
        )
    msg = " ".join("\t".join(fields[2:]).split())
    return Verdict(fields[1] == "VALID", "" if fields[1] == "VALID" else msg)
