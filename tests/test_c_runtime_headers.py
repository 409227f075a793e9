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


# Headers whose kernels are always_inline bodies the generated wrappers call with constants
# (hdrmisc): each is instantiated here for the geometries the emitters pass, and compiled at -O2
# under the strict flags, so warnings that only appear once a body is inlined with constants
# (bounds, maybe-uninitialized) fail here rather than in a user's build.
INSTANCES = {
    "o2e_pool_rows.h": "\n".join(
        f"void p_{op}_{kh}_{kw}_{sh}_{sw}_{pf}(void *a, int i0, int i1) "
        f"{{ o2e_pool_rows(a, i0, i1, O2E_POOL_{op}, {kh}, {kw}, {sh}, {sw}, {pf}); }}"
        for op, kh, kw, sh, sw, pf in (
            ("MAX", 1, 1, 1, 1, 0),
            ("MAX", 3, 3, 2, 2, 1),
            ("MAX", 16, 8, 3, 1, 0),
            ("AVG", 2, 2, 2, 2, 0),
            ("AVG", 3, 7, 1, 2, 1),
        )
    ),
    "o2e_winograd.h": "\n".join(
        f"void w{m}(void *a, int u0, int u1) {{ static const o2e_wino_plan p = "
        f"{{{m}, 2, 8, 9, 9, 1, 1, 8, 9, 9, 5, 5, 2, 3, {{10, 5}}, {{16, 16}}, {{144, 144}}, "
        f"{{144, 144}}, 64, 400, 40, 6000, 6000, 4096, {{1, 0.0f, 0.0f}}, 1}}; "
        f"o2e_winograd_blocks((const o2e_wino_block_args *)a, &p, u0, u1); }}"
        for m in (2, 4)
    ),
    "o2e_norm.h": "\n".join(
        [
            "static inline float relu(float v) { return v < 0 ? 0 : v; }",
            "static inline double relud(double v) { return v < 0 ? 0 : v; }",
            "void g(void *a, int b0, int b1) { o2e_group_norm_f32(a, b0, b1, relu); }",
            "void gd(void *a, int b0, int b1) { o2e_group_norm_f64(a, b0, b1, relud); }",
        ]
    ),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("header", sorted(INSTANCES))
def test_inline_kernels_compile_with_constants(target: str, header: str, tmp_path: Path) -> None:
    cc, *flags = TARGETS[target]
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    if target.startswith("x86") and "x86_64" not in _dumpmachine(cc):
        pytest.skip(f"{cc} does not target x86-64")
    src = tmp_path / "use.c"
    src.write_text(f'#include "{header}"\n{INSTANCES[header]}\n')
    cmd = [cc, *flags, *STRICT_FLAGS, "-O2", "-Wno-missing-prototypes", "-c", "-o", "/dev/null"]
    r = subprocess.run([*cmd, "-I", str(RUNTIME), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:2000]
