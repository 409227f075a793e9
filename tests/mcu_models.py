"""Small microcontroller-class models built with onnx.helper (issue 31), float and int8.

- `two_head_mlp`: two inputs, two outputs (the harness's I/O), Gemm + Relu + Softmax.
- `digits_cnn`: an 8x8 digits CNN (conv 3x3 -> conv 3x3 / 2 -> FC 10).
- `ds_cnn`: a keyword-spotting DS-CNN in the MLPerf Tiny layout on 49x10 MFCCs: conv 10x4 / 2
  ("same" padding) to 64 channels, 4 x (depthwise 3x3 + Relu, pointwise 1x1 + Relu),
  AveragePool over the 25x5 map, FC 12.
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
