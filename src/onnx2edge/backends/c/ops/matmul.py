"""Gemm and MatMul on float32 (integer MatMul: quant.integer_matmul): the GEMM engine, packed
GEMV for one row, sparse layouts for pruned weights."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import gemm_attrs
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op, sparse
from .common import act_expr, broadcast_strides, fused_act, strides
from .gemm import (
    _use_engine,
    act_struct,
    gemm_call,
    gemm_packed_call,
    packed_weights,
    post_act,
)


def _gemm_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if node.op_type == "MatMul" and t is not None and t.dtype.kind in "iu":
        return None  # integer MatMul: quant.integer_matmul
    if t is not None and t.dtype not in (np.float32,):
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 only)"
    return None


@register_op("Gemm", check=_gemm_check)
def gemm(ctx: NodeContext) -> str:
    if (sp := sparse.try_gemm(ctx)) is not None:  # pruned weights (issue 14)
        return sp
    ga = gemm_attrs(ctx.node, ctx.graph.opset)
    ta, tb, alpha, beta = int(ga.trans_a), int(ga.trans_b), ga.alpha, ga.beta
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    lines = []
    a_sym, b_sym = a.sym, b.sym
    if ta:
        a_sym = ctx.scratch(M * K * 4)
        lines.append(
            f"for (int i = 0; i < {M}; ++i) for (int k = 0; k < {K}; ++k) {a_sym}[i * {K} + k] = {a.sym}[k * {M} + i];"
        )
    bc = ctx.const(1)
    cc = ctx.const(2)
    simple_bias = not ctx.has_input(2) or beta == 0.0 or (cc is not None and cc.size in (1, N))
    if bc is not None and M == 1 and not ta and bc.dtype == np.float32 and simple_bias:
        return _fc_gemv(ctx, a.sym, bc if tb else bc.T, alpha, beta, y, K, N)
    if bc is not None:
        arr = bc.T if tb else bc
        if alpha != 1.0:
            arr = arr * np.float32(alpha)
        b_sym = ctx.weight("B", np.ascontiguousarray(arr, dtype=np.float32))
        alpha = 1.0
    elif tb:
        b_sym = ctx.scratch(K * N * 4)
        lines.append(
            f"for (int k = 0; k < {K}; ++k) for (int j = 0; j < {N}; ++j) {b_sym}[k * {N} + j] = {b.sym}[j * {K} + k];"
        )
    bias_n = None
    c_full = None
    if ctx.has_input(2) and beta != 0.0:
        c = ctx.x(2)
        cc = ctx.const(2)
        if cc is not None and (cc.size == N and (cc.ndim == 1 or cc.shape[0] == 1)):
            bias_n = ctx.weight("bias", (cc.reshape(N) * np.float32(beta)).astype(np.float32))
        elif cc is not None and cc.size == 1:
            bias_n = ctx.weight("bias", np.full(N, float(cc.reshape(-1)[0]) * beta, np.float32))
        else:
            c_full = c
    act = fused_act(ctx)
    if alpha != 1.0 or c_full is not None:
        lines.append(gemm_call(ctx, M, N, K, a_sym, K, b_sym, N, y.sym, N, b_const=bc is not None))
        cst = broadcast_strides(c_full.shape, (M, N)) if c_full is not None else [0, 0]
        add = (
            f" + {c_literal(beta, np.float32)} * {c_full.sym}[i * {cst[0]} + j * {cst[1]}]"
            if c_full is not None
            else ""
        )
        lines.append(
            f"for (int i = 0; i < {M}; ++i) for (int j = 0; j < {N}; ++j) {{ const float v = {c_literal(alpha, np.float32)} * {y.sym}[i * {N} + j]{add}; {y.sym}[i * {N} + j] = {act_expr(act, 'v')}; }}"
        )
    else:
        lines.append(
            gemm_call(
                ctx,
                M,
                N,
                K,
                a_sym,
                K,
                b_sym,
                N,
                y.sym,
                N,
                bias_n=bias_n,
                act=act,
                b_const=bc is not None,
            )
        )
    return "\n".join(lines)


def _fc_gemv(
    ctx: NodeContext,
    x: str,
    w: np.ndarray,
    alpha: float,
    beta: float,
    y: Tensor,
    K: int,
    N: int,
    with_bias: bool = True,
) -> str:
    """Fully connected layer at batch 1: y[N] = W[N][K]·x[K] + b, with W packed at conversion.

    Written as Yᵀ = W·xᵀ so the constant matrix is the packed A operand and N = 1 takes the
    engine's matrix-vector path."""
    # Views until a copy is needed: a 2 GB layer must not be copied three times on the way.
    wv = np.asarray(w, dtype=np.float32)
    if alpha != 1.0:
        wv = wv * np.float32(alpha)
    bias = None
    if with_bias and ctx.has_input(2) and beta != 0.0:
        cc = ctx.const(2)
        if cc is None or cc.size not in (1, N):
            return "#error unsupported Gemm bias"  # guarded by _gemm_check
        bias = ctx.weight(
            "bias",
            np.broadcast_to(cc.reshape(-1).astype(np.float32) * np.float32(beta), (N,)).copy(),
        )
    blocks = -(-N // FC_NB)
    if blocks * FC_NB <= N * FC_MAX_PAD and _all_finite(wv.reshape(N, K)):
        ctx.kernel("fully connected, zero inputs skipped")
        # block q: its K rows of FC_NB weights, contiguous (o2e_fc_skip_zeros); outputs past N
        # are zero padding
        wt = np.zeros((blocks, K, FC_NB), np.float32)
        for q in range(blocks):
            rows = wv.reshape(N, K)[q * FC_NB : (q + 1) * FC_NB]
            wt[q, :, : rows.shape[0]] = rows.T
        blocked = ctx.weight("wt", wt)
        nz = ctx.scratch(K * 4, "int")
        act = fused_act(ctx)
        st, post = act_struct(act)
        _use_engine(ctx)
        return (
            f"o2e_fc_skip_zeros({N}, {K}, {blocked}, {x}, {bias or 'NULL'}, {y.sym}, {st}, {nz});"
            + post_act(act, post, 1, N, y.sym, N)
        )
    ctx.kernel("fully connected as packed GEMV")
    packed, _ = packed_weights(ctx, "packed", wv.reshape(1, N, K))
    return gemm_packed_call(ctx, packed, N, 1, K, x, 1, y.sym, 1, bias_m=bias, act=fused_act(ctx))


def _all_finite(w: np.ndarray, rows: int = 1024) -> bool:
    """np.isfinite(w).all() without a boolean copy of a large weight."""
    return all(np.isfinite(w[i : i + rows]).all() for i in range(0, w.shape[0], rows))


# Outputs per weight block of o2e_fc_skip_zeros (O2E_FC_NB), and the most zero padding that
# layout may add (as a factor of N): narrower layers keep the packed GEMV.
FC_NB = 256
FC_MAX_PAD = 1.1


@register_op("MatMul", check=_gemm_check)
def matmul(ctx: NodeContext) -> str:
    if ctx.x(0).dtype.kind in "iu":
        from .quant import integer_matmul  # numpy.matmul with wrap-around

        return integer_matmul(ctx)
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    ash, bsh = list(a.shape), list(b.shape)
    if len(ash) == 1:
        ash = [1, ash[0]]
    if len(bsh) == 1:
        bsh = [bsh[0], 1]
    M, K = ash[-2:]
    N = bsh[-1]
    batch = list(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
    nb = int(np.prod(batch)) if batch else 1
    act = fused_act(ctx)
    bc = ctx.const(1)
    if len(bsh) == 2 and nb * M == a.size // K and bc is not None:  # pruned (issue 14)
        sp = sparse.try_fc(ctx, a, bc.reshape(K, N).T, y, nb * M, K, N, with_bias=False)
        if sp is not None:
            return sp
    # B constant and 2-D: fold the batch into M (one big GEMM); one row is a packed GEMV
    if len(bsh) == 2 and nb * M == 1 and bc is not None and bc.dtype == np.float32:
        return _fc_gemv(ctx, a.sym, bc.reshape(K, N).T, 1.0, 0.0, y, K, N, with_bias=False)
    if len(bsh) == 2 and nb * M == a.size // K:
        return gemm_call(
            ctx, nb * M, N, K, a.sym, K, b.sym, N, y.sym, N, act=act, b_const=bc is not None
        )
    a_st = _batch_strides(ash[:-2], batch, M * K)
    b_st = _batch_strides(bsh[:-2], batch, K * N)
    lines = [f"for (int bi = 0; bi < {nb}; ++bi) {{"]
    rem = "bi"
    aoff, boff = [], []
    for d in reversed(range(len(batch))):
        lines.append(f"  const int d{d} = {rem} % {batch[d]};")
        rem = f"({rem} / {batch[d]})"
        if a_st[d]:
            aoff.append(f"(size_t)d{d} * {a_st[d]}")
        if b_st[d]:
            boff.append(f"(size_t)d{d} * {b_st[d]}")
    ao = " + ".join(aoff) or "0"
    bo = " + ".join(boff) or "0"
    lines.append(
        "  "
        + gemm_call(
            ctx,
            M,
            N,
            K,
            f"{a.sym} + {ao}",
            K,
            f"{b.sym} + {bo}",
            N,
            f"{y.sym} + (size_t)bi * {M * N}",
            N,
            act=act,
        )
    )
    lines.append("}")
    return "\n".join(lines)


def _batch_strides(shape: list[int], batch: list[int], mat: int) -> list[int]:
    pad = [1] * (len(batch) - len(shape)) + shape
    st = strides(tuple(pad)) if pad else []
    return [0 if pad[d] == 1 and batch[d] != 1 else st[d] * mat for d in range(len(batch))]
