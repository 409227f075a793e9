"""OptionalHasElement and OptionalGetElement on a tensor: the C backend has no optional values,
so a tensor is always present (frontend/loader.py turns optional(tensor) graph inputs into
tensor inputs). An absent input is folded before C (passes/fold_constants.py)."""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext
from . import register_op
from .loops import copy_code


def _tensor_input(node: Node, graph: Graph) -> str | None:
    if not node.inputs or not node.inputs[0]:
        return f"{node.op_type} of an absent value (fold it: give the model its inputs)"
    if graph.type_of(node.inputs[0]) is None:
        return (
            f"{node.op_type} takes a tensor here (optional and sequence values are not supported)"
        )
    return None


@register_op("OptionalHasElement", check=_tensor_input)
def optional_has_element(ctx: NodeContext) -> str:
    return f"{ctx.y(0).sym}[0] = 1;  /* a tensor is always present */"


@register_op("OptionalGetElement", check=_tensor_input)
def optional_get_element(ctx: NodeContext) -> str:
    return copy_code(ctx.y(0).sym, ctx.x(0).sym, ctx.y(0).nbytes)
