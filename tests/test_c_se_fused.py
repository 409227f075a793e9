"""Squeeze-and-excitation's global pool written by the depthwise layer (issue 34 item 2).

kernels/conv/se_pool.py: a GlobalAveragePool reading a depthwise layer's output gets its means
from the depthwise kernel's closing pass (after the activation it applies there, or the one
applied in registers), and the pool node emits nothing. Blocks as EfficientNet (SiLU, Sigmoid
gate) and MobileNetV3 (HardSwish, Relu, HardSigmoid gate) export them, through both depthwise
kernels (rows: 20x20 maps; planes: 7x7), NaN / +-Inf inputs, every ISA, against onnxruntime;
a pool whose output is a graph output keeps its own kernel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi

C, R = 32, 8  # channels, squeeze width


def _se_block(
    p: str, x: str, k: int, stride: int, act: str, gate: str, rng: np.random.Generator
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """depthwise k x k + act -> GAP -> FC -> act -> FC -> gate -> Mul: the block's output."""
    inits = [
        tensor(f"{p}_w", rng.standard_normal((C, 1, k, k)).astype(np.float32) * 0.3),
        tensor(f"{p}_b", rng.standard_normal(C).astype(np.float32) * 0.1),
        tensor(f"{p}_w1", rng.standard_normal((R, C, 1, 1)).astype(np.float32) * 0.3),
        tensor(f"{p}_b1", rng.standard_normal(R).astype(np.float32) * 0.1),
        tensor(f"{p}_w2", rng.standard_normal((C, R, 1, 1)).astype(np.float32) * 0.3),
        tensor(f"{p}_b2", rng.standard_normal(C).astype(np.float32) * 0.1),
    ]
    dw = helper.make_node(
        "Conv",
        [x, f"{p}_w", f"{p}_b"],
        [f"{p}_c"],
        group=C,
        kernel_shape=[k, k],
        pads=[k // 2] * 4,
        strides=[stride] * 2,
    )
    nodes = [dw]
    if act == "SiLU":  # as torch exports it
        nodes += [
            helper.make_node("Sigmoid", [f"{p}_c"], [f"{p}_s"]),
            helper.make_node("Mul", [f"{p}_c", f"{p}_s"], [f"{p}_a"]),
        ]
    else:
        nodes.append(helper.make_node(act, [f"{p}_c"], [f"{p}_a"]))
    sq_act = "Relu" if gate == "HardSigmoid" else "SiLU"
    nodes += [
        helper.make_node("GlobalAveragePool", [f"{p}_a"], [f"{p}_g"]),
        helper.make_node("Conv", [f"{p}_g", f"{p}_w1", f"{p}_b1"], [f"{p}_f1"]),
    ]
    if sq_act == "SiLU":
        nodes += [
            helper.make_node("Sigmoid", [f"{p}_f1"], [f"{p}_f1s"]),
            helper.make_node("Mul", [f"{p}_f1", f"{p}_f1s"], [f"{p}_r"]),
        ]
    else:
        nodes.append(helper.make_node("Relu", [f"{p}_f1"], [f"{p}_r"]))
    nodes += [
        helper.make_node("Conv", [f"{p}_r", f"{p}_w2", f"{p}_b2"], [f"{p}_f2"]),
        helper.make_node(gate, [f"{p}_f2"], [f"{p}_gate"]),
        helper.make_node("Mul", [f"{p}_a", f"{p}_gate"], [f"{p}_y"]),
    ]
    return nodes, inits, f"{p}_y"


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(34)
    nodes, inits = [], []
    # EfficientNet: SiLU (the kernel's closing pass), Sigmoid gate; 20x20 -> the rows kernel
    n, i, a = _se_block("eff", "x", 3, 1, "SiLU", "Sigmoid", rng)
    nodes, inits = nodes + n, inits + i
    # MobileNetV3: HardSwish in registers (the closing pass only sums), stride 2 -> 10x10
    n, i, b = _se_block("mnv3", a, 5, 2, "HardSwish", "HardSigmoid", rng)
    nodes, inits = nodes + n, inits + i
    # Relu on 10x10 -> 5x5 (planes kernel), then a pool that is a graph output (not fused)
    n, i, c = _se_block("relu", b, 3, 2, "Relu", "HardSigmoid", rng)
    nodes, inits = nodes + n, inits + i
    inits.append(tensor("last_w", rng.standard_normal((C, 1, 3, 3)).astype(np.float32)))
    nodes += [
        helper.make_node(
            "Conv", [c, "last_w"], ["last"], group=C, kernel_shape=[3, 3], pads=[1] * 4
        ),
        helper.make_node("GlobalAveragePool", ["last"], ["pooled"]),
    ]
    x = rng.standard_normal((1, C, 20, 20)).astype(np.float32)
    x[0, 3, 4, 4] = np.nan
    x[0, 5, 10, 11] = np.inf
    x[0, 6, 0, 0] = -np.inf
    x[0, 7, :, :] = 80.0  # large values through the sigmoids
    outs = [vi("eff_y", [1, C, 20, 20]), vi(c, [1, C, 5, 5]), vi("pooled", [1, C, 1, 1])]
    path = save(make_model(nodes, [vi("x", [1, C, 20, 20])], outs, inits), tmp_path / "se.onnx")
    return path, {"x": x}


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_se_pool_in_depthwise_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    from onnx2edge.verify import compare

    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    kernels = json.loads((out / "onnx2edge.json").read_text())["stats"]["kernels"]
    # three SE pools fused (both depthwise kernels); the pool that is a graph output is not
    assert kernels.get("GlobalAveragePool: means written by the depthwise layer") == 3, kernels
    assert kernels.get("GlobalAveragePool: vectorised sum") == 1, kernels
    assert kernels.get("Conv: depthwise rows") and kernels.get("Conv: depthwise direct"), kernels
    code = (out / "model.c").read_text()
    # SiLU applied and summed in the closing pass; HardSwish / Relu in registers, then summed
    assert re.search(r"o2e_act_swish\w*_pool\(", code) and "o2e_planes_pool(" in code
    ref = ort_run(onnx.load(path), feeds)
    assert all(np.isnan(v).any() for v in ref.values())  # NaN reaches every output
    got = api.run(out, feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
