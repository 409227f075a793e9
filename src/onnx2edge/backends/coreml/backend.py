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
from ..refusal import Refusal
from . import evaluate, mil, nn, validator
from . import fp16 as _fp16_pass  # noqa: F401 - registers coreml_float16_as_float
from . import options as opts
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
    doc = graph.value_docs.get(name, "")
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
    aliases = {("weights", "fp16"): ("fp16", True), ("weights", "fp32"): ("fp16", False)}
    options = (
        BackendOption(
            "format",
            ".mlmodel NeuralNetwork (Neural-Engine-friendly layers) or .mlpackage ML Program",
            choices=FORMATS,
            default=DEFAULT_FORMAT,
        ),
        BackendOption("fp16", "float16 weights (mlprogram: fp16 compute)", switch=True),
        BackendOption(
            "precision",
            "fp16 or fp32 (default: fp16 for mlprogram, as coremltools; fp32 weights for "
            "neuralnetwork); a float32 ML Program never runs on the Neural Engine",
            choices=opts.PRECISIONS,
        ),
        BackendOption(
            "minimum_deployment_target",
            "oldest OS that must load the model (iOS13..iOS18, macOS10_15.., ct.target names)",
            metavar="TARGET",
        ),
        BackendOption(
            "metadata",
            "model metadata author=..,license=..,version=..,description=.. (input / output "
            "descriptions come from the ONNX doc strings)",
            metavar="KEY=VALUE,..",
        ),
        BackendOption(
            "classifier_labels",
            "a classifier: FILE has one class label per line for the (1, N) output "
            "(predicted class + probabilities)",
            metavar="FILE",
        ),
        BackendOption(
            "image_input",
            "NAME[:scale=S,bias=B|B0/B1/B2,bgr]: that input is an image, fed to the model as "
            "S * pixel + B",
            metavar="SPEC",
        ),
        BackendOption(
            "flexible_shape",
            "NAME=1x3x[224,320]x[224,320]: enumerated input shapes, or "
            "NAME=1x3x[224..512]x[224..]: a size range per dimension (LO.. unbounded); "
            "neuralnetwork only",
            metavar="SPEC",
        ),
        BackendOption(
            "compress",
            "linear8 (int8 weights), palettize:N (N-bit uniform lookup table) or "
            "palettize-kmeans:N (needs scikit-learn): coremltools.optimize (mlprogram)",
            metavar="MODE",
        ),
    )

    def normalize_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Canonical values, checked before anything runs; the manifest records them."""
        out = {k: v for k, v in options.items() if v is not None}
        fmt = _format(out)
        out["format"] = fmt
        out["precision"] = opts.precision(out.get("precision"), bool(out.get("fp16")), fmt)
        target = opts.deployment_target(out.get("minimum_deployment_target"), fmt)
        if target:
            out["minimum_deployment_target"] = target
        if out.get("metadata"):
            out["metadata"] = ",".join(
                f"{k}={v}" for k, v in opts.metadata(out["metadata"]).items()
            )
        if out.get("classifier_labels"):
            opts.labels(out["classifier_labels"])
        img = opts.image_input(out.get("image_input"))
        if img is not None:
            out["image_input"] = img.canonical()
        if out.get("flexible_shape"):
            if fmt != "neuralnetwork":
                raise Onnx2EdgeError(
                    "--flexible-shape: only with --format neuralnetwork (onnx2edge builds the "
                    "ML Program at one static shape): use --format neuralnetwork"
                )
            opts.flexible_shape(out["flexible_shape"])
        if out.get("compress"):
            out["compress"] = opts.compress(out["compress"], fmt)
        return out

    required_passes = (
        "lower_if_select",  # o2e.IfSelect: both branches run, then Where selects
        "lower_dynamic_quantize_lstm",
        "fold_constants",
        "coreml_float16_as_float",  # fp16 models: Casts between floats become Identity
        "infer_shapes",
        "remove_identity",
        "eliminate_dead_nodes",
        "fold_batchnorm",
        "decompose_hardswish",  # common.DECOMPOSED: no HardSwish layer in either format
        "decompose_mish",  # common.DECOMPOSED: no Mish layer / MIL op
    )

    def checkers(self) -> Mapping[str, Any]:
        """Where each node runs on the device (CPU / GPU / Neural Engine), with the
        formats' verdicts: `check --target coreml` / `coreml-ane`."""
        from .placement import check_coreml, check_coreml_ane

        return {"coreml": check_coreml, "coreml-ane": check_coreml_ane}

    @property
    def supported_ops(self) -> frozenset[tuple[str, str]]:
        """The ops either format has an emitter for."""
        return frozenset(("", op) for op in (*nn.NN_OPS, *mil.MIL_OPS))

    def check(self, graph: Graph, options: Mapping[str, Any] | None = None) -> list[Refusal]:
        fmt = _format(options or {})
        return nn.check(graph) if fmt == "neuralnetwork" else mil.check(graph)

    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        ct = coremltools()
        options = self.normalize_options(options)
        fmt = options["format"]
        fp16 = options["precision"] == "fp16"
        problems = self.unsupported_for(graph, options)
        if problems:
            raise Onnx2EdgeError(
                f"{len(problems)} node(s) cannot be converted to Core ML {fmt}:\n"
                + "\n".join(problems)
            )
        out_dir = Path(out_dir)
        labels = opts.labels(options.get("classifier_labels"))
        image = opts.image_input(options.get("image_input"))
        for name, what in ((image and image.name, "--image-input"),):
            if name and name not in graph.inputs:
                raise Onnx2EdgeError(f"{what} {name}: not an input of the model")
        if labels:
            _check_classifier(graph, labels)
        if image is not None:
            _check_image(graph, image)
        say = options.get("log") or (lambda msg: None)  # coremltools takes seconds to minutes
        try:
            if fmt == "neuralnetwork":
                say("building the Core ML NeuralNetwork spec")
                model, names, lowered = _build_nn(graph, options, labels, image)
                fname = "model.mlmodel"
            else:
                say("building the MIL program")
                say("coremltools: ct.convert to an ML Program (its pass pipeline)")
                model, names, lowered = _build_mlprogram(graph, options, labels, image)
                fname = "model.mlpackage"
        except Refuse as e:
            raise Onnx2EdgeError(f"cannot convert to Core ML {fmt}: {e}") from e
        say(f"saving and validating {fname}")
        if fmt == "neuralnetwork":
            # Deterministic bytes: MLModel.save serialises the metadata map in hash order.
            (out_dir / fname).write_bytes(model.get_spec().SerializeToString(deterministic=True))
        else:
            model.save(str(out_dir / fname))
        # The saved file must load back, pass coremltools' checks and Core ML's validator.
        verdict = validate(out_dir / fname)
        spec = model.get_spec()
        prob_name = spec.description.predictedProbabilitiesName if labels else ""
        info = {
            "file": fname,
            "format": fmt,
            "fp16": fp16,
            "precision": options["precision"],
            "inputs": [
                {"onnx": n, "coreml": names[n], "shape": list(static_shape(graph, n))}
                | (_image_info(image, graph) if image is not None and n == image.name else {})
                for n in graph.inputs
            ],
            "outputs": [
                {
                    "onnx": n,
                    "coreml": prob_name if labels and fmt == "mlprogram" else names[n],
                    "shape": list(static_shape(graph, n)),
                }
                for n in graph.outputs
            ],
            # MIL name -> ONNX name of every tensor, for `verify --per-layer`
            "tensors": {names[k]: k for k in sorted(names)} if fmt == "mlprogram" else {},
            "replacements": lowered.replacements,
            "fusions": lowered.fusions,
            "coremltools": ct.__version__,
        }
        if labels:
            info["classifier"] = {
                "labels": labels,
                "predicted": spec.description.predictedFeatureName,
                "probabilities": prob_name,
            }
        (out_dir / MODEL_INFO).write_text(json.dumps(info, indent=1) + "\n")
        (out_dir / "README.md").write_text(_readme(graph, fmt, fp16, fname, lowered, options))
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
            "precision": options["precision"],
            "specification_version": spec.specificationVersion,
            "coreml_layers": dict(sorted(counts.items())),
            "ane_replacements": len(lowered.replacements),
            "coreml_validator": "not run" if verdict is None else verdict.line(),
        }
        if fmt == "mlprogram" and (options.get("compress") or is_qdq(graph)):
            stats["weights"] = (
                f"compressed ({options['compress']})"
                if options.get("compress")
                else "int8 from the QDQ model (constexpr_affine_dequantize)"
            )
        if fmt == "mlprogram" and not fp16:
            stats["neural_engine"] = (
                "no: a float32 ML Program runs on GPU and CPU only (--precision fp16)"
            )
        files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
        return ConvertResult(out_dir, files, stats)

    def describe_run(self, out_dir: Path, options: Mapping[str, Any]) -> str:
        return (
            "a NumPy evaluator of the Core ML spec (onnx2edge's model of the layers / MIL ops "
            "in the saved file), not Core ML on Apple hardware"
        )

    def default_rtol(self, options: Mapping[str, Any]) -> tuple[float, str]:
        # ML Program in float16 (coremltools' default compute precision, and ours): every
        # intermediate rounded to 11 bits, so errors of a few 1e-3 of the output's scale are
        # float16's, not the converter's (coremltools' own fp16 tests compare at 1e-2 / 5e-2).
        o = self.normalize_options(options)
        if o.get("precision") == "fp16":
            return (
                1e-2,
                "float16 arithmetic (--precision fp16; --precision fp32 or --rtol to hold it tighter)",
            )
        return 1e-4, ""

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
            x = np.asarray(inputs[spec["onnx"]], np.float32)
            if "image" in spec:
                # An image input: the pixels whose preprocessing (scale * pixel + bias,
                # in the model) gives the tensor the ONNX model takes.
                im = spec["image"]
                bias = np.asarray(im["bias"], np.float64).reshape(1, -1, 1, 1)
                x = ((x.astype(np.float64) - bias) / im["scale"]).astype(np.float32)
            feeds[spec["coreml"]] = x
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
                if v.dtype.kind not in "fiu":
                    continue
                out.setdefault(k, v[None] if v.ndim == 3 else v.reshape(1, -1))
        elif options.get("per_layer"):
            # Values the pass pipeline kept under our names (fused ones are gone).
            for k, v in env.items():
                if k in info.get("tensors", {}):
                    out.setdefault(info["tensors"][k], np.asarray(v, np.float32))
        return out


def _check_classifier(graph: Graph, labels: list[str]) -> None:
    if len(graph.outputs) != 1:
        raise Onnx2EdgeError("--classifier-labels: the model must have one output (the scores)")
    shape = static_shape(graph, graph.outputs[0])
    if len(shape) != 2 or shape[0] != 1 or shape[1] != len(labels):
        raise Onnx2EdgeError(
            f"--classifier-labels: {len(labels)} labels for output '{graph.outputs[0]}' of "
            f"shape {list(shape)} (a (1, {len(labels)}) output is needed)"
        )


def _check_image(graph: Graph, image: opts.ImageInput) -> None:
    shape = static_shape(graph, image.name)
    if len(shape) != 4 or shape[0] != 1 or shape[1] not in (1, 3):
        raise Onnx2EdgeError(
            f"--image-input {image.name}: shape {list(shape)} is not a (1, 3 or 1, H, W) image"
        )
    image.channel_bias(shape[1])  # refuses a bias count that is not 1 or C


def _image_info(image: opts.ImageInput, graph: Graph) -> dict[str, Any]:
    c = static_shape(graph, image.name)[1]
    return {"image": {"scale": image.scale, "bias": image.channel_bias(c), "bgr": image.bgr}}


def _set_metadata(spec: Any, options: Mapping[str, Any]) -> None:
    meta = spec.description.metadata
    for key, value in opts.metadata(options.get("metadata")).items():
        if key == "author":
            meta.author = value
        elif key == "license":
            meta.license = value
        elif key == "version":
            meta.versionString = value
        else:
            meta.shortDescription = value
    # Deterministic output: ct.convert stamps the day of conversion.
    meta.userDefined.pop("com.github.apple.coremltools.conversion_date", None)


def _as_classifier(spec: Any) -> Any:
    """The NeuralNetwork spec as a NeuralNetworkClassifier (same layers and mappings)."""
    from coremltools.proto import NeuralNetwork_pb2

    body = NeuralNetwork_pb2.NeuralNetwork()
    body.CopyFrom(spec.neuralNetwork)
    cls = spec.neuralNetworkClassifier  # switches the model's Type oneof
    cls.layers.extend(body.layers)
    cls.preprocessing.extend(body.preprocessing)
    cls.arrayInputShapeMapping = body.arrayInputShapeMapping
    cls.imageInputShapeMapping = body.imageInputShapeMapping
    return spec


def _build_nn(
    graph: Graph,
    options: Mapping[str, Any],
    labels: list[str],
    image: opts.ImageInput | None,
) -> tuple[Any, dict[str, str], Any]:
    ct = coremltools()
    from coremltools.models.neural_network import NeuralNetworkBuilder

    spec, _, lowered = nn.build(graph)
    names = {n: n for n in (*graph.inputs, *graph.outputs)}
    if labels:
        spec = _as_classifier(spec)
        NeuralNetworkBuilder(spec=spec).set_class_labels(
            labels, predicted_feature_name="classLabel", prediction_blob=graph.outputs[0]
        )
    if image is not None:
        c = static_shape(graph, image.name)[1]
        bias = image.channel_bias(c)
        colors = dict(
            zip(
                ("blue", "green", "red") if image.bgr else ("red", "green", "blue"),
                bias,
                strict=False,
            )
        )
        NeuralNetworkBuilder(spec=spec).set_pre_processing_parameters(
            image_input_names=[image.name],
            is_bgr=image.bgr,
            red_bias=colors.get("red", 0.0),
            green_bias=colors.get("green", 0.0),
            blue_bias=colors.get("blue", 0.0),
            gray_bias=bias[0] if c == 1 else 0.0,
            image_scale=image.scale,
        )
    flex = opts.flexible_shape(options.get("flexible_shape"))
    if flex is not None:
        _add_flexible_shapes(graph, spec, flex)
    target = options.get("minimum_deployment_target")
    if target:
        spec.specificationVersion = max(spec.specificationVersion, opts.spec_version(target))
    _set_descriptions(spec, graph, names, "neuralnetwork")
    _set_metadata(spec, options)
    model = ct.models.MLModel(spec, skip_model_load=True)
    if options["precision"] == "fp16":
        # coremltools' documented fp16 weight conversion; off macOS it returns the spec
        # rather than a loaded model.
        from coremltools.models.neural_network import quantization_utils

        with no_progress_bars():
            q = quantization_utils.quantize_weights(model, nbits=16)
        q_spec = q if hasattr(q, "description") else q.get_spec()
        model = ct.models.MLModel(q_spec, skip_model_load=True)
    return model, names, lowered


def _add_flexible_shapes(graph: Graph, spec: Any, flex: opts.FlexibleShape) -> None:
    """Enumerated shapes or size ranges for input `flex.name`, only when the network is the
    same at each shape (conv / pool / activation layers do not depend on H and W; a flatten
    + innerProduct or a reshapeStatic does): the layers are rebuilt at every enumerated
    shape, or for a range at its bounds and one size of the other parity, and compared."""
    from ...passes import run_passes

    name = flex.name
    if name not in graph.inputs:
        raise Onnx2EdgeError(f"--flexible-shape {name}: not an input of the model")
    default = static_shape(graph, name)
    if not flex.contains(default):
        raise Onnx2EdgeError(
            f"--flexible-shape {name}: the model's shape {'x'.join(map(str, default))} must be "
            + ("within the ranges" if flex.is_range else "one of the enumerated shapes")
        )
    body = getattr(spec, spec.WhichOneof("Type"))
    want = [la.SerializeToString() for la in body.layers]
    for shape in flex.shapes or _range_samples(flex, default):
        if shape == default:
            continue
        try:
            g2 = run_passes(_at_shape(graph, name, shape), CoreMLBackend.required_passes)
            got = [la.SerializeToString() for la in nn.build(g2)[0].neuralNetwork.layers]
        except (Refuse, Onnx2EdgeError) as e:
            raise Onnx2EdgeError(
                f"--flexible-shape {name}: at {'x'.join(map(str, shape))}: {e}"
            ) from e
        if got != want:
            raise Onnx2EdgeError(
                f"--flexible-shape {name}: the network's layers differ at "
                f"{'x'.join(map(str, shape))} (a layer fixes the input size: flatten + "
                "innerProduct, reshape, constant); convert one model per shape"
            )
    feature = next(f for f in spec.description.input if f.name == name)
    image = feature.type.WhichOneof("Type") == "imageType"
    if flex.is_range:
        from coremltools.models.neural_network import flexible_shape_utils as fsu

        if image:
            if flex.lower[:2] != flex.upper[:2]:
                raise Onnx2EdgeError(
                    f"--flexible-shape {name}: an image input's ranges are its height and "
                    "width only"
                )
            sizes = fsu.NeuralNetworkImageSizeRange()
            sizes.add_height_range((flex.lower[2], flex.upper[2]))
            sizes.add_width_range((flex.lower[3], flex.upper[3]))
            fsu.update_image_size_range(spec, name, sizes)
        else:
            fsu.set_multiarray_ndshape_range(spec, name, list(flex.lower), list(flex.upper))
        return
    # FeatureTypes.proto's enumerated shapes, written directly: coremltools'
    # flexible_shape_utils takes the rank-5 mapping's (C, H, W) shapes only.
    if image:
        for s in flex.shapes:
            feature.type.imageType.enumeratedSizes.sizes.add(width=s[3], height=s[2])
    else:
        for s in flex.shapes:
            feature.type.multiArrayType.enumeratedShapes.shapes.add().shape.extend(s)


def _range_samples(flex: opts.FlexibleShape, default: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The shapes a range is checked at: its lower bounds, its upper bounds (twice the
    default plus one where unbounded) and the lower bounds plus one (odd/even sizes round
    differently in strided layers)."""
    upper = tuple(hi if hi != -1 else 2 * d + 1 for d, hi in zip(default, flex.upper, strict=True))
    plus1 = tuple(lo + 1 if lo != hi else lo for lo, hi in zip(flex.lower, upper, strict=True))
    return list(dict.fromkeys([flex.lower, plus1, upper]))


def _at_shape(graph: Graph, name: str, shape: tuple[int, ...]) -> Graph:
    """The graph with input `name` of another shape, every other shape inferred again."""
    from ...ir.onnx_shapes import infer_shapes
    from ...ir.proto import graph_from_model, model_from_graph

    m = model_from_graph(graph, value_info=False)
    for vi in m.graph.input:
        if vi.name == name:
            for d, v in zip(vi.type.tensor_type.shape.dim, shape, strict=True):
                d.dim_value = v
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return graph_from_model(infer_shapes(m))


def _build_mlprogram(
    graph: Graph,
    options: Mapping[str, Any],
    labels: list[str],
    image: opts.ImageInput | None,
) -> tuple[Any, dict[str, str], Any]:
    ct = coremltools()
    prog, _, lowered = mil.build_program(graph)
    names = mil.mil_names(graph)
    kw: dict[str, Any] = {}
    if labels:
        kw["classifier_config"] = ct.ClassifierConfig(labels)
    if image is not None:
        shape = static_shape(graph, image.name)
        bias = image.channel_bias(shape[1])
        layout = (
            ct.colorlayout.GRAYSCALE
            if shape[1] == 1
            else (ct.colorlayout.BGR if image.bgr else ct.colorlayout.RGB)
        )
        kw["inputs"] = [
            ct.ImageType(
                name=names[image.name],
                shape=shape,
                scale=image.scale,
                bias=bias[0] if shape[1] == 1 else bias,
                color_layout=layout,
            )
        ]
    target = options.get("minimum_deployment_target")
    compress = options.get("compress") or (qdq_grid(graph) if is_qdq(graph) else None)
    if compress:
        # constexpr_affine_dequantize / constexpr_lut_to_dense are iOS 16 ops.
        floor = ct.target.iOS16
        target = target if target and ct.target[target].value >= floor.value else "iOS16"
    if target:
        kw["minimum_deployment_target"] = ct.target[target]
    prec = ct.precision.FLOAT16 if options["precision"] == "fp16" else ct.precision.FLOAT32
    with no_progress_bars():
        model = ct.convert(
            prog,
            convert_to="mlprogram",
            compute_precision=prec,
            skip_model_load=True,  # Core ML cannot load it on Linux
            **kw,
        )
        if compress:
            model = _compress(model, compress)
    spec = model.get_spec()
    _set_descriptions(spec, graph, names, "mlprogram")
    _set_metadata(spec, options)
    model = ct.models.MLModel(spec, weights_dir=model.weights_dir, skip_model_load=True)
    return model, names, lowered


def is_qdq(graph: Graph) -> bool:
    """A QDQ-quantized model (onnxruntime's quantizer, `onnx2edge quantize --mode static`)."""
    return any(n.op_type == "QuantizeLinear" for n in graph.nodes)


def qdq_grid(graph: Graph) -> str:
    """'qdq-int8-per-tensor' when every Conv / Gemm / MatMul weight is on one symmetric int8
    grid (max|w| / 127 per tensor, onnxruntime's default), else 'qdq-int8-per-channel'."""
    for n in graph.nodes:
        if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.inputs) > 1:
            w = graph.const(n.inputs[1])
            if w is None or not np.size(w):
                continue
            w = np.asarray(w, np.float64)
            step = np.max(np.abs(w)) / 127.0
            if step > 0 and not np.allclose(w / step, np.round(w / step), atol=1e-3):
                return "qdq-int8-per-channel"
    return "qdq-int8-per-tensor"


def _compress(model: Any, mode: str) -> Any:
    """coremltools.optimize.coreml on the converted ML Program: int8 per-channel symmetric
    weights (constexpr_affine_dequantize) or an N-bit k-means lookup table
    (constexpr_lut_to_dense)."""
    import coremltools.optimize.coreml as cto

    if mode.startswith("qdq-int8"):
        # A QDQ model's weights are already on an int8 grid (the loader folded their
        # DequantizeLinear): symmetric int8 of every weight (no size threshold), per channel
        # or per tensor as the model's own (qdq_grid), finds that grid again.
        cfg = cto.OptimizationConfig(
            global_config=cto.OpLinearQuantizerConfig(
                mode="linear_symmetric",
                dtype="int8",
                granularity="per_tensor" if mode.endswith("per-tensor") else "per_channel",
                weight_threshold=1,
            )
        )
        return cto.linear_quantize_weights(model, config=cfg)
    if mode == "linear8":
        cfg = cto.OptimizationConfig(
            global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8")
        )
        return cto.linear_quantize_weights(model, config=cfg)
    kind, _, bits = mode.partition(":")
    algo = "kmeans" if kind == "palettize-kmeans" else "uniform"
    cfg = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(mode=algo, nbits=int(bits)))
    return cto.palettize_weights(model, config=cfg)


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
        if spec.WhichOneof("Type") in ("neuralNetwork", "neuralNetworkClassifier"):
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
    for layer in getattr(spec, spec.WhichOneof("Type")).layers:
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
        # a classifier's predicted class is written by Core ML from the probabilities
        if o.name not in avail and o.name != spec.description.predictedFeatureName:
            raise ValueError(f"model output '{o.name}' is never produced")


def _readme(
    graph: Graph, fmt: str, fp16: bool, fname: str, lowered: Any, options: Mapping[str, Any]
) -> str:
    chosen = [
        f"--{k.replace('_', '-')} {options[k]}"
        for k in (
            "minimum_deployment_target",
            "metadata",
            "classifier_labels",
            "image_input",
            "flexible_shape",
            "compress",
        )
        if options.get(k)
    ]
    lines = [
        f"# {graph.name or 'model'} — Core ML {fmt}",
        "",
        f"`{fname}`, written by onnx2edge with coremltools"
        f" ({'NeuralNetworkBuilder' if fmt == 'neuralnetwork' else 'MIL builder + ct.convert'}).",
        f"Precision: {'float16' if fp16 else 'float32'}"
        + (
            " (a float32 ML Program runs on the GPU and CPU only, never the Neural Engine)."
            if fmt == "mlprogram" and not fp16
            else "."
        ),
        *([f"Options: {'; '.join(chosen)}."] if chosen else []),
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
