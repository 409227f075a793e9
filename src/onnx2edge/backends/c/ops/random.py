"""Random-number ops: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial, and
Dropout (inference: the identity; training: a random mask).

No reference can match their values (onnxruntime and onnx's reference draw from their own
generators), so the C is deterministic instead: element i of a node's output is a pure
function of (seed, node, i) -- a counter-based generator (splitmix64's finaliser on a key and
the element index), the same numbers at every call and on every machine. The `seed`
attribute picks the key; without one the key comes from the node's name, so two unseeded
nodes still draw different numbers. What a test can check is the shape, the range and the
distribution (tests/test_c_random.py; the conformance harness marks these cases "checked").
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from . import register_op
from .loops import copy_code

_RNG = """static uint64_t o2e_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* uniform in [0, 1): 53 random bits of element i of the stream `key` */
static double o2e_u01(uint64_t key, uint64_t i) {
  return (double)(o2e_mix64(key ^ o2e_mix64(i)) >> 11) * 0x1.0p-53;
}"""
_NORMAL = """/* standard normal (Box-Muller on two draws of the stream) */
static double o2e_normal(uint64_t key, uint64_t i) {
  const double u1 = 1.0 - o2e_u01(key, 2 * i), u2 = o2e_u01(key, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}"""

_FLOATS = ("float32", "float64")


def stream_key(node: Node, seed: float | None) -> int:
    """The generator's key: the seed's float32 bits when given, else a hash of the node name."""
    if seed is not None:
        return struct.unpack("<I", struct.pack("<f", float(seed)))[0] | (1 << 32)
    return zlib.crc32(node.name.encode()) | (2 << 32)


def _float_out(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.outputs[0])
    if t is None or t.dtype.name not in _FLOATS:
        return (
            f"{node.op_type} to {t.dtype.name if t else 'a non-tensor'}: float32 and float64 only"
        )
    return None


def _key(ctx: NodeContext) -> str:
    ctx.helper("o2e_mix64", _RNG)
    seed = ctx.node.attr("seed")
    return f"0x{stream_key(ctx.node, seed):x}ull"


@register_op("RandomUniform", "RandomUniformLike", check=_float_out)
def random_uniform(ctx: NodeContext) -> str:
    y = ctx.y(0)
    lo, hi = float(ctx.attr("low")), float(ctx.attr("high"))
    return (
        f"for (size_t i = 0; i < {y.size}; ++i)\n"
        f"  {y.sym}[i] = ({y.ctype})({lo!r} + {hi - lo!r} * o2e_u01({_key(ctx)}, i));"
    )


@register_op("RandomNormal", "RandomNormalLike", check=_float_out)
def random_normal(ctx: NodeContext) -> str:
    y = ctx.y(0)
    mean, scale = float(ctx.attr("mean")), float(ctx.attr("scale"))
    key = _key(ctx)
    normal = ctx.helper("o2e_normal", _NORMAL)
    return (
        f"for (size_t i = 0; i < {y.size}; ++i)\n"
        f"  {y.sym}[i] = ({y.ctype})({mean!r} + {scale!r} * {normal}({key}, i));"
    )


def _bernoulli_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in _FLOATS:
        return "Bernoulli takes float32 or float64 probabilities"
    y = graph.type_of(node.outputs[0])
    if y is None or y.dtype.name in ("float16", "bfloat16") or y.dtype.itemsize == 0:
        return "Bernoulli output dtype not supported"
    return None


@register_op("Bernoulli", check=_bernoulli_check)
def bernoulli(ctx: NodeContext) -> str:
    """1 with probability p (the op's meaning; onnx's function body, Greater(U, p), draws 1
    with probability 1 - p: the _expanded cases follow that body node by node)."""
    x, y = ctx.x(0), ctx.y(0)
    return (
        f"for (size_t i = 0; i < {y.size}; ++i)\n"
        f"  {y.sym}[i] = ({y.ctype})(o2e_u01({_key(ctx)}, i) < (double){x.sym}[i] ? 1 : 0);"
    )


def _multinomial_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in _FLOATS:
        return "Multinomial takes float32 or float64 log-probabilities"
    return None


@register_op("Multinomial", check=_multinomial_check)
def multinomial(ctx: NodeContext) -> str:
    """Per batch row: the classes' unnormalised log-probabilities to a cumulative sum, each
    sample the first class whose sum exceeds a uniform draw times the total."""
    x, y = ctx.x(0), ctx.y(0)
    batch, classes = x.shape
    samples = y.shape[1]
    cum = ctx.scratch(8 * classes, "double")
    key = _key(ctx)
    return f"""for (size_t b = 0; b < {batch}; ++b) {{
  const {x.ctype} *row = {x.sym} + b * {classes};
  double m = -INFINITY, total = 0.0;
  for (size_t c = 0; c < {classes}; ++c) if ((double)row[c] > m) m = (double)row[c];
  for (size_t c = 0; c < {classes}; ++c) {{ total += exp((double)row[c] - m); {cum}[c] = total; }}
  for (size_t s = 0; s < {samples}; ++s) {{
    const double u = o2e_u01({key}, b * {samples} + s) * total;
    size_t c = 0;
    while (c + 1 < {classes} && {cum}[c] <= u) ++c;
    {y.sym}[b * {samples} + s] = ({y.ctype})c;
  }}
}}"""


def _has(node: Node, i: int) -> bool:
    return i < len(node.inputs) and bool(node.inputs[i])


def _dropout_check(node: Node, graph: Graph) -> str | None:
    train = graph.const(node.inputs[2]) if _has(node, 2) else None
    if _has(node, 2) and (train is None or bool(np.asarray(train).reshape(-1)[0])):
        t = graph.type_of(node.inputs[0])
        if t is None or t.dtype.name not in _FLOATS:
            return "Dropout in training mode on float32 or float64 only"
    return None


@register_op("Dropout", check=_dropout_check)
def dropout(ctx: NodeContext) -> str:
    """Inference (no training_mode, or false): the identity, the mask all true. Training: each
    element kept with probability 1 - ratio and scaled by 1 / (1 - ratio) (ONNX Dropout-12+);
    ratio and training_mode are read at run time unless constant."""
    x, y = ctx.x(0), ctx.y(0)
    mask = ctx.y(1).sym if ctx.has_output(1) and ctx.y(1).size else None
    train = ctx.const(2) if ctx.has_input(2) else np.array(False)
    inference = copy_code(y.sym, x.sym, y.nbytes)
    if mask:
        inference += f"\nfor (size_t i = 0; i < {y.size}; ++i) {mask}[i] = 1;"
    if not ctx.has_input(2) or (train is not None and not bool(np.asarray(train).reshape(-1)[0])):
        return inference
    ratio = (
        f"(double){ctx.x(1).sym}[0]" if ctx.has_input(1) else c_literal(0.5, np.dtype("float64"))
    )
    flag = "1" if train is not None else f"{ctx.x(2).sym}[0]"
    keep = f"o2e_u01({_key(ctx)}, i) >= r"
    store_mask = f"\n    {mask}[i] = k;" if mask else ""
    return f"""if (!({flag})) {{
{_indent(inference)}
}} else {{
  const double r = {ratio};
  const double scale = r < 1.0 ? 1.0 / (1.0 - r) : 0.0;
  for (size_t i = 0; i < {y.size}; ++i) {{
    const bool k = {keep};
    {y.sym}[i] = k ? ({y.ctype})((double){x.sym}[i] * scale) : ({y.ctype})0;{store_mask}
  }}
}}"""


def _indent(code: str) -> str:
    return "\n".join("  " + ln for ln in code.splitlines())
