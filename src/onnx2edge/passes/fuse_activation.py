"""Fuse an element-wise activation into the node that produces its input.

before:  x -> Conv -> t -> Relu -> y          after:  x -> o2e.ConvAct[activation=Relu] -> y

The producer becomes the internal op `o2e.<Base>Act` (semantics/fused.py: its own schema, the
base op's attributes plus `activation`, `activation_alpha`, `activation_beta`); an
o2e.ConvAddAct from fuse_residual gets its activation set. Which activations fuse, and how
their parameters are read, is the activation table's (semantics/activations.py).
Backends apply the activation where the producer's result is stored (the GEMM epilogue for
Conv/Gemm, the output loop of the C backend's InstanceNormalization), saving a pass over
memory. `fuse_activations` is the same pass with options (which producers, which activations,
a veto per pair): a backend whose layers fuse fewer activations (MPS: only MPSCNNNeuron types,
into convolutions and fully connected layers) registers it with its own options.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..ir import Graph, Node
from ..semantics.activations import FUSABLE, Activation, as_activation
from ..semantics.fused import activation_of, base_op, is_fused, with_activation, with_domain
from .registry import register_pass

__all__ = ["Activation", "activation_of", "fuse_activation", "fuse_activations"]

PRODUCERS = (
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "InstanceNormalization",
)


Accept = Callable[[Graph, Node, Activation], bool]


def _producer_ok(
    graph: Graph, prod: Node | None, fused: dict[str, Node], producers: Collection[str]
) -> bool:
    return not (
        prod is None
        or base_op(prod) not in producers
        or (prod.domain != "" and not is_fused(prod))
        or prod.name in fused
        or activation_of(prod) is not None
        or len(prod.outputs) != 1
        or len(graph.consumers(prod.outputs[0])) != 1
        or prod.outputs[0] in graph.outputs
    )


@register_pass("fuse_activation", after=("fold_constants", "fold_batchnorm", "fuse_residual"))
def fuse_activation(graph: Graph) -> Graph:
    return fuse_activations(graph)


def fuse_activations(
    graph: Graph,
    *,
    producers: Collection[str] = PRODUCERS,
    activations: Collection[str] = FUSABLE,
    accept: Accept | None = None,
) -> Graph:
    """fuse_activation with options: only `activations` (table op names) into `producers`
    (base op names), and only the pairs `accept(graph, producer, activation)` takes."""
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        act = as_activation(graph, node) if node.op_type in activations else None
        if act is None or graph.type_of(node.outputs[0]) is None:
            continue
        prod = graph.producer(node.inputs[0])
        if not _producer_ok(graph, prod, fused, producers):
            continue
        assert prod is not None
        if accept is not None and not accept(graph, prod, act):
            continue
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
