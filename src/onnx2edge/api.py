"""The Python API; the CLI is a thin layer over these functions, one per subcommand."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from . import frontend
from .analysis import inspect_graph
from .backends import ConvertResult, get_backend, read_manifest
from .backends.base import MANIFEST, check_options
from .compare import TensorReport, VerifyReport, compare_all, within_spread
from .errors import Onnx2EdgeError, UnsupportedError
from .frontend.handle import (
    DEFAULT_PASSES,
    Fixed,
    LoadedModel,
    Model,
    Shapes,
    frontend_graph,
    model_label,
    source_of,
)
from .frontend.loader import (
    bind_inputs,
    fix_input_shapes,
    infer_shapes,
    load_model,
    read_model_proto,
)
from .fsutil import atomic_dir, resolve_inside, write_bytes_atomic, write_text_atomic
from .ir import Graph
from .ir.expose import expose_outputs
from .ir.proto import graph_from_model, model_from_graph
from .jsonio import dumps, loads, model_from_json, model_to_json
from .passes import run_passes
from .runtime import complete_inputs, ort_integer_products_exact, ort_run


# --- a model loaded once ---------------------------------------------------------------------
def load(model: Model, *, input_shapes: Shapes = None, fixed_inputs: Fixed = None) -> LoadedModel:
    """`model` as a handle the other functions take in its place (`inspect`, `prepare`,
    `convert`, `verify`, `check`): the frontend runs on first use, once, however many of
    them look at the model (`report` uses one for all its steps)."""
    return LoadedModel(model, input_shapes, fixed_inputs)


# --- inspect ------------------------------------------------------------------------------
def inspect(
    model: Model | LoadedModel, *, input_shapes: Shapes = None, fixed_inputs: Fixed = None
) -> dict[str, Any]:
    handle = _handle(model, input_shapes, fixed_inputs, quiet=False)
    info = inspect_graph(handle.graph())
    info["c_arena_bytes"] = _c_arena_bytes(handle)
    return info


def _handle(
    model: Model | LoadedModel, input_shapes: Shapes, fixed_inputs: Fixed, *, quiet: bool = True
) -> LoadedModel:
    """`model` as a LoadedModel (itself when it is one): every step after this shares one
    frontend run."""
    if isinstance(model, LoadedModel):
        frontend_graph(model, input_shapes=input_shapes, fixed_inputs=fixed_inputs)
        return model
    return LoadedModel(model, input_shapes, fixed_inputs, quiet=quiet)


def _c_arena_bytes(model: LoadedModel) -> int | None:
    """RAM the generated C needs for activations and scratch (None when C refuses the model)."""
    from .backends.c.phases import emit_model

    try:
        graph = prepare(model, "c", quiet=True)
    except Onnx2EdgeError:
        return None
    return int(emit_model(graph)[1].arena)


# --- JSON round trip ------------------------------------------------------------------------
def _external_locations(model: onnx.ModelProto) -> list[str]:
    from onnx import external_data_helper

    locs = []
    for t in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(t):
            locs.extend(e.value for e in t.external_data if e.key == "location")
    return sorted(set(locs))


def _copy_external(locs: list[str], src_dir: Path, dst_dir: Path, what: str) -> None:
    if src_dir.resolve() == dst_dir.resolve():
        return
    for loc in locs:
        src = resolve_inside(src_dir, loc, f"{what}: external data")
        dst = resolve_inside(dst_dir, loc, f"{what}: external data")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def to_json(model: str | Path, out: str | Path, *, weights: str = "auto") -> Path:
    """Write `out` (JSON) and, for weights kept as .npy, the folder `<out stem>.weights/`."""
    model, out = Path(model), Path(out)
    proto = read_model_proto(model, load_external=False)
    npy_ref = f"{out.stem}.weights"
    doc, files = model_to_json(proto, weights=weights, npy_ref=npy_ref)
    if files:
        with atomic_dir(out.parent / npy_ref) as tmp:
            for name, arr in files.items():
                np.save(tmp / name, arr, allow_pickle=False)
    _copy_external(_external_locations(proto), model.parent, out.parent, str(model))
    write_text_atomic(out, dumps(doc))
    return out


def from_json(doc_path: str | Path, out: str | Path) -> Path:
    doc_path, out = Path(doc_path), Path(out)
    if not doc_path.is_file():
        raise Onnx2EdgeError(f"{doc_path}: no such file")
    proto = model_from_json(
        loads(doc_path.read_text(encoding="utf-8"), str(doc_path)), doc_path.parent
    )
    _copy_external(_external_locations(proto), doc_path.parent, out.parent, str(doc_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Check the file where it will live, so the checker finds external data beside it.
    tmp = out.with_name(f".{out.name}.checking.onnx")
    try:
        tmp.write_bytes(proto.SerializeToString(deterministic=True))
        onnx.checker.check_model(str(tmp))
        os.replace(tmp, out)
    except (onnx.checker.ValidationError, ValueError) as e:
        raise Onnx2EdgeError(
            f"{doc_path}: the JSON describes an invalid model: {str(e).splitlines()[0]}"
        ) from e
    finally:
        tmp.unlink(missing_ok=True)
    return out


def import_model(model: str | Path, out: str | Path) -> Path:
    """A .tflite or OpenVINO .xml model written as ONNX, checked like any model read."""
    from .importers import import_model as _import

    out = Path(out)
    proto = load_model(_import(model))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, proto.SerializeToString(deterministic=True))
    return out


# --- weights --------------------------------------------------------------------------------
WEIGHTS_INDEX = "index.json"


def _safe_file_name(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "tensor"
    fname, i = f"{base}.npy", 1
    while fname in taken:
        fname, i = f"{base}_{i}.npy", i + 1
    taken.add(fname)
    return fname


def export_weights(model: Model, out_dir: str | Path) -> Path:
    proto = load_model(model)
    taken: set[str] = set()
    entries = []
    with atomic_dir(out_dir) as tmp:
        for t in proto.graph.initializer:
            arr = numpy_helper.to_array(t)
            fname = _safe_file_name(t.name, taken)
            np.save(tmp / fname, arr, allow_pickle=False)
            entries.append(
                {"name": t.name, "file": fname, "shape": list(arr.shape), "dtype": str(arr.dtype)}
            )
        index = {
            "format": "onnx2edge-weights",
            "version": 1,
            "model": model_label(model),
            "tensors": entries,
        }
        (tmp / WEIGHTS_INDEX).write_text(json.dumps(index, indent=1) + "\n")
    return Path(out_dir)


def import_weights(model: str | Path, weights_dir: str | Path, out: str | Path) -> Path:
    proto = load_model(model)
    weights_dir = Path(weights_dir)
    index_path = weights_dir / WEIGHTS_INDEX
    if not index_path.is_file():
        raise Onnx2EdgeError(
            f"{weights_dir}: no {WEIGHTS_INDEX}; export one with `onnx2edge weights export`"
        )
    index = loads(index_path.read_text(encoding="utf-8"), str(index_path))
    tensors = index.get("tensors") if isinstance(index, dict) else None
    if not isinstance(tensors, list):
        raise Onnx2EdgeError(f"{index_path}: $.tensors: expected a list of tensors")
    by_name = {t.name: t for t in proto.graph.initializer}
    for i, entry in enumerate(tensors):
        where = f"{index_path}: $.tensors[{i}]"
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("file"), str)
        ):
            raise Onnx2EdgeError(f"{where}: expected an object with 'name' and 'file'")
        name = entry["name"]
        if name not in by_name:
            raise Onnx2EdgeError(f"{where}: the model has no initializer '{name}'")
        file = resolve_inside(weights_dir, entry["file"], f"{where}: file")
        if not file.is_file():
            raise Onnx2EdgeError(f"{where}: file '{entry['file']}' not found")
        try:
            arr = np.load(file, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise Onnx2EdgeError(f"{where}: cannot read '{entry['file']}': {e}") from None
        old = numpy_helper.to_array(by_name[name])
        if arr.shape != old.shape:
            raise Onnx2EdgeError(
                f"{where}: '{name}' has shape {list(arr.shape)} in {entry['file']}, the model needs {list(old.shape)}"
            )
        if arr.dtype != old.dtype:
            raise Onnx2EdgeError(
                f"{where}: '{name}' has dtype {arr.dtype} in {entry['file']}, the model needs {old.dtype}"
            )
        new = numpy_helper.from_array(arr, name=name)
        by_name[name].CopyFrom(new)
    write_bytes_atomic(out, proto.SerializeToString(deterministic=True))
    return Path(out)


# --- convert / run --------------------------------------------------------------------------
def prepare(
    model: Model | LoadedModel,
    target: str,
    *,
    input_shapes: Shapes = None,
    fixed_inputs: Fixed = None,
    options: Mapping[str, Any] | None = None,
    quiet: bool = False,
) -> Graph:
    """Frontend + the backend's passes + the backend's coverage check. `model` may be a
    LoadedModel: its frontend run (and these passes, once) are reused."""
    backend = get_backend(target)
    passes = (*DEFAULT_PASSES, *backend.passes_for(dict(options or {})))
    if isinstance(model, LoadedModel):
        frontend_graph(model, input_shapes=input_shapes, fixed_inputs=fixed_inputs)
        graph = model.after(passes)
    else:
        graph = run_passes(
            frontend.load(model, input_shapes=input_shapes, fixed_inputs=fixed_inputs, quiet=quiet),
            passes,
        )
    problems = [str(r) for r in backend.check(graph, dict(options or {}))]
    if problems:
        raise UnsupportedError(
            f"{model_label(model)}: {len(problems)} node{'s' if len(problems) > 1 else ''} cannot be converted "
            f"to {target}: " + "; ".join(problems)
        )
    return graph


def convert(
    model: Model | LoadedModel,
    target: str,
    out_dir: str | Path,
    *,
    input_shapes: Shapes = None,
    options: Mapping[str, Any] | None = None,
    fixed_inputs: Fixed = None,
    log: Any = None,
) -> ConvertResult:
    """`model` -> `out_dir` for `target`; `log` (a callable) gets progress lines."""
    say = log or (lambda msg: None)
    backend = get_backend(target)
    # canonical before anything runs: a bad option fails fast, the manifest records what emit
    # read (e.g. the C backend's `kernels`, checked against its kernel strategies)
    options = backend.normalize_options(check_options(backend, options or {}))
    graph = prepare(
        model, target, input_shapes=input_shapes, fixed_inputs=fixed_inputs, options=options
    )
    # after the checks: a refused model gets its one error line, no progress before it
    say(f"writing the {backend.label or target} output ({len(graph.nodes)} nodes)")
    with atomic_dir(out_dir, owned=_previous_outputs) as tmp:
        # the model file's name: the C backend's default symbol prefix (not an option: the
        # manifest records "model" already)
        src = source_of(model)
        model_file = Path(src).name if isinstance(src, str | Path) else "model.onnx"
        extra = {"model_file": model_file, **({"log": log} if log else {})}
        res = backend.emit(graph, tmp, {**extra, **options})
        manifest = {
            "files": sorted({*res.files, MANIFEST}),
            "tool": "onnx2edge",
            "target": target,
            "model": model_label(model),
            "model_sha256": _sha256(src),  # `verify OUT/` checks it verifies the same model
            "options": {
                k: v for k, v in sorted(options.items()) if isinstance(v, str | int | float | bool)
            },
            "inputs": [_io_entry(graph, n) for n in graph.inputs],
            "fixed_inputs": _fixed_entries(
                model.fixed_inputs if isinstance(model, LoadedModel) else fixed_inputs
            ),
            "outputs": [_io_entry(graph, n) for n in graph.outputs],
            "stats": res.stats,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    res.out_dir = Path(out_dir)
    return res


def _quantized(manifest: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> dict:
    """Feeds for a folder whose inputs stay quantized (manifest `quantization`)."""
    out = dict(feeds)
    for spec in manifest["inputs"]:
        q = spec.get("quantization")
        if q and spec["name"] in out:
            info = np.iinfo(np.dtype(spec["dtype"]))
            x = np.asarray(out[spec["name"]], dtype=np.float32)
            scaled = np.rint(x / np.float32(q["scale"])) + q["zero_point"]
            out[spec["name"]] = np.clip(scaled, info.min, info.max).astype(spec["dtype"])
    return out


def _dequantized(manifest: Mapping[str, Any], outs: Mapping[str, np.ndarray]) -> dict:
    res = dict(outs)
    for spec in manifest["outputs"]:
        q = spec.get("quantization")
        if q and spec["name"] in res:
            y = res[spec["name"]].astype(np.float32) - np.float32(q["zero_point"])
            res[spec["name"]] = (y * np.float32(q["scale"])).astype(np.float32)
    return res


def _previous_outputs(folder: Path) -> set[str]:
    """What an earlier `convert` wrote into `folder` (replaced as a whole, so a file it no
    longer writes cannot linger beside the new ones); anything else there is the user's."""
    try:
        return {*json.loads((folder / MANIFEST).read_text()).get("files", []), MANIFEST}
    except (OSError, ValueError, AttributeError):
        return {MANIFEST}


def _fixed_entries(fixed: Fixed) -> dict[str, Any]:
    """What --fix-input bound (it changes the generated code, so the manifest records it)."""
    import hashlib

    out: dict[str, Any] = {}
    for k, v in sorted((fixed or {}).items()):
        arr = np.ascontiguousarray(v)
        digest = hashlib.sha256(arr.tobytes()).hexdigest()
        e: dict[str, Any] = {"shape": list(arr.shape), "dtype": str(arr.dtype), "sha256": digest}
        if arr.size <= 16:
            e["values"] = arr.reshape(-1).tolist()
        out[k] = e
    return out


def _io_entry(graph: Graph, name: str) -> dict[str, Any]:
    t = graph.type_of(name)
    assert t is not None and t.is_static
    from .passes.bounded import bounded_axis

    entry = {"name": name, "shape": list(t.static_shape), "dtype": str(t.dtype)}
    # C `--io int8`: a tensor left quantized (backends/c/quantized_io.py): its scale / zero point
    quant = json.loads(graph.metadata.get("o2e.quantized_io", "{}")).get(name)
    if quant:
        entry["quantization"] = {"scale": quant["scale"], "zero_point": quant["zero_point"]}
    if (axis := bounded_axis(graph, name)) is not None:
        entry["bounded_axis"] = axis  # shape is a bound; the run reports the actual extent
    return entry


def run(
    out_dir: str | Path,
    inputs: Mapping[str, np.ndarray],
    *,
    options: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    manifest = read_manifest(out_dir)
    backend = get_backend(manifest["target"])
    known = [s["name"] for s in manifest["inputs"]]
    unknown = [n for n in inputs if n not in known]
    if unknown:  # named first: a misspelt input is not reported as the real one missing
        listed = ", ".join(
            f"{s['name']} ({'x'.join(map(str, s['shape']))}, {s['dtype']})"
            for s in manifest["inputs"]
        )
        raise Onnx2EdgeError(
            f"--input {', '.join(unknown)}: not an input of the model (its inputs: {listed})"
        )
    feeds: dict[str, np.ndarray] = {}
    for spec in manifest["inputs"]:
        if spec["name"] not in inputs:
            raise Onnx2EdgeError(
                f"missing --input {spec['name']}=FILE.npy (shape {'x'.join(map(str, spec['shape']))}, {spec['dtype']})"
            )
        arr = np.asarray(inputs[spec["name"]])
        if list(arr.shape) != spec["shape"]:
            raise Onnx2EdgeError(
                f"--input {spec['name']}: shape {'x'.join(map(str, arr.shape))}, the model was converted for "
                f"{'x'.join(map(str, spec['shape']))}"
            )
        feeds[spec["name"]] = arr.astype(spec["dtype"], copy=False)
    return backend.run(Path(out_dir), feeds, dict(options or {}))


# --- verify -----------------------------------------------------------------------------------
def _with_all_outputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy whose graph outputs include every node output (typed where inference knows)."""
    return expose_outputs(model)


def verify(
    model: Model | LoadedModel,
    *,
    target: str = "onnx",
    input_shapes: Shapes = None,
    fixed_inputs: Fixed = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    rtol: float | None = None,
    atol: float = 1e-6,
    per_layer: bool = False,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    work_dir: str | Path | None = None,
    log: Any = None,
    spread: bool = True,
    converted: str | Path | None = None,
) -> VerifyReport:
    """`model` converted for `target` (into `work_dir` if given), run, and compared with
    onnxruntime running `model`. `converted`: a folder `convert` already wrote from `model`,
    run as it is instead (see `verify_folder`). `model` may itself be such a folder."""
    import tempfile

    if converted is None and isinstance(model, str | Path) and Path(model).is_dir():
        return verify_folder(
            model,
            inputs=inputs,
            rtol=rtol,
            atol=atol,
            per_layer=per_layer,
            seed=seed,
            options=options,
            log=log,
            spread=spread,
        )
    say = log or (lambda msg: None)
    rtol_why = ""
    if target != "onnx":  # a misspelt option fails before onnxruntime runs
        checked = check_options(get_backend(target), options or {})
        if rtol is None:
            rtol, rtol_why = get_backend(target).default_rtol(checked)
    elif options:
        raise Onnx2EdgeError(
            f"options {', '.join(map(repr, options))}: target onnx (the passes re-emitted as "
            "ONNX) takes none; give the target they belong to"
        )
    if rtol is None:
        rtol = 1e-4

    if isinstance(model, LoadedModel):  # its shapes and bound inputs are the conversion's
        input_shapes = input_shapes or model.input_shapes
        fixed_inputs = fixed_inputs or model.fixed_inputs
    base = load_model(source_of(model))
    # The reference is the original model with the fixed values fed as inputs, not the model
    # with them bound: onnxruntime may fail to load the bound one (its If inlining rejects a
    # condition that became a constant: "InlineIfSubgraph ... is not If node's input").
    # bind_inputs still checks the names and gives the values the inputs' dtypes and shapes.
    bound = bind_inputs(base, fixed_inputs or {})
    fixed = {
        t.name: onnx.numpy_helper.to_array(t)
        for t in bound.graph.initializer
        if t.name in (fixed_inputs or {})
    }
    shapes = dict(input_shapes or {})
    feeds = complete_inputs(
        graph_from_model(infer_shapes(fix_input_shapes(bound, shapes, quiet=True))),
        inputs or {},
        seed,
    )
    original = fix_input_shapes(
        base, {**shapes, **{k: v.shape for k, v in fixed.items()}}, quiet=True
    )
    ref_graph = graph_from_model(infer_shapes(original))
    ref_feeds = {**feeds, **fixed}
    ref_model, layer_names = _with_all_outputs(original) if per_layer else (original, [])
    say("running onnxruntime (reference)")
    ref = ort_run(ref_model, ref_feeds)
    from .importers.runtime import native_reference

    native, reference = native_reference(source_of(model), ref_feeds, list(ref_graph.outputs))
    if native is not None:
        say(f"running {reference} (reference for the outputs)")
        ref = {**ref, **native}
    if not ort_integer_products_exact() and any(
        n.op_type in ("MatMulInteger", "ConvInteger") for n in original.graph.node
    ):
        say(
            "note: onnxruntime's u8 x s8 products saturate on this CPU (no VNNI) where the s8 operand "
            "is not a constant: the reference may be off"
        )
    details: list[tuple[bool, str]] = []
    if target == "onnx":
        graph = _handle(model, input_shapes, fixed_inputs).after(DEFAULT_PASSES)
        cand = model_from_graph(graph)
        if per_layer:
            cand, _ = _with_all_outputs(cand)
        ours = ort_run(cand, feeds)
        ran_on = "onnxruntime on this host (the model after onnx2edge's frontend and passes)"
    else:
        opts = {**(options or {}), "per_layer": per_layer}
        with tempfile.TemporaryDirectory(prefix="onnx2edge-verify-") as tmp:
            out = Path(work_dir) if work_dir is not None else Path(tmp) / "out"
            if converted is None:
                say(f"converting to {target}")
                handle = _handle(model, input_shapes, fixed_inputs)
                convert(handle, target, out, options=opts)
            else:
                out = Path(converted)
            say(f"building and running the {target} code")
            manifest = read_manifest(out)
            # C --io int8: inputs quantized as the dropped QuantizeLinear would have, outputs
            # dequantized as the dropped DequantizeLinear would have: the comparison stays float
            ours = _dequantized(manifest, run(out, _quantized(manifest, feeds), options=opts))
            ran_on = get_backend(target).describe_run(out, opts)
            details = get_backend(target).verify_details(out)
            if rtol_why:
                details.append((True, f"rtol {rtol:g} by default for {rtol_why}"))
    outputs = compare_all(list(ref_graph.outputs), ours, ref, rtol, atol, ref_graph)
    missing = [n for n in ref_graph.outputs if n not in ours]
    if missing:
        raise Onnx2EdgeError(f"target {target} produced no output named {', '.join(missing)}")
    if native is not None:
        outputs = [_within_steps(o, ours.get(o.name), ref[o.name]) for o in outputs]
    elif spread and not all(o.ok for o in outputs):
        say("running onnxruntime unoptimised (its own float32 spread on this model)")
        plain = ort_run(original, ref_feeds, [o.name for o in outputs], optimize=False)
        outputs = [within_spread(o, ours[o.name], plain[o.name], ref[o.name]) for o in outputs]
        outputs = [_within_dq_step(o, ours[o.name], ref[o.name], ref_graph) for o in outputs]
    layers = compare_all(layer_names, ours, ref, rtol, atol, ref_graph) if per_layer else []
    layers = [_layer_step(r) for r in layers]
    return VerifyReport(
        target,
        rtol,
        atol,
        outputs,
        layers,
        arch=(options or {}).get("arch"),
        ran_on=ran_on,
        details=details,
        reference=reference,
    )


def _within_steps(rep: TensorReport, ours: Any, ref: np.ndarray) -> TensorReport:
    """A quantized (int8 / uint8) output of a TFLite / OpenVINO model judged against the format's
    own runtime: its integer kernels round differently from the float-on-QDQ ones, so one
    quantization step is allowed (and reported as the rule applied)."""
    ref = np.asarray(ref)
    if ref.dtype not in (np.int8, np.uint8) or ours is None or np.shape(ours) != ref.shape:
        return rep
    err = (
        float(np.abs(np.asarray(ours, np.int64) - ref.astype(np.int64)).max()) if ref.size else 0.0
    )
    return replace(rep, max_abs=err, max_rel=err, ok=err <= 1, exact=False, quant_step=True)


def _layer_step(rep: TensorReport) -> TensorReport:
    """A QuantizeLinear's intermediate bytes in a --per-layer run, allowed one step: exposing
    every tensor as an output stops onnxruntime fusing DQ -> Conv -> Q into its integer
    QLinearConv, so the reference rounds those layers in float and differs by a step at ties
    (LR-ASPP int8: a depthwise layer named as the first divergence though it was exact in
    the normal build). The outputs are still judged on the normal run."""
    if rep.ok or not rep.exact or rep.op != "QuantizeLinear" or rep.max_abs > 1:
        return rep
    return replace(rep, ok=True, exact=False, quant_step=True)


# share of a DequantizeLinear output's elements allowed one step off: ties flipped by float
# rounding are rare (LR-ASPP int8: 0.45 %); a rounding bug (truncation) moves about half
DQ_STEP_SHARE = 0.01


def _within_dq_step(rep: TensorReport, ours: Any, ref: np.ndarray, graph: Graph) -> TensorReport:
    """A float output that a QDQ model's DequantizeLinear produces, judged in its quantization
    steps when it missed the float rules: the float op before the output's QuantizeLinear sits
    on a rounding tie wherever its exact value is a half step (a bilinear Resize's 0.25 / 0.75
    weights make that common), and any float reassociation -- the freedom the float tolerance
    grants -- flips the byte there by one step. Passes when every finite element is within one
    step of onnxruntime's and at most DQ_STEP_SHARE of them differ; NaN / Inf must match."""
    node = graph.producer(rep.name)
    if rep.ok or node is None or node.op_type != "DequantizeLinear" or rep.exact:
        return rep
    scale = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
    o, r = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if scale is None or scale.size != 1 or o.shape != r.shape or not r.size:
        return rep
    step = float(scale.reshape(()))
    if not step > 0 or not np.array_equal(np.isfinite(o), np.isfinite(r)):
        return rep
    fin = np.isfinite(r)
    if not np.array_equal(o[~fin], r[~fin], equal_nan=True):
        return rep
    steps = np.abs(o[fin] - r[fin]) / step
    within = bool(steps.max(initial=0.0) <= 1.0 + 1e-4)
    share = float((steps > 0.5).mean()) if steps.size else 0.0
    return replace(rep, ok=within and share <= DQ_STEP_SHARE, quant_step=True, step_share=share)


def _sha256(model: Model) -> str:
    import hashlib

    if isinstance(model, onnx.ModelProto):
        return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
    h = hashlib.sha256()
    with open(model, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_source(out_dir: str | Path, source: Model | None = None) -> Model:
    """The model a converted folder was made from: `source` if given, else the file its
    manifest names, looked for in the current folder and beside `out_dir`; refused when its
    content is not the one converted (the manifest's sha256)."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    name = str(manifest.get("model", ""))
    if source is None:
        places = [Path.cwd(), out_dir.resolve().parent, out_dir]
        found = [p / name for p in places if name and (p / name).is_file()]
        if not found:
            raise Onnx2EdgeError(
                f"{out_dir}: converted from '{name}', which is not in the current folder or "
                f"beside {out_dir}; pass it with --source PATH/{name or 'MODEL.onnx'}"
            )
        source = found[0]
    want = manifest.get("model_sha256")
    if want and _sha256(source) != want:
        raise Onnx2EdgeError(
            f"{out_dir}: was converted from another '{name}' than "
            f"{model_label(source) if isinstance(source, onnx.ModelProto) else source} "
            "(its sha256 differs); pass the model it was made from with --source"
        )
    return source


def verify_folder(
    out_dir: str | Path,
    *,
    source: Model | None = None,
    target: str | None = None,
    options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> VerifyReport:
    """Verify the folder one ships: its code run as it is (not converted again) against
    onnxruntime on the model it was converted from (`find_source`), with the input shapes
    and bound inputs its manifest records."""
    manifest = read_manifest(out_dir)
    folder_target = str(manifest.get("target"))
    if target not in (None, folder_target):
        raise Onnx2EdgeError(f"{out_dir} holds {folder_target} output, not --target {target}")
    backend = get_backend(folder_target)
    run_opts = check_options(backend, options or {})
    given = sorted(set(run_opts) - set(backend.run_options))
    if given:
        raise Onnx2EdgeError(
            f"{out_dir} is already converted: {', '.join(given)} cannot change it (its options "
            f"are in its {MANIFEST}; convert again to change them)"
        )
    if kwargs.get("per_layer"):
        raise Onnx2EdgeError(
            f"verify {out_dir} --per-layer: tracing every layer needs a conversion made for it; "
            f"use verify MODEL --target {folder_target} --per-layer"
        )
    fixed: dict[str, np.ndarray] = {}
    for k, e in manifest.get("fixed_inputs", {}).items():
        if "values" not in e:
            raise Onnx2EdgeError(
                f"{out_dir}: input '{k}' is bound to a constant of {len(e.get('shape', []))}-D "
                "shape the manifest records by hash only; verify MODEL --fix-input instead"
            )
        fixed[k] = np.asarray(e["values"], dtype=e["dtype"]).reshape(e["shape"])
    shapes = {i["name"]: i["shape"] for i in manifest.get("inputs", [])}
    return verify(
        find_source(out_dir, source),
        target=folder_target,
        input_shapes=shapes,
        fixed_inputs=fixed,
        options={**manifest.get("options", {}), **run_opts},
        converted=out_dir,
        **kwargs,
    )


# --- quantize ---------------------------------------------------------------------------------
def quantize(model: Model, out: str | Path, **options: Any) -> Any:
    """FP16 / dynamic / static-QDQ INT8 copy of `model` (see `onnx2edge.quantization.quantize`)."""
    from . import quantization as q

    return q.quantize(model, out, **options)


def compare_quantized(
    quantized: Model,
    reference: Model,
    *,
    calib: str | Path | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    input_shapes: Shapes = None,
    seed: int = 0,
) -> Any:
    """Per-layer comparison of a quantized model with its fp32 original on `calib` samples
    (or on one set of `inputs`, random where not given)."""
    from . import quantization as q

    ref = load_model(reference)
    if calib is not None:
        data = q.load_calib(calib, ref)
    else:
        fixed = fix_input_shapes(ref, input_shapes or {}, quiet=True)
        feeds = complete_inputs(graph_from_model(infer_shapes(fixed)), inputs or {}, seed)
        data = q.CalibData({k: v[None] for k, v in feeds.items()})
    return q.compare_layers(quantized, reference, data)


# --- model editing (issue 16): implemented in onnx2edge.check and onnx2edge.edit ----------------
def check(
    model: Model,
    target: str,
    *,
    input_shapes: Shapes = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per node: supported / replaceable (by which rewrite rule) / unsupported on `target`.
    `options`: conversion options the target's placement depends on, e.g. for coreml-ane
    {"format": "mlprogram", "precision": "fp32"}."""
    from .check import check_model

    return check_model(model, target, input_shapes=input_shapes, options=options)


def prune(
    model: Model,
    out: str | Path,
    sparsity: float,
    *,
    scope: str = "global",
    structured: str | None = None,
    skip: Sequence[str] = (),
    max_layer_sparsity: float | None = None,
) -> dict[str, Any]:
    """Magnitude-prune Gemm / MatMul / Conv weights into `out` (issue 14); the report.
    `max_layer_sparsity`: no layer loses more of its weights (None: prune's default cap)."""
    from .frontend.loader import load_model
    from .fsutil import write_bytes_atomic
    from .prune import DEFAULT_MAX_LAYER_SPARSITY, prune_model

    cap = DEFAULT_MAX_LAYER_SPARSITY if max_layer_sparsity is None else max_layer_sparsity
    m, rep = prune_model(
        load_model(model),
        sparsity,
        scope=scope,
        structured=structured,
        skip=skip,
        max_layer_sparsity=cap,
    )
    write_bytes_atomic(out, m.SerializeToString())
    return rep.as_dict()


def __getattr__(name: str) -> Any:
    # rewrite, extract, delete_nodes, rename, set_shape, add_output, convert_opset, simplify,
    # bind_constant, nhwc: imported lazily so `import onnx2edge.api` stays light.
    from .edit import nhwc as _nhwc
    from .edit import rewrite as _rewrite
    from .edit import surgery as _surgery

    for mod in (_surgery, _nhwc, _rewrite):
        if name in (
            "extract",
            "delete_nodes",
            "rename",
            "set_shape",
            "add_output",
            "convert_opset",
            "simplify",
            "bind_constant",
            "nhwc",
            "rewrite",
        ) and hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(name)
