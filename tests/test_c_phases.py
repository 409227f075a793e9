"""The C backend's pipeline is data (backends/c/phases.py): named phases in order, each
requirement provided by an earlier phase; the emitter reads their results and never calls back
into passes/."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import frontend
from onnx2edge.api import DEFAULT_PASSES
from onnx2edge.backends.c import emitter as emitter_mod
from onnx2edge.backends.c import phases
from onnx2edge.backends.c.backend import CBackend
from onnx2edge.errors import UnsupportedError
from onnx2edge.ir import TensorType, Value
from onnx2edge.passes import run_passes
from onnx2edge.pipeline import Phase, check_order

SRC = Path(__file__).resolve().parents[1] / "src" / "onnx2edge"


def test_phase_list_is_data_in_order() -> None:
    names = [p.name for p in phases.C_PIPELINE]
    assert names == [
        "static_shapes",
        "if_guards",
        "bounded_outputs",
        "layout_plan",
        "concat_aliases",
        "emit",
        "residual_aliases",
        "arena_plan",
    ]
    assert len(set(names)) == len(names)
    fields = {f.name for f in dataclasses.fields(phases.Analyses)}
    provided: set[str] = set()
    for p in phases.C_PIPELINE:
        assert set(p.requires) <= provided, (p.name, set(p.requires) - provided)
        assert set(p.provides) <= fields, (p.name, set(p.provides) - fields)
        assert not set(p.provides) & provided, f"{p.name} provides a result twice"
        provided |= set(p.provides)
    # every result of the record is some phase's
    assert provided == fields
    # the arena is planned after the emitter wrote the code, the aliases before it
    assert names.index("concat_aliases") < names.index("emit") < names.index("arena_plan")


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, lazy (inside functions) and under TYPE_CHECKING included,
    as absolute dotted names."""
    pkg = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.extend(f"{mod}.{a.name}" for a in node.names)
    return out


def test_emitter_imports_nothing_from_passes() -> None:
    imported = _imports(SRC / "backends" / "c" / "emitter.py")
    assert any(m.startswith("onnx2edge.ir") for m in imported), imported  # the parser works
    assert [m for m in imported if m.startswith("onnx2edge.passes")] == []
    # nor plans: the aliasing and the arena plan are phases of their own
    assert not [
        m for m in imported if m.endswith(".plan") or "alias" in m or "nchwc_plan.plan" in m
    ]


def test_writer_only_assembles() -> None:
    """The writer runs the pipeline and reads its record; it plans nothing itself."""
    imported = _imports(SRC / "backends" / "c" / "writer.py")
    assert "onnx2edge.backends.c.phases.emit_model" in imported
    assert not [m for m in imported if "control_flow" in m or "alias" in m]
    assert "onnx2edge.backends.c.planner.plan" not in imported
    assert [m for m in imported if m.startswith("onnx2edge.passes")] == []


def test_runner_checks_the_declaration() -> None:
    g = _if_graph()

    def provides_x(graph, opts, res):  # type: ignore[no-untyped-def]
        return {"tensor_kinds": {}}

    bad_order = (
        phases.Phase("concat_aliases", phases._concat_aliases, requires=("tensor_kinds",)),
    )
    with pytest.raises(AssertionError, match="requires"):
        phases.run(bad_order, g, phases.Options())
    undeclared = (phases.Phase("x", provides_x, provides=("guards",)),)
    with pytest.raises(AssertionError, match="declared"):
        phases.run(undeclared, g, phases.Options())


def _if_graph() -> onnx.ModelProto:
    """y = If(sum(x) > 0) then x * 2 else x - 1: a condition known only at run time."""
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["x", "one"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _prepared(model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    g = frontend.load(model, quiet=True)
    return run_passes(g, (*DEFAULT_PASSES, *CBackend.required_passes))


def test_analyses_record_feeds_the_emitter() -> None:
    """The If guards and selects reach the emitter through the record, and the emitted code
    runs only the taken side."""
    g = _prepared(_if_graph())
    em, res = phases.emit_model(g)
    assert res.if_selects and res.guards
    assert em.analyses is res
    assert any(guard for guard in res.guards.values())
    code = "\n".join(res.blocks)
    assert "if (" in code and "memcpy(" in code
    # every arena tensor got an offset inside the arena
    for name, t in em.tensors.items():
        if t.kind == "arena":
            assert 0 <= res.offsets[name] <= res.arena - t.nbytes


def test_unsupported_builds_no_emitter(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _prepared(_if_graph())

    def boom(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("unsupported() built an emitter")

    monkeypatch.setattr(emitter_mod.ModelEmitter, "__init__", boom)
    assert CBackend().unsupported(g) == []


def test_dynamic_shape_refused_by_the_static_shapes_phase() -> None:
    """A tensor without a static shape stops the pipeline at its first phase, with why."""
    g = _prepared(_if_graph())
    name = g.nodes[-1].outputs[0]
    values = dict(g.values)
    values[name] = Value(name, TensorType(TensorProto.FLOAT, ("n", 3)))
    g = g.with_nodes(g.nodes, values=values)
    seen: list[str] = []
    pipeline = tuple(
        dataclasses.replace(p, fn=lambda g, o, r, p=p: seen.append(p.name) or p.fn(g, o, r))
        for p in phases.C_PIPELINE
    )
    with pytest.raises(UnsupportedError, match="no static shape"):
        phases.run(pipeline, g, phases.Options())
    assert seen == ["static_shapes"]


@pytest.mark.parametrize("pipeline", ["C_PIPELINE", "FRONTEND_PIPELINE", "UNFOLDED_PIPELINE"])
def test_pipelines_declared_soundly(pipeline: str) -> None:
    """Every requirement provided by an earlier phase, no result made twice, each phase's
    results fields of its record."""
    from onnx2edge.frontend import loader

    phases_list, record = {
        "C_PIPELINE": (phases.C_PIPELINE, phases.Analyses),
        "FRONTEND_PIPELINE": (loader.FRONTEND_PIPELINE, loader.Loaded),
        "UNFOLDED_PIPELINE": (loader.UNFOLDED_PIPELINE, loader.Loaded),
    }[pipeline]
    assert check_order(phases_list) == []
    fields = {f.name for f in dataclasses.fields(record)}
    assert {r for p in phases_list for r in p.provides} <= fields
    assert phases_list[-1].provides[-1] in ("graph", "arena")


def test_frontend_is_its_phase_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """frontend.load runs FRONTEND_PIPELINE, phase after phase, in its declared order."""
    from onnx2edge.frontend import loader

    seen: list[str] = []
    traced = tuple(
        dataclasses.replace(p, fn=lambda *a, p=p: seen.append(p.name) or p.fn(*a))
        for p in loader.FRONTEND_PIPELINE
    )
    monkeypatch.setattr(loader, "FRONTEND_PIPELINE", traced)
    g = frontend.load(_if_graph(), quiet=True)
    assert seen == [p.name for p in loader.FRONTEND_PIPELINE]
    # the run-time If, selected by the internal op
    assert [(n.domain, n.op_type) for n in g.nodes].count(("o2e", "IfSelect")) == 1
    assert not [n for n in g.nodes if n.doc_string]


def test_check_order_finds_faults() -> None:
    a = Phase("a", lambda: {}, requires=("x",), provides=("y",))
    b = Phase("b", lambda: {}, provides=("y",))
    assert check_order([a]) == ["phase a requires ['x'], provided by no earlier phase"]
    assert check_order([a], given=("x",)) == []
    assert check_order([b, b]) == ["phase b declared twice", "phase b provides ['y'] again"]


def test_bounded_outputs_are_an_internal_op() -> None:
    """Unique's data-dependent outputs pass through o2e.Bounded (no doc_string tag); the
    bounded_outputs phase finds them by graph output, the static inverse_indices is not one."""
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=1)
    f = helper.make_tensor_value_info
    outs = [
        f("y", TensorProto.FLOAT, ["u"]),
        f("i", TensorProto.INT64, ["u"]),
        f("inv", TensorProto.INT64, ["k"]),
        f("c", TensorProto.INT64, ["u"]),
    ]
    m = helper.make_model(
        helper.make_graph([node], "g", [f("x", TensorProto.FLOAT, [6])], outs),
        opset_imports=[helper.make_opsetid("", 11)],
    )
    g = _prepared(m)
    marks = [n for n in g.nodes if (n.domain, n.op_type) == ("o2e", "Bounded")]
    assert sorted(n.outputs[0] for n in marks) == ["c", "i", "y"]
    assert not [n for n in g.nodes if n.doc_string]
    _, res = phases.emit_model(g)
    assert res.bounded == {0: 0, 1: 0, 3: 0}
    assert CBackend().unsupported(g) == []
