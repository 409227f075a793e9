"""ONNX IR -> a Core ML ML Program, written with coremltools' MIL builder (`mb`), then
`ct.convert(program, convert_to="mlprogram")` (coremltools' documented route for a MIL
program; `skip_model_load=True` because Core ML itself cannot load a model on Linux).

Tensors keep their ONNX (NCHW) shapes; MIL ops broadcast like NumPy, so no replacements are
needed here. MIL names must be identifiers, so tensor names are sanitised; the mapping from
ONNX input/output names is kept in the manifest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir import Graph, Node
from ...semantics.attrs import attr
from ...semantics.batchnorm import bn_attrs
from ...semantics.norms import layer_norm_attrs, lrn_attrs
from ...semantics.pooling import pool_attrs
from ...semantics.records import reduce_attrs, reduced_axes, softmax_attrs
from ...semantics.shape_ops import axis_attr, slice_attrs, split_attrs, transpose_perm
from ..refusal import Refusal
from ._ct import coremltools
from .common import (
    OPS_BY_FORMAT,
    Lowered,
    Refuse,
    clip_bounds,
    const,
    conv_geometry,
    decomposed,
    deconv_crop,
    float_tensor,
    gemm_weights,
    nonempty_reduction,
    opt_const,
    pad_amounts,
    pad_mode,
    pad_value,
    pool_out,
    resize_params,
    static_shape,
    unmapped,
)


def mil_names(graph: Graph) -> dict[str, str]:
    """ONNX tensor name -> a unique MIL identifier (unchanged when it already is one)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    names = [*graph.inputs, *(o for n in graph.nodes for o in n.outputs if o)]
    for name in names:
        ident = re.sub(r"\W", "_", name)
        if not ident or ident[0].isdigit():
            ident = f"t_{ident}"
        base, i = ident, 1
        while ident in taken:
            ident, i = f"{base}_{i}", i + 1
        taken.add(ident)
        out[name] = ident
    return out


class _Ctx:
    def __init__(self, graph: Graph, names: dict[str, str]) -> None:
        self.graph, self.names, self.vars, self.lowered = graph, names, {}, Lowered()

    def x(self, name: str) -> Any:
        k = self.graph.const(name)
        if k is not None:
            k = np.asarray(k)
            return k.astype(np.float32) if k.dtype == np.float64 else k
        if name not in self.vars:
            raise Refuse(f"tensor '{name}' is not available")
        return self.vars[name]

    def out(self, n: Node, i: int = 0) -> str:
        return self.names[n.outputs[i]]

    def set(self, n: Node, v: Any, i: int = 0) -> None:
        self.vars[n.outputs[i]] = v
        self.lowered.layers.append(v.op.op_type)


Emit = Callable[[_Ctx, Node, Any], None]
MIL_OPS: dict[str, Emit] = {}


def _op(*names: str) -> Callable[[Emit], Emit]:
    def deco(fn: Emit) -> Emit:
        for n in names:
            MIL_OPS[n] = fn
            OPS_BY_FORMAT["mlprogram"].add(n)
        return fn

    return deco


_UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Softplus": "softplus",
    "Exp": "exp",
    "Erf": "erf",
    "Sqrt": "sqrt",
}


@_op(
    "Relu",
    "Sigmoid",
    "Tanh",
    "Softplus",
    "Exp",
    "Erf",
    "Sqrt",
    "LeakyRelu",
    "Elu",
    "HardSigmoid",
)
def _act(c: _Ctx, n: Node, mb: Any) -> None:
    x, nm = c.x(n.inputs[0]), c.out(n)
    if n.op_type in _UNARY:
        c.set(n, getattr(mb, _UNARY[n.op_type])(x=x, name=nm))
    elif n.op_type == "LeakyRelu":
        c.set(n, mb.leaky_relu(x=x, alpha=float(attr(n, "alpha")), name=nm))
    elif n.op_type == "Elu":
        c.set(n, mb.elu(x=x, alpha=float(attr(n, "alpha")), name=nm))
    else:  # HardSigmoid (HardSwish: decomposed into it, passes/decompose.py)
        a, b = float(attr(n, "alpha")), float(attr(n, "beta"))
        c.set(n, mb.sigmoid_hard(x=x, alpha=a, beta=b, name=nm))


@_op("Gelu")
def _gelu(c: _Ctx, n: Node, mb: Any) -> None:
    approx = attr(n, "approximate", c.graph.opset)
    mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}.get(approx)
    if mode is None:
        raise Refuse(f"Gelu approximate='{approx}' is not supported")
    c.set(n, mb.gelu(x=c.x(n.inputs[0]), mode=mode, name=c.out(n)))


@_op("LayerNormalization")
def _layernorm(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    rank = len(static_shape(g, n.inputs[0]))
    ln = layer_norm_attrs(n, g.opset, rank)
    axis = ln.axis
    if any(o for o in n.outputs[1:]):
        raise Refuse("LayerNormalization's mean / inv_std_dev outputs are not supported")
    tail = static_shape(g, n.inputs[0])[axis:]
    scale = const(g, n, 1, "scale").astype(np.float32)
    bias = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and bias is None:
        raise Refuse("LayerNormalization bias must be a constant")
    kw: dict[str, Any] = {"gamma": np.broadcast_to(scale, tail).astype(np.float32)}
    if bias is not None:
        kw["beta"] = np.broadcast_to(bias.astype(np.float32), tail).astype(np.float32)
    c.set(
        n,
        mb.layer_norm(
            x=c.x(n.inputs[0]),
            axes=list(range(axis, rank)),
            epsilon=np.float32(ln.epsilon),
            name=c.out(n),
            **kw,
        ),
    )


@_op("Clip")
def _clip(c: _Ctx, n: Node, mb: Any) -> None:
    lo, hi = clip_bounds(c.graph, n)
    x, nm = c.x(n.inputs[0]), c.out(n)
    if lo == 0.0 and hi == 6.0:
        c.set(n, mb.relu6(x=x, name=nm))
        c.lowered.fusions.append({"node": n.name, "op": "Clip(0,6)", "emitted": ["relu6"]})
    elif lo == 0.0 and hi == np.inf:
        c.set(n, mb.relu(x=x, name=nm))
    else:
        big = float(np.finfo(np.float32).max)
        c.set(
            n, mb.clip(x=x, alpha=np.float32(max(lo, -big)), beta=np.float32(min(hi, big)), name=nm)
        )


def _pad4(pads: list[int]) -> list[int]:
    t, left, b, r = pads  # ONNX: begins then ends; MIL: (before, after) per spatial axis
    return [t, b, left, r]


@_op("Conv")
def _conv(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    w = const(g, n, 1, "Conv weight").astype(np.float32)
    bias = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and bias is None:
        raise Refuse("Conv bias must be a constant")
    geo = conv_geometry(n, tuple(w.shape[2:]))
    kw: dict[str, Any] = {} if bias is None else {"bias": bias.astype(np.float32)}
    c.set(
        n,
        mb.conv(
            x=c.x(n.inputs[0]),
            weight=w,
            strides=geo["strides"],
            pad_type="custom",
            pad=_pad4(geo["pads"]),
            dilations=geo["dilations"],
            groups=int(attr(n, "group")),
            name=c.out(n),
            **kw,
        ),
    )


@_op("ConvTranspose")
def _deconv(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    w = const(g, n, 1, "ConvTranspose weight").astype(np.float32)
    bias = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and bias is None:
        raise Refuse("ConvTranspose bias must be a constant")
    geo = conv_geometry(n, tuple(w.shape[2:]))
    if any(d != 1 for d in geo["dilations"]):
        raise Refuse("dilated ConvTranspose is not supported")
    # MIL's custom pad removes pad[2i] / pad[2i+1] from the unpadded result (conv_transpose
    # doc: Dout = (Din-1)*s + k - pad_before - pad_after), as ONNX's pads do; output_padding
    # then gives back rows at the end.
    top, bot, left, right = deconv_crop(n, geo)
    kw: dict[str, Any] = {} if bias is None else {"bias": bias.astype(np.float32)}
    c.set(
        n,
        mb.conv_transpose(
            x=c.x(n.inputs[0]),
            weight=w,
            strides=geo["strides"],
            pad_type="custom",
            pad=[top, bot, left, right],
            groups=int(attr(n, "group")),
            name=c.out(n),
            **kw,
        ),
    )


@_op("Pad")
def _pad(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    mode = pad_mode(g, n)
    modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}
    if mode not in modes:
        raise Refuse(f"Pad mode '{mode}' is not supported")
    t, b, left, r = pad_amounts(g, n)
    c.set(
        n,
        mb.pad(
            x=c.x(n.inputs[0]),
            pad=np.array([t, b, left, r], np.int32),  # the last two axes (H, W)
            mode=modes[mode],
            constant_val=np.float32(pad_value(g, n)),
            name=c.out(n),
        ),
    )


@_op("InstanceNormalization")
def _instancenorm(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    if len(static_shape(g, n.inputs[0])) != 4:
        raise Refuse("only 4-D InstanceNormalization is supported")
    c.set(
        n,
        mb.instance_norm(
            x=c.x(n.inputs[0]),
            gamma=const(g, n, 1, "scale").astype(np.float32).reshape(-1),
            beta=const(g, n, 2, "bias").astype(np.float32).reshape(-1),
            epsilon=np.float32(attr(n, "epsilon", g.opset)),
            name=c.out(n),
        ),
    )


@_op("Gemm", "MatMul")
def _gemm(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    if n.op_type == "MatMul" and not g.is_const(n.inputs[1]):
        c.set(n, mb.matmul(x=c.x(n.inputs[0]), y=c.x(n.inputs[1]), name=c.out(n)))
        return
    if n.op_type == "Gemm" and len(static_shape(g, n.inputs[0])) != 2:
        raise Refuse("Gemm needs a 2-D input")
    w, bias = gemm_weights(g, n)
    kw: dict[str, Any] = {} if bias is None else {"bias": bias}
    c.set(n, mb.linear(x=c.x(n.inputs[0]), weight=w, name=c.out(n), **kw))


def _qparams(c: _Ctx, n: Node) -> tuple[float, float, int, int]:
    g = c.graph
    s = opt_const(g, n, 1)
    z = opt_const(g, n, 2)
    if s is None or np.size(s) != 1 or (z is not None and np.size(z) != 1):
        raise Refuse("only constant per-tensor activation scales / zero points are supported")
    if len(n.inputs) > 2 and n.inputs[2] and z is None:
        raise Refuse("the zero point must be a constant")
    zdt = np.dtype(np.uint8) if z is None else np.asarray(z).dtype
    if zdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise Refuse(f"{zdt} activations are not supported (int8 / uint8)")
    info = np.iinfo(zdt)
    return (
        float(np.reshape(s, ())),
        0.0 if z is None else float(np.reshape(z, ())),
        info.min,
        info.max,
    )


@_op("QuantizeLinear")
def _quantize(c: _Ctx, n: Node, mb: Any) -> None:
    # The arithmetic QuantizeLinear defines, in float: clip(round(x / s) + z, qmin, qmax).
    s, z, lo, hi = _qparams(c, n)
    nm = c.out(n)
    t = mb.round(
        x=mb.real_div(x=c.x(n.inputs[0]), y=np.float32(s), name=f"{nm}_div"), name=f"{nm}_round"
    )
    t = mb.add(x=t, y=np.float32(z), name=f"{nm}_zp")
    c.lowered.layers += ["real_div", "round", "add"]
    c.set(n, mb.clip(x=t, alpha=np.float32(lo), beta=np.float32(hi), name=nm))


@_op("DequantizeLinear")
def _dequantize(c: _Ctx, n: Node, mb: Any) -> None:
    # (q - z) * s on the float-held integer values of a QuantizeLinear above.
    s, z, _, _ = _qparams(c, n)
    x = c.x(n.inputs[0])
    if isinstance(x, np.ndarray):
        raise Refuse("a constant (fold_constants should have removed this)")
    nm = c.out(n)
    t = mb.sub(x=x, y=np.float32(z), name=f"{nm}_zp")
    c.lowered.layers.append("sub")
    c.set(n, mb.mul(x=t, y=np.float32(s), name=nm))


@_op("MaxPool", "AveragePool")
def _pool(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    if len(n.outputs) > 1 and n.outputs[1]:
        raise Refuse("MaxPool indices output is not supported")
    pa = pool_attrs(n, g.opset)
    k = list(pa.kernel_shape or ())
    geo = conv_geometry(n, tuple(k))
    if any(d != 1 for d in geo["dilations"]):
        raise Refuse("dilated pooling is not supported")
    xs, ys = static_shape(g, n.inputs[0]), static_shape(g, n.outputs[0])
    t, left, b, r = geo["pads"]
    sh, sw = geo["strides"]
    ceil = False
    if (pool_out(xs[2], k[0], sh, t, b, False), pool_out(xs[3], k[1], sw, left, r, False)) != ys[
        2:
    ]:
        # ceil_mode=1: MIL's ceil_mode (symmetric pads); max pooling only, see nn.py.
        want = (pool_out(xs[2], k[0], sh, t, b, True), pool_out(xs[3], k[1], sw, left, r, True))
        if n.op_type != "MaxPool" or t != b or left != r or want != ys[2:]:
            raise Refuse("ceil_mode=1 is supported for MaxPool with symmetric pads only")
        ceil = True
    args = dict(
        x=c.x(n.inputs[0]),
        kernel_sizes=k,
        strides=[sh, sw],
        pad_type="custom",
        pad=_pad4(geo["pads"]),
        ceil_mode=ceil,
        name=c.out(n),
    )
    if n.op_type == "MaxPool":
        c.set(n, mb.max_pool(**args))
    else:
        excl = not pa.count_include_pad
        c.set(n, mb.avg_pool(exclude_padding_from_average=excl, **args))


@_op("LRN")
def _lrn(c: _Ctx, n: Node, mb: Any) -> None:
    lr = lrn_attrs(n, c.graph.opset)
    size = lr.size
    if size % 2 == 0:
        raise Refuse("LRN with an even size centres its window differently; not supported")
    c.set(
        n,
        mb.local_response_norm(
            x=c.x(n.inputs[0]),
            size=size,
            alpha=lr.alpha,
            beta=lr.beta,
            k=lr.bias,
            name=c.out(n),
        ),
    )


@_op("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin")
def _reduce(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    rank = len(static_shape(g, n.inputs[0]))
    if n.op_type.startswith("Global"):
        axes, keep = list(range(2, rank)), True
    else:
        ra = reduced_axes(n, g, rank)
        if ra is None:
            const(g, n, 1, "axes")  # refuses, naming the input computed at run time
        if not ra and rank:
            raise Refuse("noop_with_empty_axes=1 is not supported")
        axes, keep = list(ra or ()), reduce_attrs(n, g.opset).keepdims
    nonempty_reduction(g, n, axes)
    fn = {
        "Mean": mb.reduce_mean,
        "Max": mb.reduce_max,
        "Sum": mb.reduce_sum,
        "Min": mb.reduce_min,
    }
    kind = next(k for k in fn if k in n.op_type or (k == "Mean" and "Average" in n.op_type))
    c.set(n, fn[kind](x=c.x(n.inputs[0]), axes=axes, keep_dims=keep, name=c.out(n)))


@_op("Flatten", "Reshape", "Squeeze", "Unsqueeze")
def _reshape(c: _Ctx, n: Node, mb: Any) -> None:
    ys = static_shape(c.graph, n.outputs[0])
    c.set(n, mb.reshape(x=c.x(n.inputs[0]), shape=np.array(ys, np.int32), name=c.out(n)))


@_op("Transpose")
def _transpose(c: _Ctx, n: Node, mb: Any) -> None:
    rank = len(static_shape(c.graph, n.inputs[0]))
    perm = list(transpose_perm(n, rank, c.graph.opset))
    c.set(n, mb.transpose(x=c.x(n.inputs[0]), perm=perm, name=c.out(n)))


@_op("Concat")
def _concat(c: _Ctx, n: Node, mb: Any) -> None:
    rank = len(static_shape(c.graph, n.outputs[0]))
    vals = [c.x(i) for i in n.inputs if i]
    vals = [v.astype(np.float32) if isinstance(v, np.ndarray) else v for v in vals]
    axis = axis_attr(n, c.graph.opset, rank)
    c.set(n, mb.concat(values=vals, axis=axis, name=c.out(n)))


@_op("Split")
def _split(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    xs = static_shape(g, n.inputs[0])
    axis = split_attrs(n, g.opset, len(xs)).axis
    sizes = [static_shape(g, o)[axis] for o in n.outputs]
    vs = mb.split(
        x=c.x(n.inputs[0]), split_sizes=np.array(sizes, np.int32), axis=axis, name=c.out(n)
    )
    for i, v in enumerate(vs if isinstance(vs, list | tuple) else [vs]):
        c.vars[n.outputs[i]] = v
    c.lowered.layers.append("split")


@_op("Slice")
def _slice(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    xs = static_shape(g, n.inputs[0])
    sa = slice_attrs(n, g.opset)
    if sa is not None:  # Slice-1: attributes
        starts, ends, axes, steps = sa.starts, sa.ends, sa.axes, sa.steps
    else:
        starts, ends = const(g, n, 1, "starts"), const(g, n, 2, "ends")
        axes, steps = opt_const(g, n, 3), opt_const(g, n, 4)
    rank = len(xs)
    axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
    steps = [1] * len(axes) if steps is None else [int(s) for s in steps]
    begin, end, stride = [0] * rank, list(xs), [1] * rank
    for a, st, en, sp in zip(axes, starts, ends, steps, strict=True):
        if sp <= 0:
            raise Refuse("Slice with a non-positive step is not supported")
        # Clamp as ONNX does, so MIL gets plain in-range indices.
        st, en = int(st), int(en)
        st = min(max(st + xs[a] if st < 0 else st, 0), xs[a])
        en = min(max(en + xs[a] if en < 0 else en, 0), xs[a])
        begin[a], end[a], stride[a] = st, en, sp
    c.set(
        n,
        mb.slice_by_index(
            x=c.x(n.inputs[0]),
            begin=np.array(begin, np.int32),
            end=np.array(end, np.int32),
            stride=np.array(stride, np.int32),
            name=c.out(n),
        ),
    )


@_op("Gather")
def _gather(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    idx = const(g, n, 1, "Gather's indices")
    rank = len(static_shape(g, n.inputs[0]))
    axis = axis_attr(n, g.opset, rank)
    size = static_shape(g, n.inputs[0])[axis]
    # ONNX allows negative indices; MIL's gather doc does not promise to: normalise them.
    idx = np.where(idx < 0, idx + size, idx).astype(np.int32)
    c.set(n, mb.gather(x=c.x(n.inputs[0]), indices=idx, axis=axis, name=c.out(n)))


@_op("Softmax")
def _softmax(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    rank = len(static_shape(g, n.inputs[0]))
    sm = softmax_attrs(n, g.opset)
    axis = sm.axis % rank
    if sm.flattens and axis != rank - 1:
        raise Refuse("opset < 13 Softmax flattens trailing axes; only the last axis is supported")
    c.set(n, mb.softmax(x=c.x(n.inputs[0]), axis=axis, name=c.out(n)))


@_op("Resize", "Upsample")
def _resize(c: _Ctx, n: Node, mb: Any) -> None:
    p = resize_params(c.graph, n)
    x = c.x(n.inputs[0])
    if p["mode"] == "nearest":
        c.set(
            n,
            mb.upsample_nearest_neighbor(
                x=x, scale_factor_height=p["sh"], scale_factor_width=p["sw"], name=c.out(n)
            ),
        )
    else:
        c.set(
            n,
            mb.upsample_bilinear(
                x=x,
                scale_factor_height=float(p["sh"]),
                scale_factor_width=float(p["sw"]),
                align_corners=p["align_corners"],
                name=c.out(n),
            ),
        )


@_op("BatchNormalization")
def _bn(c: _Ctx, n: Node, mb: Any) -> None:
    g = c.graph
    gamma, beta, mean, var = (
        const(g, n, i, "BN parameter").astype(np.float32) for i in (1, 2, 3, 4)
    )
    c.set(
        n,
        mb.batch_norm(
            x=c.x(n.inputs[0]),
            mean=mean,
            variance=var,
            gamma=gamma,
            beta=beta,
            epsilon=bn_attrs(n, g.opset).epsilon,
            name=c.out(n),
        ),
    )


@_op("Add", "Sub", "Mul", "Div")
def _binary(c: _Ctx, n: Node, mb: Any) -> None:
    fn = {"Add": mb.add, "Sub": mb.sub, "Mul": mb.mul, "Div": mb.real_div}[n.op_type]
    a, b = (c.x(i) for i in n.inputs[:2])
    a, b = (v.astype(np.float32) if isinstance(v, np.ndarray) else v for v in (a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        raise Refuse("both operands constant (fold_constants should have removed this)")
    c.set(n, fn(x=a, y=b, name=c.out(n)))


@_op("Identity")
def _identity(c: _Ctx, n: Node, mb: Any) -> None:
    x = c.x(n.inputs[0])
    if isinstance(x, np.ndarray):
        raise Refuse("a constant (fold_constants should have removed this)")
    c.set(n, mb.identity(x=x, name=c.out(n)))


@_op("Neg")
def _neg(c: _Ctx, n: Node, mb: Any) -> None:
    c.set(n, mb.mul(x=c.x(n.inputs[0]), y=np.float32(-1.0), name=c.out(n)))


_COMPARE = {
    "Greater": "greater",
    "Less": "less",
    "GreaterOrEqual": "greater_equal",
    "LessOrEqual": "less_equal",
}


@_op(*_COMPARE)
def _compare(c: _Ctx, n: Node, mb: Any) -> None:
    # bool results: the condition of a Where (tf2onnx's tf.cond gate, lowered from If).
    a, b = (c.x(i) for i in n.inputs[:2])
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        raise Refuse("both operands constant (fold_constants should have removed this)")
    a, b = (v.astype(np.float32) if isinstance(v, np.ndarray) else v for v in (a, b))
    fn = getattr(mb, _COMPARE[n.op_type])
    c.set(n, fn(x=a, y=b, name=c.out(n)))


@_op("Where")
def _where(c: _Ctx, n: Node, mb: Any) -> None:
    cond, a, b = (c.x(i) for i in n.inputs[:3])
    if isinstance(cond, np.ndarray):
        raise Refuse("a constant condition (fold_constants should have removed this)")
    a, b = (v.astype(np.float32) if isinstance(v, np.ndarray) else v for v in (a, b))
    c.set(n, mb.select(cond=cond, a=a, b=b, name=c.out(n)))


def _emit_one(ctx: _Ctx, n: Node, mb: Any) -> Refuse | None:
    """Emit one node; why it is refused, or None."""
    emit = MIL_OPS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
    try:
        if (dynamic := Refusal.dynamic(ctx.graph, n)) is not None:
            raise Refuse(dynamic.reason, dynamic.fix)
        if emit is None:
            raise unmapped(n, "mlprogram")
        for o in n.outputs[1:]:
            if o and n.op_type not in ("Split", "LayerNormalization"):
                raise Refuse("extra outputs are not supported")
        emit(ctx, n, mb)
    except Refuse as e:
        return e
    except (ValueError, TypeError, AssertionError) as e:  # MIL's own type checks
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Refuse(f"MIL rejected it: {msg}")
    return None


def _alone(graph: Graph, n: Node, names: dict[str, str]) -> Refuse | None:
    """Why node n is refused when emitted alone, its tensor inputs as placeholders (for
    nodes downstream of a refused one, and when the graph's own inputs are refused)."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, types

    dtypes = {np.dtype(np.float32): types.fp32, np.dtype(np.bool_): types.bool}
    specs = {}
    try:
        for i in n.inputs:
            if i and not graph.is_const(i) and names[i] not in specs:
                t = graph.type_of(i)
                dt = dtypes.get(np.dtype(t.dtype), types.int32) if t is not None else types.fp32
                shape = static_shape(graph, i)
                if not shape:  # MIL placeholders (function inputs) have rank >= 1
                    return Refuse(f"rank-0 input '{i}' cannot be judged apart from its producer")
                specs[names[i]] = mb.placeholder(shape=shape, dtype=dt)
    except Refuse as e:
        return e
    with Function(specs) as fn:
        ctx = _Ctx(graph, names)
        for i in n.inputs:
            if i and i in names and names[i] in fn.inputs:
                ctx.vars[i] = fn.inputs[names[i]]
        return _emit_one(ctx, n, mb)


def check(graph: Graph) -> list[Refusal]:
    return build_program(graph, collect=True)[1]


def build_program(graph: Graph, *, collect: bool = False) -> tuple[Any, list[Refusal], Lowered]:
    """(MIL program, refusals, lowered). With collect=False the first refusal raises."""
    coremltools()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program

    names = mil_names(graph)
    refusals: list[Refusal] = []
    try:
        for name in (*graph.inputs, *graph.outputs):
            float_tensor(graph, name)
            static_shape(graph, name)
    except Refuse as e:
        if not collect:
            raise
        # Still judge every node on its own, so one run names all the work.
        each = [
            Refusal.of(n, graph.opset, str(why), why.fix)
            for n in graph.nodes
            if (why := _alone(graph, n, names)) is not None
        ]
        return None, [Refusal.graph(f"graph inputs/outputs: {e}", e.fix), *each], Lowered()
    specs = {names[i]: mb.placeholder(shape=static_shape(graph, i)) for i in graph.inputs}
    prog = Program()
    with Function(specs) as fn:
        ctx = _Ctx(graph, names)
        for i in graph.inputs:
            ctx.vars[i] = fn.inputs[names[i]]
        skipped: set[str] = set()  # outputs of refused nodes
        for n in graph.nodes:
            if any(i in skipped for i in n.inputs):
                # Its input comes from a refused node: judge it on placeholders instead.
                skipped.update(n.outputs)
                if collect and (why := _alone(graph, n, names)) is not None:
                    refusals.append(Refusal.of(n, graph.opset, str(why), why.fix))
                continue
            why = _emit_one(ctx, n, mb)
            if why is not None:
                if not collect:
                    raise Refuse(f"{n.name} ({n.op_type}): {why}", why.fix)
                refusals.append(Refusal.of(n, graph.opset, str(why), why.fix))
                skipped.update(n.outputs)
        if refusals:
            return None, refusals, ctx.lowered
        outs = []
        for o in graph.outputs:
            v = ctx.x(o)
            if isinstance(v, np.ndarray):
                raise Refuse(f"output '{o}' is a constant")
            if v.name != names[o]:  # an output that is also a graph input, or renamed
                v = mb.identity(x=v, name=names[o])
            outs.append(v)
        fn.set_outputs(outs)
    prog.add_function("main", fn)
    return prog, refusals, ctx.lowered


def node_reasons(graph: Graph) -> dict[str, str]:
    """node name -> why the mlprogram emitter refuses it (absent when it is emitted)."""
    return {k: r.reason for k, r in node_refusals(graph).items()}


def node_refusals(graph: Graph) -> dict[str, Refusal]:
    """node name -> the mlprogram emitter's refusal of it (its reason and fix)."""
    graph, origin = decomposed(graph)  # a decomposed op is judged by its parts
    _, refusals, _ = build_program(graph, collect=True)
    out: dict[str, Refusal] = {}
    for r in refusals:
        if r.node is not None:
            out.setdefault(origin.get(r.node, r.node), r)
    return out
