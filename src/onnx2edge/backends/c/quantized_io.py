"""`convert --io int8|uint8`: a quantized model's inputs and outputs in their quantized type.

A QDQ (or QOperator) model takes float and quantizes at once, and ends by dequantizing: a
sensor pipeline that already has 8-bit data pays a float round trip on each side. This pass
drops those two ends where they are plain: a graph input read only by one QuantizeLinear with
a constant per-tensor scale and zero point becomes that QuantizeLinear's output (same name,
the quantized type); a graph output made by a DequantizeLinear with a constant per-tensor
scale and zero point becomes its quantized input (same name). The scale and zero point of each
tensor exposed so are recorded in the graph's metadata (QUANT_KEY): the header prints them
(NAME_INPUT_0_SCALE, ..._ZERO_POINT) and the manifest carries them, so a caller quantizes
q = clamp(round(x / scale) + zero_point) and dequantizes x = (q - zero_point) * scale."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...ir import Graph, Value
from ...passes.registry import register_pass

QUANT_KEY = "o2e.quantized_io"


def _scalar(graph: Graph, name: str) -> np.ndarray | None:
    arr = graph.initializers.get(name) if name else None
    return arr if arr is not None and arr.size == 1 else None


def _qparams(graph: Graph, node: Any) -> tuple[float, int] | None:
    """A Quantize/DequantizeLinear's constant per-tensor (scale, zero point), else None."""
    if node.domain not in ("", "ai.onnx") or len(node.inputs) < 3 or not node.inputs[2]:
        return None
    s, z = _scalar(graph, node.inputs[1]), _scalar(graph, node.inputs[2])
    if s is None or z is None or z.dtype not in (np.int8, np.uint8):
        return None
    return float(s.reshape(-1)[0]), int(z.reshape(-1)[0])


@register_pass(
    "quantized_io",
    after=("fold_constants", "remove_identity", "qdq_to_int8", "eliminate_dead_nodes"),
)
def quantized_io(graph: Graph) -> Graph:
    """Inputs and outputs exposed in their quantized type (module docstring)."""
    rename: dict[str, str] = {}  # quantized tensor -> the graph input / output name it takes
    dropped: set[int] = set()
    record: dict[str, dict[str, Any]] = {}
    values = dict(graph.values)
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for x in node.inputs:
            readers.setdefault(x, []).append(i)
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs if o}
    for x in graph.inputs:
        users = readers.get(x, [])
        if len(users) != 1 or x in graph.outputs:
            continue
        node = graph.nodes[users[0]]
        qp = _qparams(graph, node) if node.op_type == "QuantizeLinear" else None
        if qp is None or node.inputs[0] != x:
            continue
        q = node.outputs[0]
        if q in graph.outputs:
            continue
        dropped.add(users[0])
        rename[q] = x
        values[x] = Value(x, graph.type_of(q))
        record[x] = {"kind": "input", "scale": qp[0], "zero_point": qp[1]}
    for y in graph.outputs:
        i = producer.get(y)
        if i is None or i in dropped or graph.outputs.count(y) != 1:
            continue
        node = graph.nodes[i]
        qp = _qparams(graph, node) if node.op_type == "DequantizeLinear" else None
        t = node.inputs[0] if qp is not None else ""
        if not t or t in graph.inputs or t in graph.outputs or t in rename or t not in producer:
            continue
        dropped.add(i)
        rename[t] = y
        values[y] = Value(y, graph.type_of(t))
        record[y] = {"kind": "output", "scale": qp[0], "zero_point": qp[1]}
    # a subgraph (If / Loop body) may name a tensor from the outer graph: leave those alone
    if not record or any(
        a.type in (5, 10) for n in graph.nodes for a in n.attrs.values()
    ):  # AttributeProto.GRAPH / GRAPHS
        return graph
    nodes = tuple(
        n.replace(
            inputs=tuple(rename.get(x, x) for x in n.inputs),
            outputs=tuple(rename.get(o, o) for o in n.outputs),
        )
        for k, n in enumerate(graph.nodes)
        if k not in dropped
    )
    for old in rename:
        values.pop(old, None)
    return graph.replace(
        nodes=nodes,
        values=values,
        metadata={**graph.metadata, QUANT_KEY: json.dumps(record, sort_keys=True)},
    )


def quantized_io_of(graph: Graph) -> dict[str, dict[str, Any]]:
    """What the pass recorded: tensor name -> {kind, scale, zero_point}."""
    text = graph.metadata.get(QUANT_KEY)
    return json.loads(text) if text else {}
