"""Graph surgery (simple-onnx-processing-tools' family, seed 002): extract, delete nodes,
rename, set shapes, add outputs, change opset, simplify, bind an input to a constant.

Each function reads a model file, builds a new model and writes it atomically; each refuses,
naming what is wrong, an edit that would leave a broken graph (onnx's checker is the last
gate before writing, and edits that can change numerics are run in onnxruntime).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import Onnx2EdgeError
from ..frontend.loader import fix_input_shapes, infer_shapes, load_model
from ..ir.expose import expose_outputs
from ..ir.proto import MAX_IR_VERSION, graph_from_model
from ..runtime import complete_inputs, ort_run
from .model_io import Shapes, count_ops, load_graph, op_delta, save_model, to_model, verify_models


def _tensor_names(g: onnx.GraphProto) -> set[str]:
    names = {i.name for i in g.input} | {t.name for t in g.initializer}
    names |= {o for n in g.node for o in n.output if o}
    return names


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    return out


def _split(names: Sequence[str] | str) -> list[str]:
    if isinstance(names, str):
        names = names.split(",")
    return [n.strip() for n in names if n.strip()]


def _graph_inputs(g: onnx.GraphProto) -> list[str]:
    inits = {t.name for t in g.initializer}
    return [i.name for i in g.input if i.name not in inits]


# --- extract ----------------------------------------------------------------------------------
def extract(
    model: str | Path, out: str | Path, inputs: Sequence[str] | str, outputs: Sequence[str] | str
) -> dict[str, Any]:
    """The subgraph between tensors `inputs` and `outputs` (onnx.utils.Extractor)."""
    proto = load_model(model)
    ins, outs = _split(inputs), _split(outputs)
    if not outs:
        raise Onnx2EdgeError("extract needs --outputs NAME[,NAME]")
    known = _tensor_names(proto.graph)
    bad = [n for n in (*ins, *outs) if n not in known]
    if bad:
        raise Onnx2EdgeError(f"{model}: no tensor named {', '.join(repr(b) for b in bad)}")
    typed = infer_shapes(proto)
    types = {v.name: v for v in (*typed.graph.value_info, *typed.graph.input, *typed.graph.output)}
    untyped = [
        n
        for n in (*ins, *outs)
        if n not in types and n not in {t.name for t in proto.graph.initializer}
    ]
    if untyped:
        raise Onnx2EdgeError(
            f"{model}: shape inference gives no type for {', '.join(untyped)}; "
            "cannot make it a graph "
            "input / output (fix the input shapes with set-shape first)"
        )
    ex = onnx.utils.Extractor(typed)
    sub = ex.extract_model(ins, outs)
    g = sub.graph
    avail = {i.name for i in g.input} | {t.name for t in g.initializer}
    need = []
    for n in g.node:
        for i in n.input:
            if i and i not in avail and i not in need:
                need.append(i)
        avail.update(n.output)
    if need:
        raise Onnx2EdgeError(
            f"outputs {', '.join(outs)} also depend on {', '.join(need)}, "
            "which is not among --inputs "
            "(add it to --inputs)"
        )
    sub.ir_version = min(sub.ir_version, MAX_IR_VERSION)
    save_model(sub, out, "extract")
    return {"output": str(out), "nodes": len(g.node), "inputs": ins, "outputs": outs}


# --- delete-nodes -----------------------------------------------------------------------------
def delete_nodes(model: str | Path, out: str | Path, names: Sequence[str] | str) -> dict[str, Any]:
    """Delete nodes by name. A node whose output is still read is bypassed when it has one
    activation input of the same type and shape as its output (Identity-like: Dropout, Cast
    to the same type, a no-op Reshape...); otherwise the deletion is refused."""
    from ..passes import eliminate_dead_nodes

    proto, graph = load_graph(model)
    wanted = _split(names)
    by_name = {n.name: n for n in graph.nodes}
    bad = [n for n in wanted if n not in by_name]
    if bad:
        raise Onnx2EdgeError(f"{model}: no node named {', '.join(repr(b) for b in bad)}")
    rename: dict[str, str] = {}
    for name in wanted:
        n = by_name[name]
        used = [o for o in n.outputs if o and (graph.consumers(o) or o in graph.outputs)]
        if not used:
            continue
        acts = [i for i in n.inputs if i and not graph.is_const(i)]
        if len(acts) != 1 or len(used) != 1 or used[0] in graph.outputs:
            readers = sorted({c.name for o in used for c in graph.consumers(o)} - set(wanted))
            what = (
                f"graph output {used[0]}"
                if used[0] in graph.outputs
                else f"nodes {', '.join(readers)}"
            )
            raise Onnx2EdgeError(
                f"node '{name}' ({n.op_type}): its output is read by {what} "
                "and it cannot be bypassed "
                "(bypass needs one activation input and one output); delete the readers too"
            )
        ti, to = graph.type_of(acts[0]), graph.type_of(used[0])
        if ti is None or to is None or ti != to:
            raise Onnx2EdgeError(
                f"node '{name}' ({n.op_type}): input {acts[0]} ({_fmt_type(ti)}) "
                f"and output {used[0]} "
                f"({_fmt_type(to)}) differ, so its readers cannot read the input instead"
            )
        rename[used[0]] = acts[0]

    def resolve(t: str) -> str:
        while t in rename:
            t = rename[t]
        return t

    nodes = [
        n.replace(inputs=tuple(resolve(i) for i in n.inputs))
        for n in graph.nodes
        if n.name not in wanted
    ]
    new = graph.with_nodes(nodes)
    pruned = eliminate_dead_nodes(new)
    dead = sorted({n.name for n in new.nodes} - {n.name for n in pruned.nodes})
    save_model(to_model(pruned), out, "delete-nodes")
    return {
        "output": str(out),
        "deleted": wanted,
        "bypassed": sorted(rename),
        "also_removed_dead": dead,
    }


def _fmt_type(t: object) -> str:
    if t is None:
        return "unknown type"
    shape = getattr(t, "shape", None)
    dims = "x".join(map(str, shape)) if shape is not None else "?"
    return f"{t.dtype} {dims}"  # type: ignore[attr-defined]


# --- rename -------------------------------------------------------------------------------------
def _rename_graph(g: onnx.GraphProto, tmap: Mapping[str, str], nmap: Mapping[str, str]) -> None:
    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = tmap.get(vi.name, vi.name)
    for t in g.initializer:
        t.name = tmap.get(t.name, t.name)
    for n in g.node:
        n.name = nmap.get(n.name, n.name)
        n.input[:] = [tmap.get(i, i) for i in n.input]
        n.output[:] = [tmap.get(o, o) for o in n.output]
        for a in n.attribute:  # subgraphs may read outer-scope tensors by name
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_graph(a.g, tmap, {})
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    _rename_graph(sg, tmap, {})


def _build_map(
    old: set[str], explicit: Mapping[str, str], regex: Sequence[tuple[str, str]], what: str
) -> dict[str, str]:
    m: dict[str, str] = {}
    for k, v in explicit.items():
        if k not in old:
            raise Onnx2EdgeError(f"rename: no {what} named '{k}'")
        m[k] = v
    for pat, repl in regex:
        try:
            rx = re.compile(pat)
        except re.error as e:
            raise Onnx2EdgeError(f"rename: bad regex '{pat}': {e}") from None
        for name in sorted(old):
            if name not in m and rx.search(name):
                m[name] = rx.sub(repl, name)
    m = {k: v for k, v in m.items() if k != v}
    empty = [k for k, v in m.items() if not v]
    if empty:
        raise Onnx2EdgeError(f"rename: {what} {', '.join(empty)} would get an empty name")
    final = (old - set(m)) | set()
    seen: dict[str, str] = {}
    for k, v in m.items():
        if v in final or v in seen:
            other = seen.get(v, v)
            raise Onnx2EdgeError(f"rename: {what} '{k}' -> '{v}' collides with {what} '{other}'")
        seen[v] = k
    return m


def rename(
    model: str | Path,
    out: str | Path,
    *,
    tensors: Mapping[str, str] | None = None,
    nodes: Mapping[str, str] | None = None,
    tensor_regex: Sequence[tuple[str, str]] = (),
    node_regex: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Rename tensors (inputs, outputs, initializers, intermediates) and nodes; explicit
    OLD=NEW pairs and regular expressions (re.sub). Refuses unknown names, empty names and
    collisions."""
    proto = load_model(model)
    g = proto.graph
    tmap = _build_map(
        _tensor_names(g) | {o.name for o in g.output}, tensors or {}, tensor_regex, "tensor"
    )
    nmap = _build_map({n.name for n in g.node if n.name}, nodes or {}, node_regex, "node")
    if not tmap and not nmap:
        raise Onnx2EdgeError("rename: nothing matched; no file written")
    new = _copy(proto)
    _rename_graph(new.graph, tmap, nmap)
    save_model(new, out, "rename")
    return {"output": str(out), "tensors": tmap, "nodes": nmap}


# --- set-shape ----------------------------------------------------------------------------------
def set_shape(
    model: str | Path,
    out: str | Path,
    *,
    shapes: Mapping[str, Sequence[int | str]] | None = None,
    batch: int | str | None = None,
) -> dict[str, Any]:
    """Change input shapes (dims may be symbolic names) and/or the batch (dim 0 of every
    input). Intermediate and output shapes are re-inferred, and a model whose static shapes
    are set is run once in onnxruntime: constants baked for the old shape (a Reshape to
    [1, -1] ...) are caught here, not on the device."""
    proto = load_model(model)
    shapes = dict(shapes or {})
    inputs = {i.name: i for i in proto.graph.input if i.name in _graph_inputs(proto.graph)}
    bad = [n for n in shapes if n not in inputs]
    if bad:
        raise Onnx2EdgeError(
            f"set-shape: {', '.join(bad)} is not an input (inputs: {', '.join(inputs)})"
        )
    if not shapes and batch is None:
        raise Onnx2EdgeError("set-shape needs --input-shape NAME=DIMS or --batch N")
    new = _copy(proto)
    for vi in new.graph.input:
        if vi.name not in inputs:
            continue
        dims = vi.type.tensor_type.shape.dim
        want = list(shapes.get(vi.name, [_dim(d) for d in dims]))
        if vi.name in shapes and len(dims) and len(want) != len(dims):
            raise Onnx2EdgeError(
                f"set-shape: input '{vi.name}' has rank {len(dims)}, not {len(want)}: "
                "a rank change "
                "would break the nodes that read it"
            )
        if batch is not None and vi.name not in shapes:
            if not want:
                raise Onnx2EdgeError(f"set-shape --batch: input '{vi.name}' is a scalar")
            want[0] = batch
        vi.type.tensor_type.ClearField("shape")
        for w in want:
            d = vi.type.tensor_type.shape.dim.add()
            if isinstance(w, str) and not w.isdigit():
                d.dim_param = w
            elif w is not None:
                d.dim_value = int(w)
    for o in new.graph.output:  # re-inferred below; the old dims would contradict the new
        o.type.tensor_type.ClearField("shape")
    del new.graph.value_info[:]
    try:
        onnx.shape_inference.infer_shapes(new, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several types
        raise Onnx2EdgeError(
            f"set-shape: the new shapes contradict the model: {str(e).splitlines()[0]}"
        ) from None
    new = infer_shapes(new)
    g = graph_from_model(new)
    types = [g.type_of(i) for i in g.inputs]
    if all(t is not None and t.is_static for t in types):
        try:
            ort_run(new, complete_inputs(g, {}, 0))
        except Onnx2EdgeError as e:
            raise Onnx2EdgeError(
                f"set-shape: the model no longer runs with these shapes ({e})"
            ) from None
    save_model(new, out, "set-shape")
    return {
        "output": str(out),
        "inputs": {i: _shape_str(g, i) for i in g.inputs},
        "outputs": {o: _shape_str(g, o) for o in g.outputs},
    }


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if d.HasField("dim_value"):
        return int(d.dim_value)
    return d.dim_param or None


def _shape_str(g: Any, name: str) -> str:
    t = g.type_of(name)
    if t is None or t.shape is None:
        return "?"
    return "x".join("?" if d is None else str(d) for d in t.shape)


# --- add-output ---------------------------------------------------------------------------------
def add_output(model: str | Path, out: str | Path, names: Sequence[str] | str) -> dict[str, Any]:
    """Make intermediate tensors graph outputs (typed by shape inference)."""
    proto = load_model(model)
    wanted = _split(names)
    produced = {o for n in proto.graph.node for o in n.output if o}
    present = {o.name for o in proto.graph.output}
    bad = [n for n in wanted if n not in produced]
    if bad:
        raise Onnx2EdgeError(f"add-output: no node produces {', '.join(bad)}")
    dup = [n for n in wanted if n in present]
    if dup:
        raise Onnx2EdgeError(f"add-output: {', '.join(dup)} is already an output")
    new, _ = expose_outputs(proto, wanted, constants=True)
    save_model(new, out, "add-output")
    return {"output": str(out), "added": wanted}


# --- opset ----------------------------------------------------------------------------------------
def convert_opset(
    model: str | Path, out: str | Path, version: int, *, verify: bool = True, seed: int = 0
) -> dict[str, Any]:
    """onnx.version_converter to `version`, then verified against the original in onnxruntime."""
    proto = load_model(model)
    src = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    top = onnx.defs.onnx_opset_version()
    if not 7 <= version <= top:
        raise Onnx2EdgeError(f"opset: version {version} is outside 7..{top}")
    try:
        new = onnx.version_converter.convert_version(proto, version)
    except Exception as e:  # noqa: BLE001 - the converter raises several unrelated types
        m = re.search(r"No Previous Version of (\w+)", str(e))
        hint = ""
        if m:  # an op newer than the target opset: a decomposition rule may remove it
            from .rules import RULES

            names = [r.name for r in RULES.values() if m[1] in r.ops and r.exact]
            if names:
                hint = f" (rewrite --rules {names[0]} first removes the {m[1]} nodes)"
        raise Onnx2EdgeError(
            f"opset: onnx's version converter cannot take this model from {src} to "
            f"{version}: {str(e).splitlines()[0]}{hint}"
        ) from None
    new.ir_version = min(new.ir_version, MAX_IR_VERSION)
    res: dict[str, Any] = {"output": str(out), "from": src, "to": version}
    if verify:
        rep = verify_models(proto, new, seed=seed)
        res["verify"] = rep.as_dict()
        if not rep.ok:
            raise Onnx2EdgeError(
                f"opset: the converted model computes different outputs ({_worst(rep)}); "
                "nothing written"
            )
    save_model(new, out, "opset")
    return res


def _worst(rep: Any) -> str:
    w = max(rep.outputs, key=lambda o: o.max_rel)
    return f"output '{w.name}': max abs error {w.max_abs:.3g}"


# --- simplify -----------------------------------------------------------------------------------
SIMPLIFY_PASSES = ("fold_constants", "remove_identity", "eliminate_dead_nodes", "fold_batchnorm")
SIMPLIFY_RULES = ("reshape_cleanup", "matmul_add_gemm")


def simplify(
    model: str | Path,
    out: str | Path,
    *,
    verify: bool = True,
    seed: int = 0,
    input_shapes: Shapes = None,
) -> dict[str, Any]:
    """The project's own clean-up passes (constant folding, Identity / dead-node removal,
    BatchNorm folding) plus the exact clean-up rules (Reshape chains, MatMul + Add -> Gemm);
    reports the op counts and weight bytes before and after; verified in onnxruntime."""
    from ..passes import run_passes
    from .rewrite import apply_rules
    from .rules import get_rules

    proto, graph = load_graph(model)
    if input_shapes:
        proto2 = fix_input_shapes(proto, input_shapes, quiet=True)
        graph = graph_from_model(infer_shapes(proto2))
    new = run_passes(graph, SIMPLIFY_PASSES)
    new, _ = apply_rules(new, get_rules(SIMPLIFY_RULES))
    new = run_passes(new, ("eliminate_dead_nodes",))
    edited = to_model(new)
    res: dict[str, Any] = {
        "output": str(out),
        "nodes": [len(graph.nodes), len(new.nodes)],
        "weight_bytes": [_wbytes(graph), _wbytes(new)],
        "ops": op_delta(graph, new),
        "before": count_ops(graph),
    }
    if verify:
        rep = verify_models(proto, edited, seed=seed, input_shapes=input_shapes)
        res["verify"] = rep.as_dict()
        if not rep.ok:
            raise Onnx2EdgeError(f"simplify changed the outputs ({_worst(rep)}); nothing written")
    save_model(edited, out, "simplify")
    return res


def _wbytes(g: Any) -> int:
    return int(sum(np.asarray(v).nbytes for v in g.initializers.values()))


# --- constant -------------------------------------------------------------------------------------
def bind_constant(
    model: str | Path,
    out: str | Path,
    values: Mapping[str, np.ndarray],
    *,
    fold: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """Turn graph inputs into initializers holding `values` (a single number fills a static
    input); optionally fold what follows (constant folding + dead nodes), verified."""
    from ..passes import run_passes

    proto, graph = load_graph(model)
    bad = [n for n in values if n not in graph.inputs]
    if bad:
        raise Onnx2EdgeError(
            f"constant: {', '.join(bad)} is not an input (inputs: {', '.join(graph.inputs)})"
        )
    inits = dict(graph.initializers)
    given: dict[str, np.ndarray] = {}
    for name, v in values.items():
        t = graph.type_of(name)
        arr = np.asarray(v)
        if arr.ndim == 0 and t is not None and t.is_static and t.static_shape != ():
            arr = np.full(t.static_shape, arr)  # a single number fills the whole input
        if t is not None and t.shape is not None:
            if len(t.shape) != arr.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape, strict=False)
            ):
                raise Onnx2EdgeError(
                    f"constant: value for '{name}' has shape "
                    f"{'x'.join(map(str, arr.shape)) or 'scalar'}, "
                    f"the input is {_shape_str(graph, name)}"
                )
            if arr.dtype != t.dtype:
                if not np.can_cast(arr.dtype, t.dtype, casting="same_kind"):
                    raise Onnx2EdgeError(
                        f"constant: value for '{name}' is {arr.dtype}, the input is {t.dtype}"
                    )
                arr = arr.astype(t.dtype)
        inits[name] = arr
        given[name] = arr
    new = graph.replace(
        inputs=tuple(i for i in graph.inputs if i not in values), initializers=inits
    )
    if fold:
        new = run_passes(new, ("fold_constants", "eliminate_dead_nodes"))
    edited = to_model(new)
    res: dict[str, Any] = {
        "output": str(out),
        "bound": sorted(values),
        "nodes": [len(graph.nodes), len(new.nodes)],
    }
    if verify:
        rep = verify_models(proto, edited, inputs=given)
        res["verify"] = rep.as_dict()
        if not rep.ok:
            raise Onnx2EdgeError(
                f"constant: folding changed the outputs ({_worst(rep)}); nothing written"
            )
    save_model(edited, out, "constant")
    return res


def parse_value(spec: str) -> tuple[str, np.ndarray]:
    """`NAME=FILE.npy` or `NAME=1,2,3` / `NAME=0.5` literals."""
    name, sep, val = spec.partition("=")
    if not sep or not name or not val:
        raise Onnx2EdgeError(f"bad value '{spec}': expected NAME=FILE.npy or NAME=1,2,3")
    if val.endswith(".npy"):
        p = Path(val)
        if not p.is_file():
            raise Onnx2EdgeError(f"{name}: no such file '{val}'")
        return name, np.load(p, allow_pickle=False)
    try:
        nums = [float(x) for x in val.split(",")]
    except ValueError:
        raise Onnx2EdgeError(
            f"bad value '{spec}': numbers separated by commas, or a .npy file"
        ) from None
    arr = np.array(nums if len(nums) > 1 else nums[0])
    if all(x == int(x) for x in nums):
        arr = arr.astype(np.int64)
    return name, arr
