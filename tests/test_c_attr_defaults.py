"""No C op emitter retypes an ONNX schema default (issue 10, item 1).

`NodeContext.attr(name)` falls back to the default `onnx.defs` declares at the node's opset, so
a call `ctx.attr("axis", 0)` whose literal equals that default (at every opset version of every
op the function emits) is a retyped copy that could drift from the spec. This AST scan finds
them. Run as a script to list every literal-default call with the schema's defaults.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx.defs
import onnx.helper

import onnx2edge.semantics  # noqa: F401  (registers the o2e schemas of fused ops)

OPS_DIR = Path(__file__).resolve().parents[1] / "src" / "onnx2edge" / "backends" / "c" / "ops"
_NONE = object()  # "this version of the op has no default for the attribute"


@dataclass(frozen=True)
class Call:
    path: Path
    line: int
    ops: tuple[str, ...]
    name: str
    literal: Any
    node: ast.Call


@cache
def _versions(op: str) -> tuple[onnx.defs.OpSchema, ...]:
    """Every version of `op`'s schema, in the default domain or onnx2edge's internal one."""
    return tuple(
        s
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op and s.domain in ("", "ai.onnx", "o2e")
    )


def schema_defaults(op: str, name: str) -> list[Any]:
    """The default of attribute `name` in each version of `op` (_NONE where it has none)."""
    out: list[Any] = []
    for s in _versions(op):
        a = s.attributes.get(name)
        if a is None or not a.default_value.name:
            out.append(_NONE)
        else:
            v = onnx.helper.get_attribute_value(a.default_value)
            out.append(v.decode() if isinstance(v, bytes) else v)
    return out


def _same(literal: Any, default: Any) -> bool:
    if default is _NONE:
        return False
    if isinstance(default, float) and isinstance(literal, (int, float)):
        # a FLOAT attribute is float32 on the wire: 1e-4 written and the schema's agree there
        return bool(np.float32(literal) == np.float32(default))
    if isinstance(default, list) and isinstance(literal, list):
        return len(default) == len(literal) and all(map(_same, literal, default))
    return type(literal) is type(default) and literal == default


def redundant(call: Call) -> bool:
    """True when the literal equals the schema default in every version of every op that has
    the attribute at all (a shared helper reads `p` for the module's ops that declare `p`)."""
    per_op = [schema_defaults(op, call.name) for op in call.ops]
    found = [d for ds in per_op if any(d is not _NONE for d in ds) for d in ds]
    return bool(found) and all(_same(call.literal, d) for d in found)


def _registered(fn: ast.AST) -> tuple[str, ...]:
    names: list[str] = []
    for dec in getattr(fn, "decorator_list", []):
        if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "register_op":
            names += [a.value for a in dec.args if isinstance(a, ast.Constant)]
    return tuple(names)


def _is_ctx(e: ast.expr) -> bool:
    """`ctx` or `something.ctx`: a NodeContext, whose attr() falls back to the schema."""
    return (isinstance(e, ast.Name) and e.id == "ctx") or (
        isinstance(e, ast.Attribute) and e.attr == "ctx"
    )


def calls() -> Iterator[Call]:
    """Every `ctx.attr("name", <literal>)` call in the C op modules, with the ops its function
    emits (a helper without register_op: every op its module registers)."""
    for path in sorted(OPS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        module_ops = tuple(o for f in fns for o in _registered(f))
        for fn in fns:
            ops = _registered(fn) or module_ops
            for n in ast.walk(fn):
                if not (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "attr"
                    and _is_ctx(n.func.value)  # Node.attr (check functions) has no fallback
                    and len(n.args) == 2
                    and isinstance(n.args[0], ast.Constant)
                ):
                    continue
                try:
                    lit = ast.literal_eval(n.args[1])
                except ValueError:
                    continue  # a computed default (e.g. depends on the input's rank)
                yield Call(path, n.lineno, ops, n.args[0].value, lit, n)


def test_no_literal_default_equals_the_schema_default() -> None:
    found = list(calls())
    assert len(found) > 20, "the scan found too few calls: is OPS_DIR right?"
    bad = [
        f"{c.path.name}:{c.line} {c.name}={c.literal!r} ({c.ops})" for c in found if redundant(c)
    ]
    assert not bad, "literal defaults equal to the ONNX schema's (drop them):\n" + "\n".join(bad)


if __name__ == "__main__":
    for c in calls():
        defs = {op: schema_defaults(op, c.name) for op in c.ops}
        shown = {op: ["-" if d is _NONE else d for d in v] for op, v in defs.items() if v}
        tag = "DROP" if redundant(c) else "KEEP"
        print(f"{tag} {c.path.name}:{c.line} {c.name}={c.literal!r} {shown}", file=sys.stdout)
