"""Transformer ops: Attention (opsets 23-25), RotaryEmbedding (23) and LinearAttention (27).

Semantics follow the ONNX spec and its reference implementation (onnx/reference/ops/
op_attention.py, op_rotary_embedding.py, op_linear_attention.py), including the corner cases
the node tests pin down: bottom-right aligned causal masks, fully masked rows giving zeros,
softcap applied before the mask, masks shorter than the key sequence padded with -inf.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.activations import vm
from ....semantics.attrs import attr
from ..emitter import NodeContext, Tensor, c_literal
from . import register_op
from .common import broadcast_strides

_FLOATS = (np.float32, np.float64)


def _lit(x: float, ctype: str) -> str:
    return c_literal(x, np.float64 if ctype == "double" else np.float32)


def _suffix(ctype: str) -> str:
    """libm suffix: expf/tanhf for float, exp/tanh for double."""
    return "" if ctype == "double" else "f"


def _heads_layout(t: Tensor, heads: int | None) -> tuple[int, int, int, list[int]]:
    """(heads, seq, head_size, [stride of batch, head, position]) of a Q/K/V/Y tensor.

    4-D tensors are (batch, heads, seq, head_size); 3-D ones are (batch, seq, heads*head_size),
    the layout the spec reshapes and transposes to 4-D."""
    if t.rank == 4:
        _, h, s, d = t.shape
        return h, s, d, [h * s * d, s * d, d]
    assert heads is not None
    _, s, hd = t.shape
    d = hd // heads
    return heads, s, d, [s * hd, d, hd]


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------
_PRECISION = {1: "float", 11: "double"}  # softmax_precision (a TensorProto type) we compute in


def _attention_check(node: Node, graph: Graph) -> str | None:
    q = graph.type_of(node.inputs[0])
    if q is None or q.dtype not in _FLOATS:
        return f"Attention on {q.dtype.name if q else 'unknown'} is not supported (float32/float64 only)"
    if (
        q.shape is not None
        and len(q.shape) == 3
        and (node.attr("q_num_heads") is None or node.attr("kv_num_heads") is None)
    ):
        return "3-D Attention needs q_num_heads and kv_num_heads"
    sp = node.attr("softmax_precision")
    if sp is not None and int(sp) not in _PRECISION:
        return f"softmax_precision {sp} is not supported (float or double only)"
    if len(node.inputs) > 3 and node.inputs[3]:
        m = graph.type_of(node.inputs[3])
        if m is not None and m.dtype != np.bool_ and m.dtype != q.dtype:
            return f"attn_mask of type {m.dtype.name} with {q.dtype.name} inputs"
    return None


@register_op("Attention", check=_attention_check)
def attention(ctx: NodeContext) -> str:
    """Y = softmax(softcap(Q·Kᵀ·scale) + bias)·V per batch and query head.

    `bias` adds, per (query i, key j): the attn_mask (bool: True keeps, False is -inf; a mask
    shorter than the keys is padded with -inf), -inf where j > i + offset when is_causal
    (bottom-right alignment: offset = past length, or nonpad_kv_seqlen[b] - q_len), -inf
    outside the sliding window, and -inf for keys at or past nonpad_kv_seqlen[b]. A row whose
    bias is all -inf has no key to attend and gives zeros. The scale is split as √scale on Q
    and on K, as the spec's function body does. Query head h reads key/value head
    h / (q_heads / kv_heads) (grouped-query attention repeats each KV head)."""
    q, k, v, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    T = q.ctype
    F = _suffix(T)
    Hq, Sq, Dk, q_st = _heads_layout(q, ctx.attr("q_num_heads"))
    Hkv, Sk, _, k_st = _heads_layout(k, ctx.attr("kv_num_heads"))
    _, _, Dv, v_st = _heads_layout(v, ctx.attr("kv_num_heads"))
    _, _, _, y_st = _heads_layout(y, Hq)
    B = q.shape[0]
    mask = ctx.x(3) if ctx.has_input(3) else None
    past_k = ctx.x(4) if ctx.has_input(4) else None
    past_v = ctx.x(5) if ctx.has_input(5) else None
    nonpad = ctx.x(6) if ctx.has_input(6) else None
    P = past_k.shape[2] if past_k is not None else 0
    L = P + Sk
    reps = Hq // Hkv if Hq % Hkv == 0 else 1
    is_causal = int(ctx.attr("is_causal"))
    left, right = int(ctx.attr("left_window_size")), int(ctx.attr("right_window_size"))
    softcap = float(ctx.attr("softcap"))
    mode = int(ctx.attr("qk_matmul_output_mode"))
    # softmax_precision has no schema default: absent, the spec's text says the input's type
    sp = ctx.attr("softmax_precision")
    A = T if sp is None else _PRECISION.get(int(sp), T)  # softmax arithmetic type
    scale = ctx.attr("scale")
    scale = 1 / np.sqrt(Dk) if scale is None else float(scale)
    sqrt_scale = _lit(float(np.dtype(q.dtype).type(np.sqrt(scale))), T)
    lines: list[str] = []

    # Keys and values: with a cache, present = concat(past, new) along the sequence, 4-D.
    def kv_source(
        new: Tensor, past: Tensor | None, out_i: int, d: int, st: list[int], name: str
    ) -> tuple[str, list[int]]:
        present = ctx.y(out_i) if ctx.has_output(out_i) else None
        if past is None and present is None:
            return new.sym, st
        dst = (
            present.sym
            if present is not None
            else ctx.scratch(B * Hkv * L * d * np.dtype(q.dtype).itemsize, T)
        )
        lines.append(f"/* present_{name} = concat(past_{name}, {name}) along the sequence axis */")
        lines.append(f"for (int b = 0; b < {B}; ++b) for (int h = 0; h < {Hkv}; ++h) {{")
        lines.append(f"  {T} *dst = {dst} + ((size_t)b * {Hkv} + h) * {L * d};")
        if past is not None:
            lines.append(
                f"  memcpy(dst, {past.sym} + ((size_t)b * {Hkv} + h) * {P * d}, {P * d} * sizeof({T}));"
            )
        lines.append(f"  for (int j = 0; j < {Sk}; ++j) for (int d = 0; d < {d}; ++d)")
        lines.append(
            f"    dst[(size_t)({P} + j) * {d} + d] = {new.sym}[(size_t)b * {st[0]} + (size_t)h * {st[1]} + (size_t)j * {st[2]} + d];"
        )
        lines.append("}")
        return dst, [Hkv * L * d, L * d, d]

    ksym, k_st = kv_source(k, past_k, 1, Dk, k_st, "key")
    vsym, v_st = kv_source(v, past_v, 2, Dv, v_st, "value")

    qk = ctx.y(3) if ctx.has_output(3) else None
    row = ctx.scratch(L * np.dtype(np.float64 if A == "double" else np.float32).itemsize, A)
    ninf = f"-({T})INFINITY"
    lines.append(f"for (int b = 0; b < {B}; ++b)")
    lines.append(f"for (int h = 0; h < {Hq}; ++h) {{")
    lines.append(
        f"  const {T} *kh = {ksym} + (size_t)b * {k_st[0]} + (size_t)(h / {reps}) * {k_st[1]};"
    )
    lines.append(
        f"  const {T} *vh = {vsym} + (size_t)b * {v_st[0]} + (size_t)(h / {reps}) * {v_st[1]};"
    )
    if nonpad is not None:
        lines.append(f"  const int64_t nonpad = {nonpad.sym}[b];")
    # the causal / window frontier: query i sits at absolute position i + offset
    offset = str(P) if past_k is not None or nonpad is None else f"(nonpad - {Sq})"
    pos = "i" if offset == "0" else f"(i + {offset})"  # the query's absolute position
    lines.append(f"  for (int i = 0; i < {Sq}; ++i) {{")
    lines.append(
        f"    const {T} *qi = {q.sym} + (size_t)b * {q_st[0]} + (size_t)h * {q_st[1]} + (size_t)i * {q_st[2]};"
    )
    lines.append(f"    {A} *p = {row};")
    if qk is not None:
        lines.append(f"    {T} *qk = {qk.sym} + (((size_t)b * {Hq} + h) * {Sq} + i) * {L};")
    lines.append("    int all_masked = 1;  /* every key of this row masked out by the bias */")
    lines.append(f"    for (int j = 0; j < {L}; ++j) {{")
    lines.append(f"      const {T} *kj = kh + (size_t)j * {k_st[2]};")
    lines.append(f"      {T} s = 0;")
    lines.append(
        f"      for (int d = 0; d < {Dk}; ++d) s += (qi[d] * {sqrt_scale}) * (kj[d] * {sqrt_scale});"
    )
    if softcap > 0:
        cap = _lit(softcap, T)
        lines.append(
            f"      s = {vm('tanh', F)}(s / {cap}) * {cap};  /* softcap, before the mask */"
        )
    if qk is not None and mode in (0, 1):
        lines.append("      qk[j] = s;")
    lines.append(f"      {T} bias = 0;")
    if mask is not None:
        mst = broadcast_strides(mask.shape, (B, Hq, Sq, mask.shape[-1]))
        moff = (
            " + ".join(
                f"(size_t){ix} * {s}" for ix, s in zip(("b", "h", "i", "j"), mst, strict=True) if s
            )
            or "0"
        )
        mval = (
            f"({mask.sym}[{moff}] ? 0 : {ninf})"
            if mask.dtype == np.bool_
            else f"{mask.sym}[{moff}]"
        )
        if mask.shape[-1] < L:
            mval = f"(j < {mask.shape[-1]} ? {mval} : {ninf})"
        lines.append(f"      bias = {mval};")
    conds = []
    if is_causal:
        conds.append(f"j > {pos}")
    if left >= 0:
        conds.append(f"{pos} - j > {left}")
    if right >= 0:
        conds.append(f"j - {pos} > {right}")
    for c in conds:
        lines.append(f"      if ({c}) bias += {ninf};")
    if nonpad is not None:
        lines.append(f"      if (j >= nonpad) bias += {ninf};")
    lines.append("      if (!(isinf(bias) && bias < 0)) all_masked = 0;")
    lines.append("      s += bias;")
    if qk is not None and mode == 2:
        lines.append("      qk[j] = s;")
    lines.append(f"      p[j] = {'s' if A == T else f'({A})s'};")
    lines.append("    }")
    AF = _suffix(A)
    lines += [
        "    /* softmax; a row of -inf has no maximum to subtract and gives zeros */",
        f"    {A} mx = p[0], sum = 0;",
        f"    for (int j = 1; j < {L}; ++j) if (p[j] > mx || p[j] != p[j]) mx = p[j];",
        "    if (isinf(mx) && mx < 0) mx = 0;",
        f"    for (int j = 0; j < {L}; ++j) p[j] = {vm('exp', AF)}(p[j] - mx);  /* vectorises */",
        f"    for (int j = 0; j < {L}; ++j) sum += p[j];",
        "    if (sum == 0) sum = 1;",
        f"    for (int j = 0; j < {L}; ++j) p[j] = all_masked ? 0 : p[j] / sum;",
    ]
    if qk is not None and mode == 3:
        lines.append(f"    for (int j = 0; j < {L}; ++j) qk[j] = ({T})p[j];")
    lines += [
        f"    {T} *yi = {y.sym} + (size_t)b * {y_st[0]} + (size_t)h * {y_st[1]} + (size_t)i * {y_st[2]};",
        f"    for (int d = 0; d < {Dv}; ++d) yi[d] = 0;",
        f"    for (int j = 0; j < {L}; ++j) {{",
        f"      const {T} pj = {'p[j]' if A == T else f'({T})p[j]'}, *vj = vh + (size_t)j * {v_st[2]};",
        f"      for (int d = 0; d < {Dv}; ++d) yi[d] += pj * vj[d];",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# RotaryEmbedding
# --------------------------------------------------------------------------------------------
def _float_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype not in _FLOATS:
        return f"{node.op_type} on {t.dtype.name if t else 'unknown'} is not supported (float32/float64 only)"
    if (
        t.shape is not None
        and len(t.shape) == 3
        and node.op_type == "RotaryEmbedding"
        and not node.attr("num_heads")
    ):
        return "3-D RotaryEmbedding needs num_heads"
    return None


@register_op("RotaryEmbedding", check=_float_check)
def rotary_embedding(ctx: NodeContext) -> str:
    """Rotates pairs (x1, x2) of the first rotary_embedding_dim features of each head by the
    position's angle: (cos·x1 - sin·x2, sin·x1 + cos·x2). Pairs are the two halves of the
    rotated part, or neighbours (x[2k], x[2k+1]) when interleaved. cos/sin come from the caches
    at position_ids[b][s], or from caches of shape (batch, seq, dim/2) without position_ids."""
    x, cos, sin, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    T = x.ctype
    H, S, D, st = _heads_layout(x, ctx.attr("num_heads"))
    B = x.shape[0]
    rd = int(ctx.attr("rotary_embedding_dim")) or D
    half = rd // 2
    inter = int(ctx.attr("interleaved"))
    pos = ctx.x(3) if ctx.has_input(3) else None
    cache_row = (
        f"(size_t){pos.sym}[b * {S} + s] * {half}"
        if pos is not None
        else f"((size_t)b * {S} + s) * {half}"
    )
    i1, i2 = ("2 * k", "2 * k + 1") if inter else ("k", f"{half} + k")
    return f"""for (int b = 0; b < {B}; ++b)
for (int s = 0; s < {S}; ++s) {{
  const {T} *c = {cos.sym} + {cache_row}, *sn = {sin.sym} + {cache_row};
  for (int h = 0; h < {H}; ++h) {{
    const size_t off = (size_t)b * {st[0]} + (size_t)h * {st[1]} + (size_t)s * {st[2]};
    const {T} *xi = {x.sym} + off;
    {T} *yi = {y.sym} + off;
    for (int k = 0; k < {half}; ++k) {{
      const {T} x1 = xi[{i1}], x2 = xi[{i2}];
      yi[{i1}] = c[k] * x1 - sn[k] * x2;
      yi[{i2}] = sn[k] * x1 + c[k] * x2;
    }}
    for (int d = {rd}; d < {D}; ++d) yi[d] = xi[d];  /* features past rotary_embedding_dim */
  }}
}}"""


# --------------------------------------------------------------------------------------------
# LinearAttention
# --------------------------------------------------------------------------------------------
def _linear_attention_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype != np.float32:
        return (
            f"LinearAttention on {t.dtype.name if t else 'unknown'} is not supported (float32 only)"
        )
    rule = attr(node, "update_rule", graph.opset)
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        return f"unknown update_rule {rule!r}"
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    has = lambda i: len(node.inputs) > i and bool(node.inputs[i])  # noqa: E731
    if gating != has(4) or delta != has(5):
        return f"update_rule {rule!r} needs decay={gating} and beta={delta}"
    for i in (3, 4, 5):
        if has(i) and (s := graph.type_of(node.inputs[i])) is not None and s.dtype != np.float32:
            return "past_state, decay and beta must be float32"
    return None


@register_op("LinearAttention", check=_linear_attention_check)
def linear_attention(ctx: NodeContext) -> str:
    """A recurrent state S (d_k x d_v) per batch and KV head, updated at each step t:
    S *= exp(decay_t) (gated), v_t = beta_t·(v_t - Sᵀk_t) (delta rule), S += k_t ⊗ v_t;
    the output of query head h is scale · q_t·S of KV head h / (q_heads / kv_heads).
    The state lives in present_state (float32, as the reference accumulates)."""
    q, k, v, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    Hq, Hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    B, S = q.shape[:2]
    dk, dv = q.shape[2] // Hq, v.shape[2] // Hkv
    G = Hq // Hkv
    rule = ctx.attr("update_rule")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    scale = ctx.attr("scale")
    scale = 1 / np.sqrt(dk) if not scale else float(scale)
    past = ctx.x(3) if ctx.has_input(3) else None
    n_state = B * Hkv * dk * dv
    state = ctx.y(1).sym if ctx.has_output(1) else ctx.scratch(n_state * 4)
    lines = []
    if past is not None:
        lines.append(f"memcpy({state}, {past.sym}, {n_state} * sizeof(float));")
    else:
        lines.append(f"for (int i = 0; i < {n_state}; ++i) {state}[i] = 0;")
    vt = ctx.scratch(dv * 4)
    lines += [
        f"for (int b = 0; b < {B}; ++b)",
        f"for (int t = 0; t < {S}; ++t)",
        f"for (int hk = 0; hk < {Hkv}; ++hk) {{",
        "  const size_t bt = (size_t)b * " + str(S) + " + t;",
        f"  float *St = {state} + ((size_t)b * {Hkv} + hk) * {dk * dv};  /* [d_k][d_v] */",
        f"  const float *kt = {k.sym} + bt * {Hkv * dk} + (size_t)hk * {dk};",
        f"  const float *v0 = {v.sym} + bt * {Hkv * dv} + (size_t)hk * {dv};",
        f"  float *vt = {vt};",
    ]
    if gating:
        decay = ctx.x(4)
        per_dim = decay.shape[-1] != Hkv
        g = (
            f"{decay.sym}[bt * {Hkv * dk} + (size_t)hk * {dk} + d]"
            if per_dim
            else f"{decay.sym}[bt * {Hkv} + hk]"
        )
        lines.append(
            f"  for (int d = 0; d < {dk}; ++d) {{ const float e = expf({g}); for (int m = 0; m < {dv}; ++m) St[d * {dv} + m] *= e; }}"
        )
    if delta:
        beta = ctx.x(5)
        bl = beta.shape[-1]
        bv = f"{beta.sym}[bt * {bl}{' + hk' if bl != 1 else ''}]"
        lines += [
            f"  for (int m = 0; m < {dv}; ++m) {{",
            "    float r = 0;  /* (Sᵀ k_t)[m] */",
            f"    for (int d = 0; d < {dk}; ++d) r += St[d * {dv} + m] * kt[d];",
            f"    vt[m] = {bv} * (v0[m] - r);",
            "  }",
        ]
    else:
        lines.append(f"  for (int m = 0; m < {dv}; ++m) vt[m] = v0[m];")
    lines += [
        f"  for (int d = 0; d < {dk}; ++d) for (int m = 0; m < {dv}; ++m) St[d * {dv} + m] += kt[d] * vt[m];",
        f"  for (int h = hk * {G}; h < (hk + 1) * {G}; ++h) {{",
        f"    const float *qt = {q.sym} + bt * {Hq * dk} + (size_t)h * {dk};",
        f"    float *yt = {y.sym} + bt * {Hq * dv} + (size_t)h * {dv};",
        f"    for (int m = 0; m < {dv}; ++m) {{",
        "      float o = 0;",
        f"      for (int d = 0; d < {dk}; ++d) o += qt[d] * St[d * {dv} + m];",
        f"      yt[m] = {_lit(scale, 'float')} * o;",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines)
