"""Internal fused ops, domain `o2e` (issue 10, item 3).

The fusion passes used to smuggle `o2e_*` attributes onto ONNX op types, so the IR after the
passes looked like ONNX but was not. They now produce named ops of their own domain, each with
an ONNX `OpSchema` registered with onnx (so `onnx.defs.get_schema("ConvAct", 1, "o2e")`, the
attribute defaults in attrs.py and onnx's checker know them):

| op | = | inputs |
|---|---|---|
| `o2e.ConvAct` | act(Conv(X, W, B)) | X, W, B? |
| `o2e.ConvAddAct` | act(Conv(X, W, B) + R) | X, W, B (may be ""), R |
| `o2e.ConvTransposeAct` | act(ConvTranspose(X, W, B)) | X, W, B? |
| `o2e.GemmAct` | act(Gemm(A, B, C)) | A, B, C? |
| `o2e.MatMulAct` | act(MatMul(A, B)) | A, B |
| `o2e.AddAct` | act(Add(A, B)) | A, B |
| `o2e.InstanceNormalizationAct` | act(InstanceNormalization(X, scale, B)) | X, scale, B |
| `o2e.BatchNormalizationAct` | act(BatchNormalization(X, ...)) (MPS) | X, scale, B, mean, var |

Each carries its base op's attributes unchanged plus `activation` (an ONNX activation op name
from the activation table, "" for none: a ConvAddAct without activation), `activation_alpha`
and `activation_beta` (its parameters, defaults resolved). BatchNormalizationAct is produced
only by MPS's options of fuse_activation: a BN the fold pass left is a channel affine there (a
1x1 depthwise convolution, which takes a neuron). A backend emits a fused op with its
base op's emitter (`base_op`) and reads the extras with `activation_of` / `has_residual`.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx.defs
from onnx import AttributeProto
from onnx.defs import OpSchema
from onnx.helper import make_attribute

from ..ir import Attr, Graph, Node
from .activations import Activation

DOMAIN = "o2e"
VERSION = 1
ACT_ATTRS = ("activation", "activation_alpha", "activation_beta")


@dataclass(frozen=True)
class FusedOp:
    name: str
    base: str
    residual: bool = False


FUSED_OPS: dict[str, FusedOp] = {
    f.name: f
    for f in (
        FusedOp("ConvAct", "Conv"),
        FusedOp("ConvAddAct", "Conv", residual=True),
        FusedOp("ConvTransposeAct", "ConvTranspose"),
        FusedOp("GemmAct", "Gemm"),
        FusedOp("MatMulAct", "MatMul"),
        FusedOp("AddAct", "Add"),
        FusedOp("InstanceNormalizationAct", "InstanceNormalization"),
        FusedOp("BatchNormalizationAct", "BatchNormalization"),
    )
}


def _schema(f: FusedOp) -> OpSchema:
    base = onnx.defs.get_schema(f.base, onnx.defs.onnx_opset_version(), "")
    inputs = [
        OpSchema.FormalParameter(p.name, p.type_str, p.description, param_option=p.option)
        for p in base.inputs
    ]
    if f.residual:
        # the bias becomes optional-but-positional: "" when the Conv had none
        inputs.append(OpSchema.FormalParameter("R", "T", "residual added before the activation"))
    attrs = []
    for a in base.attributes.values():
        if a.default_value.name:
            attrs.append(OpSchema.Attribute(a.name, a.default_value, a.description))
        else:
            attrs.append(OpSchema.Attribute(a.name, a.type, a.description, required=a.required))
    attrs += [
        OpSchema.Attribute(
            "activation",
            make_attribute("activation", ""),
            "activation op (activation table), '' for none",
        ),
        OpSchema.Attribute(
            "activation_alpha",
            make_attribute("activation_alpha", 0.0),
            "the activation's first parameter",
        ),
        OpSchema.Attribute(
            "activation_beta",
            make_attribute("activation_beta", 0.0),
            "the activation's second parameter",
        ),
    ]
    res = " + R" if f.residual else ""
    schema = OpSchema(
        f.name,
        DOMAIN,
        VERSION,
        f"onnx2edge internal op: activation({f.base}(...){res}), fused by the passes "
        "fuse_residual / fuse_activation; see onnx2edge.semantics.fused.",
        inputs=inputs,
        outputs=[
            OpSchema.FormalParameter(p.name, p.type_str, p.description, param_option=p.option)
            for p in base.outputs
        ],
        type_constraints=[
            (c.type_param_str, list(c.allowed_type_strs), c.description)
            for c in base.type_constraints
        ],
        attributes=attrs,
    )
    # the output's type and shape are the base op's: reuse its inference function, so onnx
    # shape inference (passes/infer_shapes) runs on graphs holding fused ops too
    if base.has_type_and_shape_inference_function:
        schema.set_type_and_shape_inference_function(base.get_type_and_shape_inference_function())
    return schema


def _register() -> None:
    for f in FUSED_OPS.values():
        try:
            onnx.defs.get_schema(f.name, VERSION, DOMAIN)
        except onnx.defs.SchemaError:
            onnx.defs.register_schema(_schema(f))


_register()


def is_fused(node: Node) -> bool:
    return node.domain == DOMAIN and node.op_type in FUSED_OPS


def base_op(node: Node) -> str:
    """The ONNX op a node computes before its fused extras: Conv for o2e.ConvAct, else its
    own op_type."""
    return FUSED_OPS[node.op_type].base if is_fused(node) else node.op_type


def activation_of(node: Node) -> Activation | None:
    if not is_fused(node):
        return None
    op = node.attr("activation", "")
    if not op:
        return None
    return Activation(
        op, float(node.attr("activation_alpha", 0.0)), float(node.attr("activation_beta", 0.0))
    )


def has_residual(node: Node) -> bool:
    return is_fused(node) and FUSED_OPS[node.op_type].residual


def _fused_name(base: str, residual: bool) -> str:
    return f"{base}{'Add' if residual else ''}Act"


def with_domain(graph: Graph) -> Graph:
    """`graph` importing the o2e domain (what onnx needs to resolve the fused ops' schemas)."""
    if DOMAIN in graph.opset_imports:
        return graph
    return graph.replace(opset_imports={**graph.opset_imports, DOMAIN: VERSION})


def with_activation(node: Node, act: Activation, outputs: tuple[str, ...]) -> Node:
    """`node` (a plain producer or a fused op without activation) with `act` applied to its
    result, now writing `outputs`."""
    base, residual = base_op(node), has_residual(node)
    attrs = dict(node.attrs)
    attrs["activation"] = Attr(AttributeProto.STRING, act.op)
    attrs["activation_alpha"] = Attr(AttributeProto.FLOAT, act.alpha)
    attrs["activation_beta"] = Attr(AttributeProto.FLOAT, act.beta)
    return node.replace(
        op_type=_fused_name(base, residual), domain=DOMAIN, attrs=attrs, outputs=outputs
    )


def with_residual(conv: Node, residual: str, outputs: tuple[str, ...]) -> Node:
    """A plain Conv plus the residual tensor added to its result: o2e.ConvAddAct without
    activation (a missing bias is written as "")."""
    bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
    attrs = {**conv.attrs, "activation": Attr(AttributeProto.STRING, "")}
    return conv.replace(
        op_type="ConvAddAct",
        domain=DOMAIN,
        inputs=(conv.inputs[0], conv.inputs[1], bias, residual),
        outputs=outputs,
        attrs=attrs,
    )


def unfused(node: Node) -> Node:
    """The plain ONNX node under a fused op: base op type, activation attributes and the
    residual input dropped (outputs unchanged)."""
    if not is_fused(node):
        return node
    attrs = {k: v for k, v in node.attrs.items() if k not in ACT_ATTRS}
    inputs = node.inputs[:3] if has_residual(node) else node.inputs
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return node.replace(op_type=base_op(node), domain="", attrs=attrs, inputs=inputs)
