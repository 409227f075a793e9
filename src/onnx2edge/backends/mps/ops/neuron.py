"""Activations as MPSCNNNeuron nodes, Softmax.
HardSwish and Mish have no neuron: the backend requires the decompose_hardswish and
decompose_mish passes (passes/decompose.py), which leave HardSigmoid and Mul, Softplus, Tanh
and Mul. GELU written out with Erf (torch below opset 20) is one Gelu node by then: the
backend requires compose_gelu (passes/compose_gelu.py), so it is one geLU neuron.
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
    _neuron_layer,
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
