"""Rewrite rules: small pure functions `Graph -> Graph` that replace ops a target cannot run
by equivalent ops it can (seed 002: PINTO's converters replace HardSwish, PReLU, Min/Max,
Erf... automatically).

A rule is registered with `@register_rule(name, ops=..., exact=...)`: `ops` are the op types
it rewrites (so `check` knows which rules to try on an unsupported node), `exact` says whether
the rewritten model computes the same values up to float rounding (False: the rule
approximates; its `note` says by how much). Rules never mutate their input graph.

Naming convention, relied on by `onnx2edge check`: every node a rule creates for an original
node X is named `X/<suffix>`, and X itself disappears, so a target's refusals can be traced
back to the node they came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import AttributeProto

from ..errors import Onnx2EdgeError
from ..ir import Attr, Graph, Node

RuleFn = Callable[[Graph], Graph]


@dataclass(frozen=True)
class Rule:
    name: str
    fn: RuleFn
    ops: tuple[str, ...]  # op types the rule rewrites
    exact: bool  # same values up to float rounding
    note: str  # one line: what it does (and, if not exact, how much numerics change)
    targets: tuple[str, ...]  # targets whose rule set always includes it (besides `check`)


RULES: dict[str, Rule] = {}


def register_rule(
    name: str,
    *,
    ops: Iterable[str],
    exact: bool = True,
    note: str = "",
    targets: Iterable[str] = (),
) -> Callable[[RuleFn], RuleFn]:
    def deco(fn: RuleFn) -> RuleFn:
        first = (fn.__doc__ or "").strip().split("\n\n")[0]  # the docstring's first paragraph
        summary = " ".join(first.split())
        RULES[name] = Rule(name, fn, tuple(ops), exact, note or summary, tuple(targets))
        return fn

    return deco


def get_rules(names: Sequence[str]) -> list[Rule]:
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise Onnx2EdgeError(
            f"unknown rule{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(available: {', '.join(sorted(RULES))}; see `onnx2edge rewrite --list`)"
        )
    return [RULES[n] for n in names]


# --- helpers shared by the rule modules --------------------------------------------------
class Builder:
    """Collects the nodes and constants that replace one graph's nodes, with fresh names.

    `sub(node, suffix)` names a replacement node / tensor `<node>/<suffix>` (see module doc).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.inits: dict[str, np.ndarray] = dict(graph.initializers)
        self.nodes: list[Node] = []
        self.taken = (
            set(graph.values)
            | set(graph.initializers)
            | {n.name for n in graph.nodes}
            | {o for n in graph.nodes for o in n.outputs}
            | set(graph.inputs)
        )
        self.changed = False

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def const(self, owner: Node, suffix: str, value: np.ndarray) -> str:
        name = self.fresh(f"{owner.name}/{suffix}")
        self.inits[name] = np.asarray(value)
        return name

    def add(
        self,
        owner: Node,
        suffix: str,
        op: str,
        inputs: Sequence[str],
        output: str | None = None,
        **attrs: object,
    ) -> str:
        """Append a replacement node; returns its (single) output tensor name."""
        name = self.fresh(f"{owner.name}/{suffix}")
        out = output if output is not None else self.fresh(f"{owner.name}/{suffix}:0")
        self.nodes.append(
            Node(name, op, tuple(inputs), (out,), {k: make_attr(v) for k, v in attrs.items()})
        )
        self.changed = True
        return out

    def keep(self, node: Node) -> None:
        self.nodes.append(node)

    def result(self) -> Graph:
        if not self.changed:
            return self.graph
        g = self.graph.with_nodes(self.nodes, initializers=self.inits)
        # Graph.with_nodes sees only top-level inputs; If / Loop bodies read outer tensors
        # by name, so keep the initializers they use.
        refs = subgraph_refs(self.nodes)
        lost = {k: v for k, v in self.inits.items() if k in refs and k not in g.initializers}
        return g.replace(initializers={**g.initializers, **lost}) if lost else g


def subgraph_refs(nodes: Sequence[Node]) -> set[str]:
    """Names read inside the subgraph attributes (If / Loop / Scan bodies) of `nodes`."""
    import onnx

    out: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            out.update(i for i in n.input if i)
            for a in n.attribute:
                for sg in [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs):
                    walk(sg)

    for n in nodes:
        for a in n.attrs.values():
            vals = a.value if isinstance(a.value, list) else [a.value]
            for v in vals:
                if isinstance(v, onnx.GraphProto):
                    walk(v)
    return out


def make_attr(v: object) -> Attr:
    if isinstance(v, Attr):
        return v
    if isinstance(v, bool | int | np.integer):
        return Attr(AttributeProto.INT, int(v))  # type: ignore[arg-type]
    if isinstance(v, float | np.floating):
        return Attr(AttributeProto.FLOAT, float(v))
    if isinstance(v, str):
        return Attr(AttributeProto.STRING, v)
    if isinstance(v, list | tuple) and all(isinstance(x, int | np.integer) for x in v):
        return Attr(AttributeProto.INTS, [int(x) for x in v])
    if isinstance(v, list | tuple):
        return Attr(AttributeProto.FLOATS, [float(x) for x in v])  # type: ignore[union-attr]
    if isinstance(v, np.ndarray):
        return Attr(AttributeProto.TENSOR, v)
    raise TypeError(f"cannot make an attribute of {type(v).__name__}")


def float_dtype(graph: Graph, name: str) -> np.dtype | None:
    """The tensor's dtype when it is a known floating-point type (rules building constants
    of the same type need it), else None."""
    t = graph.type_of(name)
    if t is None:
        return None
    try:
        dt = t.dtype
    except (KeyError, TypeError, ValueError):
        return None
    return dt if dt.kind == "f" else None


def scalar(graph: Graph, name: str) -> float | None:
    """The value of a constant tensor with one element, else None."""
    v = graph.const(name) if name else None
    if v is None or v.size != 1:
        return None
    return float(v.reshape(-1)[0])


def default_domain(node: Node) -> bool:
    return node.domain in ("", "ai.onnx")


def single_consumer(graph: Graph, name: str) -> Node | None:
    """The only node reading `name`, when `name` is not also a graph output."""
    cons = graph.consumers(name)
    if len(cons) != 1 or name in graph.outputs:
        return None
    return cons[0]


# --- applying rules (graph in, graph out; the `rewrite` command adds loading and verifying) ---
def count_ops(graph: Graph) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in graph.nodes:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return dict(sorted(out.items()))


def op_delta(before: Graph, after: Graph) -> dict[str, int]:
    """Per op type: how many nodes more (+) or fewer (-) after an edit."""
    a, b = count_ops(before), count_ops(after)
    return {
        k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b)) if b.get(k, 0) != a.get(k, 0)
    }


def apply_rules(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, list[dict[str, Any]]]:
    """Apply `rules` in order; returns the new graph and, per rule, the op-count change."""
    log = []
    for r in rules:
        new = r.fn(graph)
        left = {n.name for n in new.nodes}
        rewritten = sorted(n.name for n in graph.nodes if n.name not in left)
        log.append(
            {
                "rule": r.name,
                "exact": r.exact,
                "rewritten": rewritten,
                "ops": op_delta(graph, new),
                "note": r.note,
            }
        )
        graph = new
    return graph, log


def list_rules() -> list[dict[str, Any]]:
    return [
        {
            "rule": r.name,
            "ops": list(r.ops),
            "exact": r.exact,
            "targets": list(r.targets),
            "note": r.note,
        }
        for r in RULES.values()
    ]
