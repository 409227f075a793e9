"""Static specialisation: once the input shapes are fixed, make every shape a constant.

Exporters (paddle2onnx, torch's TorchScript and dynamo exporters, tf2onnx, jax2tf) compute
Reshape/Expand/Slice targets at run time through chains such as

    x -> Shape -> Gather -> Cast -> Mul/Div -> Cast -> Concat -> Reshape(y, .)

onnx's shape inference (even with data propagation) stops at the Cast to float or at the
second Reshape that reads the first one's shape. onnx-simplifier's answer, used here: fold
constants and re-infer shapes until nothing changes (each round, a newly static shape lets a
further Shape node fold, which makes the next Reshape target constant, ...). `If` nodes whose
condition became constant are inlined inside the same loop, so their branches take part.

What is still dynamic afterwards is then filled in and checked against onnxruntime
(`observe_shapes`): the model runs once on a sample input with every intermediate tensor as an
output. A shape onnxruntime observes is only adopted when it cannot depend on tensor values
(all the producing node's shape-determining inputs are constants); a static shape we computed
that onnxruntime contradicts is an error, since it would make the generated code wrong.
`why_dynamic` names the node where a still-dynamic shape comes from.

before:  x -> Shape -> Gather -> Cast -> Mul -> Cast -> Concat -> Reshape(x, .)
after:   Reshape(x, <const int64[3]>)        (every tensor shape static)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

import numpy as np
import onnx

from ..errors import Onnx2EdgeError
from ..ir import Graph, Node, TensorType, Value
from .control_flow import (
    deciding_inputs,
    fix_input_hint,
    inline_control_flow,
    is_select_of_if,
    runtime_if_of,
)
from .fold_constants import fold_constants
from .infer_shapes import infer_shapes
from .registry import register_pass

_MAX_ROUNDS = 32

# Ops whose output shape depends on tensor values whatever their inputs: never adopt an
# observed shape for them (it would hold for the sample input only).
_VALUE_SHAPED = {
    "NonZero",
    "Unique",
    "NonMaxSuppression",
    "Compress",
    "Loop",
    "Scan",
    "If",
    "StringSplit",
    "TfIdfVectorizer",
}
# Inputs (by position) whose values, not just shapes, decide the output shape.
_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "TopK": (1,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "OneHot": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "CenterCropPad": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
    "DFT": (1, 2),
    "STFT": (1, 2, 3),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1, 2),
    "MaxUnpool": (2,),
    "RandomNormalLike": (),
}


def _signature(graph: Graph) -> tuple[int, int, int]:
    static = sum(1 for v in graph.values.values() if v.type is not None and v.type.is_static)
    return len(graph.nodes), len(graph.initializers), static


@register_pass("specialise")
def specialise(graph: Graph) -> Graph:
    """Fold constants, inline constant-condition control flow and re-infer shapes until a
    fixed point (at most _MAX_ROUNDS rounds; each round only ever adds information)."""
    g = infer_shapes(graph)
    seen = _signature(g)
    for _ in range(_MAX_ROUNDS):
        g = infer_shapes(inline_control_flow(fold_constants(g)))
        sig = _signature(g)
        if sig == seen:
            break
        seen = sig
    return g


def dynamic_tensors(graph: Graph) -> list[str]:
    """Node outputs (used downstream) and graph outputs whose shape is not static."""
    out = []
    for n in graph.nodes:
        for o in n.outputs:
            if not o or not (graph.consumers(o) or o in graph.outputs):
                continue
            t = graph.type_of(o)
            if t is None or not t.is_static:
                out.append(o)
    return out


def why_dynamic(graph: Graph, name: str) -> str:
    """'tensor X has no static shape: <where it comes from>' for a message."""
    seen: set[str] = set()
    cur = name
    while cur not in seen:
        seen.add(cur)
        node = graph.producer(cur)
        if node is None:
            return f"tensor '{name}' has no static shape (input '{cur}': give --input-shape)"
        dyn = [i for i in node.inputs if i and not _is_static(graph, i)]
        if not dyn:
            cond = runtime_if_of(graph, node)
            hint = f"; {fix_input_hint(graph, cond)}" if cond is not None else ""
            return (
                f"tensor '{name}' has no static shape: node '{node.name}' (op {node.op_type}) "
                f"makes '{cur}' {_reason(graph, node)}{hint}"
            )
        cur = dyn[0]
    return f"tensor '{name}' has no static shape"


def dynamic_fix(graph: Graph, name: str) -> str | None:
    """The command that gives tensor `name` a static shape, for `Refusal.fix` (None when only
    the run-time data decides it, e.g. NonZero's output, or no input decides it).

    Follows the same chain as `why_dynamic`: a graph input without a static shape takes
    `set-shape`; a shape computed from the values of graph inputs takes `constant`, which
    binds those inputs to values and folds what follows (what `--fix-input` does at
    conversion)."""
    seen: set[str] = set()
    cur = name
    while cur not in seen:
        seen.add(cur)
        node = graph.producer(cur)
        if node is None:
            if cur not in graph.inputs:
                return None
            return f"onnx2edge set-shape MODEL -o OUT.onnx --input-shape {cur}=DIMS"
        dyn = [i for i in node.inputs if i and not _is_static(graph, i)]
        if dyn:
            cur = dyn[0]
            continue
        if node.op_type in _VALUE_SHAPED:
            return None
        runtime = [
            node.inputs[i]
            for i in _SHAPE_INPUTS.get(node.op_type, ())
            if i < len(node.inputs) and node.inputs[i] and not graph.is_const(node.inputs[i])
        ]
        names = [n for r in runtime for n in deciding_inputs(graph, r)]
        if not names:
            return None
        values = " ".join(f"--value {n}=VALUE" for n in dict.fromkeys(names))
        return f"onnx2edge constant MODEL -o OUT.onnx {values}"
    return None


def bind_fix(graph: Graph, name: str) -> str | None:
    """For graph input `name` that only decides shapes (a Reshape target, Pad amounts...):
    the command that binds it to a value, for `Refusal.fix` (None when data flows from it)."""
    uses = [
        i
        for n in graph.nodes
        for i, x in enumerate(n.inputs)
        if x == name and i not in _SHAPE_INPUTS.get(n.op_type, ())
    ]
    if name not in graph.inputs or uses or not graph.consumers(name):
        return None
    return f"onnx2edge constant MODEL -o OUT.onnx --value {name}=VALUE"


def _is_static(graph: Graph, name: str) -> bool:
    t = graph.type_of(name)
    return t is not None and t.is_static


def _reason(graph: Graph, node: Node) -> str:
    if node.op_type in _VALUE_SHAPED:
        return "data-dependent (its output size depends on tensor values)"
    runtime = [
        node.inputs[i]
        for i in _SHAPE_INPUTS.get(node.op_type, ())
        if i < len(node.inputs) and node.inputs[i] and not graph.is_const(node.inputs[i])
    ]
    if runtime:
        return (
            f"from the run-time values of '{runtime[0]}' (fix the inputs it is computed from "
            "with --fix-input NAME=VALUE)"
        )
    return "without a shape onnx's inference or onnxruntime could determine"


def _adoptable(graph: Graph, node: Node) -> bool:
    """Is the node's output shape a function of its input shapes and constants only?"""
    if is_select_of_if(node):
        return False  # a run-time If's branches must agree by themselves (check_if_selects)
    if node.op_type in _VALUE_SHAPED or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for a in node.attrs.values()
    ):
        return False
    if any(i and not _is_static(graph, i) for i in node.inputs):
        return False
    return all(
        not node.inputs[i] or graph.is_const(node.inputs[i])
        for i in _SHAPE_INPUTS.get(node.op_type, ())
        if i < len(node.inputs)
    )


Observer = Callable[[list[str]], Mapping[str, np.ndarray] | None]


def observe_shapes(graph: Graph, observe: Observer, *, quiet: bool = False) -> Graph:
    """Check the static shapes against onnxruntime's and adopt the ones only it knows.

    `observe(names)` runs the original model on a sample input and returns those tensors (or
    None when onnxruntime cannot run it, e.g. an input of a dtype it cannot sample).
    """
    names = [o for n in graph.nodes for o in n.outputs if o]
    seen = observe(names)
    if seen is None:
        return graph
    values: dict[str, Value] = dict(graph.values)
    adopted = 0
    for node in graph.nodes:
        for o in node.outputs:
            if not o or o not in seen:
                continue
            arr = np.asarray(seen[o])
            t = graph.type_of(o)
            if t is not None and t.is_static:
                # a shape that depends on values (a Resize fed scales at run time, given its
                # declared output shape) cannot be checked on a random sample
                if not _adoptable(graph, node):
                    continue
                if t.static_shape != tuple(arr.shape) and o not in graph.initializers:
                    raise Onnx2EdgeError(
                        f"shape check: tensor '{o}' (node '{node.name}', op {node.op_type}) was "
                        f"specialised to {_fmt(t.static_shape)} but onnxruntime produces "
                        f"{_fmt(arr.shape)} on a sample input; please report this model"
                    )
                continue
            if _adoptable(graph, node):
                elem = t.elem_type if t is not None and t.elem_type else _elem(arr)
                values[o] = Value(o, TensorType(elem, tuple(int(d) for d in arr.shape)))
                adopted += 1
    if not adopted:
        return graph
    if not quiet:
        print(
            f"onnx2edge: note: {adopted} tensor shape{'s' if adopted > 1 else ''} taken from "
            "onnxruntime (onnx's shape inference does not know them)",
            file=sys.stderr,
        )
    return specialise(graph.replace(values=values))


def _elem(arr: np.ndarray) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"
