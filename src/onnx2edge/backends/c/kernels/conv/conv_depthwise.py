"""Depthwise 2-D convolution over zero-bordered phase planes (pool2d.py's machinery)."""

from __future__ import annotations

import numpy as np

from .....semantics.activations import ACTIVATIONS, GEMM_CLIP, GEMM_NONE, GEMM_RELU
from ...emitter import NodeContext, c_literal
from ...headers import include
from ...ops.common import act_expr, clip_bounds
from ..pool import pool2d
from .conv_spec import ConvSpec, ConvStrategy


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
    kind: the activation table's epilogue kind, GEMM_NONE, GEMM_RELU or GEMM_CLIP(lo, hi).
    """
    name = f"o2e_dw{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}{('', '_relu', '_clip')[kind]}"
    include(ctx, "o2e_win2d.h")
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
    include(ctx, "o2e_intrinsics.h")
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


def refuse(spec: ConvSpec) -> str | None:
    if spec.nsp != 2 or not spec.depthwise:
        return "not a 2-D depthwise convolution (one filter per channel)"
    return None


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, w, y, N, C = spec.x, spec.w, spec.y, spec.N, spec.C
    H, W = x.shape[2:]
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    dh, dw = spec.dl
    pt, pl, bias = spec.pads[0], spec.pads[1], spec.bias
    act = spec.act
    # the epilogue kinds of the activation table (o2e_gemm.h's numbering) the kernel applies
    # itself; any other activation runs as a loop after it
    kind = GEMM_NONE if act is None else ACTIVATIONS[act.op].gemm_kind
    lo, hi, post = "0.0f", "0.0f", None
    if kind == GEMM_CLIP:
        assert act is not None
        b = clip_bounds(act.alpha, act.beta)
        lo, hi = c_literal(b[0], np.float32), c_literal(b[1], np.float32)
    elif kind != GEMM_RELU:
        kind, post = GEMM_NONE, act
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


# The residual add and the activation other than Relu / Clip run as a pass after the kernel.
STRATEGY = ConvStrategy("depthwise", refuse, emit, fuses_residual=False)
