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

from conftest import EXAMPLE, save
from mcu_models import digits_cnn, ds_cnn, inputs_for, quantized, two_head_mlp

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


# ---- the models the issue names, -Werror clean at -O2 and -Os on every board --------------------

DOUBLE_HELPERS = ("__aeabi_d", "__adddf3", "__subdf3", "__muldf3", "__divdf3", "__extendsfdf2",
                  "__truncdfsf2", "__floatsidf", "__fixdfsi", "__eqdf2", "__ltdf2", "__gtdf2")  # fmt: skip
# what a model may take from the C library: memory moves, and libm where an op needs it
LIBC_ALLOWED = {"memcpy", "memset", "memmove"}
LIBM = {"expf", "logf", "tanhf", "sqrtf", "nearbyintf", "erff", "powf", "fabsf", "floorf", "ceilf"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """{name: (ONNX model, converted folder)}: tiny_cnn, the digits CNN and the DS-CNN in
    float, and the digits CNN in int8 (QDQ from the project's `quantize`)."""
    d = tmp_path_factory.mktemp("mcu_models")
    srcs = {
        "tiny_cnn": EXAMPLE,
        "digits": save(digits_cnn(), d / "digits.onnx"),
        "ds_cnn": save(ds_cnn(), d / "ds_cnn.onnx"),
        "digits_int8": quantized(digits_cnn(), d, "digits"),
    }
    out = {}
    for name, src in srcs.items():
        api.convert(src, "c", d / f"{name}_c")
        out[name] = (Path(src), d / f"{name}_c")
    return out


def _check_against_onnxruntime(model: Path, out: Path, arch: str, opt: str) -> mcu.RunStats:
    proto = onnx.load(str(model))
    x = inputs_for(proto, seed=7)
    ref = ort_run(proto, x)
    got, st = mcu.build_and_run(out, arch, x, extra_flags=["-Wdouble-promotion"], opt=opt)
    for k, r in ref.items():
        if "int8" in model.name:  # integer kernels: onnxruntime's arithmetic, bit for bit
            assert np.array_equal(got[k], r), (k, np.abs(got[k] - r).max())
        else:
            assert close(got[k], r), (k, np.abs(got[k] - r).max(), np.abs(r).max())
    return st


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", ["tiny_cnn", "digits_int8"])
def test_models_match_onnxruntime_on_boards(models: dict, name: str, arch: str, opt: str) -> None:
    """tiny_cnn (float) and the digits CNN (int8) build -Werror clean (and -Wdouble-promotion)
    and match onnxruntime on every board; an int8 model exactly."""
    _check_against_onnxruntime(*models[name], arch, opt)


@pytest.mark.parametrize("arch", ["cortex-m4", "cortex-m33"])
def test_float_models_use_no_double_arithmetic(models: dict, arch: str, tmp_path: Path) -> None:
    """On single-precision FPUs (M4F, M33) a float model links no software double routine,
    and needs nothing from the C library but memcpy / memset / memmove (and libm)."""
    for name in ("tiny_cnn", "digits", "ds_cnn"):
        _, out = models[name]
        image = mcu.build(out, arch, build_dir=tmp_path / name)
        need = mcu.undefined_symbols(image.objects["model"])
        assert not [s for s in need if s.startswith(DOUBLE_HELPERS)], (name, need)
        assert set(need) <= LIBC_ALLOWED | LIBM, (name, need)
        linked = mcu.linked_symbols(image.elf)
        assert not [s for s in linked if s.startswith(DOUBLE_HELPERS)], name


def test_verify_cli_on_a_board(capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --target c --arch cortex-m4` converts, builds the image, runs it under QEMU and
    compares with onnxruntime."""
    from onnx2edge.cli import main

    assert main(["verify", str(EXAMPLE), "--target", "c", "--arch", "cortex-m4"]) == 0


# ---- convert --device: the arena planned for the build that runs --------------------------------


@pytest.fixture(scope="module")
def device_models(
    models: dict[str, tuple[Path, Path]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path, int]]:
    """{name: (ONNX model, folder converted with --device cortex-m4, generic arena bytes)}:
    tiny_cnn, the digits CNN and the DS-CNN keyword spotter, float and int8."""
    d = tmp_path_factory.mktemp("mcu_device")
    srcs = {name: src for name, (src, _) in models.items()}
    srcs["ds_cnn_int8"] = quantized(ds_cnn(), d, "ds_cnn")
    out = {}
    for name, src in srcs.items():
        generic = api.convert(src, "c", d / f"{name}_generic").stats["arena_bytes"]
        api.convert(src, "c", d / f"{name}_m4", options={"device": "cortex-m4"})
        out[name] = (src, d / f"{name}_m4", generic)
    return out


@pytest.mark.parametrize("name", ["tiny_cnn", "digits", "digits_int8", "ds_cnn", "ds_cnn_int8"])
def test_device_arena_is_what_the_run_touches(device_models: dict, name: str) -> None:
    """With --device cortex-m4 the planned arena is within 10 % of the bytes a run on the
    board writes (the harness fills it with two patterns and counts), the outputs still match
    onnxruntime, and the generic plan (every ISA, 4 threads) was no smaller."""
    src, out, generic = device_models[name]
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert manifest["options"]["device"] == "cortex-m4"
    assert manifest["stats"]["device"] == "cortex-m4"
    planned = manifest["stats"]["arena_bytes"]
    st = _check_against_onnxruntime(src, out, "cortex-m4", "-O2")
    assert st.arena_bytes == planned <= generic
    assert st.arena_touched >= 0.9 * planned, (planned, st.arena_touched, st.arena_high)


def test_device_keyword_spotter_fits_a_small_part(device_models: dict) -> None:
    """The DS-CNN's float arena (821 KB in issue 31, planned for every ISA and 4 threads with
    KC-row GEMM slices) fits a 256 KB Cortex-M4F part with the device plan; its int8 one too."""
    budget = mcu.BOARDS["cortex-m4"].part_ram
    for name in ("ds_cnn", "ds_cnn_int8"):
        src, out, generic = device_models[name]
        planned = json.loads((out / "onnx2edge.json").read_text())["stats"]["arena_bytes"]
        assert planned + mcu.STACK_BYTES < budget, (name, planned, generic)
        assert planned < generic or name.endswith("int8"), (name, planned, generic)


def test_device_build_refuses_other_builds(device_models: dict, tmp_path: Path) -> None:
    """A --device conversion stops (#error) a build with threads or AVX, whose kernels need
    other workspaces; a plain PC build (SSE2: the portable kernels) compiles and matches."""
    from onnx2edge.backends.c.build import compile_shared

    _, out, _ = device_models["ds_cnn"]
    from onnx2edge.errors import Onnx2EdgeError

    for flags in (["-DO2E_THREADS=2", "-pthread"], ["-mavx2", "-mfma"]):
        with pytest.raises(Onnx2EdgeError, match="converted with --device cortex-m4"):
            compile_shared([out / "model.c"], tmp_path / "lib.so", ["-O1", *flags], [out])
    report = api.verify(device_models["ds_cnn"][0], target="c", options={"device": "cortex-m4"})
    assert report.ok


def test_device_choices_are_the_boards() -> None:
    """Every microcontroller device has a board to run on, and a bad name is refused."""
    from onnx2edge.backends.c.device import DEVICES, device
    from onnx2edge.errors import Onnx2EdgeError

    assert {d for d in DEVICES if d != "generic"} == set(mcu.BOARDS)
    with pytest.raises(Onnx2EdgeError, match="--device cortex-m0"):
        device("cortex-m0")


def test_int8_gemm_runs_the_dsp_kernel(models: dict, tmp_path: Path) -> None:
    """On a Cortex-M with the DSP extension the int8 GEMM is the SMLAD kernel; with
    -DO2E_Q_NO_DSP the portable one. Both give onnxruntime's integers, the SMLAD one in fewer
    instructions."""
    src, out = models["digits_int8"]
    counts = {}
    for name, flags in (("dsp", []), ("portable", ["-DO2E_Q_NO_DSP"])):
        image = mcu.build(out, "cortex-m4", extra_flags=flags, build_dir=tmp_path / name)
        dis = subprocess.run(
            ["arm-none-eabi-objdump", "-d", str(image.objects["model"])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert ("smlad" in dis) == (name == "dsp"), name
        proto = onnx.load(str(src))
        x = inputs_for(proto, seed=9)
        got, st = mcu.run_image(image, json.loads((out / "onnx2edge.json").read_text()), x)
        for k, r in ort_run(proto, x).items():
            assert np.array_equal(got[k], r), (name, k)
        counts[name] = st.instructions
    assert counts["dsp"] < counts["portable"] / 2, counts


def test_per_node_instruction_counts(models: dict, tmp_path: Path) -> None:
    """profile=True builds with the trace hook: one count per node (each traced tensor), and
    the counts add up to the inference's (the hook's own few instructions aside)."""
    src, out = models["digits_int8"]
    image = mcu.build(out, "cortex-m33", build_dir=tmp_path, profile=True)
    manifest = json.loads((out / "onnx2edge.json").read_text())
    _, st = mcu.run_image(image, manifest, inputs_for(onnx.load(str(src)), seed=3))
    traced = json.loads((out / "tensors.json").read_text())
    assert [n for n, _ in st.nodes] and {n for n, _ in st.nodes} <= set(traced)
    total = sum(n for _, n in st.nodes)
    assert 0.98 * st.instructions <= total <= st.instructions + 1000, (total, st.instructions)
