"""Loading, saving and verifying edited models, shared by every edit command.

Edits work on the user's model as it is (no constant folding, symbolic dims kept); only
verification fixes symbolic dims (to 1, or `--input-shape`) to make seeded random inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from ..compare import VerifyReport, compare_all
from ..errors import Onnx2EdgeError
from ..frontend.loader import fix_input_shapes, infer_shapes, load_model
from ..fsutil import write_bytes_atomic
from ..ir import Graph
from ..ir.proto import graph_from_model, model_from_graph
from ..runtime import complete_inputs, ort_run
from .rules import count_ops as count_ops
from .rules import op_delta as op_delta

Shapes = Mapping[str, Sequence[int]] | None


def load_graph(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, Graph]:
    """The checked model and its IR with onnx's inferred shapes (nothing folded)."""
    proto = load_model(model)
    return proto, graph_from_model(infer_shapes(proto))


def to_model(graph: Graph) -> onnx.ModelProto:
    """IR -> ModelProto with fresh value_info (stale shapes would contradict the edit)."""
    m = model_from_graph(graph, value_info=False)
    try:
        return infer_shapes(m)
    except Onnx2EdgeError:
        return m


def check_model(model: onnx.ModelProto, what: str) -> None:
    """Refuse to write a model onnx's checker rejects: the edit would break the graph."""
    from ..frontend.loader import skeleton

    try:
        onnx.checker.check_model(skeleton(model, max_elements=1 << 16))
    except (onnx.checker.ValidationError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Onnx2EdgeError(
            f"{what}: the result would not be a valid model ({first}); nothing written"
        ) from e


def save_model(model: onnx.ModelProto, out: str | Path, what: str = "edit") -> Path:
    check_model(model, what)
    data = model.SerializeToString()
    return write_bytes_atomic(out, data)


def verify_models(
    original: onnx.ModelProto,
    edited: onnx.ModelProto,
    *,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-6,
    input_shapes: Shapes = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    map_inputs: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    map_outputs: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    target: str = "onnx",
    per_layer: bool = False,
) -> VerifyReport:
    """Run both models in onnxruntime on the same seeded inputs and compare every output of
    the original. `map_inputs` / `map_outputs` translate feeds / results of the edited model
    (e.g. NCHW <-> NHWC); edited outputs not in the original are ignored.

    `per_layer` also compares every intermediate tensor the two models share by name (edits
    keep the names of the tensors they do not touch) and reports them in graph order, so
    the first divergence names the node where an edit changed the numerics."""
    ref_model = fix_input_shapes(original, input_shapes or {}, quiet=True)
    ref_graph = graph_from_model(infer_shapes(ref_model))
    feeds = complete_inputs(ref_graph, dict(inputs or {}), seed)
    cand_feeds = map_inputs(dict(feeds)) if map_inputs else feeds
    shapes = {k: v.shape for k, v in cand_feeds.items()}
    cand_model = fix_input_shapes(
        edited, {k: s for k, s in shapes.items() if _is_input(edited, k)}, quiet=True
    )
    layers: list[str] = []
    if per_layer:
        from ..ir.expose import expose_outputs

        ref_model, ref_names = expose_outputs(ref_model)
        cand_model, cand_names = expose_outputs(cand_model)
        common = set(cand_names) - set(ref_graph.outputs)
        layers = [n for n in ref_names if n in common]
    ref = ort_run(ref_model, feeds)
    ours = ort_run(cand_model, cand_feeds)
    if map_outputs:
        ours = map_outputs(ours)
    missing = [n for n in ref_graph.outputs if n not in ours]
    if missing:
        raise Onnx2EdgeError(f"the edited model has no output named {', '.join(missing)}")
    return VerifyReport(
        target,
        rtol,
        atol,
        compare_all(list(ref_graph.outputs), ours, ref, rtol, atol),
        compare_all(layers, ours, ref, rtol, atol, ref_graph),
    )


def _is_input(model: onnx.ModelProto, name: str) -> bool:
    inits = {t.name for t in model.graph.initializer}
    return any(i.name == name and name not in inits for i in model.graph.input)
