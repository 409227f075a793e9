"""The C writer emits exactly the constants the generated code names (issue 10): op emitters
record a constant when they read its C symbol (emitter.ConstTensor), no regex over the text.
An initializer read only for its shape or values (a Conv weight written as a repacked copy,
a Reshape's shape) is not written; one the code reads always is; every written constant is
named by the code (checked on the golden models and exporter fixtures)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api

from conftest import ROOT, make_model, save, tensor, vi

DECL = re.compile(r"^(?:#define|static (?:const )?\w+) (W_\w+)", re.M)


def _declared_and_named(model_c: str) -> tuple[set[str], set[str]]:
    """W_ symbols declared as weights, and those named anywhere outside their declaration."""
    declared = set(DECL.findall(model_c))
    body = "\n".join(line for line in model_c.splitlines() if not DECL.match(line))
    return declared, set(re.findall(r"\bW_\w+", body)) & declared


def test_unreferenced_initializer_not_written_referenced_one_is(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    k = rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),  # packed at conversion
        n("Add", ["c", "k"], ["a"], name="add"),  # reads k in place
        n("Reshape", ["a", "shape"], ["y"], name="flat"),  # shape: read at conversion only
    ]
    inits = [tensor("w", w), tensor("k", k), tensor("shape", np.array([1, -1], np.int64))]
    path = save(
        make_model(nodes, [vi("x", [1, 16, 12, 12])], [vi("y", [1, 32 * 144])], inits),
        tmp_path / "m.onnx",
    )
    for weights_file in (False, True):
        out = tmp_path / f"out{int(weights_file)}"
        api.convert(path, "c", out, options={"weights_file": weights_file})
        code = (out / "model.c").read_text()
        declared, named = _declared_and_named(code)
        assert "W_k" in declared and "W_k" in named  # referenced: written
        assert "W_w" not in declared  # the kernel reads its repacked copy only
        assert "W_shape" not in declared
        assert declared == named, declared - named
    assert api.verify(path, target="c").ok


MODELS = [
    ROOT / "examples" / "tiny_cnn.onnx",
    *(
        ROOT / "tests" / "fixtures" / "torch" / f"{m}.dynamo.onnx"
        for m in ("sdpa_block", "mobilenetv3_block", "shufflenet_unit", "vit_block", "gru_tagger")
    ),
]


@pytest.mark.parametrize("model", MODELS, ids=[p.stem for p in MODELS])
def test_every_written_constant_is_named(tmp_path: Path, model: Path) -> None:
    """No constant written that the code does not name (an emitter reading a symbol it then
    does not write would add one): the text is the oracle here, never in the writer."""
    api.convert(model, "c", tmp_path / "out")
    declared, named = _declared_and_named((tmp_path / "out" / "model.c").read_text())
    assert declared, "no constants at all: the check would be empty"
    assert declared == named, sorted(declared - named)
