"""Add, Sub, Mul, Div: image-image arithmetic nodes, or a channel affine / neuron for a
constant operand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ..core import (
    Img,
    Refuse,
)
from .common import (
    _channel_affine,
    _neuron_layer,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


def _broadcast_dims(lw: Lowering, name: str) -> tuple[int, ...]:
    s = lw.g.shape_of(name)
    return tuple([1] * (4 - len(s)) + list(s)) if len(s) <= 4 else s


@emitter("Add", "Sub", "Mul", "Div")
def _binary(lw: Lowering, node: Node) -> None:
    op = node.op_type
    a_name, b_name = node.inputs[0], node.inputs[1]
    ca, cb = lw.g.const(a_name), lw.g.const(b_name)
    if ca is not None and cb is not None:
        raise Refuse("both inputs are constants (run fold_constants)")
    if ca is not None or cb is not None:
        _binary_const(lw, node, op, ca, cb)
        return
    a, b = lw.img(a_name), lw.img(b_name)
    if a.flat_of or b.flat_of:
        raise Refuse("arithmetic on a flattened tensor")
    cls = {
        "Add": "MPSNNAdditionNode",
        "Sub": "MPSNNSubtractionNode",
        "Mul": "MPSNNMultiplicationNode",
        "Div": "MPSNNDivisionNode",
    }[op]
    extra: list[str] = []
    big, small = a, b
    if (a.c, a.h, a.w) != (b.c, b.h, b.w):
        # MPSNNBinaryArithmeticNode broadcasts its secondary source with strides of 0.
        if a.h * a.w == 1 and b.h * b.w > 1 or a.c == 1 and b.c > 1:
            big, small = b, a
            if op == "Div":
                raise Refuse("Div broadcasting its left operand has no MPS arithmetic equivalent")
            if op == "Sub":  # a - b = (-b) - (-a)
                extra += ["primaryScale = -1", "secondaryScale = -1"]
        if (small.h, small.w) == (1, 1) and (big.h, big.w) != (1, 1):
            extra += ["secondaryStrideInPixelsX = 0", "secondaryStrideInPixelsY = 0"]
        elif (small.h, small.w) != (big.h, big.w):
            raise Refuse(
                f"broadcast of {small.h}x{small.w} over {big.h}x{big.w} pixels; MPS broadcasts 1x1 only"
            )
        if small.c == 1 and big.c > 1:
            extra.append("secondaryStrideInFeatureChannels = 0")
        elif small.c != big.c:
            raise Refuse(f"{small.c} vs {big.c} channels cannot broadcast")
    var = lw.fresh(node.name or node.outputs[0])
    lines = [f"let {var} = {cls}(leftSource: {big.var}, rightSource: {small.var})"] + [
        f"{var}.{e}" for e in extra
    ]
    oc, oh, ow = big.c, big.h, big.w
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({op})"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


def _binary_const(
    lw: Lowering, node: Node, op: str, ca: np.ndarray | None, cb: np.ndarray | None
) -> None:
    const_left = ca is not None
    k = (ca if const_left else cb).astype(np.float64)  # type: ignore[union-attr]
    x = lw.img(node.inputs[1] if const_left else node.inputs[0])
    if op == "Div" and const_left:
        raise Refuse("constant / tensor: MPS has no reciprocal with a constant numerator here")
    if k.size == 1:
        v = float(k.reshape(-1)[0])
        a, b = {
            "Add": (1.0, v),
            "Sub": (-1.0, v) if const_left else (1.0, -v),
            "Mul": (v, 0.0),
            "Div": (1.0 / v, 0.0),
        }[op]
        _neuron_layer(lw, node, x, ("linear", a, b, 0), node.outputs[0])
        return
    kshape = k.shape
    per_channel = k.size == x.c and (
        len(kshape) == 1 and x.h * x.w == 1 or len(kshape) >= 3 and kshape[-1] == kshape[-2] == 1
    )
    if not per_channel:
        raise Refuse(
            f"constant operand of shape {list(kshape)}; MPSNNGraph has no constant tensors, only "
            "scalars (a linear neuron) and one value per channel (a 1x1 depthwise convolution) map"
        )
    v = k.reshape(-1)
    ones = np.ones(x.c)
    scale, shift = {
        "Add": (ones, v),
        "Sub": (-ones, v) if const_left else (ones, -v),
        "Mul": (v, np.zeros(x.c)),
        "Div": (1.0 / v, np.zeros(x.c)),
    }[op]
    comment = [
        f"ONNX node '{node.name}' ({op} by a per-channel constant, as a 1x1 depthwise convolution)"
    ]
    _channel_affine(lw, node, x, scale, shift, comment, "per-channel affine")
