"""Fuse an element-wise activation into the node that produces its input.

before:  x -> Conv -> t -> Relu -> y          after:  x -> Conv[o2e_act=Relu] -> y

The fused activation is recorded as attributes `o2e_act` (the ONNX op name), `o2e_act_alpha`
and `o2e_act_beta` (its parameters, ONNX defaults filled in); `activation_of(node)` reads them.
Backends apply it where the producer's result is stored (the GEMM epilogue for Conv/Gemm,
the output loop of the C backend's InstanceNormalization), saving a pass over memory.
Only the C backend runs this pass; MPS fuses neurons into its own layers when it lowers.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from onnx import AttributeProto

from ..ir import Attr, Graph, Node
from .registry import register_pass

PRODUCERS = (
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "InstanceNormalization",
)


class Activation(NamedTuple):
    op: str  # ONNX op name: Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh
    alpha: float
    beta: float


def activation_of(node: Node) -> Activation | None:
    op = node.attr("o2e_act")
    if op is None:
        return None
    return Activation(
        op, float(node.attr("o2e_act_alpha", 0.0)), float(node.attr("o2e_act_beta", 0.0))
    )


def _as_activation(graph: Graph, node: Node) -> Activation | None:
    op = node.op_type
    if node.domain != "" or len(node.outputs) != 1:
        return None
    if op in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        return Activation(op, 0.0, 0.0)
    if op == "LeakyRelu":
        return Activation(op, float(node.attr("alpha", 0.01)), 0.0)
    if op == "HardSigmoid":
        return Activation(op, float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))
    if op == "Clip":
        lo, hi = -np.inf, np.inf
        if graph.opset < 11:
            lo, hi = (
                node.attr("min", -3.4028234663852886e38),
                node.attr("max", 3.4028234663852886e38),
            )
        else:
            for idx in (1, 2):
                if len(node.inputs) > idx and node.inputs[idx]:
                    v = graph.const(node.inputs[idx])
                    if v is None:
                        return None
                    if idx == 1:
                        lo = float(v)
                    else:
                        hi = float(v)
        return Activation(op, float(lo), float(hi))
    return None


@register_pass("fuse_activation", after=("fold_constants", "fold_batchnorm", "fuse_residual"))
def fuse_activation(graph: Graph) -> Graph:
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        act = _as_activation(graph, node)
        if act is None or graph.type_of(node.outputs[0]) is None:
            continue
        prod = graph.producer(node.inputs[0])
        if (
            prod is None
            or prod.op_type not in PRODUCERS
            or prod.domain != ""
            or prod.name in fused
            or activation_of(prod) is not None
            or len(prod.outputs) != 1
            or len(graph.consumers(prod.outputs[0])) != 1
            or prod.outputs[0] in graph.outputs
        ):
            continue
        tp, ta = graph.type_of(prod.outputs[0]), graph.type_of(node.outputs[0])
        if tp is None or ta is None or tp.elem_type != ta.elem_type or tp.shape != ta.shape:
            continue
        attrs = dict(prod.attrs)
        attrs["o2e_act"] = Attr(AttributeProto.STRING, act.op)
        attrs["o2e_act_alpha"] = Attr(AttributeProto.FLOAT, act.alpha)
        attrs["o2e_act_beta"] = Attr(AttributeProto.FLOAT, act.beta)
        fused[prod.name] = prod.replace(outputs=node.outputs, attrs=attrs)
        dropped.add(node.name)
    if not fused:
        return graph
    return graph.with_nodes([fused.get(n.name, n) for n in graph.nodes if n.name not in dropped])
