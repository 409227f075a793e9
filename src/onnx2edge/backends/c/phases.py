"""The C backend's pipeline, declared as data (issue 32, item 3).

A convert is a list of named phases (`C_PIPELINE`), each a `Phase(name, fn, requires,
provides)`: `fn` reads the graph, the options and the results of earlier phases and returns
exactly the results it `provides`, which `run` stores in one `Analyses` record. The emitter
(emitter.py) only emits: it reads the analyses it needs (guards, If selects, layout plan,
Concat aliases) from that record and never calls back into passes/; the aliasing and the arena
plan run after it, on what it reports (steps, scratch, residual candidates); the writer
(writer.py) only assembles the record into files.

    static_shapes -> if_guards -> bounded_outputs -> layout_plan -> concat_aliases -> emit
                  -> residual_aliases -> arena_plan

The runner (`onnx2edge.pipeline.run`) checks the declaration as it goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import UnsupportedError
from ...ir import Graph
from ...ir.graph import STRING_DTYPE
from ...passes.bounded import bounded_axis
from ...passes.control_flow import if_name, is_if_select, is_select_of_if, runtime_if_guards
from ...passes.specialise import why_dynamic
from ...pipeline import Phase
from ...pipeline import run as run_phases
from ...semantics.fused import base_op
from ..refusal import Refusal
from .concat_alias import concat_aliases
from .device import GENERIC, MAX_THREADS, Device
from .emitter import (
    CTYPES,
    STORAGE_CTYPES,
    STORAGE_DTYPE_OPS,
    STRING_OPS,
    Guard,
    ModelEmitter,
    effective_kernel_options,
    op_key,
)
from .nchwc_plan import LayoutPlan, plan_layout
from .ops import load_all
from .ops.unsupported import UNSUPPORTED
from .planner import Buffer, plan
from .residual_alias import residual_aliases


@dataclass
class Analyses:
    """What the phases found, one field a result (the names phases declare). The emitter reads
    the analyses before `emit`, the writer everything."""

    # static_shapes: tensor name -> "input" | "output" | "arena" (every one static)
    tensor_kinds: dict[str, str] = field(default_factory=dict)
    # if_guards: node -> the run-time If conditions it runs under; the Where nodes emitted as
    # a copy of the taken side (passes/control_flow.py)
    guards: dict[str, Guard] = field(default_factory=dict)
    if_selects: frozenset[str] = frozenset()
    # bounded_outputs: graph output index -> the axis whose extent is only known at run time
    # (passes/bounded.py)
    bounded: dict[int, int] = field(default_factory=dict)
    # layout_plan: tensors kept channel-blocked between layers (nchwc_plan.py)
    layout_plan: LayoutPlan | None = None
    # concat_aliases: Concat input -> (output, byte offset) written in place (concat_alias.py)
    concat_aliases: dict[str, tuple[str, int]] = field(default_factory=dict)
    # emit: the emitter and what it wrote and reported
    emitter: ModelEmitter | None = None
    blocks: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    steps: dict[str, list[int]] = field(default_factory=dict)  # tensor -> steps using it
    scratch: list[Buffer] = field(default_factory=list)
    written_under: dict[str, Guard] = field(default_factory=dict)
    residual_candidates: dict[str, tuple[str, int]] = field(default_factory=dict)
    # residual_aliases: output -> root tensor whose buffer it takes (residual_alias.py)
    residual_inplace: dict[str, str] = field(default_factory=dict)
    # arena_plan: byte offsets in the arena, and its size (planner.py)
    offsets: dict[str, int] = field(default_factory=dict)
    arena: int = 0


@dataclass(frozen=True)
class Options:
    """The convert options the phases read (the writer's other options are its own)."""

    prefix: str = "model"
    weights_file: bool | None = None
    optimize: str = "speed"
    kernel_options: Mapping[str, str] = field(default_factory=dict)
    device: Device = GENERIC
    weights_fp16: bool = False
    max_threads: int = MAX_THREADS


# --- the phases ------------------------------------------------------------------------------
def _static_shapes(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    """Every tensor the code names has a static shape (else: why not, from the graph)."""
    kinds: dict[str, str] = {}
    for name in graph.inputs:
        kinds[name] = "input"
    for name in graph.outputs:
        if name not in kinds and name not in graph.initializers:
            kinds[name] = "output"
    for node in graph.nodes:
        for o in node.outputs:
            if o and o not in kinds:
                kinds[o] = "arena"
    for name in kinds:
        t = graph.type_of(name)
        if t is None or not t.is_static:
            raise UnsupportedError(why_dynamic(graph, name))
    return {"tensor_kinds": kinds}


def _if_guards(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    """A run-time If runs only its taken branch: its nodes are wrapped in `if` statements on
    their guards; the arena plan stays the straight-line one, which keeps every buffer of both
    branches valid whichever runs."""
    guards = runtime_if_guards(graph)
    selects = frozenset(n.name for n in graph.nodes if is_select_of_if(n))
    for n in graph.nodes:
        if n.name in selects and not is_if_select(graph, n):  # check_if_selects refused most
            raise UnsupportedError(
                f"node '{if_name(n)}' (op If): its branches' outputs differ in shape or type"
            )
    return {"guards": guards, "if_selects": selects}


def _bounded_outputs(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    axes = {i: bounded_axis(graph, n) for i, n in enumerate(graph.outputs)}
    return {"bounded": {i: a for i, a in axes.items() if a is not None}}


def _layout_plan(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    kernels = effective_kernel_options(opts.device, opts.kernel_options)
    return {"layout_plan": plan_layout(graph, kernels)}


def _concat_aliases(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    return {"concat_aliases": concat_aliases(graph, res.tensor_kinds, set(res.guards))}


def _emit(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    em = ModelEmitter(
        graph,
        res,
        prefix=opts.prefix,
        weights_file=opts.weights_file,
        optimize=opts.optimize,
        kernel_options=opts.kernel_options,
        device=opts.device,
        weights_fp16=opts.weights_fp16,
        max_threads=opts.max_threads,
    )
    out = em.emit()
    return {"emitter": em, **out}


def _residual_aliases(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    """Outputs written over their residual's buffer; never under a run-time If, never a
    Concat alias or target."""
    assert res.emitter is not None
    excluded = set(res.concat_aliases) | {y for y, _ in res.concat_aliases.values()}
    inplace = residual_aliases(
        {
            y: c
            for y, c in res.residual_candidates.items()
            if not res.guards.get(graph.nodes[c[1]].name)
        },
        res.steps,
        res.tensor_kinds,
        {n: _stored_nbytes(res, n, t) for n, t in res.emitter.tensors.items()},
        excluded,
    )
    return {"residual_inplace": inplace}


def _stored_nbytes(res: Analyses, name: str, t: Any) -> int:
    """A tensor's buffer: a channel-blocked one holds whole blocks (nchwc_plan)."""
    plan = res.layout_plan
    return t.nbytes if plan is None else plan.stored_nbytes(name, t.shape, t.nbytes)


def _arena_plan(graph: Graph, opts: Options, res: Analyses) -> dict[str, Any]:
    """One buffer an arena tensor (an alias takes its holder's), scratch (per-thread
    workspaces for `max_threads` slots, fp16 weights widened per layer), then offsets."""
    assert res.emitter is not None
    if res.emitter.fp16_keys:
        # a widened fp16 weight lives in its layer's scratch only: code outside every layer's
        # block (helpers, output copies) may not name it
        res.emitter.check_fp16_scope(res.tail)
    steps = res.steps
    # the root buffer of a residual chain lives until the last reader of any of its tensors
    chained: dict[str, list[int]] = {}
    for y, root in res.residual_inplace.items():
        chained.setdefault(root, []).extend(steps[y])
    # a concat output with aliased inputs is live from the first of their producers
    first: dict[str, int] = {}
    for x, (y, _) in res.concat_aliases.items():
        first[y] = min(first.get(y, min(steps[x])), min(steps[x]))
    buffers = []
    for name, t in res.emitter.tensors.items():
        if t.kind != "arena" or name in res.concat_aliases or name in res.residual_inplace:
            continue
        used = steps.get(name, [0]) + ([first[name]] if name in first else [])
        used += chained.get(name, [])
        buffers.append(
            Buffer(
                name,
                _stored_nbytes(res, name, t),
                min(used),
                max(used),
                res.written_under.get(name, ()),
            )
        )
    offsets, arena = plan(buffers + res.scratch)
    for x, (y, off) in res.concat_aliases.items():
        offsets[x] = offsets[y] + off
    for y, root in res.residual_inplace.items():
        offsets[y] = offsets[root]
    return {"offsets": offsets, "arena": arena}


C_PIPELINE: tuple[Phase, ...] = (
    Phase("static_shapes", _static_shapes, provides=("tensor_kinds",)),
    Phase("if_guards", _if_guards, provides=("guards", "if_selects")),
    Phase("bounded_outputs", _bounded_outputs, provides=("bounded",)),
    Phase("layout_plan", _layout_plan, provides=("layout_plan",)),
    Phase(
        "concat_aliases",
        _concat_aliases,
        requires=("tensor_kinds", "guards"),
        provides=("concat_aliases",),
    ),
    Phase(
        "emit",
        _emit,
        requires=("tensor_kinds", "guards", "if_selects", "layout_plan", "concat_aliases"),
        provides=(
            "emitter",
            "blocks",
            "tail",
            "steps",
            "scratch",
            "written_under",
            "residual_candidates",
        ),
    ),
    Phase(
        "residual_aliases",
        _residual_aliases,
        requires=("emitter", "residual_candidates", "guards", "steps", "tensor_kinds"),
        provides=("residual_inplace",),
    ),
    Phase(
        "arena_plan",
        _arena_plan,
        requires=(
            "emitter",
            "tail",
            "steps",
            "scratch",
            "written_under",
            "concat_aliases",
            "residual_inplace",
        ),
        provides=("offsets", "arena"),
    ),
)


def run(phases: Sequence[Phase], graph: Graph, opts: Options) -> Analyses:
    """Run `phases` in order on `graph`; their results in one record (pipeline.run)."""
    return run_phases(phases, Analyses(), graph, opts)


def emit_model(graph: Graph, **options: Any) -> tuple[ModelEmitter, Analyses]:
    """The C pipeline on `graph` (options: those of `Options`): the emitter and the record."""
    res = run(C_PIPELINE, graph, Options(**options))
    assert res.emitter is not None
    return res.emitter, res


def refusals(graph: Graph) -> list[Refusal]:
    """Every node the C backend cannot emit, as records (CBackend.check, the conformance
    harness); no emitter is built. A node with a tensor without a static shape is refused
    with the command that fixes the shape (Refusal.dynamic); a tensor no node touches
    without one raises, as the conversion would (static_shapes)."""
    ops = load_all()
    opset = graph.opset
    problems: list[Refusal] = []
    for node in graph.nodes:
        if is_select_of_if(node):  # the emitter writes it itself (a copy of the taken side)
            continue
        if (dynamic := Refusal.dynamic(graph, node)) is not None:
            # first: a Loop / If left in place because values decide it says so, with the fix
            problems.append(dynamic)
            continue
        spec = ops.get(op_key(node))
        if spec is None:
            if node.domain not in ("", "ai.onnx"):
                why = f"no C emitter in domain '{node.domain}'"
                problems.append(Refusal.of(node, opset, why))
                continue
            why = UNSUPPORTED.get(node.op_type)
            problems.append(
                Refusal.of(node, opset, f"no C emitter for this op{f' ({why})' if why else ''}")
            )
            continue
        for name in (*node.inputs, *node.outputs):
            if not name:
                continue
            t = graph.type_of(name)
            assert t is not None  # Refusal.dynamic: every tensor of the node has a type
            if t.dtype == STRING_DTYPE and base_op(node) not in STRING_OPS:
                problems.append(
                    Refusal.of(node, opset, f"{node.op_type} on strings is not supported")
                )
                break
            if t.dtype.name not in CTYPES and not (
                t.dtype.name in STORAGE_CTYPES and base_op(node) in STORAGE_DTYPE_OPS
            ):
                why = f"dtype {t.dtype.name} of '{name}' is not supported"
                problems.append(Refusal.of(node, opset, why))
                break
        else:
            if spec.check is not None and (why := spec.check(node, graph)):
                problems.append(Refusal.of(node, opset, why))
    if not problems:
        _static_shapes(graph, Options(), Analyses())
    return problems


def unsupported(graph: Graph) -> list[str]:
    """`refusals` as the lines `convert` prints."""
    return [str(r) for r in refusals(graph)]
