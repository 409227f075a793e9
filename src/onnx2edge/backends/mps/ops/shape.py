"""Reshape-like views, Concat, Pad, Resize, Slice and Split."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.records import pad_attrs, resize_attrs
from ....semantics.shape_ops import axis_attr, split_attrs, transpose_perm
from ..core import (
    Img,
    Layer,
    Refuse,
    swift_float,
)
from ..cpu import CPURefuse, slice_params
from .common import (
    _crop,
    _selection_conv,
    _static,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


@emitter("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def _reshape(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if node.op_type in ("Identity", "Dropout"):
        lw.env[node.outputs[0]] = x
        return
    shape = lw.g.shape_of(node.outputs[0])
    c, h, w = x.flat_of or (x.c, x.h, x.w)
    if _channel_shuffle(lw, node, x, tuple(shape)):
        return
    if tuple(shape) in ((1, c * h * w), (1, c * h * w, 1, 1)) and (len(shape) == 2 or h * w == 1):
        # Flatten to [1, K]: free when H = W = 1; otherwise a view in ONNX's CHW order, which
        # a following fully connected layer reorders into its weights.
        lw.env[node.outputs[0]] = (
            Img(x.var, c * h * w, 1, 1) if h * w == 1 else Img(x.var, c * h * w, 1, 1, (c, h, w))
        )
        return
    if tuple(shape) == (1, c, h, w):
        lw.env[node.outputs[0]] = Img(x.var, c, h, w)
        return
    if (
        h * w == 1
        and len(shape) >= 2
        and shape[0] == 1
        and shape[1] == c
        and all(d == 1 for d in shape[2:])
    ):
        # [1, C, 1, 1] <-> [1, C] <-> [1, C, 1]: the same C values in the same order.
        lw.env[node.outputs[0]] = Img(x.var, c, 1, 1)
        return
    raise Refuse(
        f"reshape {[1, c, h, w]} -> {list(shape)} moves data between channels and pixels; "
        "MPSNNReshapeNode orders elements differently from ONNX's row-major order"
    )


def _channel_shuffle(lw: Lowering, node: Node, x: Img, shape: tuple[int, ...]) -> bool:
    """Reshape [1, C, H, W] -> [1, g1, g2, ..., H, W], a Transpose of the channel-group axes
    only, and a Reshape back to [1, C, H, W] (ShuffleNet's channel shuffle) permute channels:
    one 1x1 selection convolution. Absorbs the Transpose and the second Reshape."""
    if x.flat_of or node.op_type != "Reshape" or len(shape) < 5 or shape[0] != 1:
        return False
    if tuple(shape[-2:]) != (x.h, x.w) or int(np.prod(shape[1:-2])) != x.c:
        return False
    tr = lw.sole_consumer(node.outputs[0])
    if tr is None or tr.op_type != "Transpose":
        return False
    k = len(shape)
    perm = list(transpose_perm(tr, k, lw.g.opset))
    if len(perm) != k or perm[0] != 0 or perm[-2:] != [k - 2, k - 1]:
        return False
    back = lw.sole_consumer(tr.outputs[0])
    if back is None or back.op_type not in ("Reshape", "Flatten"):
        return False
    if tuple(lw.g.shape_of(back.outputs[0])) != (1, x.c, x.h, x.w):
        return False
    groups = list(shape[1:-2])
    rows = np.arange(x.c).reshape(groups).transpose([p - 1 for p in perm[1:-2]]).reshape(-1)
    lw.absorbed.update({id(tr), id(back)})
    var = _selection_conv(
        lw, node, x, [int(r) for r in rows], x.c, node.name or node.outputs[0],
        f"with '{tr.name}' and '{back.name}', a channel shuffle",
    )  # fmt: skip
    lw.env[back.outputs[0]] = Img(f"{var}.resultImage", x.c, x.h, x.w)
    return True


@emitter("Concat")
def _concat(lw: Lowering, node: Node) -> None:
    srcs = [lw.img(i) for i in node.inputs]
    rank = len(lw.g.shape_of(node.outputs[0]))
    axis = axis_attr(node, lw.g.opset, rank)
    if axis != 1 or any(s.flat_of for s in srcs):
        raise Refuse(
            f"concatenation on axis {axis}; MPSNNConcatenationNode joins feature channels only"
        )
    var = lw.fresh(node.name or node.outputs[0])
    oc, oh, ow = _static(lw, node.outputs[0])
    if any(s.c % 4 for s in srcs[:-1]):
        # MPSNNConcatenationNode starts each input at a multiple of 4 channels (MPSImage
        # slices), which would leave gaps: place each input at its ONNX channel offset with a
        # 1x1 selection convolution (C_i -> C) and add the placed images.
        placed: list[str] = []
        at = 0
        for s in srcs:
            rows = [-1] * oc
            rows[at : at + s.c] = range(s.c)
            at += s.c
            sel = _selection_conv(
                lw, node, s, rows, oc, f"{var}_place{len(placed)}", f"input at channel {at - s.c}"
            )
            placed.append(f"{sel}.resultImage")
        total = placed[0]
        for i, p in enumerate(placed[1:], 1):
            add = var if i == len(placed) - 1 else lw.fresh(f"{var}_sum{i}")
            line = f"let {add} = MPSNNAdditionNode(leftSource: {total}, rightSource: {p})"
            if add != var:
                lw.layers.append(Layer(add, [f"ONNX node '{node.name}' (Concat), sum"], [line]))
            total = f"{add}.resultImage"
        lw.emit(
            var,
            [f"ONNX node '{node.name}' (Concat of inputs that are not multiples of 4 channels)"],
            [line],
            node.outputs[0],
            Img(f"{var}.resultImage", oc, oh, ow),
        )
        return
    sources = ", ".join(s.var for s in srcs)
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (Concat on channels)"],
        [f"let {var} = MPSNNConcatenationNode(sources: [{sources}])"],
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


@emitter("Pad")
def _pad(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    pa = pad_attrs(node, lw.g.opset)
    mode = pa.mode
    if pa.value is None:  # opset 11+: inputs
        pads = lw.const(node, 1, "pads").astype(np.int64).tolist()
        cv = lw.opt_const(node, 2)
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        if len(node.inputs) > 3 and node.inputs[3]:
            raise Refuse("Pad with an axes input is not supported; pad all axes")
    else:
        pads = list(pa.pads or (0,) * 8)
        value = pa.value
    if len(pads) != 8 or pads[0] or pads[1] or pads[4] or pads[5]:
        raise Refuse(
            f"pads {pads} touch the batch or channel axis; MPSNNPadNode pads width and height here"
        )
    if min(pads) < 0:
        raise Refuse("negative pads (cropping) are not supported")
    edge = {
        "constant": "zero" if value == 0 else "constant",
        "reflect": "mirror",
        "edge": "clamp",
    }.get(mode)
    if edge is None:
        raise Refuse(f"pad mode '{mode}' has no MPSImageEdgeMode")
    var = lw.fresh(node.name or node.outputs[0])
    top, left, bottom, right = pads[2], pads[3], pads[6], pads[7]
    lines = [
        f"let {var} = MPSNNPadNode(\n    source: {x.var},\n    paddingSizeBefore: MPSImageCoordinate(x: {left}, y: {top}, channel: 0),\n"
        f"    paddingSizeAfter: MPSImageCoordinate(x: {right}, y: {bottom}, channel: 0), edgeMode: .{edge})"
    ]
    if edge == "constant":
        lines.append(f"{var}.fillValue = {swift_float(value)}")
    comment = [f"ONNX node '{node.name}' (Pad, mode '{mode}' = MPSImageEdgeMode .{edge})"]
    lw.emit(
        var,
        comment,
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h + top + bottom, x.w + left + right),
    )


@emitter("Resize", "Upsample")
def _resize(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    oc, oh, ow = _static(lw, node.outputs[0])
    r = resize_attrs(node, lw.g.opset)
    mode, ctm = r.mode, r.coordinate_transformation_mode
    # Resize-10 and Upsample (r.legacy): asymmetric coordinates, and 'simple' rounding, which
    # is floor when upsampling (the integer-scale paths below)
    nearest_mode = "floor" if r.legacy else r.nearest_mode
    if r.antialias:
        raise Refuse("antialiased Resize has no MPS equivalent")
    var = lw.fresh(node.name or node.outputs[0])
    integer = oh % x.h == 0 and ow % x.w == 0
    sy, sx = oh // x.h, ow // x.w
    comment = [f"ONNX node '{node.name}' ({node.op_type}, {mode}, {ctm})"]
    if mode == "nearest":
        # With an integer scale, half_pixel + round and asymmetric + floor both pick source
        # pixel x / s, which is what MPSCNNUpsamplingNearest repeats.
        ok = integer and (
            (ctm in ("half_pixel", "pytorch_half_pixel") and nearest_mode.startswith("round"))
            or (ctm == "asymmetric" and nearest_mode == "floor")
        )
        if not ok:
            rows = _nearest_sources(x.h, oh, ctm, nearest_mode)
            cols = _nearest_sources(x.w, ow, ctm, nearest_mode)
            if rows is not None and cols is not None:
                # Every output pixel reads source (start + k * step): a strided 1x1 crop.
                crop = _crop(lw, node, x, (rows[0], cols[0]), (rows[1], cols[1]), (oh, ow), var)
                lw.env[node.outputs[0]] = Img(f"{crop}.resultImage", oc, oh, ow)
                return
            raise Refuse(
                f"nearest resize {x.h}x{x.w} -> {oh}x{ow} with {ctm}/{nearest_mode}; MPSCNNUpsamplingNearest repeats pixels by integer factors"
            )
        line = f"let {var} = MPSCNNUpsamplingNearestNode(source: {x.var}, integerScaleFactorX: {sx}, integerScaleFactorY: {sy})"
    elif mode in ("linear", "bilinear"):
        if ctm == "align_corners" and integer:
            line = f"let {var} = MPSCNNUpsamplingBilinearNode(\n    source: {x.var}, integerScaleFactorX: {sx}, integerScaleFactorY: {sy}, alignCorners: true)"
        elif ctm == "half_pixel" or ctm == "pytorch_half_pixel" and oh > 1 and ow > 1:
            # MPSImageBilinearScale samples at pixel centres: ONNX's half_pixel mapping.
            line = f"let {var} = MPSNNBilinearScaleNode(source: {x.var}, outputSize: MTLSize(width: {ow}, height: {oh}, depth: 1))"
        else:
            raise Refuse(
                f"linear resize with coordinate_transformation_mode '{ctm}'; MPS offers half_pixel (MPSNNBilinearScaleNode) and align_corners (integer scales)"
            )
    else:
        raise Refuse(f"resize mode '{mode}' has no MPSNNGraph node (nearest and linear map)")
    lw.emit(var, comment, [line], node.outputs[0], Img(f"{var}.resultImage", oc, oh, ow))


def _nearest_sources(n: int, on: int, ctm: str, mode: str) -> tuple[int, int] | None:
    """(start, step) when ONNX's nearest Resize of an axis of n pixels to `on` reads source
    pixels start + k * step (step >= 1: a downscale by an integer factor), else None."""
    import math

    if on < 1 or on > n:
        return None
    scale = on / n
    idx = []
    for d in range(on):
        if ctm == "align_corners":
            src = d * (n - 1) / (on - 1) if on > 1 else 0.0
        elif ctm == "asymmetric":
            src = d / scale
        elif ctm == "pytorch_half_pixel":
            src = (d + 0.5) / scale - 0.5 if on > 1 else 0.0
        elif ctm == "half_pixel":
            src = (d + 0.5) / scale - 0.5
        else:
            return None
        if mode == "floor":
            i = math.floor(src)
        elif mode == "ceil":
            i = math.ceil(src)
        elif mode == "round_prefer_ceil":
            i = math.floor(src + 0.5)
        else:  # round_prefer_floor
            i = math.ceil(src - 0.5)
        idx.append(min(max(i, 0), n - 1))
    step = idx[1] - idx[0] if on > 1 else 1
    if step < 1 or any(b - a != step for a, b in zip(idx, idx[1:], strict=False)):
        return None
    return idx[0], step


def _gpu_slice(
    lw: Lowering, node: Node, x: Img, starts: list[int], steps: list[int], out: str
) -> None:
    oc, oh, ow = _static(lw, out)
    if len(starts) != 4 or x.flat_of:
        raise Refuse("slice of a tensor that is not a [1, C, H, W] image")
    if starts[0] != 0 or steps[0] != 1:
        raise Refuse("slice along the batch axis")
    if steps[2] < 1 or steps[3] < 1:
        raise Refuse("slice backwards along height/width (negative step)")
    cur = x
    base = node.name or out
    if (oc, steps[1], starts[1]) != (x.c, 1, 0):
        rows = [starts[1] + k * steps[1] for k in range(oc)]
        why = f"channels {rows[:3]}..."
        var = _selection_conv(lw, node, cur, rows, oc, base + "_channels", why)
        cur = Img(f"{var}.resultImage", oc, x.h, x.w)
    if (oh, ow) != (x.h, x.w) or steps[2:] != [1, 1]:
        var = _crop(lw, node, cur, (starts[2], starts[3]), (steps[2], steps[3]), (oh, ow), base)
        cur = Img(f"{var}.resultImage", oc, oh, ow)
    lw.env[out] = cur


@emitter("Slice")
def _slice(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    try:
        starts, steps = slice_params(lw, node)
    except CPURefuse as e:
        raise Refuse(str(e)) from e
    _gpu_slice(lw, node, x, starts, steps, node.outputs[0])


@emitter("Split")
def _split(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    rank = len(lw.g.shape_of(node.inputs[0]))
    axis = split_attrs(node, lw.g.opset, rank).axis
    if rank != 4:
        raise Refuse(f"split of a rank-{rank} tensor")
    at = 0
    for o in node.outputs:
        if not o:
            continue
        size = int(lw.g.shape_of(o)[axis])
        starts = [0, 0, 0, 0]
        starts[axis] = at
        at += size
        _gpu_slice(lw, node, x, starts, [1, 1, 1, 1], o)
