"""No emitter or rewrite rule retypes an attribute default (issue 10 item 1, issue 32 item 1).

An op's defaults are read from its ONNX schema (semantics/attrs.py: `attr`, `NodeContext.attr`,
the typed records of semantics/records.py), never restated: a literal at a call site can drift
from the spec (Resize's coordinate_transformation_mode was retyped in four files, Softmax's
opset-dependent axis in two). This AST scan fails on any `X.attr("name", <literal>)` call - or
a conditional of literals such as `-1 if opset >= 13 else 1` - in backends/ or edit/, except the
allow-list below, where the schema has no default to read. A computed fallback (one per
spatial axis, the input's rank) passes: the schema cannot express it.

A second scan (issue 32 item 1) fails on any by-name read - `X.attr("name", ...)` or
`semantics.attrs.attr(node, "name", ...)` - of an attribute that only ops with a typed record
declare (semantics/families.py: `perm` is Transpose's, `count_include_pad` AveragePool's,
`select_last_index` ArgMax / ArgMin's...): those emitters read the record, where the opset
differences and the validation live. Names shared with ops without a record (`axis`, `mode`)
cannot be told apart by the scan and stay out of it.

Run as a script to list every call with a literal default.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx.defs
import onnx.helper

import onnx2edge.semantics  # noqa: F401  (registers the o2e schemas of fused ops)

SRC = Path(__file__).resolve().parents[1] / "src" / "onnx2edge"
SCANNED = (SRC / "backends", SRC / "edit")

# (file name, attribute) -> why the literal stays: the schema declares no default for it
ALLOWED: dict[tuple[str, str], str] = {
    ("regex.py", "pattern"): "RegexFullMatch: no schema default (required in practice); '' lets "
    "the check refuse a malformed node instead of crashing",
    ("strings.py", "delimiter"): "StringSplit: no schema default; the spec's text: absent or "
    "empty splits at runs of whitespace",
    ("tfidf.py", "pool_int64s"): "TfIdfVectorizer: no schema default; absent means empty",
    ("tfidf.py", "ngram_counts"): "TfIdfVectorizer: no schema default; absent means empty",
    ("tfidf.py", "ngram_indexes"): "TfIdfVectorizer: no schema default; absent means empty",
    ("tfidf.py", "weights"): "TfIdfVectorizer: no schema default; absent means weight 1",
}


@dataclass(frozen=True)
class Call:
    path: Path
    line: int
    name: str
    literal: Any


def _literal(e: ast.expr) -> tuple[bool, Any]:
    """(True, value) for a literal or a conditional whose branches are literals."""
    if isinstance(e, ast.IfExp):
        ok_a, a = _literal(e.body)
        ok_b, b = _literal(e.orelse)
        return (ok_a and ok_b), (a, b)
    try:
        return True, ast.literal_eval(e)
    except ValueError:
        return False, None


def calls() -> Iterator[Call]:
    """Every `X.attr("name", <literal>)` call in the scanned source."""
    for root in SCANNED:
        for path in sorted(root.rglob("*.py")):
            for n in ast.walk(ast.parse(path.read_text())):
                if not (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "attr"
                    and len(n.args) == 2
                    and isinstance(n.args[0], ast.Constant)
                    and isinstance(n.args[0].value, str)
                ):
                    continue
                ok, lit = _literal(n.args[1])
                if ok:
                    yield Call(path, n.lineno, n.args[0].value, lit)


def _has_default(name: str, literal: Any) -> list[str]:
    """The ops (any domain onnx knows) declaring a default for `name` equal to `literal`."""
    out = []
    for s in onnx.defs.get_all_schemas_with_history():
        a = s.attributes.get(name)
        if a is not None and a.default_value.name:
            v = onnx.helper.get_attribute_value(a.default_value)
            if (v.decode() if isinstance(v, bytes) else v) == literal:
                out.append(f"{s.domain or 'ai.onnx'}:{s.name}-{s.since_version}")
    return out


def test_the_scan_sees_attr_calls() -> None:
    """The scan parses the files it claims to (a moved folder must not make it vacuous)."""
    n = 0
    for root in SCANNED:
        for path in root.rglob("*.py"):
            n += path.read_text().count(".attr(")
    assert n > 100, f"only {n} .attr( calls under {SCANNED}: did the folders move?"
    assert {p.name for p in (SRC / "backends").rglob("*.py")} >= {"resize.py", "mil.py"}


def test_no_literal_attribute_default_in_emitters_or_rules() -> None:
    bad = [
        f"{c.path.relative_to(SRC)}:{c.line} .attr({c.name!r}, {c.literal!r})"
        for c in calls()
        if (c.path.name, c.name) not in ALLOWED
    ]
    assert not bad, (
        "attribute defaults retyped at the call site: read the schema's (semantics.attrs.attr, "
        "ctx.attr(name), a semantics.records record), or allow-list with the reason the schema "
        "has none:\n" + "\n".join(bad)
    )


def test_every_allowed_literal_is_still_used_and_has_no_schema_default() -> None:
    """The allow-list stays exact: each entry is used, and no onnx schema of the ops it names
    gained a default since (then the literal must go)."""
    used = {(c.path.name, c.name) for c in calls()}
    assert set(ALLOWED) <= used, f"stale allow-list entries: {set(ALLOWED) - used}"
    for op, names in {
        "RegexFullMatch": ["pattern"],
        "StringSplit": ["delimiter"],
        "TfIdfVectorizer": ["pool_int64s", "ngram_counts", "ngram_indexes", "weights"],
    }.items():
        sch = onnx.defs.get_schema(op)
        for name in names:
            assert not sch.attributes[name].default_value.name, f"{op}.{name} has a default now"


# (file name, attribute) -> why a by-name read of a recorded attribute stays
RECORD_READ_ALLOWED: dict[tuple[str, str], str] = {
    ("common.py", "output_shape"): "Core ML refuses a ConvTranspose that has an output_shape: "
    "a presence test, no value is read",
}


def recorded_only_attributes() -> set[str]:
    """Attribute names that only ops with a semantics record declare (any opset, ONNX's
    default domain)."""
    from onnx2edge.semantics.families import RECORDS

    declared: dict[str, set[str]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx"):
            for name in s.attributes:
                declared.setdefault(name, set()).add(s.name)
    return {name for name, ops in declared.items() if ops <= set(RECORDS)}


def by_name_reads(names: set[str]) -> Iterator[Call]:
    """Every `X.attr("name", ...)` / `attr(node, "name", ...)` of one of `names`."""
    for root in SCANNED:
        for path in sorted(root.rglob("*.py")):
            for n in ast.walk(ast.parse(path.read_text())):
                if not isinstance(n, ast.Call):
                    continue
                f, a = n.func, n.args
                arg = None
                if isinstance(f, ast.Attribute) and f.attr == "attr" and a:
                    arg = a[0]
                elif isinstance(f, ast.Name) and f.id == "attr" and len(a) >= 2:
                    arg = a[1]
                if isinstance(arg, ast.Constant) and arg.value in names:
                    yield Call(path, n.lineno, arg.value, None)


def test_recorded_attributes_are_read_through_their_record() -> None:
    names = recorded_only_attributes()
    # the scan is not vacuous: the families' own attributes are in it
    assert {"perm", "count_include_pad", "select_last_index", "num_groups", "transA"} <= names
    bad = [
        f"{c.path.relative_to(SRC)}:{c.line} reads {c.name!r} by name"
        for c in by_name_reads(names)
        if (c.path.name, c.name) not in RECORD_READ_ALLOWED
    ]
    assert not bad, (
        "attributes of ops with a semantics record read by name: read the record "
        "(semantics/families.py lists the reader of each op), or allow-list with the reason:\n"
        + "\n".join(bad)
    )
    used = {(c.path.name, c.name) for c in by_name_reads(names)}
    assert set(RECORD_READ_ALLOWED) <= used, f"stale: {set(RECORD_READ_ALLOWED) - used}"


if __name__ == "__main__":
    for c in calls():
        tag = "ALLOWED" if (c.path.name, c.name) in ALLOWED else "RETYPED"
        print(f"{tag} {c.path.relative_to(SRC)}:{c.line} {c.name}={c.literal!r}")
        print(f"    schemas with this default: {_has_default(c.name, c.literal)[:6]}")
