"""Data movement: reshapes (a copy, or nothing), Shape/Size, Transpose, Concat, Split, Slice,
Pad, CenterCropPad, Expand, Tile, DepthToSpace/SpaceToDepth, Col2Im.

These ops only move bytes, so every dtype works: copies use the tensor's own C type.

Parameters that ONNX passes as inputs (Slice starts/ends, Pad pads, ...) are folded to
constants when they can be; when they stay computed at run time, the output shape is still
static here, so the generated code reads the few runtime values it needs (a start, a step, a
begin pad) and keeps constant loop bounds.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import ints
from ....semantics.records import pad_attrs
from ....semantics.shape_ops import (
    axis_attr,
    depth_space_attrs,
    slice_attrs,
    split_attrs,
    transpose_perm,
)
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op
from .common import elementwise, merge_dims, norm_axis, strides
from .loops import copy_code, nest


def _has(node: Node, i: int) -> bool:
    return i < len(node.inputs) and bool(node.inputs[i])


@register_op("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def reshape(ctx: NodeContext) -> str:
    """Same bytes, new shape: nothing when the producer wrote the input into the output's
    buffer (concat_alias.py), else a copy."""
    x, y = ctx.x(0), ctx.y(0)
    if ctx.concat_alias(x.name) == (y.name, 0):
        return f"/* {x.sym}: written in place */"
    code = copy_code(y.sym, x.sym, y.nbytes)
    return code


@register_op("Shape", "Size")
def shape_size(ctx: NodeContext) -> str:
    """Constants from the static input shape (fold_constants normally removes these nodes).
    Shape-15 `start` / `end` slice the dims, clamped to the rank."""
    x, y = ctx.x(0), ctx.y(0)
    if ctx.node.op_type == "Size":
        return f"{y.sym}[0] = {c_literal(x.size, y.dtype)};"
    r = x.rank
    start = min(max(norm_axis(int(ctx.attr("start")), r), 0), r)
    end = min(max(norm_axis(int(ctx.attr("end", r)), r), 0), r)
    dims = x.shape[start:end]
    return (
        "\n".join(f"{y.sym}[{i}] = {c_literal(d, y.dtype)};" for i, d in enumerate(dims))
        or "/* empty */"
    )


@register_op("Transpose")
def transpose(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    perm = transpose_perm(ctx.node, x.rank, ctx.graph.opset)
    xs = strides(x.shape)
    src = [xs[p] for p in perm]
    if int(np.prod(y.shape)) and (k_in := _tile_axis(*merge_dims(y.shape, [src]))) is not None:
        return _copy_tiled(y.sym, x.sym, *merge_dims(y.shape, [src]), k_in)
    if int(np.prod(y.shape)) and (order := _read_order(*merge_dims(y.shape, [src]))):
        return _copy_in_order(y.sym, x.sym, *merge_dims(y.shape, [src]), order)
    # read x at the permuted strides, write y contiguously
    return strided_copy(y.sym, x.sym, y.shape, src)


# A write-ordered copy whose innermost loop (at least this long) reads x this many elements
# apart (4 KB and up: MobileViT's unfold, [96][32][32] -> [2][2][256][96], read channels
# 1024 floats apart and every read fell in the same few L1 sets: 0.17 ms where its inverse,
# reading 96 apart, took 0.03) loops in the order of x instead: reads run along x's rows
# and the writes scatter into y, which stays in L2.
FAR_READ = 1024
LONG_LOOP = 16


def _read_order(dims: list[int], sts: list[list[int]]) -> list[int] | None:
    """Loop order (outermost first) for a transpose whose output order reads far apart."""
    src = sts[0]
    if len(dims) < 2 or dims[-1] < LONG_LOOP or abs(src[-1]) < FAR_READ or min(src) < 0:
        return None
    return sorted(range(len(dims)), key=lambda d: -src[d])


# A transpose bigger than L2 (Whisper's [384][1500] -> [1500][384], 2.3 MB: 1.4 ms in either
# loop order, every read or every write a cache line of its own) copies TILE x TILE squares:
# the tile's TILE source and TILE destination lines stay in L1 while it is copied (0.11 ms;
# onnxruntime 0.06; tiles of 8: the same, of 32: 0.18).
TILE = 16
TILE_MIN_ELEMS = 1 << 18


def _tile_axis(dims: list[int], sts: list[list[int]]) -> int | None:
    """The dim x is contiguous along, when the copy is big enough to tile with y's last dim."""
    src = sts[0]
    if len(dims) < 2 or int(np.prod(dims)) < TILE_MIN_ELEMS or dims[-1] < TILE or src[-1] < TILE:
        return None
    k = next((k for k in range(len(dims) - 1) if src[k] == 1), None)
    return k if k is not None and dims[k] >= TILE else None


def _copy_tiled(dst: str, src: str, dims: list[int], sts: list[list[int]], k_in: int) -> str:
    out_st = strides(tuple(dims))
    last = len(dims) - 1
    idx = [f"i{k}" for k in range(len(dims))]
    code, level = "", 0
    for k in range(len(dims)):
        if k not in (k_in, last):
            code += "  " * level + f"for (size_t {idx[k]} = 0; {idx[k]} < {dims[k]}; ++{idx[k]})\n"
            level += 1
    for k in (k_in, last):
        code += "  " * level + f"for (size_t b{k} = 0; b{k} < {dims[k]}; b{k} += {TILE})\n"
        level += 1
    for k in (k_in, last):
        i = idx[k]
        code += "  " * level + (
            f"for (size_t {i} = b{k}; {i} < b{k} + {TILE} && {i} < {dims[k]}; ++{i})\n"
        )
        level += 1
    w = " + ".join(
        f"{idx[k]} * {out_st[k]}" if out_st[k] != 1 else idx[k] for k in range(len(dims))
    )
    r = " + ".join(
        f"{idx[k]} * {sts[0][k]}" if sts[0][k] != 1 else idx[k]
        for k in range(len(dims))
        if sts[0][k]
    )
    return code + "  " * level + f"{dst}[{w}] = {src}[{r or '0'}];"


def _copy_in_order(
    dst: str, src: str, dims: list[int], sts: list[list[int]], order: list[int]
) -> str:
    out_st = strides(tuple(dims))
    idx = [f"i{k}" for k in range(len(dims))]
    code = ""
    for level, k in enumerate(order):
        code += "  " * level + f"for (size_t {idx[k]} = 0; {idx[k]} < {dims[k]}; ++{idx[k]})\n"
    w = " + ".join(f"{idx[k]} * {out_st[k]}" if out_st[k] != 1 else idx[k] for k in order)
    r = " + ".join(f"{idx[k]} * {sts[0][k]}" if sts[0][k] != 1 else idx[k] for k in order)
    return code + "  " * len(order) + f"{dst}[{w}] = {src}[{r}];"


def strided_copy(
    dst: str, src: str, shape: tuple[int, ...], src_strides: list[int], src_off: int = 0
) -> str:
    """dst (contiguous, `shape`) = src read at `src_strides` from `src_off`; strides may be negative."""
    if int(np.prod(shape)) == 0:
        return "/* empty */"
    dims, sts = merge_dims(shape, [src_strides])
    if not dims:
        return f"{dst}[0] = {src}[{src_off}];"
    # signed offsets when a stride runs backwards (Slice with negative steps)
    it = "ptrdiff_t" if any(s < 0 for s in sts[0]) else "size_t"
    idx = [f"i{k}" for k in range(len(dims))]
    terms = [str(src_off)] if src_off else []
    terms += [f"{i} * {s}" if s != 1 else i for i, s in zip(idx, sts[0], strict=True) if s]
    out = " + ".join(
        f"{i} * {s}" if s != 1 else i for i, s in zip(idx, strides(tuple(dims)), strict=True)
    )
    code = ""
    for k, d in enumerate(dims):
        code += "  " * k + f"for ({it} {idx[k]} = 0; {idx[k]} < {d}; ++{idx[k]})\n"
    return code + "  " * len(dims) + f"{dst}[{out}] = {src}[{' + '.join(terms) or '0'}];"


@register_op("Concat")
def concat(ctx: NodeContext) -> str:
    y = ctx.y(0)
    axis = axis_attr(ctx.node, ctx.graph.opset, y.rank)
    outer = int(np.prod(y.shape[:axis]))
    inner_y = int(np.prod(y.shape[axis:]))
    lines, off = [], 0
    es = np.dtype(y.dtype).itemsize
    for i in range(ctx.n_inputs):
        if not ctx.has_input(i):
            continue
        t = ctx.x(i)
        inner = int(np.prod(t.shape[axis:]))
        if inner == 0 or outer == 0:
            continue
        if _in_place(ctx, t.name, y.name, off * es):
            # its producer wrote it in place (concat_alias.py)
            lines.append(f"/* {t.sym}: written in place */")
            off += inner
            continue
        lines.append(
            f"for (size_t o = 0; o < {outer}; ++o) memcpy({y.sym} + o * {inner_y} + {off}, {t.sym} + o * {inner}, {inner * es});"
        )
        off += inner
    return "\n".join(lines) or "/* empty */"


def _in_place(ctx: NodeContext, x: str, y: str, off: int) -> bool:
    """Input x already sits at byte `off` of Concat output y: aliased into y itself, or y is
    a prefix view of a dense block's home and x was placed there (concat_alias.py)."""
    ax, ay = ctx.concat_alias(x), ctx.concat_alias(y)
    if ax == (y, off):
        return True
    return ax is not None and ay is not None and ax == (ay[0], ay[1] + off)


@register_op("Split")
def split(ctx: NodeContext) -> str:
    """The output shapes (static) say where each part starts, whether `split` is an input,
    an attribute, or `num_outputs` (uneven last chunk, Split-18)."""
    x = ctx.x(0)
    axis = split_attrs(ctx.node, ctx.graph.opset, x.rank).axis
    outer = int(np.prod(x.shape[:axis]))
    inner_x = int(np.prod(x.shape[axis:]))
    es = np.dtype(x.dtype).itemsize
    lines, off = [], 0
    for i in range(len(ctx.node.outputs)):
        if not ctx.has_output(i):
            continue
        t = ctx.y(i)
        inner = int(np.prod(t.shape[axis:]))
        if inner and outer:
            lines.append(
                f"for (size_t o = 0; o < {outer}; ++o) memcpy({t.sym} + o * {inner}, {x.sym} + o * {inner_x} + {off}, {inner * es});"
            )
        off += inner
    return "\n".join(lines) or "/* empty */"


# --------------------------------------------------------------------------------------------
# Slice
# --------------------------------------------------------------------------------------------
def _clamp_start(s: int, n: int, step: int) -> int:
    """ONNX Slice: negative starts count from the end, then clamp to [0, n] (step > 0) or
    [0, n-1] (step < 0)."""
    if s < 0:
        s += n
    return min(max(s, 0), n - 1 if step < 0 else n)


def _slice_params(ctx: NodeContext) -> tuple[list[int], list[int]] | None:
    """Per-axis start and step when every parameter is known at conversion time."""
    x = ctx.x(0)
    r = x.rank
    sa = slice_attrs(ctx.node, ctx.graph.opset)
    if sa is not None:  # Slice-1: attributes
        starts, axes, steps = list(sa.starts), list(sa.axes), list(sa.steps)
    else:
        if any(ctx.has_input(i) and ctx.const(i) is None for i in (1, 3, 4)):
            return None
        starts = ctx.const(1).reshape(-1).tolist()
        axes = ctx.const(3).reshape(-1).tolist() if ctx.has_input(3) else list(range(len(starts)))
        steps = ctx.const(4).reshape(-1).tolist() if ctx.has_input(4) else [1] * len(starts)
    st, sp = [0] * r, [1] * r
    for s, a, k in zip(starts, axes, steps, strict=False):
        a = norm_axis(int(a), r)
        st[a], sp[a] = _clamp_start(int(s), x.shape[a], int(k)), int(k)
    return st, sp


@register_op("Slice")
def slice_(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    xs = strides(x.shape)
    params = _slice_params(ctx)
    if params is not None:
        st, sp = params
        off = sum(s * k for s, k in zip(st, xs, strict=True))
        return strided_copy(
            y.sym, x.sym, y.shape, [k * s for k, s in zip(xs, sp, strict=True)], off
        )
    if y.size == 0 or ctx.x(1).size == 0:
        return strided_copy(y.sym, x.sym, y.shape, xs)  # nothing sliced
    # Starts / axes / steps known only at run time: resolve them per axis (ONNX Slice-13 spec),
    # then walk the static output shape. `ends` is not needed: the output shape encodes it.
    r, k = x.rank, ctx.x(1).size
    axis = f"(int64_t){ctx.x(3).sym}[k]" if ctx.has_input(3) else "(int64_t)k"
    step = f"(int64_t){ctx.x(4).sym}[k]" if ctx.has_input(4) else "1"
    lines = [
        f"static const int64_t dims[{r}] = {{{', '.join(map(str, x.shape))}}};",
        f"int64_t st[{r}] = {{{', '.join(['0'] * r)}}}, sp[{r}] = {{{', '.join(['1'] * r)}}};",
        f"for (size_t k = 0; k < {k}; ++k) {{",
        f"  int64_t a = {axis}, s = (int64_t){ctx.x(1).sym}[k];",
        f"  const int64_t step = {step};",
        f"  if (a < 0) a += {r};",
        "  if (s < 0) s += dims[a];",
        "  if (s < 0) s = 0;",
        "  if (step > 0 && s > dims[a]) s = dims[a];",
        "  if (step < 0 && s > dims[a] - 1) s = dims[a] - 1;",
        "  st[a] = s; sp[a] = step;",
        "}",
    ]
    lines.append(
        nest(
            y.shape,
            lambda d, i: f"(st[{d}] + (int64_t){i} * sp[{d}]) * {xs[d]}",
            f"{y.sym}[o++] = {x.sym}[p];",
        )
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Pad, CenterCropPad
# --------------------------------------------------------------------------------------------
def _pad_begin_static(ctx: NodeContext) -> list[int] | None:
    """Begin pads per axis (negative: crop), when known at conversion time."""
    r = ctx.x(0).rank
    if ctx.graph.opset < 11:
        pads = pad_attrs(ctx.node, ctx.graph.opset).pads or (0,) * (2 * r)
        return [int(p) for p in pads[:r]]
    if ctx.const(1) is None or (ctx.has_input(3) and ctx.const(3) is None):
        return None
    pads = ctx.const(1).reshape(-1).tolist()
    axes = ctx.const(3).reshape(-1).tolist() if ctx.has_input(3) else list(range(r))
    begin = [0] * r
    for j, a in enumerate(axes):
        begin[norm_axis(int(a), r)] = int(pads[j])
    return begin


def _pad_map(mode: str, n: int, j: str) -> list[str]:
    """C statements moving the source index `j` (outside [0, n)) back inside, per Pad mode."""
    if mode == "edge":
        return [f"if ({j} < 0) {j} = 0;", f"if ({j} > {n - 1}) {j} = {n - 1};"]
    if mode == "reflect":
        if n == 1:
            return [f"{j} = 0;"]
        p = 2 * (n - 1)
        return [f"{j} = (({j} % {p}) + {p}) % {p};", f"if ({j} >= {n}) {j} = {p} - {j};"]
    if mode == "wrap":
        return [f"{j} = (({j} % {n}) + {n}) % {n};"]
    return []


def pad_code(
    x: Tensor, y: Tensor, mode: str, value: str, begin: list[int] | None, begin_code: str = ""
) -> str:
    """y = x padded (or cropped, for negative pads) with `begin[d]` leading elements per axis.

    ONNX Pad modes (numpy.pad semantics): constant, reflect (mirror without repeating the
    edge), edge (repeat the edge), wrap (periodic). When `begin` is None, `begin_code` must
    declare and fill `int64_t pb[rank]` at run time. Each output row copies its interior with
    one memcpy and maps only the padded ends element by element."""
    r = x.rank
    if y.size == 0:
        return "/* empty */"
    if r == 0:
        return f"{y.sym}[0] = {x.sym}[0];"
    if 0 in x.shape:
        mode = "constant"  # nothing to reflect or repeat
    xs = strides(x.shape)
    es = np.dtype(x.dtype).itemsize
    lines = ["size_t o = 0;"]
    if begin is None:
        lines.append(begin_code)
    else:
        lines.append(f"static const int64_t pb[{r}] = {{{', '.join(map(str, begin))}}};")
    last, n, Y = r - 1, x.shape[-1], y.shape[-1]
    # the output columns [lo, hi) of a row read x[lo - b .. hi - b) straight
    lines.append(f"const int64_t b = pb[{last}];")
    lines.append(f"const int64_t lo = b < 0 ? 0 : b > {Y} ? {Y} : b;")
    lines.append(f"const int64_t hi = b + {n} < lo ? lo : b + {n} > {Y} ? {Y} : b + {n};")
    for d in range(last):
        ind = "  " * d
        lines.append(f"{ind}for (size_t i{d} = 0; i{d} < {y.shape[d]}; ++i{d}) {{")
        lines.append(f"{ind}  int64_t j{d} = (int64_t)i{d} - pb[{d}];")
        if mode == "constant":
            inside = f"in{d - 1} && " if d else ""
            lines.append(f"{ind}  const int in{d} = {inside}j{d} >= 0 && j{d} < {x.shape[d]};")
        else:
            lines += [f"{ind}  {c}" for c in _pad_map(mode, x.shape[d], f"j{d}")]
        prev = f"p{d - 1} + " if d else ""
        lines.append(f"{ind}  const int64_t p{d} = {prev}j{d} * {xs[d]};")
    ind = "  " * last
    row = f"p{last - 1}" if last else "0"
    if mode == "constant":
        fill = f"for (int64_t i = 0; i < {Y}; ++i) {y.sym}[o + (size_t)i] = {value};"
        ends = [
            f"for (int64_t i = 0; i < lo; ++i) {y.sym}[o + (size_t)i] = {value};",
            f"for (int64_t i = hi; i < {Y}; ++i) {y.sym}[o + (size_t)i] = {value};",
        ]
    else:
        body = " ".join(
            [
                "int64_t j = i - b;",
                *_pad_map(mode, n, "j"),
                f"{y.sym}[o + (size_t)i] = {x.sym}[{row} + j];",
            ]
        )
        ends = [
            f"for (int64_t i = 0; i < lo; ++i) {{ {body} }}",
            f"for (int64_t i = hi; i < {Y}; ++i) {{ {body} }}",
        ]
    copy = f"if (hi > lo) memcpy({y.sym} + o + (size_t)lo, {x.sym} + {row} + (lo - b), (size_t)(hi - lo) * {es});"
    if mode == "constant" and last:
        lines.append(f"{ind}if (!in{last - 1}) {{ {fill} }}")
        lines.append(f"{ind}else {{")
        lines += [f"{ind}  {c}" for c in (*ends, copy)]
        lines.append(f"{ind}}}")
    else:
        lines += [f"{ind}{c}" for c in (*ends, copy)]
    lines.append(f"{ind}o += {Y};")
    lines += ["  " * d + "}" for d in reversed(range(last))]
    return "\n".join(lines)


def _pad_check(node: Node, graph: Graph) -> str | None:
    mode = pad_attrs(node, graph.opset).mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        return f"Pad mode '{mode}' is not in the ONNX spec"
    return None


@register_op("Pad", check=_pad_check)
def pad(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    r = x.rank
    pa = pad_attrs(ctx.node, ctx.graph.opset)
    mode = pa.mode
    if pa.value is not None:  # Pad-1/2: an attribute, schema default 0.0
        value = c_literal(pa.value, y.dtype)
    elif ctx.has_input(2) and ctx.x(2).size:
        v = ctx.const(2)
        value = (
            c_literal(v.reshape(-1)[0].item(), y.dtype) if v is not None else f"{ctx.x(2).sym}[0]"
        )
    else:
        value = c_literal(0, y.dtype)
    begin = _pad_begin_static(ctx)
    code = ""
    if begin is None:
        # pads (and axes) computed at run time: only the begin pads matter, the output shape
        # already says how much was added at the end
        n_ax = ctx.x(3).size if ctx.has_input(3) else r
        axis = f"(int64_t){ctx.x(3).sym}[k]" if ctx.has_input(3) else "(int64_t)k"
        code = "\n".join(
            [
                f"int64_t pb[{r}] = {{{', '.join(['0'] * r)}}};",
                f"for (size_t k = 0; k < {n_ax}; ++k) {{",
                f"  int64_t a = {axis};",
                f"  if (a < 0) a += {r};",
                f"  pb[a] = (int64_t){ctx.x(1).sym}[k];",
                "}",
            ]
        )
    return pad_code(x, y, mode, value, begin, code)


@register_op("CenterCropPad")
def center_crop_pad(ctx: NodeContext) -> str:
    """Crop or zero-pad each axis around its centre to the (static) output shape. The spec's
    reference puts the odd element at the end: begin = floor(diff / 2)."""
    x, y = ctx.x(0), ctx.y(0)
    begin = [
        (o - i) // 2 if o >= i else -((i - o) // 2) for i, o in zip(x.shape, y.shape, strict=True)
    ]
    return pad_code(x, y, "constant", c_literal(0, y.dtype), begin)


@register_op("Expand")
def expand(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "a")


@register_op("Tile")
def tile(ctx: NodeContext) -> str:
    """y[i] = x[i mod x.shape], axis by axis; `repeats` is implied by the static output shape."""
    x, y = ctx.x(0), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    xs = strides(x.shape)
    return nest(
        y.shape,
        lambda d, i: f"(int64_t)({i} % {x.shape[d]}) * {xs[d]}",
        f"{y.sym}[o++] = {x.sym}[p];",
    )


@register_op("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: NodeContext) -> str:
    """Both are a reshape to 6-D, a transpose, and a reshape back (ONNX spec formulas)."""
    x, y = ctx.x(0), ctx.y(0)
    ds = depth_space_attrs(ctx.node, ctx.graph.opset)
    b, mode = ds.blocksize, ds.mode
    N, C, H, W = x.shape
    if ctx.node.op_type == "DepthToSpace":
        c2 = C // (b * b)
        if mode == "DCR":
            tmp_shape, perm = (N, b, b, c2, H, W), (0, 3, 4, 1, 5, 2)
        else:
            tmp_shape, perm = (N, c2, b, b, H, W), (0, 1, 4, 2, 5, 3)
    else:
        tmp_shape = (N, C, H // b, b, W // b, b)
        # SpaceToDepth-28 added `mode`; CRD keeps channels outermost
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    ts = strides(tmp_shape)
    out_shape = tuple(tmp_shape[p] for p in perm)
    return strided_copy(y.sym, x.sym, out_shape, [ts[p] for p in perm])


# --------------------------------------------------------------------------------------------
# Col2Im
# --------------------------------------------------------------------------------------------
@register_op("Col2Im")
def col2im(ctx: NodeContext) -> str:
    """Sum sliding blocks back into an image: the inverse layout of im2col (ONNX Col2Im-18).

    x is [N, C*prod(block), L]; the output [N, C, *image_shape] is static, but block_shape
    may come at run time, so the block geometry is read from it."""
    x, y = ctx.x(0), ctx.y(0)
    img = list(y.shape[2:])
    nd = len(img)
    N, C = y.shape[:2]
    K = x.shape[1] // max(C, 1)
    L = x.shape[2]
    # no schema defaults: the spec's prose says 1 per axis, 0 pads
    dil = list(ints(ctx.node, "dilations", nd, 1, ctx.graph.opset))
    pads = list(ints(ctx.node, "pads", 2 * nd, 0, ctx.graph.opset))
    st = list(ints(ctx.node, "strides", nd, 1, ctx.graph.opset))
    if y.size == 0:
        return "/* empty */"
    blk = ctx.const(2)
    if blk is not None:
        ks = "{" + ", ".join(str(int(v)) for v in blk.reshape(-1)) + "}"
    else:
        ks = "{" + ", ".join(f"(int64_t){ctx.x(2).sym}[{d}]" for d in range(nd)) + "}"
    isz = int(np.prod(img))
    lines = [
        f"const int64_t ks[{nd}] = {ks};",
        f"int64_t nb[{nd}];",
    ]
    for d in range(nd):
        lines.append(
            f"nb[{d}] = ({img[d]} + {pads[d] + pads[d + nd]} - {dil[d]} * (ks[{d}] - 1) - 1) / {st[d]} + 1;"
        )
    lines += [
        f"memset({y.sym}, 0, {y.nbytes});",
        f"for (size_t nc = 0; nc < {N * C}; ++nc)",
        f"for (int64_t kc = 0; kc < {K}; ++kc)",
        f"for (int64_t l = 0; l < {L}; ++l) {{",
        "  int64_t kr = kc, lr = l, pos = 0;",
        "  int inside = 1;",
    ]
    # decompose the block offset and the block position row-major, last axis fastest
    for d in reversed(range(nd)):
        lines.append(f"  const int64_t k{d} = kr % ks[{d}], b{d} = lr % nb[{d}];")
        lines.append(f"  kr /= ks[{d}]; lr /= nb[{d}];")
    for d in range(nd):
        lines.append(f"  const int64_t i{d} = b{d} * {st[d]} - {pads[d]} + k{d} * {dil[d]};")
        lines.append(f"  if (i{d} < 0 || i{d} >= {img[d]}) inside = 0;")
        lines.append(f"  pos = pos * {img[d]} + i{d};")
    lines += [
        f"  if (inside) {y.sym}[nc * {isz} + (size_t)pos] += {x.sym}[(nc * {K} + (size_t)kc) * {L} + (size_t)l];",
        "}",
    ]
    return "\n".join(lines)
