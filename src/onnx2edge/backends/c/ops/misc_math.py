"""Einsum (equation parsed at conversion time into plain loops), Det, and the losses
NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from collections import Counter

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import attr
from ..emitter import NodeContext, Tensor
from . import register_op
from .checks import float_input
from .common import strides


# --------------------------------------------------------------------------------------------
# Einsum
# --------------------------------------------------------------------------------------------
def parse_einsum(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels of each input's dims and of the output's (ONNX Einsum spec).

    Letters are labels; the dims an ellipsis stands for get labels "...0", "...1", ...,
    right-aligned across inputs (numpy broadcasting). Without "->" the output is the
    ellipsis dims, then the letters seen exactly once in ASCII order.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation has {len(terms)} input terms for {len(ranks)} inputs")
    n_ell = max(
        (r - len(t) + 3 for t, r in zip(terms, ranks, strict=True) if "..." in t), default=0
    )

    def labels(term: str, rank: int | None) -> list[str]:
        if "..." not in term:
            return list(term)
        a, b = term.split("...")
        k = n_ell if rank is None else rank - len(a) - len(b)
        return [*a, *(f"...{n_ell - k + i}" for i in range(k)), *b]

    ins = [labels(t, r) for t, r in zip(terms, ranks, strict=True)]
    if arrow:
        return ins, labels(rhs, None)
    seen = Counter(lab for t in ins for lab in t if not lab.startswith("..."))
    return ins, [f"...{i}" for i in range(n_ell)] + sorted(lab for lab, c in seen.items() if c == 1)


def _einsum_check(node: Node, graph: Graph) -> str | None:
    ranks = []
    for name in node.inputs:
        t = graph.type_of(name)
        if t is None or t.shape is None:
            return "Einsum input of unknown rank"
        ranks.append(len(t.shape))
    try:
        ins, out = parse_einsum(str(node.attr("equation")), ranks)
    except ValueError as e:
        return f"Einsum equation {node.attr('equation')!r}: {e}"
    if len(set(out)) != len(out) or not set(out) <= {lab for t in ins for lab in t}:
        return f"Einsum equation {node.attr('equation')!r}: the output labels must be distinct input labels"
    return None


def _cvar(label: str) -> str:
    return f"e{label[3:]}" if label.startswith("...") else f"i_{label}"


@register_op("Einsum", check=_einsum_check)
def einsum(ctx: NodeContext) -> str:
    """One loop per output label (row-major over y), the summed labels inside."""
    ins = [ctx.x(i) for i in range(ctx.n_inputs)]
    y = ctx.y(0)
    in_labels, out_labels = parse_einsum(str(ctx.attr("equation")), [t.rank for t in ins])
    size: dict[str, int] = {}
    for t, labs in zip(ins, in_labels, strict=True):
        for lab, n in zip(labs, t.shape, strict=True):
            size[lab] = max(size.get(lab, 1), n) if n != 0 else 0
    summed = [lab for labs in in_labels for lab in labs if lab not in out_labels]
    summed = list(dict.fromkeys(summed))
    if y.size == 0:
        return "/* empty output */"
    wide = "double" if y.dtype.kind == "f" else ("uint64_t" if y.dtype.kind == "u" else "int64_t")

    def offset(shape: tuple[int, ...], labs: list[str]) -> str:
        # a label repeated within one operand walks its diagonal: the strides add up
        st: dict[str, int] = {}
        for lab, n, s in zip(labs, shape, strides(shape), strict=True):
            if n != 1:
                st[lab] = st.get(lab, 0) + s
        return (
            " + ".join(_cvar(lab) if s == 1 else f"{_cvar(lab)} * {s}" for lab, s in st.items())
            or "0"
        )

    loops = lambda labs, ind: [  # noqa: E731
        f"{ind}for (size_t {_cvar(lab)} = 0; {_cvar(lab)} < {size[lab]}; ++{_cvar(lab)})"
        for lab in labs
        if size[lab] != 1
    ]
    yshape = tuple(size[lab] for lab in out_labels)
    product = " * ".join(
        f"({wide}){t.sym}[{offset(t.shape, labs)}]"
        if k == 0
        else f"{t.sym}[{offset(t.shape, labs)}]"
        for k, (t, labs) in enumerate(zip(ins, in_labels, strict=True))
    )
    eq = str(ctx.attr("equation")).replace("*/", "")
    lines = [
        f"/* einsum {eq}: loops over the output labels, then the summed ones */",
        *loops(out_labels, ""),
        "{",
    ]
    lines.append(f"  {wide} acc = 0;")
    if all(size[lab] for lab in summed):
        inner = loops(summed, "  ")
        lines += inner
        lines.append(f"  {'  ' if inner else ''}acc += {product};")
    lines.append(f"  {y.sym}[{offset(yshape, out_labels)}] = ({y.ctype})acc;")
    lines.append("}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Det
# --------------------------------------------------------------------------------------------
DET = r"""
/* Determinant of the n x n matrix `a` (destroyed) by Gaussian elimination with partial pivoting. */
static double o2e_det(double *a, int n)
{
  double det = 1.0;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (fabs(a[r * n + c]) > fabs(a[p * n + c])) p = r;
    if (a[p * n + c] == 0.0) return 0.0;
    if (p != c) {
      for (int k = 0; k < n; ++k) { const double t = a[c * n + k]; a[c * n + k] = a[p * n + k]; a[p * n + k] = t; }
      det = -det;
    }
    det *= a[c * n + c];
    for (int r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (int k = c + 1; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
    }
  }
  return det;
}
"""


@register_op("Det", check=float_input)
def det(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    m = x.shape[-1]
    if y.size == 0:
        return "/* empty */"
    ctx.helper("o2e_det", DET)
    work = ctx.scratch(max(m * m, 1) * 8, "double")
    return f"""for (size_t b = 0; b < {y.size}; ++b) {{
  for (size_t i = 0; i < {m * m}; ++i) {work}[i] = {x.sym}[b * {m * m} + i];
  {y.sym}[b] = ({y.ctype})o2e_det({work}, {m});
}}"""


# --------------------------------------------------------------------------------------------
# NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss
# --------------------------------------------------------------------------------------------
def _loss_check(node: Node, graph: Graph) -> str | None:
    if (why := float_input(node, graph)) is not None:
        return why
    if str(attr(node, "reduction", graph.opset)) not in ("none", "sum", "mean"):
        return f"{node.op_type} reduction {node.attr('reduction')!r} is not defined"
    t = graph.type_of(node.inputs[0])
    if t is not None and t.shape is not None and len(t.shape) < 2:
        return f"{node.op_type} needs input of shape [N, C, ...]"
    return None


def _loss(ctx: NodeContext, x: Tensor, log_prob: bool) -> str:
    """loss[n][d] = -w[t]·logp[n][t][d] with t = target[n][d] (0 where t is ignore_index),
    reduced by none / sum / mean (sum divided by the sum of the weights used).

    For SoftmaxCrossEntropyLoss, logp is the log-softmax of the scores over C, computed
    per (n, d) and written to the optional log_prob output.
    """
    tg, y = ctx.x(1), ctx.y(0)
    N, C = x.shape[:2]
    D = int(np.prod(x.shape[2:]))
    reduction = str(ctx.attr("reduction"))
    ii = ctx.attr("ignore_index")
    w = f"{ctx.x(2).sym}[t]" if ctx.has_input(2) else "1"
    # a target outside [0, C) is invalid (spec); it contributes nothing instead of reading out of bounds
    if N * D == 0 or C == 0:
        return (
            "/* empty */"
            if y.size == 0
            else f"{y.sym}[0] = {'0' if reduction == 'sum' else 'NAN'};"
        )
    valid = "t >= 0 && t < " + str(C) + ("" if ii is None else f" && t != {int(ii)}")
    lines = [
        "double total = 0.0, wsum = 0.0;",
        f"for (size_t n = 0; n < {N}; ++n)",
        f"for (size_t d = 0; d < {D}; ++d) {{",
    ]
    lines.append(f"  const {x.ctype} *xs = {x.sym} + n * {C * D} + d;")
    if log_prob:
        lines.append("  double mx = -INFINITY, sum = 0.0;")
        lines.append(f"  for (size_t c = 0; c < {C}; ++c) if (xs[c * {D}] > mx) mx = xs[c * {D}];")
        lines.append(f"  for (size_t c = 0; c < {C}; ++c) sum += exp((double)xs[c * {D}] - mx);")
        lines.append("  const double lse = mx + log(sum);")
        if ctx.has_output(1):
            lp = ctx.y(1)
            lines.append(
                f"  for (size_t c = 0; c < {C}; ++c) {lp.sym}[n * {C * D} + c * {D} + d] = ({lp.ctype})((double)xs[c * {D}] - lse);"
            )
        logp = f"((double)xs[t * {D}] - lse)"
    else:
        logp = f"(double)xs[t * {D}]"
    lines.append(f"  const int64_t t = (int64_t){tg.sym}[n * {D} + d];")
    lines.append("  double loss = 0.0, wt = 0.0;")
    lines.append(f"  if ({valid}) {{ wt = {w}; loss = -{logp} * wt; }}")
    if reduction == "none":
        lines.append(f"  {y.sym}[n * {D} + d] = ({y.ctype})loss;")
    lines.append("  total += loss; wsum += wt;")
    lines.append("}")
    if reduction == "none":
        lines.append("(void)total; (void)wsum;")
    elif reduction == "sum":
        lines.append(f"{y.sym}[0] = ({y.ctype})total;")
        lines.append("(void)wsum;")
    else:
        lines.append(f"{y.sym}[0] = ({y.ctype})(total / wsum);")
    return "\n".join(lines)


@register_op("NegativeLogLikelihoodLoss", check=_loss_check)
def nll_loss(ctx: NodeContext) -> str:
    return _loss(ctx, ctx.x(0), log_prob=False)


@register_op("SoftmaxCrossEntropyLoss", check=_loss_check)
def softmax_cross_entropy_loss(ctx: NodeContext) -> str:
    return _loss(ctx, ctx.x(0), log_prob=True)
