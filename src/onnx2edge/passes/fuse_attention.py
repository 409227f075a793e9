"""Fuse scaled-dot-product attention into one op.

before:  q, kT -> MatMul -> s -> [Mul(s, c) | Div(s, c)] -> [Add(., mask)] -> Softmax(axis=-1)
              -> p -> MatMul(p, v) -> y [-> Transpose(0, 2, 1, 3) -> y']
after:   q, k, v[, mask] -> o2e.FusedAttention[scale, layout, k_transposed, out_layout] -> y (or y')

Why: the score tensor (Whisper-tiny: 6 heads x 1500 x 1500 floats per block, 54 MB) was
written by the first MatMul, read and written by the scale and the Softmax, and read by the
second MatMul; the fused kernel (C backend: runtime/o2e_attention.h) keeps a block of score
rows in cache and never writes the whole tensor.

Operands are read in the exporter's layout instead of through its copies:
- K: when kT is Transpose(k) swapping the last two axes, the op reads k (`k_transposed` 0);
  otherwise kT itself (`k_transposed` 1);
- timm / Whisper / MiniLM / MobileViT's packed projection: q, k, v = Squeeze(Split(Transpose(
  X, perm=(2, 0, 3, 1, 4)), axis 0)) of one qkv tensor X [B, T, 3, H, D]: the op reads X three
  times (`qkv_layout` "packed") and the Transpose / Split / Squeeze die;
- a head merge Transpose(0, 2, 1, 3) that alone reads the output goes into the op
  (`out_layout` "bshd": it writes [B, M, H, E]).
Only float32 with static shapes, Q / K / V of one rank (3 or 4) and the same batch dims (no
broadcast), a scalar float32 constant scale, a mask broadcast to the scores (not widening
them), and intermediate tensors read only by the next op of the chain (none a graph output).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from ..ir import Attr, Graph, Node
from ..semantics.attrs import attr
from ..semantics.fused import DOMAIN, with_domain
from .registry import register_pass


def _std(node: Node | None, *ops: str) -> bool:
    return node is not None and node.op_type in ops and node.domain in ("", "ai.onnx")


def _shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    if t is None or t.shape is None or t.dtype != np.float32:
        return None
    if not all(isinstance(d, int) and d > 0 for d in t.shape):
        return None
    return tuple(int(d) for d in t.shape)


def _only_reader(graph: Graph, tensor: str, node: Node) -> bool:
    return tensor not in graph.outputs and [n.name for n in graph.consumers(tensor)] == [node.name]


def _scalar(graph: Graph, node: Node) -> tuple[str, float] | None:
    """(the tensor, the factor) of Mul(t, c) / Div(t, c) with c a float32 scalar constant."""
    if len(node.inputs) != 2:
        return None
    pairs = [node.inputs] if node.op_type == "Div" else [node.inputs, node.inputs[::-1]]
    for x, c in pairs:
        v = graph.const(c)
        if v is not None and v.size == 1 and v.dtype == np.float32 and graph.const(x) is None:
            f = float(v.reshape(-1)[0])
            if node.op_type == "Div":
                if f == 0.0:
                    return None
                f = float(np.float32(1.0) / np.float32(f))
            return x, f
    return None


def _perm(graph: Graph, node: Node) -> tuple[int, ...]:
    return tuple(int(p) for p in attr(node, "perm", graph.opset) or ())


def _swaps_last_two(graph: Graph, node: Node | None, rank: int) -> bool:
    if not _std(node, "Transpose"):
        return False
    assert node is not None
    return _perm(graph, node) == (*range(rank - 2), rank - 1, rank - 2)


def _packed_source(graph: Graph, name: str) -> tuple[str, int] | None:
    """(X, index) when `name` = Squeeze(Split(Transpose(X, (2, 0, 3, 1, 4)), axis 0)[index],
    axes 0) and X is a [B, T, 3, H, D] float32 tensor."""
    sq = graph.producer(name)
    if not _std(sq, "Squeeze"):
        return None
    assert sq is not None
    axes = graph.const(sq.inputs[1]) if len(sq.inputs) > 1 else sq.attr("axes")
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] != [0]:
        return None
    sp = graph.producer(sq.inputs[0])
    if not _std(sp, "Split") or len(sp.outputs) != 3:  # type: ignore[union-attr]
        return None
    assert sp is not None
    if int(sp.attr("axis", 0)) != 0:
        return None
    if len(sp.inputs) > 1 and sp.inputs[1]:
        parts = graph.const(sp.inputs[1])
        if parts is None or [int(p) for p in parts.reshape(-1)] != [1, 1, 1]:
            return None
    tr = graph.producer(sp.inputs[0])
    if not _std(tr, "Transpose") or _perm(graph, tr) != (2, 0, 3, 1, 4):  # type: ignore[arg-type]
        return None
    assert tr is not None
    x = tr.inputs[0]
    shp = _shape(graph, x)
    if shp is None or len(shp) != 5 or shp[2] != 3:
        return None
    return x, sp.outputs.index(sq.inputs[0])


def _match(graph: Graph, mm2: Node) -> tuple[Node, set[str], Node | None] | None:
    """The fused node replacing the chain ending in MatMul `mm2`, the names of the nodes it
    replaces, and the head-merge Transpose it absorbs (or None)."""
    if not _std(mm2, "MatMul") or len(mm2.inputs) != 2:
        return None
    p, v = mm2.inputs
    sm = graph.producer(p)
    if not _std(sm, "Softmax") or not _only_reader(graph, p, mm2):
        return None
    assert sm is not None
    sshape = _shape(graph, sm.inputs[0])
    if sshape is None or len(sshape) not in (3, 4):
        return None
    rank = len(sshape)
    if int(attr(sm, "axis", graph.opset)) % rank != rank - 1:
        return None
    chain: list[Node] = [mm2, sm]
    t, mask, scale = sm.inputs[0], "", 1.0
    node = graph.producer(t)
    if _std(node, "Add") and _only_reader(graph, t, sm):
        assert node is not None
        a, b = node.inputs
        for s_in, m_in in ((a, b), (b, a)):
            pn = graph.producer(s_in)
            if _std(pn, "Mul", "Div", "MatMul") and _shape(graph, s_in) == sshape:
                mshape = _shape(graph, m_in)
                if mshape is None or len(mshape) > rank:
                    continue
                full = (1,) * (rank - len(mshape)) + mshape
                if all(m in (1, s) for m, s in zip(full, sshape, strict=True)):
                    chain.append(node)
                    t, mask = s_in, m_in
                    break
        node = graph.producer(t)
        if not mask:
            return None
    if _std(node, "Mul", "Div") and _only_reader(graph, t, chain[-1]):
        assert node is not None
        sc = _scalar(graph, node)
        if sc is None:
            return None
        chain.append(node)
        t, scale = sc
        node = graph.producer(t)
    mm1 = node
    if not _std(mm1, "MatMul") or not _only_reader(graph, t, chain[-1]):
        return None
    assert mm1 is not None
    chain.append(mm1)
    q, kt = mm1.inputs
    qs, kts, vs = _shape(graph, q), _shape(graph, kt), _shape(graph, v)
    if qs is None or kts is None or vs is None or not (len(qs) == len(kts) == len(vs) == rank):
        return None
    if not (qs[:-2] == kts[:-2] == vs[:-2] == sshape[:-2]):
        return None
    if qs[-1] != kts[-2] or kts[-1] != vs[-2] or sshape[-2:] != (qs[-2], kts[-1]):
        return None
    k, k_transposed = kt, 1
    tr = graph.producer(kt)
    if _swaps_last_two(graph, tr, rank):
        assert tr is not None
        k, k_transposed = tr.inputs[0], 0
    layout, inputs = "bhsd", [q, k, v]
    if rank == 4 and k_transposed == 0:
        srcs = [_packed_source(graph, n) for n in (q, k, v)]
        if all(srcs) and len({s[0] for s in srcs}) == 1 and [s[1] for s in srcs] == [0, 1, 2]:  # type: ignore[index]
            layout, inputs = "packed", [srcs[0][0]] * 3  # type: ignore[index]
    out, merge = mm2.outputs[0], None
    if rank == 4 and out not in graph.outputs:
        readers = graph.consumers(out)
        if len(readers) == 1 and _std(readers[0], "Transpose"):
            if _perm(graph, readers[0]) == (0, 2, 1, 3):
                merge = readers[0]
                out = merge.outputs[0]
    attrs = {
        "scale": Attr(AttributeProto.FLOAT, scale),
        "qkv_layout": Attr(AttributeProto.STRING, layout),
        "k_transposed": Attr(AttributeProto.INT, k_transposed),
        "out_layout": Attr(AttributeProto.STRING, "bshd" if merge else "bhsd"),
    }
    fused = Node(
        # named after the chain's first node: bench --profile gives a node onnxruntime kept
        # (Softmax, the second MatMul) to the nearest of ours at or before it
        name=mm1.name,
        op_type="FusedAttention",
        inputs=(*inputs, *((mask,) if mask else ())),
        outputs=(out,),
        attrs=attrs,
        domain=DOMAIN,
    )
    return fused, {n.name for n in chain}, merge


@register_pass("fuse_attention", after=("fold_constants", "widen_small_floats"))
def fuse_attention(graph: Graph) -> Graph:
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        if node.name in dropped or not _std(node, "MatMul"):
            continue
        m = _match(graph, node)
        if m is None:
            continue
        fused, chain, merge = m
        if chain & dropped:
            continue
        dropped |= chain
        if merge is not None:
            dropped.add(merge.name)
            replaced[merge.name] = fused  # at the Transpose's place: after every input
        else:
            replaced[node.name] = fused
    if not replaced:
        return graph
    nodes = [
        replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped or n.name in replaced
    ]
    return with_domain(graph).with_nodes(_without_dead_feeders(graph, nodes, dropped))


def _without_dead_feeders(graph: Graph, nodes: list[Node], dropped: set[str]) -> list[Node]:
    """`nodes` less the copies only the fused chains read (the K^T Transpose, the packed
    layout's Transpose / Split / Squeeze): the backend's dead-node pass has run before this
    one, and they would still be computed."""
    gone = {n.name for n in graph.nodes if n.name in dropped}
    while True:
        read = {i for n in nodes for i in n.inputs if i} | set(graph.outputs)
        fed = {i for n in graph.nodes if n.name in gone for i in n.inputs}
        dead = {
            n.name
            for n in nodes
            if all(o in fed and o not in read for o in n.outputs if o) and any(n.outputs)
        }
        if not dead:
            return nodes
        gone |= dead
        nodes = [n for n in nodes if n.name not in dead]
