"""Attribute values with the defaults ONNX declares (issue 10, item 1).

Every default here is read from the operator schema (`onnx.defs.get_schema(op, opset,
domain)`), never retyped: an emitter asks `attr(node, "epsilon", opset)` and gets the node's
value or the schema's, exactly as the ONNX spec and onnxruntime see it (a FLOAT default such as
BatchNormalization's epsilon is the float32 value 9.999999747378752e-06, the same number an
explicit `epsilon=1e-5` attribute decodes to). Internal ops (domain `o2e`, see fused.py) have
their schemas in fused.py and are resolved by `attrs` the same way.

The small frozen records (`GemmAttrs`, `NormAttrs`, ...) are the typed view the backends share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import onnx
import onnx.defs
import onnx.helper

from ..ir import Node

LATEST = onnx.defs.onnx_opset_version()


def text(value: Any) -> Any:
    """STRING attributes arrive as bytes from some readers and str from others."""
    return value.decode() if isinstance(value, bytes) else value


@cache
def schema(op_type: str, opset: int | None = None, domain: str = "") -> onnx.defs.OpSchema:
    """The schema onnx applies to `op_type` at `opset` (the newest version <= opset)."""
    return onnx.defs.get_schema(op_type, LATEST if opset is None else int(opset), domain)


@cache
def defaults(op_type: str, opset: int | None = None, domain: str = "") -> Mapping[str, Any]:
    """Attribute name -> default value declared by the schema (attributes without one absent)."""
    out: dict[str, Any] = {}
    try:
        sch = schema(op_type, opset, domain)
    except onnx.defs.SchemaError:  # an op onnx does not know (another runtime's domain)
        return out
    for name, a in sch.attributes.items():
        if a.default_value.name:  # an unset AttributeProto has no name
            out[name] = text(onnx.helper.get_attribute_value(a.default_value))
    return out


def _domain_opset(node: Node, opset: int | None) -> tuple[str, int | None]:
    """The schema domain and version to read: `opset` is the default domain's; internal ops
    (domain `o2e`) have one version, registered with onnx by fused.py (imported by this
    package's __init__, so before any of its modules is used)."""
    if node.domain in ("", "ai.onnx"):
        return "", opset
    return node.domain, None


def attr(node: Node, name: str, opset: int | None = None) -> Any:
    """The node's attribute `name`, or the schema default; None when neither exists."""
    a = node.attrs.get(name)
    if a is not None:
        return text(a.value)
    domain, opset = _domain_opset(node, opset)
    return defaults(node.op_type, opset, domain).get(name)


def attrs(node: Node, opset: int | None = None) -> dict[str, Any]:
    """All attributes of `node`, schema defaults filled in for the absent ones."""
    domain, opset = _domain_opset(node, opset)
    base = dict(defaults(node.op_type, opset, domain))
    base.update({k: text(a.value) for k, a in node.attrs.items()})
    return base


def ints(node: Node, name: str, n: int, fill: int, opset: int | None = None) -> tuple[int, ...]:
    """An INTS attribute of length `n`; absent (and without schema default), `fill` repeated.
    (strides / dilations have no schema default: the spec's prose says 1 per spatial axis.)"""
    v = attr(node, name, opset)
    return tuple(int(i) for i in v) if v is not None else (fill,) * n


@dataclass(frozen=True)
class GemmAttrs:
    alpha: float
    beta: float
    trans_a: bool
    trans_b: bool


def gemm_attrs(node: Node, opset: int | None = None) -> GemmAttrs:
    a = attrs(node, opset)
    return GemmAttrs(
        float(a["alpha"]), float(a["beta"]), bool(int(a["transA"])), bool(int(a["transB"]))
    )


@dataclass(frozen=True)
class NormAttrs:
    """BatchNormalization / InstanceNormalization / LayerNormalization / GroupNormalization."""

    epsilon: float
    axis: int | None = None  # LayerNormalization
    num_groups: int | None = None  # GroupNormalization


def norm_attrs(node: Node, opset: int | None = None) -> NormAttrs:
    a = attrs(node, opset)
    return NormAttrs(
        float(a["epsilon"]),
        int(a["axis"]) if "axis" in a else None,
        int(a["num_groups"]) if "num_groups" in a else None,
    )


def epsilon(node: Node, opset: int | None = None) -> float:
    """A normalisation's epsilon (node value or schema default)."""
    return float(attr(node, "epsilon", opset))
