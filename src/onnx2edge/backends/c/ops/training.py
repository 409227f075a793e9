"""The optimizer update rules of ai.onnx.preview.training: Adagrad, Momentum and Adam.

One step of each, as the ONNX spec (and its reference) writes it, for n tensors at once: inputs
R (learning rate), T (update count), then X_1..n, G_1..n and the state tensors; outputs the new
X_1..n and the new states. Element-wise, computed in double and stored in the tensors' type.
"""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext
from . import register_op

DOMAIN = "ai.onnx.preview.training"
_STATES = {"Adagrad": 1, "Momentum": 1, "Adam": 2}  # state tensors a parameter besides G


def _check(node: Node, graph: Graph) -> str | None:
    groups = 2 + _STATES[node.op_type]  # X, G, states
    n, rest = divmod(len(node.inputs) - 2, groups)
    if rest or n < 1:
        return f"{node.op_type} takes R, T, then {groups} groups of one tensor per parameter"
    for i in range(2, len(node.inputs)):
        t = graph.type_of(node.inputs[i])
        if t is None or t.dtype.name not in ("float32", "float64"):
            return f"{node.op_type} updates float32 or float64 tensors"
    shapes = {graph.shape_of(node.inputs[2 + k * n]) for k in range(groups)}
    if len(shapes) != 1:
        return f"{node.op_type}: a parameter, its gradient and its states must have one shape"
    return None


def _f(ctx: NodeContext, name: str, default: float) -> str:
    return repr(float(ctx.attr(name, default)))


def _loop(ctx: NodeContext, n: int, k: int, body: str) -> str:
    """The update of parameter k (of n): `body` reads r, t, x, g, s0, s1 (doubles) and assigns
    the outputs o0, o1, o2 (new X, then new states)."""
    groups = 2 + _STATES[ctx.node.op_type]
    ins = [ctx.x(2 + j * n + k) for j in range(groups)]
    names = ["x", "g", "s0", "s1"][:groups]
    loads = " ".join(
        f"const double {v} = (double){t.sym}[i];" for v, t in zip(names, ins, strict=True)
    )
    decl = " ".join(f"double o{j} = 0;" for j in range(groups - 1))
    stores = " ".join(
        f"{ctx.y(j * n + k).sym}[i] = ({ctx.y(j * n + k).ctype})o{j};"
        for j in range(groups - 1)
        if ctx.has_output(j * n + k)
    )
    return (
        f"for (size_t i = 0; i < {ins[0].size}; ++i) {{\n"
        f"  {loads} {decl}\n  {body}\n  {stores}\n  (void)o0;\n}}"
    )


def _header(ctx: NodeContext) -> str:
    r, t = ctx.x(0), ctx.x(1)
    return f"const double r = (double){r.sym}[0]; const double t = (double){t.sym}[0]; (void)t;"


@register_op(f"{DOMAIN}:Adagrad", check=_check)
def adagrad(ctx: NodeContext) -> str:
    n = (ctx.n_inputs - 2) // 3
    decay, eps, norm = (
        _f(ctx, "decay_factor", 0.0),
        _f(ctx, "epsilon", 1e-6),
        _f(ctx, "norm_coefficient", 0.0),
    )
    body = (
        f"const double rr = r / (1 + t * {decay}); const double gr = {norm} * x + g;\n"
        f"  o1 = s0 + gr * gr; o0 = x - rr * gr / (sqrt(o1) + {eps});"
    )
    return "\n".join([_header(ctx), *(_loop(ctx, n, k, body) for k in range(n))])


@register_op(f"{DOMAIN}:Momentum", check=_check)
def momentum(ctx: NodeContext) -> str:
    n = (ctx.n_inputs - 2) // 3
    alpha, beta, norm = (
        _f(ctx, "alpha", 0.0),
        _f(ctx, "beta", 0.0),
        _f(ctx, "norm_coefficient", 0.0),
    )
    nesterov = str(ctx.attr("mode")) == "nesterov"  # required by the schema
    step = f"(gr + {alpha} * o1)" if nesterov else "o1"
    body = (
        f"const double gr = {norm} * x + g; const double b = t > 0 ? {beta} : 1.0;\n"
        f"  o1 = {alpha} * s0 + b * gr; o0 = x - r * {step};"
    )
    return "\n".join([_header(ctx), *(_loop(ctx, n, k, body) for k in range(n))])


@register_op(f"{DOMAIN}:Adam", check=_check)
def adam(ctx: NodeContext) -> str:
    n = (ctx.n_inputs - 2) // 4
    alpha, beta = _f(ctx, "alpha", 0.9), _f(ctx, "beta", 0.999)
    eps, norm = _f(ctx, "epsilon", 1e-6), _f(ctx, "norm_coefficient", 0.0)
    post = _f(ctx, "norm_coefficient_post", 0.0)
    head = (
        f"{_header(ctx)}\n/* bias correction of the momentums after the first step */\n"
        f"const double ra = t > 0 ? r * sqrt(1 - pow({beta}, t)) / (1 - pow({alpha}, t)) : r;"
    )
    body = (
        f"const double gr = {norm} * x + g;\n"
        f"  o1 = {alpha} * s0 + (1 - {alpha}) * gr; o2 = {beta} * s1 + (1 - {beta}) * gr * gr;\n"
        f"  o0 = (1 - {post}) * (x - ra * (o1 / (sqrt(o2) + {eps})));"
    )
    return "\n".join([head, *(_loop(ctx, n, k, body) for k in range(n))])
