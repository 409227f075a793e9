"""Sink the channels-last Transposes of a ConvNeXt block: LayerNorm over channels and the
pointwise MLP run on the NCHW tensor (issue 34, ConvNeXt-atto).

timm / torchvision export a ConvNeXt block, and the stem / downsample norms, as

    x -> Transpose(0,2,3,1) -> LayerNormalization(axis -1) -> MatMul(W1) -> Add(b1) -> GELU
      -> MatMul(W2) -> Add(b2) -> Mul(gamma) -> Transpose(0,3,1,2) -> y

(torch's permute / nn.Linear over the last axis), which cost two copies of the map, a
LayerNorm over rows of C values, GEMMs over [H*W, C] and a Mul pass. Every op between the two
Transposes works per pixel along the channel axis, so the same computation on the NCHW tensor
needs no Transpose:

    x -> o2e.ChannelLayerNorm(scale, B) -> Conv1x1(W1ᵀ, b1) -> GELU
      -> Conv1x1(W2ᵀ·gamma, b2·gamma) -> y

after which fuse_activation moves the GELU into the first convolution's epilogue and
fuse_residual the block's residual Add into the second's, so the backend's pointwise conv paths
run the MLP. A region (the tensors reachable from one Transpose(0,2,3,1) through such ops) is
rewritten only as a whole: every consumer of a channels-last tensor in it must be an op listed
below or a Transpose(0,3,1,2), and none of its tensors a graph output; otherwise the graph is
left as it was. Ops of a region:

- LayerNormalization over the last axis alone, scale / B constant [C] (only output Y read)
- MatMul by a constant [C, K] (a 1x1 Conv, weights [K, C, 1, 1])
- Add / Sub / Mul / Div of two region tensors, or of one and a constant broadcast along the
  last axis only (scalar or [..., K] with leading 1s: reshaped to [K, 1, 1])
- element-wise unary ops (Erf, Relu, Sigmoid, Tanh, Gelu, ...)

Float32, rank 4, static shapes. Then, on the convolutions it made: a following Add / Mul by a
finite per-channel constant, when the convolution's output feeds it alone, is folded into the
convolution's bias / weights (layer scale gamma; rounding as fold_batchnorm's).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto

from ..ir import Attr, Graph, Node, name_factory
from ..ir.graph import TensorType, Value
from ..semantics.fused import DOMAIN, with_domain
from .registry import register_pass

__all__ = ["channel_norm"]

TO_LAST = (0, 2, 3, 1)
TO_FIRST = (0, 3, 1, 2)
BINARY = ("Add", "Sub", "Mul", "Div")
UNARY = (
    "Erf", "Relu", "Sigmoid", "Tanh", "Gelu", "Identity", "Abs", "Neg", "Exp", "Softplus",
    "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Mish", "Sqrt", "Reciprocal",
)  # fmt: skip


def _std(node: Node, op: str) -> bool:
    return node.op_type == op and node.domain in ("", "ai.onnx")


def _perm(node: Node) -> tuple[int, ...] | None:
    p = node.attr("perm")
    return tuple(int(v) for v in p) if p is not None else None


def _f32_static(graph: Graph, name: str, rank: int | None = None) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    if t is None or t.elem_type != TensorProto.FLOAT or not t.is_static:
        return None
    s = t.static_shape
    return s if rank is None or len(s) == rank else None


def _row_const(graph: Graph, name: str, k: int) -> np.ndarray | None:
    """A float32 constant broadcast along the last axis only: its k (or 1) values, else None."""
    c = graph.const(name)
    if c is None or c.dtype != np.float32 or c.ndim > 4:
        return None
    if c.size == 1:
        return c.reshape(1)
    if c.shape[-1] != k or any(d != 1 for d in c.shape[:-1]):
        return None
    return c.reshape(k)


def _region(graph: Graph, t1: Node, order: dict[str, int]) -> list[Node] | None:
    """The nodes reading the channels-last tensors reachable from `t1` (in graph order), if all
    of them can run on the NCHW tensor; else None."""
    last = {t1.outputs[0]}
    members: list[Node] = []
    for node in graph.nodes[order[t1.name] + 1 :]:
        ins = [i for i in node.inputs if i in last]
        if not ins:
            continue
        if _std(node, "Transpose") and _perm(node) == TO_FIRST:
            members.append(node)
            continue
        if not _convertible(graph, node, last):
            return None
        members.append(node)
        last.add(node.outputs[0])
    if any(v in graph.outputs for v in last):
        return None
    if not any(_std(n, "Transpose") for n in members):
        return None
    return members


def _convertible(graph: Graph, node: Node, last: set[str]) -> bool:
    out = node.outputs[0] if node.outputs else ""
    shape = _f32_static(graph, out, 4)
    if shape is None:
        return False
    k = shape[-1]
    if _std(node, "LayerNormalization"):
        axis = int(node.attr("axis", -1))
        extra = [o for o in node.outputs[1:] if o and (graph.consumers(o) or o in graph.outputs)]
        ins = node.inputs
        return (
            axis in (-1, 3)
            and not extra
            and node.inputs[0] in last
            and _row_const(graph, ins[1], k) is not None
            and graph.const(ins[1]).size == k  # type: ignore[union-attr]
            and (
                len(ins) < 3
                or not ins[2]
                or (_row_const(graph, ins[2], k) is not None and graph.const(ins[2]).size == k)  # type: ignore[union-attr]
            )
        )
    if _std(node, "MatMul"):
        w = graph.const(node.inputs[1])
        return (
            node.inputs[0] in last
            and node.inputs[1] not in last
            and w is not None
            and w.dtype == np.float32
            and w.ndim == 2
            and w.shape[1] == k
        )
    if node.domain in ("", "ai.onnx") and node.op_type in BINARY and len(node.inputs) == 2:
        a, b = node.inputs
        if a in last and b in last:
            return _f32_static(graph, a) == shape and _f32_static(graph, b) == shape
        other, mine = (b, a) if a in last else (a, b)
        return _f32_static(graph, mine) == shape and _row_const(graph, other, k) is not None
    if node.domain in ("", "ai.onnx") and node.op_type in UNARY and len(node.outputs) == 1:
        return len(node.inputs) == 1
    return False


def _rewrite(
    graph: Graph,
    t1: Node,
    members: list[Node],
    inits: dict[str, np.ndarray],
    values: dict[str, Value],
    taken: set[str],
) -> tuple[dict[str, list[Node]], dict[str, str], list[str]]:
    """New NCHW nodes (by the name of the member node they replace), renames of the
    Transpose-back outputs to their NCHW tensors, and the names of the convolutions made."""

    fresh = name_factory(taken)

    nchw = {t1.outputs[0]: t1.inputs[0]}  # channels-last tensor -> its NCHW twin
    at: dict[str, list[Node]] = {}
    renames: dict[str, str] = {}
    convs: list[str] = []
    for node in members:
        if _std(node, "Transpose"):
            renames[node.outputs[0]] = nchw[node.inputs[0]]
            continue
        out = node.outputs[0]
        n, h, w, k = graph.shape_of(out)
        y = fresh(f"{out}_nchw")
        values[y] = Value(y, TensorType(TensorProto.FLOAT, (n, k, h, w)))
        nchw[out] = y
        if _std(node, "LayerNormalization"):
            ins = [nchw[node.inputs[0]], node.inputs[1]]
            if len(node.inputs) > 2 and node.inputs[2]:
                ins.append(node.inputs[2])
            attrs = {"epsilon": Attr(AttributeProto.FLOAT, float(node.attr("epsilon", 1e-5)))}
            new = Node(node.name, "ChannelLayerNorm", tuple(ins), (y,), attrs, DOMAIN)
        elif _std(node, "MatMul"):
            wt = graph.const(node.inputs[1])
            assert wt is not None
            wn = fresh(f"{node.inputs[1]}_1x1")
            inits[wn] = np.ascontiguousarray(wt.T).reshape(k, wt.shape[0], 1, 1)
            new = Node(node.name, "Conv", (nchw[node.inputs[0]], wn), (y,))
            convs.append(node.name)
        elif node.op_type in BINARY:
            ins = []
            for i in node.inputs:
                if i in nchw:
                    ins.append(nchw[i])
                    continue
                c = _row_const(graph, i, k)
                assert c is not None
                cn = fresh(f"{i}_nchw")
                inits[cn] = c.reshape(-1, 1, 1) if c.size > 1 else c.reshape(())
                ins.append(cn)
            new = node.replace(inputs=tuple(ins), outputs=(y,))
        else:
            new = node.replace(inputs=(nchw[node.inputs[0]],), outputs=(y,))
        at[node.name] = [new]
    return at, renames, convs


def _fold_affine(graph: Graph, convs: set[str]) -> Graph:
    """Conv -> Add(c) / Mul(c), c a finite per-output-channel (or scalar) float32 constant the
    Conv's output alone feeds: c folded into the Conv's bias / weights."""
    changed = True
    while changed:
        changed = False
        for conv in graph.nodes:
            if conv.name not in convs or not _std(conv, "Conv"):
                continue
            users = graph.consumers(conv.outputs[0])
            if len(users) != 1 or conv.outputs[0] in graph.outputs:
                continue
            op = users[0]
            if not (_std(op, "Add") or _std(op, "Mul")) or len(op.inputs) != 2:
                continue
            other = op.inputs[1] if op.inputs[0] == conv.outputs[0] else op.inputs[0]
            if other == conv.outputs[0]:
                continue
            w = graph.const(conv.inputs[1])
            c = graph.const(other)
            assert w is not None
            k = w.shape[0]
            if c is None or c.dtype != np.float32 or c.size not in (1, k):
                continue
            if c.size == k and c.shape != (k, 1, 1):
                continue
            if not np.isfinite(c).all():
                continue
            cv = np.broadcast_to(c.reshape(-1).astype(np.float64), (k,))
            b = graph.const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
            b64 = np.zeros(k) if b is None else b.astype(np.float64)
            inits = dict(graph.initializers)
            bn = graph.unique_name(f"{conv.name}_bias")
            if op.op_type == "Add":
                inits[bn] = (b64 + cv).astype(np.float32)
                wn = conv.inputs[1]
            else:
                inits[bn] = (b64 * cv).astype(np.float32)
                wn = graph.unique_name(f"{conv.inputs[1]}_scaled")
                inits[wn] = (w.astype(np.float64) * cv.reshape(k, 1, 1, 1)).astype(np.float32)
            new = conv.replace(inputs=(conv.inputs[0], wn, bn), outputs=op.outputs)
            nodes = [new if n.name == conv.name else n for n in graph.nodes if n.name != op.name]
            graph = graph.with_nodes(nodes, initializers=inits)
            changed = True
            break
    return graph


@register_pass("channel_norm", after=("fold_constants",))
def channel_norm(graph: Graph) -> Graph:
    """The channels-last regions above rewritten on the NCHW tensors (the module docstring)."""
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    inits = dict(graph.initializers)
    values = dict(graph.values)
    taken = set(values) | set(inits) | set(order) | {o for n in graph.nodes for o in n.outputs}
    at: dict[str, list[Node]] = {}
    renames: dict[str, str] = {}
    drop: set[str] = set()
    convs: set[str] = set()
    claimed: set[str] = set()
    for t1 in graph.nodes:
        if not _std(t1, "Transpose") or _perm(t1) != TO_LAST or t1.name in claimed:
            continue
        if _f32_static(graph, t1.inputs[0], 4) is None:
            continue
        members = _region(graph, t1, order)
        if members is None or any(m.name in claimed for m in members):
            continue
        a, r, c = _rewrite(graph, t1, members, inits, values, taken)
        at.update(a)
        renames.update(r)
        convs.update(c)
        claimed |= {m.name for m in members} | {t1.name}
        drop |= {m.name for m in members if _std(m, "Transpose")}
    if not claimed:
        return graph
    out_names = set(graph.outputs)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.name in drop:
            continue
        for new in at.get(node.name, [node] if node.name not in claimed else []):
            nodes.append(new.replace(inputs=tuple(_follow(renames, i) for i in new.inputs)))
    # a Transpose-back writing a graph output: an Identity keeps the output's name
    for old in renames:
        if old in out_names:
            name = graph.unique_name(f"{old}_identity")
            nodes.append(Node(name, "Identity", (_follow(renames, old),), (old,)))
    g = graph.with_nodes(nodes, initializers=inits, values=values)
    return _fold_affine(with_domain(g), convs)


def _follow(renames: dict[str, str], name: str) -> str:
    while name in renames:
        name = renames[name]
    return name
