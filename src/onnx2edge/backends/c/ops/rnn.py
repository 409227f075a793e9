"""Recurrent layers: RNN, GRU and LSTM (ONNX opsets 7/14/22).

The ONNX spec (onnx.defs `LSTM`, `GRU`, `RNN`) defines one time step as gate pre-activations
`Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb`, split per gate, then the cell update. Weights are read at run time
(they are graph inputs in the ONNX node tests and in some exported models), so the generated code
works for constant and runtime weights alike.

Each direction becomes one block walking the batch, and for each batch row the sequence:

    for b in batch:                      state h (and c) <- initial_h / initial_c or 0
      for s in 0 .. len(b)-1:            len(b) = sequence_lens[b] (or seq_length)
        t = s (forward) or len(b)-1-s (reverse)
        gates = W·x[t] + R·h + Wb + Rb   (o2e_rnn_gemv: one dot product per gate row)
        cell update -> h (and c); Y[t] = h
      Y[t] = 0 for t >= len(b);          Y_h = h, Y_c = c

What the spec leaves to the runtime follows onnxruntime (the reference `verify` compares to):
`activation_alpha` / `activation_beta` are consumed in order by the activations that take them
(onnxruntime's rnn_helpers), `clip` bounds every gate's input before its activation, and steps
past `sequence_lens[b]` write zeros to Y and leave Y_h / Y_c at the last valid step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op

# Gate count per cell and its default activations (ONNX spec: f, g, h for LSTM; f, g for GRU).
_CELLS = {
    "RNN": (1, ("Tanh",)),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
}

# Activation name -> (uses alpha, default alpha, uses beta, default beta); None = required.
# Names and defaults as in onnxruntime's rnn_helpers (NameToArgUsageMap / NameToArgDefaultsMap).
_ACT_ARGS: dict[str, tuple[bool, float | None, bool, float | None]] = {
    "relu": (False, None, False, None),
    "tanh": (False, None, False, None),
    "sigmoid": (False, None, False, None),
    "softsign": (False, None, False, None),
    "softplus": (False, None, False, None),
    "affine": (True, None, True, None),
    "leakyrelu": (True, 0.01, False, None),
    "thresholdedrelu": (True, 1.0, False, None),
    "scaledtanh": (True, None, True, None),
    "hardsigmoid": (True, 0.2, True, 0.5),
    "elu": (True, 1.0, False, None),
}


@dataclass(frozen=True)
class _Act:
    name: str  # lower case
    alpha: float = 0.0
    beta: float = 0.0


def _activations(node: Node) -> list[_Act]:
    """The node's activations, one list per direction concatenated, alpha/beta resolved."""
    n_act = _CELLS[node.op_type][1]
    ndir = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    names = [str(a) for a in node.attr("activations", list(n_act) * ndir)]
    if ndir == 2 and len(names) == len(n_act):
        names = names * 2
    if len(names) != len(n_act) * ndir:
        raise ValueError(f"{len(names)} activations given, {len(n_act) * ndir} expected")
    alphas = list(node.attr("activation_alpha", []))
    betas = list(node.attr("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        if key not in _ACT_ARGS:
            raise ValueError(f"activation {name!r} is not one the ONNX spec lists")
        uses_a, def_a, uses_b, def_b = _ACT_ARGS[key]
        a = b = 0.0
        if uses_a:
            if alphas:
                a = float(alphas.pop(0))
            elif def_a is None:
                raise ValueError(f"activation {name} needs activation_alpha")
            else:
                a = def_a
        if uses_b:
            if betas:
                b = float(betas.pop(0))
            elif def_b is None:
                raise ValueError(f"activation {name} needs activation_beta")
            else:
                b = def_b
        out.append(_Act(key, a, b))
    return out


def _act_expr(act: _Act, v: str, ctype: str) -> str:
    """C expression of one RNN activation function (ONNX operator of the same name).

    Not the activation table (semantics/activations.py) on purpose: these are the RNN
    attribute's functions (Affine and ScaledTanh exist nowhere else), and onnxruntime's cells
    compute them with their own helpers, e.g. Relu as max(0, v), which turns NaN into 0 where
    the standalone Relu keeps it (checked against onnxruntime 1.31)."""
    f = "" if ctype == "double" else "f"
    lit = lambda x: c_literal(x, np.float64 if ctype == "double" else np.float32)  # noqa: E731
    a, b = lit(act.alpha), lit(act.beta)
    return {
        "relu": f"({v} > 0 ? {v} : 0)",
        "tanh": f"tanh{f}({v})",
        "sigmoid": f"(1 / (1 + exp{f}(-{v})))",
        "softsign": f"({v} / (1 + fabs{f}({v})))",
        "softplus": f"log{f}(1 + exp{f}({v}))",
        "affine": f"({a} * {v} + {b})",
        "leakyrelu": f"({v} < 0 ? {a} * {v} : {v})",
        "thresholdedrelu": f"({v} > {a} ? {v} : 0)",
        "scaledtanh": f"({a} * tanh{f}({b} * {v}))",
        "hardsigmoid": f"fmax{f}(0, fmin{f}(1, {a} * {v} + {b}))",
        "elu": f"({v} >= 0 ? {v} : {a} * (exp{f}({v}) - 1))",
    }[act.name]


def _rnn_check(node: Node, graph: Graph) -> str | None:
    x = graph.type_of(node.inputs[0])
    if x is None or x.dtype not in (np.float32, np.float64):
        return f"{node.op_type} on {x.dtype.name if x else 'unknown'} is not supported (float32/float64 only)"
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        return f"unknown direction {direction!r}"
    if int(node.attr("layout", 0)) not in (0, 1):
        return f"layout {node.attr('layout')} is not 0 or 1"
    w = graph.type_of(node.inputs[1])
    if w is None or w.shape is None or len(w.shape) != 3:
        return "W must be a 3-D tensor"
    if len(node.inputs) > 4 and node.inputs[4]:
        s = graph.type_of(node.inputs[4])
        if s is not None and s.dtype != np.int32:
            return "sequence_lens must be int32"
    try:
        _activations(node)
    except ValueError as e:
        return str(e)
    return None


GEMV = r"""
/* RNN gate pre-activations: out[r] = (acc ? out[r] : b1[r] + b2[r]) + M[r][:]·v.
   M is row-major [rows][cols] as ONNX lays out W and R (one row per gate unit). */
static void o2e_rnn_gemv_{T}(int rows, int cols, const {T} *M, const {T} *v, const {T} *b1, const {T} *b2,
                             int acc, {T} *out)
{
  for (int r = 0; r < rows; ++r) {
    const {T} *m = M + (size_t)r * cols;
    {T} s = acc ? out[r] : ({T})0;
    if (!acc && b1) s += b1[r] + b2[r];
    for (int k = 0; k < cols; ++k) s += m[k] * v[k];
    out[r] = s;
  }
}
"""


@register_op("RNN", "GRU", "LSTM", check=_rnn_check)
def recurrent(ctx: NodeContext) -> str:
    op = ctx.node.op_type
    x, w, r = ctx.x(0), ctx.x(1), ctx.x(2)
    T_ = x.ctype
    # kept: RNN before opset 14 has no layout default; this is its meaning there
    layout = int(ctx.attr("layout", 0))
    direction = ctx.attr("direction", "forward")
    ndir, GH, n_in = w.shape
    H = r.shape[2]
    G = _CELLS[op][0]
    S, B = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    acts = _activations(ctx.node)
    n_act = len(_CELLS[op][1])
    clip = ctx.attr("clip")
    gemv = ctx.helper(f"o2e_rnn_gemv_{T_}", GEMV.replace("{T}", T_))

    # Strides: X [S][B][I] or [B][S][I]; Y [S][D][B][H] or [B][S][D][H];
    # initial_h / Y_h (and c) [D][B][H] or [B][D][H].
    x_t, x_b = (B * n_in, n_in) if layout == 0 else (n_in, S * n_in)
    y_t, y_b, y_d = (ndir * B * H, H, B * H) if layout == 0 else (ndir * H, S * ndir * H, H)
    s_b, s_d = (H, B * H) if layout == 0 else (ndir * H, H)

    def opt(i: int) -> Tensor | None:
        return ctx.x(i) if ctx.has_input(i) else None

    bias, seq = opt(3), opt(4)
    h0, c0, peep = opt(5), (opt(6) if op == "LSTM" else None), (opt(7) if op == "LSTM" else None)
    outs = [ctx.y(i) if ctx.has_output(i) else None for i in range(3 if op == "LSTM" else 2)]
    y, yh = outs[0], outs[1]
    yc = outs[2] if op == "LSTM" else None

    work = ctx.scratch((G * H + 3 * H) * np.dtype(x.dtype).itemsize, T_)
    lines = [
        f"{T_} *gates = {work}, *h = {work} + {G * H}, *c = {work} + {G * H + H}, *tmp = {work} + {G * H + 2 * H};",
        "(void)c; (void)tmp;",
    ]
    for d in range(ndir):
        reverse = direction == "reverse" or d == 1
        act = acts[d * n_act : (d + 1) * n_act]
        wd, rd = f"{w.sym} + {d * GH * n_in}", f"{r.sym} + {d * GH * H}"
        wb = f"{bias.sym} + {d * 2 * GH}" if bias else None
        rb = f"{bias.sym} + {d * 2 * GH + GH}" if bias else None
        length = (
            f"{seq.sym}[b] < 0 ? 0 : ({seq.sym}[b] > {S} ? {S} : {seq.sym}[b])" if seq else str(S)
        )
        lines.append(f"/* {'reverse' if reverse else 'forward'} direction */")
        lines.append(f"for (int b = 0; b < {B}; ++b) {{")
        lines.append(f"  const int len = {length};")
        init = [(h0, "h")] + ([(c0, "c")] if op == "LSTM" else [])
        for t0, name in init:
            src = f"{t0.sym}[(size_t)b * {s_b} + {d * s_d} + j]" if t0 else "0"
            lines.append(f"  for (int j = 0; j < {H}; ++j) {name}[j] = {src};")
        lines.append("  for (int s = 0; s < len; ++s) {")
        lines.append(f"    const int t = {'len - 1 - s' if reverse else 's'};")
        lines.append(f"    const {T_} *x = {x.sym} + (size_t)t * {x_t} + (size_t)b * {x_b};")
        cell = {"RNN": _rnn_cell, "GRU": _gru_cell, "LSTM": _lstm_cell}[op]
        p = f"({peep.sym} + {d * 3 * H})" if peep else None
        body = cell(_Step(ctx, act, H, n_in, gemv, wd, rd, wb, rb, p, clip, T_))
        lines.extend("    " + ln for ln in body)
        if y is not None:
            lines.append(
                f"    {T_} *yt = {y.sym} + (size_t)t * {y_t} + (size_t)b * {y_b} + {d * y_d};"
            )
            lines.append(f"    for (int j = 0; j < {H}; ++j) yt[j] = h[j];")
        lines.append("  }")
        if y is not None:
            lines.append("  /* steps past this row's sequence length are zeros (sequence_lens) */")
            lines.append(f"  for (int t = len; t < {S}; ++t)")
            lines.append(
                f"    for (int j = 0; j < {H}; ++j) {y.sym}[(size_t)t * {y_t} + (size_t)b * {y_b} + {d * y_d} + j] = 0;"
            )
        for out, name in ((yh, "h"), (yc, "c")):
            if out is not None:
                val = (
                    f"len ? {name}[j] : 0" if seq else f"{name}[j]"
                )  # an empty row's state is 0 (onnxruntime)
                lines.append(
                    f"  for (int j = 0; j < {H}; ++j) {out.sym}[(size_t)b * {s_b} + {d * s_d} + j] = {val};"
                )
        lines.append("}")
    # direction 0 adds offsets of 0 everywhere: drop them so the code reads as written by hand
    return re.sub(r" \+ 0(?![\w.])", "", "\n".join(lines))


def _clip(clip: float | None, v: str, ctype: str) -> str:
    """`clip` bounds a gate's input to [-clip, clip] (ONNX spec: applied to activation inputs)."""
    if clip is None:
        return v
    c = c_literal(float(clip), np.float64 if ctype == "double" else np.float32)
    return f"({v} < -{c} ? -{c} : ({v} > {c} ? {c} : {v}))"


@dataclass(frozen=True)
class _Step:
    """What a cell's time step needs: C expressions for one direction's weights."""

    ctx: NodeContext
    act: list[_Act]  # this direction's activations (f, g, h)
    H: int  # hidden size
    n_in: int  # input size
    gemv: str  # the o2e_rnn_gemv helper for the C type
    wd: str  # W of this direction, [gates*H][n_in]
    rd: str  # R of this direction, [gates*H][H]
    wb: str | None  # Wb, Rb of this direction, or None without B
    rb: str | None
    p: str | None  # peepholes (LSTM), or None
    clip: float | None
    T: str  # C type


def _rnn_cell(st: _Step) -> list[str]:
    """Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)."""
    H, n_in, gemv, wd, rd, wb, rb, T_ = st.H, st.n_in, st.gemv, st.wd, st.rd, st.wb, st.rb, st.T
    act, clip = st.act, st.clip
    return [
        f"{gemv}({H}, {n_in}, {wd}, x, {wb or 'NULL'}, {rb or 'NULL'}, 0, gates);",
        f"{gemv}({H}, {H}, {rd}, h, NULL, NULL, 1, gates);",
        f"for (int j = 0; j < {H}; ++j) {{ const {T_} v = {_clip(clip, 'gates[j]', T_)}; h[j] = {_act_expr(act[0], 'v', T_)}; }}",
    ]


def _gru_cell(st: _Step) -> list[str]:
    """zt, rt = f(Xt·W[zr]ᵀ + Ht-1·R[zr]ᵀ + Wb[zr] + Rb[zr]); then the candidate
    ht = g(Xt·Whᵀ + (rt ⊙ Ht-1)·Rhᵀ + Rbh + Wbh)       (linear_before_reset = 0)
    ht = g(Xt·Whᵀ + rt ⊙ (Ht-1·Rhᵀ + Rbh) + Wbh)       (linear_before_reset = 1)
    and Ht = (1 - zt) ⊙ ht + zt ⊙ Ht-1. Gate order in W, R, B: z, r, h."""
    H, n_in, gemv, wd, rd, wb, rb, T_ = st.H, st.n_in, st.gemv, st.wd, st.rd, st.wb, st.rb, st.T
    (f, g), clip = st.act, st.clip
    # kept: GRU before opset 3 has no linear_before_reset default; this is its meaning there
    lbr = int(st.ctx.attr("linear_before_reset", 0))
    whb = f"({wb} + {2 * H})" if wb else "NULL"
    rhb = f"({rb} + {2 * H})" if rb else "NULL"
    zero = f"({T_})0"
    lines = [
        f"/* z and r: gates[0..{2 * H}); Xt·Whᵀ + Wbh: gates[{2 * H}..{3 * H}) */",
        f"{gemv}({2 * H}, {n_in}, {wd}, x, {wb or 'NULL'}, {rb or 'NULL'}, 0, gates);",
        f"{gemv}({2 * H}, {H}, {rd}, h, NULL, NULL, 1, gates);",
        f"for (int j = 0; j < {2 * H}; ++j) {{ const {T_} v = {_clip(clip, 'gates[j]', T_)}; gates[j] = {_act_expr(f, 'v', T_)}; }}",
        f"{gemv}({H}, {n_in}, {wd} + {2 * H * n_in}, x, NULL, NULL, 0, gates + {2 * H});",
    ]
    if wb:
        lines.append(f"for (int j = 0; j < {H}; ++j) gates[{2 * H} + j] += {whb}[j];")
    if lbr:
        lines += [
            f"{gemv}({H}, {H}, {rd} + {2 * H * H}, h, NULL, NULL, 0, tmp);",
            f"for (int j = 0; j < {H}; ++j) tmp[j] = gates[{H} + j] * (tmp[j] + {rhb + '[j]' if rb else zero});",
        ]
    else:
        lines += [
            f"for (int j = 0; j < {H}; ++j) c[j] = gates[{H} + j] * h[j];  /* rt ⊙ Ht-1 */",
            f"{gemv}({H}, {H}, {rd} + {2 * H * H}, c, NULL, NULL, 0, tmp);",
        ]
        if rb:
            lines.append(f"for (int j = 0; j < {H}; ++j) tmp[j] += {rhb}[j];")
    lines.append(f"for (int j = 0; j < {H}; ++j) {{")
    lines.append(f"  const {T_} v = {_clip(clip, f'(gates[{2 * H} + j] + tmp[j])', T_)};")
    lines.append(f"  const {T_} ht = {_act_expr(g, 'v', T_)}, z = gates[j];")
    lines.append("  h[j] = (1 - z) * ht + z * h[j];")
    lines.append("}")
    return lines


def _lstm_cell(st: _Step) -> list[str]:
    """it = f(.. + Pi ⊙ Ct-1), ft = f(.. + Pf ⊙ Ct-1), ct = g(..), Ct = ft ⊙ Ct-1 + it ⊙ ct,
    ot = f(.. + Po ⊙ Ct), Ht = ot ⊙ h(Ct). Gate order in W, R, B: i, o, f, c; in P: i, o, f.
    input_forget = 1 couples the gates: ft = 1 - it."""
    H, n_in, gemv, wd, rd, wb, rb, T_, p = (
        st.H,
        st.n_in,
        st.gemv,
        st.wd,
        st.rd,
        st.wb,
        st.rb,
        st.T,
        st.p,
    )
    (f, g, hact), clip = st.act, st.clip
    pi = f" + {p}[j] * c[j]" if p else ""
    pf = f" + {p}[{2 * H} + j] * c[j]" if p else ""
    gf = f"gates[{2 * H} + j]{pf}"
    forget = (
        "1 - gi" if int(st.ctx.attr("input_forget")) else _act_expr(f, _clip(clip, "gf", T_), T_)
    )
    po = f" + {p}[{H} + j] * cn" if p else ""
    return [
        f"{gemv}({4 * H}, {n_in}, {wd}, x, {wb or 'NULL'}, {rb or 'NULL'}, 0, gates);",
        f"{gemv}({4 * H}, {H}, {rd}, h, NULL, NULL, 1, gates);",
        f"for (int j = 0; j < {H}; ++j) {{",
        f"  const {T_} ii = gates[j]{pi}, gc = gates[{3 * H} + j];",
        f"  const {T_} gi = {_act_expr(f, _clip(clip, 'ii', T_), T_)};",
        *([] if forget == "1 - gi" else [f"  const {T_} gf = {gf};"]),
        f"  const {T_} ft = {forget};",
        f"  const {T_} cn = ft * c[j] + gi * {_act_expr(g, _clip(clip, 'gc', T_), T_)};",
        f"  const {T_} go = gates[{H} + j]{po};",
        "  c[j] = cn;",
        f"  h[j] = {_act_expr(f, _clip(clip, 'go', T_), T_)} * {_act_expr(hact, 'cn', T_)};",
        "}",
    ]


# --------------------------------------------------------------------------------------------
# CausalConvWithState (opset 27): the depthwise causal convolution of Mamba-style layers
# --------------------------------------------------------------------------------------------
def _causal_conv_check(node: Node, graph: Graph) -> str | None:
    x = graph.type_of(node.inputs[0])
    if x is None or x.dtype not in (np.float32, np.float64):
        return f"CausalConvWithState on {x.dtype.name if x else 'unknown'} is not supported (float32/float64 only)"
    act = node.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        return f"unknown activation {act!r}"
    return None


@register_op("CausalConvWithState", check=_causal_conv_check)
def causal_conv_with_state(ctx: NodeContext) -> str:
    """output[b][c][t] = act(bias[c] + Σ_i w[c][0][i] · padded[b][c][t + i]) where padded is
    past_state (or k-1 zeros) followed by the input, and present_state is the last k-1 steps
    of padded: the state to feed the next call (ONNX spec; silu/swish: v·sigmoid(v))."""
    x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
    T_ = x.ctype
    f = "" if T_ == "double" else "f"
    B, C, L = x.shape
    k = w.shape[2]
    P = k - 1
    bias = f"{ctx.x(2).sym}[c]" if ctx.has_input(2) else "0"
    past = ctx.x(3) if ctx.has_input(3) else None
    pad = (
        f"(p < {P} ? {past.sym}[((size_t)b * {C} + c) * {P} + p] : xc[p - {P}])"
        if past is not None
        else f"(p < {P} ? 0 : xc[p - {P}])"
    )
    silu = ctx.attr("activation") in ("silu", "swish")
    out = f"acc * (1 / (1 + exp{f}(-acc)))" if silu else "acc"
    lines = [
        f"for (int b = 0; b < {B}; ++b)",
        f"for (int c = 0; c < {C}; ++c) {{",
        f"  const {T_} *xc = {x.sym} + ((size_t)b * {C} + c) * {L}, *wc = {w.sym} + (size_t)c * {k};",
        f"  for (int t = 0; t < {L}; ++t) {{",
        f"    {T_} acc = {bias};",
        f"    for (int i = 0; i < {k}; ++i) {{ const int p = t + i; acc += wc[i] * {pad}; }}",
        f"    {y.sym}[((size_t)b * {C} + c) * {L} + t] = {out};",
        "  }",
    ]
    if ctx.has_output(1) and P > 0:
        st = ctx.y(1)
        lines.append(
            f"  for (int p = {L}; p < {L + P}; ++p) {st.sym}[((size_t)b * {C} + c) * {P} + p - {L}] = {pad};"
        )
    lines.append("}")
    return "\n".join(lines)
