"""Re-run onnx's shape inference on the IR (after folding, shapes that hung on computed
shape tensors become static)."""

from __future__ import annotations

from ..ir import Graph, Value
from ..ir.onnx_shapes import infer_shapes as onnx_infer
from ..ir.proto import graph_from_model, model_from_graph
from .registry import register_pass


@register_pass("infer_shapes", after=("fold_constants",))
def infer_shapes(graph: Graph) -> Graph:
    # Drop the old intermediate shapes so inference cannot be contradicted by stale ones.
    keep = set(graph.inputs) | set(graph.outputs)
    bare = graph.replace(values={k: v for k, v in graph.values.items() if k in keep})
    inferred = graph_from_model(onnx_infer(model_from_graph(bare, skeleton=True)))
    values: dict[str, Value] = dict(graph.values)
    for k, v in inferred.values.items():
        old = values.get(k)
        if old is None or old.type is None or (v.type is not None and v.type.is_static):
            values[k] = v
    return graph.replace(values=values)
