"""What a kernel strategy is, for every op family that has several (`Strategy[Spec]`), and the
choice among them (issue 32, item 2).

A strategy is one way to compute an op: for Conv, depthwise planes, Winograd, the direct
kernels, the GEMMs (ops/conv.py); for Gemm / MatMul the sparse layouts, the GEMV, the GEMMs
(ops/matmul.py); for the pools the row kernels, the phase planes, the N-d loop (ops/pool.py);
for QLinearConv the int8 kernels and the reference loops (ops/quant.py). Each strategy reads
one record of the node (the `Spec`: ConvSpec, MatMulSpec, PoolSpec, QConvSpec), says why it does
not take it (`refuse`, pure: no code or weights registered; None when it does) and writes the C
for one it takes (`emit`). `select` takes the first of a declared list that does not refuse, so
the order is the preference, and records in the emitter the winner (stats.layer_kernels) and
every reason the ones before it gave (stats.kernel_refusals, `convert --explain-kernels`, the
report's per-layer panel).

`convert --kernels NAME=off` switches a strategy off (some take a value: winograd=2|4); the
strategies a list ends with take any node and cannot be switched off (settings=("auto",)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from .emitter import NodeContext

# Settings every strategy takes in `convert --kernels NAME=SETTING`.
AUTO, OFF = "auto", "off"


class HasKernels(Protocol):
    """A spec carries the conversion's `--kernels` settings."""

    @property
    def kernels(self) -> Mapping[str, str]: ...


Spec = TypeVar("Spec", bound=HasKernels)


@dataclass(frozen=True)
class Strategy(Generic[Spec]):
    """One kernel for an op: refuse(spec) says why it does not take the node (None when it
    does; pure), emit(ctx, spec) writes the C statements. settings: the values `--kernels
    NAME=...` accepts ("auto" alone for the fallbacks, which cannot be switched off)."""

    name: str
    refuse: Callable[[Spec], str | None]
    emit: Callable[[NodeContext, Spec], str]
    settings: tuple[str, ...] = (AUTO, OFF)

    def why_not(self, spec: Spec) -> str | None:
        if spec.kernels.get(self.name, AUTO) == OFF:
            return f"--kernels {self.name}=off"
        return self.refuse(spec)

    def applicable(self, spec: Spec) -> bool:
        return self.why_not(spec) is None


S = TypeVar("S", bound=Strategy)  # type: ignore[type-arg]

Refusal = tuple[str, str]  # (strategy, why it did not take the node)


def choose(strategies: Sequence[S], spec: HasKernels, refusals: list[Refusal] | None = None) -> S:
    """The first strategy that takes the node (a list ends with ones that take any); the ones
    before it append (name, why not) to `refusals` when given."""
    for s in strategies:
        why = s.why_not(spec)
        if why is None:
            return s
        if refusals is not None:
            refusals.append((s.name, why))
    raise AssertionError(f"no strategy takes {spec!r}")  # the fallbacks take any


def select(ctx: NodeContext, strategies: Sequence[S], spec: HasKernels) -> S:
    """`choose`, recording the winner and every earlier refusal for the node in the emitter
    (the manifest's stats.layer_kernels and stats.kernel_refusals)."""
    refusals: list[Refusal] = []
    strategy = choose(strategies, spec, refusals)
    ctx.record_strategy(strategy.name, refusals)
    return strategy


def explain(layer_kernels: Mapping[str, str], refusals: Mapping[str, Sequence[Refusal]]) -> str:
    """`convert --explain-kernels`: per node, the kernel chosen and why each earlier one refused."""
    lines = []
    for node in sorted(layer_kernels):
        lines.append(f"{node}: {layer_kernels[node]}")
        lines.extend(f"  {name} refused: {why}" for name, why in refusals.get(node, ()))
    return "\n".join(lines)
