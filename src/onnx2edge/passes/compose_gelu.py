"""GELU written out with Erf, as one Gelu node (issue 32, item 1: one matcher for every
backend). torch exports F.gelu below opset 20 as

    t -> Div(t, sqrt 2) | Mul(t, 1 / sqrt 2) -> Erf -> Add(., 1) -> a;
    Mul(Mul(t, a), 0.5) or Mul(Mul(t, 0.5), a)

(operands in either order). `gelu_chains` finds it; the C backend's fuse_activation uses it
to fuse the pattern into its producer, and `compose_gelu` (required by MPS, which has a
geLU neuron and no Erf node) rewrites it to the standard Gelu node (approximate='none'),
whatever produces t, so the backend's Gelu emitter (and its activation fusion) takes it.
The node is ONNX's Gelu (opset 20) even in an older graph: the IR reads its attributes,
not the opset, and its meaning is exactly the pattern's, 0.5 x (1 + erf(x / sqrt 2)).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .registry import register_pass


def _scalar(graph: Graph, name: str) -> float | None:
    v = graph.const(name)
    if v is None or np.asarray(v).size != 1 or np.asarray(v).dtype.kind != "f":
        return None
    return float(np.asarray(v).reshape(-1)[0])


def _std(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _other(node: Node, name: str) -> str | None:
    """The operand of a binary `node` that is not `name` (None when both are)."""
    a, b = node.inputs
    return b if a == name and b != name else a if b == name and a != name else None


def gelu_chains(graph: Graph) -> list[tuple[str, list[Node]]]:
    """(t, [the pattern's nodes, the last one writing the result]) of each GELU written out
    as above, whose intermediates feed nothing else and are no graph outputs, t of the same
    type and shape as the result."""
    out = []
    r2 = float(np.sqrt(2.0))
    for erf in graph.nodes:
        if not _std(erf, "Erf"):
            continue
        scale = graph.producer(erf.inputs[0])
        if not (_std(scale, "Div") or _std(scale, "Mul")) or len(scale.inputs) != 2:  # type: ignore[union-attr]
            continue
        assert scale is not None
        t, k = scale.inputs
        if graph.const(t) is not None and scale.op_type == "Mul":
            t, k = k, t
        kv = _scalar(graph, k)
        want = r2 if scale.op_type == "Div" else 1 / r2
        if kv is None or abs(kv - want) > 1e-6 * want or t == k:
            continue
        adds = graph.consumers(erf.outputs[0])
        if len(adds) != 1 or not _std(adds[0], "Add") or erf.outputs[0] in graph.outputs:
            continue
        add = adds[0]
        one = _other(add, erf.outputs[0])
        if one is None or _scalar(graph, one) != 1.0:
            continue
        mul1s = graph.consumers(add.outputs[0])
        # Mul(t, a) then Mul(., 0.5); or Mul(t, 0.5) then Mul(., a)
        if len(mul1s) != 1 or not _std(mul1s[0], "Mul"):
            continue
        m2 = mul1s[0]
        first = graph.producer(_other(m2, add.outputs[0]) or "")
        if _other(m2, add.outputs[0]) == t:  # Mul(t, a) -> Mul(., 0.5)
            nxt = graph.consumers(m2.outputs[0])
            if len(nxt) != 1 or not _std(nxt[0], "Mul"):
                continue
            half = _other(nxt[0], m2.outputs[0])
            chain = [scale, erf, add, m2, nxt[0]]
        elif _std(first, "Mul"):  # Mul(t, 0.5) -> Mul(., a)
            assert first is not None
            half = _other(first, t)
            chain = [scale, erf, add, first, m2]
        else:
            continue
        if half is None or _scalar(graph, half) != 0.5:
            continue
        inner = [n.outputs[0] for n in chain[:-1]]
        users = {n.name for n in chain}
        if any(
            v in graph.outputs
            or len(graph.consumers(v)) != 1
            or graph.consumers(v)[0].name not in users
            for v in inner
        ):
            continue
        tt, ty = graph.type_of(t), graph.type_of(chain[-1].outputs[0])
        if tt is None or ty is None or tt.elem_type != ty.elem_type or tt.shape != ty.shape:
            continue
        out.append((t, chain))
    return out


@register_pass("compose_gelu", after=("fold_constants", "infer_shapes"))
def compose_gelu(graph: Graph) -> Graph:
    """The Erf GELU pattern -> one Gelu node, exact (the pattern is Gelu's definition).

    before:  t -> Div(sqrt 2) -> Erf -> Add(1) -> Mul(t, .) -> Mul(., 0.5) -> y
    after:   t -> Gelu -> y   (named after the Erf node)
    """
    chains = gelu_chains(graph)
    if not chains:
        return graph
    drop: set[str] = set()
    at: dict[str, Node] = {}
    for t, chain in chains:
        if any(n.name in drop for n in chain):
            continue
        drop |= {n.name for n in chain}
        at[chain[-1].name] = Node(chain[1].name, "Gelu", (t,), (chain[-1].outputs[0],))
    nodes = [at.get(n.name, n) for n in graph.nodes if n.name in at or n.name not in drop]
    return graph.with_nodes(nodes)
