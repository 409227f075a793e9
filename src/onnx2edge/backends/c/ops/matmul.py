"""Gemm and MatMul on float32 (integer MatMul: quant.integer_matmul), as a list of kernel
strategies (matmul_spec.py: `MatMulSpec`, `MatMulStrategy`; strategy.py: `select`), in the order they are
preferred: sparse layouts for pruned weights, the batch-1 fully connected layer that skips the
rows of zero inputs, the packed GEMV, one GEMM (Gemm; MatMul with the batch folded into M),
a loop of GEMMs. To add one (an ISA variant, a quantised layout), write its refuse / emit pair
and put it in `STRATEGIES` before the strategies it should beat."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from ..gemm_pack import pack_a, pack_b
from ..kernels.gemm import sparse
from ..kernels.gemm.gemm import (
    GemmCall,
    _use_engine,
    act_struct,
    gemm_call,
    gemm_packed_call,
    gemm_workspace,
    packed_weights,
    packs_b,
    post_act,
)
from ..kernels.gemm.matmul_spec import AUTO, OFF, MatMulSpec, MatMulStrategy
from ..strategy import select
from . import register_op
from .common import act_expr, broadcast_strides, strides


def _gemm_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if node.op_type == "MatMul" and t is not None and t.dtype.kind in "iu":
        return None  # integer MatMul: quant.integer_matmul
    if node.op_type == "MatMul" and t is not None and t.dtype == np.float64:
        return None  # a plain loop accumulating in double (no kernel strategies)
    if t is not None and t.dtype not in (np.float32,):
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 only)"
    return None


# --------------------------------------------------------------------------------------------
# pruned weights (issue 14): kernels/gemm/sparse.py decides on the density and writes the kernel
# --------------------------------------------------------------------------------------------
def _sparse_operands(spec: MatMulSpec) -> tuple[np.ndarray, int] | None:
    """(W[N][K], rows of A) when the node has the shape sparse.try_gemm / try_fc take."""
    w = spec.fc_weights()
    if w is None:
        return None
    if spec.op == "Gemm":
        return None if spec.trans_a or spec.a.rank != 2 else (w, spec.a.shape[0])
    return (w, spec.rows) if spec.folds_batch else None


def _refuse_sparse(spec: MatMulSpec) -> str | None:
    """The conditions of sparse.try_fc, read off the record (it must not refuse after)."""
    ops = _sparse_operands(spec)
    if ops is None:
        return "not a constant 2-D weight times a matrix of rows"
    if spec.residual is not None:
        return "a fused residual (the sparse kernels add a bias only)"
    w, rows = ops
    m = sparse.mode(spec.kernels)
    bsr = rows == 1 and sparse.sparse_applicable(np.asarray(w), "fc_batch1_bsr", m)
    kind = "fc_batch1" if rows == 1 else "fc_batchN"
    if not bsr and not sparse.sparse_applicable(np.asarray(w), kind, m):
        return "weights not sparse enough to pay (--kernels sparse=force to take them)"
    if spec.has_c and spec.beta != 0.0:  # Gemm's C, or o2e.MatMulAddAct's bias (input 2)
        c = spec.bias
        if c is None or c.size not in (1, spec.N) or c.dtype != np.float32:
            return "bias not a float32 constant of 1 or N values"
    return None


def _emit_sparse(ctx: NodeContext, spec: MatMulSpec) -> str:
    if spec.op == "Gemm":
        code = sparse.try_gemm(ctx)
    else:
        w, rows = _sparse_operands(spec)  # type: ignore[misc]
        # o2e.MatMulAddAct (passes/fuse_matmul_bias): its bias is input 2, as Gemm's C
        code = sparse.try_fc(ctx, spec.a, w, spec.y, rows, spec.K, spec.N, with_bias=spec.has_c)
    assert code is not None, "kernels/gemm/sparse.py refused a layer _refuse_sparse accepted"
    return code


# --------------------------------------------------------------------------------------------
# batch-1 fully connected layers: W packed at conversion as the A operand (Yt = W . xt)
# --------------------------------------------------------------------------------------------
def _fc_scaled(spec: MatMulSpec) -> np.ndarray:
    # Views until a copy is needed: a 2 GB layer must not be copied three times on the way.
    wv = np.asarray(spec.fc_weights(), dtype=np.float32)
    return wv * np.float32(spec.alpha) if spec.alpha != 1.0 else wv


def _fc_bias(ctx: NodeContext, spec: MatMulSpec) -> str | None:
    """The bias vector (beta * C broadcast to N), registered as a weight; None without one
    (Gemm's C, or the bias of an o2e.MatMulAddAct)."""
    if not spec.has_c or spec.beta == 0.0:
        return None
    cc = spec.bias
    assert cc is not None and cc.size in (1, spec.N)  # MatMulSpec.is_fc
    return ctx.weight(
        "bias",
        np.broadcast_to(
            cc.reshape(-1).astype(np.float32) * np.float32(spec.beta), (spec.N,)
        ).copy(),
    )


def _refuse_fc_skip_zeros(spec: MatMulSpec) -> str | None:
    if not spec.is_fc():
        return "not one row times a constant float32 weight"
    if spec.residual is not None:
        return "a fused residual (folded_gemm adds it)"
    blocks = -(-spec.N // FC_NB)
    if blocks * FC_NB > spec.N * FC_MAX_PAD:
        return f"{spec.N} outputs: padding to blocks of {FC_NB} would waste more than 10 %"
    if not _all_finite(_fc_scaled(spec).reshape(spec.N, spec.K)):
        return "a weight is not finite (skipping a zero input would drop its 0 * Inf = NaN)"
    return None


def _emit_fc_skip_zeros(ctx: NodeContext, spec: MatMulSpec) -> str:
    """Fully connected layer at batch 1 in FC_NB-output blocks, skipping zero inputs."""
    N, K, y = spec.N, spec.K, spec.y
    wv = _fc_scaled(spec)
    bias = _fc_bias(ctx, spec)
    ctx.kernel("fully connected, zero inputs skipped")
    # block q: its K rows of FC_NB weights, contiguous (o2e_fc_skip_zeros); outputs past N are
    # zero padding
    blocks = -(-N // FC_NB)
    wt = np.zeros((blocks, K, FC_NB), np.float32)
    for q in range(blocks):
        rows = wv.reshape(N, K)[q * FC_NB : (q + 1) * FC_NB]
        wt[q, :, : rows.shape[0]] = rows.T
    half = ctx.fp16_in_kernel(wt)
    blocked = ctx.weight("wt_f16" if half else "wt", wt.astype(np.float16) if half else wt)
    nz = ctx.scratch(K * 4, "int")
    st, post = act_struct(spec.act)
    _use_engine(ctx)
    return (
        f"o2e_fc_skip_zeros{'_h' if half else ''}({N}, {K}, {blocked}, {spec.a.sym}, "
        f"{bias or 'NULL'}, {y.sym}, {st}, {nz});" + post_act(spec.act, post, 1, N, y.sym, N)
    )


def _refuse_fc_gemv(spec: MatMulSpec) -> str | None:
    if spec.residual is not None:
        return "a fused residual (folded_gemm adds it)"
    return None if spec.is_fc() else "not one row times a constant float32 weight"


def _emit_fc_gemv(ctx: NodeContext, spec: MatMulSpec) -> str:
    """Fully connected layer at batch 1: y[N] = W[N][K].x[K] + b, W packed at conversion.

    Written as Yt = W.xt so the constant matrix is the packed A operand and N = 1 takes the
    engine's matrix-vector path."""
    N, K = spec.N, spec.K
    wv = _fc_scaled(spec)
    bias = _fc_bias(ctx, spec)
    ctx.kernel("fully connected as packed GEMV")
    if ctx.fp16_in_kernel(wv):  # --weights fp16: widened in registers
        packed = ctx.weight("packed_f16", pack_a(wv.reshape(N, K)).astype(np.float16))
        _use_engine(ctx)
        ws = ctx.scratch(gemm_workspace(ctx, N, 1, K, threads=1), "void")
        st, post = act_struct(spec.act)
        return (
            f"o2e_sgemv_packed_h({N}, {K}, {packed}, {spec.a.sym}, {spec.y.sym}, {bias or 'NULL'}, "
            f"{st}, {ws});" + post_act(spec.act, post, N, 1, spec.y.sym, 1)
        )
    packed, _ = packed_weights(ctx, "packed", wv.reshape(1, N, K))
    return gemm_packed_call(
        ctx,
        GemmCall(
            m=N, n=1, k=K, a=packed, b=spec.a.sym, ldb=1, c=spec.y.sym, ldc=1, bias_m=bias,
            act=spec.act,
        ),
    )  # fmt: skip


def _all_finite(w: np.ndarray, rows: int = 1024) -> bool:
    """np.isfinite(w).all() without a boolean copy of a large weight."""
    return all(np.isfinite(w[i : i + rows]).all() for i in range(0, w.shape[0], rows))


# Outputs per weight block of o2e_fc_skip_zeros (O2E_FC_NB), and the most zero padding that
# layout may add (as a factor of N): narrower layers keep the packed GEMV.
FC_NB = 256
FC_MAX_PAD = 1.1


# --------------------------------------------------------------------------------------------
# the GEMM engine
# --------------------------------------------------------------------------------------------
def _refuse_gemm(spec: MatMulSpec) -> str | None:
    return None if spec.op == "Gemm" else "MatMul: folded_gemm / batched_gemm"


def _emit_gemm(ctx: NodeContext, spec: MatMulSpec) -> str:
    """Any Gemm: transposes, alpha, a bias vector in the engine's epilogue or a full C after."""
    ta, tb, alpha, beta = spec.trans_a, spec.trans_b, spec.alpha, spec.beta
    a, b, y = spec.a, spec.b, spec.y
    M, N, K = spec.M, spec.N, spec.K
    lines = []
    a_sym = a.sym
    if ta:
        a_sym = ctx.scratch(M * K * 4)
        lines.append(
            f"for (int i = 0; i < {M}; ++i) for (int k = 0; k < {K}; ++k) {a_sym}[i * {K} + k] = {a.sym}[k * {M} + i];"
        )
    bc = spec.weights
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
    else:  # B is named only where the code reads it (emitter.ConstTensor records names)
        b_sym = b.sym
    bias_n = None
    c_full = None
    if spec.has_c and beta != 0.0:
        c = ctx.x(2)
        cc = spec.bias
        if cc is not None and (cc.size == N and (cc.ndim == 1 or cc.shape[0] == 1)):
            bias_n = ctx.weight("bias", (cc.reshape(N) * np.float32(beta)).astype(np.float32))
        elif cc is not None and cc.size == 1:
            bias_n = ctx.weight("bias", np.full(N, float(cc.reshape(-1)[0]) * beta, np.float32))
        else:
            c_full = c
    act = spec.act
    if alpha != 1.0 or c_full is not None:
        g = GemmCall(m=M, n=N, k=K, a=a_sym, lda=K, b=b_sym, ldb=N, c=y.sym, ldc=N)
        lines.append(gemm_call(ctx, g))
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
        g = GemmCall(
            m=M, n=N, k=K, a=a_sym, lda=K, b=b_sym, ldb=N, c=y.sym, ldc=N, bias_n=bias_n, act=act
        )
        lines.append(gemm_call(ctx, g))
    return "\n".join(lines)


def _refuse_folded(spec: MatMulSpec) -> str | None:
    return None if spec.folds_batch else "not a batch of rows times one 2-D B"


def _emit_folded(ctx: NodeContext, spec: MatMulSpec) -> str:
    """MatMul with a 2-D B: the batch folded into M, one GEMM (a fused bias in its
    epilogue)."""
    a, y, N, K = spec.a, spec.y, spec.N, spec.K
    bias = _fc_bias(ctx, spec)
    w = spec.weights
    # a constant B (a projection's weight): packed here, never at run time
    b_packed = w is not None and w.dtype == np.float32 and packs_b(spec.rows, N)
    b = ctx.weight("packed_b", pack_b(w.reshape(K, N))) if b_packed else spec.b.sym
    g = GemmCall(
        m=spec.rows,
        n=N,
        k=K,
        a=a.sym,
        lda=K,
        b=b,
        ldb=N,
        b_packed=b_packed,
        c=y.sym,
        ldc=N,
        bias_n=bias,
        act=spec.act,
        residual=spec.residual.sym if spec.residual is not None else None,
        ldr=N if spec.residual is not None else 0,
    )
    return gemm_call(ctx, g)


def _refuse_batched(spec: MatMulSpec) -> str | None:
    return None if spec.op == "MatMul" else "Gemm: gemm"


def _emit_batched(ctx: NodeContext, spec: MatMulSpec) -> str:
    """MatMul: one GEMM per matrix of the broadcast batch."""
    a, b, y = spec.a, spec.b, spec.y
    M, N, K, batch, nb = spec.M, spec.N, spec.K, list(spec.batch), spec.nb
    a_st = _batch_strides(list(spec.a_shape[:-2]), batch, M * K)
    b_st = _batch_strides(list(spec.b_shape[:-2]), batch, K * N)
    bias = _fc_bias(ctx, spec)  # registered before the loop: one vector for every matrix
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
            GemmCall(
                m=M,
                n=N,
                k=K,
                a=f"{a.sym} + {ao}",
                lda=K,
                b=f"{b.sym} + {bo}",
                ldb=N,
                c=f"{y.sym} + (size_t)bi * {M * N}",
                ldc=N,
                bias_n=bias,
                act=spec.act,
                residual=(
                    f"{spec.residual.sym} + (size_t)bi * {M * N}"
                    if spec.residual is not None
                    else None
                ),
                ldr=N if spec.residual is not None else 0,
            ),
        )
    )
    lines.append("}")
    return "\n".join(lines)


# auto: where the density pays (sparse.BREAK_EVEN); force: any zero weight; off: dense only.
# The same switch as Conv's sparse strategy (ops/conv.py).
SPARSE = MatMulStrategy("sparse", _refuse_sparse, _emit_sparse, settings=(AUTO, OFF, "force"))
FC_SKIP_ZEROS = MatMulStrategy("fc_skip_zeros", _refuse_fc_skip_zeros, _emit_fc_skip_zeros)
FC_GEMV = MatMulStrategy("fc_gemv", _refuse_fc_gemv, _emit_fc_gemv)
GEMM = MatMulStrategy("gemm", _refuse_gemm, _emit_gemm, settings=(AUTO,))  # takes any Gemm
FOLDED_GEMM = MatMulStrategy("folded_gemm", _refuse_folded, _emit_folded)
BATCHED_GEMM = MatMulStrategy("batched_gemm", _refuse_batched, _emit_batched, settings=(AUTO,))

# Preference order: the first strategy that does not refuse a node writes it.
STRATEGIES: tuple[MatMulStrategy, ...] = (
    SPARSE,
    FC_SKIP_ZEROS,  # batch 1, N near a multiple of 256, finite weights
    FC_GEMV,
    GEMM,  # takes any Gemm
    FOLDED_GEMM,
    BATCHED_GEMM,  # takes any MatMul
)


def _emit(ctx: NodeContext) -> str:
    spec = MatMulSpec.of(ctx)
    strategy = select(ctx, STRATEGIES, spec)
    r = ctx.node.inputs[-1] if spec.residual is not None else ""
    if r and r not in ctx.node.inputs[:2]:
        # the GEMM engine reads each residual element before it writes C's (R may alias C
        # exactly): the output may take the residual's buffer (residual_alias.py decides)
        ctx.offer_residual(r)
    return strategy.emit(ctx, spec)


@register_op("Gemm", check=_gemm_check)
def gemm(ctx: NodeContext) -> str:
    return _emit(ctx)


@register_op("MatMul", check=_gemm_check)
def matmul(ctx: NodeContext) -> str:
    if ctx.x(0).dtype.kind in "iu":
        from .quant import integer_matmul  # numpy.matmul with wrap-around

        return integer_matmul(ctx)
    if ctx.x(0).dtype == np.float64:
        from .quant import _matmul_code, _matmul_shape, _view

        a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
        ctx.kernel("float64 loop")
        return _matmul_code(a, b, _view(y, _matmul_shape(a.shape, b.shape)), "double")
    return _emit(ctx)


def _batch_strides(shape: list[int], batch: list[int], mat: int) -> list[int]:
    pad = [1] * (len(batch) - len(shape)) + shape
    st = strides(tuple(pad)) if pad else []
    return [0 if pad[d] == 1 and batch[d] != 1 else st[d] * mat for d in range(len(batch))]
