"""Fast 2-D window kernels for float32 NCHW: MaxPool, AveragePool, GlobalAveragePool, and the
plane machinery the depthwise convolution (conv_depthwise.py) shares with them.

Every output of a k x k window op with stride s reads x[oh·s + i·d][ow·s + j·d]. A direct loop
needs a bounds check per tap and, for s > 1, strided loads that do not vectorise. Instead each
channel is first split into the s_h x s_w *phase planes* of its padded version,

    plane(a, b)[r][q] = xpad[r·s_h + a][q·s_w + b]        (r < HQ, q < WQ),

whose border keeps a fill value (0 for sums, -inf for max) written once per scratch buffer.
Tap (i, j) of every output then reads plane((i·d_h) mod s_h, (j·d_w) mod s_w) at
[oh + ⌊i·d_h / s_h⌋][ow + ⌊j·d_w / s_w⌋]: a unit-stride access for any stride. Computing over the
flattened planes, y_wide[p] = Σ w_ij · plane_ij[p + off_ij] with p = oh·WQ + ow, is one long
contiguous loop that vectorises fully even for 7x7 maps; the WQ − OW garbage columns of each
row are dropped when the result is compacted. With s = 1 this is the classic zero-bordered
padded plane.

Kernels are generated per window geometry (the taps are unrolled with constant offsets) and
process a range of planes, so `o2e_parallel_for` (runtime/o2e_gemm.h) can split the N·C planes
across threads when the model is built with -DO2E_THREADS=n; each thread then works in its own
scratch slot. Small ops stay on the calling thread: handing work to the pool costs microseconds.

Pooling semantics follow the ONNX MaxPool / AveragePool specs as the generic N-d loop of pool.py
implements them: AveragePool divides by the number of taps inside the input
(count_include_pad=0) or inside the padded extent (count_include_pad=1), summing the taps in
the same row-major order; MaxPool ignores padding. MaxPool with the Indices output, LpPool,
other ranks and other types stay on the generic loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .....semantics.pooling import pool_attrs
from ...emitter import NodeContext
from ...headers import include
from ..gemm.gemm import plan_threads
from ..par_split import RATE_POOL, split_at
from .pool_spec import PoolSpec

# Work (multiply-adds) below which the float convolution kernels run on the calling thread
# (their own threshold, kept; pooling, norms, Softmax, Resize and attention split by the one
# work-per-thread rule of ../par_split.py).
PAR_MIN_WORK = 1 << 16
_ALIGN_FLOATS = 16  # scratch slots and planes start on 64-byte boundaries
VW = 16  # block of the wide loops: one AVX-512 register, two AVX2 ones


def _rup(n: int) -> int:
    return (n + _ALIGN_FLOATS - 1) // _ALIGN_FLOATS * _ALIGN_FLOATS


def phase_geometry(
    OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> tuple[int, int]:
    """(HQ, WQ): rows and columns of each phase plane, just enough for every tap of every output."""
    return OH + (kh - 1) * dh // sh, OW + (kw - 1) * dw // sw


def plane_floats(
    OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> tuple[int, int]:
    """(floats of the phase planes, floats of the wide output; 0 when rows need no compaction).

    Both have VW floats of slack: the wide loop runs in whole vectors (flat_loop)."""
    HQ, WQ = phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    return _rup(sh * sw * HQ * WQ + VW), _rup(OH * WQ + VW) if WQ != OW else 0


def flat_loop(wide: bool, body: str) -> str:
    """The loop over the flat output index p; `body` sets p's output.

    A wide output is computed in whole blocks of VW positions (one AVX-512 register): the
    garbage positions past the last output are dropped by the compaction like the others, and
    small maps (7x7: 61 positions) then need no scalar remainder loop, which would cost more
    than the vector part. The planes and the wide buffer have VW floats of slack for this."""
    if not wide:
        return f"""const int n = OH * OW;
      for (int p = 0; p < n; ++p) {{
        {body}
      }}"""
    return f"""const int n = (OH - 1) * WQ + OW;
      for (int p0 = 0; p0 < n; p0 += {VW})
        for (int p = p0; p < p0 + {VW}; ++p) {{
          {body}
        }}"""


# NEON: output vectors of 4 computed together by the plane loops (neon_loop): independent
# chains, so an in-order core (Cortex-A53 / A55) is not held up by each one's FMA latency.
NEON_V = VW // 4


def neon_loop(
    wide: bool,
    reads: list[str],
    first: Callable[[str], str],
    step: Callable[[str, str, int], str],
    post: Callable[[str], str],
    out: str,
    scalar_body: str,
) -> str:
    """flat_loop with NEON intrinsics when compiled for aarch64, flat_loop itself otherwise.

    Each block of VW outputs is NEON_V vectors, and every tap is applied to all of them before
    the next tap, so the vectors' operation chains interleave; each lane still sees exactly
    the portable loop's operations in its order (bit-identical results). first(t0) is the value
    after the first tap's vector t0, step(v, t, k) the value of v after tap k's vector t,
    post(v) the fused activation (a C expression of v). reads: tap expressions `P..[p + off]`
    (tap_refs). A narrow output (not wide) ends with the portable scalar loop for the last
    n % VW outputs, since y has no slack there."""

    def load(r: str, u: int) -> str:
        return f"vld1q_f32(&{r.replace('[p', f'[p + {4 * u}', 1) if u else r})"

    lines = [f"float32x4_t v{u} = {first(load(reads[0], u))};" for u in range(NEON_V)]
    for k, r in enumerate(reads[1:], 1):
        lines.append("{")
        lines += [f"  const float32x4_t t{u} = {load(r, u)};" for u in range(NEON_V)]
        lines += [f"  v{u} = {step(f'v{u}', f't{u}', k)};" for u in range(NEON_V)]
        lines.append("}")
    lines += [f"vst1q_f32(&{out}[p + {4 * u}], {post(f'v{u}')});" for u in range(NEON_V)]
    body = "\n          ".join(lines)
    if wide:
        neon = f"""const int n = (OH - 1) * WQ + OW;
      int p = 0;
      for (; p < n; p += {VW}) {{
          {body}
      }}"""
    else:
        neon = f"""const int n = OH * OW;
      int p = 0;
      for (; p + {VW} <= n; p += {VW}) {{
          {body}
      }}
      for (; p < n; ++p) {{
        {scalar_body}
      }}"""
    return f"""#if defined(__ARM_NEON) && defined(__aarch64__)
      {neon}
#else
      {flat_loop(wide, scalar_body)}
#endif"""


def copy_row(ctx: NodeContext) -> str:
    """The C helper copying one short row without a library call."""
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_copy_row.h")
    return "o2e_copy_row"


def compact(ctx: NodeContext) -> str:
    """C statement dropping the WQ − OW garbage columns of each row of the wide output."""
    return f"for (int oh = 0; oh < OH; ++oh) {copy_row(ctx)}(yc + (size_t)oh * OW, yw + (size_t)oh * WQ, OW);"


def phase_split(ctx: NodeContext, sh: int, sw: int) -> str:
    """The C helper that copies one channel into its phase planes (interior only): a wrapper
    passing the stride as constants to runtime/o2e_phase_split.h's always_inline body."""
    name = f"o2e_phase_split_s{sh}x{sw}"
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_phase_split.h")
    ctx.helper(
        name,
        f"static void {name}(const float *restrict x, int H, int W, int pt, int pl, int HQ, "
        f"int WQ, float *restrict planes) "
        f"{{ o2e_phase_split(x, H, W, pt, pl, HQ, WQ, planes, {sh}, {sw}); }}\n",
    )
    return name


def tap_refs(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> tuple[str, list[str]]:
    """C declarations of the phase-plane pointers a kernel reads, and one read per tap (i, j)
    in row-major order, as expressions of the flat output index p."""
    phases = sorted({((i * dh) % sh, (j * dw) % sw) for i in range(kh) for j in range(kw)})
    decl = "\n  ".join(
        f"const float *restrict P{a}_{b} = planes + (size_t){a * sw + b} * HQ * WQ;"
        for a, b in phases
    )
    reads = []
    for i in range(kh):
        for j in range(kw):
            a, r = divmod(i * dh, sh)[::-1]
            b, q = divmod(j * dw, sw)[::-1]
            off = " + ".join(t for t in ((f"{r} * WQ" if r else ""), (str(q) if q else "")) if t)
            reads.append(f"P{a}_{b}[p{' + ' + off if off else ''}]")
    return decl, reads


def kernel_prologue(sh: int, sw: int, fill: str, wide: bool) -> str:
    """Shared start of a plane kernel: locals, this call's scratch slot, the border fill."""
    note = (
        "" if wide else "\n  /* WQ == OW: rows need no compaction, the kernel writes y directly */"
    )
    return f"""  const o2e_win2d_args *a = (const o2e_win2d_args *)arg;
  const int H = a->H, W = a->W, OH = a->OH, OW = a->OW, HQ = a->HQ, WQ = a->WQ;
  float *restrict planes = a->scratch + a->slot * (size_t)(a->thread ? a->thread() : 0);
  const size_t np = ((size_t){sh * sw} * HQ * WQ + {VW + _ALIGN_FLOATS - 1}) / {_ALIGN_FLOATS} * {_ALIGN_FLOATS};
  float *restrict yw = planes + np; /* the wide output (when rows need compaction) */
  (void)yw; (void)OW;
  for (size_t k = 0; k < np; ++k) planes[k] = {fill};{note}"""


def call_planes(
    ctx: NodeContext, kernel: str, n: int, work: int, slot_floats: int, fields: dict[str, str]
) -> str:
    """C statements running `kernel` over n planes, split across threads when the work pays.

    fields: the o2e_win2d_args members to set besides scratch, slot and thread."""
    include(ctx, "o2e_win2d.h")
    threaded = split_at(ctx, work, n, RATE_POOL)
    scratch = (
        ctx.scratch(max(slot_floats, 1) * 4 * (plan_threads(ctx) if threaded else 1))
        if slot_floats
        else "NULL"
    )
    init = [f".{k} = {v}" for k, v in fields.items()]
    init += [
        f".scratch = {scratch}",
        f".slot = {slot_floats}",
        f".thread = {'o2e_parallel_thread' if threaded else 'NULL'}",
    ]
    run = f"o2e_parallel_for({n}, {kernel}, &a);" if threaded else f"{kernel}(&a, 0, {n});"
    return "{\n  o2e_win2d_args a = {" + ", ".join(init) + "};\n  " + run + "\n}"


# --------------------------------------------------------------------------------------------
# MaxPool / AveragePool
# --------------------------------------------------------------------------------------------
def _pool_kernel(
    ctx: NodeContext, op: str, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int
) -> str:
    """One pooling kernel per window geometry: its name. The C is runtime/o2e_pool2d.h's
    always_inline body; the wrapper passes the geometry as constants so the taps unroll."""
    name = f"o2e_{op.lower()}{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}"
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_pool2d.h")
    kind = "O2E_P2D_MAX" if op == "MaxPool" else "O2E_P2D_AVG"
    ctx.helper(
        name,
        f"static void {name}(void *arg, int i0, int i1) "
        f"{{ o2e_pool_planes(arg, i0, i1, {kind}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}); }}\n",
    )
    return name


def _divisors(
    size: int, out: int, k: int, s: int, d: int, pb: int, pe: int, include_pad: bool
) -> np.ndarray:
    """Taps of each output position along one axis that count for AveragePool."""
    cnt = np.zeros(out, np.float32)
    for o in range(out):
        for t in range(k):
            i = o * s - pb + t * d
            cnt[o] += (-pb <= i < size + pe) if include_pad else (0 <= i < size)
    return cnt


def refuse_2d(spec: PoolSpec) -> str | None:
    """Why the 2-D kernels (here and pool_rows.py) do not take a pool, None when they do: a
    MaxPool (without indices) / AveragePool on a non-empty float32 NCHW tensor, pads >= 0."""
    if spec.op not in ("MaxPool", "AveragePool"):
        return f"{spec.op}: MaxPool and AveragePool only"
    if spec.x.dtype != np.float32 or spec.x.rank != 4 or spec.y.size == 0:
        return "not a non-empty float32 NCHW map"
    if spec.indices:
        return "MaxPool's indices output"
    return "negative pads" if min(spec.geom.pads) < 0 else None


def refuse_planes(spec: PoolSpec) -> str | None:
    return refuse_2d(spec)


def emit_planes(ctx: NodeContext, spec: PoolSpec) -> str:
    """MaxPool / AveragePool on float32 NCHW with phase planes."""
    x, y, geo = spec.x, spec.y, spec.geom
    op = ctx.node.op_type
    N, C, H, W = x.shape
    OH, OW = y.shape[2:]
    (kh, kw), (sh, sw), (dh, dw), pads = geo.kernel, geo.strides, geo.dilations, geo.pads
    name = _pool_kernel(ctx, op, kh, kw, sh, sw, dh, dw)
    ctx.kernel("2-D phase planes")
    HQ, WQ = phase_geometry(OH, OW, kh, kw, sh, sw, dh, dw)
    pf, wf = plane_floats(OH, OW, kh, kw, sh, sw, dh, dw)
    if op == "AveragePool":
        wf = _rup(OH * WQ + VW)
    fields = {
        "x": x.sym,
        "y": y.sym,
        "H": str(H),
        "W": str(W),
        "OH": str(OH),
        "OW": str(OW),
        "pt": str(pads[0]),
        "pl": str(pads[1]),
        "HQ": str(HQ),
        "WQ": str(WQ),
    }
    if op == "AveragePool":
        inc = pool_attrs(ctx.node, ctx.graph.opset).count_include_pad
        dr = _divisors(H, OH, kh, sh, dh, pads[0], pads[2], inc)
        dc = _divisors(W, OW, kw, sw, dw, pads[1], pads[3], inc)
        # a window entirely outside the input sums to 0: divide by 1 (the generic loop's cnt ? : 0)
        fields["dr"] = ctx.weight("div_rows", np.where(dr > 0, dr, 1).astype(np.float32))
        fields["dc"] = ctx.weight("div_cols", np.where(dc > 0, dc, 1).astype(np.float32))
    n = N * C
    work = n * (H * W + OH * WQ * (kh * kw + 1))
    return f"/* {op} {kh}x{kw}/{sh}x{sw} via phase planes (pool2d.py) */\n" + call_planes(
        ctx, name, n, work, pf + wf, fields
    )


# --------------------------------------------------------------------------------------------
# GlobalAveragePool
# --------------------------------------------------------------------------------------------


def refuse_global_sum(spec: PoolSpec) -> str | None:
    """The vectorised sum takes GlobalAveragePool on a non-empty float32 tensor of rank >= 3."""
    if spec.op != "GlobalAveragePool":
        return f"{spec.op}: GlobalAveragePool only"
    x = spec.x
    return (
        "not a non-empty float32 map"
        if x.dtype != np.float32 or x.rank < 3 or x.size == 0
        else None
    )


def emit_global_sum(ctx: NodeContext, spec: PoolSpec) -> str:
    """GlobalAveragePool on float32 (any rank >= 3)."""
    x, y = spec.x, spec.y
    return plane_means(ctx, x.sym, y.sym, x.shape[0] * x.shape[1], int(np.prod(x.shape[2:])))


def plane_means(ctx: NodeContext, x: str, y: str, n: int, S: int) -> str:
    """y[i] = mean of x[i*S .. (i+1)*S) for i < n (float32): GlobalAveragePool, and a
    ReduceMean over trailing axes (squeeze-and-excitation's x.mean((2, 3)): reduce.py)."""
    include(ctx, "o2e_win2d.h")
    include(ctx, "o2e_global_avgpool.h")
    ctx.kernel("vectorised sum")
    return call_planes(ctx, "o2e_global_avgpool", n, n * S, 0, {"x": x, "y": y, "W": str(S)})
