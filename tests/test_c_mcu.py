"""Cortex-M builds (issue 31): converted models built with arm-none-eabi-gcc (hard float,
-Wall -Wextra -Werror, -O2 and -Os) into bare-metal images for QEMU's MPS2 / MPS3 boards
(backends/c/mcu: startup, linker script, semihosting harness), run under qemu-system-arm and
compared with onnxruntime. Skipped, with the reason, where the toolchain or QEMU is missing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.backends.c import mcu
from onnx2edge.runtime import ort_run

from conftest import save
from mcu_models import inputs_for, two_head_mlp

MISSING = mcu.missing_tools()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"Cortex-M toolchain: {MISSING}")

ARCHES = list(mcu.BOARDS)
OPTS = ["-O2", "-Os"]


def close(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    """The verify tolerance: max |ours - ref| <= atol + rtol * max |ref|."""
    return float(np.abs(got - ref).max()) <= atol + rtol * float(np.abs(ref).max())


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("mcu_mlp")
    m = save(two_head_mlp(), d / "mlp.onnx")
    api.convert(m, "c", d / "c")
    return m, d / "c"


CALIBRATION = r"""
#include "o2e_mcu.h"
int main(void)
{
  uint64_t t0, t1;
  o2e_ticks_start();
  t0 = o2e_ticks();
  /* 2 + 2 x 1,000,000 instructions */
  __asm__ volatile("movw r3, #0x4240\n\tmovt r3, #0xf\n"
                   "1: subs r3, r3, #1\n\tbne 1b" ::: "r3", "cc");
  t1 = o2e_ticks();
  o2e_puts("ticks=");
  o2e_put_u32((uint32_t)(t1 - t0));
  o2e_puts("\n");
  return 0;
}
"""


@pytest.mark.parametrize("arch", ARCHES)
def test_instruction_count_is_calibrated(tmp_path: Path, arch: str) -> None:
    """A loop of 2,000,000 instructions counts as that many, to one SysTick tick: the board's
    clock in BOARDS and QEMU's -icount agree."""
    b = mcu.BOARDS[arch]
    (tmp_path / "cal.c").write_text(CALIBRATION)
    (tmp_path / "link.ld").write_text(mcu.linker_script(b))
    elf = tmp_path / "cal.elf"
    subprocess.run(
        [mcu.CC, *mcu.compile_flags(b), f"-I{mcu.HERE}", str(tmp_path / "cal.c"),
         str(mcu.HERE / "startup.c"), "-nostartfiles", "--specs=nano.specs",
         f"-T{tmp_path / 'link.ld'}", "-o", str(elf)],
        check=True,
    )  # fmt: skip
    proc = subprocess.run(mcu.qemu_command(b, elf), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ticks = int((proc.stdout + proc.stderr).split("ticks=")[1].split()[0])
    tick = 1e9 / b.clock_hz
    assert abs(ticks * tick - 2_000_002) <= tick, (ticks, tick)


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("arch", ARCHES)
def test_two_inputs_two_outputs(mlp: tuple[Path, Path], arch: str, opt: str) -> None:
    """Every input and output crosses semihosting in model.h's order; the harness's counts are
    sane (the arena is the planner's, a run writes inside it, the stack is small)."""
    model, out = mlp
    proto = onnx.load(str(model))
    x = inputs_for(proto, seed=5)
    ref = ort_run(proto, x)
    got, st = mcu.build_and_run(out, arch, x, opt=opt)
    for k, r in ref.items():
        assert got[k].shape == r.shape and close(got[k], r), (k, got[k], r)
    planned = json.loads((out / "onnx2edge.json").read_text())["stats"]["arena_bytes"]
    assert st.arena_bytes == planned
    assert 0 < st.arena_touched <= st.arena_high <= st.arena_bytes
    assert 0 < st.stack_bytes < 4096
    assert st.instructions > 1000


def test_missing_input_file_fails_cleanly(mlp: tuple[Path, Path], tmp_path: Path) -> None:
    """The image exits non-zero with the harness's message when an input cannot be read (the
    host side then raises an Onnx2EdgeError naming the board)."""
    from onnx2edge.errors import Onnx2EdgeError

    _, out = mlp
    image = mcu.build(out, "cortex-m4")
    manifest = json.loads((out / "onnx2edge.json").read_text())
    broken = {**manifest, "inputs": []}  # writes no input files
    with pytest.raises(Onnx2EdgeError, match="mps2-an386.*cannot read in_0.bin"):
        mcu.run_image(image, broken, {})
