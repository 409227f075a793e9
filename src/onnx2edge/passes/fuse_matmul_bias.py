"""Move a bias Add into the MatMul that produces its other operand.

before:  a -> MatMul(a, W) -> t -> Add(t, b) -> y          (W a constant [K, N], b N values)
after:   a -> o2e.MatMulAddAct(a, W, b)[activation=""] -> y

Transformers export every linear layer so (nn.Linear on a [batch, tokens, features] input is
MatMul + Add, not Gemm), and the Add was a pass of its own over the layer's output; fused, the
GEMM adds the bias in its epilogue, and fuse_activation (after this pass) then moves the
layer's activation into the same epilogue (ViT / Whisper's GELU: MatMul + bias + GELU in one
kernel). Only float32, a constant 2-D W, a constant bias of N values laid along the last
axis (shape [N], [1, N], ... or one value), and a product the Add alone reads (C backend:
kernels/gemm/matmul_spec.py reads the bias as the MatMul's C).

Then the block's residual: a transformer's attention projection and its MLP's second linear
layer end in `x + MatMul(h, W) + b`, and that Add was one more pass over [tokens, features].

before:  h -> o2e.MatMulAddAct(h, W, b) -> t -> Add(t, x) -> y    (x of t's shape)
after:   h, x -> o2e.MatMulAddAct(h, W, b, x) -> y                (a plain MatMul: (h, W, x))

The GEMM adds x in the epilogue of each tile it stores (and may write y over x when nothing
reads x later: residual_alias.py). The fused node moves to the Add's position, which keeps
the order topological (x exists by then; t was read by the Add alone).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..semantics.fused import DOMAIN, with_domain, with_residual_add
from .registry import register_pass


def _std(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _row_bias(graph: Graph, name: str, n: int) -> bool:
    """A float32 constant of n values (or one) broadcast along the last axis only."""
    b = graph.const(name)
    if b is None or b.dtype != np.float32 or b.size not in (1, n):
        return False
    return b.size == 1 or (b.ndim >= 1 and b.shape[-1] == n)


@register_pass("fuse_matmul_bias", after=("fold_constants",))
def fuse_matmul_bias(graph: Graph) -> Graph:
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for add in graph.nodes:
        if not _std(add, "Add") or len(add.inputs) != 2:
            continue
        for t, b in (add.inputs, add.inputs[::-1]):
            mm = graph.producer(t)
            if not _std(mm, "MatMul") or mm.name in fused or t == b:  # type: ignore[union-attr]
                continue
            assert mm is not None
            w = graph.const(mm.inputs[1])
            tt, ty = graph.type_of(t), graph.type_of(add.outputs[0])
            if (
                w is None
                or w.ndim != 2
                or w.dtype != np.float32
                or tt is None
                or ty is None
                or tt.dtype != np.float32
                or tt.shape is None
                or tt.shape != ty.shape
                or len(tt.shape) < 2
                or not _row_bias(graph, b, w.shape[1])
                or _std(graph.producer(mm.inputs[0]), "DequantizeLinear")  # qdq_to_int8's
                or t in graph.outputs
                or [n.name for n in graph.consumers(t)] != [add.name]
            ):
                continue
            fused[mm.name] = with_residual_add(mm, b, add.outputs)
            dropped.add(add.name)
            break
    if not fused:
        return _fuse_residual(graph)
    graph = with_domain(graph).with_nodes(
        [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    )
    return _fuse_residual(graph)


def _residual_target(graph: Graph, t: str) -> Node | None:
    """The producer of `t` when a residual can join its epilogue: an o2e.MatMulAddAct with
    its bias only and no activation yet, or a plain MatMul of a constant 2-D float32 W."""
    mm = graph.producer(t)
    if mm is None or t in graph.outputs or len(graph.consumers(t)) != 1:
        return None
    if _std(mm, "MatMul"):
        w = graph.const(mm.inputs[1])
        ok = w is not None and w.ndim == 2 and w.dtype == np.float32
        return mm if ok and not _std(graph.producer(mm.inputs[0]), "DequantizeLinear") else None
    fused = (
        mm.domain == DOMAIN
        and mm.op_type == "MatMulAddAct"
        and len(mm.inputs) == 3
        and not mm.attr("activation", "")
    )
    return mm if fused else None


def _fuse_residual(graph: Graph) -> Graph:
    moved: dict[str, Node] = {}  # Add name -> the fused MatMul placed there
    dropped: set[str] = set()
    for add in graph.nodes:
        if not _std(add, "Add") or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            continue
        ty = graph.type_of(add.outputs[0])
        for t, r in (add.inputs, add.inputs[::-1]):
            mm = _residual_target(graph, t)
            if mm is None or mm.name in dropped or r in mm.inputs or graph.const(r) is not None:
                continue
            tt, tr = graph.type_of(t), graph.type_of(r)
            if (
                tt is None
                or tr is None
                or ty is None
                or tt.shape is None
                or len(tt.shape) < 2
                or not (tt.dtype == tr.dtype == ty.dtype == np.float32)
                or not (tt.shape == tr.shape == ty.shape)
            ):
                continue
            moved[add.name] = (
                mm.replace(inputs=(*mm.inputs, r), outputs=add.outputs)
                if mm.domain == DOMAIN
                else with_residual_add(mm, r, add.outputs)
            )
            dropped.add(mm.name)
            break
    if not moved:
        return graph
    return with_domain(graph).with_nodes(
        [moved.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    )
