"""Compile generated C with gcc, cached by a hash of sources and flags."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ...errors import Onnx2EdgeError

# The contract the generated code keeps (issue: C99, -Wall -Wextra -Werror, only libm).
STRICT_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")
DEBUG_FLAGS = ("-O2",)
RELEASE_FLAGS = ("-O3", "-march=native", "-ffp-contract=fast")


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise Onnx2EdgeError("no C compiler found (install gcc, or set CC)")
    return cc


def source_hash(files: Sequence[Path], flags: Sequence[str]) -> str:
    h = hashlib.sha256()
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


def cached_shared(out_dir: Path, sources: Sequence[Path], flags: Sequence[str], hashed: Sequence[Path] = ()) -> Path:
    """`hashed`: headers the sources include, part of the cache key."""
    key = source_hash([*sources, *hashed], flags)
    lib = out_dir / ".build" / f"lib_{key}.so"
    if not lib.is_file():
        compile_shared(sources, lib, flags, include_dirs=[out_dir])
    return lib


def build_executable(
    out_dir: Path, flags: Sequence[str], name: str = "model", cc: str | None = None
) -> Path:
    """Build the example program (main.c + model.c), e.g. with sanitizers; `cc` overrides the
    compiler (e.g. aarch64-linux-gnu-gcc to cross-build for NEON)."""
    key = [*flags, *([f"cc={cc}"] if cc else [])]
    exe = out_dir / ".build" / f"{name}_{source_hash([out_dir / 'main.c', out_dir / 'model.c'], key)}"
    if exe.is_file():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        cc or compiler(),
        *STRICT_FLAGS,
        *flags,
        f"-I{out_dir}",
        str(out_dir / "main.c"),
        str(out_dir / "model.c"),
        "-o",
        str(exe),
        "-lm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()
        raise Onnx2EdgeError(f"C compilation failed: {lines[0] if lines else 'unknown error'}")
    return exe


def run_executable(
    exe: Path, io: dict, inputs: dict, work: Path, runner: Sequence[str] = ()
) -> dict:
    """Run the example program on raw input files; returns outputs (numpy arrays) by name.
    `runner` prefixes the command (e.g. qemu-aarch64 for a cross-built program)."""
    import numpy as np

    args = []
    for i, spec in enumerate(io["inputs"]):
        f = work / f"in_{i}.bin"
        np.ascontiguousarray(inputs[spec["name"]], dtype=spec["dtype"]).tofile(f)
        args.append(str(f))
    outs = [work / f"out_{i}.bin" for i in range(len(io["outputs"]))]
    env = {**os.environ, "MODEL_WEIGHTS": str(work / "model_weights.bin")}
    proc = subprocess.run(
        [*runner, str(exe), *args, *map(str, outs)], capture_output=True, text=True, env=env, cwd=work
    )
    if proc.returncode != 0:
        raise Onnx2EdgeError(f"{exe.name} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return {
        spec["name"]: np.fromfile(f, dtype=spec["dtype"]).reshape(spec["shape"])
        for spec, f in zip(io["outputs"], outs, strict=True)
    }
