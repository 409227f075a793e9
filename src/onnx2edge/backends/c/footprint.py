"""What a converted C model costs in flash and RAM, measured on the compiled object.

flash: code and read-only data (.text, .rodata: const weights) plus the initial image of
.data; RAM: .data and .bss (the built-in arena, weights a file or fp16 widening puts in RAM,
static buffers). Measured with `size -A` on model.c compiled at the Makefile's flags
(-std=c99 -O2, no -march: the portable code, what any target's build starts from); without
a compiler (or `--footprint estimate`) the figures come from the writer's counts and are
labelled estimated (code not counted). Weights the caller keeps (--weights-storage external)
are neither: the caller places them, the figure is reported beside."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import Onnx2EdgeError
from .build import compiler

MODES = ("measure", "estimate")
MEASURE_FLAGS = ("-std=c99", "-O2")


def section_sizes(obj: Path) -> dict[str, int]:
    """Section name -> bytes, from binutils `size -A`."""
    proc = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Onnx2EdgeError(f"size -A {obj.name} failed: {proc.stderr.strip()[:200]}")
    out: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            out[parts[0]] = out.get(parts[0], 0) + int(parts[1])
    return out


def summarise(sections: Mapping[str, int]) -> dict[str, int]:
    """flash / RAM of an object's sections (see the module docstring)."""

    def total(*prefixes: str) -> int:
        return sum(n for s, n in sections.items() if s.startswith(prefixes))

    code = total(".text", ".eh_frame")
    rodata = total(".rodata")
    data = total(".data")
    bss = total(".bss", "COMMON")
    return {
        "code_bytes": code,
        "rodata_bytes": rodata,
        "data_bytes": data,
        "bss_bytes": bss,
        "flash_bytes": code + rodata + data,
        "ram_bytes": data + bss,
    }


def measure(out_dir: Path, source: str = "model.c") -> dict[str, int] | None:
    """Sections of `source` compiled at MEASURE_FLAGS, summarised; None when there is no
    compiler or `size`, or the build fails (the caller then estimates)."""
    try:
        cc = compiler()
    except Onnx2EdgeError:
        return None
    with tempfile.TemporaryDirectory(prefix="o2e-footprint-") as tmp:
        obj = Path(tmp) / "model.o"
        proc = subprocess.run(
            [cc, *MEASURE_FLAGS, "-c", str(out_dir / source), f"-I{out_dir}", "-o", str(obj)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return None
        try:
            return summarise(section_sizes(obj))
        except (OSError, Onnx2EdgeError):
            return None


def footprint(out_dir: Path, stats: Mapping[str, Any], mode: str = "measure") -> dict[str, Any]:
    """The manifest's `footprint`: flash and RAM bytes, how they were obtained, and the
    parts the writer knows (arena, weights in RAM, the caller's weights)."""
    if mode not in MODES:
        raise Onnx2EdgeError(f"--footprint {mode}: expected one of {', '.join(MODES)}")
    known = {
        "arena_bytes": int(stats["arena_bytes"]),
        "weights_const_bytes": int(stats.get("weights_const_bytes", 0)),
        "weights_ram_bytes": int(stats.get("weights_ram_bytes", 0)),
        "weights_caller_bytes": int(stats.get("weights_caller_bytes", 0)),
    }
    measured = measure(out_dir) if mode == "measure" else None
    if measured is not None:
        flags = " ".join(MEASURE_FLAGS)
        return {"method": f"measured: size -A of model.c built with {flags}", **measured, **known}
    return {
        "method": "estimated (no compiler or --footprint estimate): code not counted",
        "flash_bytes": known["weights_const_bytes"],
        "ram_bytes": known["arena_bytes"] + known["weights_ram_bytes"],
        **known,
    }


def describe(fp: Mapping[str, Any]) -> str:
    """The line `convert` prints."""
    mb = 1e6
    parts = [
        f"flash {fp['flash_bytes'] / mb:.2f} MB",
        f"RAM {fp['ram_bytes'] / mb:.2f} MB (arena {fp['arena_bytes'] / mb:.2f} MB"
        + (f", weights {fp['weights_ram_bytes'] / mb:.2f} MB" if fp["weights_ram_bytes"] else "")
        + ")",
    ]
    if fp["weights_caller_bytes"]:
        parts.append(f"caller's weights {fp['weights_caller_bytes'] / mb:.2f} MB")
    estimated = fp["method"].startswith("estimated")
    return ", ".join(parts) + (" [estimated: code not counted]" if estimated else " [measured]")
