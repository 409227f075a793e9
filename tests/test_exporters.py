"""The exporter corpus (issue 11): models as torch (TorchScript, dynamo, torch.jit.script),
paddle2onnx-style graphs, onnxscript, spox, skl2onnx (a trained scikit-learn model), jax2onnx,
tf2onnx (Keras models, one trained on scikit-learn's digits), paddle2onnx (the last two built
in venvs of their own by tools/build_venv_fixtures.sh) and onnxruntime's own quantizer and transformer optimizer write them, with their dynamic dims.

tests/fixtures/exporters/build.py wrote them (the packages are not needed here) and
corpus.json says, per model, the input shapes to fix and the inputs to bind. Each model is
converted to C, built and compared with onnxruntime running the original file (com.microsoft
ops included) within verify's default tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.errors import UnsupportedError

CORPUS = Path(__file__).resolve().parent / "fixtures" / "exporters"
INDEX: dict = json.loads((CORPUS / "corpus.json").read_text())
CASES = [
    (name, fixed) for name, entry in INDEX.items() for fixed in (entry.get("fix_inputs") or [{}])
]


def test_corpus_is_complete_and_small() -> None:
    files = sorted(p.stem for p in CORPUS.glob("*.onnx"))
    assert files == sorted(INDEX)
    assert all((CORPUS / f"{n}.onnx").stat().st_size < 300_000 for n in INDEX)
    exporters = {n.rsplit(".", 1)[1] for n in INDEX}
    assert {
        "torchscript",
        "dynamo",
        "paddle_style",
        "onnxscript",
        "spox",
        "skl2onnx",
        "jax2onnx",
        "ort_transformers",
        "ort_quantize_static_qop",
        "tf2onnx",
        "paddle2onnx",
    } <= exporters
    # the onnxruntime-written ones really carry com.microsoft ops
    for name in (
        "attention_fused.ort_transformers",
        "cnn.ort_quantize_static_qop",
        "mlp.ort_quantize_dynamic_fused",
    ):
        m = onnx.load(str(CORPUS / f"{name}.onnx"))
        assert any(n.domain == "com.microsoft" for n in m.graph.node), name


@pytest.mark.parametrize(
    "name,fixed", CASES, ids=[n + "".join(f"-{k}{v}" for k, v in f.items()) for n, f in CASES]
)
def test_exported_model_through_c(name: str, fixed: dict, tmp_path: Path) -> None:
    entry = INDEX[name]
    rep = api.verify(
        CORPUS / f"{name}.onnx",
        target="c",
        input_shapes=entry["input_shapes"],
        fixed_inputs={k: np.array(v) for k, v in fixed.items()},
        work_dir=tmp_path / "c",
    )
    assert rep.ok, rep.format()
    manifest = json.loads((tmp_path / "c" / "onnx2edge.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == [
        n for n in entry["input_names"] if n not in fixed
    ]


def test_branch_on_an_input_needs_fix_input(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match=r"node '/If' \(op If\).*--fix-input"):
        api.convert(CORPUS / "resample_if.torchscript.onnx", "c", tmp_path / "c")


def test_tf_cond_on_the_input_runs_the_taken_branch(tmp_path: Path) -> None:
    """tf2onnx's If for tf.cond(min(x) >= 0, sqrt(x), tanh(x @ w)): both branches in C, each
    checked against onnxruntime on an input that takes it."""
    from onnx2edge.runtime import ort_run

    path = CORPUS / "gate.tf2onnx.onnx"
    out = tmp_path / "c"
    api.convert(path, "c", out, input_shapes={"x": (3, 8)})
    assert "  if (" in (out / "model.c").read_text()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    for feed in (np.abs(x), x):
        ref = ort_run(onnx.load(path), {"x": feed})
        got = api.run(out, {"x": feed})
        for k, v in ref.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6)
