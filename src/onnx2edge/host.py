"""The machine onnx2edge runs on, as Linux describes it in /proc/cpuinfo.

That is the kernel's view of the real CPU: right for what our compiled binaries can run (they
run natively), not always for what onnxruntime sees, which reads CPUID itself and so follows an
emulated or masked CPU (runtime.ort_integer_products_exact)."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def _cpuinfo() -> tuple[str, ...]:
    try:
        return tuple(Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return ()


def cpu_flags() -> frozenset[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is not there)."""
    for line in _cpuinfo():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_name() -> str:
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
