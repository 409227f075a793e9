"""`bench --ort-isa match`: onnxruntime held to our build's instruction set by the CPUID shim
(bench/cpuid_mask.c). Checked on what the shim makes a process see (numpy's own CPU feature
detection), that onnxruntime still computes the same numbers under it, that a real fault still
kills the process, and the clear error on hosts that cannot fault CPUID."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onnx2edge.bench import ort_isa
from onnx2edge.bench.harness import bench_model
from onnx2edge.errors import Onnx2EdgeError

FLAGS = ort_isa.cpu_flags()
CAN_FAULT = "cpuid_fault" in FLAGS and shutil.which("gcc") is not None
needs_fault = pytest.mark.skipif(
    not CAN_FAULT, reason="this CPU/kernel has no CPUID faulting (cpuid_fault) or no gcc"
)

FEATURES = (
    "from numpy._core._multiarray_umath import __cpu_features__ as f; "
    "print(int(f['AVX512F']), int(f['AVX2']), int(f['FMA3']), int(f['SSE42']))"
)

ORT_RUN = r"""
import sys, numpy as np, onnxruntime as ort
from onnx import helper, numpy_helper
rng = np.random.default_rng(0)
w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
x[0, 3, 4, 5] = np.nan
x[0, 7, 1, 1] = np.inf
g = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
     helper.make_node("MatMul", ["c", "m"], ["y"])], "g",
    [helper.make_tensor_value_info("x", 1, [1, 16, 20, 20])],
    [helper.make_tensor_value_info("y", 1, None)],
    [numpy_helper.from_array(w, "w"),
     numpy_helper.from_array(rng.standard_normal((20, 64)).astype(np.float32), "m")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
so = ort.SessionOptions()
so.intra_op_num_threads = 1
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
np.save(sys.argv[1], s.run(None, {"x": x})[0])
"""


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_levels_follow_our_build() -> None:
    assert ort_isa.level_for("x86-64-v3") == "avx2"
    assert ort_isa.level_for("x86-64-v2") == "sse4"
    assert ort_isa.level_for("native") is None and ort_isa.level_for(None) is None
    assert ort_isa.level_for("x86-64-v4") is None
    assert ort_isa.preload_env(None, Path("."), "gcc") == {}


def test_no_cpuid_faulting_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ort_isa, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(ort_isa.platform, "system", lambda: "Linux")
    monkeypatch.setattr(ort_isa.platform, "machine", lambda: "x86_64")
    with pytest.raises(Onnx2EdgeError, match="cannot make CPUID fault"):
        ort_isa.preload_env("avx2", tmp_path, "gcc")


def test_bad_ort_isa_value_refused(example: Path) -> None:
    with pytest.raises(Onnx2EdgeError, match="--ort-isa must be host or match"):
        bench_model(example, runs=1, ort_isa="avx2")


@needs_fault
@pytest.mark.parametrize("level", ["avx2", "sse4"])
def test_shim_hides_levels_and_onnxruntime_agrees(level: str, tmp_path: Path) -> None:
    env = ort_isa.preload_env(level, tmp_path, "gcc")
    host = [int(f in FLAGS) for f in ("avx512f", "avx2", "fma", "sse4_2")]
    seen = [int(v) for v in _run(FEATURES, env).stdout.split()]
    if level == "avx2":
        assert seen == [0, *host[1:]], seen
    else:
        assert seen == [0, 0, 0, host[3]], seen
    plain, held = tmp_path / "plain.npy", tmp_path / "held.npy"
    for out, e in ((plain, {}), (held, env)):
        p = _run(ORT_RUN, e, str(out))
        assert p.returncode == 0, p.stderr[-2000:]
    a, b = np.load(plain), np.load(held)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    ok = np.isfinite(a)
    np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
    np.testing.assert_allclose(b[ok], a[ok], rtol=1e-4, atol=1e-4 * np.abs(a[ok]).max())


@needs_fault
def test_real_fault_still_kills_the_process(tmp_path: Path) -> None:
    env = ort_isa.preload_env("avx2", tmp_path, "gcc")
    p = _run("import ctypes; ctypes.string_at(0)", env)
    assert p.returncode == -11, (p.returncode, p.stderr[-500:])


@needs_fault
def test_bench_match_records_the_level(example: Path, tmp_path: Path) -> None:
    r = bench_model(example, runs=2, warmup=1, work_dir=tmp_path, arch="x86-64-v3", ort_isa="match")
    assert r["ort_isa"] == ort_isa.DESCRIPTION["avx2"] and r["accurate"]
    r = bench_model(example, runs=2, warmup=1, work_dir=tmp_path / "n", ort_isa="match")
    assert r["ort_isa"] == "host"
