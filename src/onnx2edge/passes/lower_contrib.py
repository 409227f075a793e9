"""onnxruntime's com.microsoft ops rewritten as standard ONNX ops.

onnxruntime's transformer optimizer and quantizer write these ops (Gelu, SkipLayerNormalization,
FusedConv, QLinearAdd, DynamicQuantizeMatMul, ...). Each is a fusion of standard ops, so each
is lowered back to its definition from onnxruntime's contrib-op documentation; every backend
then gets them with its existing, verified kernels, and `verify --target onnx` checks the
lowering itself. onnx has no lowering for them (they are not onnx functions), hence this file.

Quantized element-wise ops become DequantizeLinear -> float op -> QuantizeLinear, which is how
onnxruntime defines them (its kernels use lookup tables or fixed-point steps that may round a
tie differently: tests allow one quantization step). Integer matrix products use MatMulInteger
so the accumulation stays exact.

before:  x -> Gelu(com.microsoft) -> y
after:   x -> Mul(1/sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) -> y
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx.defs
import onnx.shape_inference
from onnx import TensorProto, helper
from onnx.defs import OpSchema

from ..errors import UnsupportedError
from ..ir import Attr, Graph, Node
from .registry import register_pass

MS = "com.microsoft"


class _Lowering:
    """Builds replacement nodes with fresh names and constants."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.inits = dict(graph.initializers)
        self.values = dict(graph.values)
        self.taken = set(graph.values) | set(graph.initializers) | set(graph.inputs)
        self.taken |= {o for n in graph.nodes for o in n.outputs if o} | {
            n.name for n in graph.nodes
        }
        self.nodes: list[Node] = []
        self.where = ""

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def const(self, hint: str, value: object, dtype: np.dtype | type = np.float32) -> str:
        name = self.fresh(f"{self.where}/{hint}")
        self.inits[name] = np.asarray(value, dtype=dtype)
        return name

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        out: str | None = None,
        n_out: int = 1,
        **attrs: object,
    ) -> str:
        outs = [out] if out else [self.fresh(f"{self.where}/{op_type}") for _ in range(n_out)]
        a = {k: Attr(helper.make_attribute(k, v).type, v) for k, v in attrs.items()}
        self.nodes.append(
            Node(self.fresh(f"{self.where}/{op_type}"), op_type, tuple(inputs), tuple(outs), a)
        )
        return outs[0]

    def float_dtype(self, name: str) -> np.dtype:
        t = self.graph.type_of(name)
        if t is not None and t.elem_type in (TensorProto.FLOAT16, TensorProto.DOUBLE):
            return t.dtype
        return np.dtype(np.float32)


Lower = Callable[[_Lowering, Node], None]
LOWERINGS: dict[str, Lower] = {}


def _lowers(*names: str) -> Callable[[Lower], Lower]:
    def deco(fn: Lower) -> Lower:
        for n in names:
            LOWERINGS[n] = fn
        return fn

    return deco


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) else ""


# --- activations ----------------------------------------------------------------------------
def _gelu_erf(L: _Lowering, x: str, out: str) -> None:
    dt = L.float_dtype(x)
    e = L.op("Erf", [L.op("Mul", [x, L.const("rsqrt2", 0.7071067811865476, dt)])])
    half_x = L.op("Mul", [x, L.const("half", 0.5, dt)])
    L.op("Mul", [half_x, L.op("Add", [e, L.const("one", 1.0, dt)])], out)


@_lowers("Gelu")
def _gelu(L: _Lowering, n: Node) -> None:
    _gelu_erf(L, n.inputs[0], n.outputs[0])


@_lowers("BiasGelu")
def _bias_gelu(L: _Lowering, n: Node) -> None:
    _gelu_erf(L, L.op("Add", n.inputs[:2]), n.outputs[0])


@_lowers("FastGelu")
def _fast_gelu(L: _Lowering, n: Node) -> None:
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = input + bias
    x = L.op("Add", [n.inputs[0], _opt(n, 1)]) if _opt(n, 1) else n.inputs[0]
    dt = L.float_dtype(n.inputs[0])
    x3 = L.op("Mul", [L.op("Mul", [x, x]), x])
    inner = L.op("Add", [x, L.op("Mul", [x3, L.const("c", 0.044715, dt)])])
    t = L.op("Tanh", [L.op("Mul", [inner, L.const("sqrt2pi", 0.7978845608028654, dt)])])
    half_x = L.op("Mul", [x, L.const("half", 0.5, dt)])
    L.op("Mul", [half_x, L.op("Add", [t, L.const("one", 1.0, dt)])], n.outputs[0])


@_lowers("QuickGelu")
def _quick_gelu(L: _Lowering, n: Node) -> None:
    x = n.inputs[0]
    alpha = L.const("alpha", n.attr("alpha", 1.702), L.float_dtype(x))
    L.op("Mul", [x, L.op("Sigmoid", [L.op("Mul", [x, alpha])])], n.outputs[0])


def _activation(L: _Lowering, name: str, params: list[float], x: str, out: str) -> None:
    """FusedConv/FusedGemm's `activation` attribute (onnxruntime's names)."""
    simple = {"Relu", "Tanh", "Sigmoid"}
    if name in simple:
        L.op(name, [x], out)
    elif name == "LeakyRelu":
        L.op(name, [x], out, alpha=params[0] if params else 0.01)
    elif name == "HardSigmoid":
        a, b = (params + [0.2, 0.5][len(params) :])[:2]
        L.op(name, [x], out, alpha=a, beta=b)
    elif name == "Clip":
        lo, hi = (params + [float("-inf"), float("inf")][len(params) :])[:2]
        L.op("Clip", [x, L.const("min", lo), L.const("max", hi)], out)
    else:
        raise UnsupportedError(f"{L.where}: activation '{name}' of a fused op is not supported")


@_lowers("FusedConv")
def _fused_conv(L: _Lowering, n: Node) -> None:
    attrs = {k: a.value for k, a in n.attrs.items() if k not in ("activation", "activation_params")}
    ins = [i for i in n.inputs[:3]]
    y = L.op("Conv", ins, **attrs)
    if _opt(n, 3):  # Z: added before the activation
        y = L.op("Add", [y, n.inputs[3]])
    act = n.attr("activation", "")
    if act:
        _activation(L, act, list(n.attr("activation_params", [])), y, n.outputs[0])
    else:
        L.op("Identity", [y], n.outputs[0])


@_lowers("FusedMatMul")
def _fused_matmul(L: _Lowering, n: Node) -> None:
    if n.attr("transBatchA", 0) or n.attr("transBatchB", 0):
        raise UnsupportedError(f"{L.where}: FusedMatMul with transBatchA/B is not supported")
    a, b = n.inputs[:2]
    a = _swap_last(L, a) if n.attr("transA", 0) else a
    b = _swap_last(L, b) if n.attr("transB", 0) else b
    alpha = float(n.attr("alpha", 1.0))
    if alpha == 1.0:
        L.op("MatMul", [a, b], n.outputs[0])
    else:
        L.op(
            "Mul", [L.op("MatMul", [a, b]), L.const("alpha", alpha, L.float_dtype(a))], n.outputs[0]
        )


def _swap_last(L: _Lowering, x: str) -> str:
    t = L.graph.type_of(x)
    if t is None or t.shape is None:
        raise UnsupportedError(f"{L.where}: transposed operand '{x}' has unknown rank")
    r = len(t.shape)
    return L.op("Transpose", [x], perm=[*range(r - 2), r - 1, r - 2])


# --- normalisation --------------------------------------------------------------------------
@_lowers("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
def _skip_layer_norm(L: _Lowering, n: Node) -> None:
    if any(n.outputs[1:3]):
        raise UnsupportedError(f"{L.where}: the mean / inv_std_var outputs are not supported")
    x = L.op("Add", n.inputs[:2])
    bias = _opt(n, 4) if n.op_type == "SkipLayerNormalization" else _opt(n, 3)
    if bias:
        x = L.op("Add", [x, bias])
    if len(n.outputs) > 3 and n.outputs[3]:
        L.op("Identity", [x], n.outputs[3])
    eps = float(n.attr("epsilon", 1e-12))
    gamma = n.inputs[2]
    beta = _opt(n, 3) if n.op_type == "SkipLayerNormalization" else ""
    simplified = n.op_type == "SkipSimplifiedLayerNormalization"
    _layer_norm(L, x, gamma, beta, eps, n.outputs[0], simplified)


def _layer_norm(
    L: _Lowering, x: str, gamma: str, beta: str, eps: float, out: str, simplified: bool
) -> None:
    dt = L.float_dtype(x)
    if not simplified and L.graph.opset >= 17:
        L.op(
            "LayerNormalization",
            [x, gamma, beta] if beta else [x, gamma],
            out,
            axis=-1,
            epsilon=eps,
        )
        return

    # by hand (ReduceMean's axes attribute is valid up to opset 17, its input from 18)
    def mean(v: str) -> str:
        if L.graph.opset >= 18:
            return L.op("ReduceMean", [v, L.const("axes", [-1], np.int64)], keepdims=1)
        return L.op("ReduceMean", [v], axes=[-1], keepdims=1)

    c = x if simplified else L.op("Sub", [x, mean(x)])
    var = mean(L.op("Mul", [c, c]))
    inv = L.op("Reciprocal", [L.op("Sqrt", [L.op("Add", [var, L.const("eps", eps, dt)])])])
    y = L.op("Mul", [L.op("Mul", [c, inv]), gamma])
    if beta:
        L.op("Add", [y, beta], out)
    else:
        L.op("Identity", [y], out)


# --- quantized ops --------------------------------------------------------------------------
def _dq(L: _Lowering, x: str, scale: str, zp: str) -> str:
    return L.op("DequantizeLinear", [x, scale, zp] if zp else [x, scale])


def _q(L: _Lowering, x: str, scale: str, zp: str, out: str) -> None:
    L.op("QuantizeLinear", [x, scale, zp] if zp else [x, scale], out)


def _qlinear_binary(op: str) -> Lower:
    """onnxruntime (MLAS) folds the output scale into the input scales first. Measured against
    it on 4096 random values: Add as ra a + rb b + (zc - ra za - rb zb) (ra = sa/sc) matches
    all for uint8 and all but 0.2% (one step, MLAS fuses with FMA) for int8; Mul as
    (sa sb / sc) float((a - za)(b - zb)) matches all for int8, 99% for uint8 (one step)."""

    def lower(L: _Lowering, n: Node) -> None:
        sa, sb, sc = n.inputs[1], n.inputs[4], n.inputs[6]
        if op == "Add" and not _known_to_broadcast(L.graph, n.inputs[0], n.inputs[3]):
            # DQ, DQ -> Add -> Q: the C backend's qdq_to_int8 makes a same-shaped one o2e QAdd,
            # onnxruntime's x86 formula bit for bit (a QDQ model's Add takes the same path).
            # Shapes are not inferred yet: an Add found to broadcast later runs the float
            # reference, within one step of onnxruntime (the formula below matches it more
            # often, so it stays for Adds known to broadcast here)
            a = _dq(L, n.inputs[0], sa, _opt(n, 2))
            b = _dq(L, n.inputs[3], sb, _opt(n, 5))
            _q(L, L.op("Add", [a, b]), sc, _opt(n, 7), n.outputs[0])
            return
        one = L.const("one", 1.0)
        zc = _opt(n, 7)
        out_zp = L.op("Sub", [zc, zc]) if zc else ""  # zero of the output's integer type
        if op == "Add":
            ra, rb = L.op("Div", [sa, sc]), L.op("Div", [sb, sc])
            bias = _as_float(L, zc) if zc else L.const("zero", 0.0)
            for z, r in ((_opt(n, 2), ra), (_opt(n, 5), rb)):
                if z:
                    bias = L.op("Sub", [bias, L.op("Mul", [r, _as_float(L, z)])])
            v = L.op(
                "Add",
                [
                    L.op("Mul", [ra, _as_float(L, n.inputs[0])]),
                    L.op("Mul", [rb, _as_float(L, n.inputs[3])]),
                ],
            )
            _q(L, L.op("Add", [v, bias]), one, out_zp, n.outputs[0])
            return
        prod = L.op(
            "Mul", [_centered(L, n.inputs[0], _opt(n, 2)), _centered(L, n.inputs[3], _opt(n, 5))]
        )
        ratio = L.op("Div", [L.op("Mul", [sa, sb]), sc])
        v = L.op("Mul", [L.op("Cast", [prod], to=TensorProto.FLOAT), ratio])
        _q(L, v, one, zc, n.outputs[0])

    return lower


def _known_to_broadcast(graph: Graph, a: str, b: str) -> bool:
    ta, tb = graph.type_of(a), graph.type_of(b)
    return (
        ta is not None and tb is not None and ta.is_static and tb.is_static and ta.shape != tb.shape
    )


def _as_float(L: _Lowering, x: str) -> str:
    return L.op("Cast", [x], to=TensorProto.FLOAT)


def _centered(L: _Lowering, x: str, zp: str) -> str:
    """int32(x) - int32(zp): exact."""
    xi = L.op("Cast", [x], to=TensorProto.INT32)
    return L.op("Sub", [xi, L.op("Cast", [zp], to=TensorProto.INT32)]) if zp else xi


LOWERINGS["QLinearAdd"] = _qlinear_binary("Add")
LOWERINGS["QLinearMul"] = _qlinear_binary("Mul")


def _qlinear_unary(build: Callable[[_Lowering, Node, str], str]) -> Lower:
    def lower(L: _Lowering, n: Node) -> None:
        x = _dq(L, n.inputs[0], n.inputs[1], _opt(n, 2))
        _q(L, build(L, n, x), n.inputs[3], _opt(n, 4), n.outputs[0])

    return lower


def _channels_first(L: _Lowering, n: Node) -> None:
    if n.attr("channels_last", 0):
        raise UnsupportedError(f"{L.where}: channels_last=1 is not supported")


def _avg_pool(L: _Lowering, n: Node, x: str) -> str:
    _channels_first(L, n)
    keep = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    return L.op("AveragePool", [x], **{k: a.value for k, a in n.attrs.items() if k in keep})


def _global_avg_pool(L: _Lowering, n: Node, x: str) -> str:
    _channels_first(L, n)
    return L.op("GlobalAveragePool", [x])


def _softmax(L: _Lowering, n: Node, x: str) -> str:
    # onnxruntime's attribute `opset` says which Softmax semantics (pre-13: 2-D coercion)
    if int(n.attr("opset", 13)) < 13:
        raise UnsupportedError(f"{L.where}: QLinearSoftmax with opset < 13 is not supported")
    return L.op("Softmax", [x], axis=int(n.attr("axis", -1)))


LOWERINGS["QLinearSigmoid"] = _qlinear_unary(lambda L, n, x: L.op("Sigmoid", [x]))
LOWERINGS["QLinearLeakyRelu"] = _qlinear_unary(
    lambda L, n, x: L.op("LeakyRelu", [x], alpha=float(n.attr("alpha", 0.01)))
)
LOWERINGS["QLinearAveragePool"] = _qlinear_unary(_avg_pool)
LOWERINGS["QLinearGlobalAveragePool"] = _qlinear_unary(_global_avg_pool)
LOWERINGS["QLinearSoftmax"] = _qlinear_unary(_softmax)


@_lowers("QLinearConcat")
def _qlinear_concat(L: _Lowering, n: Node) -> None:
    parts = [
        _dq(L, n.inputs[i], n.inputs[i + 1], n.inputs[i + 2]) for i in range(2, len(n.inputs), 3)
    ]
    y = L.op("Concat", parts, axis=int(n.attr("axis")))
    _q(L, y, n.inputs[0], n.inputs[1], n.outputs[0])


def _int_product_to_float(
    L: _Lowering, acc: str, a_scale: str, b_scale: str, bias: str, out: str
) -> None:
    """float(acc) * (a_scale * b_scale) [+ bias], in onnxruntime's order."""
    y = L.op("Mul", [L.op("Cast", [acc], to=TensorProto.FLOAT), L.op("Mul", [a_scale, b_scale])])
    if bias:
        L.op("Add", [y, bias], out)
    else:
        L.op("Identity", [y], out)


@_lowers("MatMulIntegerToFloat")
def _matmul_integer_to_float(L: _Lowering, n: Node) -> None:
    a, b, a_scale, b_scale = n.inputs[:4]
    acc = L.op("MatMulInteger", [a, b, _opt(n, 4), _opt(n, 5)])
    _int_product_to_float(L, acc, a_scale, b_scale, _opt(n, 6), n.outputs[0])


@_lowers("DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(L: _Lowering, n: Node) -> None:
    a, b, b_scale = n.inputs[:3]
    aq, a_scale, a_zp = (L.fresh(f"{L.where}/{s}") for s in ("a_q", "a_scale", "a_zp"))
    L.nodes.append(
        Node(
            L.fresh(f"{L.where}/DynamicQuantizeLinear"),
            "DynamicQuantizeLinear",
            (a,),
            (aq, a_scale, a_zp),
        )
    )
    acc = L.op("MatMulInteger", [aq, b, a_zp, _opt(n, 3)])
    _int_product_to_float(L, acc, a_scale, b_scale, _opt(n, 4), n.outputs[0])


@_lowers("QGemm")
def _qgemm(L: _Lowering, n: Node) -> None:
    a, a_scale, a_zp, b, b_scale, b_zp = n.inputs[:6]
    if n.attr("transA", 0):
        a = L.op("Transpose", [a], perm=[1, 0])
    if n.attr("transB", 0):
        b = L.op("Transpose", [b], perm=[1, 0])
        # per-column scales of B stay per output column after the transpose
    acc = L.op("MatMulInteger", [a, b, a_zp, b_zp])
    alpha = float(n.attr("alpha", 1.0))
    if alpha != 1.0:
        raise UnsupportedError(f"{L.where}: QGemm with alpha != 1 is not supported")
    c = _opt(n, 6)
    if c:  # C is int32, quantized with a_scale * b_scale and zero point 0
        acc = L.op("Add", [acc, c])
    scale = L.op("Mul", [a_scale, b_scale])
    y = L.op("Mul", [L.op("Cast", [acc], to=TensorProto.FLOAT), scale])
    if _opt(n, 7):
        _q(L, y, n.inputs[7], _opt(n, 8), n.outputs[0])
    else:
        L.op("Identity", [y], n.outputs[0])


# Contrib ops a backend computes itself (the frontend keeps them): onnxruntime's
# DynamicQuantizeLSTM quantizes X and h to uint8 with ranges measured at run time, which no
# composition of standard ops expresses step by step, so the C backend emulates it exactly
# (backends/c/ops/rnn.py); the other backends run the pass below.
KEPT = frozenset({"DynamicQuantizeLSTM"})


def _dynamic_quantize_lstm(L: _Lowering, n: Node) -> None:
    """An LSTM on the dequantized weights. onnxruntime also quantizes X and h to uint8 at every
    step; this lowering keeps them in float, so it differs from onnxruntime by that
    quantization error (about 1% of the output's range in the tests, more where X has outliers
    that stretch its quantization range) and is never less accurate than the weights allow."""
    x, wq, rq, b, seq, h0, c0, p = (_opt(n, i) for i in range(8))
    w = _dequant_weight(L, wq, n.inputs[8], _opt(n, 9))
    r = _dequant_weight(L, rq, n.inputs[10], _opt(n, 11))
    ins = [x, w, r, b, seq, h0, c0, p]
    while ins and not ins[-1]:
        ins.pop()
    attrs = {k: a.value for k, a in n.attrs.items()}
    L.nodes.append(
        Node(
            L.fresh(f"{L.where}/LSTM"),
            "LSTM",
            tuple(ins),
            n.outputs,
            {k: Attr(helper.make_attribute(k, v).type, v) for k, v in attrs.items()},
        )
    )


def _dequant_weight(L: _Lowering, wq: str, scale: str, zp: str) -> str:
    """[D, in, 4H] int8/uint8 with per-direction ([D]) or per-column ([D, 4H]) scale -> the
    float [D, 4H, in] weight LSTM takes (constants: folded at conversion)."""
    s = L.graph.const(scale)
    if s is None:
        raise UnsupportedError(f"{L.where}: DynamicQuantizeLSTM needs constant weight scales")
    shape = [s.shape[0], 1, 1] if s.ndim == 1 else [s.shape[0], 1, s.shape[1]]
    dims = L.const("scale_shape", shape, np.int64)
    w = _as_float(L, wq)
    if zp:
        w = L.op("Sub", [w, L.op("Reshape", [_as_float(L, zp), dims])])
    w = L.op("Mul", [w, L.op("Reshape", [scale, dims])])
    return L.op("Transpose", [w], perm=[0, 2, 1])


@register_pass("lower_contrib")
def lower_contrib(graph: Graph) -> Graph:
    return _lower(graph, LOWERINGS)


@register_pass("lower_dynamic_quantize_lstm")
def lower_dynamic_quantize_lstm(graph: Graph) -> Graph:
    """DynamicQuantizeLSTM as a float LSTM on the dequantized weights (backends without an
    exact kernel for it: Core ML, MPS)."""
    from .fold_constants import fold_constants
    from .infer_shapes import infer_shapes

    lowered = _lower(graph, {"DynamicQuantizeLSTM": _dynamic_quantize_lstm})
    # the dequantized weights fold to constants, and the new nodes get their types
    return lowered if lowered is graph else infer_shapes(fold_constants(lowered))


def _lower(graph: Graph, lowerings: dict[str, Lower]) -> Graph:
    if not any(n.domain == MS and n.op_type in lowerings for n in graph.nodes):
        return graph
    L = _Lowering(graph)
    for node in graph.nodes:
        fn = lowerings.get(node.op_type) if node.domain == MS else None
        if fn is None:
            L.nodes.append(node)
            continue
        L.where = node.name
        fn(L, node)
    # the lowered nodes' outputs get their types from shape inference
    return graph.with_nodes(L.nodes, initializers=L.inits, values=L.values)


# --------------------------------------------------------------------------------------------
# schemas of the kept contrib ops, so onnx's shape inference types their outputs
# --------------------------------------------------------------------------------------------
def _dqlstm_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    """Y [S, D, B, H], Y_h and Y_c [D, B, H] (layout 0: onnxruntime's quantizer drops layout)."""
    x = ctx.get_input_type(0)
    if x is None or not x.tensor_type.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") else None for d in x.tensor_type.shape.dim]
    if len(dims) != 3:
        return
    a = {p.name: p for p in (ctx.get_attribute(k) for k in ("hidden_size", "direction")) if p}
    if "hidden_size" not in a:
        return
    hidden = helper.get_attribute_value(a["hidden_size"])
    direction = helper.get_attribute_value(a["direction"]) if "direction" in a else b"forward"
    nd = 2 if direction in (b"bidirectional", "bidirectional") else 1
    shapes = [[dims[0], nd, dims[1], hidden], [nd, dims[1], hidden], [nd, dims[1], hidden]]
    for i, shape in enumerate(shapes[: ctx.get_num_outputs()]):
        t = onnx.TypeProto()
        t.tensor_type.elem_type = x.tensor_type.elem_type
        t.tensor_type.shape.SetInParent()
        for v in shape:
            d = t.tensor_type.shape.dim.add()
            if v is not None:
                d.dim_value = v
        ctx.set_output_type(i, t)


def _register_kept() -> None:
    try:
        onnx.defs.get_schema("DynamicQuantizeLSTM", 1, MS)
        return
    except onnx.defs.SchemaError:
        pass
    P, opt = OpSchema.FormalParameter, OpSchema.FormalParameterOption.Optional
    f, i32, q = "tensor(float)", "tensor(int32)", ["tensor(int8)", "tensor(uint8)"]
    ins = [("X", f, None), ("W", "T2", None), ("R", "T2", None), ("B", f, opt)]
    ins += [("sequence_lens", i32, opt), ("initial_h", f, opt), ("initial_c", f, opt)]
    ins += [("P", f, opt), ("W_scale", f, None), ("W_zero_point", "T2", None)]
    ins += [("R_scale", f, None), ("R_zero_point", "T2", None)]
    sch = OpSchema(
        "DynamicQuantizeLSTM",
        MS,
        1,
        "onnxruntime contrib op (its quantizer writes it for LSTM): LSTM with int8/uint8 W "
        "[D, input, 4H] and R [D, H, 4H], per-direction or per-column scales, X and h "
        "quantized to uint8 at run time (schema registered by onnx2edge for shape inference).",
        inputs=[P(n, t, "", param_option=o) if o else P(n, t, "") for n, t, o in ins],
        outputs=[P(n, f, "", param_option=opt) for n in ("Y", "Y_h", "Y_c")],
        type_constraints=[("T2", q, "")],
        attributes=[
            OpSchema.Attribute("hidden_size", OpSchema.AttrType.INT, "", required=True),
            OpSchema.Attribute("direction", helper.make_attribute("direction", "forward"), ""),
            OpSchema.Attribute("activations", OpSchema.AttrType.STRINGS, "", required=False),
            OpSchema.Attribute("activation_alpha", OpSchema.AttrType.FLOATS, "", required=False),
            OpSchema.Attribute("activation_beta", OpSchema.AttrType.FLOATS, "", required=False),
            OpSchema.Attribute("clip", OpSchema.AttrType.FLOAT, "", required=False),
            OpSchema.Attribute("input_forget", helper.make_attribute("input_forget", 0), ""),
        ],
    )
    sch.set_type_and_shape_inference_function(_dqlstm_infer)
    onnx.defs.register_schema(sch)


_register_kept()
