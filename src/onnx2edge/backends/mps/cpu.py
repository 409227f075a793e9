"""The CPU tail: ONNX nodes MPSNNGraph cannot express, as plain Swift on `CPUTensor`s.

MPSNNGraph holds images only (batch 1, W x H x C in slices of 4): no general transpose,
gather, slice of a non-image tensor, recurrent layers or rank-3/5 tensors. Exporters put such
nodes at the ends of a network (detection-head decoding, embeddings, classifier reshapes), so
they run here, after the GPU graph, on float32 arrays in ONNX's row-major order: each emitter
appends one Swift statement calling a function of `cpu_support.swift.txt`. Shapes are static
(known when the code is generated), so every call carries its shapes as literals.

Why hand-written: this is the one place where the generated package itself must compute ONNX
ops without a runtime (no onnxruntime on iOS inside an MPS package), in Swift.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ...semantics.activations import as_activation
from ...semantics.attrs import attr, gemm_attrs
from ...semantics.conv_geometry import conv_geometry
from ...semantics.fused import activation_of, base_op, has_residual, unfused
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


# Element-wise functions (ONNX operator definitions) as Swift closures of `x`. The activation
# table's ops take their resolved parameters (alpha, beta: semantics/activations.py), so a
# standalone node and one fused into an o2e.<Op>Act (cpu_fused) render the same closure.
ACT_SWIFT: dict[str, Callable[[float, float], str]] = {
    "Relu": lambda a, b: "max(x, 0)",
    "Sigmoid": lambda a, b: "1 / (1 + expf(-x))",
    "Tanh": lambda a, b: "tanhf(x)",
    "Softplus": lambda a, b: "logf(1 + expf(x))",
    "Softsign": lambda a, b: "x / (1 + abs(x))",
    "LeakyRelu": lambda a, b: f"x >= 0 ? x : {_f(a)} * x",
    "Elu": lambda a, b: f"x >= 0 ? x : {_f(a)} * (expf(x) - 1)",
    "HardSigmoid": lambda a, b: f"min(max({_f(a)} * x + {_f(b)}, 0), 1)",
    "HardSwish": lambda a, b: "x * min(max(x / 6 + 0.5, 0), 1)",
    "Gelu": lambda a, b: (
        "0.5 * x * (1 + tanhf(0.7978845608028654 * (x + 0.044715 * x * x * x)))"
        if a
        else "0.5 * x * (1 + erff(x * 0.7071067811865476))"
    ),
    "Mish": lambda a, b: "x * tanhf(logf(1 + expf(x)))",
    "Clip": lambda a, b: f"min(max(x, {_f(a)}), {_f(b)})",
}
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


@cpu_emitter(*UNARY, *ACT_SWIFT)
def _unary(lw: Lowering, node: Node) -> None:
    if node.op_type in UNARY:
        body = UNARY[node.op_type]
    else:
        if node.op_type == "Clip":
            lw.clip_bounds(node)  # refuses a bound computed at run time, naming it
        act = as_activation(lw.g, node)
        if act is None:
            raise CPURefuse(f"{node.op_type} parameters computed at run time")
        body = ACT_SWIFT[act.op](act.alpha, act.beta)
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
        if act.op not in ACT_SWIFT:
            raise CPURefuse(f"no CPU code for the fused {act.op}")
        x = lw.cpu_in(node.outputs[0])
        body = ACT_SWIFT[act.op](act.alpha, act.beta)
        lw.cpu_out(node, node.outputs[0], f"cpuUnary({x}) {{ x in {body} }}")


@cpu_emitter(*BINARY)
def _binary(lw: Lowering, node: Node) -> None:
    a = lw.cpu_in(node.inputs[0])
    b = lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuBinary({a}, {b}, {_ints(out)}) {{ a, b in {BINARY[node.op_type]} }}",
    )


@cpu_emitter("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def _reshape(lw: Lowering, node: Node) -> None:
    x = lw.cpu_in(node.inputs[0])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"CPUTensor({x}.values, {_ints(out)})")


@cpu_emitter("Transpose")
def _transpose(lw: Lowering, node: Node) -> None:
    rank = len(_shape(lw, node.inputs[0]))
    perm = node.attr("perm") or list(range(rank))[::-1]
    x = lw.cpu_in(node.inputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuTranspose({x}, {_ints(perm)})")


@cpu_emitter("Concat")
def _concat(lw: Lowering, node: Node) -> None:
    out = _shape(lw, node.outputs[0])
    axis = _axis(int(node.attr("axis")), len(out))
    xs = [lw.cpu_in(i) for i in node.inputs if i and int(np.prod(_shape(lw, i))) > 0]
    lw.cpu_out(node, node.outputs[0], f"cpuConcat([{', '.join(xs)}], axis: {axis}, {_ints(out)})")


def slice_params(lw: Lowering, node: Node) -> tuple[list[int], list[int]]:
    """Normalised (starts, steps) of a Slice for every axis of its input (ONNX clamping)."""
    shape = _shape(lw, node.inputs[0])
    rank = len(shape)
    if lw.g.opset < 10:
        starts_v = list(node.attr("starts"))
        ends_v = list(node.attr("ends"))
        axes_v = list(node.attr("axes") or range(len(starts_v)))
        steps_v = [1] * len(starts_v)
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
    axis = _axis(int(attr(node, "axis", lw.g.opset)), len(shape))
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
    axis = _axis(int(attr(node, "axis", lw.g.opset)), len(shape))
    x = lw.cpu_in(node.inputs[0])
    log = "true" if node.op_type == "LogSoftmax" else "false"
    if lw.g.opset < 13 and axis != len(shape) - 1:
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
    sa, sb = _shape(lw, node.inputs[0]), _shape(lw, node.inputs[1])
    ga = gemm_attrs(node, lw.g.opset)
    if ga.trans_a:
        a, sa = f"cpuTranspose({a}, [1, 0])", sa[::-1]
    if ga.trans_b:
        b, sb = f"cpuTranspose({b}, [1, 0])", sb[::-1]
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
    axis = _axis(int(attr(node, "axis", lw.g.opset)), len(shape))
    t = lw.g.type_of(node.inputs[1])
    if t is None or t.dtype.kind not in "iu":
        raise CPURefuse("Gather indices must be an integer tensor")
    x = lw.cpu_in(node.inputs[0])
    idx = lw.cpu_in(node.inputs[1])
    out = _shape(lw, node.outputs[0])
    lw.cpu_out(node, node.outputs[0], f"cpuGather({x}, {idx}, axis: {axis}, {_ints(out)})")


@cpu_emitter("Conv")
def _conv(lw: Lowering, node: Node) -> None:
    shape = _shape(lw, node.inputs[0])
    out = _shape(lw, node.outputs[0])
    wshape = _shape(lw, node.inputs[1])
    if len(shape) != 4 or len(wshape) != 4:
        raise CPURefuse("only 2-D convolutions of [1, C, H, W] tensors")
    geo = conv_geometry(node, shape, wshape, out, lw.g.opset)
    strides, dil, pads = list(geo.strides), list(geo.dilations), list(geo.pads)
    x = lw.cpu_in(node.inputs[0])
    w = lw.cpu_in(node.inputs[1])
    b = lw.cpu_in(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else "nil"
    lw.cpu_out(
        node,
        node.outputs[0],
        f"cpuConv({x}, {w}, {b}, groups: {geo.group}, strides: "
        f"{_ints(strides)}, pads: {_ints(pads[:2])}, dilations: {_ints(dil)}, {_ints(out)})",
    )


@cpu_emitter("Resize", "Upsample")
def _resize(lw: Lowering, node: Node) -> None:
    shape, out = _shape(lw, node.inputs[0]), _shape(lw, node.outputs[0])
    if len(shape) < 2 or shape[:-2] != out[:-2]:
        raise CPURefuse("resize of axes other than the last two")

    def s(name: str) -> str:  # the schema supplies every default (Resize-11+, Upsample mode)
        return str(attr(node, name, lw.g.opset))

    mode = s("mode")
    if mode not in ("nearest", "linear", "bilinear") or attr(node, "antialias", lw.g.opset):
        raise CPURefuse(f"resize mode '{mode}'")
    new = node.op_type == "Resize" and lw.g.opset >= 11
    transform = s("coordinate_transformation_mode") if new else "asymmetric"
    if transform not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
        raise CPURefuse(f"coordinate_transformation_mode '{transform}'")
    nearest = s("nearest_mode") if new else "floor"
    x = lw.cpu_in(node.inputs[0])
    linear = "false" if mode == "nearest" else "true"
    lw.cpu_out(
        node,
        node.outputs[0],
        f'cpuResize({x}, {_ints(out)}, linear: {linear}, transform: "{transform}", '
        f'nearestMode: "{nearest}")',
    )
