"""Typed attributes of the normalisations beyond BatchNormalization (batchnorm.py) (issue 32,
item 1): LayerNormalization (axis, epsilon, stash_type), GroupNormalization (num_groups,
epsilon, stash_type: the latter arrived in opset 21 with 1, float32 statistics), LRN (size,
alpha, beta, bias) and InstanceNormalization / LpNormalization. Checked against onnx's
reference evaluator in tests/test_semantics_records.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Node
from .attrs import attr
from .invalid import axis_in, invalid, require


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int  # normalised when the rank was given: statistics over axes axis .. rank-1
    epsilon: float
    stash_type: int  # onnx.TensorProto type of the statistics (1 = float32)


def layer_norm_attrs(
    node: Node, opset: int | None = None, rank: int | None = None
) -> LayerNormAttrs:
    axis = int(attr(node, "axis", opset))
    if rank is not None:
        require(node, opset, axis_in(axis, rank))
        axis = axis + rank if axis < 0 else axis
    return LayerNormAttrs(
        axis, float(attr(node, "epsilon", opset)), int(attr(node, "stash_type", opset))
    )


@dataclass(frozen=True)
class GroupNormAttrs:
    num_groups: int
    epsilon: float
    stash_type: int

    def problem(self, channels: int | None = None) -> str | None:
        if self.num_groups < 1:
            return f"num_groups {self.num_groups} is below 1"
        if channels is not None and channels % self.num_groups:
            return f"{channels} channels do not split into {self.num_groups} groups"
        return None


def group_norm_attrs(
    node: Node, opset: int | None = None, channels: int | None = None
) -> GroupNormAttrs:
    """With `channels`, a num_groups that does not divide them raises InvalidAttributes
    (`problem()` gives the reason for a check; an absent num_groups reads 0 there)."""
    g = attr(node, "num_groups", opset)
    rec = GroupNormAttrs(
        0 if g is None else int(g),
        float(attr(node, "epsilon", opset)),
        int(attr(node, "stash_type", opset)),
    )
    if channels is not None:
        require(node, opset, rec.problem(channels))
    return rec


@dataclass(frozen=True)
class LrnAttrs:
    """LRN: y = x / (bias + alpha / size · Σ x²)^beta over `size` channels centred on c
    (floor((size-1)/2) before, ceil((size-1)/2) after)."""

    size: int
    alpha: float
    beta: float
    bias: float

    @property
    def before(self) -> int:
        return (self.size - 1) // 2

    @property
    def after(self) -> int:
        return self.size // 2


def lrn_attrs(node: Node, opset: int | None = None) -> LrnAttrs:
    size = attr(node, "size", opset)
    if size is None or int(size) < 1:
        raise invalid(node, opset, "size must be a positive integer")
    return LrnAttrs(
        int(size),
        float(attr(node, "alpha", opset)),
        float(attr(node, "beta", opset)),
        float(attr(node, "bias", opset)),
    )


@dataclass(frozen=True)
class LpNormAttrs:
    axis: int
    p: int  # 1 or 2

    def problem(self) -> str | None:
        return None if self.p in (1, 2) else f"p {self.p} is not 1 or 2"


def lp_norm_attrs(node: Node, opset: int | None = None, rank: int | None = None) -> LpNormAttrs:
    """With `rank`, the axis normalised and a p other than 1 or 2 raising InvalidAttributes
    (`problem()` gives the reason to a check)."""
    axis, p = int(attr(node, "axis", opset)), int(attr(node, "p", opset))
    if rank is not None:
        require(node, opset, LpNormAttrs(axis, p).problem())
        require(node, opset, axis_in(axis, rank))
        axis = axis + rank if axis < 0 else axis
    return LpNormAttrs(axis, p)
