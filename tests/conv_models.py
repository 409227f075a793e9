"""One Conv layer as a test model, shared by the kernel-strategy tests (implicit GEMM, lanes,
Winograd): x -> Conv [-> Add r] [-> activation] -> y."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from conftest import make_model, save, tensor, vi


def conv_model(
    path: Path,
    *,
    C: int,
    M: int,
    H: int,
    W: int,
    k: tuple[int, int] = (3, 3),
    strides: tuple[int, int] = (1, 1),
    dilations: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    group: int = 1,
    batch: int = 1,
    bias: bool = True,
    act: str | None = None,
    leaky_alpha: float | None = None,
    residual: bool = False,
    seed: int = 0,
    he_init: bool = False,
) -> Path:
    """Weights N(0, 1 / fan_in) (N(0, 2 / fan_in) with `he_init`), bias N(0, 1), drawn in that
    order from `seed`; a residual `r` is a second input; `act` None writes an Identity, Clip
    clamps to [0, 6], LeakyRelu takes `leaky_alpha` (its default when None)."""
    rng = np.random.default_rng(seed)
    kh, kw = k
    fan_in = C // group * kh * kw
    z = rng.standard_normal((M, C // group, kh, kw))
    w = (z * np.sqrt(2 / fan_in) if he_init else z / np.sqrt(fan_in)).astype(np.float32)
    inits, ins = [tensor("w", w)], ["x", "w"]
    if bias:
        inits.append(tensor("b", rng.standard_normal(M).astype(np.float32)))
        ins.append("b")
    OH = (H + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    OW = (W + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    geometry = dict(kernel_shape=[kh, kw], strides=list(strides), pads=list(pads), group=group)
    if dilations != (1, 1):
        geometry["dilations"] = list(dilations)
    nodes = [helper.make_node("Conv", ins, ["c"], name="conv", **geometry)]
    inputs = [vi("x", [batch, C, H, W])]
    cur = "c"
    if residual:
        inputs.append(vi("r", [batch, M, OH, OW]))
        nodes.append(helper.make_node("Add", [cur, "r"], ["a"], name="add"))
        cur = "a"
    if act == "Clip":
        inits += [tensor("lo", np.array(0.0, np.float32)), tensor("hi", np.array(6.0, np.float32))]
        nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["y"], name="act"))
    else:
        extra = {"alpha": leaky_alpha} if act == "LeakyRelu" and leaky_alpha is not None else {}
        nodes.append(helper.make_node(act or "Identity", [cur], ["y"], name="act", **extra))
    return save(make_model(nodes, inputs, [vi("y", [batch, M, OH, OW])], inits), path)


QTYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def qdq_conv_model(
    x_shape: tuple[int, int, int, int],
    wq: np.ndarray,
    ws: np.ndarray,
    bq: np.ndarray,
    *,
    x_q: tuple[np.float32, int],
    y_q: tuple[np.float32, int],
    dtype: type,
    strides: tuple[int, int],
    pads: list[int],
    dilation: int,
    group: int = 1,
    act: str | None = None,
) -> onnx.ModelProto:
    """DQ(x), DQ(w), DQ(bias) -> Conv [-> act] -> Q: one quantized layer as onnxruntime's
    quantize_static writes it (per-channel int8 weights, int32 bias at x scale * w scale);
    `x_q` / `y_q` are (scale, zero point) in `dtype` (uint8 or int8)."""
    (xs, xz), (ys, yz) = x_q, y_q
    M, _, kh, kw = wq.shape
    N, C, H, W = x_shape
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
        helper.make_node(
            "Conv", ["xd", "wd", "bd"], ["c"], group=group, pads=pads, strides=list(strides),
            dilations=[dilation, dilation], kernel_shape=[kh, kw],
        ),
    ]  # fmt: skip
    last = "c"
    if act:
        nodes.append(helper.make_node(act, ["c"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"]))
    inits = [
        tensor("xs", xs), tensor("xz", np.array(xz, dtype)),
        tensor("wq", wq), tensor("ws", ws), tensor("wz", np.zeros(M, np.int8)),
        tensor("bq", bq), tensor("bs", (xs * ws).astype(np.float32)),
        tensor("bz", np.zeros(M, np.int32)),
        tensor("ys", ys), tensor("yz", np.array(yz, dtype)),
    ]  # fmt: skip
    oh = (H + pads[0] + pads[2] - dilation * (kh - 1) - 1) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - dilation * (kw - 1) - 1) // strides[1] + 1
    e = QTYPES[dtype]
    return make_model(
        nodes, [vi("x", [N, C, H, W], e)], [vi("y", [N, M, oh, ow], e)], inits, opset=13
    )


def act_node(act: str | None, src: str, dst: str, alpha: float = 0.2) -> onnx.NodeProto:
    """The activation a test fuses after a conv: Clip(0, 6) / ClipMin (Clip(0)) read the
    "zero" / "six" initializers of act_inits(); None is an Identity."""
    if act == "Clip":
        return helper.make_node("Clip", [src, "zero", "six"], [dst])
    if act == "ClipMin":
        return helper.make_node("Clip", [src, "zero"], [dst])
    if act == "LeakyRelu":
        return helper.make_node(act, [src], [dst], alpha=alpha)
    return helper.make_node(act or "Identity", [src], [dst])


def act_inits() -> list[onnx.TensorProto]:
    """The Clip bounds act_node refers to."""
    return [tensor("zero", np.array(0, np.float32)), tensor("six", np.array(6, np.float32))]
