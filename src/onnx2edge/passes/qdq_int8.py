"""QDQ convolutions and matrix products as integer ops (the C backend's int8 kernels).

onnxruntime.quantization.quantize_static (QDQ format) writes every quantized layer as

before:  xq -> DequantizeLinear -> Conv -> [Relu / Clip] -> QuantizeLinear -> yq
         wq (int8 const) -> DequantizeLinear -^   ^- DequantizeLinear <- bias (int32 const)
after:   xq -> QLinearConv -> yq       (o2e.QLinearConvAct when it carries the Relu / Clip)

and the same around MatMul / Gemm, which become `o2e.QGemm` / `o2e.QGemmAct` (QLinearMatMul's
inputs, B as [K, N], plus an optional int32 bias at input 8: QLinearMatMul has no bias). These
internal ops and their schemas live in semantics/fused.py. onnxruntime runs these groups
with its integer kernels; the float Conv between Q/DQ pairs only approximates them. A fused
Relu / Clip becomes the bounds of the requantisation clamp, which is exact: quantization is
monotonic, so Q(relu(v)) = max(Q(v), Q(0)) and Q(clip(v, a, b)) = clamp(Q(v), Q(a), Q(b)).

`int8_plan` reads an integer node (from this pass, or a QOperator model's QLinearConv /
QLinearMatMul; a fused one by its `base_op`) into what the kernels need, computed at conversion: int8 weights with their
zero point subtracted, per-output requantisation scales x_scale * w_scale / y_scale in
float32 (onnxruntime's order of operations), the int32 bias, the output clamp. A pattern the
kernels cannot run (3-D convolutions, grouped non-depthwise convolutions, weights that do not
fit int8 after their zero point, per-row activation scales) is left as it was. Grouped
convolutions run one product per group.
Only the C backend runs this pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx.helper import np_dtype_to_tensor_dtype

from ..ir import Attr, Graph, Node, TensorType, Value
from ..semantics.attrs import attr
from ..semantics.conv_geometry import pool_geometry
from ..semantics.fused import (
    DOMAIN,
    activation_of,
    base_domain,
    base_op,
    has_residual,
    is_fused,
    with_activation,
)
from .registry import register_pass

QRANGE = {"uint8": (0, 255), "int8": (-128, 127)}
_ACTS = ("Relu", "Clip")


@dataclass(frozen=True)
class Int8Plan:
    """An integer conv / matrix product as the C kernels run it.

    kind: "gemm" (conv as an implicit GEMM), "depthwise" or "matmul" (activations [R, K] times
    constant [K, N]). w: int8 [M, K] (M output channels or columns) minus its zero point;
    bias: int32 [M]; scale: float32 [M]; x_zp / y_zp the activation zero points; x_signed
    whether activations are int8; lo / hi the output clamp (type range and fused activation);
    groups: a grouped convolution's groups (kind "gemm", w's rows group after group, each
    [M / groups, C / groups * kh * kw]).
    """

    kind: str
    w: np.ndarray
    bias: np.ndarray
    scale: np.ndarray
    x_zp: int
    x_signed: bool
    y_zp: int
    lo: int
    hi: int
    groups: int = 1


def _scalar(graph: Graph, name: str) -> np.ndarray | None:
    v = graph.const(name) if name else None
    return v if v is not None and v.size == 1 else None


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) else ""


def _clamp_bounds(node: Node, ys: np.float32, yz: int, qname: str) -> tuple[int, int] | None:
    """The output clamp: the type's range narrowed by a fused Relu / Clip (None: another
    activation the integer kernels cannot apply)."""
    lo, hi = QRANGE[qname]
    act = activation_of(node)
    if act is None:
        return lo, hi
    if act.op not in _ACTS:
        return None
    if act.op == "Relu":
        return max(lo, yz), hi

    def q(v: float) -> int:  # QuantizeLinear of one float, as onnxruntime computes it
        if not np.isfinite(v):
            return lo if v < 0 else hi
        r = np.float32(v) / ys
        return int(np.clip(np.rint(r) + yz, lo, hi)) if np.isfinite(r) else (lo if r < 0 else hi)

    a, b = q(act.alpha), q(act.beta)
    return max(lo, a), min(hi, b)


def int8_plan(graph: Graph, node: Node) -> Int8Plan | None:
    """The kernels' view of a QLinearConv / QLinearMatMul / o2e QGemm (or their o2e ...Act
    forms), or None if they cannot run it (the emitter then uses the reference loops)."""
    op = (base_domain(node), base_op(node))
    if op not in ((DOMAIN, "QGemm"), ("", "QLinearConv"), ("", "QLinearMatMul")):
        return None
    x, w = graph.type_of(_input(node, 0)), graph.const(_input(node, 3))
    y = graph.type_of(node.outputs[0])
    if x is None or y is None or w is None or not x.is_static or not y.is_static:
        return None
    xn, yn = x.dtype.name, y.dtype.name
    if xn not in QRANGE or yn not in QRANGE or w.dtype.name not in QRANGE:
        return None
    xs, xz = _scalar(graph, _input(node, 1)), _scalar(graph, _input(node, 2))
    ys, yz = _scalar(graph, _input(node, 6)), _scalar(graph, _input(node, 7))
    ws = graph.const(_input(node, 4))
    wz = graph.const(_input(node, 5)) if _input(node, 5) else np.zeros(1, w.dtype)
    if xs is None or ys is None or ws is None or wz is None:
        return None
    if _input(node, 2) and xz is None or _input(node, 7) and yz is None:
        return None
    xz_i = int(xz.reshape(-1)[0]) if xz is not None else 0
    yz_i = int(yz.reshape(-1)[0]) if yz is not None else 0
    if op[1] == "QLinearConv":
        if w.ndim != 4 or len(x.static_shape) != 4:
            return None
        M, cg = w.shape[0], w.shape[1]
        C, g = x.static_shape[1], int(node.attr("group", 1))
        if g == C == M and cg == 1:
            kind = "depthwise"
        elif g >= 1 and C == g * cg and M % g == 0:
            kind = "gemm"  # grouped: one product per group (RegNet, ResNeXt)
        else:
            return None
        wz_b = wz.reshape(-1, 1, 1, 1) if wz.size > 1 else wz.reshape(())
        w2 = (w.astype(np.int32) - wz_b.astype(np.int32)).reshape(M, -1)
    else:
        if w.ndim != 2:
            return None
        M = w.shape[1]
        kind = "matmul"
        wz_b = wz.reshape(1, -1) if wz.size > 1 else wz.reshape(())
        w2 = (w.astype(np.int32) - wz_b.astype(np.int32)).T
    if ws.size not in (1, M) or wz.size not in (1, M) or w2.min() < -128 or w2.max() > 127:
        return None
    bias = np.zeros(M, np.int32)
    if _input(node, 8):
        b = graph.const(_input(node, 8))
        if b is None or b.dtype != np.int32 or b.size != M:
            return None
        bias = b.reshape(-1).astype(np.int32)
    # onnxruntime: output_scale[m] = x_scale * w_scale[m] / y_scale, each step in float32
    f32 = np.float32
    scale = (f32(xs.reshape(-1)[0]) * ws.reshape(-1).astype(f32)) / f32(ys.reshape(-1)[0])
    scale = np.broadcast_to(scale.astype(f32), (M,)).copy()
    bounds = _clamp_bounds(node, f32(ys.reshape(-1)[0]), yz_i, yn)
    if bounds is None or not np.all(np.isfinite(scale)):
        return None
    groups = int(node.attr("group", 1)) if kind == "gemm" and op[1] == "QLinearConv" else 1
    return Int8Plan(
        kind, np.ascontiguousarray(w2.astype(np.int8)), bias, scale, xz_i, xn == "int8", yz_i,
        *bounds, groups,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# the rewrite
# --------------------------------------------------------------------------------------------
def _dq(graph: Graph, name: str) -> Node | None:
    p = graph.producer(name) if name else None
    if p is None or p.op_type != "DequantizeLinear" or p.domain != "":
        return None
    if p.attr("block_size", 0) or p.attr("output_dtype", 0):
        return None
    return p


def _only_q(graph: Graph, node: Node) -> Node | None:
    out = node.outputs[0]
    users = graph.consumers(out)
    if out in graph.outputs or len(users) != 1:
        return None
    q = users[0]
    if q.op_type != "QuantizeLinear" or q.domain != "" or q.inputs[0] != out:
        return None
    if any(k not in ("axis", "saturate") for k in q.attrs):
        return None
    if _scalar(graph, _input(q, 1)) is None or (
        _input(q, 2) and _scalar(graph, q.inputs[2]) is None
    ):
        return None
    t = graph.type_of(q.outputs[0])
    return q if t is not None and t.dtype.name in QRANGE else None


def _act_scalar_dq(graph: Graph, dq: Node | None) -> bool:
    if dq is None or _scalar(graph, _input(dq, 1)) is None:
        return False
    if _input(dq, 2) and _scalar(graph, dq.inputs[2]) is None:
        return False
    t = graph.type_of(dq.inputs[0])
    return t is not None and t.dtype.name in QRANGE


def _weight_dq(graph: Graph, dq: Node | None, axis: int) -> bool:
    """A constant int8 / uint8 weight, per tensor or per `axis`."""
    if dq is None:
        return False
    w, s = graph.const(dq.inputs[0]), graph.const(_input(dq, 1))
    if w is None or s is None or w.dtype.name not in QRANGE:
        return False
    if s.size == 1:
        return True
    return (int(dq.attr("axis", 1)) % w.ndim) == axis and s.size == w.shape[axis]


def _bias_ok(graph: Graph, dq: Node | None, want_scale: np.ndarray) -> bool:
    """An int32 bias whose scale is x_scale * w_scale (how the quantizer writes it)."""
    if dq is None:
        return False
    b, s = graph.const(dq.inputs[0]), graph.const(_input(dq, 1))
    z = graph.const(_input(dq, 2)) if _input(dq, 2) else np.zeros(1, np.int32)
    if b is None or s is None or z is None or b.dtype != np.int32 or np.any(z != 0):
        return False
    s = np.broadcast_to(s.reshape(-1).astype(np.float32), want_scale.shape)
    return bool(np.allclose(s, want_scale, rtol=1e-6, atol=0))


class _Rewrite:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.inits = dict(graph.initializers)
        self.taken = set(graph.values) | set(graph.initializers) | {n.name for n in graph.nodes}
        self.taken |= {o for n in graph.nodes for o in n.outputs if o}

    def const(self, base: str, value: np.ndarray) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        self.inits[name] = value
        return name

    def zp(self, node: Node, dq: Node, i: int) -> str:
        """A node's zero point input, made explicit (uint8 zero when absent, as in the spec)."""
        if _input(dq, i):
            return dq.inputs[i]
        t = self.graph.type_of(dq.inputs[0] if dq.op_type == "DequantizeLinear" else dq.outputs[0])
        dt = t.dtype if t is not None else np.dtype(np.uint8)
        return self.const(f"{node.name}/zero_point", np.zeros((), dt))


def _attrs(node: Node, keep: tuple[str, ...]) -> dict[str, Attr]:
    return {k: a for k, a in node.attrs.items() if k in keep}


def _integer_node(
    node: Node,
    op: str,
    domain: str,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    attrs: dict[str, Attr],
) -> Node:
    """The integer op replacing `node`; its fused form (o2e.QLinearConvAct, QGemmAct, QAddAct)
    when `node` carries an activation, which becomes the requantisation clamp."""
    new = Node(node.name, op, inputs, outputs, attrs, domain=domain)
    act = activation_of(node)
    return new if act is None else with_activation(new, act, outputs)


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _qparams(graph: Graph, node: Node) -> tuple[float, int, str] | None:
    """(scale, zero point, dtype) of a per-tensor DequantizeLinear / QuantizeLinear."""
    s = _scalar(graph, _input(node, 1))
    z = _scalar(graph, _input(node, 2)) if _input(node, 2) else np.zeros((), np.uint8)
    t = graph.type_of(node.inputs[0] if node.op_type == "DequantizeLinear" else node.outputs[0])
    if s is None or z is None or t is None or t.dtype.name not in QRANGE:
        return None
    return float(np.float32(s.reshape(-1)[0])), int(z.reshape(-1)[0]), t.dtype.name


def _lut(src: tuple[float, int, str], dst: tuple[float, int, str]) -> np.ndarray:
    """QuantizeLinear(DequantizeLinear(v)) for every byte v, in float32 as both ops compute
    it (onnxruntime's QLinearConcat builds the same table): bit-exact requantisation."""
    v = np.arange(256, dtype=np.uint8).view(np.dtype(src[2])).astype(np.int32)
    f = (v - src[1]).astype(np.float32) * np.float32(src[0])
    lo, hi = QRANGE[dst[2]]
    q = np.clip(np.rint(f / np.float32(dst[0])) + dst[1], lo, hi)
    return q.astype(np.dtype(dst[2]))


def _plain_pool(node: Node, graph: Graph) -> bool:
    """A 2-D MaxPool o2e.QMaxPool's kernel runs: explicit pads, no dilation; ceil mode
    without pads (SqueezeNet's pools): the extra last window reads the planes' border of the
    smallest byte, which never wins over the real value it also holds."""
    t = graph.type_of(node.inputs[0])
    if t is None or not t.is_static or len(t.static_shape) != 4:
        return False
    if attr(node, "storage_order", graph.opset):
        return False
    g = pool_geometry(node, t.static_shape, None, graph.opset)
    ceil_ok = not g.ceil_mode or not any(g.pads)
    return g.auto_pad == "NOTSET" and ceil_ok and g.unit_dilation


_PASSTHROUGH = ("MaxPool", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Slice", "Transpose")


def _moves_values(node: Node) -> bool:
    """An op that only moves or compares its input's values (so it runs on the bytes when its
    DQ and Q agree): the list above, and Resize in nearest mode (YOLO's upsampling) unless
    tf_crop_and_resize's extrapolation value may appear."""
    if node.op_type in _PASSTHROUGH:
        return True
    return (
        node.op_type == "Resize"
        and node.attr("mode", "nearest") in ("nearest", b"nearest")
        and node.attr("coordinate_transformation_mode", "half_pixel")
        not in ("tf_crop_and_resize", b"tf_crop_and_resize")
    )


# element-wise ops tabulated for DQ -> op -> Q (o2e QLut): each is a function of one byte
_LUT_OPS = ("Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Relu", "LeakyRelu", "Erf", "Elu")


def _act_f32(node: Node, f: np.ndarray) -> np.ndarray | None:
    """`node`'s element-wise op on the float32 values f, rounded to float32 once: the
    transcendental ones in float64 then rounded (onnxruntime's float32 kernels are within an
    ulp or two of that, which moves a quantized byte only where f / y_scale sits on a
    rounding tie; tests/test_c_int8_lut.py checks every byte against onnxruntime)."""
    import math

    f32, d = np.float32, f.astype(np.float64)
    op = node.op_type
    if op == "Sigmoid":
        return (1.0 / (1.0 + np.exp(-d))).astype(f32)
    if op == "Tanh":
        return np.tanh(d).astype(f32)
    if op == "Erf":
        return np.array([math.erf(v) for v in d], f32)
    if op == "Relu":
        return np.maximum(f, f32(0))
    if op == "LeakyRelu":
        return np.where(f < 0, f * f32(node.attr("alpha", 0.01)), f).astype(f32)
    if op == "Elu":
        a = f32(node.attr("alpha", 1.0))
        return np.where(f < 0, a * np.expm1(d).astype(f32), f).astype(f32)
    if op == "HardSigmoid":
        a, b = f32(node.attr("alpha", 0.2)), f32(node.attr("beta", 0.5))
        return np.clip(f * a + b, f32(0), f32(1)).astype(f32)
    if op == "HardSwish":
        return (f * np.clip(f * f32(1 / 6) + f32(0.5), f32(0), f32(1))).astype(f32)
    return None


def _dq_values(src: tuple[float, int, str]) -> np.ndarray:
    """DequantizeLinear of every byte (index = the byte's bits), in float32."""
    v = np.arange(256, dtype=np.uint8).view(np.dtype(src[2])).astype(np.int32)
    return (v - src[1]).astype(np.float32) * np.float32(src[0])


def _quantize(f: np.ndarray, dst: tuple[float, int, str]) -> np.ndarray:
    """QuantizeLinear in float32: round half to even of f / scale, plus the zero point."""
    lo, hi = QRANGE[dst[2]]
    with np.errstate(all="ignore"):
        r = f.astype(np.float32) / np.float32(dst[0])
    r = np.nan_to_num(r, nan=0.0, posinf=hi, neginf=lo)
    return np.clip(np.rint(r) + dst[1], lo, hi).astype(np.dtype(dst[2]))


def _lut_source(g: Graph, node: Node) -> tuple[Node, tuple[float, int, str]] | None:
    """The DequantizeLinear feeding a tabulated op `node` and its parameters."""
    if node.domain != "" or node.op_type not in _LUT_OPS or len(node.inputs) != 1:
        return None
    dq = _dq(g, node.inputs[0])
    p = _qparams(g, dq) if dq is not None else None
    return (dq, p) if dq is not None and p is not None else None


def _rewrite_lut(rw: _Rewrite, node: Node, q: Node, qp: tuple[float, int, str]) -> tuple[Node, Node] | None:  # fmt: skip
    """DQ -> Sigmoid / HardSwish / ... -> Q: one table lookup per byte (o2e QLut)."""
    src = _lut_source(rw.graph, node)
    if src is None:
        return None
    f = _act_f32(node, _dq_values(src[1]))
    if f is None:
        return None
    table = rw.const(f"{node.name}/lut", _quantize(f, qp))
    return Node(node.name, "QLut", (src[0].inputs[0], table), q.outputs, {}, domain=DOMAIN), q


def _gated_self(g: Graph, node: Node) -> tuple[str, np.ndarray] | None:
    """Mul(DQ(x), DQ(Q(act(DQ(x))))): SiLU's x * sigmoid(x), HardSwish written as
    x * hardsigmoid(x). Returns x and DQ(x) * DQ(table[x]) for every byte when the gate's
    quantized tensor feeds only this product, else None."""
    if node.domain != "" or node.op_type != "Mul" or len(node.inputs) != 2:
        return None
    for xi, gi in ((0, 1), (1, 0)):
        dx, dgate = _dq(g, node.inputs[xi]), _dq(g, node.inputs[gi])
        if dx is None or dgate is None:
            continue
        px, pg = _qparams(g, dx), _qparams(g, dgate)
        qg = g.producer(dgate.inputs[0])
        if px is None or pg is None or qg is None or qg.op_type != "QuantizeLinear":
            continue
        if qg.domain != "" or _qparams(g, qg) != pg or dgate.inputs[0] in g.outputs:
            continue
        if len(g.consumers(dgate.inputs[0])) != 1 or len(g.consumers(dgate.outputs[0])) != 1:
            continue
        act = g.producer(qg.inputs[0])
        src = _lut_source(g, act) if act is not None else None
        if src is None or src[0].inputs[0] != dx.inputs[0] or src[1] != px:
            continue
        if _only_q(g, act) is not qg:  # type: ignore[arg-type]
            continue
        fa = _act_f32(act, _dq_values(px))  # type: ignore[arg-type]
        if fa is None:
            continue
        return dx.inputs[0], _dq_values(px) * _dq_values(pg)[_quantize(fa, pg).view(np.uint8)]
    return None


def _rewrite_data(rw: _Rewrite, node: Node) -> tuple[Node, Node | None] | None:
    """DQ -> MaxPool / reshapes -> Q with one scale: the op on the integers (its values are
    only moved or compared). DQ... -> Concat -> Q: the integers, each input requantized by a
    table where its scale differs (o2e QConcat). DQ, DQ -> Add [-> Relu] -> Q: o2e QAdd."""
    g = rw.graph
    op = base_op(node)  # o2e.AddAct is an Add
    t = g.type_of(node.inputs[0])
    if op == "MaxPool" and t is not None and t.dtype.name in QRANGE and _plain_pool(node, g):
        # already on integers (QOperator models): the same kernel, nothing absorbed
        if len([o for o in node.outputs if o]) == 1:
            return node.replace(op_type="QMaxPool", domain=DOMAIN, outputs=node.outputs[:1]), None
    q = _only_q(g, node)
    if q is None or (qp := _qparams(g, q)) is None:
        return None
    if _moves_values(node):
        dq = _dq(g, node.inputs[0])
        if dq is None or _qparams(g, dq) != qp or activation_of(node) is not None:
            return None
        if op == "MaxPool" and len([o for o in node.outputs if o]) != 1:
            return None
        if op == "MaxPool" and _plain_pool(node, g):
            # 2-D without dilation / ceil mode: o2e QMaxPool's phase-plane kernel
            return node.replace(op_type="QMaxPool", domain=DOMAIN, inputs=(dq.inputs[0],), outputs=q.outputs), q  # fmt: skip
        return node.replace(inputs=(dq.inputs[0], *node.inputs[1:]), outputs=q.outputs), q
    if op in _AVG_POOLS:
        return _rewrite_avg_pool(rw, node, q, qp)
    if op in _LUT_OPS:
        return _rewrite_lut(rw, node, q, qp)
    if op == "Mul" and (gs := _gated_self(g, node)) is not None:
        # QLinearMul's float32 product DQ(x) * DQ(gate), quantized: a table of x alone
        table = rw.const(f"{node.name}/lut", _quantize(gs[1], qp))
        return Node(node.name, "QLut", (gs[0], table), q.outputs, {}, domain=DOMAIN), q
    if op == "Mul" and activation_of(node) is None:
        return _rewrite_mul(rw, node, q)
    if op == "Concat":
        ins: list[str] = []
        for i in node.inputs:
            dq = _dq(g, i)
            p = _qparams(g, dq) if dq is not None else None
            if dq is None or p is None:
                return None
            ins += [dq.inputs[0], "" if p == qp else rw.const(f"{node.name}/lut", _lut(p, qp))]
        return Node(node.name, "QConcat", tuple(ins), q.outputs, dict(node.attrs), domain=DOMAIN), q
    if op == "Add":
        da, db = _dq(g, node.inputs[0]), _dq(g, node.inputs[1])
        if da is None or db is None or _qparams(g, da) is None or _qparams(g, db) is None:
            return None
        ta, tb = g.type_of(da.inputs[0]), g.type_of(db.inputs[0])
        if ta is None or tb is None or ta.shape != tb.shape or not ta.is_static:
            return None
        if _clamp_bounds(node, np.float32(qp[0]), qp[1], qp[2]) is None:
            return None
        ins = [da.inputs[0], da.inputs[1], rw.zp(node, da, 2), db.inputs[0], db.inputs[1]]
        ins += [rw.zp(node, db, 2), q.inputs[1], rw.zp(node, q, 2)]
        return _integer_node(node, "QAdd", DOMAIN, tuple(ins), q.outputs, {}), q
    return None


def mul_rows(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """How many rows o2e QMul's B gives one value each when A has shape `a`: B of A's shape
    with trailing axes of 1 (squeeze-and-excitation's [N, C, 1, 1] gate); None otherwise."""
    if len(a) != len(b) or a == b:
        return None
    k = len(b)
    while k > 0 and b[k - 1] == 1:
        k -= 1
    if k == len(b) or tuple(b[:k]) != tuple(a[:k]):
        return None
    return int(np.prod(a[:k]))


def _rewrite_mul(rw: _Rewrite, node: Node, q: Node) -> tuple[Node, Node] | None:
    """DQ(A), DQ(B) -> Mul -> Q of one shape, or B one value per row of A (the gate of a
    squeeze-and-excitation block): o2e QMul, onnxruntime's QLinearMul in float32."""
    g = rw.graph
    da, db = _dq(g, node.inputs[0]), _dq(g, node.inputs[1])
    if da is None or db is None or _qparams(g, da) is None or _qparams(g, db) is None:
        return None
    ta, tb = g.type_of(da.inputs[0]), g.type_of(db.inputs[0])
    if ta is None or tb is None or not ta.is_static or not tb.is_static:
        return None
    sa, sb = tuple(ta.static_shape), tuple(tb.static_shape)
    if sa != sb and mul_rows(sa, sb) is None:
        if mul_rows(sb, sa) is None:
            return None
        da, db = db, da  # the per-row operand second
    ins = [da.inputs[0], da.inputs[1], rw.zp(node, da, 2), db.inputs[0], db.inputs[1]]
    ins += [rw.zp(node, db, 2), q.inputs[1], rw.zp(node, q, 2)]
    return Node(node.name, "QMul", tuple(ins), q.outputs, {}, domain=DOMAIN), q


_AVG_POOLS = ("AveragePool", "GlobalAveragePool")


def global_pool_scale(xs: float, ys: float, n: int) -> np.float32 | None:
    """x_scale / (y_scale * n) in float32, the factor onnxruntime's QLinearGlobalAveragePool
    (mlas qlgavgpool.cpp) applies to the integer sum; None where it refuses the parameters."""
    f32 = np.float32
    with np.errstate(all="ignore"):
        s = f32(f32(xs) / f32(f32(ys) * f32(n)))
    return s if n < (1 << 24) and np.isfinite(s) and 2.0**-32 <= s < 256.0 else None


def avg_pool_is_global(node: Node, shape: tuple[int, ...], opset: int) -> bool:
    """onnxruntime's QLinearAveragePool takes its global (integer) path when the window is the
    whole image and there is no padding (qlinear_pool.cc: fallback_to_global)."""
    if node.op_type.endswith("GlobalAveragePool"):
        return True
    g = pool_geometry(node, shape, None, opset)
    return tuple(g.kernel) == tuple(shape[2:]) and not any(g.pads)


def _rewrite_avg_pool(
    rw: _Rewrite, node: Node, q: Node, qp: tuple[float, int, str]
) -> tuple[Node, Node] | None:
    """DQ -> AveragePool / GlobalAveragePool -> Q of one integer type: o2e QAveragePool /
    QGlobalAveragePool, which onnxruntime runs as QLinearAveragePool (its QDQ fusion, and
    QOperator models lowered by lower_contrib come back here): a float sum of the dequantized
    bytes over the window, or an integer sum for a whole-image window without padding."""
    g = rw.graph
    dq = _dq(g, node.inputs[0])
    dp = _qparams(g, dq) if dq is not None else None
    t = g.type_of(node.inputs[0])
    if dq is None or dp is None or dp[2] != qp[2] or t is None or not t.is_static:
        return None
    if len([o for o in node.outputs if o]) != 1 or len(t.static_shape) < 3:
        return None
    shape = tuple(t.static_shape)
    if node.op_type == "AveragePool":
        if len(shape) != 4:
            return None
        geo = pool_geometry(node, shape, None, g.opset)
        if geo.auto_pad != "NOTSET" or geo.ceil_mode or not geo.unit_dilation:
            return None
    n = int(np.prod(shape[2:]))
    if avg_pool_is_global(node, shape, g.opset) and global_pool_scale(dp[0], qp[0], n) is None:
        return None
    ins = (dq.inputs[0], dq.inputs[1], rw.zp(node, dq, 2), q.inputs[1], rw.zp(node, q, 2))
    new = Node(node.name, f"Q{node.op_type}", ins, q.outputs, dict(node.attrs), domain=DOMAIN)
    return new, q


def _rewrite(rw: _Rewrite, node: Node) -> tuple[Node, Node | None] | None:
    """The integer node replacing `node` and the QuantizeLinear it absorbs, or None."""
    g = rw.graph
    if node.domain == "" and node.op_type in (
        *_PASSTHROUGH, *_AVG_POOLS, *_LUT_OPS, "Concat", "Add", "Mul", "Resize"
    ):  # fmt: skip
        return _rewrite_data(rw, node)
    if is_fused(node) and base_op(node) == "Add":  # o2e.AddAct (fuse_activation)
        return _rewrite_data(rw, node)
    if (
        not (node.domain == "" or is_fused(node))
        or base_op(node) not in ("Conv", "MatMul", "Gemm")
        or has_residual(node)
    ):
        return None
    act = activation_of(node)
    if act is not None and act.op not in _ACTS:
        return None
    dx, dw = _dq(g, _input(node, 0)), _dq(g, _input(node, 1))
    q = _only_q(g, node)
    if q is None or not _act_scalar_dq(g, dx) or dx is None or dw is None:
        return None
    w = g.const(dw.inputs[0])
    xs = np.float32(g.const(dx.inputs[1]).reshape(-1)[0])
    ws = g.const(dw.inputs[1]).reshape(-1).astype(np.float32)
    wscale, wzp = dw.inputs[1], rw.zp(node, dw, 2)
    bias = ""
    if base_op(node) == "Conv":
        if w is None or w.ndim != 4 or not _weight_dq(g, dw, 0):
            return None
        wq, attrs, op, dom = dw.inputs[0], _attrs(node, _CONV_ATTRS), "QLinearConv", ""
        bi = 2
    else:
        if w is None or w.ndim != 2:
            return None
        op, dom, attrs = "QGemm", DOMAIN, _attrs(node, ())
        wq = dw.inputs[0]
        if base_op(node) == "Gemm":
            if node.attr("transA", 0) or node.attr("alpha", 1.0) != 1.0:
                return None
            if node.attr("beta", 1.0) != 1.0 and _input(node, 2):
                return None
            if node.attr("transB", 0):
                if not _weight_dq(g, dw, 0):
                    return None
                # [N, K] -> [K, N]: per-row scales / zero points become per-column as they are
                wq = rw.const(f"{node.name}/weight_kn", np.ascontiguousarray(w.T))
            elif not _weight_dq(g, dw, 1):
                return None
            bi = 2
        else:
            if not _weight_dq(g, dw, 1):
                return None
            bi = -1
        x = g.type_of(node.inputs[0])
        if (
            x is None
            or x.shape is None
            or len(x.shape) < 2
            or (base_op(node) == "Gemm" and len(x.shape) != 2)
        ):
            return None
    if bi >= 0 and _input(node, bi):
        db = _dq(g, node.inputs[bi])
        if not _bias_ok(g, db, xs * ws):
            return None
        bias = db.inputs[0]  # type: ignore[union-attr]
    inputs = [
        dx.inputs[0], dx.inputs[1], rw.zp(node, dx, 2),
        wq, wscale, wzp,
        q.inputs[1], rw.zp(node, q, 2), bias,
    ]  # fmt: skip
    if not bias:
        inputs.pop()
    return _integer_node(node, op, dom, tuple(inputs), (q.outputs[0],), attrs), q


@register_pass("qdq_to_int8", after=("fuse_activation",))
def qdq_to_int8(graph: Graph) -> Graph:
    rw = _Rewrite(graph)
    new: dict[str, tuple[Node, str]] = {}
    for node in graph.nodes:
        r = _rewrite(rw, node)
        if r is not None:
            new[node.name] = (r[0], r[1].name if r[1] is not None else "")
    opsets = dict(graph.opset_imports)
    opsets.setdefault(DOMAIN, 1)
    values = dict(graph.values)
    for name, arr in rw.inits.items():
        if name not in graph.initializers:
            values[name] = Value(name, TensorType(np_dtype_to_tensor_dtype(arr.dtype), arr.shape))

    def build(rewrites: dict[str, tuple[Node, str]]) -> Graph:
        qs = {q for _, q in rewrites.values() if q}
        nodes = [
            rewrites[n.name][0] if n.name in rewrites else n
            for n in graph.nodes
            if n.name not in qs
        ]
        g = graph.with_nodes(nodes, initializers=rw.inits, values=values)
        return g.replace(opset_imports=opsets)

    if not new:
        return graph
    out = build(new)
    # keep only rewrites the kernels accept (the others stay float between their Q / DQ)
    ok = {k: v for k, v in new.items() if _accepted(out, v[0])}
    if len(ok) != len(new):
        if not ok:
            return graph
        out = build(ok)
    return _drop_dead_dq(out)


def _accepted(graph: Graph, node: Node) -> bool:
    if base_op(node) in ("QLinearConv", "QGemm"):
        return int8_plan(graph, node) is not None
    return True


def _drop_dead_dq(graph: Graph) -> Graph:
    """DequantizeLinear nodes whose outputs nobody reads any more (weights, biases), and the
    o2e QLut of a gate a product's table absorbed (x * sigmoid(x)), to a fixed point."""
    nodes = list(graph.nodes)
    while True:
        used = {i for n in nodes for i in n.inputs if i} | set(graph.outputs)
        keep = [
            n
            for n in nodes
            if not (
                (n.op_type == "DequantizeLinear" or (n.domain == DOMAIN and n.op_type == "QLut"))
                and not any(o in used for o in n.outputs)
            )
        ]
        if len(keep) == len(nodes):
            break
        nodes = keep
    return graph.with_nodes(nodes) if len(nodes) != len(graph.nodes) else graph
