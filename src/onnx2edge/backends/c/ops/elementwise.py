"""Element-wise ops: unary math, activations, binary arithmetic / comparison / logic / bitwise with
numpy broadcasting, variadic Sum/Mean/Max/Min, Where, Clip, Cast/CastLike/BitCast.

Every op takes the element types its ONNX schema lists. float16 and bfloat16 (and the float8 /
int4 types Cast reaches) are computed in float through ops/dtypes.py, as numpy does for float16.
Integer arithmetic wraps around as in numpy: it is done in an unsigned type, since signed
overflow is undefined in C.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.activations import ACTIVATIONS, vm
from ....semantics.attrs import attr
from ....semantics.fused import base_op
from ....semantics.numeric import cast_attrs, clip_attrs
from ..emitter import NodeContext, Tensor, c_literal
from ..kernels.conv import conv_nchwc, se_fold
from . import register_op
from .common import act_expr, elementwise, fused_act
from .dtypes import (
    allow_storage_dtypes,
    compute_ctype,
    is_float,
    is_int,
    is_signed_int,
    is_storage,
    loader,
    need,
    store_expr,
    storer,
)

FLOAT_OPS: list[str] = []  # filled below; these see float16 / bfloat16 too


def _ew(
    ctx: NodeContext, operands: list[Tensor], out: Tensor, expr: str, *, src: str | None = None
) -> str:
    """common.elementwise, converting operands stored as bits (float16, ...) to their compute type
    and the result back. `src` is the C type `expr` evaluates to (default: out's compute type)."""
    act = fused_act(ctx)
    if act is not None:  # on the value in out's type (integer arithmetic is done unsigned)
        ct = compute_ctype(out.dtype)
        expr = act_expr(act, f"(({ct})({expr}))", ct)
    if not any(is_storage(t.dtype) for t in (*operands, out)):
        return elementwise(ctx, operands, out, expr)
    return elementwise(ctx, operands, out, expr, load=loader(ctx), store=storer(ctx, out, src))


def _ctype(t: Tensor) -> str:
    return compute_ctype(t.dtype)


def _F(ctype: str) -> str:
    """Suffix selecting the float or double libm function."""
    return "" if ctype == "double" else "f"


def _lit(ctype: str, x: float) -> str:
    return c_literal(x, np.float64 if ctype == "double" else np.float32)


def _dtype_check(ok, what: str):  # noqa: ANN001, ANN202
    """A check refusing a node whose first input's element type fails `ok`."""

    def check(node: Node, graph: Graph) -> str | None:
        t = graph.type_of(node.inputs[0])
        if t is not None and not ok(t.dtype):
            return f"{node.op_type} on {t.dtype.name} is not supported ({what} only)"
        return None

    return check


_float_only = _dtype_check(
    lambda d: is_float(d) and np.dtype(d).name not in ("float8_e8m0fnu",), "floating-point"
)
_numeric = _dtype_check(
    lambda d: np.dtype(d).kind in "iuf" or np.dtype(d).name in ("bfloat16",), "numeric"
)


# --------------------------------------------------------------------------------------------
# unary
# --------------------------------------------------------------------------------------------
# unary float ops: expression in terms of `a` and the libm suffix `F`
_UNARY_FLOAT = {
    "Exp": "expF(a)",
    "Log": "logF(a)",
    "Sqrt": "sqrtF(a)",
    "Reciprocal": "1 / a",
    "Floor": "floorF(a)",
    "Ceil": "ceilF(a)",
    "Round": "nearbyintF(a)",  # ONNX rounds half to even, like the default rounding mode
    "Erf": "erfF(a)",
    "Sin": "sinF(a)",
    "Cos": "cosF(a)",
    "Tan": "tanF(a)",
    "Asin": "asinF(a)",
    "Acos": "acosF(a)",
    "Atan": "atanF(a)",
    "Sinh": "sinhF(a)",
    "Cosh": "coshF(a)",
    "Asinh": "asinhF(a)",
    "Acosh": "acoshF(a)",
    "Atanh": "atanhF(a)",
}
FLOAT_OPS += _UNARY_FLOAT


# in float, runtime/o2e_vmath.h's branch-free functions: the loop vectorises (libm's is a call)
_VMATH = {"Exp": "exp", "Log": "log", "Erf": "erf"}


@register_op(*_UNARY_FLOAT, check=_float_only)
def unary_float(ctx: NodeContext) -> str:
    ct, op = _ctype(ctx.y(0)), ctx.node.op_type
    if op in _VMATH:
        return _ew(ctx, [ctx.x(0)], ctx.y(0), f"{vm(_VMATH[op], _F(ct))}(a)")
    return _ew(ctx, [ctx.x(0)], ctx.y(0), _UNARY_FLOAT[op].replace("F(", _F(ct) + "("))


FLOAT_OPS += ["Relu", "Neg", "Abs", "Sign"]


@register_op("Relu", "Neg", "Abs", "Sign", check=_numeric)
def unary_any(ctx: NodeContext) -> str:
    op, t = ctx.node.op_type, ctx.x(0)
    ct, unsigned, flt = _ctype(t), t.dtype.kind == "u", is_float(t.dtype)
    if op == "Relu":  # the activation table's expression: NaN stays NaN (onnxruntime)
        relu = ACTIVATIONS["Relu"].c("a", 0.0, 0.0, lambda v: _lit(ct, v), _F(ct))
        expr = "a" if unsigned else relu
    elif op == "Neg":
        # the minimum wraps to itself, as in numpy (C promotes the narrow types to int)
        expr = "-a" if flt or np.dtype(t.dtype).itemsize < 4 else f"0 - ({_unsigned(ct)})a"
    elif op == "Abs":
        u = _unsigned(ct)
        expr = "a" if unsigned else (f"fabs{_F(ct)}(a)" if flt else f"a < 0 ? 0 - ({u})a : ({u})a")
    else:  # Sign: NaN stays NaN (numpy.sign)
        expr = (
            "a > 0"
            if unsigned
            else ("a > 0 ? 1 : (a < 0 ? -1 : a)" if flt else "(a > 0) - (a < 0)")
        )
    return _ew(ctx, [t], ctx.y(0), expr)


def _shrink_expr(node: Node, ct: str) -> str:
    b, lam = (_lit(ct, float(attr(node, n))) for n in ("bias", "lambd"))
    return f"a < -{lam} ? a + {b} : (a > {lam} ? a - {b} : 0)"


def _table_expr(ctx: NodeContext, ct: str) -> str:
    """The activation table's C expression of this node over `a` (semantics/activations.py)."""
    op = ctx.op
    p = ACTIVATIONS[op].params(ctx.node, ctx.graph)
    assert p is not None  # only Clip has run-time parameters, and Clip is emitted below
    return ACTIVATIONS[op].c("a", p[0], p[1], lambda v: _lit(ct, v), _F(ct))


# every activation of the table but Relu (integers too, unary_any) and Clip (run-time bounds)
_TABLE_ACTS = tuple(op for op in ACTIVATIONS if op not in ("Relu", "Clip"))
FLOAT_OPS += _TABLE_ACTS


@register_op(*_TABLE_ACTS, check=_float_only)
def activation(ctx: NodeContext) -> str:
    return _ew(ctx, [ctx.x(0)], ctx.y(0), _table_expr(ctx, _ctype(ctx.y(0))))


FLOAT_OPS.append("Shrink")


@register_op("Shrink", check=_numeric)
def shrink(ctx: NodeContext) -> str:
    """Shrink also takes integer types; bias and lambd are floats, so compare in float."""
    out = ctx.y(0)
    if is_float(out.dtype):
        return _ew(ctx, [ctx.x(0)], out, _shrink_expr(ctx.node, _ctype(out)))
    b, lam = float(attr(ctx.node, "bias")), float(attr(ctx.node, "lambd"))
    expr = (
        f"(double)a < {-lam!r} ? (double)a + {b!r} : ((double)a > {lam!r} ? (double)a - {b!r} : 0)"
    )
    return _ew(ctx, [ctx.x(0)], out, expr)


FLOAT_OPS += ["IsNaN", "IsInf"]


@register_op("IsNaN", "IsInf", check=_float_only)
def is_nan_inf(ctx: NodeContext) -> str:
    if ctx.node.op_type == "IsNaN":
        return _ew(ctx, [ctx.x(0)], ctx.y(0), "isnan(a)")
    pos, neg = int(ctx.attr("detect_positive")), int(ctx.attr("detect_negative"))
    cond = (
        " || ".join(
            c for c, on in (("(isinf(a) && a > 0)", pos), ("(isinf(a) && a < 0)", neg)) if on
        )
        or "0"
    )
    return _ew(ctx, [ctx.x(0)], ctx.y(0), cond)


@register_op("Not")
def logical_not(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "!a")


@register_op("BitwiseNot")
def bitwise_not(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "~a")


# --------------------------------------------------------------------------------------------
# binary
# --------------------------------------------------------------------------------------------
def _wide_unsigned(ctype: str) -> str:
    """The unsigned type integer arithmetic of `ctype` wraps in (at least 32 bits, as C promotes)."""
    return "uint64_t" if "64" in ctype else "uint32_t"


def _unsigned(ctype: str) -> str:
    return ctype if ctype.startswith("u") else "u" + ctype


def _int_binary(op: str, ct: str, signed: bool, bits: int, node: Node) -> str:
    U = _wide_unsigned(ct)
    if op in ("Add", "Sub", "Mul"):
        sym = {"Add": "+", "Sub": "-", "Mul": "*"}[op]
        return f"({U})a {sym} ({U})b"
    if op == "Div":  # truncates toward zero; / 0 and MIN / -1 are undefined in C
        return (
            f"b == 0 ? 0 : (b == -1 ? 0 - ({U})a : ({U})(a / b))"
            if signed
            else "b == 0 ? 0 : a / b"
        )
    if op == "Mod":
        if not signed:
            return "b == 0 ? 0 : a % b"
        if int(attr(node, "fmod")):  # C remainder: the sign of the dividend (numpy.fmod)
            return "b == 0 || b == -1 ? 0 : a % b"
        # the sign of the divisor, as Python and numpy.mod (ONNX spec)
        return "b == 0 || b == -1 ? 0 : ((a % b) != 0 && ((a % b) < 0) != (b < 0) ? (a % b) + b : a % b)"
    if op == "BitShift":
        # numpy (the ONNX reference) gives 0 for a shift by >= the width or < 0, or -1 for a
        # right shift of a negative value; C leaves those undefined, so test first
        bad = f"b < 0 || b >= {bits}" if signed else f"b >= {bits}"
        if node.attr("direction") == "LEFT":
            return f"{bad} ? 0 : (uint64_t)({_unsigned(ct)})a << b"
        # an arithmetic shift, written portably (>> of a negative value is implementation-defined)
        if signed:
            return f"{bad} ? (a < 0 ? -1 : 0) : (a < 0 ? ~(~a >> b) : a >> b)"
        return f"{bad} ? 0 : a >> b"
    if op == "PRelu":
        return f"a < 0 ? ({U})a * ({U})b : ({U})a" if signed else "a"
    raise AssertionError(op)


def _float_binary(op: str, ct: str, node: Node) -> str:
    F = _F(ct)
    if op in ("Add", "Sub", "Mul", "Div"):
        return "a " + {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}[op] + " b"
    if op == "Mod":
        if int(attr(node, "fmod")):
            return f"fmod{F}(a, b)"
        # numpy.mod: fmod, moved to the divisor's sign; a zero result takes the divisor's sign
        need_r = f"fmod{F}(a, b)"
        return (
            f"b == 0 ? {need_r} : ({need_r} != 0 ? (({need_r} < 0) != (b < 0) ? {need_r} + b : {need_r}) "
            f": copysign{F}(0, b))"
        )
    if op == "PRelu":
        return "a < 0 ? a * b : a"
    raise AssertionError(op)


_CMP = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=", "GreaterOrEqual": ">="}
_LOGIC = {"And": "a && b", "Or": "a || b", "Xor": "!a != !b"}
_BITWISE = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}
_ARITH = ("Add", "Sub", "Mul", "Div", "Mod", "PRelu", "BitShift")
FLOAT_OPS += [*_CMP, "Add", "Sub", "Mul", "Div", "Mod", "PRelu"]


def _binary_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None:
        return None
    op, dt = base_op(node), t.dtype  # o2e.AddAct is an Add
    if op in _ARITH and not (is_int(dt) or is_float(dt)) or is_storage(dt) and not is_float(dt):
        return f"{op} on {dt.name} is not supported"
    return None


@register_op(*_CMP, *_LOGIC, *_BITWISE, *_ARITH, check=_binary_check)
def binary(ctx: NodeContext) -> str:
    op, a, b, out = ctx.op, ctx.x(0), ctx.x(1), ctx.y(0)
    ct = _ctype(a)
    if op == "Equal" and a.dtype.kind == "S":  # strings (ops/strings.py): by their bytes
        return elementwise(ctx, [a, b], out, "strcmp(a.s, b.s) == 0")
    if op in _CMP:
        return _ew(ctx, [a, b], out, f"a {_CMP[op]} b", src="bool")
    if op in _LOGIC:
        return _ew(ctx, [a, b], out, _LOGIC[op])
    if op in _BITWISE:
        return _ew(ctx, [a, b], out, f"a {_BITWISE[op]} b")
    if is_float(a.dtype):
        if op == "Mul" and (gate := conv_nchwc.gate(ctx)) is not None:
            return gate  # an SE gate inside a channel-blocked chain (nchwc_plan)
        if op == "Mul" and se_fold.folds(ctx):  # the NCHW 1x1 layer after it scales its weights
            ctx.kernel("SE gate folded into the 1x1 layer's weights")
            ctx.leaves_unwritten()
            return "/* folded into the next 1x1 layer (its weights scaled by the gate) */"
        return _ew(ctx, [a, b], out, _float_binary(op, ct, ctx.node))
    bits = 8 * np.dtype(a.dtype).itemsize
    return _ew(
        ctx, [a, b], out, _int_binary(op, ct, is_signed_int(a.dtype), bits, ctx.node), src="int64_t"
    )


IPOW = r"""
/* a^b in wrapping 64-bit integer arithmetic (numpy.power on integers); b < 0 gives 1/a^|b| truncated */
static inline uint64_t o2e_ipow(int64_t a, int64_t b)
{
  uint64_t r = 1, x = (uint64_t)a;
  if (b < 0) return a == 1 ? 1u : (a == -1 ? ((b & 1) ? (uint64_t)-1 : 1u) : 0u);
  for (; b; b >>= 1, x *= x)
    if (b & 1) r *= x;
  return r;
}
"""
FLOAT_OPS.append("Pow")


@register_op("Pow", check=_numeric)
def pow_(ctx: NodeContext) -> str:
    """The reference computes numpy.power(a, b).astype(a.dtype): mixed types in double."""
    a, b, out = ctx.x(0), ctx.x(1), ctx.y(0)
    ct = _ctype(a)
    if is_float(a.dtype) and is_float(b.dtype) and _ctype(b) == ct:
        return _ew(ctx, [a, b], out, f"pow{_F(ct)}(a, b)")
    if is_int(a.dtype) and is_int(b.dtype):
        return _ew(
            ctx,
            [a, b],
            out,
            f"{ctx.helper('o2e_ipow', IPOW)}((int64_t)a, (int64_t)b)",
            src="uint64_t",
        )
    p = "pow((double)a, (double)b)"
    if is_int(a.dtype):  # an integer to a float power: truncated toward zero
        return _ew(ctx, [a, b], out, f"{need(ctx, 'o2e_f2i64')}({p})", src="int64_t")
    return _ew(ctx, [a, b], out, p, src="double")


# --------------------------------------------------------------------------------------------
# variadic, Where, Clip
# --------------------------------------------------------------------------------------------
FLOAT_OPS += ["Sum", "Mean", "Max", "Min", "Clip"]


@register_op("Sum", "Mean", "Max", "Min", check=_numeric)
def variadic(ctx: NodeContext) -> str:
    op = ctx.node.op_type
    ins = [ctx.x(i) for i in range(ctx.n_inputs) if ctx.has_input(i)]
    names = "abcdefghijklmnopqrstuvwxyz"[: len(ins)]
    out = ctx.y(0)
    flt = is_float(out.dtype)
    if op in ("Sum", "Mean"):
        expr = " + ".join(names if flt else [f"({_wide_unsigned(_ctype(out))}){n}" for n in names])
        if op == "Mean":
            expr = f"({expr}) / {len(ins)}"
    else:
        cmp = ">" if op == "Max" else "<"
        expr = names[0]
        for n in names[1:]:
            if flt:  # NaN propagates as in numpy.maximum / onnxruntime
                expr = f"(isnan({expr}) || isnan({n}) ? NAN : ({expr} {cmp} {n} ? {expr} : {n}))"
            else:
                expr = f"({expr} {cmp} {n} ? {expr} : {n})"
    return _ew(ctx, ins, out, expr)


@register_op("Where")
def where(ctx: NodeContext) -> str:
    # values are copied, never computed: raw bits work for every type
    return elementwise(ctx, [ctx.x(0), ctx.x(1), ctx.x(2)], ctx.y(0), "a ? b : c")


@register_op("Clip", check=_numeric)
def clip(ctx: NodeContext) -> str:
    t, out = ctx.x(0), ctx.y(0)
    ct = _ctype(out)
    lo = hi = None
    ops = [t]
    ca = clip_attrs(ctx.node, ctx.graph.opset)
    if not ca.from_inputs:
        # Clip-6: an absent bound is the schema's +-FLT_MAX, which clamps +-Inf (onnxruntime)
        lo, hi = _lit(ct, ca.min), _lit(ct, ca.max)
    else:
        for idx in (1, 2):
            if ctx.has_input(idx):
                ops.append(ctx.x(idx))
                if idx == 1:
                    lo = "bc"[len(ops) - 2]
                else:
                    hi = "bc"[len(ops) - 2]
    if ct in ("float", "double") and not is_storage(out.dtype):
        # a missing bound is the type's numeric limit: +-Inf clamps to it (onnxruntime, spec)
        big = _lit(ct, float(np.finfo(np.float64 if ct == "double" else np.float32).max))
        lo = f"-{big}" if lo is None else lo
        hi = big if hi is None else hi
    expr = "a"
    if lo is not None:
        expr = f"({expr} < {lo} ? {lo} : {expr})"
    if hi is not None:
        expr = f"({expr} > {hi} ? {hi} : {expr})"
    return _ew(ctx, ops, out, expr)


# --------------------------------------------------------------------------------------------
# Cast, CastLike, BitCast
# --------------------------------------------------------------------------------------------
@register_op("Cast", "CastLike")
def cast(ctx: NodeContext) -> str:
    """Cast spec: float -> int truncates toward zero; int -> narrower int keeps the low bits;
    anything -> bool is `!= 0`; float8 targets honour `saturate` (default 1)."""
    src, out = ctx.x(0), ctx.y(0)
    if np.dtype(src.dtype) == np.dtype(out.dtype):
        return elementwise(ctx, [src], out, "a")
    ca = cast_attrs(ctx.node, ctx.graph.opset)  # saturate before 19: 19's default
    saturate, round_mode = ca.saturate, ca.round_mode
    sct = _ctype(src)
    if out.dtype.kind == "b":
        return _ew(ctx, [src], out, "a != 0", src="bool")

    def store(expr: str) -> str:
        return store_expr(ctx, out.dtype, expr, src=sct, saturate=saturate, round_mode=round_mode)

    return elementwise(ctx, [src], out, "a", load=loader(ctx), store=store)


def _bitcast_check(node: Node, graph: Graph) -> str | None:
    ta, tb = graph.type_of(node.inputs[0]), graph.type_of(node.outputs[0])
    if ta is not None and tb is not None and ta.dtype.itemsize != tb.dtype.itemsize:
        return f"BitCast from {ta.dtype.name} to {tb.dtype.name}: the element sizes differ"
    return None


@register_op("BitCast", check=_bitcast_check)
def bitcast(ctx: NodeContext) -> str:
    """Same bytes, another type (opset 26): a copy."""
    x, y = ctx.x(0), ctx.y(0)
    return f"memcpy({y.sym}, {x.sym}, {y.nbytes});" if y.nbytes else "/* empty */"


allow_storage_dtypes(*FLOAT_OPS, "Cast", "CastLike", "BitCast", "Where")
