"""Core ML backend (issue 15): both formats convert, load in coremltools and match
onnxruntime through the NumPy model of the emitted layers / ops; refusals name each node;
the placement check cites a rule for every node.

Core ML itself cannot run on Linux: these numerics are checked against a NumPy model of Core
ML (backends/coreml/evaluate.py), not on Apple hardware.
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
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

ct = pytest.importorskip("coremltools", reason="coremltools is in the dev extra")

from onnx2edge.backends.coreml import placement  # noqa: E402
from onnx2edge.backends.coreml.backend import MODEL_INFO  # noqa: E402

from coreml_support import assert_valid, coreml_files_valid  # noqa: E402, F401

TORCH = Path(__file__).parent / "fixtures" / "torch"
FORMATS = ("neuralnetwork", "mlprogram")
KEYS = {"node", "op", "status", "placement", "reason", "rule", "source", "fix"}


def _verify(model: Path, fmt: str, **kw) -> None:  # noqa: ANN003
    rep = api.verify(model, target="coreml", options={"format": fmt, "precision": "fp32"}, **kw)
    assert rep.ok, rep.format()


# --- the seed / fixture networks, both formats ---------------------------------------------
TORCH_BOTH = [
    f"{name}.{exp}.onnx"
    for name in ("mobilenetv3_block", "silu_convnet", "resize_decoder")
    for exp in ("torchscript", "dynamo")
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fixture", TORCH_BOTH)
def test_torch_fixtures_match_onnxruntime(fixture: str, fmt: str) -> None:
    _verify(TORCH / fixture, fmt)


@pytest.mark.parametrize("exp", ["torchscript", "dynamo"])
def test_shufflenet_mlprogram_and_neuralnetwork_refusal(exp: str, tmp_path: Path) -> None:
    # The channel shuffle (rank-5 reshape + transpose) has no rank-3 legacy layer.
    model = TORCH / f"shufflenet_unit.{exp}.onnx"
    _verify(model, "mlprogram")
    with pytest.raises(api.UnsupportedError) as e:
        api.convert(model, "coreml", tmp_path / "o", options={"format": "neuralnetwork"})
    assert "Transpose" in str(e.value) and "\n" not in str(e.value)  # every node, one line


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("zoo")
    for name in ("unet_small", "mnist_mlp"):
        zoo.save(name, d / f"{name}.onnx")
    return d


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["unet_small", "mnist_mlp"])
def test_zoo_small(zoo_dir: Path, name: str, fmt: str) -> None:
    _verify(zoo_dir / f"{name}.onnx", fmt)


@pytest.mark.slow  # 30-50 s per model and format on the shared 2-core machine
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["mobilenet_v1", "mobilenet_v2", "squeezenet", "nin", "googlenet"])
def test_zoo_slow(tmp_path: Path, name: str, fmt: str) -> None:
    _verify(zoo.save(name, tmp_path / f"{name}.onnx"), fmt)


# --- what is written -------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_written_model_loads_with_io_from_onnx(tmp_path: Path, fmt: str) -> None:
    model = TORCH / "mobilenetv3_block.dynamo.onnx"
    out = tmp_path / "o"
    api.convert(model, "coreml", out, options={"format": fmt, "precision": "fp32"})
    info = json.loads((out / MODEL_INFO).read_text())
    m = ct.models.MLModel(str(out / info["file"]), skip_model_load=True)
    spec = m.get_spec()
    assert spec.WhichOneof("Type") == ("neuralNetwork" if fmt == "neuralnetwork" else "mlProgram")
    g = onnx.load(model).graph
    ins = {f.name: f for f in spec.description.input}
    outs = {f.name: f for f in spec.description.output}
    assert set(ins) == {i.name for i in g.input} and set(outs) == {o.name for o in g.output}
    x = ins["input"]
    assert "ONNX input 'input', float32 1x3x32x32" in x.shortDescription
    shape = list(x.type.multiArrayType.shape)
    assert shape == [1, 3, 32, 32]  # the ONNX shape, batch included (both formats)
    assert x.type.multiArrayType.dataType == ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert manifest["options"]["format"] == fmt and manifest["stats"]["fp16"] is False
    assert "not on Apple hardware" in (out / "README.md").read_text()
    # BN folded: no batch-norm layer / op survives.
    text = str(spec)
    assert "batchnorm" not in text and "batch_norm" not in text


def test_neuralnetwork_layers_are_ane_friendly(tmp_path: Path) -> None:
    """No broadcastable / ND layers (seed 004); the replacements are listed."""
    out = tmp_path / "o"
    api.convert(
        TORCH / "mobilenetv3_block.dynamo.onnx", "coreml", out, options={"format": "neuralnetwork"}
    )
    spec = ct.models.MLModel(str(out / "model.mlmodel"), skip_model_load=True).get_spec()
    kinds = {layer.WhichOneof("layer") for layer in spec.neuralNetwork.layers}
    assert not {k for k in kinds if "Broadcastable" in k or k.endswith("ND")}, kinds
    info = json.loads((out / MODEL_INFO).read_text())
    assert {(r["op"], r["instead_of"]) for r in info["replacements"]} == {
        ("Mul", "MultiplyBroadcastable"),
        ("Add", "AddBroadcastable"),
    }
    # HardSwish has no layer: the required decompose_hardswish pass leaves x * SIGMOID_HARD(x)
    # (layers named after the block's 4 HardSwish nodes; its 2 HardSigmoid nodes are their own)
    by_name = {layer.name: layer for layer in spec.neuralNetwork.layers}
    gates = [k for k in by_name if k.endswith("/hsig")]
    assert len(gates) == 4, sorted(by_name)
    for k in gates:
        act = by_name[k].activation
        assert act.WhichOneof("NonlinearityType") == "sigmoidHard"
        assert abs(act.sigmoidHard.alpha - 1 / 6) < 1e-7 and act.sigmoidHard.beta == 0.5
        assert by_name[k.replace("/hsig", "/mul")].WhichOneof("layer") == "multiply"


def _elementwise_model() -> onnx.ModelProto:
    """Sub / Add / Mul / Div / Concat in every operand form the neuralnetwork emitter rewrites."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal((1, 4, 1, 1)).astype(np.float32)
    full = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Sub", ["a", "b"], ["s"]),  # linear(-1) + Add
        helper.make_node("Sub", ["k_full", "s"], ["s2"]),  # k - x
        helper.make_node("Mul", ["s2", "k_c"], ["m"]),  # Scale
        helper.make_node("Add", ["m", "k_full"], ["p"]),  # LoadConstant + Add
        helper.make_node("Div", ["p", "two"], ["d"]),  # Multiply alpha
        helper.make_node("Mul", ["d", "b"], ["e"]),  # Multiply
        helper.make_node("Concat", ["e", "a"], ["y"], axis=1),  # Concat
    ]
    return make_model(
        nodes,
        [vi("a", [1, 4, 5, 5]), vi("b", [1, 4, 5, 5])],
        [vi("y", [1, 8, 5, 5])],
        [tensor("k_c", c), tensor("k_full", full), tensor("two", np.array(2.0, np.float32))],
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed004_replacements(tmp_path: Path, fmt: str) -> None:
    path = save(_elementwise_model(), tmp_path / "ew.onnx")
    _verify(path, fmt)
    out = tmp_path / "o"
    api.convert(path, "coreml", out, options={"format": fmt, "precision": "fp32"})
    repl = json.loads((out / MODEL_INFO).read_text())["replacements"]
    if fmt == "mlprogram":
        assert repl == []  # MIL ops broadcast; nothing to replace
        return
    by_op = {(r["node"] or r["op"], r["instead_of"]): r["emitted"] for r in repl}
    emitted = [e for v in by_op.values() for e in v]
    assert "activation LINEAR(alpha=-1)" in emitted and "scale" in emitted
    assert "loadConstant" in emitted and "concat" in emitted
    assert {r["instead_of"] for r in repl} == {
        "SubtractBroadcastable",
        "MultiplyBroadcastable",
        "AddBroadcastable",
        "DivideBroadcastable",
        "ConcatND",
    }


def _layers_model() -> onnx.ModelProto:
    """Every other layer kind with the attribute variants the evaluator models."""
    rng = np.random.default_rng(2)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 0, 2, 1], strides=[2, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["l1"], alpha=0.1),
        helper.make_node(
            "Conv", ["l1", "w2"], ["c2"], dilations=[2, 2], pads=[2, 2, 2, 2], group=2
        ),
        helper.make_node("Elu", ["c2"], ["e2"], alpha=0.7),
        helper.make_node(
            "AveragePool",
            ["e2"],
            ["p1"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[1, 1],
            count_include_pad=0,
        ),
        helper.make_node(
            "AveragePool",
            ["p1"],
            ["p2"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
        ),
        helper.make_node(
            "MaxPool", ["p2"], ["p3"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
        ),
        helper.make_node("Clip", ["p3", "lo", "hi"], ["k1"]),
        helper.make_node(
            "Resize",
            ["k1", "", "sc"],
            ["r1"],
            mode="linear",
            coordinate_transformation_mode="align_corners",
        ),
        helper.make_node(
            "Resize",
            ["r1", "", "sc"],
            ["r2"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("ConvTranspose", ["r2", "wt", "bt"], ["t1"], strides=[2, 2]),
        helper.make_node("Tanh", ["t1"], ["t2"]),
        helper.make_node("BatchNormalization", ["t2", "g", "be", "mu", "var"], ["bn"]),
        helper.make_node("Softmax", ["bn"], ["y"], axis=1),
    ]
    inits = [
        tensor("w1", w(4, 3, 3, 3)),
        tensor("b1", w(4)),
        tensor("w2", w(6, 2, 3, 3)),
        tensor("lo", np.array(-0.5, np.float32)),
        tensor("hi", np.array(0.8, np.float32)),
        tensor("sc", np.array([1, 1, 2, 2], np.float32)),
        tensor("wt", w(6, 3, 2, 2)),
        tensor("bt", w(3)),
        tensor("g", w(3) + 1),
        tensor("be", w(3)),
        tensor("mu", w(3)),
        tensor("var", np.abs(w(3)) + 0.5),
    ]
    return make_model(nodes, [vi("x", [1, 3, 11, 9])], [vi("y", [1, 3, 24, 32])], inits, opset=17)


@pytest.mark.parametrize("fmt", FORMATS)
def test_layer_variants_match_onnxruntime(tmp_path: Path, fmt: str) -> None:
    _verify(save(_layers_model(), tmp_path / "layers.onnx"), fmt)


def _caffe_model() -> onnx.ModelProto:
    """Caffe-style ceil_mode max pooling (NIN, GoogLeNet, AlexNet) and LRN."""
    w = (np.random.default_rng(4).standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node(
            "MaxPool", ["c"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
        ),
        helper.make_node("LRN", ["p1"], ["n1"], size=5, alpha=1e-2, beta=0.75, bias=2.0),
        helper.make_node(
            "MaxPool",
            ["n1"],
            ["y"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
        ),
    ]
    return make_model(nodes, [vi("x", [1, 3, 15, 16])], [vi("y", [1, 6, 4, 4])], [tensor("w", w)])


@pytest.mark.parametrize("fmt", FORMATS)
def test_ceil_mode_max_pool_and_lrn(tmp_path: Path, fmt: str) -> None:
    _verify(save(_caffe_model(), tmp_path / "caffe.onnx"), fmt)


def test_nan_and_inf_inputs_propagate_like_onnxruntime(tmp_path: Path) -> None:
    path = save(_elementwise_model(), tmp_path / "ew.onnx")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    a[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    b = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    for fmt in FORMATS:
        rep = api.verify(
            path,
            target="coreml",
            inputs={"a": a, "b": b},
            options={"format": fmt, "precision": "fp32"},
        )
        assert rep.ok, rep.format()


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp16(tmp_path: Path, fmt: str) -> None:
    model = TORCH / "silu_convnet.dynamo.onnx"
    out = tmp_path / "o"
    api.convert(model, "coreml", out, options={"format": fmt, "fp16": True})
    spec = ct.models.MLModel(
        str(out / ("model.mlmodel" if fmt == "neuralnetwork" else "model.mlpackage")),
        skip_model_load=True,
    ).get_spec()
    if fmt == "neuralnetwork":
        conv = next(
            la.convolution for la in spec.neuralNetwork.layers if la.HasField("convolution")
        )
        assert len(conv.weights.float16Value) and not len(conv.weights.floatValue)
    else:
        assert "fp16" in str(spec.mlProgram)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (iname,) = [i.name for i in onnx.load(model).graph.input]
    ref = ort_run(onnx.load(model), {iname: x})
    got = api.run(out, {iname: x})
    (name,) = ref
    err = np.max(np.abs(got[name] - ref[name])) / np.max(np.abs(ref[name]))
    assert 0 < err < 2e-2  # float16 weights: close, and not bit-identical to float32


# --- CLI: convert / run / refusals ---------------------------------------------------------
def test_cli_convert_run_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = TORCH / "resize_decoder.dynamo.onnx"
    out = tmp_path / "o"
    assert (
        main(
            [
                "convert",
                str(model),
                "--target",
                "coreml",
                "--format",
                "neuralnetwork",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    x = np.random.default_rng(3).standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (iname,) = [i.name for i in onnx.load(model).graph.input]
    assert (
        main(
            [
                "run",
                str(out),
                "--input",
                f"{iname}={tmp_path / 'x.npy'}",
                "-o",
                str(tmp_path / "y.npz"),
            ]
        )
        == 0
    )
    ref = ort_run(onnx.load(model), {iname: x})
    got = np.load(tmp_path / "y.npz")
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)
    argv = ["verify", str(model), "--target", "coreml", "--format", "mlprogram"]
    assert main([*argv, "--precision", "fp32"]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", FORMATS)
def test_lstm_classifier_refused_naming_each_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    model = TORCH / "lstm_classifier.dynamo.onnx"
    code = main(
        ["convert", str(model), "--target", "coreml", "--format", fmt, "-o", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing half-written
    assert len(err.strip().splitlines()) == 1, err
    g = frontend.load(model, quiet=True)
    for n in g.nodes:
        # LSTM, and the embedding lookup (a Gather of the input ids; mlprogram takes a Gather
        # with constant indices)
        if n.op_type == "LSTM" or (n.op_type == "Gather" and not g.is_const(n.inputs[1])):
            # one format for every backend's refusal (backends/refusal.py)
            assert err.count(f"node '{n.name}' (op {n.op_type}, opset") == 1, err


# --- placement check -----------------------------------------------------------------------
def _graph(path: Path):  # noqa: ANN202
    return frontend.load(path, quiet=True)


@pytest.mark.parametrize("fn", [placement.check_coreml, placement.check_coreml_ane])
@pytest.mark.parametrize(
    "fixture",
    [
        "mobilenetv3_block.dynamo.onnx",
        "lstm_classifier.torchscript.onnx",
        "shufflenet_unit.dynamo.onnx",
        "resize_decoder.torchscript.onnx",
    ],
)
def test_placement_reports_every_node_with_a_source(fixture: str, fn) -> None:  # noqa: ANN001
    g = _graph(TORCH / fixture)
    rows = fn(g)
    assert [r["node"] for r in rows] == [n.name for n in g.nodes]
    for r in rows:
        assert set(r) == KEYS and r["status"] in ("supported", "replaceable", "unsupported")
        assert r["source"] and r["reason"]
        if fn is placement.check_coreml_ane:
            assert r["placement"] in ("ane", "gpu", "cpu")
        else:
            assert r["placement"] is None


def test_ane_lstm_on_cpu_and_replacements() -> None:
    lstm = {
        r["op"]: r
        for r in placement.check_coreml_ane(_graph(TORCH / "lstm_classifier.dynamo.onnx"))
    }
    assert lstm["LSTM"]["placement"] == "cpu" and lstm["LSTM"]["status"] == "unsupported"
    assert lstm["Gather"]["placement"] == "cpu"
    assert "hollance/neural-engine" in lstm["LSTM"]["source"]
    rows = placement.check_coreml_ane(_graph(TORCH / "mobilenetv3_block.dynamo.onnx"))
    add = next(r for r in rows if r["op"] == "Add")
    assert add == {
        **add,
        "status": "replaceable",
        "placement": "ane",
        "rule": "AddBroadcastable -> add",
    }
    assert "seed 004" in add["source"]
    se_mul = [r for r in rows if r["op"] == "Mul"]  # squeeze-excite: C x H x W * C x 1 x 1
    assert se_mul and all(r["placement"] == "gpu" for r in se_mul)
    assert all(r["placement"] == "ane" for r in rows if r["op"] in ("Conv", "HardSwish"))


def _limits_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("AveragePool", ["p"], ["q"], kernel_shape=[14, 14]),
        helper.make_node("Resize", ["q", "", "sc"], ["r"], mode="nearest"),
        helper.make_node("Resize", ["r", "", "sc"], ["y"], mode="linear"),
    ]
    w = np.ones((2, 2, 3, 3), np.float32)
    sc = np.array([1, 1, 4, 4], np.float32)
    return make_model(
        nodes,
        [vi("x", [1, 2, 48, 48])],
        [vi("y", [1, 2, 48, 48])],
        [tensor("w", w), tensor("sc", sc)],
    )


def test_ane_documented_limits(tmp_path: Path) -> None:
    rows = placement.check_coreml_ane(_graph(save(_limits_model(), tmp_path / "l.onnx")))
    conv, mp, ap, up_nn, up_lin = rows
    assert conv["placement"] == "gpu" and "dilated" in conv["reason"]
    assert mp["status"] == "unsupported" and "stride" in mp["reason"]
    assert ap["status"] == "unsupported" and "kernel" in ap["reason"]
    assert up_nn["status"] == "replaceable" and "2x" in up_nn["rule"]
    assert up_lin["status"] == "unsupported" and up_lin["rule"] is None
    assert all("unsupported-layers.md" in r["source"] for r in rows)


def test_ane_dynamic_shape_rule(tmp_path: Path) -> None:
    from onnx2edge.ir.proto import graph_from_model

    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 3])], [vi("y", ["n", 3])]
    )
    (row,) = placement.check_coreml_ane(graph_from_model(m))
    assert row["placement"] == "cpu" and "forums/thread/724930" in row["source"]


def test_check_coreml_statuses() -> None:
    rows = {
        r["op"]: r for r in placement.check_coreml(_graph(TORCH / "shufflenet_unit.dynamo.onnx"))
    }
    assert rows["Conv"]["status"] == "supported"
    assert rows["Transpose"]["status"] == "replaceable"
    assert rows["Transpose"]["rule"] == "convert with --format mlprogram"
    assert rows["Concat"]["status"] == "replaceable" and rows["Concat"]["rule"].startswith(
        "ConcatND"
    )
    lstm = {
        r["op"]: r for r in placement.check_coreml(_graph(TORCH / "lstm_classifier.dynamo.onnx"))
    }
    assert lstm["LSTM"]["status"] == "unsupported"


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_empty_max_min_reduction_refused_at_check(op: str) -> None:
    # ONNX gives -inf / +inf for an empty max / min; Core ML documents no result for it, so
    # both formats refuse it at check time (conformance: test_reduce_{max,min}_empty_set)
    # instead of emitting a model whose device result is unknown.
    from onnx2edge.backends import get_backend
    from onnx2edge.backends.coreml import evaluate
    from onnx2edge.errors import Onnx2EdgeError

    node = helper.make_node(op, ["x"], ["y"], axes=[2, 3], keepdims=1)
    m = make_model([node], [vi("x", [1, 2, 0, 3])], [vi("y", [1, 2, 1, 1])], opset=13)
    g = frontend.load(m, quiet=True)
    # neuralnetwork has no ReduceMin layer at all
    for fmt in FORMATS if op == "ReduceMax" else ("mlprogram",):
        refusals = get_backend("coreml").check(g, {"format": fmt})
        assert [r.op for r in refusals] == [op], refusals
        assert "axis 2 of size 0" in refusals[0].reason
    # the evaluator says it does not model it rather than crashing inside NumPy
    fn = evaluate.mil_reduce_max if op == "ReduceMax" else evaluate.mil_reduce_min
    with pytest.raises(Onnx2EdgeError, match="size 0 is not modelled"):
        fn(np.zeros((1, 2, 0, 3), np.float32), axes=[2, 3], keep_dims=True)
    # a non-empty reduction over the same axes is still emitted
    m2 = make_model([node], [vi("x", [1, 2, 4, 3])], [vi("y", [1, 2, 1, 1])], opset=13)
    assert get_backend("coreml").check(frontend.load(m2, quiet=True), {}) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_mish_decomposed_matches_onnxruntime_and_validates(tmp_path: Path, fmt: str) -> None:
    # No Mish layer / MIL op: the required decompose_mish pass leaves softplus, tanh and a
    # multiply in both formats (neuralnetwork had no Mish at all before); the evaluator matches
    # onnxruntime and Core ML's validator accepts the file (autouse coreml_files_valid).
    w = np.random.RandomState(1).randn(4, 3, 3, 3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Mish", ["c"], ["y"], name="mish"),
    ]
    m = make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], [tensor("w", w)], 18)
    model = save(m, tmp_path / "m.onnx")
    out = tmp_path / "o"
    rep = api.verify(
        model, target="coreml", options={"format": fmt, "precision": "fp32"}, work_dir=out
    )
    assert rep.ok, rep.format()
    info = json.loads((out / MODEL_INFO).read_text())
    assert_valid(out / info["file"])
    spec = ct.models.MLModel(str(out / info["file"]), skip_model_load=True).get_spec()
    text = str(spec)
    assert "softplus" in text.lower() and "tanh" in text.lower()
