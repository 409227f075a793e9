"""The int8 kernels of runtime/o2e_qgemm.h and o2e_qdw.h on the Cortex-M boards (issue 31):
each kernel alone on small shapes, built for the board (the DSP / SMLAD kernels on the M4 /
M7 / M33, the M55's build) and run under qemu-system-arm. The expected bytes come from numpy
in onnxruntime's requantisation order (int32 sums, float32 product, clamp, round half to
even, zero point), so a kernel is checked bit for bit; the model tests (test_c_mcu.py)
compare whole int8 models with onnxruntime itself. Each run also reports the kernel's
instructions per multiply-accumulate: QEMU's -icount is deterministic (it does not depend on
the host), so the issue's targets are asserted at these shapes."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.backends.c import mcu
from onnx2edge.backends.c.kernels.int8.qdw_kernels import (
    _pad16,
    depthwise_bias,
    pack_depthwise,
    tap_offsets,
)
from onnx2edge.backends.c.kernels.int8.qgemm_kernels import pack_weights, pack_weights16
from onnx2edge.runtime import ort_run

from mcu_models import digits_cnn, ds_cnn, inputs_for, quantized

MISSING = mcu.missing_tools()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"Cortex-M toolchain: {MISSING}")

RUNTIME = Path(mcu.__file__).parent.parent / "runtime"
REPEAT = 4  # runs of the kernel between the two SysTick reads (resolution: 40 instructions)


def _arr(name: str, a: np.ndarray, ctype: str, const: bool = True) -> str:
    vals = ", ".join(str(int(v)) if ctype != "float" else repr(float(v)) + "f" for v in a.ravel())
    q = "static const" if const else "static"
    return f"{q} {ctype} {name}[{max(a.size, 1)}] __attribute__((aligned(8))) = {{{vals}}};\n"


def requant(acc: np.ndarray, scale: np.ndarray, zp: int, lo: int, hi: int) -> np.ndarray:
    """onnxruntime's MlasRequantizeOutput on int32 sums (rows: output channels)."""
    f = acc.astype(np.int32).astype(np.float32) * scale.astype(np.float32)[:, None]
    f = np.clip(f, np.float32(lo - zp), np.float32(hi - zp))
    return ((np.rint(f).astype(np.int32) + zp) & 0xFF).astype(np.uint8)


@dataclass
class Case:
    """One kernel call: C declarations, the call, the expected output bytes and MACs."""

    decls: str
    call: str
    expect: np.ndarray
    macs: int
    scratch: int  # bytes of uint8 scratch `ws`


# output zero point and clamp bounds: uint8 with a fused Relu (lo = zp), the full int8 range
# (the project's int8 quantisation), the full uint8 range
OUTS = {"u8relu": (7, 7, 255), "s8": (-5, -128, 127), "u8": (120, 0, 255)}


def gemm_case(
    M: int,
    P: int,
    K: int,
    seed: int = 0,
    signed: bool = False,
    out: str = "s8",
    k16: bool = False,
    gain: float = 1.0,
) -> Case:
    """o2e_qgemm_rows on K rows of P activation bytes (a 1x1 convolution's input), M outputs."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (M, K), dtype=np.int32)
    x = rng.integers(0, 256, (K, P), dtype=np.int32)  # the bytes after the flip
    bias = rng.integers(-5000, 5000, M, dtype=np.int32)
    scale = (gain * rng.uniform(0.5, 2.0, M) / np.sqrt(K) / 128).astype(np.float32)
    zp, lo, hi = OUTS[out]
    acc = w.astype(np.int64) @ x.astype(np.int64) + bias[:, None]
    expect = requant(((acc + 2**31) % 2**32 - 2**31), scale, zp, lo, hi)
    flip = 0x80 if signed else 0
    decls = (
        _arr("qx", (x ^ flip).astype(np.uint8), "uint8_t")
        + _arr("qb", bias, "int32_t")
        + _arr("qs", scale, "float")
        + f"static uint8_t y[{M * P}];\n"
    )
    clamp = f"{zp}, {lo}, {hi}, y, {P}, 1);"
    if k16:  # o2e_qgemm16 (a cortex-m55 conversion): row sums restore the int8 activations
        decls += _arr("qa", pack_weights16(w.astype(np.int8)), "int8_t")
        decls += _arr("qr", w.sum(axis=1).astype(np.int32), "int32_t")
        call = f"o2e_qgemm16({M}, {P}, {K}, qa, qx, {P}, 0, 1, {flip}, ws, qb, qr, qs, {clamp}"
        return Case(decls, call, expect.ravel(), M * P * K, 16 * -(-K // 16) * 16)
    decls += _arr("qa", pack_weights(w.astype(np.int8)), "int8_t")
    call = f"o2e_qgemm_rows({M}, {P}, {K}, qa, qx, {P}, 0, {flip}, ws, qb, qb, qs, {clamp}"
    return Case(decls, call, expect.ravel(), M * P * K, 2 * -(-K // 4) * 128)


def fc_case(N: int, K: int, seed: int = 0, out: str = "u8", gain: float = 1.0) -> Case:
    """A fully connected layer at batch 1: o2e_qgemv (what a --device conversion runs)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (N, K), dtype=np.int32)
    x = rng.integers(0, 256, K, dtype=np.int32)
    bias = rng.integers(-5000, 5000, N, dtype=np.int32)
    scale = (gain * rng.uniform(0.5, 2.0, N) / np.sqrt(K) / 128).astype(np.float32)
    zp, lo, hi = OUTS[out]
    acc = w.astype(np.int64) @ x.astype(np.int64) + bias
    expect = requant(acc[:, None], scale, zp, lo, hi)
    decls = (
        _arr("qa", pack_weights(w.astype(np.int8)), "int8_t")
        + _arr("qx", x.astype(np.uint8), "uint8_t")
        + _arr("qb", bias, "int32_t")
        + _arr("qs", scale, "float")
        + f"static uint8_t y[{N}];\n"
    )
    call = f"o2e_qgemv({N}, {K}, qa, qx, 0, ws, qb, qs, {zp}, {lo}, {hi}, y, 1);"
    return Case(decls, call, expect.ravel(), N * K, -(-K // 4) * 8)


def depthwise_case(
    C: int,
    H: int,
    W: int,
    k: int = 3,
    stride: int = 1,
    seed: int = 0,
    nchw: bool = True,
    out: str = "s8",
) -> Case:
    """A k x k depthwise convolution, padding k // 2, on C channels of H x W: o2e_qdwn (what a
    --device conversion runs, channel by channel), or o2e_qdwc (channel blocks)."""
    rng = np.random.default_rng(seed)
    pad = k // 2
    w = rng.integers(-128, 128, (C, k * k), dtype=np.int32)
    x = rng.integers(0, 256, (C, H, W), dtype=np.int32)
    xz = 131
    bias = rng.integers(-5000, 5000, C, dtype=np.int32)
    scale = (rng.uniform(0.5, 2.0, C) / k / 128).astype(np.float32)
    zp, lo, hi = OUTS[out]
    OH = (H + 2 * pad - k) // stride + 1
    OW = (W + 2 * pad - k) // stride + 1
    xp = np.full((C, H + 2 * pad, W + 2 * pad), xz, np.int64)
    xp[:, pad : pad + H, pad : pad + W] = x
    acc = np.zeros((C, OH, OW), np.int64)
    for ky in range(k):
        for kx in range(k):
            win = xp[:, ky : ky + stride * OH : stride, kx : kx + stride * OW : stride]
            acc += (win - xz) * w[:, ky * k + kx, None, None]
    acc += bias[:, None, None]
    expect = requant(acc.reshape(C, -1), scale, zp, lo, hi)
    hp, wp = (OH - 1) * stride + k, (OW - 1) * stride + k
    decls = (
        _arr("qw", pack_depthwise(w.astype(np.int8)), "int32_t")
        + _arr("qx", x.astype(np.uint8), "uint8_t")
        + _arr("qb", _pad16(depthwise_bias(bias, w, xz)), "int32_t")
        + _arr("qs", _pad16(scale), "float")
        + f"static uint8_t y[{C * OH * OW}];\n"
    )
    geo = f"{C}, {H}, {W}, {OH}, {OW}, {k}, {k}, {stride}, {stride}, {pad}, {pad}, 1, 1"
    args = f"qx, 0, {xz}, qw, %sqb, qs, {zp}, {lo}, {hi}, y, ws"
    if nchw:
        call = f"o2e_qdwn({geo}, {args % ''});"
        return Case(decls, call, expect.ravel(), C * OH * OW * k * k, hp * wp * 2)
    decls += _arr("qoff", tap_offsets(k, k, 1, 1, wp), "int32_t")
    decls += f"static uint8_t tile[{-(-OH * OW // 16) * 16 * 16}];\n"
    call = f"o2e_qdwc({geo}, {args % 'qoff, '}, tile);"
    return Case(decls, call, expect.ravel(), C * OH * OW * k * k, hp * wp * 16)


DRIVER = r"""
#include "o2e_mcu.h"
#include "o2e_qgemm.h"
#include "o2e_qdw.h"
%(decls)s
static uint8_t ws[%(scratch)d] __attribute__((aligned(8)));
static const uint8_t expect[%(n)d] = {%(expect)s};
int main(void)
{
  uint64_t t0, t1;
  uint32_t bad = 0;
  o2e_ticks_start();
  t0 = o2e_ticks();
  for (int rep = 0; rep < %(repeat)d; ++rep) {
    %(call)s
  }
  t1 = o2e_ticks();
  for (uint32_t i = 0; i < %(n)d; ++i) bad += y[i] != expect[i];
  o2e_puts("ticks=");
  o2e_put_u32((uint32_t)(t1 - t0));
  o2e_puts(" bad=");
  o2e_put_u32(bad);
  o2e_puts("\n");
  return 0;
}
"""


def run_case(
    case: Case, arch: str, work: Path, opt: str = "-O2", extra: tuple[str, ...] | list[str] = ()
) -> tuple[int, float]:
    """(output bytes that differ from the expected ones, instructions per MAC of one call)."""
    b = mcu.BOARDS[arch]
    work.mkdir(parents=True, exist_ok=True)
    src = DRIVER % {
        "decls": case.decls,
        "scratch": max(case.scratch, 8),
        "n": case.expect.size,
        "expect": ", ".join(map(str, case.expect.tolist())),
        "repeat": REPEAT,
        "call": case.call,
    }
    (work / "k.c").write_text(src)
    (work / "link.ld").write_text(mcu.linker_script(b))
    elf = work / "k.elf"
    subprocess.run(
        [mcu.CC, *mcu.compile_flags(b, opt, extra), f"-I{mcu.HERE}", f"-I{RUNTIME}", str(work / "k.c"),
         str(mcu.HERE / "startup.c"), "-nostartfiles", "--specs=nano.specs",
         f"-T{work / 'link.ld'}", "-Wl,--gc-sections", "-o", str(elf), "-lm"],
        check=True,
    )  # fmt: skip
    proc = subprocess.run(mcu.qemu_command(b, elf), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    ticks = int(out.split("ticks=")[1].split()[0])
    bad = int(out.split("bad=")[1].split()[0])
    instructions = ticks * 1e9 / b.clock_hz / REPEAT
    return bad, instructions / case.macs


# ---- the tests ----------------------------------------------------------------------------------

DSP_BOARDS = ["cortex-m4", "cortex-m7", "cortex-m33"]
TARGET_DSP = 1.5  # issue 31: int8 conv and fully connected layers on M4 / M7 / M33


@pytest.mark.parametrize("arch", list(mcu.BOARDS))
def test_pointwise_gemm_is_exact_and_within_target(
    arch: str, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """A DS-CNN pointwise layer (64 outputs, 64 inputs, 250 pixels, int8 out): onnxruntime's
    bytes, in <= 1.5 instructions per MAC with the SMLAD kernel (packing and requantisation
    included)."""
    bad, ipm = run_case(gemm_case(64, 250, 64, signed=True), arch, tmp_path)
    record_property("instr_per_mac", round(ipm, 3))
    assert bad == 0
    if arch in DSP_BOARDS:
        assert ipm <= TARGET_DSP, ipm


@pytest.mark.parametrize("arch", list(mcu.BOARDS))
def test_fully_connected_batch1_is_exact_and_within_target(
    arch: str, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """A batch-1 fully connected layer (128 x 256): one column packed and computed (four rows
    per pass of the column), <= 1.5 instructions per MAC."""
    bad, ipm = run_case(fc_case(128, 256, out="s8"), arch, tmp_path)
    record_property("instr_per_mac", round(ipm, 3))
    assert bad == 0
    if arch in DSP_BOARDS:
        assert ipm <= TARGET_DSP, ipm


@pytest.mark.parametrize("arch", list(mcu.BOARDS))
def test_depthwise_is_exact(
    arch: str, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """The DS-CNN's depthwise 3x3 layer shape (64 channels of 25 x 5) with o2e_qdwn: exact, and
    (a recorded figure with a loose bound) far below the channel-block kernel's 12-14
    instructions per MAC on a Cortex-M: each output's 9 MACs share the cost of a float
    requantisation, so this kernel stays above the GEMM's."""
    bad, ipm = run_case(depthwise_case(64, 25, 5), arch, tmp_path)
    record_property("instr_per_mac", round(ipm, 3))
    assert bad == 0
    assert ipm <= 4.0, ipm


TARGET_MVE = 0.6  # issue 31: int8 conv and fully connected layers on the M55


def test_helium_gemm_is_exact_and_within_target(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """o2e_qgemm16 (a cortex-m55 conversion's int8 GEMM: VMLADAVA on 16-k rows) at the DS-CNN
    pointwise shape: onnxruntime's bytes in <= 0.6 instructions per MAC on the M55."""
    bad, ipm = run_case(gemm_case(64, 250, 64, signed=True, k16=True), "cortex-m55", tmp_path)
    record_property("instr_per_mac", round(ipm, 3))
    assert bad == 0
    assert ipm <= TARGET_MVE, ipm


K16_ODD = {
    # scales 1e9 times larger: products past 2^31, where the rounding saturates before the
    # zero point is added
    "gemm saturating u8": lambda: gemm_case(6, 20, 12, seed=9, out="u8", gain=1e9),
    "gemm saturating s8": lambda: gemm_case(6, 20, 12, seed=9, out="s8", gain=1e9),
    "13x37x21 u8 relu": lambda: gemm_case(13, 37, 21, seed=1, out="u8relu", k16=True),
    "4x1x40 s8": lambda: gemm_case(4, 1, 40, seed=2, k16=True),
    "7x18x16 u8": lambda: gemm_case(7, 18, 16, seed=3, signed=True, out="u8", k16=True),
}


@pytest.mark.parametrize("name", list(K16_ODD))
def test_helium_gemm_odd_shapes_are_exact(name: str, tmp_path: Path) -> None:
    """o2e_qgemm16's tails (rows past a multiple of 4, odd column counts, K not a multiple of
    16): with MVE on the M55 and in portable C (-DO2E_Q_NO_MVE)."""
    case = K16_ODD[name]()
    assert run_case(case, "cortex-m55", tmp_path / "mve")[0] == 0
    assert run_case(case, "cortex-m55", tmp_path / "c", extra=["-DO2E_Q_NO_MVE"])[0] == 0


ODD = {
    # scales 1e9 times larger: products past 2^31, where the rounding saturates before the
    # zero point is added
    "gemm saturating u8": lambda: gemm_case(6, 20, 12, seed=9, out="u8", gain=1e9),
    "gemm saturating s8": lambda: gemm_case(6, 20, 12, seed=9, out="s8", gain=1e9),
    "gemm 13x37x21 u8 relu": lambda: gemm_case(13, 37, 21, seed=1, out="u8relu"),
    "gemm 9x3x5 u8": lambda: gemm_case(9, 3, 5, seed=2, signed=True, out="u8"),
    "fc 10x30": lambda: fc_case(10, 30, seed=3, out="u8relu"),
    "fc 3x5": lambda: fc_case(3, 5, seed=4, out="s8"),
    "fc saturating u8": lambda: fc_case(9, 8, seed=10, out="u8", gain=1e9),
    "depthwise 3x3 stride 2": lambda: depthwise_case(5, 9, 8, stride=2, seed=5, out="u8"),
    "depthwise 5x5": lambda: depthwise_case(3, 7, 6, k=5, seed=6, out="u8relu"),
    "depthwise 3x3 odd width": lambda: depthwise_case(17, 4, 7, seed=7, out="u8relu"),
    "depthwise 1x1": lambda: depthwise_case(4, 3, 3, k=1, seed=8, out="u8"),
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_shapes_are_exact(name: str, tmp_path: Path) -> None:
    """Tails of every blocking (rows, columns, K not a multiple of 4, odd output widths,
    strides, kernel sizes, the three clamp modes) on the M4, DSP kernels and portable ones
    (-DO2E_Q_NO_DSP) alike."""
    case = ODD[name]()
    assert run_case(case, "cortex-m4", tmp_path / "dsp")[0] == 0
    assert run_case(case, "cortex-m4", tmp_path / "portable", extra=["-DO2E_Q_NO_DSP"])[0] == 0


# ---- whole int8 models with --device: the kernels each device selects -------------------------


@pytest.fixture(scope="module")
def int8_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The int8 DS-CNN keyword spotter and digits CNN (QDQ from the project's `quantize`)."""
    d = tmp_path_factory.mktemp("mcu_kernel_models")
    return {
        "ds_cnn_int8": Path(quantized(ds_cnn(), d, "ds_cnn")),
        "digits_int8": Path(quantized(digits_cnn(), d, "digits")),
    }


@pytest.mark.parametrize(
    ("name", "arch"),
    [("ds_cnn_int8", "cortex-m4"), ("ds_cnn_int8", "cortex-m55"), ("digits_int8", "cortex-m55")],
)
def test_device_selects_int8_kernels(
    int8_models: dict[str, Path], name: str, arch: str, tmp_path: Path
) -> None:
    """--device records its int8 kernels in the manifest (dsp on the M4, mve on the M55) and
    the generated C calls them (the SMLAD GEMM and channel-plane depthwise; Helium's
    o2e_qgemm16 on weights packed for it); the board's output is onnxruntime's, bit for bit."""
    out = tmp_path / "c"
    api.convert(int8_models[name], "c", out, options={"device": arch})
    manifest = json.loads((out / "onnx2edge.json").read_text())
    want = "mve" if arch == "cortex-m55" else "dsp"
    assert manifest["stats"]["int8_kernels"] == want
    code = (out / "model.c").read_text()
    assert ("o2e_qgemm16_rows(" in code) == (want == "mve")
    assert ("o2e_qgemm_rows(" in code) == (want == "dsp")
    if name == "ds_cnn_int8":
        assert "o2e_qdwn(" in code and "o2e_qdwc(" not in code
    proto = onnx.load(str(int8_models[name]))
    x = inputs_for(proto, seed=11)
    got, st = mcu.build_and_run(out, arch, x)
    for k, r in ort_run(proto, x).items():
        assert np.array_equal(got[k], r), (k, np.abs(got[k].astype(int) - r).max())
    assert st.arena_touched >= 0.9 * manifest["stats"]["arena_bytes"]


@pytest.mark.parametrize("device", ["cortex-m4", "cortex-m55"])
def test_device_int8_conversion_verifies_on_the_host(
    int8_models: dict[str, Path], device: str
) -> None:
    """A device conversion still builds and matches onnxruntime exactly on a PC (SSE2 x86-64:
    the portable C of the same layouts: o2e_qgemm16's loops, o2e_qdwn's, o2e_qgemv's)."""
    report = api.verify(int8_models["ds_cnn_int8"], target="c", options={"device": device})
    assert report.ok, report
