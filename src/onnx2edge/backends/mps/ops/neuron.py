"""Activations as MPSCNNNeuron nodes (and the Erf GELU pattern as one geLU neuron), Softmax.
HardSwish and Mish have no neuron: the backend requires the decompose_hardswish and
decompose_mish passes (passes/decompose.py), which leave HardSigmoid and Mul, Softplus, Tanh
and Mul.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.records import softmax_attrs
from ..core import (
    Img,
    Refuse,
)
from .common import (
    NO_NODE,
    _neuron_layer,
    _scalar,
    emitter,
)

if TYPE_CHECKING:
    from ..lower import Lowering


@emitter(
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Elu",
    "HardSigmoid",
    "Softplus",
    "Softsign",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Gelu",
    "Pow",
    "Clip",
)
def _activation(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    spec = lw.neuron_spec(node)
    if spec is None:
        if node.op_type == "Clip":
            raise Refuse(
                "Clip with a lower bound other than 0 has no MPS neuron (ReLUN clamps to [0, b])"
            )
        if node.op_type == "Pow":
            raise Refuse(
                "Pow needs a constant scalar exponent (MPSCNNNeuronPower computes (a*x + b)^c)"
            )
        raise Refuse(
            "Gelu with approximate='tanh' has no MPS neuron (MPSCNNNeuronGeLU is the erf form)"
        )
    _neuron_layer(lw, node, x, spec, node.outputs[0])


@emitter("PRelu")
def _prelu(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    slope = lw.const(node, 1, "slope").astype(np.float32).reshape(-1)
    if slope.size not in (1, x.c):
        raise Refuse(f"slope of {slope.size} values; MPSCNNNeuronPReLU takes one per channel")
    slope = np.broadcast_to(slope, (x.c,))
    var = lw.fresh(node.name or node.outputs[0])
    off, ent = lw.blob.add(slope)
    lw.blob.layer(var, [node.name], "prelu", {"slope": ent})
    lines = [
        f"let {var} = MPSCNNNeuronPReLUNode(source: {x.var}, aData: parameters.data(offset: {off}, count: {x.c}))"
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (PRelu)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )


@emitter("Erf")
def _erf_gelu(lw: Lowering, node: Node) -> None:
    """GELU as exporters decompose it before opset 20, x * 0.5 * (1 + erf(x / sqrt(2))), as
    one MPSCNNNeuronType.geLU neuron (MPSCNNNeuronType.h, iOS 13). The Div (or Mul by
    1/sqrt(2)) before the Erf was already emitted as a linear neuron; it is left unused."""
    producers = [n for n in lw.g.nodes if node.inputs[0] in n.outputs]
    scaled = producers[0] if producers else None
    ok_scale = scaled is not None and (
        scaled.op_type == "Div" and _scalar(lw, scaled.inputs[1]) is not None
        and abs(_scalar(lw, scaled.inputs[1]) - 2**0.5) < 1e-4  # type: ignore[operator]
        or scaled.op_type == "Mul" and _scalar(lw, scaled.inputs[1]) is not None
        and abs(_scalar(lw, scaled.inputs[1]) - 2**-0.5) < 1e-4  # type: ignore[operator]
    )  # fmt: skip
    if not ok_scale:
        raise Refuse(NO_NODE["Erf"])
    x_name = scaled.inputs[0]  # type: ignore[union-attr]
    add = lw.sole_consumer(node.outputs[0])
    if add is None or add.op_type != "Add" or _scalar(lw, add.inputs[1]) != 1.0:
        raise Refuse(NO_NODE["Erf"])
    chain, t, have_x, half = [add], add.outputs[0], False, False
    for _ in range(2):
        m = lw.sole_consumer(t)
        if m is None or m.op_type != "Mul":
            break
        other = m.inputs[1] if m.inputs[0] == t else m.inputs[0]
        if other == x_name and not have_x:
            have_x = True
        elif _scalar(lw, other) == 0.5 and not half:
            half = True
        else:
            break
        chain.append(m)
        t = m.outputs[0]
    # x * 0.5 might also come first: Mul(x, 0.5) feeding the last Mul.
    if not (have_x and half):
        raise Refuse(NO_NODE["Erf"])
    x = lw.img(x_name)
    for n in chain:
        lw.absorbed.add(id(n))
    names = ", ".join(f"'{n.name}'" for n in chain)
    var = lw.fresh(node.name or node.outputs[0])
    lw.emit(
        var,
        [
            f"ONNX nodes '{scaled.name}', '{node.name}', {names} (GELU: x * 0.5 * (1 + erf(x / "  # type: ignore[union-attr]
            "sqrt 2)), one geLU neuron)"
        ],  # fmt: skip
        [f"let {var} = MPSCNNNeuronGeLUNode(source: {x.var})"],
        t,
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )


@emitter("Softmax", "LogSoftmax")
def _softmax(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    rank = len(lw.g.shape_of(node.inputs[0]))
    sm = softmax_attrs(node, lw.g.opset)
    axis = sm.axis + rank if sm.axis < 0 else sm.axis
    spatial = x.h * x.w > 1
    over_channels = axis == 1 and (not sm.flattens or not spatial or rank == 2)
    if x.flat_of and x.flat_of[1] * x.flat_of[2] > 1 or not over_channels:
        raise Refuse(
            f"softmax over axis {axis} of a rank-{rank} tensor; MPSCNNSoftMax normalizes over feature channels only"
        )
    cls = "MPSCNNSoftMaxNode" if node.op_type == "Softmax" else "MPSCNNLogSoftMaxNode"
    var = lw.fresh(node.name or node.outputs[0])
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({node.op_type})"],
        [f"let {var} = {cls}(source: {x.var})"],
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )
