"""Spectral ops: DFT, STFT and MelWeightMatrix.

Transforms are direct DFTs (O(N^2) a transform) in double with twiddles taken at (k * n) mod N,
so the angle stays exact for any length: the lengths these ops see in edge models (frames of a
few hundred samples) make that cheap enough, and no FFT library is assumed on the target.
Complex tensors are ONNX's layout: a last dimension of 2 (real, imaginary), or 1 for a real signal.
"""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import attr
from ..emitter import NodeContext, c_literal
from . import register_op

_PI2 = "6.283185307179586476925286766559"


def _scalar(graph: Graph, node: Node, i: int) -> int | None:
    """Input i as a Python int when it is a constant (None when absent)."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    v = graph.const(node.inputs[i])
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


def _float_io(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in ("float32", "float64"):
        return f"{node.op_type} takes float32 or float64 input"
    return None


# --------------------------------------------------------------------------------------------
# DFT
# --------------------------------------------------------------------------------------------
def _dft_axis(node: Node, graph: Graph, rank: int) -> int | None:
    if graph.opset >= 20:
        if len(node.inputs) > 2 and node.inputs[2]:
            a = _scalar(graph, node, 2)
            if a is None:
                return None
        else:
            a = -2
    else:
        a = int(attr(node, "axis", graph.opset))
    return a % rank


def _dft_check(node: Node, graph: Graph) -> str | None:
    if (why := _float_io(node, graph)) is not None:
        return why
    rank = len(graph.shape_of(node.inputs[0]))
    axis = _dft_axis(node, graph, rank)
    if axis is None:
        return "DFT axis must be a constant"
    if axis == rank - 1 or rank < 2:
        return "DFT axis must not be the last (complex) dimension"
    if len(node.inputs) > 1 and node.inputs[1] and _scalar(graph, node, 1) is None:
        return "DFT dft_length must be a constant (fix it with --fix-input)"
    if graph.shape_of(node.inputs[0])[-1] not in (1, 2):
        return "DFT input's last dimension must be 1 (real) or 2 (complex)"
    return None


@register_op("DFT", check=_dft_check)
def dft(ctx: NodeContext) -> str:
    """y[k] = sum_n x[n] e^(-+2 pi i k n / L) over the axis (1/L for the inverse); onesided
    keeps bins 0..L/2; inverse + onesided is the inverse real transform (numpy's irfft): the
    missing bins are the conjugates of the given ones and the output is real."""
    x, y = ctx.x(0), ctx.y(0)
    g = ctx.graph
    axis = _dft_axis(ctx.node, g, x.rank)
    assert axis is not None
    inverse = bool(ctx.attr("inverse"))
    onesided = bool(ctx.attr("onesided"))
    n_in = x.shape[axis]
    length = _scalar(g, ctx.node, 1)
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1 : -1], dtype=np.int64))
    ci, co = x.shape[-1], y.shape[-1]
    k_out = y.shape[axis]
    if y.size == 0:
        return "/* empty output */"
    n_used = min(n_in, length)  # dft_length truncates or zero-pads the signal
    imag_in = f"(double){x.sym}[xi + 1]" if ci == 2 else "0.0"
    sign = "+" if inverse else "-"
    scale = f" / {length}.0" if inverse else ""
    head = f"""const double w = {_PI2} / {length}.0;
for (size_t o = 0; o < {outer}; ++o)
for (size_t j = 0; j < {inner}; ++j)
for (size_t k = 0; k < {k_out}; ++k) {{
  double re = 0.0{", im = 0.0" if not (inverse and onesided) else ""};"""
    tail = f"""  const size_t yi = ((o * {k_out} + k) * {inner} + j) * {co};"""
    if inverse and onesided:
        # irfft: bins 0..L/2 (those given); the others mirror them, so each bin 1..ceil(L/2)-1
        # counts twice; the imaginary parts of bin 0 and of bin L/2 (L even) drop out
        half = length // 2
        body = f"""
  for (size_t n = 0; n < {min(n_in, half + 1)}; ++n) {{
    const size_t xi = ((o * {n_in} + n) * {inner} + j) * {ci};
    const double a = w * (double)((k * n) % {length});
    const double xr = (double){x.sym}[xi], xm = {imag_in};
    const double f = (n == 0 || 2 * n == {length}) ? 1.0 : 2.0;
    re += f * (xr * cos(a) - (n == 0 || 2 * n == {length} ? 0.0 : xm * sin(a)));
  }}
{tail}
  {y.sym}[yi] = ({y.ctype})(re / {length}.0);"""
        if co == 2:
            body += f"\n  {y.sym}[yi + 1] = 0;"
        return head + body + "\n}"
    body = f"""
  for (size_t n = 0; n < {n_used}; ++n) {{
    const size_t xi = ((o * {n_in} + n) * {inner} + j) * {ci};
    const double a = w * (double)((k * n) % {length});
    const double c = cos(a), s = {sign}sin(a);
    const double xr = (double){x.sym}[xi], xm = {imag_in};
    re += xr * c - xm * s;
    im += xr * s + xm * c;
  }}
{tail}
  {y.sym}[yi] = ({y.ctype})(re{scale});"""
    if co == 2:
        body += f"\n  {y.sym}[yi + 1] = ({y.ctype})(im{scale});"
    return head + body + "\n}"


# --------------------------------------------------------------------------------------------
# STFT
# --------------------------------------------------------------------------------------------
def _stft_check(node: Node, graph: Graph) -> str | None:
    if (why := _float_io(node, graph)) is not None:
        return why
    if _scalar(graph, node, 1) is None:
        return "STFT frame_step must be a constant (fix it with --fix-input)"
    if len(node.inputs) > 3 and node.inputs[3] and _scalar(graph, node, 3) is None:
        return "STFT frame_length must be a constant (fix it with --fix-input)"
    if len(graph.shape_of(node.inputs[0])) != 3:
        return "STFT signal must be [batch, length, 1 or 2]"
    return None


@register_op("STFT", check=_stft_check)
def stft(ctx: NodeContext) -> str:
    """y[b][f][k] = sum_n x[b][f * step + n] w[n] e^(-2 pi i k n / L), L the frame length."""
    x, y = ctx.x(0), ctx.y(0)
    g = ctx.graph
    step = _scalar(g, ctx.node, 1)
    has_w = ctx.has_input(2)
    length = _scalar(g, ctx.node, 3)
    if length is None:
        length = ctx.x(2).shape[0] if has_w else x.shape[1]
    batch, n_sig, ci = x.shape
    frames, bins, co = y.shape[1], y.shape[2], y.shape[3]
    if y.size == 0:
        return "/* empty output */"
    win = f" * (double){ctx.x(2).sym}[n]" if has_w else ""
    imag_in = f"(double){x.sym}[xi + 1]" if ci == 2 else "0.0"
    out_im = f"\n  {y.sym}[yi + 1] = ({y.ctype})im;" if co == 2 else ""
    return f"""const double w = {_PI2} / {length}.0;
for (size_t b = 0; b < {batch}; ++b)
for (size_t f = 0; f < {frames}; ++f)
for (size_t k = 0; k < {bins}; ++k) {{
  double re = 0.0, im = 0.0;
  for (size_t n = 0; n < {length}; ++n) {{
    const size_t t = f * {step} + n;
    if (t >= {n_sig}) break;  /* a short last frame is zero-padded */
    const size_t xi = (b * {n_sig} + t) * {ci};
    const double a = w * (double)((k * n) % {length});
    const double c = cos(a), s = -sin(a);
    const double xr = (double){x.sym}[xi]{win}, xm = {imag_in}{win};
    re += xr * c - xm * s;
    im += xr * s + xm * c;
  }}
  const size_t yi = ((b * {frames} + f) * {bins} + k) * {co};
  {y.sym}[yi] = ({y.ctype})re;{out_im}
}}"""


# --------------------------------------------------------------------------------------------
# MelWeightMatrix
# --------------------------------------------------------------------------------------------
def _mel_check(node: Node, graph: Graph) -> str | None:
    for i, what in ((0, "num_mel_bins"), (1, "dft_length"), (2, "sample_rate")):
        if _scalar(graph, node, i) is None:
            return f"MelWeightMatrix {what} must be a constant (fix it with --fix-input)"
    return None


@register_op("MelWeightMatrix", check=_mel_check)
def mel_weight_matrix(ctx: NodeContext) -> str:
    """Triangular filters between mel-spaced edges, as the ONNX reference computes them: the
    edges are spectrogram bins floor((L + 1) * hz / sample_rate), mels 2595 log10(1 + hz/700)."""
    g = ctx.graph
    mels, length, rate = (_scalar(g, ctx.node, i) for i in range(3))
    y = ctx.y(0)
    lo, hi = ctx.x(3), ctx.x(4)
    assert mels is not None and length is not None and rate is not None
    n_bins = length // 2 + 1
    zero = c_literal(0, y.dtype)
    return f"""double edge[{mels + 2}];
{{
  const double lo = 2595.0 * log1p((double){lo.sym}[0] / 700.0) / log(10.0);
  const double hi = 2595.0 * log1p((double){hi.sym}[0] / 700.0) / log(10.0);
  const double step = (hi - lo) / {mels + 2}.0;
  for (int i = 0; i < {mels + 2}; ++i) {{
    const double hz = 700.0 * expm1((i * step + lo) / 2595.0 * log(10.0));
    edge[i] = floor({length + 1}.0 * hz / {rate}.0);
  }}
}}
for (size_t i = 0; i < {n_bins * mels}; ++i) {y.sym}[i] = {zero};
for (int m = 0; m < {mels}; ++m) {{
  const long l = (long)edge[m], c = (long)edge[m + 1], r = (long)edge[m + 2];
  if (c == l) {{
    if (c >= 0 && c < {n_bins}) {y.sym}[c * {mels} + m] = ({y.ctype})1;
  }} else {{
    for (long j = l; j <= c; ++j)
      if (j >= 0 && j < {n_bins}) {y.sym}[j * {mels} + m] = ({y.ctype})((double)(j - l) / (double)(c - l));
  }}
  for (long j = c; j < r; ++j)
    if (j >= 0 && j < {n_bins}) {y.sym}[j * {mels} + m] = ({y.ctype})((double)(r - j) / (double)(r - c));
}}"""
