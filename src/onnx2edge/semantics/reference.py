"""An op's meaning as onnx's own reference evaluator computes it (issue 32, item 1): the
independent check the semantics records (records.py) and the activation table's numpy column
are tested against, for one node at one opset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.reference


def run_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    opset: int,
    attributes: Mapping[str, Any] | None = None,
    n_outputs: int = 1,
    domain: str = "",
    engine: str = "onnx",
) -> list[np.ndarray]:
    """Outputs of one `op_type` node at `opset` on `inputs` (None: an omitted optional input),
    computed by onnx's reference evaluator, or by onnxruntime (`engine="onnxruntime"`) where the
    evaluator implements only the newest signature (Resize-10's scales in input 1)."""
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_outputs)]
    node = oh.make_node(op_type, names, outs, domain=domain, **dict(attributes or {}))
    vi = [
        oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in zip(names, inputs, strict=True)
        if v is not None
    ]
    graph = oh.make_graph([node], "one", vi, [oh.make_empty_tensor_value_info(o) for o in outs])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid(domain, opset)])
    feeds = {n: v for n, v in zip(names, inputs, strict=True) if v is not None}
    if engine == "onnxruntime":
        import onnxruntime as ort  # noqa: PLC0415  (heavy; only this engine needs it)

        model.ir_version = min(model.ir_version, 10)
        model = onnx.shape_inference.infer_shapes(model)  # onnxruntime needs output types
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return list(sess.run(None, feeds))
    return list(onnx.reference.ReferenceEvaluator(model).run(None, feeds))
