"""Fold a scalar Mul into the Softmax / LogSoftmax over the last axis that reads it.

before:  s -> Mul(s, c) -> t -> Softmax(axis=-1) -> y
after:   s -> o2e.ScaledSoftmax(s, c)[log=0] -> y

Attention scores are scaled by 1/sqrt(d) (torch exports `q @ k.T * d ** -0.5` as MatMul, Mul,
Softmax): a whole pass over the largest tensor of the block (Whisper-tiny: 6 x 1500 x 1500)
that the softmax kernel does for free while it reads each row (runtime/o2e_softmax.h says
how its rounding may differ from the Mul's: by at most one rounding of the exponent's
argument). Only float32, a constant
scalar c, and a Mul whose output feeds that softmax alone (C backend:
runtime/o2e_softmax.h).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from ..ir import Attr, Graph, Node
from ..semantics.attrs import attr
from ..semantics.fused import DOMAIN, with_domain
from .registry import register_pass


def _std(node: Node | None, *ops: str) -> bool:
    return node is not None and node.op_type in ops and node.domain in ("", "ai.onnx")


def _scalar_operand(graph: Graph, mul: Node) -> tuple[str, str] | None:
    """(the tensor, the float32 scalar constant) of a binary Mul, else None."""
    if len(mul.inputs) != 2:
        return None
    for x, c in (mul.inputs, mul.inputs[::-1]):
        v = graph.const(c)
        if v is not None and v.size == 1 and v.dtype == np.float32 and graph.const(x) is None:
            return x, c
    return None


def _last_axis(graph: Graph, sm: Node, rank: int) -> bool:
    axis = int(attr(sm, "axis", graph.opset))
    # before opset 13 the op flattens from `axis` on: the same rows only for the last axis
    return rank > 0 and axis % rank == rank - 1


@register_pass("fuse_softmax_scale", after=("fold_constants", "fuse_activation", "fuse_attention"))
def fuse_softmax_scale(graph: Graph) -> Graph:
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for sm in graph.nodes:
        if not _std(sm, "Softmax", "LogSoftmax"):
            continue
        mul = graph.producer(sm.inputs[0])
        if not _std(mul, "Mul") or mul.name in dropped:  # type: ignore[union-attr]
            continue
        assert mul is not None
        ops = _scalar_operand(graph, mul)
        tx, tt = graph.type_of(sm.inputs[0]), ops and graph.type_of(ops[0])
        if (
            ops is None
            or tx is None
            or not tt
            or tx.dtype != np.float32
            or tx.shape is None
            or tt.shape != tx.shape
            or not _last_axis(graph, sm, len(tx.shape))
            or sm.inputs[0] in graph.outputs
            or [n.name for n in graph.consumers(sm.inputs[0])] != [sm.name]
        ):
            continue
        fused[sm.name] = sm.replace(
            op_type="ScaledSoftmax",
            domain=DOMAIN,
            inputs=ops,
            attrs={"log": Attr(AttributeProto.INT, int(sm.op_type == "LogSoftmax"))},
        )
        dropped.add(mul.name)
    if not fused:
        return graph
    return with_domain(graph).with_nodes(
        [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    )
