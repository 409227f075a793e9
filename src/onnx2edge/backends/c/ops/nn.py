"""Convolution, fully connected layers, pooling (normalisations and softmax: norm.py)."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....passes.fuse_activation import Activation
from ....passes.fuse_residual import has_residual
from ..emitter import NodeContext, Tensor, c_literal
from ..gemm_pack import sgemm_workspace_bytes
from . import pool2d, register_op, sparse
from .common import act_expr, clip_bounds, fused_act, strides
from .gemm import (
    MAX_THREADS,
    _use_engine,
    act_struct,
    gemm_call,
    gemm_packed_call,
    packed_weights,
    post_act,
)

FLOAT = ("float", "double")


def _float_input(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype != np.float32:
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 only)"
    return None


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------
def conv_pads(
    node: Node,
    in_sp: tuple[int, ...],
    out_sp: tuple[int, ...],
    k: list[int],
    s: list[int],
    d: list[int],
) -> list[int]:
    """Begin pads then end pads, resolving auto_pad (ONNX Conv spec)."""
    n = len(in_sp)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            total = max((out_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i], 0)
            small = total // 2
            pads[i], pads[i + n] = (
                (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
            )
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    return list(node.attr("pads", [0] * (2 * n)))


def _conv_check(node: Node, graph: Graph) -> str | None:
    if (why := _float_input(node, graph)) is not None:
        return why
    w = graph.type_of(node.inputs[1])
    if w is None or w.shape is None or len(w.shape) < 3:
        return "weights of unknown rank"
    return None


@register_op("Conv", check=_conv_check)
def conv(ctx: NodeContext) -> str:
    if (sp := sparse.try_conv1x1(ctx)) is not None:  # pruned 1x1 weights (issue 14)
        return sp
    x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
    nsp = x.rank - 2
    N, C = x.shape[:2]
    M = w.shape[0]
    ks = list(w.shape[2:])
    group = int(ctx.attr("group", 1))
    st = list(ctx.attr("strides", [1] * nsp))
    dl = list(ctx.attr("dilations", [1] * nsp))
    pads = conv_pads(ctx.node, x.shape[2:], y.shape[2:], ks, st, dl)
    bias = ctx.x(2).sym if ctx.has_input(2) else None
    gemm_path = nsp == 2 and not (group == C and M == C)
    if has_residual(ctx.node) and not gemm_path:
        # the residual and activation come after the kernel: run it without them, then one pass
        act = fused_act(ctx)
        plain = {k: v for k, v in ctx.node.attrs.items() if not k.startswith("o2e_")}
        inner = NodeContext(
            ctx.model, ctx.node.replace(attrs=plain), ctx.step, ctx.scratch_requests
        )
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
    from . import winograd  # 3x3 stride-1 convs with enough channels: ops/winograd.py

    if winograd.applicable(ctx, x, w, y, group, ks, st, dl):
        return winograd.emit(ctx, x, w, y, group, ks, st, dl, pads, bias)
    from . import conv_direct, conv_lanes  # few output channels / 1xk layers: ops/conv_*.py

    if conv_lanes.applicable(ctx, x, w, y, group, ks, st, dl):
        return conv_lanes.emit(ctx, x, w, y, ks, st, pads, bias, group)

    if conv_direct.applicable(ctx, x, w, y, group, ks, st, dl):
        return conv_direct.emit(ctx, x, w, y, ks, dl, pads, bias)
    from . import conv_pointwise  # 1x1 on 7x7 / 14x14 maps: channels in the lanes (issue 9)

    if conv_pointwise.applicable(ctx, x, w, y, group, ks, st, dl, pads):
        return conv_pointwise.emit(ctx, x, w, y, bias)
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


def _dw_kernel(
    ctx: NodeContext, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, kind: int
) -> str:
    """A depthwise kernel specialised for one filter geometry and fused activation; its name.

    Each channel is first split into the phase planes of its zero-bordered padded version
    (pool2d.py: the border is zeroed once per scratch slot, so no tap needs a bounds check,
    and every tap is a unit-stride read whatever the stride). The output is then computed over
    the flattened planes: y[p] = b + Σ w_ij · plane_ij[p + off_ij] is one long contiguous loop
    that vectorises fully even for 7x7 maps (the WQ − OW columns of garbage per row are
    dropped when compacting). The kernel runs over a range of planes (N·C of them), so
    `o2e_parallel_for` can split the channels across threads, each in its own scratch slot.
    kind: 0 none, 1 Relu, 2 Clip(lo, hi).
    """
    name = f"o2e_dw{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}{('', '_relu', '_clip')[kind]}"
    ctx.helper("o2e_win2d_args", pool2d.ARGS)
    split = pool2d.phase_split(ctx, sh, sw)
    decl, reads = pool2d.tap_refs(kh, kw, sh, sw, dh, dw)
    wide = pool2d.phase_geometry(1, 1, kh, kw, sh, sw, dh, dw)[1] != 1
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    wl = "\n    ".join(f"const float w{i}_{j} = wc[{i * kw + j}];" for i, j in taps)
    acc = " + ".join(f"w{i}_{j} * {r}" for (i, j), r in zip(taps, reads, strict=True))
    # v < 0 ? 0 : v, not v > 0 ? v : 0: a NaN fails the comparison and passes through, as in
    # onnxruntime's Relu and the GEMM epilogue (o2e_act1_)
    act = ["", "v = v < 0.0f ? 0.0f : v;", "v = v < lo ? lo : (v > hi ? hi : v);"][kind]
    out = "yw" if wide else "yc"
    scalar = f"float v = b + {acc};\n          {act}\n          {out}[p] = v;"
    # NEON: the same chain per lane - b, then one fused multiply-add per tap in row-major order
    # (what -ffp-contract=fast makes of the scalar sum) - and the same comparisons
    ctx.helper("o2e_intrinsics", pool2d.INTRINSICS)
    ws = [f"w{i}_{j}" for i, j in taps]
    post = [
        lambda v: v,
        lambda v: f"vbslq_f32(vcltq_f32({v}, vdupq_n_f32(0.0f)), vdupq_n_f32(0.0f), {v})",
        lambda v: (
            f"vbslq_f32(vcltq_f32({v}, vdupq_n_f32(lo)), vdupq_n_f32(lo), "
            f"vbslq_f32(vcgtq_f32({v}, vdupq_n_f32(hi)), vdupq_n_f32(hi), {v}))"
        ),
    ][kind]
    loop = pool2d.neon_loop(
        wide,
        reads,
        lambda t: f"vfmaq_n_f32(vdupq_n_f32(b), {t}, {ws[0]})",
        lambda v, t, k: f"vfmaq_n_f32({v}, {t}, {ws[k]})",
        post,
        out,
        scalar,
    )
    compact = pool2d.compact(ctx) if wide else ""
    ctx.helper(
        name,
        f"""
/* depthwise {kh}x{kw} convolution, stride {sh}x{sw}, dilation {dh}x{dw}: one filter per channel,
 * over planes [i0, i1) (nn.py _dw_kernel). */
static void {name}(void *arg, int i0, int i1)
{{
{pool2d.kernel_prologue(sh, sw, "0.0f", wide)}
  {decl}
  const float lo = a->lo, hi = a->hi;
  (void)lo; (void)hi;
  for (int i = i0; i < i1; ++i) {{
    const int c = i % a->C;
    const float *restrict wc = a->w + (size_t)c * {kh * kw};
    const float b = a->bias ? a->bias[c] : 0.0f;
    float *restrict yc = a->y + (size_t)i * OH * OW;
    {wl}
    {split}(a->x + (size_t)i * H * W, H, W, a->pt, a->pl, HQ, WQ, planes);
    {{
      {loop}
    }}
    {compact if wide else "(void)yc;"}
  }}
}}
""",
    )
    return name


def _depthwise(ctx, x, w, y, N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl, bias) -> str:  # noqa: ANN001
    act = fused_act(ctx)
    kind, lo, hi, post = 0, "0.0f", "0.0f", None
    if act is not None and act.op == "Relu":
        kind = 1
    elif act is not None and act.op == "Clip":
        b = clip_bounds(act.alpha, act.beta)
        kind, lo, hi = 2, c_literal(b[0], np.float32), c_literal(b[1], np.float32)
    elif act is not None:
        post = act
    name = _dw_kernel(ctx, kh, kw, sh, sw, dh, dw, kind)
    ctx.kernel("depthwise direct")
    HQ, WQ = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    pf, wf = pool2d.plane_floats(OH, OW, kh, kw, sh, sw, dh, dw)
    fields = {
        "x": x.sym,
        "w": w.sym,
        "bias": bias or "NULL",
        "y": y.sym,
        "C": str(C),
        "H": str(H),
        "W": str(W),
        "OH": str(OH),
        "OW": str(OW),
        "pt": str(pt),
        "pl": str(pl),
        "HQ": str(HQ),
        "WQ": str(WQ),
        "lo": lo,
        "hi": hi,
    }
    n = N * C
    work = n * (H * W + OH * WQ * (kh * kw + 1))
    lines = [pool2d.call_planes(ctx, name, n, work, pf + wf, fields)]
    if post is not None:
        lines.append(
            f"for (size_t i = 0; i < {N * C * OH * OW}; ++i) {{ const float v = {y.sym}[i]; {y.sym}[i] = {act_expr(post, 'v')}; }}"
        )
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


@register_op("ConvTranspose", check=_conv_check)
def conv_transpose(ctx: NodeContext) -> str:
    """2-D, constant weights, dilation 1: one convolution per output phase
    (_convtranspose_phases). Otherwise y = col2im(Wᵀ · x): each input pixel scatters a
    weighted kernel into the output."""
    x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
    nsp = x.rank - 2
    N, C = x.shape[:2]
    group = int(ctx.attr("group", 1))
    mg = w.shape[1]
    M = mg * group
    cg = C // group
    ks = list(w.shape[2:])
    st = list(ctx.attr("strides", [1] * nsp))
    dl = list(ctx.attr("dilations", [1] * nsp))
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    pads = _convtranspose_pads(ctx.node, in_sp, out_sp, ks, st, dl)
    bias = ctx.x(2).sym if ctx.has_input(2) else None
    act = fused_act(ctx)
    wt = ctx.graph.const(ctx.node.inputs[1])
    if (
        nsp == 2
        and wt is not None
        and wt.dtype == np.float32
        and dl == [1, 1]
        and max(st) <= 8
        and y.size > 0
    ):
        return _convtranspose_phases(ctx, x, y, wt, group, st, pads, bias, act)
    P = int(np.prod(in_sp))
    K = mg * int(np.prod(ks))
    # Wᵀ per group: [mg*k][cg], prepared at conversion time
    lines = []
    if wt is not None:
        wsym = ctx.weight("wT", wt.reshape(group, cg, K).transpose(0, 2, 1).copy())
    else:
        wsym = ctx.scratch(group * K * cg * 4)
        lines.append(
            f"for (int g = 0; g < {group}; ++g) for (int c = 0; c < {cg}; ++c) for (int k = 0; k < {K}; ++k) "
            f"{wsym}[((size_t)g * {K} + k) * {cg} + c] = {w.sym}[((size_t)g * {cg} + c) * {K} + k];"
        )
    col = ctx.scratch(K * P * 4)
    lines.append(f"for (int n = 0; n < {N}; ++n)\nfor (int g = 0; g < {group}; ++g) {{")
    lines.append(
        "  "
        + gemm_call(
            ctx,
            K,
            P,
            cg,
            f"{wsym} + (size_t)g * {K * cg}",
            cg,
            f"{x.sym} + ((size_t)n * {C} + (size_t)g * {cg}) * {P}",
            P,
            col,
            P,
        )
    )
    # col2im over N-d
    ysz = int(np.prod(out_sp))
    lines.append(f"  float *yg = {y.sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {ysz};")
    lines.append(f"  for (size_t i = 0; i < (size_t){mg * ysz}; ++i) yg[i] = 0.0f;")
    lines.append(f"  for (int m = 0; m < {mg}; ++m)")
    for d in range(nsp):
        lines.append(f"  for (int k{d} = 0; k{d} < {ks[d]}; ++k{d})")
    for d in range(nsp):
        lines.append(f"  for (int i{d} = 0; i{d} < {in_sp[d]}; ++i{d})")
    lines.append("  {")
    conds = []
    koff, ioff, ooff = "m", "0", "m"
    for d in range(nsp):
        lines.append(f"    const int o{d} = i{d} * {st[d]} - {pads[d]} + k{d} * {dl[d]};")
        conds.append(f"o{d} >= 0 && o{d} < {out_sp[d]}")
        koff = f"({koff} * {ks[d]} + k{d})"
        ioff = f"({ioff} * {in_sp[d]} + i{d})"
        ooff = f"({ooff} * {out_sp[d]} + o{d})"
    lines.append(
        f"    if ({' && '.join(conds)}) yg[{ooff}] += col[(size_t){koff} * {P} + {ioff}];".replace(
            "col[", f"{col}["
        )
    )
    lines.append("  }")
    if bias or act:
        b = f"{bias}[g * {mg} + m]" if bias else "0.0f"
        lines.append(f"  for (int m = 0; m < {mg}; ++m)")
        lines.append(
            f"    for (int i = 0; i < {ysz}; ++i) {{ const float v = yg[m * {ysz} + i] + {b}; yg[m * {ysz} + i] = {act_expr(act, 'v')}; }}"
        )
    lines.append("}")
    return "\n".join(lines)


def _convtranspose_pads(node: Node, in_sp, out_sp, ks, st, dl) -> list[int]:  # noqa: ANN001
    n = len(in_sp)
    auto = node.attr("auto_pad", "NOTSET")
    opad = list(node.attr("output_padding", [0] * n))
    if node.attr("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            total = st[i] * (in_sp[i] - 1) + opad[i] + ((ks[i] - 1) * dl[i] + 1) - out_sp[i]
            total = max(total, 0)
            if auto == "SAME_UPPER":
                pads[i], pads[i + n] = total // 2, total - total // 2
            else:
                pads[i], pads[i + n] = total - total // 2, total // 2
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    return list(node.attr("pads", [0] * (2 * n)))


# Bytes of the phase outputs of one block of rows (all column phases of one row phase): they
# are written by the GEMMs and read right away by the interleave, so they should stay in L2.
DECONV_BLOCK_BYTES = 1 << 20


def _deconv_phase(k: int, s: int, p: int, r: int, out: int) -> tuple[list[int], int, int]:
    """Output phase r (positions o = s·q + r) of a ConvTranspose along one axis:
    (kernel taps in correlation order, first input offset d0, number of outputs Q).

    o = i·s − p + t, so output s·q + r reads input i = q + (r + p − t) / s through the taps t
    with (r + p − t) ≡ 0 (mod s); sorted by increasing offset, they are a correlation
    y[q] = Σ_u w[t_u]·x[q + d0 + u], a stride-1 convolution with pad −d0."""
    taps = sorted((t for t in range(k) if (r + p - t) % s == 0), reverse=True)
    d0 = (r + p - taps[0]) // s if taps else 0
    return taps, d0, max(0, -(-(out - r) // s))


def _convtranspose_phases(
    ctx: NodeContext,
    x: Tensor,
    y: Tensor,
    wt: np.ndarray,
    group: int,
    st: list[int],
    pads: list[int],
    bias: str | None,
    act: Activation | None,
) -> str:
    """2-D ConvTranspose as s_h·s_w ordinary convolutions of the input, one per output phase
    (sub-pixel decomposition): phase (a, b) holds the outputs y[s_h·q + a][s_w·v + b], which a
    stride-1 convolution with the taps of that phase computes (_deconv_phase) - the same
    multiply-adds as the scatter formulation, without its column matrix and scatter-add.

    The input is first copied into a zero-bordered plane per channel, WP columns wide, so a
    tap reads the plane at a constant offset: its contribution to a block of phase rows is a
    GEMM (weights packed at conversion time) whose B operand is the plane itself, read in
    place, with output rows WP wide (columns past the phase's width are garbage, never
    stored). Phases share offsets (with 3x3 / stride 2, all four read offset (0, 0)), so the
    phases' outputs are stacked in an order that makes each offset's phases contiguous, and
    one GEMM per offset computes them all: M = phases x channels rows for one packing of B.
    Later taps accumulate through the GEMM's in-place residual (R = C). Blocks of rows keep
    the phase outputs in cache until the interleave writes y's rows, each output once, adding
    the bias and applying the activation."""
    from itertools import permutations  # noqa: PLC0415

    N, C, H, W = x.shape
    M, (OH, OW) = y.shape[1], y.shape[2:]
    cg, mg = C // group, wt.shape[1]
    (sh, sw), (kh, kw) = st, wt.shape[2:]
    rows = [_deconv_phase(kh, sh, pads[0], a, OH) for a in range(sh)]
    cols = [_deconv_phase(kw, sw, pads[1], b, OW) for b in range(sw)]
    ctx.kernel("sub-pixel phases (GEMM per tap offset)")
    live = [
        (a, b)
        for a in range(sh)
        for b in range(sw)
        if rows[a][0] and cols[b][0] and rows[a][2] and cols[b][2]
    ]
    Qh0 = rows[0][2]
    # the padded plane: plane row PT + i and column PL + j hold x[i][j]; phase output (q, v)
    # reads through tap (u, t) the plane at [q + d0 + u + PT][v + e0 + t + PL]; all phases
    # of a block compute the same number of rows (the most any has)
    PT = max([0] + [-rows[a][1] for a, _ in live])
    PL = max([0] + [-cols[b][1] for _, b in live])
    WP = max([W + PL] + [cols[b][2] + cols[b][1] + len(cols[b][0]) - 1 + PL for _, b in live])
    # a block's B runs on into the next plane row by up to its column offset: one spare row
    HP = max([H + PT] + [Qh0 + rows[a][1] + len(rows[a][0]) - 1 + PT for a, _ in live]) + 1
    # plane offset -> (phase, kernel tap) reading it
    users: dict[tuple[int, int], list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    for a, b in live:
        (ta, d0, _), (tb, e0, _) = rows[a], cols[b]
        for u, i in enumerate(ta):
            for t, j in enumerate(tb):
                users.setdefault((d0 + u, e0 + t), []).append(((a, b), (i, j)))

    def runs(order: tuple[tuple[int, int], ...]) -> list[tuple[tuple[int, int], int, int]]:
        """(offset, first, end) stacking positions of the GEMMs for a phase order."""
        pos = {ph: k for k, ph in enumerate(order)}
        out = []
        for off, us in users.items():
            ks = sorted(pos[ph] for ph, _ in us)
            start = ks[0]
            for prev, k in zip(ks, ks[1:] + [None], strict=True):
                if k != prev + 1:
                    out.append((off, start, prev + 1))
                    start = k
        return out

    def plan(order: tuple[tuple[int, int], ...]) -> list[tuple[tuple[int, int], int, int, bool]]:
        """The GEMMs, widest first: phases [s0, s1) of the order through one offset; phases
        written for the first time (first) start their sums, the others add to theirs."""
        out, done = [], set()
        for off, p0, p1 in sorted(runs(order), key=lambda r: r[1] - r[2]):
            s0 = p0
            while s0 < p1:
                s1 = s0 + 1
                while s1 < p1 and (s1 in done) == (s0 in done):
                    s1 += 1
                out.append((off, s0, s1, s0 not in done))
                s0 = s1
            done.update(range(p0, p1))
        return out

    orders = permutations(live) if len(live) <= 6 else [tuple(live)]
    order = min(orders, key=lambda o: len(plan(o)))
    gemms = plan(order)
    tap_of = {(off, ph): tap for off, us in users.items() for ph, tap in us}
    wg = wt.reshape(group, cg, mg, kh, kw)
    packed = []
    for k, (off, s0, s1, _) in enumerate(gemms):
        # A[g][(phase, m)][c] = W[g·cg + c][m][tap of that phase at this offset]
        mats = np.concatenate(
            [
                wg[:, :, :, i, j].transpose(0, 2, 1)
                for i, j in (tap_of[off, ph] for ph in order[s0:s1])
            ],
            axis=1,
        )
        packed.append(packed_weights(ctx, f"off{k}", np.ascontiguousarray(mats)))
    R = max(1, min(Qh0, DECONV_BLOCK_BYTES // (4 * mg * WP * max(len(live), 1))))
    plane = ctx.scratch(C * HP * WP * 4)  # one image at a time
    buf = ctx.scratch(max(len(live) * mg * R * WP, 1) * 4)
    ws = ctx.scratch(sgemm_workspace_bytes(len(live) * mg, R * WP, cg, MAX_THREADS), "void")
    _use_engine(ctx)
    il = _deconv_interleave(ctx, sw, [q for _, _, q in cols], WP, OH * OW, sh * OW, act)
    pad = _deconv_pad_kernel(ctx, H, W, HP, WP, PT, PL)
    yg = f"{y.sym} + ((size_t)n * {M} + (size_t)g * {mg}) * {OH * OW}"
    bg = f"{bias} + (size_t)g * {mg}" if bias else "NULL"
    no_act = "(o2e_act){0, 0.0f, 0.0f}"

    def block(q0: str, nr: int, nrs: list[int]) -> list[str]:
        """Phase rows [q0, q0 + nr) (nrs[a] of them stored for row phase a)."""
        code, ld = [], nr * WP
        for ((du, dv), s0, s1, first), (sym, stride) in zip(gemms, packed, strict=True):
            b_mat = f"{plane} + (size_t)g * {cg * HP * WP} + (size_t)(({q0}) + {du + PT}) * {WP} + {dv + PL}"
            c_mat = f"{buf} + (size_t){s0 * mg} * {ld}"
            code.append(
                f"o2e_sgemm_packed({(s1 - s0) * mg}, {ld}, {cg}, {sym} + (size_t)g * {stride}, {b_mat}, "
                f"{HP * WP}, {c_mat}, {ld}, 0, NULL, NULL, {'NULL' if first else c_mat}, {ld}, {no_act}, {ws});"
            )
        for a in range(sh):
            if nrs[a] > 0:
                ps = [
                    f"{buf} + (size_t){order.index((a, b)) * mg} * {ld}"
                    if (a, b) in order
                    else "NULL"
                    for b in range(sw)
                ]
                code.append(
                    _deconv_interleave_call(
                        il,
                        f"{yg} + (size_t)({sh} * ({q0}) + {a}) * {OW}",
                        ps,
                        bg,
                        mg,
                        nrs[a],
                        ld,
                        [q for _, _, q in cols],
                    )
                )
        return code

    lines = [
        f"for (int n = 0; n < {N}; ++n) {{",
        "  " + _deconv_pad_call(pad, f"{x.sym} + (size_t)n * {C * H * W}", plane, C, H * W),
        f"  for (int g = 0; g < {group}; ++g) {{",
    ]
    # full blocks: R rows of every row phase; then the rest, where phases may differ by a row
    full = min(q for _, _, q in rows) // R * R
    if full:
        lines.append(f"    for (int q0 = 0; q0 < {full}; q0 += {R}) {{")
        lines += ["      " + c for c in block("q0", R, [R] * sh)]
        lines.append("    }")
    for q0 in range(full, Qh0, R):
        lines += [
            "    " + c
            for c in block(str(q0), min(R, Qh0 - q0), [min(R, q - q0) for _, _, q in rows])
        ]
    lines += ["  }", "}"]
    return "\n".join(lines)


def _deconv_pad_kernel(ctx: NodeContext, H: int, W: int, HP: int, WP: int, PT: int, PL: int) -> str:
    """The C kernel copying channels [c0, c1) into their zero-bordered planes; its name."""
    name = f"o2e_deconv_pad_{H}x{W}_{HP}x{WP}_{PT}_{PL}"
    ctx.helper("o2e_deconv_pad_args", DECONV_PAD_ARGS)
    return ctx.helper(
        name,
        f"""
/* ConvTranspose (nn.py _convtranspose_phases): channels [c0, c1) of a {H}x{W} input into
 * {HP}x{WP} planes, x[i][j] at [{PT} + i][{PL} + j], zeros around. */
static void {name}(void *arg, int c0, int c1)
{{
  const o2e_deconv_pad_args *a = (const o2e_deconv_pad_args *)arg;
  for (int c = c0; c < c1; ++c) {{
    const float *restrict xc = a->x + (size_t)c * {H * W};
    float *restrict pc = a->p + (size_t)c * {HP * WP};
    for (int k = 0; k < {PT * WP + PL}; ++k) pc[k] = 0.0f;
    for (int i = 0; i < {H}; ++i) {{
      float *restrict pr = pc + (size_t)({PT} + i) * {WP} + {PL};
      for (int j = 0; j < {W}; ++j) pr[j] = xc[(size_t)i * {W} + j];
      for (int j = {W}; j < {WP}; ++j) pr[j] = 0.0f; /* right border, then the next row's left */
    }}
    for (int k = ({PT + H}) * {WP} + {PL}; k < {HP * WP}; ++k) pc[k] = 0.0f;
  }}
}}
""",
    )


DECONV_PAD_ARGS = r"""
typedef struct {
  const float *x;
  float *p;
} o2e_deconv_pad_args;
"""


def _deconv_pad_call(name: str, x: str, p: str, C: int, HW: int) -> str:
    init = f"o2e_deconv_pad_args a = {{{x}, {p}}};"
    if C > 1 and C * HW >= pool2d.PAR_MIN_WORK:
        return f"{{ {init} o2e_parallel_for({C}, {name}, &a); }}"
    return f"{{ {init} {name}(&a, 0, {C}); }}"


def _deconv_interleave(
    ctx: NodeContext, sw: int, Qw: list[int], WP: int, ys: int, yrs: int, act: Activation | None
) -> str:
    """The C kernel writing one block of phase rows (WP apart) into y's rows, column phase b
    at columns sw·v + b (items: channel x row of the block), adding the bias and applying the
    activation; its name."""
    import zlib  # noqa: PLC0415

    ctx.helper("o2e_deconv_il_args", DECONV_IL_ARGS)
    val = act_expr(act, "s")
    body = []
    if sw == 2:
        # both column phases in one loop: gcc turns it into vector interleaves
        body.append(f"""    if (a->p[0] && a->p[1]) {{
      const float *restrict p0 = a->p[0] + (size_t)m * a->ld + (size_t)q * {WP};
      const float *restrict p1 = a->p[1] + (size_t)m * a->ld + (size_t)q * {WP};
      for (int v = 0; v < {Qw[1]}; ++v) {{
        {{ const float s = p0[v] + bm; yr[2 * v] = {val}; }}
        {{ const float s = p1[v] + bm; yr[2 * v + 1] = {val}; }}
      }}
      for (int v = {Qw[1]}; v < {Qw[0]}; ++v) {{ const float s = p0[v] + bm; yr[2 * v] = {val}; }}
    }} else""")
    n = "".join(f"b == {b} ? {q} : " for b, q in enumerate(Qw[:-1])) + str(Qw[-1])
    body.append(f"""    for (int b = 0; b < {sw}; ++b) {{
      const int n = {n};
      if (a->p[b]) {{
        const float *restrict pb = a->p[b] + (size_t)m * a->ld + (size_t)q * {WP};
        for (int v = 0; v < n; ++v) {{ const float s = pb[v] + bm; yr[{sw} * v + b] = {val}; }}
      }} else {{
        for (int v = 0; v < n; ++v) yr[{sw} * v + b] = f;
      }}
    }}""")
    code = f"""
/* ConvTranspose (nn.py _convtranspose_phases): phase rows of channels x rows [i0, i1) of a
 * block into y's rows, column phase b at columns {sw}*v + b. */
static void NAME(void *arg, int i0, int i1)
{{
  const o2e_deconv_il_args *a = (const o2e_deconv_il_args *)arg;
  for (int i = i0; i < i1; ++i) {{
    const int m = i / a->nr, q = i % a->nr;
    float *restrict yr = a->y + (size_t)m * {ys} + (size_t)q * {yrs};
    const float bm = a->bias ? a->bias[m] : 0.0f;
    const float f = {act_expr(act, "bm")}; /* phases no tap reaches */
    (void)f;
{chr(10).join(body)}
  }}
}}
"""
    name = f"o2e_deconv_interleave_s{sw}_{zlib.crc32(code.encode()):08x}"
    return ctx.helper(name, code.replace("NAME", name))


DECONV_IL_ARGS = r"""
/* Arguments of a ConvTranspose interleave (nn.py): y points at the first output row of the
 * block in channel 0; p[b] at column phase b's rows ([channel][row][column], channels ld
 * floats apart), NULL for a phase no tap reaches, which holds act(bias[channel]). nr rows of
 * each channel are written. */
typedef struct {
  float *y;
  const float *p[8];
  const float *bias;
  size_t ld;
  int nr;
} o2e_deconv_il_args;
"""


def _deconv_interleave_call(
    name: str, ybase: str, ps: list[str], bias: str, mg: int, nr: int, ld: int, Qw: list[int]
) -> str:
    init = f"o2e_deconv_il_args a = {{{ybase}, {{{', '.join(ps)}}}, {bias}, {ld}, {nr}}};"
    items = mg * nr
    if items > 1 and items * sum(Qw) >= pool2d.PAR_MIN_WORK:
        return f"{{ {init} o2e_parallel_for({items}, {name}, &a); }}"
    return f"{{ {init} {name}(&a, 0, {items}); }}"


# --------------------------------------------------------------------------------------------
# Gemm / MatMul
# --------------------------------------------------------------------------------------------
def _gemm_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if node.op_type == "MatMul" and t is not None and t.dtype.kind in "iu":
        return None  # integer MatMul: quant.integer_matmul
    if t is not None and t.dtype not in (np.float32,):
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 only)"
    return None


@register_op("Gemm", check=_gemm_check)
def gemm(ctx: NodeContext) -> str:
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if not ta and (bw := ctx.const(1)) is not None and ctx.x(0).rank == 2:  # pruned (issue 14)
        sp = sparse.try_fc(
            ctx,
            ctx.x(0),
            bw if tb else bw.T,
            ctx.y(0),
            *ctx.x(0).shape,
            bw.shape[0] if tb else bw.shape[1],
            alpha=alpha,
            beta=beta,
        )
        if sp is not None:
            return sp
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    lines = []
    a_sym, b_sym = a.sym, b.sym
    if ta:
        a_sym = ctx.scratch(M * K * 4)
        lines.append(
            f"for (int i = 0; i < {M}; ++i) for (int k = 0; k < {K}; ++k) {a_sym}[i * {K} + k] = {a.sym}[k * {M} + i];"
        )
    bc = ctx.const(1)
    cc = ctx.const(2)
    simple_bias = not ctx.has_input(2) or beta == 0.0 or (cc is not None and cc.size in (1, N))
    if bc is not None and M == 1 and not ta and bc.dtype == np.float32 and simple_bias:
        return _fc_gemv(ctx, a.sym, bc if tb else bc.T, alpha, beta, y, K, N)
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
    bias_n = None
    c_full = None
    if ctx.has_input(2) and beta != 0.0:
        c = ctx.x(2)
        cc = ctx.const(2)
        if cc is not None and (cc.size == N and (cc.ndim == 1 or cc.shape[0] == 1)):
            bias_n = ctx.weight("bias", (cc.reshape(N) * np.float32(beta)).astype(np.float32))
        elif cc is not None and cc.size == 1:
            bias_n = ctx.weight("bias", np.full(N, float(cc.reshape(-1)[0]) * beta, np.float32))
        else:
            c_full = c
    act = fused_act(ctx)
    if alpha != 1.0 or c_full is not None:
        lines.append(gemm_call(ctx, M, N, K, a_sym, K, b_sym, N, y.sym, N, b_const=bc is not None))
        from .common import broadcast_strides

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
        lines.append(
            gemm_call(
                ctx,
                M,
                N,
                K,
                a_sym,
                K,
                b_sym,
                N,
                y.sym,
                N,
                bias_n=bias_n,
                act=act,
                b_const=bc is not None,
            )
        )
    return "\n".join(lines)


def _fc_gemv(
    ctx: NodeContext,
    x: str,
    w: np.ndarray,
    alpha: float,
    beta: float,
    y: Tensor,
    K: int,
    N: int,
    with_bias: bool = True,
) -> str:
    """Fully connected layer at batch 1: y[N] = W[N][K]·x[K] + b, with W packed at conversion.

    Written as Yᵀ = W·xᵀ so the constant matrix is the packed A operand and N = 1 takes the
    engine's matrix-vector path."""
    # Views until a copy is needed: a 2 GB layer must not be copied three times on the way.
    wv = np.asarray(w, dtype=np.float32)
    if alpha != 1.0:
        wv = wv * np.float32(alpha)
    bias = None
    if with_bias and ctx.has_input(2) and beta != 0.0:
        cc = ctx.const(2)
        if cc is None or cc.size not in (1, N):
            return "#error unsupported Gemm bias"  # guarded by _gemm_check
        bias = ctx.weight(
            "bias",
            np.broadcast_to(cc.reshape(-1).astype(np.float32) * np.float32(beta), (N,)).copy(),
        )
    blocks = -(-N // FC_NB)
    if blocks * FC_NB <= N * FC_MAX_PAD and _all_finite(wv.reshape(N, K)):
        ctx.kernel("fully connected, zero inputs skipped")
        # block q: its K rows of FC_NB weights, contiguous (o2e_fc_skip_zeros); outputs past N
        # are zero padding
        wt = np.zeros((blocks, K, FC_NB), np.float32)
        for q in range(blocks):
            rows = wv.reshape(N, K)[q * FC_NB : (q + 1) * FC_NB]
            wt[q, :, : rows.shape[0]] = rows.T
        blocked = ctx.weight("wt", wt)
        nz = ctx.scratch(K * 4, "int")
        act = fused_act(ctx)
        st, post = act_struct(act)
        _use_engine(ctx)
        return (
            f"o2e_fc_skip_zeros({N}, {K}, {blocked}, {x}, {bias or 'NULL'}, {y.sym}, {st}, {nz});"
            + post_act(act, post, 1, N, y.sym, N)
        )
    ctx.kernel("fully connected as packed GEMV")
    packed, _ = packed_weights(ctx, "packed", wv.reshape(1, N, K))
    return gemm_packed_call(ctx, packed, N, 1, K, x, 1, y.sym, 1, bias_m=bias, act=fused_act(ctx))


def _all_finite(w: np.ndarray, rows: int = 1024) -> bool:
    """np.isfinite(w).all() without a boolean copy of a large weight."""
    return all(np.isfinite(w[i : i + rows]).all() for i in range(0, w.shape[0], rows))


# Outputs per weight block of o2e_fc_skip_zeros (O2E_FC_NB), and the most zero padding that
# layout may add (as a factor of N): narrower layers keep the packed GEMV.
FC_NB = 256
FC_MAX_PAD = 1.1


@register_op("MatMul", check=_gemm_check)
def matmul(ctx: NodeContext) -> str:
    if ctx.x(0).dtype.kind in "iu":
        from .quant import integer_matmul  # numpy.matmul with wrap-around

        return integer_matmul(ctx)
    a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
    ash, bsh = list(a.shape), list(b.shape)
    if len(ash) == 1:
        ash = [1, ash[0]]
    if len(bsh) == 1:
        bsh = [bsh[0], 1]
    M, K = ash[-2:]
    N = bsh[-1]
    batch = list(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
    nb = int(np.prod(batch)) if batch else 1
    act = fused_act(ctx)
    bc = ctx.const(1)
    if len(bsh) == 2 and nb * M == a.size // K and bc is not None:  # pruned (issue 14)
        sp = sparse.try_fc(ctx, a, bc.reshape(K, N).T, y, nb * M, K, N, with_bias=False)
        if sp is not None:
            return sp
    # B constant and 2-D: fold the batch into M (one big GEMM); one row is a packed GEMV
    if len(bsh) == 2 and nb * M == 1 and bc is not None and bc.dtype == np.float32:
        return _fc_gemv(ctx, a.sym, bc.reshape(K, N).T, 1.0, 0.0, y, K, N, with_bias=False)
    if len(bsh) == 2 and nb * M == a.size // K:
        return gemm_call(
            ctx, nb * M, N, K, a.sym, K, b.sym, N, y.sym, N, act=act, b_const=bc is not None
        )
    a_st = _batch_strides(ash[:-2], batch, M * K)
    b_st = _batch_strides(bsh[:-2], batch, K * N)
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
            M,
            N,
            K,
            f"{a.sym} + {ao}",
            K,
            f"{b.sym} + {bo}",
            N,
            f"{y.sym} + (size_t)bi * {M * N}",
            N,
            act=act,
        )
    )
    lines.append("}")
    return "\n".join(lines)


def _batch_strides(shape: list[int], batch: list[int], mat: int) -> list[int]:
    pad = [1] * (len(batch) - len(shape)) + shape
    st = strides(tuple(pad)) if pad else []
    return [0 if pad[d] == 1 and batch[d] != 1 else st[d] * mat for d in range(len(batch))]


# --------------------------------------------------------------------------------------------
# pooling
# --------------------------------------------------------------------------------------------
def _pool_check(node: Node, graph: Graph) -> str | None:
    """MaxPool takes every float type and int8 / uint8 (opset 12); the averages float types only."""
    from .dtypes import is_float

    t = graph.type_of(node.inputs[0])
    if t is None:
        return None
    ok = is_float(t.dtype) or (node.op_type == "MaxPool" and t.dtype.name in ("int8", "uint8"))
    if not ok or t.dtype.name.startswith(("float8", "float4")):
        return f"{node.op_type} on {t.dtype.name} is not supported"
    return None


def _pool_types(ctx: NodeContext) -> tuple[str, str, str]:
    """(compute C type, libm suffix, element loader) for the pooled tensor: float16 / bfloat16 are
    pooled in float, as numpy does (ops/dtypes.py)."""
    from .dtypes import compute_ctype, load_expr

    x = ctx.x(0)
    ct = compute_ctype(x.dtype)
    return ct, "" if ct == "double" else "f", lambda ref: load_expr(ctx, x.dtype, ref)


@register_op("MaxPool", "AveragePool", "LpPool", check=_pool_check)
def pool(ctx: NodeContext) -> str:
    from .dtypes import store_expr

    if (fast := pool2d.pool(ctx)) is not None:  # float32 2-D MaxPool / AveragePool
        return fast
    x, y = ctx.x(0), ctx.y(0)
    op = ctx.node.op_type
    ct, F, load = _pool_types(ctx)
    flt = ct in FLOAT
    nsp = x.rank - 2
    N, C = x.shape[:2]
    ks = list(ctx.attr("kernel_shape"))
    st = list(ctx.attr("strides", [1] * nsp))
    dl = list(ctx.attr("dilations", [1] * nsp))
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    pads = conv_pads(ctx.node, in_sp, out_sp, ks, st, dl)
    include_pad = int(ctx.attr("count_include_pad", 0))
    p = int(ctx.attr("p", 2))
    want_idx = op == "MaxPool" and ctx.has_output(1)
    lines = [
        f"for (int nc = 0; nc < {N * C}; ++nc) {{",
        f"  const {x.ctype} *xc = {x.sym} + (size_t)nc * {int(np.prod(in_sp))};",
    ]
    for d in range(nsp):
        lines.append(f"  for (int o{d} = 0; o{d} < {out_sp[d]}; ++o{d})")
    lines.append("  {")
    init = "-INFINITY" if op == "MaxPool" and flt else "0"
    lines.append(f"    {ct} acc = {init}; int cnt = 0; long best = -1;")
    lines.append("    (void)cnt; (void)best;")
    for d in range(nsp):
        lines.append(f"    for (int k{d} = 0; k{d} < {ks[d]}; ++k{d})")
    lines.append("    {")
    conds, off = [], "0"
    for d in range(nsp):
        lines.append(f"      const int i{d} = o{d} * {st[d]} - {pads[d]} + k{d} * {dl[d]};")
        conds.append(f"i{d} >= 0 && i{d} < {in_sp[d]}")
        off = f"({off} * {in_sp[d]} + i{d})"
    # positions in the padded region (inside pads) count for count_include_pad
    inpad = " && ".join(
        f"i{d} >= -{pads[d]} && i{d} < {in_sp[d] + pads[d + nsp]}" for d in range(nsp)
    )
    lines.append(f"      if ({' && '.join(conds)}) {{")
    lines.append(f"        const {ct} v = {load(f'xc[{off}]')};")
    if op == "MaxPool":
        # the first maximum wins; storage_order 1 numbers the indices column-major (MaxPool spec)
        idx = off
        if int(ctx.attr("storage_order", 0)):
            idx = f"i{nsp - 1}"
            for d in reversed(range(nsp - 1)):
                idx = f"({idx} * {in_sp[d]} + i{d})"
        lines.append(f"        if (best < 0 || v > acc) {{ acc = v; best = {idx}; }}")
    elif op == "AveragePool":
        lines.append("        acc += v; ++cnt;")
    else:
        lines.append(f"        acc += {f'fabs{F}(v)' if p == 1 else f'pow{F}(fabs{F}(v), {p})'};")
    lines.append("      }")
    if op == "AveragePool" and include_pad:
        lines.append(f"      else if ({inpad}) ++cnt;")
    lines.append("    }")
    yoff = "0"
    for d in range(nsp):
        yoff = f"({yoff} * {out_sp[d]} + o{d})"
    res = {
        "MaxPool": "acc",
        "AveragePool": "(cnt ? acc / cnt : 0)",
        "LpPool": "acc" if p == 1 else f"pow{F}(acc, ({ct})1 / {p})",
    }[op]
    lines.append(
        f"    {y.sym}[(size_t)nc * {int(np.prod(out_sp))} + {yoff}] = {store_expr(ctx, y.dtype, res, src=ct)};"
    )
    if want_idx:
        lines.append(
            f"    {ctx.y(1).sym}[(size_t)nc * {int(np.prod(out_sp))} + {yoff}] = (int64_t)nc * {int(np.prod(in_sp))} + best;"
        )
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


@register_op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", check=_pool_check)
def global_pool(ctx: NodeContext) -> str:
    from .dtypes import store_expr

    if (fast := pool2d.global_pool(ctx)) is not None:  # float32 GlobalAveragePool
        return fast
    x, y = ctx.x(0), ctx.y(0)
    ct, F, load = _pool_types(ctx)
    NC = x.shape[0] * x.shape[1]
    S = int(np.prod(x.shape[2:]))
    op = ctx.node.op_type
    if op == "GlobalAveragePool":
        body, res = "acc += v;", f"acc / {S}"
    elif op == "GlobalMaxPool":  # NaN propagates from the first element, as in the reference
        body, res = "if (i == 0 || v > acc) acc = v;", "acc"
    else:
        p = int(ctx.attr("p", 2))
        body, res = f"acc += pow{F}(fabs{F}(v), {p});", f"pow{F}(acc, ({ct})1 / {p})"
    init = "-INFINITY" if op == "GlobalMaxPool" and ct in FLOAT else "0"
    return f"""for (int nc = 0; nc < {NC}; ++nc) {{
  const {x.ctype} *xc = {x.sym} + (size_t)nc * {S};
  {ct} acc = {init};
  for (int i = 0; i < {S}; ++i) {{ const {ct} v = {load("xc[i]")}; {body} }}
  {y.sym}[nc] = {store_expr(ctx, y.dtype, res, src=ct)};
}}"""
