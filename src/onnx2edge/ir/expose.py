"""Intermediate tensors as graph outputs: the one function `verify --per-layer`, `edit`'s
per-layer comparison, `compare-quantized`, `add-output` and the frontend's shape observer
share (each had its own copy)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from .onnx_shapes import infer_shapes


def constant_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from initializers alone (a weight's DequantizeLinear, Shape chains).
    onnxruntime folds them into initializers when it loads the model; one that is also a
    graph output makes it fail ("Attempt to replace the existing tensor") and print that
    error, so they are never exposed: they are weights, not activations."""
    g = model.graph
    # an initializer that is also a graph input can be fed: not a constant
    inputs = {i.name for i in g.input}
    const = {t.name for t in g.initializer} - inputs
    out: set[str] = set()
    for n in g.node:  # topological order (topo_sort): a producer comes before its consumers
        ins = [i for i in n.input if i]
        if n.op_type == "Constant" or (ins and all(i in const for i in ins)):
            const.update(o for o in n.output if o)
            out.update(o for o in n.output if o)
    return out


def expose_outputs(
    model: onnx.ModelProto,
    names: Sequence[str] | None = None,
    *,
    typed: bool = True,
    constants: bool = False,
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `model` whose graph outputs also include `names` (None: every node output),
    in graph order, and those names. `typed`: each added output carries the type shape
    inference gives it (else an empty type: onnxruntime infers it). `constants`: expose
    tensors computed from initializers alone too (see `constant_tensors`; by default they
    stay inside). A name no node produces, or already an output, is left as it is."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    types = {vi.name: vi for vi in infer_shapes(model).graph.value_info} if typed else {}
    produced = [o for n in m.graph.node for o in n.output if o]
    wanted = produced if names is None else [n for n in names if n in set(produced)]
    present = {o.name for o in m.graph.output}
    if not constants:
        present |= constant_tensors(m)
    for name in wanted:
        if name in present:
            continue
        vi = types.get(name) or helper.make_empty_tensor_value_info(name)
        m.graph.output.append(vi)
        present.add(name)
    return m, wanted
