"""Loop and offset helpers for generated C, shared by several op families (reduce, norm,
indexing, shape): a helper module, so op modules need not import one another."""

from __future__ import annotations

import numpy as np

from .common import strides


def split_axis(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, n, inner): the sizes before, at and after `axis` of a row-major tensor."""
    return int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))


def along(i: str, stride: int) -> str:
    """The offset of index `i` along a dim of `stride` (no `* 1` in generated code)."""
    return i if stride == 1 else f"({i}) * {stride}" if " " in i else f"{i} * {stride}"


def dim_runs(shape: tuple[int, ...], reduced: set[int]) -> list[tuple[bool, int, int]]:
    """(is_reduced, size, stride) runs of adjacent dims of one kind; size-1 dims dropped.

    Adjacent dims of a row-major tensor merge into one dim, so a run is one loop.
    """
    st = strides(shape)
    runs: list[tuple[bool, int, int]] = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        red = d in reduced
        if runs and runs[-1][0] == red and runs[-1][2] == st[d] * n:
            runs[-1] = (red, runs[-1][1] * n, st[d])
        else:
            runs.append((red, n, st[d]))
    return runs


def offset_expr(idx: list[str], sts: list[int]) -> str:
    terms = [i if s == 1 else f"{i} * {s}" for i, s in zip(idx, sts, strict=True)]
    return " + ".join(terms) or "0"


def loops(idx: list[str], sizes: list[int], indent: str = "") -> list[str]:
    return [
        f"{indent}for (size_t {i} = 0; {i} < {n}; ++{i})" for i, n in zip(idx, sizes, strict=True)
    ]


def copy_code(dst: str, src: str, nbytes: int) -> str:
    if nbytes == 0:
        return "/* empty */"
    return f"if ((const void *){dst} != (const void *){src}) memmove({dst}, {src}, {nbytes});"


def nest(shape: tuple[int, ...], term, stmt: str) -> str:  # noqa: ANN001
    """Nested loops over `shape` (i0, i1, ...); level d adds term(d, "i<d>") to a running signed
    source offset, `p` at the innermost level. `stmt` runs there (it may keep a running output
    index `o`, declared here)."""
    r = len(shape)
    lines = ["size_t o = 0;"]
    if r == 0:
        lines.append("const int64_t p = 0;")
    for d, n in enumerate(shape):
        prev = f"p{d - 1} + " if d else ""
        name = "p" if d == r - 1 else f"p{d}"
        t = term(d, f"i{d}")
        t = t.removesuffix(" * 1")
        if t == "0" and d:
            prev, t = f"p{d - 1}", ""
        lines.append("  " * d + f"for (size_t i{d} = 0; i{d} < {n}; ++i{d}) {{")
        lines.append("  " * (d + 1) + f"const int64_t {name} = {prev}{t};")
    lines.append("  " * r + stmt)
    lines += ["  " * d + "}" for d in reversed(range(r))]
    return "\n".join(lines)
