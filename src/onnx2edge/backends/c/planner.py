"""Activation memory planning: one arena, offsets reused by tensors whose lifetimes don't overlap.

Greedy by size (largest first, each at the lowest offset that does not collide with an already
placed buffer alive at the same time): the heuristic TFLite's arena planner uses, within a few
percent of optimal on CNNs, and deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64  # a cache line / one AVX-512 register


@dataclass(frozen=True)
class Buffer:
    key: str
    nbytes: int
    first: int  # step that writes it
    last: int  # last step that reads it
    # (condition, taken) pairs under which it is written and read (a run-time If's branch:
    # control_flow.runtime_if_guards); buffers of opposite sides of one condition are never
    # in use in the same run, so they may share memory whatever their steps
    guard: tuple[tuple[str, bool], ...] = ()


def _exclusive(a: Buffer, b: Buffer) -> bool:
    return any((cond, not taken) in b.guard for cond, taken in a.guard)


def _conflict(a: Buffer, b: Buffer) -> bool:
    """In use at the same step of one run: their bytes must not overlap."""
    return not (a.last < b.first or b.last < a.first or _exclusive(a, b))


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
    """Offsets by key, and the arena size in bytes."""
    order = sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.key))
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    offsets: dict[str, int] = {}
    total = 0
    for b in order:
        size = _align(max(b.nbytes, 1))
        live = sorted((off, end) for off, end, o in placed if _conflict(o, b))
        offset = 0
        for off, end in live:
            if offset + size <= off:
                break
            offset = max(offset, end)
        offsets[b.key] = offset
        placed.append((offset, offset + size, b))
        total = max(total, offset + size)
    return offsets, total


# Why lowest fit and not "the bytes touched most recently" (issue 9, measured on a shared 2-core
# AVX-512 host): a variant preferring, among fits that do not grow the arena, the offsets
# shared with buffers last read 1-4 steps before (git history: plan(hot=True), commit
# 8b7d4df) left the arena size unchanged on 13 of the 14 seed models (ConvDeconvNet +0.2 %)
# and timed as main: tools/ab_nodes.py, builds in the order hot/main/main/hot, sums of
# per-node minima, hot/main 0.991 ResNet50, 0.990 SqueezeNet, 0.997 GoogLeNet, 1.026
# Inception-v3 (native), 1.000 GoogLeNet, 0.999 NIN (x86-64-v3), where two main builds
# differed by up to 1 %. Lowest fit already alternates two regions along a chain, so a layer
# writes over the input of the layer before it; what stays cold is what no placement fixes:
# an input plus an output larger than L2 (NIN 55x55x96, ResNet50 56x56x256). Touching every
# output just before its node (tools/ab_warm.py, an upper bound for any placement) saved 8 %
# of ResNet50's and 7 % of NIN's time, mostly on those layers.


def collisions(buffers: list[Buffer], offsets: dict[str, int]) -> list[tuple[str, str]]:
    """Pairs of buffers alive at the same step (and not on opposite sides of one run-time If)
    whose bytes overlap at `offsets`: empty for every plan `plan` returns (the tests check it,
    over the seed models' graphs too)."""
    spans = sorted(
        ((offsets[b.key], offsets[b.key] + max(b.nbytes, 1), b) for b in buffers),
        key=lambda s: (s[0], s[2].key),
    )
    bad = []
    for i, (_, end, b) in enumerate(spans):
        for off2, _, o in spans[i + 1 :]:
            if off2 >= end:
                break
            if _conflict(o, b):
                bad.append((b.key, o.key))
    return bad
