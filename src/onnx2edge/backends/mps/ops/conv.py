"""Conv, ConvTranspose, Gemm and MatMul as MPSCNNConvolution / fully connected nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.attrs import gemm_attrs
from ....semantics.conv_geometry import conv_geometry, conv_transpose_geometry
from ....semantics.fused import base_op
from ....semantics.numeric import gemm_dims
from ..core import (
    Img,
    Refuse,
)
from .common import (
    MATMUL_OF_ACTIVATIONS,
    _conv_weights_source,
    _fused_neuron,
    _padding,
    _static,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


@emitter("Conv")
def _conv(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("input is a flattened tensor; convolutions need an image")
    w = lw.const(node, 1, "weight").astype(np.float64)
    if w.ndim != 4:
        raise Refuse(f"{w.ndim - 2}-D convolution; MPSCNNConvolution is 2-D only")
    b = lw.opt_const(node, 2)
    b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    o, ig, kh, kw = w.shape
    comment = [f"ONNX node '{node.name}' (Conv)"]
    y, spec = node.outputs[0], _fused_neuron(node, comment)
    oc, oh, ow = _static(lw, y)
    geo = conv_geometry(node, (1, x.c, x.h, x.w), w.shape, (1, oc, oh, ow), lw.g.opset)
    group, s, d, pads = geo.group, list(geo.strides), list(geo.dilations), list(geo.pads)
    depthwise = group > 1 and group == x.c and ig == 1
    if depthwise and o != x.c:
        raise Refuse(
            f"depthwise convolution with channel multiplier {o // x.c}; "
            "MPSCNNDepthWiseConvolutionDescriptor supports multiplier 1 only"
        )
    if group > 1 and not depthwise and ((x.c // group) % 4 or (o // group) % 4):
        # MPSCNNConvolutionDescriptor.groups needs a multiple of 4 channels per group: run it
        # as one dense convolution whose weights are zero outside each group's block (the
        # same sums, `group` times the arithmetic; an Inf/NaN input then also reaches the
        # other groups' outputs through 0 * x).
        dense = np.zeros((o, x.c, kh, kw))
        ci, co = x.c // group, o // group
        for gi in range(group):
            dense[gi * co : (gi + 1) * co, gi * ci : (gi + 1) * ci] = w[gi * co : (gi + 1) * co]
        comment.append(
            f"(groups={group} with {ci} input / {co} output channels per group, not multiples "
            "of 4: a dense convolution with block-diagonal weights)"
        )
        w, group = dense, 1
    var = lw.fresh(node.name or node.outputs[0])
    if depthwise:
        weights = w[:, 0, :, :]  # [C][kH][kW]
        groups_arg, layout = "", "OHW"
    else:
        weights = w.transpose(0, 2, 3, 1)  # OIHW -> OHWI
        groups_arg, layout = f", groups: {group}", "OHWI"
    desc = (
        f"convolutionDescriptor(\n            depthwise: {str(depthwise).lower()}, kernel: ({kw}, {kh}), channels: ({x.c}, {o}), "
        f"stride: ({s[1]}, {s[0]}), dilation: ({d[1]}, {d[0]}){groups_arg})"
    )
    src = _conv_weights_source(
        lw, node, var, comment, "convolution", weights, b, desc, spec, layout
    )
    lines = [
        f"let {var} = MPSCNNConvolutionNode(\n    source: {x.var},\n    weights: {src})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'zero')}",
    ]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", oc, oh, ow))


@emitter("ConvTranspose")
def _conv_transpose(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    w = lw.const(node, 1, "weight").astype(np.float64)
    if w.ndim != 4:
        raise Refuse(
            f"{w.ndim - 2}-D transposed convolution; MPSCNNConvolutionTranspose is 2-D only"
        )
    geo = conv_transpose_geometry(node, (1, x.c, x.h, x.w), w.shape, None, lw.g.opset)
    if geo.group != 1:
        raise Refuse("grouped ConvTranspose is not supported by this backend; use group=1")
    if not geo.unit_dilation:
        raise Refuse("dilated ConvTranspose has no MPSCNNConvolutionTranspose equivalent")
    b = lw.opt_const(node, 2)
    ci, o, kh, kw = w.shape
    b = np.zeros(o) if b is None else b.astype(np.float64)
    s = list(geo.strides)
    comment = [f"ONNX node '{node.name}' (ConvTranspose)"]
    y, spec = node.outputs[0], _fused_neuron(node, comment)
    oc, oh, ow = _static(lw, y)
    # pads as ONNX resolves them (attributes, auto_pad or output_shape) for this output size
    pads = list(
        conv_transpose_geometry(node, (1, x.c, x.h, x.w), w.shape, (1, oc, oh, ow), lw.g.opset).pads
    )
    # MPS applies the weights as-is over the zero-stuffed source (MPSCNNConvolution.h): rotate
    # ONNX's kernel by 180 degrees and swap in/out: [I][O][kH][kW] -> OHWI flipped.
    weights = w.transpose(1, 2, 3, 0)[:, ::-1, ::-1, :]
    var = lw.fresh(node.name or node.outputs[0])
    desc = (
        f"convolutionDescriptor(\n            depthwise: false, kernel: ({kw}, {kh}), "
        f"channels: ({ci}, {o}), stride: ({s[1]}, {s[0]}), dilation: (1, 1), groups: 1)"
    )
    src = _conv_weights_source(
        lw,
        node,
        var,
        comment,
        "convolution transpose",
        weights,
        b,
        desc,
        spec,
        "OHWI (rotated 180)",
        float32_only=True,
    )
    lines = [
        f"let {var} = MPSCNNConvolutionTransposeNode(\n    source: {x.var}, convolutionGradientState: nil,\n    weights: {src})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'zero')}",
    ]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", oc, oh, ow))


def _fully_connected(lw: Lowering, node: Node, x: Img, w: np.ndarray, b: np.ndarray) -> None:
    """`w` is [N, K] with K = C*H*W in ONNX (CHW) order."""
    n, k = w.shape
    comment = [f"ONNX node '{node.name}' ({base_op(node)}, fully connected)"]
    y, spec = node.outputs[0], _fused_neuron(node, comment)
    c, h, wd = x.flat_of or (x.c, x.h, x.w)
    if c * h * wd != k:
        raise Refuse(f"weight has {k} inputs, the source image {c}x{h}x{wd}")
    # MPSCNNFullyConnected: Weights[No][SrcW][SrcH][Ni]; ONNX flattened C, H, W.
    weights = w.reshape(n, c, h, wd).transpose(0, 3, 2, 1)
    var = lw.fresh(node.name or node.outputs[0])
    desc = (
        f"convolutionDescriptor(\n            depthwise: false, kernel: ({wd}, {h}), "
        f"channels: ({c}, {n}), stride: (1, 1), dilation: (1, 1), groups: 1)"
    )
    src = _conv_weights_source(
        lw, node, var, comment, "fully connected", weights, b, desc, spec, "OWHI"
    )
    lines = [f"let {var} = MPSCNNFullyConnectedNode(\n    source: {x.var},\n    weights: {src})"]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", n, 1, 1))


@emitter("Gemm")
def _gemm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    ga = gemm_attrs(node, lw.g.opset)
    if ga.trans_a:
        raise Refuse("transA=1 transposes the activation; MPSCNNFullyConnected needs transA=0")
    bmat = lw.const(node, 1, "B").astype(np.float64)
    try:  # (M, K, N) as the schema reads transA / transB (semantics/numeric.py)
        _, _, n = gemm_dims(ga, lw.g.shape_of(node.inputs[0]), bmat.shape)
    except ValueError as e:
        raise Refuse(str(e)) from e
    w = (bmat if ga.trans_b else bmat.T) * ga.alpha  # (N, K)
    c = lw.opt_const(node, 2)
    bias = np.zeros(n) if c is None else np.broadcast_to(c.astype(np.float64).reshape(-1), (n,))
    _fully_connected(lw, node, x, w, bias * ga.beta)


@emitter("MatMul")
def _matmul(lw: Lowering, node: Node) -> None:
    if lw.g.const(node.inputs[1]) is None:
        raise Refuse(MATMUL_OF_ACTIVATIONS)
    x = lw.img(node.inputs[0])
    shape = lw.g.shape_of(node.inputs[0])
    if len(shape) != 2:
        raise Refuse(
            f"MatMul on a rank-{len(shape)} tensor; only [1, K] x [K, N] maps to MPSCNNFullyConnected"
        )
    b = lw.const(node, 1, "B").astype(np.float64)
    _fully_connected(lw, node, x, b.T, np.zeros(b.shape[1]))
