"""String ops: StringConcat, StringNormalizer, StringSplit, LabelEncoder (ai.onnx.ml; Equal on
strings is in ops/elementwise.py).

A string element is an `o2e_str` (emitter.STRING_TYPEDEF): STRING_BYTES bytes of UTF-8 text,
NUL-terminated, so at most STRING_BYTES - 1 bytes. What C cannot do like the reference is
said where it is done: StringConcat cuts a result longer than that at a character boundary;
case changes are ASCII only (other characters are kept); StringSplit without a delimiter splits
at ASCII whitespace. StringNormalizer with stopwords and StringSplit have data-dependent output
sizes: the C writes the static shape the model declares and `_run` returns -1 when the data
would give another size (the output is then not the op's result).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....ir import Graph, Node
from ....ir.graph import STRING_BYTES
from ..emitter import NodeContext, c_literal
from . import register_op
from .common import elementwise

_CONCAT = f"""static o2e_str o2e_str_concat(o2e_str a, o2e_str b) {{
  o2e_str r;
  size_t n = strlen(a.s), m = strlen(b.s);
  memset(&r, 0, sizeof r);  /* the padding too: outputs are deterministic bytes */
  if (n + m > {STRING_BYTES - 1}) {{  /* too long: cut at a UTF-8 character boundary */
    m = {STRING_BYTES - 1} - n;
    while (m > 0 && (b.s[m] & 0xC0) == 0x80) --m;
  }}
  memcpy(r.s, a.s, n);
  memcpy(r.s + n, b.s, m);
  r.s[n + m] = 0;
  return r;
}}"""

_SUBSTR = f"""static o2e_str o2e_substr(const char *p, size_t n) {{
  o2e_str r;
  memset(&r, 0, sizeof r);
  if (n > {STRING_BYTES - 1}) n = {STRING_BYTES - 1};
  memcpy(r.s, p, n);
  r.s[n] = 0;
  return r;
}}"""
_ISSPACE = """static int o2e_isspace(char c) {
  return c == ' ' || c == '\\t' || c == '\\n' || c == '\\v' || c == '\\f' || c == '\\r';
}"""


def c_string(s: str | bytes) -> str:
    """A C string literal of the UTF-8 bytes (octal escapes: no trailing-hex ambiguity)."""
    b = s.encode("utf-8", errors="surrogateescape") if isinstance(s, str) else bytes(s)
    if len(b) >= STRING_BYTES:
        raise ValueError(f"string constant of {len(b)} bytes: at most {STRING_BYTES - 1}")
    out = []
    for c in b:
        ch = chr(c)
        if c < 128 and (ch.isalnum() or ch in " .,-_@/:;!+*=()[]{}<>#$%&|~^'"):
            out.append(ch)
        else:
            out.append(f"\\{c:03o}")
    return '"' + "".join(out) + '"'


@register_op("StringConcat")
def string_concat(ctx: NodeContext) -> str:
    ctx.helper("o2e_str_concat", _CONCAT)
    return elementwise(ctx, [ctx.x(0), ctx.x(1)], ctx.y(0), "o2e_str_concat(a, b)")


def _case_code(action: str, var: str) -> str:
    if action == "LOWER":
        return f"for (char *c = {var}.s; *c; ++c) if (*c >= 'A' && *c <= 'Z') *c += 32;"
    if action == "UPPER":
        return f"for (char *c = {var}.s; *c; ++c) if (*c >= 'a' && *c <= 'z') *c -= 32;"
    return ""


def _normalizer_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind != "S":
        return "StringNormalizer takes strings"
    shape = t.static_shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1)):
        return f"StringNormalizer takes [C] or [1, C], not {list(shape)}"
    return None


@register_op("StringNormalizer", check=_normalizer_check)
def string_normalizer(ctx: NodeContext) -> str:
    """Drop the stopwords (compared case-insensitively, ASCII, unless is_case_sensitive), then
    change case; all dropped: one empty string (the ONNX spec)."""
    x, y = ctx.x(0), ctx.y(0)
    action = str(ctx.attr("case_change_action")).upper()
    sensitive = int(ctx.attr("is_case_sensitive"))
    stops = [str(w) for w in (ctx.attr("stopwords") or [])]
    lines = []
    if stops:
        table = ctx.unique("stopwords")
        words = stops if sensitive else [w.lower() for w in stops]
        ctx.helper(
            table,
            f"static const char *const {table}[{len(words)}] = {{"
            + ", ".join(c_string(w) for w in words)
            + "};",
        )
        low = "" if sensitive else _case_code("LOWER", "key")
        lines += [
            f"  o2e_str key = {x.sym}[i];",
            f"  {low}",
            "  int stop = 0;",
            f"  for (size_t w = 0; w < {len(words)}; ++w) if (strcmp(key.s, {table}[w]) == 0) stop = 1;",
            "  if (stop) continue;",
        ]
    return f"""{{
size_t k = 0;
for (size_t i = 0; i < {x.size}; ++i) {{
{chr(10).join(lines)}
  o2e_str v = {x.sym}[i];
  {_case_code(action, "v")}
  if (k < {y.size}) {y.sym}[k] = v;
  ++k;
}}
if (k == 0) {{ memset({y.sym}[0].s, 0, sizeof {y.sym}[0].s); k = 1; }}
if (k != {y.size}) return -1;  /* the data gives another size than the declared one */
}}"""


def _split_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind != "S":
        return "StringSplit takes strings"
    return None


@register_op("StringSplit", check=_split_check)
def string_split(ctx: NodeContext) -> str:
    """str.split(delimiter or None, maxsplit) as onnxruntime does it (the rest after the last
    whitespace split loses its trailing whitespace, where Python keeps it): each element's
    pieces in a row of the declared width, padded with empty strings; the row count in
    `length`. The widest row must fill the declared width exactly."""
    ctx.helper("o2e_substr", _SUBSTR)
    x, y = ctx.x(0), ctx.y(0)
    width = y.shape[-1] if y.shape else 1
    delim = ctx.attr("delimiter", "") or ""
    maxsplit = ctx.attr("maxsplit")  # no schema default: absent, no limit
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    count = ctx.y(1).sym if ctx.has_output(1) else None
    put = (
        f"if (n < {width}) {y.sym}[i * {width} + n] = o2e_substr(start, (size_t)(end - start));"
        "\n      ++n;"
    )
    last = f"n == {maxsplit}" if maxsplit >= 0 else "0"  # the splits are used up
    if delim:
        d = c_string(delim)
        dl = len(str(delim).encode("utf-8", errors="surrogateescape"))
        body = f"""const char *start = s, *end;
    for (;;) {{
      const char *hit = ({last}) ? NULL : strstr(start, {d});
      end = hit ? hit : start + strlen(start);
      {put}
      if (!hit) break;
      start = hit + {dl};
    }}"""
    else:
        ctx.helper("o2e_isspace", _ISSPACE)
        body = f"""while (*s && o2e_isspace(*s)) ++s;
    while (*s) {{
      const char *start = s, *end;
      if ({last}) {{  /* the rest, without trailing whitespace (as onnxruntime) */
        end = s + strlen(s);
        s = end;
        while (end > start && o2e_isspace(end[-1])) --end;
      }}
      else {{ while (*s && !o2e_isspace(*s)) ++s; end = s; }}
      {put}
      while (*s && o2e_isspace(*s)) ++s;
    }}"""
    store = f"{count}[i] = ({ctx.y(1).ctype})n;" if count else ""
    return f"""{{
size_t widest = 0;
for (size_t i = 0; i < {x.size}; ++i) {{
  const char *s = {x.sym}[i].s;
  size_t n = 0;
  {{
    {body}
  }}
  for (size_t j = n; j < {width}; ++j)
    memset({y.sym}[i * {width} + j].s, 0, sizeof {y.sym}[0].s);
  {store}
  if (n > widest) widest = n;
}}
if (widest != {width}) return -1;  /* another width than the declared one */
}}"""


def _values(ctx: NodeContext, kind: str) -> Any:
    """keys/values/default from the attribute that holds them (*_strings, *_int64s, *_floats or
    *_tensor), or None."""
    for suffix in ("_strings", "_int64s", "_floats", "_tensor"):
        v = ctx.node.attr(f"{kind}{suffix}", None)
        if v is not None:
            return np.asarray(v).reshape(-1) if suffix == "_tensor" else list(v)
    return None


def _label_check(node: Node, graph: Graph) -> str | None:
    if graph.type_of(node.inputs[0]) is None:
        return "LabelEncoder takes a tensor"
    return None


@register_op("ai.onnx.ml:LabelEncoder", check=_label_check)
def label_encoder(ctx: NodeContext) -> str:
    """Each input element looked up among the keys (linear scan: the tables are small), the
    default where absent (the schema's: -1, -0.0 or "_Unused", or default_*)."""
    x, y = ctx.x(0), ctx.y(0)
    keys, values = _values(ctx, "keys"), _values(ctx, "values")
    if keys is None or values is None or len(keys) != len(values):
        raise ValueError("LabelEncoder needs keys and values of one length")
    default = ctx.node.attr("default_tensor")
    if default is not None:
        default = np.asarray(default).reshape(-1)[0]
    elif y.dtype.kind == "S":
        default = ctx.attr("default_string")
    elif y.dtype.kind == "f":
        default = ctx.attr("default_float")
    else:
        default = ctx.attr("default_int64")

    def lit(v: Any, t: Any) -> str:
        if t.dtype.kind == "S":
            return c_string(v if isinstance(v, (str, bytes)) else str(v))
        return c_literal(v, t.dtype)

    kt, vt = ctx.unique("label_keys"), ctx.unique("label_values")
    kc = "const char *const" if x.dtype.kind == "S" else f"const {x.ctype}"
    ctx.helper(kt, f"static {kc} {kt}[{len(keys)}] = {{{', '.join(lit(k, x) for k in keys)}}};")
    match = (
        f"strcmp({x.sym}[i].s, {kt}[k]) == 0" if x.dtype.kind == "S" else f"{x.sym}[i] == {kt}[k]"
    )
    if y.dtype.kind == "S":
        ctx.helper(
            vt,
            f"static const char *const {vt}[{len(values)}] = {{{', '.join(lit(v, y) for v in values)}}};",
        )
        pad = f"memset({y.sym}[i].s, 0, sizeof {y.sym}[i].s); "
        assign = f"{{ {pad}strcpy({y.sym}[i].s, {vt}[k]); }}"
        dflt = f"{{ {pad}strcpy({y.sym}[i].s, {lit(default, y)}); }}"
    else:
        ctx.helper(
            vt,
            f"static const {y.ctype} {vt}[{len(values)}] = {{{', '.join(lit(v, y) for v in values)}}};",
        )
        assign = f"{y.sym}[i] = {vt}[k];"
        dflt = f"{y.sym}[i] = {lit(default, y)};"
    return f"""for (size_t i = 0; i < {x.size}; ++i) {{
  size_t k = 0;
  while (k < {len(keys)} && !({match})) ++k;
  if (k < {len(keys)}) {assign} else {dflt}
}}"""
