"""Fuse a residual Add into the convolution that produces one of its operands.

before:  x -> Conv -> t ┐
                   r ───┴-> Add -> y          after:  x, r -> Conv[o2e_residual=1] -> y

The residual becomes the Conv's 4th input (a missing bias is written as ""), added in the GEMM
epilogue while the output tile is still in registers; a Relu after the Add then fuses into the
same Conv (`fuse_activation` runs after this pass). The Conv moves to the Add's position, which
keeps the order topological: everything it reads exists by then.
"""

from __future__ import annotations

from onnx import AttributeProto

from ..ir import Attr, Graph, Node
from .fuse_activation import activation_of
from .registry import register_pass


def has_residual(node: Node) -> bool:
    return bool(node.attr("o2e_residual", 0))


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
                or prod.name in dropped
                or activation_of(prod) is not None
                or has_residual(prod)
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
            bias = prod.inputs[2] if len(prod.inputs) > 2 else ""
            attrs = {**prod.attrs, "o2e_residual": Attr(AttributeProto.INT, 1)}
            moved[add.name] = prod.replace(
                inputs=(prod.inputs[0], prod.inputs[1], bias, other),
                outputs=add.outputs,
                attrs=attrs,
            )
            dropped.add(prod.name)
            break
    if not moved:
        return graph
    nodes = [moved.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes)
