"""k x k convolutions on narrow maps with the output channels in the vector lanes (issue 9).

ResNet50's res5a_branch2b (3x3 stride 2, 512 -> 512, 14x14 -> 7x7, K = 4608) ran as the
implicit GEMM: its P = 49 output pixels fill one 48-column AVX-512 strip and 1/48 of the next,
and each strip streams the 9 MB weight matrix again (54 GFLOP/s against 80-120 for the other
layers). The pointwise kernel of runtime/o2e_conv1x1.h (kernels/conv/conv_pointwise.py: output
channels in the lanes x up to 12 pixels in registers, the input packed once per call into
pixel tiles) takes any kernel size once its packing gathers the im2col column of each pixel:
`o2e_convkxk_lanes` does that (zeros for taps in the padding, in the ONNX weight order
c, ky, kx), then runs the same tiles. Weights are the pointwise layout of the (M, C*KH*KW)
matrix, the same for every ISA.

Taken for 2-D layers without groups whose output has at most MAX_P pixels and whose K is at
least MIN_K; 1x1 layers are left to the pointwise strategy. It runs before Winograd: on 7x7
maps F(2x2,3x3) computes 8x8 outputs for 7x7 (4x4 tiles of 2x2) and its 16 products are
(16 x 512) x (512 x 16) GEMMs with one 16-column strip.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ..gemm.gemm import _use_engine, act_struct, post_act
from ..pool import pool2d
from . import conv_pointwise
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

MAX_P = 64
MIN_K = 128
MIN_M = 32


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec, constant_bias=True)) is not None:
        return why  # the bias is padded at conversion time
    if spec.nsp != 2 or spec.group != 1:
        return "not a 2-D convolution without groups"
    if spec.ks == [1, 1]:
        return "1x1: the pointwise strategy"
    P = spec.y.shape[2] * spec.y.shape[3]
    K = spec.C * spec.ks[0] * spec.ks[1]
    if P > MAX_P or K < MIN_K or spec.M < MIN_M:
        return f"map over {MAX_P} pixels, K under {MIN_K} or fewer than {MIN_M} outputs"
    return None


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    """C statements for the whole node (every image of the batch in turn)."""
    x, w, y = spec.x, spec.w, spec.y
    N, C, H, W = x.shape
    M = w.shape[0]
    kh, kw = spec.ks
    sh, sw = spec.st
    dh, dw = spec.dl
    pt, pl = spec.pads[0], spec.pads[1]
    K = C * kh * kw
    P = y.shape[2] * y.shape[3]
    mal, panel = conv_pointwise.MALIGN, conv_pointwise.PANEL
    Mp = -(-M // mal) * mal
    wc = np.zeros((Mp, K), np.float32)
    wc[:M] = ctx.const(1).reshape(M, K)  # (c, ky, kx) order: the packing's
    # [Mp / 16][K][16]: one panel's weights in the order a tile reads them
    wsym = ctx.weight(
        "lanesKxK", np.ascontiguousarray(wc.reshape(Mp // panel, panel, K).transpose(0, 2, 1))
    )
    bc = np.zeros(Mp, np.float32)  # padded, so the tile adds it as whole vectors
    if spec.has_bias:  # the constant padded (its own symbol is not named)
        bc[:M] = ctx.const(2).reshape(M)
    bsym = ctx.weight("biasKxK", bc)
    _use_engine(ctx)  # o2e_act, o2e_act1_, o2e_parallel_for
    conv_pointwise.include(ctx)
    ctx.kernel("k x k on a narrow map (output channels in lanes)")
    xp, acc = conv_pointwise.scratch(ctx, K, P)
    act_c, post = act_struct(spec.act)
    res = ctx.x(3).sym if spec.residual else None
    threaded = int(M * K * P >= pool2d.PAR_MIN_WORK and M > 32)
    off = "(size_t)n * " + str(M * P)
    lines = [
        f"{{ const o2e_pwk_geom geo = {{{C}, {H}, {W}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, "
        f"{pt}, {pl}, {y.shape[3]}}};",
        f"for (int n = 0; n < {N}; ++n) {{",
        f"  const o2e_pw_args a = {{{x.sym} + (size_t)n * {C * H * W}, {wsym}, {xp}, {acc}, "
        f"{bsym}, {f'{res} + {off}' if res else 'NULL'}, {y.sym} + {off}, "
        f"{M}, {K}, {P}, {H * W}, {W}, {y.shape[3]}, {sh}, {sw}, {act_c}}};",
        f"  o2e_convkxk_lanes(&a, &geo, {threaded});",
        "} }",
    ]
    return "\n".join(lines) + post_act(spec.act, post, N * M, P, y.sym, P)


STRATEGY = register(ConvStrategy("narrow", refuse, emit), rank=60)
