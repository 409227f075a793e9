"""Element-wise ops between DequantizeLinear and QuantizeLinear as 256-byte tables (o2e QLut,
passes/qdq_int8._rewrite_lut / _gated_self; o2e_qlut in runtime/o2e_qdw.h).

The table is computed at conversion; onnxruntime (optimised: its QDQ fusion turns Sigmoid into
QLinearSigmoid and the gate product into QLinearMul; and unoptimised: the float ops) is the
judge on every one of the 256 input bytes, for many random scales / zero points, uint8 and
int8. The same model is then built at every ISA and must give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.passes.qdq_int8 import _LUT_OPS
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi

ATTRS = {"LeakyRelu": {"alpha": 0.1}, "Elu": {"alpha": 0.7}, "HardSigmoid": {}}
GATES = ("Sigmoid", "HardSigmoid")  # x * act(x): SiLU, HardSwish as torch writes it


def _qtype(signed: bool) -> tuple[int, type]:
    return (TensorProto.INT8, np.int8) if signed else (TensorProto.UINT8, np.uint8)


def _lut_model(seed: int, signed: bool, copies: int) -> onnx.ModelProto:
    """x (all 256 bytes) -> for each op and each of `copies` random parameter sets:
    DQ -> op -> Q, and DQ -> act -> Q -> DQ -> Mul(DQ(x), .) -> Q for the gates."""
    rng = np.random.default_rng(seed)
    et, dt = _qtype(signed)
    lo = -128 if signed else 0
    nodes, inits, outs = [], [], []

    def qp(name: str, scale: float) -> tuple[str, str]:
        inits.append(tensor(f"{name}_s", np.array(scale, np.float32)))
        inits.append(tensor(f"{name}_z", np.array(rng.integers(lo, lo + 256), dt)))
        return f"{name}_s", f"{name}_z"

    for c in range(copies):
        xs, xz = qp(f"x{c}", float(rng.uniform(0.004, 0.15)))
        for op in _LUT_OPS:
            k = f"{op}{c}"
            ys, yz = qp(f"y_{k}", float(rng.uniform(0.002, 0.05)))
            nodes += [
                helper.make_node("DequantizeLinear", ["x", xs, xz], [f"{k}_dq"]),
                helper.make_node(op, [f"{k}_dq"], [f"{k}_f"], **ATTRS.get(op, {})),
                helper.make_node("QuantizeLinear", [f"{k}_f", ys, yz], [f"{k}_y"]),
            ]
            outs.append(vi(f"{k}_y", [256], et))
        for op in GATES:
            k = f"gate{op}{c}"
            gs, gz = qp(f"g_{k}", float(rng.uniform(1 / 255, 0.01)))
            ys, yz = qp(f"y_{k}", float(rng.uniform(0.004, 0.1)))
            nodes += [
                helper.make_node("DequantizeLinear", ["x", xs, xz], [f"{k}_dq"]),
                helper.make_node(op, [f"{k}_dq"], [f"{k}_a"]),
                helper.make_node("QuantizeLinear", [f"{k}_a", gs, gz], [f"{k}_aq"]),
                helper.make_node("DequantizeLinear", [f"{k}_aq", gs, gz], [f"{k}_ad"]),
                helper.make_node("DequantizeLinear", ["x", xs, xz], [f"{k}_xd"]),
                helper.make_node("Mul", [f"{k}_xd", f"{k}_ad"], [f"{k}_m"]),
                helper.make_node("QuantizeLinear", [f"{k}_m", ys, yz], [f"{k}_y"]),
            ]
            outs.append(vi(f"{k}_y", [256], et))
    return make_model(nodes, [vi("x", [256], et)], outs, inits)


def _bytes(signed: bool) -> dict[str, np.ndarray]:
    return {"x": np.arange(256, dtype=np.uint8).view(_qtype(signed)[1])}


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
def test_tables_match_onnxruntime_on_every_byte(tmp_path: Path, signed: bool) -> None:
    """Each op on all 256 bytes for 12 random parameter sets: the C (every table from the
    pass) equals onnxruntime's bytes, optimised (QLinearSigmoid / QLinearMul) and not."""
    m = _lut_model(seed=3 + signed, signed=signed, copies=12)
    path = save(m, tmp_path / "m.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    code = (out / "model.c").read_text()
    # every op became a table: no float transcendental or DequantizeLinear left
    assert code.count("o2e_qlut(") == 12 * (len(_LUT_OPS) + len(GATES))
    assert "expf" not in code and "tanhf" not in code and "erff" not in code
    got = api.run(out, _bytes(signed))
    for optimize in (True, False):
        ref = ort_run(m, _bytes(signed), optimize=optimize)
        bad = {k: int(np.sum(got[k] != r)) for k, r in ref.items() if np.any(got[k] != r)}
        assert not bad, (optimize, bad)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_tables_at_every_isa(tmp_path: Path, arch: str) -> None:
    """o2e_qlut's vpermi2b path (AVX-512 VBMI), and the byte loop (x86-64-v2, v3, aarch64
    under qemu), give onnxruntime's bytes; 256 + a 61-byte tail exercises the masked block."""
    from onnx2edge.backends.c.build import build_and_run

    m = _lut_model(seed=7, signed=False, copies=1)
    # a longer input with a tail that is not a multiple of 64
    x = np.concatenate([np.arange(256), np.random.default_rng(0).integers(0, 256, 61)])
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = x.size
    for o in m.graph.output:
        o.type.tensor_type.shape.dim[0].dim_value = x.size
    path = save(m, tmp_path / "m.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    feeds = {"x": x.astype(np.uint8)}
    got = build_and_run(out, arch, feeds)
    ref = ort_run(m, feeds)
    assert all(np.array_equal(got[k], r) for k, r in ref.items())


def test_gate_product_becomes_one_table(tmp_path: Path) -> None:
    """x * sigmoid(x) between Q / DQ: the pass leaves one QLut reading x (the gate's own
    table absorbed), no Sigmoid, Mul or DequantizeLinear; the input graph is unchanged."""
    from onnx2edge.api import DEFAULT_PASSES
    from onnx2edge.frontend.loader import load
    from onnx2edge.passes import run_passes
    from onnx2edge.passes.qdq_int8 import qdq_to_int8

    path = save(_lut_model(seed=1, signed=False, copies=1), tmp_path / "m.onnx")
    g = run_passes(load(path, quiet=True), (*DEFAULT_PASSES, "fuse_activation"))
    before = [n.op_type for n in g.nodes]
    out = qdq_to_int8(g)
    ops = [n.op_type for n in out.nodes]
    assert [n.op_type for n in g.nodes] == before
    assert set(ops) == {"QLut"}
    assert ops.count("QLut") == len(_LUT_OPS) + len(GATES)
    assert all(n.inputs[0] == "x" for n in out.nodes)


def _mul_model(signed: bool, seed: int) -> onnx.ModelProto:
    """DQ(x) * DQ(gate [N, C, 1, 1]) -> Q (squeeze-and-excitation), the gate first in a second
    product, and DQ(x) * DQ(x2) of one shape (o2e QMul), random parameters."""
    rng = np.random.default_rng(seed)
    et, dt = _qtype(signed)
    lo = -128 if signed else 0
    inits = []

    def qp(name: str, scale: float) -> list[str]:
        inits.append(tensor(f"{name}_s", np.array(scale, np.float32)))
        inits.append(tensor(f"{name}_z", np.array(rng.integers(lo, lo + 256), dt)))
        return [f"{name}_s", f"{name}_z"]

    px, pg, p2 = qp("x", 0.05), qp("g", 1 / 255), qp("x2", 0.03)
    nodes = [
        helper.make_node("DequantizeLinear", ["x", *px], ["xd"]),
        helper.make_node("DequantizeLinear", ["g", *pg], ["gd"]),
        helper.make_node("DequantizeLinear", ["x2", *p2], ["x2d"]),
        helper.make_node("Mul", ["xd", "gd"], ["m1"]),
        helper.make_node("QuantizeLinear", ["m1", *qp("y1", 0.04)], ["y1"]),
        helper.make_node("Mul", ["gd", "xd"], ["m2"]),
        helper.make_node("QuantizeLinear", ["m2", *qp("y2", 0.02)], ["y2"]),
        helper.make_node("Mul", ["xd", "x2d"], ["m3"]),
        helper.make_node("QuantizeLinear", ["m3", *qp("y3", 0.1)], ["y3"]),
    ]
    shape, gshape = [2, 20, 9, 31], [2, 20, 1, 1]
    ins = [vi("x", shape, et), vi("g", gshape, et), vi("x2", shape, et)]
    return make_model(nodes, ins, [vi(f"y{i}", shape, et) for i in (1, 2, 3)], inits)


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_quantized_mul_matches_onnxruntime(tmp_path: Path, signed: bool, arch: str) -> None:
    """o2e QMul (o2e_qmul: rows of 279 bytes, vector blocks and a tail) gives the bytes of
    onnxruntime's QLinearMul (what its QDQ fusion runs) at every ISA; the unfused float
    reference (Q(DQ(a) * DQ(b)), one rounding fewer) differs from it by one step at ties."""
    from onnx2edge.backends.c.build import build_and_run

    m = _mul_model(signed, seed=4 + signed)
    path = save(m, tmp_path / "m.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    assert (out / "model.c").read_text().count("o2e_qmul(") == 3
    rng = np.random.default_rng(2)
    dt = _qtype(signed)[1]
    feeds = {
        k: rng.integers(0, 256, size=s, dtype=np.uint8).view(dt)
        for k, s in (("x", (2, 20, 9, 31)), ("g", (2, 20, 1, 1)), ("x2", (2, 20, 9, 31)))
    }
    got = build_and_run(out, arch, feeds)
    ref = ort_run(m, feeds)
    bad = {k: int(np.sum(got[k] != r)) for k, r in ref.items() if np.any(got[k] != r)}
    assert not bad, bad
    plain = ort_run(m, feeds, optimize=False)
    for k, r in plain.items():
        d = np.abs(got[k].astype(np.int32) - r.astype(np.int32))
        assert d.max() <= 1 and np.mean(d == 0) > 0.97, (k, d.max(), np.mean(d == 0))


def _se_block() -> onnx.ModelProto:
    """conv -> SiLU (Sigmoid, Mul) -> squeeze-and-excitation (GAP, 1x1 convs, Sigmoid gate,
    Mul) -> HardSwish -> HardSigmoid gate as torch writes MobileNetV3's, float."""
    rng = np.random.default_rng(8)

    def w(*s: int, k: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(s) * k).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Mul", ["c1", "s1"], ["a1"]),
        helper.make_node("GlobalAveragePool", ["a1"], ["p"]),
        helper.make_node("Conv", ["p", "W2", "B2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"]),
        helper.make_node("Sigmoid", ["c3"], ["gate"]),
        helper.make_node("Mul", ["a1", "gate"], ["se"]),
        helper.make_node("HardSwish", ["se"], ["hs"]),
        helper.make_node("Conv", ["hs", "W4", "B4"], ["c4"]),
        helper.make_node("HardSigmoid", ["c4"], ["hg"], alpha=1 / 6),
        helper.make_node("Mul", ["c4", "hg"], ["y"]),
    ]
    inits = [
        tensor("W1", w(16, 3, 3, 3)), tensor("B1", w(16, k=0.1)),
        tensor("W2", w(4, 16, 1, 1)), tensor("B2", w(4, k=0.1)),
        tensor("W3", w(16, 4, 1, 1)), tensor("B3", w(16, k=0.1)),
        tensor("W4", w(8, 16, 1, 1)), tensor("B4", w(8, k=0.1)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", [1, 3, 12, 12])], [vi("y", [1, 8, 12, 12])], inits)


@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantized_se_block_is_all_integer(tmp_path: Path, act: str) -> None:
    """onnxruntime's quantize_static of SiLU, an SE gate, HardSwish and x * hardsigmoid(x):
    every op between the input's QuantizeLinear and the output's DequantizeLinear runs on the
    bytes (QLut, QMul, int8 kernels), and the output equals onnxruntime's bit for bit."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    fp = save(_se_block(), tmp_path / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(9)
            self.it = iter([{"x": r.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(8)])  # fmt: skip

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    q = tmp_path / "q.onnx"
    quantize_static(str(fp), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=getattr(QuantType, act), weight_type=QuantType.QInt8)  # fmt: skip
    out = tmp_path / "c"
    api.convert(q, "c", out)
    code = (out / "model.c").read_text()
    assert code.count("o2e_qlut(") == 4 and code.count("o2e_qmul(") == 1
    assert code.count(": DequantizeLinear(") == 1 and code.count(": QuantizeLinear(") == 1
    x = {"x": np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    got = api.run(out, x)["y"]
    ref = ort_run(onnx.load(str(q)), x)["y"]
    assert np.array_equal(got, ref)


def test_value_moves_run_on_bytes(tmp_path: Path) -> None:
    """DQ -> Slice / Transpose / Resize (nearest) -> Q of one scale (YOLO's head and neck):
    the op on the bytes, no DequantizeLinear left, onnxruntime's bytes."""
    et = TensorProto.UINT8
    inits = [
        tensor("s", np.array(0.05, np.float32)), tensor("z", np.array(17, np.uint8)),
        tensor("st", np.array([1, 2], np.int64)), tensor("en", np.array([4, 7], np.int64)),
        tensor("ax", np.array([1, 3], np.int64)),
        tensor("sc", np.array([1, 1, 2, 2], np.float32)),
    ]  # fmt: skip
    nodes = []
    for k, (op, extra, attrs) in {
        "sl": ("Slice", ["st", "en", "ax"], {}),
        "tr": ("Transpose", [], {"perm": [0, 2, 3, 1]}),
        "rs": ("Resize", ["", "sc"], {"mode": "nearest"}),
    }.items():
        nodes += [
            helper.make_node("DequantizeLinear", ["x", "s", "z"], [f"{k}_d"]),
            helper.make_node(op, [f"{k}_d", *extra], [f"{k}_f"], **attrs),
            helper.make_node("QuantizeLinear", [f"{k}_f", "s", "z"], [k]),
        ]
    outs = [vi("sl", [1, 3, 6, 5], et), vi("tr", [1, 6, 9, 5], et), vi("rs", [1, 5, 12, 18], et)]
    m = make_model(nodes, [vi("x", [1, 5, 6, 9], et)], outs, inits)
    path = save(m, tmp_path / "m.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    assert ": DequantizeLinear(" not in (out / "model.c").read_text()
    x = {"x": np.random.default_rng(0).integers(0, 256, (1, 5, 6, 9), dtype=np.uint8)}
    got, ref = api.run(out, x), ort_run(m, x)
    assert all(np.array_equal(got[k], r) for k, r in ref.items())
