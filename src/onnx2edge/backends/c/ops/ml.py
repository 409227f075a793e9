"""ai.onnx.ml ops with plain tensor inputs and outputs: Binarizer, ArrayFeatureExtractor and
TreeEnsemble (the trees flattened into constant tables at conversion time).

(The ml ops on maps, sequences or strings, ZipMap, DictVectorizer, ..., have no C form here.)
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import attr
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import elementwise

DOMAIN = "ai.onnx.ml"


def _numeric(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind not in "fiu":
        return f"{node.op_type} takes a numeric tensor"
    return None


@register_op(f"{DOMAIN}:Binarizer", check=_numeric)
def binarizer(ctx: NodeContext) -> str:
    """y = x > threshold ? 1 : 0 in x's type (NaN > threshold is false: 0, as the ONNX
    reference; onnxruntime refuses NaN input)."""
    x = ctx.x(0)
    # no onnx schema here (another domain): threshold's default is spelled out
    th = c_literal(float(ctx.attr("threshold")), x.dtype if x.dtype.kind == "f" else "float64")
    return elementwise(ctx, [x], ctx.y(0), f"a > {th} ? 1 : 0")


def _afe_check(node: Node, graph: Graph) -> str | None:
    if (why := _numeric(node, graph)) is not None:
        return why
    t = graph.type_of(node.inputs[1])
    if t is None or t.dtype.name != "int64":
        return "ArrayFeatureExtractor indices must be int64"
    return None


@register_op(f"{DOMAIN}:ArrayFeatureExtractor", check=_afe_check)
def array_feature_extractor(ctx: NodeContext) -> str:
    """y[..., j] = x[..., idx[j]] (a 1-D x gives one row); an index out of [0, last dim) is an
    error in onnxruntime: here it reads nothing and writes 0."""
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    last = x.shape[-1]
    rows = x.size // last if last else 0
    k = idx.size
    return f"""for (size_t r = 0; r < {rows}; ++r)
  for (size_t j = 0; j < {k}; ++j) {{
    const int64_t i = {idx.sym}[j];
    {y.sym}[r * {k} + j] = (i >= 0 && i < {last}) ? {x.sym}[r * {last} + (size_t)i] : 0;
  }}"""


# --------------------------------------------------------------------------------------------
# TreeEnsemble (ai.onnx.ml 5)
# --------------------------------------------------------------------------------------------
_MODES = ("<=", "<", ">=", ">", "==", "!=", "member")


def _tree_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in ("float32", "float64"):
        return "TreeEnsemble takes float32 or float64 features"
    if len(graph.shape_of(node.inputs[0])) != 2:
        return "TreeEnsemble takes [N, features]"
    if int(attr(node, "post_transform", graph.opset)) != 0:
        return "TreeEnsemble post_transform other than NONE is not supported"
    if int(attr(node, "aggregate_function", graph.opset)) not in (0, 1, 2, 3):
        return "TreeEnsemble aggregate_function must be AVERAGE, SUM, MIN or MAX"
    return None


def _flatten_trees(node: Node) -> tuple[list[list[float]], list[list[float]], list[int]]:
    """Node table rows [mode, feature, split, missing_true, true_next, false_next, set_start,
    set_len] (a next < 0 is leaf -next-1), the membership sets, and each tree's entry."""
    a = lambda k, d=None: node.attr(k, d)  # noqa: E731
    splits = [float(v) for v in np.asarray(a("nodes_splits")).reshape(-1)]
    modes = [int(v) for v in np.asarray(a("nodes_modes")).reshape(-1)]
    feats = [int(v) for v in a("nodes_featureids")]
    tn, fn = [int(v) for v in a("nodes_truenodeids")], [int(v) for v in a("nodes_falsenodeids")]
    tl, fl = [int(v) for v in a("nodes_trueleafs")], [int(v) for v in a("nodes_falseleafs")]
    miss = a("nodes_missing_value_tracks_true")
    miss = [int(v) for v in np.asarray(miss).reshape(-1)] if miss is not None else [0] * len(modes)
    members = a("membership_values")
    members = [float(v) for v in np.asarray(members).reshape(-1)] if members is not None else []
    sets: list[float] = []
    pos = 0
    rows = []
    for i, m in enumerate(modes):
        start = len(sets)
        if m == 6:  # the next NaN-terminated run of membership_values
            while pos < len(members) and not np.isnan(members[pos]):
                sets.append(members[pos])
                pos += 1
            pos += 1
        nxt_t = -tn[i] - 1 if tl[i] else tn[i]
        nxt_f = -fn[i] - 1 if fl[i] else fn[i]
        rows.append([m, feats[i], splits[i], miss[i], nxt_t, nxt_f, start, len(sets) - start])
    roots = []
    for r in (int(v) for v in a("tree_roots")):
        leaf = tl[r] and fl[r] and tn[r] == fn[r]
        roots.append(-tn[r] - 1 if leaf else r)
    return rows, [sets], roots


@register_op(f"{DOMAIN}:TreeEnsemble", check=_tree_check)
def tree_ensemble(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    n, nf = x.shape
    nt = y.shape[1]
    rows, (sets,), roots = _flatten_trees(ctx.node)
    wts = [float(v) for v in np.asarray(ctx.attr("leaf_weights")).reshape(-1)]
    tids = [int(v) for v in ctx.attr("leaf_targetids")]
    # no onnx schema here (another domain): aggregate_function's default is spelled out
    agg = int(ctx.attr("aggregate_function"))
    ints = ctx.weight(
        "tnodes",
        np.array([[int(r[0]), r[1], r[3], r[4], r[5], r[6], r[7]] for r in rows], np.int64),
    )
    spl = ctx.weight("tsplit", np.array([r[2] for r in rows], np.float64))
    mem = ctx.weight("tset", np.array(sets or [0.0], np.float64))
    lw = ctx.weight("lw", np.array(wts, np.float64))
    lt = ctx.weight("lt", np.array(tids, np.int64))
    rt = ctx.weight("roots", np.array(roots, np.int64))
    big = repr(float(np.finfo(x.dtype).max))  # MIN / MAX start at the type's extremes
    init = {0: "0.0", 1: "0.0", 2: big, 3: f"-{big}"}[agg]
    combine = {
        0: f"acc[tid] += w / {len(roots)}.0;",
        1: "acc[tid] += w;",
        2: "if (w < acc[tid]) acc[tid] = w;",
        3: "if (w > acc[tid]) acc[tid] = w;",
    }[agg]
    acc = ctx.scratch(max(nt, 1) * 8, "double")
    return f"""for (size_t r = 0; r < {n}; ++r) {{
  double *acc = {acc};
  for (size_t k = 0; k < {nt}; ++k) acc[k] = {init};
  for (size_t t = 0; t < {len(roots)}; ++t) {{
    int64_t i = {rt}[t];
    while (i >= 0) {{
      const int64_t *nd = {ints} + i * 7;
      const double v = (double){x.sym}[r * {nf} + (size_t)nd[1]], s = {spl}[i];
      int go;
      switch (nd[0]) {{
        case 0: go = v <= s; break;
        case 1: go = v < s; break;
        case 2: go = v >= s; break;
        case 3: go = v > s; break;
        case 4: go = v == s; break;
        case 5: go = v != s; break;
        default: go = 0; for (int64_t m = 0; m < nd[6]; ++m) if ({mem}[nd[5] + m] == v) go = 1;
      }}
      if (nd[2] && isnan(v)) go = 1;  /* missing values follow the true branch */
      i = go ? nd[3] : nd[4];
    }}
    const int64_t leaf = -i - 1;
    const int64_t tid = {lt}[leaf];
    const double w = {lw}[leaf];
    if (tid >= 0 && tid < {nt}) {{ {combine} }}
  }}
  for (size_t k = 0; k < {nt}; ++k) {y.sym}[r * {nt} + k] = ({y.ctype})acc[k];
}}"""
