"""float16 / bfloat16 through ops that only compute in float: a Cast on each side.

C has no arithmetic for float16 or bfloat16 (they are stored as raw bits, emitter.STORAGE_CTYPES),
and only the ops of emitter.STORAGE_DTYPE_OPS convert them element by element. Any other op
(Attention, Einsum, MatMul, Softmax, ...) with a float16 / bfloat16 tensor computes in float32
between two Casts, rounding its outputs back once per op. That is what onnxruntime's CPU kernels
do for these types (they widen to float and round each op's result) and what the ONNX reference
does (numpy / ml_dtypes compute each op in float and round its result), so results agree to
the half-precision rounding of the output, not to float32.

    before:  x(f16) -> Softmax -> y(f16)
    after:   x(f16) -> Cast(float) -> x_f32 -> Softmax -> y_f32 -> Cast(f16) -> y(f16)

A constant input is converted here instead of at run time. Nodes whose attributes name an
element type (Cast's `to`, EyeLike's `dtype`, ...) are left alone: they say what they produce.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir import Attr, Graph, Node, TensorType, Value, name_factory
from ...passes.bounded import bounded_axes
from ...passes.registry import register_pass

WIDENED = ("float16", "bfloat16")
_TYPED_ATTRS = ("to", "dtype", "output_datatype", "output_dtype")


def _native(op: str) -> bool:
    """Whether the C backend computes `op` itself, storage dtypes included, or not at all."""
    from .emitter import STORAGE_DTYPE_OPS
    from .ops import load_all

    ops = load_all()
    return op not in ops or op in STORAGE_DTYPE_OPS


def _is_small(graph: Graph, name: str) -> bool:
    t = graph.type_of(name) if name else None
    return t is not None and t.dtype.name in WIDENED


@register_pass(
    "widen_small_floats",
    after=(
        "fold_constants",
        "remove_identity",
        "infer_shapes",
        "fold_batchnorm",
        "bound_data_dependent",
    ),
)
def widen_small_floats(graph: Graph) -> Graph:
    """Wrap every float-only op that sees float16 / bfloat16 in Casts to and from float32."""
    if not any(_is_small(graph, n) for node in graph.nodes for n in (*node.inputs, *node.outputs)):
        return graph
    nodes: list[Node] = []
    values = dict(graph.values)
    inits = dict(graph.initializers)
    taken = set(values) | set(inits) | {o for n in graph.nodes for o in n.outputs}

    fresh = name_factory(taken)

    def float_value(name: str, like: str) -> None:
        t = graph.type_of(like)
        assert t is not None
        values[name] = Value(name, TensorType(TensorProto.FLOAT, t.shape))

    for node in graph.nodes:
        small = [n for n in (*node.inputs, *node.outputs) if _is_small(graph, n)]
        if (
            not small
            or node.domain not in ("", "ai.onnx")
            or _native(node.op_type)
            or any(a in node.attrs for a in _TYPED_ATTRS)
            or bounded_axes(graph, node)  # a run-time-sized output must stay the graph output
        ):
            nodes.append(node)
            continue
        ins = list(node.inputs)
        for k, name in enumerate(ins):
            if not _is_small(graph, name):
                continue
            wide = fresh(f"{name}_f32")
            float_value(wide, name)
            if name in graph.initializers:
                inits[wide] = graph.initializers[name].astype(np.float32)
            else:
                cast = Attr(2, int(TensorProto.FLOAT))  # AttributeProto.INT
                nodes.append(
                    Node(fresh(f"{node.name}_widen{k}"), "Cast", (name,), (wide,), {"to": cast})
                )
            ins[k] = wide
        outs = list(node.outputs)
        back: list[Node] = []
        for k, name in enumerate(outs):
            if not _is_small(graph, name):
                continue
            wide = fresh(f"{name}_f32")
            float_value(wide, name)
            t = graph.type_of(name)
            assert t is not None
            to = Attr(2, int(t.elem_type))
            back.append(Node(fresh(f"{node.name}_round{k}"), "Cast", (wide,), (name,), {"to": to}))
            outs[k] = wide
        nodes.append(node.replace(inputs=tuple(ins), outputs=tuple(outs)))
        nodes += back
    return graph.with_nodes(nodes, initializers=inits, values=values)
