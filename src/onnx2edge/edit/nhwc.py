"""`onnx2edge nhwc`: image inputs / outputs in NHWC, Transposes only at the boundaries.

Seed 002 (openvino2tensorflow) converts NCHW models to NHWC *without* the Transposes that
onnx-tensorflow wraps around every op. In ONNX itself Conv, pooling, BatchNormalization,
LRN, InstanceNormalization and Resize-by-scales are defined on NCHW only (no layout
attribute), so an ONNX model that computes in NHWC internally would need a Transpose pair
around every Conv: the wrapping the seed avoids. What this command produces instead:

1. each rank-4 float input / output is declared NHWC, with one Transpose next to it;
2. `optimize_transposes` then pushes those Transposes through layout-agnostic ops
   (element-wise unary ops, binary ops whose other operand is a constant or is transposed
   the same way, Softmax / Concat / reductions with their axis remapped, Resize with its
   scales / sizes permuted) and cancels pairs,
   so a model that already had layout Transposes at its edges (TensorFlow exports: NHWC ->
   Transpose -> NCHW body) loses both.

The result has at most one Transpose per image input and output (often fewer) plus whatever
Transposes the original had that do not cancel; `report["transposes"]` counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Onnx2EdgeError
from ..ir import Graph, Node, TensorType, Value
from .model_io import load_graph, save_model, to_model, verify_models
from .rules import Builder, make_attr
from .transposes import (  # noqa: F401  (re-exported: the command's public names)
    TO_NCHW,
    TO_NHWC,
    count_transposes,
    optimize_transposes,
    transpose_cancel,
)


def _nhwc_type(t: TensorType | None) -> TensorType | None:
    if t is None or t.shape is None:
        return t
    return TensorType(t.elem_type, tuple(t.shape[k] for k in TO_NHWC))


def to_nhwc_graph(
    graph: Graph, inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None
) -> tuple[Graph, list[str], list[str]]:
    """The graph with the chosen rank-4 inputs / outputs in NHWC (see module doc)."""

    def is_image(name: str) -> bool:
        t = graph.type_of(name)
        return t is not None and t.shape is not None and len(t.shape) == 4 and t.dtype.kind == "f"

    ins = [i for i in graph.inputs if is_image(i)] if inputs is None else list(inputs)
    outs = [o for o in graph.outputs if is_image(o)] if outputs is None else list(outputs)
    for name in (*ins, *outs):
        if not is_image(name):
            raise Onnx2EdgeError(
                f"nhwc: '{name}' is not a rank-4 float input / output of the model"
            )
    if not ins and not outs:
        raise Onnx2EdgeError(
            "nhwc: the model has no rank-4 float input or output to turn into NHWC"
        )
    b = Builder(graph)
    values = dict(graph.values)
    rename: dict[str, str] = {}
    pre: list[Node] = []
    for i in ins:
        inner = b.fresh(f"{i}/nchw")
        rename[i] = inner
        pre.append(
            Node(
                b.fresh(f"{i}/to_nchw"),
                "Transpose",
                (i,),
                (inner,),
                {"perm": make_attr(list(TO_NCHW))},
            )
        )
        t = graph.type_of(i)
        values[inner] = Value(inner, t)
        values[i] = Value(i, _nhwc_type(t))
    out_map = {o: b.fresh(f"{o}/nchw") for o in outs}
    nodes = [*pre]
    for n in graph.nodes:
        nodes.append(
            n.replace(
                inputs=tuple(rename.get(i, out_map.get(i, i)) for i in n.inputs),
                outputs=tuple(out_map.get(o, o) for o in n.outputs),
            )
        )
    for o, inner in out_map.items():
        if o in graph.inputs:  # an input passed straight through: reads the NHWC input itself
            continue
        nodes.append(
            Node(
                b.fresh(f"{o}/to_nhwc"),
                "Transpose",
                (inner,),
                (o,),
                {"perm": make_attr(list(TO_NHWC))},
            )
        )
        t = graph.type_of(o)
        values[inner] = Value(inner, t)
        values[o] = Value(o, _nhwc_type(t))
    g = graph.with_nodes(nodes, values=values)
    return optimize_transposes(g), ins, outs


def nhwc(
    model: str | Path,
    out: str | Path,
    *,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    verify: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    proto, graph = load_graph(model)
    new, ins, outs = to_nhwc_graph(graph, inputs, outputs)
    edited = to_model(new)
    res: dict[str, Any] = {
        "output": str(out),
        "nhwc_inputs": ins,
        "nhwc_outputs": outs,
        "transposes": {"before": count_transposes(graph), "after": count_transposes(new)},
        "transposes_left": [n.name for n in new.nodes if n.op_type == "Transpose"],
        "boundary_limit": len(ins) + len(outs),
    }
    if verify:
        rep = verify_models(
            proto,
            edited,
            seed=seed,
            map_inputs=lambda f: {
                k: (np.ascontiguousarray(v.transpose(TO_NHWC)) if k in ins else v)
                for k, v in f.items()
            },
            map_outputs=lambda o: {
                k: (np.ascontiguousarray(v.transpose(TO_NCHW)) if k in outs else v)
                for k, v in o.items()
            },
        )
        res["verify"] = rep.as_dict()
        if not rep.ok:
            worst = max(rep.outputs, key=lambda o: o.max_rel)
            raise Onnx2EdgeError(
                f"nhwc: the NHWC model differs on '{worst.name}' (max abs error "
                f"{worst.max_abs:.3g}); nothing written"
            )
    save_model(edited, out, "nhwc")
    return res
