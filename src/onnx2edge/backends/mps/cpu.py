"""The CPU segments: ONNX nodes MPSNNGraph cannot express, as plain Swift on `CPUTensor`s.

MPSNNGraph holds images only (batch 1, W x H x C in slices of 4): no general transpose,
gather, slice of a non-image tensor, recurrent layers, integer tensors or rank-3/5 tensors.
Such nodes run here, before, between or after the GPU graphs (lower.py's segmented plan), on
arrays in ONNX's row-major order (integers held as Float values): each emitter appends one
Swift statement calling a function of `cpu_support.swift.txt`. Shapes are static (known when
the code is generated), so every call carries its shapes as literals.

Why hand-written: this is the one place where the generated package itself must compute ONNX
ops without a runtime (no onnxruntime on iOS inside an MPS package), in Swift. Activations are
not: they render the shared tables (semantics/activations.py, semantics/rnn.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ...semantics.activations import ACTIVATIONS, as_activation, swift_expr
from ...semantics.attrs import gemm_attrs
from ...semantics.conv_geometry import conv_geometry
from ...semantics.fused import activation_of, base_op, has_residual, unfused
from ...semantics.norms import layer_norm_attrs
from ...semantics.numeric import gemm_dims, quant_attrs
from ...semantics.records import pad_attrs, resize_attrs, softmax_attrs
from ...semantics.rnn import CELLS, recurrent_attrs, rnn_act_expr, rnn_activations
from ...semantics.shape_ops import axis_attr, slice_attrs, split_attrs, transpose_perm
from .core import _reduce_axes, swift_float

if TYPE_CHECKING:
    from .lower import Lowering


class CPURefuse(Exception):
    """The CPU tail does not implement this node either."""


CPUEmitter = Callable[["Lowering", Node], None]
CPU_EMITTERS: dict[str, CPUEmitter] = {}


def cpu_emitter(*ops: str) -> Callable[[CPUEmitter], CPUEmitter]:
    def deco(fn: CPUEmitter) -> CPUEmitter:
        for op in ops:
            CPU_EMITTERS[op] = fn
        return fn

    return deco


def _f(v: float) -> str:
    v = float(v)
    if np.isnan(v):
        return "Float.nan"
    if np.isinf(v):
        return "Float.infinity" if v > 0 else "-Float.infinity"
    return swift_float(v)


def _ints(xs: list[int] | tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def _shape(lw: Lowering, name: str) -> list[int]:
    try:
        return [int(d) for d in lw.g.shape_of(name)]
    except (ValueError, TypeError) as e:
        raise CPURefuse(f"tensor '{name}' has no static shape") from e


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# Element-wise functions as Swift closures of `x`: the activation table's ops render the
# table's own expression (semantics/activations.py `swift_expr`, parameters resolved), so a
# standalone node and one fused into an o2e.<Op>Act (cpu_fused) run the same closure; the other
# unary ops are ONNX's definitions.
UNARY: dict[str, str] = {
    "Exp": "expf(x)",
    "Log": "logf(x)",
    "Neg": "-x",
    "Abs": "abs(x)",
    "Sqrt": "x.squareRoot()",
    "Reciprocal": "1 / x",
    "Erf": "erff(x)",
    "Floor": "x.rounded(.down)",
    "Ceil": "x.rounded(.up)",
}

BINARY = {
    "Add": "a + b",
    "Sub": "a - b",
    "Mul": "a * b",
    "Div": "a / b",
    "Pow": "powf(a, b)",
    "Max": "(a.isNaN || b.isNaN) ? Float.nan : max(a, b)",
    "Min": "(a.isNaN || b.isNaN) ? Float.nan : min(a, b)",
}


@cpu_emitter(*UNARY, *ACTIVATIONS)
def _unary(lw: Lowering, node: Node) -> None:
    if node.op_type in UNARY:
        body = UNARY[node.op_type]
    else:
        if node.op_type == "Clip":
            lw.clip_bounds(node)  # refuses a bound computed at run time, naming it
        act = as_activation(lw.g, node)
        if act is None:
            raise CPURefuse(f"{node.op_type} parameters computed at run time")
        body = swift_expr(act, "x")
    x = lw.cpu_in(node.inputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuUnary({x}) {{ x in {body} }}")


def cpu_fused(lw: Lowering, node: Node) -> None:
    """An o2e.<Op>Act the GPU graph could not take (the shared fusion pass runs before
    placement is known): its base op's CPU code, then the activation on the result."""
    act = activation_of(node)
    if has_residual(node):
        raise CPURefuse("a fused residual (MPS does not run fuse_residual)")
    CPU_EMITTERS[base_op(node)](lw, unfused(node))
    if act is not None:
        x = lw.cpu_in(node.outputs[0])
        body = swift_expr(act, "x")
        lw.cpu_out(node, node.outputs[0], f"cpuUnary({x}) {{ x in {body} }}")


@cpu_emitter(*BINARY)
def _binary(lw: Lowering, node: Node) -> None:
    a = lw.cpu_in(node.inputs[0])
    b = lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    body = BINARY[node.op_type]
    if node.op_type == "Div" and _dtype(lw, node.outputs[0]).kind in "iu":
        body = "(a / b).rounded(.towardZero)"  # integer division truncates
    lw.cpu_out(node, node.outputs[0], f"cpuBinary({a}, {b}, {_ints(out)}) {{ a, b in {body} }}")


@cpu_emitter("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def _reshape(lw: Lowering, node: Node) -> None:
    x = lw.cpu_in(node.inputs[0])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"CPUTensor({x}.values, {_ints(out)})")


@cpu_emitter("Transpose")
def _transpose(lw: Lowering, node: Node) -> None:
    rank = len(_shape(lw, node.inputs[0]))
    perm = list(transpose_perm(node, rank, lw.g.opset))
    x = lw.cpu_in(node.inputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuTranspose({x}, {_ints(perm)})")


@cpu_emitter("Concat")
def _concat(lw: Lowering, node: Node) -> None:
    out = _shape(lw, node.outputs[0])
    axis = axis_attr(node, lw.g.opset, len(out))
    xs = [lw.cpu_in(i) for i in node.inputs if i and int(np.prod(_shape(lw, i))) > 0]
    lw.cpu_out(node, node.outputs[0], f"cpuConcat([{', '.join(xs)}], axis: {axis}, {_ints(out)})")


def slice_params(lw: Lowering, node: Node) -> tuple[list[int], list[int]]:
    """Normalised (starts, steps) of a Slice for every axis of its input (ONNX clamping)."""
    shape = _shape(lw, node.inputs[0])
    rank = len(shape)
    sa = slice_attrs(node, lw.g.opset)
    if sa is not None:  # Slice-1: attributes
        starts_v, ends_v = list(sa.starts), list(sa.ends)
        axes_v, steps_v = list(sa.axes), list(sa.steps)
    else:

        def const(i: int) -> list[int] | None:
            if len(node.inputs) <= i or not node.inputs[i]:
                return None
            v = lw.g.const(node.inputs[i])
            if v is None:
                raise CPURefuse(f"Slice input {i} is computed at run time")
            return [int(a) for a in v.reshape(-1)]

        starts_v, ends_v = const(1) or [], const(2) or []
        axes_v = const(3) or list(range(len(starts_v)))
        steps_v = const(4) or [1] * len(starts_v)
    starts, steps = [0] * rank, [1] * rank
    for st, _en, ax, sp in zip(starts_v, ends_v, axes_v, steps_v, strict=True):
        ax = _axis(ax, rank)
        n = shape[ax]
        if sp == 0:
            raise CPURefuse("Slice step 0")
        st = st + n if st < 0 else st
        st = min(max(st, 0), n) if sp > 0 else min(max(st, 0), n - 1)
        starts[ax], steps[ax] = st, sp
    return starts, steps


@cpu_emitter("Slice")
def _slice(lw: Lowering, node: Node) -> None:
    starts, steps = slice_params(lw, node)
    out = _shape(lw, node.outputs[0])
    x = lw.cpu_in(node.inputs[0])
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuSlice({x}, starts: {_ints(starts)}, steps: {_ints(steps)}, {_ints(out)})",
    )


@cpu_emitter("Split")
def _split(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    axis = split_attrs(node, lw.g.opset, len(shape)).axis
    x = lw.cpu_in(node.inputs[0])
    at = 0
    for o in node.outputs:
        if not o:
            continue
        out = _shape(lw, o)
        starts = [0] * len(shape)
        starts[axis] = at
        at += out[axis]
        ones = _ints([1] * len(shape))
        lw.cpu_out(node, o, f"cpuSlice({x}, starts: {_ints(starts)}, steps: {ones}, {_ints(out)})")


@cpu_emitter("Softmax", "LogSoftmax")
def _softmax(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    sm = softmax_attrs(node, lw.g.opset)
    axis = _axis(sm.axis, len(shape))
    x = lw.cpu_in(node.inputs[0])
    log = "true" if node.op_type == "LogSoftmax" else "false"
    if sm.flattens and axis != len(shape) - 1:
        # Before opset 13 Softmax flattens to 2-D at `axis`: normalise over all trailing axes.
        flat = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
        lw.cpu_out(
            node,
            node.outputs[0],
            f"CPUTensor(cpuSoftmax(CPUTensor({x}.values, {_ints(flat)}), axis: 1, log: {log})"
            f".values, {_ints(shape)})",
        )
        return
    lw.cpu_out(node, node.outputs[0], f"cpuSoftmax({x}, axis: {axis}, log: {log})")


@cpu_emitter("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum")
def _reduce(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    axes = _reduce_axes(lw, node, len(shape))
    axes = list(range(len(shape))) if axes is None else axes
    x = lw.cpu_in(node.inputs[0])
    out = _shape(lw, node.outputs[0])
    op = node.op_type[len("Reduce") :].lower()
    lw.cpu_out(node, node.outputs[0], f"cpuReduce({x}, axes: {_ints(axes)}, .{op}, {_ints(out)})")


@cpu_emitter("MatMul")
def _matmul(lw: Lowering, node: Node) -> None:
    sa, sb = _shape(lw, node.inputs[0]), _shape(lw, node.inputs[1])
    if len(sa) < 2 or len(sb) < 2:
        raise CPURefuse("MatMul of a vector (rank 1)")
    a, b = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuMatMul({a}, {b}, {_ints(out)})")


@cpu_emitter("Gemm")
def _gemm(lw: Lowering, node: Node) -> None:
    a = lw.cpu_in(node.inputs[0])
    b = lw.cpu_in(node.inputs[1])
    ga = gemm_attrs(node, lw.g.opset)
    try:  # A, B of Gemm's (M, K) x (K, N) as the schema reads transA / transB
        gemm_dims(ga, _shape(lw, node.inputs[0]), _shape(lw, node.inputs[1]))
    except ValueError as e:
        raise CPURefuse(str(e)) from e
    if ga.trans_a:
        a = f"cpuTranspose({a}, [1, 0])"
    if ga.trans_b:
        b = f"cpuTranspose({b}, [1, 0])"
    out = _shape(lw, node.outputs[0])
    expr = f"cpuMatMul({a}, {b}, {_ints(out)})"
    alpha, beta = ga.alpha, ga.beta
    if alpha != 1.0:
        expr = f"cpuUnary({expr}) {{ x in x * {_f(alpha)} }}"
    if len(node.inputs) > 2 and node.inputs[2]:
        c = lw.cpu_in(node.inputs[2])
        expr = f"cpuBinary({expr}, {c}, {_ints(out)}) {{ a, b in a + {_f(beta)} * b }}"
    lw.cpu_out(node, node.outputs[0], expr)


@cpu_emitter("Gather")
def _gather(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    axis = axis_attr(node, lw.g.opset, len(shape))
    t = lw.g.type_of(node.inputs[1])
    if t is None or t.dtype.kind not in "iu":
        raise CPURefuse("Gather indices must be an integer tensor")
    x = lw.cpu_in(node.inputs[0])
    idx = lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuGather({x}, {idx}, axis: {axis}, {_ints(out)})")


@cpu_emitter("Conv")
def _conv(lw: Lowering, node: Node) -> None:
    x, w, strides, pads, dil, out2, group = _as_2d(lw, node)
    b = lw.cpu_in(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else "nil"
    out = _shape(lw, node.outputs[0])
    expr = (
        f"cpuConv({x}, {w}, {b}, groups: {group}, strides: {_ints(strides)}, pads: "
        f"{_ints(pads)}, dilations: {_ints(dil)}, {_ints(out2)})"
    )
    lw.cpu_out(
        node, node.outputs[0], expr if out2 == out else f"CPUTensor({expr}.values, {_ints(out)})"
    )


@cpu_emitter("Resize", "Upsample")
def _resize(lw: Lowering, node: Node) -> None:
    shape, out = _shape(lw, node.inputs[0]), _shape(lw, node.outputs[0])
    if len(shape) < 2 or shape[:-2] != out[:-2]:
        raise CPURefuse("resize of axes other than the last two")

    r = resize_attrs(node, lw.g.opset)  # the schema's defaults, Resize-10 / Upsample legacy
    mode = r.mode
    if mode not in ("nearest", "linear", "bilinear") or r.antialias:
        raise CPURefuse(f"resize mode '{mode}'")
    transform = r.coordinate_transformation_mode
    if transform not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
        raise CPURefuse(f"coordinate_transformation_mode '{transform}'")
    nearest = "floor" if r.legacy else r.nearest_mode  # 'simple' is floor when upsampling
    x = lw.cpu_in(node.inputs[0])
    linear = "false" if mode == "nearest" else "true"
    lw.cpu_out(
        node,
        node.outputs[0],
        f'cpuResize({x}, {_ints(out)}, linear: {linear}, transform: "{transform}", '
        f'nearestMode: "{nearest}")',
    )


def _tuple_out(lw: Lowering, node: Node, expr: str) -> None:
    """One Swift call returning a tuple, one element per ONNX output (absent ones skipped)."""
    var = lw.fresh("cpu_" + (node.name or node.outputs[0]))
    lw.phase.append(f"// ONNX node '{node.name}' ({node.op_type}): its outputs, below")
    lw.phase.append(f"let {var} = {expr}")
    for i, o in enumerate(node.outputs):
        if o:
            lw.cpu_out(node, o, f"{var}.{i}")


def _opt_in(lw: Lowering, node: Node, i: int) -> str:
    return lw.cpu_in(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else "nil"


def _dtype(lw: Lowering, name: str) -> np.dtype:
    t = lw.g.type_of(name)
    if t is None:
        raise CPURefuse(f"tensor '{name}' has no known type")
    return np.dtype(t.dtype)


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.kind not in "iu" or dtype.itemsize > 4:
        raise CPURefuse(
            f"integer type {dtype} (the CPU side holds integers as Float: 8 to 32 bits)"
        )
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


@cpu_emitter("Cast")
def _cast(lw: Lowering, node: Node) -> None:
    x = lw.cpu_in(node.inputs[0])
    src, dst = _dtype(lw, node.inputs[0]), _dtype(lw, node.outputs[0])
    if dst == np.bool_:
        expr = f"cpuCast({x}, toBool: true, lo: 0, hi: 1)"
    elif dst.kind in "iu":
        lo, hi = _int_range(dst)
        expr = f"cpuCast({x}, toBool: false, lo: {_f(lo)}, hi: {_f(hi)})"
    elif dst in (np.float32, np.float64) or (dst.kind == "f" and src.kind in "iub"):
        expr = f"CPUTensor({x}.values, {x}.shape)"  # float32 values already (ints exact)
    else:
        raise CPURefuse(f"Cast to {dst} (float32 arithmetic would not round as {dst})")
    lw.cpu_out(node, node.outputs[0], expr)


COMPARE = {
    "Equal": "a == b",
    "Less": "a < b",
    "LessOrEqual": "a <= b",
    "Greater": "a > b",
    "GreaterOrEqual": "a >= b",
    "And": "a != 0 && b != 0",
    "Or": "a != 0 || b != 0",
    "Xor": "(a != 0) != (b != 0)",
}


@cpu_emitter(*COMPARE)
def _compare(lw: Lowering, node: Node) -> None:
    a, b = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    body = COMPARE[node.op_type]
    lw.cpu_out(
        node, node.outputs[0], f"cpuBinary({a}, {b}, {_ints(out)}) {{ a, b in {body} ? 1 : 0 }}"
    )


@cpu_emitter("Not")
def _not(lw: Lowering, node: Node) -> None:
    x = lw.cpu_in(node.inputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuUnary({x}) {{ x in x != 0 ? 0 : 1 }}")


@cpu_emitter("Where")
def _where(lw: Lowering, node: Node) -> None:
    c, a, b = (lw.cpu_in(i) for i in node.inputs[:3])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuWhere({c}, {a}, {b}, {_ints(out)})")


@cpu_emitter("DynamicQuantizeLinear")
def _dynamic_quantize(lw: Lowering, node: Node) -> None:
    _tuple_out(lw, node, f"cpuDynamicQuantize({lw.cpu_in(node.inputs[0])})")


def _quant_axis(lw: Lowering, node: Node) -> int:
    qa = quant_attrs(node, lw.g.opset)
    if qa.block_size:
        raise CPURefuse("blocked quantization (block_size)")
    rank = len(_shape(lw, node.inputs[0]))
    return qa.scale_axis(rank) if rank else 0


@cpu_emitter("QuantizeLinear")
def _quantize(lw: Lowering, node: Node) -> None:
    out_t = _dtype(lw, node.outputs[0])
    lo, hi = _int_range(out_t)
    x, s, z = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1]), _opt_in(lw, node, 2)
    axis = _quant_axis(lw, node)
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuQuantize({x}, {s}, {z}, axis: {axis}, lo: {_f(lo)}, hi: {_f(hi)})",
    )


@cpu_emitter("DequantizeLinear")
def _dequantize(lw: Lowering, node: Node) -> None:
    _int_range(_dtype(lw, node.inputs[0]))
    x, s, z = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1]), _opt_in(lw, node, 2)
    axis = _quant_axis(lw, node)
    lw.cpu_out(node, node.outputs[0], f"cpuDequantize({x}, {s}, {z}, axis: {axis})")


@cpu_emitter("MatMulInteger")
def _matmul_integer(lw: Lowering, node: Node) -> None:
    sa, sb = _shape(lw, node.inputs[0]), _shape(lw, node.inputs[1])
    if len(sa) < 2 or len(sb) < 2:
        raise CPURefuse("MatMulInteger of a vector (rank 1)")
    a, b = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1])
    az, bz = _opt_in(lw, node, 2), _opt_in(lw, node, 3)
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuMatMulInteger({a}, {b}, {az}, {bz}, {_ints(out)})")


def _as_2d(
    lw: Lowering, node: Node
) -> tuple[str, str, list[int], list[int], list[int], list[int], int]:
    """A Conv's input and weights as 2-D ([1, C, H, W]; a 1-D one gets height 1): Swift
    expressions, and the geometry (strides, pads top/left, dilations, output shape, group)."""
    shape, wshape = _shape(lw, node.inputs[0]), _shape(lw, node.inputs[1])
    out = _shape(lw, node.outputs[0])
    if len(shape) not in (3, 4) or shape[0] != 1:
        raise CPURefuse("only 1-D and 2-D convolutions of batch 1")
    geo = conv_geometry(node, shape, wshape, out, lw.g.opset)
    strides, dil, pads = list(geo.strides), list(geo.dilations), list(geo.pads)
    x, w = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1])
    if len(shape) == 3:
        x = f"CPUTensor({x}.values, {_ints([1, shape[1], 1, shape[2]])})"
        w = f"CPUTensor({w}.values, {_ints([*wshape[:2], 1, wshape[2]])})"
        strides, dil, pads = [1, strides[0]], [1, dil[0]], [0, pads[0], 0, pads[1]]
        out = [1, out[1], 1, out[2]]
    return x, w, strides, pads[:2], dil, out, geo.group


@cpu_emitter("ConvInteger")
def _conv_integer(lw: Lowering, node: Node) -> None:
    x, w, strides, pads, dil, out2, group = _as_2d(lw, node)
    xz, wz = _opt_in(lw, node, 2), _opt_in(lw, node, 3)
    out = _shape(lw, node.outputs[0])
    expr = (
        f"cpuConvInteger({x}, {w}, {xz}, {wz}, groups: {group}, strides: {_ints(strides)}, "
        f"pads: {_ints(pads)}, dilations: {_ints(dil)}, {_ints(out2)})"
    )
    lw.cpu_out(node, node.outputs[0], f"CPUTensor({expr}.values, {_ints(out)})")


@cpu_emitter("Pad")
def _pad(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    rank = len(shape)
    pa = pad_attrs(node, lw.g.opset)
    mode = pa.mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise CPURefuse(f"Pad mode '{mode}'")
    if pa.value is not None:  # Pad-1/2: attributes
        pads = list(pa.pads or (0,) * (2 * rank))
        value = pa.value
    else:
        pv = lw.g.const(node.inputs[1])
        if pv is None:
            raise CPURefuse("pads computed at run time")
        pads = [int(p) for p in pv.reshape(-1)]
        value = 0.0
        if len(node.inputs) > 2 and node.inputs[2]:
            cv = lw.g.const(node.inputs[2])
            if cv is None:
                raise CPURefuse("constant_value computed at run time")
            value = float(cv.reshape(-1)[0]) if cv.size else 0.0
        if len(node.inputs) > 3 and node.inputs[3]:
            av = lw.g.const(node.inputs[3])
            if av is None:
                raise CPURefuse("axes computed at run time")
            axes = [_axis(int(a), rank) for a in av.reshape(-1)]
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[rank + a] = pads[k], pads[len(axes) + k]
            pads = full
    x = lw.cpu_in(node.inputs[0])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuPad({x}, pads: {_ints(pads[:rank])}, .{mode}, value: {_f(value)}, {_ints(out)})",
    )


@cpu_emitter("ReduceL2", "ReduceL1", "ReduceSumSquare")
def _reduce_norm(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    axes = _reduce_axes(lw, node, len(shape))
    axes = list(range(len(shape))) if axes is None else axes
    x = lw.cpu_in(node.inputs[0])
    out = _shape(lw, node.outputs[0])
    pre = "abs(x)" if node.op_type == "ReduceL1" else "x * x"
    expr = f"cpuReduce(cpuUnary({x}) {{ x in {pre} }}, axes: {_ints(axes)}, .sum, {_ints(out)})"
    if node.op_type == "ReduceL2":
        expr = f"cpuUnary({expr}) {{ x in x.squareRoot() }}"
    lw.cpu_out(node, node.outputs[0], expr)


@cpu_emitter("RNN", "GRU", "LSTM")
def _recurrent(lw: Lowering, node: Node) -> None:
    op = node.op_type
    if _dtype(lw, node.inputs[0]) != np.float32:
        raise CPURefuse(f"{op} on {_dtype(lw, node.inputs[0])} (float32 only)")
    ra = recurrent_attrs(node, lw.g.opset)
    direction, layout = ra.direction, ra.layout
    if direction not in ("forward", "reverse", "bidirectional"):
        raise CPURefuse(f"direction '{direction}'")
    try:
        acts = rnn_activations(node)
    except ValueError as e:
        raise CPURefuse(str(e)) from e
    ndir = 2 if direction == "bidirectional" else 1
    n_act = len(CELLS[op][1])
    per_dir = [
        "["
        + ", ".join(
            f"{{ v in {rnn_act_expr(a, 'v', _f, 'f')} }}" for a in acts[d * n_act : (d + 1) * n_act]
        )
        + "]"
        for d in range(ndir)
    ]
    reverse = [direction == "reverse" or d == 1 for d in range(ndir)]
    clip = ra.clip
    hidden = _shape(lw, node.inputs[2])[2]
    x, w, r = (lw.cpu_in(i) for i in node.inputs[:3])
    b, seq, h0 = _opt_in(lw, node, 3), _opt_in(lw, node, 4), _opt_in(lw, node, 5)
    c0, p = (_opt_in(lw, node, 6), _opt_in(lw, node, 7)) if op == "LSTM" else ("nil", "nil")
    lbr = "true" if ra.linear_before_reset else "false"
    forget = "true" if ra.input_forget else "false"
    acts_swift = "[" + ", ".join(per_dir) + "]"
    _tuple_out(
        lw,
        node,
        f"cpuRecurrent(.{op.lower()}, {x}, {w}, {r}, {b}, {seq}, {h0}, {c0}, {p}, hidden: {hidden}, "
        f"reverse: {str(reverse).lower()}, layout: {layout}, "
        f"clip: {'nil' if clip is None else _f(float(clip))}, linearBeforeReset: {lbr}, "
        f"inputForget: {forget}, acts: {acts_swift})",
    )


@cpu_emitter("LayerNormalization")
def _layer_norm(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    ln = layer_norm_attrs(node, lw.g.opset, len(shape))
    axis = ln.axis
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise CPURefuse("LayerNormalization's Mean / InvStdDev outputs (training)")
    x, scale, bias = lw.cpu_in(node.inputs[0]), lw.cpu_in(node.inputs[1]), _opt_in(lw, node, 2)
    eps = ln.epsilon
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuLayerNorm({x}, {scale}, {bias}, axis: {axis}, epsilon: {_f(eps)})",
    )
