"""Data-dependent output sizes with a static upper bound (NonMaxSuppression, Unique).

How many boxes NonMaxSuppression keeps, or how many distinct values Unique finds, is only known
at run time, but never more than a bound the input shapes give. Such an output gets the bound as
its static shape and passes through an internal op, `o2e.Bounded(x; axis)` (semantics/fused.py),
which names the axis whose extent varies; the generated code reports the actual extent at run
time (C: `<prefix>_output_count(i)`), the values written contiguously in the actual shape. A
bounded tensor must be a graph output that no other node reads: an op downstream would need
the run-time size too.

    before:  boxes[1,6,4], scores[1,1,6] -> NonMaxSuppression -> selected[?, 3]
    after:   ... -> NonMaxSuppression -> selected/bound[6, 3] -> o2e.Bounded(axis 0)
                 -> selected[6, 3], 0..6 rows filled
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from ..ir import Attr, Graph, Node, TensorType, Value
from ..semantics.fused import DOMAIN, with_domain
from .registry import register_pass

BOUNDED = "Bounded"  # o2e.Bounded


def _static(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name) if name else None
    return t.static_shape if t is not None and t.is_static else None


def _bounds(graph: Graph, node: Node) -> dict[int, tuple[tuple[int, ...], int | None]] | None:
    """{output index: (bound shape, varying axis or None for a static one)} for the node's
    outputs."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "NonMaxSuppression":
        boxes, scores = _static(graph, node.inputs[0]), _static(graph, node.inputs[1])
        if boxes is None or scores is None or len(boxes) != 3 or len(scores) != 3:
            return None
        per_class = boxes[1]
        if len(node.inputs) > 2 and node.inputs[2] and graph.is_const(node.inputs[2]):
            m = graph.const(node.inputs[2])
            per_class = min(per_class, max(int(np.asarray(m).reshape(-1)[0]), 0) if m.size else 0)
        elif len(node.inputs) <= 2 or not node.inputs[2]:
            per_class = 0  # max_output_boxes_per_class absent: 0, nothing is selected
        return {0: ((boxes[0] * scores[1] * per_class, 3), 0)}
    if node.op_type == "Unique":
        x = _static(graph, node.inputs[0])
        if x is None:
            return None
        axis = node.attr("axis")
        if axis is None:
            n, y, ax = int(np.prod(x, dtype=np.int64)), (int(np.prod(x, dtype=np.int64)),), 0
        else:
            ax = int(axis) % max(len(x), 1)
            n, y = x[ax], x
        # inverse_indices (output 2) has a static size: one entry an input element (or slice)
        return {0: (tuple(y), ax), 1: ((n,), 0), 2: ((n,), None), 3: ((n,), 0)}
    return None


def is_bounded(node: Node) -> bool:
    return node.op_type == BOUNDED and node.domain == DOMAIN


def bounded_output(graph: Graph, name: str) -> str | None:
    """The o2e.Bounded output tensor `name` passes through, or None."""
    for n in graph.consumers(name):
        if is_bounded(n):
            return n.outputs[0]
    return None


def bounded_axes(graph: Graph, node: Node) -> dict[int, int]:
    """{output index: varying axis} of a node whose outputs pass through o2e.Bounded, else {}."""
    out = {}
    for k, name in enumerate(node.outputs):
        for n in graph.consumers(name) if name else ():
            if is_bounded(n):
                out[k] = int(n.attr("axis"))
    return out


def bounded_axis(graph: Graph, name: str) -> int | None:
    """The axis of tensor `name` whose extent is only known at run time, or None."""
    node = graph.producer(name)
    return int(node.attr("axis")) if node is not None and is_bounded(node) else None


@register_pass("bound_data_dependent", after=("fold_constants", "infer_shapes"))
def bound_data_dependent(graph: Graph) -> Graph:
    """Give NonMaxSuppression's and Unique's data-dependent outputs their upper bound."""
    values = dict(graph.values)
    nodes = []
    taken = set(values) | {o for n in graph.nodes for o in n.outputs} | set(graph.initializers)
    changed = False
    for node in graph.nodes:
        bounds = _bounds(graph, node)
        if not bounds:
            nodes.append(node)
            continue
        outs = list(node.outputs)
        marks = []
        for k, (shape, axis) in bounds.items():
            if k >= len(node.outputs) or not node.outputs[k]:
                continue
            name = node.outputs[k]
            t = graph.type_of(name)
            elem = t.elem_type if t is not None and t.elem_type else 7  # INT64
            values[name] = Value(name, TensorType(elem, tuple(int(d) for d in shape)))
            if axis is None:
                continue
            inner, i = f"{name}/bound", 1
            while inner in taken:
                inner, i = f"{name}/bound{i}", i + 1
            taken.add(inner)
            values[inner] = Value(inner, values[name].type)
            outs[k] = inner
            attrs = {"axis": Attr(AttributeProto.INT, int(axis))}
            marks.append(Node(f"{node.name}/bounded{k}", BOUNDED, (inner,), (name,), attrs, DOMAIN))
        nodes.extend([node.replace(outputs=tuple(outs)), *marks])
        changed = True
    return with_domain(graph.with_nodes(nodes, values=values)) if changed else graph
