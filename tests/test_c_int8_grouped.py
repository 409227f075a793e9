"""int8 grouped convolutions (RegNet / ResNeXt): passes/qdq_int8.int8_plan's groups and
kernels/int8/qgemm_kernels._grouped (the input padded or split into phase planes once, one
int8 product per group). A small model of grouped layers (3x3 stride 1 and 2, 1x1, groups of
3 -> 6 channels so a group's rows do not fill the kernels' 8-row blocks, 8 -> 8 as RegNet),
quantized by onnxruntime's quantize_static (QDQ, per channel, uint8 and int8 activations),
built at every ISA; onnxruntime (exact integer products) is the judge: within one step, most
bytes equal."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run

from conftest import AARCH64, ALL_ISAS, arch_param, make_model, save, tensor, vi

SHAPE = (1, 12, 11, 11)


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)

    def w(*s: int, k: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(s) * k).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node(
            "Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=3
        ),  # fmt: skip
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"], group=2),
        helper.make_node("Conv", ["c3", "W4"], ["y"], pads=[0, 0, 1, 1], strides=[2, 2], group=2),
    ]
    inits = [
        tensor("W1", w(24, 3, 3, 3)), tensor("B1", w(24, k=0.1)),
        tensor("W2", w(24, 8, 3, 3, k=0.2)), tensor("B2", w(24, k=0.1)),
        tensor("W3", w(16, 12, 1, 1)), tensor("B3", w(16, k=0.1)),
        tensor("W4", w(8, 8, 3, 3, k=0.2)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", list(SHAPE))], [vi("y", [1, 8, 3, 3])], inits)


@pytest.fixture(scope="module", params=["QUInt8", "QInt8"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    d = tmp_path_factory.mktemp("grouped")
    fp = save(_float_model(), d / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(6)
            self.it = iter([{"x": r.standard_normal(SHAPE).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    q = d / "q.onnx"
    quantize_static(str(fp), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=getattr(QuantType, request.param),
                    weight_type=QuantType.QInt8)  # fmt: skip
    out = d / "c"
    api.convert(q, "c", out)
    return q, out


def test_grouped_layers_use_int8_kernels(converted) -> None:  # noqa: ANN001
    code = (converted[1] / "model.c").read_text()
    for k in ("o2e_qpad(", "o2e_qphase(", "o2e_qgemm_rows("):
        assert k in code, k
    # every layer: one int8 product per group, no float convolution left between Q and DQ
    assert [code.count(f"for (size_t g = 0; g < {g}; ++g)") for g in (4, 3, 2)] == [1, 1, 2]
    # the output's DequantizeLinear is the only float step left
    assert "sgemm" not in code and code.count(": DequantizeLinear(") == 1


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_grouped_int8_matches_onnxruntime(converted, arch: str) -> None:  # noqa: ANN001
    from onnx2edge.backends.c.build import build_and_run

    q, out = converted
    x = {"x": np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32) * 1.5}
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(out, arch, x)["y"]
    d = np.abs(got.astype(np.float64) - ref)
    assert d.max() <= _step(q) * (1 + 1e-5), d.max() / _step(q)
    assert np.mean(d == 0) >= 0.9


def _step(q) -> float:  # noqa: ANN001
    """The output's quantization step (its DequantizeLinear scale)."""
    m = onnx.load(str(q))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("arch", [arch_param(AARCH64)])
def test_grouped_int8_neon_dot_product(converted, arch: str) -> None:  # noqa: ANN001
    """The sdot path (armv8.2-a+dotprod, under qemu) on the groups' offset operands."""
    from onnx2edge.backends.c.build import build_and_run

    q, out = converted
    x = {"x": np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32) * 1.5}
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(out, arch, x, ["-march=armv8.2-a+dotprod"])["y"]
    assert np.mean(got == ref) >= 0.9
    assert np.abs(got - ref).max() <= _step(q) * (1 + 1e-5)
