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


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(buffers: list[Buffer], hot: bool = False) -> tuple[dict[str, int], int]:
    """Offsets by key, and the arena size in bytes.

    hot: among the offsets that fit without growing the arena past the lowest fit, take the
    one whose bytes were vacated most recently (or are reused soonest): see `_hot_score`."""
    order = sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.key))
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end, buffer)
    offsets: dict[str, int] = {}
    total = 0
    for b in order:
        size = _align(max(b.nbytes, 1))
        live = sorted(
            (off, end)
            for off, end, o in placed
            if not (o.last < b.first or b.last < o.first or _exclusive(o, b))
        )
        offset = _lowest_fit(live, size)
        if hot:
            offset = _hot_offset(b, size, offset, max(total, offset + size), live, placed)
        offsets[b.key] = offset
        placed.append((offset, offset + size, b))
        total = max(total, offset + size)
    return offsets, total


def _lowest_fit(live: list[tuple[int, int]], size: int) -> int:
    offset = 0
    for off, end in live:
        if offset + size <= off:
            break
        offset = max(offset, end)
    return offset


def _gap(a: Buffer, b: Buffer) -> int:
    """Steps between one of a, b being last read and the other being written over its bytes
    (0 if they are alive together)."""
    if a.last < b.first:
        return b.first - a.last
    if b.last < a.first:
        return a.first - b.last
    return 0


def _hot_offset(
    b: Buffer,
    size: int,
    lowest: int,
    limit: int,
    live: list[tuple[int, int]],
    placed: list[tuple[int, int, Buffer]],
) -> int:
    """The offset for b that shares most bytes with buffers last read just before b is
    written (or written just after b is last read), each shared byte weighted by 1/gap in
    steps: the later of the two then writes cache lines the earlier has just touched instead
    of cold ones (a store to a cold line first fetches it: write-allocate). Candidates are the
    lowest fit and the offsets aligning b with the start or end of such a neighbour; each must
    end by `limit` and collide with no live buffer. Ties go to the lowest offset."""
    near = [(off, end, 1.0 / g) for off, end, o in placed if (g := _gap(o, b)) > 0 and g <= 4]
    if not near:
        return lowest
    cands = {lowest}
    for off, end, _ in near:
        cands.update((off, end - size))
    best, best_score = lowest, -1.0
    for c in sorted(cands):
        if c < 0 or c + size > limit or any(c < e and o < c + size for o, e in live):
            continue
        score = sum(w * max(0, min(end, c + size) - max(off, c)) for off, end, w in near)
        if score > best_score:
            best, best_score = c, score
    return best


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
            if not (o.last < b.first or b.last < o.first or _exclusive(o, b)):
                bad.append((b.key, o.key))
    return bad
