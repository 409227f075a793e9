"""BatchNormalization (as a channel affine), InstanceNormalization and LRN."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.attrs import epsilon
from ....semantics.batchnorm import bn_affine
from ....semantics.norms import lrn_attrs
from ..core import (
    Img,
    Refuse,
    swift_float,
    swift_string,
)
from .common import (
    _channel_affine,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


@emitter("BatchNormalization")
def _batchnorm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("BatchNormalization of a flattened tensor")
    for i, n in enumerate(("scale", "B", "mean", "var"), 1):
        lw.const(node, i, n)  # refuses a parameter computed at run time, naming it
    affine = bn_affine(lw.g, node)
    if affine is None:
        raise Refuse("BatchNormalization in training mode (extra outputs) has no MPS node")
    scale, shift = affine
    comment = [
        f"ONNX node '{node.name}' (BatchNormalization, as a 1x1 depthwise convolution: scale and shift)"
    ]
    _channel_affine(lw, node, x, scale, shift, comment, "batch normalization")


@emitter("InstanceNormalization")
def _instancenorm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    gamma = lw.const(node, 1, "scale").astype(np.float32)
    beta = lw.const(node, 2, "B").astype(np.float32)
    var = lw.fresh(node.name or node.outputs[0])
    goff, gent = lw.blob.add(gamma)
    boff, bent = lw.blob.add(beta)
    lw.blob.layer(var, [node.name], "instance normalization", {"gamma": gent, "beta": bent})
    eps = swift_float(epsilon(node, lw.g.opset))
    lines = [
        f"let {var} = MPSCNNInstanceNormalizationNode(\n    source: {x.var},\n    dataSource: InstanceNormalizationParameters(\n"
        f"        parameters, label: {swift_string(var)}, channels: {x.c}, gammaOffset: {goff}, betaOffset: {boff}, epsilon: {eps}))"
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (InstanceNormalization)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )


@emitter("LRN")
def _lrn(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    lr = lrn_attrs(node, lw.g.opset)
    size = lr.size
    if size % 2 == 0:
        # MPSCNNNormalization.h sums channels [k - N/2, k + (N-1)/2], ONNX [k - (N-1)/2, k + N/2]:
        # for even N the windows differ by one channel and the kernel has no offset to fix it.
        raise Refuse(
            f"LRN with even size {size}: MPSCNNCrossChannelNormalization's channel window "
            f"[k-{size // 2}, k+{(size - 1) // 2}] differs from ONNX's [k-{(size - 1) // 2}, k+{size // 2}]"
        )
    var = lw.fresh(node.name or node.outputs[0])
    # ONNX: x / (bias + alpha / size * sum(x^2))^beta -- MPSCNNCrossChannelNormalization's
    # formula with delta = bias (same window for odd sizes).
    lines = [
        f"let {var} = MPSCNNCrossChannelNormalizationNode(source: {x.var}, kernelSize: {size})",
        f"{var}.alpha = {swift_float(lr.alpha)}",
        f"{var}.beta = {swift_float(lr.beta)}",
        f"{var}.delta = {swift_float(lr.bias)}",
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (LRN)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )
