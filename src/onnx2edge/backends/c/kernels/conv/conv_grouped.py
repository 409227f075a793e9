"""Grouped convolutions with few channels per group: groups across threads.

RegNetX's 3x3 layers have 8 input and 8 output channels per group (24 to 46 groups). The
implicit GEMM ran them as one product per group (M = 8, K = 72), the groups one after the
other, each product splitting its own columns across the threads: on a 7x7 map a product is
49 columns, so at 2 threads RegNetX-200MF was 1.67x onnxruntime's time against 1.05 at 1
thread. runtime/o2e_gconv.h makes the group the unit of work: a thread splits the group's
input into zero-bordered phase planes in its own workspace slot (pool2d.phase_split, as the
implicit GEMM does) and multiplies them by the group's 8-row weight panels (packed here) in
register tiles read straight from the planes, adding bias, residual and activation as it
stores. Tiles: AVX-512 8 x 32, AVX2 2 x (4 x 24), NEON 8 x 12 (o2e_gconv.h); x86-64-v2 and
portable builds keep the implicit GEMM on maps of >= IMPLICIT_MIN_COLS outputs.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ...headers import include
from ..gemm.gemm import _use_engine, act_struct, plan_threads, post_act
from ..pool import pool2d
from . import conv_gemm
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

MB = 8  # output channels per tile (O2E_GC_MB)
NB_MAX = 32  # widest tile (O2E_GC_NB at AVX-512): the tail slot is sized for it
# Input channels per group this kernel is for (RegNetX 8, ResNeXt 4-32): wider groups, a few of
# them, are ordinary convolutions the lanes / GEMM strategies run better (a 2-group 3x1 layer of
# 168 channels a group stays on the lanes kernel).
SLACK = 2 * NB_MAX  # floats past a thread's planes (O2E_GC_SLACK), zero
MAX_CG = 32
MAX_MG = 64  # above this, one product per group has rows enough for the GEMM engine
MAX_K = 576  # taps per output (cg * kh * kw): 64 channels of 3x3 (O2E_GC_KMAX)
# builds with o2e_gconv.h register tiles (o2e_gemm.h's O2E_GEMM_AVX512 / AVX2 / NEON tests)
TILED_ISAS = (
    "defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || "
    "(defined(__ARM_NEON) && defined(__aarch64__))"
)
MAX_PLANES_BYTES = 8 << 20  # a thread's copy of one group's input (conv_gemm.PHASED_MAX_BYTES)


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec)) is not None:
        return why
    if spec.nsp != 2 or spec.group == 1:
        return "not a 2-D grouped convolution"
    if spec.cg > MAX_CG:
        return f"more than {MAX_CG} input channels per group (each group is an ordinary conv)"
    if spec.mg > MAX_MG or spec.cg * spec.ks[0] * spec.ks[1] > MAX_K:
        return f"more than {MAX_MG} outputs or {MAX_K} taps per group (the GEMM's shape)"
    (OH, OW), (kh, kw), (sh, sw), (dh, dw) = spec.y.shape[2:], spec.ks, spec.st, spec.dl
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    if spec.cg * sh * sw * HQ * WQ * 4 > MAX_PLANES_BYTES:
        return f"a group's phase planes over {MAX_PLANES_BYTES >> 20} MB"
    return None


def plane_row(W: int, WQ: int, sw: int, pl: int, pr: int) -> int:
    """Floats a plane row: a column stride of 1 lets a row's right pad be the next row's left
    pad (both zero, never written), W + max(pl, pr) instead of W + pl + pr: fewer flat
    positions computed and dropped (RegNetX's 7x7 maps: 55 instead of 61, 56 instead of 64 in
    AVX2 tiles). The last row's right pad then reads min(pl, pr) floats past its plane: the next
    plane's left pad or the workspace's SLACK."""
    if sw != 1 or not 0 < min(pl, pr) <= NB_MAX:
        return WQ
    return W + max(pl, pr)


def pack(weights: np.ndarray, group: int) -> np.ndarray:
    """[M][cg][kh][kw] -> [group][ceil(mg / 8)][K][8], output rows past mg zero."""
    M = weights.shape[0]
    mg, K = M // group, int(np.prod(weights.shape[1:]))
    mblk = -(-mg // MB)
    w = np.zeros((group, mblk * MB, K), np.float32)
    w[:, :mg] = weights.reshape(group, mg, K)
    return np.ascontiguousarray(w.reshape(group, mblk, MB, K).transpose(0, 1, 3, 2))


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    assert spec.weights is not None
    x, y, N, C, M, group = spec.x, spec.y, spec.N, spec.C, spec.M, spec.group
    H, W = x.shape[2:]
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    dh, dw = spec.dl
    pt, pl = spec.pads[0], spec.pads[1]
    K, P = spec.cg * kh * kw, OH * OW
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    WQ = plane_row(W, WQ, sw, spec.pads[1], spec.pads[3])
    wsym = ctx.weight("gconv", pack(spec.weights, group))
    nq = (OH - 1) * WQ + OW  # o2e_gconv_groups' flat positions, in whole tiles
    # rows of nq rounded up to the build's tile width (o2e_gconv.h: 8 to 32 per ISA)
    wide = -(-spec.mg // MB) * MB * (nq + NB_MAX)
    # SLACK: the last tile reads past the planes, the shared pad column up to min(pl, pr) more
    ws_per = spec.cg * sh * sw * HQ * WQ + SLACK + wide
    ws = ctx.scratch(ws_per * 4 * plan_threads(ctx))
    split = pool2d.phase_split(ctx, sh, sw)
    _use_engine(ctx)  # o2e_act, o2e_act1_, o2e_parallel_for
    include(ctx, "o2e_gconv.h")
    ctx.kernel("grouped: groups across threads, 8-channel register tiles")
    act_c, post = act_struct(spec.act)
    bias = spec.bias or "NULL"
    res = ctx.x(3).sym if spec.residual else None
    off = f"(size_t)n * {M * P}"
    threaded = int(M * K * P >= pool2d.PAR_MIN_WORK and group > 1)
    lines = [
        f"for (int n = 0; n < {N}; ++n) {{",
        f"  const o2e_gconv_args a = {{{x.sym} + (size_t)n * {C * H * W}, {wsym}, {bias}, "
        f"{f'{res} + {off}' if res else 'NULL'}, {y.sym} + {off}, {ws}, {ws_per}, {split}, "
        f"{spec.cg}, {spec.mg}, {H}, {W}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {pt}, {pl}, "
        f"{OH}, {OW}, {HQ}, {WQ}, {act_c}}};",
        f"  o2e_gconv(&a, {group}, {threaded});",
        "}",
    ]
    fast = "\n".join(lines) + post_act(spec.act, post, N * M, P, y.sym, P)
    # AVX-512, AVX2+FMA and NEON have register tiles of their own (o2e_gconv.h); other
    # builds (x86-64-v2, portable: 8 x 8 plain C) keep the implicit GEMM / im2col per group
    if P < conv_gemm.IMPLICIT_MIN_COLS:  # no implicit GEMM for it: this path at every ISA
        return fast
    other = conv_gemm._emit_gemm(ctx, spec, "implicit")
    # the split helper is a static function only the tiled branch calls: without this use an
    # x86-64-v2 / portable build fails -Werror=unused-function
    unused = f"(void){split};"
    return "\n".join([f"#if {TILED_ISAS}", fast, "#else", unused, other, "#endif"])


# after the depthwise strategies, before Winograd: grouped, few channels a group (groups
# across threads)
STRATEGY = register(ConvStrategy("grouped", refuse, emit), rank=45)
