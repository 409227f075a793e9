"""Element-wise ops: unary math, activations, binary arithmetic / comparison / logic with
numpy broadcasting, variadic Sum/Mean/Max/Min, Where, Clip, Cast."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import act_expr, elementwise, fused_act


def _f(ctx: NodeContext) -> str:
    """Suffix selecting the float or double libm function."""
    return "" if ctx.y(0).ctype == "double" else "f"


def _float_only(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype.kind != "f":
        return f"{node.op_type} on {t.dtype.name} is not supported (float32/float64 only)"
    return None


def _lit(ctx: NodeContext, x: float) -> str:
    return c_literal(x, ctx.y(0).dtype)


# unary float ops: expression in terms of `a` and the libm suffix `F`
_UNARY_FLOAT = {
    "Sigmoid": "1 / (1 + expF(-a))",
    "Tanh": "tanhF(a)",
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
    "Softplus": "(a > 0 ? a + log1pF(expF(-a)) : log1pF(expF(a)))",
    "Softsign": "a / (1 + fabsF(a))",
    "Mish": "a * tanhF(a > 0 ? a + log1pF(expF(-a)) : log1pF(expF(a)))",
    "HardSwish": "a * fmaxF(0, fminF(1, a / 6 + 0.5))",
}


@register_op(*_UNARY_FLOAT, check=_float_only)
def unary_float(ctx: NodeContext) -> str:
    expr = _UNARY_FLOAT[ctx.node.op_type].replace("F(", _f(ctx) + "(")
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), act_expr(fused_act(ctx), f"({expr})", ctx.y(0).ctype) if fused_act(ctx) else expr)


@register_op("Relu", "Neg", "Abs", "Sign")
def unary_any(ctx: NodeContext) -> str:
    op, t = ctx.node.op_type, ctx.x(0)
    unsigned = t.dtype.kind == "u"
    expr = {
        "Relu": "a > 0 ? a : 0",
        "Neg": "-a",
        "Abs": "a" if unsigned else ("fabs" + _f(ctx) + "(a)" if t.dtype.kind == "f" else "a < 0 ? -a : a"),
        "Sign": "(a > 0) - (a < 0)" if not unsigned else "a > 0",
    }[op]
    return elementwise(ctx, [t], ctx.y(0), expr)


def _alpha_beta_expr(ctx: NodeContext) -> str:
    op, F = ctx.node.op_type, _f(ctx)
    a = lambda name, d: _lit(ctx, float(ctx.attr(name, d)))  # noqa: E731
    if op == "LeakyRelu":
        return f"a >= 0 ? a : a * {a('alpha', 0.01)}"
    if op == "Elu":
        return f"a >= 0 ? a : {a('alpha', 1.0)} * (exp{F}(a) - 1)"
    if op == "Selu":
        return f"{a('gamma', 1.0507009873554805)} * (a > 0 ? a : {a('alpha', 1.6732632423543772)} * (exp{F}(a) - 1))"
    if op == "Celu":
        al = a("alpha", 1.0)
        return f"fmax{F}(0, a) + fmin{F}(0, {al} * (exp{F}(a / {al}) - 1))"
    if op == "ThresholdedRelu":
        return f"a > {a('alpha', 1.0)} ? a : 0"
    if op == "HardSigmoid":
        return f"fmax{F}(0, fmin{F}(1, {a('alpha', 0.2)} * a + {a('beta', 0.5)}))"
    if op == "Gelu":
        if ctx.attr("approximate", "none") == "tanh":
            return f"0.5{F} * a * (1 + tanh{F}({_lit(ctx, np.sqrt(2 / np.pi))} * (a + {_lit(ctx, 0.044715)} * a * a * a)))"
        return f"0.5{F} * a * (1 + erf{F}(a * {_lit(ctx, 1 / np.sqrt(2))}))"
    if op == "Shrink":
        b, lam = a("bias", 0.0), a("lambd", 0.5)
        return f"a < -{lam} ? a + {b} : (a > {lam} ? a - {b} : 0)"
    raise AssertionError(op)


@register_op("LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "Gelu", "Shrink", check=_float_only)
def unary_params(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), _alpha_beta_expr(ctx))


@register_op("IsNaN", "IsInf")
def is_nan_inf(ctx: NodeContext) -> str:
    if ctx.node.op_type == "IsNaN":
        return elementwise(ctx, [ctx.x(0)], ctx.y(0), "isnan(a)")
    pos, neg = int(ctx.attr("detect_positive", 1)), int(ctx.attr("detect_negative", 1))
    cond = " || ".join(c for c, on in (("(isinf(a) && a > 0)", pos), ("(isinf(a) && a < 0)", neg)) if on) or "0"
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), cond)


@register_op("Not")
def logical_not(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "!a")


def _binary_expr(ctx: NodeContext) -> str:
    op = ctx.node.op_type
    t = ctx.x(0)
    kind = t.dtype.kind
    F = _f(ctx) if kind == "f" else ""
    simple = {"Add": "a + b", "Sub": "a - b", "Mul": "a * b", "Equal": "a == b", "Less": "a < b",
              "Greater": "a > b", "LessOrEqual": "a <= b", "GreaterOrEqual": "a >= b",
              "And": "a && b", "Or": "a || b", "Xor": "(!a) != (!b)", "BitwiseAnd": "a & b",
              "BitwiseOr": "a | b", "BitwiseXor": "a ^ b"}
    if op in simple:
        return simple[op]
    if op == "Div":
        return "a / b" if kind == "f" else "(b == 0 ? 0 : a / b)"
    if op == "Pow":
        if kind == "f":
            return f"pow{F}(a, b)"
        return "(" + f"({ctx.y(0).ctype})pow((double)a, (double)b)" + ")"
    if op == "Mod":
        if kind == "f" or int(ctx.attr("fmod", 0)):
            return f"fmod{F}(a, b)" if kind == "f" else "(b == 0 ? 0 : a % b)"
        # integer mod takes the divisor's sign (Python semantics), per the ONNX spec
        return "(b == 0 ? 0 : ((a % b) != 0 && ((a % b) < 0) != (b < 0) ? (a % b) + b : (a % b)))"
    if op == "BitShift":
        return "a << b" if ctx.attr("direction") == "LEFT" else "a >> b"
    if op == "PRelu":
        return "a < 0 ? a * b : a"
    raise AssertionError(op)


_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
           "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu")


def _check_pow(node: Node, graph: Graph) -> str | None:
    ta, tb = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    if node.op_type == "Pow" and ta is not None and tb is not None and ta.dtype != tb.dtype:
        if ta.dtype.kind != "f":
            return f"Pow of {ta.dtype.name} by {tb.dtype.name} is not supported"
    return None


@register_op(*_BINARY, check=_check_pow)
def binary(ctx: NodeContext) -> str:
    expr = _binary_expr(ctx)
    out = ctx.y(0)
    if ctx.node.op_type == "Pow" and ctx.x(1).dtype != ctx.x(0).dtype:
        expr = f"pow{_f(ctx)}(a, ({out.ctype})b)"
    return elementwise(ctx, [ctx.x(0), ctx.x(1)], out, act_expr(fused_act(ctx), f"({expr})", out.ctype) if fused_act(ctx) else expr)


@register_op("BitwiseNot")
def bitwise_not(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), "~a")


@register_op("Sum", "Mean", "Max", "Min")
def variadic(ctx: NodeContext) -> str:
    op = ctx.node.op_type
    ins = [ctx.x(i) for i in range(ctx.n_inputs) if ctx.has_input(i)]
    names = "abcdefghijklmnopqrstuvwxyz"[: len(ins)]
    out = ctx.y(0)
    kind = out.dtype.kind
    if op in ("Sum", "Mean"):
        expr = " + ".join(names)
        if op == "Mean":
            expr = f"({expr}) / {len(ins)}"
    else:
        cmp = ">" if op == "Max" else "<"
        expr = names[0]
        for n in names[1:]:
            if kind == "f":
                # NaN propagates as in numpy.maximum / onnxruntime
                expr = f"(isnan({expr}) || isnan({n}) ? NAN : ({expr} {cmp} {n} ? {expr} : {n}))"
            else:
                expr = f"({expr} {cmp} {n} ? {expr} : {n})"
    return elementwise(ctx, ins, out, expr)


@register_op("Where")
def where(ctx: NodeContext) -> str:
    return elementwise(ctx, [ctx.x(0), ctx.x(1), ctx.x(2)], ctx.y(0), "a ? b : c")


@register_op("Clip")
def clip(ctx: NodeContext) -> str:
    t, out = ctx.x(0), ctx.y(0)
    lo = hi = None
    if ctx.graph.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
        lo = None if lo is None else _lit(ctx, lo)
        hi = None if hi is None else _lit(ctx, hi)
        ops = [t]
    else:
        ops = [t]
        names = "bc"
        for k, idx in enumerate((1, 2)):
            if ctx.has_input(idx):
                ops.append(ctx.x(idx))
                if k == 0:
                    lo = names[len(ops) - 2]
                else:
                    hi = names[len(ops) - 2]
    expr = "a"
    if lo is not None:
        expr = f"({expr} < {lo} ? {lo} : {expr})"
    if hi is not None:
        expr = f"({expr} > {hi} ? {hi} : {expr})"
    return elementwise(ctx, ops, out, expr)


@register_op("Cast", "CastLike")
def cast(ctx: NodeContext) -> str:
    src, out = ctx.x(0), ctx.y(0)
    if out.dtype.kind == "b":
        return elementwise(ctx, [src], out, "a != 0")
    # float -> int truncates toward zero, as C and onnxruntime do for in-range values
    return elementwise(ctx, [src], out, f"({out.ctype})a")
