"""The error a semantics record raises when a node's attributes contradict the ONNX spec (an
axis outside the rank, a `perm` that is no permutation, `pads` of the wrong length, an unknown
mode): the project's one user-facing error type, naming node, op and opset like a refusal, so
the CLI prints one line and exits 2 instead of emitting code for a model onnx would reject.

`problem()` methods (RecurrentAttrs, PoolAttrs, ...) return the reason as text for the
backends' check functions, which turn it into a Refusal; the `*_attrs` readers that are given
the input rank raise `InvalidAttributes` themselves."""

from __future__ import annotations

from ..errors import Onnx2EdgeError
from ..ir import Node


class InvalidAttributes(Onnx2EdgeError):
    """A node's attributes are inconsistent with the ONNX spec (or with its input's rank)."""


def invalid(node: Node, opset: int | None, why: str) -> InvalidAttributes:
    """The error for `node`, worded like a refusal: node 'X' (op Y, opset N): why."""
    name = node.name or next((o for o in node.outputs if o), "")
    at = f", opset {opset}" if opset is not None else ""
    return InvalidAttributes(f"node '{name}' (op {node.op_type}{at}): {why}")


def require(node: Node, opset: int | None, problem: str | None) -> None:
    """Raise `invalid(...)` when a record's `problem()` found one."""
    if problem is not None:
        raise invalid(node, opset, problem)


def axis_in(axis: int, rank: int, name: str = "axis", *, inclusive: bool = False) -> str | None:
    """Why `axis` is outside [-rank, rank) ([-rank, rank] when `inclusive`: Flatten,
    Unsqueeze's output rank), or None."""
    hi = rank if inclusive else rank - 1
    if not -rank <= axis <= hi:
        return f"{name} {axis} is outside [{-rank}, {hi}] for rank {rank}"
    return None
