"""A NumPy model of the Core ML layers / MIL ops that this backend emits.

Core ML cannot run on Linux, so `verify --target coreml` and `run` execute the *saved* model
file with these functions instead: the NeuralNetwork layers are read from the .mlmodel spec,
the ML Program ops from the .mlpackage (parsed back into a MIL program by coremltools' own
`milproto` loader, weights included). Each function follows the documentation of its layer /
op, cited in its docstring:
  [NN]  Core ML Format Reference, NeuralNetwork.proto (apple/coremltools mlmodel/format)
  [MIL] coremltools MIL op reference, coremltools.converters.mil.mil.ops.defs.iOS15.<module>
This checks our use of the formats against their documented semantics; it is not Core ML,
and it does not model Core ML's own arithmetic (fp16 on the GPU / Neural Engine).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Onnx2EdgeError
from ._ct import coremltools

F = np.float32


# --- shared kernels ------------------------------------------------------------------------
def _conv2d(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    dil: tuple[int, int],
    pads: tuple[int, int, int, int],
    groups: int,
) -> np.ndarray:
    """x (C, H, W), w (Cout, Cin/groups, kH, kW), pads (top, bottom, left, right)."""
    t, b, left, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (left, r)))
    cout, cin_g, kh, kw = w.shape
    oh = (xp.shape[1] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[2] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    wg = w.reshape(groups, cout // groups, cin_g, kh, kw).astype(np.float64)
    out = np.zeros((groups, cout // groups, oh * ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            hs, ws = i * dil[0], j * dil[1]
            patch = xp[
                :,
                hs : hs + stride[0] * (oh - 1) + 1 : stride[0],
                ws : ws + stride[1] * (ow - 1) + 1 : stride[1],
            ]
            out += np.einsum(
                "gok,gkp->gop", wg[:, :, :, i, j], patch.reshape(groups, cin_g, oh * ow)
            )
    return out.reshape(cout, oh, ow)


def _deconv2d(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], groups: int) -> np.ndarray:
    """Transposed convolution without padding: x (Cin, H, W), w (Cin, Cout/groups, kH, kW);
    output (Cout, (H-1)*s + kH, (W-1)*s + kW)."""
    cin, cout_g, kh, kw = w.shape
    _, h, wd = x.shape
    oh, ow = (h - 1) * stride[0] + kh, (wd - 1) * stride[1] + kw
    out = np.zeros((groups, cout_g, oh, ow), np.float64)
    xg = x.reshape(groups, cin // groups, h * wd).astype(np.float64)
    wg = w.reshape(groups, cin // groups, cout_g, kh, kw).astype(np.float64)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("gko,gkp->gop", wg[:, :, :, i, j], xg).reshape(
                groups, cout_g, h, wd
            )
            out[
                :,
                :,
                i : i + stride[0] * (h - 1) + 1 : stride[0],
                j : j + stride[1] * (wd - 1) + 1 : stride[1],
            ] += contrib
    return out.reshape(groups * cout_g, oh, ow)


def _pool2d(
    x: np.ndarray,
    k: tuple[int, int],
    s: tuple[int, int],
    pads: tuple[int, int, int, int],
    kind: str,
    exclude_pad: bool,
) -> np.ndarray:
    """Max: padded cells never win; average: divided by the window cells inside the input
    when exclude_pad, else by kH*kW."""
    t, b, left, r = pads
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (t, b), (left, r)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[1:]), ((t, b), (left, r)))
    oh = (xp.shape[1] - k[0]) // s[0] + 1
    ow = (xp.shape[2] - k[1]) // s[1] + 1
    acc = np.full((x.shape[0], oh, ow), fill)
    cnt = np.zeros((oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            sl = (slice(i, i + s[0] * (oh - 1) + 1, s[0]), slice(j, j + s[1] * (ow - 1) + 1, s[1]))
            v = xp[(slice(None), *sl)]
            acc = np.maximum(acc, v) if kind == "max" else acc + v
            cnt += ones[sl]
    if kind == "max":
        return acc
    return acc / (cnt if exclude_pad else k[0] * k[1])


def _bilinear_axis(n_in: int, n_out: int, align: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grid points of [NN] UpsampleLayerParams.LinearUpsampleMode / [MIL] image_resizing
    upsample_bilinear: ALIGN_CORNERS_TRUE spacing (Xin-1)/(Xout-1); ALIGN_CORNERS_FALSE
    spacing Xin/Xout, point i*spacing + 0.5*spacing - 0.5; both clamped to [0, Xin-1]."""
    i = np.arange(n_out, dtype=np.float64)
    if align:
        g = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(1)
    else:
        sp = n_in / n_out
        g = i * sp + 0.5 * sp - 0.5
    g = np.clip(g, 0, n_in - 1)
    lo = np.floor(g).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, g - lo


def _bilinear(x: np.ndarray, oh: int, ow: int, align: bool) -> np.ndarray:
    """x (..., H, W) -> (..., oh, ow)."""
    h0, h1, fh = _bilinear_axis(x.shape[-2], oh, align)
    w0, w1, fw = _bilinear_axis(x.shape[-1], ow, align)
    x = x.astype(np.float64)
    rows = x[..., h0, :] * (1 - fh)[:, None] + x[..., h1, :] * fh[:, None]
    return rows[..., w0] * (1 - fw) + rows[..., w1] * fw


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


# --- NeuralNetwork layers [NN] -----------------------------------------------------------
def _weights(wp: Any) -> np.ndarray:
    """[NN] WeightParams: floatValue, or float16Value as little-endian IEEE half bytes."""
    if len(wp.floatValue):
        return np.asarray(wp.floatValue, F)
    if len(wp.float16Value):
        return np.frombuffer(wp.float16Value, np.float16).astype(F)
    raise Onnx2EdgeError(
        "Core ML layer weights are quantized or empty; the evaluator reads float32/float16 only"
    )


def nn_convolution(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ConvolutionLayerParams: weights (outputChannels, kernelChannels, kH, kW), or
    for deconvolution (kernelChannels, outputChannels/nGroups, kH, kW); 'valid' padding
    with paddingAmounts (top/bottom = borderAmounts[0], left/right = borderAmounts[1])."""
    kh, kw = p.kernelSize
    g = p.nGroups or 1
    if p.isDeconvolution:
        w = _weights(p.weights).reshape(p.kernelChannels, p.outputChannels // g, kh, kw)
        y = _deconv2d(x, w, tuple(p.stride), g)
        if len(p.outputShape):
            y = y[:, : p.outputShape[0], : p.outputShape[1]]
    else:
        if p.WhichOneof("ConvolutionPaddingType") != "valid":
            raise Onnx2EdgeError("evaluator: only 'valid' convolution padding is modelled")
        ba = p.valid.paddingAmounts.borderAmounts
        pads = (
            (ba[0].startEdgeSize, ba[0].endEdgeSize, ba[1].startEdgeSize, ba[1].endEdgeSize)
            if len(ba)
            else (0, 0, 0, 0)
        )
        w = _weights(p.weights).reshape(p.outputChannels, p.kernelChannels, kh, kw)
        y = _conv2d(x, w, tuple(p.stride), tuple(p.dilationFactor or (1, 1)), pads, g)
    if p.hasBias:
        y = y + _weights(p.bias).reshape(-1, 1, 1)
    return y


def nn_innerProduct(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] InnerProductLayerParams: y = W x + b, W (outputChannels, inputChannels) over the
    (C, 1, 1) blob."""
    w = _weights(p.weights).reshape(p.outputChannels, p.inputChannels).astype(np.float64)
    y = w @ x.reshape(-1).astype(np.float64)
    if p.hasBias:
        y = y + _weights(p.bias)
    return y.reshape(-1, 1, 1)


def nn_activation(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ActivationParams: ReLU max(0,x); LeakyReLU x>=0 ? x : alpha*x; Sigmoid; Tanh;
    SigmoidHard min(max(alpha*x+beta, 0), 1); Linear alpha*x+beta; ELU x>=0 ? x :
    alpha*(exp(x)-1); Softplus log(1+exp(x))."""
    k = p.WhichOneof("NonlinearityType")
    x = x.astype(np.float64)
    if k == "ReLU":
        return np.maximum(x, 0)
    if k == "leakyReLU":
        return np.where(x >= 0, x, p.leakyReLU.alpha * x)
    if k == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if k == "tanh":
        return np.tanh(x)
    if k == "sigmoidHard":
        return np.clip(p.sigmoidHard.alpha * x + p.sigmoidHard.beta, 0, 1)
    if k == "linear":
        return p.linear.alpha * x + p.linear.beta
    if k == "ELU":
        return np.where(x >= 0, x, p.ELU.alpha * (np.exp(x) - 1))
    if k == "softplus":
        return np.logaddexp(0, x)
    raise Onnx2EdgeError(f"evaluator: activation {k} is not modelled")


def nn_clip(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ClipLayerParams: min(max(x, minVal), maxVal)."""
    return np.clip(x, p.minVal, p.maxVal)


def _legacy_bcast(xs: list[np.ndarray]) -> list[np.ndarray]:
    """[NN] AddLayerParams / MultiplyLayerParams: limited broadcasting, output shaped like the
    first input ([1,1,1], [C,1,1], [1,H,W] against [C,H,W])."""
    return [np.broadcast_to(v, xs[0].shape) for v in xs]


def nn_add(p: Any, *xs: np.ndarray) -> np.ndarray:
    """[NN] AddLayerParams: sum of the inputs; one input: x + alpha."""
    if len(xs) == 1:
        return xs[0] + p.alpha
    return np.sum(_legacy_bcast(list(xs)), axis=0)


def nn_multiply(p: Any, *xs: np.ndarray) -> np.ndarray:
    """[NN] MultiplyLayerParams: product of the inputs; one input: alpha * x."""
    if len(xs) == 1:
        return xs[0] * p.alpha
    return np.prod(_legacy_bcast(list(xs)), axis=0)


def nn_scale(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ScaleLayerParams: y = scale * x + bias, shapeScale / shapeBias [1] or [C] (or
    [1,H,W] / [C,H,W])."""
    s = _weights(p.scale).reshape(tuple(p.shapeScale) + (1,) * (3 - len(p.shapeScale)))
    y = x * s
    if p.hasBias:
        y = y + _weights(p.bias).reshape(tuple(p.shapeBias) + (1,) * (3 - len(p.shapeBias)))
    return y


def nn_loadConstant(p: Any) -> np.ndarray:
    """[NN] LoadConstantLayerParams: a constant blob of shape (C, H, W)."""
    return _weights(p.data).reshape(tuple(p.shape))


def nn_concat(p: Any, *xs: np.ndarray) -> np.ndarray:
    """[NN] ConcatLayerParams: concatenation along C (sequenceConcat false)."""
    if p.sequenceConcat:
        raise Onnx2EdgeError("evaluator: sequence concat is not modelled")
    return np.concatenate(xs, axis=0)


def nn_pooling(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] PoolingLayerParams: MAX / AVERAGE; globalPooling pools all of H, W; 'valid'
    padding with paddingAmounts; 'includeLastPixel' (ValidCompletePadding: symmetric
    paddingAmounts, output ceil((H + 2p - k) / s) + 1) for max pooling; avgPoolExcludePadding."""
    kind = {"MAX": "max", "AVERAGE": "avg"}.get(type(p).PoolingType.Name(p.type))
    if kind is None:
        raise Onnx2EdgeError("evaluator: L2 pooling is not modelled")
    if p.globalPooling:
        if kind == "max":
            return x.max(axis=(1, 2), keepdims=True)
        return x.mean(axis=(1, 2), keepdims=True)
    k, s = tuple(p.kernelSize), tuple(p.stride)
    which = p.WhichOneof("PoolingPaddingType")
    if which == "includeLastPixel" and kind == "max":
        ph, pw = (list(p.includeLastPixel.paddingAmounts) + [0, 0])[:2]
        ends = []
        for size, kk, ss, pp in ((x.shape[1], k[0], s[0], ph), (x.shape[2], k[1], s[1], pw)):
            out = -(-(size + 2 * pp - kk) // ss) + 1
            ends.append(max(pp, (out - 1) * ss + kk - size - pp))  # pad so the last fits
        # A window that would start in the end padding is dropped (output shape above).
        y = _pool2d(x, k, s, (ph, ends[0], pw, ends[1]), kind, True)
        oh = -(-(x.shape[1] + 2 * ph - k[0]) // s[0]) + 1
        ow = -(-(x.shape[2] + 2 * pw - k[1]) // s[1]) + 1
        return y[:, :oh, :ow]
    if which != "valid":
        raise Onnx2EdgeError(f"evaluator: '{which}' {kind} pooling padding is not modelled")
    ba = p.valid.paddingAmounts.borderAmounts
    pads = (
        (ba[0].startEdgeSize, ba[0].endEdgeSize, ba[1].startEdgeSize, ba[1].endEdgeSize)
        if len(ba)
        else (0, 0, 0, 0)
    )
    return _pool2d(x, k, s, pads, kind, p.avgPoolExcludePadding)


def nn_lrn(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] LRNLayerParams: y = x / (k + alpha / localSize * sum of x^2 over the localSize
    channels centred on c)^beta."""
    return _lrn(x[None], int(p.localSize), p.alpha, p.beta, p.k)[0]


def _lrn(x: np.ndarray, size: int, alpha: float, beta: float, k: float) -> np.ndarray:
    sq = np.asarray(x, np.float64) ** 2
    c = x.shape[1]
    half = (size - 1) // 2
    acc = np.zeros_like(sq)
    for ch in range(c):
        lo, hi = max(0, ch - half), min(c, ch + size - half)
        acc[:, ch] = sq[:, lo:hi].sum(axis=1)
    return x / (k + alpha / size * acc) ** beta


def nn_reduce(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ReduceLayerParams: mode SUM / AVG / PROD / MAX / MIN over axis CHW, HW, C, H or W
    of the (C, H, W) blob, keeping the reduced axes as size 1."""
    axis = type(p).ReduceAxis.Name(p.axis)
    axes = {"CHW": (0, 1, 2), "HW": (1, 2), "C": (0,), "H": (1,), "W": (2,)}[axis]
    mode = type(p).ReduceOperation.Name(p.mode)
    fn = {"SUM": np.sum, "AVG": np.mean, "PROD": np.prod, "MAX": np.max, "MIN": np.min}.get(mode)
    if fn is None:
        raise Onnx2EdgeError(f"evaluator: reduce mode {mode} is not modelled")
    if mode in ("MAX", "MIN") and any(x.shape[a] == 0 for a in axes):
        raise Onnx2EdgeError(f"evaluator: reduce {mode} over an axis of size 0 is not modelled")
    return fn(x, axis=axes, keepdims=True)


def nn_flatten(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] FlattenLayerParams: CHANNEL_FIRST gives (C*H*W, 1, 1) in C, H, W order."""
    if type(p).FlattenOrder.Name(p.mode) != "CHANNEL_FIRST":
        raise Onnx2EdgeError("evaluator: CHANNEL_LAST flatten is not modelled")
    return x.reshape(-1, 1, 1)


def nn_softmax(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] SoftmaxLayerParams: softmax over C at each (H, W)."""
    return _softmax(x.astype(np.float64), 0)


def nn_upsample(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] UpsampleLayerParams: NN repeats each pixel scalingFactor times; BILINEAR samples
    the grid of linearUpsampleMode."""
    sh, sw = (int(v) for v in p.scalingFactor)
    if type(p).InterpolationMode.Name(p.mode) == "NN":
        return np.repeat(np.repeat(x, sh, axis=1), sw, axis=2)
    lum = type(p).LinearUpsampleMode.Name(p.linearUpsampleMode)
    if lum == "DEFAULT":
        raise Onnx2EdgeError("evaluator: DEFAULT bilinear upsampling is not modelled")
    return _bilinear(x, x.shape[1] * sh, x.shape[2] * sw, lum == "ALIGN_CORNERS_TRUE")


def nn_batchnorm(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] BatchnormLayerParams: gamma * (x - mean) / sqrt(variance + epsilon) + beta; with
    computeMeanVar the mean and variance are computed from the input, and with
    instanceNormalization over that one instance (per channel, over H and W; batch 1 here,
    so both read the same cells). The variance is the population (biased) one."""

    def r(wp: Any) -> np.ndarray:
        return _weights(wp).reshape(-1, 1, 1).astype(np.float64)

    x = x.astype(np.float64)
    if p.computeMeanVar:
        mean = x.mean(axis=(1, 2), keepdims=True)
        var = x.var(axis=(1, 2), keepdims=True)
    else:
        mean, var = r(p.mean), r(p.variance)
    return r(p.gamma) * (x - mean) / np.sqrt(var + p.epsilon) + r(p.beta)


def _borders(ba: Any) -> tuple[int, int, int, int]:
    """[NN] BorderAmounts: borderAmounts[0] is H (start = top), [1] is W (start = left)."""
    if not len(ba.borderAmounts):
        return (0, 0, 0, 0)
    h, w = ba.borderAmounts
    return h.startEdgeSize, h.endEdgeSize, w.startEdgeSize, w.endEdgeSize


def nn_padding(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] PaddingLayerParams: pads H and W by paddingAmounts; constant (value), reflection
    (mirror without repeating the edge pixel) or replication (repeat the edge pixel)."""
    t, b, left, r = _borders(p.paddingAmounts)
    width = ((0, 0), (t, b), (left, r))
    kind = p.WhichOneof("PaddingType")
    if kind == "constant":
        return np.pad(x, width, constant_values=p.constant.value)
    return np.pad(x, width, mode={"reflection": "reflect", "replication": "edge"}[kind])


def nn_crop(p: Any, *xs: np.ndarray) -> np.ndarray:
    """[NN] CropLayerParams, one input: remove cropAmounts (top/bottom, left/right) from the
    borders of H and W."""
    if len(xs) != 1:
        raise Onnx2EdgeError("evaluator: two-input crop is not modelled")
    t, b, left, r = _borders(p.cropAmounts)
    x = xs[0]
    return x[:, t : x.shape[1] - b, left : x.shape[2] - r]


def nn_unary(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] UnaryFunctionLayerParams (EXP only here): exp(scale * x + shift) per the proto's
    order of alpha / scale / shift (x shifted and scaled first)."""
    kind = p.Operation.Name(p.type)
    if kind != "EXP":
        raise Onnx2EdgeError(f"evaluator: unary {kind} is not modelled")
    scale = p.scale if p.scale != 0 else 1.0
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64) * scale + p.shift)


def nn_split(p: Any, x: np.ndarray) -> list[np.ndarray]:
    """[NN] SplitLayerParams: nOutputs equal parts along the channel axis (-3)."""
    return np.split(x, p.nOutputs, axis=-3)


def nn_slice(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] SliceLayerParams: [startIndex, endIndex) with a positive stride along
    channel (-3) / height (-2) / width (-1); non-negative indices here."""
    axis = (-3, -2, -1)[p.axis]
    if p.startIndex < 0 or p.endIndex <= 0:
        raise Onnx2EdgeError("evaluator: negative slice indices are not modelled")
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(p.startIndex, p.endIndex, p.stride or 1)
    return x[tuple(idx)]


def nn_reshapeStatic(p: Any, x: np.ndarray) -> np.ndarray:
    """[NN] ReshapeStaticLayerParams: row-major reshape to targetShape (batch 1 here)."""
    shape = tuple(int(d) for d in p.targetShape)
    if shape[:1] != (1,):
        raise Onnx2EdgeError("evaluator: reshapeStatic of a batch other than 1")
    return x.reshape(shape[1:])


NN_LAYERS: dict[str, Callable[..., np.ndarray]] = {
    name[3:]: fn for name, fn in globals().items() if name.startswith("nn_") and callable(fn)
}


def _feature_shape(feature: Any) -> tuple[int, ...]:
    """(1, C, H, W) of an image input, the declared shape of a multi-array input."""
    t = feature.type
    if t.WhichOneof("Type") == "imageType":
        c = 1 if t.imageType.ColorSpace.Name(t.imageType.colorSpace) == "GRAYSCALE" else 3
        return (1, c, int(t.imageType.height), int(t.imageType.width))
    return tuple(int(d) for d in t.multiArrayType.shape)


def _flexible(feature: Any, shape: tuple[int, ...]) -> bool:
    """Whether a flexible input (FeatureTypes.proto: enumerated shapes or size ranges) takes
    `shape`, as (1, C, H, W) for an image."""
    t = feature.type
    if t.WhichOneof("Type") == "imageType":
        c = _feature_shape(feature)[1]
        img = t.imageType
        if img.WhichOneof("SizeFlexibility") == "imageSizeRange":
            r = img.imageSizeRange
            ranges = [(1, 1), (c, c)] + [
                (x.lowerBound, x.upperBound) for x in (r.heightRange, r.widthRange)
            ]
        else:
            sizes = {(1, c, int(z.height), int(z.width)) for z in img.enumeratedSizes.sizes}
            return shape in sizes
    elif t.multiArrayType.WhichOneof("ShapeFlexibility") == "shapeRange":
        ranges = [(x.lowerBound, x.upperBound) for x in t.multiArrayType.shapeRange.sizeRanges]
    else:
        shapes = {tuple(int(d) for d in e.shape) for e in t.multiArrayType.enumeratedShapes.shapes}
        return shape in shapes
    return len(shape) == len(ranges) and all(
        lo <= d and (hi == -1 or d <= hi) for d, (lo, hi) in zip(shape, ranges, strict=True)
    )


def _scale_image(sc: Any, feature: Any, x: np.ndarray) -> np.ndarray:
    """[NN] NeuralNetworkImageScaler: channelScale * pixel + the bias of the channel's
    colour; the channels reach the network in the image's colour order (B, G, R for BGR)."""
    space = feature.type.imageType.ColorSpace.Name(feature.type.imageType.colorSpace)
    scale = sc.channelScale if sc.channelScale != 0 else 1.0
    bias = {
        "GRAYSCALE": [sc.grayBias],
        "RGB": [sc.redBias, sc.greenBias, sc.blueBias],
        "BGR": [sc.blueBias, sc.greenBias, sc.redBias],
    }[space]
    return (x.astype(np.float64) * scale + np.asarray(bias).reshape(-1, 1, 1)).astype(F)


def eval_neuralnetwork(spec: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run spec.neuralNetwork on batch-1 blobs held without their batch axis: (C, H, W)
    for the rank-4 blobs of the exact array mapping, (N,) for a (1, N) one; returns every
    blob by name."""
    body = getattr(spec, spec.WhichOneof("Type"))  # neuralNetwork or ...Classifier
    scalers = {p.featureName: p.scaler for p in body.preprocessing if p.HasField("scaler")}
    env: dict[str, np.ndarray] = {}
    for inp in spec.description.input:
        shape = _feature_shape(inp)
        if body.arrayInputShapeMapping != 1 or shape[:1] != (1,):
            raise Onnx2EdgeError("evaluator: only batch-1 inputs of the exact mapping are modelled")
        x = np.asarray(feeds[inp.name], F)
        if _flexible(inp, x.shape):  # a flexible input fed one of its other shapes
            shape = x.shape
        x = x.reshape(shape[1:])
        if inp.name in scalers:
            x = _scale_image(scalers[inp.name], inp, x)
        env[inp.name] = x
    for layer in body.layers:
        kind = layer.WhichOneof("layer")
        fn = NN_LAYERS.get(kind)
        if fn is None:
            raise Onnx2EdgeError(
                f"evaluator: Core ML layer type '{kind}' ({layer.name}) is not modelled"
            )
        y = fn(getattr(layer, kind), *(env[i] for i in layer.input))
        ys = y if isinstance(y, list) else [y]
        for name, v in zip(layer.output, ys, strict=True):
            env[name] = np.asarray(v).astype(F)
    return env


# --- ML Program ops [MIL] -----------------------------------------------------------------
def _pads(pad_type: str, pad: Any, n: int) -> tuple[int, ...]:
    if pad_type == "valid" or pad is None:
        return (0,) * (2 * n)
    if pad_type != "custom":
        raise Onnx2EdgeError(f"evaluator: pad_type '{pad_type}' is not modelled")
    return tuple(int(v) for v in pad)


def mil_conv(
    x,
    weight,
    bias=None,
    strides=None,
    pad_type="valid",
    pad=None,
    dilations=None,
    groups=1,
    **_: Any,
) -> np.ndarray:
    """[MIL] conv.conv: x (n, C_in, H, W), weight (C_out, C_in/groups, kH, kW), pad
    (top, bottom, left, right) for pad_type custom."""
    s = tuple(int(v) for v in (strides if strides is not None else (1, 1)))
    d = tuple(int(v) for v in (dilations if dilations is not None else (1, 1)))
    y = np.stack([_conv2d(xi, weight, s, d, _pads(str(pad_type), pad, 2), int(groups)) for xi in x])
    return y if bias is None else y + np.asarray(bias).reshape(1, -1, 1, 1)


def mil_conv_transpose(
    x,
    weight,
    bias=None,
    strides=None,
    pad_type="valid",
    pad=None,
    output_shape=None,
    dilations=None,
    groups=1,
    **_: Any,
) -> np.ndarray:
    """[MIL] conv.conv_transpose: weight (C_in, C_out/groups, kH, kW); custom pad removes
    pad[2i] / pad[2i+1] from the unpadded result (Dout = (Din-1)*s + (K-1)*d + 1 - pad[2i]
    - pad[2i+1])."""
    if dilations is not None and any(int(v) != 1 for v in dilations):
        raise Onnx2EdgeError("evaluator: dilated conv_transpose is not modelled")
    s = tuple(int(v) for v in (strides if strides is not None else (1, 1)))
    t, b, left, r = _pads(str(pad_type), pad, 2)
    y = np.stack([_deconv2d(xi, weight, s, int(groups)) for xi in x])
    y = y[:, :, t : y.shape[2] - b, left : y.shape[3] - r]
    # ct.convert's passes record output_shape; the doc defines Dout by it but not where
    # the window sits, so only an output_shape equal to the pad formula's is modelled.
    if output_shape is not None and tuple(int(v) for v in output_shape)[-2:] != y.shape[2:]:
        raise Onnx2EdgeError("evaluator: conv_transpose output_shape differs from its pads")
    return y if bias is None else y + np.asarray(bias).reshape(1, -1, 1, 1)


def mil_linear(x, weight, bias=None, **_: Any) -> np.ndarray:
    """[MIL] linear.linear: x @ weight.T + bias, weight (D_out, D_in)."""
    y = np.asarray(x, np.float64) @ np.asarray(weight, np.float64).T
    return y if bias is None else y + bias


def mil_matmul(x, y, transpose_x=False, transpose_y=False, **_: Any) -> np.ndarray:
    """[MIL] linear.matmul: batched matrix product (NumPy broadcasting of batch dims)."""
    x = np.swapaxes(x, -1, -2) if transpose_x else x
    y = np.swapaxes(y, -1, -2) if transpose_y else y
    return np.matmul(np.asarray(x, np.float64), np.asarray(y, np.float64))


def mil_relu(x, **_: Any):
    return np.maximum(x, 0)  # [MIL] activation.relu  # noqa: E704


def mil_relu6(x, **_: Any):
    return np.clip(x, 0, 6)  # [MIL] activation.relu6  # noqa: E704


def mil_sigmoid(x, **_: Any):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))  # noqa: E704


def mil_tanh(x, **_: Any):
    return np.tanh(x)  # [MIL] elementwise_unary.tanh  # noqa: E704


def mil_softplus(x, **_: Any):
    return np.logaddexp(0, x)  # [MIL] activation.softplus  # noqa: E704


def mil_clip(x, alpha, beta, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.clip: min(max(x, alpha), beta)."""
    return np.minimum(np.maximum(x, alpha), beta)


def mil_leaky_relu(x, alpha=0.01, **_: Any) -> np.ndarray:
    """[MIL] activation.leaky_relu: x if x >= 0 else alpha * x."""
    return np.where(x >= 0, x, alpha * x)


def mil_elu(x, alpha=1.0, **_: Any) -> np.ndarray:
    """[MIL] activation.elu: x if x > 0 else alpha * (exp(x) - 1)."""
    return np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


def mil_sigmoid_hard(x, alpha=0.2, beta=0.5, **_: Any) -> np.ndarray:
    """[MIL] activation.sigmoid_hard: min(max(alpha * x + beta, 0), 1)."""
    return np.clip(alpha * np.asarray(x, np.float64) + beta, 0, 1)


def mil_silu(x, **_: Any) -> np.ndarray:
    """[MIL] activation.silu: x * sigmoid(x)."""
    return x * mil_sigmoid(x)


def mil_add(x, y, **_: Any):
    return np.add(x, y)  # [MIL] elementwise_binary, broadcasting  # noqa: E704


def mil_greater(x, y, **_: Any) -> np.ndarray:
    """[MIL] elementwise_binary.greater: bool, broadcasting."""
    return np.greater(x, y)


def mil_less(x, y, **_: Any) -> np.ndarray:
    """[MIL] elementwise_binary.less: bool, broadcasting."""
    return np.less(x, y)


def mil_greater_equal(x, y, **_: Any) -> np.ndarray:
    """[MIL] elementwise_binary.greater_equal: bool, broadcasting."""
    return np.greater_equal(x, y)


def mil_less_equal(x, y, **_: Any) -> np.ndarray:
    """[MIL] elementwise_binary.less_equal: bool, broadcasting."""
    return np.less_equal(x, y)


def _nonempty(op: str, x: np.ndarray, axes: Any) -> None:
    # Core ML documents no result for an empty max / min (the emitters refuse it): a model
    # that reaches here anyway is outside what the evaluator knows, not a NumPy crash.
    ax = _axes(axes, x.ndim) or tuple(range(x.ndim))
    if any(x.shape[a] == 0 for a in ax):
        raise Onnx2EdgeError(f"evaluator: {op} over an axis of size 0 is not modelled")


def mil_reduce_min(x, axes=None, keep_dims=False, **_: Any) -> np.ndarray:
    """[MIL] reduction.reduce_min."""
    _nonempty("reduce_min", x, axes)
    return np.min(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))


def mil_sqrt(x, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.sqrt (NaN below 0, as IEEE sqrt)."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)


def mil_select(cond, a, b, **_: Any) -> np.ndarray:
    """[MIL] control_flow.select: a where cond is true, else b (broadcasting)."""
    return np.where(np.asarray(cond, bool), a, b)


def mil_sub(x, y, **_: Any):
    return np.subtract(x, y)  # noqa: E704


def mil_mul(x, y, **_: Any):
    return np.multiply(x, y)  # noqa: E704


def mil_real_div(x, y, **_: Any):
    return np.divide(x, y)  # noqa: E704


def _pool_mil(
    kind: str,
    x,
    kernel_sizes,
    strides=None,
    pad_type="valid",
    pad=None,
    ceil_mode=False,
    exclude_padding_from_average=False,
) -> np.ndarray:
    """[MIL] pool: ceil_mode output ceil((D + pad_b + pad_a - k) / s) + 1, minus one when
    the last window would start in the end padding (modelled for max pooling)."""
    k = tuple(int(v) for v in kernel_sizes)
    s = tuple(int(v) for v in (strides if strides is not None else k))
    p = _pads(str(pad_type), pad, 2)
    if not ceil_mode:
        excl = bool(exclude_padding_from_average)
        return np.stack([_pool2d(xi, k, s, p, kind, excl) for xi in x])
    if kind != "max":
        raise Onnx2EdgeError("evaluator: ceil_mode average pooling is not modelled")
    outs, ends = [], []
    for d, (size, kk, ss) in enumerate(zip(x.shape[2:], k, s, strict=True)):
        b, a = p[2 * d], p[2 * d + 1]
        out = -(-(size + b + a - kk) // ss) + 1
        if (out - 1) * ss >= size + b and b + a > 0:
            out -= 1
        outs.append(out)
        ends.append(max(a, (out - 1) * ss + kk - size - b))
    y = np.stack([_pool2d(xi, k, s, (p[0], ends[0], p[2], ends[1]), kind, True) for xi in x])
    return y[:, :, : outs[0], : outs[1]]


def mil_local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, **_: Any) -> np.ndarray:
    """[MIL] normalization.local_response_norm: x / (k + alpha / size * sum_j x_j^2)^beta
    over `size` neighbouring channels."""
    return _lrn(np.asarray(x), int(size), float(alpha), float(beta), float(k))


def mil_max_pool(x, **kw: Any) -> np.ndarray:
    """[MIL] pool.max_pool: pad (top, bottom, left, right) for custom padding."""
    kw.pop("name", None)
    kw.pop("exclude_padding_from_average", None)
    return _pool_mil("max", x, **kw)


def mil_avg_pool(x, **kw: Any) -> np.ndarray:
    """[MIL] pool.avg_pool: exclude_padding_from_average divides by the valid cells."""
    kw.pop("name", None)
    return _pool_mil("avg", x, **kw)


def _axes(axes: Any, rank: int) -> tuple[int, ...] | None:
    return None if axes is None else tuple(int(a) % rank for a in np.atleast_1d(axes))


def mil_reduce_mean(x, axes=None, keep_dims=False, **_: Any) -> np.ndarray:
    """[MIL] reduction.reduce_mean over axes (all when None)."""
    return np.mean(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))


def mil_reduce_max(x, axes=None, keep_dims=False, **_: Any) -> np.ndarray:
    """[MIL] reduction.reduce_max."""
    _nonempty("reduce_max", x, axes)
    return np.max(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))


def mil_reduce_sum(x, axes=None, keep_dims=False, **_: Any) -> np.ndarray:
    """[MIL] reduction.reduce_sum."""
    return np.sum(x, axis=_axes(axes, x.ndim), keepdims=bool(keep_dims))


def mil_reshape(x, shape, **_: Any) -> np.ndarray:
    """[MIL] tensor_transformation.reshape (row-major)."""
    return np.reshape(x, tuple(int(v) for v in shape))


def mil_transpose(x, perm, **_: Any) -> np.ndarray:
    """[MIL] tensor_transformation.transpose."""
    return np.transpose(x, tuple(int(v) for v in perm))


def mil_concat(values, axis, interleave=False, **_: Any) -> np.ndarray:
    """[MIL] tensor_operation.concat; interleave=True (inputs of one shape) takes one slice
    of each input in turn along axis: [x0[0], x1[0], x0[1], x1[1], ...]."""
    axis = int(axis) % np.ndim(values[0])
    if interleave:
        st = np.stack(values, axis=axis + 1)
        return st.reshape(st.shape[:axis] + (-1,) + st.shape[axis + 2 :])
    return np.concatenate(values, axis=axis)


def mil_split(x, num_splits=None, split_sizes=None, axis=0, **_: Any) -> list[np.ndarray]:
    """[MIL] tensor_operation.split: split_sizes along axis (or num_splits equal parts)."""
    if split_sizes is None:
        return np.split(x, int(num_splits), axis=int(axis))
    return np.split(x, np.cumsum([int(s) for s in split_sizes])[:-1], axis=int(axis))


def mil_slice_by_index(
    x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_: Any
) -> np.ndarray:
    """[MIL] tensor_transformation.slice_by_index: x[begin:end:stride] per axis; a set
    begin_mask / end_mask bit ignores that bound; squeeze_mask drops the axis."""
    sl, drop = [], []
    for i in range(np.ndim(x)):
        b = None if begin_mask is not None and begin_mask[i] else int(begin[i])
        e = None if end_mask is not None and end_mask[i] else int(end[i])
        s = 1 if stride is None else int(stride[i])
        if squeeze_mask is not None and squeeze_mask[i]:
            sl.append(int(begin[i]))
            drop.append(i)
        else:
            sl.append(slice(b, e, s))
    return np.asarray(x)[tuple(sl)]


def mil_gather(x, indices, axis=0, batch_dims=0, **_: Any) -> np.ndarray:
    """[MIL] scatter_gather.gather: x taken at indices along axis (output shape
    x.shape[:axis] + indices.shape + x.shape[axis+1:])."""
    if int(batch_dims):
        raise Onnx2EdgeError("evaluator: gather with batch_dims is not modelled")
    return np.take(x, np.asarray(indices).astype(np.int64), axis=int(axis))


def mil_softmax(x, axis=-1, **_: Any) -> np.ndarray:
    """[MIL] activation.softmax."""
    return _softmax(np.asarray(x, np.float64), int(axis))


def mil_upsample_nearest_neighbor(x, scale_factor_height=1, scale_factor_width=1, **_: Any):
    """[MIL] image_resizing.upsample_nearest_neighbor: integer factors repeat pixels."""
    return np.repeat(
        np.repeat(x, int(scale_factor_height), axis=-2), int(scale_factor_width), axis=-1
    )


def mil_upsample_bilinear(
    x, scale_factor_height=1, scale_factor_width=1, align_corners=True, **_: Any
):
    """[MIL] image_resizing.upsample_bilinear: output floor(H*s), grid by align_corners."""
    oh = int(np.floor(x.shape[-2] * float(scale_factor_height)))
    ow = int(np.floor(x.shape[-1] * float(scale_factor_width)))
    return _bilinear(x, oh, ow, bool(align_corners))


def mil_batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_: Any):
    """[MIL] normalization.batch_norm over axis 1."""
    sh = (1, -1) + (1,) * (x.ndim - 2)
    g = 1.0 if gamma is None else np.reshape(gamma, sh)
    b = 0.0 if beta is None else np.reshape(beta, sh)
    return g * (x - np.reshape(mean, sh)) / np.sqrt(np.reshape(variance, sh) + epsilon) + b


def mil_instance_norm(x, gamma=None, beta=None, epsilon=1e-5, **_: Any) -> np.ndarray:
    """[MIL] normalization.instance_norm: per instance and channel, (x - mean) /
    sqrt(var + epsilon) over the spatial axes (population variance), then gamma, beta."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(2, x.ndim))
    sh = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(
        x.var(axis=axes, keepdims=True) + float(epsilon)
    )
    g = 1.0 if gamma is None else np.reshape(gamma, sh)
    b = 0.0 if beta is None else np.reshape(beta, sh)
    return g * y + b


def mil_pad(x, pad, mode="constant", constant_val=0.0, **_: Any) -> np.ndarray:
    """[MIL] tensor_operation.pad: pad[2i] / pad[2i+1] before / after each of the last N
    axes; constant (constant_val), reflect (mirror without the edge) or replicate."""
    pad = [int(v) for v in pad]
    n = len(pad) // 2
    width = [(0, 0)] * (np.ndim(x) - n) + [(pad[2 * i], pad[2 * i + 1]) for i in range(n)]
    if str(mode) == "constant":
        return np.pad(x, width, constant_values=constant_val)
    return np.pad(x, width, mode={"reflect": "reflect", "replicate": "edge"}[str(mode)])


def mil_exp(x, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.exp."""
    return np.exp(np.asarray(x, np.float64))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def mil_erf(x, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.erf: the Gauss error function."""
    return _erf(np.asarray(x, np.float64))


def mil_gelu(x, mode="EXACT", **_: Any) -> np.ndarray:
    """[MIL] activation.gelu: EXACT 0.5x(1 + erf(x / sqrt 2)); TANH_APPROXIMATION
    0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); SIGMOID_APPROXIMATION x sigmoid(1.702x)."""
    x = np.asarray(x, np.float64)
    if str(mode) == "EXACT":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if str(mode) == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return x * mil_sigmoid(1.702 * x)


def mil_layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_: Any) -> np.ndarray:
    """[MIL] normalization.layer_norm: gamma * (x - E[x]) / sqrt(Var[x] + epsilon) + beta,
    statistics over axes (all when None); gamma / beta shaped like x.shape[axes]."""
    x = np.asarray(x, np.float64)
    ax = _axes(axes, x.ndim) or tuple(range(x.ndim))
    y = (x - x.mean(axis=ax, keepdims=True)) / np.sqrt(
        x.var(axis=ax, keepdims=True) + float(epsilon)
    )
    if gamma is not None:
        y = y * np.asarray(gamma)
    return y if beta is None else y + np.asarray(beta)


def mil_identity(x, **_: Any):
    return np.array(x)  # [MIL] tensor_transformation.identity  # noqa: E704


def mil_cast(x, dtype, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.cast: fp16 / fp32 conversion (values round to the target)."""
    return np.asarray(x).astype({"fp16": np.float16, "fp32": np.float32}[str(dtype)])


def mil_round(x, **_: Any) -> np.ndarray:
    """[MIL] elementwise_unary.round: to the nearest integer (ties to even, as numpy and
    ONNX's QuantizeLinear; ties are measure-zero for float activations)."""
    return np.round(x)


MIL_OPS: dict[str, Callable[..., Any]] = {
    name[4:]: fn for name, fn in globals().items() if name.startswith("mil_") and callable(fn)
}


def load_mil_program(path: Path) -> Any:
    """The MIL program stored in an .mlpackage, with its weights (coremltools' loader)."""
    ct = coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    return load(
        spec, specification_version=spec.specificationVersion, file_weights_dir=model.weights_dir
    )


def eval_mlprogram(prog: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the 'main' function; returns every value by MIL name. Each op's result is kept in
    the dtype its op declares (float16 values are rounded to float16 after each op)."""
    fn = prog.functions["main"]
    env: dict[str, Any] = {}
    for name, var in fn.inputs.items():
        env[name] = np.asarray(feeds[name]).astype(_np_dtype(var))
    for op in fn.operations:
        if op.op_type == "const":
            env[op.outputs[0].name] = op.outputs[0].val
            continue
        if op.op_type.startswith("constexpr_"):
            # Compressed weights (coremltools.optimize): coremltools' own decompression
            # (the op's value inference) gives the dense weight Core ML computes with.
            val = op.outputs[0].val
            if val is None:  # the loader defers it: coremltools' materialisation
                val = op.materialized_val_inference()
            env[op.outputs[0].name] = np.asarray(val)
            continue
        if op.op_type == "classify":
            # [MIL] classify: the predicted class and the probabilities per class (kept as
            # the probability vector here, in the classes' order).
            probs = np.asarray(env[op.inputs["probabilities"].name], np.float32)
            classes = list(op.inputs["classes"].val)
            env[op.outputs[0].name] = np.asarray(classes[int(np.argmax(probs))])
            env[op.outputs[1].name] = probs.reshape(-1)
            continue
        impl = MIL_OPS.get(op.op_type)
        if impl is None:
            raise Onnx2EdgeError(f"evaluator: MIL op '{op.op_type}' ({op.name}) is not modelled")
        args: dict[str, Any] = {}
        for k, v in op.inputs.items():
            if isinstance(v, list | tuple):
                args[k] = [env[i.name] if i.name in env else i.val for i in v]
            else:
                args[k] = env[v.name] if v.name in env else v.val
        res = impl(**args)
        res = res if isinstance(res, list) else [res]
        for var, r in zip(op.outputs, res, strict=True):
            env[var.name] = np.asarray(r).astype(_np_dtype(var))
    return env


def _np_dtype(var: Any) -> Any:
    from coremltools.converters.mil.mil import types

    dt = var.dtype
    if dt == types.fp16:
        return np.float16
    if dt == types.fp32:
        return np.float32
    if dt == types.int32:
        return np.int32
    if dt == types.bool:
        return np.bool_
    return np.float32
