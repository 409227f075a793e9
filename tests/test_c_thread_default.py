"""convert --max-threads has one default, owned by backends/c/device.py (MAX_THREADS): the
option, the phases' Options, the emitter, the writer and the generic device read it there
instead of restating the number (issue 32)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from onnx2edge.backends.c import device, phases, writer
from onnx2edge.backends.c.backend import CBackend
from onnx2edge.backends.c.emitter import ModelEmitter

C = Path(device.__file__).parent


def _number(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _literal_thread_defaults(source: str) -> list[str]:
    """Whole numbers written as a max_threads default or value (line: name)."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.arguments):
            args = [*n.posonlyargs, *n.args]
            pairs = [
                *zip(args[len(args) - len(n.defaults) :], n.defaults, strict=True),
                *zip(n.kwonlyargs, n.kw_defaults, strict=True),
            ]
            found += [
                f"{d.lineno}: {a.arg}"
                for a, d in pairs
                if "max_threads" in a.arg.lower() and _number(d)
            ]
        elif isinstance(n, ast.AnnAssign | ast.Assign) and _number(n.value):
            targets = [n.target] if isinstance(n, ast.AnnAssign) else n.targets
            found += [
                f"{n.lineno}: {t.id}"
                for t in targets
                if isinstance(t, ast.Name) and "max_threads" in t.id.lower()
            ]
    return found


def test_the_scan_sees_a_restated_default() -> None:
    assert _literal_thread_defaults("def f(max_threads: int = 4): pass")
    assert _literal_thread_defaults("class O:\n    max_threads: int = 4")
    assert _literal_thread_defaults("MAX_THREADS = 4")
    assert not _literal_thread_defaults("def f(max_threads: int = MAX_THREADS): pass")


def test_only_device_states_the_thread_default() -> None:
    found = {
        str(p.relative_to(C)): hits
        for p in sorted(C.rglob("*.py"))
        if (hits := _literal_thread_defaults(p.read_text()))
    }
    assert set(found) == {"device.py"}, found
    assert [h.split(": ")[1] for h in found["device.py"]] == ["MAX_THREADS", "MAX_THREADS_LIMIT"]


def test_every_reader_has_the_same_default() -> None:
    n = device.MAX_THREADS
    assert phases.Options().max_threads == n
    assert inspect.signature(ModelEmitter).parameters["max_threads"].default == n
    assert inspect.signature(writer.write_model).parameters["max_threads"].default == n
    assert device.GENERIC.threads == n
    (opt,) = [o for o in CBackend.options if o.name == "max_threads"]
    assert opt.default == n
    assert CBackend().normalize_options({})["max_threads"] == n
