"""onnx's shape inference on a ModelProto, without its large weights.

Below both the frontend (which infers shapes while loading) and the infer_shapes pass (which
re-runs it on the IR), so neither imports the other.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import external_data_helper, helper

from ..errors import Onnx2EdgeError


def skeleton(model: onnx.ModelProto, max_elements: int = 64) -> onnx.ModelProto:
    """The model without its large weights: they become typed graph inputs.

    Shape inference and the checker need only their types; serialising hundreds of MB of
    weights through protobuf for them is what made conversion of big models slow.
    """
    m = onnx.ModelProto()
    for f in (
        "ir_version",
        "producer_name",
        "producer_version",
        "domain",
        "model_version",
        "doc_string",
    ):
        if model.HasField(f):
            setattr(m, f, getattr(model, f))
    m.opset_import.extend(model.opset_import)
    m.metadata_props.extend(model.metadata_props)
    m.functions.extend(model.functions)
    g, src = m.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    listed = {vi.name for vi in src.input}
    g.input.extend(src.input)
    for t in src.initializer:
        # External tensors are never kept: their data is not loaded (the frontend maps it).
        small = int(np.prod(t.dims, dtype=np.int64)) <= max_elements
        if small and not external_data_helper.uses_external_data(t):
            g.initializer.append(t)
        elif t.name not in listed:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's shape inference with data propagation (folds Shape->Gather->... dims).

    Runs on the weightless skeleton and copies the inferred shapes back."""
    try:
        inferred = onnx.shape_inference.infer_shapes(
            skeleton(model), check_type=False, strict_mode=False, data_prop=True
        )
    except Exception as e:  # noqa: BLE001 - onnx raises several unrelated types here
        raise Onnx2EdgeError(f"shape inference failed: {str(e).splitlines()[0]}") from e
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    by_name = {o.name: o for o in inferred.graph.output}
    for o in out.graph.output:
        if o.name in by_name:
            o.CopyFrom(by_name[o.name])
    return out
