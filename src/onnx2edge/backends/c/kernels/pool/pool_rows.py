"""Separable MaxPool / AveragePool for float32 NCHW: a horizontal max (sum) along each input
row, then a vertical max (sum) over the window's rows (ops/pool.py tries `pool` first, then
pool2d.py's phase planes).

The phase-plane kernel of pool2d.py copies every channel into its phase planes and then reads
each of the kh·kw taps of every output: for SqueezeNet's pool1 (3x3 / 2 on 96x111x111) that is
a 49 KB copy per channel (out of L1) and 9 plane reads per output, about twice onnxruntime's
time. A max is separable: max over the window = max over its rows of each row's max over its
columns. Here every input row needed is read once, straight from the input, and its row maxima
h[ow] = max_j x[r][ow·sw − pl + j] are computed in blocks of V outputs (stride 2: two vector
loads deinterleaved by permutes, AVX-512 vpermt2ps, AVX2 shufps + vpermpd, NEON ld2); each
output row is then the max of kh row-maxima rows, kept in a ring of kh rows (a few KB, in L1),
so rows shared by overlapping windows (stride < kh) are computed once.

Edges: a block whose reads leave the row (left / right padding, ceil_mode, the row's tail)
reads with masked loads filling NaN (AVX-512) or from a NaN padded copy of its span (other
targets); window rows outside the input are skipped. Output rows are written in whole blocks
(the garbage tail of a row is overwritten by the next row) except at the plane's end.

NaN: a NaN tap is ignored, as C's fmaxf does: a window gives NaN only when all its taps inside
the input are NaN; the same on every target (o2e_maxp, AVX-512DQ vrangeps, NEON fmaxnm; edge
lanes outside the input load as NaN, so padding is ignored by the same rule). onnxruntime's
MaxPool (MLAS) has no consistent rule: depending on the NaN's tap it returns NaN, the other
taps' max or even -FLT_MAX (checked with onnxruntime 1.31); the other taps' max is what it
returns most often. The sign of a max of +0 and -0 may differ between targets.
"""

from __future__ import annotations

import numpy as np

from .....semantics.pooling import pool_attrs
from ...emitter import NodeContext
from ...headers import include
from .pool2d import _divisors, call_planes, refuse_2d
from .pool_spec import PoolSpec

# Output positions per block: one AVX-512 register, two AVX2 / NEON registers... (see _BLOCK)
# Inputs from this size on are prefetched ahead (ab_nodes, native, 1 thread: -10..-35 % on
# 0.7-5 MB inputs; +30 % on 170-260 KB ones, which the previous node leaves in L2 anyway).
# Re-measured in-model from 384 KB to 1 MB (native, 1 thread, interleaved builds): GoogLeNet's
# 0.4-0.8 MB pools 0.81-0.95x without it (pool4/3x3_s2 0.63x), Inception-v3's 17x17x768 ones
# 0.81-0.99x; those of 1.5 MB and more kept it (GoogLeNet pool3, SqueezeNet pool1/4/8: 0.98-
# 1.21x slower without it).
PREFETCH_MIN_BYTES = 1024 * 1024
MAXB = 64  # blocks of 16 outputs per row at most (the lane masks' array)
_V = {"avx512": 16, "avx2": 8, "neon": 8, "c": 8}


# The reduction per op: AVX-512 / AVX2 / NEON / scalar combine, the fill of lanes outside the
# input (ignored by the combine), and the value of a window of padding only.
OPS = {
    "MaxPool": dict(
        f16="o2e_maxp16",
        f8="o2e_maxp8",
        fn="vmaxnmq_f32",
        fc="o2e_maxp",
        fill="NAN",
        empty="-INFINITY",
    ),
    "AveragePool": dict(
        f16="_mm512_add_ps",
        f8="_mm256_add_ps",
        fn="vaddq_f32",
        fc="o2e_addf",
        fill="0.0f",
        empty="0.0f",
    ),
}


def _span(kw: int, sw: int, v: int) -> int:
    """Floats a block of v outputs reads from its first tap on (the vector loads included)."""
    if sw == 2:
        return (kw - 1) - (kw - 1) % 2 + 2 * v
    return kw - 1 + v


def _loads512(kw: int, sw: int) -> list[int]:
    """Offsets of the 16-float loads of one AVX-512 block, from its first column."""
    if sw == 1:
        return list(range(kw))
    return [o for b in range(0, kw, 2) for o in (b, b + 16)]


def _block_avx512(kw: int, sw: int, masked: bool, f: str) -> list[str]:
    """Statements computing v16 (16 row maxima) from s; masked: load l uses the lane mask
    m[l] (lanes outside the row load as NaN)."""
    offs = _loads512(kw, sw)

    def load(off: int) -> str:
        if masked:
            return f"_mm512_mask_loadu_ps(fill, (__mmask16)m[{offs.index(off)}], s + {off})"
        return f"_mm512_loadu_ps(s + {off})"

    lines: list[str] = []
    taps: list[str] = []
    if sw == 1:
        taps = [load(j) for j in range(kw)]
    else:
        for b in range(0, kw, 2):
            lines.append(f"const __m512 l{b} = {load(b)}, h{b} = {load(b + 16)};")
            taps.append(f"_mm512_permutex2var_ps(l{b}, even, h{b})")
            if b + 1 < kw:
                taps.append(f"_mm512_permutex2var_ps(l{b}, odd, h{b})")
    lines.append(f"__m512 v16 = {taps[0]};")
    lines += [f"v16 = {f}(v16, {t});" for t in taps[1:]]
    return lines


def _block_avx2(kw: int, sw: int, f: str, masked: bool = False) -> list[str]:
    """Statements computing v8 (8 row maxima) from s; masked: lanes outside the row [0, W)
    (c = the block's first column) load as `fill`."""

    def load(off: int) -> str:
        if masked:
            return f"o2e_ld8m(s + {off}, c + {off}, W, fill)"
        return f"_mm256_loadu_ps(s + {off})"

    lines: list[str] = []
    taps: list[str] = []
    if sw == 1:
        taps = [load(j) for j in range(kw)]
    else:
        for b in range(0, kw, 2):
            lines.append(f"const __m256 l{b} = {load(b)}, h{b} = {load(b + 8)};")
            for k, sel in ((0, "2, 0, 2, 0"), (1, "3, 1, 3, 1")):
                if b + k < kw:
                    taps.append(
                        "_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd("
                        f"_mm256_shuffle_ps(l{b}, h{b}, _MM_SHUFFLE({sel}))), _MM_SHUFFLE(3, 1, 2, 0)))"
                    )
    lines.append(f"__m256 v8 = {taps[0]};")
    lines += [f"v8 = {f}(v8, {t});" for t in taps[1:]]
    return lines


def _block_neon(kw: int, sw: int, f: str) -> list[str]:
    """Statements computing va, vb (2 x 4 row maxima) from s."""
    lines: list[str] = []
    for half, off in (("a", 0), ("b", 4 * sw)):
        taps: list[str] = []
        if sw == 1:
            taps = [f"vld1q_f32(s + {off + j})" for j in range(kw)]
        else:
            for b in range(0, kw, 2):
                lines.append(f"const float32x4x2_t d{half}{b} = vld2q_f32(s + {off + b});")
                taps.append(f"d{half}{b}.val[0]")
                if b + 1 < kw:
                    taps.append(f"d{half}{b}.val[1]")
        lines.append(f"float32x4_t v{half} = {taps[0]};")
        lines += [f"v{half} = {f}(v{half}, {t});" for t in taps[1:]]
    return lines


def _kernel(ctx: NodeContext, op: str, kh: int, kw: int, sh: int, sw: int, pf: bool) -> str:
    """The C kernel for one op and window geometry (dilation 1, sw 1 or 2): its name. pf:
    prefetch the input ahead (see PREFETCH_MIN_BYTES)."""
    name = f"o2e_{op[:3].lower()}pool_rows{kh}x{kw}_s{sh}x{sw}{'_pf' if pf else ''}"
    o = OPS[op]
    avg = op == "AveragePool"
    div = dict.fromkeys(("d16", "d8", "dn", "dc"), "")
    if avg:  # y = sum / (count of the row * count of the column), as pool2d.py divides
        div = dict(
            d16="v = _mm512_div_ps(v, _mm512_mul_ps(_mm512_set1_ps(dr), _mm512_loadu_ps(dc + o)));",
            d8="v = _mm256_div_ps(v, _mm256_mul_ps(_mm256_set1_ps(dr), _mm256_loadu_ps(dc + o)));",
            dn="v = vdivq_f32(v, vmulq_f32(vdupq_n_f32(dr), vld1q_f32(dc + o)));",
            dc="v = v / (dr * dc[o]);",
        )
    prefetch = (
        """#if O2E_POOL_PF > 0
          /* the lines O2E_POOL_PF floats ahead: the next plane's rows on small maps, whose
           * short streams the hardware prefetcher picks up late */
          for (size_t k = (size_t)(xr - a->x) + O2E_POOL_PF, e = k + W; k < e; k += 16)
            if (k < xn) __builtin_prefetch(a->x + k);
#endif"""
        if pf
        else ""
    )
    include(ctx, "o2e_win2d.h")
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_maxp.h")
    sp512, sp256, spn, spc = (_span(kw, sw, _V[k]) for k in ("avx512", "avx2", "neon", "c"))
    ind = "\n      "
    b512 = ind.join(_block_avx512(kw, sw, False, o["f16"]))
    b512m = ind.join(_block_avx512(kw, sw, True, o["f16"]))
    b256 = ind.join(_block_avx2(kw, sw, o["f8"]))
    b256m = ind.join(_block_avx2(kw, sw, o["f8"], masked=True))
    bneon = ind.join(_block_neon(kw, sw, o["fn"]))
    nl = len(_loads512(kw, sw))
    offs = ", ".join(map(str, _loads512(kw, sw)))
    ctx.helper(
        name,
        f"""
/* {op} {kh}x{kw}, stride {sh}x{sw}, separable (pool_rows.py): h = row maxima (sums) of V outputs
 * per block, straight from the input row x (W floats) at first column c = ow0*{sw} - pl. */
static inline void {name}_h(float *restrict h, const float *restrict x, int W, int pl, int OW,
    const unsigned short *mk, size_t lim)
{{
#if defined(__AVX512F__)
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 fill = _mm512_set1_ps({o["fill"]}); /* ignored by the combine */
  (void)even; (void)odd; (void)fill; (void)W;
  for (int ow0 = 0; ow0 < OW; ow0 += 16) {{
    const int c = ow0 * {sw} - pl;
    const float *s = x + c;
    const unsigned short *m = mk + (ow0 / 16) * {nl};
    if (c >= 0 && (size_t)c + {sp512} <= lim) {{
      {b512}
      _mm512_storeu_ps(h + ow0, v16);
    }} else {{ /* edge block: lanes outside the row load as the fill (masked loads do not fault) */
      {b512m}
      _mm512_storeu_ps(h + ow0, v16);
    }}
  }}
#elif defined(__AVX2__) && defined(__FMA__)
  (void)mk;
  for (int ow0 = 0; ow0 < OW; ow0 += 8) {{
    const int c = ow0 * {sw} - pl;
    const float *s = x + c;
    if (c >= 0 && (size_t)c + {sp256} <= lim) {{
      {b256}
      _mm256_storeu_ps(h + ow0, v8);
    }} else {{ /* edge block: lanes outside the row load as the fill (no copy: a vector load
                * of scalar stores would stall on store forwarding) */
      const __m256 fill = _mm256_set1_ps({o["fill"]});
      {b256m}
      _mm256_storeu_ps(h + ow0, v8);
    }}
  }}
#else
  (void)mk;
#if defined(__ARM_NEON) && defined(__aarch64__)
  enum {{ V = 8, SPAN = {spn} }};
#else
  enum {{ V = 8, SPAN = {spc} }};
#endif
  float t[SPAN];
  for (int ow0 = 0; ow0 < OW; ow0 += V) {{
    const int c = ow0 * {sw} - pl;
    const int edge = c < 0 || (size_t)c + SPAN > lim;
    const float *s = edge ? t : x + c;
    if (edge) /* edge block: read a copy of its span, the fill outside the row */
      for (int k = 0; k < SPAN; ++k) t[k] = c + k >= 0 && c + k < W ? x[c + k] : {o["fill"]};
    {{
#if defined(__ARM_NEON) && defined(__aarch64__)
      {bneon}
      vst1q_f32(h + ow0, va);
      vst1q_f32(h + ow0 + 4, vb);
#else
      for (int i = 0; i < V; ++i) {{
        float v = s[i * {sw}];
        for (int j = 1; j < {kw}; ++j) v = {o["fc"]}(v, s[i * {sw} + j]);
        h[ow0 + i] = v;
      }}
#endif
    }}
  }}
#endif
}}

/* y[0, n) = max (sum / (dr * dc)) over rows rows[0..nr) at [0, n), as whole blocks when `full`
 * (the block may write past n into positions rewritten later), else exactly n floats. */
static inline void {name}_v(float *restrict y, const float *const *rows, int nr, int n, int full,
    float dr, const float *dc)
{{
  (void)dr; (void)dc;
#if defined(__AVX512F__)
  for (int o = 0; o < n; o += 16) {{
    __m512 v = _mm512_loadu_ps(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = {o["f16"]}(v, _mm512_loadu_ps(rows[r] + o));
    {div["d16"]}
    if (full || o + 16 <= n) _mm512_storeu_ps(y + o, v);
    else _mm512_mask_storeu_ps(y + o, (__mmask16)((1u << (n - o)) - 1u), v);
  }}
#elif defined(__AVX2__) && defined(__FMA__)
  for (int o = 0; o < n; o += 8) {{
    __m256 v = _mm256_loadu_ps(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = {o["f8"]}(v, _mm256_loadu_ps(rows[r] + o));
    {div["d8"]}
    if (full || o + 8 <= n) _mm256_storeu_ps(y + o, v);
    else {{
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - o), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      _mm256_maskstore_ps(y + o, m, v);
    }}
  }}
#elif defined(__ARM_NEON) && defined(__aarch64__)
  int o = 0;
  for (; o + 4 <= n || (full && o < n); o += 4) {{
    float32x4_t v = vld1q_f32(rows[0] + o);
    for (int r = 1; r < nr; ++r) v = {o["fn"]}(v, vld1q_f32(rows[r] + o));
    {div["dn"]}
    vst1q_f32(y + o, v);
  }}
  for (; o < n; ++o) {{
    float v = rows[0][o];
    for (int r = 1; r < nr; ++r) v = {o["fc"]}(v, rows[r][o]);
    {div["dc"]}
    y[o] = v;
  }}
#else
  (void)full;
  for (int o = 0; o < n; ++o) {{
    float v = rows[0][o];
    for (int r = 1; r < nr; ++r) v = {o["fc"]}(v, rows[r][o]);
    {div["dc"]}
    y[o] = v;
  }}
#endif
}}

/* over planes [i0, i1): each needed input row's maxima go to a ring of {kh} rows of OWp floats
 * (this thread's scratch slot) once; each output row is the max of its window's rows. */
static void {name}(void *arg, int i0, int i1)
{{
  static const int offs[{nl}] = {{{offs}}};
  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, pt = a->pt, pl = a->pl;
  const int OWp = a->WQ; /* ring row stride: OW rounded up to whole blocks */
  float *restrict ring = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  /* AVX-512: the lane masks of every block's loads, the same for every row */
#if defined(__AVX512F__)
  unsigned short mk[{MAXB} * {nl}];
  for (int b = 0; b * 16 < OW; ++b)
    for (int l = 0; l < {nl}; ++l) mk[b * {nl} + l] = o2e_lanes16(b * 16 * {sw} - pl + offs[l], W);
#else
  const unsigned short *mk = NULL;
  (void)offs;
#endif
  const size_t xn = (size_t)a->C * H * W; /* C: the number of planes here */
  const int tail_ok = (OW - 1) * {sw} - pl + {kw} <= W;
  for (int i = i0; i < i1; ++i) {{
    const float *restrict x = a->x + (size_t)i * H * W;
    float *restrict y = a->y + (size_t)i * OH * OW;
    int done = -1; /* rows below done + 1 are in the ring (or no longer needed) */
    for (int oh = 0; oh < OH; ++oh) {{
      const int r0 = oh * {sh} - pt;
      const int lo = r0 > 0 ? r0 : 0, hi = r0 + {kh} < H ? r0 + {kh} : H;
      const float *rows[{kh + 1}] = {{0}}; /* one spare: kh = 1 keeps gcc's bounds check quiet */
      float *yr = y + (size_t)oh * OW;
      if (hi <= lo) {{ /* the window covers padding only */
        for (int o = 0; o < OW; ++o) yr[o] = {o["empty"]};
        continue;
      }}
      for (int r = lo; r < hi; ++r) {{
        float *h = ring + (size_t)(r % {kh}) * OWp;
        if (r > done) {{
          const float *xr = x + (size_t)r * W;
{prefetch}
          /* floats a block may read from the row start: on into the next row (whose values
           * reach only lanes past OW) when no window overhangs the row's right end */
          {name}_h(h, xr, W, pl, OW, mk, tail_ok ? xn - (size_t)(xr - a->x) : (size_t)W);
        }}
        rows[r - lo] = h;
      }}
      if (hi - 1 > done) done = hi - 1;
      {name}_v(yr, rows, hi - lo, OW, (size_t)oh * OW + OWp <= (size_t)OH * OW,
          a->dr ? a->dr[oh] : 1.0f, a->dc);
    }}
  }}
}}
""",
    )
    return name


def refuse(spec: PoolSpec) -> str | None:
    """Why the row kernels do not take a pool (pool2d.py's planes, then the generic loop, take
    it), None when they do."""
    if (why := refuse_2d(spec)) is not None:
        return why
    g = spec.geom
    out = (spec.y.shape[2], spec.y.shape[3])
    return _refuse_rows(spec.op, out, g.kernel, g.strides, g.dilations, g.pads)


def emit(ctx: NodeContext, spec: PoolSpec) -> str:
    """MaxPool / AveragePool on float32 NCHW by rows."""
    geo = spec.geom
    x, y = ctx.x(0), ctx.y(0)
    op = ctx.node.op_type
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    (kh, kw), (sh, sw), (dh, dw), pads = geo.kernel, geo.strides, geo.dilations, geo.pads
    divisors = None
    if op == "AveragePool":
        inc = pool_attrs(ctx.node, ctx.graph.opset).count_include_pad
        dr = _divisors(H, OH, kh, sh, dh, pads[0], pads[2], inc)
        dc = _divisors(W, OW, kw, sw, dw, pads[1], pads[3], inc)
        # a window entirely outside the input sums to 0: divide by 1 (the generic loop's cnt ? : 0)
        divisors = np.where(dr > 0, dr, 1).astype(np.float32), np.where(dc > 0, dc, 1)
    return _rows(
        ctx, op, (N, C, H, W), (OH, OW), (kh, kw), (sh, sw), (dh, dw), tuple(pads), divisors
    )


def _refuse_rows(
    op: str,
    out: tuple[int, int],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    pads: tuple[int, ...],
) -> str | None:
    """The geometry the row kernels do not handle: dilation, a column stride above 2, a window
    wider than 8 columns or taller than 16 rows, a pad as wide as the window."""
    (kh, kw), sw = kernel, strides[1]
    if tuple(dilations) != (1, 1):
        return "dilation"
    if sw not in (1, 2):
        return f"column stride {sw} (1 or 2)"
    if kw > 8 or kh > 16:
        return f"window {kh}x{kw} (at most 16x8)"
    if out[1] > 16 * MAXB:
        return f"output rows of {out[1]} columns (at most {16 * MAXB})"
    if max(pads[1], pads[3]) >= kw or max(pads[0], pads[2]) >= kh:
        return "windows of padding only (left to the phase planes)"
    if op == "AveragePool" and out[1] <= 8 and kw <= 3:
        # narrow maps: the planes' one flat loop over the whole map wins (ab_nodes, native,
        # Inception-v3 Mixed_7c 3x3 on 2048x8x8: rows 1.15x the planes' time)
        return "AveragePool on maps of <= 8 columns (the phase planes' flat loop wins)"
    return None


def _rows(
    ctx: NodeContext,
    op: str,
    shape: tuple[int, int, int, int],
    out: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, ...],
    divisors: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """C statements for a float32 NCHW MaxPool / AveragePool by rows (a geometry
    `_refuse_rows` takes). divisors: AveragePool's taps counted per output row and column."""
    assert _refuse_rows(op, out, kernel, strides, dilations, pads) is None
    (kh, kw), (sh, sw) = kernel, strides
    N, C, H, W = shape
    OH, OW = out
    name = _kernel(ctx, op, kh, kw, sh, sw, N * C * H * W * 4 >= PREFETCH_MIN_BYTES)
    ctx.kernel("separable rows")
    owp = (OW + 15) // 16 * 16  # whole blocks of the widest target (AVX-512)
    slot = kh * owp + 16
    fields = {
        "x": ctx.x(0).sym,
        "y": ctx.y(0).sym,
        "C": str(N * C),  # the planes: where the input ends (prefetches stop there)
        "H": str(H),
        "W": str(W),
        "OH": str(OH),
        "OW": str(OW),
        "pt": str(pads[0]),
        "pl": str(pads[1]),
        "WQ": str(owp),
    }
    if divisors is not None:
        dr, dc = divisors
        fields["dr"] = ctx.weight("div_rows", dr.astype(np.float32))
        # whole blocks read the column divisors too: padded with ones
        fields["dc"] = ctx.weight("div_cols", np.pad(dc, (0, owp - OW), constant_values=1))
    n = N * C
    work = n * (H * W + OH * owp * kh)
    return f"/* {op} {kh}x{kw}/{sh}x{sw} by rows (pool_rows.py) */\n" + call_planes(
        ctx, name, n, work, slot, fields
    )
