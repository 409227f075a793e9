"""Direct convolution for stride-1 2-D Conv with few output channels (up to 32; e.g. the RGB
output layer of style-transfer and segmentation networks: 32 -> 3 channels, 9x9, 480x640, or
their 3 -> 32 9x9 stem).

im2col + GEMM is a poor fit there: the GEMM's 8-row micro-kernel is mostly empty with 3 rows,
and the column matrix (C·kh·kw rows, one column per output pixel), explicit or packed on the
fly, costs kh·kw copies of every input for only M FMAs per element. A direct convolution
reads the input in place instead:

    y[m][oh][ow .. ow + BW) = b[m] + Σ_c Σ_i Σ_j w[m][c][i][j] · x[c][oh - pt + i·dh][ow - pl + j·dw ..]

An output row is cut into blocks of BW = VB vectors. For one block and a pass of MB output
channels, the MB x VB accumulators stay in vector registers for the whole C x kh x kw loop:
each tap loads VB shifted input vectors (unaligned loads of one input row) and broadcasts MB
weights, for MB·VB FMAs. Weights are rearranged at conversion time to [pass][c][i][j][m] so a
block reads them as one sequential stream.

Padding is never materialised: tap rows that fall outside the input are skipped (the same
for a whole output row), interior blocks read the input unchecked, and the few blocks that
touch the left / right padding or the end of the row use masked loads and stores (AVX-512
masks, AVX2 maskload), which read nothing outside the input row. Without AVX-512 or AVX2
(microcontrollers, generic builds) each output row is accumulated in place over clipped
column ranges instead: plain C99, no bounds test per element.

Rows are independent: `o2e_parallel_for` (runtime/o2e_gemm.h) splits the N·OH output rows
across threads when the model is built with -DO2E_THREADS=n; every output is computed by the
same instructions whatever the split, so results do not depend on the thread count. A fused
residual starts each sum (read right before y is written at the same place, so it could even
alias y); the activation is applied to each finished row while it is still in cache. Tanh
uses a rational approximation (the one Eigen and onnxruntime's MLAS use, within 4e-7 of tanh)
that vectorises, where libm's tanhf (16 ms at 480x640x3) would cost most of the convolution.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from .....semantics.activations import Activation
from .....semantics.conv_geometry import ConvGeometry
from ...emitter import NodeContext
from ...headers import include
from ...ops.common import act_expr
from ..gemm.gemm import _use_engine
from ..pool import pool2d
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

# Applies up to this many output channels: the input is re-read once per pass of 4 channels,
# which stays cheaper than the GEMM's packing of the implicit column matrix (kh·kw copies of
# every input) up to at least 32 channels. Measured, AVX-512, 1 thread, ms: 3 -> 32 9x9 at
# 480x640 23 vs 40 (im2col + GEMM); 16 -> 32 5x5 at 120x160 5.4 vs 8.1; 16 -> 64 7x7 at
# 112x112 6.6 vs 7.8; 128 -> 32 1x7 at 17x17 0.15 vs 0.25; 32 -> 3 9x9 at 480x640 22 vs 206.
MAX_M = 32
# 1x1 convolutions read the input in place in the GEMM too, and tie from 8 channels on.
MAX_M_POINTWISE = 8
# ... and from this many output columns (one AVX-512 vector; narrower maps are mostly padding)
MIN_OW = 16


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec)) is not None:
        return why
    if spec.nsp != 2 or spec.group != 1 or spec.st != [1, 1] or min(spec.dl) < 1:
        return "not a 2-D stride-1 convolution without groups"
    ks, y = spec.ks, spec.y
    limit = MAX_M_POINTWISE if ks[0] * ks[1] == 1 else MAX_M
    if spec.M <= limit and y.shape[3] >= MIN_OW and y.size > 0:
        return None
    return f"more than {limit} output channels, or fewer than {MIN_OW} output columns"


def passes(M: int) -> list[int]:
    """Output channels per pass: at most 4 (the accumulators of one block), as even as possible."""
    n = -(-M // 4)
    return [M // n + (k < M % n) for k in range(n)]


# Vectors per block for MB output channels: MB·VB accumulators + MB broadcast weights + one
# input vector must fit the register file (32 zmm on AVX-512, 16 ymm on AVX2). Within each
# range the measured speed is flat (AVX-512, 32 -> 3 channels 9x9: 5-7 alike, 4 and 8 slower),
# so the block width is picked per map to leave the fewest columns to masked blocks.
VB_AVX512 = {1: (6, 8), 2: (6, 8), 3: (5, 7), 4: (4, 6)}
VB_AVX2 = {1: (4, 6), 2: (3, 5), 3: (3, 3), 4: (2, 2)}


def _schedule(g: _Geom, BW: int) -> tuple[int, int]:
    """(full, masked) blocks of BW columns per output row (mirrors the loops of _row)."""
    ow = masked = full = 0
    while ow < g.owa:
        ow, masked = ow + BW, masked + 1
    while ow + BW <= g.owb:
        ow, full = ow + BW, full + 1
    while ow < g.OW:
        ow, masked = ow + BW, masked + 1
    return full, masked


def _vb(g: _Geom, isa: str, MB: int) -> int:
    """Vectors per block: the fewest vectors per row (lanes wasted past the row's end), then
    the fewest masked blocks, then the widest blocks."""
    L = _ISA[isa]["L"]
    lo, hi = (VB_AVX512 if isa == "avx512" else VB_AVX2)[MB]

    def cost(vb: int) -> tuple[int, int, int]:
        full, masked = _schedule(g, L * vb)
        return (full + masked) * vb, masked, -vb

    return min(range(lo, hi + 1), key=cost)


_ISA = {
    "avx512": dict(
        L=16,
        vec="__m512",
        set1="_mm512_set1_ps({})",
        load="_mm512_loadu_ps({p})",
        mload="_mm512_maskz_loadu_ps({m}, {p})",
        fma="_mm512_fmadd_ps({a}, {b}, {c})",
        store="_mm512_storeu_ps({p}, {v});",
        mstore="_mm512_mask_storeu_ps({p}, {m}, {v});",
        mtype="__mmask16",
        mask="o2e_dconv_mask16",
        add="_mm512_add_ps({a}, {b})",
    ),
    "avx2": dict(
        L=8,
        vec="__m256",
        set1="_mm256_set1_ps({})",
        load="_mm256_loadu_ps({p})",
        mload="_mm256_maskload_ps({p}, {m})",
        fma="_mm256_fmadd_ps({a}, {b}, {c})",
        store="_mm256_storeu_ps({p}, {v});",
        mstore="_mm256_maskstore_ps({p}, {m}, {v});",
        mtype="__m256i",
        mask="o2e_dconv_mask8",
        add="_mm256_add_ps({a}, {b})",
    ),
}


# Eigen's / MLAS's rational tanh: clamped where float tanh is ±1 to the last bit, x itself
# where |x| is so small that the quotient would lose relative accuracy. Branch-free, so a loop
# over it vectorises.


@dataclass(frozen=True)
class _Geom:
    """One image's convolution geometry under the short names the kernel text uses: a view of
    the node's ConvGeometry (semantics/conv_geometry.py), not a second copy of it."""

    geo: ConvGeometry
    res: bool  # a residual starts each sum (read right before y is written there)

    C = property(lambda g: g.geo.in_channels)
    M = property(lambda g: g.geo.out_channels)
    H = property(lambda g: g.geo.in_spatial[0])
    W = property(lambda g: g.geo.in_spatial[1])
    OH = property(lambda g: g.geo.out_spatial[0])
    OW = property(lambda g: g.geo.out_spatial[1])
    kh = property(lambda g: g.geo.kernel[0])
    kw = property(lambda g: g.geo.kernel[1])
    dh = property(lambda g: g.geo.dilations[0])
    dw = property(lambda g: g.geo.dilations[1])
    pt = property(lambda g: g.geo.pads_begin[0])
    pl = property(lambda g: g.geo.pads_begin[1])

    @property
    def owa(self) -> int:
        """Output columns whose taps all lie inside the input are [owa, owb)."""
        return min(self.pl, self.OW)

    @property
    def owb(self) -> int:
        return max(self.owa, min(self.OW, self.W + self.pl - (self.kw - 1) * self.dw))


def _block(g: _Geom, isa: str, MB: int, VB: int, masked: bool, name: str) -> str:
    """One block of VB vectors x MB output channels of one output row, in registers."""
    d = _ISA[isa]
    L = d["L"]
    acc = [[f"a{m}_{v}" for v in range(VB)] for m in range(MB)]
    ys = g.OH * g.OW

    def start(m: int, v: int) -> str:
        if not g.res:
            return d["set1"].format(f"b{m}")
        p = f"rp + {m * ys + L * v}"
        r = d["mload"].format(m=f"sm[{v}]", p=p) if masked else d["load"].format(p=p)
        return d["add"].format(a=r, b=d["set1"].format(f"b{m}"))

    init = "\n".join(
        f"  {d['vec']} {acc[m][v]} = {start(m, v)};" for m in range(MB) for v in range(VB)
    )
    taps = []
    for j in range(g.kw):
        taps.append(
            f"      {{ const {d['vec']} "
            + ", ".join(f"w{m} = {d['set1'].format(f'wr[{j * MB + m}]')}" for m in range(MB))
            + ";"
        )
        for v in range(VB):
            p = f"xr + {j * g.dw + L * v}"
            ld = d["mload"].format(m=f"mk[{j * VB + v}]", p=p) if masked else d["load"].format(p=p)
            taps.append(f"        {{ {d['vec']} s = {ld}; O2E_DCONV_REG(s);")
            taps.append(
                "          "
                + " ".join(
                    f"{acc[m][v]} = {d['fma'].format(a='s', b=f'w{m}', c=acc[m][v])};"
                    for m in range(MB)
                )
                + " }"
            )
        taps.append("      }")
    stores = []
    for m in range(MB):
        for v in range(VB):
            p = f"yp + {m * ys + L * v}"
            stores.append(
                "  "
                + (
                    d["mstore"].format(p=p, m=f"sm[{v}]", v=acc[m][v])
                    if masked
                    else d["store"].format(p=p, v=acc[m][v])
                )
            )
    masks = ""
    if masked:
        masks = (
            f"  {d['mtype']} mk[{g.kw * VB}], sm[{VB}];\n"
            f"  for (int j = 0; j < {g.kw}; ++j)\n"
            f"    for (int v = 0; v < {VB}; ++v) mk[j * {VB} + v] = {d['mask']}(ow0 - {g.pl} + j * {g.dw} + {L} * v, {g.W});\n"
            f"  for (int v = 0; v < {VB}; ++v) sm[v] = {d['mask']}({L} * v, n);\n"
        )
    bias = "\n".join(f"  const float b{m} = bp ? bp[{m}] : 0.0f;" for m in range(MB))
    # masked blocks may start left of the input row: the address is formed from a signed
    # offset and never dereferenced where a mask lane is off
    xoff = f"(ptrdiff_t)c * {g.H * g.W} + (ptrdiff_t)(ih0 + i * {g.dh}) * {g.W} + ow0 - {g.pl}"
    rp = ", const float *restrict rp" if g.res else ""
    return f"""
static inline void {name}(const float *restrict xn, const float *restrict wp, const float *restrict bp,
    float *restrict yp{rp}, int i0, int i1, int ih0, int ow0, int n)
{{
{bias}
{masks}{init}
  (void)n;
  for (int c = 0; c < {g.C}; ++c)
    for (int i = i0; i < i1; ++i) {{
      const float *restrict xr = xn + ({xoff});
      const float *restrict wr = wp + (size_t)(c * {g.kh} + i) * {g.kw * MB};
{chr(10).join(taps)}
    }}
{chr(10).join(stores)}
}}
"""


def _row_portable(g: _Geom, MB: int) -> str:
    """Portable body of one pass over one output row: the row accumulates in place, each tap
    over the columns where it reads inside the input."""
    ys = g.OH * g.OW
    wl = " ".join(f"const float w{m} = wr[j * {MB} + {m}];" for m in range(MB))
    upd = " ".join(f"yp[{m * ys} + ow] += w{m} * s;" for m in range(MB))
    r = f" + rp[(size_t)m * {ys} + ow]" if g.res else ""
    return f"""  for (int m = 0; m < {MB}; ++m) {{
    const float b = bp ? bp[m] : 0.0f;
    for (int ow = 0; ow < {g.OW}; ++ow) yp[(size_t)m * {ys} + ow] = b{r};
  }}
  for (int c = 0; c < {g.C}; ++c)
    for (int i = i0; i < i1; ++i) {{
      const float *restrict xr = xn + (size_t)c * {g.H * g.W} + (size_t)(ih0 + i * {g.dh}) * {g.W};
      const float *restrict wr = wp + (size_t)(c * {g.kh} + i) * {g.kw * MB};
      for (int j = 0; j < {g.kw}; ++j) {{
        const int off = j * {g.dw} - {g.pl};
        const int lo = off < 0 ? -off : 0, hi = {g.W} - off < {g.OW} ? {g.W} - off : {g.OW};
        {wl}
        for (int ow = lo; ow < hi; ++ow) {{ const float s = xr[ow + off]; {upd} }}
      }}
    }}"""


def _row(g: _Geom, MB: int, name: str) -> str:
    """The C functions of one pass of MB output channels over one output row (`name` last)."""
    vec = []
    for isa in ("avx512", "avx2"):
        VB = _vb(g, isa, MB)
        BW = _ISA[isa]["L"] * VB
        full, part = f"{name}_{isa}", f"{name}_{isa}_m"
        blocks = _block(g, isa, MB, VB, False, full) + _block(g, isa, MB, VB, True, part)
        y = "yp + ow, rp + ow" if g.res else "yp + ow"
        rest = f"{g.OW} - ow < {BW} ? {g.OW} - ow : {BW}"
        sched = f"""  int ow = 0;
  for (; ow < {g.owa}; ow += {BW}) {part}(xn, wp, bp, {y}, i0, i1, ih0, ow, {rest});
  for (; ow + {BW} <= {g.owb}; ow += {BW}) {full}(xn, wp, bp, {y}, i0, i1, ih0, ow, {BW});
  for (; ow < {g.OW}; ow += {BW}) {part}(xn, wp, bp, {y}, i0, i1, ih0, ow, {rest});"""
        vec.append((blocks, sched))
    return f"""
#if defined(__AVX512F__)
{vec[0][0]}
#elif defined(__AVX2__) && defined(__FMA__)
{vec[1][0]}
#endif
/* output channels [m0, m0 + {MB}) of one output row: yp (and rp, the residual) point at
 * channel m0, row oh */
static void {name}(const float *restrict xn, const float *restrict wp, const float *restrict bp,
    float *restrict yp{", const float *restrict rp" if g.res else ""}, int i0, int i1, int ih0)
{{
#if defined(__AVX512F__)
{vec[0][1]}
#elif defined(__AVX2__) && defined(__FMA__)
{vec[1][1]}
#else
{_row_portable(g, MB)}
#endif
}}
"""


def _epilogue(g: _Geom, act: Activation | None) -> str:
    """The activation over the finished output row (every channel), while it is in cache."""
    if act is None:
        return ""
    f = "o2e_dconv_tanh(v)" if act.op == "Tanh" else act_expr(act, "v")
    return f"""
    for (int m = 0; m < {g.M}; ++m) {{
      float *restrict yr = a->y + ((size_t)n * {g.M} + m) * {g.OH * g.OW} + (size_t)oh * {g.OW};
      for (int q = 0; q < {g.OW}; ++q) {{ const float v = yr[q]; yr[q] = {f}; }}
    }}"""


def _kernel(ctx: NodeContext, g: _Geom, act: Activation | None) -> str:
    """The row kernel for this geometry (a helper shared by identical convolutions); its name."""
    include(ctx, "o2e_dconv.h")
    if act is not None and act.op == "Tanh":
        include(ctx, "o2e_dconv_tanh.h")
    calls = []
    m0 = woff = 0
    key = (g.C, g.H, g.W, g.M, g.OH, g.OW, g.kh, g.kw, g.dh, g.dw, g.pt, g.pl, g.res)
    tag = f"{g.kh}x{g.kw}_{zlib.crc32(repr(key).encode()):08x}"
    for MB in passes(g.M):
        rname = f"o2e_dconv{tag}_r{m0}"
        ctx.helper(rname, _row(g, MB, rname))
        at = f"((size_t)n * {g.M} + {m0}) * {g.OH * g.OW} + (size_t)oh * {g.OW}"
        res = f", a->res + {at}" if g.res else ""
        calls.append(
            f"    {rname}(xn, a->w + {woff}, a->bias ? a->bias + {m0} : NULL, a->y + {at}{res}, i0, i1, ih0);"
        )
        m0 += MB
        woff += MB * g.C * g.kh * g.kw
    epi = _epilogue(g, act)
    body = f"""
/* {g.kh}x{g.kw} direct convolution, {g.C} -> {g.M} channels, {g.H}x{g.W} -> {g.OH}x{g.OW}, over
 * output rows [r0, r1) of the batch (conv_direct.py). */
static void NAME(void *arg, int r0, int r1)
{{
  const o2e_dconv_args *a = (const o2e_dconv_args *)arg;
  for (int r = r0; r < r1; ++r) {{
    const int n = r / {g.OH}, oh = r % {g.OH}, ih0 = oh - {g.pt};
    const float *restrict xn = a->x + (size_t)n * {g.C * g.H * g.W};
    /* tap rows i with 0 <= ih0 + i*{g.dh} < {g.H}; the others read padding */
    const int i0 = ih0 >= 0 ? 0 : (-ih0 + {g.dh - 1}) / {g.dh};
    const int i1r = {g.H} - ih0 <= 0 ? 0 : ({g.H} - ih0 + {g.dh - 1}) / {g.dh}, i1 = i1r < {g.kh} ? i1r : {g.kh};
{chr(10).join(calls)}{epi}
  }}
}}
"""
    # the epilogue (activation constants) is part of the kernel's identity
    name = f"o2e_dconv{tag}_{zlib.crc32(body.encode()):08x}"
    return ctx.helper(name, body.replace("NAME", name))


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, w, y, ks, bias = spec.x, spec.w, spec.y, spec.ks, spec.bias
    N, C, H, W = x.shape
    M = w.shape[0]
    OH, OW = y.shape[2:]
    kh, kw = ks
    residual = spec.residual
    g = _Geom(spec.geom, residual)
    assert spec.weights is not None  # refuse: constant weights
    wc = spec.weights.astype(np.float32)
    # [pass][c][i][j][m]: the weights of one block, in the order the block reads them
    blocks, m0 = [], 0
    for MB in passes(M):
        blocks.append(wc[m0 : m0 + MB].transpose(1, 2, 3, 0).reshape(-1))
        m0 += MB
    wsym = ctx.weight("direct", np.ascontiguousarray(np.concatenate(blocks)))
    name = _kernel(ctx, g, spec.act)
    ctx.kernel("direct conv (few output channels)")
    if residual:
        ctx.kernel("residual add in the direct conv")
    res = ctx.x(3).sym if residual else "NULL"
    rows = N * OH
    threaded = rows > 1 and N * OH * OW * M * C * kh * kw >= pool2d.PAR_MIN_WORK
    init = f"o2e_dconv_args a = {{{x.sym}, {wsym}, {bias or 'NULL'}, {res}, {y.sym}}};"
    if threaded:
        _use_engine(ctx)
        return f"{{\n  {init}\n  o2e_parallel_for({rows}, {name}, &a);\n}}"
    return f"{{\n  {init}\n  {name}(&a, 0, {rows});\n}}"


STRATEGY = register(ConvStrategy("direct", refuse, emit), rank=100)
