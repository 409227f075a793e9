"""The packed GEMM's narrow last strip (o2e_gemm.h, O2E_GEMM_NARROW): a last strip of 1..4
columns runs an 8-row x nr kernel (the 8 packed A rows of one k in the lanes, each column's B
value broadcast) instead of the full-width one: at AVX-512 (48-column strips: N = 289 =
6 x 48 + 1, 196 = 4 x 48 + 4) and at AVX2 (24-column strips: 169 = 7 x 24 + 1, 196, 289).
NEON (12-column strips) and portable C keep their kernels. Checked against onnxruntime at
every ISA the C backend emits.

_model covers every tail width 1..4 (N = 145, 146, 147, 196, 289 leave the same tail at 48,
24 and 12 columns), K not a multiple of the kernel's k-chains and across K slices (301, 514,
600: partial sums through the scratch tile before a fused activation), M not a multiple of the
8-row panels (33, 45) and few panels (M = 24: B read in place, only the last strip packed), no
bias, residual Adds (one into the conv's own buffer), fused Relu / Clip / LeakyRelu, and NaN /
Inf inputs. _sweep gives every leftover width 1..23 of a 24-column strip (1..11 of a 12-column
one) with small K, so the narrow kernel and the full-width edge tiles meet every tail.
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


@pytest.mark.parametrize("march", ["native", "x86-64-v3"])
def test_narrow_last_strip_threads_and_bounds(tmp_path: Path, march: str) -> None:
    """AVX-512 (native here) and AVX2 split across 3 threads (N ranges of a thread end in
    narrow strips too), under ASan / UBSan: the kernel reads only its nr columns of the padded
    strip and kc rows of A."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable

    out = tmp_path / "out"
    path, feeds, _ = (_model if march == "native" else _sweep)(tmp_path)
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = [f"-march={march}", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def _sweep(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], int]:
    """One 1x1 layer per leftover width t = 1..23 of a 24-column strip: N = 72 + t pixels,
    K = 30 + 9 t (two K slices from t = 15 at AVX2's KC = 160), M = 20 or 41 (a part panel),
    activations and residuals in turn, NaN / Inf in the last column of some."""
    rng = np.random.default_rng(31)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    acts = [None, "Relu", "Clip", "LeakyRelu"]
    for t in range(1, 24):
        N, K, M = 72 + t, 30 + 9 * t, 41 if t % 2 else 20
        x = rng.standard_normal((1, K, 1, N)).astype(np.float32)
        if t % 5 == 1:
            x[0, 2, 0, N - 1], x[0, 5, 0, N - 2], x[0, 6, 0, 0] = np.nan, np.inf, -np.inf
        feeds[f"x{t}"] = x
        ins.append(vi(f"x{t}", [1, K, 1, N]))
        inits.append(tensor(f"w{t}", (rng.standard_normal((M, K, 1, 1)) / 4).astype(np.float32)))
        inits.append(tensor(f"b{t}", rng.standard_normal(M).astype(np.float32)))
        cur = f"c{t}"
        nodes.append(helper.make_node("Conv", [f"x{t}", f"w{t}", f"b{t}"], [cur]))
        if t % 3 == 0:
            feeds[f"r{t}"] = rng.standard_normal((1, M, 1, N)).astype(np.float32)
            ins.append(vi(f"r{t}", [1, M, 1, N]))
            nodes.append(helper.make_node("Add", [cur, f"r{t}"], [f"s{t}"]))
            cur = f"s{t}"
        nodes.append(act_node(acts[t % 4], cur, f"y{t}"))
        outs.append(vi(f"y{t}", [1, M, 1, N]))
    inits += act_inits()
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "sw.onnx")
    return path, feeds, 23


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_every_strip_tail_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds, n = _sweep(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(GEMM) == n, kernels
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
    for t in (1, 6, 11, 16, 21):  # NaN / Inf where onnxruntime has them
        k = f"y{t}"
        assert np.array_equal(np.isnan(got[k]), np.isnan(ref[k])) and np.isnan(got[k]).any()
        assert np.array_equal(np.isinf(got[k]), np.isinf(ref[k]))
