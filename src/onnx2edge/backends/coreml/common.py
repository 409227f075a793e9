"""What both Core ML formats share: options, tensor checks, constant lookups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir import Graph, Node
from ...passes.decompose import decompose_with_origin
from ...passes.specialise import bind_fix, dynamic_fix
from ...semantics.activations import clip_params
from ...semantics.attrs import attr, gemm_attrs, ints
from ...semantics.numeric import gemm_dims
from ...semantics.records import pad_attrs, resize_attrs

FORMATS = ("neuralnetwork", "mlprogram")


class Refuse(Exception):
    """A node the chosen Core ML format cannot express; the message says why, `fix` (when
    known) the command that removes the refusal (Refusal.fix)."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(reason)
        self.fix = fix


@dataclass
class Lowered:
    """What an emitter hands back besides the model: facts for the manifest and README."""

    layers: list[str] = field(default_factory=list)  # emitted layer / op types, in order
    # seed-004 rewrites applied: {"node", "op", "instead_of", "emitted"}
    replacements: list[dict[str, Any]] = field(default_factory=list)
    # composite activations mapped to one Core ML layer / op: {"node", "op", "emitted"}
    fusions: list[dict[str, Any]] = field(default_factory=list)


def static_shape(graph: Graph, name: str) -> tuple[int, ...]:
    t = graph.type_of(name)
    if t is None or not t.is_static:
        raise Refuse(f"tensor '{name}' has no static shape", dynamic_fix(graph, name))
    return tuple(int(d) for d in t.static_shape)


def float_tensor(graph: Graph, name: str) -> None:
    t = graph.type_of(name)
    if t is None or t.dtype != np.float32:
        raise Refuse(
            f"tensor '{name}' is {None if t is None else t.dtype}, only float32 is supported",
            bind_fix(graph, name),  # an input that only decides a shape: bind it
        )


def const(graph: Graph, node: Node, i: int, what: str) -> np.ndarray:
    if i >= len(node.inputs) or not node.inputs[i]:
        raise Refuse(f"missing {what}")
    v = graph.const(node.inputs[i])
    if v is None:
        raise Refuse(f"{what} must be a constant")
    return np.asarray(v)


def opt_const(graph: Graph, node: Node, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    v = graph.const(node.inputs[i])
    return None if v is None else np.asarray(v)


def conv_geometry(node: Node, kernel: tuple[int, ...]) -> dict[str, Any]:
    """Strides, dilations and explicit pads [top, left, bottom, right] of a 2-D Conv/Pool."""
    nd = len(kernel)
    if nd != 2:
        raise Refuse(f"{nd}-D kernels are not supported (2-D only)")
    auto = attr(node, "auto_pad") or "NOTSET"
    if auto not in ("NOTSET", "VALID"):
        raise Refuse(f"auto_pad={auto} is not supported; re-export with explicit pads")
    pads = list(attr(node, "pads") or [0] * 2 * nd) if auto == "NOTSET" else [0] * 2 * nd
    return {
        "strides": list(ints(node, "strides", nd, 1)),
        "dilations": list(ints(node, "dilations", nd, 1)),
        "pads": [int(p) for p in pads],  # ONNX order: top, left, bottom, right
    }


def resize_params(graph: Graph, node: Node) -> dict[str, Any]:
    """Integer spatial scale factors and mode of a 4-D Resize (what both formats express)."""
    x = static_shape(graph, node.inputs[0])
    y = static_shape(graph, node.outputs[0])
    if len(x) != 4 or x[:2] != y[:2]:
        raise Refuse("only 4-D NCHW Resize of H and W is supported")
    if y[2] % x[2] or y[3] % x[3]:
        raise Refuse(f"non-integer scale {x[2:]} -> {y[2:]} is not supported")
    r = resize_attrs(node, graph.opset)
    mode, ctm = r.mode, r.coordinate_transformation_mode
    sh, sw = y[2] // x[2], y[3] // x[3]
    if mode == "nearest":
        nm = r.nearest_mode
        # With an integer factor, asymmetric+floor and half_pixel+round_prefer_floor both
        # repeat each pixel (Resize-10's 'simple' rounding is floor when upsampling); other
        # combinations shift the grid.
        if not (
            (ctm == "asymmetric" and nm in ("floor", "simple"))
            or (
                ctm == "half_pixel"
                and nm in ("round_prefer_floor", "round_prefer_ceil")
                and sh % 2 == 1
                and sw % 2 == 1
            )
            or (sh == 1 and sw == 1)
        ):
            raise Refuse(f"nearest Resize with {ctm}/{nm} is not a pixel repeat")
        return {"mode": "nearest", "sh": sh, "sw": sw}
    if mode == "linear":
        if ctm == "align_corners":
            return {"mode": "bilinear", "align_corners": True, "sh": sh, "sw": sw}
        if ctm in ("half_pixel", "pytorch_half_pixel"):
            return {"mode": "bilinear", "align_corners": False, "sh": sh, "sw": sw}
        raise Refuse(f"linear Resize with coordinate_transformation_mode={ctm} is not supported")
    raise Refuse(f"Resize mode={mode} is not supported")


def nonempty_reduction(graph: Graph, node: Node, axes: list[int]) -> None:
    """Refuse a ReduceMax / ReduceMin (or GlobalMaxPool) over an axis of size 0.

    ONNX defines the empty max / min as the lowest / highest value of the type (-inf / +inf
    for float32); Core ML's reduce_max / reduce_min (MIL) and ReduceLayerParams MAX / MIN (NN)
    document no result for an empty reduction, so what a device computes is unknown."""
    if "Max" not in node.op_type and "Min" not in node.op_type:
        return
    shape = static_shape(graph, node.inputs[0])
    empty = [a for a in axes if shape[a] == 0]
    if empty:
        raise Refuse(
            f"{node.op_type} over axis {empty[0]} of size 0 (shape {list(shape)}): Core ML "
            "documents no result for an empty max / min reduction"
        )


# The ops each format's emitter maps, filled as mil.py / nn.py register them: a refusal in one
# format names the other when it has the op (neither module imports the other).
OPS_BY_FORMAT: dict[str, set[str]] = {fmt: set() for fmt in FORMATS}


def unmapped(node: Node, fmt: str) -> Refuse:
    """`node`'s op has no emitter in format `fmt`: the refusal, with the other format's or
    the C backend's command when that one has it."""
    what = "MIL op mapping" if fmt == "mlprogram" else "Core ML NeuralNetwork layer"
    other = next(f for f in FORMATS if f != fmt)
    if node.domain in ("", "ai.onnx") and node.op_type in OPS_BY_FORMAT[other]:
        fix: str | None = (
            f"onnx2edge convert MODEL --target coreml --format {other} -o OUT/ "
            f"(it emits {node.op_type})"
        )
    else:
        fix = other_target_fix(node)
    return Refuse(f"no {what} for this op in onnx2edge", fix)


def other_target_fix(node: Node) -> str | None:
    """For an op neither Core ML format maps: converting for the C backend, when it emits
    the op (Refusal.fix)."""
    from ..base import BACKENDS

    c = BACKENDS.get("c")
    if c is None or (node.domain if node.domain != "ai.onnx" else "", node.op_type) not in (
        c().supported_ops
    ):
        return None
    return f"onnx2edge convert MODEL --target c -o OUT/ (the C backend emits {node.op_type})"


# Ops neither Core ML format has: the backend requires their decomposition pass (listed in
# CoreMLBackend.required_passes) and judges them per node by their parts (node_reasons).
DECOMPOSED = ("HardSwish", "Mish")


def decomposed(graph: Graph) -> tuple[Graph, dict[str, str]]:
    """`graph` with DECOMPOSED ops decomposed, and new node name -> original node name."""
    return decompose_with_origin(graph, DECOMPOSED)


def clip_bounds(graph: Graph, node: Node) -> tuple[float, float]:
    """A Clip's constant bounds as the activation table reads them (semantics/activations)."""
    bounds = clip_params(node, graph)
    if bounds is None:
        raise Refuse("Clip bounds must be constants")
    return bounds


def gemm_weights(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray | None]:
    """(W as (N, K), bias as (N,) or None) of Gemm / MatMul with a constant right operand."""
    if node.op_type == "MatMul":
        b = const(graph, node, 1, "MatMul's right operand")
        if b.ndim != 2:
            raise Refuse("MatMul's constant operand must be 2-D")
        return b.T.astype(np.float32), None
    ga = gemm_attrs(node, graph.opset)
    if ga.trans_a:
        raise Refuse("Gemm with transA=1 is not supported")
    b = const(graph, node, 1, "Gemm's B")
    try:  # (M, K, N) as the schema reads transA / transB (semantics/numeric.py)
        _, _, n = gemm_dims(ga, static_shape(graph, node.inputs[0]), b.shape)
    except ValueError as e:
        raise Refuse(str(e)) from e
    w = b if ga.trans_b else b.T  # (N, K)
    c = opt_const(graph, node, 2)
    if len(node.inputs) > 2 and node.inputs[2] and c is None:
        raise Refuse("Gemm's C must be a constant")
    bias = None
    if c is not None:
        if c.size not in (1, n):
            raise Refuse(f"Gemm's C of shape {list(c.shape)} is not a per-output bias")
        bias = (np.broadcast_to(c.reshape(-1), (n,)) * ga.beta).astype(np.float32)
    return (w * ga.alpha).astype(np.float32), bias


def pool_out(size: int, k: int, s: int, before: int, after: int, ceil: bool) -> int:
    """Pooled length: floor, or ceil with the last window dropped when it starts in the end
    padding (MIL avg_pool / max_pool ceil_mode doc; PyTorch's rule)."""
    span = size + before + after - k
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + before and before + after > 0:
        out -= 1
    return out


def deconv_crop(n: Node, geo: dict[str, Any]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) to cut from an unpadded transposed convolution so it gives
    ONNX's output: ONNX removes pads[begin] / pads[end] and then adds output_padding rows at
    the end, so the end crop is pads[end] - output_padding. Only output_padding <= pads[end]
    is expressible as a crop (the common k=3, s=2, p=1, output_padding=1 upsampler is)."""
    t, left, b, r = geo["pads"]
    op_h, op_w = ints(n, "output_padding", 2, 0)  # no schema default: the spec says zeros
    if op_h > b or op_w > r:
        raise Refuse("ConvTranspose with output_padding larger than its end pads is not supported")
    if n.attr("output_shape") is not None:
        raise Refuse("ConvTranspose with an output_shape attribute is not supported")
    return t, b - op_h, left, r - op_w


def pad_mode(g: Graph, n: Node) -> str:
    return pad_attrs(n, g.opset).mode


def pad_amounts(g: Graph, n: Node) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of a 4-D Pad that pads H and W only."""
    if g.opset < 11:
        pads = list(pad_attrs(n, g.opset).pads or ())
    else:
        pads = [int(v) for v in const(g, n, 1, "Pad's pads").reshape(-1)]
        if len(n.inputs) > 3 and n.inputs[3]:
            raise Refuse("Pad with an axes input is not supported")
    rank = len(static_shape(g, n.inputs[0]))
    if rank != 4 or len(pads) != 8:
        raise Refuse("only 4-D Pad is supported")
    if any(pads[i] for i in (0, 1, 4, 5)):
        raise Refuse("Pad of the batch or channel axis is not supported")
    if any(p < 0 for p in pads):
        raise Refuse("negative pads (cropping) are not supported")
    return pads[2], pads[6], pads[3], pads[7]


def pad_value(g: Graph, n: Node) -> float:
    if g.opset < 11:
        return float(pad_attrs(n, g.opset).value)  # type: ignore[arg-type]  # set before 11
    v = opt_const(g, n, 2)
    if len(n.inputs) > 2 and n.inputs[2] and v is None:
        raise Refuse("Pad's constant_value must be a constant")
    return 0.0 if v is None else float(np.asarray(v).reshape(()))
