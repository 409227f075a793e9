"""int8 average pooling (issue 31 item 3): DQ -> AveragePool / GlobalAveragePool -> Q, and
com.microsoft QLinearAveragePool / QLinearGlobalAveragePool (lowered by passes/lower_contrib
to the same pattern), become o2e QAveragePool / QGlobalAveragePool (passes/qdq_int8) and run
on the bytes in onnxruntime's arithmetic (ops/qint8.qavgpool): the integer sum of
QLinearGlobalAveragePool where the window is the whole image without padding, else the float
sum of the dequantized bytes (QDQ MaxPool: o2e QMaxPool, already on the bytes). Checked bit
for bit against onnxruntime (which fuses the QDQ pattern into those ops) over random scales,
zero points and geometries, int8 and uint8, on x86 and on a Cortex-M4 board under
qemu-system-arm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c import mcu
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, save
from conftest import build_and_run as build_at

# (op, attributes, input shape): global (by op and by a whole-image window), windows with
# and without padding / count_include_pad, strides, a non-square image
CASES = [
    ("GlobalAveragePool", {}, (1, 12, 5, 25)),
    ("GlobalAveragePool", {}, (2, 5, 7)),  # rank 3
    ("AveragePool", {"kernel_shape": [6, 4]}, (1, 8, 6, 4)),  # whole image: integer path
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 6, 7, 9)),
    (
        "AveragePool",
        {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1, "strides": [2, 1]},
        (1, 5, 8, 6),
    ),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 8, 8)),
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 4, 9, 9)),
    # ceil mode without pads (SqueezeNet): a last window past the bottom and right edges
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 4, 14, 13)),
]


POOLS = ("AveragePool", "GlobalAveragePool", "MaxPool")


def _qdq_pool(
    op: str, attrs: dict, shape: tuple[int, ...], rng: np.random.Generator, signed: bool
) -> onnx.ModelProto:
    dt = TensorProto.INT8 if signed else TensorProto.UINT8
    lo, hi = (-128, 127) if signed else (0, 255)
    xs = float(rng.uniform(0.002, 0.2))
    # MaxPool only moves values: the pass keeps it on the bytes when the scales agree
    ys = xs if op == "MaxPool" else float(xs * rng.uniform(0.3, 2.0))
    xz = int(rng.integers(lo, hi + 1))
    yz = xz if op == "MaxPool" else int(rng.integers(lo, hi + 1))
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
        helper.make_node(op, ["x"], ["p"], **attrs),
        helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["yq"]),
    ]
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]),
        helper.make_tensor("xz", dt, [], [xz]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]),
        helper.make_tensor("yz", dt, [], [yz]),
    ]
    g = helper.make_graph(
        nodes, "qpool", [helper.make_tensor_value_info("xq", dt, list(shape))],
        [helper.make_tensor_value_info("yq", dt, None)], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return onnx.shape_inference.infer_shapes(m)


def _qlinear_pool(op: str, attrs: dict, shape: tuple[int, ...]) -> onnx.ModelProto:
    """The QOperator form: com.microsoft QLinear<op> between uint8 tensors."""
    dt = TensorProto.UINT8
    node = helper.make_node(
        f"QLinear{op}", ["xq", "xs", "xz", "ys", "yz"], ["yq"], domain="com.microsoft", **attrs
    )
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [0.0371]),
        helper.make_tensor("xz", dt, [], [121]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [0.0213]),
        helper.make_tensor("yz", dt, [], [37]),
    ]
    # the window cases keep the image size (3x3, padding 1)
    out_shape = [shape[0], shape[1], 1, 1] if op.startswith("Global") else list(shape)
    g = helper.make_graph(
        [node], "qlpool", [helper.make_tensor_value_info("xq", dt, list(shape))],
        [helper.make_tensor_value_info("yq", dt, out_shape)], inits,
    )  # fmt: skip
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 9
    return m


def _inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    t = model.graph.input[0].type.tensor_type
    dt = np.int8 if t.elem_type == TensorProto.INT8 else np.uint8
    info = np.iinfo(dt)
    shape = [d.dim_value for d in t.shape.dim]
    x = np.random.default_rng(seed).integers(info.min, info.max + 1, shape)
    return {"xq": x.astype(dt)}


def _convert(model: onnx.ModelProto, d: Path, **options: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    src = save(model, d / "m.onnx")
    api.convert(src, "c", d / "c", options=options or None)
    code = (d / "c" / "model.c").read_text()
    # the pool ran on bytes: nothing dequantized, no float tensor in the arena
    assert any(f"o2e.Q{op}(" in code for op in POOLS), "not the int8 pool"
    assert "DequantizeLinear" not in code and "QuantizeLinear" not in code
    return d / "c"


@pytest.mark.parametrize("signed", [True, False], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_qdq_average_pool_bit_exact(tmp_path: Path, case: int, signed: bool) -> None:
    op, attrs, shape = CASES[case]
    rng = np.random.default_rng(100 + case + 50 * signed)
    for trial in range(3):  # three draws of scales and zero points
        model = _qdq_pool(op, attrs, shape, rng, signed)
        out = _convert(model, tmp_path / f"t{trial}")
        x = _inputs(model, trial)
        ref = ort_run(model, x)["yq"]
        got = build_and_run(out, "x86-64-v2", x)["yq"]
        assert got.dtype == ref.dtype and np.array_equal(got, ref), (trial, got, ref)


@pytest.mark.parametrize(
    ("op", "attrs", "shape"),
    [
        ("GlobalAveragePool", {}, (1, 16, 3, 3)),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 4, 6, 6)),
    ],
)
def test_qlinear_average_pool_bit_exact(tmp_path: Path, op: str, attrs: dict, shape) -> None:  # noqa: ANN001
    """com.microsoft QLinearAveragePool / QLinearGlobalAveragePool run on the bytes too."""
    model = _qlinear_pool(op, attrs, shape)
    out = _convert(model, tmp_path)
    x = _inputs(model, 1)
    assert np.array_equal(build_and_run(out, "x86-64-v2", x)["yq"], ort_run(model, x)["yq"])


def test_pool_between_layers_keeps_bytes_in_the_arena(tmp_path: Path) -> None:
    """The keyword model's case: the int8 DS-CNN's average pool no longer holds a float copy of
    its input (32 KB of the 39 KB arena before) and its output matches onnxruntime exactly."""
    from mcu_models import ds_cnn, inputs_for, quantized

    q = quantized(ds_cnn(), tmp_path, "ds_cnn")
    stats = api.convert(q, "c", tmp_path / "c", options={"device": "cortex-m4"}).stats
    code = (tmp_path / "c" / "model.c").read_text()
    # its 25x5 window is the whole 25x5 map: onnxruntime's integer path
    assert "o2e.QAveragePool(" in code and "(float)acc *" in code
    # 39.1 KB with the float pool (docs/mcu.md before this change); now 22.2 KB
    assert stats["arena_bytes"] < 24 * 1024, stats["arena_bytes"]
    proto = onnx.load(str(q))
    x = inputs_for(proto, seed=4)
    got = build_and_run(tmp_path / "c", "x86-64-v2", x)
    for k, r in ort_run(proto, x).items():
        assert np.array_equal(got[k], r), k


@pytest.mark.skipif(mcu.missing_tools() is not None, reason=f"Cortex-M: {mcu.missing_tools()}")
def test_qdq_average_pools_on_a_board(tmp_path: Path) -> None:
    """The same bytes on a Cortex-M4F under qemu-system-arm (single-precision FPU, newlib's
    nearbyintf): both average pool paths and MaxPool, int8."""
    rng = np.random.default_rng(7)
    for i in (0, 3, 4, 6):
        op, attrs, shape = CASES[i]
        model = _qdq_pool(op, attrs, shape, rng, True)
        out = _convert(model, tmp_path / str(i), device="cortex-m4")
        x = _inputs(model, i)
        got, _ = mcu.build_and_run(out, "cortex-m4", x)
        assert np.array_equal(got["yq"], ort_run(model, x)["yq"]), i


# MaxPool windows for both of o2e_qmaxpool's planes: every window inside the image (read in
# place: SqueezeNet's pool1 rows, 3x3 and other kernels, strides 1 to 3) and a padded copy
# (padding, ceil mode's extra window); rows wider than a 64-byte vector with a tail, begin
# and end pads that differ
MAXPOOL_WINDOWS = [
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 3, 27, 111)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 3, 14, 70)),
    ({"kernel_shape": [2, 3], "strides": [1, 3]}, (1, 2, 7, 40)),
    ({"kernel_shape": [3, 3], "strides": [1, 1]}, (1, 2, 5, 66)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 1, 0]}, (1, 2, 9, 70)),
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 2, 8, 67)),
    ({"kernel_shape": [1, 1], "strides": [2, 2]}, (1, 2, 5, 9)),
    ({"kernel_shape": [2, 3], "strides": [1, 1], "pads": [1, 0, 0, 2]}, (1, 2, 6, 80)),
    ({"kernel_shape": [3, 4], "strides": [3, 3], "pads": [1, 2, 2, 1]}, (1, 2, 10, 13)),
    # windows of 4 and more rows (the vertical pass row by row: onnx's maxpool_2d_uint8 case)
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, (1, 2, 9, 20)),
    ({"kernel_shape": [4, 2], "strides": [1, 1]}, (1, 2, 9, 70)),
]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_qdq_max_pool_every_isa(tmp_path: Path, arch: str) -> None:
    """o2e_qmaxpool (runtime/o2e_qgemm.h) bit for bit with onnxruntime at every ISA the C is
    built for (its loops are left to each compiler's vectoriser), int8 and uint8."""
    rng = np.random.default_rng(11)
    for i, (attrs, shape) in enumerate(MAXPOOL_WINDOWS):
        for signed in (True, False):
            model = _qdq_pool("MaxPool", attrs, shape, rng, signed)
            out = _convert(model, tmp_path / f"{i}{signed:d}")
            assert "o2e_qmaxpool(" in (out / "model.c").read_text()
            x = _inputs(model, i)
            got = build_at(out, arch, x)["yq"]
            assert np.array_equal(got, ort_run(model, x)["yq"]), (attrs, signed)
