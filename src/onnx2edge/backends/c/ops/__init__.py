"""C emitters, one module per op family. Each registers with `@register_op`.

An emitter is `fn(ctx: NodeContext) -> str`: the C statements for one node, using
`ctx.x(i)` / `ctx.y(i)` (input / output tensors with their C symbol, shape and C type),
`ctx.const(i)` (compile-time values), `ctx.attr(...)`, `ctx.helper(...)` (shared static C
functions) and `ctx.scratch(...)` (temporary arena memory). A `check` function may refuse a
node with a reason (e.g. an unsupported attribute or dtype). See TEMPLATE.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ....ir import Graph, Node
    from ..emitter import NodeContext

EmitFn = Callable[["NodeContext"], str]
CheckFn = Callable[["Node", "Graph"], str | None]


@dataclass(frozen=True)
class OpSpec:
    name: str
    emit: EmitFn
    check: CheckFn | None


C_OPS: dict[str, OpSpec] = {}


def register_op(*names: str, check: CheckFn | None = None) -> Callable[[EmitFn], EmitFn]:
    def deco(fn: EmitFn) -> EmitFn:
        for n in names:
            if n in C_OPS:
                raise ValueError(
                    f"C op {n} registered twice ({C_OPS[n].emit.__module__}, {fn.__module__})"
                )
            C_OPS[n] = OpSpec(n, fn, check)
        return fn

    return deco


def load_all() -> dict[str, OpSpec]:
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if mod != "TEMPLATE":
            importlib.import_module(f"{__name__}.{mod}")
    return C_OPS
