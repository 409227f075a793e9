"""o2e.FusedAttention (passes/fuse_attention.py): softmax(Q . K^T * scale + mask) . V per head in
runtime/o2e_attention.h, Q / K / V read in place through strides of the layout the exporter
produced, the output written in the graph's layout (head-merged when the pass took the
Transpose in)."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.fused import DOMAIN
from ..emitter import NodeContext, c_literal
from ..headers import include
from ..kernels.gemm.gemm import _use_engine
from ..kernels.par_split import RATE_ATTENTION, split_at
from . import register_op
from .common import broadcast_strides

# runtime/o2e_attention.h's bounds over every build (its tiles depend on the ISA the C is
# compiled for, the scratch is planned here): at most 32 query rows a block (O2E_ATT_RB), keys
# padded to a multiple of 32 (O2E_ATT_NP), values to at most a multiple of 32 (O2E_ATT_EP)
RB = 32


def _np(n: int) -> int:
    return -(-n // 32) * 32


def _ep(e: int) -> int:
    return -(-e // 32) * 32


def _check(node: Node, graph: Graph) -> str | None:
    if node.domain != DOMAIN:
        return f"{node.op_type} outside the {DOMAIN} domain"
    for name in node.inputs:
        t = graph.type_of(name) if name else None
        if name and (t is None or t.dtype != np.float32 or not t.is_static):
            return "o2e.FusedAttention needs float32 operands of static shape"
    return None


def _dims(ctx: NodeContext) -> dict[str, int]:
    """B, H, M, N, D, E and the element strides of every operand."""
    q, k, v = ctx.x(0).shape, ctx.x(1).shape, ctx.x(2).shape
    if ctx.attr("qkv_layout") == "packed":  # [B, T, 3, H, D]
        B, T, _, H, D = q
        row = 3 * H * D
        s = {"B": B, "H": H, "M": T, "N": T, "D": D, "E": D}
        s |= {"q_sb": T * row, "q_sh": D, "q_sm": row}
        s |= {"k_sb": T * row, "k_sh": D, "k_sn": row, "k_sd": 1}
        s |= {"v_sb": T * row, "v_sh": D, "v_sn": row}
    else:
        lead = q[:-2]
        B, H = (lead[0], 1) if len(lead) == 1 else lead
        M, D = q[-2:]
        E = v[-1]
        N = k[-1] if ctx.attr("k_transposed") else k[-2]
        s = {"B": B, "H": H, "M": M, "N": N, "D": D, "E": E}
        s |= {"q_sb": H * M * D, "q_sh": M * D, "q_sm": D}
        if ctx.attr("k_transposed"):
            s |= {"k_sb": H * D * N, "k_sh": D * N, "k_sn": 1, "k_sd": N}
        else:
            s |= {"k_sb": H * N * D, "k_sh": N * D, "k_sn": D, "k_sd": 1}
        s |= {"v_sb": H * N * E, "v_sh": N * E, "v_sn": E}
    B, H, M, E = s["B"], s["H"], s["M"], s["E"]
    if ctx.attr("out_layout") == "bshd":
        s |= {"y_sb": M * H * E, "y_sh": E, "y_sm": H * E}
    else:
        s |= {"y_sb": H * M * E, "y_sh": M * E, "y_sm": E}
    return s


@register_op("o2e:FusedAttention", check=_check)
def fused_attention(ctx: NodeContext) -> str:
    """Blocks of query rows of one head: scores, row softmax and the product with V in the
    thread's cache-sized scratch (runtime/o2e_attention.h)."""
    include(ctx, "o2e_attention.h")
    ctx.kernel("fused attention (row blocks, scores kept in cache)")
    d = _dims(ctx)
    B, H, M, N, D, E = (d[c] for c in "BHMNDE")
    if min(B, H, M, N, D, E) == 0:
        return "/* empty */"
    heads, items = B * H, f"{B * H} * ((({M}) + O2E_ATT_RB - 1) / O2E_ATT_RB)"
    work = heads * M * N * (D + E)
    threaded = split_at(ctx, work, heads * -(-M // RB), RATE_ATTENTION)
    slots = ctx.max_threads if threaded else 1
    per_thread = RB * (_np(N) + _ep(E) + 1 + D)  # O2E_ATT_THREAD_FLOATS
    kt = ctx.scratch(4 * heads * D * _np(N))
    vp = ctx.scratch(4 * heads * N * _ep(E))
    sc = ctx.scratch(4 * per_thread * slots)
    x = [ctx.x(i).sym for i in range(3)]
    if ctx.attr("qkv_layout") == "packed":
        x = [x[0], f"{x[1]} + {H * D}", f"{x[2]} + {2 * H * D}"]
    mask, m = "NULL", [0, 0, 0, 0]
    if ctx.n_inputs > 3 and ctx.has_input(3):
        mt = ctx.x(3)
        scores = (B, H, M, N)
        mshape = tuple(mt.shape)
        if len(ctx.x(0).shape) == 3:  # scores [B, M, N]: the mask reads as [B, 1, M, N]
            mshape = (1,) * (3 - len(mshape)) + mshape
            mshape = (mshape[0], 1, *mshape[1:])
        m = broadcast_strides(mshape, scores)
        mask = mt.sym
    scale = c_literal(float(ctx.attr("scale")), np.float32)
    fields = (
        f".q = {x[0]}, .k = {x[1]}, .v = {x[2]}, .mask = {mask}, .y = {ctx.y(0).sym}, "
        f".kt = {kt}, .vp = {vp}, .s = {sc}, "
        f".thread = {'o2e_parallel_thread' if threaded else 'NULL'}, "
        f".H = {H}, .M = {M}, .N = {N}, .D = {D}, .E = {E}, "
        f".q_sb = {d['q_sb']}, .q_sh = {d['q_sh']}, .q_sm = {d['q_sm']}, "
        f".k_sb = {d['k_sb']}, .k_sh = {d['k_sh']}, .k_sn = {d['k_sn']}, .k_sd = {d['k_sd']}, "
        f".v_sb = {d['v_sb']}, .v_sh = {d['v_sh']}, .v_sn = {d['v_sn']}, "
        f".m_sb = {m[0]}, .m_sh = {m[1]}, .m_sm = {m[2]}, .m_sn = {m[3]}, "
        f".y_sb = {d['y_sb']}, .y_sh = {d['y_sh']}, .y_sm = {d['y_sm']}, .scale = {scale}"
    )
    if threaded:
        _use_engine(ctx)  # o2e_parallel_for and the pool live in o2e_gemm.h
        run = (
            f"  o2e_parallel_for({heads}, o2e_attention_pack, &a);\n"
            f"  o2e_parallel_for({items}, o2e_attention_rows, &a);"
        )
    else:
        run = f"  o2e_attention_pack(&a, 0, {heads});\n  o2e_attention_rows(&a, 0, {items});"
    return f"{{\n  o2e_attention_args a = {{{fields}}};\n{run}\n}}"
