"""Convolution as GEMM: the implicit GEMM (im2col fused into packing B) and blocked im2col."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .....semantics.activations import Activation
from ...emitter import NodeContext
from ...headers import include
from ..gemm.gemm import (
    GemmCall,
    _use_engine,
    act_struct,
    gemm_call,
    gemm_packed_call,
    gemm_workspace,
    packed_weights,
    post_act,
)
from ..pool import pool2d
from . import conv_pointwise
from .conv_spec import AUTO, ConvSpec, ConvStrategy, register

# The GEMM engine's small-N paths read B in place, so the implicit im2col needs N above them
# (O2E_GEMM_SMALLN is 12).
IMPLICIT_MIN_COLS = 16


@dataclass(frozen=True)
class ConvWindow:
    """One group's input as the GEMM's B operand reads it: C channels of H x W, a kh x kw
    window with strides, dilations and the top / left pads, over an OH x OW output (the
    record the im2col and implicit-GEMM calls take instead of a row of ints)."""

    C: int
    H: int
    W: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    OH: int
    OW: int

    @classmethod
    def of(cls, spec: ConvSpec) -> ConvWindow:
        """A 2-D convolution's window, per group (C: its input channels)."""
        (H, W), (OH, OW) = spec.x.shape[2:], spec.y.shape[2:]
        (kh, kw), (sh, sw), (dh, dw) = spec.ks, spec.st, spec.dl
        return cls(spec.cg, H, W, kh, kw, sh, sw, dh, dw, spec.pads[0], spec.pads[1], OH, OW)

    @property
    def K(self) -> int:  # noqa: N802
        """The GEMM's depth: one row of B per channel and tap."""
        return self.C * self.kh * self.kw

    @property
    def P(self) -> int:  # noqa: N802
        """The GEMM's columns: one per output position."""
        return self.OH * self.OW


def implicit_gemm_call(
    ctx: NodeContext,
    win: ConvWindow,
    *,
    M: int,
    packed: str,
    x: str,
    y: str,
    bias: str,
    act: Activation | None,
    residual: str | None,
) -> str:
    """C statement: a convolution as one GEMM (M output channels, weights `packed` at
    conversion time) whose B operand is packed straight from the input `x`; the output `y`
    and the `residual` are [M][P]."""
    C, H, W, kh, kw, sh, sw, dh, dw = (
        win.C, win.H, win.W, win.kh, win.kw, win.sh, win.sw, win.dh, win.dw
    )  # fmt: skip
    pt, pl, OH, OW, P, K = win.pt, win.pl, win.OH, win.OW, win.P, win.K
    ws = ctx.scratch(gemm_workspace(ctx, M, P, K, conv=True), "void")
    st, post = act_struct(act)
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    plane = sh * sw * HQ * WQ
    split = ""
    if (sh > 1 or sw > 1 or pt or pl or HQ > H or WQ > W) and C * plane * 4 <= PHASED_MAX_BYTES:
        # strided or padded: split the input into zero-bordered phase planes once (one plane
        # per channel at stride 1), so that packing B is plain copies instead of strided
        # gathers and bounds checks (Inception-v3's 5x5 layers: 10 % faster)
        planes = ctx.scratch(C * plane * 4)
        fn = pool2d.phase_split(ctx, sh, sw)
        split = (
            f"memset({planes}, 0, {C * plane * 4}); for (int c = 0; c < {C}; ++c) "
            f"{fn}({x} + (size_t)c * {H * W}, {H}, {W}, {pt}, {pl}, {HQ}, {WQ}, {planes} + (size_t)c * {plane}); "
        )
        geom = f"{planes}, {HQ}, {WQ}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {pt}, {pl}, {OW}, 1"
    else:
        geom = f"{x}, {H}, {W}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {pt}, {pl}, {OW}, 0"
    call = (
        f"{{ {split}const o2e_conv_b cb = {{{geom}}}; "
        f"o2e_sgemm_packed_conv({M}, {P}, {K}, {packed}, &cb, {y}, {P}, {bias}, {residual or 'NULL'}, {P}, {st}, {ws}); }}"
    )
    _use_engine(ctx)
    return call + post_act(act, post, M, P, y, P)


# Phase planes of a strided convolution's input live in the arena while it runs: above this
# size (ConvDeconvNet's 480x640 layers would need 40 MB) the packing reads the input directly.
PHASED_MAX_BYTES = 8 << 20


# Bytes of one im2col block: the column matrix is written, then read right away by the GEMM's
# packing, so a block that stays in cache saves a round trip through memory (measured on a
# 480x640 model: 1-4 MB alike, 8 MB and more 20-50 % slower). Blocks keep at least
# IM2COL_MIN_COLS columns, so the GEMM still has enough column panels to split across threads.
IM2COL_BLOCK_BYTES = 2 << 20
IM2COL_MIN_COLS = 768


def _im2col_rows(K: int, OH: int, OW: int) -> int:
    """Output rows per im2col block (at least one)."""
    return min(OH, max(IM2COL_BLOCK_BYTES // (4 * K * OW), -(-IM2COL_MIN_COLS // OW), 1))


def _im2col_call(ctx: NodeContext, win: ConvWindow, x: str, oh0: str, nrows: int, col: str) -> str:
    """C statement filling `col` for output rows [oh0, oh0 + nrows), split across threads when
    the block is large (its C*kh*kw rows are independent)."""
    include(ctx, "o2e_im2col.h")
    w, K = win, win.K
    fields = (
        f".x = {x}, .col = {col}, .H = {w.H}, .W = {w.W}, .kh = {w.kh}, .kw = {w.kw}, "
        f".sh = {w.sh}, .sw = {w.sw}, .dh = {w.dh}, .dw = {w.dw}, .pt = {w.pt}, .pl = {w.pl}, "
        f".OW = {w.OW}, .oh0 = {oh0}, .oh1 = ({oh0}) + {nrows}"
    )
    if K > 1 and K * nrows * w.OW >= pool2d.PAR_MIN_WORK:
        return (
            f"{{ o2e_im2col_args a = {{{fields}}}; o2e_parallel_for({K}, o2e_im2col_rows, &a); }}"
        )
    return f"{{ o2e_im2col_args a = {{{fields}}}; o2e_im2col_rows(&a, 0, {K}); }}"


# --------------------------------------------------------------------------------------------
# the strategies: one GEMM per group, B either packed straight from the input (implicit), the
# input itself (1x1), a subsampled copy (strided 1x1) or im2col blocks
# --------------------------------------------------------------------------------------------
def _const_f32(spec: ConvSpec) -> bool:
    return spec.weights is not None and spec.weights.dtype == np.float32


def _pointwise(spec: ConvSpec) -> bool:
    return spec.ks == [1, 1] and spec.st == [1, 1] and not any(spec.pads)


def _subsample(spec: ConvSpec) -> bool:
    """A strided 1x1 convolution reads one input pixel in sh*sw: its im2col is a plain
    subsampling copy, after which B is read in place (no repacking, no phase planes)."""
    return spec.ks == [1, 1] and not any(spec.pads) and not _pointwise(spec)


def _refuse_implicit(spec: ConvSpec) -> str | None:
    if spec.nsp != 2:
        return "not a 2-D convolution"
    if not _const_f32(spec):
        return "weights computed at run time (B is packed at conversion time)"
    if _pointwise(spec) or _subsample(spec):
        return "a 1x1 convolution reads its input in place"
    if spec.y.shape[2] * spec.y.shape[3] < IMPLICIT_MIN_COLS:
        return f"fewer than {IMPLICIT_MIN_COLS} output positions"
    return None


def _refuse_1x1(spec: ConvSpec) -> str | None:
    return None if spec.nsp == 2 and _pointwise(spec) else "not 1x1, stride 1, unpadded"


def _refuse_subsample(spec: ConvSpec) -> str | None:
    return None if spec.nsp == 2 and _const_f32(spec) and _subsample(spec) else "not strided 1x1"


def _refuse_im2col(spec: ConvSpec) -> str | None:
    return None if spec.nsp == 2 else "not a 2-D convolution"


def _emit_implicit(ctx: NodeContext, spec: ConvSpec) -> str:
    return _emit_gemm(ctx, spec, "implicit")


def _emit_1x1(ctx: NodeContext, spec: ConvSpec) -> str:
    return _emit_gemm(ctx, spec, "1x1")


def _emit_subsample(ctx: NodeContext, spec: ConvSpec) -> str:
    return _emit_gemm(ctx, spec, "subsample")


def _emit_im2col(ctx: NodeContext, spec: ConvSpec) -> str:
    return _emit_gemm(ctx, spec, "im2col")


LABELS = {
    "implicit": "implicit GEMM (im2col fused into B packing)",
    "1x1": "1x1 as GEMM",
    "subsample": "strided 1x1: subsample + GEMM",
    "im2col": "im2col + GEMM",
}


def _emit_gemm(ctx: NodeContext, spec: ConvSpec, how: str) -> str:
    x, w, y, N, C, M, group = spec.x, spec.w, spec.y, spec.N, spec.C, spec.M, spec.group
    win = ConvWindow.of(spec)
    H, W, OH, OW, K, P = win.H, win.W, win.OH, win.OW, win.K, win.P
    cg, mg = spec.cg, spec.mg
    act, bias = spec.act, spec.bias
    pointwise = how == "1x1"
    lines = []
    # im2col in blocks of output rows: the columns stay cache-sized and bounded (a 9x9 conv
    # at 480x640 would otherwise need a 3 GB matrix)
    for_n = f"for (int n = 0; n < {N}; ++n)\nfor (int g = 0; g < {group}; ++g) {{"
    xin = f"{x.sym} + ((size_t)n * {C} + (size_t)g * {cg}) * {H * W}"
    yout = f"{y.sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {P}"
    bg = f"{bias} + (size_t)g * {mg}" if bias else "NULL"
    res = None
    if spec.residual:
        ctx.kernel("residual add in the GEMM epilogue")
        res = f"{ctx.x(3).sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {P}"
    packed = None
    if _const_f32(spec):
        assert spec.weights is not None
        ctx.kernel(LABELS[how])
        packed, stride = packed_weights(ctx, "packed", spec.weights.reshape(group, mg, K))
        if how == "implicit":
            call = implicit_gemm_call(
                ctx,
                win,
                M=mg,
                packed=f"{packed} + (size_t)g * {stride}",
                x=xin,
                y=yout,
                bias=bg,
                act=act,
                residual=res,
            )
            return "\n".join([for_n, "  " + call, "}"])

    rows = OH if pointwise else _im2col_rows(K, OH, OW)
    if not pointwise:
        col = ctx.scratch(K * rows * OW * 4)
    lines.append(for_n)

    def block(oh0: str, nrows: int) -> list[str]:
        """im2col + GEMM for output rows [oh0, oh0 + nrows)."""
        ncols, off = nrows * OW, f"(size_t)({oh0}) * {OW}"
        out, r = (yout, res) if oh0 == "0" else (f"{yout} + {off}", res and f"{res} + {off}")
        if pointwise:
            b_mat, code = xin, []
        else:
            b_mat = col
            code = [_im2col_call(ctx, win, xin, oh0, nrows, col)]
        if packed is not None:
            call = gemm_packed_call(
                ctx,
                GemmCall(
                    m=mg,
                    n=ncols,
                    k=K,
                    a=f"{packed} + (size_t)g * {stride}",
                    b=b_mat,
                    ldb=ncols,
                    c=out,
                    ldc=P,
                    bias_m=bg,
                    act=act,
                    residual=r,
                    ldr=P,
                ),
            )
            if pointwise and conv_pointwise.avx2_lanes(spec):  # AVX2 builds: lanes kernel
                call = conv_pointwise.avx2_branch(ctx, spec, packed, xin, out, bg, r, call)
            elif pointwise and conv_pointwise.avx512_rows(spec):  # AVX-512: input in place
                call = conv_pointwise.avx512_rows_branch(
                    ctx, spec, f"{packed} + (size_t)g * {stride}", xin, out, bg, r, call
                )
            code.append(call)
        else:  # weights computed at run time: read in place (named only here: emitter.ConstTensor)
            wg = f"{w.sym} + (size_t)g * {mg * K}"
            code.append(
                gemm_call(
                    ctx,
                    GemmCall(
                        m=mg,
                        n=ncols,
                        k=K,
                        a=wg,
                        lda=K,
                        b=b_mat,
                        ldb=ncols,
                        c=out,
                        ldc=P,
                        bias_m=bg,
                        act=act,
                        residual=r,
                        ldr=P,
                    ),
                )
            )
        return code

    if rows >= OH:
        lines += ["  " + c for c in block("0", OH)]
    else:
        full = OH - OH % rows
        lines.append(f"  for (int oh0 = 0; oh0 < {full}; oh0 += {rows}) {{")
        lines += ["    " + c for c in block("oh0", rows)]
        lines.append("  }")
        if full < OH:
            lines += ["  " + c for c in block(str(full), OH - full)]
    lines.append("}")
    return "\n".join(lines)


# The GEMM engine's epilogue reads R[i][j] and writes C[i][j] in the same tile (K slices keep
# partial sums in scratch when R overlaps C), so the residual's buffer may hold the output.
IMPLICIT_GEMM = register(
    ConvStrategy("implicit_gemm", _refuse_implicit, _emit_implicit, inplace_residual=True),
    rank=120,
)
GEMM_1X1 = register(
    ConvStrategy("gemm_1x1", _refuse_1x1, _emit_1x1, inplace_residual=True), rank=130
)
SUBSAMPLE_GEMM = register(
    ConvStrategy("subsample_gemm", _refuse_subsample, _emit_subsample, inplace_residual=True),
    rank=140,
)
# the 2-D fallback: takes any 2-D convolution, so it cannot be switched off
IM2COL_GEMM = register(
    ConvStrategy(
        "im2col_gemm", _refuse_im2col, _emit_im2col, settings=(AUTO,), inplace_residual=True
    ),
    rank=150,
)
