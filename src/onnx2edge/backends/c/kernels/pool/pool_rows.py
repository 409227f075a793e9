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
MAXB = 64  # blocks of 16 outputs per row at most (runtime/o2e_pool_rows.h O2E_POOL_MAXB)
HEADER = "o2e_pool_rows.h"  # the kernel: o2e_pool_rows(arg, i0, i1, op, kh, kw, sh, sw, pf)
_OP = {"MaxPool": "O2E_POOL_MAX", "AveragePool": "O2E_POOL_AVG"}


def _kernel(ctx: NodeContext, op: str, kh: int, kw: int, sh: int, sw: int, pf: bool) -> str:
    """The C kernel for one op and window geometry (dilation 1, sw 1 or 2): its name, a wrapper
    passing the geometry as constants to runtime/o2e_pool_rows.h. pf: prefetch the input ahead
    (see PREFETCH_MIN_BYTES)."""
    name = f"o2e_{op[:3].lower()}pool_rows{kh}x{kw}_s{sh}x{sw}{'_pf' if pf else ''}"
    include(ctx, HEADER)
    args = f"{_OP[op]}, {kh}, {kw}, {sh}, {sw}, {int(pf)}"
    ctx.helper(
        name,
        f"static void {name}(void *arg, int i0, int i1) {{ o2e_pool_rows(arg, i0, i1, {args}); }}\n",
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
