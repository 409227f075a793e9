"""A MatMul's constant B packed at conversion (gemm_pack.pack_b, o2e_gemm.h's
o2e_sgemm_bpacked): the layout against its definition, and the generated C against
onnxruntime at every ISA the C backend emits (aarch64 under qemu).

The layout is one for every ISA (48-column strips, a multiple of each kernel's NR: 48 at
AVX-512, 24 at AVX2, 12 at NEON, 8 portable), so _model's cases give each kernel partial
strips: N = 90 (tails 42 / 18 / 6 / 2 at NR 48 / 24 / 12 / 8) and N = 40 (one strip, zero
padded) and N = 576 (whole strips; 3 threads split them by columns); K across K slices (M 45, K 600: five of 120 at AVX-512, four of 150 at AVX2; M 140, K 300: two of 150) and within one, K = 240 (one slice at AVX-512, two at AVX2); M not a
multiple of the 8-row panels (45, 37), few panels (M = 24: the path that reads B in place
otherwise), a batch folded into M, a bias, a residual Add, a fused Relu, and NaN / Inf in A.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.gemm_pack import PB, pack_b, packed_b_size
from onnx2edge.backends.c.kernels.gemm.gemm import packs_b
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ASAN, make_model, save, tensor, vi

PACKED = "MatMul: sgemm, B packed"


def test_pack_b_layout() -> None:
    b = np.arange(5 * 100, dtype=np.float32).reshape(5, 100)
    p = pack_b(b)
    assert p.size == packed_b_size(5, 100) == 3 * PB * 5
    strips = p.reshape(3, 5, PB)
    for q in range(3):
        for k in range(5):
            cols = b[k, q * PB : (q + 1) * PB]
            assert np.array_equal(strips[q, k, : cols.size], cols)
            assert not strips[q, k, cols.size :].any()  # zeros past N


def test_packs_b_choice() -> None:
    assert packs_b(197, 768) and packs_b(2, 40)
    assert not packs_b(1, 768)  # one row: the GEMV paths
    assert not packs_b(64, 12)  # AVX-512's small-N path
    assert not packs_b(64, 100)  # 44 padding columns: more than a quarter of N


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], int]:
    rng = np.random.default_rng(35)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    # name: (A's shape, N, bias, residual, Relu)
    cases = {
        "a": ((1, 45, 600), 90, True, True, True),  # three / four K slices, part panel
        "b": ((2, 12, 64), 90, True, False, False),  # batch folded: M = 24 (3 panels)
        "c": ((37, 130), 40, False, True, False),  # one zero-padded strip
        "d": ((1, 37, 96), 576, True, False, True),  # whole strips, split by columns
        # K between O2E_GEMM_KC_BPK (192) and KC (256 at AVX-512: one slice, the workspace
        # has no partial-sum tile there; two of 120 at AVX2, whose KC is 160)
        "e": ((1, 21, 240), 48, True, True, False),
        # more than 128 rows and K > KC: 192-row slices at AVX-512 (at most 128 rows, as "a":
        # O2E_GEMM_KC_BPK_FEW's 128)
        "f": ((1, 140, 300), 48, True, True, False),
    }
    for name, (ash, n, has_b, res, relu) in cases.items():
        k = ash[-1]
        a = rng.standard_normal(ash).astype(np.float32)
        if name in "ac":
            a.reshape(-1, k)[3, 5], a.reshape(-1, k)[7, 0], a.reshape(-1, k)[-1, -1] = (
                np.nan,
                np.inf,
                -np.inf,
            )
        feeds[f"a{name}"] = a
        ins.append(vi(f"a{name}", list(ash)))
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        yshape = [*ash[:-1], n]
        nodes.append(helper.make_node("MatMul", [f"a{name}", f"w{name}"], [f"m{name}"]))
        cur = f"m{name}"
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(n).astype(np.float32)))
            nodes.append(helper.make_node("Add", [cur, f"b{name}"], [f"p{name}"]))
            cur = f"p{name}"
        if res:
            feeds[f"r{name}"] = rng.standard_normal(yshape).astype(np.float32)
            ins.append(vi(f"r{name}", yshape))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(helper.make_node("Relu" if relu else "Identity", [cur], [f"y{name}"]))
        outs.append(vi(f"y{name}", yshape))
    path = save(make_model(nodes, ins, outs, inits), tmp_path / "pb.onnx")
    return path, feeds, len(cases)


def _check(got: dict[str, np.ndarray], path: Path, feeds: dict[str, np.ndarray]) -> None:
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
    for k in ("ya", "yc"):  # NaN / Inf propagate through the packed-B product
        assert np.array_equal(np.isnan(got[k]), np.isnan(ref[k])) and np.isnan(got[k]).any()
        assert np.array_equal(np.isinf(got[k]), np.isinf(ref[k]))


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_packed_b_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds, n = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(PACKED) == n, kernels
    _check(api.run(tmp_path / "out", feeds, options={"arch": arch}), path, feeds)


@pytest.mark.parametrize("march", ["native", "x86-64-v3"])
def test_packed_b_threads_and_bounds(tmp_path: Path, march: str) -> None:
    """Split across 3 threads (column ranges of NR strips inside the 48-column ones), under
    ASan / UBSan: the kernels read only the packed strips' rows and columns."""
    from onnx2edge.backends.c.build import build_executable, run_executable

    out = tmp_path / "out"
    path, feeds, _ = _model(tmp_path)
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    flags = [f"-march={march}", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    _check(run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path), path, feeds)
