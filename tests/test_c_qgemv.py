"""runtime/o2e_qgemm.h o2e_qkernel_col: a one-column int8 product (a classifier's Gemm / MatMul
at batch 1) on AVX-512 VNNI, bit-exact against onnxruntime (the other ISAs keep o2e_qkernel and
are checked here too); also the 1..3 columns past a panel (O2E_QCOLS: a 7 x 7 map's 49 = 32 +
16 + 1) that VNNI runs as single columns. The model takes and returns quantized bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi

# K = 4 * 4 * 9 + 3 steps: the 4-step body, the 1..3-step tail and a partial step; N = 13: a
# partial 8-row tile
K, N = 147, 13


def _model(dt: type, rows: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(41)
    wq = rng.integers(-128, 128, (K, N)).astype(np.int8)
    wq[:, 0] = -128  # the widest products
    ws = (rng.random(N) * 0.002 + 0.0005).astype(np.float32)
    e = TensorProto.UINT8 if dt == np.uint8 else TensorProto.INT8
    xz = 131 if dt == np.uint8 else -9
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"]),
    ]
    inits = [
        tensor("xs", np.array(0.05, np.float32)), tensor("xz", np.array(xz, dt)),
        tensor("wq", wq), tensor("ws", ws), tensor("wz", np.zeros(N, np.int8)),
        tensor("ys", np.array(0.4, np.float32)), tensor("yz", np.array(xz, dt)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", [rows, K], e)], [vi("y", [rows, N], e)], inits, opset=13)


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
def test_one_column_gemm_bit_exact(
    tmp_path_factory: pytest.TempPathFactory, dt: type, arch: str
) -> None:
    _check(tmp_path_factory, dt, arch, 1)


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("rows", [19, 27, 49])
def test_columns_past_a_panel_bit_exact(
    tmp_path_factory: pytest.TempPathFactory, rows: int, arch: str
) -> None:
    """19 = 16 + 3 and 49 = 32 + 16 + 1 columns: the tail after whole panels; 27 = 16 + 11:
    a pair of panels, the second partial; N = 13 rows: a partial row tile."""
    _check(tmp_path_factory, np.uint8, arch, rows)


def _check(tmp_path_factory: pytest.TempPathFactory, dt: type, arch: str, rows: int) -> None:
    d = tmp_path_factory.mktemp("qgemv")
    q = save(_model(dt, rows), d / "m.onnx")
    c = d / "c"
    api.convert(q, "c", c)
    assert "o2e_qgemm(" in (c / "model.c").read_text()
    i = np.iinfo(dt)
    rng = np.random.default_rng(42)
    for trial in range(3):
        xv = rng.integers(i.min, i.max + 1, (rows, K)).astype(dt)
        if trial == 1:
            xv[:] = i.max  # extreme: every product at its widest under column 0's -128s
        x = {"x": xv}
        ref = ort_run(onnx.load(str(q)), x)["y"]
        got = build_and_run(c, arch, x)["y"]
        assert trial == 1 or len(np.unique(ref)) > 4, ref
        np.testing.assert_array_equal(got, ref)
