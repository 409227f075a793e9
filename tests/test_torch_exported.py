"""Models as PyTorch's exporters write them, through the C backend (no torch needed).

tests/fixtures/torch/ holds small models exported by `python -m onnx2edge.bench.torch_models
tests/fixtures/torch` with the TorchScript exporter (opset 17) and the dynamo exporter
(opset 18, 23 for the Attention op); its README names the torch version. Each one must convert,
compile and match onnxruntime within verify's default tolerance (1e-4 x max|output|).

The second half checks the recurrent ops beyond the ONNX node tests (which leave clip,
activation lists, sequence_lens, peepholes and linear_before_reset untested) against
onnxruntime, and layout=1 (which onnxruntime refuses) against the ONNX reference evaluator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge import api

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "torch"
MODELS = sorted(FIXTURES.glob("*.onnx"))

# token-id inputs: (input name, vocabulary size) of the language models
TOKEN_INPUTS = {"lstm_classifier": ("ids", 100), "gru_tagger": ("ids", 60)}


def test_fixtures_present_and_small() -> None:
    assert len(MODELS) >= 14, MODELS
    readme = (FIXTURES / "README.md").read_text()
    for p in MODELS:
        assert p.stat().st_size <= 1_500_000, p
        assert f"| {p.name} |" in readme, f"{p.name} is not listed in the fixtures README"
    assert sum(p.stat().st_size for p in MODELS) <= 8_000_000
    exporters = {p.stem.rsplit(".", 1)[1] for p in MODELS}
    assert exporters == {"torchscript", "dynamo"}


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_torch_export_through_c(path: Path, tmp_path: Path) -> None:
    name = path.stem.split(".")[0]
    inputs = None
    if name in TOKEN_INPUTS:
        input_name, vocab = TOKEN_INPUTS[name]
        shape = [
            d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
        ]
        ids = np.random.default_rng(1).integers(0, vocab, size=shape).astype(np.int64)
        inputs = {input_name: ids}
    rep = api.verify(path, target="c", inputs=inputs, work_dir=tmp_path / "out")
    assert rep.ok, rep.format()


# --------------------------------------------------------------------------------------------
# RNN / GRU / LSTM attributes beyond the node tests
# --------------------------------------------------------------------------------------------
S, B, N_IN, H = 5, 3, 4, 6  # sequence, batch, input size, hidden size
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _recurrent_model(op: str, *, layout: int = 0, seq: list[int] | None = None, peep: bool = False,
                     outputs: tuple[bool, bool, bool] = (True, True, True), **attrs) -> onnx.ModelProto:  # fmt: skip
    """One recurrent node with constant weights and initial states; X is the only input."""
    rng = np.random.default_rng(len(op) + 7 * layout + len(attrs))
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    G = GATES[op]
    state = (D, B, H) if layout == 0 else (B, D, H)
    arrays = {
        "W": rng.standard_normal((D, G * H, N_IN)) * 0.5,
        "R": rng.standard_normal((D, G * H, H)) * 0.5,
        "B": rng.standard_normal((D, 2 * G * H)) * 0.5,
        "sequence_lens": None if seq is None else np.array(seq, np.int32),
        "initial_h": rng.standard_normal(state),
    }
    if op == "LSTM":
        arrays["initial_c"] = rng.standard_normal(state)
        arrays["P"] = rng.standard_normal((D, 3 * H)) if peep else None
    inits = [
        numpy_helper.from_array(a if a.dtype == np.int32 else a.astype(np.float32), n)
        for n, a in arrays.items()
        if a is not None
    ]
    ins = ["X"] + [n if a is not None else "" for n, a in arrays.items()]
    names = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    outs = [n if keep else "" for n, keep in zip(names, outputs, strict=False)]
    shapes = {"Y": (S, D, B, H) if layout == 0 else (B, S, D, H), "Y_h": state, "Y_c": state}
    node = helper.make_node(op, ins, outs, hidden_size=H, layout=layout, **attrs)
    x = helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, (S, B, N_IN) if layout == 0 else (B, S, N_IN)
    )
    ys = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in outs if n]
    graph = helper.make_graph([node], op.lower(), [x], ys, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 8
    return model


RECURRENT_CASES = {
    "rnn_bidirectional_seq_lens": ("RNN", {"direction": "bidirectional", "seq": [5, 2, 0]}),
    "rnn_reverse_clip": ("RNN", {"direction": "reverse", "clip": 0.3}),
    "rnn_affine": (
        "RNN",
        {"activations": ["Affine"], "activation_alpha": [0.7], "activation_beta": [0.1]},
    ),
    "gru_bidirectional_seq_lens": ("GRU", {"direction": "bidirectional", "seq": [3, 5, 1]}),
    "gru_linear_before_reset_clip": (
        "GRU",
        {"linear_before_reset": 1, "clip": 0.5, "seq": [4, 5, 2]},
    ),
    "gru_activations": (
        "GRU",
        {
            "direction": "bidirectional",
            "activations": ["Sigmoid", "Relu", "HardSigmoid", "Elu"],
            "activation_alpha": [0.3, 0.5],
        },
    ),
    "lstm_bidirectional_peepholes": ("LSTM", {"direction": "bidirectional", "peep": True}),
    "lstm_seq_lens_y_h_only": ("LSTM", {"seq": [1, 5, 0], "outputs": (False, True, False)}),
    "lstm_input_forget_clip": ("LSTM", {"input_forget": 1, "clip": 0.4, "direction": "reverse"}),
    "lstm_activations": (
        "LSTM",
        {
            "direction": "bidirectional",
            "activations": [
                "HardSigmoid",
                "Tanh",
                "Softsign",
                "Sigmoid",
                "LeakyRelu",
                "ScaledTanh",
            ],
            "activation_alpha": [0.3, 0.1, 0.8],
            "activation_beta": [0.4, 1.2],
        },
    ),
}


@pytest.mark.parametrize("case", list(RECURRENT_CASES))
def test_recurrent_against_onnxruntime(case: str, tmp_path: Path) -> None:
    op, kw = RECURRENT_CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(_recurrent_model(op, **kw), path)
    rep = api.verify(path, target="c")
    assert rep.ok, rep.format()


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_batch_first_layout(op: str, direction: str, tmp_path: Path) -> None:
    """layout=1 (batch-major X, Y, states): onnxruntime refuses it, the reference has it."""
    from onnx.reference import ReferenceEvaluator

    model = _recurrent_model(op, layout=1, direction=direction)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(3).standard_normal((B, S, N_IN)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"X": x})
    api.convert(path, "c", tmp_path / "out")
    got = api.run(tmp_path / "out", {"X": x})
    for name, ref in zip(["Y", "Y_h", "Y_c"], want, strict=False):
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
