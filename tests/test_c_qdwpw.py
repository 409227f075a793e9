"""runtime/o2e_qdwpw.h: an int8 depthwise layer computed by the 1x1 layer that alone reads it,
its tiles written straight into the 1x1 layer's GEMM panels (kernels/int8/qdwpw.py), bit-exact
against onnxruntime at every ISA, serial and split across two threads.

The models take and return quantized bytes: DQ -> depthwise Conv [-> Relu] -> Q -> DQ -> 1x1
Conv -> Q, which onnxruntime runs as two QLinearConv, so every output byte is compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run, build_executable, run_executable
from onnx2edge.backends.c.kernels.int8 import qdw_kernels
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, SANITIZE_NATIVE, make_model, save, tensor, vi
from conv_models import QTYPES

THREADS = ["-DO2E_THREADS=2", "-pthread"]

# name: (C, H, W, kernel, stride, pads, M, x type, activation)
CASES = {
    # 400 columns: chunks of 32 and a last one of 16; C a multiple of 4, not of 16
    "u8_s1": (24, 20, 20, 3, 1, [1, 1, 1, 1], 16, np.uint8, "Relu"),
    # int8 activations (the panels' flip); C = 21: a partial block and a partial panel step;
    # 7 x 7 = 49 columns (o2e_qgemm's wide path, one unit)
    "s8_s2_odd_c": (21, 13, 13, 3, 2, [1, 1, 1, 1], 10, np.int8, None),
    # 25 columns: one partial pair of panels
    "u8_small_map": (40, 5, 5, 3, 1, [1, 1, 1, 1], 24, np.uint8, "Relu"),
    # 5 x 5 kernel (the tap loop, not the 3-wide rows), asymmetric pads, 99 columns
    "u8_k5": (18, 9, 11, 5, 1, [2, 1, 2, 3], 8, np.uint8, None),
}


def _layer(p: str, src: str, wq: np.ndarray, rng: np.random.Generator, **conv: object) -> tuple:
    """DQ(w), DQ(bias) -> Conv(src): nodes, initializers and the Conv's output; per-channel
    int8 weights, int32 bias at the input scale (0.05) times the weight scale."""
    M = wq.shape[0]
    ws = (rng.random(M) * 0.01 + 0.002).astype(np.float32)
    xs = np.float32(0.05)
    nodes = [
        helper.make_node("DequantizeLinear", [f"{p}wq", f"{p}ws", f"{p}wz"], [f"{p}wd"], axis=0),
        helper.make_node("DequantizeLinear", [f"{p}bq", f"{p}bs", f"{p}bz"], [f"{p}bd"], axis=0),
        helper.make_node("Conv", [src, f"{p}wd", f"{p}bd"], [f"{p}c"], **conv),
    ]
    inits = [
        tensor(f"{p}wq", wq), tensor(f"{p}ws", ws), tensor(f"{p}wz", np.zeros(M, np.int8)),
        tensor(f"{p}bq", rng.integers(-3000, 3000, M).astype(np.int32)),
        tensor(f"{p}bs", (xs * ws).astype(np.float32)), tensor(f"{p}bz", np.zeros(M, np.int32)),
    ]  # fmt: skip
    return nodes, inits, f"{p}c"


def _model(case: tuple, rng: np.random.Generator) -> onnx.ModelProto:
    C, H, W, k, s, pads, M, dt, act = case
    i = np.iinfo(dt)
    z1, z2, z3 = (int(rng.integers(i.min, i.max + 1)) for _ in range(3))
    n1, in1, c1 = _layer(
        "d", "xd", rng.integers(-128, 128, (C, 1, k, k)).astype(np.int8), rng,
        group=C, pads=pads, strides=[s, s], kernel_shape=[k, k],
    )  # fmt: skip
    nodes = [helper.make_node("DequantizeLinear", ["x", "s1", "z1"], ["xd"]), *n1]
    if act:
        nodes.append(helper.make_node(act, [c1], ["dr"]))
        c1 = "dr"
    nodes += [
        helper.make_node("QuantizeLinear", [c1, "s2", "z2"], ["a"]),
        helper.make_node("DequantizeLinear", ["a", "s2", "z2"], ["ad"]),
    ]
    n2, in2, c2 = _layer("p", "ad", rng.integers(-128, 128, (M, C, 1, 1)).astype(np.int8), rng)
    nodes += [*n2, helper.make_node("QuantizeLinear", [c2, "s3", "z3"], ["y"])]
    inits = [
        *in1, *in2,
        tensor("s1", np.float32(0.05)), tensor("z1", np.array(z1, dt)),
        tensor("s2", np.float32(0.05)), tensor("z2", np.array(z2, dt)),
        tensor("s3", np.float32(0.04)), tensor("z3", np.array(z3, dt)),
    ]  # fmt: skip
    oh = (H + pads[0] + pads[2] - k) // s + 1
    ow = (W + pads[1] + pads[3] - k) // s + 1
    e = QTYPES[dt]
    return make_model(
        nodes, [vi("x", [1, C, H, W], e)], [vi("y", [1, M, oh, ow], e)], inits, opset=13
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Path]]:
    """Each case's model, its serial conversion and one with every int8 layer split."""
    d = tmp_path_factory.mktemp("qdwpw")
    rng = np.random.default_rng(21)
    out = {}
    for name, case in CASES.items():
        q = save(_model(case, rng), d / f"{name}.onnx")
        serial, split = d / f"{name}_c", d / f"{name}_mt"
        for dst, threshold in ((serial, 1 << 62), (split, 0)):
            mp = pytest.MonkeyPatch()
            try:
                for k in ("PAR_MIN_MACS", "PAR_MIN_DW"):
                    mp.setattr(qdw_kernels, k, threshold)
                api.convert(q, "c", dst)
            finally:
                mp.undo()
        out[name] = (q, serial, split)
    return out


def test_depthwise_folds_into_the_1x1_layer(models: dict) -> None:
    """Every case runs as one o2e_qdwpw call (no o2e_qdwc, no separate 1x1 product); with
    the thresholds at zero the depthwise phase goes to o2e_parallel_for, and the 1x1 phase
    where it has more than one unit (maps over 64 columns: chunks of 32)."""
    for name, (_, serial, split) in models.items():
        code = (serial / "model.c").read_text()
        assert code.count("o2e_qdwpw(") == 1 and "o2e_qdwc(" not in code, name
        assert "o2e_qgemm_rows(" not in code, name
        call = next(ln for ln in (split / "model.c").read_text().splitlines() if "o2e_qdwpw(" in ln)
        C, H, W, k, st, pads = CASES[name][:6]
        P = ((H + pads[0] + pads[2] - k) // st + 1) * ((W + pads[1] + pads[3] - k) // st + 1)
        assert call.count("o2e_parallel_for") == (2 if P > 64 else 1), name


def _input(case: tuple, seed: int) -> dict[str, np.ndarray]:
    C, H, W, dt = case[0], case[1], case[2], case[7]
    i = np.iinfo(dt)
    xv = np.random.default_rng(seed).integers(i.min, i.max + 1, (1, C, H, W)).astype(dt)
    xv[0, 0, :2] = i.max
    xv[0, 1, :2] = i.min
    return {"x": xv}


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", list(CASES))
def test_folded_pair_bit_exact(models: dict, case: str, arch: str) -> None:
    """Both layers' bytes equal onnxruntime's two QLinearConv, serial and on two threads."""
    q, serial, split = models[case]
    x = _input(CASES[case], 22)
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(serial, arch, x)["y"]
    assert got.dtype == ref.dtype
    bad = np.argwhere(got != ref)
    assert bad.size == 0, (bad[:5], got[tuple(bad[:5].T)], ref[tuple(bad[:5].T)])
    i = np.iinfo(ref.dtype)
    assert len(np.unique(ref)) > 16 and ((ref == i.min).any() or (ref == i.max).any()), case
    two = build_and_run(split, arch, x, THREADS)["y"]
    assert np.array_equal(two, ref)


def test_second_reader_keeps_the_layers_apart(tmp_path: Path) -> None:
    """A depthwise output that is also a graph output (or read twice) is written as NCHW:
    the depthwise layer runs on its own."""
    m = _model(CASES["u8_s1"], np.random.default_rng(23))
    m.graph.output.append(vi("a", [1, 24, 20, 20], QTYPES[np.uint8]))
    q = save(m, tmp_path / "two.onnx")
    api.convert(q, "c", tmp_path / "c")
    code = (tmp_path / "c" / "model.c").read_text()
    assert "o2e_qdwpw(" not in code and "o2e_qdwc(" in code
    x = _input(CASES["u8_s1"], 24)
    ref = ort_run(onnx.load(str(q)), x)
    got = build_and_run(tmp_path / "c", "native", x)
    for k in ("y", "a"):
        assert np.array_equal(got[k], ref[k]), k


@pytest.mark.parametrize("case", ["u8_s1", "s8_s2_odd_c"])
def test_folded_pair_under_sanitizers(models: dict, case: str) -> None:
    """The per-thread plane and tile slots, the panels and the tile rows read past the map
    stay inside their arena blocks (ASan and UBSan, native, three threads)."""
    q, _, split = models[case]
    x = _input(CASES[case], 25)
    io = json.loads((split / "onnx2edge.json").read_text())
    flags = [*SANITIZE_NATIVE, "-DO2E_THREADS=3", "-pthread"]
    got = run_executable(build_executable(split, flags, "san"), io, x, split)["y"]
    assert np.array_equal(got, ort_run(onnx.load(str(q)), x)["y"])
