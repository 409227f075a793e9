"""ConvTranspose: sub-pixel phases as convolutions (2-D, constant weights), else col2im."""

from __future__ import annotations

import numpy as np

from ....semantics.activations import Activation
from ....semantics.conv_geometry import conv_transpose_geometry
from ..emitter import NodeContext, Tensor
from ..kernels.conv.conv_spec import conv_check
from ..kernels.gemm.gemm import (
    GemmCall,
    _use_engine,
    gemm_call,
    gemm_workspace,
    packed_weights,
)
from ..kernels.pool import pool2d
from . import register_op
from .common import act_expr, fused_act


@register_op("ConvTranspose", check=conv_check)
def conv_transpose(ctx: NodeContext) -> str:
    """2-D, constant weights, dilation 1: one convolution per output phase
    (_convtranspose_phases). Otherwise y = col2im(Wᵀ · x): each input pixel scatters a
    weighted kernel into the output."""
    x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
    nsp = x.rank - 2
    N, C = x.shape[:2]
    geo = conv_transpose_geometry(ctx.node, x.shape, w.shape, y.shape, ctx.graph.opset)
    group = geo.group
    mg = w.shape[1]
    M = mg * group
    cg = C // group
    ks = list(w.shape[2:])
    st, dl = list(geo.strides), list(geo.dilations)
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    pads = list(geo.pads)
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
            GemmCall(
                m=K,
                n=P,
                k=cg,
                a=f"{wsym} + (size_t)g * {K * cg}",
                lda=cg,
                b=f"{x.sym} + ((size_t)n * {C} + (size_t)g * {cg}) * {P}",
                ldb=P,
                c=col,
                ldc=P,
            ),
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
    ws = ctx.scratch(gemm_workspace(ctx, len(live) * mg, R * WP, cg), "void")
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
