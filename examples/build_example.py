"""Build examples/tiny_cnn.onnx: a small CNN with varied random weights (1x3x32x32 -> 1x10).

It exercises what most backends must get right — Conv with bias, BatchNormalization,
Relu, a depthwise conv, a residual Add, MaxPool, GlobalAveragePool, Flatten, Gemm — and is
small enough (~60 KB) to live in the repository. Run: python examples/build_example.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int, scale: float = 1.0) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        arr = rng.standard_normal(shape).astype(np.float32) * np.float32(
            scale * np.sqrt(2.0 / fan_in)
        )
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn_relu(x: str, name: str, cin: int, cout: int, k: int, group: int = 1) -> str:
        nodes.append(
            helper.make_node(
                "Conv",
                [
                    x,
                    w(f"{name}.weight", cout, cin // group, k, k),
                    const(f"{name}.bias", rng.normal(0, 0.1, cout)),
                ],
                [f"{name}.conv"],
                name=name,
                pads=[k // 2] * 4,
                group=group,
            )
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [
                    f"{name}.conv",
                    const(f"{name}.bn.gamma", rng.uniform(0.5, 1.5, cout)),
                    const(f"{name}.bn.beta", rng.normal(0, 0.1, cout)),
                    const(f"{name}.bn.mean", rng.normal(0, 0.1, cout)),
                    const(f"{name}.bn.var", rng.uniform(0.5, 2.0, cout)),
                ],
                [f"{name}.bn"],
                name=f"{name}.bn",
                epsilon=1e-5,
            )
        )
        nodes.append(
            helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"{name}.relu")
        )
        return f"{name}.relu"

    x = conv_bn_relu("input", "conv1", 3, 16, 3)
    nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        )
    )
    y = conv_bn_relu("pool1", "dw2", 16, 16, 3, group=16)
    y = conv_bn_relu(y, "pw2", 16, 16, 1)
    nodes.append(helper.make_node("Add", ["pool1", y], ["res2"], name="res2"))
    z = conv_bn_relu("res2", "conv3", 16, 32, 3)
    nodes.append(helper.make_node("GlobalAveragePool", [z], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    nodes.append(
        helper.make_node(
            "Gemm",
            ["flat", w("fc.weight", 10, 32), const("fc.bias", rng.normal(0, 0.1, 10))],
            ["logits"],
            name="fc",
            transB=1,
        )
    )
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx2edge-example"
    )
    model.ir_version = 8  # onnxruntime 1.31 refuses onnx 1.23's default IR 14
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = Path(__file__).with_name("tiny_cnn.onnx")
    out.write_bytes(build().SerializeToString(deterministic=True))
    print(f"wrote {out}")
