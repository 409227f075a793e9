"""Fuse a residual Add into the convolution that produces one of its operands.

before:  x -> Conv -> t ┐
                   r ───┴-> Add -> y          after:  x, r -> o2e.ConvAddAct -> y

The Conv becomes the internal op o2e.ConvAddAct (semantics/fused.py; no activation yet): the
residual is its 4th input (a missing bias is written as ""), added in the GEMM
epilogue while the output tile is still in registers; a Relu after the Add then fuses into the
same Conv (`fuse_activation` runs after this pass). The Conv moves to the Add's position, which
keeps the order topological: everything it reads exists by then.
"""

from __future__ import annotations

from ..ir import Graph, Node
from ..semantics.fused import has_residual, with_domain, with_residual
from .registry import register_pass

__all__ = ["fuse_residual", "has_residual"]


@register_pass("fuse_residual", after=("fold_constants", "fold_batchnorm"))
def fuse_residual(graph: Graph) -> Graph:
    moved: dict[str, Node] = {}  # Add name -> fused conv placed there
    dropped: set[str] = set()  # conv names
    for add in graph.nodes:
        if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
            continue
        out_t = graph.type_of(add.outputs[0])
        for k in (0, 1):
            prod = graph.producer(add.inputs[k])
            other = add.inputs[1 - k]
            if (
                prod is None
                or prod.op_type != "Conv"
                or prod.domain != ""
                or prod.name in dropped
                or len(graph.consumers(prod.outputs[0])) != 1
                or prod.outputs[0] in graph.outputs
                or other == prod.outputs[0]
            ):
                continue
            t_conv, t_other = graph.type_of(prod.outputs[0]), graph.type_of(other)
            if (
                t_conv is None
                or t_other is None
                or out_t is None
                or t_conv.shape != t_other.shape
                or t_conv.shape != out_t.shape
                or t_conv.elem_type != 1
                or t_other.elem_type != 1
            ):
                continue
            moved[add.name] = with_residual(prod, other, add.outputs)
            dropped.add(prod.name)
            break
    if not moved:
        return graph
    nodes = [moved.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return with_domain(graph).with_nodes(nodes)
