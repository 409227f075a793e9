"""The packed GEMM's narrow last strip (o2e_gemm.h, O2E_GEMM_NARROW): at AVX-512 a last strip
of 1..4 columns (N = 289 = 6 x 48 + 1, 196 = 4 x 48 + 4) runs an 8-row x nr kernel instead of
the 16-wide one. Checked against onnxruntime at every ISA the C backend emits (the other ISAs
keep their kernels: the same model checks that nothing changed there).

The cases cover every tail width 1..4 (N = 145, 146, 147, 196, 289), K not a multiple of the
kernel's 4-step unroll and across K slices (301, 514, 600: partial sums through the scratch
tile before a fused activation), M not a multiple of the 8-row panels (33, 45) and few panels
(M = 24: B read in place, only the last strip packed), no bias, residual Adds (one into the
conv's own buffer), fused Relu / Clip / LeakyRelu, and NaN / Inf inputs.
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

from conftest import ALL_ISAS, ASAN, make_model, save, tensor, vi
from conv_models import act_inits, act_node

GEMM = "Conv: 1x1 as GEMM"


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], int]:
    rng = np.random.default_rng(29)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    # name: (K, M, H, W, bias, residual, activation); N = H * W
    cases = {
        "a": (301, 33, 5, 29, True, False, "Relu"),  # N = 145: tail 1, K % 4 = 1
        "b": (514, 45, 2, 73, False, True, "Clip"),  # 146: tail 2, two K slices
        "c": (600, 40, 7, 21, True, True, "Relu"),  # 147: tail 3, three K slices
        "d": (512, 24, 14, 14, True, False, None),  # 196: tail 4, 3 panels (B in place)
        "e": (768, 64, 17, 17, True, False, "LeakyRelu"),  # 289: Inception-v3 Mixed_6e shape
        "f": (130, 17, 17, 17, False, False, None),  # one K slice, K % 4 = 2
    }
    for name, (K, M, H, W, has_b, res, act) in cases.items():
        x = rng.standard_normal((1, K, H, W)).astype(np.float32)
        if name in "ae":  # NaN / Inf in the last column (the narrow strip) and elsewhere
            x[0, 3, H - 1, W - 1], x[0, 7, 0, 1], x[0, 9, H - 1, W - 1] = np.nan, np.inf, -np.inf
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [1, K, H, W]))
        w = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        nodes.append(helper.make_node("Conv", conv_in, [cur], kernel_shape=[1, 1]))
        if res:  # an intermediate used once: the output may take its buffer
            feeds[f"r{name}"] = rng.standard_normal((1, M, H, W)).astype(np.float32)
            ins.append(vi(f"r{name}", [1, M, H, W]))
            nodes.append(helper.make_node("Neg", [f"r{name}"], [f"n{name}"]))
            nodes.append(helper.make_node("Add", [cur, f"n{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(act_node(act, cur, f"y{name}"))
        outs.append(vi(f"y{name}", [1, M, H, W]))
    inits += act_inits()
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "nt.onnx")
    return path, feeds, len(cases)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_narrow_last_strip_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds, n = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(GEMM) == n, kernels  # every case is a packed GEMM (at AVX-512)
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
    for k in ("ya", "ye"):  # NaN / Inf propagate as in onnxruntime (Relu keeps NaN)
        assert np.array_equal(np.isnan(got[k]), np.isnan(ref[k])) and np.isnan(got[k]).any()
        assert np.array_equal(np.isinf(got[k]), np.isinf(ref[k]))


def test_narrow_last_strip_threads_and_bounds(tmp_path: Path) -> None:
    """AVX-512 split across 3 threads (N ranges of a thread end in narrow strips too), under
    ASan / UBSan: the kernel reads only its nr columns of the padded strip and kc rows of A."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable

    path, feeds, _ = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
