"""Fuse an element-wise activation into the node that produces its input.

before:  x -> Conv -> t -> Relu -> y          after:  x -> o2e.ConvAct[activation=Relu] -> y

The producer becomes the internal op `o2e.<Base>Act` (semantics/fused.py: its own schema, the
base op's attributes plus `activation`, `activation_alpha`, `activation_beta`); an
o2e.ConvAddAct from fuse_residual gets its activation set. Which activations fuse, and how
their parameters are read, is the activation table's (semantics/activations.py).
Backends apply the activation where the producer's result is stored (the GEMM epilogue for
Conv/Gemm, the output loop of the C backend's InstanceNormalization), saving a pass over
memory. Only the C backend runs this pass; MPS fuses neurons into its own layers when it lowers.
"""

from __future__ import annotations

from ..ir import Graph, Node
from ..semantics.activations import FUSABLE, Activation, as_activation
from ..semantics.fused import activation_of, base_op, is_fused, with_activation, with_domain
from .registry import register_pass

__all__ = ["Activation", "activation_of", "fuse_activation"]

PRODUCERS = (
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "InstanceNormalization",
)


def _producer_ok(graph: Graph, prod: Node | None, fused: dict[str, Node]) -> bool:
    return not (
        prod is None
        or base_op(prod) not in PRODUCERS
        or (prod.domain != "" and not is_fused(prod))
        or prod.name in fused
        or activation_of(prod) is not None
        or len(prod.outputs) != 1
        or len(graph.consumers(prod.outputs[0])) != 1
        or prod.outputs[0] in graph.outputs
    )


@register_pass("fuse_activation", after=("fold_constants", "fold_batchnorm", "fuse_residual"))
def fuse_activation(graph: Graph) -> Graph:
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        act = as_activation(graph, node) if node.op_type in FUSABLE else None
        if act is None or graph.type_of(node.outputs[0]) is None:
            continue
        prod = graph.producer(node.inputs[0])
        if not _producer_ok(graph, prod, fused):
            continue
        assert prod is not None
        tp, ta = graph.type_of(prod.outputs[0]), graph.type_of(node.outputs[0])
        if tp is None or ta is None or tp.elem_type != ta.elem_type or tp.shape != ta.shape:
            continue
        fused[prod.name] = with_activation(prod, act, node.outputs)
        dropped.add(node.name)
    if not fused:
        return graph
    return with_domain(graph).with_nodes(
        [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    )
