"""What both Core ML formats share: options, tensor checks, constant lookups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir import Graph, Node
from ...semantics.activations import clip_params
from ...semantics.attrs import attr, gemm_attrs, ints

FORMATS = ("neuralnetwork", "mlprogram")


class Refuse(Exception):
    """A node the chosen Core ML format cannot express; the message says why."""


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
        raise Refuse(f"tensor '{name}' has no static shape; fix it with --input-shape")
    return tuple(int(d) for d in t.static_shape)


def float_tensor(graph: Graph, name: str) -> None:
    t = graph.type_of(name)
    if t is None or t.dtype != np.float32:
        raise Refuse(
            f"tensor '{name}' is {None if t is None else t.dtype}, only float32 is supported"
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
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    sh, sw = y[2] // x[2], y[3] // x[3]
    if mode == "nearest":
        nm = node.attr("nearest_mode", "round_prefer_floor")
        nm = nm.decode() if isinstance(nm, bytes) else nm
        # With an integer factor, asymmetric+floor and half_pixel+round_prefer_floor both
        # repeat each pixel; other combinations shift the grid.
        if not (
            (ctm == "asymmetric" and nm == "floor")
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
    ga = gemm_attrs(node, graph.opset) if node.op_type == "Gemm" else None
    if ga is not None and ga.trans_a:
        raise Refuse("Gemm with transA=1 is not supported")
    w = const(graph, node, 1, "Gemm's B")
    w = w if ga is not None and ga.trans_b else w.T
    alpha, beta = (ga.alpha, ga.beta) if ga is not None else (1.0, 1.0)
    c = opt_const(graph, node, 2)
    if len(node.inputs) > 2 and node.inputs[2] and c is None:
        raise Refuse("Gemm's C must be a constant")
    n = w.shape[0]
    bias = None
    if c is not None:
        if c.size not in (1, n):
            raise Refuse(f"Gemm's C of shape {list(c.shape)} is not a per-output bias")
        bias = (np.broadcast_to(c.reshape(-1), (n,)) * beta).astype(np.float32)
    return (w * alpha).astype(np.float32), bias


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
