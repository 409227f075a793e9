"""The packed GEMM's C prefetch a strip ahead (runtime/o2e_gemm.h, o2e_pf_c_), taken by 1x1
convolutions on maps of >= 512 pixels (O2E_GEMM_PF_C_MINLD: 27x27 and larger): with a
residual (C and R prefetched) and without one (O2E_GEMM_PF_C_NORES: C only, R is NULL; at
AVX2 only for K <= 128).

Prefetches change no result; what is checked is that every path around them computes what
onnxruntime does at every ISA: M not a multiple of the 8-row panels (36, 40), a pixel count
that leaves a partial last strip (32x34 = 1088, 23x27 = 621), K across several K slices
(300 > KC), no bias, and NaN / Inf inputs propagating as onnxruntime's. Runs in ~30 s (aarch64
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

# output pixels (ldc) above the prefetch threshold, the last 48- / 24-column strip partial:
# 1088 (pages apart) and 621 (27x27-sized maps, between O2E_GEMM_PF_C_MINLD and a page)
MAPS = [(32, 34), (23, 27)]


def _model(tmp_path: Path, H: int = 32, W: int = 34) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    # name: (K, M, bias, residual, Relu)
    cases = {
        "a": (24, 40, True, False, True),  # no residual: C prefetched alone at AVX-512
        "b": (64, 36, True, True, True),  # residual: C and R
        "c": (300, 64, False, False, False),  # K slices: partial sums in C between slices
    }
    for name, (K, M, has_b, res, relu) in cases.items():
        x = rng.standard_normal((1, K, H, W)).astype(np.float32)
        x[0, 1, 2, 3], x[0, 2, H - 1, W - 1], x[0, K - 1, H // 2, 0] = np.nan, np.inf, -np.inf
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [1, K, H, W]))
        inits.append(tensor(f"w{name}", (rng.standard_normal((M, K, 1, 1)) / K).astype(np.float32)))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        nodes.append(helper.make_node("Conv", conv_in, [cur], kernel_shape=[1, 1]))
        if res:
            r = rng.standard_normal((1, M, H, W)).astype(np.float32)
            r[0, 5, 7, 9], r[0, M - 1, H - 1, W - 1] = np.nan, -np.inf
            feeds[f"r{name}"] = r
            ins.append(vi(f"r{name}", [1, M, H, W]))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(helper.make_node("Relu" if relu else "Identity", [cur], [f"y{name}"]))
        outs.append(vi(f"y{name}", [1, M, H, W]))
    return save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "pf.onnx"), feeds


@pytest.mark.parametrize("hw", MAPS)
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_prefetching_gemm_matches_onnxruntime(
    tmp_path: Path, arch: str, hw: tuple[int, int]
) -> None:
    path, feeds = _model(tmp_path, *hw)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get("Conv: 1x1 as GEMM") == 3, kernels  # every case on the packed GEMM
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    assert all(np.isnan(ref[k]).any() and np.isinf(ref[k]).any() for k in ref)  # edges reach y
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_prefetching_gemm_sanitized(tmp_path: Path) -> None:
    """ASan + UBSan at the host's widest ISA (finite inputs: the bounds, not the edges)."""
    path, _ = _model(tmp_path)
    assert_sanitized_run_matches_ort(path, tmp_path / "asan")
