"""The `coreml` backend: ONNX -> Core ML (.mlmodel NeuralNetwork or .mlpackage ML Program),
built with coremltools' own builders, verified on Linux through a NumPy model of the emitted
layers / ops (`evaluate.py`): Core ML itself cannot load or run a model off Apple platforms."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Onnx2EdgeError
from ...ir import Graph
from ..base import Backend, BackendOption, ConvertResult, register_backend
from . import evaluate, mil, nn, validator
from ._ct import coremltools, no_progress_bars
from .common import FORMATS, Refuse, static_shape

MODEL_INFO = "coreml-model.json"
DEFAULT_FORMAT = "mlprogram"


def _format(options: Mapping[str, Any]) -> str:
    fmt = str(options.get("format") or DEFAULT_FORMAT)
    if fmt not in FORMATS:
        raise Onnx2EdgeError(f"unknown Core ML format '{fmt}' (use {' or '.join(FORMATS)})")
    return fmt


def _describe(graph: Graph, name: str, what: str) -> str:
    v = graph.values.get(name)
    doc = getattr(v, "doc_string", "") if v is not None else ""
    shape = "x".join(map(str, static_shape(graph, name)))
    base = f"ONNX {what} '{name}', float32 {shape}"
    return f"{doc} ({base})" if doc else base


def _set_descriptions(spec: Any, graph: Graph, names: Mapping[str, str], fmt: str) -> None:
    for feats, onnx_names, what in (
        (spec.description.input, graph.inputs, "input"),
        (spec.description.output, graph.outputs, "output"),
    ):
        by_name = {f.name: f for f in feats}
        for o in onnx_names:
            f = by_name.get(names.get(o, o))
            if f is not None:
                f.shortDescription = _describe(graph, o, what)
    meta = spec.description.metadata
    meta.shortDescription = graph.model_doc_string or f"{graph.name} converted by onnx2edge"
    if graph.producer_name:
        meta.userDefined["onnx.producer"] = (
            f"{graph.producer_name} {graph.producer_version}".strip()
        )
    meta.userDefined["onnx.opset"] = str(graph.opset)
    meta.userDefined["converter"] = "onnx2edge"


@register_backend
class CoreMLBackend(Backend):
    name = "coreml"
    label = "Core ML"
    options = (
        BackendOption(
            "format",
            ".mlmodel NeuralNetwork (Neural-Engine-friendly layers) or .mlpackage ML Program",
            choices=FORMATS,
            default=DEFAULT_FORMAT,
        ),
        BackendOption("fp16", "float16 weights (mlprogram: fp16 compute)", switch=True),
    )
    required_passes = (
        "fold_constants",
        "infer_shapes",
        "remove_identity",
        "eliminate_dead_nodes",
        "fold_batchnorm",
    )

    def unsupported(self, graph: Graph) -> list[str]:
        return self.unsupported_for(graph, {})

    def unsupported_for(self, graph: Graph, options: Mapping[str, Any]) -> list[str]:
        fmt = _format(options)
        return nn.check(graph) if fmt == "neuralnetwork" else mil.check(graph)

    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        ct = coremltools()
        fmt = _format(options)
        fp16 = bool(options.get("fp16", False))
        problems = self.unsupported_for(graph, options)
        if problems:
            raise Onnx2EdgeError(
                f"{len(problems)} node(s) cannot be converted to Core ML {fmt}:\n"
                + "\n".join(problems)
            )
        out_dir = Path(out_dir)
        try:
            if fmt == "neuralnetwork":
                spec, _, lowered = nn.build(graph)
                names = {n: n for n in (*graph.inputs, *graph.outputs)}
                _set_descriptions(spec, graph, names, fmt)
                model = ct.models.MLModel(spec, skip_model_load=True)
                if fp16:
                    # coremltools' documented fp16 weight conversion; off macOS it returns
                    # the spec rather than a loaded model.
                    from coremltools.models.neural_network import quantization_utils

                    with no_progress_bars():
                        q = quantization_utils.quantize_weights(model, nbits=16)
                    q_spec = q if hasattr(q, "neuralNetwork") else q.get_spec()
                    model = ct.models.MLModel(q_spec, skip_model_load=True)
                fname = "model.mlmodel"
            else:
                prog, _, lowered = mil.build_program(graph)
                names = mil.mil_names(graph)
                prec = ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32
                with no_progress_bars():
                    model = ct.convert(
                        prog,
                        convert_to="mlprogram",
                        compute_precision=prec,
                        skip_model_load=True,  # Core ML cannot load it on Linux
                    )
                spec = model.get_spec()
                _set_descriptions(spec, graph, names, fmt)
                model = ct.models.MLModel(spec, weights_dir=model.weights_dir, skip_model_load=True)
                fname = "model.mlpackage"
        except Refuse as e:
            raise Onnx2EdgeError(f"cannot convert to Core ML {fmt}: {e}") from e
        model.save(str(out_dir / fname))
        # The saved file must load back, pass coremltools' checks and Core ML's validator.
        verdict = validate(out_dir / fname)
        info = {
            "file": fname,
            "format": fmt,
            "fp16": fp16,
            "inputs": [
                {"onnx": n, "coreml": names[n], "shape": list(static_shape(graph, n))}
                for n in graph.inputs
            ],
            "outputs": [
                {"onnx": n, "coreml": names[n], "shape": list(static_shape(graph, n))}
                for n in graph.outputs
            ],
            # MIL name -> ONNX name of every tensor, for `verify --per-layer`
            "tensors": {names[k]: k for k in sorted(names)} if fmt == "mlprogram" else {},
            "replacements": lowered.replacements,
            "fusions": lowered.fusions,
            "coremltools": ct.__version__,
        }
        (out_dir / MODEL_INFO).write_text(json.dumps(info, indent=1) + "\n")
        (out_dir / "README.md").write_text(_readme(graph, fmt, fp16, fname, lowered))
        counts: dict[str, int] = {}
        if fmt == "mlprogram":
            # Count the ops actually saved: ct.convert's pass pipeline fuses some of ours
            # (bias into conv / linear, x * sigmoid(x) into silu, ...).
            prog = evaluate.load_mil_program(out_dir / fname)
            kinds = [op.op_type for op in prog.functions["main"].operations]
        else:
            kinds = list(lowered.layers)
        for k in kinds:
            if k != "const":
                counts[k] = counts.get(k, 0) + 1
        stats: dict[str, Any] = {
            "format": fmt,
            "fp16": fp16,
            "coreml_layers": dict(sorted(counts.items())),
            "ane_replacements": len(lowered.replacements),
            "coreml_validator": "not run" if verdict is None else verdict.line(),
        }
        files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
        return ConvertResult(out_dir, files, stats)

    def verify_details(self, out_dir: Path) -> list[tuple[bool, str]]:
        """Core ML's own validator on the written file: VALID passes, INVALID fails the
        verdict with its message; absent, the line says it did not run."""
        info_path = Path(out_dir) / MODEL_INFO
        if not info_path.is_file():
            return []
        fname = json.loads(info_path.read_text())["file"]
        verdict = validator.validate(Path(out_dir) / fname)
        if verdict is None:
            return [(True, f"Core ML validator on {fname}: not run ({validator.NOT_FOUND})")]
        return [(verdict.valid, f"Core ML validator (mlvalidate) on {fname}: {verdict.line()}")]

    def run(
        self, out_dir: Path, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        info_path = Path(out_dir) / MODEL_INFO
        if not info_path.is_file():
            raise Onnx2EdgeError(f"{out_dir}: no {MODEL_INFO}; convert with --target coreml again")
        info = json.loads(info_path.read_text())
        path = Path(out_dir) / info["file"]
        feeds = {}
        for spec in info["inputs"]:
            if spec["onnx"] not in inputs:
                raise Onnx2EdgeError(f"missing input '{spec['onnx']}'")
            feeds[spec["coreml"]] = np.asarray(inputs[spec["onnx"]], np.float32)
        if info["format"] == "neuralnetwork":
            ct = coremltools()
            mspec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
            env = evaluate.eval_neuralnetwork(mspec, feeds)
        else:
            env = evaluate.eval_mlprogram(evaluate.load_mil_program(path), feeds)
        out = {}
        for spec in info["outputs"]:
            v = env[spec["coreml"]]
            out[spec["onnx"]] = np.asarray(v, np.float32).reshape(spec["shape"])
        if options.get("per_layer") and info["format"] == "neuralnetwork":
            # NeuralNetwork blobs keep ONNX tensor names; batch-1 blobs reshape back.
            for k, v in env.items():
                out.setdefault(k, v[None] if v.ndim == 3 else v.reshape(1, -1))
        elif options.get("per_layer"):
            # Values the pass pipeline kept under our names (fused ones are gone).
            for k, v in env.items():
                if k in info.get("tensors", {}):
                    out.setdefault(info["tensors"][k], np.asarray(v, np.float32))
        return out


def validate(path: Path) -> validator.Verdict | None:
    """Load the saved model with coremltools (no Core ML runtime) and run the checks that
    coremltools has in Python.

    ML Program: coremltools' milproto loader rebuilds every op through the MIL builder, which
    re-runs each op's input-type checks and type / shape inference on the saved program and
    reads every weight; `Program.validate()` then checks the blocks (every var visible where
    it is used, producer / consumer links consistent); and the program's output types must be
    the ones the model description declares. (ct.convert already ran its pass pipeline and
    `_check_early_error_out_for_invalid_program` when the file was written.)

    NeuralNetwork: coremltools' Linux wheel has no validator for this format (Core ML's
    NeuralNetworkValidator is C++ in libcoremlpython, macOS only); `check_nn_spec` restates
    the rules that matter here.

    Then Core ML's own validator (validator.py, `mlvalidate` built from coremltools' C++
    sources) when one runs here: its INVALID is final. Returns its verdict (None: absent)."""
    ct = coremltools()
    try:
        model = ct.models.MLModel(str(path), skip_model_load=True)
        spec = model.get_spec()
        if spec.WhichOneof("Type") == "neuralNetwork":
            check_nn_spec(spec)
        else:
            prog = evaluate.load_mil_program(path)
            prog.validate()
            check_mil_outputs(spec, prog)
    except Exception as e:  # noqa: BLE001 - coremltools raises many types; report one line
        raise Onnx2EdgeError(f"{path}: coremltools rejects the written model: {e}") from e
    # Core ML's own validator, when one runs here (validator.py): the judge of loading.
    verdict = validator.validate(path)
    if verdict is not None and not verdict.valid:
        raise Onnx2EdgeError(
            f"{path}: Core ML's validator rejects the written model: {verdict.message}"
        )
    return verdict


def check_mil_outputs(spec: Any, prog: Any) -> None:
    """Each declared output is produced by 'main' with the declared shape."""
    outs = {v.name: v for v in prog.functions["main"].outputs}
    for o in spec.description.output:
        if o.name not in outs:
            raise ValueError(f"model output '{o.name}' is not an output of the program")
        want = tuple(int(d) for d in o.type.multiArrayType.shape)
        got = tuple(int(d) for d in outs[o.name].shape)
        if want and got != want:
            raise ValueError(f"model output '{o.name}' is {got} in the program, {want} declared")


def check_nn_spec(spec: Any) -> None:
    """The structural checks of Core ML's NeuralNetwork validator that matter for what we
    emit. Core ML's own validator is native code (libcoremlpython / Core ML, macOS only), so
    its rules used here are restated: every layer input is a model input or an earlier
    layer's output, every model output is produced, and weight counts match the declared
    sizes (conv: outputChannels*kernelChannels*kH*kW; deconv: kernelChannels*
    outputChannels/nGroups*kH*kW; innerProduct: outputChannels*inputChannels)."""
    avail = {f.name for f in spec.description.input}
    for layer in spec.neuralNetwork.layers:
        for i in layer.input:
            if i not in avail:
                raise ValueError(f"layer '{layer.name}' reads '{i}', which nothing produces")
        avail.update(layer.output)
        kind = layer.WhichOneof("layer")
        p = getattr(layer, kind)
        if kind == "convolution":
            kh, kw = p.kernelSize
            g = p.nGroups or 1
            want = (
                (
                    p.kernelChannels * (p.outputChannels // g)
                    if p.isDeconvolution
                    else p.outputChannels * p.kernelChannels
                )
                * kh
                * kw
            )
            got = evaluate._weights(p.weights).size
            if got != want:
                raise ValueError(f"convolution '{layer.name}': {got} weights, {want} expected")
        elif kind == "innerProduct":
            got = evaluate._weights(p.weights).size
            if got != p.outputChannels * p.inputChannels:
                raise ValueError(f"innerProduct '{layer.name}': {got} weights")
    for o in spec.description.output:
        if o.name not in avail:
            raise ValueError(f"model output '{o.name}' is never produced")


def _readme(graph: Graph, fmt: str, fp16: bool, fname: str, lowered: Any) -> str:
    lines = [
        f"# {graph.name or 'model'} — Core ML {fmt}",
        "",
        f"`{fname}`, written by onnx2edge with coremltools"
        f" ({'NeuralNetworkBuilder' if fmt == 'neuralnetwork' else 'MIL builder + ct.convert'}).",
        f"Weights: {'float16' if fp16 else 'float32'}.",
        "",
        "**Verification limit:** this model was checked on Linux against onnxruntime through a",
        "NumPy model of the Core ML layers / MIL ops it contains (onnx2edge's",
        "backends/coreml/evaluate.py), not on Apple hardware: Core ML cannot load or run models",
        "off Apple platforms. Run it on a device before relying on it.",
        "",
    ]
    if lowered.replacements:
        lines += [
            "## Neural Engine replacements (seed 004)",
            "",
            "| node | ONNX op | instead of | emitted |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['node']} | {r['op']} | {r['instead_of']} | {', '.join(r['emitted'])} |"
            for r in lowered.replacements
        ]
        lines.append("")
    return "\n".join(lines) + "\n"
