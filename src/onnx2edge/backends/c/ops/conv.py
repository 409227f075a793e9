"""Conv: the op emitter, and the kernel strategies in the order they are preferred.

Each strategy (kernels/conv/conv_spec.py `ConvStrategy`) lives with its kernel: the sparse 1x1 layers
(sparse.py), depthwise planes (conv_depthwise.py), Winograd (winograd.py), the two direct
kernels (conv_lanes.py, conv_direct.py), the GEMM family (conv_gemm.py), and here the N-d
loop. The first one that does not refuse a layer writes it: to add one (an ISA variant, a
blocked NCHWc layout), put it in its own module under kernels/conv/, registered at its rank
(`register(ConvStrategy(...), rank=N)`); `STRATEGIES` below collects them in rank order.
"""

from __future__ import annotations

from ..emitter import NodeContext
from ..kernels.conv import se_fold
from ..kernels.conv.conv_spec import (
    AUTO,
    OFF,
    ConvSpec,
    ConvStrategy,
    conv_check,
    register,
    strategies,
)
from ..kernels.gemm import sparse
from ..strategy import select
from . import register_op
from .common import act_expr

# --------------------------------------------------------------------------------------------
# pruned 1x1 weights (issue 14): kernels/gemm/sparse.py decides on the density and writes the kernel
# --------------------------------------------------------------------------------------------
# auto: where the density pays (sparse.BREAK_EVEN); force: any zero weight; off: dense only
SPARSE = register(
    ConvStrategy(
        "sparse", sparse.refuse_conv1x1, sparse.emit_conv1x1, settings=(AUTO, OFF, "force")
    ),
    rank=20,
)


def _refuse_nd(spec: ConvSpec) -> str | None:
    return "2-D convolutions have their own kernels" if spec.nsp == 2 else None


def _emit_nd(ctx: NodeContext, spec: ConvSpec) -> str:
    """Direct N-d convolution (1-D and 3-D models are rare; clarity over speed)."""
    x, w, y, N, C, M = spec.x, spec.w, spec.y, spec.N, spec.C, spec.M
    ks, st, dl, pads, bias = spec.ks, spec.st, spec.dl, spec.pads, spec.bias
    nsp = len(ks)
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    cg, mg = spec.cg, spec.mg
    act = spec.act
    lines = [
        f"for (int n = 0; n < {N}; ++n)",
        f"for (int m = 0; m < {M}; ++m) {{",
        f"  const int g = m / {mg};",
    ]
    ind = "  "
    for d in range(nsp):
        lines.append(f"{ind}for (int o{d} = 0; o{d} < {out_sp[d]}; ++o{d})")
    lines.append(f"{ind}{{")
    lines.append(f"{ind}  float acc = {bias + '[m]' if bias else '0.0f'};")
    lines.append(f"{ind}  for (int c = 0; c < {cg}; ++c)")
    for d in range(nsp):
        lines.append(f"{ind}  for (int k{d} = 0; k{d} < {ks[d]}; ++k{d})")
    lines.append(f"{ind}  {{")
    conds, xoff, woff = (
        [],
        "((size_t)n * " + str(C) + " + (size_t)g * " + str(cg) + " + c)",
        "((size_t)m * " + str(cg) + " + c)",
    )
    for d in range(nsp):
        lines.append(f"{ind}    const int i{d} = o{d} * {st[d]} - {pads[d]} + k{d} * {dl[d]};")
        conds.append(f"i{d} >= 0 && i{d} < {in_sp[d]}")
        xoff = f"({xoff} * {in_sp[d]} + i{d})"
        woff = f"({woff} * {ks[d]} + k{d})"
    lines.append(f"{ind}    if ({' && '.join(conds)}) acc += {x.sym}[{xoff}] * {w.sym}[{woff}];")
    lines.append(f"{ind}  }}")
    yoff = f"((size_t)n * {M} + m)"
    for d in range(nsp):
        yoff = f"({yoff} * {out_sp[d]} + o{d})"
    lines.append(f"{ind}  {y.sym}[{yoff}] = {act_expr(act, 'acc')};")
    lines.append(f"{ind}}}")
    lines.append("}")
    return "\n".join(lines)


# N-d convolutions other than 2-D: the fallback, so it cannot be switched off
ND_LOOP = register(
    ConvStrategy("nd_loop", _refuse_nd, _emit_nd, fuses_residual=False, settings=(AUTO,)),
    rank=160,
)

# Preference order: the ranks the strategy modules register at (kernels/conv/conv_spec.py
# `register`: nchwc 10, sparse 20 (above), dw_rows 30, depthwise 40, winograd 50, narrow 60,
# stem_lanes 70, stem 80, taps1d 85, lanes 90, direct 100, pointwise 110, the GEMM family 120-150 ending
# with im2col_gemm, nd_loop 160 (above)); the first that does not refuse a layer writes it.
STRATEGIES: tuple[ConvStrategy, ...] = strategies()


@register_op("Conv", check=conv_check)
def conv(ctx: NodeContext) -> str:
    spec = ConvSpec.of(ctx)
    gated = ""
    if se_fold.gate_of(ctx) is not None:  # an NCHW SE gate x * s taken into the weights
        spec, gated = se_fold.gated_spec(ctx, spec)
    if spec.nsp == 1:  # (N, C, L) runs as (N, C, 1, L): the 2-D kernels' speed (Whisper)
        spec = spec.as_2d()
    strategy = select(ctx, STRATEGIES, spec)
    r = ctx.node.inputs[3] if spec.residual else ""
    if strategy.inplace_residual and r and r not in ctx.node.inputs[:3]:
        # the output may take the residual's buffer (residual_alias.py decides)
        ctx.offer_residual(r)
    if gated:
        return gated + "\n" + _emit(ctx, strategy, spec)
    return _emit(ctx, strategy, spec)


def _emit(ctx: NodeContext, strategy: ConvStrategy, spec: ConvSpec) -> str:
    if not spec.residual or strategy.fuses_residual:
        return strategy.emit(ctx, spec)
    # the residual and activation come after the kernel: run it without them, then one pass
    body = strategy.emit(ctx, spec.without_epilogue())
    y, r = spec.y, ctx.x(3)
    return body + (
        f"\nfor (size_t i = 0; i < {y.size}; ++i) {{ const float v = {y.sym}[i] + {r.sym}[i]; "
        f"{y.sym}[i] = {act_expr(spec.act, 'v')}; }}"
    )
