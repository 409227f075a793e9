"""TfIdfVectorizer on integer tokens: n-gram counts (with skips) weighted TF, IDF or TF-IDF.

The pool of n-grams is known at conversion time, so it becomes a flat table (length, tokens,
output column) of the n-grams whose length lies in [min_gram_length, max_gram_length]; the C
counts, for each skip distance and start position, the pooled n-grams the tokens spell. That
is what the spec's trie walk counts: unigrams once (at skip distance 1), longer n-grams once per
skip distance (onnxruntime's and the ONNX reference's order). String pools are not supported.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext
from . import register_op


def _grams(node: Node) -> list[tuple[int, list[int], int]]:
    """(length, tokens, output column) of every pooled n-gram within the length range."""
    pool = [int(v) for v in node.attr("pool_int64s", [])]
    counts = [int(v) for v in node.attr("ngram_counts", [])]
    indexes = [int(v) for v in node.attr("ngram_indexes", [])]
    lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    out, gid = [], 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        for k in range((end - start) // size):
            if lo <= size <= hi:
                toks = pool[start + k * size : start + (k + 1) * size]
                out.append((size, toks, indexes[gid]))
            gid += 1
    return out


def _check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in ("int32", "int64"):
        return "TfIdfVectorizer takes int32 or int64 tokens (string pools are not supported)"
    if not node.attr("pool_int64s"):
        return "TfIdfVectorizer needs pool_int64s"
    if str(node.attr("mode")) not in ("TF", "IDF", "TFIDF"):
        return f"TfIdfVectorizer mode {node.attr('mode')!r} is not TF, IDF or TFIDF"
    if len(graph.shape_of(node.inputs[0])) not in (1, 2):
        return "TfIdfVectorizer takes [C] or [N, C] tokens"
    return None


@register_op("TfIdfVectorizer", check=_check)
def tfidf_vectorizer(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    rows, length = (1, x.shape[0]) if x.rank == 1 else x.shape
    cols = y.shape[-1]
    grams = _grams(ctx.node)
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    skips = int(ctx.attr("max_skip_count")) + 1
    mode = str(ctx.attr("mode"))
    # weights has no schema default: this is the value the spec's text gives
    weights = [float(v) for v in ctx.attr("weights", []) or []]
    if y.size == 0:
        return "/* empty output */"
    lines = [f"for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] = 0;"]
    if grams:
        lens = ctx.weight("glen", np.array([g[0] for g in grams], np.int64))
        offs = ctx.weight("goff", np.cumsum([0] + [g[0] for g in grams[:-1]]).astype(np.int64))
        toks = ctx.weight("gtok", np.array([t for g in grams for t in g[1]], np.int64))
        cols_of = ctx.weight("gcol", np.array([g[2] for g in grams], np.int64))
        lines.append(f"""for (size_t r = 0; r < {rows}; ++r) {{
  const {x.ctype} *t = {x.sym} + r * {length};
  for (size_t s = 1; s <= {skips}; ++s) {{
    /* unigrams count once, at skip distance 1 */
    const size_t first = s == 1 ? {lo} : ({lo} > 2 ? {lo} : 2);
    if (first > {hi}) break;
    for (size_t p = 0; p + s * (first - 1) < {length}; ++p)
      for (size_t g = 0; g < {len(grams)}; ++g) {{
        const size_t n = (size_t){lens}[g];
        if (n < first || p + s * (n - 1) >= {length}) continue;
        size_t k = 0;
        while (k < n && (int64_t)t[p + k * s] == {toks}[{offs}[g] + k]) ++k;
        if (k == n) {y.sym}[r * {cols} + (size_t){cols_of}[g]] += 1;
      }}
  }}
}}""")
    if mode == "IDF":
        w = ctx.weight("w", np.array(weights, np.float32)) if weights else None
        val = f"{w}[i % {cols}]" if w else "1"
        lines.append(
            f"for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] = {y.sym}[i] > 0 ? {val} : 0;"
        )
    elif mode == "TFIDF" and weights:
        w = ctx.weight("w", np.array(weights, np.float32))
        lines.append(f"for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] *= {w}[i % {cols}];")
    return "\n".join(lines)
