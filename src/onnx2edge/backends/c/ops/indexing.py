"""Indexing: Gather, GatherElements, GatherND, Scatter/ScatterElements, ScatterND,
TensorScatter, Compress, NonZero, ReverseSequence, Trilu, OneHot, and the generators Range,
EyeLike, ConstantOfShape.

Indices are read at run time as int64 whatever their type, and negative ones count from the
end (ONNX spec). Out-of-range indices are a model error the spec leaves undefined; they are
not checked, as in onnxruntime's release builds.

Element types C has no arithmetic for (float16, bfloat16, ...: ops/dtypes.py) are copied as
their bits; the few places that compute (scatter reductions, Range, NonZero's test, OneHot's
index) convert through dtypes.load_expr / store_expr.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.records import scatter_reduction
from ....semantics.shape_ops import axis_attr
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import norm_axis, strides
from .dtypes import allow_storage_dtypes, compute_ctype, is_storage, load_expr, store_expr
from .loops import copy_code, nest


# --------------------------------------------------------------------------------------------
# gathers
# --------------------------------------------------------------------------------------------
@register_op("Gather")
def gather(ctx: NodeContext) -> str:
    """y[outer, j, inner] = x[outer, indices[j], inner]: one memcpy of `inner` elements each."""
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    axis = axis_attr(ctx.node, ctx.graph.opset, x.rank)
    outer = int(np.prod(x.shape[:axis]))
    n = x.shape[axis]
    inner = int(np.prod(x.shape[axis + 1 :]))
    es = np.dtype(x.dtype).itemsize
    return f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t j = 0; j < {idx.size}; ++j) {{
  int64_t k = (int64_t){idx.sym}[j];
  if (k < 0) k += {n};
  memcpy({y.sym} + (o * {idx.size} + j) * {inner}, {x.sym} + (o * {n} + (size_t)k) * {inner}, {inner * es});
}}"""


@register_op("GatherElements")
def gather_elements(ctx: NodeContext) -> str:
    """y[i..] = x[i.. with i_axis replaced by indices[i..]]; y has the shape of indices."""
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    axis = axis_attr(ctx.node, ctx.graph.opset, x.rank)
    xs = strides(x.shape)
    stmt = (
        f"{{ int64_t k = (int64_t){idx.sym}[o]; if (k < 0) k += {x.shape[axis]}; "
        f"{y.sym}[o] = {x.sym}[p + k * {xs[axis]}]; ++o; }}"
    )
    return nest(y.shape, lambda d, i: "0" if d == axis else f"(int64_t){i} * {xs[d]}", stmt)


def _gathernd_check(node: Node, graph: Graph) -> str | None:
    idx = graph.type_of(node.inputs[1])
    if idx is None or idx.shape is None or len(idx.shape) == 0:
        return "GatherND indices must have rank >= 1"
    return None


@register_op("GatherND", check=_gathernd_check)
def gather_nd(ctx: NodeContext) -> str:
    """For each batch (the first batch_dims axes, shared) and each index tuple (the last axis
    of indices, m values), copy the slice data[batch, i0..im-1, :] (ONNX GatherND-13)."""
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    b = int(ctx.attr("batch_dims"))
    m = idx.shape[-1]
    batches = int(np.prod(x.shape[:b]))
    tuples = int(np.prod(idx.shape[b:-1]))
    per_batch = int(np.prod(x.shape[b:]))
    inner = int(np.prod(x.shape[b + m :]))
    xs = strides(x.shape)
    es = np.dtype(x.dtype).itemsize
    lines = [
        f"for (size_t bt = 0; bt < {batches}; ++bt)",
        f"for (size_t t = 0; t < {tuples}; ++t) {{",
        f"  const size_t q = bt * {tuples} + t;",
        f"  int64_t off = (int64_t)(bt * {per_batch});",
    ]
    for j in range(m):
        lines.append(
            f"  {{ int64_t k = (int64_t){idx.sym}[q * {m} + {j}]; if (k < 0) k += {x.shape[b + j]}; off += k * {xs[b + j]}; }}"
        )
    lines.append(f"  memcpy({y.sym} + q * {inner}, {x.sym} + off, {inner * es});")
    lines.append("}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# scatters
# --------------------------------------------------------------------------------------------
def _reduce(ctx: NodeContext, dtype: np.dtype, reduction: str, dst: str, upd: str) -> str:
    """dst = reduction(dst, upd), ONNX ScatterElements-18 / ScatterND-18 `reduction`."""
    if is_storage(dtype) and reduction != "none":
        a, b = load_expr(ctx, dtype, dst), load_expr(ctx, dtype, upd)
        ct = compute_ctype(dtype)
        if reduction in ("add", "mul"):
            v = f"{a} {'+' if reduction == 'add' else '*'} {b}"
            return f"{dst} = {store_expr(ctx, dtype, v, src=ct)};"
        return f"if ({b} {'>' if reduction == 'max' else '<'} {a}) {dst} = {upd};"
    if reduction == "add":
        return f"{dst} += {upd};"
    if reduction == "mul":
        return f"{dst} *= {upd};"
    if reduction == "max":
        return f"if ({upd} > {dst}) {dst} = {upd};"
    if reduction == "min":
        return f"if ({upd} < {dst}) {dst} = {upd};"
    return f"{dst} = {upd};"


def _scatter_check(node: Node, graph: Graph) -> str | None:
    red = scatter_reduction(node, graph.opset)
    if red not in ("none", "add", "mul", "max", "min"):
        return f"{node.op_type} reduction '{red}' is not in the ONNX spec"
    return None


@register_op("ScatterElements", "Scatter", check=_scatter_check)
def scatter_elements(ctx: NodeContext) -> str:
    """y = data; y[i.. with i_axis = indices[i..]] (op)= updates[i..], in index order (so
    duplicates resolve as the reference does: last write wins, or reduce)."""
    x, idx, upd, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    axis = axis_attr(ctx.node, ctx.graph.opset, x.rank)
    ys = strides(y.shape)
    code = (
        ""
        if y.nbytes == 0
        else f"if ((const void *){y.sym} != (const void *){x.sym}) memcpy({y.sym}, {x.sym}, {y.nbytes});\n"
    )
    if idx.size == 0:
        return code or "/* empty */"
    # kept: ScatterElements before opset 16 has no reduction default; this is its meaning there
    reduce = _reduce(
        ctx,
        y.dtype,
        scatter_reduction(ctx.node, ctx.graph.opset),
        f"{y.sym}[p + k * {ys[axis]}]",
        f"{upd.sym}[o]",
    )
    stmt = (
        f"{{ int64_t k = (int64_t){idx.sym}[o]; if (k < 0) k += {y.shape[axis]}; {reduce} ++o; }}"
    )
    return code + nest(
        idx.shape, lambda d, i: "0" if d == axis else f"(int64_t){i} * {ys[d]}", stmt
    )


@register_op("ScatterND", check=_scatter_check)
def scatter_nd(ctx: NodeContext) -> str:
    """y = data; for each index tuple (last axis of indices, k values) the slice
    y[i0..ik-1, :] (op)= updates[tuple] (ONNX ScatterND-18)."""
    x, idx, upd, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    code = (
        ""
        if y.nbytes == 0
        else f"if ((const void *){y.sym} != (const void *){x.sym}) memcpy({y.sym}, {x.sym}, {y.nbytes});\n"
    )
    k = idx.shape[-1]
    tuples = int(np.prod(idx.shape[:-1]))
    inner = int(np.prod(y.shape[k:]))
    if tuples == 0 or inner == 0:
        return code or "/* empty */"
    ys = strides(y.shape)
    # kept: ScatterND before opset 16 has no reduction default; this is its meaning there
    reduce = _reduce(
        ctx,
        y.dtype,
        scatter_reduction(ctx.node, ctx.graph.opset),
        f"{y.sym}[off + (int64_t)e]",
        f"{upd.sym}[t * {inner} + e]",
    )
    lines = [f"for (size_t t = 0; t < {tuples}; ++t) {{", "  int64_t off = 0;"]
    for j in range(k):
        lines.append(
            f"  {{ int64_t v = (int64_t){idx.sym}[t * {k} + {j}]; if (v < 0) v += {y.shape[j]}; off += v * {ys[j]}; }}"
        )
    lines.append(f"  for (size_t e = 0; e < {inner}; ++e) {reduce}")
    lines.append("}")
    return code + "\n".join(lines)


@register_op("TensorScatter")
def tensor_scatter(ctx: NodeContext) -> str:
    """A KV-cache write (ONNX TensorScatter-24): y = past; for batch b (axis 0) the update's
    steps go to rows write_indices[b] + s along `axis`, modulo its length in circular mode."""
    x, upd, y = ctx.x(0), ctx.x(1), ctx.y(0)
    axis = axis_attr(ctx.node, ctx.graph.opset, x.rank)
    code = copy_code(y.sym, x.sym, y.nbytes)
    steps = upd.shape[axis]
    if upd.size == 0:
        return code
    batch = x.shape[0]
    mid = int(np.prod(x.shape[1:axis]))  # the other axes before `axis`
    L = x.shape[axis]
    inner = int(np.prod(x.shape[axis + 1 :]))
    start = f"(int64_t){ctx.x(2).sym}[b]" if ctx.has_input(2) else "0"
    row = "(w0 + (int64_t)s) % " + str(L) if ctx.attr("mode") == "circular" else "w0 + (int64_t)s"
    es = np.dtype(x.dtype).itemsize
    return (
        code
        + f"""
for (size_t b = 0; b < {batch}; ++b) {{
  const int64_t w0 = {start};
  for (size_t m = 0; m < {mid}; ++m)
    for (size_t s = 0; s < {steps}; ++s) {{
      const int64_t r = {row};
      memcpy({y.sym} + ((b * {mid} + m) * {L} + (size_t)r) * {inner},
             {upd.sym} + ((b * {mid} + m) * {steps} + s) * {inner}, {inner * es});
    }}
}}"""
    )


# --------------------------------------------------------------------------------------------
# data-dependent selections
# --------------------------------------------------------------------------------------------
@register_op("Compress")
def compress(ctx: NodeContext) -> str:
    """Keep the slices along `axis` (or of the flattened input) whose condition is true. The
    static output length bounds the writes; the condition may be shorter than the axis."""
    x, cond, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    axis_given = ctx.attr("axis")  # no schema default: absent, the flattened input
    if axis_given is None:
        outer, n, inner, m = 1, x.size, 1, y.size
    else:
        axis = norm_axis(int(axis_given), x.rank)
        outer = int(np.prod(x.shape[:axis]))
        n, m = x.shape[axis], y.shape[axis]
        inner = int(np.prod(x.shape[axis + 1 :]))
    if min(n, cond.size) == 0:
        return "/* empty */"
    es = np.dtype(x.dtype).itemsize
    return f"""size_t w = 0;
for (size_t i = 0; i < {min(n, cond.size)} && w < {m}; ++i) {{
  if (!{cond.sym}[i]) continue;
  for (size_t o = 0; o < {outer}; ++o)
    memcpy({y.sym} + (o * {m} + w) * {inner}, {x.sym} + (o * {n} + i) * {inner}, {inner * es});
  ++w;
}}"""


@register_op("NonZero")
def nonzero(ctx: NodeContext) -> str:
    """Coordinates of the non-zero elements, [rank, count], in row-major order.

    The count depends on the data; the model's static output shape fixes it. When the data
    has a different number of non-zero elements, the run fails (returns -5) instead of
    returning a wrong-sized result."""
    x, y = ctx.x(0), ctx.y(0)
    r = max(x.rank, 1)
    count = y.shape[1] if y.rank == 2 else 0
    shape = x.shape or (1,)
    xs = strides(shape)
    lines = ["size_t w = 0;"]
    if x.size:
        lines.append(f"for (size_t i = 0; i < {x.size}; ++i) {{")
        lines.append(f"  if (!({load_expr(ctx, x.dtype, f'{x.sym}[i]')})) continue;")
        if count:
            lines.append(f"  if (w < {count}) {{")
            for d in range(r):
                lines.append(
                    f"    {y.sym}[{d * count} + w] = (int64_t)((i / {xs[d]}) % {shape[d]});"
                )
            lines.append("  }")
        lines.append("  ++w;")
        lines.append("}")
    lines.append(
        f"if (w != {count}) return -5;  /* NonZero: the data has another count than the model's static shape */"
    )
    return "\n".join(lines)


@register_op("ReverseSequence")
def reverse_sequence(ctx: NodeContext) -> str:
    """Reverse the first sequence_lens[b] steps along time_axis for each batch entry b."""
    x, lens, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    ba = int(ctx.attr("batch_axis"))
    ta = int(ctx.attr("time_axis"))
    xs = strides(x.shape)
    stmt = (
        f"{{ const int64_t L = (int64_t){lens.sym}[i{ba}], t = (int64_t)i{ta}; "
        f"{y.sym}[o++] = {x.sym}[p + (t < L ? L - 1 - t : t) * {xs[ta]}]; }}"
    )
    return nest(y.shape, lambda d, i: "0" if d == ta else f"(int64_t){i} * {xs[d]}", stmt)


# --------------------------------------------------------------------------------------------
# masks and generators
# --------------------------------------------------------------------------------------------
@register_op("Trilu")
def trilu(ctx: NodeContext) -> str:
    """Keep the upper (j - i >= k) or lower (j - i <= k) triangle of each trailing matrix."""
    x, y = ctx.x(0), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    R, C = x.shape[-2:]
    mats = int(np.prod(x.shape[:-2]))
    kc = ctx.const(1) if ctx.has_input(1) else np.array(0)
    k = str(int(np.asarray(kc).reshape(-1)[0])) if kc is not None else f"(int64_t){ctx.x(1).sym}[0]"
    keep = (
        "(int64_t)j - (int64_t)i >= k" if int(ctx.attr("upper")) else "(int64_t)j - (int64_t)i <= k"
    )
    zero = c_literal(0, y.dtype)
    return f"""const int64_t k = {k};
for (size_t m = 0; m < {mats}; ++m)
for (size_t i = 0; i < {R}; ++i)
for (size_t j = 0; j < {C}; ++j) {{
  const size_t e = (m * {R} + i) * {C} + j;
  {y.sym}[e] = ({keep}) ? {x.sym}[e] : {zero};
}}"""


@register_op("OneHot")
def one_hot(ctx: NodeContext) -> str:
    """y = values[1] where the (wrapped) index equals the position along `axis`, else values[0].
    Depth is the static size of that axis; non-integer indices never match (reference)."""
    idx, vals, y = ctx.x(0), ctx.x(2), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    axis = axis_attr(ctx.node, ctx.graph.opset, y.rank)
    depth = y.shape[axis]
    outer = int(np.prod(y.shape[:axis]))
    inner = int(np.prod(y.shape[axis + 1 :]))
    return f"""for (size_t o = 0; o < {outer}; ++o)
for (size_t d = 0; d < {depth}; ++d)
for (size_t i = 0; i < {inner}; ++i) {{
  double v = (double){load_expr(ctx, idx.dtype, f"{idx.sym}[o * {inner} + i]")};
  if (v < 0) v += {depth};
  {y.sym}[(o * {depth} + d) * {inner} + i] = v == (double)d ? {vals.sym}[1] : {vals.sym}[0];
}}"""


@register_op("Range")
def range_(ctx: NodeContext) -> str:
    """y[i] = start + i * delta; the count is the static output length. Floats are computed
    in double and rounded once, as numpy.arange does; float16 / bfloat16 in `stash_type`
    (float by default, Range-27)."""
    start, delta, y = ctx.x(0), ctx.x(2), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    if is_storage(y.dtype):
        ct = "double" if int(ctx.attr("stash_type")) == 11 else compute_ctype(y.dtype)
        a = load_expr(ctx, y.dtype, f"{start.sym}[0]")
        d = load_expr(ctx, y.dtype, f"{delta.sym}[0]")
        expr = store_expr(ctx, y.dtype, f"({ct}){a} + ({ct})i * ({ct}){d}", src=ct)
    elif np.dtype(y.dtype).kind == "f":
        expr = f"({y.ctype})((double){start.sym}[0] + (double)i * (double){delta.sym}[0])"
    else:
        expr = f"({y.ctype})((int64_t){start.sym}[0] + (int64_t)i * (int64_t){delta.sym}[0])"
    return f"for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] = {expr};"


@register_op("EyeLike")
def eye_like(ctx: NodeContext) -> str:
    """Ones on the k-th diagonal of a 2-D tensor shaped like the input, zeros elsewhere."""
    y = ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    R, C = y.shape if y.rank == 2 else (y.shape[0], y.shape[0])
    k = int(ctx.attr("k"))
    one, zero = c_literal(1, y.dtype), c_literal(0, y.dtype)
    return f"""for (size_t i = 0; i < {R}; ++i)
for (size_t j = 0; j < {C}; ++j) {y.sym}[i * {C} + j] = (int64_t)j - (int64_t)i == {k} ? {one} : {zero};"""


@register_op("ConstantOfShape")
def constant_of_shape(ctx: NodeContext) -> str:
    """Fill the (static) output shape with `value` (default float 0)."""
    y = ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    v = ctx.attr("value")  # no schema default: absent, a float 0 (below)
    value = np.asarray(v).reshape(-1)[0].item() if v is not None and np.asarray(v).size else 0
    if value == 0 and not (isinstance(value, float) and np.signbit(value)):
        return f"memset({y.sym}, 0, {y.nbytes});"
    return f"for (size_t i = 0; i < {y.size}; ++i) {y.sym}[i] = {c_literal(value, y.dtype)};"


# float16 & co: these ops copy elements, or convert where they compute (see the module doc)
allow_storage_dtypes(
    "OneHot", "Range", "EyeLike", "ConstantOfShape", "Scatter", "ScatterElements", "ScatterND",
    "TensorScatter", "NonZero",
)  # fmt: skip
