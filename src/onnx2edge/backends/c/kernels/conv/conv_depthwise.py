"""Depthwise 2-D convolution over zero-bordered phase planes (pool2d.py's machinery)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .....semantics.activations import (
    ACTIVATIONS,
    GEMM_CLIP,
    GEMM_HARD_SIGMOID,
    GEMM_HARD_SWISH,
    GEMM_NONE,
    GEMM_RELU,
    Activation,
)
from ...emitter import NodeContext, c_literal
from ...headers import include
from ...ops.common import act_tail, clip_bounds
from ..pool import pool2d
from . import se_pool
from .conv_spec import ConvSpec, ConvStrategy, register

# The activations the depthwise kernels apply in registers (o2e_gemm.h's kinds: the same
# comparisons as o2e_act1_, so a NaN passes): name tag, scalar statement on v, NEON
# expression of a vector. lo, hi: Clip's bounds, or HardSigmoid's alpha and beta.
KIND_TAGS = {
    GEMM_NONE: "",
    GEMM_RELU: "_relu",
    GEMM_CLIP: "_clip",
    GEMM_HARD_SIGMOID: "_hsig",
    GEMM_HARD_SWISH: "_hswish",
}
_CLAMP01 = "t = t < 0.0f ? 0.0f : t; t = t > 1.0f ? 1.0f : t;"
SCALAR_ACT = {
    GEMM_NONE: "",
    GEMM_RELU: "v = v < 0.0f ? 0.0f : v;",
    GEMM_CLIP: "v = v < lo ? lo : (v > hi ? hi : v);",
    GEMM_HARD_SIGMOID: f"{{ float t = v * lo + hi; {_CLAMP01} v = t; }}",
    GEMM_HARD_SWISH: f"{{ float t = v * (1.0f / 6.0f) + 0.5f; {_CLAMP01} v = v * t; }}",
}


def _neon_clamp01(t: str) -> str:
    z, one = "vdupq_n_f32(0.0f)", "vdupq_n_f32(1.0f)"
    inner = f"vbslq_f32(vcltq_f32({t}, {z}), {z}, {t})"
    return f"vbslq_f32(vcgtq_f32({inner}, {one}), {one}, {inner})"


NEON_ACT: dict[int, Callable[[str], str]] = {
    GEMM_NONE: lambda v: v,
    GEMM_RELU: lambda v: f"vbslq_f32(vcltq_f32({v}, vdupq_n_f32(0.0f)), vdupq_n_f32(0.0f), {v})",
    GEMM_CLIP: lambda v: (
        f"vbslq_f32(vcltq_f32({v}, vdupq_n_f32(lo)), vdupq_n_f32(lo), "
        f"vbslq_f32(vcgtq_f32({v}, vdupq_n_f32(hi)), vdupq_n_f32(hi), {v}))"
    ),
    GEMM_HARD_SIGMOID: lambda v: _neon_clamp01(f"vfmaq_n_f32(vdupq_n_f32(hi), {v}, lo)"),
    GEMM_HARD_SWISH: lambda v: (
        f"vmulq_f32({v}, {_neon_clamp01(f'vfmaq_n_f32(vdupq_n_f32(0.5f), {v}, 1.0f / 6.0f)')})"
    ),
}


def register_params(act: Activation | None) -> tuple[int, str, str, Activation | None]:
    """(kind, lo, hi, tail) of a depthwise kernel's fused activation: a kind it applies in
    registers with its lo / hi fields, or GEMM_NONE and the activation left to the tail."""
    kind = GEMM_NONE if act is None else ACTIVATIONS[act.op].gemm_kind
    if act is None or kind not in KIND_TAGS:
        return GEMM_NONE, "0.0f", "0.0f", act
    lo, hi = act.alpha, act.beta
    if kind == GEMM_CLIP:
        lo, hi = clip_bounds(act.alpha, act.beta)
    return kind, c_literal(lo, np.float32), c_literal(hi, np.float32), None


def _dw_kernel(
    ctx: NodeContext,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    kind: int,
    tail: Activation | None = None,
    pool: bool = False,
) -> str:
    """A depthwise kernel specialised for one filter geometry and fused activation; its name.

    Each channel is first split into the phase planes of its zero-bordered padded version
    (pool2d.py: the border is zeroed once per scratch slot, so no tap needs a bounds check,
    and every tap is a unit-stride read whatever the stride). The output is then computed over
    the flattened planes: y[p] = b + Σ w_ij · plane_ij[p + off_ij] is one long contiguous loop
    that vectorises fully even for 7x7 maps (the WQ − OW columns of garbage per row are
    dropped when compacting). The kernel runs over a range of planes (N·C of them), so
    `o2e_parallel_for` can split the channels across threads, each in its own scratch slot.
    kind: the activation table's epilogue kind, one of KIND_TAGS' (lo, hi: its parameters);
    tail: any other activation (SiLU, HardSwish, ...), applied by the kernel to the planes it
    wrote, after them (common.act_tail says why there), not as a pass over y.
    """
    suffix, tail_loop = act_tail(ctx, tail, pool)
    tail_loop = f"\n  {tail_loop}" if tail_loop else ""
    name = f"o2e_dw{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}{KIND_TAGS[kind]}{suffix}"
    include(ctx, "o2e_win2d.h")
    split = pool2d.phase_split(ctx, sh, sw)
    decl, reads = pool2d.tap_refs(kh, kw, sh, sw, dh, dw)
    wide = pool2d.phase_geometry(1, 1, kh, kw, sh, sw, dh, dw)[1] != 1
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    wl = "\n    ".join(f"const float w{i}_{j} = wc[{i * kw + j}];" for i, j in taps)
    acc = " + ".join(f"w{i}_{j} * {r}" for (i, j), r in zip(taps, reads, strict=True))
    # v < 0 ? 0 : v, not v > 0 ? v : 0: a NaN fails the comparison and passes through, as in
    # onnxruntime's Relu and the GEMM epilogue (o2e_act1_)
    act = SCALAR_ACT[kind]
    out = "yw" if wide else "yc"
    scalar = f"float v = b + {acc};\n          {act}\n          {out}[p] = v;"
    # NEON: the same chain per lane - b, then one fused multiply-add per tap in row-major order
    # (what -ffp-contract=fast makes of the scalar sum) - and the same comparisons
    include(ctx, "o2e_intrinsics.h")
    ws = [f"w{i}_{j}" for i, j in taps]
    post = NEON_ACT[kind]
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
  }}{tail_loop}
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
    # the activations the kernel applies in registers; any other at the end of each call
    kind, lo, hi, post = register_params(spec.act)
    pool = se_pool.pool_target(ctx, spec)
    name = _dw_kernel(ctx, kh, kw, sh, sw, dh, dw, kind, post, pool is not None)
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
        "pool": se_pool.claim(ctx, pool),
    }
    n = N * C
    work = n * (H * W + OH * WQ * (kh * kw + 1))
    lines = [pool2d.call_planes(ctx, name, n, work, pf + wf, fields)]
    return "\n".join(lines)


# The residual add runs as a pass after the kernel; activations other than Relu / Clip at the end
# of each kernel call, over its planes (common.act_tail).
STRATEGY = register(ConvStrategy("depthwise", refuse, emit, fuses_residual=False), rank=40)
