"""Small microcontroller-class models built with onnx.helper (issue 31), float and int8.

- `two_head_mlp`: two inputs, two outputs (the harness's I/O), Gemm + Relu + Softmax.
- `digits_cnn`: an 8x8 digits CNN (conv 3x3 -> conv 3x3 / 2 -> FC 10).
- `ds_cnn`: a keyword-spotting DS-CNN in the MLPerf Tiny layout on 49x10 MFCCs: conv 10x4 / 2
  ("same" padding) to 64 channels, 4 x (depthwise 3x3 + Relu, pointwise 1x1 + Relu),
  AveragePool over the 25x5 map, FC 12.
- `vww_mobilenet`: visual wake words, MobileNetV1 0.25 on 96x96x3 (MLPerf Tiny): conv 3x3 / 2 to
  8 channels, 13 depthwise-separable blocks (ReLU6 = Clip(0, 6), TF "same" padding: stride 2
  pads bottom / right), average pool 3x3, FC 2.
- `resnet8`: MLPerf Tiny's image classifier on 32x32x3: conv 3x3 16, three residual stages of
  16 / 32 / 64 channels (two 3x3 convs; stages 2 and 3 stride 2 with a 1x1 / 2 shortcut),
  average pool 8x8, FC 10.
- `ad_autoencoder`: MLPerf Tiny's anomaly-detection autoencoder on 640 log-mel features:
  FC 640 -> 128 -> 128 -> 128 -> 128 -> 8 -> 128 -> 128 -> 128 -> 128 -> 640, each hidden
  layer with BatchNorm + ReLU; the BatchNorms are folded into the FC weights as at deployment
  (a Gemm + Relu per layer).
BatchNorms of the CNNs are likewise folded into the convolutions' weights and biases.
`quantized` makes the int8 QDQ copy with the project's own `quantize` (onnxruntime's
quantize_static, int8 activations, per-channel weights) from seeded random calibration inputs.
Weights are seeded random: the tests compare with onnxruntime, accuracy is not the point.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from conftest import make_model, save, tensor, vi


def _w(rng: np.random.Generator, *shape: int, k: float | None = None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    scale = k if k is not None else (2.0 / fan_in) ** 0.5
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def two_head_mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(310)
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
        helper.make_node("Gemm", ["ab", "W1", "B1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "W2", "B2"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
        helper.make_node("Gemm", ["r", "W3"], ["aux"]),
    ]
    inits = [
        tensor("W1", _w(rng, 24, 20)),
        tensor("B1", _w(rng, 24, k=0.1)),
        tensor("W2", _w(rng, 5, 24)),
        tensor("B2", _w(rng, 5, k=0.1)),
        tensor("W3", _w(rng, 24, 3)),
    ]
    return make_model(
        nodes,
        [vi("a", [1, 12]), vi("b", [1, 8])],
        [vi("prob", [1, 5]), vi("aux", [1, 3])],
        inits,
    )


def digits_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(311)
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("Gemm", ["f", "W3", "B3"], ["logits"], transB=1),
    ]
    inits = [
        tensor("W1", _w(rng, 16, 1, 3, 3)),
        tensor("B1", _w(rng, 16, k=0.1)),
        tensor("W2", _w(rng, 32, 16, 3, 3)),
        tensor("B2", _w(rng, 32, k=0.1)),
        tensor("W3", _w(rng, 10, 512)),
        tensor("B3", _w(rng, 10, k=0.1)),
    ]
    return make_model(nodes, [vi("x", [1, 1, 8, 8])], [vi("logits", [1, 10])], inits)


def ds_cnn(channels: int = 64, blocks: int = 4) -> onnx.ModelProto:
    rng = np.random.default_rng(312)
    c = channels
    nodes = [
        # "same" padding of a 10x4 / 2 window on 49x10: 9 rows (4 + 5) and 2 columns (1 + 1)
        helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], strides=[2, 2], pads=[4, 1, 5, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
    ]
    inits = [tensor("W0", _w(rng, c, 1, 10, 4)), tensor("B0", _w(rng, c, k=0.1))]
    prev = "r0"
    for i in range(1, blocks + 1):
        nodes += [
            helper.make_node(
                "Conv", [prev, f"Wd{i}", f"Bd{i}"], [f"d{i}"], group=c, pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"d{i}"], [f"rd{i}"]),
            helper.make_node("Conv", [f"rd{i}", f"Wp{i}", f"Bp{i}"], [f"p{i}"]),
            helper.make_node("Relu", [f"p{i}"], [f"rp{i}"]),
        ]
        inits += [
            tensor(f"Wd{i}", _w(rng, c, 1, 3, 3)),
            tensor(f"Bd{i}", _w(rng, c, k=0.1)),
            tensor(f"Wp{i}", _w(rng, c, c, 1, 1)),
            tensor(f"Bp{i}", _w(rng, c, k=0.1)),
        ]
        prev = f"rp{i}"
    nodes += [
        helper.make_node("AveragePool", [prev], ["pool"], kernel_shape=[25, 5]),
        helper.make_node("Flatten", ["pool"], ["f"]),
        helper.make_node("Gemm", ["f", "Wf", "Bf"], ["logits"], transB=1),
    ]
    inits += [tensor("Wf", _w(rng, 12, c)), tensor("Bf", _w(rng, 12, k=0.1))]
    return make_model(nodes, [vi("x", [1, 1, 49, 10])], [vi("logits", [1, 12])], inits)


def _relu6(nodes: list, x: str, y: str) -> None:
    nodes.append(helper.make_node("Clip", [x, "six_lo", "six_hi"], [y]))


def vww_mobilenet(alpha: float = 0.25, size: int = 96, classes: int = 2) -> onnx.ModelProto:
    rng = np.random.default_rng(313)

    def ch(c: int) -> int:
        return max(8, int(c * alpha))

    def same(stride: int) -> list[int]:  # TF "same" for a 3x3 window on an even size
        return [1, 1, 1, 1] if stride == 1 else [0, 0, 1, 1]

    c = ch(32)
    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], strides=[2, 2], pads=same(2))]
    _relu6(nodes, "c0", "r0")
    inits = [
        tensor("six_lo", np.array(0, np.float32)),
        tensor("six_hi", np.array(6, np.float32)),
        tensor("W0", _w(rng, c, 3, 3, 3)),
        tensor("B0", _w(rng, c, k=0.1)),
    ]
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
    blocks += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    prev = "r0"
    for i, (out, s) in enumerate(blocks, 1):
        o = ch(out)
        nodes.append(
            helper.make_node(
                "Conv", [prev, f"Wd{i}", f"Bd{i}"], [f"d{i}"], group=c, strides=[s, s],
                pads=same(s),
            )
        )  # fmt: skip
        _relu6(nodes, f"d{i}", f"rd{i}")
        nodes.append(helper.make_node("Conv", [f"rd{i}", f"Wp{i}", f"Bp{i}"], [f"p{i}"]))
        _relu6(nodes, f"p{i}", f"rp{i}")
        inits += [
            tensor(f"Wd{i}", _w(rng, c, 1, 3, 3)),
            tensor(f"Bd{i}", _w(rng, c, k=0.1)),
            tensor(f"Wp{i}", _w(rng, o, c, 1, 1)),
            tensor(f"Bp{i}", _w(rng, o, k=0.1)),
        ]
        prev, c = f"rp{i}", o
    side = size // 32
    nodes += [
        helper.make_node("AveragePool", [prev], ["pool"], kernel_shape=[side, side]),
        helper.make_node("Flatten", ["pool"], ["f"]),
        helper.make_node("Gemm", ["f", "Wf", "Bf"], ["logits"], transB=1),
    ]
    inits += [tensor("Wf", _w(rng, classes, c)), tensor("Bf", _w(rng, classes, k=0.1))]
    return make_model(nodes, [vi("x", [1, 3, size, size])], [vi("logits", [1, classes])], inits)


def resnet8(classes: int = 10) -> onnx.ModelProto:
    rng = np.random.default_rng(314)
    nodes = [
        helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
    ]
    inits = [tensor("W0", _w(rng, 16, 3, 3, 3)), tensor("B0", _w(rng, 16, k=0.1))]
    prev, c = "r0", 16
    for i, (o, s) in enumerate([(16, 1), (32, 2), (64, 2)], 1):
        nodes += [
            helper.make_node(
                "Conv", [prev, f"Wa{i}", f"Ba{i}"], [f"a{i}"], strides=[s, s], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"a{i}"], [f"ra{i}"]),
            helper.make_node("Conv", [f"ra{i}", f"Wb{i}", f"Bb{i}"], [f"b{i}"], pads=[1, 1, 1, 1]),
        ]
        inits += [
            tensor(f"Wa{i}", _w(rng, o, c, 3, 3)),
            tensor(f"Ba{i}", _w(rng, o, k=0.1)),
            tensor(f"Wb{i}", _w(rng, o, o, 3, 3)),
            tensor(f"Bb{i}", _w(rng, o, k=0.1)),
        ]
        short = prev
        if s != 1 or o != c:
            nodes.append(
                helper.make_node("Conv", [prev, f"Ws{i}", f"Bs{i}"], [f"s{i}"], strides=[s, s])
            )
            inits += [tensor(f"Ws{i}", _w(rng, o, c, 1, 1)), tensor(f"Bs{i}", _w(rng, o, k=0.1))]
            short = f"s{i}"
        nodes += [
            helper.make_node("Add", [f"b{i}", short], [f"sum{i}"]),
            helper.make_node("Relu", [f"sum{i}"], [f"r{i}"]),
        ]
        prev, c = f"r{i}", o
    nodes += [
        helper.make_node("AveragePool", [prev], ["pool"], kernel_shape=[8, 8]),
        helper.make_node("Flatten", ["pool"], ["f"]),
        helper.make_node("Gemm", ["f", "Wf", "Bf"], ["logits"], transB=1),
    ]
    inits += [tensor("Wf", _w(rng, classes, c)), tensor("Bf", _w(rng, classes, k=0.1))]
    return make_model(nodes, [vi("x", [1, 3, 32, 32])], [vi("logits", [1, classes])], inits)


def ad_autoencoder(features: int = 640, hidden: int = 128, code: int = 8) -> onnx.ModelProto:
    rng = np.random.default_rng(315)
    sizes = [features, *[hidden] * 4, code, *[hidden] * 4, features]
    nodes, inits, prev = [], [], "x"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:], strict=True), 1):
        w, b = _w(rng, n, k), _w(rng, n, k=0.1)
        last = i == len(sizes) - 1
        if (
            not last
        ):  # BatchNorm (inference) folded: gamma * (Wx + b - mean) / sqrt(var + eps) + beta
            gamma = rng.uniform(0.5, 1.5, n).astype(np.float32)
            beta = (rng.standard_normal(n) * 0.1).astype(np.float32)
            mean = (rng.standard_normal(n) * 0.1).astype(np.float32)
            var = rng.uniform(0.5, 2.0, n).astype(np.float32)
            f = gamma / np.sqrt(var + np.float32(1e-3))
            w, b = (w * f[:, None]).astype(np.float32), ((b - mean) * f + beta).astype(np.float32)
        out = "y" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"W{i}", f"B{i}"], [out], transB=1))
        inits += [tensor(f"W{i}", w), tensor(f"B{i}", b)]
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            prev = f"r{i}"
    return make_model(nodes, [vi("x", [1, features])], [vi("y", [1, features])], inits)


# the MLPerf Tiny-style set: name -> builder
TINY_MODELS = {
    "ds_cnn": ds_cnn,
    "vww": vww_mobilenet,
    "resnet8": resnet8,
    "ad": ad_autoencoder,
}


# convert options a model needs to fit its parts: ResNet-8 float's Winograd (transformed
# weights 1.8x the 3x3 ones, 4x4 tile scratch: a 508 KB arena) is more than a 256 KB part holds
# (194 KB with the direct / GEMM kernels)
CONVERT_OPTIONS: dict[str, dict[str, str]] = {"resnet8": {"kernels": "winograd=off"}}


def inputs_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]  # symbolic: 1
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def quantized(model: onnx.ModelProto, directory: Path, name: str) -> Path:
    """The int8 QDQ copy of `model` (saved beside its float file in `directory`)."""
    from onnx2edge.quantization import quantize

    fp = save(model, directory / f"{name}.onnx")
    calib = directory / f"{name}_calib.npz"
    samples = [inputs_for(model, seed) for seed in range(8)]
    np.savez(calib, **{k: np.concatenate([s[k] for s in samples]) for k in samples[0]})
    q = directory / f"{name}_int8.onnx"
    quantize(fp, q, mode="static", calib=calib, per_channel=True, activations="int8")
    return q
