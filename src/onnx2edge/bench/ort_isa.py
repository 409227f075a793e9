"""Time onnxruntime at the instruction set of our build (`bench --ort-isa match`).

onnxruntime's MLAS chooses AVX-512, AVX2/FMA or SSE kernels from CPUID when it starts and
offers no option to choose lower, so on an AVX-512 host `bench --arch x86-64-v3` would compare
our AVX2 code with onnxruntime's AVX-512 code - not what a user on an AVX2-only CPU sees. Where
Linux can make CPUID fault in user space ("cpuid_fault" in /proc/cpuinfo), the onnxruntime
process runs with `cpuid_mask.c` preloaded, which reports the higher levels absent. Written by
hand: no packaged tool does this (Intel SDE emulates, far too slowly to time).
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from ..errors import Onnx2EdgeError
from ..host import cpu_flags

SHIM_SOURCE = Path(__file__).with_name("cpuid_mask.c")
# our build's -march -> what onnxruntime may use (None: the host's full set)
LEVELS = {"x86-64-v3": "avx2", "x86-64-v2": "sse4"}
DESCRIPTION = {
    "avx2": "AVX2 + FMA (AVX-512 hidden from its CPUID)",
    "sse4": "SSE4.2 (AVX and up hidden from its CPUID)",
}


# OpenVINO's CPU plugin needs no shim for most of its time: its convolution, MatMul and
# element-wise kernels are oneDNN's JIT, which takes a documented cap on the ISA it may use
# (ONEDNN_MAX_CPU_ISA) on any host. Checked in its runtime model (primitiveType): MobileNetV3's
# convolutions become brgconv_avx2_*, but the plugin's own Reduce and MVN kernels stay
# jit_avx512 (the doc says so). With the cap and no f32 precision hint, compile_model fails on
# bf16 hosts: the bench always asks for f32.
OPENVINO_CAP = {"avx2": "AVX2", "sse4": "SSE41"}


def openvino_env(arch: str | None) -> dict[str, str]:
    """The environment that holds OpenVINO to the level of our `arch` build (empty: native)."""
    level = LEVELS.get(arch or "native")
    return {"ONEDNN_MAX_CPU_ISA": OPENVINO_CAP[level]} if level else {}


def level_for(arch: str | None) -> str | None:
    """The level onnxruntime is held to for `--ort-isa match` with our build at `arch`."""
    return LEVELS.get(arch or "native")


def preload_env(level: str | None, work: Path, cc: str) -> dict[str, str]:
    """Environment entries that hold a process to `level` (empty for None): LD_PRELOAD of the
    shim, built into `work`. One clear error where this host cannot do it."""
    if level is None:
        return {}
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise Onnx2EdgeError("bench --ort-isa match needs Linux on x86-64")
    if "cpuid_fault" not in cpu_flags():
        raise Onnx2EdgeError(
            "bench --ort-isa match: this CPU or kernel cannot make CPUID fault (no cpuid_fault "
            "in /proc/cpuinfo), so onnxruntime cannot be held to a lower instruction set here"
        )
    lib = work / f"libo2e_cpuid_{level}.so"
    cmd = [cc, "-O2", "-shared", "-fPIC", str(SHIM_SOURCE), "-o", str(lib)]
    if level == "sse4":
        cmd.insert(1, "-DO2E_MASK_AVX")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
        raise Onnx2EdgeError(f"bench --ort-isa match: building the CPUID shim failed: {first}")
    return {"LD_PRELOAD": str(lib)}
