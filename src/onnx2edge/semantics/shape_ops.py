"""Typed attributes of the data-movement ops whose attributes moved to inputs across opsets
(issue 32, item 1): Concat / Gather / Flatten / Split's `axis`, Transpose's `perm`, Slice's
`starts` / `ends` / `axes` (attributes before opset 10), Squeeze / Unsqueeze's `axes`
(attributes before 13), Split's `split` (attribute before 13) and `num_outputs` (18),
DepthToSpace / SpaceToDepth's `blocksize` and `mode`.

Given the input rank, the readers normalise axes and raise InvalidAttributes (invalid.py) for
values the spec does not allow; every claim is checked against onnx's reference evaluator in
tests/test_semantics_records.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Node
from .attrs import attr
from .invalid import axis_in, invalid, require

# op -> first opset whose axes (or split / Slice parameters) are an input, not an attribute
AXES_INPUT_SINCE = {
    "Squeeze": 13,
    "Unsqueeze": 13,
    "Split": 13,
    "Slice": 10,
    "ReduceSum": 13,
}
REDUCE_AXES_INPUT_SINCE = 18  # every other Reduce*


def axes_input_since(op_type: str) -> int:
    """The opset from which `op_type` takes its axes as an input (Reduce* at 18, ReduceSum at
    13, Squeeze / Unsqueeze / Split at 13, Slice at 10)."""
    if op_type in AXES_INPUT_SINCE:
        return AXES_INPUT_SINCE[op_type]
    if op_type.startswith("Reduce"):
        return REDUCE_AXES_INPUT_SINCE
    raise KeyError(op_type)


def axes_from_input(op_type: str, opset: int) -> bool:
    return opset >= axes_input_since(op_type)


def _ints(v: object) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(i) for i in v)  # type: ignore[union-attr]


def axis_attr(
    node: Node, opset: int | None = None, rank: int | None = None, *, inclusive: bool = False
) -> int:
    """The node's `axis` (schema default for its opset: Concat has none and needs one, Flatten
    1, Gather 0, ...); with `rank` normalised to [0, rank) ([0, rank] when `inclusive`, as
    Flatten allows), raising InvalidAttributes outside [-rank, rank)."""
    a = attr(node, "axis", opset)
    if a is None:
        raise invalid(node, opset, "the axis attribute is required")
    a = int(a)
    if rank is None:
        return a
    require(node, opset, axis_in(a, rank, inclusive=inclusive))
    return a + rank if a < 0 else a


def transpose_perm(node: Node, rank: int, opset: int | None = None) -> tuple[int, ...]:
    """Transpose's `perm`, its absence meaning the reversed axes (ONNX spec), validated as a
    permutation of range(rank) (negative entries normalised, as onnxruntime accepts)."""
    p = attr(node, "perm", opset)
    if p is None:
        return tuple(reversed(range(rank)))
    perm = tuple(int(i) + rank if int(i) < 0 else int(i) for i in p)
    if sorted(perm) != list(range(rank)):
        raise invalid(node, opset, f"perm {list(p)} is not a permutation of {rank} axes")
    return perm


@dataclass(frozen=True)
class SplitAttrs:
    axis: int
    split: tuple[int, ...] | None  # the attribute (before opset 13); from 13 input 1
    num_outputs: int | None  # Split-18


def split_attrs(node: Node, opset: int, rank: int | None = None) -> SplitAttrs:
    split = _ints(attr(node, "split", opset)) if opset < 13 else None
    n = attr(node, "num_outputs", opset)
    rec = SplitAttrs(axis_attr(node, opset, rank), split, None if n is None else int(n))
    if rec.split is not None and any(s < 0 for s in rec.split):
        raise invalid(node, opset, f"split {list(rec.split)} has a negative size")
    if rec.num_outputs is not None and rec.num_outputs < 1:
        raise invalid(node, opset, f"num_outputs {rec.num_outputs} is below 1")
    return rec


@dataclass(frozen=True)
class SliceAttrs:
    """Slice-1's attributes (from opset 10 they are inputs: `slice_attrs` returns None)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    axes: tuple[int, ...]  # absent: 0 .. len(starts) - 1
    steps: tuple[int, ...]  # always 1 before opset 10


def slice_attrs(node: Node, opset: int) -> SliceAttrs | None:
    if axes_from_input("Slice", opset):
        return None
    starts, ends = _ints(attr(node, "starts", opset)), _ints(attr(node, "ends", opset))
    if starts is None or ends is None or len(starts) != len(ends):
        raise invalid(node, opset, "starts and ends are required, of the same length")
    axes = _ints(attr(node, "axes", opset)) or tuple(range(len(starts)))
    if len(axes) != len(starts):
        raise invalid(node, opset, f"axes has {len(axes)} values, starts {len(starts)}")
    return SliceAttrs(starts, ends, axes, (1,) * len(starts))


def axes_attr(node: Node, opset: int, rank: int | None = None) -> tuple[int, ...] | None:
    """Squeeze / Unsqueeze / Reduce*'s `axes` attribute (None: absent, or an input from the
    op's opset on, see axes_from_input); with `rank` normalised and checked (Unsqueeze: the
    output's rank), duplicates refused. An `axes` attribute past its opset (which onnx's
    checker rejects, some exporters write) is still read, as the backends always did."""
    if axes_from_input(node.op_type, opset) and "axes" not in node.attrs:
        return None
    axes = _ints(attr(node, "axes", opset))
    if axes is None or rank is None:
        return axes
    for a in axes:
        require(node, opset, axis_in(a, rank, "axes value"))
    out = tuple(a + rank if a < 0 else a for a in axes)
    if len(set(out)) != len(out):
        raise invalid(node, opset, f"axes {list(axes)} repeats an axis")
    return out


@dataclass(frozen=True)
class DepthSpaceAttrs:
    """DepthToSpace / SpaceToDepth. `mode` (DepthToSpace from opset 11, SpaceToDepth from 28):
    DCR (depth, column, row: the only meaning before) or CRD."""

    blocksize: int
    mode: str


def depth_space_attrs(node: Node, opset: int | None = None) -> DepthSpaceAttrs:
    b = attr(node, "blocksize", opset)
    mode = str(attr(node, "mode", opset))
    if b is None or int(b) < 1:
        raise invalid(node, opset, "blocksize must be a positive integer")
    if mode not in ("DCR", "CRD"):
        raise invalid(node, opset, f"unknown mode {mode!r} (DCR or CRD)")
    return DepthSpaceAttrs(int(b), mode)
