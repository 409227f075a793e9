"""float16 ONNX models (e.g. `onnx2edge quantize --mode fp16`: fp16 weights and ops between a
Cast at each edge) as the float graph Core ML computes in its own precision.

Core ML has no float16 model inputs before iOS 16 and decides the compute precision itself
(`--precision fp16`, the ML Program default, computes every op in float16 as the ONNX model
does); so here float16 tensors and weights become float32 and a Cast between two float types
becomes an Identity (removed by remove_identity). The numbers are then float16 computation
(fp16 precision) or better (fp32).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir import Graph, TensorType, Value
from ...passes.registry import register_pass
from ...semantics.numeric import cast_attrs

_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)


def _widen(t: TensorType | None) -> TensorType | None:
    if t is None or t.elem_type != TensorProto.FLOAT16:
        return t
    return TensorType(TensorProto.FLOAT, t.shape)


@register_pass("coreml_float16_as_float", after=("fold_constants",))
def coreml_float16_as_float(graph: Graph) -> Graph:
    """float16 weights / tensors -> float32, float <-> float16 Casts -> Identity."""
    small = any(
        v.type is not None and v.type.elem_type == TensorProto.FLOAT16
        for v in graph.values.values()
    ) or any(np.asarray(a).dtype == np.float16 for a in graph.initializers.values())
    if not small:
        return graph
    nodes = []
    for n in graph.nodes:
        if n.op_type == "Cast" and n.domain in ("", "ai.onnx"):
            src = graph.type_of(n.inputs[0])
            to = cast_attrs(n, graph.opset).to
            if to in _FLOATS and src is not None and src.elem_type in _FLOATS:
                n = n.replace(op_type="Identity", attrs={})
        nodes.append(n)
    values = {k: Value(v.name, _widen(v.type)) for k, v in graph.values.items()}
    inits = {
        k: (np.asarray(a).astype(np.float32) if np.asarray(a).dtype == np.float16 else a)
        for k, a in graph.initializers.items()
    }
    return graph.replace(nodes=tuple(nodes), values=values, initializers=inits)
