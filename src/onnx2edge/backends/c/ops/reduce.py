"""Reductions along axes: the Reduce* family, ArgMax/ArgMin, TopK, and the scans CumSum/CumProd.

Shapes are static, so when the reduced axes are known at conversion time each output element
is one loop nest over its reduced dims (adjacent dims of one kind merged into one loop). Since
opset 18 (13 for ReduceSum) `axes` is an input; when it is not a constant the generated code
reads it and folds every input element into its output element (one pass per fold pass).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....ir import Graph, Node
from ....semantics.records import arg_attrs, reduced_axes, topk_attrs
from ..emitter import NodeContext, Tensor
from ..kernels.pool import pool2d
from . import register_op
from .common import norm_axis, strides
from .loops import along, dim_runs, loops, offset_expr, split_axis

REDUCE_OPS = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)
INT_MIN = {
    "int8_t": "INT8_MIN",
    "int16_t": "INT16_MIN",
    "int32_t": "INT32_MIN",
    "int64_t": "INT64_MIN",
}
INT_MAX = {
    "int8_t": "INT8_MAX",
    "int16_t": "INT16_MAX",
    "int32_t": "INT32_MAX",
    "int64_t": "INT64_MAX",
    "uint8_t": "UINT8_MAX",
    "uint16_t": "UINT16_MAX",
    "uint32_t": "UINT32_MAX",
    "uint64_t": "UINT64_MAX",
}


def runtime_axis_split(axis_sym: str, shape: tuple[int, ...]) -> str:
    """C declarations of `outer`, `n`, `inner` for an axis read at run time from `axis_sym[0]`.

    An axis out of [-rank, rank) is clamped: the spec makes it an error, and clamping keeps
    every access inside the tensor.
    """
    r = len(shape)
    dims = ", ".join(map(str, shape))
    return f"""static const size_t dims[{r}] = {{{dims}}};
int64_t a = (int64_t){axis_sym}[0];
if (a < 0) a += {r};
if (a < 0) a = 0;
if (a > {r - 1}) a = {r - 1};
size_t outer = 1, inner = 1;
for (int64_t d = 0; d < a; ++d) outer *= dims[d];
for (int64_t d = a + 1; d < {r}; ++d) inner *= dims[d];
const size_t n = dims[a];"""


# --------------------------------------------------------------------------------------------
# Reduce*
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fold:
    """How a Reduce* op folds the values `v` of one output element.

    C templates over `{acc}` (the accumulator), `{mx}` (the running max of ReduceLogSumExp's
    first pass), `{v}` (one input value) and `{n}` (how many values were folded).
    """

    acc_type: str  # C type of the accumulator and of `v`
    init: str  # initial accumulator value
    passes: tuple[str, ...]  # one statement per pass over the values
    final: str  # the output value


def fold_of(op: str, dtype: np.dtype, ctype: str) -> Fold:
    """The fold of a Reduce* op (ONNX spec: reduction over an empty set yields the op's identity)."""
    kind = np.dtype(dtype).kind
    is_float = kind == "f"
    # float32 sums accumulate in double: the reference sums pairwise, a float running sum drifts
    wide = "double" if is_float else ("uint64_t" if kind == "u" else "int64_t")
    if op in ("ReduceMax", "ReduceMin"):
        big = op == "ReduceMax"
        if kind == "b":
            return Fold(
                "bool",
                "0" if big else "1",
                ("{acc} = {acc} || {v};" if big else "{acc} = {acc} && {v};",),
                "{acc}",
            )
        if is_float:
            init = "-INFINITY" if big else "INFINITY"
            cmp = ">" if big else "<"
            # NaN propagates, as numpy.maximum.reduce does
            return Fold(
                "double",
                init,
                (f"if ({{v}} {cmp} {{acc}} || isnan({{v}})) {{acc}} = {{v}};",),
                "{acc}",
            )
        init = INT_MIN.get(ctype, "0") if big else INT_MAX[ctype]
        cmp = ">" if big else "<"
        return Fold(ctype, init, (f"if ({{v}} {cmp} {{acc}}) {{acc}} = {{v}};",), "{acc}")
    if op == "ReduceSum":
        return Fold(wide, "0", ("{acc} += {v};",), "{acc}")
    if op == "ReduceMean":
        return Fold(wide, "0", ("{acc} += {v};",), "{acc} / {n}")
    if op == "ReduceProd":
        return Fold(wide, "1", ("{acc} *= {v};",), "{acc}")
    if op == "ReduceSumSquare":
        return Fold(wide, "0", ("{acc} += {v} * {v};",), "{acc}")
    if op == "ReduceL1":
        absv = "fabs({v})" if is_float else ("{v}" if kind == "u" else "({v} < 0 ? -{v} : {v})")
        return Fold(wide, "0", (f"{{acc}} += {absv};",), "{acc}")
    if op == "ReduceL2":
        return Fold("double", "0", ("{acc} += {v} * {v};",), "sqrt({acc})")
    if op == "ReduceLogSum":
        return Fold("double", "0", ("{acc} += {v};",), "log({acc})")
    if op == "ReduceLogSumExp":
        # log(sum(exp(v - m))) + m with m the largest finite value: no overflow (as the reference)
        return Fold(
            "double",
            "0",
            ("if (isfinite({v}) && {v} > {mx}) {mx} = {v};", "{acc} += exp({v} - {mx});"),
            "log({acc}) + {mx}",
        )
    raise AssertionError(op)


def reduce_axes(node: Node, graph: Graph, rank: int) -> list[int] | None:
    """The reduced axes (sorted, non-negative), or None when they are only known at run time
    (semantics.records.reduced_axes: [] with noop_with_empty_axes, the op is element-wise)."""
    return reduced_axes(node, graph, rank)


def _reduce_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None:
        return None
    kind = t.dtype.kind
    if kind == "b" and node.op_type not in ("ReduceMax", "ReduceMin"):
        return f"{node.op_type} on bool is not defined"
    if kind not in "fiub":
        return f"{node.op_type} on {t.dtype.name} is not supported"
    return None


def _reduce_static(x: Tensor, y: Tensor, fold: Fold, reduced: list[int]) -> str:
    """One loop nest per output element over its reduced dims, kept dims outside (x not empty)."""
    runs = dim_runs(x.shape, set(reduced))
    kept = [(n, s) for r, n, s in runs if not r]
    red = [(n, s) for r, n, s in runs if r]
    count = int(np.prod([x.shape[d] for d in reduced]))
    kidx = [f"k{i}" for i in range(len(kept))]
    ridx = [f"r{i}" for i in range(len(red))]
    sub = {"acc": "acc", "mx": "mx", "n": str(count)}
    lines = loops(kidx, [n for n, _ in kept])
    lines.append("{")
    lines.append(f"  const {x.ctype} *xk = {x.sym} + {offset_expr(kidx, [s for _, s in kept])};")
    lines.append(
        f"  {fold.acc_type} acc = {fold.init}{', mx = -INFINITY' if len(fold.passes) > 1 else ''};"
    )
    load = f"const {fold.acc_type} v = xk[{offset_expr(ridx, [s for _, s in red])}];"
    for k, step in enumerate(fold.passes):
        lines += loops(ridx, [n for n, _ in red], "  ")
        lines.append(f"  {'  ' if red else ''}{{ {load} {step.format(**sub, v='v')} }}")
        if k == 0 and len(fold.passes) > 1:
            lines.append("  if (isinf(mx)) mx = 0;  /* no finite value: nothing to shift by */")
    lines.append(
        f"  {y.sym}[{offset_expr(kidx, strides(tuple(n for n, _ in kept)))}] = ({y.ctype})({fold.final.format(**sub)});"
    )
    lines.append("}")
    return "\n".join(lines)


def _reduce_runtime(ctx: NodeContext, x: Tensor, y: Tensor, fold: Fold, axes: Tensor) -> str:
    """Axes read at run time: mark the reduced dims, then fold each x element into its output."""
    r = x.rank
    xst = strides(x.shape)
    acc = ctx.scratch(y.size * 8, fold.acc_type)
    mx = ctx.scratch(y.size * 8, "double") if len(fold.passes) > 1 else ""
    dims = ", ".join(map(str, x.shape))
    where = " + ".join(
        (f"i / {xst[d]} % {x.shape[d]}" if xst[d] != 1 else f"i % {x.shape[d]}") + f" * ost[{d}]"
        for d in range(r)
    )
    sub = {"acc": f"{acc}[o]", "mx": f"{mx}[o]" if mx else "", "n": f"({fold.acc_type})n"}
    lines = [
        f"static const size_t dims[{r}] = {{{dims}}};",
        f"unsigned char red[{r}] = {{0}};",
        f"size_t ost[{r}], n = 1, s = 1;",
        f"for (size_t k = 0; k < {axes.size}; ++k) {{",
        f"  int64_t a = (int64_t){axes.sym}[k];",
        f"  if (a < 0) a += {r};",
        f"  if (a >= 0 && a < {r}) red[a] = 1;",
        "}",
        "/* output strides: 0 along reduced dims, row-major over the kept ones */",
        f"for (int d = {r - 1}; d >= 0; --d) {{",
        "  if (red[d]) { ost[d] = 0; n *= dims[d]; } else { ost[d] = s; s *= dims[d]; }",
        "}",
        # the output shape was fixed at conversion: axes that contradict it would write past it
        f"if (s != {y.size}) return -1;",
        "(void)n;",
        f"for (size_t o = 0; o < {y.size}; ++o) {{ {acc}[o] = {fold.init};{f' {mx}[o] = -INFINITY;' if mx else ''} }}",
    ]
    for k, step in enumerate(fold.passes):
        if x.size:
            lines.append(f"for (size_t i = 0; i < {x.size}; ++i) {{")
            lines.append(f"  const size_t o = {where};")
            lines.append(f"  const {fold.acc_type} v = {x.sym}[i];")
            lines.append(f"  {step.format(**sub, v='v')}")
            lines.append("}")
        if k == 0 and mx:
            lines.append(f"for (size_t o = 0; o < {y.size}; ++o) if (isinf({mx}[o])) {mx}[o] = 0;")
    lines.append(
        f"for (size_t o = 0; o < {y.size}; ++o) {y.sym}[o] = ({y.ctype})({fold.final.format(**sub)});"
    )
    return "\n".join(lines)


def _reduce_empty(y: Tensor, fold: Fold) -> str:
    """An empty input with a non-empty output: every output reduces the empty set."""
    n = "0" if fold.acc_type == "double" else "1"  # an integer mean of nothing: 0 / 1
    value = fold.final.format(acc=f"({fold.acc_type}){fold.init}", mx="0", n=n)
    return f"/* reduction over an empty set */\nfor (size_t o = 0; o < {y.size}; ++o) {y.sym}[o] = ({y.ctype})({value});"


@register_op(*REDUCE_OPS, check=_reduce_check)
def reduce(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    if y.size == 0:
        return "/* empty output */"
    fold = fold_of(ctx.node.op_type, x.dtype, x.ctype)
    axes = reduce_axes(ctx.node, ctx.graph, x.rank)
    if x.size == 0:
        return _reduce_empty(y, fold)
    if axes is None:
        return _reduce_runtime(ctx, x, y, fold, ctx.x(1))
    if (
        ctx.node.op_type == "ReduceMean"
        and x.dtype == np.float32
        and axes
        and sorted(axes) == list(range(x.rank - len(axes), x.rank))
        and x.size // y.size >= 16
    ):
        # trailing axes (SE's mean over H, W): GlobalAveragePool's kernel, sixteen float
        # partial sums as onnxruntime's, where the double running sum below serialises on
        # the add latency (0.22 ms vs 0.03 ms on an SE block, issue 34)
        return pool2d.plane_means(ctx, x.sym, y.sym, y.size, x.size // y.size)
    return _reduce_static(x, y, fold, axes)


# --------------------------------------------------------------------------------------------
# ArgMax / ArgMin
# --------------------------------------------------------------------------------------------
@register_op("ArgMax", "ArgMin")
def arg_max_min(ctx: NodeContext) -> str:
    """Index of the first (or with select_last_index, the last) extreme value along `axis`."""
    x, y = ctx.x(0), ctx.y(0)
    aa = arg_attrs(ctx.node, ctx.graph.opset, x.rank)
    axis = aa.axis
    outer, n, inner = split_axis(x.shape, axis)
    if y.size == 0 or n == 0:
        return "/* empty */"
    cmp = ">" if ctx.node.op_type == "ArgMax" else "<"
    if aa.select_last_index:
        cmp += "="
    return f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t i = 0; i < {inner}; ++i) {{
  const {x.ctype} *xs = {x.sym} + o * {n * inner} + i;
  {x.ctype} best = xs[0];
  int64_t at = 0;
  for (size_t j = 1; j < {n}; ++j)
    if (xs[{along("j", inner)}] {cmp} best) {{ best = xs[{along("j", inner)}]; at = (int64_t)j; }}
  {y.sym}[o * {inner} + i] = at;
}}"""


# --------------------------------------------------------------------------------------------
# TopK
# --------------------------------------------------------------------------------------------
@register_op("TopK")
def top_k(ctx: NodeContext) -> str:
    """The k largest (or smallest) values along `axis`, sorted, ties to the lower index.

    k is read from the output shape (static), so a K input computed at run time is fine.
    Insertion into the sorted output: O(n·k), no scratch memory.
    """
    x, yv = ctx.x(0), ctx.y(0)
    ta = topk_attrs(ctx.node, ctx.graph.opset, x.rank)
    axis = ta.axis
    outer, n, inner = split_axis(x.shape, axis)
    k = yv.shape[axis]
    if yv.size == 0:
        return "/* k = 0: empty outputs */"
    # `better` is strict: an equal value never passes an earlier one (the reference's tie rule)
    better = ">" if ta.largest else "<"
    yi = ctx.y(1).sym if ctx.has_output(1) else None
    move_i = f" ix[{along('p', inner)}] = ix[{along('p - 1', inner)}];" if yi else ""
    set_i = f" ix[{along('p', inner)}] = (int64_t)j;" if yi else ""
    decl_i = f"\n  int64_t *ix = {yi} + o * {k * inner} + i;" if yi else ""
    return f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t i = 0; i < {inner}; ++i) {{
  const {x.ctype} *xs = {x.sym} + o * {n * inner} + i;
  {yv.ctype} *vs = {yv.sym} + o * {k * inner} + i;{decl_i}
  size_t cnt = 0;
  for (size_t j = 0; j < {n}; ++j) {{
    const {x.ctype} v = xs[{along("j", inner)}];
    if (cnt == {k} && !(v {better} vs[{(k - 1) * inner}])) continue;
    size_t p = cnt < {k} ? cnt++ : {k - 1};
    for (; p > 0 && v {better} vs[{along("p - 1", inner)}]; --p) {{ vs[{along("p", inner)}] = vs[{along("p - 1", inner)}];{move_i} }}
    vs[{along("p", inner)}] = v;{set_i}
  }}
}}"""


# --------------------------------------------------------------------------------------------
# CumSum / CumProd
# --------------------------------------------------------------------------------------------
@register_op("CumSum", "CumProd")
def cumulative(ctx: NodeContext) -> str:
    """Running sum / product along `axis` (an input: a constant, or read at run time).

    exclusive: element j gets the fold of the elements before it; reverse: scan from the end.
    """
    x, y = ctx.x(0), ctx.y(0)
    if x.size == 0:
        return "/* empty */"
    prod = ctx.node.op_type == "CumProd"
    acc_type = "double" if x.dtype.kind == "f" else x.ctype
    step = "acc *= v;" if prod else "acc += v;"
    store = f"{y.sym}[k] = ({y.ctype})acc;"
    body = f"{store} {step}" if int(ctx.attr("exclusive")) else f"{step} {store}"
    jj = "n - 1 - j" if int(ctx.attr("reverse")) else "j"
    c = ctx.const(1)
    if c is not None:
        outer, n, inner = split_axis(x.shape, norm_axis(int(np.asarray(c).reshape(-1)[0]), x.rank))
        pre = f"const size_t outer = {outer}, n = {n}, inner = {inner};"
    else:
        pre = "/* the axis arrives at run time */\n" + runtime_axis_split(ctx.x(1).sym, x.shape)
    return f"""{pre}
for (size_t o = 0; o < outer; ++o)
for (size_t i = 0; i < inner; ++i) {{
  {acc_type} acc = {1 if prod else 0};
  for (size_t j = 0; j < n; ++j) {{
    const size_t k = (o * n + {jj}) * inner + i;
    const {acc_type} v = {x.sym}[k];
    {body}
  }}
}}"""
