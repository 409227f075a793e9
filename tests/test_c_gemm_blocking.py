"""A generated model's static arena is sized for o2e_gemm.h's default blocking: a build that
raises it fails with one clear #error (it would overrun the arena), one that lowers the K slice
down to gemm_pack.KC_MIN runs and matches onnxruntime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.backends.c.gemm_pack import KC_MIN
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_run

from conftest import make_model, save, tensor, vi

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _model(tmp_path: Path) -> Path:
    # 1x1 conv with 64 < K <= 256 and a large M: the case where a lower KC adds the partial-sum
    # tile of an M block to the workspace
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 128, 1, 1)).astype(np.float32) * 0.1
    b = rng.standard_normal(256).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="pw")
    relu = helper.make_node("Relu", ["y"], ["z"], name="act")
    m = make_model(
        [node, relu],
        [vi("x", [1, 128, 14, 14])],
        [vi("z", [1, 256, 14, 14], TensorProto.FLOAT)],
        [tensor("w", w), tensor("b", b)],
    )
    return save(m, tmp_path / "pw.onnx")


def test_lower_kc_runs_raised_kc_refused(tmp_path: Path) -> None:
    path = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    x = {"x": np.random.default_rng(0).standard_normal((1, 128, 14, 14)).astype(np.float32)}
    x["x"][0, 5, 3, 4] = np.nan
    ref = ort_run(onnx.load(path), x)["z"]
    for march in ("x86-64-v2", "x86-64-v3", "native"):
        flags = ["-O2", f"-march={march}", f"-DO2E_GEMM_KC={KC_MIN}"]
        exe = build_executable(out, flags, name=f"kc_{march}")
        got = run_executable(exe, io, x, out)["z"]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        ok = ~np.isnan(ref)
        assert np.abs(got[ok] - ref[ok]).max() <= 1e-4 * np.abs(ref[ok]).max(), march
    for flag in ("-DO2E_GEMM_KC=512", f"-DO2E_GEMM_KC={KC_MIN // 2}", "-DO2E_GEMM_SB=2"):
        with pytest.raises(Onnx2EdgeError, match="GEMM workspaces were sized for the default"):
            build_executable(out, ["-O2", flag], name="raised")
