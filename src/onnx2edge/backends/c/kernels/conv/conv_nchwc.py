"""Channel-blocked (NCHW16c) 1x1 and depthwise KxK layers on narrow maps (issues 9, 34), and
the SE gate (x * s) inside a chain, or folded into the 1x1 layer that reads its product (the
layer scales its weights by s per image and reads x: nchwc_plan.fold_gates).

backends/c/nchwc_plan.py decides which tensors stay blocked between layers (chains of
depthwise and 1x1 layers on maps of <= MAX_P pixels, MAX_P_DW next to a depthwise layer,
channel counts padded to multiples of 16 where that pays) and ConvSpec.of hands each chain member its layouts
(`spec.layout`). This strategy comes first in STRATEGIES and takes exactly the members: a
blocked tensor has no other reader or writer, so no other strategy ever sees one. The kernels
are in runtime/o2e_nchwc.h.

Why it is faster than the NCHW kernels there: the 1x1 layer needs neither the GEMM's packing
of the input nor o2e_conv1x1.h's transposing store (its tiles are stored as whole vectors),
so it pays on 14x14 maps too; the depthwise layer keeps channels in the lanes, so a 7- or
14-wide row is one register tile instead of a short, edge-heavy plane row.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ...nchwc_plan import BLOCK, NAME, gate_data, padded
from ..gemm.gemm import _use_engine, act_struct
from ..pool import pool2d
from . import se_pool
from .conv_spec import ConvSpec, ConvStrategy, register

HEADER = "o2e_nchwc.h"


def refuse(spec: ConvSpec) -> str | None:
    # the plan checked the layer (nchwc_plan._kind) and its neighbours' layouts
    return None if spec.layout is not None else "not in a channel-blocked chain"


def _bias(ctx: NodeContext, spec: ConvSpec, m: int) -> str:
    """The bias zero-padded to `m` channels (a multiple of BLOCK)."""
    b = np.zeros(m, np.float32)
    if spec.has_bias:  # a constant (nchwc_plan checked): its own symbol is not named
        b[: spec.M] = ctx.const(2).reshape(spec.M)
    return ctx.weight("nc_bias", b)


def _include(ctx: NodeContext) -> None:
    _use_engine(ctx)  # o2e_act, o2e_act1_, o2e_parallel_for
    # a microcontroller conversion runs the scalar loops on every build (device.py): the
    # vector ones reorder the chain's input into a scratch buffer its arena does not hold
    scalar = "#define O2E_NCHWC_SCALAR\n" if ctx.device.is_mcu else ""
    ctx.helper("o2e_nchwc_include", f'{scalar}#include "{HEADER}"\n')
    ctx.require_runtime(HEADER)


def _pointwise(ctx: NodeContext, spec: ConvSpec) -> str:
    role = spec.layout
    assert role is not None
    x, y = spec.x, spec.y
    gate = "NULL"
    if role.gate is not None:  # an SE gate folded in (nchwc_plan.fold_gates): read x, scale w
        x, s = ctx.tensor(role.gate[0]), ctx.tensor(role.gate[1])
        ctx.also_reads(x.name, s.name)
        gate = f"{s.sym} + (size_t)n * {x.shape[1] if s.shape[0] == x.shape[0] else 0}"
    N, Kn = x.shape[:2]
    Mn = spec.M
    # an NCHW side may have any channel count (EfficientNet's 24 and 40): zero-padded
    # weights and bias to whole blocks, the padded input channels reordered as zeros and the
    # padded output channels never stored
    K, M = _up(Kn), _up(Mn)
    P = y.shape[2] * y.shape[3]
    w = np.zeros((M, K), np.float32)
    w[:Mn, :Kn] = ctx.const(1).reshape(Mn, Kn)
    w = w.reshape(M // BLOCK, BLOCK, K).transpose(0, 2, 1)  # [M/16][K][16]
    wsym = ctx.weight("nc_w", np.ascontiguousarray(w))
    bsym = _bias(ctx, spec, M)
    _include(ctx)
    folded = ", SE gate folded" if role.gate is not None else ""
    ctx.kernel(f"1x1, channel blocks ({_sides(role.x, role.y)}){folded}")
    act_c, post = act_struct(spec.act)
    assert not post  # nchwc_plan takes only activations the kernel applies
    res = ctx.x(3).sym if spec.residual else None
    threaded = int(M * K * P >= pool2d.PAR_MIN_WORK and M > 32)
    # an image's stride: a blocked side holds whole blocks (nchwc_plan.padded)
    off = f"(size_t)n * {(M if role.y else Mn) * P}"
    xoff = f"(size_t)n * {(K if role.x else Kn) * P}"
    # the reorder to blocks runs only in the vector build (O2E_NC_VEC), which a --device
    # conversion does not compile (_include: O2E_NCHWC_SCALAR)
    xs = "NULL" if role.x or ctx.device.is_mcu else ctx.scratch(K * P * 4)
    # the gated weights (or, below AVX-512, the gated input: o2e_nchwc_conv1x1)
    ws = "NULL" if role.gate is None else ctx.scratch(max(M, P) * K * 4)
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n) {{",
            f"  const o2e_nc_pw_args a = {{{x.sym} + {xoff}, {wsym}, {bsym}, "
            f"{f'{res} + {off}' if res else 'NULL'}, {y.sym} + {off}, {xs}, {M}, {K}, {P}, "
            f"{int(role.x)}, {int(role.y)}, {act_c}, {Kn}, {Mn}, {gate}, {ws}}};",
            f"  o2e_nchwc_conv1x1(&a, {threaded});",
            "}",
        ]
    )


def _depthwise(ctx: NodeContext, spec: ConvSpec) -> str:
    x, y = spec.x, spec.y
    N, Cn, H, W = x.shape
    C = _up(Cn)  # padding lanes: weights and bias of 0 (o2e_nchwc.h)
    OH, OW = y.shape[2:]
    K = spec.ks[0]
    w = np.zeros((C, K * K), np.float32)
    w[:Cn] = ctx.const(1).reshape(Cn, K * K)
    w = w.reshape(C // BLOCK, BLOCK, K * K).transpose(0, 2, 1)  # [C/16][K*K][16]
    wsym = ctx.weight("nc_w", np.ascontiguousarray(w))
    bsym = _bias(ctx, spec, C)
    _include(ctx)
    pool = se_pool.pool_target(ctx, spec)
    fused = ", SE pool fused" if pool else ""
    ctx.kernel(f"depthwise {K}x{K} stride {spec.st[0]}, channel blocks{fused}")
    act_c, post = act_struct(spec.act)
    assert not post
    threaded = int(C * K * K * OH * OW >= pool2d.PAR_MIN_WORK and C > BLOCK)
    pt, pl = spec.pads[0], spec.pads[1]
    psym = se_pool.claim(ctx, pool)
    poff = f" + (size_t)n * {Cn}" if pool else ""
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n) {{",
            f"  const o2e_nc_dw_args a = {{{x.sym} + (size_t)n * {C * H * W}, {wsym}, {bsym}, "
            f"{y.sym} + (size_t)n * {C * OH * OW}, {C}, {H}, {W}, {OH}, {OW}, "
            f"{spec.st[0]}, {spec.st[1]}, {pt}, {pl}, {act_c}, {K}, {psym}{poff}, {Cn}}};",
            f"  o2e_nchwc_dw(&a, {threaded});",
            "}",
        ]
    )


def global_avgpool(ctx: NodeContext) -> str | None:
    """GlobalAveragePool of a blocked tensor (the chain's exit, nchwc_plan), or None (NCHW)."""
    role = ctx.layout_role
    if role is None or not role.x:
        return None
    x, y = ctx.x(0), ctx.y(0)
    N, Cn, H, W = x.shape
    C = _up(Cn)
    _include(ctx)
    ctx.kernel("channel blocks")
    return (
        f"for (int n = 0; n < {N}; ++n)\n"
        f"  o2e_nchwc_gap({x.sym} + (size_t)n * {C * H * W}, {y.sym} + (size_t)n * {Cn}, "
        f"{C}, {H * W}, {Cn});"
    )


def gate(ctx: NodeContext) -> str | None:
    """An SE block's gating Mul x * s inside a chain (nchwc_plan: x and the product blocked,
    s of [N or 1][C][1][1]), or None (NCHW)."""
    role = ctx.layout_role
    if role is None or role.kind != "gate":
        return None
    d = gate_data(ctx.node, ctx.graph)
    assert d is not None and role.x and role.y
    if role.folded:  # the 1x1 layer reading the product scales its weights instead
        ctx.kernel("SE gate folded into the 1x1 layer")
        return "/* folded into the next 1x1 layer (its weights scaled by the gate) */"
    x, s, y = ctx.x(d), ctx.x(1 - d), ctx.y(0)
    N, Cn, H, W = x.shape
    C = _up(Cn)
    _include(ctx)
    ctx.kernel("SE gate, channel blocks")
    sn = Cn if s.shape[0] == N else 0
    threaded = int(C * H * W >= pool2d.PAR_MIN_WORK and C > BLOCK)
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n) {{",
            f"  const o2e_nc_gate_args a = {{{x.sym} + (size_t)n * {C * H * W}, "
            f"{s.sym} + (size_t)n * {sn}, {y.sym} + (size_t)n * {C * H * W}, {C}, {H * W}, "
            f"{Cn}}};",
            f"  o2e_nchwc_gate(&a, {threaded});",
            "}",
        ]
    )


_up = padded


def _sides(xb: bool, yb: bool) -> str:
    return {(True, True): "in chain", (False, True): "enters", (True, False): "leaves"}[xb, yb]


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    assert spec.layout is not None
    if spec.layout.kind == "depthwise":
        return _depthwise(ctx, spec)
    return _pointwise(ctx, spec)


STRATEGY = register(ConvStrategy(NAME, refuse, emit), rank=10)
