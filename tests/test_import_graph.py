"""The package's import graph is a DAG: at import time (no module, while it is being imported,
imports one that is still half-initialised: issue 10, deliverable 5) and with the imports
inside functions counted too (no design circle that a lazy import only hides: issue 32).

Read from the source (ast), not by importing: the edges are the import statements a module
runs when it is imported, i.e. at module level, outside `if TYPE_CHECKING:`. Imports inside
functions run later, at call time, and are not edges there; a second graph adds them, to find
the circles that a lazy import only hides ("X imports this module").

The C op modules (backends/c/ops/*.py that register emitters) do not import one another:
what two op families share lives in a helper module there (common, loops, checks, gemm, ...).
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


def _all_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, function-level ones included, except under TYPE_CHECKING."""
    typing_only = {
        id(n)
        for st in ast.walk(tree)
        if isinstance(st, ast.If) and "TYPE_CHECKING" in ast.unparse(st.test)
        for b in st.body
        for n in ast.walk(b)
    }
    return [
        st
        for st in ast.walk(tree)
        if isinstance(st, ast.Import | ast.ImportFrom) and id(st) not in typing_only
    ]


def import_graph(function_level: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        sts = _all_statements(tree) if function_level else _import_time_statements(tree.body)
        graph[name] = set().union(*(_targets(name, is_pkg, st, set(mods)) for st in sts))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The circles of the graph: its strongly connected components of more than one module
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while not comp or w != v:
                w = stack.pop()
                comp.add(w)
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


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
    assert "onnx2edge.backends.c.ops.conv" in graph and "onnx2edge.api" in graph
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
    assert strongly_connected(graph) == [{"p.a", "p.b", "p.c"}]
    # counting imports inside functions, p.b's lazy import of p.a closes a circle
    lazy = {
        m: set().union(
            *(_targets(m, m == "p", st, set(mods)) for st in _all_statements(ast.parse(s)))
        )
        for m, s in src.items()
    }
    assert lazy["p.b"] == {"p.a"} and lazy["p.a"] == {"p.b"}
    assert strongly_connected(lazy) == [{"p.a", "p.b"}]


def test_no_circle_behind_function_level_imports() -> None:
    """With imports inside functions counted too, the package's modules form no circle at
    all (issue 32, item 5): what two layers share lives in the lower one (frontend.handle:
    the loaded model and its label; ir.expose: tensors as outputs; compare: the numerical
    comparison; edit's package: the rules, not the commands), a command never reaches back
    up to the API."""
    found = strongly_connected(import_graph(function_level=True))
    assert found == [], "import circle: " + "; ".join(" <-> ".join(sorted(c)) for c in found)
    cycle = find_cycle(import_graph(function_level=True))
    assert cycle is None, " -> ".join(cycle or [])


C_OPS = "onnx2edge.backends.c.ops"
# Op modules that still reach into a sibling, with the reason (int8 owns quant.py)
KNOWN_SIDEWAYS = {("matmul", "quant")}  # integer MatMul is quant.integer_matmul


def _registers_ops(path: Path) -> bool:
    return any(
        isinstance(d, ast.Call) and getattr(d.func, "id", "") == "register_op"
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.FunctionDef)
        for d in n.decorator_list
    )


def test_c_op_modules_do_not_import_each_other() -> None:
    mods = _modules()
    ops = {
        name.removeprefix(C_OPS + "."): path
        for name, (path, _) in mods.items()
        if name.startswith(C_OPS + ".") and name.count(".") == C_OPS.count(".") + 1
    }
    op_modules = {m for m, path in ops.items() if _registers_ops(path) and m != "TEMPLATE"}
    assert {"conv", "conv_transpose", "matmul", "pool", "elementwise"} <= op_modules
    graph = import_graph(function_level=True)
    sideways = {
        (m, t.removeprefix(C_OPS + "."))
        for m in ops
        for t in graph[f"{C_OPS}.{m}"]
        if t.removeprefix(C_OPS + ".") in op_modules
    }
    helpers_into_ops = {(m, t) for m, t in sideways if m not in op_modules}
    assert helpers_into_ops == set(), f"helper modules importing op modules: {helpers_into_ops}"
    assert sideways - KNOWN_SIDEWAYS == set(), f"op modules importing op modules: {sideways}"
    assert KNOWN_SIDEWAYS <= sideways, "untied: drop it from KNOWN_SIDEWAYS"


MPS_OPS = "onnx2edge.backends.mps.ops"


def test_mps_op_modules_do_not_import_each_other() -> None:
    """backends/mps/ops/*.py (one module per op family) share helpers through ops/common.py and
    mps/core.py only: an op module importing a sibling op module fails here."""
    mods = _modules()
    ops = {
        name.removeprefix(MPS_OPS + ".")
        for name in mods
        if name.startswith(MPS_OPS + ".") and name.count(".") == MPS_OPS.count(".") + 1
    }
    assert {"common", "conv", "pool", "neuron", "norm", "binary", "shape"} <= ops
    graph = import_graph(function_level=True)
    sideways = {
        (m, t.removeprefix(MPS_OPS + "."))
        for m in ops
        for t in graph[f"{MPS_OPS}.{m}"]
        if t.removeprefix(MPS_OPS + ".") in ops - {"common"}
    }
    assert sideways == set(), f"MPS op modules importing one another: {sideways}"
