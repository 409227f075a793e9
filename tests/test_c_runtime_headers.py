"""The kernels' static C lives in backends/c/runtime/*.h (issue 32, item 2), and each header
compiles on its own under the generated code's flags (build.STRICT_FLAGS) for every ISA the
kernels branch on: x86-64-v2 (SSE), v3 (AVX2 + FMA), v4 (AVX-512), the host's own, AArch64
(NEON, and with the dot product / fp16 extensions) and a Cortex-M4 when those compilers are
installed. A header copied into an output brings the runtime headers it includes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from onnx2edge.backends.c.build import STRICT_FLAGS
from onnx2edge.backends.c.headers import RUNTIME, needs

HEADERS = sorted(p.name for p in RUNTIME.glob("*.h"))

TARGETS = {
    "x86-64-v2": ("gcc", "-march=x86-64-v2"),
    "x86-64-v3": ("gcc", "-march=x86-64-v3"),
    "x86-64-v4": ("gcc", "-march=x86-64-v4"),
    "native": ("gcc", "-march=native"),  # the host's own ISA
    "aarch64": ("aarch64-linux-gnu-gcc",),
    "aarch64-dotprod": ("aarch64-linux-gnu-gcc", "-march=armv8.2-a+dotprod+fp16"),
    "cortex-m4": (
        "arm-none-eabi-gcc",
        "-mcpu=cortex-m4",
        "-mthumb",
        "-mfloat-abi=hard",
        "-mfpu=fpv4-sp-d16",
    ),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_runtime_header_compiles_alone(target: str, tmp_path: Path) -> None:
    cc, *flags = TARGETS[target]
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    if target.startswith("x86") and "x86_64" not in _dumpmachine(cc):
        pytest.skip(f"{cc} does not target x86-64")
    failed = {}
    for h in HEADERS:
        # a static function a header defines is used by the model.c that includes it
        cmd = [cc, *flags, *STRICT_FLAGS, "-Wno-unused-function", "-fsyntax-only", "-x", "c"]
        r = subprocess.run(
            [*cmd, "-I", str(RUNTIME), str(RUNTIME / h)], capture_output=True, text=True
        )
        if r.returncode != 0:
            failed[h] = r.stderr[:400]
    assert not failed, failed


def _dumpmachine(cc: str) -> str:
    return subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("header", HEADERS)
def test_header_includes_are_copied(header: str) -> None:
    """`needs` lists a header and every runtime header it includes (copied with it), and
    nothing else; each has an include guard."""
    text = (RUNTIME / header).read_text()
    direct = re.findall(r'^#include "(o2e_\w+\.h)"', text, re.MULTILINE)
    got = needs(header)
    assert got[0] == header and set(direct) <= set(got)
    assert all(d in HEADERS for d in got)
    guard = re.search(r"^#ifndef (O2E_\w+)\n#define \1$", text, re.MULTILINE)
    assert guard is not None, f"{header}: no include guard"
