"""RegexFullMatch: the pattern compiled at conversion to a Thompson NFA (tables in the C), run
over each string's bytes by a set-of-states simulation: linear in the string, no
backtracking, as RE2 (onnxruntime's engine) guarantees.

The pattern is parsed by Python's own regex parser (re._parser) as a bytes pattern, then given
RE2's meaning where the two differ: \\w \\d \\s and \\b are ASCII; `.`, negated classes and
\\W \\D \\S consume one whole UTF-8 character; `.` does not match a newline; `^` and `$` are the
start and end of the text. What RE2 has and this does not (backreferences, lookaround, flags,
lazy-vs-greedy makes no difference to a full match) is refused with its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ....ir import Graph, Node
from ..emitter import NodeContext
from . import register_op
from .common import elementwise

_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DIGIT = frozenset(b"0123456789")
_SPACE = frozenset(b" \t\n\r\f\v")
_ASCII = frozenset(range(128))
MAX_STATES = 4096

BYTE, SPLIT, ASSERT, MATCH = 0, 1, 2, 3
_ASSERTS = {"AT_BEGINNING": 0, "AT_BEGINNING_STRING": 0, "AT_END": 1, "AT_END_STRING": 1}
_ASSERTS |= {"AT_BOUNDARY": 2, "AT_NON_BOUNDARY": 3}


class RegexError(ValueError):
    pass


@dataclass
class Nfa:
    kind: list[int] = field(default_factory=list)
    out1: list[int] = field(default_factory=list)
    out2: list[int] = field(default_factory=list)
    arg: list[int] = field(default_factory=list)  # BYTE: set index; ASSERT: kind
    sets: list[frozenset[int]] = field(default_factory=list)

    def add(self, kind: int, out1: int = -1, out2: int = -1, arg: int = 0) -> int:
        if len(self.kind) >= MAX_STATES:
            raise RegexError(f"the pattern needs more than {MAX_STATES} NFA states")
        self.kind.append(kind)
        self.out1.append(out1)
        self.out2.append(out2)
        self.arg.append(arg)
        return len(self.kind) - 1

    def byteset(self, s: frozenset[int], nxt: int) -> int:
        if s not in self.sets:
            self.sets.append(s)
        return self.add(BYTE, nxt, -1, self.sets.index(s))

    def either(self, a: int, b: int) -> int:
        return self.add(SPLIT, a, b)


def _category(name: str) -> tuple[frozenset[int], bool]:
    """(the ASCII set, negated?) of a category."""
    base = {"WORD": _WORD, "DIGIT": _DIGIT, "SPACE": _SPACE}
    neg = name.startswith("CATEGORY_NOT_")
    key = name.removeprefix("CATEGORY_NOT_").removeprefix("CATEGORY_")
    if key not in base:
        raise RegexError(f"character category {name}")
    return base[key], neg


def _utf8_multibyte(nfa: Nfa, nxt: int) -> int:
    """One non-ASCII UTF-8 character: a lead byte then 1 to 3 continuation bytes."""
    cont = frozenset(range(0x80, 0xC0))
    c1 = nfa.byteset(cont, nxt)
    c2 = nfa.byteset(cont, c1)
    c3 = nfa.byteset(cont, c2)
    two = nfa.byteset(frozenset(range(0xC2, 0xE0)), c1)
    three = nfa.byteset(frozenset(range(0xE0, 0xF0)), c2)
    four = nfa.byteset(frozenset(range(0xF0, 0xF5)), c3)
    return nfa.either(two, nfa.either(three, four))


def _char_class(nfa: Nfa, ascii_set: frozenset[int], negated: bool, nxt: int) -> int:
    if not negated:
        return nfa.byteset(ascii_set, nxt)
    return nfa.either(nfa.byteset(_ASCII - ascii_set, nxt), _utf8_multibyte(nfa, nxt))


def _in(items: list) -> tuple[frozenset[int], bool]:  # type: ignore[type-arg]
    chars: set[int] = set()
    negated = False
    neg_cats: list[frozenset[int]] = []
    for op, av in items:
        op = str(op)
        if op == "NEGATE":
            negated = True
        elif op == "LITERAL":
            chars.add(av)
        elif op == "RANGE":
            chars.update(range(av[0], av[1] + 1))
        elif op == "CATEGORY":
            s, neg = _category(str(av))
            if neg:
                neg_cats.append(s)
            else:
                chars |= s
        else:
            raise RegexError(f"{op} in a character class")
    if any(c >= 128 for c in chars):
        raise RegexError("a non-ASCII character in a character class")
    if neg_cats:
        if negated or len(neg_cats) > 1 or chars:
            raise RegexError("a negated category mixed with other class items")
        return neg_cats[0], True
    return frozenset(chars), negated


def _seq(nfa: Nfa, items: list, nxt: int) -> int:  # type: ignore[type-arg]
    for op, av in reversed(items):
        nxt = _item(nfa, str(op), av, nxt)
    return nxt


def _item(nfa: Nfa, op: str, av: object, nxt: int) -> int:
    if op == "LITERAL":
        return nfa.byteset(frozenset([av]), nxt)  # type: ignore[list-item]
    if op == "NOT_LITERAL":
        if av >= 128:  # type: ignore[operator]
            raise RegexError("a negated non-ASCII literal")
        return _char_class(nfa, frozenset([av]), True, nxt)  # type: ignore[list-item]
    if op == "ANY":
        return _char_class(nfa, frozenset(b"\n"), True, nxt)
    if op == "IN":
        s, neg = _in(av)  # type: ignore[arg-type]
        return _char_class(nfa, s, neg, nxt)
    if op == "SUBPATTERN":
        _group, add, remove, sub = av  # type: ignore[misc]
        if add or remove:
            raise RegexError("inline flags")
        return _seq(nfa, list(sub), nxt)
    if op == "BRANCH":
        _, alts = av  # type: ignore[misc]
        starts = [_seq(nfa, list(a), nxt) for a in alts]
        s = starts[-1]
        for t in reversed(starts[:-1]):
            s = nfa.either(t, s)
        return s
    if op in ("MAX_REPEAT", "MIN_REPEAT"):  # greedy or lazy: one meaning for a full match
        lo, hi, sub = av  # type: ignore[misc]
        from re._constants import MAXREPEAT  # type: ignore[import-not-found]

        sub = list(sub)
        if hi == MAXREPEAT:  # lo copies, then a loop
            loop = nfa.add(SPLIT, -1, nxt)
            nfa.out1[loop] = _seq(nfa, sub, loop)
            s = loop
        else:  # lo copies, then (hi - lo) optional ones, nested
            s = nxt
            for _ in range(hi - lo):
                s = nfa.either(_seq(nfa, sub, s), nxt)
        for _ in range(lo):
            s = _seq(nfa, sub, s)
        return s
    if op == "AT":
        kind = _ASSERTS.get(str(av))
        if kind is None:
            raise RegexError(str(av))
        return nfa.add(ASSERT, nxt, -1, kind)
    raise RegexError(op.lower().replace("_", " "))


def compile_nfa(pattern: str) -> tuple[Nfa, int]:
    """(the NFA, its start state) of `pattern`; RegexError names what is not supported."""
    import re
    from re import _parser  # type: ignore[attr-defined]

    try:
        parsed = _parser.parse(pattern.encode("utf-8"))
    except re.error as e:
        raise RegexError(f"invalid pattern: {e}") from None
    nfa = Nfa()
    match = nfa.add(MATCH)
    start = _seq(nfa, list(parsed), match)
    return nfa, start


def _check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind != "S":
        return "RegexFullMatch takes strings"
    try:
        compile_nfa(str(node.attr("pattern", "")))
    except RegexError as e:
        return f"RegexFullMatch: the pattern uses {e}, which the C matcher does not support"
    return None


_SIM = """static int o2e_isword(char c) {  /* RE2's \\w: ASCII */
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
/* full match of s against the NFA (kind, out1, out2, arg, sets): Thompson simulation,
 * `cur` / `nxt` / `stack` work arrays of n_states entries */
static int o2e_nfa_fullmatch(const char *s, int start, int n_states, const uint8_t *kind,
                             const int16_t *out1, const int16_t *out2, const uint8_t *arg,
                             const uint8_t (*sets)[32], uint8_t *cur, uint8_t *nxt, int16_t *stack) {
  const size_t n = strlen(s);
  for (size_t p = 0;; ++p) {
    /* the closure of the states entered at p (start at p == 0), through SPLIT and ASSERT */
    uint8_t *on = p == 0 ? cur : nxt;
    int top = 0;
    if (p == 0) {
      memset(cur, 0, (size_t)n_states);
      stack[top++] = (int16_t)start;
    } else {
      for (int q = 0; q < n_states; ++q) if (nxt[q]) stack[top++] = (int16_t)q;
      memset(nxt, 0, (size_t)n_states);
    }
    const int prev_w = p > 0 && o2e_isword(s[p - 1]);
    const int next_w = p < n && o2e_isword(s[p]);
    memset(on, 0, (size_t)n_states);
    while (top > 0) {
      const int q = stack[--top];
      if (q < 0 || on[q]) continue;
      on[q] = 1;
      if (kind[q] == 1) { stack[top++] = out2[q]; stack[top++] = out1[q]; }
      else if (kind[q] == 2) {
        const int ok = arg[q] == 0 ? p == 0 : arg[q] == 1 ? p == n
                     : arg[q] == 2 ? prev_w != next_w : prev_w == next_w;
        if (ok) stack[top++] = out1[q];
      }
    }
    if (on != cur) memcpy(cur, on, (size_t)n_states);
    if (p == n) {
      for (int q = 0; q < n_states; ++q) if (cur[q] && kind[q] == 3) return 1;
      return 0;
    }
    /* consume byte p */
    const unsigned char c = (unsigned char)s[p];
    int any = 0;
    memset(nxt, 0, (size_t)n_states);
    for (int q = 0; q < n_states; ++q)
      if (cur[q] && kind[q] == 0 && (sets[arg[q]][c >> 3] >> (c & 7) & 1)) { nxt[out1[q]] = 1; any = 1; }
    if (!any) return 0;
  }
}"""


def _ints(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs)


@register_op("RegexFullMatch", check=_check)
def regex_full_match(ctx: NodeContext) -> str:
    if ctx.y(0).size == 0:
        return "/* empty */"
    nfa, start = compile_nfa(str(ctx.attr("pattern", "")))
    ns = len(nfa.kind)
    if max(nfa.arg, default=0) > 255:
        raise RegexError("more than 256 byte sets")
    ctx.helper("o2e_nfa_fullmatch", _SIM)
    fn = ctx.unique("o2e_regex")
    sets = ",\n  ".join(
        "{"
        + ", ".join(str(sum(1 << b for b in range(8) if 8 * i + b in s)) for i in range(32))
        + "}"
        for s in nfa.sets
    )
    ctx.helper(
        fn,
        f"""static int {fn}(const char *s) {{
  static const uint8_t kind[{ns}] = {{{_ints(nfa.kind)}}};
  static const int16_t out1[{ns}] = {{{_ints(nfa.out1)}}};
  static const int16_t out2[{ns}] = {{{_ints(nfa.out2)}}};
  static const uint8_t arg[{ns}] = {{{_ints(nfa.arg)}}};
  static const uint8_t sets[{max(len(nfa.sets), 1)}][32] = {{
  {sets or "{0}"}
  }};
  uint8_t cur[{ns}], nxt[{ns}];
  int16_t stack[{3 * ns + 2}];
  return o2e_nfa_fullmatch(s, {start}, {ns}, kind, out1, out2, arg, sets, cur, nxt, stack);
}}""",
    )
    return elementwise(ctx, [ctx.x(0)], ctx.y(0), f"{fn}(a.s)")
