"""Compile generated C with gcc, cached by a hash of sources and flags."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import Onnx2EdgeError
from ...host import cpu_flags
from . import mcu

# The contract the generated code keeps (issue: C99, -Wall -Wextra -Werror, only libm).
STRICT_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")
DEBUG_FLAGS = ("-O2",)
RELEASE_FLAGS = ("-O3", "-march=native", "-ffp-contract=fast")


# --arch: the instruction set the C is built for. x86-64 levels as gcc names them (v2: SSE4.2,
# no AVX; v3: AVX2 + FMA; v4: AVX-512), the build host's own, or aarch64 (NEON is part of
# armv8-a), cross-compiled and run under qemu user emulation: a correctness check, not a timing.
# cortex-m4|m7|m33|m55: a bare-metal image on QEMU's MPS2 / MPS3 boards (mcu/, issue 31).
ARCHES = ("x86-64-v2", "x86-64-v3", "x86-64-v4", "native", "aarch64", *mcu.ARCHES)
CROSS = {"aarch64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")}
EMULATOR = {"aarch64": ("qemu-aarch64", "qemu-user", "/usr/aarch64-linux-gnu")}
# CPU flags (/proc/cpuinfo) a host needs to run code built for each x86-64 level
_LEVEL_FLAGS = {
    "x86-64-v2": ("sse4_2", "popcnt"),
    "x86-64-v3": ("avx2", "fma", "bmi2"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
}


def compiler(arch: str | None = None) -> str:
    """The C compiler for `arch`: the cross compiler for a foreign ISA, else gcc / $CC."""
    if arch in CROSS and is_emulated(arch):
        cc, package = CROSS[arch]
        found = shutil.which(cc)
        if not found:
            raise Onnx2EdgeError(f"--arch {arch} needs {cc} (apt-get install {package})")
        return found
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise Onnx2EdgeError("no C compiler found (install gcc, or set CC)")
    return cc


def emulator(arch: str) -> list[str]:
    """The command prefix that runs an `arch` executable on this host ([] when it runs natively)."""
    if arch not in EMULATOR or platform.machine() in (arch, "arm64"):
        return []
    exe, package, sysroot = EMULATOR[arch]
    found = shutil.which(exe)
    if not found:
        raise Onnx2EdgeError(f"--arch {arch} runs under {exe} (apt-get install {package})")
    return [found, "-L", sysroot]


def is_emulated(arch: str | None) -> bool:
    return mcu.is_mcu(arch) or (arch in EMULATOR and platform.machine() not in (arch, "arm64"))


def arch_flags(arch: str) -> list[str]:
    """The release flags with `-march` for `arch`; a clear error when this host cannot build or
    run such code (an x86 level on another CPU, or one this CPU lacks)."""
    if arch not in ARCHES:
        raise Onnx2EdgeError(f"unknown --arch {arch!r} (one of {', '.join(ARCHES)})")
    if mcu.is_mcu(arch):
        raise Onnx2EdgeError(
            f"--arch {arch} builds a bare-metal image for a QEMU board: `run` and `verify` only"
        )
    rest = [f for f in RELEASE_FLAGS if not f.startswith("-march=")]
    if arch == "aarch64":
        compiler(arch)
        emulator(arch)
        return [rest[0], "-march=armv8-a", *rest[1:]]
    if arch != "native":
        if platform.machine() not in ("x86_64", "AMD64"):
            raise Onnx2EdgeError(
                f"--arch {arch} builds x86-64 code, this host is {platform.machine()}"
            )
        missing = [f for f in _LEVEL_FLAGS[arch] if f not in cpu_flags()]
        if missing and cpu_flags():
            raise Onnx2EdgeError(
                f"this CPU cannot run --arch {arch} code (no {', '.join(missing)})"
            )
    return [rest[0], f"-march={arch}", *rest[1:]]


def arch_of(options: Mapping[str, object]) -> str | None:
    arch = options.get("arch")
    return str(arch) if arch else None


def source_hash(files: Sequence[Path], flags: Sequence[str], cc: str = "") -> str:
    """Cache key: sources, flags and the compiler (a cross compiler never shares a build)."""
    h = hashlib.sha256()
    h.update(Path(cc).name.encode())
    for f in sorted(files):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update(" ".join(flags).encode())
    return h.hexdigest()[:16]


def compile_shared(
    sources: Sequence[Path], out: Path, flags: Sequence[str], include_dirs: Sequence[Path] = ()
) -> Path:
    """Build a shared library unless an identical one is cached at `out`."""
    cmd = [
        compiler(),
        *STRICT_FLAGS,
        *flags,
        "-fPIC",
        "-shared",
        *(f"-I{d}" for d in include_dirs),
        *map(str, sources),
        "-o",
        str(out),
        "-lm",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd[-2] = str(tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()
        raise Onnx2EdgeError(f"C compilation failed: {lines[0] if lines else 'unknown error'}")
    os.replace(tmp, out)
    return out


def cached_shared(
    out_dir: Path, sources: Sequence[Path], flags: Sequence[str], hashed: Sequence[Path] = ()
) -> Path:
    """`hashed`: headers the sources include, part of the cache key."""
    key = source_hash([*sources, *hashed], flags, compiler())
    lib = out_dir / ".build" / f"lib_{key}.so"
    if not lib.is_file():
        compile_shared(sources, lib, flags, include_dirs=[out_dir])
    return lib


def build_executable(
    out_dir: Path,
    flags: Sequence[str],
    name: str = "model",
    arch: str | None = None,
    cc: str | None = None,
) -> Path:
    """Build the example program (main.c + model.c), e.g. with sanitizers, or for another `arch`
    (cross compiler); `cc` overrides the compiler (e.g. aarch64-linux-gnu-gcc for a NEON build
    with other -march flags). The cache key covers the runtime headers model.c includes."""
    cc = cc or compiler(arch)
    headers = sorted(out_dir.glob("*.h"))
    key = source_hash([out_dir / "main.c", out_dir / "model.c", *headers], flags, cc)
    exe = out_dir / ".build" / f"{name}_{arch or 'host'}_{key}"
    if exe.is_file():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_name(exe.name + ".tmp")
    cmd = [
        cc,
        *STRICT_FLAGS,
        *flags,
        f"-I{out_dir}",
        str(out_dir / "main.c"),
        str(out_dir / "model.c"),
        "-o",
        str(tmp),
        "-lm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()
        raise Onnx2EdgeError(f"C compilation failed: {lines[0] if lines else 'unknown error'}")
    os.replace(tmp, exe)
    return exe


def build_and_run(out_dir: Path, arch: str, inputs: dict, extra_flags: Sequence[str] = ()) -> dict:
    """Build a converted folder's program for `arch` (release flags with its -march, plus
    `extra_flags`) and run it on `inputs`, under emulation when the arch is foreign (aarch64 on
    an x86 host; a Cortex-M under qemu-system-arm, mcu/): the path tests and
    `run/verify --arch` use for every ISA."""
    import json

    if mcu.is_mcu(arch):
        return mcu.build_and_run(out_dir, arch, inputs, extra_flags)[0]
    io = json.loads((out_dir / "onnx2edge.json").read_text())
    exe = build_executable(out_dir, [*arch_flags(arch), *extra_flags], name="model", arch=arch)
    return run_executable(exe, io, inputs, out_dir, arch=arch)


def run_executable(
    exe: Path,
    io: dict,
    inputs: dict,
    work: Path,
    arch: str | None = None,
    runner: Sequence[str] = (),
) -> dict:
    """Run the example program on raw input files; returns outputs (numpy arrays) by name.
    Under the emulator `arch` needs, or `runner` (a command prefix such as qemu-aarch64)."""
    import numpy as np

    args = []
    for i, spec in enumerate(io["inputs"]):
        f = work / f"in_{i}.bin"
        np.ascontiguousarray(inputs[spec["name"]], dtype=spec["dtype"]).tofile(f)
        args.append(str(f))
    outs = [work / f"out_{i}.bin" for i in range(len(io["outputs"]))]
    env = {**os.environ, "MODEL_WEIGHTS": str(work / "model_weights.bin")}
    prefix = list(runner) or (emulator(arch) if arch else [])
    proc = subprocess.run(
        [*prefix, str(exe), *args, *map(str, outs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    if proc.returncode != 0:
        raise Onnx2EdgeError(f"{exe.name} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return {
        spec["name"]: np.fromfile(f, dtype=spec["dtype"]).reshape(spec["shape"])
        for spec, f in zip(io["outputs"], outs, strict=True)
    }
