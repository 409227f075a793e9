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
from ....semantics.attrs import attr
from ....semantics.rnn import CELLS, RnnAct, recurrent_attrs, rnn_act_expr, rnn_activations
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op

# The cells and their activations: the table shared with MPS's Swift (semantics/rnn.py).
_CELLS = CELLS
_Act = RnnAct
_activations = rnn_activations


def _act_expr(act: _Act, v: str, ctype: str) -> str:
    """C expression of one RNN activation function (semantics/rnn.py's table)."""
    f = "" if ctype == "double" else "f"
    lit = lambda x: c_literal(x, np.float64 if ctype == "double" else np.float32)  # noqa: E731
    return rnn_act_expr(act, v, lit, f, vmath=True)


def _rnn_check(node: Node, graph: Graph) -> str | None:
    x = graph.type_of(node.inputs[0])
    if x is None or x.dtype not in (np.float32, np.float64):
        return f"{node.op_type} on {x.dtype.name if x else 'unknown'} is not supported (float32/float64 only)"
    if (why := recurrent_attrs(node, graph.opset).problem()) is not None:
        return why
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
    ra = recurrent_attrs(ctx.node, ctx.graph.opset)
    layout, direction = ra.layout, ra.direction
    ndir, GH, n_in = w.shape
    H = r.shape[2]
    G = _CELLS[op][0]
    S, B = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    acts = _activations(ctx.node)
    n_act = len(_CELLS[op][1])
    clip = ra.clip
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


# --------------------------------------------------------------------------------------------
# com.microsoft.DynamicQuantizeLSTM (onnxruntime's quantize_dynamic on an LSTM)
# --------------------------------------------------------------------------------------------
QGEMV = r"""
/* uint8 range of v[0..n) as onnxruntime measures it for a dynamically quantized product
   (GetQuantizationParameter): [min, max] stretched to include 0, scale (max - min) / 255
   (1 when the range is empty), zero point -min / scale rounded half to even into [0, 255]. */
static void o2e_qlstm_range(const float *v, size_t n, float *scale, int32_t *zp)
{
  float mn = 0.0f, mx = 0.0f, z;
  for (size_t i = 0; i < n; ++i) {
    if (v[i] < mn) mn = v[i];
    if (v[i] > mx) mx = v[i];
  }
  *scale = mx == mn ? 1.0f : (mx - mn) / 255.0f;
  z = 0.0f - mn / *scale;
  *zp = (int32_t)nearbyintf(z < 0.0f ? 0.0f : (z > 255.0f ? 255.0f : z));
}

/* out[j] (+)= (sum_i (q(v[i]) - zp) * (M[i][j] - mzp)) * (scale * ms[j]): one gate product of
   onnxruntime's quantized LSTM (rnn_helpers ComputeGemm): v quantized to uint8 with
   (scale, zp), M [k][n] int8 or uint8 with one zero point, the int32 sum scaled by the
   float product of the two scales (ms per column, or ms[0] for all). */
static void o2e_qlstm_gemv(int n, int k, const float *v, float scale, int32_t zp,
                           const void *M, int m_signed, int32_t mzp, const float *ms, int per_col,
                           int acc, int32_t *sum, float *out)
{
  for (int j = 0; j < n; ++j) sum[j] = 0;
  for (int i = 0; i < k; ++i) {
    float q = nearbyintf(v[i] / scale) + (float)zp;
    q = !(q >= 0.0f) ? 0.0f : (q > 255.0f ? 255.0f : q);
    const int32_t a = (int32_t)q - zp;
    if (a == 0) continue;
    if (m_signed) {
      const int8_t *m = (const int8_t *)M + (size_t)i * n;
      for (int j = 0; j < n; ++j) sum[j] += a * ((int32_t)m[j] - mzp);
    } else {
      const uint8_t *m = (const uint8_t *)M + (size_t)i * n;
      for (int j = 0; j < n; ++j) sum[j] += a * ((int32_t)m[j] - mzp);
    }
  }
  for (int j = 0; j < n; ++j) {
    const float p = (float)sum[j] * (scale * ms[per_col ? j : 0]);
    out[j] = acc ? out[j] + p : p;
  }
}
"""


def _dqlstm_check(node: Node, graph: Graph) -> str | None:
    x = graph.type_of(node.inputs[0])
    if x is None or x.dtype != np.float32:
        return "DynamicQuantizeLSTM on float32 only (onnxruntime's kernel)"
    if recurrent_attrs(node, graph.opset).layout != 0:
        return "DynamicQuantizeLSTM with layout 1 (onnxruntime's kernel reads layout 0 only)"
    if len(node.inputs) < 12 or not all(node.inputs[8:12]):
        return "DynamicQuantizeLSTM needs W/R scales and zero points (inputs 8-11)"
    for i in (1, 2):
        t = graph.type_of(node.inputs[i])
        if t is None or t.shape is None or len(t.shape) != 3:
            return "W and R must be 3-D tensors"
        # each int32 sum adds terms of at most 255 * 255 in size: exact up to 33025 of them
        if not isinstance(t.shape[1], int) or t.shape[1] > 33025:
            return "DynamicQuantizeLSTM with over 33025 input or hidden units (int32 sums)"
    try:
        _activations(node.replace(op_type="LSTM"))
    except ValueError as e:
        return str(e)
    return None


@register_op("com.microsoft:DynamicQuantizeLSTM", check=_dqlstm_check)
def dynamic_quantize_lstm(ctx: NodeContext) -> str:
    """onnxruntime's quantized LSTM step for step (contrib_ops dynamic_quantize_lstm.cc on
    rnn_helpers' quantized ComputeGemm and uni_directional_lstm.cc):

    - X is quantized to uint8 once, with the range of the steps it runs (up to the longest
      sequence_lens entry; a reversed sequence holds the same values);
    - at every step h is quantized with the range of the whole batch's previous h (rows that
      ended before the previous step hold zeros there, which the range includes anyway) -- what
      onnxruntime does on one thread, as `verify` runs it; on n threads it splits the batch
      into n groups with a range each, so its own result then depends on the thread count;
    - each gate product is an exact int32 sum of (q - zp)(w - w_zp), scaled by the float
      product of the two scales (per column or per direction), then Wb + Rb are added and the
      LSTM cell runs as the float op's.

    The float LSTM on dequantized weights (what Core ML / MPS run) differs from this by a
    quantization step of X and h at every step."""
    x, w, r = ctx.x(0), ctx.x(1), ctx.x(2)
    dq = recurrent_attrs(ctx.node, ctx.graph.opset)
    direction = dq.direction
    ndir, n_in, GH = w.shape
    H = r.shape[1]
    S, B = x.shape[0], x.shape[1]
    acts = _activations(ctx.node.replace(op_type="LSTM"))
    ctx.helper("o2e_qlstm_gemv", QGEMV)

    def opt(i: int) -> Tensor | None:
        return ctx.x(i) if ctx.has_input(i) else None

    bias, seq, h0, c0, peep = opt(3), opt(4), opt(5), opt(6), opt(7)
    y, yh, yc = (ctx.y(i) if ctx.has_output(i) else None for i in range(3))
    ws, wz, rs, rz = ctx.x(8), ctx.x(9), ctx.x(10), ctx.x(11)
    signed = lambda t: int(np.dtype(t.dtype) == np.int8)  # noqa: E731
    wcol, rcol = int(ws.rank == 2), int(rs.rank == 2)
    wsz, rsz = (GH if wcol else 1), (GH if rcol else 1)
    # Y [S][D][B][H]; states [D][B][H]
    y_t, y_d = ndir * B * H, B * H

    fw = ctx.scratch((GH + 2 * H + 2 * B * H) * 4, "float")
    isum = ctx.scratch(GH * 4, "int32_t")
    seq_len = (
        f"({seq.sym}[b] < 0 ? 0 : ({seq.sym}[b] > {S} ? {S} : {seq.sym}[b]))" if seq else str(S)
    )
    lines = [
        f"float *gates = {fw}, *tmp = {fw} + {GH}, *hall = {fw} + {GH + 2 * H}, *call = {fw} + {GH + 2 * H + B * H};",
        f"int32_t *isum = {isum};",
        "float xs, hs; int32_t xz, hz;",
        "int steps = 0;",
        "(void)tmp;",
        f"for (int b = 0; b < {B}; ++b) if ({seq_len} > steps) steps = {seq_len};",
        f"o2e_qlstm_range({x.sym}, (size_t)steps * {B * n_in}, &xs, &xz);",
    ]
    for d in range(ndir):
        reverse = direction == "reverse" or d == 1
        wd, rd = f"{w.sym} + {d * n_in * GH}", f"{r.sym} + {d * H * GH}"
        wb = f"({bias.sym} + {d * 2 * GH})" if bias else None
        rb = f"({bias.sym} + {d * 2 * GH + GH})" if bias else None
        p = f"({peep.sym} + {d * 3 * H})" if peep else None
        st = _Step(ctx, acts[d * 3 : d * 3 + 3], H, n_in, "", "", "", wb, rb, p, dq.clip, "float")
        cell = _lstm_cell(st)[2:]  # the update after the two gate products
        lines.append(f"/* {'reverse' if reverse else 'forward'} direction */")
        for t0, name in ((h0, "hall"), (c0, "call")):
            src = f"{t0.sym}[{d * B * H} + i]" if t0 else "0"
            lines.append(f"for (int i = 0; i < {B * H}; ++i) {name}[i] = {src};")
        lines += [
            "for (int s = 0; s < steps; ++s) {",
            "  /* h's range over the batch's previous h: with Y, a row that ended before the",
            "     last step is zeros in onnxruntime's buffer (one that ended at it still counts);",
            "     without Y its buffer is Y_h, which keeps an ended row's last h */",
            "  float mn = 0.0f, mx = 0.0f;",
            f"  for (int b = 0; b < {B}; ++b) {{",
            f"    if (s > {seq_len}) continue;" if y is not None else "    (void)s;",
            f"    for (int j = 0; j < {H}; ++j) {{",
            f"      const float v = hall[b * {H} + j];",
            "      if (v < mn) mn = v;",
            "      if (v > mx) mx = v;",
            "    }",
            "  }",
            "  {",
            "    const float lim[2] = {mn, mx};",
            "    o2e_qlstm_range(lim, 2, &hs, &hz);",
            "  }",
            f"  for (int b = 0; b < {B}; ++b) {{",
            f"    const int len = {seq_len};",
            f"    float *h = hall + b * {H}, *c = call + b * {H};",
            "    if (s >= len) continue;",
            f"    const int t = {'len - 1 - s' if reverse else 's'};",
            f"    const float *x = {x.sym} + (size_t)t * {B * n_in} + (size_t)b * {n_in};",
            f"    o2e_qlstm_gemv({GH}, {n_in}, x, xs, xz, {wd}, {signed(w)}, "
            f"(int32_t){wz.sym}[{d * wsz}], {ws.sym} + {d * wsz}, {wcol}, 0, isum, gates);",
            f"    o2e_qlstm_gemv({GH}, {H}, h, hs, hz, {rd}, {signed(r)}, "
            f"(int32_t){rz.sym}[{d * rsz}], {rs.sym} + {d * rsz}, {rcol}, 1, isum, gates);",
        ]
        if wb:
            lines.append(f"    for (int j = 0; j < {GH}; ++j) gates[j] += {wb}[j] + {rb}[j];")
        lines += ["    " + ln for ln in cell]
        if y is not None:
            lines.append(
                f"    for (int j = 0; j < {H}; ++j) {y.sym}[(size_t)t * {y_t} + {d * y_d} + b * {H} + j] = h[j];"
            )
        lines += ["  }", "}"]
        lines.append(f"for (int b = 0; b < {B}; ++b) {{")
        lines.append(f"  const int len = {seq_len};")
        if y is not None:
            lines.append("  /* steps past this row's sequence length are zeros (sequence_lens) */")
            lines.append(f"  for (int t = len; t < {S}; ++t)")
            lines.append(
                f"    for (int j = 0; j < {H}; ++j) {y.sym}[(size_t)t * {y_t} + {d * y_d} + b * {H} + j] = 0;"
            )
        for out, name in ((yh, "hall"), (yc, "call")):
            if out is not None:
                lines.append(
                    f"  for (int j = 0; j < {H}; ++j) {out.sym}[{d * B * H} + b * {H} + j] = len ? {name}[b * {H} + j] : 0;"
                )
        lines.append("}")
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
    lbr = int(recurrent_attrs(st.ctx.node, st.ctx.graph.opset).linear_before_reset)
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
        "1 - gi"
        if recurrent_attrs(st.ctx.node, st.ctx.graph.opset).input_forget
        else _act_expr(f, _clip(clip, "gf", T_), T_)
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
    act = attr(node, "activation", graph.opset)
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
