"""Normalisations and the softmax family: Softmax / LogSoftmax / Hardmax, LayerNormalization,
RMSNormalization, GroupNormalization, InstanceNormalization, MeanVarianceNormalization,
LpNormalization, BatchNormalization, LRN.

float32 and float64. Statistics (sums, means, variances) accumulate in double: the reference
computes them with numpy's pairwise sums, which a float running sum would drift from. The
GroupNormalization / InstanceNormalization and LRN kernels, which see large feature maps, keep
that accuracy with vectorisable inner loops instead: short float partial sums in 16 lanes,
merged in double (o2e_moments), and LRN's window of `size` values summed directly. Both split
their work across threads by whole planes / pixel blocks (o2e_parallel_for), so the results
do not depend on the thread count.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.activations import Activation, vm
from ....semantics.attrs import attr, epsilon
from ....semantics.batchnorm import bn_affine, bn_attrs
from ....semantics.fused import DOMAIN
from ....semantics.norms import group_norm_attrs, layer_norm_attrs, lp_norm_attrs, lrn_attrs
from ....semantics.records import softmax_attrs
from ..emitter import NodeContext, Tensor, c_literal
from ..headers import include
from ..kernels.gemm.gemm import _use_engine
from ..kernels.pool import pool2d
from . import register_op
from .checks import float_input
from .common import act_expr, broadcast_strides, fused_act, norm_axis, strides
from .loops import along, dim_runs, loops, offset_expr, split_axis


def bcast_index(t_shape: tuple[int, ...], shape: tuple[int, ...], axis: int, o: str, j: str) -> str:
    """Offset into a tensor of `t_shape` broadcast to `shape`, at outer index `o` (the dims
    before `axis`, row-major) and inner index `j` (the dims from `axis` on)."""
    bst = broadcast_strides(t_shape, shape)
    terms = []
    for var, lo, hi in ((o, 0, axis), (j, axis, len(shape))):
        want, sub = bst[lo:hi], shape[lo:hi]
        sst = strides(tuple(sub))
        if not any(want):
            continue
        first = next(i for i, w in enumerate(want) if w)
        scale = want[first] // sst[first]
        if all(w == s * scale or n == 1 for w, s, n in zip(want, sst, sub, strict=True)):
            terms.append(var if scale == 1 else f"{var} * {scale}")
            continue
        for d, (w, n) in enumerate(zip(want, sub, strict=True)):
            if w:
                terms.append(f"({var} / {sst[d]} % {n}) * {w}")
    return " + ".join(terms) or "0"


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax
# --------------------------------------------------------------------------------------------
def softmax_split(ctx: NodeContext, x: Tensor) -> tuple[int, int, int]:
    """(outer, n, inner) of the softmax axis.

    Before opset 13 the input is coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])] and
    the op runs over the second dim (default axis 1); from 13 it runs over `axis` alone
    (default -1). ONNX Softmax-13 changelog.
    """
    sm = softmax_attrs(ctx.node, ctx.graph.opset)  # axis 1, from 13 -1
    axis = norm_axis(sm.axis, x.rank)
    if sm.flattens:
        return int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])), 1
    return split_axis(x.shape, axis)


@register_op("Softmax", "LogSoftmax", "Hardmax", check=float_input)
def softmax(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    op = ctx.node.op_type
    outer, n, inner = softmax_split(ctx, x)
    if x.size == 0:
        return "/* empty */"
    head = f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t i = 0; i < {inner}; ++i) {{
  const {x.ctype} *xs = {x.sym} + o * {n * inner} + i;
  {y.ctype} *ys = {y.sym} + o * {n * inner} + i;"""
    if op == "Hardmax":
        # 1 at the first maximum, 0 elsewhere
        return f"""{head}
  size_t best = 0;
  for (size_t j = 1; j < {n}; ++j) if (xs[{along("j", inner)}] > xs[{along("best", inner)}]) best = j;
  for (size_t j = 0; j < {n}; ++j) ys[{along("j", inner)}] = j == best ? 1 : 0;
}}"""
    if x.ctype == "float" and inner == 1:
        return _softmax_rows(ctx, op == "LogSoftmax", outer, n, "1.0f")
    # subtract the max first: exp never overflows (softmax_large_number). exp in the input's
    # precision (float: o2e_vmath.h's, 1 ulp, in a loop of its own that vectorises: the
    # exponentials are stored, then summed in double).
    T, F = x.ctype, "" if x.ctype == "double" else "f"
    ex = vm("exp", F)
    at = along("j", inner)
    if op == "Softmax":
        tail = f"""  for (size_t j = 0; j < {n}; ++j) ys[{at}] = {ex}(xs[{at}] - mx);
  for (size_t j = 0; j < {n}; ++j) sum += ys[{at}];
  for (size_t j = 0; j < {n}; ++j) ys[{at}] = ({T})(ys[{at}] / sum);"""
    else:
        # no stores to ys before xs is read: y may share x's buffer
        tail = f"""  for (size_t j = 0; j < {n}; ++j) sum += {ex}(xs[{at}] - mx);
  const double lse = mx + log(sum);
  for (size_t j = 0; j < {n}; ++j) ys[{at}] = ({T})(xs[{at}] - lse);"""
    return f"""{head}
  {T} mx = xs[0];
  double sum = 0.0;
  for (size_t j = 1; j < {n}; ++j) if (xs[{along("j", inner)}] > mx) mx = xs[{along("j", inner)}];
{tail}
}}"""


def _softmax_rows(ctx: NodeContext, log: bool, rows: int, n: int, scale: str) -> str:
    """float32 over the last axis: runtime/o2e_softmax.h (vectorised max, exp + sum, scale),
    its rows split across threads when there are enough of them."""
    include(ctx, "o2e_softmax.h")
    x, y = ctx.x(0).sym, ctx.y(0).sym
    args = f"o2e_softmax_args a = {{{x}, {y}, {n}, {int(log)}, {scale}}};"
    if rows > 1 and rows * n >= pool2d.PAR_MIN_WORK:
        _use_engine(ctx)
        return f"{{ {args} o2e_parallel_for({rows}, o2e_softmax_rows, &a); }}"
    return f"{{ {args} o2e_softmax_rows(&a, 0, {rows}); }}"


def _scaled_softmax_check(node: Node, graph: Graph) -> str | None:
    if node.domain != DOMAIN:
        return f"{node.op_type} outside the {DOMAIN} domain"
    c = graph.const(node.inputs[1])
    return None if c is not None and c.size == 1 else "scale is not a scalar constant"


@register_op("o2e:ScaledSoftmax", check=_scaled_softmax_check)
def scaled_softmax(ctx: NodeContext) -> str:
    """Softmax(X * scale) over the last axis (passes/fuse_softmax_scale.py)."""
    x = ctx.x(0)
    c = ctx.const(1)
    assert c is not None  # the check
    if x.size == 0:
        return "/* empty */"
    n = x.shape[-1]
    log = bool(ctx.attr("log"))
    return _softmax_rows(ctx, log, x.size // n, n, c_literal(float(c.reshape(-1)[0]), np.float32))


# --------------------------------------------------------------------------------------------
# LayerNormalization / RMSNormalization: statistics over the trailing dims from `axis`
# --------------------------------------------------------------------------------------------
@register_op("LayerNormalization", "RMSNormalization", check=float_input)
def layer_norm(ctx: NodeContext) -> str:
    """LayerNorm: y = (x - mean) / sqrt(var + eps) * scale + B; RMSNorm: y = x / sqrt(mean(x²) + eps) * scale.

    Optional LayerNorm outputs Mean and InvStdDev have shape [d0..d(axis-1), 1, ..., 1].
    The statistics are computed in double whatever stash_type says (at least its precision).
    """
    x, y = ctx.x(0), ctx.y(0)
    rms = ctx.node.op_type == "RMSNormalization"
    axis = layer_norm_attrs(ctx.node, ctx.graph.opset, x.rank).axis
    outer, n = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    if x.size == 0:
        return "/* empty */"
    eps = c_literal(epsilon(ctx.node, ctx.graph.opset), np.float64)
    if (fast := _layer_norm_rows(ctx, rms, axis, outer, n, eps)) is not None:
        return fast
    sc = ctx.x(1)
    scale = f" * {sc.sym}[{bcast_index(sc.shape, x.shape, axis, 'o', 'j')}]"
    bias = ""
    if not rms and ctx.has_input(2):
        b = ctx.x(2)
        bias = f" + {b.sym}[{bcast_index(b.shape, x.shape, axis, 'o', 'j')}]"
    lines = [
        f"for (size_t o = 0; o < {outer}; ++o) {{",
        f"  const {x.ctype} *xo = {x.sym} + o * {n};",
        f"  {y.ctype} *yo = {y.sym} + o * {n};",
    ]
    if rms:
        lines += [
            "  double sq = 0.0;",
            f"  for (size_t j = 0; j < {n}; ++j) sq += (double)xo[j] * xo[j];",
            f"  const double inv = 1.0 / sqrt(sq / {n} + {eps});",
        ]
    else:
        lines += [
            "  double mean = 0.0, var = 0.0;",
            f"  for (size_t j = 0; j < {n}; ++j) mean += xo[j];",
            f"  mean /= {n};",
            f"  for (size_t j = 0; j < {n}; ++j) {{ const double d = xo[j] - mean; var += d * d; }}",
            f"  const double inv = 1.0 / sqrt(var / {n} + {eps});",
        ]
    norm = "xo[j] * inv" if rms else "(xo[j] - mean) * inv"
    lines.append(f"  for (size_t j = 0; j < {n}; ++j) yo[j] = ({y.ctype})({norm}){scale}{bias};")
    if not rms and ctx.has_output(1):
        lines.append(f"  {ctx.y(1).sym}[o] = ({ctx.y(1).ctype})mean;")
    if not rms and ctx.has_output(2):
        lines.append(f"  {ctx.y(2).sym}[o] = ({ctx.y(2).ctype})inv;")
    lines.append("}")
    return "\n".join(lines)


LN_ARGS = """
/* Arguments of the LayerNormalization / RMSNormalization row kernel (norm.py): rows of n
 * values, scale and bias (NULL: none) of n values; mean / inv (NULL: not asked) per row. */
typedef struct {
  const float *x, *scale, *bias;
  float *y, *mean, *inv;
  size_t n;
  double eps;
} o2e_layer_norm_args;
"""

LN_KERNEL = """
/* {what} over rows [r0, r1) (norm.py): the statistics by o2e_moments_f32 (float lanes merged in
 * double, each block centred on its own pivot), then one vectorised pass
 * y = ((x - m) * s + t) * scale + bias, with m the mean rounded to float (as GroupNormalization's
 * kernel: the subtraction is exact near the mean). */
static void {name}(void *arg, int r0, int r1)
{
  const o2e_layer_norm_args *a = (const o2e_layer_norm_args *)arg;
  const size_t n = a->n;
  const float *restrict scale = a->scale, *restrict bias = a->bias;
  int r;
  for (r = r0; r < r1; ++r) {
    const float *restrict x = a->x + (size_t)r * n;
    float *restrict y = a->y + (size_t)r * n;
    double mean, m2, msq; /* msq: the mean of x^2 (RMSNormalization) */
    size_t j;
    o2e_moments_f32(x, n, &mean, &m2);
    msq = mean * mean + m2 / (double)n;
    if (!isfinite(mean)) { /* an Inf: centring made it NaN; the plain sums keep Inf (as onnxruntime) */
      double sum = 0.0, sq = 0.0;
      for (j = 0; j < n; ++j) {
        sum += x[j];
        sq += (double)x[j] * x[j];
      }
      mean = sum / (double)n;
      m2 = sq - mean * sum;
      msq = sq / (double)n;
    }
    {
{stats}
      const float m = (float)mean, sc = (float)inv, sh = (float)((mean - m) * -inv);
      if (bias)
        for (j = 0; j < n; ++j) y[j] = ((x[j] - m) * sc + sh) * scale[j] + bias[j];
      else
        for (j = 0; j < n; ++j) y[j] = ((x[j] - m) * sc + sh) * scale[j];
      if (a->mean) a->mean[r] = (float)mean;
      if (a->inv) a->inv[r] = (float)inv;
    }
  }
}
"""


def _row_vector(t_shape: tuple[int, ...], shape: tuple[int, ...], axis: int) -> bool:
    """A tensor of `t_shape` broadcast to `shape` reads element j of every row (the dims from
    `axis` on) at j: one vector of the row's length shared by all rows."""
    want = [0] * axis + list(strides(tuple(shape[axis:])))
    got = broadcast_strides(t_shape, shape)
    return all(g == w or n == 1 for g, w, n in zip(got, want, shape, strict=True))


def _layer_norm_rows(
    ctx: NodeContext, rms: bool, axis: int, rows: int, n: int, eps: str
) -> str | None:
    """float32 with scale and bias of the row's n values (the usual transformer layer): the
    vectorised row kernel above, rows split across threads; None for the general loop."""
    x = ctx.x(0)
    ins = [ctx.x(1)] + ([ctx.x(2)] if not rms and ctx.has_input(2) else [])
    stats = [ctx.y(i) for i in (1, 2) if not rms and ctx.has_output(i)]
    if (
        x.ctype != "float"
        or any(t.ctype != "float" or not _row_vector(t.shape, x.shape, axis) for t in ins)
        or any(t.ctype != "float" for t in stats)
    ):
        return None
    ctx.helper("o2e_layer_norm_args", LN_ARGS)
    ctx.helper("o2e_moments_f32", _fill(MOMENTS, T="float", t="f32", B=MOMENTS_BLOCK))
    if rms:  # no centring
        name, what = "o2e_rms_norm_rows", "RMSNormalization"
        stats = "      const double inv = 1.0 / sqrt(msq + a->eps);\n      mean = 0.0;"
    else:
        name, what = "o2e_layer_norm_rows", "LayerNormalization"
        stats = "      const double inv = 1.0 / sqrt(m2 / (double)n + a->eps);\n      (void)msq;"
    ctx.helper(name, _fill(LN_KERNEL, name=name, what=what, stats=stats))
    ctx.kernel("vectorised rows (blocked moments)")
    opt = [ctx.y(i).sym if not rms and ctx.has_output(i) else "NULL" for i in (1, 2)]
    fields = (
        f".x = {x.sym}, .scale = {ins[0].sym}, .bias = {ins[1].sym if len(ins) > 1 else 'NULL'}, "
        f".y = {ctx.y(0).sym}, .mean = {opt[0]}, .inv = {opt[1]}, .n = {n}, .eps = {eps}"
    )
    if rows > 1 and 2 * x.size >= pool2d.PAR_MIN_WORK:
        _use_engine(ctx)  # o2e_parallel_for and the pool live in o2e_gemm.h
        run = f"o2e_parallel_for({rows}, {name}, &a);"
    else:
        run = f"{name}(&a, 0, {rows});"
    return f"{{\n  o2e_layer_norm_args a = {{{fields}}};\n  {run}\n}}"


# --------------------------------------------------------------------------------------------
# GroupNormalization / InstanceNormalization: statistics per sample and group of channels
# --------------------------------------------------------------------------------------------
# Elements per block of the moments pass: a block is centred on its own mean while it sits in
# L1, so its float partial sums see no cancellation; 1024 keeps the per-block double merge
# (a division or two) small next to the vector work.
MOMENTS_BLOCK = 1024

GN_ARGS = """
/* Arguments of the GroupNormalization / InstanceNormalization kernel: block b of the N*G
 * blocks is the cg*S contiguous values of group b % G of sample b / G; the scale and bias of
 * channel c are at [c], or at [group] when per_group. */
typedef struct {
  const {T} *x, *scale, *bias;
  {T} *y;
  int G, cg, per_group;
  size_t S;
  double eps;
} o2e_group_norm_args_{t};
"""

MOMENTS = """
/* Mean and sum of squared deviations of x[0, n), in one pass over memory. Each block of
 * {B} values is read three times while it is in L1: for its rough mean (the pivot), then for
 * the sums of d = x - pivot and of d*d, each in 32 {T} lanes that the compiler vectorises (one
 * lane array per loop: gcc shuffles badly when a loop feeds two); the blocks are merged in
 * double (Chan, Golub and LeVeque's pairwise update). Centring each block first keeps the
 * float sums free of cancellation however large the mean is next to the spread, which a
 * running sum of x*x is not; 32 lanes keep the adds off a single latency chain. */
static void o2e_moments_{t}(const {T} *restrict x, size_t n, double *mean_out, double *m2_out)
{
  double mean = 0.0, m2 = 0.0;
  size_t done = 0;
  while (done < n) {
    const size_t len = n - done < {B} ? n - done : {B};
    const {T} *restrict b = x + done;
    {T} s[32], q[32], pivot = 0;
    double ds = 0.0, dq = 0.0;
    size_t j;
    int l;
    for (l = 0; l < 32; ++l) s[l] = q[l] = 0;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l];
    for (; j < len; ++j) pivot += b[j];
    for (l = 0; l < 32; ++l) {
      pivot += s[l];
      s[l] = 0;
    }
    pivot /= ({T})len;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l] - pivot;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) {
        const {T} d = b[j + l] - pivot;
        q[l] += d * d;
      }
    for (; j < len; ++j) {
      const double d = b[j] - pivot;
      ds += d;
      dq += d * d;
    }
    for (l = 0; l < 32; ++l) {
      ds += s[l];
      dq += q[l];
    }
    {
      const double bmean = pivot + ds / (double)len, bm2 = dq - ds * ds / (double)len;
      const double delta = bmean - mean, total = (double)(done + len);
      mean += delta * ((double)len / total);
      m2 += (bm2 > 0 ? bm2 : 0) + delta * delta * ((double)done * (double)len / total);
    }
    done += len;
  }
  *mean_out = mean;
  *m2_out = m2;
}
"""

GN_KERNEL = """
/* GroupNormalization / InstanceNormalization{what} over blocks [b0, b1) (norm.py). The output
 * is (x - m) * s + t with m the mean rounded to {T}: the subtraction is exact for values near
 * the mean, so a large mean costs no precision, and the loop vectorises. */
static void {name}(void *arg, int b0, int b1)
{
  const o2e_group_norm_args_{t} *a = (const o2e_group_norm_args_{t} *)arg;
  const size_t S = a->S, n = (size_t)a->cg * S;
  int b, k;
  for (b = b0; b < b1; ++b) {
    const {T} *restrict x = a->x + (size_t)b * n;
    {T} *restrict y = a->y + (size_t)b * n;
    const int g = b % a->G;
    double mean, m2;
    o2e_moments_{t}(x, n, &mean, &m2);
    {
      const double inv = 1.0 / sqrt(m2 / (double)n + a->eps);
      const {T} m = ({T})mean;
      for (k = 0; k < a->cg; ++k) {
        const int at = a->per_group ? g : g * a->cg + k;
        const double s = inv * a->scale[at];
        const {T} sc = ({T})s, sh = ({T})(a->bias[at] - (mean - m) * s);
        const {T} *restrict xc = x + (size_t)k * S;
        {T} *restrict yc = y + (size_t)k * S;
        size_t i;
        for (i = 0; i < S; ++i) {
          const {T} v = (xc[i] - m) * sc + sh;
          yc[i] = {act};
        }
      }
    }
  }
}
"""


def _fill(code: str, **kw: object) -> str:
    for k, v in kw.items():
        code = code.replace("{" + k + "}", str(v))
    return code


def _act_suffix(act: Activation | None) -> str:
    """Part of a helper's name that tells its fused activation, parameters included (as float32
    bits), so each distinct activation gets its own kernel and the name is deterministic."""
    if act is None:
        return ""
    bits = "".join(
        "_" + np.array(v, np.float32).view(np.uint32).item().to_bytes(4, "big").hex()
        for v in (act.alpha, act.beta)
    )
    return "_" + act.op.lower() + (bits if act.op in ("LeakyRelu", "HardSigmoid", "Clip") else "")


def _group_norm_code(ctx: NodeContext, groups: int, per_group: bool) -> str:
    """x [N, C, spatial...]: each (n, group) is one contiguous block of C/groups channels,
    normalised by one call over its whole block, the N*groups blocks split across threads."""
    x, y = ctx.x(0), ctx.y(0)
    T = x.ctype
    t = "f32" if T == "float" else "f64"
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:]))
    act = fused_act(ctx)
    ctx.helper(f"o2e_group_norm_args_{t}", _fill(GN_ARGS, T=T, t=t))
    ctx.helper(f"o2e_moments_{t}", _fill(MOMENTS, T=T, t=t, B=MOMENTS_BLOCK))
    name = f"o2e_group_norm_{t}{_act_suffix(act)}"
    what = f" with a fused {act.op}" if act else ""
    ctx.helper(name, _fill(GN_KERNEL, T=T, t=t, name=name, what=what, act=act_expr(act, "v", T)))
    ctx.kernel("one-pass blocked moments" + (f" + {act.op}" if act else ""))
    n = N * groups
    threaded = n > 1 and 2 * x.size >= pool2d.PAR_MIN_WORK
    if threaded:
        _use_engine(ctx)  # o2e_parallel_for and the pool live in o2e_gemm.h
    fields = (
        f".x = {x.sym}, .scale = {ctx.x(1).sym}, .bias = {ctx.x(2).sym}, .y = {y.sym}, "
        f".G = {groups}, .cg = {C // groups}, .per_group = {int(per_group)}, .S = {S}, "
        f".eps = {c_literal(epsilon(ctx.node, ctx.graph.opset), np.float64)}"
    )
    run = f"o2e_parallel_for({n}, {name}, &a);" if threaded else f"{name}(&a, 0, {n});"
    return f"{{\n  o2e_group_norm_args_{t} a = {{{fields}}};\n  {run}\n}}"


def _group_norm_check(node: Node, graph: Graph) -> str | None:
    if (why := float_input(node, graph)) is not None:
        return why
    t = graph.type_of(node.inputs[0])
    if t is not None and t.shape is not None and len(t.shape) < 2:
        return f"{node.op_type} needs an input of rank >= 2"
    groups = (
        group_norm_attrs(node, graph.opset).num_groups
        if node.op_type == "GroupNormalization"
        else 1
    )
    if t is not None and t.shape is not None and (groups <= 0 or t.shape[1] % groups):
        return f"GroupNormalization num_groups={groups} does not divide the {t.shape[1]} channels"
    return None


@register_op("GroupNormalization", check=_group_norm_check)
def group_norm(ctx: NodeContext) -> str:
    """Scale and bias are per channel since opset 21, per group in opset 18 (GroupNormalization-21)."""
    x = ctx.x(0)
    if x.size == 0:
        return "/* empty */"
    groups = group_norm_attrs(ctx.node, ctx.graph.opset, x.shape[1]).num_groups
    per_group = ctx.graph.opset < 21 and ctx.x(1).size == groups and groups != x.shape[1]
    return _group_norm_code(ctx, groups, per_group)


@register_op("InstanceNormalization", check=_group_norm_check)
def instance_norm(ctx: NodeContext) -> str:
    x = ctx.x(0)
    if x.size == 0:
        return "/* empty */"
    return _group_norm_code(ctx, x.shape[1], False)


# --------------------------------------------------------------------------------------------
# MeanVarianceNormalization, LpNormalization
# --------------------------------------------------------------------------------------------
@register_op("MeanVarianceNormalization", check=float_input)
def mean_variance_norm(ctx: NodeContext) -> str:
    """y = (x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9) over `axes` (default [0, 2, 3]): the
    operator's function body, epsilon included."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    axes = sorted({norm_axis(int(a), x.rank) for a in attr(ctx.node, "axes", ctx.graph.opset)})
    runs = dim_runs(x.shape, set(axes))
    kept = [(n, s) for r, n, s in runs if not r]
    red = [(n, s) for r, n, s in runs if r]
    count = int(np.prod([x.shape[a] for a in axes]))
    kidx = [f"k{i}" for i in range(len(kept))]
    ridx = [f"r{i}" for i in range(len(red))]
    base = offset_expr(kidx, [s for _, s in kept])
    at = offset_expr(ridx, [s for _, s in red])
    inner = loops(ridx, [n for n, _ in red], "  ")
    pad = "  " if red else ""
    return "\n".join(
        [
            *loops(kidx, [n for n, _ in kept]),
            "{",
            f"  const {x.ctype} *xk = {x.sym} + {base};",
            f"  {y.ctype} *yk = {y.sym} + {base};",
            "  double sum = 0.0, sq = 0.0;",
            *inner,
            f"  {pad}{{ const double v = xk[{at}]; sum += v; sq += v * v; }}",
            f"  const double mean = sum / {count}, var = sq / {count} - mean * mean;",
            "  const double inv = 1.0 / (sqrt(var > 0 ? var : 0) + 1e-9);",
            *inner,
            f"  {pad}yk[{at}] = ({y.ctype})((xk[{at}] - mean) * inv);",
            "}",
        ]
    )


def _lp_check(node: Node, graph: Graph) -> str | None:
    if (why := lp_norm_attrs(node, graph.opset).problem()) is not None:
        return f"LpNormalization with {why}: not defined"
    return float_input(node, graph)


@register_op("LpNormalization", check=_lp_check)
def lp_norm(ctx: NodeContext) -> str:
    """y = x / ||x||_p along `axis` (p 1 or 2); 0 where the norm is 0 (as the reference)."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    lp = lp_norm_attrs(ctx.node, ctx.graph.opset, x.rank)
    outer, n, inner = split_axis(x.shape, lp.axis)
    p = lp.p
    term, norm = ("fabs((double)v)", "acc") if p == 1 else ("(double)v * v", "sqrt(acc)")
    return f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t i = 0; i < {inner}; ++i) {{
  const {x.ctype} *xs = {x.sym} + o * {n * inner} + i;
  {y.ctype} *ys = {y.sym} + o * {n * inner} + i;
  double acc = 0.0;
  for (size_t j = 0; j < {n}; ++j) {{ const {x.ctype} v = xs[{along("j", inner)}]; acc += {term}; }}
  const double norm = {norm};
  for (size_t j = 0; j < {n}; ++j) ys[{along("j", inner)}] = ({y.ctype})(norm == 0 ? 0 : xs[{along("j", inner)}] / norm);
}}"""


# --------------------------------------------------------------------------------------------
# BatchNormalization
# --------------------------------------------------------------------------------------------
def _training(node: Node, graph: Graph) -> bool:
    return bn_attrs(node, graph.opset).training


def _bn_check(node: Node, graph: Graph) -> str | None:
    if (why := float_input(node, graph)) is not None:
        return why
    if graph.opset < 9 and not bn_attrs(node, graph.opset).spatial:
        return "BatchNormalization with spatial=0 (per-activation statistics) is not supported"
    if _training(node, graph) and graph.opset < 14:
        return f"training-mode BatchNormalization at opset {graph.opset} is not supported (opset 14 and later are)"
    if graph.opset < 7 and not int(attr(node, "is_test", graph.opset)):
        return "BatchNormalization with is_test=0 before opset 7 is not supported"
    return None


@register_op("BatchNormalization", check=_bn_check)
def batchnorm(ctx: NodeContext) -> str:
    """y = (x - mean) / sqrt(var + eps) * scale + B per channel (inference), or with the batch's
    own statistics plus updated running ones when training_mode=1 (BatchNormalization-14)."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    if _training(ctx.node, ctx.graph):
        return _batchnorm_training(ctx, x, y)
    C = x.shape[1] if x.rank > 1 else 1
    S = int(np.prod(x.shape[2:])) if x.rank > 2 else 1
    N = x.shape[0]
    eps = epsilon(ctx.node, ctx.graph.opset)
    affine = bn_affine(ctx.graph, ctx.node)
    if affine is not None:
        # a BN the fold_batchnorm pass could not fold into a conv: precompute scale and shift
        scale = ctx.weight("scale", affine[0].astype(x.dtype))
        shift = ctx.weight("shift", affine[1].astype(x.dtype))
        sc, sh = f"{scale}[c]", f"{shift}[c]"
    else:
        g, b, m, v = (ctx.x(i).sym for i in range(1, 5))
        sc = f"{g}[c] / sqrt((double){v}[c] + {c_literal(eps, np.float64)})"
        sh = f"{b}[c] - {m}[c] * s"
    return f"""for (size_t n = 0; n < {N}; ++n)
for (size_t c = 0; c < {C}; ++c) {{
  const double s = {sc}, t = {sh};
  const {x.ctype} *xc = {x.sym} + (n * {C} + c) * {S};
  {y.ctype} *yc = {y.sym} + (n * {C} + c) * {S};
  for (size_t i = 0; i < {S}; ++i) yc[i] = ({y.ctype})(xc[i] * s + t);
}}"""


def _batchnorm_training(ctx: NodeContext, x: Tensor, y: Tensor) -> str:
    """Batch statistics over N and the spatial dims (population variance, as the reference);
    running_mean = input_mean·momentum + batch_mean·(1 - momentum), likewise running_var."""
    N, C = x.shape[0], x.shape[1] if x.rank > 1 else 1
    S = int(np.prod(x.shape[2:])) if x.rank > 2 else 1
    eps = c_literal(epsilon(ctx.node, ctx.graph.opset), np.float64)
    mom = c_literal(bn_attrs(ctx.node, ctx.graph.opset).momentum, np.float64)
    g, b, m, v = (ctx.x(i).sym for i in range(1, 5))
    out = []
    if ctx.has_output(1):
        out.append(
            f"  {ctx.y(1).sym}[c] = ({ctx.y(1).ctype})({m}[c] * {mom} + mean * (1 - {mom}));"
        )
    if ctx.has_output(2):
        out.append(f"  {ctx.y(2).sym}[c] = ({ctx.y(2).ctype})({v}[c] * {mom} + var * (1 - {mom}));")
    running = "\n".join(out)
    return f"""for (size_t c = 0; c < {C}; ++c) {{
  double mean = 0.0, var = 0.0;
  for (size_t n = 0; n < {N}; ++n)
    for (size_t i = 0; i < {S}; ++i) mean += {x.sym}[(n * {C} + c) * {S} + i];
  mean /= {N * S};
  for (size_t n = 0; n < {N}; ++n)
    for (size_t i = 0; i < {S}; ++i) {{ const double d = {x.sym}[(n * {C} + c) * {S} + i] - mean; var += d * d; }}
  var /= {N * S};
  const double s = {g}[c] / sqrt(var + {eps}), t = {b}[c] - mean * s;
  for (size_t n = 0; n < {N}; ++n)
    for (size_t i = 0; i < {S}; ++i) {y.sym}[(n * {C} + c) * {S} + i] = ({y.ctype})({x.sym}[(n * {C} + c) * {S} + i] * s + t);
{running}
}}"""


# --------------------------------------------------------------------------------------------
# LRN
# --------------------------------------------------------------------------------------------
# Pixels per unit of work: the window sums of one block for all channels stay in L1, and
# small maps (13x13, 27x27) still give a few units to split across threads.
LRN_BLOCK = 128

LRN_ARGS = """
/* Arguments of the LRN kernel: unit u is pixels [(u % nb) * {B}, ...) of sample u / nb, all
 * C channels of it; the window of channel c is [c - lo, c + hi] clipped to [0, C). */
typedef struct {
  const {T} *x;
  {T} *y;
  int C, S, nb, lo, hi;
  {T} alpha, bias, beta; /* alpha already divided by size */
} o2e_lrn_args_{t};
"""

LRN_KERNEL = """
/* LRN (y = x / (bias + alpha * window sum of x^2)^beta, {what}) over units [u0, u1) (norm.py).
 * Each unit loops over channels with the pixels innermost, so the window sums and the scaling
 * vectorise across pixels; the window is only `size` values, summed directly. */
static void {name}(void *arg, int u0, int u1)
{
  const o2e_lrn_args_{t} *a = (const o2e_lrn_args_{t} *)arg;
  const int C = a->C, S = a->S;
  const {T} alpha = a->alpha, bias = a->bias, beta = a->beta;
  {T} sq[{B}];
  int u, c, k, i;
  (void)beta;
  for (u = u0; u < u1; ++u) {
    const int i0 = (u % a->nb) * {B}, len = S - i0 < {B} ? S - i0 : {B};
    const size_t base = (size_t)(u / a->nb) * C * S + i0;
    for (c = 0; c < C; ++c) {
      const int k0 = c < a->lo ? 0 : c - a->lo, k1 = c + a->hi < C ? c + a->hi : C - 1;
      const {T} *restrict xc = a->x + base + (size_t)c * S;
      {T} *restrict yc = a->y + base + (size_t)c * S;
      for (i = 0; i < len; ++i) sq[i] = 0;
      for (k = k0; k <= k1; ++k) {
        const {T} *restrict xk = a->x + base + (size_t)k * S;
        for (i = 0; i < len; ++i) sq[i] += xk[i] * xk[i];
      }
      i = 0;
{vector}      for (; i < len; ++i) {
        const {T} t = bias + alpha * sq[i];
        yc[i] = {scalar};
      }
    }
  }
}
"""

# x / t^beta for the betas with a short form of correctly rounded operations (a few ulp from
# the exact power, and much faster than powf); the intrinsics exist because gcc will not
# vectorise sqrtf under the default -fmath-errno. The scalar tail may contract bias + alpha*sq
# into an fma where the vector loop does not: an ulp of difference, tied to the pixel's
# position in its block, not to the thread count.
_LRN_SCALAR = {
    "b075": "xc[i] / {sqrt}(t * {sqrt}(t))",  # t^0.75 = sqrt(t * sqrt(t))
    "b05": "xc[i] / {sqrt}(t)",
    "b1": "xc[i] / t",
    "pow": "xc[i] * {pow}(t, -beta)",
}
_LRN_VECTOR = {
    "b075": "{P}_div_ps(x, {P}_sqrt_ps({P}_mul_ps(t, {P}_sqrt_ps(t))))",
    "b05": "{P}_div_ps(x, {P}_sqrt_ps(t))",
}


def _lrn_vector(mode: str) -> str:
    if mode not in _LRN_VECTOR:
        return ""
    out = []
    for guard, P, w in (
        ("#if defined(__AVX512F__)", "_mm512", 16),
        ("#elif defined(__AVX__)", "_mm256", 8),
    ):
        V = "__m512" if w == 16 else "__m256"
        expr = _LRN_VECTOR[mode].replace("{P}", P)
        out.append(
            f"""{guard}
      {{
        const {V} va = {P}_set1_ps(alpha), vb = {P}_set1_ps(bias);
        for (; i + {w} <= len; i += {w}) {{
          const {V} x = {P}_loadu_ps(xc + i);
          const {V} t = {P}_add_ps(vb, {P}_mul_ps(va, {P}_loadu_ps(sq + i)));
          {P}_storeu_ps(yc + i, {expr});
        }}
      }}
"""
        )
    return "".join(out) + "#endif\n"


LRN_INTRINSICS = """
#if defined(__AVX__)
#include <immintrin.h>
#endif
"""


@register_op("LRN", check=float_input)
def lrn(ctx: NodeContext) -> str:
    """y = x / (bias + alpha/size · sum of x² over channels [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉])^beta."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:]))
    lr = lrn_attrs(ctx.node, ctx.graph.opset)
    size, beta = lr.size, lr.beta
    lo, hi = lr.before, lr.after
    T = x.ctype
    t = "f32" if T == "float" else "f64"
    mode = {0.75: "b075", 0.5: "b05", 1.0: "b1"}.get(beta, "pow")
    F = "f" if T == "float" else ""
    scalar = _LRN_SCALAR[mode].replace("{sqrt}", f"sqrt{F}").replace("{pow}", f"pow{F}")
    vector = _lrn_vector(mode) if T == "float" else ""
    if vector:
        ctx.helper("o2e_lrn_intrinsics", LRN_INTRINSICS)
    ctx.helper(f"o2e_lrn_args_{t}", _fill(LRN_ARGS, T=T, t=t, B=LRN_BLOCK))
    name = f"o2e_lrn_{t}_{mode}"
    what = "any beta" if mode == "pow" else f"beta = {beta:g}"
    code = _fill(LRN_KERNEL, T=T, t=t, B=LRN_BLOCK, name=name, what=what)
    ctx.helper(name, code.replace("{vector}", vector).replace("{scalar}", scalar))
    ctx.kernel("channel window vectorised over pixels")
    nb = (S + LRN_BLOCK - 1) // LRN_BLOCK
    n = N * nb
    threaded = n > 1 and x.size * (size + 2) >= pool2d.PAR_MIN_WORK
    if threaded:
        _use_engine(ctx)  # o2e_parallel_for and the pool live in o2e_gemm.h
    L = lambda v: c_literal(v, x.dtype)  # noqa: E731
    fields = (
        f".x = {x.sym}, .y = {y.sym}, .C = {C}, .S = {S}, .nb = {nb}, .lo = {lo}, .hi = {hi}, "
        f".alpha = {L(lr.alpha / size)}, .bias = {L(lr.bias)}, "
        f".beta = {L(beta)}"
    )
    run = f"o2e_parallel_for({n}, {name}, &a);" if threaded else f"{name}(&a, 0, {n});"
    return f"{{\n  o2e_lrn_args_{t} a = {{{fields}}};\n  {run}\n}}"
