"""A 1-D convolution with many input channels as one GEMM per tap over its phase planes
(Whisper's second convolution: 384 -> 384 channels, k = 3, stride 2, 3000 -> 1500 frames).

ops/conv.py runs a 1-D layer as its (N, C, 1, L) view with a 1 x k kernel. Split into its
stride's phase planes once (one zero-bordered row per channel and phase, plane b holding
x[v * s + b - pad]), tap j of every output t reads plane (j·d mod s) at column t + j·d div s:
for all C channels that is a C x OW matrix at one offset in the planes with one row stride
(s · WQ floats), so the layer is

    y = W_0 · B_0 + W_1 · B_1 + ... + W_{k-1} · B_{k-1}      (W_j = w[:, :, j]: M x C)

k GEMMs of depth C whose B is read from the planes as they are (the engine packs its panels
from them) and whose A, the weights of one tap, is packed at conversion; each one after the
first adds the sum so far as the residual (the engine reads R before writing C at the same
place), the bias goes with the first, the activation with the last. The implicit GEMM packs
the same products as one GEMM of depth k·C but gathers B from the planes tap by tap
(Whisper's layer ran at about 60 % of the MLP GEMMs' speed there).

Taken from C >= MIN_C input channels: Whisper's first layer (80 channels, stride 1) stays on
the lanes kernel, which ran it 6 % faster in an interleaved A/B (tools/ab_nodes.py, loaded
host: 2.93 vs 3.10 ms), where the stride-2 384-channel layer went 13.4 -> 6.7 ms."""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ..gemm.gemm import GemmCall, gemm_packed_call, packed_weights
from ..pool import pool2d
from .conv_gemm import IMPLICIT_MIN_COLS, PHASED_MAX_BYTES
from .conv_spec import ConvSpec, ConvStrategy, register

MIN_C = 128
LABEL = "1-D conv: one GEMM per tap over phase planes"


def refuse(spec: ConvSpec) -> str | None:
    if spec.nsp != 2 or spec.x.shape[2] != 1 or spec.ks[0] != 1 or spec.y.shape[2] != 1:
        return "not a 1-D convolution (its (N, C, 1, L) view)"
    if spec.group != 1:
        return "grouped"
    if spec.weights is None or spec.weights.dtype != np.float32 or spec.x.dtype != np.float32:
        return "weights computed at run time, or not float32"
    if spec.ks[1] < 2:
        return "one tap (the 1x1 paths)"
    if spec.C < MIN_C:
        return f"fewer than {MIN_C} input channels (shallow GEMMs)"
    if spec.y.shape[3] < IMPLICIT_MIN_COLS:
        return f"fewer than {IMPLICIT_MIN_COLS} output positions"
    if spec.C * _plane(spec)[1] * spec.st[1] * 4 > PHASED_MAX_BYTES:
        return "phase planes too large for the arena"
    return None


def _plane(spec: ConvSpec) -> tuple[int, int]:
    """(OW, WQ): output positions and columns of each phase plane."""
    OW = spec.y.shape[3]
    return OW, pool2d.phase_geometry(1, OW, 1, spec.ks[1], 1, spec.st[1], 1, spec.dl[1])[1]


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, y, N, C, M = spec.x, spec.y, spec.N, spec.C, spec.M
    L, kw, s, d, pl = x.shape[3], spec.ks[1], spec.st[1], spec.dl[1], spec.pads[1]
    OW, WQ = _plane(spec)
    assert spec.weights is not None
    ctx.kernel(LABEL)
    taps = np.ascontiguousarray(np.moveaxis(spec.weights[:, :, 0, :], 2, 0))  # [kw][M][C]
    packed, stride = packed_weights(ctx, "packed", taps)
    row = s * WQ  # one channel's planes
    planes = ctx.scratch(C * row * 4)
    split = pool2d.phase_split(ctx, 1, s)
    lines = [
        f"for (int n = 0; n < {N}; ++n) {{",
        f"  memset({planes}, 0, {C * row * 4});",
        f"  for (int c = 0; c < {C}; ++c) {split}({x.sym} + ((size_t)n * {C} + c) * {L}, 1, "
        f"{L}, 0, {pl}, 1, {WQ}, {planes} + (size_t)c * {row});",
    ]
    yn = f"{y.sym} + (size_t)n * {M * OW}"
    res = f"{ctx.x(3).sym} + (size_t)n * {M * OW}" if spec.residual else None
    for j in range(kw):
        phase, off = (j * d) % s, (j * d) // s
        call = GemmCall(
            m=M,
            n=OW,
            k=C,
            a=f"{packed} + {j * stride}",
            b=f"{planes} + {phase * WQ + off}",
            ldb=row,
            c=yn,
            ldc=OW,
            bias_m=spec.bias if j == 0 else None,
            act=spec.act if j == kw - 1 else None,
            residual=res if j == 0 else yn,
            ldr=OW,
        )
        lines.append("  " + gemm_packed_call(ctx, call))
    lines.append("}")
    return "\n".join(lines)


# before the lanes kernel (90), which takes these layers otherwise, and the implicit GEMM (120)
STRATEGY = register(ConvStrategy("taps1d", refuse, emit), rank=85)
