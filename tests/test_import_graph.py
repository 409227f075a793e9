"""The package's import graph at import time is a DAG: no module, while it is being imported,
imports one that is still half-initialised (issue 10, deliverable 5).

Read from the source (ast), not by importing: the edges are the import statements a module
runs when it is imported, i.e. at module level, outside `if TYPE_CHECKING:`. Imports inside
functions run later, at call time, and are not edges here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import onnx2edge

PACKAGE = Path(onnx2edge.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return mods


def _import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module body runs (not in functions/classes)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for st in body:
        if isinstance(st, ast.Import | ast.ImportFrom):
            out.append(st)
        elif isinstance(st, ast.If):
            t = st.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
            ):
                out += _import_time_statements(st.orelse)
            else:
                out += _import_time_statements(st.body) + _import_time_statements(st.orelse)
        elif isinstance(st, ast.Try):
            for block in (st.body, st.orelse, st.finalbody, *(h.body for h in st.handlers)):
                out += _import_time_statements(block)
        elif isinstance(st, ast.With):
            out += _import_time_statements(st.body)
    return out


def _targets(
    module: str, is_pkg: bool, st: ast.Import | ast.ImportFrom, mods: set[str]
) -> set[str]:
    """The package modules `st` executes: each imported module and its packages, except the
    importer's own packages (already running, so importing them again is no edge)."""
    if isinstance(st, ast.Import):
        names = [a.name for a in st.names]
    else:
        base = module if is_pkg else module.rpartition(".")[0]
        for _ in range(st.level - 1):
            base = base.rpartition(".")[0]
        src = (f"{base}.{st.module}" if st.module else base) if st.level else (st.module or "")
        subs = [f"{src}.{a.name}" for a in st.names]
        # `from pkg import name` needs pkg itself unless every name is a submodule of it
        names = subs + ([] if all(s in mods for s in subs) else [src])
    parts = module.split(".")
    running = {".".join(parts[:i]) for i in range(1, len(parts))}
    out = set()
    for name in names:
        p = name.split(".")
        for i in range(1, len(p) + 1):
            m = ".".join(p[:i])
            if m in mods and m != module and (m not in running or m == name):
                out.add(m)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = set().union(
            *(_targets(name, is_pkg, st, set(mods)) for st in _import_time_statements(tree.body))
        )
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*stack[stack.index(w) :], w]
            if w not in state and (c := visit(w)):
                return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (c := visit(v)):
            return c
    return None


def test_import_graph_is_a_dag() -> None:
    graph = import_graph()
    assert "onnx2edge.backends.c.ops.nn" in graph and "onnx2edge.api" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle at import time: " + " -> ".join(cycle or [])


def test_cycles_are_found() -> None:
    """The checker sees a cycle, and takes only import-time statements as edges."""
    src = {
        "p": "from . import a\n",
        "p.a": "from .b import f\nif TYPE_CHECKING:\n    from .c import g\n",
        "p.b": "import os\ndef f():\n    from . import a\n",
        "p.c": "from .a import x\n",
    }
    mods = {m: Path(m) for m in src}
    graph = {
        m: set().union(
            *(
                _targets(m, m == "p", st, set(mods))
                for st in _import_time_statements(ast.parse(s).body)
            )
        )
        for m, s in src.items()
    }
    assert graph == {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": set(), "p.c": {"p.a"}}
    assert find_cycle(graph) is None
    graph["p.b"].add("p.c")
    assert find_cycle(graph) == ["p.a", "p.b", "p.c", "p.a"]
