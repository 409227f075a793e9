"""Code-generation helpers shared by the op emitters: loops, broadcasting, activations."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from ....semantics.activations import (  # clip_bounds: re-exported for the emitters
    ACTIVATIONS,
    Activation,
    c_expr,
    clip_bounds,  # noqa: F401
)
from ....semantics.fused import activation_of
from ..emitter import NodeContext, Tensor, c_literal


def strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return list(reversed(out))


def broadcast_strides(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Strides of `in_shape` read at `out_shape` positions (0 along broadcast dims)."""
    pad = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    st = strides(pad)
    return [0 if pad[d] == 1 and out_shape[d] != 1 else st[d] for d in range(len(out_shape))]


def merge_dims(
    out_shape: tuple[int, ...], in_strides: list[list[int]]
) -> tuple[list[int], list[list[int]]]:
    """Collapse adjacent dims that every operand walks contiguously (fewer, longer loops)."""
    dims: list[int] = []
    sts: list[list[int]] = [[] for _ in in_strides]
    for d, n in enumerate(out_shape):
        if n == 1:
            continue
        if dims:
            ok = all(
                s[d] * n == st[-1] or (s[d] == 0 and st[-1] == 0)
                for s, st in zip(in_strides, sts, strict=True)
            )
            if ok:
                dims[-1] *= n
                for s, st in zip(in_strides, sts, strict=True):
                    st[-1] = s[d]
                continue
        dims.append(n)
        for s, st in zip(in_strides, sts, strict=True):
            st.append(s[d])
    return dims, sts


def elementwise(
    ctx: NodeContext,
    operands: list[Tensor],
    out: Tensor,
    expr: str,
    *,
    pre: str = "",
    ctype: str | None = None,
    load: Callable[[Tensor, str], tuple[str, str]] | None = None,
    store: Callable[[str], str] | None = None,
) -> str:
    """out[i] = expr(a, b, ...) with numpy broadcasting. `expr` names operands a, b, c, ...

    Each operand is read into a local of its own C type first, so `expr` can use them freely.
    `load(t, ref) -> (ctype, value)` and `store(expr) -> value` convert from / to types stored
    as raw bits (float16, ...; see ops/dtypes.py).
    """
    names = "abcdefghijklmnopqrstuvwxyz"
    shape = out.shape
    in_st = [broadcast_strides(t.shape, shape) for t in operands]
    dims, sts = merge_dims(shape, in_st)
    n = out.size
    if n == 0:
        return "/* empty tensor */"
    lines = [pre] if pre else []
    idx = [f"i{k}" for k in range(len(dims))]
    loads = []
    for j, t in enumerate(operands):
        off = (
            " + ".join(
                f"{i}*{s}" if s != 1 else i for i, s in zip(idx, sts[j], strict=True) if s != 0
            )
            or "0"
        )
        lt, val = load(t, f"{t.sym}[{off}]") if load else (t.ctype, f"{t.sym}[{off}]")
        loads.append(f"const {lt} {names[j]} = {val};")
    out_off = (
        " + ".join(
            f"{i}*{s}" if s != 1 else i for i, s in zip(idx, strides(tuple(dims)), strict=True)
        )
        or "0"
    )
    value = store(expr) if store else f"({ctype or out.ctype})({expr})"
    body = " ".join(loads) + f" {out.sym}[{out_off}] = {value};"
    if not dims:
        return "\n".join([*lines, "{ " + body.replace("[0]", "[0]") + " }"])
    code = ""
    for k, d in enumerate(dims):
        code += "  " * k + f"for (size_t {idx[k]} = 0; {idx[k]} < {d}; ++{idx[k]})\n"
    code += "  " * len(dims) + "{ " + body + " }"
    return "\n".join([*lines, code])


def act_expr(act: Activation | None, v: str, ctype: str = "float") -> str:
    """C expression applying a fused activation to the value `v` (a simple expression): the
    activation table's expression (semantics/activations.py), which every encoding renders -
    elementwise.py's standalone ops, the epilogues here, the direct and depthwise kernels - and
    whose NaN / Inf behaviour follows onnxruntime (the table's tests check it)."""
    if act is None:
        return v
    lit = lambda x: c_literal(x, np.float64 if ctype == "double" else np.float32)  # noqa: E731
    if ctype not in ("float", "double"):
        # integer producers (a fused Add): the parameters are the values as given, and Relu
        # has no `< 0` (always false on unsigned types, a warning under the strict flags)
        if act.op == "Relu":
            return f"({v} > 0 ? {v} : 0)"
        if act.op == "Clip":
            return f"({ACTIVATIONS['Clip'].c(v, act.alpha, act.beta, lit, '')})"
    return c_expr(act, v, lit, ctype)


def fused_act(ctx: NodeContext) -> Activation | None:
    return activation_of(ctx.node)


def apply_act_loop(ctx: NodeContext, ptr: str, n: int, ctype: str = "float") -> str:
    """A loop applying the node's fused activation in place, or '' when there is none."""
    act = fused_act(ctx)
    if act is None:
        return ""
    return f"for (size_t i = 0; i < {n}; ++i) {{ const {ctype} v = {ptr}[i]; {ptr}[i] = {act_expr(act, 'v', ctype)}; }}"


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def act_tail(ctx: NodeContext, act: Activation | None, pool: bool = False) -> tuple[str, str]:
    """A kernel-name suffix for `act` and the C statement a depthwise kernel over planes
    [i0, i1) of OH * OW floats at a->y runs after its plane loop: `act` over the planes it
    just wrote (one thread's share, in its L2), for the activations the kernel does not apply
    in registers. Measured (3x3 depthwise, 576 14x14 planes, SiLU): plane by plane or in
    16-128 KB batches inside the loop the activation cost 30 % more than one pass after it;
    at the end of the call it costs the same as that pass and is split across the threads
    with the convolution. The loop is a function of its own (its o2e_vmath.h constants stay
    out of the kernel's registers); in float it vectorises. ("", "") for no activation.
    pool: the pass also writes each plane's mean to a->pool (kernels/conv/se_pool.py)."""
    if act is None and not pool:
        return "", ""
    tag = act.op.lower() if act is not None else ""
    if act is not None and (act.alpha or act.beta):  # literals of the kernel: in its name
        digest = hashlib.sha1(repr((act.alpha, act.beta)).encode()).hexdigest()[:8]
        tag += f"_{digest}"
    if not pool:
        fn = f"o2e_act_{tag}"
        ctx.helper(
            fn,
            f"""
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static void {fn}(float *restrict p, size_t n)
{{
  for (size_t q = 0; q < n; ++q) {{ const float v = p[q]; p[q] = {act_expr(act, "v")}; }}
}}
""",
        )
        return f"_{tag}", f"{fn}(a->y + (size_t)i0 * OH * OW, (size_t)(i1 - i0) * OH * OW);"
    fn = f"o2e_act_{tag}_pool" if act is not None else "o2e_planes_pool"
    loop = (
        ""
        if act is None
        else f"""
    for (size_t q = 0; q < (c1 - c0) * S; ++q) {{ const float v = q0[q]; q0[q] = {act_expr(act, "v")}; }}"""
    )
    ctx.helper(
        fn,
        f"""
/* planes [0, np) of S floats at p: {"the activation, then " if act else ""}each plane's mean to m[] (se_pool.py),
 * in chunks of whole planes of about 16 KB, summed while in L1 in o2e_global_avgpool's order */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static void {fn}(float *restrict p, size_t np, size_t S, float *restrict m)
{{
  const size_t per = S >= 4096 ? 1 : 4096 / S, S16 = S - S % 16;
  for (size_t c0 = 0; c0 < np; c0 += per) {{
    const size_t c1 = c0 + per < np ? c0 + per : np;
    float *restrict q0 = p + c0 * S;
    (void)q0;{loop}
    for (size_t c = c0; c < c1; ++c) {{
      const float *restrict xc = p + c * S;
      float part[16] = {{0.0f}}, acc = 0.0f;
      for (size_t k = 0; k < S16; k += 16)
        for (int l = 0; l < 16; ++l) part[l] += xc[k + l];
      for (size_t k = S16; k < S; ++k) acc += xc[k];
      for (int l = 0; l < 16; ++l) acc += part[l];
      m[c] = acc / (float)S;
    }}
  }}
}}
""",
    )
    suffix = f"_{tag}_pool" if act is not None else "_pool"
    call = f"{fn}(a->y + (size_t)i0 * OH * OW, (size_t)(i1 - i0), (size_t)OH * OW, a->pool + i0);"
    return suffix, call


def act_tail_fn(ctx: NodeContext, act: Activation | None) -> tuple[str, str]:
    """act_tail's (suffix, the function a kernel calls over its planes), ("", "NULL") for no
    activation: for the kernels in runtime headers, which take it as a pointer."""
    suffix, stmt = act_tail(ctx, act)
    return suffix, stmt.split("(", 1)[0] if stmt else "NULL"
