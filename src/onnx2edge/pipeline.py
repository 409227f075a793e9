"""Pipelines declared as data: a list of named phases run in order by a tiny runner.

A `Phase(name, fn, requires, provides)` names the results it reads and the results it makes;
`run` calls each `fn(*args, results)`, which returns exactly the results it `provides`, and
stores them as fields of one results record (a dataclass the pipeline defines). The frontend
(frontend/loader.py: FRONTEND_PIPELINE) and the C backend (backends/c/phases.py: C_PIPELINE)
are such lists; `run` checks the declaration as it goes, so a phase reading a result no earlier
phase made, or returning another than it declared, fails at once (a bug here, not the user's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Phase:
    name: str
    fn: Callable[..., dict[str, Any]]
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()


def check_order(phases: Sequence[Phase], given: Sequence[str] = ()) -> list[str]:
    """The declaration's faults: a requirement no earlier phase (nor `given`) provides, a result
    provided twice, a name used twice. [] for a sound pipeline."""
    faults = []
    have = set(given)
    names: set[str] = set()
    for p in phases:
        if p.name in names:
            faults.append(f"phase {p.name} declared twice")
        names.add(p.name)
        missing = [r for r in p.requires if r not in have]
        if missing:
            faults.append(f"phase {p.name} requires {missing}, provided by no earlier phase")
        again = [r for r in p.provides if r in have]
        if again:
            faults.append(f"phase {p.name} provides {again} again")
        have.update(p.provides)
    return faults


def run(phases: Sequence[Phase], results: R, *args: Any) -> R:
    """Run `phases` in order; each result is set on `results` as it is made."""
    have: set[str] = set()
    for p in phases:
        missing = [r for r in p.requires if r not in have]
        if missing:
            raise AssertionError(f"phase {p.name} requires {missing}, provided by no earlier phase")
        out = p.fn(*args, results)
        if set(out) != set(p.provides):
            raise AssertionError(f"phase {p.name} returned {sorted(out)}, declared {p.provides}")
        for k, v in out.items():
            setattr(results, k, v)
        have.update(p.provides)
    return results
