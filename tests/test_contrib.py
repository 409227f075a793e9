"""onnxruntime's com.microsoft ops (issue 11): each one, built with onnx.helper in its domain,
converted to C and compared with onnxruntime running the original contrib op.

Float ops must match within verify's default tolerance (1e-4 x max|ref|); quantized outputs
within one quantization step (onnxruntime's kernels use lookup tables / fixed point and may
round a tie the other way), except the integer-accumulating matrix ops, whose float outputs
get the float tolerance. Models written by onnxruntime's own quantizer are in
test_exporters.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx2edge import api
from onnx2edge.errors import UnsupportedError
from onnx2edge.frontend import load
from onnx2edge.ir.proto import model_from_graph
from onnx2edge.passes import run_passes
from onnx2edge.runtime import ort_integer_products_exact, ort_run

from conftest import save, tensor, vi

MS = "com.microsoft"
F = np.float32
RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test draws the same data whatever ran before it on its worker (xdist)."""
    global RNG
    RNG = np.random.default_rng(11)


def ms_model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:  # noqa: ANN001
    g = h.make_graph(nodes, "contrib", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def check(tmp_path: Path, m: onnx.ModelProto, inputs=None, rtol=1e-4, atol=1e-6) -> None:  # noqa: ANN001
    path = save(m, tmp_path / "m.onnx")
    for target in ("onnx", "c"):
        rep = api.verify(
            path,
            target=target,
            inputs=inputs,
            rtol=rtol,
            atol=atol,
            work_dir=tmp_path / target if target == "c" else None,
        )
        assert rep.ok, rep.format()


def check_quant(
    tmp_path: Path, m: onnx.ModelProto, inputs: dict, max_mismatch: float = 0.02
) -> None:
    """Quantized outputs: at most one step from onnxruntime, on at most `max_mismatch` of the
    elements (MLAS's kernels use FMA and lookup tables, the generic C does not)."""
    path = save(m, tmp_path / "m.onnx")
    ref = ort_run(m, inputs)
    for target in ("onnx", "c"):
        if target == "c":
            api.convert(path, "c", tmp_path / "c")
            ours = api.run(tmp_path / "c", inputs)
        else:
            g = run_passes(load(path, quiet=True), api.DEFAULT_PASSES)
            ours = ort_run(model_from_graph(g), inputs)
        for k, want in ref.items():
            diff = np.abs(ours[k].astype(np.int64) - want.astype(np.int64))
            assert ours[k].dtype == want.dtype and diff.max() <= 1, (target, k, diff.max())
            # onnxruntime running the lowered graph fuses it into its own kernels again
            # (at least one element may differ: an average pool's rounding tie, measured on
            # 1 of 48 outputs for 2 of 6 seeds)
            frac = max_mismatch if target == "c" else 0.05
            assert np.sum(diff > 0) <= max(1, frac * diff.size), (target, k, np.mean(diff > 0))


def ms(op: str, ins: list[str], outs: list[str], **kw: object) -> onnx.NodeProto:
    return h.make_node(op, ins, outs, domain=MS, name=f"{op.lower()}_node", **kw)


X = [2, 5, 16]


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu", "BiasGelu", "FastGeluBias"])
def test_gelus(tmp_path: Path, op: str) -> None:
    bias = tensor("bias", RNG.standard_normal(16).astype(F))
    ins = ["x", "bias"] if op in ("BiasGelu", "FastGeluBias") else ["x"]
    kw = {"alpha": 1.5} if op == "QuickGelu" else {}
    node = ms(op.replace("Bias", "") if op == "FastGeluBias" else op, ins, ["y"], **kw)
    m = ms_model([node], [vi("x", X)], [vi("y", X)], [bias] if len(ins) > 1 else [])
    x = (RNG.standard_normal(X) * 3).astype(F)
    check(tmp_path, m, {"x": x})


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("bias,sum_out", [(False, False), (True, True)])
def test_skip_layer_norm(tmp_path: Path, opset: int, bias: bool, sum_out: bool) -> None:
    inits = [
        tensor("gamma", RNG.standard_normal(16).astype(F)),
        tensor("beta", RNG.standard_normal(16).astype(F)),
        tensor("b", RNG.standard_normal(16).astype(F)),
    ]
    ins = ["x", "skip", "gamma", "beta"] + (["b"] if bias else [])
    outs = ["y", "", "", "s"] if sum_out else ["y"]
    node = ms("SkipLayerNormalization", ins, outs, epsilon=1e-5)
    graph_outs = [vi("y", X)] + ([vi("s", X)] if sum_out else [])
    m = ms_model([node], [vi("x", X), vi("skip", X)], graph_outs, inits, opset)
    check(tmp_path, m)


@pytest.mark.parametrize(
    "act,params",
    [
        ("", []),
        ("Relu", []),
        ("LeakyRelu", [0.2]),
        ("Clip", [-0.5, 0.5]),
        ("HardSigmoid", [0.3, 0.4]),
    ],
)
def test_fused_conv(tmp_path: Path, act: str, params: list[float]) -> None:
    w = tensor("w", RNG.standard_normal((4, 3, 3, 3)).astype(F))
    b = tensor("b", RNG.standard_normal(4).astype(F))
    kw: dict[str, object] = {"pads": [1, 1, 1, 1], "strides": [1, 1]}
    if act:
        kw["activation"] = act
    if params:
        kw["activation_params"] = params
    node = ms("FusedConv", ["x", "w", "b"], ["y"], **kw)
    m = ms_model([node], [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], [w, b])
    check(tmp_path, m)


@pytest.mark.parametrize("ta,tb,alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, 1.0)])
def test_fused_matmul(tmp_path: Path, ta: int, tb: int, alpha: float) -> None:
    a_shape = [2, 8, 5] if ta else [2, 5, 8]
    b_shape = [2, 6, 8] if tb else [2, 8, 6]
    node = ms("FusedMatMul", ["a", "b"], ["y"], transA=ta, transB=tb, alpha=alpha)
    m = ms_model([node], [vi("a", a_shape), vi("b", b_shape)], [vi("y", [2, 5, 6])])
    check(tmp_path, m)


def _q8(name: str, arr: np.ndarray, dtype: type = np.uint8) -> onnx.TensorProto:
    return tensor(name, np.asarray(arr, dtype))


def _quant_inputs(shape: list[int], dtype: type = np.uint8) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_binary(tmp_path: Path, op: str, dtype: type) -> None:
    elem = T.UINT8 if dtype == np.uint8 else T.INT8
    zp = 128 if dtype == np.uint8 else 0
    inits = [
        tensor("sa", np.array(0.05, F)),
        _q8("za", zp + 3, dtype),
        tensor("sb", np.array(0.02, F)),
        _q8("zb", zp - 5, dtype),
        tensor("sc", np.array(0.1 if op == "QLinearAdd" else 0.2, F)),
        _q8("zc", zp, dtype),
    ]
    node = ms(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"])
    shape = [4, 16, 32]
    m = ms_model([node], [vi("a", shape, elem), vi("b", [32], elem)], [vi("y", shape, elem)], inits)
    feeds = {"a": _quant_inputs(shape, dtype), "b": _quant_inputs([32], dtype)}
    check_quant(tmp_path, m, feeds, max_mismatch=0.015)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_add_same_shape_runs_int8_kernel(tmp_path: Path, dtype: type) -> None:
    """A same-shaped QLinearAdd (QOperator residuals) is lowered to DQ, DQ -> Add -> Q, which the
    C backend runs as o2e QAdd: every output byte equals onnxruntime's QLinearAdd."""
    elem = T.UINT8 if dtype == np.uint8 else T.INT8
    zp = 128 if dtype == np.uint8 else 0
    inits = [
        tensor("sa", np.array(0.05, F)), _q8("za", zp + 3, dtype),
        tensor("sb", np.array(0.02, F)), _q8("zb", zp - 5, dtype),
        tensor("sc", np.array(0.07, F)), _q8("zc", zp - 2, dtype),
    ]  # fmt: skip
    node = ms("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"])
    shape = [2, 8, 16, 16]
    m = ms_model(
        [node], [vi("a", shape, elem), vi("b", shape, elem)], [vi("y", shape, elem)], inits
    )
    feeds = {"a": _quant_inputs(shape, dtype), "b": _quant_inputs(shape, dtype)}
    path = save(m, tmp_path / "m.onnx")
    api.convert(path, "c", tmp_path / "c")
    assert "o2e_qadd(" in (tmp_path / "c" / "model.c").read_text()
    ours, want = api.run(tmp_path / "c", feeds)["y"], ort_run(m, feeds)["y"]
    assert ours.dtype == want.dtype and np.array_equal(ours, want)


def _unary_q(op: str, shape: list[int], out_shape: list[int], **kw: object) -> onnx.ModelProto:
    inits = [
        tensor("sx", np.array(0.05, F)),
        _q8("zx", 120),
        tensor("sy", np.array(1 / 256 if op in ("QLinearSigmoid", "QLinearSoftmax") else 0.04, F)),
        _q8("zy", 0 if op in ("QLinearSigmoid", "QLinearSoftmax") else 128),
    ]
    node = ms(op, ["x", "sx", "zx", "sy", "zy"], ["y"], **kw)
    return ms_model([node], [vi("x", shape, T.UINT8)], [vi("y", out_shape, T.UINT8)], inits)


@pytest.mark.parametrize(
    "op,shape,out_shape,kw",
    [
        ("QLinearSigmoid", [2, 4, 8], [2, 4, 8], {}),
        ("QLinearLeakyRelu", [2, 4, 8], [2, 4, 8], {"alpha": 0.1}),
        ("QLinearSoftmax", [2, 4, 8], [2, 4, 8], {"axis": -1, "opset": 13}),
        (
            "QLinearAveragePool",
            [1, 3, 8, 8],
            [1, 3, 4, 4],
            {"kernel_shape": [2, 2], "strides": [2, 2]},
        ),
        (
            "QLinearAveragePool",
            [1, 3, 7, 7],
            [1, 3, 7, 7],
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        ),
        ("QLinearGlobalAveragePool", [1, 3, 6, 6], [1, 3, 1, 1], {}),
    ],
    ids=["sigmoid", "leaky", "softmax", "avgpool", "avgpool_pad", "gap"],
)
def test_qlinear_unary(tmp_path: Path, op: str, shape: list, out_shape: list, kw: dict) -> None:
    m = _unary_q(op, shape, out_shape, **kw)
    check_quant(tmp_path, m, {"x": _quant_inputs(shape)})


def test_qlinear_concat(tmp_path: Path) -> None:
    inits = [
        tensor("sy", np.array(0.1, F)),
        _q8("zy", 128),
        tensor("s1", np.array(0.05, F)),
        _q8("z1", 100),
        tensor("s2", np.array(0.2, F)),
        _q8("z2", 140),
    ]
    node = ms("QLinearConcat", ["sy", "zy", "a", "s1", "z1", "b", "s2", "z2"], ["y"], axis=1)
    m = ms_model(
        [node],
        [vi("a", [2, 3, 4], T.UINT8), vi("b", [2, 5, 4], T.UINT8)],
        [vi("y", [2, 8, 4], T.UINT8)],
        inits,
    )
    check_quant(tmp_path, m, {"a": _quant_inputs([2, 3, 4]), "b": _quant_inputs([2, 5, 4])})


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_integer_to_float(tmp_path: Path, per_column: bool, with_bias: bool) -> None:
    n = 6
    b = _q8("b", RNG.integers(-128, 128, (8, n)), np.int8)
    b_scale = RNG.uniform(0.01, 0.05, n if per_column else ()).astype(F)
    b_zp = RNG.integers(-3, 4, n if per_column else ()).astype(np.int8)
    inits = [
        b,
        tensor("sa", np.array(0.03, F)),
        tensor("sb", b_scale),
        _q8("za", 130),
        _q8("zb", b_zp, np.int8),
        tensor("bias", RNG.standard_normal(n).astype(F)),
    ]
    ins = ["a", "b", "sa", "sb", "za", "zb"] + (["bias"] if with_bias else [])
    node = ms("MatMulIntegerToFloat", ins, ["y"])
    m = ms_model([node], [vi("a", [2, 3, 8], T.UINT8)], [vi("y", [2, 3, n])], inits)
    check(tmp_path, m, {"a": _quant_inputs([2, 3, 8])})


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(tmp_path: Path, per_column: bool) -> None:
    n = 6
    b_scale = RNG.uniform(0.01, 0.05, n if per_column else ()).astype(F)
    inits = [
        _q8("b", RNG.integers(-128, 128, (8, n)), np.int8),
        tensor("sb", b_scale),
        _q8("zb", np.zeros(n if per_column else (), np.int8), np.int8),
        tensor("bias", RNG.standard_normal(n).astype(F)),
    ]
    node = ms("DynamicQuantizeMatMul", ["a", "b", "sb", "zb", "bias"], ["y"])
    m = ms_model([node], [vi("a", [3, 8])], [vi("y", [3, n])], inits)
    check(tmp_path, m)


@pytest.mark.parametrize("quant_out", [False, True])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm(tmp_path: Path, quant_out: bool, trans_b: int) -> None:
    b = RNG.integers(-128, 128, (6, 8) if trans_b else (8, 6))
    inits = [
        tensor("sa", np.array(0.03, F)),
        _q8("za", 120),
        _q8("b", b, np.int8),
        tensor("sb", np.array(0.02, F)),
        _q8("zb", 0, np.int8),
        tensor("c", RNG.integers(-500, 500, 6).astype(np.int32)),
        tensor("sy", np.array(0.5, F)),
        _q8("zy", 128),
    ]
    ins = ["a", "sa", "za", "b", "sb", "zb", "c"] + (["sy", "zy"] if quant_out else [])
    node = ms("QGemm", ins, ["y"], transB=trans_b)
    y = vi("y", [4, 6], T.UINT8 if quant_out else T.FLOAT)
    m = ms_model([node], [vi("a", [4, 8], T.UINT8)], [y], inits)
    feeds = {"a": _quant_inputs([4, 8])}
    check_quant(tmp_path, m, feeds) if quant_out else check(tmp_path, m, feeds)


def test_unknown_domain_is_one_line(tmp_path: Path) -> None:
    node = h.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob")
    m = ms_model([node], [vi("x", [2])], [vi("y", [2])])
    m.opset_import.append(h.make_opsetid("com.example", 1))
    path = save(m, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError) as e:
        api.convert(path, "c", tmp_path / "o")
    msg = str(e.value)
    assert "node 'frob' (op Frobnicate, domain 'com.example'" in msg and "\n" not in msg


def test_unsupported_contrib_op_is_named(tmp_path: Path) -> None:
    node = ms("Inverse", ["x"], ["y"])
    m = ms_model([node], [vi("x", [2, 2])], [vi("y", [2, 2])])
    path = save(m, tmp_path / "m.onnx")
    with pytest.raises(
        UnsupportedError,
        match="node 'inverse_node' .op Inverse, domain 'com.microsoft'.*contrib op not supported",
    ):
        api.convert(path, "c", tmp_path / "o")


@pytest.mark.skipif(
    not ort_integer_products_exact(),
    reason="onnxruntime's u8 x s8 products saturate on this CPU (AVX2 without VNNI): "
    "the reference itself is off",
)
@pytest.mark.parametrize("seq_lens", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_dynamic_quantize_lstm_from_onnxruntime_quantizer(
    tmp_path: Path, direction: str, seq_lens: bool
) -> None:
    """onnxruntime.quantization.quantize_dynamic writes DynamicQuantizeLSTM for an LSTM. The C
    backend runs it as onnxruntime does (X and h quantized to uint8 with run-time ranges, exact
    integer gate products; backends/c/ops/rnn.py), so it matches to float rounding, with
    sequence_lens too (rows past their length are zeros in onnxruntime's h range)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    s, b, i, hd = 5, 2, 8, 6
    d = 2 if direction == "bidirectional" else 1
    inits = [
        tensor("W", (RNG.standard_normal((d, 4 * hd, i)) * 0.3).astype(F)),
        tensor("R", (RNG.standard_normal((d, 4 * hd, hd)) * 0.3).astype(F)),
        tensor("B", (RNG.standard_normal((d, 8 * hd)) * 0.1).astype(F)),
    ]
    ins = ["x", "W", "R", "B"]
    if seq_lens:
        inits.append(tensor("seq", np.array([5, 3], np.int32)))
        ins.append("seq")
    node = h.make_node("LSTM", ins, ["y", "yh"], hidden_size=hd, direction=direction)
    m = ms_model(
        [node],
        [vi("x", [s, b, i])],
        [vi("y", [s, d, b, hd]), vi("yh", [d, b, hd])],
        inits,
        opset=14,
    )
    src, q = save(m, tmp_path / "lstm.onnx"), tmp_path / "lstm_q.onnx"
    quantize_dynamic(str(src), str(q), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"])
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in onnx.load(str(q)).graph.node)
    rep = api.verify(q, target="c", rtol=1e-5, atol=1e-6, work_dir=tmp_path / "c", spread=False)
    assert rep.ok, rep.format()


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_lstm_uint8_weights_and_states(tmp_path: Path, per_column: bool) -> None:
    """DynamicQuantizeLSTM as its spec allows beyond what the quantizer writes: uint8 W and R
    with one shared zero point (128), per-direction or per-column scales, initial h and c, a
    peephole, bidirectional, batch 3: the C kernel and onnxruntime agree to float rounding."""
    s, b, i, hd, d = 4, 3, 5, 4, 2
    g = 4 * hd
    ws = (RNG.uniform(0.005, 0.02, (d, g)) if per_column else RNG.uniform(0.005, 0.02, d)).astype(F)
    rs = (RNG.uniform(0.005, 0.02, (d, g)) if per_column else RNG.uniform(0.005, 0.02, d)).astype(F)
    zp = np.full(ws.shape, 128, np.uint8)
    inits = [
        tensor("W", RNG.integers(0, 256, (d, i, g)).astype(np.uint8)),
        tensor("R", RNG.integers(0, 256, (d, hd, g)).astype(np.uint8)),
        tensor("B", (RNG.standard_normal((d, 8 * hd)) * 0.1).astype(F)),
        tensor("P", (RNG.standard_normal((d, 3 * hd)) * 0.1).astype(F)),
        tensor("ws", ws),
        tensor("wz", zp),
        tensor("rs", rs),
        tensor("rz", zp.copy()),
    ]
    ins = ["x", "W", "R", "B", "", "h0", "c0", "P", "ws", "wz", "rs", "rz"]
    node = ms(
        "DynamicQuantizeLSTM", ins, ["y", "yh", "yc"], hidden_size=hd, direction="bidirectional"
    )
    m = ms_model(
        [node],
        [vi("x", [s, b, i]), vi("h0", [d, b, hd]), vi("c0", [d, b, hd])],
        [vi("y", [s, d, b, hd]), vi("yh", [d, b, hd]), vi("yc", [d, b, hd])],
        inits,
        opset=14,
    )
    path = save(m, tmp_path / "m.onnx")
    rep = api.verify(path, target="c", rtol=1e-5, atol=1e-6, work_dir=tmp_path / "c", spread=False)
    assert rep.ok, rep.format()
