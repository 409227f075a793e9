"""The public declarations of a Swift module's sources, normalised so they compare with
apple_api.TABLE: `public`/`open` types and their `public`/`open` members, protocol
requirements (marked `optional` when a protocol extension gives a default, which is how the CPU
model of MPS writes an Objective-C `@optional` member), and the `@available(iOS ...)` each
carries. `@_spi(...)`, `override` and non-public declarations are left out: generated code
cannot see the first, the second are the superclass's, the last are the model's own.

A small reader for the subset of Swift the simulator is written in (no string interpolation
holding braces outside function bodies, one declaration a line or a parenthesised run of lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TYPE_RE = re.compile(
    r"^(?:(?:public|open|final)\s+)*(class|struct|enum|protocol|extension)\s+(\w+)\s*(?::\s*(.*))?$"
)
AVAILABLE_RE = re.compile(r"@available\(iOS ([\d.]+)")


@dataclass(frozen=True)
class Decl:
    owner: str  # the type, or "-" for a top-level function
    signature: str  # normalised declaration, e.g. "var width: Int { get }"
    ios: str | None  # from @available(iOS x, ...), None when not written


def _strip_comments(text: str) -> str:
    out: list[str] = []
    i, n, in_str = 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _statements(text: str) -> list[tuple[int, str, bool, str]]:
    """(brace depth, statement, opens a block, block text) for every statement; a statement
    ends at a newline outside parentheses or at the `{` that opens its block."""
    text = _strip_comments(text)
    result: list[tuple[int, str, bool, str]] = []
    depth = paren = 0
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':  # copy a string literal whole
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            buf.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([":
            paren += 1
        elif c in ")]":
            paren -= 1
        if c == "{" and paren == 0:
            # find the block's extent
            level, j = 1, i + 1
            while j < n and level:
                if text[j] == "{":
                    level += 1
                elif text[j] == "}":
                    level -= 1
                j += 1
            block = text[i + 1 : j - 1]
            result.append((depth, " ".join("".join(buf).split()), True, block))
            buf = []
            i = j
            continue
        if c == "\n" and paren == 0:
            stmt = " ".join("".join(buf).split())
            if stmt:
                result.append((depth, stmt, False, ""))
            buf = []
        else:
            buf.append(c)
        i += 1
    stmt = " ".join("".join(buf).split())
    if stmt:
        result.append((depth, stmt, False, ""))
    # an attribute on a line of its own belongs to the next statement
    merged: list[tuple[int, str, bool, str]] = []
    pending = ""
    joined: list[tuple[int, str, bool, str]] = []
    for d, st, op, bl in result:  # `case a, b,` continued on the next line
        if joined and not joined[-1][2] and joined[-1][1].endswith(",") and joined[-1][0] == d:
            joined[-1] = (d, joined[-1][1] + " " + st, op, bl)
        else:
            joined.append((d, st, op, bl))
    for d, st, op, bl in joined:
        if not op and re.fullmatch(r"(@\w+(\([^)]*\))?\s*)+", st):
            pending += st + " "
            continue
        merged.append((d, pending + st, op, bl))
        pending = ""
    return merged


def _split_top(s: str, sep: str = ",") -> list[str]:
    parts, level, cur = [], 0, []
    for c in s:
        if c in "([<":
            level += 1
        elif c in ")]>":
            level -= 1
        if c == sep and level == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _params(inner: str) -> str:
    out = []
    for p in _split_top(inner):
        p = p.split("=")[0].strip()  # default value
        names, _, typ = p.partition(":")
        label = names.split()[0]
        typ = " ".join(typ.replace("@escaping", "").split())
        out.append(f"{label}: {typ}")
    return ", ".join(out)


def _attrs(stmt: str) -> tuple[str, str | None, bool]:
    """(statement without leading attributes, iOS availability, is SPI)."""
    ios, spi = None, False
    while stmt.startswith("@"):
        m = re.match(r"@\w+(\([^)]*\))?\s*", stmt)
        assert m, stmt
        attr = m.group(0)
        if attr.startswith("@available"):
            a = AVAILABLE_RE.match(attr)
            ios = a.group(1) if a else ios
        if attr.startswith("@_spi"):
            spi = True
        stmt = stmt[m.end() :]
    return stmt, ios, spi


def _member(stmt: str, owner: str, block: str | None, in_protocol: bool) -> str | None:
    """The normalised signature of a member statement, or None if it is not public."""
    words = stmt.split()
    mods = []
    while words and words[0] in (
        "public",
        "open",
        "final",
        "override",
        "required",
        "convenience",
        "class",
        "static",
        "private(set)",
        "internal(set)",
        "fileprivate(set)",
        "@discardableResult",
        "@inline(__always)",
    ):
        mods.append(words.pop(0))
    if not in_protocol and not ({"public", "open"} & set(mods)):
        return None
    if "override" in mods:
        return None
    rest = " ".join(words)
    prefix = "class " if "class" in mods else "static " if "static" in mods else ""
    m = re.match(r"^(init\??)\((.*)\)(.*)$", rest)
    if m:
        return f"{m.group(1)}({_params(m.group(2))})"
    m = re.match(r"^func (\w+)\((.*)\)\s*(?:->\s*(.+))?$", rest)
    if m:
        ret = f" -> {m.group(3).strip()}" if m.group(3) else ""
        return f"{prefix}func {m.group(1)}({_params(m.group(2))}){ret}"
    m = re.match(
        r"^(var|let) (\w+)\s*(?::\s*([^={]+?))?\s*(=.*|\{ *get *\}|\{ *get set *\})?$", rest
    )
    if m:
        kind, name, typ, tail = m.groups()
        if typ is None:  # only `static let x = Owner(...)` may leave its type to inference
            if not (prefix == "static " and (tail or "").startswith(f"= {owner}(")):
                raise ValueError(f"{owner}: give `{stmt}` an explicit type")
            typ = owner
        typ = typ.strip()
        read_only = (
            kind == "let"
            or any(s in mods for s in ("private(set)", "internal(set)", "fileprivate(set)"))
            or (block is not None and "set" not in block)
            or (tail or "").replace(" ", "") == "{get}"
        )
        return f"{prefix}var {name}: {typ}{' { get }' if read_only else ''}"
    m = re.match(r"^typealias (\w+)", rest)
    if m:
        return f"typealias {m.group(1)}"
    raise ValueError(f"{owner}: cannot read the declaration `{stmt}`")


def public_api(files: list[Path]) -> set[Decl]:
    """Every public declaration of the Swift sources `files` (one module)."""
    decls: set[Decl] = set()
    protocol_members: dict[str, dict[str, str | None]] = {}
    defaults: dict[str, set[str]] = {}
    for path in files:
        for depth, stmt, opens, block in _statements(path.read_text()):
            if depth != 0:
                continue
            stmt, ios, spi = _attrs(stmt)
            m = TYPE_RE.match(stmt)
            if opens and m:
                kind, name, inherits = m.groups()
                is_public = bool(re.match(r"^(?:final\s+)?(public|open)\b", stmt))
                if kind == "extension":
                    for mdepth, mstmt, mopens, mblock in _statements(block):
                        mstmt, _, mspi = _attrs(mstmt)
                        if mdepth == 0 and not mspi:
                            sig = _member(mstmt, name, mblock if mopens else None, False)
                            if sig:
                                defaults.setdefault(name, set()).add(sig)
                    continue
                if spi or not is_public:
                    continue
                parents = [p.strip() for p in _split_top(inherits or "")]
                if kind == "class":
                    head = f"class {name}" + (f": {parents[0]}" if parents else "")
                elif kind == "protocol":
                    head = f"protocol {name}" + (
                        f": {', '.join(sorted(parents))}" if parents else ""
                    )
                elif kind == "enum":
                    head = f"enum {name}" + (f": {parents[0]}" if parents else "")
                else:
                    head = f"struct {name}"
                decls.add(Decl(name, head, ios))
                members: dict[str, str | None] = {}
                for mdepth, mstmt, mopens, mblock in _statements(block):
                    if mdepth != 0:
                        continue
                    mstmt, mios, mspi = _attrs(mstmt)
                    if mspi:
                        continue
                    if kind == "enum" and mstmt.startswith("case "):
                        for case in _split_top(mstmt[5:]):
                            members[f"case {case.split('=')[0].strip()}"] = mios
                        continue
                    sig = _member(mstmt, name, mblock if mopens else None, kind == "protocol")
                    if sig:
                        members[sig] = mios
                if kind == "protocol":
                    protocol_members[name] = members
                else:
                    decls.update(Decl(name, sig, a) for sig, a in members.items())
            elif not opens or depth == 0:
                if re.match(r"^public (func|typealias) ", stmt):
                    sig = _member(stmt, "-", block if opens else None, False)
                    if sig:
                        decls.add(Decl("-", sig, ios))
    for proto, members in protocol_members.items():
        for sig, ios in members.items():
            optional = sig in defaults.get(proto, set())
            decls.add(Decl(proto, f"optional {sig}" if optional else sig, ios))
    return decls
