"""Data movement: reshapes (a copy, or nothing), Transpose, Concat, Split, Slice, Gather, Pad,
Expand, Tile, Resize, DepthToSpace/SpaceToDepth."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import elementwise, norm_axis, strides


def copy_code(dst: str, src: str, nbytes: int) -> str:
    if nbytes == 0:
        return "/* empty */"
    return f"if ((const void *){dst} != (const void *){src}) memmove({dst}, {src}, {nbytes});"


@register_op("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def reshape(ctx: NodeContext) -> str:
    """Same bytes, new shape: a copy (the planner could alias these; a memcpy is cheap)."""
    x, y = ctx.x(0), ctx.y(0)
    code = copy_code(y.sym, x.sym, y.nbytes)
    if ctx.node.op_type == "Dropout" and ctx.has_output(1):
        code += f"\nfor (size_t i = 0; i < {ctx.y(1).size}; ++i) {ctx.y(1).sym}[i] = 1;"
    return code


@register_op("Transpose")
def transpose(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    perm = list(ctx.attr("perm", list(reversed(range(x.rank)))))
    xs = strides(x.shape)
    # read x at the permuted strides, write y contiguously
    in_st = [xs[p] for p in perm]
    return _strided_copy(y.sym, x.sym, y.shape, in_st)


def _strided_copy(dst: str, src: str, shape: tuple[int, ...], src_strides: list[int], src_off: str = "0") -> str:
    if int(np.prod(shape)) == 0:
        return "/* empty */"
    from .common import merge_dims

    dims, sts = merge_dims(shape, [src_strides])
    if not dims:
        return f"{dst}[0] = {src}[{src_off}];"
    idx = [f"i{k}" for k in range(len(dims))]
    off = " + ".join([src_off] + [f"(size_t){i}*{s}" for i, s in zip(idx, sts[0], strict=True) if s])
    out = " + ".join(f"(size_t){i}*{s}" for i, s in zip(idx, strides(tuple(dims)), strict=True))
    code = ""
    for k, d in enumerate(dims):
        code += "  " * k + f"for (size_t {idx[k]} = 0; {idx[k]} < {d}; ++{idx[k]})\n"
    return code + "  " * len(dims) + f"{dst}[{out}] = {src}[{off}];"


@register_op("Concat")
def concat(ctx: NodeContext) -> str:
    y = ctx.y(0)
    axis = norm_axis(int(ctx.attr("axis")), y.rank)
    outer = int(np.prod(y.shape[:axis]))
    inner_y = int(np.prod(y.shape[axis:]))
    lines, off = [], 0
    es = np.dtype(y.dtype).itemsize
    for i in range(ctx.n_inputs):
        if not ctx.has_input(i):
            continue
        t = ctx.x(i)
        inner = int(np.prod(t.shape[axis:]))
        if inner == 0:
            continue
        lines.append(f"for (size_t o = 0; o < {outer}; ++o) memcpy({y.sym} + o * {inner_y} + {off}, {t.sym} + o * {inner}, {inner * es});")
        off += inner
    return "\n".join(lines) or "/* empty */"


@register_op("Split")
def split(ctx: NodeContext) -> str:
    x = ctx.x(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
    outer = int(np.prod(x.shape[:axis]))
    inner_x = int(np.prod(x.shape[axis:]))
    es = np.dtype(x.dtype).itemsize
    lines, off = [], 0
    for i in range(len(ctx.node.outputs)):
        if not ctx.has_output(i):
            continue
        t = ctx.y(i)
        inner = int(np.prod(t.shape[axis:]))
        if inner:
            lines.append(f"for (size_t o = 0; o < {outer}; ++o) memcpy({t.sym} + o * {inner}, {x.sym} + o * {inner_x} + {off}, {inner * es});")
        off += inner
    return "\n".join(lines) or "/* empty */"


def _slice_params(ctx: NodeContext) -> tuple[list[int], list[int]] | None:
    """Per-axis start and step of a Slice whose parameters are known."""
    x = ctx.x(0)
    r = x.rank
    if ctx.graph.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", list(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        vals = [ctx.const(i) for i in range(1, 5)]
        if vals[0] is None or vals[1] is None or (ctx.has_input(3) and vals[2] is None) or (ctx.has_input(4) and vals[3] is None):
            return None
        starts, ends = vals[0].tolist(), vals[1].tolist()
        axes = vals[2].tolist() if vals[2] is not None else list(range(len(starts)))
        steps = vals[3].tolist() if vals[3] is not None else [1] * len(starts)
    st, sp = [0] * r, [1] * r
    for s, _e, a, k in zip(starts, ends, axes, steps, strict=False):
        a = norm_axis(int(a), r)
        n = x.shape[a]
        s = int(s)
        if s < 0:
            s += n
        s = min(max(s, 0), n - 1 if k < 0 else n)
        st[a], sp[a] = s, int(k)
    return st, sp


def _slice_check(node: Node, graph: Graph) -> str | None:
    if graph.opset >= 10 and any(i and graph.const(i) is None for i in node.inputs[1:]):
        return "Slice with starts/ends/axes/steps computed at run time is not supported"
    return None


@register_op("Slice", check=_slice_check)
def slice_(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    params = _slice_params(ctx)
    assert params is not None
    st, sp = params
    xs = strides(x.shape)
    off = sum(s * k for s, k in zip(st, xs, strict=True))
    return _strided_copy(y.sym, x.sym, y.shape, [k * s for k, s in zip(xs, sp, strict=True)], str(off))


@register_op("Gather")
def gather(ctx: NodeContext) -> str:
    x, idx, y = ctx.x(0), ctx.x(1), ctx.y(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
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


def _pad_check(node: Node, graph: Graph) -> str | None:
    if graph.opset >= 11 and any(i and graph.const(i) is None for i in node.inputs[1:]):
        return "Pad with pads computed at run time is not supported"
    return None


@register_op("Pad", check=_pad_check)
def pad(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    r = x.rank
    mode = ctx.attr("mode", "constant")
    if ctx.graph.opset < 11:
        pads = list(ctx.attr("pads"))
        value = float(ctx.attr("value", 0.0))
    else:
        pads = ctx.const(1).tolist()
        value = 0.0
        if ctx.has_input(2):
            v = ctx.const(2)
            value = v.reshape(-1)[0].item() if v is not None and v.size else 0.0
        if ctx.has_input(3):
            axes = [norm_axis(int(a), r) for a in ctx.const(3).tolist()]
            full = [0] * (2 * r)
            for j, a in enumerate(axes):
                full[a], full[a + r] = pads[j], pads[j + len(axes)]
            pads = full
    xs = strides(x.shape)
    lines = [f"for (size_t o = 0; o < {y.size}; ++o) {{", "  size_t rem = o, src = 0; int inside = 1;"]
    ys = strides(y.shape)
    for d in range(r):
        n, b = x.shape[d], pads[d]
        lines.append(f"  {{ long i = (long)(rem / {ys[d]}) - {b}; rem %= {ys[d]};")
        if mode == "constant":
            lines.append(f"    if (i < 0 || i >= {n}) inside = 0; else src += (size_t)i * {xs[d]}; }}")
        elif mode == "reflect":
            lines.append(f"    if ({n} == 1) i = 0; else {{ const long p = 2 * ({n} - 1); i = ((i % p) + p) % p; if (i >= {n}) i = p - i; }}")
            lines.append(f"    src += (size_t)i * {xs[d]}; }}")
        elif mode == "edge":
            lines.append(f"    if (i < 0) i = 0; if (i >= {n}) i = {n - 1}; src += (size_t)i * {xs[d]}; }}")
        elif mode == "wrap":
            lines.append(f"    i = ((i % {max(n, 1)}) + {max(n, 1)}) % {max(n, 1)}; src += (size_t)i * {xs[d]}; }}")
    lines.append(f"  {y.sym}[o] = inside ? {x.sym}[src] : {c_literal(value, y.dtype)};")
    lines.append("  (void)inside;")
    lines.append("}")
    return "\n".join(lines)


@register_op("Expand")
def expand(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "a")


@register_op("Tile")
def tile(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    xs = strides(x.shape)
    lines = [f"for (size_t o = 0; o < {y.size}; ++o) {{", "  size_t rem = o, src = 0;"]
    ys = strides(y.shape)
    for d in range(x.rank):
        lines.append(f"  src += ((rem / {ys[d]}) % {x.shape[d]}) * {xs[d]}; rem %= {ys[d]};")
    lines.append(f"  {y.sym}[o] = {x.sym}[src];")
    lines.append("}")
    return "\n".join(lines)


@register_op("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    b = int(ctx.attr("blocksize"))
    N, C, H, W = x.shape
    if ctx.node.op_type == "DepthToSpace":
        mode = ctx.attr("mode", "DCR")
        c2 = C // (b * b)
        if mode == "DCR":
            tmp_shape, perm = (N, b, b, c2, H, W), (0, 3, 4, 1, 5, 2)
        else:
            tmp_shape, perm = (N, c2, b, b, H, W), (0, 1, 4, 2, 5, 3)
    else:
        tmp_shape, perm = (N, C, H // b, b, W // b, b), (0, 3, 5, 1, 2, 4)
    ts = strides(tmp_shape)
    out_shape = tuple(tmp_shape[p] for p in perm)
    return _strided_copy(y.sym, x.sym, out_shape, [ts[p] for p in perm])


