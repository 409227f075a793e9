"""Attribute values with the defaults ONNX declares (issue 10, item 1).

Every default here is read from the operator schema (`onnx.defs.get_schema(op, opset,
domain)`), never retyped: an emitter asks `attr(node, "epsilon", opset)` and gets the node's
value or the schema's, exactly as the ONNX spec and onnxruntime see it (a FLOAT default such as
BatchNormalization's epsilon is the float32 value 9.999999747378752e-06, the same number an
explicit `epsilon=1e-5` attribute decodes to). Internal ops (domain `o2e`, see fused.py) have
their schemas in fused.py and are resolved by `attrs` the same way.

`GemmAttrs` is the typed view of Gemm the backends share; the other families' records live in
records.py, pooling.py, shape_ops.py, numeric.py and norms.py (families.py lists them).
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


@cache
def _history(op_type: str, domain: str) -> tuple[tuple[int, Mapping[str, Any]], ...]:
    """(since_version, defaults) of every version of the op's schema, oldest first."""
    out = []
    for s in onnx.defs.get_all_schemas_with_history():
        if s.name == op_type and s.domain == domain:
            out.append((s.since_version, defaults(op_type, s.since_version, domain)))
    return tuple(sorted(out, key=lambda v: v[0]))


def default(op_type: str, name: str, opset: int | None = None, domain: str = "") -> Any:
    """The schema default of attribute `name` at `opset`; when this version of the op does not
    declare the attribute at all, the default of the nearest version that does (ONNX adds an
    attribute with the default that keeps the older behaviour - Cast's saturate, ArgMax's
    select_last_index, TopK's largest, GatherND's batch_dims, RNN's layout - and removes one
    whose last default is the newer behaviour - BatchNormalization's spatial, is_test). The
    exceptions, where the older version meant something else, are spelt out in records.py
    (Resize-10 / Upsample: asymmetric coordinates). None when no version has a default."""
    here = defaults(op_type, opset, domain)
    if name in here:
        return here[name]
    try:
        sch = schema(op_type, opset, domain)
    except onnx.defs.SchemaError:  # unknown op, or none of its versions is this old
        sch = None
    if sch is not None and name in sch.attributes:  # declared without a default: optional
        return None
    if sch is not None and any(i.name == name for i in sch.inputs):
        return None  # became an input (Clip's min / max, Pad's pads): absent means absent
    v = LATEST if opset is None else int(opset)
    hist = [(abs(since - v), since < v, d.get(name)) for since, d in _history(op_type, domain)]
    found = [h for h in hist if h[2] is not None]
    # nearest version; between an older and a newer one equally near, the older
    return min(found, key=lambda h: (h[0], not h[1]))[2] if found else None


def _domain_opset(node: Node, opset: int | None) -> tuple[str, int | None]:
    """The schema domain and version to read: `opset` is the default domain's; internal ops
    (domain `o2e`) have one version, registered with onnx by fused.py (imported by this
    package's __init__, so before any of its modules is used)."""
    if node.domain in ("", "ai.onnx"):
        return "", opset
    return node.domain, None


def attr(node: Node, name: str, opset: int | None = None) -> Any:
    """The node's attribute `name`, or the schema default (`default`: the nearest version's
    when this one does not declare it); None when neither exists."""
    a = node.attrs.get(name)
    if a is not None:
        return text(a.value)
    domain, opset = _domain_opset(node, opset)
    return default(node.op_type, name, opset, domain)


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


def epsilon(node: Node, opset: int | None = None) -> float:
    """A normalisation's epsilon (node value or schema default)."""
    return float(attr(node, "epsilon", opset))
