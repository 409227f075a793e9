"""The GEMM's lean epilogue (runtime/o2e_gemm.h, O2E_LEAN_LOCALS_: full tiles on their last K
slice store act(acc + bias + residual) straight from the registers, issue 9) on 1x1
convolutions with few input channels, at every ISA the C backend emits (x86-64-v2,
x86-64-v3, native, aarch64 under qemu).

Each layer runs through the GEMM with K = 16 / 24 / 32 input channels, M = 40 outputs (full
8-row panels), 13 x 15 = 195 pixels (full 48 / 24 / 12-wide strips and a partial one, which
keeps the generic epilogue), with and without bias, with a residual, and with every activation
the epilogue applies (none, Relu, Clip, LeakyRelu); the input carries NaN and +-Inf.
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

from conftest import ALL_ISAS, make_model, save, tensor, vi

H, W, M = 13, 15, 40
ACTS = [
    (None, {}, []),
    ("Relu", {}, []),
    ("Clip", {}, ["zero", "six"]),
    ("LeakyRelu", {"alpha": 0.1}, []),
]


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    nodes, ins, outs, feeds = [], [], [], {}
    inits = [tensor("zero", np.array(0, np.float32)), tensor("six", np.array(6, np.float32))]
    for K in (16, 24, 32):
        x = rng.standard_normal((1, K, H, W)).astype(np.float32)
        x.reshape(-1)[[3, 50, 400]] = [np.nan, np.inf, -np.inf]
        feeds[f"x{K}"] = x
        ins.append(vi(f"x{K}", [1, K, H, W]))
        for i, (op, kw, extra) in enumerate(ACTS):
            for bias in (True, False):
                for res in (False, True):
                    name = f"{K}_{i}_{int(bias)}_{int(res)}"
                    w = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
                    inits.append(tensor(f"w{name}", w))
                    conv_in = [f"x{K}", f"w{name}"]
                    if bias:
                        b = rng.standard_normal(M).astype(np.float32)
                        inits.append(tensor(f"b{name}", b))
                        conv_in.append(f"b{name}")
                    cur = f"c{name}"
                    nodes.append(helper.make_node("Conv", conv_in, [cur]))
                    if res:  # an arena residual: another conv's output (in place, too)
                        r = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
                        inits.append(tensor(f"rw{name}", r))
                        nodes.append(helper.make_node("Conv", [f"x{K}", f"rw{name}"], [f"r{name}"]))
                        nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
                        cur = f"s{name}"
                    nodes.append(
                        helper.make_node(op or "Identity", [cur, *extra], [f"y{name}"], **kw)
                    )
                    outs.append(vi(f"y{name}", [1, M, H, W]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "lean.onnx")
    return path, feeds


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_small_k_gemm_epilogue_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels["Conv: 1x1 as GEMM"] == 3 * 4 * 2 * 3, kernels  # every conv on the GEMM
    ref = ort_run(onnx.load(path), feeds)
    assert any(np.isnan(v).any() for v in ref.values())  # non-finite values reach the outputs
    assert any(np.isinf(v).any() for v in ref.values())
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
