"""Fuse an element-wise activation into the node that produces its input.

before:  x -> Conv -> t -> Relu -> y          after:  x -> o2e.ConvAct[activation=Relu] -> y

The producer becomes the internal op `o2e.<Base>Act` (semantics/fused.py: its own schema, the
base op's attributes plus `activation`, `activation_alpha`, `activation_beta`); an
o2e.ConvAddAct from fuse_residual gets its activation set. Which activations fuse, and how
their parameters are read, is the activation table's (semantics/activations.py).
Backends apply the activation where the producer's result is stored (the GEMM epilogue for
Conv/Gemm, the output loop of the C backend's Instance- and BatchNormalization), saving a pass over
memory. SiLU written as two nodes (torch's export of nn.SiLU, EfficientNet's blocks),

    x -> Conv -> t -> Sigmoid -> s;  Mul(t, s) -> y      becomes  x -> o2e.ConvAct[Swish] -> y

fuses the same way, as the table's Swish (alpha 1): one pass over the tensor instead of three;
so does GELU written out with Erf (torch's export of F.gelu below opset 20: Div, Erf, Add,
Mul, Mul; compose_gelu.gelu_chains matches it) as the table's Gelu (the C backend's pass;
MPS requires compose_gelu instead, a Gelu node its own fusion then takes).
`fuse_activations` is the same pass with options (which producers, which activations,
a veto per pair): a backend whose layers fuse fewer activations (MPS: only MPSCNNNeuron types,
into convolutions and fully connected layers) registers it with its own options.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..ir import Graph, Node
from ..semantics.activations import FUSABLE, Activation, as_activation
from ..semantics.fused import activation_of, base_op, is_fused, with_activation, with_domain
from .compose_gelu import gelu_chains
from .registry import register_pass

__all__ = ["Activation", "activation_of", "fuse_activation", "fuse_activations"]

PRODUCERS = (
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "InstanceNormalization",
    "BatchNormalization",  # one fold_batchnorm left (DenseNet's pre-activation BN -> ReLU)
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


def _silu_patterns(graph: Graph, producers: Collection[str]) -> list[tuple[Node, Node, Node]]:
    """(producer, Sigmoid, Mul) of each Mul(t, Sigmoid(t)) (either operand order) whose t and
    sigmoid feed nothing else, t of the same type and shape as the product."""
    out = []
    for mul in graph.nodes:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
            continue
        for t, s in (mul.inputs, mul.inputs[::-1]):
            sig = graph.producer(s)
            if sig is None or sig.op_type != "Sigmoid" or sig.domain not in ("", "ai.onnx"):
                continue
            prod = graph.producer(t)
            if (
                sig.inputs[0] != t
                or t == s
                or prod is None
                or base_op(prod) not in producers
                or (prod.domain != "" and not is_fused(prod))
                or activation_of(prod) is not None
                or len(prod.outputs) != 1
                or t in graph.outputs
                or s in graph.outputs
                or sorted(n.name for n in graph.consumers(t)) != sorted([sig.name, mul.name])
                or [n.name for n in graph.consumers(s)] != [mul.name]
            ):
                continue
            tt, ty = graph.type_of(t), graph.type_of(mul.outputs[0])
            if tt is None or ty is None or tt.elem_type != ty.elem_type or tt.shape != ty.shape:
                continue
            out.append((prod, sig, mul))
            break
    return out


def _gelu_patterns(graph: Graph, producers: Collection[str]) -> list[tuple[Node, list[Node]]]:
    """(producer, [the pattern's nodes, the last one writing the result]) of each GELU written
    out with Erf (compose_gelu.gelu_chains: the one matcher every backend uses) whose t is
    produced by a fusable producer and feeds nothing but the pattern."""
    out = []
    for t, chain in gelu_chains(graph):
        prod = graph.producer(t)
        users = {n.name for n in chain}
        if (
            prod is None
            or base_op(prod) not in producers
            or (prod.domain != "" and not is_fused(prod))
            or activation_of(prod) is not None
            or len(prod.outputs) != 1
            or t in graph.outputs
            or {n.name for n in graph.consumers(t)} - users
        ):
            continue
        out.append((prod, chain))
    return out


@register_pass(
    "fuse_activation",
    after=("fold_constants", "fold_batchnorm", "fuse_residual", "fuse_matmul_bias"),
)
def fuse_activation(graph: Graph) -> Graph:
    return fuse_activations(graph, gelu_pattern=True)


def fuse_activations(
    graph: Graph,
    *,
    producers: Collection[str] = PRODUCERS,
    activations: Collection[str] = FUSABLE,
    accept: Accept | None = None,
    gelu_pattern: bool = False,
) -> Graph:
    """fuse_activation with options: only `activations` (table op names) into `producers`
    (base op names), and only the pairs `accept(graph, producer, activation)` takes;
    `gelu_pattern`: also GELU written out with Erf (torch below opset 20) as the table's Gelu."""
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    if "Swish" in activations:
        for prod, sig, mul in _silu_patterns(graph, producers):
            if prod.name in fused or sig.name in dropped or mul.name in dropped:
                continue
            act = Activation("Swish", 1.0, 0.0)
            if accept is not None and not accept(graph, prod, act):
                continue
            fused[prod.name] = with_activation(prod, act, mul.outputs)
            dropped |= {sig.name, mul.name}
    if gelu_pattern and "Gelu" in activations:
        for prod, chain in _gelu_patterns(graph, producers):
            if prod.name in fused or any(n.name in dropped for n in chain):
                continue
            act = Activation("Gelu", 0.0, 0.0)
            if accept is not None and not accept(graph, prod, act):
                continue
            fused[prod.name] = with_activation(prod, act, chain[-1].outputs)
            dropped |= {n.name for n in chain}
    for node in graph.nodes:
        if node.name in dropped:
            continue
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
