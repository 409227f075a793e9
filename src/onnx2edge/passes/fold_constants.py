"""Constant folding: evaluate every node whose inputs are all known at conversion time.

This removes the shape subgraphs torch exporters emit (Shape -> Gather -> Unsqueeze -> Concat
-> Reshape) once input shapes are static, and materialises weights that models compute
(ConstantOfShape in the onnx wheel's `light` models).

before:  x -> Shape -> Gather -> Concat -> Reshape(x, .)      after:  Reshape(x, <const>)

Nodes are evaluated with onnx's reference evaluator, the executable form of the spec, rather
than with hand-written numpy: one semantics for every op and opset.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..ir import Graph, Node, TensorType, Value
from ..ir.proto import node_to_proto
from .registry import register_pass

# Nondeterministic or stateful ops must run at inference time.
_NEVER_FOLD = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "If",
    "Loop",
    "Scan",
    "SequenceEmpty",
}
# Past this many output bytes, a folded tensor only bloats the model (onnxsim users' complaint)
# unless it replaces a producer of weights, which ConstantOfShape/Tile/Expand usually are.
_MAX_FOLD_BYTES = 1 << 30


def _static_shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    return t.static_shape if t is not None and t.is_static else None


def _fold_shape_op(node: Node, graph: Graph) -> list[np.ndarray] | None:
    """Shape/Size of a tensor whose shape is static, without evaluating the tensor."""
    shape = _static_shape(graph, node.inputs[0])
    if shape is None:
        return None
    if node.op_type == "Size":
        return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
    rank = len(shape)
    start = node.attr("start", 0)
    end = node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(shape[start:end], dtype=np.int64)]


def _evaluate(
    node: Node, consts: dict[str, np.ndarray], opsets: dict[str, int]
) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    feeds = {i: consts[i] for i in dict.fromkeys(node.inputs) if i}
    g = helper.make_graph(
        [node_to_proto(node)],
        "fold",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [helper.make_empty_tensor_value_info(o) for o in node.outputs if o],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    try:
        outs = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - any failure just means "leave it to runtime"
        return None
    return [np.asarray(o) for o in outs]


def _foldable(node: Node, graph: Graph, consts: dict[str, np.ndarray]) -> bool:
    if node.op_type in _NEVER_FOLD or node.domain not in ("", "ai.onnx"):
        return False
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for a in node.attrs.values()
    ):
        return False
    return all(i in consts for i in node.inputs if i)


@register_pass("fold_constants")
def fold_constants(graph: Graph) -> Graph:
    consts: dict[str, np.ndarray] = dict(graph.initializers)
    values: dict[str, Value] = dict(graph.values)
    nodes: list[Node] = []
    for node in graph.nodes:
        outs: list[np.ndarray] | None = None
        if node.op_type in ("Shape", "Size") and node.domain == "":
            outs = _fold_shape_op(node, graph)
        elif node.op_type == "Constant" and node.domain == "":
            outs = _evaluate(node, consts, dict(graph.opset_imports))
        elif _foldable(node, graph, consts):
            outs = _evaluate(node, consts, dict(graph.opset_imports))
            if outs is not None and sum(o.nbytes for o in outs) > _MAX_FOLD_BYTES:
                outs = None
        if outs is None or len(outs) != len([o for o in node.outputs if o]):
            nodes.append(node)
            continue
        for name, arr in zip([o for o in node.outputs if o], outs, strict=True):
            want = graph.type_of(name)
            if want is not None and want.elem_type and arr.dtype != want.dtype:
                arr = arr.astype(want.dtype)
            consts[name] = arr
            values[name] = Value(
                name, TensorType(helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)
            )
    return graph.with_nodes(nodes, initializers=consts, values=values)
