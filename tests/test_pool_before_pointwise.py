"""passes/pool_before_pointwise.py: a 1x1 Conv followed by an unpadded AveragePool runs the pool
first (DenseNet's transitions). Which graphs are rewritten (and which are left alone: padded or
ceil-mode pools, 3x3 or strided convolutions, a conv output read twice), and the generated C
against onnxruntime at every ISA (aarch64 under qemu), NaN / Inf included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge import api
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.passes import run_passes
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, build_and_run

N = helper.make_node


def _model(
    conv: dict | None = None,
    pool: dict | None = None,
    *,
    bias: bool = True,
    group: int = 1,
    kernel: int = 1,
    extra_reader: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    cin, cout = 8, 6 if group == 1 else 8
    w = rng.standard_normal((cout, cin // group, kernel, kernel)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        ins.append("b")
    nodes = [
        N("Conv", ins, ["t"], name="conv", group=group, **(conv or {})),
        N(
            "AveragePool",
            ["t"],
            ["y"],
            name="pool",
            **({"kernel_shape": [2, 2], "strides": [2, 2]} | (pool or {})),
        ),
    ]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(N("Neg", ["t"], ["z"], name="neg"))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 10, 12])
    m = helper.make_model(
        helper.make_graph(nodes, "pool_first", [x], outs, inits),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


# case -> (model, rewritten)
CASES = {
    "transition": (_model(bias=False), True),
    "with_bias": (_model(), True),
    "grouped": (_model(group=2), True),
    "pool_3x3_s2": (_model(pool={"kernel_shape": [3, 3], "strides": [2, 2]}), True),
    "count_exclude_pad": (_model(pool={"count_include_pad": 0}), True),
    "padded_pool": (_model(pool={"pads": [1, 1, 1, 1]}), False),
    "ceil_mode": (_model(pool={"kernel_shape": [3, 3], "ceil_mode": 1}), False),
    "same_size_pool": (_model(pool={"kernel_shape": [1, 1], "strides": [1, 1]}), False),
    "conv_3x3": (_model(kernel=3, conv={"pads": [1, 1, 1, 1]}), False),
    "strided_conv": (_model(conv={"strides": [2, 2]}), False),
    "conv_read_twice": (_model(extra_reader=True), False),
}


def _ops(m: onnx.ModelProto) -> list[str]:
    g = run_passes(graph_from_model(m), ["fold_constants", "pool_before_pointwise"])
    return [n.op_type for n in g.nodes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_graphs_are_rewritten(case: str) -> None:
    model, rewritten = CASES[case]
    ops = _ops(model)
    assert ops[:2] == (["AveragePool", "Conv"] if rewritten else ["Conv", "AveragePool"])


def _inputs(special: bool) -> dict[str, np.ndarray]:
    x = np.random.default_rng(7).standard_normal((1, 8, 10, 12)).astype(np.float32)
    if special:
        x.reshape(-1)[[0, 13, 50, 200]] = [np.nan, np.inf, -np.inf, np.nan]
    return {"x": x}


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", ["transition", "with_bias", "grouped", "pool_3x3_s2"])
def test_matches_onnxruntime(tmp_path: Path, case: str, arch: str) -> None:
    model, _ = CASES[case]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    api.convert(path, "c", tmp_path / "out")
    for special in (False, True):
        x = _inputs(special)
        got = build_and_run(tmp_path / "out", arch, x)["y"]
        ref = ort_run(model, x)["y"]
        # the same sums in another order: rounding apart, NaN / Inf where onnxruntime has them
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
