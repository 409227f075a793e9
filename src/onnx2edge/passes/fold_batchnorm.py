"""Fold inference BatchNormalization into the Conv / ConvTranspose / Gemm before it (seed 000:
BN folded into the convolution's data source).

before:  x -> Conv(W, B) -> t -> BatchNormalization(γ, β, μ, σ², ε) -> y
after:   x -> Conv(W·s, (B − μ)·s + β) -> y            with s = γ / sqrt(σ² + ε)

The folded weights get new initializer names: exporters share initializers between nodes
(torch shares identical BN parameters), so the originals are never edited in place, and they
disappear only if no other node still reads them.
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from ..ir import Attr, Graph, Node
from ..semantics.attrs import attr
from ..semantics.batchnorm import bn_affine
from .registry import register_pass


def _bn_params(graph: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, shift) of an inference BN whose parameters are all constant."""
    return bn_affine(graph, bn)


def _scaled_weights(graph: Graph, node: Node, scale: np.ndarray) -> np.ndarray | None:
    w = graph.const(node.inputs[1])
    if w is None or w.dtype != np.float32:
        return None
    c = scale.shape[0]
    w64 = w.astype(np.float64)
    if node.op_type == "Conv":
        if w.shape[0] != c:
            return None
        return (w64 * scale.reshape((c,) + (1,) * (w.ndim - 1))).astype(np.float32)
    if node.op_type == "ConvTranspose":
        group = int(attr(node, "group", graph.opset))
        cin, cout_g = w.shape[0], w.shape[1]
        if cout_g * group != c:
            return None
        # output channel g*cout_g + j is weight [g*cin_g + i, j]
        s = scale.reshape(group, 1, cout_g)
        wg = w64.reshape(group, cin // group, cout_g, -1) * s[..., None]
        return wg.reshape(w.shape).astype(np.float32)
    # Gemm: y = alpha·A·B' (+ beta·C); scale the output columns of B'
    if w.ndim != 2:
        return None
    if attr(node, "transB", graph.opset):
        return None if w.shape[0] != c else (w64 * scale[:, None]).astype(np.float32)
    return None if w.shape[1] != c else (w64 * scale[None, :]).astype(np.float32)


def _folded_bias(
    graph: Graph, node: Node, scale: np.ndarray, shift: np.ndarray
) -> np.ndarray | None:
    c = scale.shape[0]
    old = np.zeros(c)
    if len(node.inputs) > 2 and node.inputs[2]:
        b = graph.const(node.inputs[2])
        if b is None:
            return None
        b = np.asarray(b, dtype=np.float64)
        if node.op_type == "Gemm":
            b = b * float(attr(node, "beta", graph.opset))
            if b.size not in (1, c):
                return None
        old = np.broadcast_to(b.reshape(-1), (c,))
    return (old * scale + shift).astype(np.float32)


@register_pass("fold_batchnorm", after=("fold_constants",))
def fold_batchnorm(graph: Graph) -> Graph:
    inits = dict(graph.initializers)
    replaced: dict[str, Node] = {}  # producer name -> folded node
    dropped: set[str] = set()  # BN node names
    for bn in graph.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain != "":
            continue
        prod = graph.producer(bn.inputs[0])
        if (
            prod is None
            or prod.op_type not in ("Conv", "ConvTranspose", "Gemm")
            or prod.name in replaced
            or len(graph.consumers(prod.outputs[0])) != 1
            or prod.outputs[0] in graph.outputs
        ):
            continue
        params = _bn_params(graph, bn)
        if params is None:
            continue
        scale, shift = params
        w = _scaled_weights(graph, prod, scale)
        b = _folded_bias(graph, prod, scale, shift)
        if w is None or b is None:
            continue
        w_name = graph.unique_name(f"{prod.inputs[1]}_bnfold")
        b_name = graph.unique_name(f"{prod.name}_bias_bnfold")
        inits[w_name], inits[b_name] = w, b
        attrs = dict(prod.attrs)
        if prod.op_type == "Gemm":
            attrs["beta"] = Attr(AttributeProto.FLOAT, 1.0)
        replaced[prod.name] = prod.replace(
            inputs=(prod.inputs[0], w_name, b_name), outputs=(bn.outputs[0],), attrs=attrs
        )
        dropped.add(bn.name)
    if not replaced:
        return graph
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes, initializers=inits)
