"""Normalisations and the softmax family: Softmax / LogSoftmax / Hardmax, LayerNormalization,
RMSNormalization, GroupNormalization, InstanceNormalization, MeanVarianceNormalization,
LpNormalization, BatchNormalization, LRN.

float32 and float64. Statistics (sums, means, variances) accumulate in double: the reference
computes them with numpy's pairwise sums, which a float running sum would drift from.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op
from .common import broadcast_strides, norm_axis, strides
from .reduce import along, dim_runs, loops, offset_expr, split_axis


def float_input(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype not in (np.float32, np.float64):
        return f"{node.op_type} on {t.dtype.name} is not supported (float32 and float64 only)"
    return None


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
    if ctx.graph.opset < 13:
        axis = norm_axis(int(ctx.attr("axis", 1)), x.rank)
        return int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])), 1
    return split_axis(x.shape, norm_axis(int(ctx.attr("axis", -1)), x.rank))


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
    # subtract the max first: exp never overflows (softmax_large_number). exp in the input's
    # precision (1 ulp), the sum in double.
    T, F = x.ctype, "" if x.ctype == "double" else "f"
    if op == "Softmax":
        tail = f"""  for (size_t j = 0; j < {n}; ++j) {{ const {T} e = exp{F}(xs[{along("j", inner)}] - mx); ys[{along("j", inner)}] = e; sum += e; }}
  for (size_t j = 0; j < {n}; ++j) ys[{along("j", inner)}] = ({T})(ys[{along("j", inner)}] / sum);"""
    else:
        tail = f"""  for (size_t j = 0; j < {n}; ++j) sum += exp{F}(xs[{along("j", inner)}] - mx);
  const double lse = mx + log(sum);
  for (size_t j = 0; j < {n}; ++j) ys[{along("j", inner)}] = ({T})(xs[{along("j", inner)}] - lse);"""
    return f"""{head}
  {T} mx = xs[0];
  double sum = 0.0;
  for (size_t j = 1; j < {n}; ++j) if (xs[{along("j", inner)}] > mx) mx = xs[{along("j", inner)}];
{tail}
}}"""


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
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    outer, n = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    if x.size == 0:
        return "/* empty */"
    eps = c_literal(float(ctx.attr("epsilon", 1e-5)), np.float64)
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


# --------------------------------------------------------------------------------------------
# GroupNormalization / InstanceNormalization: statistics per sample and group of channels
# --------------------------------------------------------------------------------------------
def _group_norm_code(x: Tensor, y: Tensor, groups: int, eps: float, scale: str, bias: str) -> str:
    """x [N, C, spatial...]: each (n, group) is one contiguous block of C/groups channels.

    `scale` / `bias` are C expressions of the channel `c` (and group `g`).
    """
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:]))
    cg = C // groups
    block = cg * S
    return f"""for (size_t n = 0; n < {N}; ++n)
for (size_t g = 0; g < {groups}; ++g) {{
  const {x.ctype} *xg = {x.sym} + (n * {groups} + g) * {block};
  {y.ctype} *yg = {y.sym} + (n * {groups} + g) * {block};
  double mean = 0.0, var = 0.0;
  for (size_t i = 0; i < {block}; ++i) mean += xg[i];
  mean /= {block};
  for (size_t i = 0; i < {block}; ++i) {{ const double d = xg[i] - mean; var += d * d; }}
  const double inv = 1.0 / sqrt(var / {block} + {c_literal(eps, np.float64)});
  for (size_t k = 0; k < {cg}; ++k) {{
    const size_t c = g * {cg} + k;
    const double s = inv * {scale}, t = {bias} - mean * s;
    for (size_t i = k * {S}; i < (k + 1) * {S}; ++i) yg[i] = ({y.ctype})(xg[i] * s + t);
    (void)c;
  }}
}}"""


def _group_norm_check(node: Node, graph: Graph) -> str | None:
    if (why := float_input(node, graph)) is not None:
        return why
    t = graph.type_of(node.inputs[0])
    if t is not None and t.shape is not None and len(t.shape) < 2:
        return f"{node.op_type} needs an input of rank >= 2"
    groups = int(node.attr("num_groups", 0) or 0) if node.op_type == "GroupNormalization" else 1
    if t is not None and t.shape is not None and (groups <= 0 or t.shape[1] % groups):
        return f"GroupNormalization num_groups={groups} does not divide the {t.shape[1]} channels"
    return None


@register_op("GroupNormalization", check=_group_norm_check)
def group_norm(ctx: NodeContext) -> str:
    """Scale and bias are per channel since opset 21, per group in opset 18 (GroupNormalization-21)."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    groups = int(ctx.attr("num_groups"))
    per_group = ctx.graph.opset < 21 and ctx.x(1).size == groups and groups != x.shape[1]
    at = "[g]" if per_group else "[c]"
    return _group_norm_code(
        x, y, groups, float(ctx.attr("epsilon", 1e-5)), ctx.x(1).sym + at, ctx.x(2).sym + at
    )


@register_op("InstanceNormalization", check=_group_norm_check)
def instance_norm(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    eps = float(ctx.attr("epsilon", 1e-5))
    return _group_norm_code(x, y, x.shape[1], eps, ctx.x(1).sym + "[c]", ctx.x(2).sym + "[c]")


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
    axes = sorted({norm_axis(int(a), x.rank) for a in ctx.attr("axes", [0, 2, 3])})
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
    if int(node.attr("p", 2)) not in (1, 2):
        return f"LpNormalization with p={node.attr('p')} is not defined (p is 1 or 2)"
    return float_input(node, graph)


@register_op("LpNormalization", check=_lp_check)
def lp_norm(ctx: NodeContext) -> str:
    """y = x / ||x||_p along `axis` (p 1 or 2); 0 where the norm is 0 (as the reference)."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    outer, n, inner = split_axis(x.shape, norm_axis(int(ctx.attr("axis", -1)), x.rank))
    p = int(ctx.attr("p", 2))
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
    if graph.opset >= 14:
        return bool(int(node.attr("training_mode", 0)))
    return any(node.outputs[1:])


def _bn_check(node: Node, graph: Graph) -> str | None:
    if (why := float_input(node, graph)) is not None:
        return why
    if graph.opset < 9 and int(node.attr("spatial", 1)) == 0:
        return "BatchNormalization with spatial=0 (per-activation statistics) is not supported"
    if _training(node, graph) and graph.opset < 14:
        return f"training-mode BatchNormalization at opset {graph.opset} is not supported (opset 14 and later are)"
    if graph.opset < 7 and not int(node.attr("is_test", 0)):
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
    eps = float(ctx.attr("epsilon", 1e-5))
    consts = [ctx.const(i) for i in range(1, 5)]
    if all(c is not None for c in consts):
        # a BN the fold_batchnorm pass could not fold into a conv: precompute scale and shift
        g, b, m, v = (np.asarray(c, np.float64) for c in consts)  # type: ignore[arg-type]
        s = g / np.sqrt(v + eps)
        scale = ctx.weight("scale", s.astype(x.dtype))
        shift = ctx.weight("shift", (b - m * s).astype(x.dtype))
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
    eps = c_literal(float(ctx.attr("epsilon", 1e-5)), np.float64)
    mom = c_literal(float(ctx.attr("momentum", 0.9)), np.float64)
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
@register_op("LRN", check=float_input)
def lrn(ctx: NodeContext) -> str:
    """y = x / (bias + alpha/size · sum of x² over channels [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉])^beta."""
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:]))
    size = int(ctx.attr("size"))
    alpha = float(ctx.attr("alpha", 1e-4)) / size
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    L = lambda v: c_literal(v, np.float64)  # noqa: E731
    return f"""for (size_t n = 0; n < {N}; ++n)
for (size_t c = 0; c < {C}; ++c) {{
  const size_t c0 = {"c" if lo == 0 else f"c < {lo} ? 0 : c - {lo}"}, c1 = c + {hi} > {C - 1} ? {C - 1} : c + {hi};
  const {x.ctype} *xn = {x.sym} + n * {C * S};
  for (size_t i = 0; i < {S}; ++i) {{
    double sq = 0.0;
    for (size_t k = c0; k <= c1; ++k) {{ const double v = xn[k * {S} + i]; sq += v * v; }}
    {y.sym}[(n * {C} + c) * {S} + i] = ({y.ctype})(xn[c * {S} + i] / pow({L(bias)} + {L(alpha)} * sq, {L(beta)}));
  }}
}}"""
