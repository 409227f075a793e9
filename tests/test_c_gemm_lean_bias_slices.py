"""The GEMM's lean epilogue with a column bias and K slices (runtime/o2e_gemm.h: full tiles on
their last K slice store act(acc + partial sums + bias_n + R) straight from the registers), as
a transformer's MatMul + bias [+ residual] [+ activation] runs it on a B packed at conversion,
at every ISA the C backend emits (x86-64-v2, x86-64-v3, native, aarch64 under qemu).

M = 29 rows (three full 8-row panels and a 5-row tail, which keeps the generic epilogue),
N = 116 (full strips at every vector width and a partial one), K = 64 (one slice) and
K = 600 (several slices at every ISA: the partial sums enter the last slice's epilogue);
with and without a residual (one the product overwrites in place), with no activation, Relu and the erf form of GELU; the input
carries NaN and +-Inf.
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

from conftest import ALL_ISAS, erf_gelu, make_model, save, tensor, vi

M, N = 29, 116


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(34)
    nodes, ins, outs, feeds = [], [], [], {}
    inits = [
        tensor("sqrt2", np.array(np.sqrt(2), np.float32)),
        tensor("one", np.array(1, np.float32)),
        tensor("half", np.array(0.5, np.float32)),
    ]
    r = rng.standard_normal((1, M, N)).astype(np.float32)
    feeds["r"] = r
    ins.append(vi("r", [1, M, N]))
    for K in (64, 600):
        x = rng.standard_normal((1, M, K)).astype(np.float32)
        x.reshape(-1)[[3, 50, 400]] = [np.nan, np.inf, -np.inf]
        feeds[f"x{K}"] = x
        ins.append(vi(f"x{K}", [1, M, K]))
        for act in ("none", "relu", "gelu"):
            for res in (False, True):
                name = f"{K}_{act}_{int(res)}"
                w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
                b = rng.standard_normal(N).astype(np.float32)
                inits += [tensor(f"w{name}", w), tensor(f"b{name}", b)]
                nodes.append(helper.make_node("MatMul", [f"x{K}", f"w{name}"], [f"m{name}"]))
                nodes.append(helper.make_node("Add", [f"m{name}", f"b{name}"], [f"a{name}"]))
                cur = f"a{name}"
                if res:  # an arena residual used once: written in place (the T path)
                    nodes.append(helper.make_node("Neg", ["r"], [f"n{name}"]))
                    nodes.append(helper.make_node("Add", [cur, f"n{name}"], [f"s{name}"]))
                    cur = f"s{name}"
                if act == "relu":
                    nodes.append(helper.make_node("Relu", [cur], [f"u{name}"]))
                    cur = f"u{name}"
                elif act == "gelu":
                    nodes += erf_gelu(cur, f"{name}_g", name)
                    cur = f"{name}_g"
                nodes.append(helper.make_node("Identity", [cur], [f"y{name}"]))
                outs.append(vi(f"y{name}", [1, M, N]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "lean_bias.onnx")
    return path, feeds


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_bias_and_k_slices_lean_epilogue_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get("MatMul: sgemm, B packed") == 12, kernels  # every product fused, packed
    ref = ort_run(onnx.load(path), feeds)
    assert any(np.isnan(v).any() for v in ref.values())  # non-finite values reach the outputs
    assert any(np.isinf(v).any() for v in ref.values())
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
