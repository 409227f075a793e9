"""Core ML backend on the networks issue 15 names: the seed networks from both torch
exporters, MobileNetV3, a U-Net, a detector head, ConvDeconvNet, an LSTM classifier.

Each convertible model is written in both formats, loaded back with
`ct.models.MLModel(path, skip_model_load=True)` and run through the NumPy model of the
emitted Core ML layers / MIL ops (backends/coreml/evaluate.py) against onnxruntime. Core ML
itself cannot run on Linux: this is not a check on Apple hardware.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api, frontend
from onnx2edge.bench import zoo
from onnx2edge.cli import main

from conftest import make_model, save, tensor, vi

ct = pytest.importorskip("coremltools", reason="coremltools is in the dev extra")

from onnx2edge.backends.coreml.backend import MODEL_INFO  # noqa: E402

from coreml_support import assert_valid, coreml_files_valid  # noqa: E402, F401

FIX = Path(__file__).parent / "fixtures"
FORMATS = ("neuralnetwork", "mlprogram")
EXPORTERS = ("torchscript", "dynamo")
# tests/fixtures/mps: the seed papers' networks at reduced width (build_fixtures.py) plus the
# DBNet and YOLO-style heads; tests/fixtures/torch: MobileNetV3's HardSwish block.
SEEDS = [
    "resnet_mini",
    "mobilenet_v1_mini",
    "mobilenet_v2_mini",
    "squeezenet_mini",
    "googlenet_mini",
    "nin_bn_mini",
    "inception_v3_mini",
    "tiny_resnet",
]
BOTH = [f"mps/{n}.{e}.onnx" for n in SEEDS for e in EXPORTERS]
BOTH += [f"mps/dbnet_head.{e}.onnx" for e in EXPORTERS]
BOTH += [f"torch/mobilenetv3_block.{e}.onnx" for e in EXPORTERS]
# The YOLO-style head (convs -> Slice / Reshape / Transpose / Split -> Sigmoid, Exp box
# decoding -> Concat) ends in a (1, 640, 8) tensor: ML Program only.
MLPROGRAM_ONLY = [f"mps/yolo_head.{e}.onnx" for e in EXPORTERS]
# Field patterns the neuralnetwork format refuses (Mish / GELU / erf, LayerNormalization,
# rank-3 attention tensors, a max over channels): ML Program only.
MLPROGRAM_FIELD = [f"mps/{n}.{e}.onnx" for n in ("fire_net", "gelu_net") for e in EXPORTERS]
MLPROGRAM_FIELD += [f"torch/{n}.{e}.onnx" for n in ("vit_block", "sdpa_block") for e in EXPORTERS]


def _convert_load_verify(model: Path, fmt: str, tmp_path: Path) -> None:
    out = tmp_path / "o"
    rep = api.verify(
        model, target="coreml", options={"format": fmt, "precision": "fp32"}, work_dir=out
    )
    assert rep.ok, rep.format()
    info = json.loads((out / MODEL_INFO).read_text())
    spec = ct.models.MLModel(str(out / info["file"]), skip_model_load=True).get_spec()
    assert spec.WhichOneof("Type") == ("neuralNetwork" if fmt == "neuralnetwork" else "mlProgram")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fixture", BOTH)
def test_fixture_converts_loads_and_matches(fixture: str, fmt: str, tmp_path: Path) -> None:
    _convert_load_verify(FIX / fixture, fmt, tmp_path)


@pytest.mark.parametrize("fixture", MLPROGRAM_ONLY)
def test_detector_head(fixture: str, tmp_path: Path) -> None:
    _convert_load_verify(FIX / fixture, "mlprogram", tmp_path / "mlp")
    # neuralnetwork: refused before anything is written, every refused node named.
    with pytest.raises(api.UnsupportedError) as e:
        api.convert(FIX / fixture, "coreml", tmp_path / "nn", options={"format": "neuralnetwork"})
    msg = str(e.value)
    assert "(1,C,H,W)" in msg and not (tmp_path / "nn").exists()
    g = frontend.load(FIX / fixture, quiet=True)
    for n in g.nodes:
        if n.op_type in ("Transpose", "Split", "Exp"):
            assert f"node '{n.name}' (op {n.op_type}" in msg, (n.name, msg)


@pytest.mark.parametrize("fixture", MLPROGRAM_FIELD)
def test_mlprogram_only_fixtures(fixture: str, tmp_path: Path) -> None:
    _convert_load_verify(FIX / fixture, "mlprogram", tmp_path / "mlp")
    with pytest.raises(api.UnsupportedError) as e:
        api.convert(FIX / fixture, "coreml", tmp_path / "nn", options={"format": "neuralnetwork"})
    assert "\n" not in str(e.value) and not (tmp_path / "nn").exists()


@pytest.fixture(scope="module")
def unet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo.save("unet_small", tmp_path_factory.mktemp("zoo") / "unet_small.onnx")


@pytest.mark.parametrize("fmt", FORMATS)
def test_unet(unet: Path, fmt: str, tmp_path: Path) -> None:
    _convert_load_verify(unet, fmt, tmp_path)


def _resized(model: onnx.ModelProto, h: int, w: int) -> onnx.ModelProto:
    """The same fully convolutional network at another resolution (ConvDeconvNet's ops are
    all resolution-agnostic; the zoo fixes 480x640)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in (*m.graph.input, *m.graph.output):
        d = v.type.tensor_type.shape.dim
        d[2].dim_value, d[3].dim_value = h, w
    del m.graph.value_info[:]
    return m


@pytest.mark.parametrize("fmt", FORMATS)
def test_convdeconv_reduced(fmt: str, tmp_path: Path) -> None:
    # reflect Pad, InstanceNormalization, ConvTranspose(pads=1, output_padding=1), Tanh.
    path = save(_resized(zoo.build("convdeconv"), 24, 32), tmp_path / "convdeconv_24x32.onnx")
    _convert_load_verify(path, fmt, tmp_path)


@pytest.mark.slow  # full 480x640: 3-4 min per format on the shared 2-core machine
@pytest.mark.parametrize("fmt", FORMATS)
def test_convdeconv_full(fmt: str, tmp_path: Path) -> None:
    _convert_load_verify(zoo.save("convdeconv", tmp_path / "convdeconv.onnx"), fmt, tmp_path)


@pytest.mark.slow  # 1.5-6 min per model and format on the shared 2-core machine
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["alexnet", "resnet50"])
def test_zoo_seed_networks(name: str, fmt: str, tmp_path: Path) -> None:
    _convert_load_verify(zoo.save(name, tmp_path / f"{name}.onnx"), fmt, tmp_path)


def _pad_deconv_model() -> onnx.ModelProto:
    """Every Pad mode and the ConvTranspose pads / output_padding the emitters crop."""
    rng = np.random.default_rng(5)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Pad", ["x", "p1"], ["a"], mode="reflect"),
        helper.make_node("Pad", ["a", "p2", "v"], ["b"], mode="constant"),
        helper.make_node("Pad", ["b", "p3"], ["c"], mode="edge"),
        helper.make_node("InstanceNormalization", ["c", "g", "be"], ["d"], epsilon=1e-3),
        # k=3, s=2, pads=1, output_padding=1: exactly 2x (PyTorch's usual upsampler)
        helper.make_node(
            "ConvTranspose",
            ["d", "w1", "b1"],
            ["e"],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            output_padding=[1, 1],
        ),
        # k=4, s=2, pads=(1, 2, 1, 0), grouped: asymmetric crops
        helper.make_node(
            "ConvTranspose", ["e", "w2"], ["y"], strides=[2, 2], pads=[1, 2, 1, 0], group=2
        ),
    ]
    inits = [
        tensor("p1", np.array([0, 0, 2, 1, 0, 0, 1, 2], np.int64)),
        tensor("p2", np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64)),
        tensor("v", np.array(0.5, np.float32)),
        tensor("p3", np.array([0, 0, 0, 2, 0, 0, 1, 0], np.int64)),
        tensor("g", w(4) + 1),
        tensor("be", w(4)),
        tensor("w1", w(4, 6, 3, 3)),
        tensor("b1", w(6)),
        tensor("w2", w(6, 2, 4, 4)),
    ]
    # x 7x6 -> reflect 10x9 -> constant 11x10 -> edge 12x12 -> deconv 24x24 -> 48x48
    return make_model(nodes, [vi("x", [1, 4, 7, 6])], [vi("y", [1, 4, 48, 48])], inits)


@pytest.mark.parametrize("fmt", FORMATS)
def test_pad_instancenorm_deconv_variants(fmt: str, tmp_path: Path) -> None:
    _convert_load_verify(save(_pad_deconv_model(), tmp_path / "pad.onnx"), fmt, tmp_path)


# --- `check --target coreml-ane --json`: a placement and a rule source for every node ------
LSTM = [f"torch/lstm_classifier.{e}.onnx" for e in EXPORTERS]
CHECKED = [*BOTH, *MLPROGRAM_ONLY, *MLPROGRAM_FIELD, *LSTM]


def _ane_rows(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["check", str(path), "--target", "coreml-ane", "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "coreml-ane"
    return doc["nodes"]


def _assert_every_node_placed(path: Path, rows: list[dict]) -> None:
    g = frontend.load(path, quiet=True)
    assert [r["node"] for r in rows] == [n.name for n in g.nodes]
    for r in rows:
        assert r["placement"] in ("ane", "gpu", "cpu"), r
        assert r["status"] in ("supported", "replaceable", "unsupported"), r
        assert r["reason"] and r["source"], r
        # every source names a document: a seed, a repository file or an Apple page
        assert any(k in r["source"] for k in ("seed 004", "hollance", "developer.apple.com")), r


@pytest.mark.parametrize("fixture", CHECKED)
def test_check_coreml_ane_json_places_every_node(
    fixture: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _ane_rows(FIX / fixture, capsys)
    _assert_every_node_placed(FIX / fixture, rows)
    if "lstm" in fixture:
        lstm = [r for r in rows if r["op"] == "LSTM"]
        assert lstm and all(r["placement"] == "cpu" for r in lstm)


def test_check_coreml_ane_json_zoo(
    unet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cd = save(_resized(zoo.build("convdeconv"), 24, 32), tmp_path / "convdeconv.onnx")
    for path in (unet, cd):
        _assert_every_node_placed(path, _ane_rows(path, capsys))


@pytest.mark.parametrize("fmt", FORMATS)
def test_refusal_names_nodes_after_a_refused_one(fmt: str, tmp_path: Path) -> None:
    """A node fed by a refused node is judged on its own (placeholders), so one run names
    every node to fix and only those."""
    nodes = [
        helper.make_node("Cos", ["x"], ["a"], name="first_cos"),
        helper.make_node("Relu", ["a"], ["b"], name="fine_relu"),
        helper.make_node("Sin", ["b"], ["y"], name="then_sin"),
    ]
    path = save(
        make_model(nodes, [vi("x", [1, 2, 3, 3])], [vi("y", [1, 2, 3, 3])]), tmp_path / "m.onnx"
    )
    with pytest.raises(api.UnsupportedError) as e:
        api.convert(path, "coreml", tmp_path / "o", options={"format": fmt, "precision": "fp32"})
    msg = str(e.value)
    assert "node 'first_cos' (op Cos" in msg and "node 'then_sin' (op Sin" in msg
    assert "fine_relu" not in msg
    assert "2 nodes" in msg and not (tmp_path / "o").exists()


# --- what coremltools can check on Linux --------------------------------------------------
@pytest.mark.coreml_invalid_on_purpose
def test_validate_rejects_broken_files(tmp_path: Path) -> None:
    from onnx2edge.backends.coreml.backend import validate
    from onnx2edge.errors import Onnx2EdgeError

    model = FIX / "mps" / "tiny_resnet.dynamo.onnx"
    nn_out, mil_out = tmp_path / "nn", tmp_path / "mil"
    api.convert(model, "coreml", nn_out, options={"format": "neuralnetwork"})
    api.convert(model, "coreml", mil_out, options={"format": "mlprogram", "precision": "fp32"})
    # NeuralNetwork: a layer reading a blob nothing produces (check_nn_spec).
    m = ct.models.MLModel(str(nn_out / "model.mlmodel"), skip_model_load=True)
    spec = m.get_spec()
    spec.neuralNetwork.layers[1].input[0] = "nowhere"
    ct.models.MLModel(spec, skip_model_load=True).save(str(tmp_path / "bad.mlmodel"))
    with pytest.raises(Onnx2EdgeError, match="nothing produces"):
        validate(tmp_path / "bad.mlmodel")
    # ML Program: a declared output shape the program does not produce.
    m = ct.models.MLModel(str(mil_out / "model.mlpackage"), skip_model_load=True)
    spec = m.get_spec()
    spec.description.output[0].type.multiArrayType.shape[-1] += 1
    bad = ct.models.MLModel(spec, weights_dir=m.weights_dir, skip_model_load=True)
    bad.save(str(tmp_path / "bad.mlpackage"))
    with pytest.raises(Onnx2EdgeError, match="declared"):
        validate(tmp_path / "bad.mlpackage")
    validate(nn_out / "model.mlmodel")
    validate(mil_out / "model.mlpackage")


@pytest.mark.parametrize("fmt", FORMATS)
def test_evaluator_runs_the_saved_file(fmt: str, tmp_path: Path) -> None:
    """The numbers come from the written file: a changed weight in it changes the output."""
    model = FIX / "mps" / "tiny_resnet.dynamo.onnx"
    out = tmp_path / "o"
    api.convert(model, "coreml", out, options={"format": fmt, "precision": "fp32"})
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (iname,) = [i.name for i in onnx.load(model).graph.input]
    before = api.run(out, {iname: x})
    if fmt == "neuralnetwork":
        path = out / "model.mlmodel"
        spec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
        ip = next(
            la.innerProduct for la in spec.neuralNetwork.layers if la.HasField("innerProduct")
        )
        ip.bias.floatValue[0] += 1.0
        ct.models.MLModel(spec, skip_model_load=True).save(str(path))
        (name,) = before
        after = api.run(out, {iname: x})[name]
        assert after[0, 0] == pytest.approx(before[name][0, 0] + 1.0, abs=1e-5)
        np.testing.assert_array_equal(after[0, 1:], before[name][0, 1:])
    else:
        # The ML Program's weights live in weights/weight.bin, the last blob's data last:
        # add 1 to its final float32 values.
        (wfile,) = (out / "model.mlpackage").rglob("weight.bin")
        data = bytearray(wfile.read_bytes())
        tail = np.frombuffer(bytes(data[-16:]), np.float32) + np.float32(1.0)
        data[-16:] = tail.astype(np.float32).tobytes()
        wfile.write_bytes(bytes(data))
        (name,) = before
        after = api.run(out, {iname: x})[name]
        assert not np.allclose(after, before[name])
