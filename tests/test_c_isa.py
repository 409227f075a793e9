"""The C backend at every instruction set it emits (issue 9): x86-64-v2 (no AVX), x86-64-v3
(AVX2 + FMA), the host's own (AVX-512 where present) and aarch64 (NEON, under qemu).

- Integer kernels with adversarial values: u8 = 255 times s8 = -128 / 127 over a wide K, zero
  points at the ends of their ranges. Pairs of such products overflow int16 (the AVX2
  `vpmaddubsw` trap): every integer result must be exact (numpy, in int64) and match
  onnxruntime.
- Every convolution kernel path with NaN / +-Inf in the input and in the bias, followed by each
  fusable activation: NaN and Inf must come out where onnxruntime puts them.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.runtime import ort_integer_products_exact, ort_run

from conftest import ALL_ISAS, make_model, save, tensor, verify_at, vi

U8, S8 = TensorProto.UINT8, TensorProto.INT8


def _adversarial_u8(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Mostly 255 (the largest u8 x s8 products), some 0 and random values."""
    v = np.full(shape, 255, np.uint8)
    mask = rng.random(shape)
    v[mask < 0.15] = 0
    v[(mask >= 0.15) & (mask < 0.3)] = rng.integers(
        0, 256, int(((mask >= 0.15) & (mask < 0.3)).sum())
    )
    return v


def _adversarial_s8(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Runs of 127 and of -128 (adjacent pairs of the same sign: int16 pair sums overflow)."""
    v = np.where((np.arange(int(np.prod(shape))) // 4) % 2 == 0, 127, -128).reshape(shape)
    flip = rng.random(shape) < 0.1
    v[flip] = rng.integers(-128, 128, int(flip.sum()))
    return v.astype(np.int8)


def _conv_ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Exact int64 NCHW convolution (stride 1, group 1)."""
    N, C, H, W = x.shape
    M, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = H + 2 * pad - kh + 1, W + 2 * pad - kw + 1
    y = np.zeros((N, M, OH, OW), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + OH, j : j + OW]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j].astype(np.int64))
    return y


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_integer_kernels_exact_at_extremes(tmp_path: Path, arch: str) -> None:
    rng = np.random.default_rng(9)
    K, M, N = 1030, 3, 37  # K past every blocking, odd
    a = _adversarial_u8((M, K), rng)
    b_const = _adversarial_s8((K, N), rng)
    b_in = _adversarial_s8((K, N), rng)
    bz = np.where(np.arange(N) % 2 == 0, -128, 127).astype(np.int8)  # per column, both ends
    C, H, W, Mc = 64, 6, 7, 5  # ConvInteger: K = 64 * 3 * 3 = 576
    x = _adversarial_u8((1, C, H, W), rng)
    wc = _adversarial_s8((Mc, C, 3, 3), rng)
    nodes = [
        helper.make_node("MatMulInteger", ["a", "B"], ["mm0"]),  # no zero points: 255 x 127 pairs
        helper.make_node("MatMulInteger", ["a", "B1", "az", "bz"], ["mm1"]),
        helper.make_node("MatMulInteger", ["a", "b"], ["mm2"]),  # B not a constant
        helper.make_node("ConvInteger", ["x", "Wc"], ["cv0"], pads=[1, 1, 1, 1]),
        helper.make_node("ConvInteger", ["x", "Wc1", "xz"], ["cv1"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "QLinearMatMul", ["a", "as", "az", "B2", "bs", "bz1", "ys", "yz"], ["qmm"]
        ),
        helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "Wc2", "ws", "wz", "ys", "yz"],
            ["qcv"],
            pads=[1, 1, 1, 1],
        ),
    ]
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    # one initializer per node: onnxruntime's precise u8 rewrite cannot share one (runtime.py)
    inits = [
        *(tensor(f"B{i or ''}", b_const) for i in range(3)),
        *(tensor(f"Wc{i or ''}", wc) for i in range(3)),
        tensor("az", np.array(255, np.uint8)),
        tensor("bz", bz),
        tensor("bz1", np.array(-128, np.int8)),
        tensor("xz", np.array(255, np.uint8)),
        tensor("as", f32(0.02)),
        tensor("bs", f32(0.01)),
        tensor("ys", f32(40.0)),
        tensor("yz", np.array(128, np.uint8)),
        tensor("xs", f32(0.03)),
        tensor("ws", np.linspace(0.005, 0.02, Mc).astype(np.float32)),
        tensor("wz", np.zeros(Mc, np.int8)),
    ]
    i32 = TensorProto.INT32
    outs = [
        vi("mm0", [M, N], i32),
        vi("mm1", [M, N], i32),
        vi("mm2", [M, N], i32),
        vi("cv0", [1, Mc, H, W], i32),
        vi("cv1", [1, Mc, H, W], i32),
        vi("qmm", [M, N], U8),
        vi("qcv", [1, Mc, H, W], U8),
    ]
    ins = [vi("a", [M, K], U8), vi("b", [K, N], S8), vi("x", [1, C, H, W], U8)]
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "int8.onnx")
    feeds = {"a": a, "b": b_in, "x": x}

    # exact integer references (int64: nothing wraps)
    a64 = a.astype(np.int64)
    exact = {
        "mm0": a64 @ b_const.astype(np.int64),
        "mm1": (a64 - 255) @ (b_const.astype(np.int64) - bz.astype(np.int64)),
        "mm2": a64 @ b_in.astype(np.int64),
        "cv0": _conv_ref(x, wc, 1),
        "cv1": _conv_ref(x.astype(np.int64) - 255, wc, 1),
    }
    # the cases that need int16 pair sums to hold more than 32767 are really there
    assert np.abs(exact["mm0"]).max() > 2**16
    out = tmp_path / "out"
    api.convert(path, "c", out)
    got = api.run(out, feeds, options={"arch": arch})
    for k, want in exact.items():
        np.testing.assert_array_equal(got[k].astype(np.int64), want, err_msg=k)
    # onnxruntime: exact on this CPU for constant s8 weights (runtime.ort_session's option);
    # a non-constant s8 operand saturates on x86 without VNNI, so mm2 is only checked where not
    ref = ort_run(onnx.load(path), feeds)
    for k, want in ref.items():
        if k != "mm2" or ort_integer_products_exact():
            np.testing.assert_array_equal(got[k], want, err_msg=f"{k} vs onnxruntime")


# --------------------------------------------------------------------------------------------
# NaN / Inf through every convolution kernel and fused activation
# --------------------------------------------------------------------------------------------
# path: (kernel label, C, M, H, W, k, stride, group, pad)
CONV_PATHS = {
    "im2col_gemm": ("Conv: im2col + GEMM", 4, 8, 3, 4, 3, 1, 1, 1),
    # 9x9 outputs: on <= 64 pixels the narrow-map kernel takes it
    "implicit_gemm": ("Conv: implicit GEMM", 8, 40, 18, 18, 5, 2, 1, 2),
    "narrow": ("Conv: k x k on a narrow map", 16, 40, 12, 12, 3, 2, 1, 1),
    "pointwise_gemm": ("Conv: 1x1 as GEMM", 16, 40, 6, 6, 1, 1, 1, 0),
    "pointwise_lanes": ("Conv: 1x1 on a narrow map", 128, 40, 7, 7, 1, 1, 1, 0),
    "strided_1x1": ("Conv: strided 1x1", 16, 40, 8, 8, 1, 2, 1, 0),
    "depthwise": ("Conv: depthwise direct", 8, 8, 5, 5, 3, 1, 8, 1),  # rows < 7: planes
    "depthwise_rows": ("Conv: depthwise rows", 8, 8, 9, 33, 3, 2, 8, 1),
    "winograd": ("Conv: winograd", 16, 40, 12, 12, 3, 1, 1, 1),
    "lanes": ("Conv: direct conv (output channels in lanes)", 64, 64, 13, 30, 3, 2, 1, 1),
    "direct": ("Conv: direct conv (few output channels)", 3, 8, 20, 30, 3, 1, 1, 1),
    # RGB stem: Relu / Clip / HardSwish in its vectors, the others a generated pass per block
    "stem": ("Conv: stem conv (strided, few input channels)", 3, 16, 17, 40, 3, 2, 1, 1),
    "conv_transpose": ("ConvTranspose: sub-pixel phases", 8, 4, 6, 7, 3, 2, 1, 1),
}
# each branch: conv -> activation (fused by the C backend)
ACTS = [
    ("Relu", {}, []),
    ("Clip", {}, ["zero", "six"]),
    ("Clip", {}, ["zero"]),  # no max: +Inf clamps to FLT_MAX as onnxruntime does
    ("LeakyRelu", {"alpha": 0.1}, []),
    ("HardSigmoid", {}, []),
    ("HardSwish", {}, []),
    # o2e_vmath.h kinds: applied to each stored tile / row / plane while it is in L1
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
    ("Sigmoid", {}, []),
    ("Tanh", {}, []),
    ("SiLU", {}, []),  # Mul(c, Sigmoid(c)): torch's export of nn.SiLU
    ("Gelu", {}, []),
    ("Gelu", {"approximate": "tanh"}, []),
    ("Mish", {}, []),
]


def _nan_inf_branches(case: str) -> tuple[list, list, list, dict[str, np.ndarray], list]:
    """Nodes, graph inputs, outputs, feeds and initializers of one kernel path: conv -> each
    activation, with its own input x_<case> (NaN / Inf pixels) and bias (NaN / Inf channels)."""
    _, C, M, H, W, k, s, g, p = CONV_PATHS[case]
    rng = np.random.default_rng(5)
    deconv = case == "conv_transpose"
    wshape = (C, M // g, k, k) if deconv else (M, C // g, k, k)
    w = (rng.standard_normal(wshape) / np.sqrt(C * k * k / g)).astype(np.float32)
    bias = rng.standard_normal(M).astype(np.float32)
    bias[:3] = [np.nan, np.inf, -np.inf]  # whole channels NaN / +Inf / -Inf before the activation
    x = rng.standard_normal((1, C, H, W)).astype(np.float32)
    # Winograd too: its tiles with a non-finite input are computed directly (issue 29)
    x[0, :, 1, 2] = np.nan
    x[0, 0, H - 2, W - 1] = np.inf
    x[0, C - 1, H // 2, 0] = -np.inf
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "group": g}
    if deconv:
        attrs["output_padding"] = [1, 1]
        OH = (H - 1) * s - 2 * p + k + 1
        OW = (W - 1) * s - 2 * p + k + 1
    else:
        OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    nodes, outs = [], []
    ins = [f"x_{case}", f"w_{case}", f"b_{case}"]
    for i, (op, kw, extra) in enumerate(ACTS):
        c = f"c_{case}_{i}"
        nodes.append(helper.make_node("ConvTranspose" if deconv else "Conv", ins, [c], **attrs))
        if op == "SiLU":
            nodes.append(helper.make_node("Sigmoid", [c], [f"s_{case}_{i}"]))
            nodes.append(helper.make_node("Mul", [c, f"s_{case}_{i}"], [f"y_{case}_{op}{i}"]))
        else:
            nodes.append(helper.make_node(op, [c, *extra], [f"y_{case}_{op}{i}"], **kw))
        outs.append(vi(f"y_{case}_{op}{i}", [1, M, OH, OW]))
    inits = [tensor(f"w_{case}", w), tensor(f"b_{case}", bias)]
    return nodes, [vi(f"x_{case}", [1, C, H, W])], outs, {f"x_{case}": x}, inits


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_conv_paths_nan_inf_through_fused_activations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:
    """One model holds every kernel path (one build per ISA): each conv's output goes through
    each fusable activation; NaN / Inf must land where onnxruntime puts them."""
    from onnx2edge.verify import compare

    nodes, ins, outs, feeds = [], [], [], {}
    inits = [tensor("zero", np.array(0, np.float32)), tensor("six", np.array(6, np.float32))]
    for case in sorted(CONV_PATHS):
        n, i, o, f, w = _nan_inf_branches(case)
        nodes += n
        ins += i
        outs += o
        feeds.update(f)
        inits += w
    path = save(make_model(nodes, ins, outs, inits, opset=20), tmp_path / "m.onnx")  # Gelu
    res = api.convert(path, "c", tmp_path / "out")
    kernels = res.stats["kernels"]
    # every activation fused: no loop of its own over a conv's output
    ops = re.findall(r"/\* node [^:]*: ([\w.]+)\(", (tmp_path / "out" / "model.c").read_text())
    assert not {"Sigmoid", "Mul", "Gelu", "Mish", "Tanh", "HardSwish"} & set(ops), "unfused"

    for label, *_ in CONV_PATHS.values():
        assert any(k.startswith(label) for k in kernels), (label, kernels)
    ref = ort_run(onnx.load(path), feeds)  # the check is not vacuous: NaN and Inf come out
    for case in CONV_PATHS:
        mine = [v for k, v in ref.items() if k.startswith(f"y_{case}_")]
        assert any(np.isnan(v).any() for v in mine) and any(np.isinf(v).any() for v in mine), case
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    # verify's comparison: NaN where the reference has NaN, the same infinities, then 1e-4
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


# --------------------------------------------------------------------------------------------
# a conformance subset, the int8 / quantized cases and a torch-exported model at every ISA
# --------------------------------------------------------------------------------------------
CONFORMANCE_SUBSET = (
    r"^test_(relu|leakyrelu|clip|hardsigmoid|hardswish|conv_with_strides_padding|convtranspose$"
    r"|gemm_default|matmulinteger|qlinearmatmul_2D_uint8|qlinearconv$|convinteger_with_padding"
    r"|maxpool_2d_pads|averagepool_2d_pads|softmax_axis_1)"
)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_conformance_subset(arch: str) -> None:
    import re

    from onnx2edge.conformance.c import collect_cases, run_conformance

    cases = [c for c in collect_cases() if re.search(CONFORMANCE_SUBSET, c.name)]
    assert len(cases) >= 20, [c.name for c in cases]
    results = run_conformance(cases, jobs=2, arch=arch)
    bad = [(r.name, r.detail) for r in results if r.status == "failed"]
    assert not bad, bad
    assert sum(r.status == "passed" for r in results) >= 20


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_quantized_models_at_every_isa(tmp_path: Path, arch: str) -> None:
    """onnxruntime's own quantize_static (QDQ, per channel, u8 activations: the format that went
    wrong on AVX2) and quantize_dynamic (ConvInteger / MatMulInteger) models."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "W2"], ["y"]),
    ]
    inits = [
        tensor("W", (rng.standard_normal((8, 3, 3, 3)) * 0.5).astype(np.float32)),
        tensor("B", (rng.standard_normal(8) * 0.1).astype(np.float32)),
        tensor("W2", (rng.standard_normal((8 * 8 * 8, 10)) * 0.1).astype(np.float32)),
    ]
    fp = save(
        make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 10])], inits), tmp_path / "f.onnx"
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(12)
            self.it = iter(
                [{"x": r.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    x = {"x": np.random.default_rng(13).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    qs, qd = tmp_path / "qs.onnx", tmp_path / "qd.onnx"
    quantize_static(str(fp), str(qs), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    quantize_dynamic(str(fp), str(qd), weight_type=QuantType.QInt8)
    for q in (qs, qd):
        rep = verify_at(q, arch, x, rtol=1e-5, atol=1e-6)
        assert rep.ok, rep.format()


def test_cli_arch(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: Path) -> None:
    """verify records the arch; bench refuses timing under emulation; a bad arch is one line."""
    from onnx2edge.backends.c.build import is_emulated
    from onnx2edge.cli import main

    assert main(["verify", str(example), "--target", "c", "--arch", "x86-64-v2", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["arch"] == "x86-64-v2" and out["ok"]
    if is_emulated("aarch64"):
        assert main(["bench", str(example), "--arch", "aarch64"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "emulation" in err[0] and "no timing" in err[0], err


# models: a convolutional block (depthwise, HardSwish, squeeze-excite), a transformer block
# (attention, LayerNorm, GELU) and a recurrent tagger (token ids, GRU), as torch exports them
ISA_MODELS = ["mobilenetv3_block.torchscript", "vit_block.dynamo", "gru_tagger.torchscript"]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "torch"


@pytest.mark.parametrize("name", ISA_MODELS)
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_models_at_every_isa(tmp_path: Path, arch: str, name: str) -> None:
    path = FIXTURES / f"{name}.onnx"
    inputs = None
    if name.startswith("gru_tagger"):
        shape = [
            d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
        ]
        inputs = {"ids": np.random.default_rng(1).integers(0, 60, size=shape).astype(np.int64)}
    rep = verify_at(path, arch, inputs, work_dir=tmp_path / "out")
    assert rep.ok, rep.format()


def test_cli_arch_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], example: Path
) -> None:
    """--arch outside the C target, and a missing cross toolchain: one line, exit 2."""
    from onnx2edge.backends.c import build
    from onnx2edge.cli import main

    assert main(["verify", str(example), "--arch", "x86-64-v3"]) == 2  # default target onnx
    assert "--arch applies to --target c" in capsys.readouterr().err
    monkeypatch.setattr(
        build, "CROSS", {"aarch64": ("no-such-aarch64-gcc", "gcc-aarch64-linux-gnu")}
    )
    assert main(["verify", str(example), "--target", "c", "--arch", "aarch64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "onnx2edge: error: --arch aarch64 needs no-such-aarch64-gcc (apt-get install gcc-aarch64-linux-gnu)"
    ), err
