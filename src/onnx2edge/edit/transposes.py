"""The Transpose optimiser (issue 16): pushes Transposes through layout-agnostic ops and
cancels pairs; `nhwc` (the command) runs it after wrapping the image inputs / outputs, the
frontend's importers after translating a TFLite / OpenVINO model, and the rewrite rule
`transpose_cancel` on its own.

Only graph in, graph out: it sits low (the frontend uses it), below the commands that load,
verify and save models (edit.nhwc, edit.rewrite).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Graph, Node, TensorType, Value
from ..semantics.records import reduce_attrs, resize_attrs, softmax_attrs
from ..semantics.shape_ops import axis_attr, transpose_perm
from .rules import Builder, make_attr, register_rule

TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)

# Ops that commute with any permutation of their (single) input: y = f(x) element-wise.
_UNARY = {
    "Relu",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Erf",
    "Identity",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    "Gelu",
    "Mish",
    "Swish",
    "Not",
    "IsNaN",
    "Celu",
    "ThresholdedRelu",
    "Cast",
    "Dropout",
}
_BINARY = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "And",
    "Or",
    "Where",
    "PRelu",
}
_AXIS_OPS = {"Softmax", "LogSoftmax", "Hardmax", "Concat"}
_REDUCE = {
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ReduceLogSum",
}


def _perm(graph: Graph, n: Node) -> tuple[int, ...] | None:
    """A Transpose's permutation (semantics: an absent perm reverses the axes); None for
    another op, or when the rank it needs is unknown."""
    if n.op_type != "Transpose" or n.domain not in ("", "ai.onnx"):
        return None
    rank = _rank(graph, n.inputs[0])
    if rank is None and "perm" in n.attrs:
        rank = len(n.attrs["perm"].value)
    return None if rank is None else transpose_perm(n, rank, graph.opset)


def _compose(p1: Sequence[int], p2: Sequence[int]) -> tuple[int, ...]:
    """transpose(transpose(x, p1), p2) == transpose(x, result)."""
    return tuple(p1[i] for i in p2)


def _inverse(p: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return tuple(inv)


def _rank(graph: Graph, name: str) -> int | None:
    t = graph.type_of(name)
    return len(t.shape) if t is not None and t.shape is not None else None


def _fold_pairs(graph: Graph) -> Graph:
    """Transpose -> Transpose: composed into one; an identity composition disappears."""
    rename: dict[str, str] = {}
    nodes: list[Node] = []
    changed = False
    for n in graph.nodes:
        n = n.replace(inputs=tuple(rename.get(i, i) for i in n.inputs))
        p2 = _perm(graph, n)
        prod = next((m for m in reversed(nodes) if n.inputs and n.inputs[0] in m.outputs), None)
        p1 = _perm(graph, prod) if prod is not None else None
        if p2 is None or p1 is None or len(p1) != len(p2):
            nodes.append(n)
            continue
        perm = _compose(p1, p2)
        changed = True
        if perm == tuple(range(len(perm))):
            if n.outputs[0] not in graph.outputs:
                rename[n.outputs[0]] = prod.inputs[0]  # type: ignore[union-attr]
            else:  # a graph output keeps its name; _absorb_identities renames its producer
                src = prod.inputs[0]  # type: ignore[union-attr]
                nodes.append(Node(n.name, "Identity", (src,), n.outputs))
            continue
        src = prod.inputs[0]  # type: ignore[union-attr]
        nodes.append(n.replace(inputs=(src,), attrs={"perm": make_attr(list(perm))}))
    if not changed:
        return graph
    g = graph.with_nodes(nodes)
    from ..passes import eliminate_dead_nodes

    return _absorb_identities(eliminate_dead_nodes(g))


def _absorb_identities(graph: Graph) -> Graph:
    """Identity -> graph output: the producer writes the output name itself, when nothing
    else reads the intermediate tensor."""
    for n in graph.nodes:
        if n.op_type != "Identity" or n.outputs[0] not in graph.outputs:
            continue
        src = n.inputs[0]
        p = graph.producer(src)
        if p is None or src in graph.outputs or len(graph.consumers(src)) != 1:
            continue
        out = n.outputs[0]
        nodes = [
            m.replace(outputs=tuple(out if o == src else o for o in m.outputs)) if m is p else m
            for m in graph.nodes
            if m is not n
        ]
        return _absorb_identities(graph.with_nodes(nodes))
    return graph


def _push_down_once(graph: Graph) -> Graph | None:
    """Move one Transpose below the op that reads it (the op then runs on the untransposed
    layout with remapped constants / axes). Returns None when nothing moved."""
    for t in graph.nodes:
        p = _perm(graph, t)
        if p is None:
            continue
        cons = graph.consumers(t.outputs[0])
        if len(cons) != 1 or t.outputs[0] in graph.outputs:
            continue
        n = cons[0]
        moved = _move_below(graph, t, p, n)
        if moved is not None:
            return moved
    return None


def _move_below(graph: Graph, t: Node, p: tuple[int, ...], n: Node) -> Graph | None:
    if n.domain not in ("", "ai.onnx") or len(n.outputs) != 1 and n.op_type != "Dropout":
        return None
    if n.op_type == "Dropout" and any(o and graph.consumers(o) for o in n.outputs[1:]):
        return None
    x, y = t.outputs[0], n.outputs[0]
    r = len(p)
    b = Builder(graph)
    inv = _inverse(p)
    new_inputs = list(n.inputs)
    attrs = dict(n.attrs)
    if n.op_type in _UNARY or (
        n.op_type == "Clip" and all(not i or graph.is_const(i) for i in n.inputs[1:])
    ):
        new_inputs[0] = t.inputs[0]
    elif n.op_type in _BINARY:
        for k, i in enumerate(n.inputs):
            if i == x:
                new_inputs[k] = t.inputs[0]
                continue
            cv = graph.const(i)
            q = graph.producer(i)
            if cv is not None:
                if cv.ndim > r:
                    return None
                full = cv.reshape((1,) * (r - cv.ndim) + cv.shape)
                new_inputs[k] = b.const(n, f"nhwc{k}", np.ascontiguousarray(full.transpose(inv)))
            elif q is not None and _perm(graph, q) == p and len(graph.consumers(i)) == 1:
                new_inputs[k] = q.inputs[0]
            else:
                return None
    elif n.op_type in ("Softmax", "LogSoftmax", "Hardmax") and graph.opset >= 13:
        a = softmax_attrs(n, graph.opset).axis
        attrs["axis"] = make_attr(p[a % r])
        new_inputs[0] = t.inputs[0]
    elif n.op_type == "Concat":
        for k, i in enumerate(n.inputs):
            q = graph.producer(i)
            if (
                q is None
                or _perm(graph, q) != p
                or len(graph.consumers(i)) != 1
                or i in graph.outputs
            ):
                return None
            new_inputs[k] = q.inputs[0]
        attrs["axis"] = make_attr(p[axis_attr(n, graph.opset, r)])
    elif (
        n.op_type == "Resize"
        and graph.opset >= 13
        and resize_attrs(n, graph.opset).axes is None
        and r == 4
    ):
        # scales / sizes are per axis: permute them with the data (roi only matters for
        # tf_crop_and_resize, which is left alone)
        if resize_attrs(n, graph.opset).coordinate_transformation_mode == "tf_crop_and_resize":
            return None
        new_inputs[0] = t.inputs[0]
        for k in (2, 3):
            if len(n.inputs) > k and n.inputs[k]:
                v = graph.const(n.inputs[k])
                if v is None or v.size != r:
                    return None
                new_inputs[k] = b.const(n, f"nhwc{k}", np.ascontiguousarray(v[list(inv)]))
    elif n.op_type in _REDUCE and reduce_attrs(n, graph.opset).keepdims:
        axes = reduce_attrs(n, graph.opset, r).axes
        if axes is not None:
            attrs["axes"] = make_attr([p[a] for a in axes])
        elif len(n.inputs) > 1 and n.inputs[1]:
            av = graph.const(n.inputs[1])
            if av is None:
                return None
            new_inputs[1] = b.const(
                n, "axes", np.array([p[int(a) % r] for a in av.reshape(-1)], np.int64)
            )
        new_inputs[0] = t.inputs[0]
    else:
        return None
    inner = b.fresh(f"{y}/pre_transpose")
    moved_op = n.replace(inputs=tuple(new_inputs), outputs=(inner, *n.outputs[1:]), attrs=attrs)
    moved_t = Node(
        b.fresh(f"{t.name}/moved"), "Transpose", (inner,), (y,), {"perm": make_attr(list(p))}
    )
    removed = {t.name, n.name} | {
        graph.producer(i).name
        for i in n.inputs  # type: ignore[union-attr]
        if i
        and i != x
        and graph.producer(i) is not None
        and _perm(graph, graph.producer(i)) == p  # type: ignore[arg-type]
        and n.op_type in (_BINARY | {"Concat"})
    }
    nodes = []
    for m in graph.nodes:
        if m.name == n.name:
            nodes += [moved_op, moved_t]
        elif m.name not in removed:
            nodes.append(m)
    values = dict(graph.values)
    yt = graph.type_of(y)
    if yt is not None and yt.shape is not None and len(yt.shape) == r:
        values[inner] = Value(inner, TensorType(yt.elem_type, tuple(yt.shape[i] for i in inv)))
    return graph.with_nodes(nodes, initializers=b.inits, values=values)


def _pull_up_once(graph: Graph) -> Graph | None:
    """Move one Transpose above a single-use unary op / binary op with a constant operand
    (the mirror of `_push_down_once`, for the output side)."""
    for t in graph.nodes:
        p = _perm(graph, t)
        if p is None:
            continue
        n = graph.producer(t.inputs[0])
        if n is None or n.domain not in ("", "ai.onnx") or len(n.outputs) != 1:
            continue
        if len(graph.consumers(n.outputs[0])) != 1 or n.outputs[0] in graph.outputs:
            continue
        r = len(p)
        acts = [i for i in n.inputs if i and not graph.is_const(i)]
        if n.op_type in _UNARY and len(acts) == 1 and acts[0] == n.inputs[0]:
            consts_ok = True
        elif n.op_type in _BINARY and len(acts) == 1:
            consts = [graph.const(i) for i in n.inputs if i and graph.is_const(i)]
            consts_ok = all(c is not None and c.ndim <= r for c in consts)
        else:
            continue
        if not consts_ok:
            continue
        b = Builder(graph)
        src = acts[0]
        pre = b.fresh(f"{src}/transposed")
        new_t = Node(
            b.fresh(f"{t.name}/moved"), "Transpose", (src,), (pre,), {"perm": make_attr(list(p))}
        )
        ins = []
        for k, i in enumerate(n.inputs):
            if i == src:
                ins.append(pre)
            elif i and graph.is_const(i):
                cv = graph.const(i)
                full = cv.reshape((1,) * (r - cv.ndim) + cv.shape)  # type: ignore[union-attr]
                ins.append(b.const(n, f"nhwc{k}", np.ascontiguousarray(full.transpose(p))))
            else:
                ins.append(i)
        moved = n.replace(inputs=tuple(ins), outputs=(t.outputs[0],))
        nodes = []
        for m in graph.nodes:
            if m.name == n.name:
                nodes += [new_t, moved]
            elif m.name != t.name:
                nodes.append(m)
        return graph.with_nodes(nodes, initializers=b.inits)
    return None


def _only_cancelling(step: Any, graph: Graph) -> Graph:
    """Apply single moves only while the number of Transposes does not grow; keep the
    result only if it ends with fewer Transposes than it started (moves that cancel nothing
    are undone)."""
    best, g = graph, graph
    for _ in range(4 * len(graph.nodes) + 8):
        nxt = step(g)
        if nxt is None:
            break
        g = _fold_pairs(nxt)
        if count_transposes(g) < count_transposes(best):
            best = g
    return best


def optimize_transposes(graph: Graph) -> Graph:
    """Cancel Transpose pairs, pushing Transposes through layout-agnostic ops to meet."""
    g = _fold_pairs(graph)
    g = _only_cancelling(_push_down_once, g)
    g = _only_cancelling(_pull_up_once, g)
    return g


@register_rule("transpose_cancel", ops=("Transpose",))
def transpose_cancel(graph: Graph) -> Graph:
    """Transpose pairs that compose to the identity are removed, after pushing Transposes
    through layout-agnostic ops to meet (the optimiser `nhwc` uses; exact). Useful alone for
    targets without a Transpose (MPS) on models exported with layout round trips.

    before:  x -> Transpose(0,2,3,1) -> Relu -> Add(c[C]) -> Transpose(0,3,1,2) -> y
    after:   x -> Relu -> Add(c[C,1,1]) -> y
    """
    return optimize_transposes(graph)


def count_transposes(graph: Graph) -> int:
    return sum(n.op_type == "Transpose" for n in graph.nodes)
