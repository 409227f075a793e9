"""`convert --device`: the build a conversion plans its workspaces for (issue 31).

The generated C chooses its kernels when it is compiled (AVX-512, AVX2, NEON or portable C;
one thread, or a pool with -DO2E_THREADS=n), while the arena is sized when it is converted.
`generic` plans for every build (each workspace as large as the largest kernel variant needs,
for `MAX_THREADS` threads): right for a server, wasteful on a microcontroller, where a
DS-CNN keyword spotter reserved 821 KB of arena and touched 98 KB. A microcontroller device
plans for the one build it will run, the portable kernels on one thread, and the generated C
refuses (#error) to build any other way, so a mismatch cannot overrun the arena.
"""

from __future__ import annotations

from dataclasses import dataclass

# o2e_gemm.h's kernel variants, as gemm_pack._VARIANTS names them
ALL_VARIANTS = ("avx512", "avx2", "portable", "neon")
# convert --max-threads: the default (the one place that says it: the option, the phases, the
# emitter, the writer and the generic device read it here), and the most a conversion may plan
# for. Workspaces are planned for that many threads; model.c's #error stops a build with a
# larger O2E_THREADS, and <name>_set_threads refuses a larger count at run time (writer.py).
MAX_THREADS = 4
MAX_THREADS_LIMIT = 256


@dataclass(frozen=True)
class Device:
    name: str
    threads: int  # thread slots the workspaces hold
    variants: tuple[str, ...]  # GEMM kernel variants the build may compile
    label: str
    # int8 kernels (issue 31): "auto" chooses when compiled (VNNI, AVX2, NEON, Arm DSP or
    # portable); "dsp": the SMLAD GEMM, batch-1 matrix-vector product and channel-plane
    # depthwise kernels; "mve": Helium's VMLADAV GEMM on weights packed for it (rows of 16-k
    # blocks), the DSP depthwise. Every build of a device conversion still runs (the portable
    # C of the same layouts), bit for bit the same bytes.
    int8: str = "auto"

    @property
    def is_mcu(self) -> bool:
        return self.name != "generic"


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("generic", MAX_THREADS, ALL_VARIANTS, f"any CPU, up to {MAX_THREADS} threads"),
        Device("cortex-m4", 1, ("portable",), "Cortex-M4F: portable C, one thread", "dsp"),
        Device("cortex-m7", 1, ("portable",), "Cortex-M7: portable C, one thread", "dsp"),
        Device("cortex-m33", 1, ("portable",), "Cortex-M33: portable C, one thread", "dsp"),
        Device("cortex-m55", 1, ("portable",), "Cortex-M55: portable C, one thread", "mve"),
    )
}
GENERIC = DEVICES["generic"]


def device(name: str | None) -> Device:
    from ...errors import Onnx2EdgeError

    if not name:
        return GENERIC
    if name not in DEVICES:
        raise Onnx2EdgeError(f"--device {name}: expected one of {', '.join(DEVICES)}")
    return DEVICES[name]


def build_guard(d: Device) -> str:
    """C preprocessor lines that stop a build `d`'s workspaces were not planned for: more
    threads, or a SIMD instruction set whose kernels take other workspaces (AVX / AVX-512 on
    x86, NEON on aarch64; SSE2-only x86 builds run the portable kernels and are allowed, so a
    device conversion can still be verified on a PC)."""
    if not d.is_mcu:
        return ""
    return (
        f"/* converted with --device {d.name}: the arena holds the workspaces of the portable\n"
        " * kernels on one thread, and no other build */\n"
        "#if (defined(O2E_THREADS) && O2E_THREADS > 1) || defined(__AVX__) || defined(__aarch64__)\n"
        f'#error "converted with --device {d.name} (portable kernels, one thread): build without '
        'O2E_THREADS and SIMD flags, or reconvert with --device generic"\n'
        "#endif\n"
    )
