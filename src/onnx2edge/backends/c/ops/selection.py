"""Ops whose output size depends on the values: NonMaxSuppression and Unique.

passes/bounded.py sizes their outputs by an upper bound; the code here fills the first rows and
stores the actual extent in `o2e_out_count[i]` (the writer's array behind
`<prefix>_output_count(i)`), so such an output must be a graph output no other node reads.
"""

from __future__ import annotations

from ....ir import Graph, Node
from ....passes.bounded import bounded_axes, bounded_output
from ..emitter import NodeContext
from . import register_op
from .dtypes import allow_storage_dtypes, compute_ctype, load_expr


def _bounded_check(node: Node, graph: Graph) -> str | None:
    axes = bounded_axes(graph, node)
    if not axes:
        return f"{node.op_type}: output size unknown (input shapes not static)"
    for k in axes:
        name = bounded_output(graph, node.outputs[k]) or node.outputs[k]
        if (
            name not in graph.outputs
            or graph.consumers(name)
            or len(graph.consumers(node.outputs[k])) > 1
        ):
            return (
                f"{node.op_type} output '{name}' has a size known only at run time: it must be "
                "a graph output that no other node reads"
            )
    return None


def _count(ctx: NodeContext, k: int, var: str) -> str:
    """The statement recording output k's run-time extent (nothing when it is unused)."""
    y = bounded_output(ctx.graph, ctx.node.outputs[k]) if ctx.has_output(k) else None
    if y is None or y not in ctx.graph.outputs:
        return ""
    return f"o2e_out_count[{list(ctx.graph.outputs).index(y)}] = (int64_t){var};"


@register_op("o2e:Bounded")
def emit_bounded(ctx: NodeContext) -> str:
    """The bound's bytes, copied (the producer stored the run-time extent)."""
    x, y = ctx.x(0), ctx.y()
    return f"memcpy({y.sym}, {x.sym}, {y.nbytes});" if y.nbytes else "/* empty */"


# --------------------------------------------------------------------------------------------
# NonMaxSuppression
# --------------------------------------------------------------------------------------------
NMS_IOU = r"""
/* Whether boxes a and b (4 floats each) overlap by more than `th` (intersection over union),
 * as the ONNX reference computes it in float: corners [y1, x1, y2, x2] in either order, or
 * [x_center, y_center, width, height] with center_point_box. */
static int o2e_nms_suppress(const float *a, const float *b, int center, float th)
{
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (center) {
    ax0 = a[0] - a[2] / 2; ax1 = a[0] + a[2] / 2; ay0 = a[1] - a[3] / 2; ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2; bx1 = b[0] + b[2] / 2; by0 = b[1] - b[3] / 2; by1 = b[1] + b[3] / 2;
  } else {
    ax0 = a[1] <= a[3] ? a[1] : a[3]; ax1 = a[1] <= a[3] ? a[3] : a[1];
    ay0 = a[0] <= a[2] ? a[0] : a[2]; ay1 = a[0] <= a[2] ? a[2] : a[0];
    bx0 = b[1] <= b[3] ? b[1] : b[3]; bx1 = b[1] <= b[3] ? b[3] : b[1];
    by0 = b[0] <= b[2] ? b[0] : b[2]; by1 = b[0] <= b[2] ? b[2] : b[0];
  }
  const float ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;
  if (ix1 <= ix0) return 0;
  const float iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;
  if (iy1 <= iy0) return 0;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0) return 0;
  const float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  const float uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return 0;
  return inter / uni > th;
}
"""


def _nms_check(node: Node, graph: Graph) -> str | None:
    for i in (0, 1):
        t = graph.type_of(node.inputs[i])
        if t is None or t.dtype.name != "float32":
            return "NonMaxSuppression takes float32 boxes and scores"
    return _bounded_check(node, graph)


@register_op("NonMaxSuppression", check=_nms_check)
def non_max_suppression(ctx: NodeContext) -> str:
    """Per batch and class: candidates above score_threshold ordered by score (ties: lower box
    index first), each kept unless it overlaps a kept one by more than iou_threshold, at most
    max_output_boxes_per_class; rows [batch, class, box] in that order."""
    boxes, scores, y = ctx.x(0), ctx.x(1), ctx.y(0)
    nb, n = boxes.shape[0], boxes.shape[1]
    nc = scores.shape[1]
    ctx.helper("o2e_nms_suppress", NMS_IOU)
    m = f"{ctx.x(2).sym}[0]" if ctx.has_input(2) and ctx.x(2).size else "0"
    iou = f"{ctx.x(3).sym}[0]" if ctx.has_input(3) and ctx.x(3).size else "0.0f"
    has_st = ctx.has_input(4) and ctx.x(4).size > 0
    st = f"{ctx.x(4).sym}[0]" if has_st else "0.0f"
    center = int(ctx.attr("center_point_box"))
    order = ctx.scratch(max(n, 1) * 8, "int64_t")
    kept = ctx.scratch(max(n, 1) * 8, "int64_t")
    count = _count(ctx, 0, "count")
    return f"""const int64_t m = (int64_t){m} > 0 ? (int64_t){m} : 0;
const float iou_th = (float){iou}, score_th = (float){st};
size_t count = 0;
(void)score_th;
for (size_t b = 0; b < {nb}; ++b)
for (size_t c = 0; c < {nc}; ++c) {{
  const float *s = {scores.sym} + (b * {nc} + c) * {n};
  const float *bx = {boxes.sym} + b * {n * 4};
  size_t cand = 0;
  for (size_t i = 0; i < {n}; ++i)
    if ({"s[i] > score_th" if has_st else "1"}) {{
      /* insertion into the order: score descending, equal scores by index */
      size_t j = cand++;
      while (j > 0 && s[{order}[j - 1]] < s[i]) {{ {order}[j] = {order}[j - 1]; --j; }}
      {order}[j] = (int64_t)i;
    }}
  int64_t nkept = 0;
  for (size_t j = 0; j < cand && nkept < m; ++j) {{
    const int64_t i = {order}[j];
    int keep = 1;
    for (int64_t q = 0; q < nkept && keep; ++q)
      if (o2e_nms_suppress(bx + i * 4, bx + {kept}[q] * 4, {center}, iou_th)) keep = 0;
    if (!keep) continue;
    {kept}[nkept++] = i;
    {y.sym}[count * 3] = (int64_t)b; {y.sym}[count * 3 + 1] = (int64_t)c; {y.sym}[count * 3 + 2] = i;
    ++count;
  }}
}}
{count}"""


# --------------------------------------------------------------------------------------------
# Unique
# --------------------------------------------------------------------------------------------
def _unique_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or (t.dtype.kind not in "fiub" and t.dtype.name not in ("bfloat16", "float16")):
        return "Unique takes a numeric tensor"
    return _bounded_check(node, graph)


@register_op("Unique", check=_unique_check)
def unique(ctx: NodeContext) -> str:
    """Distinct slices along `axis` (elements without it) in order of first occurrence, then
    sorted ascending (lexicographically for slices) unless sorted=0; indices of the first
    occurrences, each input slice's position among the uniques, and how often each occurs.
    Equality is C's ==, so NaNs never match (numpy's unique groups them)."""
    x = ctx.x(0)
    axis = ctx.attr("axis")
    if axis is None:
        outer, length, inner = 1, x.size, 1
    else:
        a = int(axis) % x.rank
        outer = 1
        for d in x.shape[:a]:
            outer *= d
        length = x.shape[a]
        inner = 1
        for d in x.shape[a + 1 :]:
            inner *= d
    sort = int(ctx.attr("sorted"))
    first = ctx.scratch(max(length, 1) * 8, "int64_t")  # first occurrence of each unique
    cnt = ctx.scratch(max(length, 1) * 8, "int64_t")
    inv = ctx.scratch(max(length, 1) * 8, "int64_t")
    rank = ctx.scratch(max(length, 1) * 8, "int64_t")  # sorted position of unique u
    perm = ctx.scratch(max(length, 1) * 8, "int64_t")  # unique at sorted position p
    xs = x.sym
    # the comparison depends on the shape: one helper a node. Slice i's element (o, e) is
    # x[(o * length + i) * inner + e]; returns -1 / 0 / 1, or 2 when a NaN makes them unordered
    name = ctx.unique("o2e_unique_cmp")
    # float16 & co compare as the values they store (dtypes.load_expr), copied as raw bits
    ct = compute_ctype(x.dtype)
    la = load_expr(ctx, x.dtype, f"x[(o * {length} + (size_t)i) * {inner} + e]")
    lb = load_expr(ctx, x.dtype, f"x[(o * {length} + (size_t)j) * {inner} + e]")
    ctx.helper(
        name,
        f"""static int {name}(const {x.ctype} *x, int64_t i, int64_t j)
{{
  for (size_t o = 0; o < {outer}; ++o)
    for (size_t e = 0; e < {inner}; ++e) {{
      const {ct} a = {la};
      const {ct} b = {lb};
      if (a < b) return -1;
      if (b < a) return 1;
      if (!(a == b)) return 2;
    }}
  return 0;
}}""",
    )
    outs = []
    if ctx.has_output(0):
        y = ctx.y(0)
        outs.append(f"""for (int64_t p = 0; p < nu; ++p) {{
  const int64_t i = {first}[{perm}[p]];
  for (size_t o = 0; o < {outer}; ++o)
    for (size_t e = 0; e < {inner}; ++e)
      {y.sym}[((int64_t)o * nu + p) * {inner} + (int64_t)e] = {xs}[(o * {length} + (size_t)i) * {inner} + e];
}}
{_count(ctx, 0, "nu")}""")
    if ctx.has_output(1):
        outs.append(
            f"for (int64_t p = 0; p < nu; ++p) {ctx.y(1).sym}[p] = {first}[{perm}[p]];\n"
            + _count(ctx, 1, "nu")
        )
    if ctx.has_output(2):
        outs.append(f"for (size_t i = 0; i < {length}; ++i) {ctx.y(2).sym}[i] = {rank}[{inv}[i]];")
    if ctx.has_output(3):
        outs.append(
            f"for (int64_t p = 0; p < nu; ++p) {ctx.y(3).sym}[p] = {cnt}[{perm}[p]];\n"
            + _count(ctx, 3, "nu")
        )
    sort_code = (
        f"""/* sort the uniques (insertion: stable, so equal keys cannot occur anyway) */
for (int64_t u = 0; u < nu; ++u) {{
  int64_t j = u;
  while (j > 0 && {name}({xs}, {first}[{perm}[j - 1]], {first}[u]) == 1) {{ {perm}[j] = {perm}[j - 1]; --j; }}
  {perm}[j] = u;
}}"""
        if sort
        else f"for (int64_t u = 0; u < nu; ++u) {perm}[u] = u;"
    )
    body = "\n".join(outs)
    return f"""int64_t nu = 0;
for (size_t i = 0; i < {length}; ++i) {{
  int64_t u = 0;
  while (u < nu && {name}({xs}, {first}[u], (int64_t)i) != 0) ++u;
  if (u == nu) {{ {first}[nu] = (int64_t)i; {cnt}[nu] = 0; ++nu; }}
  {cnt}[u] += 1;
  {inv}[i] = u;
}}
{sort_code}
for (int64_t p = 0; p < nu; ++p) {rank}[{perm}[p]] = p;
{body}"""


allow_storage_dtypes("Unique", "Bounded")  # o2e.Bounded only copies bytes
