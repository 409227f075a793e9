"""The packed GEMM reading B in place (runtime/o2e_gemm.h, `direct`: at most 4 A panels, i.e.
1x1 convolutions with <= 32 output channels, SqueezeNet's squeeze1x1 layers) prefetches the
next strip's B lines from inside the AVX-512 kernel (O2E_GEMM_PF_DIRECT_K).

Prefetches change no result; what is checked is that the paths around them compute what
onnxruntime does at every ISA: 16 and 32 output channels (2 / 4 panels), 24 (3 panels), a
pixel count that leaves a partial last strip at every vector width (29x41 = 1189 = 24 x 48 +
37), K over two K slices (300 > KC), no bias, and NaN / Inf inputs. Runs in ~40 s (aarch64
under qemu the most).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, assert_sanitized_run_matches_ort, make_model, save, tensor, vi


def _model(tmp_path: Path, H: int, W: int) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    # name: (K, M, bias, Relu)
    cases = {"a": (96, 16, True, True), "b": (128, 32, False, True), "c": (300, 24, True, False)}
    for name, (K, M, has_b, relu) in cases.items():
        x = rng.standard_normal((1, K, H, W)).astype(np.float32)
        x[0, 1, 2, 3], x[0, 2, H - 1, W - 1], x[0, K - 1, H // 2, 0] = np.nan, np.inf, -np.inf
        x[0, 3, H - 1, W - 2] = np.nan  # in the last full strip / the partial one
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [1, K, H, W]))
        w = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        nodes.append(helper.make_node("Conv", conv_in, [f"c{name}"], kernel_shape=[1, 1]))
        nodes.append(helper.make_node("Relu" if relu else "Identity", [f"c{name}"], [f"y{name}"]))
        outs.append(vi(f"y{name}", [1, M, H, W]))
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "dpf.onnx"), feeds


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_direct_gemm_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path, 29, 41)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get("Conv: 1x1 as GEMM") == 3, kernels  # every case on the packed GEMM
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    assert all(np.isnan(ref[k]).any() and np.isinf(ref[k]).any() for k in ref)  # edges reach y
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_direct_gemm_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan at the host's widest ISA (finite inputs: the bounds, not the edges)."""
    path, _ = _model(tmp_path, 29, 41)
    assert_sanitized_run_matches_ort(path, tmp_path / "asan")
