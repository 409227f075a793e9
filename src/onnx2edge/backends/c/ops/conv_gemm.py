"""Convolution as GEMM: the implicit GEMM (im2col fused into packing B) and blocked im2col."""

from __future__ import annotations

from ....semantics.activations import Activation
from ..emitter import NodeContext
from ..gemm_pack import sgemm_workspace_bytes
from . import pool2d
from .gemm import (
    MAX_THREADS,
    _use_engine,
    act_struct,
    post_act,
)

# The GEMM engine's small-N paths read B in place, so the implicit im2col needs N above them
# (O2E_GEMM_SMALLN is 12).
IMPLICIT_MIN_COLS = 16


def implicit_gemm_call(
    ctx: NodeContext,
    packed: str,
    M: int,
    P: int,
    K: int,
    xin: str,
    C: int,
    H: int,
    W: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    pt: int,
    pl: int,
    OW: int,
    y: str,
    bias: str,
    act: Activation | None,
    res: str | None,
) -> str:
    """C statement: a convolution as one GEMM whose B operand is packed straight from the input."""
    ws = ctx.scratch(sgemm_workspace_bytes(M, P, K, MAX_THREADS), "void")
    st, post = act_struct(act)
    OH = P // OW
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
            f"{fn}({xin} + (size_t)c * {H * W}, {H}, {W}, {pt}, {pl}, {HQ}, {WQ}, {planes} + (size_t)c * {plane}); "
        )
        geom = f"{planes}, {HQ}, {WQ}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {pt}, {pl}, {OW}, 1"
    else:
        geom = f"{xin}, {H}, {W}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {pt}, {pl}, {OW}, 0"
    call = (
        f"{{ {split}const o2e_conv_b cb = {{{geom}}}; "
        f"o2e_sgemm_packed_conv({M}, {P}, {K}, {packed}, &cb, {y}, {P}, {bias}, {res or 'NULL'}, {P}, {st}, {ws}); }}"
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


def _im2col_call(
    ctx: NodeContext,
    xin: str,
    C: int,
    H: int,
    W: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    pt: int,
    pl: int,
    OW: int,
    oh0: str,
    nrows: int,
    col: str,
) -> str:
    """C statement filling `col` for output rows [oh0, oh0 + nrows), split across threads when
    the block is large (its C*kh*kw rows are independent)."""
    ctx.helper("o2e_im2col", IM2COL)
    K = C * kh * kw
    fields = (
        f".x = {xin}, .col = {col}, .H = {H}, .W = {W}, .kh = {kh}, .kw = {kw}, .sh = {sh}, .sw = {sw}, "
        f".dh = {dh}, .dw = {dw}, .pt = {pt}, .pl = {pl}, .OW = {OW}, .oh0 = {oh0}, .oh1 = ({oh0}) + {nrows}"
    )
    if K > 1 and K * nrows * OW >= pool2d.PAR_MIN_WORK:
        return (
            f"{{ o2e_im2col_args a = {{{fields}}}; o2e_parallel_for({K}, o2e_im2col_rows, &a); }}"
        )
    return f"{{ o2e_im2col_args a = {{{fields}}}; o2e_im2col_rows(&a, 0, {K}); }}"


IM2COL = r"""
/* im2col: the input patches of a 2-D convolution as a matrix, zeros for padding. Row
 * r = (c*kh + ki)*kw + kj holds x[c][oh*sh - pt + ki*dh][ow*sw - pl + kj*dw] for the output
 * positions of rows [oh0, oh1), (oh1 - oh0)*OW columns. */
typedef struct {
  const float *x;
  float *col;
  int H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, oh0, oh1;
} o2e_im2col_args;

/* Rows [r0, r1) of the matrix: independent, so o2e_parallel_for can split them. Each row of
 * the input is copied in one stretch; the columns that fall in the padding are zeroed around
 * it instead of testing every element. */
static void o2e_im2col_rows(void *arg, int r0, int r1)
{
  const o2e_im2col_args *a = (const o2e_im2col_args *)arg;
  const int W = a->W, sw = a->sw, OW = a->OW;
  const size_t ld = (size_t)(a->oh1 - a->oh0) * OW;
  for (int r = r0; r < r1; ++r) {
    const int c = r / (a->kh * a->kw), ki = r / a->kw % a->kh, kj = r % a->kw;
    const int off = kj * a->dw - a->pl; /* input column of output column ow: ow*sw + off */
    int ow0 = off >= 0 ? 0 : (-off + sw - 1) / sw, ow1 = W > off ? (W - off + sw - 1) / sw : 0;
    float *dst = a->col + (size_t)r * ld;
    if (ow0 > OW) ow0 = OW;
    if (ow1 > OW) ow1 = OW;
    if (ow1 < ow0) ow1 = ow0;
    for (int oh = a->oh0; oh < a->oh1; ++oh) {
      const int ih = oh * a->sh - a->pt + ki * a->dh;
      float *restrict row = dst + (size_t)(oh - a->oh0) * OW;
      int ow = 0;
      if (ih < 0 || ih >= a->H) {
        for (; ow < OW; ++ow) row[ow] = 0.0f;
        continue;
      }
      {
        const float *restrict src = a->x + ((size_t)c * a->H + ih) * W;
        for (; ow < ow0; ++ow) row[ow] = 0.0f;
        if (sw == 1)
          for (; ow < ow1; ++ow) row[ow] = src[ow + off];
        else
          for (; ow < ow1; ++ow) row[ow] = src[ow * sw + off];
        for (; ow < OW; ++ow) row[ow] = 0.0f;
      }
    }
  }
}
"""
