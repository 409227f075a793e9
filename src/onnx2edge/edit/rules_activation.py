"""Activation rewrites: HardSwish, Swish/SiLU, PReLU, LeakyRelu, GELU / Erf (seed 002)."""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph
from ..passes.decompose import decompose_hardswish
from ..semantics.attrs import attr
from .rules import Builder, default_domain, float_dtype, register_rule, single_consumer


def _c(dt: np.dtype | None, v: float) -> np.ndarray:
    return np.array(v, dtype=dt or np.float32)


@register_rule("hardswish_decompose", ops=("HardSwish",))
def hardswish_decompose(graph: Graph) -> Graph:
    """HardSwish -> x * HardSigmoid(x; alpha=1/6, beta=0.5) (the same formula, exact): the
    pass MPS and Core ML require (passes/decompose.py), offered as a rule for other runtimes.

    before:  x -> HardSwish -> y
    after:   x -> HardSigmoid(1/6, 0.5) -> Mul(x, .) -> y
    """
    return decompose_hardswish(graph)


@register_rule("hardswish_fuse", ops=("HardSigmoid", "Mul"))
def hardswish_fuse(graph: Graph) -> Graph:
    """x * HardSigmoid(x; 1/6, 0.5) -> HardSwish (opset >= 14; the inverse of
    hardswish_decompose).

    before:  x -> HardSigmoid(1/6, 0.5) -> h;  Mul(x, h) -> y
    after:   x -> HardSwish -> y
    """
    if graph.opset < 14:
        return graph
    b = Builder(graph)
    fused: set[str] = set()
    for n in graph.nodes:
        if n.op_type == "Mul" and default_domain(n) and len(n.inputs) == 2:
            for i, j in ((0, 1), (1, 0)):
                p = graph.producer(n.inputs[j])
                if (
                    p is not None
                    and p.op_type == "HardSigmoid"
                    and p.inputs[0] == n.inputs[i]
                    and math.isclose(attr(p, "alpha"), 1 / 6, rel_tol=1e-6)
                    and math.isclose(attr(p, "beta"), 0.5, rel_tol=1e-6)
                    and single_consumer(graph, p.outputs[0]) is n
                ):
                    fused.add(p.name)
                    b.add(n, "hswish", "HardSwish", [n.inputs[i]], output=n.outputs[0])
                    break
            else:
                b.keep(n)
        else:
            b.keep(n)
    b.nodes = [n for n in b.nodes if n.name not in fused]
    return b.result()


@register_rule(
    "hardswish_relu6",
    ops=("HardSwish",),
    exact=False,
    note="HardSwish -> x * Clip(x + 3, 0, 6) / 6 (PINTO's form; rounding differs by ~1 ulp)",
)
def hardswish_relu6(graph: Graph) -> Graph:
    """HardSwish -> x * Clip(x + 3, 0, 6) * (1/6), for runtimes with ReLU6 but no HardSwish.

    before:  x -> HardSwish -> y
    after:   x -> Add(3) -> Clip(0, 6) -> Mul(x) -> Mul(1/6) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "HardSwish" and default_domain(n):
            x, dt = n.inputs[0], float_dtype(graph, n.inputs[0])
            t = b.add(n, "add3", "Add", [x, b.const(n, "three", _c(dt, 3.0))])
            if graph.opset >= 11:
                lo, hi = b.const(n, "zero", _c(dt, 0.0)), b.const(n, "six", _c(dt, 6.0))
                t = b.add(n, "relu6", "Clip", [t, lo, hi])
            else:
                t = b.add(n, "relu6", "Clip", [t], min=0.0, max=6.0)
            t = b.add(n, "mulx", "Mul", [x, t])
            b.add(n, "div6", "Mul", [t, b.const(n, "sixth", _c(dt, 1 / 6))], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


@register_rule("silu_decompose", ops=("Swish",))
def silu_decompose(graph: Graph) -> Graph:
    """Swish(alpha) (opset 24) -> x * Sigmoid(alpha * x) (exact).

    before:  x -> Swish -> y
    after:   x -> [Mul(alpha)] -> Sigmoid -> Mul(x, .) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Swish" and default_domain(n):
            x, alpha = n.inputs[0], float(attr(n, "alpha"))
            t = x
            if alpha != 1.0:
                t = b.add(
                    n, "scale", "Mul", [x, b.const(n, "alpha", _c(float_dtype(graph, x), alpha))]
                )
            s = b.add(n, "sigmoid", "Sigmoid", [t])
            b.add(n, "mul", "Mul", [x, s], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


def _silu_matches(graph: Graph) -> dict[str, tuple[str, str]]:
    """Mul node name -> (x, Sigmoid node name) for every x * Sigmoid(x)."""
    out = {}
    for n in graph.nodes:
        if n.op_type != "Mul" or not default_domain(n) or len(n.inputs) != 2:
            continue
        for i, j in ((0, 1), (1, 0)):
            p = graph.producer(n.inputs[j])
            if (
                p is not None
                and p.op_type == "Sigmoid"
                and p.inputs[0] == n.inputs[i]
                and single_consumer(graph, p.outputs[0]) is n
            ):
                out[n.name] = (n.inputs[i], p.name)
                break
    return out


def _replace_silu(graph: Graph, op: str, **attrs: object) -> Graph:
    matches = _silu_matches(graph)
    drop = {s for _, s in matches.values()}
    b = Builder(graph)
    for n in graph.nodes:
        if n.name in matches:
            b.add(n, op.lower(), op, [matches[n.name][0]], output=n.outputs[0], **attrs)
        elif n.name not in drop:
            b.keep(n)
    return b.result()


@register_rule("silu_fuse", ops=("Sigmoid", "Mul"))
def silu_fuse(graph: Graph) -> Graph:
    """x * Sigmoid(x) -> Swish (opset >= 24 only; torch exports SiLU as the pair).

    before:  x -> Sigmoid -> s;  Mul(x, s) -> y
    after:   x -> Swish -> y
    """
    return graph if graph.opset < 24 else _replace_silu(graph, "Swish")


@register_rule(
    "silu_to_hardswish",
    ops=("Sigmoid", "Mul"),
    exact=False,
    note="x*Sigmoid(x) -> HardSwish(x): APPROXIMATE, max |difference| 0.142 (at x = -3); "
    "only on request (PINTO offers it for EdgeTPU)",
)
def silu_to_hardswish(graph: Graph) -> Graph:
    """x * Sigmoid(x) (SiLU / Swish) -> HardSwish(x), the piecewise-linear stand-in.

    before:  x -> Sigmoid -> s;  Mul(x, s) -> y
    after:   x -> HardSwish -> y          (opset >= 14; changes numerics, see note)
    """
    return graph if graph.opset < 14 else _replace_silu(graph, "HardSwish")


@register_rule("prelu_relu", ops=("PRelu",))
def prelu_relu(graph: Graph) -> Graph:
    """PRelu(x, slope) -> Relu(x) + (-slope) * Relu(-x) (exact: one term is always 0).

    before:  x -> PRelu(slope) -> y
    after:   x -> Relu -> a;  x -> Neg -> Relu -> Mul(-slope) -> b;  Add(a, b) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "PRelu" and default_domain(n):
            x, slope = n.inputs
            sv = graph.const(slope)
            if sv is not None:
                neg_slope = b.const(n, "neg_slope", -sv)
            else:
                neg_slope = b.add(n, "neg_slope", "Neg", [slope])
            pos = b.add(n, "relu", "Relu", [x])
            neg = b.add(n, "relu_neg", "Relu", [b.add(n, "neg", "Neg", [x])])
            neg = b.add(n, "scale", "Mul", [neg, neg_slope])
            b.add(n, "add", "Add", [pos, neg], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


@register_rule("leakyrelu_maxmin", ops=("LeakyRelu",))
def leakyrelu_maxmin(graph: Graph) -> Graph:
    """LeakyRelu(alpha) -> Max(x, 0) + alpha * Min(x, 0) (exact: one term is always 0).

    before:  x -> LeakyRelu -> y
    after:   x -> Max(0) -> a;  x -> Min(0) -> Mul(alpha) -> b;  Add(a, b) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        dt = float_dtype(graph, n.inputs[0]) if n.inputs else None
        if n.op_type == "LeakyRelu" and default_domain(n) and dt is not None:
            x = n.inputs[0]
            zero = b.const(n, "zero", _c(dt, 0.0))
            pos = b.add(n, "max", "Max", [x, zero])
            neg = b.add(n, "min", "Min", [x, zero])
            neg = b.add(n, "scale", "Mul", [neg, b.const(n, "alpha", _c(dt, attr(n, "alpha")))])
            b.add(n, "add", "Add", [pos, neg], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(b: Builder, n, x: str, dt: np.dtype | None, out: str) -> None:  # noqa: ANN001
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x3 = b.add(n, "x3", "Mul", [b.add(n, "x2", "Mul", [x, x]), x])
    inner = b.add(
        n, "inner", "Add", [x, b.add(n, "c3", "Mul", [x3, b.const(n, "k", _c(dt, 0.044715))])]
    )
    t = b.add(
        n,
        "tanh",
        "Tanh",
        [b.add(n, "s", "Mul", [inner, b.const(n, "sq", _c(dt, _SQRT_2_OVER_PI))])],
    )
    one_p = b.add(n, "onep", "Add", [t, b.const(n, "one", _c(dt, 1.0))])
    half_x = b.add(n, "halfx", "Mul", [x, b.const(n, "half", _c(dt, 0.5))])
    b.add(n, "gelu", "Mul", [half_x, one_p], output=out)


@register_rule("gelu_decompose", ops=("Gelu",))
def gelu_decompose(graph: Graph) -> Graph:
    """Gelu (opset 20) -> its defining formula, Erf form or tanh form as the node says (exact).

    before:  x -> Gelu(approximate=none) -> y
    after:   x -> Mul(1/sqrt 2) -> Erf -> Add(1) -> Mul(0.5 x, .) -> y
             (approximate=tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Gelu" and default_domain(n):
            x, dt = n.inputs[0], float_dtype(graph, n.inputs[0])
            if attr(n, "approximate") == "tanh":
                _gelu_tanh(b, n, x, dt, n.outputs[0])
                continue
            z = b.add(n, "scale", "Mul", [x, b.const(n, "rsqrt2", _c(dt, 1 / math.sqrt(2.0)))])
            e = b.add(n, "erf", "Erf", [z])
            one_p = b.add(n, "onep", "Add", [e, b.const(n, "one", _c(dt, 1.0))])
            half_x = b.add(n, "halfx", "Mul", [x, b.const(n, "half", _c(dt, 0.5))])
            b.add(n, "gelu", "Mul", [half_x, one_p], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


@register_rule(
    "gelu_tanh",
    ops=("Gelu",),
    exact=False,
    note="Gelu(erf) -> tanh approximation: APPROXIMATE, max |difference| 4.7e-4 (at |x| ~ 2.7)",
)
def gelu_tanh(graph: Graph) -> Graph:
    """Gelu(approximate=none) -> 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    before:  x -> Gelu -> y
    after:   x -> Mul/Add/Tanh chain -> y   (changes numerics, see note)
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Gelu" and default_domain(n) and attr(n, "approximate") == "none":
            _gelu_tanh(b, n, n.inputs[0], float_dtype(graph, n.inputs[0]), n.outputs[0])
        else:
            b.keep(n)
    return b.result()


@register_rule(
    "gelu_erf",
    ops=("Gelu",),
    exact=False,
    note="Gelu(approximate=tanh) -> Gelu(approximate=none), the exact erf form: APPROXIMATE "
    "with respect to the tanh model, max |difference| 4.7e-4",
    targets=("mps",),
)
def gelu_erf(graph: Graph) -> Graph:
    """Gelu's tanh approximation -> the erf definition (the reverse of gelu_tanh), for
    runtimes with an erf GELU only (MPS's GELU neuron is the erf form).

    before:  x -> Gelu(approximate=tanh) -> y
    after:   x -> Gelu(approximate=none) -> y   (changes numerics, see note)
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Gelu" and default_domain(n) and attr(n, "approximate") == "tanh":
            b.add(n, "gelu", "Gelu", [n.inputs[0]], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


# erf(z) ~ tanh(2/sqrt(pi) (z + 0.044715 * 2 z^3)): the GELU tanh approximation
# 0.5x(1 + erf(x/sqrt2)) ~ 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) with x = sqrt2 z.
_ERF_K = 2.0 / math.sqrt(math.pi)
_ERF_C = 0.044715 * 2.0


@register_rule(
    "erf_tanh",
    ops=("Erf",),
    exact=False,
    note="Erf(z) -> tanh(2/sqrt(pi) (z + 0.08943 z^3)): APPROXIMATE, max |diff| 3.6e-4 "
    "at |z| ~ 1.8 (GELU built on it moves by <= 4.7e-4)",
    targets=("mps",),
)
def erf_tanh(graph: Graph) -> Graph:
    """Erf -> the tanh approximation GELU's tanh form is built on (for targets without Erf).

    before:  z -> Erf -> y
    after:   z -> Mul(z, z) -> Mul(0.08943) -> Add(1) -> Mul(z) -> Mul(2/sqrt pi) -> Tanh -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Erf" and default_domain(n) and float_dtype(graph, n.inputs[0]) is not None:
            z, dt = n.inputs[0], float_dtype(graph, n.inputs[0])
            z2 = b.add(n, "z2", "Mul", [z, z])
            poly = b.add(
                n,
                "poly",
                "Add",
                [
                    b.add(n, "cz2", "Mul", [z2, b.const(n, "c", _c(dt, _ERF_C))]),
                    b.const(n, "one", _c(dt, 1.0)),
                ],
            )
            arg = b.add(
                n, "arg", "Mul", [b.add(n, "zp", "Mul", [z, poly]), b.const(n, "k", _c(dt, _ERF_K))]
            )
            b.add(n, "tanh", "Tanh", [arg], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()
