"""Arithmetic rewrites: Abs, integer Pow, Sub, Min/Max, explicit broadcasting (seed 002;
the ANE notes in REFERENCE.md: Subtract -> Add(Neg), *Broadcastable -> plain Add/Mul)."""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from .rules import Builder, default_domain, float_dtype, register_rule, scalar


@register_rule("abs_relu", ops=("Abs",))
def abs_relu(graph: Graph) -> Graph:
    """Abs -> Relu(x) + Relu(-x) (exact: one term is 0; sqrt(x*x), the other common form,
    overflows above 1.8e19 and flushes tiny values).

    before:  x -> Abs -> y
    after:   x -> Relu -> a;  x -> Neg -> Relu -> b;  Add(a, b) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Abs" and default_domain(n) and float_dtype(graph, n.inputs[0]) is not None:
            x = n.inputs[0]
            pos = b.add(n, "relu", "Relu", [x])
            neg = b.add(n, "relu_neg", "Relu", [b.add(n, "neg", "Neg", [x])])
            b.add(n, "add", "Add", [pos, neg], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


MAX_POW = 16


@register_rule(
    "pow_mul",
    ops=("Pow",),
    note=f"Pow(x, n) with constant integer 1 <= n <= {MAX_POW} -> Mul chain (square and "
    "multiply); Pow(x, 0.5) -> Sqrt. Rounding may differ from pow() by a few ulp",
)
def pow_mul(graph: Graph) -> Graph:
    """Pow by a constant small integer -> repeated Mul; Pow(x, 0.5) -> Sqrt.

    before:  x -> Pow(3) -> y
    after:   x -> Mul(x, x) -> Mul(., x) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        e = scalar(graph, n.inputs[1]) if n.op_type == "Pow" and len(n.inputs) == 2 else None
        dt = float_dtype(graph, n.inputs[0]) if e is not None else None
        if e is None or dt is None or not default_domain(n):
            b.keep(n)
            continue
        x = n.inputs[0]
        tx, ev = graph.type_of(x), graph.const(n.inputs[1])
        if tx is None or tx.shape is None or ev is None or ev.ndim > len(tx.shape):
            b.keep(n)  # the exponent's shape would broadcast the result to a higher rank
            continue
        if e == 0.5:
            b.add(n, "sqrt", "Sqrt", [x], output=n.outputs[0])
            continue
        if not (e == int(e) and 1 <= e <= MAX_POW):
            b.keep(n)
            continue
        k = int(e)
        if k == 1:
            b.add(n, "identity", "Identity", [x], output=n.outputs[0])
            continue
        # square-and-multiply: bits of k from the top
        bits = bin(k)[3:]
        acc = x
        for i, bit in enumerate(bits):
            last = i == len(bits) - 1
            acc = b.add(
                n, f"sq{i}", "Mul", [acc, acc], output=n.outputs[0] if last and bit == "0" else None
            )
            if bit == "1":
                acc = b.add(n, f"mul{i}", "Mul", [acc, x], output=n.outputs[0] if last else None)
    return b.result()


@register_rule("sub_to_add", ops=("Sub",), targets=("coreml-ane",))
def sub_to_add(graph: Graph) -> Graph:
    """Sub(a, b) -> Add(a, Neg(b)); a constant b is negated at rewrite time (exact).

    before:  a, b -> Sub -> y
    after:   b -> Neg -> nb;  Add(a, nb) -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        if n.op_type == "Sub" and default_domain(n) and float_dtype(graph, n.inputs[1]) is not None:
            a, c = n.inputs
            cv = graph.const(c)
            neg = b.const(n, "neg", -cv) if cv is not None else b.add(n, "neg", "Neg", [c])
            b.add(n, "add", "Add", [a, neg], output=n.outputs[0])
        else:
            b.keep(n)
    return b.result()


@register_rule(
    "minmax_relu",
    ops=("Max", "Min"),
    exact=False,
    note="Max(x, c) -> Relu(c - x) + x, Min(x, c) -> x - Relu(x - c): exact when c = 0, "
    "else the extra sub / add rounds (<= 1 ulp of max(|x|, |c|))",
    targets=("mps",),
)
def minmax_relu(graph: Graph) -> Graph:
    """Two-input Max / Min -> Relu forms, for targets with Relu but no element-wise max/min.

    before:  a, b -> Max -> y           a, b -> Min -> y
    after:   Relu(b - a) + a -> y       a - Relu(a - b) -> y      (b = 0: Relu(a), -Relu(-a))
    """
    b = Builder(graph)
    for n in graph.nodes:
        if (
            n.op_type not in ("Max", "Min")
            or not default_domain(n)
            or len(n.inputs) != 2
            or float_dtype(graph, n.inputs[0]) is None
        ):
            b.keep(n)
            continue
        x, c = n.inputs
        if scalar(graph, x) is not None and scalar(graph, c) is None:
            x, c = c, x  # Max / Min commute; keep the constant second
        zero = scalar(graph, c) == 0.0
        out = n.outputs[0]
        if n.op_type == "Max":
            if zero:
                b.add(n, "relu", "Relu", [x], output=out)
            else:
                r = b.add(n, "relu", "Relu", [b.add(n, "sub", "Sub", [c, x])])
                b.add(n, "add", "Add", [r, x], output=out)
        elif zero:
            r = b.add(n, "relu", "Relu", [b.add(n, "neg", "Neg", [x])])
            b.add(n, "negr", "Neg", [r], output=out)
        else:
            r = b.add(n, "relu", "Relu", [b.add(n, "sub", "Sub", [x, c])])
            b.add(n, "subr", "Sub", [x, r], output=out)
    return b.result()


_BROADCAST_OPS = ("Add", "Mul", "Sub", "Div")


@register_rule("broadcast_explicit", ops=_BROADCAST_OPS, targets=("coreml-ane",))
def broadcast_explicit(graph: Graph) -> Graph:
    """Add / Mul / Sub / Div whose operands differ in shape -> both operands full size
    (constants materialised, activations Expanded), so runtimes without broadcasting layers
    (the ANE's AddBroadcastable) see a plain element-wise op. Exact.

    before:  x[1,C,H,W], b[C,1,1] -> Add -> y
    after:   x, b'[1,C,H,W] (constant) -> Add -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        t = graph.type_of(n.outputs[0]) if n.op_type in _BROADCAST_OPS else None
        if t is None or not t.is_static or not default_domain(n):
            b.keep(n)
            continue
        shape = t.static_shape
        ins = []
        for k, i in enumerate(n.inputs):
            ti = graph.type_of(i)
            if ti is None or not ti.is_static:
                ins = []
                break
            if ti.static_shape == shape:
                ins.append(i)
            elif (cv := graph.const(i)) is not None:
                ins.append(b.const(n, f"full{k}", np.ascontiguousarray(np.broadcast_to(cv, shape))))
            else:
                shp = b.const(n, f"shape{k}", np.array(shape, np.int64))
                ins.append(b.add(n, f"expand{k}", "Expand", [i, shp]))
        if ins and tuple(ins) != n.inputs:
            b.keep(n.replace(inputs=tuple(ins), name=b.fresh(f"{n.name}/full")))
        else:
            b.keep(n)
    # A renamed node counts as a change (the original name must disappear, see rules.py).
    b.changed = b.changed or any(x is not y for x, y in zip(b.nodes, graph.nodes, strict=False))
    return b.result()
