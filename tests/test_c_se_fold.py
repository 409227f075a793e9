"""An SE gate x * s on an NCHW map folded into the 1x1 layer reading its product (issue 34,
kernels/conv/se_fold.py: the layer scales its weights by s, the Mul emits nothing), against
onnxruntime at every ISA the C backend emits (aarch64 under qemu included), NaN / Inf in the
input included; and the gates it must leave alone.

One model, batch 1, 24 channels (not whole blocks of 16, so no channel-blocked chain takes
it), EfficientNet's shape: depthwise 3x3 SiLU, SE (GlobalAveragePool, 1x1 SiLU, 1x1 Sigmoid),
the gate x * s projected by a 1x1 layer with a bias and a residual; a second gate written
Mul(s, x) folded too; a third whose product two layers read (not folded), and a gate read by
a 3x3 layer (not folded).
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

C, HW = 24, 28


def _model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, y: str, c: int, m: int, k: int = 1, group: int = 1) -> str:
        w = rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)
        inits.append(tensor(f"w_{y}", w.astype(np.float32)))
        inits.append(tensor(f"b_{y}", rng.standard_normal(m).astype(np.float32) * 0.1))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"w_{y}", f"b_{y}"],
                [y],
                kernel_shape=[k, k],
                pads=[k // 2] * 4,
                group=group,
                name=y,
            )
        )
        return y

    def silu(x: str) -> str:
        nodes.append(helper.make_node("Sigmoid", [x], [f"{x}_sig"]))
        nodes.append(helper.make_node("Mul", [x, f"{x}_sig"], [f"{x}_silu"]))
        return f"{x}_silu"

    def se(x: str, name: str, swap: bool = False) -> str:
        nodes.append(helper.make_node("GlobalAveragePool", [x], [f"{name}_gap"]))
        s = conv(silu(conv(f"{name}_gap", f"{name}_fc1", C, 8)), f"{name}_fc2", 8, C)
        nodes.append(helper.make_node("Sigmoid", [s], [f"{name}_s"]))
        ins = [f"{name}_s", x] if swap else [x, f"{name}_s"]
        nodes.append(helper.make_node("Mul", ins, [f"{name}_mul"], name=f"{name}_mul"))
        return f"{name}_mul"

    d = silu(conv("x", "a_dw", C, C, 3, C))
    p = conv(se(d, "a"), "a_proj", C, C)
    nodes.append(helper.make_node("Add", [p, "x"], ["a_out"]))
    d2 = silu(conv("a_out", "b_dw", C, C, 3, C))
    conv(se(d2, "b", swap=True), "y_b", C, 40)
    m = se(d2, "c")  # read by two layers: stays a pass of its own
    conv(m, "y_c1", C, 16)
    conv(m, "y_c2", C, 16)
    conv(se(d2, "d"), "y_d", C, 16, 3)  # a 3x3 layer: not folded
    outs = [
        vi("y_b", [1, 40, HW, HW]),
        vi("y_c1", [1, 16, HW, HW]),
        vi("y_c2", [1, 16, HW, HW]),
        vi("y_d", [1, 16, HW, HW]),
    ]
    model = make_model(nodes, [vi("x", [1, C, HW, HW])], outs, inits, opset=17)
    x = rng.standard_normal((1, C, HW, HW)).astype(np.float32)
    return save(model, tmp / "se_fold.onnx"), {"x": x}


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path, dict]:
    tmp = tmp_path_factory.mktemp("se_fold")
    path, feeds = _model(tmp)
    out = tmp / "out"
    return path, feeds, out, api.convert(path, "c", out).stats


def test_gates_folded_where_one_1x1_layer_reads_them(block: tuple) -> None:
    kernels = block[3]["kernels"]
    assert kernels["Mul: SE gate folded into the 1x1 layer's weights"] == 2, kernels
    assert kernels["Conv: SE gate folded into the 1x1 layer's weights"] == 2, kernels
    code = (block[2] / "model.c").read_text()
    # the two gates left alone are loops over the whole map (C x H x W products)
    assert code.count(f"i1 < {HW * HW}; ++i1)") == 2, code.count(f"i1 < {HW * HW}")


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_folded_gates_match_onnxruntime(block: tuple, arch: str) -> None:
    path, feeds, out, _ = block
    x = feeds["x"].copy()
    x[0, 3, 5, 7], x[0, 9, 0, 0], x[0, 17, 27, 27] = np.nan, np.inf, -np.inf  # through the gate
    for f in (feeds, {"x": x}):
        _check(api.run(out, f, options={"arch": arch}), ort_run(onnx.load(path), f))


def test_per_layer_verify_skips_the_folded_gates_product(block: tuple) -> None:
    """`verify --per-layer` traces every tensor the C writes; a folded gate's product is never
    written (its arena bytes are whatever was there), so it is not traced, and every tensor
    that is compared matches (it had compared those stale bytes)."""
    path, feeds = block[0], block[1]
    rep = api.verify(path, target="c", per_layer=True, inputs=feeds)
    compared = {r.name for r in rep.layers}
    assert not {"a_mul", "b_mul"} & compared, sorted(compared)
    assert {"c_mul", "d_mul", "a_out", "b_s"} <= compared
    assert all(r.ok for r in rep.layers), [(r.name, r.max_abs) for r in rep.layers if not r.ok]
    assert rep.ok
