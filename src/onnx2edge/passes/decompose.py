"""Decompositions a backend requires (issue 32, item 1): an op the backend has no native form
for, rewritten once here into ops it has, instead of a hand copy in each emitter. A backend
lists the pass in its `required_passes` (MPS and Core ML: decompose_hardswish and
decompose_mish; C keeps both, which its activation table renders as one expression each), and
edit's rewrite rule of the same meaning (edit/rules_activation.py: hardswish_decompose) is
this function.

`decompose_with_origin` also says which original node each new node comes from, so a
per-node report (Core ML's placement check) can judge an op by its parts and still report it
under the model's own node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from onnx import AttributeProto

from ..ir import Attr, Graph, Node, Value, name_factory
from .registry import register_pass

Fresh = Callable[[str], str]


def _hardswish(n: Node, fresh: Fresh) -> tuple[list[Node], list[str]]:
    """HardSwish(x) = x * HardSigmoid(x; alpha=1/6, beta=1/2): ONNX's own definition (its
    schema's function body), the same values (NaN, and -Inf * 0 = NaN, included)."""
    x = n.inputs[0]
    gate = fresh(f"{n.name}/hsig:0")
    ab = {"alpha": Attr(AttributeProto.FLOAT, 1.0 / 6.0), "beta": Attr(AttributeProto.FLOAT, 0.5)}
    return [
        Node(fresh(f"{n.name}/hsig"), "HardSigmoid", (x,), (gate,), ab),
        Node(fresh(f"{n.name}/mul"), "Mul", (x, gate), (n.outputs[0],)),
    ], [gate]


def _mish(n: Node, fresh: Fresh) -> tuple[list[Node], list[str]]:
    """Mish(x) = x * tanh(softplus(x)): ONNX's own definition (its schema's function body),
    each step an op MPS (softPlus and tanH neurons, a multiplication node) and Core ML (MIL
    softplus, tanh, mul; NeuralNetwork softplus / tanh activations, multiply) have."""
    x = n.inputs[0]
    sp, th = fresh(f"{n.name}/softplus:0"), fresh(f"{n.name}/tanh:0")
    return [
        Node(fresh(f"{n.name}/softplus"), "Softplus", (x,), (sp,)),
        Node(fresh(f"{n.name}/tanh"), "Tanh", (sp,), (th,)),
        Node(fresh(f"{n.name}/mul"), "Mul", (x, th), (n.outputs[0],)),
    ], [sp, th]


# op -> (node, fresh-name maker) -> (replacement nodes, the new intermediate tensors, which
# have the op's input type)
DECOMPOSITIONS: dict[str, Callable[[Node, Fresh], tuple[list[Node], list[str]]]] = {
    "HardSwish": _hardswish,
    "Mish": _mish,
}


def decompose_with_origin(graph: Graph, ops: Iterable[str]) -> tuple[Graph, dict[str, str]]:
    """`graph` with every node of `ops` (default domain) decomposed, and new node name ->
    the decomposed node's name."""
    ops = set(ops)
    hits = [n for n in graph.nodes if n.op_type in ops and n.domain in ("", "ai.onnx")]
    if not hits:
        return graph, {}
    taken = (
        set(graph.values)
        | set(graph.initializers)
        | set(graph.inputs)
        | {n.name for n in graph.nodes}
        | {o for n in graph.nodes for o in n.outputs}
    )

    fresh = name_factory(taken)

    nodes: list[Node] = []
    values = dict(graph.values)
    origin: dict[str, str] = {}
    for n in graph.nodes:
        if n.op_type not in ops or n.domain not in ("", "ai.onnx"):
            nodes.append(n)
            continue
        parts, mids = DECOMPOSITIONS[n.op_type](n, fresh)
        nodes += parts
        origin.update({p.name: n.name for p in parts})
        values.update({m: Value(m, graph.type_of(n.inputs[0])) for m in mids})
    return graph.with_nodes(nodes, values=values), origin


@register_pass("decompose_hardswish", after=("fold_constants", "infer_shapes"))
def decompose_hardswish(graph: Graph) -> Graph:
    """HardSwish -> x * HardSigmoid(x; 1/6, 0.5), exact.

    before:  x -> HardSwish -> y
    after:   x -> HardSigmoid(1/6, 0.5) -> Mul(x, .) -> y
    """
    return decompose_with_origin(graph, ("HardSwish",))[0]


@register_pass("decompose_mish", after=("fold_constants", "infer_shapes"))
def decompose_mish(graph: Graph) -> Graph:
    """Mish -> x * tanh(softplus(x)), exact (ONNX's definition).

    before:  x -> Mish -> y
    after:   x -> Softplus -> Tanh -> Mul(x, .) -> y
    """
    return decompose_with_origin(graph, ("Mish",))[0]
