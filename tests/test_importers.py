"""TFLite and OpenVINO IR models, written by TensorFlow's and OpenVINO's own converters
(tests/fixtures/tflite/build.py, tests/fixtures/openvino/build.py), imported, converted to C and
verified against the format's own runtime (LiteRT, OpenVINO) where installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.errors import UnsupportedError
from onnx2edge.importers import import_model

FIX = Path(__file__).parent / "fixtures"
TFLITE = FIX / "tflite"
OPENVINO = FIX / "openvino"
HAS_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
needs_tflite = pytest.mark.skipif(
    importlib.util.find_spec("tflite") is None,
    reason="the 'tflite' schema package is not installed",
)

TFLITE_MODELS = [
    "cnn.float32",
    "cnn.float16",
    "cnn.int8",
    "mlp.float32",
    "sparse.float32",
    "lstm.float32",
    "text.float32",
    "dense.dynamic",
    "conv.dynamic",
    "tiny_cnn.onnx2tf",
]
OPENVINO_MODELS = {
    "tiny_cnn": None,
    "keras_cnn": None,
    "fq_cnn": None,
    "attention": {"x": (3, 9, 32)},
    "convnet_flatten": {"image": (2, 3, 24, 20)},
}


def _env() -> dict:
    import os

    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


@needs_tflite
@pytest.mark.parametrize("name", TFLITE_MODELS)
def test_tflite_to_c_matches_litert(name: str, tmp_path: Path) -> None:
    inputs = None
    if name == "cnn.int8":  # the whole int8 range, not the small integers verify draws
        x = np.random.default_rng(0).integers(-128, 128, (1, 16, 16, 3)).astype(np.int8)
        inputs = {import_model(TFLITE / f"{name}.tflite").graph.input[0].name: x}
    rep = api.verify(TFLITE / f"{name}.tflite", target="c", work_dir=tmp_path / "c", inputs=inputs)
    assert rep.ok, rep.format()
    want = "LiteRT" if HAS_LITERT else "onnxruntime on the imported ONNX"
    assert want in rep.reference, rep.reference
    if name == "cnn.int8":  # the QDQ convolutions reached the C backend's int8 kernels
        assert "QLinearConv" in (tmp_path / "c" / "model.c").read_text()


@needs_tflite
def test_tflite_keeps_nhwc_io_and_quantized_io() -> None:
    m = import_model(TFLITE / "cnn.int8.tflite")
    (inp,) = m.graph.input
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    assert dims == [1, 16, 16, 3]
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.INT8
    assert {o.type.tensor_type.elem_type for o in m.graph.output} == {onnx.TensorProto.INT8}
    ops = [n.op_type for n in m.graph.node]
    # per-channel int8 weights behind DequantizeLinear, activations through Q/DQ pairs
    per_channel = [
        n
        for n in m.graph.node
        if n.op_type == "DequantizeLinear" and n.attribute and n.attribute[0].name == "axis"
    ]
    assert per_channel and ops.count("QuantizeLinear") >= 8


@needs_tflite
def test_tflite_float16_weights_become_float32() -> None:
    m = import_model(TFLITE / "cnn.float16.tflite")
    assert all(t.data_type != onnx.TensorProto.FLOAT16 for t in m.graph.initializer)
    assert "DequantizeLinear" not in {n.op_type for n in m.graph.node}


@needs_tflite
@pytest.mark.skipif(not HAS_LITERT, reason="ai-edge-litert is not installed")
def test_int8_output_judged_within_one_step(tmp_path: Path) -> None:
    rep = api.verify(TFLITE / "cnn.int8.tflite", target="onnx")
    assert rep.ok and all(o.quant_step for o in rep.outputs)
    assert "quantization step" in rep.tolerance_applied


@pytest.mark.parametrize(("name", "shapes"), OPENVINO_MODELS.items())
def test_openvino_to_c_matches_openvino(name: str, shapes: dict | None, tmp_path: Path) -> None:
    rep = api.verify(
        OPENVINO / f"{name}.xml", target="c", work_dir=tmp_path / "c", input_shapes=shapes
    )
    assert rep.ok, rep.format()
    want = "OpenVINO" if HAS_OPENVINO else "onnxruntime on the imported ONNX"
    assert want in rep.reference, rep.reference


def test_openvino_fp16_constants_folded() -> None:
    m = import_model(OPENVINO / "tiny_cnn.xml")
    ops = {n.op_type for n in m.graph.node}
    assert "Cast" not in ops  # Const(f16) -> Convert folded into float32 initializers
    assert all(t.data_type != onnx.TensorProto.FLOAT16 for t in m.graph.initializer)
    ref = onnx.load(str(Path(__file__).parents[1] / "examples" / "tiny_cnn.onnx"))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    import onnxruntime as ort

    def run(model: onnx.ModelProto) -> np.ndarray:
        s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return s.run(None, {s.get_inputs()[0].name: x})[0]

    # the IR's weights are float16: equal to the original ONNX up to that rounding
    np.testing.assert_allclose(run(m), run(ref), rtol=0, atol=2e-2)


@needs_tflite
def test_cli_import_writes_onnx(tmp_path: Path) -> None:
    out = tmp_path / "cnn.onnx"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnx2edge.cli",
            "import",
            str(TFLITE / "cnn.float32.tflite"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert r.returncode == 0, r.stderr
    onnx.checker.check_model(onnx.load(str(out)))


@needs_tflite
def test_unsupported_tflite_op_is_named_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "x.onnx"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnx2edge.cli",
            "import",
            str(TFLITE / "cumsum.float32.tflite"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "operator 0 (CUMSUM" in r.stderr, r.stderr
    assert not out.exists()


def test_unsupported_openvino_layer_is_named(tmp_path: Path) -> None:
    xml = tmp_path / "m.xml"
    xml.write_text(
        """<?xml version="1.0"?>
<net name="m" version="11"><layers>
<layer id="0" name="x" type="Parameter" version="opset1"><data shape="1,4" element_type="f32"/>
<output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>4</dim></port></output></layer>
<layer id="1" name="weird" type="Einsum" version="opset7"><data equation="ij->ji"/>
<input><port id="0"><dim>1</dim><dim>4</dim></port></input>
<output><port id="1" precision="FP32"><dim>4</dim><dim>1</dim></port></output></layer>
<layer id="2" name="y" type="Result" version="opset1"><input><port id="0"><dim>4</dim><dim>1</dim></port></input></layer>
</layers><edges><edge from-layer="0" from-port="0" to-layer="1" to-port="0"/>
<edge from-layer="1" from-port="1" to-layer="2" to-port="0"/></edges></net>"""
    )
    with pytest.raises(UnsupportedError, match=r"layer 'weird' \(Einsum, opset7\)"):
        import_model(xml)


@needs_tflite
def test_sparse_weights_behind_densify_read_dense() -> None:
    m = import_model(TFLITE / "sparse.float32.tflite")
    ws = [onnx.numpy_helper.to_array(t) for t in m.graph.initializer if t.dims and len(t.dims) == 2]
    assert sorted(w.shape for w in ws) == [(10, 64), (64, 32)]
    zeros = sum(int((w == 0).sum()) for w in ws) / sum(w.size for w in ws)
    assert 0.8 < zeros < 0.9  # the 85% the build script zeroed, nothing more or less


@needs_tflite
@pytest.mark.skipif(not HAS_LITERT, reason="ai-edge-litert is not installed")
def test_lstm_without_cell_clip_is_one_onnx_lstm() -> None:
    """Keras' LSTMs carry cell_clip 10 (unrolled, tested through the corpus); without it the
    op is one ONNX LSTM. The fixture's cell state stays far below 10 on these inputs, so the
    clip-free reading must equal LiteRT too."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from onnx2edge.importers import tflite as imp

    class Unclipped:
        def __init__(self, o: object) -> None:
            self.o = o

        def __getattr__(self, k: str) -> object:
            return getattr(self.o, k)

        def CellClip(self) -> float:  # noqa: N802 - the flatbuffer accessor's name
            return 0.0

    class NoClip(imp._Importer):
        def options(self, op):  # noqa: ANN001, ANN202
            o = super().options(op)
            return Unclipped(o) if o is not None and hasattr(o, "CellClip") else o

    path = TFLITE / "lstm.float32.tflite"
    m = NoClip(path.read_bytes(), path).run()
    assert [n.op_type for n in m.graph.node].count("LSTM") == 2
    x = np.random.default_rng(0).standard_normal((1, 8, 6)).astype(np.float32)
    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    d = it.get_input_details()[0]
    it.set_tensor(d["index"], x)
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(s.run(None, {d["name"]: x})[0], ref, rtol=1e-5, atol=1e-6)


# The Keras CNN is not among them: its UpSampling2D becomes Tile, which the Core ML backend
# does not map.
@pytest.mark.parametrize("model", ["tflite/mlp.float32.tflite", "openvino/tiny_cnn.xml"])
def test_imported_models_to_coreml(model: str, tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="coremltools is in the dev extra")
    if model.endswith(".tflite") and importlib.util.find_spec("tflite") is None:
        pytest.skip("the 'tflite' schema package is not installed")
    rep = api.verify(FIX / model, target="coreml", work_dir=tmp_path / "ml")
    assert rep.ok, rep.format()


def test_imported_model_to_mps(tmp_path: Path) -> None:
    from onnx2edge.backends.mps import build as mps_build
    from onnx2edge.errors import Onnx2EdgeError

    try:
        mps_build.swiftc()
    except Onnx2EdgeError:
        pytest.skip("swiftc not found: the MPS simulator cannot be built")
    rep = api.verify(OPENVINO / "tiny_cnn.xml", target="mps", work_dir=tmp_path / "mps")
    assert rep.ok, rep.format()


@needs_tflite
def test_corrupt_tflite_is_one_error(tmp_path: Path) -> None:
    """Bytes flipped in the flatbuffer: refused as a corrupt file, never a traceback."""
    from onnx2edge.errors import Onnx2EdgeError

    data = (TFLITE / "cnn.float32.tflite").read_bytes()
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(40):
        b = bytearray(data)
        for _ in range(8):
            b[rng.integers(8, 2000)] = rng.integers(0, 256)
        p = tmp_path / "x.tflite"
        p.write_bytes(bytes(b))
        try:
            import_model(p)
        except Onnx2EdgeError:
            refused += 1
    assert refused > 0


def test_openvino_without_bin_is_named(tmp_path: Path) -> None:
    from onnx2edge.errors import Onnx2EdgeError

    xml = tmp_path / "m.xml"
    xml.write_bytes((OPENVINO / "tiny_cnn.xml").read_bytes())
    with pytest.raises(Onnx2EdgeError, match=r"needs m\.bin, which is not beside the \.xml"):
        import_model(xml)


def test_fake_quantize_as_qdq_where_exact() -> None:
    m = import_model(OPENVINO / "fq_cnn.xml")
    ops = [n.op_type for n in m.graph.node]
    # the input's aligned range: one uint8 Q/DQ pair; the activation's unaligned range: the
    # spec's formula (Round); the weights' per-channel FakeQuantize: folded into the weight
    assert ops.count("QuantizeLinear") == 1 and ops.count("Round") == 1
    (w,) = [t for t in m.graph.initializer if list(t.dims) == [8, 3, 3, 3]]
    wf = onnx.numpy_helper.to_array(w).reshape(8, -1).astype(np.float64)
    step = np.abs(wf).max(1, keepdims=True) / 127  # 255 levels over [-max|w|, max|w|]
    k = wf / step
    np.testing.assert_allclose(k, np.round(k), atol=1e-3)  # every weight on a level


@needs_tflite
@pytest.mark.parametrize(("name", "most"), [("cnn.float32", 5), ("tiny_cnn.onnx2tf", 2)])
def test_layout_transposes_cancelled(name: str, most: int) -> None:
    """Each NCHW op is imported between two Transposes (10 in the Keras CNN, 5 in onnx2tf's);
    the pairs that meet through layout-agnostic ops cancel at import."""
    m = import_model(TFLITE / f"{name}.tflite")
    assert sum(n.op_type == "Transpose" for n in m.graph.node) <= most


@needs_tflite
@pytest.mark.parametrize("name", ["dense.dynamic", "conv.dynamic"])
def test_hybrid_kernels_quantize_their_input(name: str) -> None:
    """Dynamic-range models: int8 weights, float activations that LiteRT's hybrid kernels
    round to int8 per batch row; without that rounding the outputs differ by ~1e-3."""
    m = import_model(TFLITE / f"{name}.tflite")
    ops = [n.op_type for n in m.graph.node]
    assert "DequantizeLinear" in ops and "Round" in ops and "ReduceMin" in ops


@needs_tflite
def test_verify_without_the_runtime_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx2edge.importers import runtime

    def missing(*_a: object) -> dict:
        raise ImportError("no ai_edge_litert")

    monkeypatch.setattr(runtime, "_litert", missing)
    rep = api.verify(TFLITE / "mlp.float32.tflite", target="onnx")
    assert rep.ok
    assert rep.reference == "onnxruntime on the imported ONNX (ai-edge-litert is not installed)"
    assert "compared with onnxruntime on the imported ONNX" in rep.format()
    assert rep.as_dict()["reference"] == rep.reference
