"""Depthwise 2-D convolution over a ring of padded input rows (issue 9: MobileNets).

The plane kernel (conv_depthwise.py) copies a whole channel into zero-bordered phase planes,
computes a "wide" output over them and compacts its rows into y: for the 56x56 .. 112x112
maps of MobileNet's depthwise layers that is two extra passes over the channel (the zero fill
and the compaction) and a working set (planes + wide output: 100 KB for 112x112) that spills
L1. Here each input row is copied once, as it is first needed, into a ring of kh row slots
(zero-bordered, and for a column stride of 2 split into its even / odd columns, so every tap
is a unit-stride read); each output row is then computed straight into y from the kh slots
its window covers (rows above / below the input read a zero row). The working set is
(kh + 1) padded rows: a few KB, in L1, and y is written once.

Each output row is one vector loop over its columns: AVX-512 (16 lanes, the last block
masked), AVX2 (8, masked store), NEON (4 per vector, the tail through a small buffer), and
the portable loop. Every lane computes b + w00·t00 + w01·t01 + ... as a chain of fused
multiply-adds in row-major tap order, like the plane kernel. Narrow maps (rows shorter than
a vector) keep the plane kernel, whose flat loop fills whole vectors across rows.
"""

from __future__ import annotations

from .....semantics.activations import (
    GEMM_CLIP,
    GEMM_HARD_SIGMOID,
    GEMM_HARD_SWISH,
    GEMM_NONE,
    GEMM_RELU,
    Activation,
)
from ...emitter import NodeContext
from ...headers import include
from ...ops.common import act_tail
from ..pool import pool2d
from . import se_pool
from .conv_depthwise import KIND_TAGS, NEON_ACT, SCALAR_ACT, register_params
from .conv_spec import ConvSpec, ConvStrategy

# Output rows shorter than this keep the plane kernel (conv_depthwise.py): one row per vector
# would leave most lanes empty (7x7: 7 of 16), while its flat loop runs across rows.
MIN_OW = 16
MAX_K = 7  # taps are unrolled: kh·kw of them
_SLACK = 16  # floats past each row buffer's last needed column: one AVX-512 vector


def _rup16(n: int) -> int:
    return (n + 15) // 16 * 16


def row_floats(OW: int, kw: int, sw: int) -> int:
    """Floats of one phase of a padded row buffer: the columns the taps read plus slack for
    the whole-vector loads of the last block; a multiple of 16 (64-byte aligned slots)."""
    return _rup16(OW + (kw - 1) // sw + _SLACK)


def _fill_row(ctx: NodeContext, sw: int) -> str:
    """C helper copying input row s (W floats) into the padded row buffer d (its sw phases
    RW floats apart); only columns the taps read are written, so the zero border stays."""
    name = f"o2e_dwr_fill_s{sw}"
    if sw == 1:
        copy = pool2d.copy_row(ctx)
        body = f"""  /* padded column q = iw + pl; the taps read q < OW + kw - 1 = need */
  const int n = W < need - pl ? W : need - pl;
  if (n > 0) {copy}(d + pl, s, n);"""
    else:
        include(ctx, "o2e_deinterleave2.h")
        body = """  /* padded column iw + pl goes to phase (iw + pl) % 2 at (iw + pl) / 2; the taps read
   * columns < need of each phase */
  const int m = W < 2 * need - pl ? W : 2 * need - pl;
  float *restrict d1 = d + RW;
  if (pl % 2 == 0) {
    if (m > 0) o2e_deinterleave2(d + pl / 2, d1 + pl / 2, s, m);
  } else if (m > 0) {
    d1[pl / 2] = s[0];
    if (m > 1) o2e_deinterleave2(d + (pl + 1) / 2, d1 + (pl + 1) / 2, s + 1, m - 1);
  }"""
    return ctx.helper(
        name,
        f"""
/* One input row into a zero-bordered row buffer (conv_dwrows.py), column stride {sw}. */
static void {name}(float *restrict d, const float *restrict s, int W, int pl, int need, int RW)
{{
  (void)RW;
{body}
}}
""",
    )


def _vector_rows(kh: int, kw: int, sw: int, kind: int) -> dict[str, str]:
    """The per-ISA bodies of the loop over one output row's columns (the C of each #if arm)."""
    taps = [(i, j) for i in range(kh) for j in range(kw)]

    def ref(i: int, j: int) -> str:
        return f"r{i}_{j % sw}" + (f" + {j // sw}" if j // sw else "")

    def chain(load: str, fma: str, first: str) -> list[str]:
        lines = [f"v = {first};"]
        lines += [f"v = {fma.format(load.format(ref(i, j)), f'w{i}_{j}')};" for i, j in taps]
        return lines

    avx512 = chain("_mm512_loadu_ps({} + ow)", "_mm512_fmadd_ps({}, _mm512_set1_ps({}), v)", "vb")
    avx2 = chain("_mm256_loadu_ps({} + ow)", "_mm256_fmadd_ps({}, _mm256_set1_ps({}), v)", "vb")
    neon = chain("vld1q_f32({} + ow)", "vfmaq_n_f32(v, {}, {})", "vb")
    # max(lo, v) / min(hi, v) with the bound first: x86 returns the second operand when either
    # is NaN, so a NaN passes through as in the scalar v < 0 ? 0 : v (and -0 stays -0)
    # HardSigmoid / HardSwish: t clamped to [0, 1] the same way (a NaN t passes), lo / hi are
    # HardSigmoid's alpha / beta
    clamp = "t = {p}_max_ps(zero, {p}_min_ps({p}_set1_ps(1.0f), t));"
    x86_act = {
        GEMM_NONE: "",
        GEMM_RELU: "v = {p}_max_ps(zero, v);",
        GEMM_CLIP: "v = {p}_max_ps(vlo, {p}_min_ps(vhi, v));",
        GEMM_HARD_SIGMOID: "{{ {T} t = {p}_fmadd_ps(v, vlo, vhi); " + clamp + " v = t; }}",
        GEMM_HARD_SWISH: (
            "{{ {T} t = {p}_fmadd_ps(v, {p}_set1_ps(1.0f / 6.0f), {p}_set1_ps(0.5f)); "
            + clamp
            + " v = {p}_mul_ps(v, t); }}"
        ),
    }[kind]
    neon_act = {
        GEMM_NONE: "",
        GEMM_RELU: "v = vbslq_f32(vcltq_f32(v, zero), zero, v);",
        GEMM_CLIP: "v = vbslq_f32(vcltq_f32(v, vlo), vlo, vbslq_f32(vcgtq_f32(v, vhi), vhi, v));",
    }.get(kind) or f"v = {NEON_ACT[kind]('v')};"
    acc = " + ".join(
        f"w{i}_{j} * r{i}_{j % sw}[ow{f' + {j // sw}' if j // sw else ''}]" for i, j in taps
    )
    scalar_act = SCALAR_ACT[kind]
    j512 = "\n      ".join(avx512 + [x86_act.format(p="_mm512", T="__m512")])
    j256 = "\n      ".join(avx2 + [x86_act.format(p="_mm256", T="__m256")])
    jneon = "\n      ".join(neon + [neon_act])
    return {
        "avx512": f"""const __m512 vb = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    (void)zero; (void)vlo; (void)vhi;
    for (int ow = 0; ow < OW; ow += 16) {{
      __m512 v;
      {j512}
      if (ow + 16 <= OW) _mm512_storeu_ps(yr + ow, v);
      else _mm512_mask_storeu_ps(yr + ow, (__mmask16)((1u << (OW - ow)) - 1u), v);
    }}""",
        "avx2": f"""const __m256 vb = _mm256_set1_ps(b), zero = _mm256_setzero_ps();
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    (void)zero; (void)vlo; (void)vhi;
    for (int ow = 0; ow < OW; ow += 8) {{
      __m256 v;
      {j256}
      if (ow + 8 <= OW) _mm256_storeu_ps(yr + ow, v);
      else _mm256_maskstore_ps(yr + ow, _mm256_cmpgt_epi32(_mm256_set1_epi32(OW - ow),
          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
    }}""",
        "neon": f"""const float32x4_t vb = vdupq_n_f32(b), zero = vdupq_n_f32(0.0f);
    const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
    (void)zero; (void)vlo; (void)vhi;
    for (int ow = 0; ow < OW; ow += 4) {{
      float32x4_t v;
      {jneon}
      if (ow + 4 <= OW) vst1q_f32(yr + ow, v);
      else {{ /* the last 1..3 columns: y has no slack */
        float t[4];
        vst1q_f32(t, v);
        for (int k = 0; ow + k < OW; ++k) yr[ow + k] = t[k];
      }}
    }}""",
        "portable": f"""for (int ow = 0; ow < OW; ++ow) {{
      float v = b + {acc};
      {scalar_act}
      yr[ow] = v;
    }}""",
    }


def _kernel(
    ctx: NodeContext,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    kind: int,
    tail: Activation | None,
    pool: bool = False,
) -> str:
    """The row-ring depthwise kernel for one filter geometry and fused activation; its name.

    kind: the activation table's epilogue kind, one of KIND_TAGS' (lo, hi: its parameters);
    tail: any other activation (SiLU, HardSwish, ...), applied by the kernel to the planes it
    wrote, after them (common.act_tail says why there), not as a pass over y; per row, a
    28-wide row left 12 columns to the loop's scalar remainder."""
    suffix, tail_loop = act_tail(ctx, tail, pool)
    tail_loop = f"\n  {tail_loop}" if tail_loop else ""
    name = f"o2e_dwrows{kh}x{kw}_s{sh}x{sw}{KIND_TAGS[kind]}{suffix}"
    include(ctx, "o2e_win2d.h")
    include(ctx, "o2e_intrinsics.h")
    fill = _fill_row(ctx, sw)
    body = _vector_rows(kh, kw, sw, kind)
    wl = "\n    ".join(
        f"const float w{i}_{j} = wc[{i * kw + j}];" for i in range(kh) for j in range(kw)
    )
    rows = "\n    ".join(
        f"const float *restrict r{i}_{b} = rows[{i}] + {b} * RW;"
        for i in range(kh)
        for b in sorted({j % sw for j in range(kw)})  # the phases the taps read
    )
    ctx.helper(
        name,
        f"""
/* depthwise {kh}x{kw} convolution, stride {sh}x{sw}, over planes [i0, i1), from a ring of
 * {kh} zero-bordered input rows (conv_dwrows.py). a->WQ: floats per phase of a row buffer. */
static void {name}(void *arg, int i0, int i1)
{{
  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, pt = a->pt, pl = a->pl, RW = a->WQ;
  const int need = OW + {(kw - 1) // sw}; /* columns of each phase the taps read */
  const float lo = a->lo, hi = a->hi;
  float *restrict ring = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const float *zrow = ring + (size_t){kh * sw} * RW; /* rows outside the input */
  (void)lo; (void)hi;
  for (size_t k = 0; k < (size_t){(kh + 1) * sw} * RW; ++k) ring[k] = 0.0f;
  for (int i = i0; i < i1; ++i) {{
    const int c = i % a->C;
    const float *restrict wc = a->w + (size_t)c * {kh * kw};
    const float b = a->bias ? a->bias[c] : 0.0f;
    const float *restrict xc = a->x + (size_t)i * H * W;
    float *restrict yc = a->y + (size_t)i * OH * OW;
    int tag[{kh}]; /* the input row each ring slot holds (-1: none yet) */
    {wl}
    for (int k = 0; k < {kh}; ++k) tag[k] = -1;
    for (int oh = 0; oh < OH; ++oh) {{
    const float *rows[{kh}];
    for (int t = 0; t < {kh}; ++t) {{
      const int ih = oh * {sh} - pt + t;
      if (ih < 0 || ih >= H) {{
        rows[t] = zrow;
        continue;
      }}
      float *slot = ring + (size_t)(ih % {kh}) * {sw} * RW;
      if (tag[ih % {kh}] != ih) {{
        {fill}(slot, xc + (size_t)ih * W, W, pl, need, RW);
        tag[ih % {kh}] = ih;
      }}
      rows[t] = slot;
    }}
    {{
    float *restrict yr = yc + (size_t)oh * OW;
    {rows}
#if defined(__AVX512F__)
    {body["avx512"]}
#elif defined(__ARM_NEON) && defined(__aarch64__)
    {body["neon"]}
#elif defined(__AVX2__) && defined(__FMA__)
    {body["avx2"]}
#else
    {body["portable"]}
#endif
    }}
    }}
  }}{tail_loop}
}}
""",
    )
    return name


def refuse(spec: ConvSpec) -> str | None:
    if spec.nsp != 2 or not spec.depthwise:
        return "not a 2-D depthwise convolution (one filter per channel)"
    kh, kw = spec.ks
    if spec.dl != [1, 1]:
        return "dilated (the plane kernel takes it)"
    if spec.st[0] not in (1, 2) or spec.st[1] not in (1, 2):
        return "stride other than 1 or 2"
    if kh > MAX_K or kw > MAX_K:
        return f"kernel larger than {MAX_K}x{MAX_K}"
    if spec.y.shape[3] < MIN_OW:
        return f"output rows narrower than {MIN_OW} (the plane kernel fills whole vectors)"
    if spec.pads[0] >= kh or spec.pads[1] >= kw:
        return "padding as wide as the kernel"
    return None


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, w, y, N, C = spec.x, spec.w, spec.y, spec.N, spec.C
    H, W = x.shape[2:]
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    # the activations the kernel applies in registers; any other at the end of each call
    kind, lo, hi, post = register_params(spec.act)
    pool = se_pool.pool_target(ctx, spec)
    name = _kernel(ctx, kh, kw, sh, sw, kind, post, pool is not None)
    ctx.kernel("depthwise rows")
    RW = row_floats(OW, kw, sw)
    fields = {
        "x": x.sym,
        "w": w.sym,
        "bias": spec.bias or "NULL",
        "y": y.sym,
        "C": str(C),
        "H": str(H),
        "W": str(W),
        "OH": str(OH),
        "OW": str(OW),
        "pt": str(spec.pads[0]),
        "pl": str(spec.pads[1]),
        "HQ": "0",
        "WQ": str(RW),
        "lo": lo,
        "hi": hi,
        "pool": se_pool.claim(ctx, pool),
    }
    n = N * C
    work = n * (H * W + OH * OW * (kh * kw + 1))
    lines = [pool2d.call_planes(ctx, name, n, work, (kh + 1) * sw * RW, fields)]
    return "\n".join(lines)


# The residual add runs as a pass after the kernel; activations other than Relu / Clip at the end
# of each kernel call, over its planes (common.act_tail).
STRATEGY = ConvStrategy("dw_rows", refuse, emit, fuses_residual=False)
