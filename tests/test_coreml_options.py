"""The options Core ML users set with coremltools (issue 27, item 2), as `convert --target
coreml` options and API arguments: each converts the seed / exporter networks, is recorded in
the manifest, passes Core ML's own validator (mlvalidate) and verifies against onnxruntime
through the NumPy model of the written file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.cli import main
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

ct = pytest.importorskip("coremltools", reason="coremltools is in the dev extra")

from coreml_support import assert_valid, coreml_files_valid  # noqa: E402, F401

FIX = Path(__file__).parent / "fixtures"
TINY = FIX / "mps" / "tiny_resnet.dynamo.onnx"  # input (1, 3, 32, 32) -> linear (1, 10)
SILU = FIX / "torch" / "silu_convnet.dynamo.onnx"  # conv, mean over H and W, Gemm
FORMATS = ("neuralnetwork", "mlprogram")
FILE = {"neuralnetwork": "model.mlmodel", "mlprogram": "model.mlpackage"}


def _spec(out: Path, fmt: str):  # noqa: ANN202
    return ct.models.MLModel(str(out / FILE[fmt]), skip_model_load=True).get_spec()


def _manifest(out: Path) -> dict:
    return json.loads((out / "onnx2edge.json").read_text())


# --- --precision ----------------------------------------------------------------------------
def test_mlprogram_is_float16_by_default_as_coremltools(tmp_path: Path) -> None:
    out = tmp_path / "o"
    api.convert(TINY, "coreml", out)
    assert _manifest(out)["options"]["precision"] == "fp16"
    assert "fp16" in str(_spec(out, "mlprogram").mlProgram)
    assert_valid(out / FILE["mlprogram"])
    # float16 compute: within float16's rounding of onnxruntime's float32, not bit-exact
    rep = api.verify(TINY, target="coreml", rtol=1e-2, atol=1e-3)
    assert rep.ok, rep.format()
    assert not api.verify(TINY, target="coreml", rtol=1e-4).ok  # 1e-4 is beyond float16
    assert api.verify(TINY, target="coreml").rtol == 1e-2  # the default follows float16


def test_precision_fp32_and_neuralnetwork_default(tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = api.convert(TINY, "coreml", out, options={"precision": "fp32"})
    assert "fp16" not in str(_spec(out, "mlprogram").mlProgram)
    assert "GPU and CPU only" in res.stats["neural_engine"]
    assert "never the Neural Engine" in (out / "README.md").read_text()
    nn_out = tmp_path / "nn"
    api.convert(TINY, "coreml", nn_out, options={"format": "neuralnetwork"})
    assert _manifest(nn_out)["options"]["precision"] == "fp32"
    nn16 = tmp_path / "nn16"
    api.convert(TINY, "coreml", nn16, options={"format": "neuralnetwork", "precision": "fp16"})
    conv = next(
        la.convolution
        for la in _spec(nn16, "neuralnetwork").neuralNetwork.layers
        if la.HasField("convolution")
    )
    assert len(conv.weights.float16Value) and not len(conv.weights.floatValue)


# --- --minimum-deployment-target ----------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "target", "version"),
    [("neuralnetwork", "iOS15", 6), ("mlprogram", "iOS16", 7), ("mlprogram", "macOS13", 7)],
)
def test_minimum_deployment_target(fmt: str, target: str, version: int, tmp_path: Path) -> None:
    out = tmp_path / "o"
    options = {"format": fmt, "minimum_deployment_target": target, "precision": "fp32"}
    api.convert(TINY, "coreml", out, options=options)
    assert _spec(out, fmt).specificationVersion == version
    assert _manifest(out)["options"]["minimum_deployment_target"] in (target, "iOS16")
    assert_valid(out / FILE[fmt])


def test_mlprogram_below_ios15_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["convert", str(TINY), "--target", "coreml", "--minimum-deployment-target", "iOS14"]
    assert main([*argv, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "iOS15" in err and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()


# --- --metadata ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_metadata_and_doc_string_descriptions(fmt: str, tmp_path: Path) -> None:
    m = onnx.load(TINY)
    m.graph.input[0].doc_string = "RGB image, ImageNet-normalised"
    m.doc_string = "a tiny ResNet"
    model = save(m, tmp_path / "m.onnx")
    out = tmp_path / "o"
    meta = "author=Jane Doe,license=MIT, or Apache-2.0,version=1.2.3"
    api.convert(model, "coreml", out, options={"format": fmt, "metadata": meta})
    spec = _spec(out, fmt)
    d = spec.description.metadata
    assert (d.author, d.license, d.versionString) == ("Jane Doe", "MIT, or Apache-2.0", "1.2.3")
    assert d.shortDescription == "a tiny ResNet"
    assert spec.description.input[0].shortDescription.startswith("RGB image, ImageNet-normalised")
    assert "conversion_date" not in str(d)  # deterministic output
    assert _manifest(out)["options"]["metadata"] == meta
    assert_valid(out / FILE[fmt])


def test_bad_metadata_key_refused(tmp_path: Path) -> None:
    with pytest.raises(api.Onnx2EdgeError, match="KEY one of"):
        api.convert(TINY, "coreml", tmp_path / "o", options={"metadata": "owner=me"})


# --- --classifier-labels --------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_classifier_labels(fmt: str, tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"class {i}\n" for i in range(10)))
    out = tmp_path / "o"
    options = {"format": fmt, "classifier_labels": str(labels), "precision": "fp32"}
    api.convert(TINY, "coreml", out, options=options)
    spec = _spec(out, fmt)
    assert spec.description.predictedFeatureName == "classLabel"
    outs = {o.name: o.type.WhichOneof("Type") for o in spec.description.output}
    assert outs["classLabel"] == "stringType"
    assert outs[spec.description.predictedProbabilitiesName] == "dictionaryType"
    assert "class 7" in str(spec)
    assert_valid(out / FILE[fmt])
    rep = api.verify(TINY, target="coreml", options=options)
    assert rep.ok, rep.format()


def test_classifier_label_count_must_match(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    with pytest.raises(api.Onnx2EdgeError, match="3 labels"):
        api.convert(TINY, "coreml", tmp_path / "o", options={"classifier_labels": str(labels)})


# --- --image-input --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("spec_text", ["input:scale=1/255,bias=-0.5/-0.4/-0.3,bgr", "input"])
def test_image_input(fmt: str, spec_text: str, tmp_path: Path) -> None:
    out = tmp_path / "o"
    options = {"format": fmt, "image_input": spec_text, "precision": "fp32"}
    api.convert(TINY, "coreml", out, options=options)
    (x,) = _spec(out, fmt).description.input
    assert x.type.WhichOneof("Type") == "imageType"
    assert (x.type.imageType.width, x.type.imageType.height) == (32, 32)
    space = x.type.imageType.ColorSpace.Name(x.type.imageType.colorSpace)
    assert space == ("BGR" if "bgr" in spec_text else "RGB")
    assert_valid(out / FILE[fmt])
    # numbers: pixels p = (x - bias) / scale go in, the model sees scale * p + bias = x
    rep = api.verify(TINY, target="coreml", options=options, rtol=1e-4, atol=1e-5)
    assert rep.ok, rep.format()
    recorded = _manifest(out)["options"]["image_input"]
    assert recorded == (
        "input:scale=0.00392157,bias=-0.5/-0.4/-0.3,bgr"
        if "bgr" in spec_text
        else "input:scale=1,bias=0"
    )


def test_image_input_must_be_an_image(tmp_path: Path) -> None:
    with pytest.raises(api.Onnx2EdgeError, match="not an input"):
        api.convert(TINY, "coreml", tmp_path / "o", options={"image_input": "nope"})
    with pytest.raises(api.Onnx2EdgeError, match="2 biases for 3 channels"):
        api.convert(TINY, "coreml", tmp_path / "o", options={"image_input": "input:bias=1/2"})


# --- --flexible-shape -----------------------------------------------------------------------
def test_flexible_shape_enumerated_neuralnetwork(tmp_path: Path) -> None:
    out = tmp_path / "o"
    flex = "input=1x3x[32,48]x[32,64]"
    api.convert(SILU, "coreml", out, options={"format": "neuralnetwork", "flexible_shape": flex})
    spec = _spec(out, "neuralnetwork")
    shapes = [
        list(s.shape) for s in spec.description.input[0].type.multiArrayType.enumeratedShapes.shapes
    ]
    assert shapes == [[1, 3, 32, 32], [1, 3, 32, 64], [1, 3, 48, 32], [1, 3, 48, 64]]
    assert _manifest(out)["options"]["flexible_shape"] == flex
    assert_valid(out / FILE["neuralnetwork"])
    # the saved network at another enumerated shape matches onnxruntime at that shape
    from onnx2edge.backends.coreml import evaluate

    x = np.random.default_rng(0).standard_normal((1, 3, 48, 64)).astype(np.float32)
    got = evaluate.eval_neuralnetwork(spec, {"input": x})["output"].reshape(1, 10)
    m = onnx.load(SILU)  # the ONNX model at 48 x 64 (a fully convolutional trunk)
    del m.graph.value_info[:]
    for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, x.shape, strict=True):
        d.dim_value = v
    ref = ort_run(m, {"input": x})["output"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_flexible_shape_range_neuralnetwork(tmp_path: Path) -> None:
    # coremltools' RangeDim: H from 32 to 64, W from 32 unbounded (FeatureTypes.proto -1)
    out = tmp_path / "o"
    flex = "input=1x3x[32..64]x[32..]"
    api.convert(SILU, "coreml", out, options={"format": "neuralnetwork", "flexible_shape": flex})
    spec = _spec(out, "neuralnetwork")
    arr = spec.description.input[0].type.multiArrayType
    assert arr.WhichOneof("ShapeFlexibility") == "shapeRange"
    ranges = [(r.lowerBound, r.upperBound) for r in arr.shapeRange.sizeRanges]
    assert ranges == [(1, 1), (3, 3), (32, 64), (32, -1)]
    assert list(arr.shape) == [1, 3, 32, 32]  # the default shape stays the model's
    assert _manifest(out)["options"]["flexible_shape"] == flex
    assert_valid(out / FILE["neuralnetwork"])
    from onnx2edge.backends.coreml import evaluate

    x = np.random.default_rng(1).standard_normal((1, 3, 45, 77)).astype(np.float32)
    got = evaluate.eval_neuralnetwork(spec, {"input": x})["output"].reshape(1, 10)
    m = onnx.load(SILU)  # the ONNX model at 45 x 77, a size inside the ranges
    del m.graph.value_info[:]
    for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, x.shape, strict=True):
        d.dim_value = v
    np.testing.assert_allclose(got, ort_run(m, {"input": x})["output"], rtol=1e-4, atol=1e-5)
    # an image input's range is its height and width
    img = tmp_path / "img"
    options = {"format": "neuralnetwork", "flexible_shape": flex, "image_input": "input"}
    api.convert(SILU, "coreml", img, options=options)
    t = _spec(img, "neuralnetwork").description.input[0].type.imageType
    r = t.imageSizeRange
    got_ranges = [(x.lowerBound, x.upperBound) for x in (r.heightRange, r.widthRange)]
    assert got_ranges == [(32, 64), (32, -1)]
    assert_valid(img / FILE["neuralnetwork"])


def test_flexible_shape_range_refusals(tmp_path: Path) -> None:
    nn = {"format": "neuralnetwork"}
    for flex, msg in (
        ("input=1x3x[32..64]x[32,64]", "not both"),
        ("input=1x3x[64..32]x32", "is not a size"),
        ("input=1x3x[48..64]x32", "within the ranges"),
    ):
        with pytest.raises(api.Onnx2EdgeError, match=msg):
            api.convert(SILU, "coreml", tmp_path / "o", options={**nn, "flexible_shape": flex})
    with pytest.raises(api.Onnx2EdgeError, match="use --format neuralnetwork"):
        api.convert(
            SILU, "coreml", tmp_path / "m", options={"flexible_shape": "input=1x3x[32..64]x32"}
        )
    assert not (tmp_path / "o").exists() and not (tmp_path / "m").exists()


def test_flexible_shape_refusals(tmp_path: Path) -> None:
    # tiny_resnet's layers do not depend on H, W either; a Flatten + Gemm network does.
    nn = {"format": "neuralnetwork"}
    with pytest.raises(api.Onnx2EdgeError, match="only with --format neuralnetwork"):
        api.convert(
            SILU, "coreml", tmp_path / "a", options={"flexible_shape": "input=1x3x[32,64]x32"}
        )
    with pytest.raises(api.Onnx2EdgeError, match="must be one of"):
        api.convert(
            SILU, "coreml", tmp_path / "b", options={**nn, "flexible_shape": "input=1x3x[48,64]x32"}
        )
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"], transB=1),
    ]
    inits = [
        tensor("w", rng.standard_normal((2, 3, 1, 1)).astype(np.float32)),
        tensor("g", rng.standard_normal((5, 32)).astype(np.float32)),
    ]
    m = make_model(nodes, [vi("x", [1, 3, 4, 4])], [vi("y", [1, 5])], inits)
    flat = save(m, tmp_path / "flat.onnx")
    with pytest.raises(api.Onnx2EdgeError, match="at 1x3x8x4"):
        api.convert(
            flat, "coreml", tmp_path / "c", options={**nn, "flexible_shape": "x=1x3x[4,8]x4"}
        )
    with pytest.raises(api.Onnx2EdgeError, match="at 1x3x5x4"):  # a range: checked at LO+1
        api.convert(
            flat, "coreml", tmp_path / "d", options={**nn, "flexible_shape": "x=1x3x[4..8]x4"}
        )


# --- --compress -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "op"),
    [("linear8", "constexpr_affine_dequantize"), ("palettize:6", "constexpr_lut_to_dense")],
)
def test_compress_mlprogram(mode: str, op: str, tmp_path: Path) -> None:
    out = tmp_path / "o"
    api.convert(SILU, "coreml", out, options={"compress": mode, "precision": "fp32"})
    assert op in str(_spec(out, "mlprogram").mlProgram)
    assert _manifest(out)["options"]["compress"] == mode
    assert_valid(out / FILE["mlprogram"])
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = ort_run(onnx.load(SILU), {"input": x})["output"]
    got = api.run(out, {"input": x})["output"]
    err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    assert 0 < err < 5e-2, err  # compressed weights: close, not exact


def test_compress_neuralnetwork_refused(tmp_path: Path) -> None:
    with pytest.raises(api.Onnx2EdgeError, match="only with --format mlprogram"):
        api.convert(
            SILU,
            "coreml",
            tmp_path / "o",
            options={"format": "neuralnetwork", "compress": "linear8"},
        )


# --- the CLI: every option as a flag, recorded in the manifest -----------------------------
def test_cli_options_recorded(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"c{i}\n" for i in range(10)))
    out = tmp_path / "o"
    argv = [
        "convert",
        str(TINY),
        "--target",
        "coreml",
        "-o",
        str(out),
        "--precision",
        "fp32",
        "--minimum-deployment-target",
        "iOS16",
        "--metadata",
        "author=A,version=2",
        "--classifier-labels",
        str(labels),
        "--image-input",
        "input:scale=0.5",
    ]
    assert main(argv) == 0
    o = _manifest(out)["options"]
    assert o["precision"] == "fp32" and o["minimum_deployment_target"] == "iOS16"
    assert o["metadata"] == "author=A,version=2" and o["classifier_labels"] == str(labels)
    assert o["image_input"] == "input:scale=0.5,bias=0"
    assert_valid(out / FILE["mlprogram"])


# --- quantized and float16 models (issue 27, item 3) ---------------------------------------
@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tiny_resnet through the project's own `quantize`: fp16, static QDQ int8 per-tensor
    and per-channel (onnxruntime's quantizer), calibrated on 8 random samples."""
    d = tmp_path_factory.mktemp("quantized")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", input=rng.standard_normal((8, 1, 3, 32, 32)).astype(np.float32))
    out = {"fp16": d / "fp16.onnx", "int8": d / "int8.onnx", "int8pc": d / "int8pc.onnx"}
    api.quantize(TINY, out["fp16"], mode="fp16")
    api.quantize(TINY, out["int8"], mode="static", calib=d / "calib.npz")
    api.quantize(TINY, out["int8pc"], mode="static", calib=d / "calib.npz", per_channel=True)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_float16_model_converts(fmt: str, quantized: dict[str, Path], tmp_path: Path) -> None:
    model = quantized["fp16"]
    assert any(n.op_type == "Cast" for n in onnx.load(model).graph.node)
    rep = api.verify(model, target="coreml", options={"format": fmt}, rtol=1e-2, atol=1e-3)
    assert rep.ok, rep.format()
    out = tmp_path / "o"
    api.convert(model, "coreml", out, options={"format": fmt})
    assert_valid(out / FILE[fmt])


def _output_scale(model: Path) -> float:
    m = onnx.load(model)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    (dq,) = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "linear"]
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("kind", ["int8", "int8pc"])
def test_qdq_int8_model_to_ml_program_with_int8_weights(
    kind: str, quantized: dict[str, Path], tmp_path: Path
) -> None:
    model = quantized[kind]
    out = tmp_path / "o"
    res = api.convert(model, "coreml", out)
    program = str(_spec(out, "mlprogram").mlProgram)
    assert program.count("constexpr_affine_dequantize") >= 4  # 3 convolutions + the linear
    assert "INT8" in program and res.stats["specification_version"] >= 7  # iOS 16 ops
    assert_valid(out / FILE["mlprogram"])
    # float32: the quantized arithmetic exactly as onnxruntime runs the quantized ONNX
    rep = api.verify(model, target="coreml", options={"precision": "fp32"})
    assert rep.ok, rep.format()
    # float16 (the default): within the output's quantization step (a rounding may flip)
    step = _output_scale(model)
    rep16 = api.verify(model, target="coreml", rtol=0.0, atol=2 * step)
    assert rep16.ok, rep16.format()


def test_qdq_int8_model_neuralnetwork_refused_in_one_line(
    quantized: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(api.UnsupportedError) as e:
        api.convert(
            quantized["int8"], "coreml", tmp_path / "o", options={"format": "neuralnetwork"}
        )
    assert "QuantizeLinear" in str(e.value) and "\n" not in str(e.value)


def test_neuralnetwork_file_is_deterministic(tmp_path: Path) -> None:
    """Same model and options, same bytes (the metadata map serialised in a fixed order)."""
    options = {"format": "neuralnetwork", "metadata": "author=A,license=MIT,version=1"}
    for d in ("a", "b"):
        api.convert(TINY, "coreml", tmp_path / d, options=options)
    a, b = (tmp_path / d / FILE["neuralnetwork"] for d in ("a", "b"))
    assert a.read_bytes() == b.read_bytes()


# --- check --target coreml-ane --format/--precision ----------------------------------------
def test_cli_check_ane_fp32_mlprogram(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(Path(__file__).parent.parent / "examples" / "tiny_cnn.onnx")
    base = ["check", model, "--target", "coreml-ane", "--format", "mlprogram", "--json"]
    assert main([*base, "--precision", "fp32"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["options"] == {"format": "mlprogram", "precision": "fp32"}
    assert rep["totals"]["unsupported"] == len(rep["nodes"]) > 0
    for e in rep["nodes"]:
        assert e["placement"] == "gpu" and e["rule"] == "--precision fp16", e
        assert "float32 ML Program never runs on the Neural Engine" in e["reason"]
    # the fix the report names: fp16 (also coremltools' ML Program default) puts it on the ANE
    for extra in (["--precision", "fp16"], []):
        assert main([*base, *extra]) == 0
        rep16 = json.loads(capsys.readouterr().out)
        assert rep16["options"]["precision"] == "fp16"
        assert {e["placement"] for e in rep16["nodes"]} >= {"ane"}
        assert rep16["totals"]["supported"] > 0
    # the options belong to coreml-ane only: one line, exit 2
    assert main(["check", model, "--target", "c", "--precision", "fp32"]) == 2
    err = capsys.readouterr().err.strip()
    assert "only with --target coreml-ane" in err and len(err.splitlines()) == 1
    # the file convert writes with the same flags is that float32 ML Program (validated)
    out = tmp_path / "o"
    argv = ["convert", model, "--target", "coreml", "-o", str(out), "--precision", "fp32"]
    assert main(argv) == 0
    assert _manifest(out)["options"]["precision"] == "fp32"
    assert_valid(out / FILE["mlprogram"])
