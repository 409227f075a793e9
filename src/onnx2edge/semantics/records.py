"""Typed attribute records of the op families whose meaning changes across opsets (issue 32,
item 1): read once from the node and the schema's defaults (attrs.py), opset differences
resolved here, so the C, MPS and Core ML emitters and the rewrite rules (edit/) read one record
instead of each retyping the defaults.

Each record comes with the claim it makes about ONNX checked against onnx's reference evaluator
(reference.py; tests/test_semantics_records.py): Resize-10 / Upsample sample at asymmetric
coordinates, Softmax before opset 13 normalises the input flattened to 2-D at `axis`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from .attrs import attr
from .invalid import axis_in, require
from .shape_ops import axes_attr, axes_from_input, axis_attr


@dataclass(frozen=True)
class ResizeAttrs:
    """Resize (every opset) and Upsample. `legacy`: Resize-10 and Upsample, which have no
    coordinate_transformation_mode / nearest_mode: they sample at asymmetric coordinates and
    round nearest as onnxruntime's 'simple' (floor when upsampling)."""

    mode: str
    coordinate_transformation_mode: str
    nearest_mode: str
    cubic_coeff_a: float
    exclude_outside: int
    extrapolation_value: float
    antialias: int
    axes: tuple[int, ...] | None
    keep_aspect_ratio_policy: str
    legacy: bool
    scales: tuple[float, ...] | None = None  # Upsample-7's attribute (an input from 9)


def resize_attrs(node: Node, opset: int) -> ResizeAttrs:
    legacy = node.op_type == "Upsample" or opset < 11
    scales = attr(node, "scales", opset) if node.op_type == "Upsample" and opset < 9 else None
    # Upsample (deprecated since 10) means Resize-10: Resize's schema fills its defaults
    node = node.replace(op_type="Resize")
    axes = attr(node, "axes", opset)
    return ResizeAttrs(
        mode=str(attr(node, "mode", opset)),
        coordinate_transformation_mode=(
            "asymmetric" if legacy else str(attr(node, "coordinate_transformation_mode", opset))
        ),
        nearest_mode="simple" if legacy else str(attr(node, "nearest_mode", opset)),
        cubic_coeff_a=float(attr(node, "cubic_coeff_a", opset)),
        exclude_outside=int(attr(node, "exclude_outside", opset)),
        extrapolation_value=float(attr(node, "extrapolation_value", opset)),
        antialias=int(attr(node, "antialias", opset)),
        axes=None if axes is None else tuple(int(i) for i in axes),
        keep_aspect_ratio_policy=str(attr(node, "keep_aspect_ratio_policy", opset)),
        legacy=legacy,
        scales=None if scales is None else tuple(float(s) for s in scales),
    )


@dataclass(frozen=True)
class SoftmaxAttrs:
    """Softmax / LogSoftmax / Hardmax. `axis` is the schema's default for the opset (1 before
    13, -1 from 13); `flattens`: before opset 13 the op works on the input flattened to 2-D at
    `axis` (one distribution over all axes from `axis` on), from 13 along `axis` alone."""

    axis: int
    flattens: bool


def softmax_attrs(node: Node, opset: int) -> SoftmaxAttrs:
    return SoftmaxAttrs(int(attr(node, "axis", opset)), opset < 13)


@dataclass(frozen=True)
class PadAttrs:
    """Pad: `mode`, and before opset 11 the attributes that became inputs (`pads`, Pad-1's
    `paddings`; `value`)."""

    mode: str
    pads: tuple[int, ...] | None  # opset < 11 only
    value: float | None  # opset < 11 only


def pad_attrs(node: Node, opset: int) -> PadAttrs:
    if opset < 11:
        pads = attr(node, "pads", opset)
        if pads is None:  # Pad-1 called them paddings
            pads = attr(node, "paddings", opset)
        return PadAttrs(
            str(attr(node, "mode", opset)),
            None if pads is None else tuple(int(p) for p in pads),
            float(attr(node, "value", opset)),
        )
    return PadAttrs(str(attr(node, "mode", opset)), None, None)


@dataclass(frozen=True)
class ReduceAttrs:
    """Reduce*: `axes` from the attribute (None when absent or given as an input),
    `axes_input`: the op's opset takes axes as input 1 (18 on, ReduceSum 13 on), `keepdims`,
    `noop_with_empty_axes` (opset 18 / ReduceSum 13; 0 before)."""

    axes: tuple[int, ...] | None
    keepdims: bool
    noop_with_empty_axes: bool
    axes_input: bool = False


def reduce_attrs(node: Node, opset: int, rank: int | None = None) -> ReduceAttrs:
    """With `rank`, the attribute's axes normalised and checked (InvalidAttributes)."""
    return ReduceAttrs(
        axes_attr(node, opset, rank),
        bool(int(attr(node, "keepdims", opset))),
        bool(int(attr(node, "noop_with_empty_axes", opset))),
        axes_from_input(node.op_type, opset),
    )


def reduced_axes(node: Node, graph: Graph, rank: int) -> list[int] | None:
    """The axes a Reduce* node reduces, sorted and non-negative, from its attribute (before
    the op's axes became an input) or its constant input; no axes means all of them, or none
    (an element-wise op, returned as []) with noop_with_empty_axes. None: the axes are
    computed at run time. Axes outside the rank raise InvalidAttributes."""
    ra = reduce_attrs(node, graph.opset)
    axes: list[int] = list(ra.axes or ())
    if ra.axes is None and len(node.inputs) > 1 and node.inputs[1]:
        c = graph.const(node.inputs[1])
        t = graph.type_of(node.inputs[1])
        if c is not None:
            axes = [int(a) for a in np.asarray(c).reshape(-1)]
        elif t is None or not t.is_static or t.size != 0:
            return None  # (an empty axes tensor is known to be empty, whatever its values)
    if not axes:
        return [] if ra.noop_with_empty_axes else list(range(rank))
    for a in axes:
        require(node, graph.opset, axis_in(a, rank, "axes value"))
    return sorted({a + rank if a < 0 else a for a in axes})


@dataclass(frozen=True)
class ArgAttrs:
    """ArgMax / ArgMin: `select_last_index` arrived in opset 12 with 0 (the first index of
    the extreme, the only meaning before)."""

    axis: int
    keepdims: bool
    select_last_index: bool


def arg_attrs(node: Node, opset: int, rank: int | None = None) -> ArgAttrs:
    return ArgAttrs(
        axis_attr(node, opset, rank),
        bool(int(attr(node, "keepdims", opset))),
        bool(int(attr(node, "select_last_index", opset))),
    )


@dataclass(frozen=True)
class TopKAttrs:
    """TopK: `k` an attribute before opset 10 (an input from 10: None), `largest` / `sorted`
    from opset 11 (1 before: the largest, sorted)."""

    axis: int
    largest: bool
    sorted: bool
    k: int | None


def topk_attrs(node: Node, opset: int, rank: int | None = None) -> TopKAttrs:
    k = attr(node, "k", opset) if opset < 10 else None
    return TopKAttrs(
        axis_attr(node, opset, rank),
        bool(int(attr(node, "largest", opset))),
        bool(int(attr(node, "sorted", opset))),
        None if k is None else int(k),
    )


def scatter_reduction(node: Node, opset: int) -> str:
    """ScatterElements / ScatterND's `reduction`; Scatter (deprecated at 11, ScatterElements
    under its old name) means ScatterElements, whose schema supplies the default ('none',
    the only meaning before opset 16)."""
    if node.op_type == "Scatter":
        node = node.replace(op_type="ScatterElements")
    return str(attr(node, "reduction", opset))
