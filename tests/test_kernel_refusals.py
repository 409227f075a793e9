"""One strategy framework for every op family with several kernels (backends/c/strategy.py,
issue 32 item 2): Conv, Gemm / MatMul, the windowed and global pools, QLinearConv. The first
strategy of a declared list that does not refuse a node writes it; every refusal before it is
recorded (stats.kernel_refusals, `convert --explain-kernels`), and each pool strategy is
checked against onnxruntime on a node it takes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.backend import kernel_settings
from onnx2edge.backends.c.ops import conv as conv_ops
from onnx2edge.backends.c.ops import matmul as matmul_ops
from onnx2edge.backends.c.ops import pool as pool_ops
from onnx2edge.backends.c.ops import quant as quant_ops
from onnx2edge.backends.c.strategy import AUTO, OFF, Strategy

from conftest import make_model, save, tensor, vi

LISTS = {
    "conv": conv_ops.STRATEGIES,
    "matmul": matmul_ops.STRATEGIES,
    "pool": pool_ops.STRATEGIES,
    "global_pool": pool_ops.GLOBAL_STRATEGIES,
    "qconv": quant_ops.QCONV_STRATEGIES,
}


@pytest.mark.parametrize("family", sorted(LISTS))
def test_every_family_is_a_strategy_list(family: str) -> None:
    """One class for all, unique names, and a last strategy that takes any node and cannot be
    switched off; every name is a `--kernels` switch."""
    strategies = LISTS[family]
    assert all(isinstance(s, Strategy) for s in strategies)
    names = [s.name for s in strategies]
    assert len(set(names)) == len(names)
    assert strategies[-1].settings == (AUTO,)
    assert set(names) <= set(kernel_settings())


def _pool_model(path: Path, op: str, k: int, *, dilation: int = 1, **attrs: object) -> Path:
    x = np.random.default_rng(5).standard_normal((1, 4, 12, 12)).astype(np.float32)
    a = {"kernel_shape": [k, k], **attrs}
    if dilation != 1:
        a["dilations"] = [dilation, dilation]
    span = dilation * (k - 1) + 1
    out = 12 - span + 1
    node = helper.make_node(op, ["x"], ["y"], name="pool", **a)
    m = make_model([node], [vi("x", x.shape)], [vi("y", (1, 4, out, out))], opset=18)
    return save(m, path)


POOLS = {
    # name -> (op, kernel, attributes), the strategy the list's order gives it
    "pool_rows": ("MaxPool", 3, {}),
    "pool_planes": ("MaxPool", 3, {"dilation": 2}),  # the rows take no dilation
    "pool_loop": ("LpPool", 3, {}),  # the 2-D kernels: MaxPool and AveragePool only
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_strategies_against_onnxruntime(tmp_path: Path, name: str) -> None:
    op, k, attrs = POOLS[name]
    path = _pool_model(tmp_path / "m.onnx", op, k, **attrs)
    res = api.convert(path, "c", tmp_path / "out")
    assert res.stats["layer_kernels"] == {"pool": name}
    before = [s.name for s in pool_ops.STRATEGIES][
        : [s.name for s in pool_ops.STRATEGIES].index(name)
    ]
    refused = res.stats["kernel_refusals"]["pool"]
    assert [n for n, _ in refused] == before
    assert all(isinstance(why, str) and why for _, why in refused)
    assert api.verify(path, target="c").ok


def test_switched_off_pool_strategy_is_recorded(tmp_path: Path) -> None:
    path = _pool_model(tmp_path / "m.onnx", "MaxPool", 3)
    res = api.convert(path, "c", tmp_path / "out", options={"kernels": f"pool_rows={OFF}"})
    assert res.stats["layer_kernels"] == {"pool": "pool_planes"}
    assert res.stats["kernel_refusals"]["pool"] == [["pool_rows", "--kernels pool_rows=off"]]
    assert api.verify(path, target="c", options={"kernels": "pool_rows=off"}).ok


def test_global_pool_strategies(tmp_path: Path) -> None:
    """GlobalAveragePool takes the vectorised sum, GlobalMaxPool the loop; both recorded."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["a"], name="gap"),
        helper.make_node("GlobalMaxPool", ["x"], ["m"], name="gmp"),
    ]
    m = make_model(
        nodes, [vi("x", (1, 3, 5, 7))], [vi("a", (1, 3, 1, 1)), vi("m", (1, 3, 1, 1))], opset=17
    )
    path = save(m, tmp_path / "g.onnx")
    res = api.convert(path, "c", tmp_path / "out")
    assert res.stats["layer_kernels"] == {"gap": "gap_sum", "gmp": "global_pool_loop"}
    gmp = dict(res.stats["kernel_refusals"]["gmp"])
    assert gmp["gap_sum"] == "GlobalMaxPool: GlobalAveragePool only"
    assert api.verify(path, target="c").ok


def _qconv_model(path: Path, group: int, wz: int = 0) -> Path:
    """A uint8 QLinearConv 3x3 with 4 channels in `group` groups (2: grouped, one int8 product
    per group). A weight zero point of -100 puts w - wz outside int8, which the int8 kernels'
    operands cannot hold: the reference loops run it."""
    rng = np.random.default_rng(9)
    w = rng.integers(-100, 100, (4, 4 // group, 3, 3)).astype(np.int8)
    inits = [
        tensor("xs", np.float32(0.05)),
        tensor("xz", np.uint8(128)),
        tensor("w", w),
        tensor("ws", np.float32(0.01)),
        tensor("wz", np.int8(wz)),
        tensor("ys", np.float32(0.2)),
        tensor("yz", np.uint8(128)),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
        ["y"],
        group=group,
        pads=[1, 1, 1, 1],
        name="qconv",
    )
    m = make_model(
        [node],
        [vi("x", (1, 4, 6, 6), TensorProto.UINT8)],
        [vi("y", (1, 4, 6, 6), TensorProto.UINT8)],
        inits,
        opset=13,
    )
    return save(m, path)


@pytest.mark.parametrize(
    ("group", "wz", "name"),
    [(1, 0, "int8_gemm"), (2, 0, "int8_gemm"), (1, -100, "qconv_reference")],
)
def test_qlinearconv_strategies(tmp_path: Path, group: int, wz: int, name: str) -> None:
    path = _qconv_model(tmp_path / "q.onnx", group, wz)
    res = api.convert(path, "c", tmp_path / "out")
    assert res.stats["layer_kernels"] == {"qconv": name}
    refused = res.stats["kernel_refusals"]["qconv"]
    assert [n for n, _ in refused] == ([] if name == "int8_gemm" else ["int8_gemm"])
    assert api.verify(path, target="c").ok


def test_explain_kernels_prints_each_refusal(tmp_path: Path) -> None:
    """`convert --explain-kernels`: per layer the chosen strategy, then every earlier one with
    its reason, as the manifest records them."""
    path = _pool_model(tmp_path / "m.onnx", "LpPool", 3)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "onnx2edge.cli", "convert", str(path), "--target", "c"]
    r = subprocess.run([*cmd, "-o", str(out), "--explain-kernels"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    stats = json.loads((out / "onnx2edge.json").read_text())["stats"]
    lines = r.stdout.splitlines()
    at = lines.index("pool: pool_loop")
    want = [f"  {n} refused: {why}" for n, why in stats["kernel_refusals"]["pool"]]
    assert len(want) == 2 and lines[at + 1 : at + 3] == want
    assert "LpPool: MaxPool and AveragePool only" in want[0]
