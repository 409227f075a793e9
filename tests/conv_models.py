"""One Conv layer as a test model, shared by the kernel-strategy tests (implicit GEMM, lanes,
Winograd): x -> Conv [-> Add r] [-> activation] -> y."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import helper

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
