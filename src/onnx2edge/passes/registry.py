"""Pass registry: passes declare what they run after; pipelines are data, not comments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..ir import Graph

PassFn = Callable[[Graph], Graph]


@dataclass(frozen=True)
class PassInfo:
    name: str
    fn: PassFn
    after: tuple[str, ...]


PASSES: dict[str, PassInfo] = {}


def register_pass(name: str, *, after: Iterable[str] = ()) -> Callable[[PassFn], PassFn]:
    def deco(fn: PassFn) -> PassFn:
        PASSES[name] = PassInfo(name, fn, tuple(after))
        return fn

    return deco


def order_passes(names: Iterable[str]) -> list[str]:
    """Order the requested passes so each runs after the ones it names (stable otherwise)."""
    wanted = list(dict.fromkeys(names))
    for n in wanted:
        if n not in PASSES:
            raise KeyError(f"unknown pass '{n}' (known: {', '.join(sorted(PASSES))})")
    done: list[str] = []

    def visit(n: str, stack: tuple[str, ...]) -> None:
        if n in done:
            return
        if n in stack:
            raise ValueError(f"pass dependency cycle: {' -> '.join((*stack, n))}")
        for dep in PASSES[n].after:
            if dep in wanted:
                visit(dep, (*stack, n))
        done.append(n)

    for n in wanted:
        visit(n, ())
    return done


def fixed_point(fn: PassFn, graph: Graph, max_iter: int = 20) -> Graph:
    """Apply `fn` until the node list stops changing."""
    for _ in range(max_iter):
        new = fn(graph)
        if new.nodes == graph.nodes and new.initializers.keys() == graph.initializers.keys():
            return new
        graph = new
    return graph


def pass_stages(names: Iterable[str]) -> list[list[str]]:
    """Split a pass list where a name comes again: a frontend's clean-up list followed by a
    backend's list that ends with the same clean-up must run that clean-up twice (once more
    after the backend's fusions), not once where it was first named."""
    stages: list[list[str]] = [[]]
    for n in names:
        if n in stages[-1]:
            stages.append([])
        stages[-1].append(n)
    return [s for s in stages if s]


def run_passes(graph: Graph, names: Iterable[str]) -> Graph:
    for stage in pass_stages(names):
        for n in order_passes(stage):
            graph = PASSES[n].fn(graph)
    return graph
