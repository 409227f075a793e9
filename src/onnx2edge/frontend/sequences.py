"""Sequences and optionals to plain tensors, at conversion time.

The backends have tensors only. A sequence whose length and element shapes are known at
conversion becomes a list of tensors: sequence graph inputs become one input per element
(`<name>_0`, `<name>_1`, ... in order), sequence outputs one output per element, and each
sequence op becomes tensor ops (SplitToSequence a Split, ConcatFromSequence a Concat,
SequenceAt/Insert/Erase/Construct bookkeeping, SequenceLength a constant). An optional is
either present (its value) or absent (nothing). The control flow that carries them (If, Loop,
SequenceMap) is inlined: the If condition, the Loop count and every position must be known at
conversion (a constant, or an input bound with --fix-input).

What cannot be known at conversion -- a length or position computed from run-time data, a
sequence whose length depends on a run-time loop count -- is refused with its reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import Onnx2EdgeError

# a sequence input's elements: (numpy dtype, shape) each; None: an absent optional
SequenceSpec = Sequence[tuple[Any, Sequence[int]]] | None

SEQUENCE_OPS = frozenset(
    {
        "ConcatFromSequence",
        "Optional",
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceLength",
        "SequenceMap",
        "SplitToSequence",
    }
)
_MAX_UNROLL = 4096
_ABSENT = None

Val = str | list[str] | None  # a tensor's name, a sequence's element names, an absent optional


def _is_structured(t: onnx.TypeProto) -> bool:
    return t.HasField("sequence_type") or t.HasField("optional_type")


def _graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    out = [g]
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    out += _graphs(sub)
    return out


def needs_lowering(model: onnx.ModelProto, specs: Mapping[str, SequenceSpec]) -> bool:
    """Does the model use sequences, or optionals the loader cannot present as tensors?"""
    if specs:
        return True
    g = model.graph
    if any(_is_structured(v.type) and v.type.HasField("sequence_type") for v in g.input):
        return True
    if any(_is_structured(v.type) for v in g.output):
        return True
    return any(n.op_type in SEQUENCE_OPS for sub in _graphs(g) for n in sub.node)


def lower_sequences(
    model: onnx.ModelProto, specs: Mapping[str, SequenceSpec] | None = None
) -> onnx.ModelProto:
    """A copy of `model` with no sequence or optional value left (see the module doc)."""
    specs = dict(specs or {})
    if not needs_lowering(model, specs):
        return model
    return _Lowerer(model, specs).run()


class _Lowerer:
    def __init__(self, model: onnx.ModelProto, specs: dict[str, SequenceSpec]) -> None:
        self.model = model
        self.specs = specs
        self.opset = {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import
        }
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.consts: dict[str, np.ndarray] = {}
        self.taken: set[str] = set()
        self.counter = itertools.count()

    # ---- names and constants ----------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name = f"{base}_{next(self.counter)}"
        self.taken.add(name)
        return name

    def const(self, base: str, arr: np.ndarray) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        self.consts[name] = np.asarray(arr)
        return name

    def value(self, env: dict[str, Val], name: str) -> Val:
        if not name:
            return _ABSENT
        if name not in env:
            raise Onnx2EdgeError(f"'{name}' is used before it is defined")
        return env[name]

    def tensor(self, env: dict[str, Val], name: str, what: str) -> str:
        v = self.value(env, name)
        if not isinstance(v, str):
            raise Onnx2EdgeError(f"{what}: '{name}' is not a tensor here")
        return v

    def seq(self, env: dict[str, Val], name: str, what: str) -> list[str]:
        v = self.value(env, name)
        if not isinstance(v, list):
            raise Onnx2EdgeError(f"{what}: '{name}' is not a sequence here")
        return v

    def known(self, env: dict[str, Val], name: str, what: str) -> np.ndarray:
        t = self.tensor(env, name, what)
        if t not in self.consts:
            raise Onnx2EdgeError(
                f"{what} must be known at conversion (a constant, or an input bound with "
                f"--fix-input): '{name}' is computed at run time"
            )
        return self.consts[t]

    # ---- the graph --------------------------------------------------------------------------
    def run(self) -> onnx.ModelProto:
        g = self.model.graph
        env: dict[str, Val] = {}
        for sub in _graphs(g):
            self.taken.update(o for n in sub.node for o in n.output)
            self.taken.update(v.name for v in (*sub.input, *sub.output))
            self.taken.update(t.name for t in sub.initializer)
        for t in g.initializer:
            env[t.name] = t.name
            self.consts[t.name] = numpy_helper.to_array(t)
        inits = {t.name for t in g.initializer}
        for vi in g.input:
            if vi.name in inits:
                continue
            env[vi.name] = self.lower_input(vi)
        for n in g.node:
            self.lower_node(n, env, top=True)
        outputs = self.lower_outputs(g, env)
        new = onnx.ModelProto()
        new.CopyFrom(self.model)
        ng = new.graph
        del ng.node[:]
        ng.node.extend(self.nodes)
        ng.initializer.extend(self.inits)
        del ng.input[:]
        ng.input.extend([vi for vi in g.input if vi.name in inits] + self.inputs)
        del ng.output[:]
        ng.output.extend(outputs)
        del ng.value_info[:]
        return _typed_outputs(new)

    def lower_input(self, vi: onnx.ValueInfoProto) -> Val:
        t = vi.type
        if t.HasField("optional_type"):
            if vi.name in self.specs and self.specs[vi.name] is None:
                return _ABSENT
            t = t.optional_type.elem_type
        if t.HasField("sequence_type"):
            spec = self.specs.get(vi.name)
            if spec is None:
                raise Onnx2EdgeError(
                    f"input '{vi.name}' is a sequence: its length and element shapes must be "
                    "known at conversion"
                )
            names = []
            for i, (dtype, shape) in enumerate(spec):
                name = self.fresh(f"{vi.name}_{i}")
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
                names.append(name)
            return names
        if not t.HasField("tensor_type"):
            raise Onnx2EdgeError(f"input '{vi.name}': a map or sparse input is not supported")
        plain = onnx.ValueInfoProto()
        plain.name = vi.name
        plain.type.CopyFrom(t)
        self.inputs.append(plain)
        return vi.name

    def lower_outputs(self, g: onnx.GraphProto, env: dict[str, Val]) -> list[onnx.ValueInfoProto]:
        out = []
        for vi in g.output:
            v = self.value(env, vi.name)
            if v is _ABSENT:
                raise Onnx2EdgeError(
                    f"output '{vi.name}' is an absent optional: a C buffer has no form for it"
                )
            if isinstance(v, str):
                if v != vi.name:
                    self.nodes.append(helper.make_node("Identity", [v], [vi.name]))
                plain = onnx.ValueInfoProto()
                plain.name = vi.name
                if vi.type.HasField("tensor_type"):
                    plain.type.CopyFrom(vi.type)
                out.append(plain)
                continue
            for i, e in enumerate(v):
                name = self.fresh(f"{vi.name}_{i}")
                self.nodes.append(helper.make_node("Identity", [e], [name]))
                o = onnx.ValueInfoProto()
                o.name = name
                out.append(o)
        return out

    # ---- nodes ------------------------------------------------------------------------------
    def lower_node(self, n: onnx.NodeProto, env: dict[str, Val], top: bool) -> None:
        what = f"node '{n.name or n.output[0]}' ({n.op_type})"
        handler = getattr(self, f"op_{n.op_type}", None)
        if n.domain in ("", "ai.onnx") and handler is not None and self._structured(n, env):
            handler(n, env, top, what)
            return
        self.plain(n, env, top, what)

    def _structured(self, n: onnx.NodeProto, env: dict[str, Val]) -> bool:
        if n.op_type in SEQUENCE_OPS or n.op_type in ("OptionalHasElement", "OptionalGetElement"):
            return True
        if any(i and not isinstance(env.get(i, ""), str) for i in n.input):
            return True
        if n.op_type == "If":
            branches = [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
            return any(_is_structured(o.type) for b in branches for o in b.output)
        if n.op_type == "Loop":
            body = next(a.g for a in n.attribute if a.name == "body")
            return any(_is_structured(o.type) for o in body.output)
        return False

    def outname(self, name: str, top: bool) -> str:
        if not name:
            return ""
        return name if top else self.fresh(name)

    def plain(self, n: onnx.NodeProto, env: dict[str, Val], top: bool, what: str) -> None:
        """A tensor node: its inputs renamed, its outputs fresh inside inlined bodies."""
        m = onnx.NodeProto()
        m.CopyFrom(n)
        del m.input[:]
        m.input.extend(self.tensor(env, i, what) if i else "" for i in n.input)
        del m.output[:]
        outs = [self.outname(o, top) for o in n.output]
        m.output.extend(outs)
        renames = {k: v for k, v in env.items() if isinstance(v, str) and k != v}
        for a in m.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_free(a.g, renames, env)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _rename_free(sub, renames, env)
        self.nodes.append(m)
        for o, new in zip(n.output, outs, strict=True):
            if o:
                env[o] = new
        self.fold(m)

    def fold(self, m: onnx.NodeProto) -> None:
        """Evaluate a node whose inputs are all known (small): positions and counts computed
        from constants (a Loop's iteration number plus one, ...) become known too."""
        if m.op_type.startswith("Random") or m.op_type in ("Bernoulli", "Multinomial"):
            return
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in m.attribute
        ):
            return
        ins = [i for i in m.input if i]
        if not all(i in self.consts for i in ins) or sum(self.consts[i].size for i in ins) > 4096:
            return
        try:
            from onnx.reference import ReferenceEvaluator

            graph = helper.make_graph(
                [m],
                "fold",
                [
                    helper.make_tensor_value_info(
                        i, helper.np_dtype_to_tensor_dtype(self.consts[i].dtype), None
                    )
                    for i in dict.fromkeys(ins)
                ],
                [helper.make_empty_tensor_value_info(o) for o in m.output if o],
            )
            ops = [helper.make_opsetid(d, v) for d, v in self.opset.items()]
            ref = ReferenceEvaluator(helper.make_model(graph, opset_imports=ops))
            res = ref.run(None, {i: self.consts[i] for i in dict.fromkeys(ins)})
        except Exception:  # noqa: BLE001 - not foldable here: the backend computes it
            return
        for o, r in zip([o for o in m.output if o], res, strict=False):
            if isinstance(r, np.ndarray):
                self.consts[o] = r

    def emit(self, op: str, inputs: list[str], base: str, **attrs: Any) -> str:
        out = self.fresh(base)
        node = helper.make_node(op, inputs, [out], **attrs)
        self.nodes.append(node)
        self.fold(node)
        return out

    def set_const(self, env: dict[str, Val], name: str, arr: np.ndarray, top: bool) -> None:
        out = self.outname(name, top)
        t = numpy_helper.from_array(np.asarray(arr), out)
        self.nodes.append(helper.make_node("Constant", [], [out], value=t))
        self.consts[out] = np.asarray(arr)
        env[name] = out

    def _int(self, env: dict[str, Val], name: str, what: str) -> int:
        return int(self.known(env, name, what).reshape(-1)[0])

    @staticmethod
    def _pos(p: int, n: int, what: str, insert: bool = False) -> int:
        hi = n if insert else n - 1
        q = p + n if p < 0 else p
        if not 0 <= q <= hi:
            raise Onnx2EdgeError(f"{what}: position {p} out of range for a sequence of {n}")
        return q

    # ---- sequence and optional ops ----------------------------------------------------------
    def op_SequenceEmpty(
        self, n: onnx.NodeProto, env: dict[str, Val], top: bool, what: str
    ) -> None:
        env[n.output[0]] = []

    def op_SequenceConstruct(self, n, env, top, what) -> None:  # noqa: ANN001
        env[n.output[0]] = [self.tensor(env, i, what) for i in n.input]

    def op_SequenceInsert(self, n, env, top, what) -> None:  # noqa: ANN001
        s = list(self.seq(env, n.input[0], what))
        t = self.tensor(env, n.input[1], what)
        pos = len(s)
        if len(n.input) > 2 and n.input[2]:
            pos = self._pos(self._int(env, n.input[2], f"{what} position"), len(s), what, True)
        s.insert(pos, t)
        env[n.output[0]] = s

    def op_SequenceErase(self, n, env, top, what) -> None:  # noqa: ANN001
        s = list(self.seq(env, n.input[0], what))
        p = -1
        if len(n.input) > 1 and n.input[1]:
            p = self._int(env, n.input[1], f"{what} position")
        del s[self._pos(p, len(s), what)]
        env[n.output[0]] = s

    def op_SequenceAt(self, n, env, top, what) -> None:  # noqa: ANN001
        s = self.seq(env, n.input[0], what)
        p = self._pos(self._int(env, n.input[1], f"{what} position"), len(s), what)
        env[n.output[0]] = s[p]

    def op_SequenceLength(self, n, env, top, what) -> None:  # noqa: ANN001
        s = self.seq(env, n.input[0], what)
        self.set_const(env, n.output[0], np.array(len(s), np.int64), top)

    def op_Identity(self, n, env, top, what) -> None:  # noqa: ANN001
        env[n.output[0]] = self.value(env, n.input[0])

    def op_Optional(self, n, env, top, what) -> None:  # noqa: ANN001
        env[n.output[0]] = self.value(env, n.input[0]) if n.input else _ABSENT

    def op_OptionalGetElement(self, n, env, top, what) -> None:  # noqa: ANN001
        v = self.value(env, n.input[0]) if n.input else _ABSENT
        if v is _ABSENT:
            raise Onnx2EdgeError(f"{what} of an absent optional")
        env[n.output[0]] = v

    def op_OptionalHasElement(self, n, env, top, what) -> None:  # noqa: ANN001
        present = bool(n.input) and self.value(env, n.input[0]) is not _ABSENT
        self.set_const(env, n.output[0], np.array(present), top)

    def op_SplitToSequence(self, n, env, top, what) -> None:  # noqa: ANN001
        x = self.tensor(env, n.input[0], what)
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        shape = self.shape_of(x, what)
        axis = int(attrs.get("axis", 0))
        axis = axis + len(shape) if axis < 0 else axis
        dim = shape[axis]
        keepdims = int(attrs.get("keepdims", 1))
        if len(n.input) > 1 and n.input[1]:
            split = self.known(env, n.input[1], f"{what} split").astype(np.int64)
            if split.ndim == 0:
                s = int(split)
                sizes = [s] * (dim // s) + ([dim % s] if dim % s else [])
            else:
                sizes = [int(v) for v in split]
            keepdims = 1  # the attribute only applies without a split input
        else:
            sizes = [1] * dim
        if not sizes:
            env[n.output[0]] = []
            return
        sizes_name = self.const(f"{x}_split_sizes", np.array(sizes, np.int64))
        parts = [self.fresh(f"{x}_part{i}") for i in range(len(sizes))]
        self.nodes.append(helper.make_node("Split", [x, sizes_name], parts, axis=axis))
        if not keepdims:
            axes = self.const(f"{x}_squeeze_axes", np.array([axis], np.int64))
            parts = [self.emit("Squeeze", [p, axes], f"{p}_sq") for p in parts]
        env[n.output[0]] = parts

    def op_ConcatFromSequence(self, n, env, top, what) -> None:  # noqa: ANN001
        s = self.seq(env, n.input[0], what)
        if not s:
            raise Onnx2EdgeError(f"{what} of an empty sequence")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        axis = int(attrs["axis"])
        if int(attrs.get("new_axis", 0)):
            axes = self.const("concat_new_axis", np.array([axis], np.int64))
            s = [self.emit("Unsqueeze", [e, axes], f"{e}_unsq") for e in s]
        out = self.outname(n.output[0], top)
        self.nodes.append(helper.make_node("Concat", s, [out], axis=axis))
        env[n.output[0]] = out

    # ---- control flow -----------------------------------------------------------------------
    def inline(
        self, body: onnx.GraphProto, env: dict[str, Val], bound: list[Val], what: str
    ) -> list[Val]:
        """The body's nodes with its inputs bound to `bound`; returns its outputs' values."""
        inner = dict(env)
        for vi, v in zip(body.input, bound, strict=False):
            inner[vi.name] = v
        for t in body.initializer:
            inner[t.name] = self.const(t.name, numpy_helper.to_array(t))
        for m in body.node:
            self.lower_node(m, inner, top=False)
        return [self.value(inner, o.name) for o in body.output]

    def bind_outputs(
        self, n: onnx.NodeProto, env: dict[str, Val], vals: list[Val], top: bool
    ) -> None:
        for o, v in zip(n.output, vals, strict=False):
            if not o:
                continue
            if top and isinstance(v, str) and v != o:
                # keep the node's own output name at top level (later nodes and outputs use it)
                self.nodes.append(helper.make_node("Identity", [v], [o]))
                if v in self.consts:
                    self.consts[o] = self.consts[v]
                v = o
            env[o] = v

    def op_If(self, n, env, top, what) -> None:  # noqa: ANN001
        cond = bool(self.known(env, n.input[0], f"{what} condition").reshape(-1)[0])
        branch = next(
            a.g for a in n.attribute if a.name == ("then_branch" if cond else "else_branch")
        )
        self.bind_outputs(n, env, self.inline(branch, env, [], what), top)

    def op_Loop(self, n, env, top, what) -> None:  # noqa: ANN001
        body = next(a.g for a in n.attribute if a.name == "body")
        trips = _MAX_UNROLL + 1
        if n.input[0]:
            trips = self._int(env, n.input[0], f"{what} trip count")
        cond = True
        if len(n.input) > 1 and n.input[1]:
            cond = bool(self.known(env, n.input[1], f"{what} condition").reshape(-1)[0])
        states = [self.value(env, i) for i in n.input[2:]]
        n_scan = len(body.output) - 1 - len(states)
        scans: list[list[str]] = [[] for _ in range(n_scan)]
        i = 0
        while cond and i < trips:
            if i >= _MAX_UNROLL:
                raise Onnx2EdgeError(f"{what}: more than {_MAX_UNROLL} iterations to unroll")
            it = self.const("loop_iter", np.array(i, np.int64))
            cin = self.const("loop_cond", np.array(cond))
            outs = self.inline(body, env, [it, cin, *states], what)
            c = outs[0]
            if not isinstance(c, str) or c not in self.consts:
                raise Onnx2EdgeError(
                    f"{what}: its condition is computed at run time, so the iteration count "
                    "is not known at conversion"
                )
            cond = bool(self.consts[c].reshape(-1)[0])
            states = outs[1 : 1 + len(states)]
            for k, v in enumerate(outs[1 + len(states) :]):
                if not isinstance(v, str):
                    raise Onnx2EdgeError(f"{what}: a scan output must be a tensor")
                scans[k].append(v)
            i += 1
        finals: list[Val] = list(states)
        for k, parts in enumerate(scans):
            if not parts:
                raise Onnx2EdgeError(f"{what}: a scan output of zero iterations has no shape")
            axes = self.const("scan_axis", np.array([0], np.int64))
            ups = [self.emit("Unsqueeze", [p, axes], f"{p}_unsq") for p in parts]
            finals.append(
                self.emit(
                    "Concat",
                    ups,
                    f"{n.output[1 + k] if 1 + k < len(n.output) else 'scan'}_cat",
                    axis=0,
                )
            )
        self.bind_outputs(n, env, finals, top)

    def op_SequenceMap(self, n, env, top, what) -> None:  # noqa: ANN001
        body = next(a.g for a in n.attribute if a.name == "body")
        args = [self.value(env, i) for i in n.input]
        first = args[0]
        if not isinstance(first, list):
            raise Onnx2EdgeError(f"{what}: its first input is not a sequence")
        for a in args[1:]:
            if isinstance(a, list) and len(a) != len(first):
                raise Onnx2EdgeError(f"{what}: sequences of different lengths")
        results: list[list[str]] = [[] for _ in n.output]
        for i in range(len(first)):
            bound = [a[i] if isinstance(a, list) else a for a in args]
            outs = self.inline(body, env, bound, what)
            for k, v in enumerate(outs):
                if not isinstance(v, str):
                    raise Onnx2EdgeError(f"{what}: its body returns a non-tensor")
                results[k].append(v)
        for o, r in zip(n.output, results, strict=True):
            env[o] = r

    # ---- shapes -----------------------------------------------------------------------------
    def shape_of(self, name: str, what: str) -> list[int]:
        """A tensor's static shape from onnx's inference over what has been lowered so far."""
        for vi in self.inputs:
            if vi.name == name:
                return _static(vi, what)
        if name in self.consts:
            return list(self.consts[name].shape)
        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        g = probe.graph
        del g.node[:]
        g.node.extend(self.nodes)
        g.initializer.extend(self.inits)
        del g.input[:]
        inits = {t.name for t in g.initializer}
        g.input.extend([*(v for v in self.model.graph.input if v.name in inits), *self.inputs])
        del g.output[:]
        g.output.append(helper.make_empty_tensor_value_info(name))
        del g.value_info[:]
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            if vi.name == name:
                return _static(vi, what)
        raise Onnx2EdgeError(f"{what}: the shape of '{name}' is not known at conversion")


def _static(vi: onnx.ValueInfoProto, what: str) -> list[int]:
    t = vi.type.tensor_type
    if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        raise Onnx2EdgeError(f"{what}: the shape of '{vi.name}' is not static")
    return [d.dim_value for d in t.shape.dim]


def _rename_free(g: onnx.GraphProto, renames: Mapping[str, str], env: Mapping[str, Val]) -> None:
    """Rename, in place, the names a subgraph takes from outer scopes."""
    local = {v.name for v in g.input} | {t.name for t in g.initializer}
    local |= {o for n in g.node for o in n.output}
    for n in g.node:
        for k, i in enumerate(n.input):
            if i and i not in local:
                if i in env and not isinstance(env[i], str):
                    raise Onnx2EdgeError(
                        f"a subgraph of node '{n.name}' reads the sequence or optional '{i}'"
                    )
                if i in renames:
                    n.input[k] = renames[i]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_free(a.g, {k: v for k, v in renames.items() if k not in local}, env)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _rename_free(sub, {k: v for k, v in renames.items() if k not in local}, env)
    for o in g.output:
        if o.name not in local and o.name in renames:
            # an output taken straight from outer scope: an Identity keeps the output's name
            g.node.append(helper.make_node("Identity", [renames[o.name]], [o.name]))


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Element outputs carry no type yet: take the type onnx's inference gives the tensor."""
    if all(o.type.HasField("tensor_type") for o in model.graph.output):
        return model
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    types = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    types.update({v.name: v.type for v in model.graph.input})
    for t in model.graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    for o in model.graph.output:
        if o.type.HasField("tensor_type"):
            continue
        t = types.get(o.name)
        if t is None or not t.HasField("tensor_type"):
            raise Onnx2EdgeError(f"output '{o.name}': its type is not known at conversion")
        o.type.CopyFrom(t)
    return model
