"""ONNX IR -> Core ML NeuralNetwork (.mlmodel) with coremltools' `NeuralNetworkBuilder`.

Only the Core ML 2 era layers that keep the rank-5 (Seq, Batch, C, H, W) mapping are used,
because those are what the Neural Engine runs (seed 004; hollance/neural-engine,
docs/unsupported-layers.md): no "Broadcastable" or "ND" layers. Every ONNX op that a generic
converter would map to one of those is rewritten with the older layers and listed in
`Lowered.replacements`: Add -> Add, Mul -> Multiply / Scale, Concat -> Concat, constants ->
LoadConstant (rank 3), Sub -> linear Activation (alpha = -1) then Add.

Tensors are batch 1: an ONNX (1, C, H, W) tensor is the rank-4 blob (1, C, H, W) of the
exact array mapping (the layers read its last three axes as C, H, W) and an ONNX (1, N)
tensor is (1, N, 1, 1), so Gemm maps onto InnerProduct.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...ir import Graph, Node
from ...semantics.attrs import attr
from ...semantics.batchnorm import bn_attrs
from ...semantics.norms import lrn_attrs
from ...semantics.pooling import pool_attrs
from ...semantics.records import reduced_axes, softmax_attrs
from ...semantics.shape_ops import axis_attr, slice_attrs, split_attrs
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


def chw(graph: Graph, name: str) -> tuple[int, int, int]:
    """The Core ML blob shape (C, H, W) of a batch-1 ONNX tensor."""
    s = static_shape(graph, name)
    if len(s) == 4 and s[0] == 1:
        return (s[1], s[2], s[3])
    if len(s) == 2 and s[0] == 1:
        return (s[1], 1, 1)
    raise Refuse(
        f"tensor '{name}' has shape {list(s)}; the neuralnetwork format takes batch-1 "
        "(1,C,H,W) or (1,N) tensors (use --format mlprogram)"
    )


class _Ctx:
    def __init__(self, graph: Graph, builder: Any) -> None:
        self.graph, self.b, self.lowered = graph, builder, Lowered()
        self._n = 0

    def tmp(self, base: str) -> str:
        self._n += 1
        return f"{base}__o2e{self._n}"

    def layer(self, kind: str) -> None:
        self.lowered.layers.append(kind)

    def replaced(self, node: Node, instead_of: str, emitted: list[str]) -> None:
        self.lowered.replacements.append(
            {"node": node.name, "op": node.op_type, "instead_of": instead_of, "emitted": emitted}
        )


Emit = Callable[[_Ctx, Node], None]
NN_OPS: dict[str, Emit] = {}


def _op(*names: str) -> Callable[[Emit], Emit]:
    def deco(fn: Emit) -> Emit:
        for n in names:
            NN_OPS[n] = fn
            OPS_BY_FORMAT["neuralnetwork"].add(n)
        return fn

    return deco


_ACT = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Softplus": "SOFTPLUS"}


@_op("Relu", "Sigmoid", "Tanh", "Softplus", "LeakyRelu", "Elu", "HardSigmoid")
def _activation(c: _Ctx, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    chw(c.graph, x)
    if n.op_type in _ACT:
        c.b.add_activation(n.name, _ACT[n.op_type], x, y)
    elif n.op_type == "LeakyRelu":
        c.b.add_activation(n.name, "LEAKYRELU", x, y, params=[float(attr(n, "alpha"))])
    elif n.op_type == "Elu":
        c.b.add_activation(n.name, "ELU", x, y, params=float(attr(n, "alpha")))
    else:  # HardSigmoid: Core ML's SIGMOID_HARD is min(max(alpha*x + beta, 0), 1) as in ONNX
        ab = [float(attr(n, "alpha")), float(attr(n, "beta"))]
        c.b.add_activation(n.name, "SIGMOID_HARD", x, y, params=ab)
    c.layer("activation")


@_op("Clip")
def _clip(c: _Ctx, n: Node) -> None:
    lo, hi = clip_bounds(c.graph, n)
    x, y = n.inputs[0], n.outputs[0]
    chw(c.graph, x)
    if lo == 0.0 and hi == np.inf:
        c.b.add_activation(n.name, "RELU", x, y)
        c.layer("activation")
        return
    big = float(np.finfo(np.float32).max)
    c.b.add_clip(n.name, x, y, min_value=max(lo, -big), max_value=min(hi, big))
    c.layer("clip")


@_op("Conv")
def _conv(c: _Ctx, n: Node) -> None:
    g = c.graph
    w = const(g, n, 1, "Conv weight").astype(np.float32)
    bias = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and bias is None:
        raise Refuse("Conv bias must be a constant")
    cin = chw(g, n.inputs[0])[0]
    chw(g, n.outputs[0])
    geo = conv_geometry(n, tuple(w.shape[2:]))
    groups = int(attr(n, "group"))
    t, left, bot, r = geo["pads"]
    c.b.add_convolution(
        n.name,
        kernel_channels=cin // groups,
        output_channels=w.shape[0],
        height=w.shape[2],
        width=w.shape[3],
        stride_height=geo["strides"][0],
        stride_width=geo["strides"][1],
        border_mode="valid",
        groups=groups,
        W=np.ascontiguousarray(w.transpose(2, 3, 1, 0)),  # builder layout (kH, kW, Cin/g, Cout)
        b=None if bias is None else bias.astype(np.float32),
        has_bias=bias is not None,
        input_name=n.inputs[0],
        output_name=n.outputs[0],
        dilation_factors=geo["dilations"],
        padding_top=t,
        padding_bottom=bot,
        padding_left=left,
        padding_right=r,
    )
    c.layer("convolution")


@_op("ConvTranspose")
def _deconv(c: _Ctx, n: Node) -> None:
    g = c.graph
    w = const(g, n, 1, "ConvTranspose weight").astype(np.float32)
    bias = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and bias is None:
        raise Refuse("ConvTranspose bias must be a constant")
    geo = conv_geometry(n, tuple(w.shape[2:]))
    if any(d != 1 for d in geo["dilations"]):
        raise Refuse("dilated ConvTranspose is not supported")
    top, bot, left, right = deconv_crop(n, geo)
    groups = int(attr(n, "group"))
    cin, ih, iw = chw(g, n.inputs[0])
    oc = chw(g, n.outputs[0])[0]
    sh, sw = geo["strides"]
    # The unpadded result ((H-1)*s + k), then a Crop layer: NeuralNetwork.proto's
    # deconvolution padding rules are not documented precisely enough to map ONNX pads onto
    # them, while Crop's border amounts are (the old onnx-coreml converter did the same).
    full = ((ih - 1) * sh + w.shape[2], (iw - 1) * sw + w.shape[3])
    crop = any((top, bot, left, right))
    y = c.tmp(n.outputs[0]) if crop else n.outputs[0]
    c.b.add_convolution(
        n.name,
        kernel_channels=cin,
        output_channels=oc,
        height=w.shape[2],
        width=w.shape[3],
        stride_height=sh,
        stride_width=sw,
        border_mode="valid",
        groups=groups,
        # builder layout for deconvolution: (kH, kW, Cin, Cout/groups)
        W=np.ascontiguousarray(w.transpose(2, 3, 0, 1)),
        b=None if bias is None else bias.astype(np.float32),
        has_bias=bias is not None,
        is_deconv=True,
        output_shape=full,
        input_name=n.inputs[0],
        output_name=y,
    )
    c.layer("convolution(deconv)")
    if crop:
        c.b.add_crop(c.tmp(n.name), left, right, top, bot, [0, 0], [y], n.outputs[0])
        c.layer("crop")


_NN_PAD = {"constant": "constant", "reflect": "reflection", "edge": "replication"}


@_op("Pad")
def _pad(c: _Ctx, n: Node) -> None:
    g = c.graph
    mode = pad_mode(g, n)
    if mode not in _NN_PAD:
        raise Refuse(f"Pad mode '{mode}' is not supported")
    t, b, left, r = pad_amounts(g, n)
    _, h, w = chw(g, n.inputs[0])
    if mode == "reflect" and (max(t, b) >= h or max(left, r) >= w):
        raise Refuse("reflect pads must be smaller than the padded axis")
    c.b.add_padding(
        n.name,
        left=left,
        right=r,
        top=t,
        bottom=b,
        value=pad_value(g, n),
        input_name=n.inputs[0],
        output_name=n.outputs[0],
        padding_type=_NN_PAD[mode],
    )
    c.layer("padding")


@_op("InstanceNormalization")
def _instancenorm(c: _Ctx, n: Node) -> None:
    # BatchNorm with computeMeanVar + instanceNormalization: statistics of this instance
    # over H and W (NeuralNetwork.proto, BatchnormLayerParams) = ONNX InstanceNormalization.
    g = c.graph
    ch = chw(g, n.inputs[0])[0]
    if len(static_shape(g, n.inputs[0])) != 4:
        raise Refuse("only 4-D InstanceNormalization is supported")
    gamma = const(g, n, 1, "InstanceNormalization scale").astype(np.float32).reshape(-1)
    beta = const(g, n, 2, "InstanceNormalization bias").astype(np.float32).reshape(-1)
    zeros = np.zeros(ch, np.float32)
    c.b.add_batchnorm(
        n.name,
        ch,
        gamma,
        beta,
        zeros,
        np.ones(ch, np.float32),
        n.inputs[0],
        n.outputs[0],
        compute_mean_var=True,
        instance_normalization=True,
        epsilon=float(attr(n, "epsilon", c.graph.opset)),
    )
    c.layer("batchnorm(instance)")


@_op("Gemm", "MatMul")
def _gemm(c: _Ctx, n: Node) -> None:
    g = c.graph
    if len(static_shape(g, n.inputs[0])) != 2:
        raise Refuse("only (1, K) inputs map onto InnerProduct")
    w, bias = gemm_weights(g, n)
    c.b.add_inner_product(
        n.name,
        W=w,
        b=bias,
        input_channels=w.shape[1],
        output_channels=w.shape[0],
        has_bias=bias is not None,
        input_name=n.inputs[0],
        output_name=n.outputs[0],
    )
    c.layer("innerProduct")


def _pool_type(n: Node) -> str:
    return "MAX" if "Max" in n.op_type else "AVERAGE"


@_op("MaxPool", "AveragePool")
def _pool(c: _Ctx, n: Node) -> None:
    g = c.graph
    if len(n.outputs) > 1 and n.outputs[1]:
        raise Refuse("MaxPool indices output is not supported")
    pa = pool_attrs(n, g.opset)
    k = list(pa.kernel_shape or ())
    geo = conv_geometry(n, tuple(k))
    if any(d != 1 for d in geo["dilations"]):
        raise Refuse("dilated pooling is not supported")
    _, ih, iw = chw(g, n.inputs[0])
    _, oh, ow = chw(g, n.outputs[0])
    t, left, bot, r = geo["pads"]
    sh, sw = geo["strides"]
    floor = (pool_out(ih, k[0], sh, t, bot, False), pool_out(iw, k[1], sw, left, r, False))
    padding = "VALID"
    if floor != (oh, ow):
        # ceil_mode=1 (Caffe-style nets): INCLUDE_LAST_PIXEL pads the end so the last window
        # fits. Only for max pooling with symmetric pads, where padded cells never win; the
        # averaging divisor of partial windows is not specified the same way.
        if n.op_type != "MaxPool" or t != bot or left != r:
            raise Refuse("ceil_mode=1 is supported for MaxPool with symmetric pads only")
        want = (pool_out(ih, k[0], sh, t, t, True), pool_out(iw, k[1], sw, left, left, True))
        # NeuralNetwork.proto ValidCompletePadding: ceil((H + 2p - k) / s) + 1, no drop rule.
        plain = (-(-(ih + 2 * t - k[0]) // sh) + 1, -(-(iw + 2 * left - k[1]) // sw) + 1)
        if want != (oh, ow) or plain != (oh, ow):
            raise Refuse(f"ceil_mode output {list(want)} differs from ONNX's {[oh, ow]}")
        padding = "INCLUDE_LAST_PIXEL"
    c.b.add_pooling(
        n.name,
        height=k[0],
        width=k[1],
        stride_height=sh,
        stride_width=sw,
        layer_type=_pool_type(n),
        padding_type=padding,
        input_name=n.inputs[0],
        output_name=n.outputs[0],
        exclude_pad_area=not pa.count_include_pad,
        padding_top=t,
        padding_bottom=bot,
        padding_left=left,
        padding_right=r,
    )
    c.layer("pooling")


@_op("LRN")
def _lrn(c: _Ctx, n: Node) -> None:
    lr = lrn_attrs(n, c.graph.opset)
    size = lr.size
    if size % 2 == 0:
        raise Refuse("LRN with an even size centres its window differently; not supported")
    chw(c.graph, n.inputs[0])
    c.b.add_lrn(
        n.name,
        n.inputs[0],
        n.outputs[0],
        alpha=lr.alpha,
        beta=lr.beta,
        local_size=size,
        k=lr.bias,
    )
    c.layer("lrn")


@_op("GlobalAveragePool", "GlobalMaxPool")
def _gpool(c: _Ctx, n: Node) -> None:
    chw(c.graph, n.inputs[0])
    c.b.add_pooling(
        n.name, 1, 1, 1, 1, _pool_type(n), "VALID", n.inputs[0], n.outputs[0], is_global=True
    )
    c.layer("pooling(global)")


def _reduce_axes(g: Graph, n: Node) -> list[int]:
    """semantics.records.reduced_axes ([] with noop_with_empty_axes); computed axes refuse."""
    axes = reduced_axes(n, g, len(static_shape(g, n.inputs[0])))
    if axes is None:
        const(g, n, 1, "axes")  # refuses, naming the input computed at run time
    return list(axes or ())


@_op("ReduceMean", "ReduceMax")
def _reduce(c: _Ctx, n: Node) -> None:
    g = c.graph
    if len(static_shape(g, n.inputs[0])) != 4 or _reduce_axes(g, n) != [2, 3]:
        raise Refuse("only reductions over H and W of a 4-D tensor are supported")
    nonempty_reduction(g, n, [2, 3])
    mode = "avg" if n.op_type == "ReduceMean" else "max"
    c.b.add_reduce(n.name, n.inputs[0], n.outputs[0], axis="HW", mode=mode)
    c.layer("reduce")


@_op("Flatten", "Reshape")
def _flatten(c: _Ctx, n: Node) -> None:
    g = c.graph
    xs, ys = static_shape(g, n.inputs[0]), static_shape(g, n.outputs[0])
    if not (xs[:1] == (1,) and len(ys) == 2 and ys[0] == 1):
        raise Refuse(
            f"only (1, ...) -> (1, N) reshapes are supported, not {list(xs)} -> {list(ys)}"
        )
    chw(g, n.inputs[0])
    # CHANNEL_FIRST flattening keeps ONNX's row-major order of (C, H, W).
    c.b.add_flatten(n.name, 0, n.inputs[0], n.outputs[0])
    c.layer("flatten")


@_op("Concat")
def _concat(c: _Ctx, n: Node) -> None:
    g = c.graph
    rank = len(static_shape(g, n.outputs[0]))
    if axis_attr(n, g.opset, rank) != 1:
        raise Refuse("only channel concatenation (axis 1) maps onto the Concat layer")
    ins = [i for i in n.inputs if i]
    for i in ins:
        if g.is_const(i):
            raise Refuse("constant Concat operands are not supported")
        chw(g, i)
    c.b.add_elementwise(n.name, ins, n.outputs[0], "CONCAT")
    c.layer("concat")
    c.replaced(n, "ConcatND", ["concat"])


@_op("Softmax")
def _softmax(c: _Ctx, n: Node) -> None:
    g = c.graph
    s = static_shape(g, n.inputs[0])
    sm = softmax_attrs(n, g.opset)
    axis = sm.axis % len(s)
    chw(g, n.inputs[0])
    spatial_one = len(s) == 2 or s[2] == s[3] == 1
    if not (axis == 1 and (spatial_one or not sm.flattens)):
        raise Refuse("only softmax over channels is supported")
    c.b.add_softmax(n.name, n.inputs[0], n.outputs[0])
    c.layer("softmax")


@_op("Resize", "Upsample")
def _resize(c: _Ctx, n: Node) -> None:
    p = resize_params(c.graph, n)
    if p["mode"] == "nearest":
        c.b.add_upsample(n.name, p["sh"], p["sw"], n.inputs[0], n.outputs[0], mode="NN")
    else:
        lum = "ALIGN_CORNERS_TRUE" if p["align_corners"] else "ALIGN_CORNERS_FALSE"
        c.b.add_upsample(
            n.name,
            p["sh"],
            p["sw"],
            n.inputs[0],
            n.outputs[0],
            "BILINEAR",
            linear_upsample_mode=lum,
        )
    c.layer("upsample")


@_op("Identity")
def _identity(c: _Ctx, n: Node) -> None:
    # What remove_identity keeps (next to a graph input or output): a linear activation.
    chw(c.graph, n.inputs[0])
    c.b.add_activation(n.name, "LINEAR", n.inputs[0], n.outputs[0], params=[1.0, 0.0])
    c.layer("activation")


@_op("Exp")
def _exp(c: _Ctx, n: Node) -> None:
    # UnaryFunctionLayerParams EXP: a Core ML 2 layer of any rank (not an ND layer).
    chw(c.graph, n.inputs[0])
    c.b.add_unary(n.name, n.inputs[0], n.outputs[0], "exp")
    c.layer("unary")


def _channel_axis(g: Graph, name: str, axis: int) -> str:
    """The legacy layer axis ('channel' / 'height' / 'width') an ONNX axis of a batch-1
    tensor is; rank-2 (1, N) tensors are (1, N, 1, 1) blobs, so their axis 1 is 'channel'."""
    rank = len(static_shape(g, name))
    axis %= rank
    if axis == 0:
        raise Refuse("slicing or splitting the batch axis is not supported")
    return ("channel", "height", "width")[axis - 1]


@_op("Split")
def _split(c: _Ctx, n: Node) -> None:
    # SplitLayerParams: equal parts along the channel axis (-3), a Core ML 2 layer.
    g = c.graph
    chw(g, n.inputs[0])
    if _channel_axis(g, n.inputs[0], split_attrs(n, g.opset).axis) != "channel":
        raise Refuse("only channel splits (axis 1) map onto the Split layer")
    sizes = {static_shape(g, o)[1] for o in n.outputs if o}
    if len(sizes) != 1 or not all(n.outputs):
        raise Refuse("only equal channel splits map onto the Split layer")
    c.b.add_split(n.name, n.inputs[0], list(n.outputs))
    c.layer("split")


@_op("Slice")
def _slice(c: _Ctx, n: Node) -> None:
    # SliceLayerParams: one of channel / height / width, positive stride; one layer per axis.
    g = c.graph
    sa = slice_attrs(n, g.opset)
    if sa is not None:  # Slice-1: attributes
        starts, ends, axes, steps = sa.starts, sa.ends, sa.axes, sa.steps
    else:
        starts, ends = const(g, n, 1, "starts"), const(g, n, 2, "ends")
        axes, steps = opt_const(g, n, 3), opt_const(g, n, 4)
    shape = static_shape(g, n.inputs[0])
    chw(g, n.inputs[0])
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(axes) if steps is None else [int(v) for v in steps]
    cuts = []
    for a, b0, e0, st in zip(axes, starts, ends, steps, strict=True):
        a %= len(shape)
        if st <= 0:
            raise Refuse("only positive Slice steps map onto the Slice layer")
        lo, hi, _ = slice(int(b0), int(e0), st).indices(shape[a])
        if hi <= lo:
            raise Refuse("empty slices are not supported")
        if (lo, hi, st) != (0, shape[a], 1):
            cuts.append((_channel_axis(g, n.inputs[0], a), lo, hi, st))
    x = n.inputs[0]
    if not cuts:  # a full slice: an identity (linear activation)
        c.b.add_activation(n.name, "LINEAR", x, n.outputs[0], params=[1.0, 0.0])
        c.layer("activation")
        return
    for i, (axis, lo, hi, st) in enumerate(cuts):
        y = n.outputs[0] if i == len(cuts) - 1 else c.tmp(n.outputs[0])
        c.b.add_slice(n.name if i == 0 else c.tmp(n.name), x, y, axis, lo, hi, st)
        c.layer("slice")
        x = y


@_op("BatchNormalization")
def _bn(c: _Ctx, n: Node) -> None:
    g = c.graph
    ch = chw(g, n.inputs[0])[0]
    gamma, beta, mean, var = (
        const(g, n, i, "BN parameter").astype(np.float32) for i in (1, 2, 3, 4)
    )
    c.b.add_batchnorm(
        n.name,
        ch,
        gamma,
        beta,
        mean,
        var,
        n.inputs[0],
        n.outputs[0],
        epsilon=bn_attrs(n, g.opset).epsilon,
    )
    c.layer("batchnorm")


# --- elementwise: the seed-004 replacements --------------------------------------------------
def _legacy_broadcast(full: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Shapes Add / Multiply accept beside a full (C,H,W) blob (NeuralNetwork.proto,
    AddLayerParams / MultiplyLayerParams: [1,1,1], [C,1,1], [1,H,W], [C,H,W])."""
    c, h, w = full
    return other in ((1, 1, 1), (c, 1, 1), (1, h, w), (c, h, w))


def _const_operand(
    c: _Ctx, n: Node, x: str, k: np.ndarray, op: str, y: str, like: str | None = None
) -> list[str]:
    """x (op) k for a constant k: one-input Add/Multiply (scalar alpha), Scale (per channel)
    or LoadConstant + Add/Multiply (full blob). `like` names the ONNX tensor whose shape x
    has when x is one of our intermediate blobs."""
    shape = chw(c.graph, like or x)
    out = chw(c.graph, y)
    if out != shape:
        raise Refuse("the constant operand broadcasts the activation to a larger shape")
    k = np.asarray(k, dtype=np.float32)
    mode = "ADD" if op == "add" else "MULTIPLY"
    if k.size == 1:
        c.b.add_elementwise(n.name, [x], y, mode, alpha=float(k.reshape(())))
        return [op]
    try:
        full = np.broadcast_to(k, static_shape(c.graph, y)).reshape(shape)
    except ValueError:
        raise Refuse(
            f"constant of shape {list(k.shape)} does not broadcast to the output"
        ) from None
    per_channel = np.all(full == full[:, :1, :1])
    if per_channel:
        v = np.ascontiguousarray(full[:, 0, 0])
        if op == "add":
            c.b.add_scale(n.name, np.ones(1, np.float32), v, True, x, y, [1], [shape[0]])
        else:
            c.b.add_scale(n.name, v, None, False, x, y, [shape[0]])
        return ["scale"]
    kname = c.tmp(f"{n.name}_const")
    c.b.add_load_constant(kname, kname, np.ascontiguousarray(full).reshape(-1), list(shape))
    c.b.add_elementwise(n.name, [x, kname], y, mode)
    return ["loadConstant", op]


@_op("Add", "Mul", "Sub", "Div")
def _binary(c: _Ctx, n: Node) -> None:
    g = c.graph
    a, b2 = n.inputs[0], n.inputs[1]
    ka, kb = g.const(a), g.const(b2)
    op = n.op_type
    instead = {
        "Add": "AddBroadcastable",
        "Mul": "MultiplyBroadcastable",
        "Sub": "SubtractBroadcastable",
        "Div": "DivideBroadcastable",
    }[op]
    y = n.outputs[0]
    if ka is not None and kb is not None:
        raise Refuse("both operands constant (fold_constants should have removed this)")
    if ka is not None or kb is not None:
        x, k = (b2, ka) if ka is not None else (a, kb)
        k = np.asarray(k, dtype=np.float64)
        if op == "Sub" and kb is not None:
            emitted = _const_operand(c, n, x, -k, "add", y)
        elif op == "Div" and kb is not None:
            emitted = _const_operand(c, n, x, 1.0 / k, "multiply", y)
        elif op in ("Add", "Mul"):
            emitted = _const_operand(c, n, x, k, "add" if op == "Add" else "multiply", y)
        elif op == "Sub":  # k - x = (-1)*x + k
            neg = c.tmp(y)
            c.b.add_activation(c.tmp(n.name), "LINEAR", x, neg, params=[-1.0, 0.0])
            n2 = n.replace(name=n.name)
            emitted = ["activation LINEAR(-1)"] + _const_operand(c, n2, neg, k, "add", y, like=x)
        else:
            raise Refuse("division by a tensor is not supported in the neuralnetwork format")
        for e in emitted:
            c.layer(e.split()[0])
        c.replaced(n, instead, emitted)
        return
    if op == "Div":
        raise Refuse("division by a tensor is not supported in the neuralnetwork format")
    sa, sb, sy = chw(g, a), chw(g, b2), chw(g, y)
    # Output shape is that of the first input: put the full-shaped operand first.
    first, second = (a, b2) if sa == sy else (b2, a)
    if chw(g, first) != sy or not _legacy_broadcast(sy, chw(g, second)):
        raise Refuse(f"broadcast of {list(sa)} and {list(sb)} is beyond the Add/Multiply layers")
    if op == "Sub":
        src = b2
        neg = c.tmp(y)
        c.b.add_activation(c.tmp(n.name), "LINEAR", src, neg, params=[-1.0, 0.0])
        ins = [a, neg] if first == a else [neg, a]
        c.b.add_elementwise(n.name, ins, y, "ADD")
        c.layer("activation")
        c.layer("add")
        c.replaced(n, instead, ["activation LINEAR(alpha=-1)", "add"])
        return
    mode = "ADD" if op == "Add" else "MULTIPLY"
    c.b.add_elementwise(n.name, [first, second], y, mode)
    c.layer(mode.lower())
    c.replaced(n, instead, [mode.lower()])


def check(graph: Graph) -> list[Refusal]:
    """Every node the neuralnetwork emitter refuses (emits into a throwaway builder)."""
    return build(graph, collect=True)[1]


def _features(graph: Graph, names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """FLOAT32 multi-arrays of the ONNX tensors' own shapes, batch included (what
    ct.convert(convert_to="neuralnetwork") declares)."""
    from coremltools.models import datatypes

    out = []
    for name in names:
        float_tensor(graph, name)
        chw(graph, name)
        out.append((name, datatypes.Array(*static_shape(graph, name))))
    return out


def _blob4(name: str) -> str:
    return f"{name}__o2e_rank4"


def build(graph: Graph, *, collect: bool = False) -> tuple[Any, list[Refusal], Lowered]:
    """(spec, refusals, lowered). With collect=False the first refusal raises Refuse.

    EXACT_ARRAY_MAPPING, specification version 4 (iOS 13), as coremltools'
    ct.convert(convert_to="neuralnetwork") writes: Core ML's validator refuses the rank-5
    mapping as soon as one layer is from version 4 or later (clip, a bilinear upsample with
    a linearUpsampleMode), and only the exact mapping declares the batch dimension. The
    layers stay the rank-agnostic Core ML 2 ones, which read the last three axes as
    (C, H, W) of a rank-4 blob (NeuralNetwork.proto). A (1, N) graph input or output is the
    rank-4 blob (1, N, 1, 1) inside, reshaped at the edge (one reshapeStatic layer)."""
    coremltools()
    from coremltools.models.neural_network import NeuralNetworkBuilder

    refusals: list[Refusal] = []
    try:
        ins, outs = _features(graph, graph.inputs), _features(graph, graph.outputs)
    except Refuse as e:
        if not collect:
            raise
        # Still judge every node on its own, so one run names all the work.
        why = node_refusals(graph)[0]
        each = [why[n.name] for n in graph.nodes if n.name in why]
        return None, [Refusal.graph(f"graph inputs/outputs: {e}", e.fix), *each], Lowered()
    b = NeuralNetworkBuilder(ins, outs, disable_rank5_shape_mapping=True, use_float_arraytype=True)
    ctx = _Ctx(graph, b)
    rank2_in = [i for i in graph.inputs if len(static_shape(graph, i)) == 2]
    rank2_out = [o for o in graph.outputs if len(static_shape(graph, o)) == 2]
    renamed = {i: _blob4(i) for i in rank2_in}
    renamed.update({o: _blob4(o) for o in rank2_out if o not in renamed})
    for i in rank2_in:
        b.add_reshape_static(_blob4(i), i, _blob4(i), [1, chw(graph, i)[0], 1, 1])
        ctx.layer("reshapeStatic")
    for n in graph.nodes:
        try:
            _emit(ctx, n)
        except Refuse as e:
            if not collect:
                raise Refuse(f"{n.name} ({n.op_type}): {e}", e.fix) from None
            refusals.append(Refusal.of(n, graph.opset, str(e), e.fix))
    for o in rank2_out:
        if o in rank2_in:  # an input passed straight through
            continue
        b.add_reshape_static(_blob4(o), _blob4(o), o, [1, chw(graph, o)[0]])
        ctx.layer("reshapeStatic")
    _rename_blobs(b.spec.neuralNetwork, {k: v for k, v in renamed.items() if k in rank2_out})
    _rename_blobs(
        b.spec.neuralNetwork, {k: v for k, v in renamed.items() if k in rank2_in}, inputs_only=True
    )
    return b.spec, refusals, ctx.lowered


def _rename_blobs(nn_spec: Any, names: dict[str, str], *, inputs_only: bool = False) -> None:
    """Point the layers at the rank-4 blobs: a rank-2 graph output is written as its rank-4
    blob by the layer computing it; a rank-2 graph input is read as its rank-4 blob."""
    for layer in nn_spec.layers:
        if layer.WhichOneof("layer") == "reshapeStatic" and layer.name in names.values():
            continue
        for i, x in enumerate(layer.input):
            if x in names:
                layer.input[i] = names[x]
        if not inputs_only:
            for i, y in enumerate(layer.output):
                if y in names:
                    layer.output[i] = names[y]


class _Sink:
    """Stands in for NeuralNetworkBuilder when only the checks are wanted: every add_* call
    is accepted, so each node's own checks decide (independently of the graph's I/O)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


def _emit(ctx: _Ctx, n: Node) -> None:
    """Emit one node; raises Refuse (with the fix when one is known) when it cannot."""
    if (dynamic := Refusal.dynamic(ctx.graph, n)) is not None:
        raise Refuse(dynamic.reason, dynamic.fix)
    fn = NN_OPS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
    if fn is None:
        raise unmapped(n, "neuralnetwork")
    fn(ctx, n)


def node_reasons(graph: Graph) -> tuple[dict[str, str], Lowered]:
    """node name -> why the neuralnetwork emitter refuses it (absent when it is emitted),
    plus the replacements the emitter would apply."""
    refusals, lowered = node_refusals(graph)
    return {k: r.reason for k, r in refusals.items()}, lowered


def node_refusals(graph: Graph) -> tuple[dict[str, Refusal], Lowered]:
    """node name -> the neuralnetwork emitter's refusal of it (reason and fix), plus the
    replacements the emitter would apply."""
    src = graph
    graph, origin = decomposed(graph)  # a decomposed op is judged by its parts
    ctx = _Ctx(graph, _Sink())
    nodes = {n.name: n for n in src.nodes}
    out: dict[str, Refusal] = {}
    for n in graph.nodes:
        try:
            _emit(ctx, n)
        except Refuse as e:
            name = origin.get(n.name, n.name)
            if name not in out:
                out[name] = Refusal.of(nodes.get(name, n), graph.opset, str(e), e.fix)
    return out, ctx.lowered
