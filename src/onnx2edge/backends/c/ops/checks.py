"""`check` functions shared by several op families: which input dtypes an emitter takes."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node


def float_input(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype not in (np.float32, np.float64):
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 and float64 only)"
    return None


def float32_input(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype != np.float32:
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 only)"
    return None
