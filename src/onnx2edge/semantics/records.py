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

from ..ir import Node
from .attrs import attr


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


def resize_attrs(node: Node, opset: int) -> ResizeAttrs:
    legacy = node.op_type == "Upsample" or opset < 11
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
    """Pad: `mode`, and before opset 11 the attributes that became inputs (`pads`, `value`)."""

    mode: str
    pads: tuple[int, ...] | None  # opset < 11 only
    value: float | None  # opset < 11 only


def pad_attrs(node: Node, opset: int) -> PadAttrs:
    if opset < 11:
        pads = attr(node, "pads", opset)
        return PadAttrs(
            str(attr(node, "mode", opset)),
            None if pads is None else tuple(int(p) for p in pads),
            float(attr(node, "value", opset)),
        )
    return PadAttrs(str(attr(node, "mode", opset)), None, None)


@dataclass(frozen=True)
class ReduceAttrs:
    """Reduce*: `axes` from the attribute (None when absent or given as an input),
    `keepdims`, `noop_with_empty_axes` (opset 18 / ReduceSum 13; 0 before)."""

    axes: tuple[int, ...] | None
    keepdims: bool
    noop_with_empty_axes: bool


def reduce_attrs(node: Node, opset: int) -> ReduceAttrs:
    axes = attr(node, "axes", opset)
    return ReduceAttrs(
        None if axes is None else tuple(int(a) for a in axes),
        bool(int(attr(node, "keepdims", opset))),
        bool(int(attr(node, "noop_with_empty_axes", opset))),
    )


def scatter_reduction(node: Node, opset: int) -> str:
    """ScatterElements / ScatterND's `reduction`; Scatter (deprecated at 11, ScatterElements
    under its old name) means ScatterElements, whose schema supplies the default ('none',
    the only meaning before opset 16)."""
    if node.op_type == "Scatter":
        node = node.replace(op_type="ScatterElements")
    return str(attr(node, "reduction", opset))
