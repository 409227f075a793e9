"""runtime/o2e_qdw.h: the int8 depthwise convolution across channel blocks (o2e_qdwc) and the
quantized Add (o2e_qadd), bit-exact against onnxruntime at every ISA.

The models take and return the quantized bytes (DQ -> op -> Q between uint8 / int8 graph
inputs and outputs), so every output byte is compared, with no float edge in between.
onnxruntime fuses DQ -> Add -> Q into QLinearAdd and DQ -> Conv -> Q into QLinearConv.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi
from conv_models import QTYPES, qdq_conv_model


def _byte_range(dt: type) -> np.ndarray:
    i = np.iinfo(dt)
    return np.arange(i.min, i.max + 1)


# (scale a, zp a, scale b, zp b, scale c, zp c, type, activation)
ADD_CASES = {
    "u8": (0.031, 131, 0.017, 90, 0.04, 120, np.uint8, None),
    "u8_saturating": (0.05, 10, 0.09, 250, 0.011, 60, np.uint8, None),
    "s8": (0.0213, -7, 0.0377, 40, 0.029, -3, np.int8, None),
}


def _add_model(case: tuple) -> onnx.ModelProto:
    sa, za, sb, zb, sc, zc, dt, act = case
    n = 256 * 256
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
        helper.make_node("Add", ["da", "db"], ["s"]),
    ]
    last = "s"
    if act:
        nodes.append(helper.make_node(act, ["s"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sc", "zc"], ["y"]))
    inits = [tensor(k, np.array(v, np.float32)) for k, v in (("sa", sa), ("sb", sb), ("sc", sc))]
    inits += [tensor(k, np.array(v, dt)) for k, v in (("za", za), ("zb", zb), ("zc", zc))]
    e = QTYPES[dt]
    return make_model(nodes, [vi("a", [n], e), vi("b", [n], e)], [vi("y", [n], e)], inits, opset=13)


@pytest.fixture(scope="module")
def add_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qadd")
    out = {}
    for name, case in ADD_CASES.items():
        q = save(_add_model(case), d / f"{name}.onnx")
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        # 65536 bytes: split across threads in blocks where the build has them (o2e_qadd_mt)
        code = (c / "model.c").read_text()
        assert "o2e_qadd(" in code or "o2e_qadd_mt(" in code
        out[name] = (q, c)
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", list(ADD_CASES))
def test_qadd_every_byte_pair(add_models: dict, case: str, arch: str) -> None:
    """All 65536 (a, b) pairs: every output byte equals onnxruntime's QLinearAdd."""
    q, c = add_models[case]
    dt = ADD_CASES[case][6]
    v = _byte_range(dt)
    x = {"a": np.repeat(v, 256).astype(dt), "b": np.tile(v, 256).astype(dt)}
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(c, arch, x)["y"]
    assert got.dtype == ref.dtype
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, (bad[:5], got[bad[:5]], ref[bad[:5]])


# name: (C, H, W, kernel, stride, pads, dilation, x type, x zp, y zp, activation)
DW_CASES = {
    "odd_c_pad1": (21, 9, 11, 3, 1, [1, 1, 1, 1], 1, np.uint8, 200, 7, None),
    "s8_stride2": (37, 14, 13, 3, 2, [1, 1, 1, 1], 1, np.int8, -30, -5, "Relu"),
    "k5_s2_asym": (16, 12, 12, 5, 2, [2, 1, 2, 2], 1, np.uint8, 3, 128, None),
    "dilated": (5, 10, 9, 3, 1, [2, 2, 2, 2], 2, np.uint8, 128, 0, None),
    "s2_nopad": (19, 7, 8, 3, 2, [0, 0, 0, 0], 1, np.uint8, 77, 250, None),
    # rows of 16 pixels or more: o2e_qdwc_fill row by row (a partial last group per row)
    "wide_rows": (20, 5, 37, 3, 1, [1, 1, 1, 1], 1, np.uint8, 9, 100, None),
    "wide_s2_asym": (17, 6, 34, 3, 2, [0, 1, 1, 0], 1, np.int8, 5, -3, "Relu"),
}


def _dw_model(case: tuple, rng: np.random.Generator) -> onnx.ModelProto:
    C, H, W, k, s, pads, dl, dt, xz, yz, act = case
    wq = rng.integers(-128, 128, (C, 1, k, k)).astype(np.int8)
    wq[0] = -128  # the widest products: -128 * (0 - 255) and friends
    ws = (rng.random(C) * 0.01 + 0.001).astype(np.float32)
    xs = np.float32(0.05)
    bq = rng.integers(-5000, 5000, C).astype(np.int32)
    ys = np.float32(0.04)  # small enough that outputs saturate at both ends
    return qdq_conv_model(
        (1, C, H, W),
        wq,
        ws,
        bq,
        x_q=(xs, xz),
        y_q=(ys, yz),
        dtype=dt,
        strides=(s, s),
        pads=pads,
        dilation=dl,
        group=C,
        act=act,
    )


@pytest.fixture(scope="module")
def dw_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qdw")
    rng = np.random.default_rng(13)
    out = {}
    for name, case in DW_CASES.items():
        q = save(_dw_model(case, rng), d / f"{name}.onnx")
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        assert "o2e_qdwc(" in (c / "model.c").read_text(), name
        out[name] = (q, c)
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", list(DW_CASES))
def test_depthwise_channel_blocks_bit_exact(dw_models: dict, case: str, arch: str) -> None:
    """Odd channel counts (a partial 16-channel block), padding (asymmetric, wider than the
    kernel reach), stride 2, dilation, int8 and uint8 activations with zero points != 0, a
    fused Relu and outputs saturating at both ends: equal to onnxruntime's QLinearConv."""
    q, c = dw_models[case]
    C, H, W, dt = DW_CASES[case][0], DW_CASES[case][1], DW_CASES[case][2], DW_CASES[case][7]
    i = np.iinfo(dt)
    rng = np.random.default_rng(14)
    xv = rng.integers(i.min, i.max + 1, (1, C, H, W)).astype(dt)
    xv[0, 0, :2] = i.max  # extreme inputs under the -128 weights of channel 0
    xv[0, 0, 2:4] = i.min
    x = {"x": xv}
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(c, arch, x)["y"]
    assert (ref == i.min).any() and (ref == i.max).any() or DW_CASES[case][10], case
    bad = np.argwhere(got != ref)
    assert bad.size == 0, (bad[:5], got[tuple(bad[:5].T)], ref[tuple(bad[:5].T)])


QUANT_CASES = {
    "u8": (np.uint8, 0.037, 117),
    "s8": (np.int8, 0.021, -9),
    "u8_nozp": (np.uint8, 0.5, None),
}


def _quant_model(dt: type, s: float, z: int | None) -> onnx.ModelProto:
    ins = ["x", "s"] + (["z"] if z is not None else [])
    inits = [tensor("s", np.array(s, np.float32))]
    if z is not None:
        inits.append(tensor("z", np.array(z, dt)))
    nodes = [helper.make_node("QuantizeLinear", ins, ["y"])]
    out_t = QTYPES[dt] if z is not None else TensorProto.UINT8
    return make_model(nodes, [vi("x", [1003])], [vi("y", [1003], out_t)], inits, opset=13)


@pytest.fixture(scope="module")
def quant_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qquant")
    out = {}
    for name, (dt, s, z) in QUANT_CASES.items():
        q = save(_quant_model(dt, s, z), d / f"{name}.onnx")
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        assert "o2e_qquant(" in (c / "model.c").read_text()
        out[name] = (q, c)
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_quantize_linear_vector(quant_models: dict, arch: str) -> None:
    """o2e_qquant (a model's float input edge): ties of x / scale, NaN, +-Inf, values far out
    of range and a tail past the vector width, equal to onnxruntime's bytes."""
    rng = np.random.default_rng(3)
    for name, (q, c) in quant_models.items():
        s = QUANT_CASES[name][1]
        x = (rng.standard_normal(1003) * 4).astype(np.float32)
        x[:200] = ((np.arange(200) - 100 + 0.5) * np.float32(s)).astype(np.float32)  # ties
        x[200:206] = [np.nan, np.inf, -np.inf, 1e30, -1e30, -0.0]
        ref = ort_run(onnx.load(str(q)), {"x": x})["y"]
        got = build_and_run(c, arch, {"x": x})["y"]
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, (name, bad[:5], x[bad[:5]], got[bad[:5]], ref[bad[:5]])


def _strided_1x1_model(C: int, M: int, H: int, W: int, s: int) -> onnx.ModelProto:
    rng = np.random.default_rng(C + W)
    wq = rng.integers(-128, 128, (M, C, 1, 1)).astype(np.int8)
    ws = (rng.random(M) * 0.01 + 0.001).astype(np.float32)
    xs = np.float32(0.05)
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["c"], strides=[s, s], kernel_shape=[1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"]),
    ]
    inits = [
        tensor("xs", xs), tensor("xz", np.array(100, np.uint8)),
        tensor("wq", wq), tensor("ws", ws), tensor("wz", np.zeros(M, np.int8)),
        tensor("ys", np.float32(0.3)), tensor("yz", np.array(120, np.uint8)),
    ]  # fmt: skip
    oh, ow = (H - 1) // s + 1, (W - 1) // s + 1
    e = TensorProto.UINT8
    return make_model(
        nodes, [vi("x", [1, C, H, W], e)], [vi("y", [1, M, oh, ow], e)], inits, opset=13
    )


SUB_CASES = ((5, 9, 7, 37, 2), (3, 8, 6, 64, 2), (4, 3, 8, 11, 3))  # C, M, H, W, stride


@pytest.fixture(scope="module")
def sub_models(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qsub")
    out = []
    for C, M, H, W, s in SUB_CASES:
        q = save(_strided_1x1_model(C, M, H, W, s), d / f"s{C}.onnx")
        c = d / f"s{C}_c"
        api.convert(q, "c", c)
        assert "o2e_qsubsample(" in (c / "model.c").read_text()
        out.append((q, c))
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_strided_1x1_subsample(sub_models: list, arch: str) -> None:
    """1x1 convolutions with stride 2 / 3 and no padding read a subsample (o2e_qsubsample:
    16-byte vectors plus a tail for W = 37 / 64, odd heights) instead of im2col."""
    for (C, _, H, W, s), (q, c) in zip(SUB_CASES, sub_models, strict=True):
        x = {"x": np.random.default_rng(W).integers(0, 256, (1, C, H, W)).astype(np.uint8)}
        ref = ort_run(onnx.load(str(q)), x)["y"]
        got = build_and_run(c, arch, x)["y"]
        assert np.array_equal(got, ref), (C, W, s, np.argwhere(got != ref)[:5])


def _concat_model(dt: type) -> onnx.ModelProto:
    """DQ(a), DQ(b) -> Concat on the last axis -> Q: both inputs at scales other than the
    output's (o2e QConcat's tables); a: rows of 150 bytes (64-byte vectors and a tail), b: 10."""
    e = QTYPES[dt]
    zs = {np.uint8: (131, 7, 100), np.int8: (-5, 30, 2)}[dt]
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
        helper.make_node("Concat", ["da", "db"], ["c"], axis=2),
        helper.make_node("QuantizeLinear", ["c", "sc", "zc"], ["y"]),
    ]
    inits = [tensor(k, np.array(v, np.float32)) for k, v in (("sa", 0.03), ("sb", 0.11))]
    inits += [tensor("sc", np.array(0.05, np.float32))]
    inits += [tensor(k, np.array(v, dt)) for k, v in zip(("za", "zb", "zc"), zs, strict=True)]
    ins = [vi("a", [3, 2, 150], e), vi("b", [3, 2, 10], e)]
    return make_model(nodes, ins, [vi("y", [3, 2, 160], e)], inits, opset=13)


@pytest.fixture(scope="module")
def concat_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qconcat")
    out = {}
    for dt in (np.uint8, np.int8):
        name = np.dtype(dt).name
        q = save(_concat_model(dt), d / f"{name}.onnx")
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        assert "o2e_qlut(" in (c / "model.c").read_text()
        out[name] = (q, c)
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_concat_requantisation_tables(concat_models: dict, arch: str) -> None:
    """o2e_qlut (vpermi2b lookups with AVX-512 VBMI, else a byte loop): every byte value of
    each input through its table, equal to onnxruntime's bytes."""
    for name, (q, c) in concat_models.items():
        dt = np.dtype(name).type
        a = np.resize(_byte_range(dt), (3, 2, 150)).astype(dt)
        b = np.resize(_byte_range(dt)[::-7], (3, 2, 10)).astype(dt)
        ref = ort_run(onnx.load(str(q)), {"a": a, "b": b})["y"]
        got = build_and_run(c, arch, {"a": a, "b": b})["y"]
        assert len(np.unique(ref)) > 100, name
        assert np.array_equal(got, ref), (name, np.argwhere(got != ref)[:5])
