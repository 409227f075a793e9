"""int8 C kernels (runtime/o2e_qgemm.h, ops/qint8.py) and the QDQ rewrite (passes/qdq_int8.py).

One small CNN covers every kernel: 3x3 conv with padding (K not a multiple of 4, 100 pixels:
partial panels), 1x1 conv, residual Add, MaxPool and Concat on the integers, depthwise
stride 2 and 1, a strided conv with asymmetric padding,
Gemm (transB) and MatMul; fused Relu and Clip(0, 6). It is quantized by onnxruntime's
quantize_static as QDQ (uint8 / int8 activations, per channel / per tensor) and QOperator,
converted once per variant and built at every ISA (x86-64-v2 portable, x86-64-v3 AVX2, native
AVX-512 VNNI where the CPU has it, aarch64 NEON and NEON dot product under qemu). onnxruntime
(x64quantprecision: exact) on the same quantized model is the reference: every output within
one quantization step, and most bit-exact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run

from conftest import AARCH64, ALL_ISAS, arch_param, make_model, save, tensor, vi

SHAPE = (1, 3, 10, 10)


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(21)

    def w(*s: int, k: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(s) * k).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["a"]),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("MaxPool", ["ra"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["p", "r2"], ["cat"], axis=1),
        helper.make_node(
            "Conv", ["cat", "Wd", "Bd"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2], group=32
        ),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "Wd2"], ["c4"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Conv", ["c4", "W5", "B5"], ["c5"], pads=[0, 0, 1, 1], strides=[2, 2]),
        helper.make_node("Flatten", ["c5"], ["f"]),
        helper.make_node("Gemm", ["f", "Wg", "Bg"], ["y1"], transB=1),
        helper.make_node("MatMul", ["f", "Wm"], ["y2"]),
    ]
    inits = [
        tensor("W1", w(16, 3, 3, 3)), tensor("B1", w(16, k=0.1)),
        tensor("W2", w(16, 16, 1, 1)), tensor("B2", w(16, k=0.1)),
        tensor("lo", np.array(0, np.float32)), tensor("hi", np.array(6, np.float32)),
        tensor("Wd", w(32, 1, 3, 3)), tensor("Bd", w(32, k=0.1)),
        tensor("Wd2", w(32, 1, 3, 3)),
        tensor("W5", w(20, 32, 3, 3, k=0.1)), tensor("B5", w(20, k=0.1)),
        tensor("Wg", w(10, 80, k=0.1)), tensor("Bg", w(10, k=0.1)),
        tensor("Wm", w(80, 12, k=0.1)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", list(SHAPE))], [vi("y1", [1, 10]), vi("y2", [1, 12])], inits)


VARIANTS = {
    "qdq_u8_pc": ("QDQ", "QUInt8", True),
    "qdq_s8_pc": ("QDQ", "QInt8", True),
    "qdq_u8_pt": ("QDQ", "QUInt8", False),
    "qop_u8_pc": ("QOperator", "QUInt8", True),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each variant quantized and converted once: {name: (model, converted folder)}."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    d = tmp_path_factory.mktemp("int8")
    fp = save(_float_model(), d / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(22)
            self.it = iter([{"x": r.standard_normal(SHAPE).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    out = {}
    for name, (fmt, act, pc) in VARIANTS.items():
        q = d / f"{name}.onnx"
        quantize_static(str(fp), str(q), Reader(), quant_format=getattr(QuantFormat, fmt),
                        per_channel=pc, activation_type=getattr(QuantType, act),
                        weight_type=QuantType.QInt8)  # fmt: skip
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        out[name] = (q, c)
    return out


def _steps(model: Path, got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict:
    """Largest difference of each output in quantization steps (its DequantizeLinear scale),
    and the share of bit-exact elements."""
    m = onnx.load(str(model))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    scale = {n.output[0]: float(inits[n.input[1]].reshape(-1)[0]) for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[1] in inits and inits[n.input[1]].size == 1}  # fmt: skip
    res = {}
    for k, r in ref.items():
        d = np.abs(got[k].astype(np.float64) - r.astype(np.float64))
        res[k] = (float(d.max() / scale[k]), float(np.mean(d == 0)))
    return res


def _check(model: Path, out: Path, run, shape: tuple[int, ...] = SHAPE) -> None:  # noqa: ANN001
    x = {"x": np.random.default_rng(23).standard_normal(shape).astype(np.float32) * 1.5}
    ref = ort_run(onnx.load(str(model)), x)
    res = _steps(model, run(out, x), ref)
    for k, (steps, exact) in res.items():
        assert steps <= 1.0 + 1e-6, (k, res)
        assert exact >= 0.9, (k, res)


def _uses_int8_kernels(out: Path, qdq: bool) -> None:
    code = (out / "model.c").read_text()
    # QDQ's Add and QOperator's same-shaped QLinearAdd (lowered to DQ, DQ -> Add -> Q by
    # passes/lower_contrib) both become o2e QAdd
    assert "o2e_qadd(" in code
    for fn in (
        "o2e_qgemm(",
        "o2e_qdwc(",
        "o2e_qphase(",
        "o2e_qpad(",
        "o2e_qpack_cols(",
        "o2e_qmaxpool(",
    ):
        assert fn in code, fn


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_int8_kernels_match_onnxruntime(models: dict, variant: str, arch: str) -> None:
    from onnx2edge.backends.c.build import build_and_run

    q, out = models[variant]
    _uses_int8_kernels(out, variant.startswith("qdq"))
    _check(q, out, lambda o, x: build_and_run(o, arch, x))


@pytest.mark.parametrize("arch", [arch_param(AARCH64)])
def test_int8_neon_dot_product(models: dict, arch: str) -> None:
    """The sdot path (armv8.2-a+dotprod; qemu emulates it): int8 activations too."""
    from onnx2edge.backends.c.build import build_and_run

    for variant in ("qdq_u8_pc", "qdq_s8_pc"):
        q, out = models[variant]
        _check(q, out, lambda o, x: build_and_run(o, arch, x, ["-march=armv8.2-a+dotprod"]))


def test_pass_rewrites_and_keeps_input(models: dict) -> None:
    """The QDQ groups become QLinearConv / o2e QGemm; the input graph is left as it was."""
    from onnx2edge.api import DEFAULT_PASSES
    from onnx2edge.frontend.loader import load
    from onnx2edge.passes import run_passes
    from onnx2edge.passes.qdq_int8 import qdq_to_int8

    g = run_passes(load(models["qdq_u8_pc"][0], quiet=True), (*DEFAULT_PASSES, "fuse_activation"))
    before = (g.nodes, dict(g.initializers))
    new = qdq_to_int8(g)
    assert (g.nodes, dict(g.initializers).keys()) == (before[0], before[1].keys())
    ops = [n.op_type for n in new.nodes]
    assert ops.count("QLinearConv") == 5 and ops.count("QGemm") == 2, ops
    assert ops.count("QAdd") == ops.count("QConcat") == ops.count("QMaxPool") == 1, ops
    assert not {"Conv", "Gemm", "MatMul", "Add", "Concat", "DequantizeLinear"} & set(ops[1:-2])


@pytest.mark.parametrize(
    ("act", "ytype", "yzp"),
    [("Relu", np.uint8, 100), ("Clip", np.int8, 3), ("Relu", np.int8, -20)],
)
def test_fused_activation_in_requantisation(
    tmp_path: Path, act: str, ytype: type, yzp: int
) -> None:
    """Conv -> Relu / Clip -> Q with a zero point inside the range (the quantizer drops the
    activation only when its range starts at the zero point): the clamp bounds of the
    requantisation, against onnxruntime's float Conv between Q / DQ, within one step."""
    from onnx import TensorProto

    rng = np.random.default_rng(6)
    M, C = 12, 5
    wq = rng.integers(-127, 128, (M, C, 3, 3)).astype(np.int8)
    ws = (rng.random(M) * 0.01 + 0.002).astype(np.float32)
    xs = np.float32(0.03)
    bq = rng.integers(-2000, 2000, M).astype(np.int32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(act, ["c", "lo", "hi"] if act == "Clip" else ["c"], ["a"]),
        helper.make_node("QuantizeLinear", ["a", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = [
        tensor("xs", xs), tensor("xz", np.array(128, np.uint8)),
        tensor("wq", wq), tensor("ws", ws), tensor("wz", np.zeros(M, np.int8)),
        tensor("bq", bq), tensor("bs", (xs * ws).astype(np.float32)),
        tensor("bz", np.zeros(M, np.int32)),
        tensor("lo", np.array(-1.0, np.float32)), tensor("hi", np.array(2.0, np.float32)),
        tensor("ys", np.array(0.02, np.float32)), tensor("yz", np.array(yzp, ytype)),
    ]  # fmt: skip
    shape = (1, C, 7, 7)
    m = make_model(nodes, [vi("x", list(shape))], [vi("y", [1, M, 7, 7])], inits, opset=13)
    q = save(m, tmp_path / "act.onnx")
    out = tmp_path / "c"
    api.convert(q, "c", out)
    assert "o2e_qpad(" in (out / "model.c").read_text()
    x = {"x": (np.random.default_rng(7).standard_normal(shape) * 2).astype(np.float32)}
    ref, got = ort_run(onnx.load(str(q)), x)["y"], api.run(out, x)["y"]
    assert np.abs(got - ref).max() <= 0.02 * 1.0001, np.abs(got - ref).max()
    lo = {"Relu": 0.0, "Clip": -1.0}[act]
    assert got.min() >= min(lo, (np.iinfo(ytype).min - yzp) * 0.02) - 1e-6
    assert np.mean(got == ref) > 0.9
    del TensorProto


def test_unsupported_patterns_stay_float(tmp_path: Path) -> None:
    """A grouped (not depthwise) conv is left to the float path and still matches."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], group=2, pads=[1, 1, 1, 1])]
    m = make_model(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", [1, 6, 6, 6])],
                   [tensor("W", rng.standard_normal((6, 2, 3, 3)).astype(np.float32))])  # fmt: skip
    fp = save(m, tmp_path / "g.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    q = tmp_path / "q.onnx"
    quantize_static(str(fp), str(q), Reader(), quant_format=QuantFormat.QDQ)
    out = tmp_path / "c"
    api.convert(q, "c", out)
    assert "o2e_qgemm(" not in (out / "model.c").read_text()
    _check(q, out, lambda o, x: api.run(o, x), (1, 4, 6, 6))


# (C, H, W, M, k, stride, pad): K not a multiple of 4, column tails of the 16 / 32-column
# panels, M not a multiple of 8; padded-plane (3x3), 1x1 and im2col (stride 2) paths; 1x1 at
# 64 and 66 columns (the wide path's edge).
SAT_SHAPES = [
    (5, 7, 9, 11, 3, 1, 1),
    (37, 5, 7, 20, 1, 1, 0),
    (6, 9, 8, 9, 3, 2, 1),
    (4, 3, 40, 8, 3, 1, 1),
    (16, 8, 8, 24, 1, 1, 0),  # 64 columns: both pairs of panels packed at once (O2E_QWIDE)
    (8, 6, 11, 16, 1, 1, 0),  # 66: pairs of 32, then a 2-column tail
    # 36-column rows, K = 45: chunks of 32 inside one row and over two (o2e_qplanes_pack_'s
    # masked and merging loads), a 16-column tail inside the last row
    (5, 4, 36, 12, 3, 1, 1),
]


def _sat_conv_model(signed: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One QLinearConv per SAT_SHAPES entry (input x_i, output y_i) whose weights are +-127
    in equal-sign neighbours (every k pair a vpmaddubsw kernel sums saturates: 255 * 254 >
    32767) in half of the rows, random in the others; most activations at their maximum; the
    output scale keeps most results inside the range."""
    from onnx import TensorProto

    rng = np.random.default_rng(31)
    et = TensorProto.INT8 if signed else TensorProto.UINT8
    xt = np.int8 if signed else np.uint8
    top = 127 if signed else 255
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for i, (C, H, W, M, k, s, p) in enumerate(SAT_SHAPES):
        K = C * k * k
        w = np.where(rng.random((M, K)) < 0.5, 127, -127)
        w[:, 1::2] = w[:, 0::2][:, : K // 2]  # pairs (k0, k1) of one sign
        w[M // 2 :] = rng.integers(-128, 128, (M - M // 2, K))
        xs, ys = np.float32(0.02), np.float32(0.02 * 0.01 * 255 * 127 * K / 60)
        inits += [
            tensor(f"w{i}", w.astype(np.int8).reshape(M, C, k, k)),
            tensor(f"ws{i}", np.full(M, 0.01, np.float32)), tensor(f"xs{i}", xs),
            tensor(f"wz{i}", np.zeros(M, np.int8)), tensor(f"ys{i}", ys),
            tensor(f"xz{i}", np.array(-128 if signed else 0, xt)),
            tensor(f"yz{i}", np.array(0 if signed else 128, xt)),
            tensor(f"b{i}", rng.integers(-50000, 50000, M).astype(np.int32)),
        ]  # fmt: skip
        names = [f"{n}{i}" for n in ("x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b")]
        nodes.append(
            helper.make_node("QLinearConv", names, [f"y{i}"], pads=[p] * 4, strides=[s, s])
        )
        OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
        ins.append(helper.make_tensor_value_info(f"x{i}", et, [1, C, H, W]))
        outs.append(helper.make_tensor_value_info(f"y{i}", et, [1, M, OH, OW]))
        x = np.where(rng.random((1, C, H, W)) < 0.8, top, rng.integers(0, top + 1, (1, C, H, W)))
        feeds[f"x{i}"] = x.astype(xt)
    m = helper.make_model(
        helper.make_graph(nodes, "sat", ins, outs, inits),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_int8_gemm_exact_where_pairs_would_saturate(
    tmp_path: Path, signed: bool, arch: str
) -> None:
    """Weights +-127 in equal-sign pairs against activations at 255 (int8: 127, flipped to
    255 by the packing): the int16 pair sums of a vpmaddubsw kernel would saturate, ours
    (every ISA) must equal onnxruntime's exact int8 QLinearConv bit for bit."""
    from onnx2edge.backends.c.build import build_and_run

    m, x = _sat_conv_model(signed)
    q = save(m, tmp_path / "sat.onnx")
    out = tmp_path / "c"
    api.convert(q, "c", out)
    code = (out / "model.c").read_text()
    # 1x1: o2e_qgemm_rows; k x k over the zero-point-bordered planes: o2e_qconv_planes
    assert code.count("o2e_qgemm_rows(") + code.count("o2e_qconv_planes(") == len(SAT_SHAPES)
    ref = ort_run(onnx.load(str(q)), x)
    got = build_and_run(out, arch, x)
    for k, r in ref.items():
        assert got[k].dtype == r.dtype
        assert len(np.unique(r)) > 20, k  # the scale keeps the results apart: a real check
        np.testing.assert_array_equal(got[k], r, err_msg=k)


def _act_chain_model() -> onnx.ModelProto:
    """QDQ MatMul -> Relu -> Q and Add -> Relu -> Q whose zero points lie inside the range, so
    the Relus stay in the graph (fuse_activation makes them o2e.MatMulAct / o2e.AddAct)."""
    rng = np.random.default_rng(8)
    K, N = 24, 16
    wq = rng.integers(-127, 128, (K, N)).astype(np.int8)
    ws = (rng.random(N) * 0.01 + 0.002).astype(np.float32)
    xs = np.float32(0.03)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["m"]),
        helper.make_node("Relu", ["m"], ["mr"]),
        helper.make_node("QuantizeLinear", ["mr", "ms", "mz"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["md"]),
        helper.make_node("QuantizeLinear", ["b", "bs", "bz"], ["bq"]),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"]),
        helper.make_node("Add", ["md", "bd"], ["a"]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("QuantizeLinear", ["ar", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = [
        tensor("xs", xs), tensor("xz", np.array(128, np.uint8)),
        tensor("wq", wq), tensor("ws", ws), tensor("wz", np.zeros(N, np.int8)),
        tensor("ms", np.array(0.05, np.float32)), tensor("mz", np.array(90, np.uint8)),
        tensor("bs", np.array(0.04, np.float32)), tensor("bz", np.array(120, np.uint8)),
        tensor("ys", np.array(0.06, np.float32)), tensor("yz", np.array(70, np.uint8)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", [3, K]), vi("b", [3, N])], [vi("y", [3, N])], inits, opset=13)


def test_fused_int8_ops_are_named_internal_ops(tmp_path: Path) -> None:
    """A Relu kept between an integer op and its Q becomes an o2e ...Act op of its own schema
    (semantics/fused.py), not attributes on QLinearConv / QGemm / QAdd; onnx's inference
    knows them, and the C output matches onnxruntime within one step."""
    from onnx2edge.api import DEFAULT_PASSES
    from onnx2edge.frontend.loader import load
    from onnx2edge.ir.proto import model_from_graph
    from onnx2edge.passes import run_passes
    from onnx2edge.semantics.fused import activation_of, base_op

    q = save(_act_chain_model(), tmp_path / "acts.onnx")
    g = run_passes(load(q, quiet=True), (*DEFAULT_PASSES, "fuse_activation", "qdq_to_int8"))
    ops = {n.op_type: n for n in g.nodes}
    assert {"QGemmAct", "QAddAct"} <= ops.keys(), list(ops)
    for name, base in (("QGemmAct", "QGemm"), ("QAddAct", "QAdd")):
        n = ops[name]
        assert n.domain == "o2e" and base_op(n) == base
        assert activation_of(n) is not None and activation_of(n).op == "Relu"  # type: ignore[union-attr]
    for n in g.nodes:  # no activation attribute smuggled onto a standard op
        assert n.domain == "o2e" or not any(k.startswith("activation") for k in n.attrs), n
    m = model_from_graph(g, value_info=False)  # shapes from the o2e schemas alone
    onnx.checker.check_model(m)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    shapes = {v.name: v for v in inferred.graph.value_info}
    assert [d.dim_value for d in shapes["mq"].type.tensor_type.shape.dim] == [3, 16]
    out = tmp_path / "c"
    api.convert(q, "c", out)
    r = np.random.default_rng(9)
    x = {"x": r.standard_normal((3, 24)).astype(np.float32) * 2,
         "b": r.standard_normal((3, 16)).astype(np.float32) * 3}  # fmt: skip
    ref, got = ort_run(onnx.load(str(q)), x)["y"], api.run(out, x)["y"]
    assert np.abs(got - ref).max() <= 0.06 * 1.0001, np.abs(got - ref).max()
    assert np.mean(got == ref) > 0.9
    assert got.min() >= 0.0
