"""Pooling (MaxPool, AveragePool, global pools) and ReduceMean/Max/Min/Sum nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.conv_geometry import pool_geometry
from ....semantics.pooling import pool_attrs
from ....semantics.records import reduce_attrs
from ..core import (
    Img,
    Layer,
    Refuse,
    _reduce_axes,
)
from .common import (
    _padding,
    _static,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


@emitter("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
def _pool(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("input is a flattened tensor; pooling needs an image")
    if node.op_type == "MaxPool" and len([o for o in node.outputs if o]) > 1:
        raise Refuse("MaxPool indices output has no MPS equivalent; drop the second output")
    oc, oh, ow = _static(lw, node.outputs[0])
    glob = node.op_type.startswith("Global")
    if glob:
        k, s, pads = [x.h, x.w], [1, 1], [0, 0, 0, 0]
    else:
        k = list(pool_attrs(node, lw.g.opset).kernel_shape or ())
        if len(k) != 2:
            raise Refuse(f"{len(k)}-D pooling; MPS pooling is 2-D only")
        geo = pool_geometry(node, (1, x.c, x.h, x.w), (1, oc, oh, ow), lw.g.opset)
        if not geo.unit_dilation:
            raise Refuse("dilated pooling is not supported by this backend")
        s, pads = list(geo.strides), list(geo.pads)
    is_max = "Max" in node.op_type
    cls = "MPSCNNPoolingMaxNode" if is_max else "MPSCNNPoolingAverageNode"
    counts_pad = (
        not is_max and not glob and pool_attrs(node, lw.g.opset).count_include_pad and any(pads)
    )
    if counts_pad and (pads[0] != pads[2] or pads[1] != pads[3]):
        raise Refuse(
            "count_include_pad with asymmetric pads: MPSCNNPoolingAverage.zeroPadSize is symmetric"
        )
    var = lw.fresh(node.name or node.outputs[0])
    # Max pooling ignores the padding (ONNX pads with -inf): .clamp reads edge pixels, which
    # are inside the window anyway. Average pooling with .clamp divides by the pixels inside
    # the source (count_include_pad=0) or, with zeroPadSize = pads, inside source + pads.
    lines = [
        f"let {var} = {cls}(\n    source: {x.var}, kernelWidth: {k[1]}, kernelHeight: {k[0]}, "
        f"strideInPixelsX: {s[1]}, strideInPixelsY: {s[0]})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'clamp', counts_pad)}",
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({node.op_type})"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


# MPSNNGraphNodes.h MPSNNUnaryReductionNode subclasses (iOS 12.1): rows reduce along x
# (result width 1), columns along y (height 1), feature channels per pixel (1 channel);
# MPSNNReductionSpatialMeanNode reduces width and height at once (mean only).
_REDUCE_OPS = {"ReduceMean": "Mean", "ReduceMax": "Max", "ReduceMin": "Min", "ReduceSum": "Sum"}


@emitter(*_REDUCE_OPS)
def _reduce(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("reduction of a flattened tensor")
    rank = len(lw.g.shape_of(node.inputs[0]))
    axes = _reduce_axes(lw, node, rank)
    if axes is None:
        axes = list(range(rank))
    if rank == 2:  # [1, K]: K feature channels of a 1x1 image
        axes = [{0: 0, 1: 1}[a] for a in axes]
    axes = [a for a in axes if a != 0]  # batch is 1
    op = _REDUCE_OPS[node.op_type]
    if not axes:
        lw.env[node.outputs[0]] = x
        return
    # Axes of size 1 reduce nothing (but ReduceMean over them is still the identity).
    sizes = {1: x.c, 2: x.h, 3: x.w}
    real = [a for a in axes if sizes[a] > 1]
    steps: list[tuple[str, tuple[int, int, int]]] = []
    c, h, w = x.c, x.h, x.w
    if 1 in real:
        if set(real) != {1}:
            raise Refuse(
                f"reduction over axes {axes}: MPS reduces feature channels or width/height, "
                "not both in one node"
            )
        steps.append((f"MPSNNReductionFeatureChannels{op}Node", (1, h, w)))
    elif set(real) == {2, 3} and op == "Mean":
        steps.append(("MPSNNReductionSpatialMeanNode", (c, 1, 1)))
    else:
        if 3 in real:
            steps.append((f"MPSNNReductionRow{op}Node", (c, h, 1)))
            w = 1
        if 2 in real:
            steps.append((f"MPSNNReductionColumn{op}Node", (c, 1, w)))
    out_shape = tuple(lw.g.shape_of(node.outputs[0]))
    oc, oh, ow = steps[-1][1] if steps else (x.c, x.h, x.w)
    keep = reduce_attrs(node, lw.g.opset).keepdims
    if not keep and out_shape != (1, oc) and int(np.prod(out_shape)) != oc * oh * ow:
        raise Refuse(f"reduction to shape {list(out_shape)}")
    if not keep and (oh * ow > 1 and out_shape != (1, oc, oh, ow)):
        raise Refuse(f"reduction to shape {list(out_shape)} (keepdims=0 leaves a non-image tensor)")
    if not steps:
        lw.env[node.outputs[0]] = x
        return
    src = x.var
    comment = [f"ONNX node '{node.name}' ({node.op_type} over axes {axes})"]
    lines = []
    var = ""
    for i, (cls, _dims) in enumerate(steps):
        var = lw.fresh((node.name or node.outputs[0]) + ("" if i == len(steps) - 1 else "_rows"))
        lines.append(f"let {var} = {cls}(source: {src})")
        src = f"{var}.resultImage"
        if i < len(steps) - 1:
            lw.layers.append(Layer(var, comment, lines))
            comment, lines = [f"ONNX node '{node.name}' (second step: columns)"], []
    lw.emit(var, comment, lines, node.outputs[0], Img(src, oc, oh, ow))
