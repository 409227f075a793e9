"""The activation table (issue 10, item 2): one row per element-wise activation.

Each `ActivationDef` says, in one place:
- `params`: how its (up to two) parameters are read from a node - attributes with the schema's
  defaults (attrs.py), or Clip's constant bound inputs; None when they are not constants;
- `ref`: its ONNX meaning in numpy, NaN and Inf included as onnxruntime computes them (the
  tests compare this column with onnxruntime, then every C / MPS encoding with it);
- `c`: its C expression over a value, given a literal formatter and the libm suffix; the C
  backend's standalone op (elementwise.py), the fused epilogues (`act_expr`) and the direct
  kernels all render this one expression. In float, exp / log1p / tanh / erf / sigmoid are
  runtime/o2e_vmath.h's o2e_*f (branch-free: the loops vectorise; ulp bounds in the header),
  not libm calls (`vm`); in double, libm;
- `gemm_kind`: its number in the GEMM epilogue (`o2e_act.kind` in runtime/o2e_gemm.h, whose
  `O2E_ACT_*` enum a test checks against this column) and in the depthwise kernels; None when
  the epilogue cannot apply it (the emitter then runs a loop of `c` after the product). Relu,
  Clip, LeakyRelu, HardSigmoid, HardSwish are compare-and-select on the registers; kinds from
  GEMM_VM_FIRST on (Sigmoid, Tanh, Swish, Gelu, Mish) call o2e_vmath.h and are applied to
  each tile right after it is stored, while it is in L1;
- Swift (MPS's CPU segments): `swift_expr` renders the `c` column with Swift literals;
- `mps`: its MPSCNNNeuronType and (a, b, c) parameters, or None when MPS has no such neuron;
- `fusable`: whether `fuse_activation` moves it into the producing node.

onnxruntime's NaN / Inf behaviour (checked by tests/test_semantics_activations.py): Relu,
LeakyRelu, Clip, HardSigmoid, HardSwish, Sigmoid, Tanh keep NaN; Relu(-0.0) is -0.0; Clip with
a missing bound clamps +-Inf to the type's largest finite value; HardSwish(-Inf) is NaN
(-Inf * 0); ThresholdedRelu(NaN) is 0 (a failed comparison selects 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..ir import Graph, Node
from .attrs import attr

NeuronSpec = tuple[str, float, float, float]  # MPSCNNNeuronType case, a, b, c
Literal = Callable[[float], str]


class Activation(NamedTuple):
    """One activation instance: its ONNX op name and its two parameters (0 when unused)."""

    op: str
    alpha: float
    beta: float


@dataclass(frozen=True)
class ActivationDef:
    op: str
    params: Callable[[Node, Graph], tuple[float, float] | None]
    ref: Callable[[np.ndarray, float, float], np.ndarray]
    # c(x, alpha, beta, lit, F): the C expression (no outer parentheses) of a value `x` (an
    # expression safe to repeat); `lit` formats a literal of the computation's type, F is the
    # libm suffix ("f" for float, "" for double)
    c: Callable[[str, float, float, Literal, str], str]
    gemm_kind: int | None = None
    mps: Callable[[float, float], NeuronSpec | None] | None = None
    fusable: bool = False


# GEMM epilogue kinds: runtime/o2e_gemm.h's enum O2E_ACT_* (test_semantics_activations checks)
GEMM_NONE, GEMM_RELU, GEMM_CLIP, GEMM_LEAKY_RELU = 0, 1, 2, 3
GEMM_HARD_SIGMOID, GEMM_HARD_SWISH = 4, 5  # also compare-and-select in the registers
# ... and the o2e_vmath.h kinds, applied over a tile just stored (still in L1) rather than in
# the registers; kernels that apply only the register kinds (o2e_nchwc.h) refuse them
GEMM_SIGMOID, GEMM_TANH, GEMM_SWISH, GEMM_GELU, GEMM_MISH = 6, 7, 8, 9, 10
GEMM_VM_FIRST = GEMM_SIGMOID


def _attrs(*names: str) -> Callable[[Node, Graph], tuple[float, float]]:
    def read(node: Node, graph: Graph) -> tuple[float, float]:
        vals = [float(attr(node, n, graph.opset)) for n in names]
        return (vals + [0.0, 0.0])[0], (vals + [0.0, 0.0])[1]

    return read


def clip_params(node: Node, graph: Graph) -> tuple[float, float] | None:
    """(min, max) of a Clip, +-Inf where absent; None when a bound is computed at run time."""
    if graph.opset < 11:  # Clip-6: attributes, defaults numeric_limits<float> in the schema
        return float(attr(node, "min", graph.opset)), float(attr(node, "max", graph.opset))
    out = [-np.inf, np.inf]
    for idx in (1, 2):
        if len(node.inputs) > idx and node.inputs[idx]:
            v = graph.const(node.inputs[idx])
            if v is None:
                return None
            out[idx - 1] = float(np.asarray(v).reshape(-1)[0])
    return float(out[0]), float(out[1])


def clip_bounds(lo: float, hi: float, dtype: type = np.float32) -> tuple[float, float]:
    """A Clip's bounds in `dtype`: a missing bound (infinite here) is the type's largest finite
    value, as onnxruntime (and the spec's numeric_limits default) clamps +-Inf to it."""
    big = float(np.finfo(dtype).max)
    return (-big if lo == -np.inf else lo), (big if hi == np.inf else hi)


def _none(node: Node, graph: Graph) -> tuple[float, float]:
    return 0.0, 0.0


def _np(f: Callable[..., np.ndarray]) -> Callable[[np.ndarray, float, float], np.ndarray]:
    def ref(x: np.ndarray, a: float, b: float) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(f(x, x.dtype.type(a), x.dtype.type(b)), x.dtype)

    return ref


def _clip_ref(x: np.ndarray, a: float, b: float) -> np.ndarray:
    lo, hi = clip_bounds(a, b, x.dtype.type)
    with np.errstate(all="ignore"):
        return np.where(x < lo, x.dtype.type(lo), np.where(x > hi, x.dtype.type(hi), x))


def _clip_c(x: str, a: float, b: float, lit: Literal, F: str) -> str:
    lo = "" if np.isinf(a) else f"{x} < {lit(a)} ? {lit(a)} : "
    hi = "" if np.isinf(b) else f"{x} > {lit(b)} ? {lit(b)} : "
    return f"{lo}{hi}{x}"


def _clip_mps(lo: float, hi: float) -> NeuronSpec | None:
    if lo == 0 and np.isfinite(hi):
        return ("reLUN", 0, hi, 0)  # min(max(x, 0), b)
    if lo == 0 and not np.isfinite(hi):
        return ("reLU", 0, 0, 0)
    return None


def vm(name: str, F: str) -> str:
    """The C function `name` (exp, log, log1p, tanh, erf, sigmoid) in the computation's type:
    o2e_vmath.h's vectorisable o2e_<name>f for float, libm's for double (no sigmoid there:
    callers spell it out)."""
    return f"o2e_{name}f" if F == "f" else name


def _hard_sigmoid_c(x: str, a: float, b: float, lit: Literal, F: str) -> str:
    t = f"({lit(a)} * {x} + {lit(b)})"
    return f"{t} < 0 ? 0 : ({t} > 1 ? 1 : {t})"


def _softplus_c(x: str, F: str) -> str:
    # max(x, 0) + log1p(exp(-|x|)): the two branches' formulas in one expression, so the loop
    # vectorises (a select between two computed calls stays scalar under gcc); NaN kept
    lp, ex = vm("log1p", F), vm("exp", F)
    return f"(({x} > 0 ? {x} : 0) + {lp}({ex}(-fabs{F}({x}))))"


def _mish_c(x: str, a: float, b: float, lit: Literal, F: str) -> str:
    # tanh(softplus(x)) = n / (n + 2) with n = e^x (e^x + 2): one exp and one division instead
    # of exp, log1p and tanh (5x faster vectorised); e^x taken at min(x, 20), where the ratio
    # is 1 in float, so +Inf gives +Inf; -Inf gives -Inf * 0 = NaN, as onnxruntime
    e = f"{vm('exp', F)}({x} > 20 ? 20 : {x})"
    return f"{x} * ({e} * ({e} + 2) / ({e} * ({e} + 2) + 2))"


def _gelu_params(node: Node, graph: Graph) -> tuple[float, float]:
    return (1.0 if attr(node, "approximate", graph.opset) == "tanh" else 0.0), 0.0


def _gelu_c(x: str, a: float, b: float, lit: Literal, F: str) -> str:
    if a:
        k, c = lit(float(np.sqrt(2 / np.pi))), lit(0.044715)
        return f"0.5{F} * {x} * (1 + {vm('tanh', F)}({k} * ({x} + {c} * {x} * {x} * {x})))"
    return f"0.5{F} * {x} * (1 + {vm('erf', F)}({x} * {lit(float(1 / np.sqrt(2)))}))"


def _gelu_ref(x: np.ndarray, a: float, b: float) -> np.ndarray:
    from math import erf  # noqa: PLC0415

    with np.errstate(all="ignore"):
        if a:
            k = np.sqrt(2 / np.pi)
            return (0.5 * x * (1 + np.tanh(k * (x + 0.044715 * x**3)))).astype(x.dtype)
        return (0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))).astype(x.dtype)


def _softplus_ref(x: np.ndarray, a: object, b: object) -> np.ndarray:
    return np.where(x > 0, x + np.log1p(np.exp(-x)), np.log1p(np.exp(x)))


_DEFS = [
    ActivationDef(
        "Relu",
        _none,
        _np(lambda x, a, b: np.where(x < 0, x.dtype.type(0), x)),  # NaN and -0.0 kept
        lambda x, a, b, lit, F: f"{x} < 0 ? 0 : {x}",
        GEMM_RELU,
        lambda a, b: ("reLU", 0, 0, 0),
        True,
    ),
    ActivationDef(
        "LeakyRelu",
        _attrs("alpha"),
        _np(lambda x, a, b: np.where(x >= 0, x, x * a)),
        lambda x, a, b, lit, F: f"{x} >= 0 ? {x} : {x} * {lit(a)}",
        GEMM_LEAKY_RELU,
        lambda a, b: ("reLU", a, 0, 0),
        True,
    ),
    ActivationDef("Clip", clip_params, _clip_ref, _clip_c, GEMM_CLIP, _clip_mps, True),
    ActivationDef(
        "Sigmoid",
        _none,
        _np(lambda x, a, b: 1 / (1 + np.exp(-x))),
        lambda x, a, b, lit, F: f"{vm('sigmoid', F)}({x})" if F else f"1 / (1 + exp(-{x}))",
        GEMM_SIGMOID,
        lambda a, b: ("sigmoid", 0, 0, 0),
        True,
    ),
    ActivationDef(
        "Tanh",
        _none,
        _np(lambda x, a, b: np.tanh(x)),
        lambda x, a, b, lit, F: f"{vm('tanh', F)}({x})",
        GEMM_TANH,
        lambda a, b: ("tanH", 1, 1, 0),
        True,
    ),
    ActivationDef(
        "HardSigmoid",
        _attrs("alpha", "beta"),
        _np(lambda x, a, b: np.where(a * x + b < 0, 0, np.where(a * x + b > 1, 1, a * x + b))),
        _hard_sigmoid_c,
        GEMM_HARD_SIGMOID,
        lambda a, b: ("hardSigmoid", a, b, 0),
        True,
    ),
    ActivationDef(
        "HardSwish",
        _none,
        _np(lambda x, a, b: x * np.fmax(0, np.fmin(1, x / 6 + x.dtype.type(0.5)))),
        # selects, not fmaxf / fminf (library calls in a loop gcc leaves scalar); the same
        # values: a NaN t passes both tests, -Inf * 0 is NaN as before
        lambda x, a, b, lit, F: (
            f"{x} * ({x} / 6 + 0.5{F} > 1 ? 1 : ({x} / 6 + 0.5{F} < 0 ? 0 : {x} / 6 + 0.5{F}))"
        ),
        GEMM_HARD_SWISH,
        None,  # no neuron: MPS requires decompose_hardswish (passes/decompose.py)
        True,
    ),
    ActivationDef(
        "Elu",
        _attrs("alpha"),
        _np(lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1))),
        lambda x, a, b, lit, F: f"{x} >= 0 ? {x} : {lit(a)} * ({vm('exp', F)}({x}) - 1)",
        None,
        lambda a, b: ("ELU", a, 0, 0),
    ),
    ActivationDef(
        "Selu",
        _attrs("alpha", "gamma"),
        _np(lambda x, a, g: g * np.where(x > 0, x, a * (np.exp(x) - 1))),
        lambda x, a, g, lit, F: (
            f"{lit(g)} * ({x} > 0 ? {x} : {lit(a)} * ({vm('exp', F)}({x}) - 1))"
        ),
    ),
    ActivationDef(
        "Celu",
        _attrs("alpha"),
        # max(0, x) + min(0, ...) in a form that keeps NaN, as onnxruntime does
        _np(lambda x, a, b: np.where(x > 0, x, a * (np.exp(x / a) - 1))),
        lambda x, a, b, lit, F: f"{x} > 0 ? {x} : {lit(a)} * ({vm('exp', F)}({x} / {lit(a)}) - 1)",
    ),
    ActivationDef(
        "ThresholdedRelu",
        _attrs("alpha"),
        _np(lambda x, a, b: np.where(x > a, x, 0)),
        lambda x, a, b, lit, F: f"{x} > {lit(a)} ? {x} : 0",
    ),
    ActivationDef(
        "Softplus",
        _none,
        _np(_softplus_ref),
        lambda x, a, b, lit, F: _softplus_c(x, F),
        None,
        lambda a, b: ("softPlus", 1, 1, 0),
    ),
    ActivationDef(
        "Softsign",
        _none,
        _np(lambda x, a, b: x / (1 + np.abs(x))),
        lambda x, a, b, lit, F: f"{x} / (1 + fabs{F}({x}))",
        None,
        lambda a, b: ("softSign", 0, 0, 0),
    ),
    ActivationDef(
        "Mish",
        _none,
        _np(lambda x, a, b: x * np.tanh(_softplus_ref(x, a, b))),
        _mish_c,
        GEMM_MISH,
        None,
        True,
    ),
    ActivationDef(
        # x * sigmoid(alpha * x), opset 24; also SiLU's Mul(t, Sigmoid(t)) fused into t's
        # producer (passes/fuse_activation.py)
        "Swish",
        _attrs("alpha"),
        _np(lambda x, a, b: x / (1 + np.exp(-a * x))),
        lambda x, a, b, lit, F: (
            f"{x} * {vm('sigmoid', F)}({lit(a)} * {x})"
            if F
            else f"{x} / (1 + exp(-{lit(a)} * {x}))"
        ),
        GEMM_SWISH,
        None,
        True,
    ),
    ActivationDef(
        "Gelu",
        _gelu_params,
        _gelu_ref,
        _gelu_c,
        GEMM_GELU,  # alpha 1: the tanh form (o2e_gemm.h reads act.a the same way)
        lambda a, b: None if a else ("geLU", 0, 0, 0),  # MPSCNNNeuronGeLU is the erf form
        True,
    ),
]

ACTIVATIONS: dict[str, ActivationDef] = {d.op: d for d in _DEFS}
FUSABLE: tuple[str, ...] = tuple(d.op for d in _DEFS if d.fusable)


def activation_def(op: str) -> ActivationDef:
    return ACTIVATIONS[op]


def as_activation(graph: Graph, node: Node) -> Activation | None:
    """`node` as an activation of the table (parameters resolved), or None: not one, another
    domain, several outputs, or parameters computed at run time."""
    d = ACTIVATIONS.get(node.op_type)
    if d is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    p = d.params(node, graph)
    return None if p is None else Activation(node.op_type, p[0], p[1])


def c_expr(act: Activation, x: str, lit: Literal, ctype: str = "float") -> str:
    """The table's C expression of `act` applied to `x`, parenthesised; a Clip's missing bound
    is the largest finite value of `ctype` (float or double)."""
    d = ACTIVATIONS[act.op]
    a, b = act.alpha, act.beta
    if act.op == "Clip":
        a, b = clip_bounds(a, b, np.float64 if ctype == "double" else np.float32)
    return f"({d.c(x, a, b, lit, '' if ctype == 'double' else 'f')})"


def swift_literal(v: float) -> str:
    """A Float literal in Swift (NaN and infinities by name)."""
    v = float(np.float32(v))
    if np.isnan(v):
        return "Float.nan"
    if np.isinf(v):
        return "Float.infinity" if v > 0 else "-Float.infinity"
    return repr(v)


def swift_expr(act: Activation, x: str) -> str:
    """The table's expression of `act` in Swift, for MPS's CPU segments: the C column with
    Swift literals (Swift has the same libm: expf, tanhf, fmaxf, erff...; its ternary and
    comparisons behave as C's on NaN), a Clip's missing bound the largest finite Float as in C,
    and the float suffix of the column's own literals (0.5f) dropped."""
    d = ACTIVATIONS[act.op]
    a, b = act.alpha, act.beta
    if act.op == "Clip":
        a, b = clip_bounds(a, b, np.float32)
    c = _libm_for_swift(d.c(x, a, b, swift_literal, "f"))
    return "(" + re.sub(r"(\d)f\b", r"\1", c) + ")"


def _libm_for_swift(expr: str) -> str:
    """The C column calls o2e_vmath.h (C only); Swift gets libm's functions, and sigmoid
    spelt out (libm has none): o2e_sigmoidf(A) -> (1 / (1 + expf(-(A))))."""
    expr = re.sub(r"\bo2e_(exp|log|log1p|tanh|erf)f\(", r"\1f(", expr)
    key = "o2e_sigmoidf("
    while (i := expr.find(key)) >= 0:
        j, depth = i + len(key), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[j], 0)
            j += 1
        arg = expr[i + len(key) : j - 1]
        expr = f"{expr[:i]}(1 / (1 + expf(-({arg})))){expr[j:]}"
    return expr


def reference(act: Activation, x: np.ndarray) -> np.ndarray:
    """numpy: what onnxruntime computes for this activation (NaN / Inf included)."""
    return ACTIVATIONS[act.op].ref(x, act.alpha, act.beta)


def mps_neuron(act: Activation) -> NeuronSpec | None:
    d = ACTIVATIONS[act.op]
    return None if d.mps is None else d.mps(act.alpha, act.beta)
