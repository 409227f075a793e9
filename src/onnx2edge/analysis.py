"""`inspect`: per-node output shapes, parameter counts and multiply-accumulates.

MACs are counted for the ops whose cost is multiply-accumulates: Conv, ConvTranspose, Gemm,
MatMul, their integer forms (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul, o2e.QGemm)
and the fused internal ops the passes make of them (o2e.ConvAct, ...). Everything else (pooling, element-wise, normalisation, data movement) counts 0 MACs;
`total_macs` is therefore the number the papers quote (ResNet50 ≈ 4.1 G).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .ir import Graph, Node
from .semantics.attrs import gemm_attrs
from .semantics.fused import DOMAIN, base_domain, base_op


def _prod(xs: tuple[int, ...] | list[int]) -> int:
    return int(np.prod(xs, dtype=np.int64)) if len(xs) else 1


def _shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name) if name else None
    return t.static_shape if t is not None and t.is_static else None


# the weight input of each convolution, and the matrix products with A at input 0 (the
# integer forms included: their cost is the same multiply-accumulates)
_CONVS = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
_MATMULS = ("MatMul", "MatMulInteger", "QLinearMatMul", f"{DOMAIN}:QGemm")


def node_macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of one node; a fused internal op (o2e.ConvAct, ConvAddAct, GemmAct,
    QLinearConvAct, QGemmAct...) counts as its base op (semantics/fused.py `base_op`)."""
    domain, op = base_domain(node), base_op(node)
    if domain not in ("", "ai.onnx"):
        op = f"{domain}:{op}"
    if op in _CONVS:
        w, y = _shape(graph, node.inputs[_CONVS[op]]), _shape(graph, node.outputs[0])
        if w is None or y is None:
            return 0
        # every output element reads (Cin/group) * kernel inputs: that is w.shape[1:]
        return _prod(y) * _prod(w[1:])
    if op == "ConvTranspose":
        x, w = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
        if x is None or w is None:
            return 0
        # every input element scatters into (Cout/group) * kernel outputs
        return _prod(x) * _prod(w[1:])
    if op == "Gemm":
        a, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
        if a is None or y is None:
            return 0
        k = a[0] if gemm_attrs(node, graph.opset).trans_a else a[1]
        return _prod(y) * k
    if op in _MATMULS:
        a, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
        if a is None or y is None:
            return 0
        return _prod(y) * (a[-1] if len(a) else 1)
    if op == f"{DOMAIN}:FusedAttention":
        return _attention_macs(graph, node)
    return 0


def _attention_macs(graph: Graph, node: Node) -> int:
    """Q . K^T plus P . V of o2e.FusedAttention: rows x keys x (D + E)."""
    k, y = _shape(graph, node.inputs[1]), _shape(graph, node.outputs[0])
    if k is None or y is None or len(k) < 2 or not y:
        return 0
    if node.attr("qkv_layout") == "packed":  # [B, T, 3, H, D]
        n, d = k[1], k[-1]
    else:
        n, d = (k[-1], k[-2]) if node.attr("k_transposed") else (k[-2], k[-1])
    rows = _prod(y) // max(y[-1], 1)
    return rows * n * (d + y[-1])


def inspect_graph(graph: Graph) -> dict[str, Any]:
    nodes = []
    seen_params: set[str] = set()
    total_params = 0
    for node in graph.nodes:
        params = graph.params(node)
        n_params = sum(int(np.size(v)) for v in params.values())
        for k, v in params.items():
            if k not in seen_params:  # shared initializers count once in the total
                seen_params.add(k)
                total_params += int(np.size(v))
        nodes.append(
            {
                "name": node.name,
                "op": node.op_type,
                "domain": node.domain,
                "output_shapes": [
                    list(s) if (s := _shape(graph, o)) is not None else None for o in node.outputs
                ],
                "params": n_params,
                "macs": node_macs(graph, node),
            }
        )
    # Weights no node reads (e.g. a constant output) still belong to the model.
    for k, v in graph.initializers.items():
        if k not in seen_params:
            total_params += int(np.size(v))
    return {
        "graph": graph.name,
        "opset": graph.opset,
        "inputs": [
            {"name": n, "shape": _io_shape(graph, n), "dtype": _dtype(graph, n)}
            for n in graph.inputs
        ],
        "outputs": [
            {"name": n, "shape": _io_shape(graph, n), "dtype": _dtype(graph, n)}
            for n in graph.outputs
        ],
        "total_params": total_params,
        "weight_bytes": int(sum(int(np.asarray(v).nbytes) for v in graph.initializers.values())),
        "total_macs": sum(n["macs"] for n in nodes),
        "op_histogram": dict(sorted(Counter(n.op_type for n in graph.nodes).items())),
        "nodes": nodes,
    }


def _io_shape(graph: Graph, name: str) -> list[int | str | None] | None:
    t = graph.type_of(name)
    return None if t is None or t.shape is None else list(t.shape)


def _dtype(graph: Graph, name: str) -> str | None:
    t = graph.type_of(name)
    if t is None:
        return None
    try:
        return str(t.dtype)
    except (KeyError, TypeError, ValueError):
        return None


def format_report(info: dict[str, Any]) -> str:
    rows = [("node", "op", "output shape", "params", "MACs")]
    for n in info["nodes"]:
        shapes = " ".join(
            "x".join(map(str, s)) if s is not None else "?" for s in n["output_shapes"]
        )
        rows.append((n["name"], n["op"], shapes, f"{n['params']:,}", f"{n['macs']:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for io in ("inputs", "outputs"):
        for v in info[io]:
            shape = "x".join(map(str, v["shape"])) if v["shape"] is not None else "?"
            lines.append(f"{io[:-1]}: {v['name']} {v['dtype']} {shape}")
    lines.append(f"opset: {info['opset']}")
    lines.append(f"total params: {info['total_params']:,}")
    lines.append(f"weights (flash): {info['weight_bytes']:,} bytes")
    if info.get("c_arena_bytes") is not None:
        lines.append(f"activations (RAM, C arena): {info['c_arena_bytes']:,} bytes")
    lines.append(f"total MACs: {info['total_macs']:,} ({info['total_macs'] / 1e9:.3f} G)")
    lines.append("ops: " + ", ".join(f"{k} {v}" for k, v in info["op_histogram"].items()))
    return "\n".join(lines)
