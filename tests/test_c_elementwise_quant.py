"""C backend: element-wise ops on every plain dtype, float16 / bfloat16 / float8 / int4 storage,
and quantized models (QDQ, QOperator, dynamic) as onnxruntime's quantization tools make them.

Most checks run a small onnx.helper model through `api.verify(target="c")` (onnxruntime is the
reference); semantics onnxruntime does not implement (BitShift past the width, float8 casts) are
checked bit for bit against numpy / ml_dtypes / onnx.reference instead.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.helper import np_dtype_to_tensor_dtype
from onnx.numpy_helper import to_array as tensor_to_array

from onnx2edge import api

from conftest import make_model, save, tensor, vi

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "float32", "float64"]


def _t(dtype: str) -> int:
    return np_dtype_to_tensor_dtype(np.dtype(dtype))


def _verify(
    tmp_path: Path,
    model: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    rtol: float = 1e-4,
    atol: float = 1e-6,
) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = save(model, tmp_path / "m.onnx")
    rep = api.verify(path, target="c", inputs=inputs, rtol=rtol, atol=atol)
    assert rep.ok, rep.format()


def _run_c(
    tmp_path: Path, model: onnx.ModelProto, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = save(model, tmp_path / "m.onnx")
    out = tmp_path / "out"
    api.convert(path, "c", out)
    return api.run(out, inputs)


def _ints(
    dtype: str, shape: tuple[int, ...], rng: np.random.Generator, nonzero: bool = False
) -> np.ndarray:
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -100), min(info.max, 100)
    v = rng.integers(lo, hi + 1, size=shape).astype(dtype)
    v.flat[0], v.flat[-1] = info.max, info.min  # wrap-around at the extremes
    if nonzero:
        v[v == 0] = 3
    return v


# --------------------------------------------------------------------------------------------
# plain dtypes
# --------------------------------------------------------------------------------------------
BINARY_ALL = ["Add", "Sub", "Mul", "Div", "Less", "Greater", "Equal"]


@pytest.mark.parametrize("dtype", INTS)
def test_integer_binary_ops(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(1)
    t = _t(dtype)
    ops = [*BINARY_ALL, "Mod", "ModF"] + (
        ["Max", "Min"] if dtype not in ("int16", "uint16") else []
    )
    nodes, outs = [], []
    for op in ops:
        attrs = {"fmod": 1} if op == "ModF" else {}
        out_t = TensorProto.BOOL if op in ("Less", "Greater", "Equal") else t
        nodes.append(helper.make_node(op.removesuffix("F"), ["a", "b"], [f"y_{op}"], **attrs))
        outs.append(vi(f"y_{op}", [3, 4], out_t))
    m = make_model(nodes, [vi("a", [3, 4], t), vi("b", [4], t)], outs, opset=14)
    a = _ints(dtype, (3, 4), rng)
    b = _ints(dtype, (4,), rng, nonzero=True)
    if np.iinfo(dtype).min < 0:
        b[b == -1] = 5  # MIN / -1 overflows: onnxruntime's result is undefined
    _verify(tmp_path, m, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_binary_ops(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(2)
    t = _t(dtype)
    ops = [*BINARY_ALL, "ModF", "Max", "Min", "Pow"]  # onnxruntime has no float Mod with fmod=0
    nodes, outs = [], []
    for op in ops:
        attrs = {"fmod": 1} if op == "ModF" else {}
        out_t = TensorProto.BOOL if op in ("Less", "Greater", "Equal") else t
        nodes.append(helper.make_node(op.removesuffix("F"), ["a", "b"], [f"y_{op}"], **attrs))
        outs.append(vi(f"y_{op}", [3, 4], out_t))
    m = make_model(nodes, [vi("a", [3, 4], t), vi("b", [4], t)], outs, opset=14)
    a = (rng.standard_normal((3, 4)) * 4).astype(dtype)
    b = (rng.standard_normal(4) * 3).astype(dtype)
    b[b == 0] = 1
    a[0, 0] = np.nan
    _verify(tmp_path, m, {"a": a, "b": b}, rtol=2e-3 if dtype == "float16" else 1e-5)


UNARY_F = ["Relu", "Neg", "Abs", "Sign", "Sigmoid", "Exp", "Round", "Sqrt", "Floor", "Tanh", "Erf", "Elu",
           "HardSwish", "Softplus"]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_float_unary_ops(tmp_path: Path, dtype: str) -> None:
    t = _t(dtype)
    # onnxruntime's float16 Sign gives 0 for NaN, its float Sign and numpy (the ONNX reference) NaN
    ops = [op for op in UNARY_F if not (op == "Sign" and dtype == "float16")]
    nodes = [helper.make_node(op, ["x"], [f"y_{op}"]) for op in ops]
    nodes += [helper.make_node("IsNaN", ["x"], ["nan"]), helper.make_node("IsInf", ["x"], ["inf"])]
    nodes.append(helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]))
    outs = [vi(f"y_{op}", [2, 8], t) for op in ops]
    outs += [
        vi("nan", [2, 8], TensorProto.BOOL),
        vi("inf", [2, 8], TensorProto.BOOL),
        vi("clip", [2, 8], t),
    ]
    inits = [tensor("lo", np.array(-1.5, dtype)), tensor("hi", np.array(2.25, dtype))]
    m = make_model(nodes, [vi("x", [2, 8], t)], outs, inits, opset=20)
    x = np.linspace(-3.3, 3.7, 16).reshape(2, 8).astype(dtype)
    x[0, 0], x[0, 1], x[1, 1], x[1, 7] = 2.5, -0.5, np.nan, np.inf  # halves round to even
    _verify(tmp_path, m, {"x": x}, rtol=2e-3)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64"])
def test_integer_unary_ops(tmp_path: Path, dtype: str) -> None:
    t = _t(dtype)
    ops = (
        ["Abs", "Sign"]
        + (["Neg"] if dtype.startswith("int") else [])
        + (["Relu"] if dtype in ("int8", "int32") else [])
    )
    nodes = [helper.make_node(op, ["x"], [f"y_{op}"]) for op in ops]
    nodes.append(helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]))
    inits = [tensor("lo", np.array(2, dtype)), tensor("hi", np.array(90, dtype))]
    outs = [vi(f"y_{op}", [2, 6], t) for op in ops] + [vi("clip", [2, 6], t)]
    m = make_model(nodes, [vi("x", [2, 6], t)], outs, inits, opset=14)
    _verify(tmp_path, m, {"x": _ints(dtype, (2, 6), np.random.default_rng(3))})


def test_where_and_variadic(tmp_path: Path) -> None:
    t = TensorProto.FLOAT16
    nodes = [
        helper.make_node("Where", ["c", "a", "b"], ["w"]),
        helper.make_node("Sum", ["a", "b", "a"], ["s"]),
        helper.make_node("Mean", ["a", "b"], ["mean"]),
        helper.make_node("Max", ["a", "b", "a"], ["mx"]),
    ]
    m = make_model(nodes, [vi("c", [2, 3], TensorProto.BOOL), vi("a", [2, 3], t), vi("b", [3], t)],
                   [vi(n, [2, 3], t) for n in ("w", "s", "mean", "mx")], opset=13)  # fmt: skip
    rng = np.random.default_rng(4)
    feeds = {"c": rng.random((2, 3)) < 0.5, "a": rng.standard_normal((2, 3)).astype(np.float16),
             "b": rng.standard_normal(3).astype(np.float16)}  # fmt: skip
    _verify(tmp_path, m, feeds, rtol=2e-3)


def test_bitshift_past_the_width(tmp_path: Path) -> None:
    """numpy's (the reference's) rule, where C leaves the shift undefined: 0, or -1 to the right."""
    from onnx.reference import ReferenceEvaluator

    for dtype in ("int8", "int32", "uint16", "uint64"):
        t = _t(dtype)
        nodes = [
            helper.make_node("BitShift", ["x", "s"], [f"y{d}"], direction=d)
            for d in ("LEFT", "RIGHT")
        ]
        m = make_model(
            nodes,
            [vi("x", [6], t), vi("s", [6], t)],
            [vi("yLEFT", [6], t), vi("yRIGHT", [6], t)],
            opset=18,
        )
        bits = 8 * np.dtype(dtype).itemsize
        x = np.array(
            [-8, 4, -1, 3, 100, 1] if dtype.startswith("int") else [8, 4, 1, 3, 100, 1]
        ).astype(dtype)
        s = np.array([bits, bits + 1, 1, bits - 1, -1 if dtype.startswith("int") else 2, 0]).astype(
            dtype
        )
        got = _run_c(tmp_path / dtype, m, {"x": x, "s": s})
        want = ReferenceEvaluator(m).run(None, {"x": x, "s": s})
        np.testing.assert_array_equal(got["yLEFT"], want[0])
        np.testing.assert_array_equal(got["yRIGHT"], want[1])


# --------------------------------------------------------------------------------------------
# Cast and the storage types
# --------------------------------------------------------------------------------------------
CAST_TYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "uint16", "bool"]


def test_cast_matrix(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    nodes, outs = [], []
    for src in CAST_TYPES:
        for dst in CAST_TYPES:
            if src == dst:
                continue
            nodes.append(helper.make_node("Cast", [f"x_{src}"], [f"{src}_to_{dst}"], to=_t(dst)))
            outs.append(vi(f"{src}_to_{dst}", [10], _t(dst)))
    m = make_model(nodes, [vi(f"x_{s}", [10], _t(s)) for s in CAST_TYPES], outs, opset=13)
    base = np.concatenate([[0.0, -0.0, 0.5, 1.5, -2.5, 1.0], rng.uniform(-100, 100, 4).round(1)])
    feeds = {}
    for s in CAST_TYPES:
        v = base if np.dtype(s).kind == "f" else (np.abs(base) if np.dtype(s).kind == "u" else base)
        feeds[f"x_{s}"] = v.astype(s) if s != "bool" else v != 0
    _verify(tmp_path, m, feeds)


def test_bfloat16_and_float8_round_trips(tmp_path: Path) -> None:
    """float -> T -> float through onnxruntime's Cast kernels, for the types stored as bits."""
    types = {
        "bf16": TensorProto.BFLOAT16,
        "e4m3": TensorProto.FLOAT8E4M3FN,
        "e5m2": TensorProto.FLOAT8E5M2,
    }
    nodes, outs = [], []
    for k, t in types.items():
        nodes += [
            helper.make_node("Cast", ["x"], [f"{k}_q"], to=t),
            helper.make_node("Cast", [f"{k}_q"], [k], to=TensorProto.FLOAT),
        ]
        outs.append(vi(k, [64], TensorProto.FLOAT))
    m = make_model(nodes, [vi("x", [64], TensorProto.FLOAT)], outs, opset=19)
    x = np.concatenate(
        [
            np.random.default_rng(6).standard_normal(56) * 50,
            [0, -0.0, 1e-9, -1e-9, 448, 449, 1e6, -1e6],
        ]
    )
    _verify(tmp_path, m, {"x": x.astype(np.float32)})


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


@pytest.mark.parametrize(
    "name",
    ["float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"],
)
@pytest.mark.parametrize("saturate", [1, 0])
def test_small_float_conversions_are_exact(tmp_path: Path, name: str, saturate: int) -> None:
    """Every code of the format decodes exactly; float32 and float64 bit patterns (subnormals,
    ties, overflow, NaN) encode as ml_dtypes does, with the Cast spec's saturate rule for float8."""
    dt = np.dtype(getattr(ml_dtypes, name) if name != "float16" else np.float16)
    if saturate and not name.startswith("float8"):
        pytest.skip("saturate only concerns float8")
    t = np_dtype_to_tensor_dtype(dt)
    n_codes = 1 << (8 * dt.itemsize)
    rng = np.random.default_rng(7)
    f32 = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):  # random bit patterns include NaNs; the grid's top overflows
        grid = (
            np.arange(n_codes, dtype=np.uint16 if dt.itemsize == 2 else np.uint8)
            .view(dt)
            .astype(np.float32)
        )
        grid = grid[np.isfinite(grid)]
        ties = np.concatenate(
            [
                grid,
                np.nextafter(grid, np.inf),
                np.nextafter(grid, -np.inf),
                (grid[:-1] + grid[1:]) / 2,
            ]
        )
        x = np.concatenate([f32, ties, [np.inf, -np.inf, np.nan, 1e30, -1e30]]).astype(np.float32)
    codes = np.arange(n_codes, dtype=np.uint16 if dt.itemsize == 2 else np.uint8).view(dt)
    sat = {"saturate": saturate} if name.startswith("float8") else {}
    nodes = [
        helper.make_node("Cast", ["x"], ["enc"], to=t, **sat),
        helper.make_node("Cast", ["xd"], ["enc_d"], to=t, **sat),
        helper.make_node("Cast", ["codes"], ["dec"], to=TensorProto.FLOAT),
    ]
    m = make_model(nodes, [vi("x", [x.size]), vi("xd", [x.size], TensorProto.DOUBLE), vi("codes", [n_codes], t)],
                   [vi("enc", [x.size], t), vi("enc_d", [x.size], t), vi("dec", [n_codes])], opset=21)  # fmt: skip
    got = _run_c(tmp_path, m, {"x": x, "xd": x.astype(np.float64), "codes": codes})
    fi = ml_dtypes.finfo(dt)
    with np.errstate(invalid="ignore", over="ignore"):
        want = (np.clip(x, fi.min, fi.max) if saturate else x).astype(dt)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(_bits(got["enc"])[~nan], _bits(want)[~nan])
    np.testing.assert_array_equal(_bits(got["enc_d"])[~nan], _bits(want)[~nan])
    assert np.isnan(got["enc"].astype(np.float32)[nan]).all()
    np.testing.assert_array_equal(got["dec"], codes.astype(np.float32))


def test_int4_cast_and_quantization(tmp_path: Path) -> None:
    """int4 / uint4 are stored a nibble a byte: casts keep the low bits, QuantizeLinear saturates."""
    from onnx.reference import ReferenceEvaluator

    nodes = [
        helper.make_node("Cast", ["x"], ["i4"], to=TensorProto.INT4),
        helper.make_node("Cast", ["i4"], ["back"], to=TensorProto.INT8),
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"]),
    ]
    inits = [
        tensor("s", np.array(0.5, np.float32)),
        helper.make_tensor("zp", TensorProto.UINT4, [], [3]),
    ]
    m = make_model(nodes, [vi("x", [25])], [vi("back", [25], TensorProto.INT8), vi("q", [25], TensorProto.UINT4), vi("dq", [25])],
                   inits, opset=21)  # fmt: skip
    x = np.arange(-9, 16).astype(np.float32)
    got = _run_c(tmp_path, m, {"x": x})
    want = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(got["back"], want[0])
    np.testing.assert_array_equal(got["q"].astype(np.int32), want[1].astype(np.int32))
    np.testing.assert_array_equal(got["dq"], want[2])


# --------------------------------------------------------------------------------------------
# quantization
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("qtype", ["uint8", "int8", "int16", "uint16"])
def test_quantize_dequantize_granularities(tmp_path: Path, qtype: str) -> None:
    t = _t(qtype)
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["q_tensor"]),
        helper.make_node("DequantizeLinear", ["q_tensor", "s0", "z0"], ["d_tensor"]),
        helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q_axis"], axis=1),
        helper.make_node("DequantizeLinear", ["q_axis", "s1", "z1"], ["d_axis"], axis=1),
    ]
    info = np.iinfo(qtype)
    zmid = (int(info.min) + int(info.max)) // 2
    inits = [
        tensor("s0", np.array(0.02, np.float32)),
        tensor("z0", np.array(zmid, qtype)),
        tensor("s1", np.array([0.01, 0.05, 0.1], np.float32)),
        tensor("z1", np.array([zmid, zmid + 3, zmid - 3], qtype)),
    ]
    outs = [
        vi("q_tensor", [2, 3, 4], t),
        vi("d_tensor", [2, 3, 4]),
        vi("q_axis", [2, 3, 4], t),
        vi("d_axis", [2, 3, 4]),
    ]
    m = make_model(nodes, [vi("x", [2, 3, 4])], outs, inits, opset=21)
    x = (rng.standard_normal((2, 3, 4)) * 3).astype(np.float32)
    x[0, 0, :2] = [0.01, 0.03]  # ties at a half step round to even
    _verify(tmp_path, m, {"x": x})


def test_blocked_quantization(tmp_path: Path) -> None:
    from onnx.reference import ReferenceEvaluator

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=2),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1, block_size=2),
    ]
    inits = [
        tensor("s", np.array([[0.1, 0.2, 0.3], [0.05, 0.5, 1.0]], np.float32)),
        tensor("z", np.array([[0, 1, 2], [3, -4, 5]], np.int8)),
    ]
    m = make_model(
        nodes,
        [vi("x", [2, 5])],
        [vi("q", [2, 5], TensorProto.INT8), vi("d", [2, 5])],
        inits,
        opset=21,
    )
    x = np.random.default_rng(9).standard_normal((2, 5)).astype(np.float32) * 2
    got = _run_c(tmp_path, m, {"x": x})
    want = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(got["q"], want[0])
    np.testing.assert_array_equal(got["d"], want[1])


def test_maxpool_on_integers(tmp_path: Path) -> None:
    for dtype in ("uint8", "int8"):
        t = _t(dtype)
        nodes = [
            helper.make_node(
                "MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
            )
        ]
        m = make_model(nodes, [vi("x", [1, 2, 7, 7], t)], [vi("y", [1, 2, 4, 4], t)], opset=12)
        _verify(tmp_path / dtype, m, {"x": _ints(dtype, (1, 2, 7, 7), np.random.default_rng(10))})


@pytest.fixture(scope="module")
def float_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CNN: Conv -> Relu -> MaxPool -> Flatten -> MatMul."""
    rng = np.random.default_rng(11)
    d = tmp_path_factory.mktemp("quant")
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "W2"], ["y"]),
    ]
    inits = [
        tensor("W", (rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32)),
        tensor("B", (rng.standard_normal(4) * 0.1).astype(np.float32)),
        tensor("W2", (rng.standard_normal((4 * 6 * 6, 10)) * 0.1).astype(np.float32)),
    ]
    m = make_model(nodes, [vi("x", [1, 3, 12, 12])], [vi("y", [1, 10])], inits, opset=17)
    return save(m, d / "float.onnx")


def _calibration(n: int = 8):  # noqa: ANN202
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(12)
            self.it = iter(
                [{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(n)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    return Reader()


def _ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize(
    ("fmt", "per_channel", "act"),
    [
        ("QDQ", True, "QUInt8"),
        ("QDQ", False, "QInt8"),
        ("QOperator", False, "QUInt8"),
        ("QOperator", True, "QInt8"),
    ],
)
def test_quantize_static(
    tmp_path: Path, float_model: Path, fmt: str, per_channel: bool, act: str
) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    q = tmp_path / "q.onnx"
    quantize_static(str(float_model), str(q), _calibration(), quant_format=getattr(QuantFormat, fmt),
                    per_channel=per_channel, activation_type=getattr(QuantType, act), weight_type=QuantType.QInt8)  # fmt: skip
    ops = _ops(q)
    assert ("QLinearConv" in ops) == (fmt == "QOperator"), ops
    x = np.random.default_rng(13).standard_normal((1, 3, 12, 12)).astype(np.float32)
    rep = api.verify(q, target="c", inputs={"x": x}, rtol=1e-5, atol=1e-6)
    assert rep.ok, rep.format()


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_quantize_dynamic(tmp_path: Path, float_model: Path, weight_type: str) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    q = tmp_path / "q.onnx"
    quantize_dynamic(str(float_model), str(q), weight_type=getattr(QuantType, weight_type))
    assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= _ops(q)
    x = np.random.default_rng(14).standard_normal((1, 3, 12, 12)).astype(np.float32)
    rep = api.verify(q, target="c", inputs={"x": x}, rtol=1e-5, atol=1e-6)
    assert rep.ok, rep.format()


def test_fused_relu_on_integer_add(tmp_path: Path) -> None:
    """fuse_activation folds Relu into Add: the wrapped int32 sum must be clamped, not its bits."""
    t = TensorProto.INT32
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [vi("a", [4], t), vi("b", [4], t)], [vi("y", [4], t)], opset=14)
    a = np.array([5, -7, 2**31 - 1, -3], np.int32)
    b = np.array([-9, 3, 1, 3], np.int32)
    _verify(tmp_path, m, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64"])
def test_integer_matmul(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """quant.integer_matmul, which matmul.py's MatMul can hand integer inputs to (numpy.matmul)."""
    from onnx2edge.backends.c.ops import C_OPS, OpSpec, load_all
    from onnx2edge.backends.c.ops.quant import integer_matmul

    load_all()
    monkeypatch.setitem(C_OPS, "MatMul", OpSpec("MatMul", integer_matmul, None))
    t = _t(dtype)
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["y"]),
        helper.make_node("MatMul", ["a3", "b"], ["y3"]),
    ]
    ins = [vi("a", [3, 5], t), vi("b", [5, 4], t), vi("a3", [2, 3, 5], t)]
    m = make_model(nodes, ins, [vi("y", [3, 4], t), vi("y3", [2, 3, 4], t)], opset=13)
    rng = np.random.default_rng(15)
    feeds = {
        k: rng.integers(0, 1000, size=s).astype(dtype)
        for k, s in (("a", (3, 5)), ("b", (5, 4)), ("a3", (2, 3, 5)))
    }
    feeds["a"][0, 0] = np.iinfo(dtype).max  # products wrap around, as in numpy
    got = _run_c(tmp_path, m, feeds)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got["y"], feeds["a"] @ feeds["b"])
        np.testing.assert_array_equal(got["y3"], feeds["a3"] @ feeds["b"])


def test_matmul_integer_wide_per_column_zero_point(tmp_path: Path) -> None:
    """MatMulInteger past one accumulation chunk (300 columns), b_zero_point per column."""
    rng = np.random.default_rng(16)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
    inits = [
        tensor("az", np.array(7, np.uint8)),
        tensor("bz", rng.integers(-5, 5, 300).astype(np.int8)),
    ]
    ins = [vi("a", [2, 3, 9], TensorProto.UINT8), vi("b", [9, 300], TensorProto.INT8)]
    m = make_model(nodes, ins, [vi("y", [2, 3, 300], TensorProto.INT32)], inits, opset=13)
    feeds = {
        "a": rng.integers(0, 256, (2, 3, 9)).astype(np.uint8),
        "b": rng.integers(-128, 128, (9, 300)).astype(np.int8),
    }
    # exact integer reference: onnxruntime saturates u8 x s8 pair sums on x86 CPUs without VNNI
    # when B is not a constant (runtime.ort_integer_products_exact), so it only checks elsewhere
    bz = tensor_to_array(inits[1]).astype(np.int64)
    want = (feeds["a"].astype(np.int64) - 7) @ (feeds["b"].astype(np.int64) - bz)
    np.testing.assert_array_equal(_run_c(tmp_path / "exact", m, feeds)["y"], want)
    from onnx2edge.runtime import ort_integer_products_exact

    if ort_integer_products_exact():
        _verify(tmp_path, m, feeds)


@pytest.mark.parametrize("shape", [(1, 5, 9), (1, 1, 5, 9), (2, 1, 5, 9)])
def test_matmul_integer_batched_activation_2d_weight(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    """Issue 26, item 2: quantize_dynamic on a torch Linear over [batch, time, features] writes
    MatMulInteger with 3-D uint8 activations and 2-D int8 weights; a batch of size 1 left an
    undeclared batch index ('d0') in the generated C. Integer outputs: bit-exact."""
    rng = np.random.default_rng(26)
    w = rng.integers(-128, 128, (9, 6)).astype(np.int8)
    nodes = [helper.make_node("MatMulInteger", ["a", "w", "az"], ["y"])]
    inits = [tensor("w", w), tensor("az", np.array(131, np.uint8))]
    out = (*shape[:-1], 6)
    m = make_model(
        nodes,
        [vi("a", list(shape), TensorProto.UINT8)],
        [vi("y", list(out), TensorProto.INT32)],
        inits,
        opset=13,
    )
    feeds = {"a": rng.integers(0, 256, shape).astype(np.uint8)}
    want = (feeds["a"].astype(np.int64) - 131) @ w.astype(np.int64)
    np.testing.assert_array_equal(_run_c(tmp_path / "exact", m, feeds)["y"], want)
    from onnx2edge.runtime import ort_integer_products_exact

    if ort_integer_products_exact():  # onnxruntime saturates u8 x s8 pairs without VNNI
        _verify(tmp_path, m, feeds)
