"""Golden files for the generated C of two small models (tests/golden/c/<model>/).

The C a model converts to must not change unless the change is meant: a diff here is
reviewed like code. Regenerate with ONNX2EDGE_UPDATE_GOLDEN=1 (the mechanism test_mps.py
uses, `conftest.check_golden`). Weights go to model_weights.bin (--weights-file) so model.c
holds code only; the binary weights are compared through their SHA-256, and the runtime
header (o2e_gemm.h) must be the packaged file itself.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from onnx2edge import api
from onnx2edge.backends.c import build as c_build

from conftest import ROOT, check_golden

GOLDEN = Path(__file__).parent / "golden" / "c"
RUNTIME = Path(c_build.__file__).parent / "runtime"
MODELS = {
    "tiny_cnn": ROOT / "examples" / "tiny_cnn.onnx",  # Conv kernels, pooling, Gemm
    "sdpa_block": ROOT / "tests" / "fixtures" / "torch" / "sdpa_block.dynamo.onnx",  # attention
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_golden_c(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):  # no ONNX2EDGE_* variable may change the C (kernels: options)
        if var.startswith("ONNX2EDGE_") and var != "ONNX2EDGE_UPDATE_GOLDEN":
            monkeypatch.delenv(var)
    out = tmp_path / name
    # footprint estimate: a measured one depends on the host's gcc (test_c_library checks it)
    options = {"weights_file": True, "footprint": "estimate"}
    api.convert(MODELS[name], "c", out, options=options)
    files = sorted(p.name for p in out.iterdir())
    header = f"{name}.h"  # the symbol prefix and header name: the model file's
    assert {"model.c", header, "main.c", "model_weights.bin", "onnx2edge.json"} <= set(files)
    for rel in files:
        data = (out / rel).read_bytes()
        if (RUNTIME / rel).is_file():  # copied verbatim from the package
            assert data == (RUNTIME / rel).read_bytes(), rel
        elif rel.endswith(".bin"):
            digest = hashlib.sha256(data).hexdigest() + f"  {rel}\n"
            check_golden(GOLDEN / name / f"{rel}.sha256", digest.encode())
        else:
            check_golden(GOLDEN / name / rel, data)
    # a golden file no longer generated would otherwise linger unchecked
    stale = {p.name for p in (GOLDEN / name).iterdir()} - {
        f"{f}.sha256" if f.endswith(".bin") else f for f in files
    }
    assert not stale, f"golden files no longer generated: {sorted(stale)}"


HOST_BLIND = """
import sys
from onnx2edge import host

def refuse():
    raise AssertionError("convert read the host's CPU")

host._cpuinfo = refuse  # before any backend module is imported
from onnx2edge import api

api.convert(sys.argv[1], "c", sys.argv[2])
"""


def test_convert_does_not_read_the_host_cpu(tmp_path: Path) -> None:
    """The goldens hold on every machine only if convert never asks which CPU it runs on (a
    break-even table picked by the host's ISA once made an AVX2 host write another manifest).
    One model.c serves every ISA through #if; the ISA is chosen when it is compiled."""
    import subprocess
    import sys

    pruned = tmp_path / "pruned.onnx"
    api.prune(MODELS["tiny_cnn"], pruned, sparsity=0.95)  # the sparse checks run on it
    for name, model in (("tiny_cnn", MODELS["tiny_cnn"]), ("pruned", pruned)):
        proc = subprocess.run(
            [sys.executable, "-c", HOST_BLIND, str(model), str(tmp_path / name)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert (tmp_path / name / "model.c").is_file()
