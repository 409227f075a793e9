"""Control flow made straight-line, so static backends need no subgraphs.

- `If` whose condition is a constant: the taken branch is inlined (`inline_control_flow`,
  part of the specialisation loop, since a condition often becomes constant only after the
  shapes it compares are folded, e.g. `sr == 16000` once `--fix-input sr=16000` is given).
- `If` whose condition is only known at run time: both branches are inlined and an
  `o2e.IfSelect` (Where on the scalar condition, semantics/fused.py) selects the outputs (`select_runtime_if`, run once the loop has converged, again for Ifs
  nested in branches). Each branch keeps its own static shapes, but their outputs must agree
  in shape and type, else the node is refused with its name (`check_if_selects`). The graph
  stays straight-line for every pass; `runtime_if_guards` then tells a backend under which
  conditions each node is needed, so the C backend runs only the taken branch (a branch may
  divide by zero or index out of range when it is not the one taken).
- `Loop` with a constant trip count whose body never exits early: unrolled, one copy of the
  body per iteration, scan outputs stacked with Unsqueeze + Concat.

before:  If(c=<const true>){then: y=Relu(x)}{else: y=Neg(x)}   after:  Relu(x) -> Identity -> y
before:  If(c=Less(sr, 16000)){..}{..}                          after:  both -> o2e.IfSelect(c, t, e)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..errors import UnsupportedError
from ..ir import Attr, Graph, Node, TensorType, Value
from ..ir.proto import _type_from_proto, node_from_proto
from ..semantics.fused import DOMAIN, with_domain
from .registry import register_pass

_MAX_UNROLL = 256
# the op that selects a run-time If's output (semantics/fused.py: o2e.IfSelect)
IF_SELECT = "IfSelect"


def is_select_of_if(node: Node) -> bool:
    """Is `node` an o2e.IfSelect (a run-time If's output, left by `select_runtime_if`)?"""
    return node.op_type == IF_SELECT and node.domain == DOMAIN


def if_name(node: Node) -> str:
    """The name of the run-time If an o2e.IfSelect selects for."""
    return str(node.attr("if_name", ""))


def _has_subgraphs(p: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in p.attribute)


class _Inliner:
    """Copies subgraph bodies into the outer graph, renaming what would clash."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.taken = set(graph.values) | set(graph.initializers) | set(graph.inputs)
        self.taken |= {o for n in graph.nodes for o in n.outputs if o}
        self.taken |= {n.name for n in graph.nodes}
        self.inits: dict[str, np.ndarray] = dict(graph.initializers)
        self.values: dict[str, Value] = dict(graph.values)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def body(self, sub: onnx.GraphProto, bind: dict[str, str], prefix: str) -> list[Node] | None:
        """The subgraph's nodes with its inputs bound (`bind`: sub name -> outer name) and every
        name it defines renamed, also where a nested subgraph (an If inside a branch) reads it
        from the enclosing scope; `bind` gains its outputs."""
        renames = dict(bind)
        for t in sub.initializer:
            new = self.fresh(f"{prefix}{t.name}")
            renames[t.name] = new
            self.inits[new] = numpy_helper.to_array(t)
        defined = [o for p in sub.node for o in p.output if o]
        for name in defined:
            renames[name] = self.fresh(f"{prefix}{name}")
        for vi in sub.value_info:
            if vi.name in renames:
                self.values[renames[vi.name]] = Value(renames[vi.name], _type_from_proto(vi.type))
        nodes = []
        for p in sub.node:
            if _has_subgraphs(p):
                p = _rename_captured(p, renames)
            n = node_from_proto(p, self.fresh(f"{prefix}{p.name or p.op_type}"))
            nodes.append(
                n.replace(
                    inputs=tuple(renames.get(i, i) if i else "" for i in n.inputs),
                    outputs=tuple(renames.get(o, o) if o else "" for o in n.outputs),
                )
            )
        bind.update(renames)
        return nodes

    def done(self, nodes: list[Node]) -> Graph:
        return self.graph.with_nodes(nodes, initializers=self.inits, values=self.values)


def _rename_captured(p: onnx.NodeProto, renames: dict[str, str]) -> onnx.NodeProto:
    """A copy of `p` whose subgraphs read renamed outer-scope tensors by their new names."""
    q = onnx.NodeProto()
    q.CopyFrom(p)
    for a in q.attribute:
        if a.type == AttributeProto.GRAPH:
            _rename_refs(a.g, renames)
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                _rename_refs(g, renames)
    return q


def _rename_refs(g: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Rename, in place, the references `g` (and its own subgraphs) make to enclosing scopes;
    names `g` defines itself shadow the outer ones and stay."""
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    local |= {o for n in g.node for o in n.output}
    outer = {k: v for k, v in renames.items() if k not in local}
    if not outer:
        return
    for n in g.node:
        n.input[:] = [outer.get(i, i) for i in n.input]
        for a in n.attribute:
            for sub in [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs):
                _rename_refs(sub, outer)
    for o in g.output:
        o.name = outer.get(o.name, o.name)


def _identity(name: str, src: str, dst: str) -> Node:
    return Node(name, "Identity", (src,), (dst,))


def _const_scalar(graph: Graph, name: str) -> np.ndarray | None:
    arr = graph.const(name) if name else None
    if arr is None or np.asarray(arr).size != 1:
        return None
    return np.asarray(arr).reshape(())


@register_pass("inline_control_flow")
def inline_control_flow(graph: Graph) -> Graph:
    """Inline every If with a constant condition and unroll every Loop with a constant trip
    count and no early exit."""
    if not any(n.op_type in ("If", "Loop", "Scan") and n.domain == "" for n in graph.nodes):
        return graph
    inl = _Inliner(graph)
    out: list[Node] = []
    changed = False
    for node in graph.nodes:
        new = None
        if node.domain == "" and node.op_type == "If":
            cond = _const_scalar(graph, node.inputs[0])
            if cond is not None:
                new = _inline_if(inl, node, bool(cond))
        elif node.domain == "" and node.op_type == "Loop":
            new = _unroll_loop(inl, graph, node)
        elif node.domain == "" and node.op_type == "Scan" and graph.opset >= 9:
            new = _unroll_scan(inl, graph, node)
        if new is None:
            out.append(node)
        else:
            out.extend(new)
            changed = True
    return inl.done(out) if changed else graph


def _unsqueeze(inl: _Inliner, graph: Graph, x: str, axis: int, hint: str) -> tuple[Node, str]:
    out = inl.fresh(f"{x}/stacked")
    name = inl.fresh(hint)
    if graph.opset >= 13:
        axes = inl.fresh(f"{hint}/axes")
        inl.inits[axes] = np.array([axis], np.int64)
        return Node(name, "Unsqueeze", (x, axes), (out,)), out
    ax = {"axes": Attr(AttributeProto.INTS, [axis])}
    return Node(name, "Unsqueeze", (x,), (out,), attrs=ax), out


def _stack(
    inl: _Inliner, graph: Graph, parts: list[str], axis: int, y: str, hint: str
) -> list[Node]:
    """Unsqueeze each part at `axis` and Concat them there into `y`."""
    nodes, outs = [], []
    for i, s in enumerate(parts):
        n, o = _unsqueeze(inl, graph, s, axis, f"{hint}/unsq{i}")
        nodes.append(n)
        outs.append(o)
    cat = Node(
        inl.fresh(f"{hint}/concat"),
        "Concat",
        tuple(outs),
        (y,),
        attrs={"axis": Attr(AttributeProto.INT, axis)},
    )
    return [*nodes, cat]


def _unroll_scan(inl: _Inliner, graph: Graph, node: Node) -> list[Node] | None:
    """Scan (opset 9+) over scan inputs of static length: one body copy per step, each step's
    slice a Gather at the step's index, scan outputs stacked along their axes."""
    body: onnx.GraphProto = node.attr("body")
    m = int(node.attr("num_scan_inputs"))
    n_state = len(node.inputs) - m
    scan_in = list(node.inputs[n_state:])
    types = [graph.type_of(x) for x in scan_in]
    shapes = [t.static_shape for t in types if t is not None and t.is_static]
    if not scan_in or len(shapes) != len(scan_in):
        return None
    in_axes = [
        a + len(sh) if a < 0 else a
        for a, sh in zip(node.attr("scan_input_axes", [0] * m), shapes, strict=True)
    ]
    in_dirs = list(node.attr("scan_input_directions", [0] * m))
    steps = {sh[a] for sh, a in zip(shapes, in_axes, strict=True)}
    trip = steps.pop() if len(steps) == 1 else 0
    if not 0 < trip <= _MAX_UNROLL:
        return None
    n_out = len(body.output) - n_state
    out_axes = list(node.attr("scan_output_axes", [0] * n_out))
    out_dirs = list(node.attr("scan_output_directions", [0] * n_out))
    states = list(node.inputs[:n_state])
    nodes: list[Node] = []
    per_step: list[list[str]] = [[] for _ in range(n_out)]
    for t in range(trip):
        bind = {body.input[k].name: states[k] for k in range(n_state)}
        for j, x in enumerate(scan_in):
            idx = inl.fresh(f"{node.name}/idx{t}_{j}")
            inl.inits[idx] = np.array(trip - 1 - t if in_dirs[j] else t, np.int64)
            sl = inl.fresh(f"{node.name}/{t}/slice{j}")
            gather = Node(
                inl.fresh(f"{node.name}/{t}/gather{j}"),
                "Gather",
                (x, idx),
                (sl,),
                attrs={"axis": Attr(AttributeProto.INT, in_axes[j])},
            )
            nodes.append(gather)
            bind[body.input[n_state + j].name] = sl
        copy = inl.body(body, bind, f"{node.name}/{t}/")
        if copy is None:
            return None
        nodes.extend(copy)
        outs = [bind.get(o.name, o.name) for o in body.output]
        states = outs[:n_state]
        for k in range(n_out):
            per_step[k].append(outs[n_state + k])
    for k, y in enumerate(node.outputs):
        if not y:
            continue
        if k < n_state:
            nodes.append(_identity(inl.fresh(f"{node.name}/final{k}"), states[k], y))
            continue
        j = k - n_state
        parts = per_step[j][::-1] if out_dirs[j] else per_step[j]
        out_rank = len(body.output[k].type.tensor_type.shape.dim) + 1
        axis = out_axes[j] + out_rank if out_axes[j] < 0 else out_axes[j]
        nodes.extend(_stack(inl, graph, parts, axis, y, f"{node.name}/out{k}"))
    return nodes


def _inline_if(inl: _Inliner, node: Node, cond: bool) -> list[Node] | None:
    sub: onnx.GraphProto = node.attr("then_branch" if cond else "else_branch")
    bind: dict[str, str] = {}
    body = inl.body(sub, bind, f"{node.name}/{'then' if cond else 'else'}/")
    if body is None:
        return None
    tail = [
        _identity(inl.fresh(f"{node.name}/out{k}"), bind.get(o.name, o.name), y)
        for k, (o, y) in enumerate(zip(sub.output, node.outputs, strict=True))
        if y
    ]
    return body + tail


@register_pass("select_runtime_if")
def select_runtime_if(graph: Graph) -> Graph:
    """Both branches of every remaining If, then o2e.IfSelect(cond, then_out, else_out)."""
    if not any(n.op_type == "If" and n.domain == "" for n in graph.nodes):
        return graph
    inl = _Inliner(graph)
    out: list[Node] = []
    changed = False
    for node in graph.nodes:
        if node.domain != "" or node.op_type != "If":
            out.append(node)
            continue
        then_g: onnx.GraphProto = node.attr("then_branch")
        else_g: onnx.GraphProto = node.attr("else_branch")
        if not all(o.type.HasField("tensor_type") for o in (*then_g.output, *else_g.output)):
            out.append(node)  # sequence/optional outputs: the backend refuses the If
            continue
        tb: dict[str, str] = {}
        eb: dict[str, str] = {}
        tnodes = inl.body(then_g, tb, f"{node.name}/then/")
        enodes = inl.body(else_g, eb, f"{node.name}/else/")
        if tnodes is None or enodes is None:
            out.append(node)
            continue
        cond = inl.fresh(f"{node.name}/cond")
        shape = inl.fresh(f"{node.name}/scalar_shape")
        inl.inits[shape] = np.zeros((0,), np.int64)
        sel = [
            Node(inl.fresh(f"{node.name}/cond_scalar"), "Reshape", (node.inputs[0], shape), (cond,))
        ]
        inl.values[cond] = Value(cond, TensorType(onnx.TensorProto.BOOL, ()))
        for k, (to, eo, y) in enumerate(
            zip(then_g.output, else_g.output, node.outputs, strict=True)
        ):
            if not y:
                continue
            sel.append(
                Node(
                    inl.fresh(f"{node.name}/select{k}"),
                    IF_SELECT,
                    (cond, tb.get(to.name, to.name), eb.get(eo.name, eo.name)),
                    (y,),
                    {"if_name": Attr(AttributeProto.STRING, node.name)},
                    domain=DOMAIN,
                )
            )
        # the condition first: backends that run only the taken branch (the C backend, through
        # `runtime_if_guards`) read it before either branch
        out.extend([sel[0], *tnodes, *enodes, *sel[1:]])
        changed = True
    return with_domain(inl.done(out)) if changed else graph


def check_if_selects(graph: Graph) -> None:
    """Refuse a run-time If whose branches yield differently shaped or typed outputs."""
    for n in graph.nodes:
        if not is_select_of_if(n):
            continue
        a, b = graph.type_of(n.inputs[1]), graph.type_of(n.inputs[2])
        if a is None or b is None or a.shape is None or b.shape is None:
            continue
        if a.shape != b.shape or a.elem_type != b.elem_type:
            raise UnsupportedError(
                f"node '{if_name(n)}' (op If): its condition is only "
                f"known at run time and its branches produce output {n.outputs[0]!r} with "
                f"different shapes or types ({_desc(a)} vs {_desc(b)}); "
                + fix_input_hint(graph, n.inputs[0])
            )


def deciding_inputs(graph: Graph, name: str) -> list[str]:
    """The graph inputs whose values tensor `name` is computed from (in graph input order)."""
    seen: set[str] = set()
    stack = [name]
    found: set[str] = set()
    while stack:
        cur = stack.pop()
        if cur in seen or not cur:
            continue
        seen.add(cur)
        if cur in graph.inputs:
            found.add(cur)
            continue
        node = graph.producer(cur)
        if node is not None:
            stack.extend(i for i in node.inputs if i and not graph.is_const(i))
    return [i for i in graph.inputs if i in found]


def fix_input_hint(graph: Graph, cond: str) -> str:
    """'the branch is decided by input 'sr': fix it with --fix-input sr=VALUE' (or the generic
    advice when the condition comes from no input)."""
    names = deciding_inputs(graph, cond)
    if not names:
        return "fix the input the condition depends on with --fix-input NAME=VALUE"
    which = ", ".join(f"'{x}'" for x in names)
    fixes = " ".join(f"--fix-input {x}=VALUE" for x in names)
    return f"the branch is decided by input{'s' if len(names) > 1 else ''} {which}: fix {'them' if len(names) > 1 else 'it'} with {fixes}"


def runtime_if_of(graph: Graph, node: Node) -> str | None:
    """The condition tensor of the run-time If that `node` is part of (a node of one of its
    inlined branches, an If left in place, or its o2e.IfSelect), or None."""
    if node.op_type == "If" and node.inputs and not graph.is_const(node.inputs[0]):
        return node.inputs[0]
    for n in graph.nodes:
        if not is_select_of_if(n):
            continue
        name = if_name(n)
        if n is node or node.name.startswith((f"{name}/then/", f"{name}/else/")):
            return n.inputs[0]
    return None


def _desc(t: TensorType) -> str:
    return f"{onnx.TensorProto.DataType.Name(t.elem_type).lower()}{list(t.shape or ())}"


def _body_never_exits(body: onnx.GraphProto) -> bool:
    """Does the body hand its condition input through unchanged (or output constant true)?"""
    cin, cout = body.input[1].name, body.output[0].name
    if cin == cout:
        return True
    for p in body.node:
        if cout in p.output:
            if p.op_type == "Identity" and p.input[0] == cin:
                return True
            if p.op_type == "Constant" and p.attribute:
                a = p.attribute[0]
                if a.name == "value":
                    return bool(np.all(numpy_helper.to_array(a.t)))
    for t in body.initializer:
        if t.name == cout:
            return bool(np.all(numpy_helper.to_array(t)))
    return False


def _exit_count(graph: Graph, node: Node, body: onnx.GraphProto, trip: int) -> int | None:
    """How many times a Loop whose body computes its own condition runs, when that condition
    follows from constants alone (tf2onnx's while loops: `i < n and counter < n`, with `n` a
    shape that specialisation made constant). Only the body nodes the condition depends on,
    across iterations through the carried values, are evaluated (onnx's reference evaluator,
    as fold_constants). None when the condition depends on run-time values."""
    from .fold_constants import _evaluate

    n_carried = len(node.inputs) - 2
    ins = [i.name for i in body.input]
    outs = [o.name for o in body.output]
    protos = {o: p for p in body.node for o in p.output if o}
    need, todo = set(), [outs[0]]
    while todo:
        name = todo.pop()
        if name in need:
            continue
        need.add(name)
        if name in protos:
            todo.extend(i for i in protos[name].input if i)
        elif name in ins[2:]:
            todo.append(outs[1 + ins.index(name) - 2])
    if any(_has_subgraphs(protos[o]) for o in need if o in protos):
        return None
    inits = {t.name: numpy_helper.to_array(t) for t in body.initializer}
    slice_ = [node_from_proto(p) for p in body.node if any(o in need for o in p.output)]
    carried: list[np.ndarray | None] = [graph.const(x) for x in node.inputs[2:]]
    local = set(protos) | set(ins) | set(inits)  # never read as the outer scope's constants
    for it in range(min(trip, _MAX_UNROLL + 1)):
        env: dict[str, np.ndarray] = dict(inits)
        env[ins[0]], env[ins[1]] = np.array(it, np.int64), np.array(True)
        env.update({ins[2 + k]: v for k, v in enumerate(carried) if v is not None})
        for n in slice_:
            for x in n.inputs:
                if x and x not in env and x not in local and (c := graph.const(x)) is not None:
                    env[x] = np.asarray(c)
                if x and x not in env:
                    break
            else:
                res = _evaluate(n, env, dict(graph.opset_imports))
                if res is not None:
                    env.update({o: r for o, r in zip(n.outputs, res, strict=False) if o})
        if outs[0] not in env:
            return None
        carried = [env.get(outs[1 + k]) for k in range(n_carried)]
        if not bool(np.all(env[outs[0]])):
            return it + 1
    return trip if trip <= _MAX_UNROLL else None


def _unroll_loop(inl: _Inliner, graph: Graph, node: Node) -> list[Node] | None:
    body: onnx.GraphProto = node.attr("body")
    has_trip = bool(node.inputs and node.inputs[0])
    trip = _const_scalar(graph, node.inputs[0]) if has_trip else _MAX_UNROLL + 1
    if trip is None or int(trip) <= 0:
        return None
    trip = int(trip)
    cond_in = node.inputs[1] if len(node.inputs) > 1 else ""
    if cond_in:
        c = _const_scalar(graph, cond_in)
        if c is None or not bool(c):
            return None
    if not _body_never_exits(body):
        runs = _exit_count(graph, node, body, trip)
        if runs is None:
            return None
        trip = runs
    if trip > _MAX_UNROLL:
        return None
    n_carried = len(node.inputs) - 2
    n_scan = len(body.output) - 1 - n_carried
    carried = list(node.inputs[2:])
    cond_name = inl.fresh(f"{node.name}/true")
    inl.inits[cond_name] = np.array(True)
    nodes: list[Node] = []
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    for it in range(int(trip)):
        iname = inl.fresh(f"{node.name}/iter{it}")
        inl.inits[iname] = np.array(it, np.int64)
        bind = {body.input[0].name: iname, body.input[1].name: cond_name}
        bind.update({body.input[2 + k].name: carried[k] for k in range(n_carried)})
        copy = inl.body(body, bind, f"{node.name}/{it}/")
        if copy is None:
            return None
        nodes.extend(copy)
        outs = [bind.get(o.name, o.name) for o in body.output]
        carried = outs[1 : 1 + n_carried]
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
    for k, y in enumerate(node.outputs):
        if not y:
            continue
        if k < n_carried:
            nodes.append(_identity(inl.fresh(f"{node.name}/final{k}"), carried[k], y))
            continue
        nodes.extend(_stack(inl, graph, scans[k - n_carried], 0, y, f"{node.name}/out{k}"))
    return nodes


Guard = tuple[tuple[str, bool], ...]


def runtime_if_guards(graph: Graph) -> dict[str, Guard]:
    """For each node, the conditions under which its result is needed: ((cond, taken), ...)
    outermost first, () for always. A backend that wraps each node in `if` statements on its
    guard runs only the taken branch of every run-time If (the o2e.IfSelect nodes left by
    `select_runtime_if`, whose branch inputs are needed only when their side is taken).

    Computed from the data flow alone, after every pass, so a pass that moves or fuses nodes
    cannot make it wrong: a tensor needed under two guards is needed under their common prefix
    (run more often, never less), and a guard is cut before a condition computed only after the
    node. Nodes of no select are all guarded ().
    """
    if not any(is_select_of_if(n) for n in graph.nodes):
        return {}
    made_at = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs if o}
    need: dict[str, Guard] = {o: () for o in graph.outputs}
    guards: dict[str, Guard] = {}
    for i in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[i]
        g: Guard | None = None
        for o in node.outputs:
            if o in need:
                g = need[o] if g is None else _common(g, need[o])
        g = g or ()
        for k, (cond, _) in enumerate(g):
            if made_at.get(cond, -1) >= i:
                g = g[:k]
                break
        guards[node.name] = g
        select = is_if_select(graph, node)
        for k, x in enumerate(node.inputs):
            if not x:
                continue
            want = g + ((node.inputs[0], k == 1),) if select and k in (1, 2) else g
            need[x] = _common(need[x], want) if x in need else want
    return guards


def is_if_select(graph: Graph, node: Node) -> bool:
    """Is `node` the o2e.IfSelect that picks a run-time If's output (scalar condition, both branch
    outputs of the output's own static shape and type), which a backend may emit as a copy of
    the taken side?"""
    if not is_select_of_if(node):
        return False
    c, t, e, y = (graph.type_of(x) for x in (*node.inputs, node.outputs[0]))
    if any(v is None or not v.is_static for v in (c, t, e, y)):
        return False
    return (
        int(np.prod(c.static_shape)) == 1
        and t.static_shape == e.static_shape == y.static_shape
        and t.elem_type == e.elem_type == y.elem_type
    )


def _common(a: Guard, b: Guard) -> Guard:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


@register_pass("lower_if_select")
def lower_if_select(graph: Graph) -> Graph:
    """o2e.IfSelect as the ONNX Where it means (both sides computed, then selected): for the
    backends that do not run only the taken branch (MPS, Core ML)."""
    if not any(is_select_of_if(n) for n in graph.nodes):
        return graph
    nodes = [
        n.replace(op_type="Where", domain="", attrs={}) if is_select_of_if(n) else n
        for n in graph.nodes
    ]
    return graph.with_nodes(nodes)
