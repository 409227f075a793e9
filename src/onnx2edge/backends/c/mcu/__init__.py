"""Cortex-M builds of a converted C model, run on QEMU's MPS2 / MPS3 boards (issue 31).

`--arch cortex-m4|cortex-m7|cortex-m33|cortex-m55` builds the model with arm-none-eabi-gcc
(hard float, `-Wall -Wextra -Werror`, newlib-nano for memcpy / memset / libm only) into a
bare-metal image: `startup.c` (vector table, .data / .bss set-up, FPU on), a linker script per
board (`link.ld.in`) and a harness `main` written here for the model's API
(`harness_source`). The image runs under `qemu-system-arm -M <board> -semihosting-config
enable=on,target=native -icount shift=0`: it reads the input tensors from files and writes the
outputs through semihosting (`o2e_mcu.h`), and reports on the console

- instructions of one inference (SysTick ticks at the board's CPU clock; under `-icount
  shift=0` one instruction is one nanosecond of virtual time),
- the arena bytes the run touched (filled with two patterns in turn, a byte counts when it
  differs from its pattern after either run) and the highest one,
- the stack the run used (the stack below the caller filled with a pattern).

A correctness check and a count, not a timing: QEMU models no caches, pipeline or wait states.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ....errors import Onnx2EdgeError

HERE = Path(__file__).parent
CC = "arm-none-eabi-gcc"
QEMU = "qemu-system-arm"
APT_PACKAGES = "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm"
STRICT = ("-std=c99", "-Wall", "-Wextra", "-Werror")
STACK_BYTES = 32 * 1024
# the stack a part-budget image reserves (measured peaks: 1-4 KB, the harness's included)
PART_STACK_BYTES = 8 * 1024
TIMEOUT_S = 120.0

KiB = 1024
MiB = 1024 * 1024


@dataclass(frozen=True)
class Board:
    """One QEMU board and the CPU on it."""

    arch: str  # --arch name
    machine: str  # qemu-system-arm -M
    cpu_flags: tuple[str, ...]
    flash: tuple[int, int]  # (origin, length): code + constants, where VTOR points at reset
    ram: tuple[int, int]
    clock_hz: int  # SysTick's clock (the CPU clock QEMU gives the board)
    # a real part's budget with this core (issue 31): flash and RAM bytes
    part_flash: int
    part_ram: int
    const: tuple[int, int] | None = None  # constants elsewhere than `flash` (origin, length)


# Memory maps from QEMU's hw/arm/mps2.c and mps2-tz.c: the MPS2 boards' 4 MB ZBT SSRAM1 at 0
# (the TrustZone boards boot secure, from its alias at 0x10000000) and 4 MB of data SSRAM;
# the AN547 boots from its 512 KB ITCM (secure alias 0x10000000), constants in its 2 MB SRAM,
# data in the 2 x 2 MB ISRAM.
BOARDS: dict[str, Board] = {
    b.arch: b
    for b in (
        Board(
            "cortex-m4",
            "mps2-an386",
            ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"),
            (0x00000000, 4 * MiB),
            (0x20000000, 4 * MiB),
            25_000_000,
            1 * MiB,
            256 * KiB,
        ),
        Board(
            "cortex-m7",
            "mps2-an500",
            ("-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"),
            (0x00000000, 4 * MiB),
            (0x20000000, 4 * MiB),
            25_000_000,
            2 * MiB,
            512 * KiB,
        ),
        Board(
            "cortex-m33",
            "mps2-an505",
            ("-mcpu=cortex-m33", "-mfpu=fpv5-sp-d16", "-mfloat-abi=hard"),
            (0x10000000, 4 * MiB),
            (0x38000000, 4 * MiB),
            20_000_000,
            2 * MiB,
            768 * KiB,
        ),
        Board(
            "cortex-m55",
            "mps3-an547",
            ("-mcpu=cortex-m55", "-mfloat-abi=hard"),
            (0x10000000, 512 * KiB),
            (0x31000000, 4 * MiB),
            32_000_000,
            2 * MiB,
            768 * KiB,  # no part named in issue 31: the M33's budget
            (0x11000000, 2 * MiB),
        ),
    )
}
ARCHES = tuple(BOARDS)


def is_mcu(arch: str | None) -> bool:
    return arch in BOARDS


def board(arch: str) -> Board:
    if arch not in BOARDS:
        raise Onnx2EdgeError(f"unknown microcontroller {arch!r} (one of {', '.join(BOARDS)})")
    return BOARDS[arch]


def missing_tools() -> str | None:
    """Why this host cannot build and run Cortex-M images (None when it can)."""
    for exe in (CC, QEMU):
        if not shutil.which(exe):
            return f"{exe} not found (apt-get install {APT_PACKAGES})"
    probe = subprocess.run(
        [CC, "-mcpu=cortex-m4", "-mthumb", "--specs=nano.specs", "-print-file-name=libc_nano.a"],
        capture_output=True,
        text=True,
    )
    if not Path(probe.stdout.strip()).is_file():
        return "newlib-nano for arm-none-eabi not found (apt-get install libnewlib-arm-none-eabi)"
    return None


def _tools() -> None:
    why = missing_tools()
    if why:
        raise Onnx2EdgeError(f"Cortex-M builds need {why}")


# ---- the model's API, whichever naming the conversion used -------------------------------------


def api_of(out_dir: Path, manifest: Mapping[str, Any]) -> tuple[str, str]:
    """(header file, symbol prefix) of a converted folder: `model.h` / `model_*`, or the
    `--name` a conversion recorded (`<name>.h` / `<name>_*`)."""
    name = str(manifest.get("stats", {}).get("name") or "model")
    header = f"{name}.h"
    if not (out_dir / header).is_file():
        name, header = "model", "model.h"
    return header, name


def _io_bytes(spec: Mapping[str, Any]) -> int:
    return int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize


def harness_source(out_dir: Path, manifest: Mapping[str, Any]) -> str:
    """main() for one model: read in_<i>.bin, init, two runs (arena filled with 0xA5, then
    0x5A), write out_<i>.bin, print the counts."""
    header, prefix = api_of(out_dir, manifest)
    ins = [_io_bytes(s) for s in manifest["inputs"]]
    outs = [_io_bytes(s) for s in manifest["outputs"]]
    lines = [
        "/* Cortex-M harness (generated by onnx2edge: backends/c/mcu) */",
        "#include <stdint.h>",
        "#include <string.h>",
        '#include "o2e_mcu.h"',
        f'#include "{header}"',
        "",
        "extern unsigned char __o2e_arena_start[], __o2e_arena_end[], __stack_limit[];",
    ]
    for kind, sizes in (("in", ins), ("out", outs)):
        for i, n in enumerate(sizes):
            lines.append(f"static uint64_t {kind}_{i}[{max(1, (n + 7) // 8)}];")
    # the second run's outputs, compared with the first's: same inputs, another arena pattern
    # test-only buffers, outside a part's budget (link.ld.in: TESTRAM, not zeroed)
    test = '__attribute__((section(".o2e_test")))'
    for i, n in enumerate(outs):
        lines.append(f"static uint64_t chk_{i}[{max(1, (n + 7) // 8)}] {test};")
    # one bit per arena byte: set when a run left it different from its pattern
    lines += [f"static uint8_t touched[{prefix.upper()}_ARENA_BYTES / 8 + 1] {test};", ""]
    body = [
        "static uint32_t stack_used(void)",
        "{",
        "  const uint32_t *p = (const uint32_t *)__stack_limit;",
        "  while (*p == 0xDEADBEEFu) ++p;",
        "  return (uint32_t)((uintptr_t)stack_mark - (uintptr_t)p);",
        "}",
        "",
        "__attribute__((noinline)) static void fill_stack(void)",
        "{",
        "  /* everything below this frame, minus a margin for the calls that fill it */",
        "  uint32_t *p = (uint32_t *)__stack_limit;",
        "  uint32_t *end = (uint32_t *)__builtin_frame_address(0) - 64;",
        "  while (p < end) *p++ = 0xDEADBEEFu;",
        "  stack_mark = (uintptr_t)__builtin_frame_address(0);",
        "}",
        "",
        "static int run_once(unsigned char pattern, void *const *outputs, const void *const *inputs,",
        "                    uint64_t *ticks, uint32_t *stack)",
        "{",
        "  const size_t n = (size_t)(__o2e_arena_end - __o2e_arena_start);",
        "  uint64_t t0;",
        "  int rc;",
        "  memset(__o2e_arena_start, pattern, n);",
        "  fill_stack();",
        "  t0 = o2e_ticks();",
        "  O2E_PROF_START(t0);",
        f"  rc = {prefix}_run(inputs, outputs);",
        "  O2E_PROF_STOP();",
        "  *ticks = o2e_ticks() - t0;",
        "  *stack = stack_used();",
        "  for (size_t i = 0; i < n; ++i)",
        "    if (__o2e_arena_start[i] != pattern) touched[i >> 3] |= (uint8_t)(1u << (i & 7));",
        "  return rc;",
        "}",
        "",
        "static void report(const char *key, uint32_t v)",
        "{",
        "  o2e_puts(key);",
        "  o2e_put_u32(v);",
        "}",
        "",
        "int main(void)",
        "{",
        f"  const void *inputs[{max(1, len(ins))}];",
        f"  void *outputs[{max(1, len(outs))}];",
        f"  void *checks[{max(1, len(outs))}];",
        "  uint64_t ticks = 0, ticks2 = 0;",
        "  uint32_t stack = 0, stack2 = 0, count = 0, high = 0;",
        "  const size_t n = (size_t)(__o2e_arena_end - __o2e_arena_start);",
        "  int fd;",
        "  o2e_ticks_start();",
        "  memset(touched, 0, sizeof touched);",
        f"  O2E_PROF_SET({prefix}_set_trace);",
    ]
    for i, nbytes in enumerate(ins):
        body += [
            f'  fd = o2e_open("in_{i}.bin", 1);',
            f'  if (fd < 0 || o2e_read(fd, in_{i}, {nbytes}) != 0) {{ o2e_puts("o2e: cannot read in_{i}.bin\\n"); return 2; }}',
            "  o2e_close(fd);",
            f"  inputs[{i}] = in_{i};",
        ]
    for i in range(len(outs)):
        body += [f"  outputs[{i}] = out_{i};", f"  checks[{i}] = chk_{i};"]
    body += [
        f'  if ({prefix}_init(NULL) != 0) {{ o2e_puts("o2e: init failed\\n"); return 3; }}',
        '  if (run_once(0xA5, outputs, inputs, &ticks, &stack) != 0) { o2e_puts("o2e: run failed\\n"); return 4; }',
        '  if (run_once(0x5A, checks, inputs, &ticks2, &stack2) != 0) { o2e_puts("o2e: run failed\\n"); return 4; }',
    ]
    for i, nbytes in enumerate(outs):
        body += [
            f"  if (memcmp(out_{i}, chk_{i}, {nbytes}) != 0) {{",
            f'    o2e_puts("o2e: output {i} depends on the arena\'s previous contents\\n");',
            "    return 5;",
            "  }",
            f'  fd = o2e_open("out_{i}.bin", 5);',
            f'  if (fd < 0 || o2e_write(fd, out_{i}, {nbytes}) != 0) {{ o2e_puts("o2e: cannot write out_{i}.bin\\n"); return 2; }}',
            "  o2e_close(fd);",
        ]
    body += [
        '  fd = o2e_open("touched.bin", 5);  /* the bitmap, for a per-buffer account */',
        "  if (fd >= 0) { o2e_write(fd, touched, (n + 7) / 8); o2e_close(fd); }",
        "  for (size_t i = 0; i < n; ++i)",
        "    if (touched[i >> 3] & (1u << (i & 7))) { ++count; high = (uint32_t)i + 1; }",
        '  report("o2e-mcu: ticks=", (uint32_t)(ticks >> 32));',
        '  report(":", (uint32_t)ticks);',
        '  report(" arena=", (uint32_t)n);',
        '  report(" touched=", count);',
        '  report(" high=", high);',
        '  report(" stack=", stack > stack2 ? stack : stack2);',
        '  o2e_puts("\\n");',
        "  O2E_PROF_REPORT();",
        "  return 0;",
        "}",
    ]
    return "\n".join([*lines, "static uintptr_t stack_mark;", "", *PROFILE, *body, ""])


# ---- build ------------------------------------------------------------------------------------


# Per-node counts (build with profile=True: -DO2E_TRACE_ENABLED): the model's trace hook,
# called after each node, records the SysTick count of the first run.
PROFILE = r"""#ifdef O2E_TRACE_ENABLED
#define O2E_PROF_MAX 1024
static const char *o2e_prof_name[O2E_PROF_MAX];
static uint64_t o2e_prof_at[O2E_PROF_MAX];
static uint64_t o2e_prof_t0;
static int o2e_prof_n, o2e_prof_on;
static void o2e_prof_cb(const char *name, const void *p, size_t n)
{
  (void)p; (void)n;
  if (o2e_prof_on && o2e_prof_n < O2E_PROF_MAX) {
    o2e_prof_at[o2e_prof_n] = o2e_ticks();
    o2e_prof_name[o2e_prof_n++] = name;
  }
}
#define O2E_PROF_SET(setter) setter(o2e_prof_cb)
#define O2E_PROF_START(t) do { o2e_prof_on = o2e_prof_n == 0; if (o2e_prof_on) o2e_prof_t0 = (t); } while (0)
#define O2E_PROF_STOP() (o2e_prof_on = 0)
#define O2E_PROF_REPORT() do { \
    uint64_t prev = o2e_prof_t0; \
    for (int i = 0; i < o2e_prof_n; ++i) { \
      o2e_puts("o2e-node: "); o2e_puts(o2e_prof_name[i]); o2e_puts(" "); \
      o2e_put_u32((uint32_t)(o2e_prof_at[i] - prev)); o2e_puts("\n"); prev = o2e_prof_at[i]; \
    } } while (0)
#else
#define O2E_PROF_SET(setter) ((void)0)
#define O2E_PROF_START(t) ((void)0)
#define O2E_PROF_STOP() ((void)0)
#define O2E_PROF_REPORT() ((void)0)
#endif
""".splitlines()


def linker_script(b: Board, stack_bytes: int | None = None, budget: bool = False) -> str:
    """The board's linker script; `budget`: FLASH and RAM cut to the part's sizes (issue 31),
    so an image that does not fit the part does not link (RAM: .data, the arena, .bss with the
    harness's input / output buffers, and PART_STACK_BYTES of stack; flash: .text + .rodata +
    .data's image, asserted where the board keeps constants apart)."""
    text = (HERE / "link.ld.in").read_text()
    stack = stack_bytes or (PART_STACK_BYTES if budget else STACK_BYTES)
    ram = min(b.part_ram, b.ram[1]) if budget else b.ram[1]
    flash = min(b.part_flash, b.flash[1]) if budget else b.flash[1]
    test_mem = f"TESTRAM (rw) : ORIGIN = {hex(b.ram[0] + ram)}, LENGTH = {hex(b.ram[1] - ram)}"
    part = (
        "ASSERT(SIZEOF(.text) + SIZEOF(.rodata) + SIZEOF(.ARM.exidx) + SIZEOF(.data) <= "
        f'{hex(b.part_flash)}, "o2e: flash over the part budget of {b.part_flash // KiB} KB");'
    )
    subs = {
        "@BOARD@": f"{b.machine} ({b.arch})",
        "@FLASH_ORIGIN@": hex(b.flash[0]),
        "@FLASH_LENGTH@": hex(flash),
        "@RAM_ORIGIN@": hex(b.ram[0]),
        "@RAM_LENGTH@": hex(ram),
        "@STACK_BYTES@": hex(stack),
        "@TEST_MEMORY@": test_mem if budget else "",
        "@TEST_ALIAS@": "" if budget else 'REGION_ALIAS("TESTRAM", RAM);',
        "@PART_ASSERT@": part if budget else "",
        "@CONST_MEMORY@": (
            f"CONST (r) : ORIGIN = {hex(b.const[0])}, LENGTH = {hex(b.const[1])}" if b.const else ""
        ),
        "@CONST_ALIAS@": "" if b.const else 'REGION_ALIAS("CONST", FLASH);',
    }
    for k, v in subs.items():
        text = text.replace(k, v)
    return text


def _sources(out_dir: Path, manifest: Mapping[str, Any]) -> list[Path]:
    files = [f for f in manifest.get("files", []) if f.endswith(".c") and f != "main.c"]
    return [out_dir / f for f in files] or [out_dir / "model.c"]


def _run(cmd: Sequence[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        err = proc.stderr.splitlines()
        # the linker's own reason (a region overflowed, the budget assert) before collect2's
        lines = [ln for ln in err if "overflowed" in ln or "o2e:" in ln]
        lines = lines or [ln for ln in err if "error" in ln] or err
        raise Onnx2EdgeError(
            f"Cortex-M build failed: {lines[0] if lines else 'unknown error'}"
            + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
        )


def compile_flags(b: Board, opt: str = "-O2", extra: Sequence[str] = ()) -> list[str]:
    return [
        *STRICT,
        opt,
        "-mthumb",
        *b.cpu_flags,
        "-ffunction-sections",
        "-fdata-sections",
        *extra,
    ]


@dataclass(frozen=True)
class Image:
    elf: Path
    objects: dict[str, Path]  # source stem -> object file (model.o: the model alone)
    board: Board


def build(
    out_dir: Path,
    arch: str,
    opt: str = "-O2",
    extra_flags: Sequence[str] = (),
    build_dir: Path | None = None,
    profile: bool = False,
    budget: bool = False,
) -> Image:
    """Compile the model, the harness and the startup for `arch`'s board and link the image
    (`profile`: with the trace hook, so a run also counts each node's instructions; `budget`:
    into the part's flash and RAM, linker_script, else the board's)."""
    import json

    _tools()
    b = board(arch)
    manifest = json.loads((out_dir / "onnx2edge.json").read_text())
    work = build_dir or out_dir / ".build" / f"{arch}{opt}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "harness.c").write_text(harness_source(out_dir, manifest))
    (work / "link.ld").write_text(linker_script(b, budget=budget))
    flags = compile_flags(b, opt, [*extra_flags, *(["-DO2E_TRACE_ENABLED"] if profile else [])])
    objects: dict[str, Path] = {}
    srcs = [*_sources(out_dir, manifest), work / "harness.c", HERE / "startup.c"]
    for src in srcs:
        obj = work / f"{src.stem}.o"
        _run([CC, *flags, f"-I{out_dir}", f"-I{HERE}", "-c", str(src), "-o", str(obj)])
        objects[src.stem] = obj
    elf = work / "image.elf"
    _run(
        [
            CC,
            "-mthumb",
            *b.cpu_flags,
            "-nostartfiles",
            "--specs=nano.specs",
            f"-T{work / 'link.ld'}",
            "-Wl,--gc-sections",
            f"-Wl,-Map={work / 'image.map'}",
            *map(str, objects.values()),
            "-lm",
            "-o",
            str(elf),
        ]
    )
    return Image(elf, objects, b)


# ---- run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStats:
    instructions: int  # of one inference (resolution: one SysTick tick, 1e9 / clock_hz)
    arena_bytes: int  # the static arena's size
    arena_touched: int  # bytes a run wrote
    arena_high: int  # one past the highest byte a run wrote
    stack_bytes: int  # stack the run used below the caller's frame
    touched: np.ndarray | None = None  # bool per arena byte: written by a run
    nodes: tuple[tuple[str, int], ...] = ()  # (traced tensor, instructions of its node): profile


_STATS = re.compile(r"o2e-mcu: ticks=(\d+):(\d+) arena=(\d+) touched=(\d+) high=(\d+) stack=(\d+)")


def qemu_command(b: Board, elf: Path) -> list[str]:
    return [
        QEMU,
        "-M",
        b.machine,
        "-nographic",
        "-monitor",
        "none",
        "-serial",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-icount",
        "shift=0",
        "-kernel",
        str(elf),
    ]


def run_image(
    image: Image,
    manifest: Mapping[str, Any],
    inputs: Mapping[str, np.ndarray],
    timeout: float = TIMEOUT_S,
) -> tuple[dict[str, np.ndarray], RunStats]:
    """Run the image under qemu-system-arm on `inputs`; the outputs by name, and the counts."""
    with tempfile.TemporaryDirectory(prefix="o2e-mcu-") as tmp:
        work = Path(tmp)
        for i, spec in enumerate(manifest["inputs"]):
            arr = np.ascontiguousarray(inputs[spec["name"]], dtype=spec["dtype"])
            arr.tofile(work / f"in_{i}.bin")
        try:
            proc = subprocess.run(
                qemu_command(image.board, image.elf),
                capture_output=True,
                text=True,
                cwd=work,
                timeout=timeout,
                env={**os.environ},
            )
        except subprocess.TimeoutExpired as e:
            raise Onnx2EdgeError(
                f"{image.board.machine}: no result within {timeout:.0f} s (qemu killed)"
            ) from e
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            raise Onnx2EdgeError(
                f"{image.board.machine}: the image failed ({proc.returncode}): {text[:400]}"
            )
        m = _STATS.search(text)
        if not m:
            raise Onnx2EdgeError(f"{image.board.machine}: no counts in the output: {text[:400]}")
        bits = (
            np.fromfile(work / "touched.bin", np.uint8)
            if (work / "touched.bin").is_file()
            else None
        )
        outputs = {
            spec["name"]: np.fromfile(work / f"out_{i}.bin", dtype=spec["dtype"]).reshape(
                spec["shape"]
            )
            for i, spec in enumerate(manifest["outputs"])
        }
    hi, lo, arena, touched, high, stack = map(int, m.groups())
    ticks = (hi << 32) | lo
    stats = RunStats(
        instructions=ticks * 1_000_000_000 // image.board.clock_hz,
        arena_bytes=arena,
        arena_touched=touched,
        arena_high=high,
        stack_bytes=stack,
        touched=None
        if bits is None
        else np.unpackbits(bits, bitorder="little")[:arena].astype(bool),
        nodes=tuple(
            (name, int(t) * 1_000_000_000 // image.board.clock_hz)
            for name, t in re.findall(r"o2e-node: (\S+) (\d+)", text)
        ),
    )
    return outputs, stats


def build_and_run(
    out_dir: Path,
    arch: str,
    inputs: Mapping[str, np.ndarray],
    extra_flags: Sequence[str] = (),
    opt: str = "-O2",
    budget: bool = False,
) -> tuple[dict[str, np.ndarray], RunStats]:
    import json

    manifest = json.loads((out_dir / "onnx2edge.json").read_text())
    image = build(out_dir, arch, opt, extra_flags, budget=budget)
    return run_image(image, manifest, inputs)


# ---- sizes ------------------------------------------------------------------------------------


def section_sizes(obj: Path) -> dict[str, int]:
    """`arm-none-eabi-size -A` of an object or image: section name -> bytes."""
    size = shutil.which("arm-none-eabi-size")
    if not size:
        raise Onnx2EdgeError(f"arm-none-eabi-size not found (apt-get install {APT_PACKAGES})")
    proc = subprocess.run([size, "-A", str(obj)], capture_output=True, text=True, check=True)
    out: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            out[parts[0]] = out.get(parts[0], 0) + int(parts[1])
    return out


def footprint(obj: Path) -> dict[str, int]:
    """flash (.text + .rodata + .data's image) and RAM (.data + .bss) of an object file."""
    sec = section_sizes(obj)

    def total(*prefixes: str) -> int:
        return sum(v for k, v in sec.items() if k.startswith(prefixes))

    data = total(".data")
    return {
        "text": total(".text"),
        "rodata": total(".rodata"),
        "data": data,
        "bss": total(".bss"),
        "flash": total(".text", ".rodata") + data,
        "ram": data + total(".bss"),
    }


def undefined_symbols(obj: Path) -> list[str]:
    """What an object needs from elsewhere (libc, libm, libgcc)."""
    nm = shutil.which("arm-none-eabi-nm")
    if not nm:
        raise Onnx2EdgeError(f"arm-none-eabi-nm not found (apt-get install {APT_PACKAGES})")
    proc = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True)
    return sorted(ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip())


def linked_symbols(elf: Path) -> list[str]:
    nm = shutil.which("arm-none-eabi-nm")
    if not nm:
        raise Onnx2EdgeError(f"arm-none-eabi-nm not found (apt-get install {APT_PACKAGES})")
    proc = subprocess.run([nm, str(elf)], capture_output=True, text=True, check=True)
    return sorted(ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip())
