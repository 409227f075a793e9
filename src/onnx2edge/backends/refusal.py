"""What a backend cannot express, as a record: `Backend.check(graph) -> list[Refusal]`.

`convert` prints the records as one line each (`str(refusal)`), `check` reads their fields
(no parsing of text), the conformance harness files them by op. A refusal names the node
(None: the graph as a whole, e.g. an input no backend layer takes), its op, domain and the
model's opset, why, and what to do about it when the backend knows (`fix`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir import Graph, Node
from ..passes.specialise import dynamic_fix, why_dynamic

ONNX_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Refusal:
    node: str | None
    op: str | None
    domain: str = ""
    opset: int | None = None
    reason: str = ""
    fix: str | None = None

    @classmethod
    def of(cls, node: Node, opset: int | None, reason: str, fix: str | None = None) -> Refusal:
        """A refusal of `node` (named by its first output when it has no name)."""
        name = node.name or next((o for o in node.outputs if o), "")
        return cls(name, node.op_type, node.domain, opset, reason, fix)

    @classmethod
    def graph(cls, reason: str, fix: str | None = None) -> Refusal:
        """A refusal of the graph as a whole (an input, an output, the model)."""
        return cls(None, None, "", None, reason, fix)

    @classmethod
    def dynamic(cls, graph: Graph, node: Node) -> Refusal | None:
        """The refusal of `node` when one of its tensors has no static shape (every backend
        needs static shapes), with the command that fixes the shape when an input decides
        it; None when every tensor is static."""
        for name in (*node.inputs, *node.outputs):
            t = graph.type_of(name) if name else None
            if name and (t is None or not t.is_static):
                return cls.of(node, graph.opset, why_dynamic(graph, name), dynamic_fix(graph, name))
        return None

    @property
    def qualified_op(self) -> str | None:
        """The op as messages name it: with its domain when that is not ONNX's."""
        if self.op is None or self.domain in ONNX_DOMAINS:
            return self.op
        return f"{self.domain}.{self.op}"

    @property
    def status_line(self) -> str:
        """`str(self)` without the fix: what the refusal is, for lists that record statuses
        (tests/conformance/<target>.expected), where advice would only add churn."""
        return str(replace(self, fix=None))

    @property
    def why(self) -> str:
        """The reason, with the fix when the backend gave one apart."""
        return f"{self.reason}; {self.fix}" if self.fix else self.reason

    def __str__(self) -> str:
        """The one line `convert` prints: node 'X' (op Y, opset N): why."""
        if self.node is None:
            return self.why
        opset = f", opset {self.opset}" if self.opset is not None else ""
        return f"node '{self.node}' (op {self.qualified_op}{opset}): {self.why}"
