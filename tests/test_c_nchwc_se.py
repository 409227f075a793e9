"""Channel-blocked chains through whole inverted-residual blocks (issue 34): depthwise 5x5 and
7x7 layers, stride 1 and 2, with SiLU / HardSwish / Relu6 fused, and squeeze-and-excitation
inside the chain (the GlobalAveragePool's means written by the blocked depthwise layer,
se_pool.py; the gating Mul x * s reading and writing blocks, or folded into the projection's
weights), against onnxruntime at every
ISA the C backend emits (aarch64 under qemu included), the portable loops and a threaded
build, NaN / Inf included.

One model (a batch of 2): an EfficientNet block (SiLU as Sigmoid * x, as torch exports it; SE
with a Sigmoid gate; a residual), a MobileNetV3 block (HardSwish, stride 2, SE with a
HardSigmoid gate written Mul(s, x)), a 7x7 Relu6 layer and an asymmetrically padded 5x5
stride-2 layer leaving through a 1x1 layer with a Sigmoid, a chain entered from 152
channels and left to 152 (NCHW sides zero-padded to whole blocks), a 1x1 layer writing 24
channels that the plan refuses (too much padding), and MobileNetV3-style blocks of 72 and 88
channels kept blocked in padded blocks (SE on 72, a pool reading 120 padded channels).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare, within_spread

from conftest import ALL_ISAS, NATIVE, make_model, save, tensor, vi

N = 2


def _model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, y: str, c: int, m: int, k: int = 1, s: int = 1, pads=None) -> str:
        g = c if k > 1 else 1
        w = rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)
        inits.append(tensor(f"w_{y}", w.astype(np.float32)))
        inits.append(tensor(f"b_{y}", rng.standard_normal(m).astype(np.float32) * 0.1))
        pads = list(pads) if pads is not None else [k // 2] * 4
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"w_{y}", f"b_{y}"],
                [y],
                kernel_shape=[k, k],
                strides=[s, s],
                pads=pads,
                group=g,
                name=y,
            )
        )
        return y

    def act(x: str, op: str) -> str:
        y = f"{x}_{op.lower()}"
        if op == "SiLU":
            nodes.append(helper.make_node("Sigmoid", [x], [f"{x}_sig"]))
            nodes.append(helper.make_node("Mul", [x, f"{x}_sig"], [y]))
        elif op == "Clip":
            nodes.append(helper.make_node("Clip", [x, "zero", "six"], [y]))
        elif op == "HardSigmoid":
            nodes.append(helper.make_node(op, [x], [y], alpha=1 / 6, beta=0.5))
        else:
            nodes.append(helper.make_node(op, [x], [y]))
        return y

    def se(x: str, name: str, c: int, act1: str, gate: str, swap: bool) -> str:
        nodes.append(
            helper.make_node("GlobalAveragePool", [x], [f"{name}_gap"], name=f"{name}_gap")
        )
        f1 = act(conv(f"{name}_gap", f"{name}_fc1", c, 16), act1)
        s = act(conv(f1, f"{name}_fc2", 16, c), gate)
        ins = [s, x] if swap else [x, s]
        nodes.append(helper.make_node("Mul", ins, [f"{name}_mul"], name=f"{name}_mul"))
        return f"{name}_mul"

    # EfficientNet: expand, dw 5x5 SiLU, SE (Sigmoid gate), project + residual
    t0 = conv("x", "a_in", 32, 32)  # enters the chain (the residual below is blocked)
    e = act(conv(t0, "a_exp", 32, 64), "SiLU")
    d = act(conv(e, "a_dw", 64, 64, 5), "SiLU")
    m = se(d, "a_se", 64, "SiLU", "Sigmoid", False)
    nodes.append(helper.make_node("Add", [conv(m, "a_proj", 64, 32), t0], ["a_out"]))
    # MobileNetV3: expand, dw 5x5 stride 2 HardSwish, SE (HardSigmoid gate, Mul(s, x)), project
    e2 = act(conv("a_out", "b_exp", 32, 64), "HardSwish")
    d2 = act(conv(e2, "b_dw", 64, 64, 5, 2), "HardSwish")
    # (64 outputs on 7x7: more weights than pixels, so the gate stays a pass of its own;
    # a_se's on 14x14 is folded into a_proj's weights)
    conv(se(d2, "b_se", 64, "Relu", "HardSigmoid", True), "y1", 64, 64)
    # 7x7 Relu6 at stride 1, an asymmetric 5x5 stride 2 leaving through a Sigmoid 1x1 layer
    conv(act(conv(e2, "c_dw", 64, 64, 7), "Clip"), "y2", 64, 32)
    t = act(conv(e2, "d_dw", 64, 64, 5, 2, (1, 1, 2, 2)), "Relu")
    act(conv(t, "d_pw", 64, 16), "Sigmoid")
    # NCHW sides of 152 channels: entering and leaving 1x1 layers pad them to whole blocks
    # (160); the exit adds an NCHW residual on a 7x7 map (24 x 49 values past the last whole
    # tile: the epilogue's scalar tail)
    o = act(conv(conv("x", "o_in", 32, 152), "o_exp", 152, 64), "HardSwish")
    o = act(conv(o, "o_dw", 64, 64, 3, 2), "Relu")
    r = conv("x", "o_res", 32, 152, 1, 2)
    nodes.append(helper.make_node("Add", [conv(o, "o_proj", 64, 152), r], ["y_odd"]))
    # 24 output channels (+33 % padding): the plan leaves that layer NCHW; the chain starts
    # after it (an entering layer reads only the real input channels)
    o = act(conv(conv("x", "q_in", 32, 24), "q_exp", 24, 64), "Relu")
    conv(act(conv(o, "q_dw", 64, 64, 3), "Relu"), "q_proj", 64, 32)
    # MobileNetV3's counts that are not multiples of 16 (72, 88, 120): blocked tensors padded
    # to whole blocks (nchwc_plan.pad_pays), an SE block on 72 channels (its gate folded), a
    # 5x5 stride-2 layer on 88, a 1x1 layer writing 120 padded channels for a pool reading
    # blocks; the NaN / Inf test sends NaN through the padding lanes (0 weights x NaN)
    p = act(conv(conv("x", "p_in", 32, 24), "p_exp", 24, 72), "HardSwish")
    p = act(conv(p, "p_dw", 72, 72, 3), "HardSwish")
    p = conv(se(p, "p_se", 72, "Relu", "HardSigmoid", False), "p_proj", 72, 48)
    p = act(conv(p, "p_exp2", 48, 88), "Relu")
    p = act(conv(p, "p_dw2", 88, 88, 5, 2), "Relu")
    conv(p, "p_out", 88, 120)
    nodes.append(helper.make_node("GlobalAveragePool", [conv(p, "p_head", 88, 120)], ["p_gap"]))
    inits += [tensor("zero", np.array(0, np.float32)), tensor("six", np.array(6, np.float32))]
    outs = [
        vi("y1", [N, 64, 7, 7]),
        vi("y2", [N, 32, 14, 14]),
        vi("d_pw_sigmoid", [N, 16, 7, 7]),
        vi("y_odd", [N, 152, 7, 7]),
        vi("q_proj", [N, 32, 14, 14]),
        vi("p_out", [N, 120, 7, 7]),
        vi("p_gap", [N, 120, 1, 1]),
    ]
    model = make_model(nodes, [vi("x", [N, 32, 14, 14])], outs, inits, opset=17)
    x = rng.standard_normal((N, 32, 14, 14)).astype(np.float32)
    return save(model, tmp / "se.onnx"), {"x": x}


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path, dict]:
    tmp = tmp_path_factory.mktemp("nchwc_se")
    path, feeds = _model(tmp)
    out = tmp / "out"
    return path, feeds, out, api.convert(path, "c", out).stats


def test_whole_blocks_run_blocked(block: tuple) -> None:
    stats = block[3]
    layers = stats["layer_kernels"]
    members = {
        "a_in",
        "a_exp",
        "a_dw",
        "a_proj",
        "b_exp",
        "b_dw",
        "y1",
        "c_dw",
        "y2",
        "d_dw",
        "d_pw",
        "o_exp",
        "o_dw",
        "o_proj",
        "q_exp",
        "q_dw",
        "q_proj",
        "p_exp",
        "p_dw",
        "p_proj",
        "p_exp2",
        "p_dw2",
        "p_out",
        "p_head",
    }
    assert layers["q_in"] != "nchwc" and layers["p_in"] != "nchwc", layers
    assert all(layers[n] == "nchwc" for n in members), layers
    kernels = stats["kernels"]
    assert kernels["Conv: depthwise 5x5 stride 1, channel blocks, SE pool fused"] == 1, kernels
    assert kernels["Conv: depthwise 5x5 stride 2, channel blocks, SE pool fused"] == 1, kernels
    assert kernels["Conv: depthwise 5x5 stride 2, channel blocks"] == 2, kernels  # d_dw, p_dw2
    assert kernels["Conv: depthwise 3x3 stride 1, channel blocks, SE pool fused"] == 1, kernels
    assert kernels["Conv: depthwise 7x7 stride 1, channel blocks"] == 1, kernels
    assert kernels["Mul: SE gate, channel blocks"] == 1, kernels
    assert kernels["Mul: SE gate folded into the 1x1 layer"] == 2, kernels
    assert kernels["Conv: 1x1, channel blocks (in chain), SE gate folded"] == 2, kernels
    assert kernels["GlobalAveragePool: means written by the depthwise layer"] == 3, kernels
    assert kernels["GlobalAveragePool: channel blocks"] == 1, kernels  # p_gap: 120 padded


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_blocks_match_onnxruntime(block: tuple, arch: str) -> None:
    path, feeds, out, _ = block
    _check(api.run(out, feeds, options={"arch": arch}), ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize(
    "flags",
    [["-O2", "-DO2E_NCHWC_SCALAR"], [*NATIVE, "-DO2E_THREADS=3", "-pthread"]],
    ids=["portable", "native_3threads"],
)
def test_portable_and_threaded(
    block: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer split across threads
    path, feeds, _, _ = block
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    _check(got, ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize("build", [["-O2", "-DO2E_NCHWC_SCALAR"], ["-O3", "-march=x86-64-v3"]])
def test_nan_inf(block: tuple, tmp_path: Path, build: list[str]) -> None:
    """NaN / +-Inf in image 1 only: image 0 stays finite and matches; image 1's NaN and
    infinities sit where onnxruntime has them (through SiLU, the SE pool and the gate)."""
    path, feeds, out, _ = block
    x = feeds["x"].copy()
    x[1, 3, 2, 5], x[1, 7, 13, 13], x[1, 0, 0, 0] = np.nan, np.inf, -np.inf
    io = json.loads((out / "onnx2edge.json").read_text())
    native = run_executable(build_executable(out, NATIVE, "nat"), io, {"x": x}, tmp_path)
    got = run_executable(build_executable(out, build, "b"), io, {"x": x}, tmp_path)
    ref = ort_run(onnx.load(path), {"x": x})
    plain = ort_run(onnx.load(path), {"x": x}, optimize=False)
    for k, r in ref.items():
        assert np.isfinite(r[0]).all() and not np.isfinite(r[1]).all(), k
        for g in (got[k], native[k]):
            rep = within_spread(compare(k, g, r, 1e-4, 1e-6), g, plain[k], r)
            assert rep.ok, rep
