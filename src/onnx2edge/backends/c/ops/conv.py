"""Conv: 2-D kernels (depthwise, Winograd, direct, implicit GEMM, im2col + GEMM, sparse 1x1) and
the generic N-d loop."""

from __future__ import annotations

import numpy as np

from ....semantics.conv_geometry import conv_geometry
from ....semantics.fused import has_residual, unfused
from ..emitter import NodeContext
from . import conv_direct, conv_lanes, register_op, sparse, winograd
from .common import act_expr, fused_act
from .conv_depthwise import _depthwise
from .conv_gemm import IMPLICIT_MIN_COLS, _im2col_call, _im2col_rows, implicit_gemm_call
from .conv_spec import conv_check
from .gemm import (
    gemm_call,
    gemm_packed_call,
    packed_weights,
)


@register_op("Conv", check=conv_check)
def conv(ctx: NodeContext) -> str:
    if (sp := sparse.try_conv1x1(ctx)) is not None:  # pruned 1x1 weights (issue 14)
        return sp
    x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
    nsp = x.rank - 2
    N, C = x.shape[:2]
    M = w.shape[0]
    geo = conv_geometry(ctx.node, x.shape, w.shape, y.shape, ctx.graph.opset)
    ks, group, st, dl = list(geo.kernel), geo.group, list(geo.strides), list(geo.dilations)
    pads = list(geo.pads)
    bias = ctx.x(2).sym if ctx.has_input(2) else None
    gemm_path = nsp == 2 and not (group == C and M == C)
    if has_residual(ctx.node) and not gemm_path:
        # the residual and activation come after the kernel: run it without them, then one pass
        act = fused_act(ctx)
        inner = NodeContext(ctx.model, unfused(ctx.node), ctx.step, ctx.scratch_requests)
        body = (_conv2d if nsp == 2 else _conv_nd)(
            inner, x, w, y, N, C, M, ks, group, st, dl, pads, bias
        )
        r = ctx.x(3)
        return body + (
            f"\nfor (size_t i = 0; i < {y.size}; ++i) {{ const float v = {y.sym}[i] + {r.sym}[i]; "
            f"{y.sym}[i] = {act_expr(act, 'v')}; }}"
        )
    if nsp == 2:
        return _conv2d(ctx, x, w, y, N, C, M, ks, group, st, dl, pads, bias)
    return _conv_nd(ctx, x, w, y, N, C, M, ks, group, st, dl, pads, bias)


def _conv2d(ctx, x, w, y, N, C, M, ks, group, st, dl, pads, bias) -> str:  # noqa: ANN001
    H, W = x.shape[2:]
    OH, OW = y.shape[2:]
    kh, kw = ks
    sh, sw = st
    dh, dw = dl
    pt, pl = pads[0], pads[1]
    cg, mg = C // group, M // group
    K = cg * kh * kw
    P = OH * OW
    act = fused_act(ctx)
    if group == C and M == C and cg == 1:
        return _depthwise(ctx, x, w, y, N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl, bias)
    if winograd.applicable(ctx, x, w, y, group, ks, st, dl):
        return winograd.emit(ctx, x, w, y, group, ks, st, dl, pads, bias)
    if conv_lanes.applicable(ctx, x, w, y, group, ks, st, dl):
        return conv_lanes.emit(ctx, x, w, y, ks, st, pads, bias, group)

    if conv_direct.applicable(ctx, x, w, y, group, ks, st, dl):
        return conv_direct.emit(ctx, x, w, y, ks, dl, pads, bias)
    pointwise = (
        kh == 1
        and kw == 1
        and sh == 1
        and sw == 1
        and pt == 0
        and pl == 0
        and pads[2] == 0
        and pads[3] == 0
    )
    lines = []
    # im2col in blocks of output rows: the columns stay cache-sized and bounded (a 9x9 conv
    # at 480x640 would otherwise need a 3 GB matrix)
    for_n = f"for (int n = 0; n < {N}; ++n)\nfor (int g = 0; g < {group}; ++g) {{"
    xin = f"{x.sym} + ((size_t)n * {C} + (size_t)g * {cg}) * {H * W}"
    yout = f"{y.sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {P}"
    wg = f"{w.sym} + (size_t)g * {mg * K}"
    bg = f"{bias} + (size_t)g * {mg}" if bias else "NULL"
    res = None
    if has_residual(ctx.node):
        ctx.kernel("residual add in the GEMM epilogue")
        res = f"{ctx.x(3).sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {P}"
    wc = ctx.const(1)
    packed = None
    if wc is not None and wc.dtype == np.float32:
        # a strided 1x1 convolution reads one input pixel in sh*sw: its im2col is a plain
        # subsampling copy, after which B is read in place (no repacking, no phase planes)
        subsample = kh == 1 and kw == 1 and not any(pads)
        if not pointwise and not subsample and P >= IMPLICIT_MIN_COLS:
            ctx.kernel("implicit GEMM (im2col fused into B packing)")
            packed, stride = packed_weights(ctx, "packed", wc.reshape(group, mg, K))
            return "\n".join(
                [
                    for_n,
                    "  "
                    + implicit_gemm_call(
                        ctx,
                        f"{packed} + (size_t)g * {stride}",
                        mg,
                        P,
                        K,
                        xin,
                        cg,
                        H,
                        W,
                        kh,
                        kw,
                        sh,
                        sw,
                        dh,
                        dw,
                        pt,
                        pl,
                        OW,
                        yout,
                        bg,
                        act,
                        res,
                    ),
                    "}",
                ]
            )
        ctx.kernel(
            "1x1 as GEMM"
            if pointwise
            else "strided 1x1: subsample + GEMM"
            if subsample
            else "im2col + GEMM"
        )
        packed, stride = packed_weights(ctx, "packed", wc.reshape(group, mg, K))

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
            code = [
                _im2col_call(
                    ctx, xin, cg, H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW, oh0, nrows, col
                )
            ]
        if packed is not None:
            code.append(
                gemm_packed_call(
                    ctx,
                    f"{packed} + (size_t)g * {stride}",
                    mg,
                    ncols,
                    K,
                    b_mat,
                    ncols,
                    out,
                    P,
                    bias_m=bg,
                    act=act,
                    residual=r,
                    ldr=P,
                )
            )
        else:
            code.append(
                gemm_call(
                    ctx,
                    mg,
                    ncols,
                    K,
                    wg,
                    K,
                    b_mat,
                    ncols,
                    out,
                    P,
                    bias_m=bg,
                    act=act,
                    residual=r,
                    ldr=P,
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


def _conv_nd(ctx, x, w, y, N, C, M, ks, group, st, dl, pads, bias) -> str:  # noqa: ANN001
    """Direct N-d convolution (1-D and 3-D models are rare; clarity over speed)."""
    nsp = len(ks)
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    cg, mg = C // group, M // group
    act = fused_act(ctx)
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
