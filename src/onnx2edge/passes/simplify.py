"""Structural clean-ups that never change numerics."""

from __future__ import annotations

from ..ir import Graph
from .registry import register_pass


@register_pass("eliminate_dead_nodes", after=("fold_constants",))
def eliminate_dead_nodes(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output.

    before:  x -> A -> y (output)      after:  x -> A -> y
                 \\-> B -> z (unused)
    """
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            keep.append(node)
            live.update(i for i in node.inputs if i)
    return graph.with_nodes(reversed(keep))


_PASS_THROUGH = {"Identity", "Dropout"}


@register_pass("remove_identity", after=("fold_constants",))
def remove_identity(graph: Graph) -> Graph:
    """Bypass Identity and inference-mode Dropout (its mask output unused).

    before:  A -> t -> Identity -> u -> B      after:  A -> t -> B
    A node whose output is a graph output is kept, so output names never change.
    """
    rename: dict[str, str] = {}
    nodes = []
    for node in graph.nodes:
        node = node.replace(inputs=tuple(rename.get(i, i) for i in node.inputs))
        if (
            node.op_type in _PASS_THROUGH
            and node.domain == ""
            and node.outputs[0] not in graph.outputs
            and not any(o and graph.consumers(o) for o in node.outputs[1:])
            and not (
                node.op_type == "Dropout"
                and len(node.inputs) > 2
                and node.inputs[2]
                and not _is_false(graph, node.inputs[2])
            )
        ):
            rename[node.outputs[0]] = node.inputs[0]
            continue
        nodes.append(node)
    return graph.with_nodes(nodes)


def _is_false(graph: Graph, name: str) -> bool:
    v = graph.const(name)
    return v is not None and not bool(v.reshape(-1)[0])
