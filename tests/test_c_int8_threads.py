"""The int8 kernels split across threads (issue 34 items 5 and 6): kernels/int8/*.py emit the
*_mt entry points of runtime/o2e_qgemm.h and o2e_qdw.h, which hand their work units to the
generated code's o2e_parallel_for (pixel chunks x channel parts of a product, groups of a
grouped convolution, channel blocks of a depthwise one, blocks or rows of the element-wise
ops).

One small network holds every int8 layer kind (stride-2 phase-plane and stride-1 padded-plane
products, 1x1, depthwise, grouped 3x3 of 8-channel groups and grouped 1x1, a squeeze-and-
excitation gate, HardSwish / Sigmoid tables, a residual Add, a final Gemm), quantized by
onnxruntime's quantize_static (QDQ, per channel). It is converted twice: with the default
thresholds out of reach, built for one thread, and with every threshold at zero so even the
smallest layer splits (uneven splits, fewer units than threads), built with two threads. The
threaded build must give the same bytes as the serial one at every ISA (int8 sums are exact;
a split never changes which vector or tail path an element takes), and both match
onnxruntime as the other int8 tests require (within one step, most bytes equal).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.backends.c.kernels.int8 import qdw_kernels
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, ASAN, SANITIZE_NATIVE, make_model, save, tensor, vi

SHAPE = (1, 16, 28, 28)
THREADS = ["-DO2E_THREADS=2", "-pthread"]


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(11)

    def w(*s: int, k: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(s) * k).astype(np.float32)

    n = helper.make_node
    nodes = [
        n("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("HardSwish", ["c1"], ["h1"]),
        n("Conv", ["h1", "Wd", "Bd"], ["c2"], pads=[1, 1, 1, 1], group=40),
        n("Relu", ["c2"], ["r2"]),
        n("GlobalAveragePool", ["r2"], ["g"]),
        n("Conv", ["g", "Ws1", "Bs1"], ["s1"]),
        n("Relu", ["s1"], ["s1r"]),
        n("Conv", ["s1r", "Ws2", "Bs2"], ["s2"]),
        n("HardSigmoid", ["s2"], ["gate"]),
        n("Mul", ["r2", "gate"], ["se"]),
        n("Conv", ["se", "W3", "B3"], ["c3"]),
        n("Conv", ["c3", "W4", "B4"], ["c4"], pads=[1, 1, 1, 1]),
        n("Add", ["c3", "c4"], ["a4"]),
        n("Conv", ["a4", "W5", "B5"], ["c5"], pads=[1, 1, 1, 1], group=6),
        n("Relu", ["c5"], ["r5"]),
        n("Conv", ["r5", "W6", "B6"], ["c6"], pads=[1, 1, 1, 1], strides=[2, 2], group=6),
        n("Relu", ["c6"], ["r6"]),
        n("Conv", ["r6", "W7", "B7"], ["c7"], group=6),
        n("Sigmoid", ["c7"], ["s7"]),
        n("Flatten", ["s7"], ["f"]),
        n("Gemm", ["f", "Wg", "Bg"], ["y"], transB=1),
    ]
    inits = [
        tensor("W1", w(40, 16, 3, 3, k=0.15)), tensor("B1", w(40, k=0.1)),
        tensor("Wd", w(40, 1, 3, 3)), tensor("Bd", w(40, k=0.1)),
        tensor("Ws1", w(10, 40, 1, 1)), tensor("Bs1", w(10, k=0.1)),
        tensor("Ws2", w(40, 10, 1, 1)), tensor("Bs2", w(40, k=0.1)),
        tensor("W3", w(48, 40, 1, 1, k=0.2)), tensor("B3", w(48, k=0.1)),
        tensor("W4", w(48, 48, 3, 3, k=0.05)), tensor("B4", w(48, k=0.1)),
        tensor("W5", w(48, 8, 3, 3, k=0.2)), tensor("B5", w(48, k=0.1)),
        tensor("W6", w(48, 8, 3, 3, k=0.2)), tensor("B6", w(48, k=0.1)),
        tensor("W7", w(48, 8, 1, 1)), tensor("B7", w(48, k=0.1)),
        tensor("Wg", w(40, 48 * 49, k=0.05)), tensor("Bg", w(40, k=0.1)),
    ]  # fmt: skip
    return make_model(nodes, [vi("x", list(SHAPE))], [vi("y", [1, 40])], inits)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The quantized model, its serial conversion and its all-split conversion."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    d = tmp_path_factory.mktemp("int8_threads")
    fp = save(_float_model(), d / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(12)
            self.it = iter([{"x": r.standard_normal(SHAPE).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    q = d / "q.onnx"
    quantize_static(str(fp), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    serial, split = d / "serial", d / "split"
    for out, threshold in ((serial, 1 << 62), (split, 0)):
        mp = pytest.MonkeyPatch()
        try:
            for k in ("PAR_MIN_MACS", "PAR_MIN_DW", "PAR_MIN_BYTES", "PAR_MIN_LUT"):
                mp.setattr(qdw_kernels, k, threshold)
            api.convert(q, "c", out)
        finally:
            mp.undo()
    return q, serial, split


def test_every_int8_kernel_splits(converted) -> None:  # noqa: ANN001
    """With the thresholds at zero each int8 layer kind calls its threaded entry point; with
    them out of reach none does."""
    _, serial, split = converted
    code = (split / "model.c").read_text()
    for fn in (
        "o2e_qconv_planes_mt(",  # stride-2 phase planes and stride-1 padded planes
        "o2e_qgemm_rows_mt(",  # 1x1
        "o2e_qdwc_mt(",
        "o2e_qgroups_mt(",
        "o2e_qlut_mt(",
        "o2e_qmul_mt(",
        "o2e_qadd_mt(",
        "o2e_qgemm_mt(",
    ):
        assert fn in code, fn
    assert code.count("o2e_qgroups_mt(") == 3  # 3x3 stride 1, stride 2, 1x1
    assert code.count("o2e_qconv_planes_mt(") == 2
    assert "_mt(" not in (serial / "model.c").read_text()


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_two_threads_give_the_serial_bytes(converted, arch: str) -> None:  # noqa: ANN001
    q, serial, split = converted
    x = {"x": np.random.default_rng(13).standard_normal(SHAPE).astype(np.float32) * 1.5}
    one = build_and_run(serial, arch, x)["y"]
    two = build_and_run(split, arch, x, THREADS)["y"]
    # the output is DequantizeLinear of the int8 result: equal floats are equal bytes
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    ref = ort_run(onnx.load(str(q)), x)["y"]
    d = np.abs(two.astype(np.float64) - ref)
    assert d.max() <= _step(q) * (1 + 1e-5), d.max() / _step(q)
    assert np.mean(d == 0) >= 0.9


def _step(q) -> float:  # noqa: ANN001
    """The output's quantization step (its DequantizeLinear scale)."""
    m = onnx.load(str(q))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    return float(inits[dq.input[1]])


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param([*SANITIZE_NATIVE, "-DO2E_THREADS=3", "-pthread"], id="native_asan_3threads"),
        pytest.param([*ASAN, "-DO2E_THREADS=2", "-pthread"], id="portable_asan_2threads"),
    ],
)
def test_threaded_int8_under_sanitizers(converted, flags: list[str], tmp_path) -> None:  # noqa: ANN001
    """Per-thread scratch slots stay inside their arena blocks (ASan), with more threads than
    some layers have units."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable

    q, serial, split = converted
    x = {"x": np.random.default_rng(14).standard_normal(SHAPE).astype(np.float32)}
    io = json.loads((split / "onnx2edge.json").read_text())
    got = run_executable(build_executable(split, flags, "san"), io, x, split)["y"]
    # the same kernels on one thread: the flags without the pool
    one_flags = [f for f in flags if not f.startswith("-DO2E_THREADS") and f != "-pthread"]
    one = run_executable(build_executable(serial, one_flags, "san1"), io, x, serial)["y"]
    assert np.array_equal(one.view(np.uint32), got.view(np.uint32))


class _Ctx:
    """The two NodeContext members `qdw_kernels.split` reads or calls."""

    def __init__(self, max_threads: int) -> None:
        self.max_threads = max_threads
        self.used: list[str] = []

    def helper(self, name: str, _text: str) -> None:
        self.used.append(name)

    def require_runtime(self, header: str) -> None:
        self.used.append(header)


def test_split_rule_is_work_per_thread() -> None:
    """A layer splits when each of two threads gets the threshold's work (PAR_MIN_US at the
    kernel's rate), whatever --max-threads planned; never with one unit or a 1-thread plan."""
    t = qdw_kernels.PAR_MIN_MACS
    assert t == 200_000 * qdw_kernels.PAR_MIN_US
    for planned in (2, 4, 8):
        assert qdw_kernels.split(_Ctx(planned), 2 * t, 8, t)
        assert not qdw_kernels.split(_Ctx(planned), 2 * t - 2, 8, t)
    assert qdw_kernels.split(_Ctx(4), 2 * t, 2, t)
    assert not qdw_kernels.split(_Ctx(4), 10 * t, 1, t)  # one unit: nothing to share
    assert not qdw_kernels.split(_Ctx(1), 10 * t, 8, t)  # a build planned for one thread
    ctx = _Ctx(2)
    assert not qdw_kernels.split(ctx, t, 8, t) and ctx.used == []  # serial: no runtime pulled in
    assert qdw_kernels.split(ctx, 4 * t, 8, t) and "o2e_gemm.h" in ctx.used


def test_float_ops_split_by_the_same_rule(tmp_path: Path) -> None:
    """The float ops between Q/DQ pairs go to the threads by the int8 kernels' rule
    (kernels/par_split.py): LayerNorm rows at RATE_NORM elements a ns split when each of two
    threads gets PAR_MIN_US of work, not below (ConvNeXt-atto's 3136 rows of 40 split, ViT's
    197 rows of 192 - 13 us in all - stay on the calling thread)."""
    from onnx2edge.backends.c.kernels import par_split

    assert par_split.split is qdw_kernels.split  # one rule, one place
    assert par_split.min_work(par_split.RATE_INT8_MACS) == qdw_kernels.PAR_MIN_MACS
    t = par_split.min_work(par_split.RATE_NORM)
    assert par_split.pays(2 * t, 2, t) and not par_split.pays(2 * t - 2, 64, t)
    codes = {}
    for rows, n in ((3136, 40), (197, 192)):
        nodes = [helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)]
        inits = [tensor("s", np.ones(n, np.float32))]
        m = make_model(nodes, [vi("x", [rows, n])], [vi("y", [rows, n])], inits, opset=17)
        out = tmp_path / f"ln{rows}"
        api.convert(save(m, tmp_path / f"ln{rows}.onnx"), "c", out)
        codes[rows] = (out / "model.c").read_text()
    assert "o2e_parallel_for(3136, o2e_layer_norm_rows" in codes[3136]
    assert "o2e_layer_norm_rows(&a, 0, 197)" in codes[197]
