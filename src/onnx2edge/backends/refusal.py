"""What a backend cannot express, as a record: `Backend.check(graph) -> list[Refusal]`.

`convert` prints the records as one line each (`str(refusal)`), `check` reads their fields
(no parsing of text), the conformance harness files them by op. A refusal names the node
(None: the graph as a whole, e.g. an input no backend layer takes), its op, domain and the
model's opset, why, and what to do about it when the backend knows (`fix`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Node

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

    @property
    def qualified_op(self) -> str | None:
        """The op as messages name it: with its domain when that is not ONNX's."""
        if self.op is None or self.domain in ONNX_DOMAINS:
            return self.op
        return f"{self.domain}.{self.op}"

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
