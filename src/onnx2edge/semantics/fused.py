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
| `o2e.MatMulAddAct` | act(MatMul(A, B) + R + S), R and S broadcast to the product (C backend: R a bias of N values or "", S a residual of the product's shape, passes/fuse_matmul_bias) | A, B, R, S? |
| `o2e.AddAct` | act(Add(A, B)) | A, B |
| `o2e.InstanceNormalizationAct` | act(InstanceNormalization(X, scale, B)) | X, scale, B |
| `o2e.BatchNormalizationAct` | act(BatchNormalization(X, ...)), inference, one output (MPS only: a BN left unfolded is a channel affine there, a 1x1 depthwise convolution with a neuron) | X, scale, B, mean, var |
| `o2e.QLinearConvAct` | act(QLinearConv(...)), act in the requantisation clamp | QLinearConv's |
| `o2e.QGemmAct` | act(o2e.QGemm(...)) | QGemm's |
| `o2e.QAddAct` | act(o2e.QAdd(...)) | QAdd's |

Each carries its base op's attributes unchanged plus `activation` (an ONNX activation op name
from the activation table, "" for none: a ConvAddAct without activation), `activation_alpha`
and `activation_beta` (its parameters, defaults resolved). A backend emits a fused op with its
base op's emitter (`base_op`, `base_domain`) and reads the extras with `activation_of` /
`has_residual`.

The C backend's int8 pass (passes/qdq_int8.py) writes integer ops ONNX has no standard form
for; their schemas are here too (`INTERNAL_OPS`), and the three `Q...Act` above are their
fused forms:

| op | = | inputs |
|---|---|---|
| `o2e.QGemm` | QLinearMatMul with B constant [K, N] and an int32 bias added before requantising | QLinearMatMul's, bias? |
| `o2e.QAdd` | QLinearAdd of two tensors of one shape (onnxruntime's com.microsoft op, in float32) | A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point |
| `o2e.QConcat` | Concat of quantized tensors, each requantized to the output's scale by a 256-entry table ("" when the scales agree) | X0, table0, X1, table1, ... |
| `o2e.QMaxPool` | MaxPool on int8 / uint8 (no Indices output) | X |
| `o2e.QMul` | QLinearMul in float32: B of A's shape, or one value per leading row of A (trailing axes of 1) | A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point |
| `o2e.QLut` | Y[i] = table[X[i]]: an element-wise op between DequantizeLinear and QuantizeLinear (Sigmoid, x * sigmoid(x), HardSwish, ...) tabulated for all 256 bytes | X, table |
| `o2e.QAveragePool` | AveragePool on int8 / uint8 as onnxruntime's com.microsoft QLinearAveragePool computes it | X, X_scale, X_zero_point, Y_scale, Y_zero_point |
| `o2e.ScaledSoftmax` | Softmax(X * scale) (LogSoftmax with `log` 1) over the last axis, X float32, scale a float32 scalar constant: attention's scores times 1/sqrt(d) (C backend, passes/fuse_softmax_scale) | X, scale |
| `o2e.ChannelLayerNorm` | LayerNormalization over axis 1 of X [N, C, ...] at each position, = Transpose(0, 2, .., 1) -> LayerNormalization(axis -1, epsilon) -> Transpose back; scale, B [C] (C backend, passes/channel_norm: ConvNeXt's channels-last LayerNorm) | X, scale, B? |
| `o2e.FusedAttention` | softmax(Q . K^T * scale + mask) . V per head (`attention_reference`): attention's MatMul, scale, mask Add, Softmax, MatMul as one op reading Q / K / V in the exporter's layout (`qkv_layout` "bhsd": Q [.., M, D], K [.., N, D] (or K^T [.., D, N] with `k_transposed` 1), V [.., N, E]; "packed": all three the one [B, T, 3, H, D] qkv tensor), the output [.., M, E] or head-merged [B, M, H, E] (`out_layout` "bshd") (C backend, passes/fuse_attention) | Q, K, V, mask? |
| `o2e.QGlobalAveragePool` | GlobalAveragePool on int8 / uint8 as onnxruntime's com.microsoft QLinearGlobalAveragePool computes it | X, X_scale, X_zero_point, Y_scale, Y_zero_point |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx.defs
import onnx.helper
import onnx.shape_inference
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
    base_domain: str = ""  # DOMAIN when the base is itself an internal op (o2e.QGemm, ...)


FUSED_OPS: dict[str, FusedOp] = {
    f.name: f
    for f in (
        FusedOp("ConvAct", "Conv"),
        FusedOp("ConvAddAct", "Conv", residual=True),
        FusedOp("ConvTransposeAct", "ConvTranspose"),
        FusedOp("GemmAct", "Gemm"),
        FusedOp("MatMulAct", "MatMul"),
        FusedOp("MatMulAddAct", "MatMul", residual=True),
        FusedOp("AddAct", "Add"),
        FusedOp("InstanceNormalizationAct", "InstanceNormalization"),
        FusedOp("BatchNormalizationAct", "BatchNormalization"),
        # passes/qdq_int8: the activation is the requantisation clamp (a Relu / Clip only)
        FusedOp("QLinearConvAct", "QLinearConv"),
        FusedOp("QGemmAct", "QGemm", base_domain=DOMAIN),
        FusedOp("QAddAct", "QAdd", base_domain=DOMAIN),
    )
}


# --------------------------------------------------------------------------------------------
# internal int8 ops (passes/qdq_int8), the bases of QGemmAct / QAddAct
# --------------------------------------------------------------------------------------------
_Param = OpSchema.FormalParameter
_OPTIONAL = OpSchema.FormalParameterOption.Optional
_QTYPES = ["tensor(int8)", "tensor(uint8)"]


def _elem_type(ctx: onnx.shape_inference.InferenceContext, i: int) -> int | None:
    t = ctx.get_input_type(i) if i < ctx.get_num_inputs() and ctx.has_input(i) else None
    return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else None


def _set_output(
    ctx: onnx.shape_inference.InferenceContext, elem_type: int, dims: list[int | str] | None
) -> None:
    out = onnx.TypeProto()
    out.tensor_type.elem_type = elem_type
    if dims is not None:
        out.tensor_type.shape.SetInParent()
        for d in dims:
            dim = out.tensor_type.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif d:
                dim.dim_param = d
    ctx.set_output_type(0, out)


def _dims(ctx: onnx.shape_inference.InferenceContext, i: int) -> list[int | str] | None:
    t = ctx.get_input_type(i)
    if t is None or not t.tensor_type.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.tensor_type.shape.dim
    ]


def _qadd_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    # C's type is its zero point's (QuantizeLinear's uint8 when absent); A and B share a shape
    _set_output(ctx, _elem_type(ctx, 7) or onnx.TensorProto.UINT8, _dims(ctx, 0))


def _qconcat_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    # a table holds output-typed bytes; without one the input already has the output's type
    elem = _elem_type(ctx, 1) or _elem_type(ctx, 0)
    shapes = [_dims(ctx, i) for i in range(0, ctx.get_num_inputs(), 2)]
    if elem is None:
        return
    if any(s is None for s in shapes) or not shapes:
        _set_output(ctx, elem, None)
        return
    rank = len(shapes[0])  # type: ignore[arg-type]
    axis = onnx.helper.get_attribute_value(ctx.get_attribute("axis")) % rank
    sizes = [s[axis] for s in shapes]  # type: ignore[index]
    dims = list(shapes[0])  # type: ignore[arg-type]
    dims[axis] = sum(sizes) if all(isinstance(v, int) for v in sizes) else ""  # type: ignore
    _set_output(ctx, elem, dims)


def _qlut_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    # the table holds the output's bytes; X's shape is kept
    elem = _elem_type(ctx, 1)
    if elem is not None:
        _set_output(ctx, elem, _dims(ctx, 0))


def _qlut_schema() -> OpSchema:
    sch = OpSchema(
        "QLut",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): Y[i] = table[X[i]] with table[v] = "
        "QuantizeLinear(f(DequantizeLinear(v))) for every byte v, f an element-wise op.",
        inputs=[_Param("X", "T1", ""), _Param("table", "T2", "256 bytes")],
        outputs=[_Param("Y", "T2", "")],
        type_constraints=[(t, _QTYPES, "") for t in ("T1", "T2")],
    )
    sch.set_type_and_shape_inference_function(_qlut_infer)
    return sch


def _internal_schemas() -> list[OpSchema]:
    qmm = onnx.defs.get_schema("QLinearMatMul", onnx.defs.onnx_opset_version(), "")
    qgemm = OpSchema(
        "QGemm",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): QLinearMatMul with B constant [K, N] and an "
        "int32 bias [N] added to the integer sums before requantising.",
        inputs=[
            *[_Param(p.name, p.type_str, p.description, param_option=p.option) for p in qmm.inputs],
            _Param("bias", "T4", "int32 bias [N], scale a_scale * b_scale", param_option=_OPTIONAL),
        ],
        outputs=[_Param(p.name, p.type_str, p.description) for p in qmm.outputs],
        type_constraints=[
            *[
                (c.type_param_str, list(c.allowed_type_strs), c.description)
                for c in qmm.type_constraints
            ],
            ("T4", ["tensor(int32)"], "bias"),
        ],  # fmt: skip
    )
    # the bias does not change the output: QLinearMatMul's inference reads inputs 0, 3 and 7
    qgemm.set_type_and_shape_inference_function(qmm.get_type_and_shape_inference_function())
    f = "tensor(float)"
    qadd = OpSchema(
        "QAdd",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): "
        "Q(DQ(A) + DQ(B)) for A and B of one shape, in float32 as onnxruntime's QLinearAdd.",
        inputs=[
            _Param("A", "T1", ""),
            _Param("A_scale", f, ""),
            _Param("A_zero_point", "T1", "", param_option=_OPTIONAL),
            _Param("B", "T2", ""),
            _Param("B_scale", f, ""),
            _Param("B_zero_point", "T2", "", param_option=_OPTIONAL),
            _Param("C_scale", f, ""),
            _Param("C_zero_point", "T3", "", param_option=_OPTIONAL),
        ],  # fmt: skip
        outputs=[_Param("C", "T3", "")],
        type_constraints=[(t, _QTYPES, "") for t in ("T1", "T2", "T3")],
    )
    qadd.set_type_and_shape_inference_function(_qadd_infer)
    qmul = OpSchema(
        "QMul",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): Q(DQ(A) * DQ(B)) in float32 as onnxruntime's "
        "QLinearMul, B of A's shape or one value per leading row of A (trailing axes of 1).",
        inputs=list(qadd.inputs),
        outputs=list(qadd.outputs),
        type_constraints=[(t, _QTYPES, "") for t in ("T1", "T2", "T3")],
    )
    qmul.set_type_and_shape_inference_function(_qadd_infer)
    qconcat = OpSchema(
        "QConcat",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): Concat of quantized tensors given as pairs "
        "(X_i, table_i); table_i[v] = QuantizeLinear(DequantizeLinear(v)) requantizes X_i to the "
        "output's scale, '' when they agree.",
        inputs=[
            _Param(
                "inputs",
                "T",
                "",
                param_option=OpSchema.FormalParameterOption.Variadic,
                is_homogeneous=False,
            )
        ],  # fmt: skip
        outputs=[_Param("concat_result", "T", "")],
        type_constraints=[("T", _QTYPES, "")],
        attributes=[
            OpSchema.Attribute("axis", OpSchema.AttrType.INT, "Concat's axis", required=True)
        ],
    )
    qconcat.set_type_and_shape_inference_function(_qconcat_infer)
    mp = onnx.defs.get_schema("MaxPool", onnx.defs.onnx_opset_version(), "")
    qmaxpool = OpSchema(
        "QMaxPool",
        DOMAIN,
        VERSION,
        "onnx2edge internal op (passes/qdq_int8): MaxPool on int8 / uint8 without Indices.",
        inputs=[_Param(p.name, p.type_str, p.description) for p in mp.inputs],
        outputs=[_Param(mp.outputs[0].name, mp.outputs[0].type_str, "")],
        type_constraints=[("T", _QTYPES, "")],
        attributes=_copy_attrs(mp),
    )
    # MaxPool's inference sets Indices only when the node has a second output
    qmaxpool.set_type_and_shape_inference_function(mp.get_type_and_shape_inference_function())
    return [
        qgemm, qadd, qmul, qconcat, qmaxpool, _qlut_schema(), *(_qavg_schema(op) for op in _QAVG), _if_select_schema(),
        _bounded_schema(), _scaled_softmax_schema(), _channel_layer_norm_schema(), _attention_schema(),
    ]  # fmt: skip


# o2e.QAveragePool / QGlobalAveragePool: the base pool's attributes and shape inference, the
# inputs of onnxruntime's QLinearAveragePool (its output's type is its input's)
_QAVG = ("AveragePool", "GlobalAveragePool")


def _qavg_schema(op: str) -> OpSchema:
    base = onnx.defs.get_schema(op, onnx.defs.onnx_opset_version(), "")
    f = "tensor(float)"
    sch = OpSchema(
        f"Q{op}",
        DOMAIN,
        VERSION,
        f"onnx2edge internal op (passes/qdq_int8): Q({op}(DQ(X))) on int8 / uint8 in "
        f"onnxruntime's arithmetic (com.microsoft QLinear{op}).",
        inputs=[
            _Param("X", "T", ""),
            _Param("X_scale", f, ""),
            _Param("X_zero_point", "T", "", param_option=_OPTIONAL),
            _Param("Y_scale", f, ""),
            _Param("Y_zero_point", "T", "", param_option=_OPTIONAL),
        ],  # fmt: skip
        outputs=[_Param("Y", "T", "")],
        type_constraints=[("T", _QTYPES, "")],
        attributes=_copy_attrs(base),
    )
    sch.set_type_and_shape_inference_function(base.get_type_and_shape_inference_function())
    return sch


def _copy_attrs(base: OpSchema) -> list[OpSchema.Attribute]:
    out = []
    for a in base.attributes.values():
        if a.default_value.name:
            out.append(OpSchema.Attribute(a.name, a.default_value, a.description))
        else:
            out.append(OpSchema.Attribute(a.name, a.type, a.description, required=a.required))
    return out


def _schema(f: FusedOp) -> OpSchema:
    version = VERSION if f.base_domain else onnx.defs.onnx_opset_version()
    base = onnx.defs.get_schema(f.base, version, f.base_domain)
    inputs = [
        OpSchema.FormalParameter(p.name, p.type_str, p.description, param_option=p.option)
        for p in base.inputs
    ]
    if f.residual:
        # the bias becomes optional-but-positional: "" when the Conv had none
        inputs.append(OpSchema.FormalParameter("R", "T", "residual added before the activation"))
    if f.name == "MatMulAddAct":
        # a transformer's linear layer adds its bias (R) and then the block's residual (S)
        inputs.append(
            OpSchema.FormalParameter(
                "S",
                "T",
                "second addend, added with R before the activation",
                param_option=_OPTIONAL,
            )
        )
    attrs = _copy_attrs(base)
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
        "fuse_residual / fuse_activation / qdq_to_int8; see onnx2edge.semantics.fused.",
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


INTERNAL_OPS = (
    "QGemm", "QAdd", "QMul", "QConcat", "QMaxPool", "QLut", "QAveragePool", "QGlobalAveragePool", "IfSelect",
    "Bounded", "ScaledSoftmax", "ChannelLayerNorm", "FusedAttention",
)  # fmt: skip


def attention_heads(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, layout: str, k_transposed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Q [.., M, D], K^T [.., D, N], V [.., N, E]) of o2e.FusedAttention's inputs."""
    if layout == "packed":  # [B, T, 3, H, D] -> three [B, H, T, D]
        q, k, v = (q[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        return q, np.swapaxes(k, -1, -2), v
    return q, (k if k_transposed else np.swapaxes(k, -1, -2)), v


def attention_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    scale: float = 1.0,
    layout: str = "bhsd",
    k_transposed: int = 0,
    out_layout: str = "bhsd",
) -> np.ndarray:
    """o2e.FusedAttention's meaning in float32, each step rounded as the ONNX ops it replaces:
    MatMul, Mul by scale, Add mask, Softmax(axis=-1) (onnxruntime's: NaN for a row holding NaN
    or +Inf, or only -Inf), MatMul, then Transpose(0, 2, 1, 3) for out_layout "bshd"."""
    qh, kt, vh = attention_heads(q, k, v, layout, k_transposed)
    with np.errstate(all="ignore"):
        s = np.matmul(qh, kt).astype(np.float32) * np.float32(scale)
        if mask is not None:
            s = s + mask.astype(np.float32)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
        y = np.matmul(p, vh).astype(np.float32)
    return y.transpose(0, 2, 1, 3) if out_layout == "bshd" else y


def _attention_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    def get(name: str, default: Any) -> Any:
        a = ctx.get_attribute(name)
        return onnx.helper.get_attribute_value(a) if a is not None else default

    layout = get("qkv_layout", b"bhsd")
    layout = layout.decode() if isinstance(layout, bytes) else layout
    out_layout = get("out_layout", b"bhsd")
    out_layout = out_layout.decode() if isinstance(out_layout, bytes) else out_layout
    q, v = _dims(ctx, 0), _dims(ctx, 2)
    if q is None or v is None:
        return
    if layout == "packed":  # [B, T, 3, H, D]
        dims: list[int | str] = [q[0], q[3], q[1], v[4]]
    else:
        dims = [*q[:-1], v[-1]]
    if out_layout == "bshd":
        dims = [dims[0], dims[2], dims[1], dims[3]]
    _set_output(ctx, onnx.TensorProto.FLOAT, dims)


def _attention_schema() -> OpSchema:
    """o2e.FusedAttention (passes/fuse_attention.py): `attention_reference`."""
    sch = OpSchema(
        "FusedAttention",
        DOMAIN,
        VERSION,
        "onnx2edge internal op: softmax(Q . K^T * scale + mask) . V per head, in the layouts "
        "`qkv_layout` / `out_layout` name (see onnx2edge.semantics.fused.attention_reference).",
        inputs=[
            _Param("Q", "T", ""),
            _Param("K", "T", ""),
            _Param("V", "T", ""),
            _Param("mask", "T", "added to the scaled scores", param_option=_OPTIONAL),
        ],
        outputs=[_Param("Y", "T", "")],
        type_constraints=[("T", ["tensor(float)"], "")],
        attributes=[
            OpSchema.Attribute("scale", make_attribute("scale", 1.0), "scores' factor"),
            OpSchema.Attribute(
                "qkv_layout", make_attribute("qkv_layout", "bhsd"), "bhsd or packed"
            ),
            OpSchema.Attribute("k_transposed", make_attribute("k_transposed", 0), "K is K^T"),
            OpSchema.Attribute("out_layout", make_attribute("out_layout", "bhsd"), "or bshd"),
        ],
    )
    sch.set_type_and_shape_inference_function(_attention_infer)
    return sch


def _scaled_softmax_schema() -> OpSchema:
    """o2e.ScaledSoftmax (passes/fuse_softmax_scale.py): Softmax(X * scale) over the last axis,
    LogSoftmax with `log` 1; X * scale is rounded to float32 before the softmax, as the Mul it
    replaces did."""
    base = onnx.defs.get_schema("Softmax", onnx.defs.onnx_opset_version(), "")
    sch = OpSchema(
        "ScaledSoftmax",
        DOMAIN,
        VERSION,
        "onnx2edge internal op: Softmax(X * scale) (LogSoftmax when log = 1) over the last "
        "axis; scale a float32 scalar.",
        inputs=[_Param("X", "T", ""), _Param("scale", "T", "")],
        outputs=[_Param("Y", "T", "")],
        type_constraints=[("T", ["tensor(float)"], "")],
        attributes=[
            OpSchema.Attribute("log", make_attribute("log", 0), "1: LogSoftmax"),
        ],
    )
    sch.set_type_and_shape_inference_function(base.get_type_and_shape_inference_function())
    return sch


def _channel_layer_norm_schema() -> OpSchema:
    """o2e.ChannelLayerNorm (passes/channel_norm.py): LayerNormalization over axis 1 alone,
    each of the N * spatial positions normalised over its C values: exactly
    Transpose(0, 2, .., 1) -> LayerNormalization(axis -1, epsilon) -> Transpose back, with
    scale and B of C values."""
    sch = OpSchema(
        "ChannelLayerNorm",
        DOMAIN,
        VERSION,
        "onnx2edge internal op: LayerNormalization over the channel axis (1) of X [N, C, ...] "
        "at each position, Y = (X - mean) / sqrt(var + epsilon) * scale[c] + B[c].",
        inputs=[
            _Param("X", "T", ""),
            _Param("scale", "T", "[C]"),
            _Param("B", "T", "[C]", param_option=_OPTIONAL),
        ],
        outputs=[_Param("Y", "T", "")],
        type_constraints=[("T", ["tensor(float)"], "")],
        attributes=[
            OpSchema.Attribute("epsilon", make_attribute("epsilon", 1e-5), "added to var"),
        ],
    )
    sch.set_type_and_shape_inference_function(_bounded_infer)  # Y has X's type and shape
    return sch


def _if_select_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    # both sides have the output's type and shape; sides that differ leave it unknown (and
    # check_if_selects refuses the If)
    elem = _elem_type(ctx, 1) or _elem_type(ctx, 2)
    a, b = _dims(ctx, 1), _dims(ctx, 2)
    if elem is not None:
        _set_output(ctx, elem, a if a == b else None)


def _if_select_schema() -> OpSchema:
    """o2e.IfSelect (passes/control_flow.select_runtime_if): the output of a run-time If,
    `then` when `cond` holds else `else`. The two sides are the If's branches inlined; a
    backend may compute only the taken one (C: control_flow.runtime_if_guards) or both and
    select (its meaning is Where's on a scalar condition)."""
    sch = OpSchema(
        "IfSelect",
        DOMAIN,
        VERSION,
        "onnx2edge internal op: the output of the run-time If `if_name`, `then` when the scalar "
        "`cond` holds, else `else` (both of the output's shape and type).",
        inputs=[_Param("cond", "B", ""), _Param("then", "T", ""), _Param("else", "T", "")],
        outputs=[_Param("output", "T", "")],
        type_constraints=[
            ("B", ["tensor(bool)"], ""),
            ("T", [f"tensor({t})" for t in _ALL_TYPES], ""),
        ],
        attributes=[
            OpSchema.Attribute(
                "if_name", OpSchema.AttrType.STRING, "the If node's name", required=True
            )
        ],
    )
    sch.set_type_and_shape_inference_function(_if_select_infer)
    return sch


def _bounded_infer(ctx: onnx.shape_inference.InferenceContext) -> None:
    elem = _elem_type(ctx, 0)
    if elem is not None:
        _set_output(ctx, elem, _dims(ctx, 0))


def _bounded_schema() -> OpSchema:
    """o2e.Bounded (passes/bounded.py): its input, a data-dependent output (NonMaxSuppression,
    Unique) sized by its upper bound, of which only a run-time extent along `axis` is filled;
    the generated code reports that extent (C: `<prefix>_output_count(i)`)."""
    sch = OpSchema(
        "Bounded",
        DOMAIN,
        VERSION,
        "onnx2edge internal op: X unchanged, shaped by an upper bound; only a run-time extent "
        "along `axis` holds values (the rest is unspecified).",
        inputs=[_Param("X", "T", "")],
        outputs=[_Param("Y", "T", "")],
        type_constraints=[("T", [f"tensor({t})" for t in _ALL_TYPES], "")],
        attributes=[
            OpSchema.Attribute(
                "axis", OpSchema.AttrType.INT, "the axis whose extent varies", required=True
            )
        ],
    )
    sch.set_type_and_shape_inference_function(_bounded_infer)
    return sch


_ALL_TYPES = (
    "float", "double", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "string",
)  # fmt: skip


def _register() -> None:
    def known(name: str) -> bool:
        try:
            onnx.defs.get_schema(name, VERSION, DOMAIN)
        except onnx.defs.SchemaError:
            return False
        return True

    # the bases first: QGemmAct / QAddAct copy their schemas
    for sch in _internal_schemas() if not all(map(known, INTERNAL_OPS)) else ():
        if not known(sch.name):
            onnx.defs.register_schema(sch)
    for f in FUSED_OPS.values():
        if not known(f.name):
            onnx.defs.register_schema(_schema(f))


_register()


def is_fused(node: Node) -> bool:
    return node.domain == DOMAIN and node.op_type in FUSED_OPS


def base_op(node: Node) -> str:
    """The ONNX op a node computes before its fused extras: Conv for o2e.ConvAct, else its
    own op_type."""
    return FUSED_OPS[node.op_type].base if is_fused(node) else node.op_type


def base_domain(node: Node) -> str:
    """The domain of `base_op(node)`: "" for o2e.ConvAct, o2e for o2e.QGemmAct."""
    return FUSED_OPS[node.op_type].base_domain if is_fused(node) else node.domain


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
    name = _fused_name(base, residual)
    assert name in FUSED_OPS, f"no fused form of {base}"
    return node.replace(op_type=name, domain=DOMAIN, attrs=attrs, outputs=outputs)


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


def with_residual_add(node: Node, residual: str, outputs: tuple[str, ...]) -> Node:
    """A plain MatMul plus a tensor added to its result: o2e.MatMulAddAct without
    activation."""
    attrs = {**node.attrs, "activation": Attr(AttributeProto.STRING, "")}
    return node.replace(
        op_type=_fused_name(node.op_type, True),
        domain=DOMAIN,
        inputs=(*node.inputs, residual),
        outputs=outputs,
        attrs=attrs,
    )


def unfused(node: Node) -> Node:
    """The plain ONNX node under a fused op: base op type, activation attributes and the
    residual input dropped (outputs unchanged)."""
    if not is_fused(node):
        return node
    attrs = {k: v for k, v in node.attrs.items() if k not in ACT_ATTRS}
    inputs = node.inputs
    if node.op_type == "MatMulAddAct":
        inputs = inputs[:2]  # R and S (bias, residual) both go
    elif has_residual(node):
        inputs = inputs[:-1]  # R is the last
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return node.replace(op_type=base_op(node), domain=base_domain(node), attrs=attrs, inputs=inputs)
