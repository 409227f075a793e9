"""The Swift / MPSNNGraph backend, verified on Linux against onnx2edge's CPU model of MPS.

Every model is converted, compiled together with the simulator (sim/Metal,
sim/MetalPerformanceShaders) and compared with onnxruntime: max abs error <= 1e-4 x max|output|
with float32 weights. The simulator is built once per session (`sim_dir`) and cached on disk.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge.backends.mps import MPSBackend
from onnx2edge.backends.mps import build as mps_build
from onnx2edge.backends.mps.lower import lower
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.frontend.loader import load
from onnx2edge.passes import run_passes

from conftest import check_golden

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "mps"
TOLERANCE = 1e-4

try:
    mps_build.swiftc()
    HAVE_SWIFT = True
except Onnx2EdgeError:
    HAVE_SWIFT = False
needs_swift = pytest.mark.skipif(
    not HAVE_SWIFT, reason="swiftc not found: the MPS simulator cannot be built"
)


@pytest.fixture(scope="session")
def sim_dir() -> Path:
    if not HAVE_SWIFT:
        pytest.skip("swiftc not found: the MPS simulator cannot be built")
    return mps_build.build_simulator()


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


def convert(model: onnx.ModelProto, folder: Path, **options: object) -> tuple[MPSBackend, Path]:
    backend = MPSBackend()
    graph = run_passes(load(_save(model, folder), quiet=True), backend.required_passes)
    problems = backend.unsupported(graph)
    assert problems == [], problems
    out = folder / "out"
    out.mkdir()
    backend.emit(graph, out, options)
    return backend, out


def check_against_ort(
    model: onnx.ModelProto | Path, folder: Path, *, tolerance: float = TOLERANCE, **options: object
) -> float:
    """Every ONNX output within `tolerance` x max|output| of onnxruntime's; returns the worst
    relative error."""
    if isinstance(model, Path):
        model = onnx.load(model)
    backend, out = convert(model, folder, **options)
    rng = np.random.default_rng(7)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    got = backend.run(out, feeds, {})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    worst = 0.0
    assert len(got) == len(want) == len(model.graph.output)
    for vi, w in zip(model.graph.output, want, strict=True):
        g = got[vi.name]
        assert g.shape == w.shape, (vi.name, g.shape, w.shape)
        err = float(np.abs(g - w).max())
        scale = float(np.abs(w).max())
        assert err <= tolerance * scale, (
            f"{vi.name}: max abs error {err:.3g} > {tolerance} x {scale:.3g}"
        )
        worst = max(worst, err / scale)
    return worst


# ------------------------------------------------------------------------------------------
# The CPU model of MPS itself, on hand-computed cases
# ------------------------------------------------------------------------------------------


@needs_swift
def test_simulator_semantics(sim_dir: Path, tmp_path: Path) -> None:
    """Conv with OHWI weights and a padding offset, slices of 4, concat gaps, pooling edges."""
    exe = tmp_path / "semantics"
    subprocess.run(
        [mps_build.swiftc(), *mps_build.SWIFT_FLAGS, "-I", str(sim_dir), "-L", str(sim_dir),
         "-lMetalPerformanceShaders", "-lMetal", str(HERE / "mps_sim" / "SimSemantics.swift"), "-o", str(exe)],
        check=True, capture_output=True,
    )  # fmt: skip
    lines = dict(
        line.split(": ", 1)
        for line in subprocess.run(
            [str(exe)], check=True, capture_output=True, text=True
        ).stdout.splitlines()
    )
    floats = lambda s: [float(v) for v in s.split()]  # noqa: E731
    # Channel 0 takes the window's top-left tap: with pads top/left 1 that is in[y-1][x-1];
    # channel 1 the bottom-right tap in[y][x] plus bias 10 (weights are OHWI).
    assert floats(lines["conv_ohwi_offset"]) == [0, 0, 0, 0, 1, 2, 0, 4, 5, *range(11, 20)]
    # 6 channels = 2 slices of 4; the last slice is zero-padded.
    assert lines["slices"] == "2 storage 0.0 1.0 2.0 3.0 4.0 5.0 0.0 0.0"
    # 3 + 2 channels: the second source starts at the next slice (channel 4).
    assert lines["concat_3_2 channels 6"].split() == ["1.0", "2.0", "3.0", "0.0", "7.0", "8.0"]
    # 2x2/2 max pooling starting at (-1, -1): windows {1}, {2,3}, {4,7}, {5,6,8,9}.
    assert floats(lines["maxpool_pad"]) == [1, 3, 7, 9]
    assert floats(lines["fused_relu"]) == [0, 2]
    # Intermediate images: MPSNNImageNode.format .none -> the graph's format (float16).
    assert lines["float16_format"] == "true 1.0"
    # MPSNNGraph.readCountForSourceImage(at:): the source feeds two filters.
    assert lines["read_count"] == "2"
    # kernelWeightsDataType unimplemented -> float16 weights (1.0001 -> 1); float32 when asked.
    assert floats(lines["weights_type"]) == [1.0, np.float32(1.0001)]
    # Apple's LRN window for even N: [k - N/2, k + (N-1)/2] (not ONNX's).
    np.testing.assert_allclose(floats(lines["lrn_even"]), [1, 2 / 5, 3 / 13], rtol=1e-6)
    # InstanceNorm epsilon defaults to FLT_MIN, not 0.001.
    assert floats(lines["instnorm_eps"]) == [-1.0, 1.0]
    assert lines["float16_format"] == "true 1.0"
    # Rows reduce along x (one value per row), columns along y (one per column).
    assert floats(lines["row_sum"]) == [6, 15]
    assert floats(lines["column_max"]) == [4, 5, 6]
    assert floats(lines["spatial_mean"]) == [3.5]
    assert floats(lines["channels_min"]) == [1, 2]
    assert lines["two_results"] == "-3.0 double 6.0"


# ------------------------------------------------------------------------------------------
# Small hand-built models covering the op mapping
# ------------------------------------------------------------------------------------------


def _model(
    nodes: list,
    inputs: dict[str, list[int]],
    output: tuple[str, list[int]],
    params: dict[str, np.ndarray],
    name: str = "tiny",
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
        initializer=[numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def tiny_cnn() -> onnx.ModelProto:
    """Conv(asymmetric pads)+BN+Relu, MaxPool, Flatten, Gemm, Softmax: golden-file model."""
    rng = np.random.default_rng(0)
    p = {
        "conv.w": _w(rng, 8, 3, 3, 3), "conv.b": _w(rng, 8),
        "bn.g": (1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "bn.b": _w(rng, 8),
        "bn.m": _w(rng, 8), "bn.v": (1 + rng.random(8)).astype(np.float32),
        "fc.w": _w(rng, 10, 8 * 4 * 5), "fc.b": _w(rng, 10),
    }  # fmt: skip
    nodes = [
        helper.make_node(
            "Conv", ["input", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 0, 0, 1]
        ),
        helper.make_node(
            "BatchNormalization", ["c", "bn.g", "bn.b", "bn.m", "bn.v"], ["n"], name="bn"
        ),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node(
            "MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
        ),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["l"], name="fc", transB=1),
        helper.make_node("Softmax", ["l"], ["prob"], name="softmax"),
    ]
    return _model(nodes, {"input": [1, 3, 8, 10]}, ("prob", [1, 10]), p, name="tiny_cnn")


def op_soup() -> onnx.ModelProto:
    """Ops the zoo does not use: depthwise + dilation, PRelu, LeakyRelu, HardSwish, Sigmoid
    gating (SiLU), per-channel constants, broadcast Mul, Resize (nearest, bilinear), Pad
    reflect/edge, LRN, InstanceNorm, AveragePool with count_include_pad, ConvTranspose
    (stride 2, asymmetric output), Elu, Softplus, Tanh, Clip, Concat, Sub, Div."""
    rng = np.random.default_rng(1)
    c = 8
    p = {
        "c1.w": _w(rng, c, 3, 3, 3), "dw.w": _w(rng, c, 1, 3, 3), "dw.b": _w(rng, c),
        "slope": (0.1 * rng.random((c, 1, 1))).astype(np.float32),
        "scale": (1 + 0.1 * rng.standard_normal((1, c, 1, 1))).astype(np.float32),
        "shift": _w(rng, 1, c, 1, 1),
        "in.g": (1 + 0.1 * rng.standard_normal(c)).astype(np.float32), "in.b": _w(rng, c),
        "ct.w": _w(rng, 2 * c, c, 3, 3), "ct.b": _w(rng, c),
        "g.w": _w(rng, c, 2 * c, 1, 1),
        "up.scales": np.array([1, 1, 2, 2], np.float32), "lin.scales": np.array([1, 1, 2, 2], np.float32),
        "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "epads": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64),
        "two": np.array(2.0, np.float32), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
        "out.w": _w(rng, 4, c, 1, 1),
    }  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["input", "c1.w"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        n("LeakyRelu", ["a"], ["a1"], name="leaky", alpha=0.2),
        n(
            "Conv",
            ["a1", "dw.w", "dw.b"],
            ["b"],
            name="dw",
            group=c,
            pads=[2, 2, 2, 2],
            dilations=[2, 2],
        ),
        n("PRelu", ["b", "slope"], ["b1"], name="prelu"),
        n("HardSwish", ["b1"], ["b2"], name="hswish"),
        n("Sigmoid", ["b2"], ["sg"], name="sig"),
        n("Mul", ["b2", "sg"], ["silu"], name="silu"),
        n("Mul", ["silu", "scale"], ["s1"], name="mul_scale"),
        n("Add", ["s1", "shift"], ["s2"], name="add_shift"),
        n("GlobalAveragePool", ["s2"], ["gap"], name="gap"),
        n("Mul", ["s2", "gap"], ["se"], name="se_mul"),
        n("Pad", ["se", "pads"], ["pd"], name="pad_reflect", mode="reflect"),
        n(
            "AveragePool",
            ["pd"],
            ["ap"],
            name="avg",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
        ),
        n("Resize", ["ap", "", "up.scales"], ["up"], name="up_nearest", mode="nearest"),
        n("LRN", ["up"], ["lrn"], name="lrn", size=3, alpha=1e-2, beta=0.75, bias=2.0),
        n("InstanceNormalization", ["lrn", "in.g", "in.b"], ["inorm"], name="inorm"),
        n("Elu", ["inorm"], ["e"], name="elu"),
        n("Softplus", ["e"], ["sp"], name="softplus"),
        n("Sub", ["sp", "e"], ["d0"], name="sub"),
        n("Div", ["d0", "two"], ["d1"], name="half"),
        n("Concat", ["d1", "e"], ["cat"], name="cat", axis=1),
        n("Conv", ["cat", "g.w"], ["g"], name="grouped_1x1"),
        n(
            "ConvTranspose",
            ["cat", "ct.w", "ct.b"],
            ["ct"],
            name="deconv",
            strides=[2, 2],
            pads=[1, 1, 0, 0],
            output_padding=[1, 1],
        ),
        n("Tanh", ["ct"], ["t"], name="tanh"),
        n("Resize", ["g", "", "lin.scales"], ["lin"], name="up_linear", mode="linear"),
        n("Pad", ["lin", "epads"], ["lp"], name="pad_edge", mode="edge"),
        n("Add", ["t", "lp"], ["sum"], name="join"),
        n("Clip", ["sum", "lo", "hi"], ["cl"], name="relu6"),
        n("Conv", ["cl", "out.w"], ["output"], name="head"),
    ]
    return _model(nodes, {"input": [1, 3, 9, 11]}, ("output", [1, 4, 25, 29]), p, name="op_soup")


@needs_swift
@pytest.mark.parametrize("build", [tiny_cnn, op_soup], ids=["tiny_cnn", "op_soup"])
def test_small_models_match_onnxruntime(
    sim_dir: Path, tmp_path: Path, build: Callable[[], onnx.ModelProto]
) -> None:
    check_against_ort(build(), tmp_path)


@needs_swift
def test_fp16_weights(sim_dir: Path, tmp_path: Path) -> None:
    """--fp16 stores weights as float16 (biases stay float32); error grows to ~1e-3."""
    check_against_ort(tiny_cnn(), tmp_path, tolerance=5e-3, fp16=True)
    manifest = (tmp_path / "out" / "Sources" / "TinyCnn" / "weights.json").read_text()
    assert '"weights_dtype": "float16"' in manifest


# ------------------------------------------------------------------------------------------
# The zoo
# ------------------------------------------------------------------------------------------

ZOO_FAST = [
    "resnet50",
    "alexnet",
    "alexnet_bn",
    "nin",
    "nin_bn",
    "googlenet",
    "squeezenet",
    "mobilenet_v1",
    "mobilenet_v2",
    "mnist_mlp",
    "unet_small",
]
ZOO_SLOW = ["vgg16", "vgg19", "inception_v3", "convdeconv"]


def _zoo(name: str, tmp_path: Path) -> None:
    from onnx2edge.bench.zoo import build

    start = time.time()
    rel = check_against_ort(build(name), tmp_path)
    if os.environ.get("ONNX2EDGE_REPORT"):
        print(f"\n{name}: relative error {rel:.3g}, {time.time() - start:.1f} s")


@needs_swift
@pytest.mark.parametrize("name", ZOO_FAST)
def test_zoo_model(sim_dir: Path, tmp_path: Path, name: str) -> None:
    _zoo(name, tmp_path)


@needs_swift
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_SLOW)
def test_zoo_model_slow(sim_dir: Path, tmp_path: Path, name: str) -> None:
    """Slow: VGG-16/19 (~140 M parameters, 15-20 GFLOPs), Inception-v3 (299x299) and the
    480x640 ConvDeconvNet each take longer than ~20 s on 2 CPU cores (model build,
    onnxruntime reference and the CPU model of MPS); run with -m slow."""
    _zoo(name, tmp_path)


# ------------------------------------------------------------------------------------------
# Models as exporters write them (tests/fixtures/mps/build_fixtures.py; tests/fixtures/torch)
# ------------------------------------------------------------------------------------------

FIXTURES = HERE / "fixtures" / "mps"
TORCH_FIXTURES = HERE / "fixtures" / "torch"


def _side_by_side(parts: list[Path] | list[onnx.ModelProto]) -> onnx.ModelProto:
    """Several models of one opset as one graph (names prefixed m0_, m1_...): one swiftc build
    checks them all, and the graph has several image inputs and outputs."""
    models = [
        onnx.compose.add_prefix(onnx.load(p) if isinstance(p, Path) else p, f"m{i}_")
        for i, p in enumerate(parts)
    ]
    opsets = {m.opset_import[0].version for m in models}
    assert len(opsets) == 1, opsets
    graph = helper.make_graph(
        [n for m in models for n in m.graph.node],
        "side_by_side",
        [i for m in models for i in m.graph.input],
        [o for m in models for o in m.graph.output],
        [t for m in models for t in m.graph.initializer],
        value_info=[v for m in models for v in m.graph.value_info],
    )
    model = helper.make_model(graph, opset_imports=models[0].opset_import)
    model.ir_version = 8
    return model


def _placement(folder: Path) -> list[dict]:
    import json

    return json.loads((folder / "out" / "mps-model.json").read_text())["placement"]


@needs_swift
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_torch_exports(sim_dir: Path, tmp_path: Path, exporter: str) -> None:
    """A ResNet (global average pooling as dynamo writes it: ReduceMean over H, W + Reshape),
    SqueezeNet fire modules (Concat of 6 + 6 channels), SiLU, Mish, ReduceMax over channels,
    a YOLO-style detector (Split/Slice of channels, nearest upsampling + Concat, decode on
    the CPU), a DBNet-style OCR head (FPN with nearest and bilinear Resize, ConvTranspose) and
    GELU (erf and tanh forms):
    both exporters' files, one build each, every output against onnxruntime."""
    names = ["tiny_resnet", "fire_net", "yolo_head", "dbnet_head", "gelu_net"]
    model = _side_by_side([FIXTURES / f"{n}.{exporter}.onnx" for n in names])
    check_against_ort(model, tmp_path)
    placement = _placement(tmp_path)
    cpu = {p["node"] for p in placement if p["on"] == "cpu"}
    # Everything up to the detector's decode runs on the GPU (ReduceMean, Split, Slice, Concat,
    # erf-GELU included); the decode (5-D Reshape, Transpose, ...) runs on the CPU, with its
    # reason, and so does dynamo's Gelu(approximate='tanh') (no neuron for it).
    assert cpu and all("m2_" in c or "m4_" in c and "Gelu" in c for c in cpu), cpu
    assert not any(
        p["on"] == "cpu" and ("ReduceMean" in p["node"] or "ReduceMax" in p["node"])
        for p in placement
    )
    reshape = next(p for p in placement if p["on"] == "cpu" and "Reshape" in p["node"])
    assert "moves data between channels and pixels" in reshape["reason"]


SEEDS = ["resnet_mini", "mobilenet_v1_mini", "mobilenet_v2_mini", "squeezenet_mini",
         "googlenet_mini", "nin_bn_mini", "inception_v3_mini"]  # fmt: skip


def _seeds(exporter: str, tmp_path: Path) -> None:
    model = _side_by_side([FIXTURES / f"{n}.{exporter}.onnx" for n in SEEDS])
    check_against_ort(model, tmp_path)
    assert all(p["on"] == "gpu" for p in _placement(tmp_path)), _placement(tmp_path)


@needs_swift
def test_seed_networks_dynamo(sim_dir: Path, tmp_path: Path) -> None:
    """Seed 000's seven networks (block types at reduced width and resolution) as torch's
    default (dynamo) exporter writes them: global average pooling is ReduceMean over H, W with
    keepdims then a Reshape, ReLU6 a Clip. All on the GPU graph, one build, 7 inputs/outputs."""
    _seeds("dynamo", tmp_path)


@needs_swift
@pytest.mark.slow
def test_seed_networks_torchscript(sim_dir: Path, tmp_path: Path) -> None:
    """Slow (one more ~1 min swiftc build): the same seven networks from the TorchScript
    exporter (GlobalAveragePool, Flatten, constant-folded shapes)."""
    _seeds("torchscript", tmp_path)


@needs_swift
@pytest.mark.slow
def test_torch_exports_shared_fixtures(sim_dir: Path, tmp_path: Path) -> None:
    """Slow (~1 min: one more swiftc build): tests/fixtures/torch's MobileNetV3 block
    (HardSigmoid, HardSwish, ReduceMean, a grouped convolution of 6 channels per group), SiLU
    net, resize decoder and ShuffleNet unit (channel shuffle, Split) from the dynamo exporter
    (opset 18); a ViT block (patch-embedding Conv on the GPU, attention and LayerNormalization
    in a CPU segment)."""
    names = ["mobilenetv3_block", "silu_convnet", "resize_decoder", "shufflenet_unit", "vit_block"]
    check_against_ort(_side_by_side([TORCH_FIXTURES / f"{n}.dynamo.onnx" for n in names]), tmp_path)


@needs_swift
def test_mobilenetv3_torchscript(sim_dir: Path, tmp_path: Path) -> None:
    """MobileNetV3 block as TorchScript writes it: HardSigmoid / HardSwish on the GPU (neuron
    + multiplication), GlobalAveragePool and ReduceMean, groups of 6 channels (dense weights);
    a ShuffleNet unit (channel shuffle = Reshape, Transpose, Reshape: a channel permutation)."""
    names = ["mobilenetv3_block", "silu_convnet", "shufflenet_unit"]
    check_against_ort(
        _side_by_side([TORCH_FIXTURES / f"{n}.torchscript.onnx" for n in names]), tmp_path
    )
    assert all(p["on"] == "gpu" for p in _placement(tmp_path))


def reductions_and_slices() -> onnx.ModelProto:
    """Reductions over channels, rows, H x W; Slice of channels and strided rows/columns;
    Split along H; Concat of 3 + 5 + 2 channels; then a Softmax over W and a Gather (CPU)."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    p = {
        "w": _w(rng, 10, 6, 3, 3),
        "ax1": np.array([1], np.int64),
        "ax3": np.array([3], np.int64),
        "ax23": np.array([2, 3], np.int64),
        "s_st": np.array([1, 1, 2], np.int64),
        "s_en": np.array([5, 8, 9], np.int64),
        "s_ax": np.array([1, 2, 3], np.int64),
        "s_sp": np.array([1, 2, 3], np.int64),
        "split": np.array([3, 5], np.int64),
        "idx": np.array([2, 0], np.int64),
        "down_size": np.array([1, 10, 4, 5], np.int64),
    }
    nodes = [
        n("Conv", ["input", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        n("ReduceSum", ["c", "ax1"], ["chan_sum"], name="chan_sum"),
        n("ReduceMax", ["c", "ax3"], ["row_max"], name="row_max"),
        n("ReduceMin", ["c", "ax23"], ["hw_min"], name="hw_min", keepdims=0),
        n("ReduceMean", ["c", "ax23"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["gap_flat"], name="flat"),
        n("Slice", ["c", "s_st", "s_en", "s_ax", "s_sp"], ["sliced"], name="slice"),
        n("Split", ["c", "split"], ["top", "bottom"], name="split_h", axis=2),
        n("Slice", ["c", "ax1", "ax3", "ax1"], ["c13"], name="c13"),  # channels 1:3
        n("Sigmoid", ["top"], ["top_s"], name="top_sig"),
        n("Softmax", ["bottom"], ["soft_w"], name="soft_w", axis=3),
        n("Gather", ["c", "idx"], ["picked"], name="pick", axis=1),
        n("Resize", ["c", "", "", "down_size"], ["down"], name="down", mode="nearest"),
    ]
    outs = {
        "chan_sum": [1, 1, 8, 10],
        "row_max": [1, 10, 8, 1],
        "hw_min": [1, 10],
        "gap_flat": [1, 10],
        "sliced": [1, 4, 4, 3],
        "c13": [1, 2, 8, 10],
        "top_s": [1, 10, 3, 10],
        "soft_w": [1, 10, 5, 10],
        "picked": [1, 2, 8, 10],
        "down": [1, 10, 4, 5],
    }
    graph = helper.make_graph(
        nodes,
        "reductions_and_slices",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 6, 8, 10])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outs.items()],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def concat_gaps() -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    n = helper.make_node
    p = {"a.w": _w(rng, 3, 4, 1, 1), "b.w": _w(rng, 5, 4, 1, 1), "c.w": _w(rng, 2, 4, 3, 3)}
    nodes = [
        n("Conv", ["x", "a.w"], ["a"], name="a"),
        n("Conv", ["x", "b.w"], ["b"], name="b"),
        n("Conv", ["x", "c.w"], ["c"], name="c", pads=[1, 1, 1, 1]),
        n("Concat", ["a", "b", "c"], ["joined"], name="join", axis=1),
    ]
    return _model(nodes, {"x": [1, 4, 5, 7]}, ("joined", [1, 10, 5, 7]), p, opset=18)


def speech_head() -> onnx.ModelProto:
    """A speech-style CNN: a non-image input [1, 40, 50] (features x frames) Unsqueezed to an
    image on the CPU head, convolutions on the GPU, a classifier Reshape [1, C, 1, 1] ->
    [1, C, 1], and a per-feature mean of the input computed on the CPU alone (two outputs)."""
    rng = np.random.default_rng(5)
    n = helper.make_node
    i64 = np.int64
    p = {"w": _w(rng, 8, 1, 3, 3), "ax": np.array([1], i64), "ax23": np.array([2, 3], i64),
         "ax2": np.array([2], i64), "shape": np.array([1, 8, 1], i64)}  # fmt: skip
    nodes = [
        n("Unsqueeze", ["feats", "ax"], ["img"], name="to_image"),
        n("Conv", ["img", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c"], ["r"], name="relu"),
        n("ReduceMean", ["r", "ax23"], ["pooled"], name="pool"),
        n("Reshape", ["pooled", "shape"], ["logits"], name="to_rank3"),
        n("ReduceMean", ["feats", "ax2"], ["feat_mean"], name="feat_mean"),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_head",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 40, 50])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8, 1]),
            helper.make_tensor_value_info("feat_mean", TensorProto.FLOAT, [1, 40, 1]),
        ],  # fmt: skip
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def cpu_conv_resize() -> onnx.ModelProto:
    """Nodes MPS has that follow a CPU node: a grouped strided Conv (with a LeakyRelu the
    fusion pass puts into it) and Resize (nearest at a non-integer scale, linear with
    align_corners) after a 5-D Reshape: a second GPU graph after the CPU's reshapes."""
    rng = np.random.default_rng(6)
    n = helper.make_node
    i64 = np.int64
    p = {"w0": _w(rng, 8, 3, 1, 1), "w1": _w(rng, 6, 4, 3, 3), "b1": _w(rng, 6),
         "s5": np.array([1, 2, 4, 6, 6], i64), "s4": np.array([1, 8, 6, 6], i64),
         "sz1": np.array([1, 6, 5, 7], i64), "sz2": np.array([1, 6, 4, 4], i64)}  # fmt: skip
    nodes = [
        n("Conv", ["x", "w0"], ["a"], name="a"),
        n("Reshape", ["a", "s5"], ["a5"], name="to5d"),
        n("Reshape", ["a5", "s4"], ["a4"], name="to4d"),
        n("Conv", ["a4", "w1", "b1"], ["c"], name="cpu_conv", group=2, strides=[2, 2],
          pads=[1, 0, 1, 2]),
        n("LeakyRelu", ["c"], ["cl"], name="leaky", alpha=0.2),
        n("Resize", ["cl", "", "", "sz1"], ["near"], name="near", mode="nearest"),
        n("Resize", ["cl", "", "", "sz2"], ["lin"], name="lin", mode="linear",
          coordinate_transformation_mode="align_corners"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "cpu_conv_resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [
            helper.make_tensor_value_info("near", TensorProto.FLOAT, [1, 6, 5, 7]),
            helper.make_tensor_value_info("lin", TensorProto.FLOAT, [1, 6, 4, 4]),
        ],  # fmt: skip
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@needs_swift
def test_reductions_slices_and_cpu_tail(sim_dir: Path, tmp_path: Path) -> None:
    model = _side_by_side(
        [reductions_and_slices(), concat_gaps(), speech_head(), cpu_conv_resize()]
    )
    check_against_ort(model, tmp_path)
    where = {p["node"].split("'")[1]: p for p in _placement(tmp_path)}
    # The CPU head: the Unsqueeze of a non-image input runs before the graph and feeds it.
    assert where["m2_to_image"]["on"] == "cpu" and where["m2_conv"]["on"] == "gpu"
    assert where["m2_to_rank3"]["on"] == "gpu"
    # After the CPU's 5-D reshape the Conv runs in a second GPU graph; the Resizes MPS has no
    # node for (nearest at a non-integer scale, align_corners 3 -> 4) in the CPU tail after it.
    for cpu in ("m3_to5d", "m3_to4d", "m3_near", "m3_lin"):
        assert where[cpu]["on"] == "cpu", where[cpu]
    assert where["m3_cpu_conv"]["on"] == "gpu"
    assert "o2e.ConvAct" in where["m3_cpu_conv"]["node"] and "m3_leaky" not in where
    soft = where["m0_soft_w"]
    assert soft["on"] == "cpu" and "feature channels only" in soft["reason"]
    assert where["m0_pick"]["on"] == "cpu" and "gather" in where["m0_pick"]["reason"]
    gpu_nodes = ("m0_chan_sum", "m0_row_max", "m0_hw_min", "m0_slice", "m0_split_h", "m0_down",
                 "m1_join")  # fmt: skip
    for gpu in gpu_nodes:
        assert where[gpu]["on"] == "gpu", where[gpu]
    swift = (tmp_path / "out" / "Sources" / "SideBySide" / "SideBySide.swift").read_text()
    for cls in ("MPSNNReductionFeatureChannelsSumNode", "MPSNNReductionRowMaxNode",
                "MPSNNReductionSpatialMeanNode", "resultImages:", "func cpuSoftmax"):  # fmt: skip
        assert cls in swift, cls


@needs_swift
def test_mps_fusion_options(sim_dir: Path, tmp_path: Path) -> None:
    """MPS runs the shared fuse_activation pass with its options: neurons into convolutions,
    fully connected layers and unfolded BatchNormalization; an activation without an
    MPSCNNNeuronType (Clip from -1), one whose input has another consumer (HardSwish's
    required decomposition x * HardSigmoid(x)) or a producer without a neuron slot (Add)
    stays a node of its own."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    p = {"w": _w(rng, 4, 4, 1, 1), "w2": _w(rng, 4, 4, 1, 1), "lo": np.array(-1, np.float32),
         "hi": np.array(1, np.float32), "s": np.ones(4, np.float32), "b": np.zeros(4, np.float32),
         "m": np.zeros(4, np.float32), "v": np.ones(4, np.float32)}  # fmt: skip
    nodes = [
        n("Conv", ["x", "w"], ["c1"], name="c1"),
        n("Relu", ["c1"], ["r1"], name="r1"),
        n("Conv", ["r1", "w2"], ["c2"], name="c2"),
        n("HardSwish", ["c2"], ["h2"], name="h2"),
        n("Add", ["h2", "x"], ["a"], name="add"),
        n("Relu", ["a"], ["ar"], name="ar"),
        n("BatchNormalization", ["ar", "s", "b", "m", "v"], ["bn"], name="bn"),
        n("Sigmoid", ["bn"], ["bs"], name="bs"),
        n("Conv", ["bs", "w"], ["c3"], name="c3"),
        n("Clip", ["c3", "lo", "hi"], ["y"], name="clip"),
    ]
    model = _model(nodes, {"x": [1, 4, 3, 3]}, ("y", [1, 4, 3, 3]), p)
    g = run_passes(load(_save(model, tmp_path), quiet=True), MPSBackend.required_passes)
    ops = [(nd.name, nd.op_type) for nd in g.nodes]
    assert ops == [("c1", "ConvAct"), ("c2", "Conv"), ("h2/hsig", "HardSigmoid"), ("h2/mul", "Mul"), ("add", "Add"),
                   ("ar", "Relu"), ("bn", "BatchNormalizationAct"), ("c3", "Conv"),
                   ("clip", "Clip")], ops  # fmt: skip
    check_against_ort(model, tmp_path)


def test_gpu_only_refuses_the_cpu_tail(tmp_path: Path) -> None:
    """--gpu-only: every node the CPU tail would take is refused, with the MPS reason."""
    problems = _unsupported(reductions_and_slices(), tmp_path, gpu_only=True)
    text = "\n".join(problems)
    assert len(problems) == 2 and "'soft_w'" in text and "'pick'" in text, problems
    assert "MPSCNNSoftMax normalizes over feature channels only" in text
    backend = MPSBackend()
    graph = run_passes(
        load(_save(reductions_and_slices(), tmp_path), quiet=True), backend.required_passes
    )
    with pytest.raises(Onnx2EdgeError, match="'soft_w'"):
        backend.emit(graph, tmp_path / "x", {"gpu_only": True})


def test_convert_prints_placement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`convert` names each CPU node and why; --gpu-only exits 2 with one line, writing nothing."""
    from onnx2edge.cli import main

    model = _save(reductions_and_slices(), tmp_path)
    assert main(["convert", str(model), "--target", "mps", "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "nodes on the GPU (MPSNNGraph), 2 on the CPU (Swift)" in out
    assert "cpu: node 'soft_w' (op Softmax, opset 18): softmax over axis 3" in out
    code = main(["convert", str(model), "--target", "mps", "-o", str(tmp_path / "b"), "--gpu-only"])
    err = capsys.readouterr().err
    assert code == 2 and "'soft_w'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


# ------------------------------------------------------------------------------------------
# Segmented plans: GPU graphs and Swift CPU segments in any order (issue 26, item 5)
# ------------------------------------------------------------------------------------------


def audio_segments() -> onnx.ModelProto:
    """An audio model that needs every kind of segment: a reflect Pad of the [1, C, T] input and
    an Unsqueeze to an image (CPU, before the first graph); a strided Conv + Relu and a 1x1 Conv
    (GPU graph 1); Reshape / Transpose to time-major and a bidirectional LSTM, Transpose and
    Reshape back to an image, a reverse GRU (linear_before_reset) beside it (CPU, between the
    graphs); a Conv whose result is added to graph 1's 1x1 Conv, an image passed from graph 1
    to graph 2 as it is (GPU graph 2); per-frame LogSoftmax (CPU, after the last graph); and
    constant / edge Pads of the input as outputs of their own."""
    rng = np.random.default_rng(11)
    n = helper.make_node
    H, G = 10, 8

    def i64(*v: int) -> np.ndarray:
        return np.array(v, np.int64)

    p = {
        "pads": i64(0, 0, 2, 0, 0, 2), "pads_c": i64(0, 1, 3, 0, 0, 1), "ax2": i64(2),
        "w1": _w(rng, 12, 8, 1, 3), "b1": _w(rng, 12), "w3": _w(rng, 6, 12, 1, 1),
        "s3": i64(1, 12, 11), "W": _w(rng, 2, 4 * H, 12), "R": _w(rng, 2, 4 * H, H),
        "B": _w(rng, 2, 8 * H), "s4": i64(1, 20, 1, 11), "w2": _w(rng, 6, 20, 1, 1),
        "s6": i64(1, 6, 11), "Wg": _w(rng, 1, 3 * G, 12), "Rg": _w(rng, 1, 3 * G, G),
        "Bg": _w(rng, 1, 6 * G), "cval": np.array(0.5, np.float32),
    }  # fmt: skip
    nodes = [
        n("Pad", ["x", "pads"], ["xp"], name="reflect_pad", mode="reflect"),
        n("Unsqueeze", ["xp", "ax2"], ["img"], name="to_image"),
        n("Conv", ["img", "w1", "b1"], ["c1"], name="conv1", strides=[1, 2]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w3"], ["z"], name="skip_conv"),
        n("Reshape", ["r1", "s3"], ["seq"], name="to_seq"),
        n("Transpose", ["seq"], ["tbf"], name="time_major", perm=[2, 0, 1]),
        n("LSTM", ["tbf", "W", "R", "B"], ["y", "yh"], name="bilstm", hidden_size=H,
          direction="bidirectional"),
        n("Transpose", ["y"], ["yt"], name="y_to_chw", perm=[2, 1, 3, 0]),
        n("Reshape", ["yt", "s4"], ["img2"], name="to_image2"),
        n("Conv", ["img2", "w2"], ["c2"], name="conv2"),
        n("Add", ["c2", "z"], ["c2z"], name="skip_add"),
        n("Reshape", ["c2z", "s6"], ["c2s"], name="to_rank3"),
        n("Transpose", ["c2s"], ["c2t"], name="frames", perm=[0, 2, 1]),
        n("LogSoftmax", ["c2t"], ["logits"], name="log_softmax", axis=-1),
        n("GRU", ["tbf", "Wg", "Rg", "Bg"], ["", "gh"], name="gru", hidden_size=G,
          direction="reverse", linear_before_reset=1),
        n("Pad", ["x", "pads_c", "cval"], ["xc"], name="const_pad", mode="constant"),
        n("Pad", ["x", "pads"], ["xe"], name="edge_pad", mode="edge"),
    ]  # fmt: skip
    outs = {"logits": [1, 11, 6], "yh": [2, 1, H], "gh": [1, 1, G], "xc": [1, 9, 24],
            "xe": [1, 8, 24]}  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "audio_segments",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outs.items()],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def cpu_ops() -> onnx.ModelProto:
    """The CPU segments' other ops beside a GPU Conv: per-axis uint8 and per-tensor int8
    QuantizeLinear / DequantizeLinear, DynamicQuantizeLinear into MatMulInteger on a 3-D tensor
    and into ConvInteger (uint8 weights) of the GPU's Conv, Less / Greater / And / Not / Where /
    Cast, an RNN (LeakyRelu) with sequence_lens (one row empty), a bidirectional LSTM with
    peepholes, clip and initial states from graph inputs, Pad in wrap mode and with axes
    (opset 19)."""
    rng = np.random.default_rng(12)
    n = helper.make_node
    H = 5
    p = {
        "wc": _w(rng, 4, 3, 3, 3),
        "qs": np.array([0.02, 0.05, 0.1, 0.03], np.float32),
        "qz": np.array([3, 128, 0, 255], np.uint8),
        "qs8": np.array(0.04, np.float32),
        "qz8": np.array(-5, np.int8),
        "Wr": _w(rng, 1, H, 6),
        "Rr": _w(rng, 1, H, H),
        "Br": _w(rng, 1, 2 * H),
        "seq": np.array([4, 2, 0], np.int32),
        "Wl": _w(rng, 2, 4 * H, 6),
        "Rl": _w(rng, 2, 4 * H, H),
        "Bl": _w(rng, 2, 8 * H),
        "Pl": _w(rng, 2, 3 * H),
        "half": np.array(0.5, np.float32),
        "pads_w": np.array([0, 1, 2, 0, 2, 1], np.int64),
        "wq": rng.integers(-60, 61, (6, 7)).astype(np.int8),  # |w| < 64: no u8 x s8
        "wqz": np.array(3, np.int8),  # pair saturation in onnxruntime's AVX2 kernel
        "wqs": np.array(0.01, np.float32),
        "cw": rng.integers(0, 256, (2, 4, 2, 2)).astype(np.uint8),
        "cwz": np.array(131, np.uint8),
        "pads_2": np.array([1, 3], np.int64),
        "axes_2": np.array([2], np.int64),
    }
    nodes = [
        n("Conv", ["img", "wc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        n("QuantizeLinear", ["c", "qs", "qz"], ["cq"], name="quant_axis", axis=1),
        n("DequantizeLinear", ["cq", "qs", "qz"], ["cdq"], name="dequant_axis", axis=1),
        n("QuantizeLinear", ["seqx", "qs8", "qz8"], ["sq"], name="quant_s8"),
        n("DequantizeLinear", ["sq", "qs8", "qz8"], ["sdq"], name="dequant_s8"),
        n("Less", ["seqx", "half"], ["lt"], name="lt"),
        n("Greater", ["seqx", "sdq"], ["gt"], name="gt"),
        n("And", ["lt", "gt"], ["both"], name="both"),
        n("Not", ["both"], ["neither"], name="neither"),
        n("Where", ["neither", "seqx", "sdq"], ["sel"], name="select"),
        n("Cast", ["both"], ["bothf"], name="cast_f", to=TensorProto.FLOAT),
        n("Add", ["sel", "bothf"], ["mixed"], name="mixed"),
        n("Transpose", ["mixed"], ["tm"], name="time_major", perm=[1, 0, 2]),
        n(
            "RNN",
            ["tm", "Wr", "Rr", "Br", "seq"],
            ["ry", "rh"],
            name="rnn",
            hidden_size=H,
            activations=["LeakyRelu"],
            activation_alpha=[0.1],
        ),
        n(
            "LSTM",
            ["tm", "Wl", "Rl", "Bl", "", "h0", "c0", "Pl"],
            ["ly", "lh", "lc"],
            name="lstm",
            hidden_size=H,
            direction="bidirectional",
            clip=2.5,
        ),
        n("DynamicQuantizeLinear", ["seqx"], ["xq", "xs", "xz"], name="dyn_quant"),
        n("MatMulInteger", ["xq", "wq", "xz", "wqz"], ["mi"], name="matmul_int"),
        n("Cast", ["mi"], ["mif"], name="mi_float", to=TensorProto.FLOAT),
        n("Mul", ["xs", "wqs"], ["ms"], name="scale"),
        n("Mul", ["mif", "ms"], ["mm"], name="rescale"),
        n("DynamicQuantizeLinear", ["c"], ["cq8", "cs", "cz"], name="dyn_quant_img"),
        n("ConvInteger", ["cq8", "cw", "cz", "cwz"], ["ci"], name="conv_int", pads=[0, 1, 1, 0]),
        n("Cast", ["ci"], ["cif"], name="ci_float", to=TensorProto.FLOAT),
        n("Pad", ["sdq", "pads_w"], ["wrapped"], name="wrap_pad", mode="wrap"),
        n("Pad", ["sdq", "pads_2", "", "axes_2"], ["axes_pad"], name="axes_pad", mode="reflect"),
    ]
    outs = {
        "cdq": [1, 4, 5, 6],
        "ry": [4, 1, 3, H],
        "rh": [1, 3, H],
        "ly": [4, 2, 3, H],
        "lh": [2, 3, H],
        "lc": [2, 3, H],
        "wrapped": [3, 7, 9],
        "axes_pad": [3, 4, 10],
        "mm": [3, 4, 7],
        "cif": [1, 2, 5, 6],
    }
    graph = helper.make_graph(
        nodes,
        "cpu_ops",
        [
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 5, 6]),
            helper.make_tensor_value_info("seqx", TensorProto.FLOAT, [3, 4, 6]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 3, H]),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, 3, H]),
        ],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outs.items()],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def test_segmented_plan_order(tmp_path: Path) -> None:
    """The plan: CPU segment 0, graph 1, CPU segment 2, graph 2 (index 3), CPU segment 4; the
    graph-1 image graph 2 reads is exported, as are the images the CPU reads; --gpu-only
    refuses the input only a CPU segment can take."""
    graph = run_passes(
        load(_save(audio_segments(), tmp_path), quiet=True), MPSBackend.required_passes
    )
    low = lower(graph)
    assert [s.index for s in low.gpu_segments] == [1, 3]
    first, second = low.gpu_segments
    assert set(first.exports) == {"r1", "z"} and list(second.exports) == ["c2z"]
    assert {n for n, _, _ in second.sources} == {"img2", "z"}
    assert [n for n, _, _ in low.uploads] == ["img"]
    assert sorted(low.cpu_segments) == [0, 2, 4]
    seg_of_line = {k: " ".join(lines) for k, lines in low.cpu_segments.items()}
    assert "cpuPad(" in seg_of_line[0] and "cpuRecurrent(.lstm" in seg_of_line[2]
    assert "cpuRecurrent(.gru" in seg_of_line[2] and "cpuSoftmax(" in seg_of_line[4]
    assert "(between GPU graphs 1 and 2)" in seg_of_line[2] and "(tail)" in seg_of_line[4]
    gpu_only = "\n".join(map(str, lower(graph, check_only=True, cpu=False).refusals))
    # the [1, C, T] input is no image; downstream only ops MPS has no node for are named
    assert "graph input 'x'" in gpu_only and "'bilstm'" in gpu_only and "'conv2'" not in gpu_only


@needs_swift
def test_segments_head_graph_middle_graph_tail(sim_dir: Path, tmp_path: Path) -> None:
    """audio_segments() and cpu_ops() (one build) against onnxruntime: Pad on a [1, C, T] tensor
    and the LSTM after a CPU-computed Reshape (the refusals of issue 26's real models) run in
    CPU segments, the Conv after them in a second MPSNNGraph."""
    check_against_ort(_side_by_side([audio_segments(), cpu_ops()]), tmp_path)
    where = {p["node"].split("'")[1]: p["on"] for p in _placement(tmp_path)}
    for node in ("reflect_pad", "to_image", "to_seq", "bilstm", "gru", "to_image2",
                 "log_softmax", "const_pad", "edge_pad"):  # fmt: skip
        assert where[f"m0_{node}"] == "cpu", node
    for node in ("conv1", "skip_conv", "conv2", "skip_add"):
        assert where[f"m0_{node}"] == "gpu", node
    assert where["m1_conv"] == "gpu" and where["m1_lstm"] == where["m1_rnn"] == "cpu"
    swift = (tmp_path / "out" / "Sources" / "SideBySide" / "SideBySide.swift").read_text()
    assert "self.graphs = [graph, graph2]" in swift
    assert swift.count("guard runGraph(graphs[") == 2
    # graph 1's Conv reaches graph 2 as an MPSImage, not through the CPU
    assert 'gpuResults["m0_z"]' not in swift and "graph2_m0_z = MPSNNImageNode" in swift


def _fixed_shapes(path: Path, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    from onnx2edge.frontend.loader import fix_input_shapes

    return fix_input_shapes(onnx.load(path), shapes, quiet=True)


@needs_swift
@pytest.mark.skipif(
    not __import__("onnx2edge.runtime", fromlist=["x"]).ort_integer_products_exact(),
    reason="onnxruntime's u8 x s8 products saturate on this CPU (AVX2 without VNNI): "
    "the reference itself is off",
)
def test_quantize_dynamic_fixtures_in_cpu_segments(sim_dir: Path, tmp_path: Path) -> None:
    """tests/fixtures/quantized (torch + onnxruntime's quantize_dynamic) beside a CNN, so a GPU
    graph exists: DynamicQuantizeLinear, MatMulInteger on [batch, time, features], ConvInteger
    (a Conv1d), Cast, the float GRU and the DynamicQuantizeLSTMs run in Swift. The integer ops
    are exact (gru_linear matches onnxruntime to float rounding); MPS runs DynamicQuantizeLSTM
    as the float LSTM on dequantized weights (lower_dynamic_quantize_lstm), a quantization step
    of X and h per step from onnxruntime's: those outputs are held to two uint8 steps of their
    range."""
    q = HERE / "fixtures" / "quantized"
    parts = [
        _fixed_shapes(q / "bilstm_crnn.onnx", {"feats": (1, 16, 16)}),
        _fixed_shapes(q / "lstm3_embedder.onnx", {"mels": (1, 20, 24)}),
        _fixed_shapes(q / "gru_linear.onnx", {"x": (1, 10, 12)}),
        _fixed_shapes(
            q / "lstm_per_channel.onnx", {"x": (9, 1, 10), "h0": (1, 1, 16), "c0": (1, 1, 16)}
        ),
        tiny_cnn(),
    ]
    model = _side_by_side(parts)
    backend, out = convert(model, tmp_path)
    rng = np.random.default_rng(7)
    feeds = {
        vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for vi in model.graph.input
    }
    got = backend.run(out, feeds, {})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    exact = {"m2_y", "m4_prob"}  # no DynamicQuantizeLSTM on their way
    for vi, w in zip(model.graph.output, want, strict=True):
        err = float(np.abs(got[vi.name] - w).max()) / float(np.abs(w).max())
        assert err <= (TOLERANCE if vi.name in exact else 2 / 255), (vi.name, err)
    where = {p["node"]: p["on"] for p in _placement(tmp_path)}
    ops = {
        label.split("(op ")[1].split(",")[0]
        for label, on in where.items()
        if on == "cpu" and "(op " in label
    }
    for op in ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "Cast", "LSTM", "GRU"):
        assert op in ops, (op, ops)
    assert any(on == "gpu" for on in where.values())


# ------------------------------------------------------------------------------------------
# Refusals
# ------------------------------------------------------------------------------------------


def _unsupported(model: onnx.ModelProto, tmp_path: Path, *, gpu_only: bool = False) -> list[str]:
    """What `convert` refuses; `gpu_only` as with --gpu-only (no CPU tail)."""
    backend = MPSBackend()
    graph = run_passes(load(_save(model, tmp_path), quiet=True), backend.required_passes)
    if gpu_only:
        return [str(r) for r in lower(graph, check_only=True, cpu=False).refusals]
    return backend.unsupported(graph)


def test_refuses_lstm(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    hidden = 4
    p = {"W": _w(rng, 1, 4 * hidden, 3), "R": _w(rng, 1, 4 * hidden, hidden)}
    nodes = [helper.make_node("LSTM", ["input", "W", "R"], ["y"], name="lstm1", hidden_size=hidden)]
    model = _model(nodes, {"input": [5, 1, 3]}, ("y", [5, 1, 1, hidden]), p)
    problems = _unsupported(model, tmp_path, gpu_only=True)
    assert any(
        "'lstm1'" in p and "LSTM" in p and "opset 17" in p and "recurrent" in p for p in problems
    ), problems
    # The CPU runs the LSTM in Swift, but then nothing would run on the GPU.
    # The record names what to do instead: the C backend emits LSTM (Refusal.fix).
    problems = _unsupported(model, tmp_path)
    assert problems == [
        "no node runs on the GPU: MPSNNGraph needs at least one image node; this model is not a "
        "convolutional network over [1, C, H, W] images; "
        "onnx2edge convert MODEL --target c -o OUT/ (the C backend emits LSTM)"
    ], problems


def test_refuses_attention(tmp_path: Path) -> None:
    """MatMul of two activations + Softmax + Transpose: every offending node is named."""
    rng = np.random.default_rng(0)
    p = {"wq": _w(rng, 16, 16), "wk": _w(rng, 16, 16), "wv": _w(rng, 16, 16)}
    n = helper.make_node
    nodes = [
        n("MatMul", ["input", "wq"], ["q"], name="q_proj"),
        n("MatMul", ["input", "wk"], ["k"], name="k_proj"),
        n("MatMul", ["input", "wv"], ["v"], name="v_proj"),
        n("Transpose", ["k"], ["kt"], name="k_transpose", perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["s"], name="scores"),
        n("Softmax", ["s"], ["a"], name="attn_softmax", axis=-1),
        n("MatMul", ["a", "v"], ["output"], name="context"),
    ]
    model = _model(nodes, {"input": [1, 6, 16]}, ("output", [1, 6, 16]), p)
    text = "\n".join(_unsupported(model, tmp_path, gpu_only=True))
    for node in ("k_transpose", "scores", "context"):
        assert f"'{node}'" in text, text
    assert "graph input 'input'" in text and "MatMul of two run-time tensors" in text
    # The CPU tail could run all of it, but then it is not an MPSNNGraph model.
    assert _unsupported(model, tmp_path) == [
        "no node runs on the GPU: MPSNNGraph needs at least one image node; this model is not a "
        "convolutional network over [1, C, H, W] images; "
        "onnx2edge convert MODEL --target c -o OUT/ (the C backend emits every op)"
    ]


@needs_swift
def test_emit_refuses_with_one_error(tmp_path: Path) -> None:
    backend = MPSBackend()
    graph = run_passes(load(_save(op_soup(), tmp_path), quiet=True), backend.required_passes)
    bad = graph.replace(
        nodes=tuple(nd.replace(op_type="Gather") if nd.name == "c1" else nd for nd in graph.nodes)
    )
    with pytest.raises(Onnx2EdgeError, match="'c1'.*Gather"):
        backend.emit(bad, tmp_path / "x", {})


# ------------------------------------------------------------------------------------------
# Generated files: golden, deterministic, self-described
# ------------------------------------------------------------------------------------------


def _emit_files(model: onnx.ModelProto, folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    _, out = convert(model, folder)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("build", [tiny_cnn, "mnist_mlp"], ids=["tiny_cnn", "mnist_mlp"])
def test_golden_swift(tmp_path: Path, build: Callable[[], onnx.ModelProto] | str) -> None:
    """Regenerate with ONNX2EDGE_UPDATE_GOLDEN=1 and review the diff like code."""
    if isinstance(build, str):
        from onnx2edge.bench.zoo import build as zoo_build

        model, name = zoo_build(build), build
    else:
        model, name = build(), build.__name__
    files = _emit_files(model, tmp_path / "a")
    for rel, data in files.items():
        if rel.endswith((".swift", ".md")) or rel.endswith("Package.swift"):
            check_golden(GOLDEN / name / rel, data)


def test_output_is_deterministic(tmp_path: Path) -> None:
    first = _emit_files(op_soup(), tmp_path / "a")
    second = _emit_files(op_soup(), tmp_path / "b")
    assert first == second
    assert {"Package.swift", "README.md", "Sources/OpSoup/OpSoup.swift", "Sources/OpSoup/weights.bin",
            "Sources/OpSoup/weights.json"} <= set(first)  # fmt: skip


def test_package_contents(tmp_path: Path) -> None:
    files = _emit_files(tiny_cnn(), tmp_path / "a")
    swift = files["Sources/TinyCnn/TinyCnn.swift"].decode()
    assert "init?(device: MTLDevice)" in swift and "func predict(" in swift
    assert "MPSCNNConvolutionDataSource" in swift and "class ONNXPadding" in swift
    assert "// ONNX node 'conv' (Conv)" in swift  # BN was folded into it by fold_batchnorm
    assert "fusedNeuronDescriptor .reLU" in swift
    readme = files["README.md"].decode()
    assert "CPU model" in readme and "not* run on Apple hardware" in readme
    assert "platforms: [.iOS(.v13), .macOS(.v10_15)]" in files["Package.swift"].decode()


def test_run_without_swiftc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _emit_files(tiny_cnn(), tmp_path / "a")
    monkeypatch.setattr(mps_build.shutil, "which", lambda name: None)
    monkeypatch.setattr(mps_build, "FALLBACK_SWIFTC", tmp_path / "no-swiftc")
    with pytest.raises(Onnx2EdgeError, match="needs swiftc"):
        MPSBackend().run(tmp_path / "a" / "out", {"input": np.zeros((1, 3, 8, 10), np.float32)}, {})


@needs_swift
def test_run_relative_folder_and_cache(
    sim_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`onnx2edge run out/` passes a relative folder; the second run reuses the binary."""
    _emit_files(tiny_cnn(), tmp_path / "a")
    monkeypatch.chdir(tmp_path / "a")
    x = {"input": np.ones((1, 3, 8, 10), np.float32)}
    first = MPSBackend().run(Path("out"), x, {})
    builds = list((tmp_path / "a" / "out" / mps_build.BUILD_DIR).iterdir())
    second = MPSBackend().run(Path("out"), x, {})
    assert (
        builds == list((tmp_path / "a" / "out" / mps_build.BUILD_DIR).iterdir())
        and len(builds) == 1
    )
    np.testing.assert_array_equal(first["prob"], second["prob"])


# ------------------------------------------------------------------------------------------
# The sim is Apple's API (issue 28): its declarations are the table, and the table's rules hold
# ------------------------------------------------------------------------------------------


def _sim_api() -> dict[tuple[str, str], str | None]:
    from onnx2edge.backends.mps.swift_decls import public_api

    found: dict[tuple[str, str], str | None] = {}
    for module in ("Metal", "MetalPerformanceShaders"):
        for d in public_api(sorted((mps_build.SIM_DIR / module).glob("*.swift"))):
            found[(d.owner, d.signature)] = d.ios
    return found


def test_sim_declares_exactly_the_apple_table() -> None:
    """Every public declaration of the sim is a row of apple_api.TABLE and every row is declared;
    an @available the sim writes is the table's, and members newer than the deployment target
    carry theirs (so a reader of the sim sees it)."""
    from onnx2edge.backends.mps import apple_api

    table = {(e.owner, e.signature): e for e in apple_api.entries()}
    sim = _sim_api()
    assert sorted(set(sim) - set(table)) == [], "declared by the sim, not in apple_api.TABLE"
    assert sorted(set(table) - set(sim)) == [], "in apple_api.TABLE, not declared by the sim"
    wrong = {k: (ios, table[k].ios) for k, ios in sim.items() if ios and ios != table[k].ios}
    assert wrong == {}, "sim @available differs from the table"
    for e in apple_api.newer_than_deployment():
        assert sim[(e.owner, e.signature)] == e.ios, e
    assert all(e.header.endswith(".h") or "/" in e.header for e in table.values())


def test_generated_code_respects_availability(tmp_path: Path) -> None:
    """Members newer than Package.swift's iOS 13 / macOS 10.15 appear in generated code only as
    implementations of optional protocol methods (an older OS never calls them); build_model
    checks this on every package it compiles, since swiftc on Linux ignores @available(iOS)."""
    from onnx2edge.backends.mps import apple_api

    assert [e.signature for e in apple_api.newer_than_deployment()] == [
        "optional func kernelWeightsDataType() -> MPSDataType"
    ]
    for i, build in enumerate((tiny_cnn, op_soup)):
        files = _emit_files(build(), tmp_path / str(i))
        swift = next(
            v.decode()
            for k, v in files.items()
            if k.startswith("Sources/") and k.endswith(".swift")
        )
        assert "func kernelWeightsDataType()" in swift
        assert mps_build.availability_problems(swift) == []
    called = "let t = source.kernelWeightsDataType()\n"
    assert "iOS 14.0 / macOS 11.0" in mps_build.availability_problems(called)[0]


def _typecheck(sim_dir: Path, folder: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = folder / "check.swift"
    path.write_text(source)
    return subprocess.run(
        [mps_build.swiftc(), "-typecheck", "-swift-version", "5", "-I", str(sim_dir), str(path)],
        capture_output=True, text=True,
    )  # fmt: skip


@needs_swift
def test_sim_rejects_what_apples_sdk_rejects(sim_dir: Path, tmp_path: Path) -> None:
    """The two errors Apple's SDK gave every package before issue 28, and the model's own
    members, which generated code must not see."""
    head = "import Foundation\nimport MetalPerformanceShaders\n"
    optional_neuron = head + (
        "let d = MPSCNNConvolutionDescriptor(kernelWidth: 1, kernelHeight: 1, inputFeatureChannels: 1,"
        " outputFeatureChannels: 1)\nlet n: MPSNNNeuronDescriptor? = nil\nd.fusedNeuronDescriptor = n\n"
    )
    r = _typecheck(sim_dir, tmp_path, optional_neuron)
    assert r.returncode != 0 and "fusedNeuronDescriptor" in r.stderr, r.stderr
    no_coder = head + (
        "final class P: NSObject, MPSCNNInstanceNormalizationDataSource {\n"
        "    let numberOfFeatureChannels = 1\n"
        "    func gamma() -> UnsafeMutablePointer<Float>? { nil }\n"
        "    func beta() -> UnsafeMutablePointer<Float>? { nil }\n"
        "    func label() -> String? { nil }\n"
        "    func copy(with zone: NSZone? = nil) -> Any { self }\n}\n"
    )
    r = _typecheck(sim_dir, tmp_path, no_coder)
    assert r.returncode != 0 and "init(coder:)" in r.stderr, r.stderr
    internals = head + "let d = MTLCreateSystemDefaultDevice()!\nlet s = (d as! SimDevice).name\n"
    r = _typecheck(sim_dir, tmp_path, internals)
    assert r.returncode != 0 and "SimDevice" in r.stderr, r.stderr
    apple_names = head + (
        "let p = MPSNNDefaultPadding(method: [.centered, .topLeft, .sizeSame])\n"
        "let t: MPSDataType? = MPSDataType(rawValue: 7)\n"
        "let u = MPSImageDescriptor(channelFormat: .float32, width: 1, height: 1, featureChannels: 1,"
        " numberOfImages: 1, usage: [.shaderRead])\n"
        "let node = MPSNNImageNode(handle: nil)\nnode.imageAllocator = MPSImage.defaultAllocator()\n"
    )
    r = _typecheck(sim_dir, tmp_path, apple_names)
    assert r.returncode == 0, r.stderr


@needs_swift
def test_cpu_reads_need_permanent_synchronised_images(sim_dir: Path, tmp_path: Path) -> None:
    """An exported image is an MPSTemporaryImage unless given MPSImage's allocator, and a
    GPU-written image must be synchronised before readBytes: the model stops on both."""
    source = """import Foundation
import MetalPerformanceShaders
let device = MTLCreateSystemDefaultDevice()!
let src = MPSNNImageNode(handle: nil)
let a = MPSCNNNeuronLinearNode(source: src, a: 1, b: 0)
let b = MPSCNNNeuronLinearNode(source: src, a: 2, b: 0)
if CommandLine.arguments[1] == "allocator" { b.resultImage.imageAllocator = MPSImage.defaultAllocator() }
var needed = [ObjCBool](repeating: true, count: 2)
let graph = MPSNNGraph(device: device, resultImages: [a.resultImage, b.resultImage], resultsAreNeeded: &needed)!
let input = MPSImage(device: device, imageDescriptor: MPSImageDescriptor(channelFormat: .float32, width: 1, height: 1, featureChannels: 1))
let buffer = device.makeCommandQueue()!.makeCommandBuffer()!
let exported = NSMutableArray()
let first = graph.encode(to: buffer, sourceImages: [input], sourceStates: nil, intermediateImages: exported, destinationStates: nil)!
if CommandLine.arguments[1] != "nosync" { first.synchronize(on: buffer) }
let extra = exported.object(at: 0) as! MPSImage
if CommandLine.arguments[1] == "allocator" { extra.synchronize(on: buffer) }
buffer.commit()
var v = [Float](repeating: 0, count: 1)
v.withUnsafeMutableBytes { first.readBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0) }
v.withUnsafeMutableBytes { extra.readBytes($0.baseAddress!, dataLayout: .featureChannelsxHeightxWidth, imageIndex: 0) }
print("ok")
"""
    (tmp_path / "main.swift").write_text(source)
    exe = tmp_path / "reads"
    subprocess.run(
        [mps_build.swiftc(), *mps_build.SWIFT_FLAGS, "-I", str(sim_dir), "-L", str(sim_dir),
         "-lMetalPerformanceShaders", "-lMetal", str(tmp_path / "main.swift"), "-o", str(exe)],
        check=True, capture_output=True,
    )  # fmt: skip
    runs = {
        m: subprocess.run([str(exe), m], capture_output=True, text=True)
        for m in ("allocator", "temporary", "nosync")
    }
    assert runs["allocator"].stdout.strip() == "ok", runs["allocator"].stderr
    assert runs["temporary"].returncode != 0 and "MPSTemporaryImage" in runs["temporary"].stderr
    assert runs["nosync"].returncode != 0 and "synchronize(on:)" in runs["nosync"].stderr


def test_lrn_even_size_refused_with_reason() -> None:
    """MPSCNNNormalization.h's window differs from ONNX's for even sizes: refused, saying why."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", size=2)
    model = helper.make_model(
        helper.make_graph([node], "lrn", [x], [y]), opset_imports=[helper.make_opsetid("", 13)]
    )
    backend = MPSBackend()
    graph = run_passes(load(model, quiet=True), backend.required_passes)
    problems = backend.unsupported(graph)
    assert len(problems) == 1 and "even size 2" in problems[0] and "[k-1, k+0]" in problems[0], (
        problems
    )


@needs_swift
def test_fp16_models_float16_convolutions_and_keeps_transpose_float32(
    sim_dir: Path, tmp_path: Path
) -> None:
    """--fp16: the data sources say kernelWeightsDataType .float16 and the sim computes those
    convolutions in float16 (error well above float32's), while the transposed convolution of
    op_soup keeps float32 weights (MPSCNNConvolutionTranspose takes nothing else)."""
    for sub in ("f32", "f16", "soup"):
        (tmp_path / sub).mkdir()
    full = check_against_ort(tiny_cnn(), tmp_path / "f32")
    half = check_against_ort(tiny_cnn(), tmp_path / "f16", tolerance=5e-3, fp16=True)
    assert half > 10 * full and half > 1e-4, (half, full)
    check_against_ort(op_soup(), tmp_path / "soup", tolerance=5e-3, fp16=True)
    manifest = (tmp_path / "soup" / "out" / "Sources" / "OpSoup" / "weights.json").read_text()
    import json

    layers = json.loads(manifest)["layers"]
    kinds = {
        layer["kind"]: layer["tensors"]["weights"]["dtype"]
        for layer in layers
        if "weights" in layer["tensors"]
    }
    assert kinds["convolution transpose"] == "float32" and "float16" in kinds.values(), kinds
    swift = (tmp_path / "soup" / "out" / "Sources" / "OpSoup" / "OpSoup.swift").read_text()
    assert "weightsDataType: .float32)" in swift and "func kernelWeightsDataType()" in swift


@needs_swift
def test_verify_says_the_gpu_part_ran_on_the_cpu_model(sim_dir: Path, tmp_path: Path) -> None:
    """`verify --target mps` never prints a bare PASS: text and --json say what ran."""
    from onnx2edge.api import verify

    report = verify(_save(tiny_cnn(), tmp_path), target="mps")
    assert report.ok
    last = report.format().splitlines()[-1]
    assert last.startswith("PASS: target mps, ran on a CPU model of MPS (sim)"), last
    assert "not Apple hardware" in last
    assert "CPU model" in report.as_dict()["ran_on"]


@needs_swift
def test_mish_decomposed_matches_onnxruntime(sim_dir: Path, tmp_path: Path) -> None:
    """No Mish neuron: the required decompose_mish pass leaves softPlus and tanH neurons and a
    multiplication node; the CPU model of MPS runs them against onnxruntime's Mish."""
    w = np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Mish", ["c"], ["y"], name="mish"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    check_against_ort(model, tmp_path)
    swift = "".join(p.read_text() for p in (tmp_path / "out" / "Sources").rglob("*.swift"))
    assert "with: .softPlus, a: 1.0, b: 1.0" in swift and "MPSCNNNeuronTanHNode" in swift
    assert "MPSNNMultiplicationNode" in swift


@needs_swift
def test_gemm_attributes_on_gpu_and_cpu(sim_dir: Path, tmp_path: Path) -> None:
    """Gemm's transB, alpha, beta and a one-value C on MPSCNNFullyConnected, then transA (no
    GPU form: the activation would be transposed) in the Swift CPU tail, both read as
    semantics' gemm_attrs / gemm_dims say; every value against onnxruntime."""
    rng = np.random.default_rng(3)
    p = {
        "w1": _w(rng, 6, 8), "c1": np.array([0.25], np.float32), "shape": np.array([6, 1]),
        "w2": _w(rng, 3, 6), "c2": _w(rng, 1, 3),
    }  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "w1", "c1"], ["h"], name="fc_gpu", transB=1, alpha=0.5, beta=2.0),
        n("Reshape", ["h", "shape"], ["hc"], name="to_column"),
        n("Gemm", ["hc", "w2", "c2"], ["y"], name="fc_cpu", transA=1, transB=1, alpha=1.5, beta=-1.0),
    ]  # fmt: skip
    check_against_ort(_model(nodes, {"x": [1, 8]}, ("y", [1, 3]), p, name="gemms"), tmp_path)
    where = {q["node"].split("'")[1]: q["on"] for q in _placement(tmp_path)}
    assert where["fc_gpu"] == "gpu" and where["fc_cpu"] == "cpu", where
