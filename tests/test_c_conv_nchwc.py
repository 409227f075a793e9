"""Channel-blocked (NCHW16c) chains of depthwise 3x3 and 1x1 layers on narrow maps
(backends/c/nchwc_plan.py, kernels/conv/conv_nchwc.py, runtime/o2e_nchwc.h; issue 9), against
onnxruntime at every ISA the C backend emits: x86-64-v2 (SSE), x86-64-v3 (AVX2), native
(AVX-512 here), aarch64 (NEON, under qemu) and the portable loops (O2E_NCHWC_SCALAR).

One model (a batch of 2) holds every seam of the plan: a chain entered by a 1x1 layer from an
NCHW graph input, depthwise layers inside it (stride 1 and 2, symmetric and asymmetric pads,
Clip / LeakyRelu / Relu / none), a blocked residual (MobileNet v2's linear bottleneck), a
layer leaving the chain with an NCHW residual, a graph output inside a chain (that tensor
stays NCHW, the chain resumes after it), a GlobalAveragePool reading a blocked tensor (the
chain's exit in MobileNets) beside one reading NCHW, 48-channel layers (an odd number of 16-channel
blocks: AVX-512's half tile), maps of 14x14, 7x7 and 3x3, and a 24-channel branch the plan
refuses (not a multiple of 16).
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
from onnx2edge.backends.c.nchwc_plan import plan_layout
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare, within_spread

from conftest import ALL_ISAS, NATIVE, make_model, save, tensor, vi

N = 2


def _model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, y: str, c: int, m: int, k: int = 1, s: int = 1, pads=(0, 0, 0, 0)) -> str:
        g = c if k == 3 else 1
        w = rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)
        w = w.astype(np.float32)
        inits.append(tensor(f"w_{y}", w))
        inits.append(tensor(f"b_{y}", rng.standard_normal(m).astype(np.float32) * 0.1))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"w_{y}", f"b_{y}"],
                [y],
                kernel_shape=[k, k],
                strides=[s, s],
                pads=list(pads),
                group=g,
                name=y,
            )
        )
        return y

    def act(x: str, op: str) -> str:
        y = f"{x}_{op.lower()}"
        if op == "Clip":
            nodes.append(helper.make_node("Clip", [x, "zero", "six"], [y]))
        elif op == "LeakyRelu":
            nodes.append(helper.make_node(op, [x], [y], alpha=0.1))
        else:
            nodes.append(helper.make_node(op, [x], [y]))
        return y

    def add(a: str, b: str, y: str) -> str:
        nodes.append(helper.make_node("Add", [a, b], [y]))
        return y

    p1 = 1, 1, 1, 1
    t1 = act(conv("x", "pw1", 32, 64), "Relu")  # enters: NCHW input, blocked output
    t2 = act(conv(t1, "dw2", 64, 64, 3, 1, p1), "Clip")  # depthwise inside the chain
    t3 = conv(t2, "pw3", 64, 32)  # linear bottleneck, blocked
    t4 = act(conv(t3, "pw4", 32, 64), "Relu")
    t5 = act(conv(t4, "dw5", 64, 64, 3, 1, p1), "LeakyRelu")
    t6 = add(conv(t5, "pw6", 64, 32), t3, "res6")  # residual, both blocked
    add(conv(t2, "pw13", 64, 32), "x", "y3")  # leaves with an NCHW residual
    t7 = act(conv(t6, "pw7", 32, 96), "Relu")
    t8 = act(conv(t7, "dw8", 96, 96, 3, 2, p1), "Relu")  # stride 2: 14 -> 7
    conv(t8, "y1", 96, 48)  # a graph output inside the chain: stays NCHW
    nodes.append(helper.make_node("GlobalAveragePool", [t8], ["y5"]))  # reads t8's blocks
    nodes.append(helper.make_node("GlobalAveragePool", ["y1"], ["y6"]))  # an NCHW input
    t10 = act(conv("y1", "pw10", 48, 64), "Clip")  # re-enters from the NCHW output
    t11 = conv(t10, "dw11", 64, 64, 3, 2, (0, 0, 1, 1))  # asymmetric pads, no activation
    conv(t11, "y2", 64, 16)  # leaves: 3x3 map
    # 24 channels: refused by the plan (the other kernels take these layers)
    o1 = act(conv("x", "odd1", 32, 24), "Relu")
    o2 = act(conv(o1, "odd2", 24, 24, 3, 1, p1), "Relu")
    conv(o2, "y4", 24, 32)
    inits += [tensor("zero", np.array(0, np.float32)), tensor("six", np.array(6, np.float32))]
    outs = [
        vi("y1", [N, 48, 7, 7]),
        vi("y2", [N, 16, 3, 3]),
        vi("y3", [N, 32, 14, 14]),
        vi("y4", [N, 32, 14, 14]),
        vi("y5", [N, 96, 1, 1]),
        vi("y6", [N, 48, 1, 1]),
    ]
    m = make_model(nodes, [vi("x", [N, 32, 14, 14])], outs, inits, opset=13)
    x = rng.standard_normal((N, 32, 14, 14)).astype(np.float32)
    return save(m, tmp / "chain.onnx"), {"x": x}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path, dict]:
    tmp = tmp_path_factory.mktemp("nchwc")
    path, feeds = _model(tmp)
    out = tmp / "out"
    stats = api.convert(path, "c", out).stats
    return path, feeds, out, stats


def test_the_plan_takes_the_chains_and_refuses_the_rest(chain: tuple) -> None:
    stats = chain[3]
    layers = stats["layer_kernels"]
    blocked = {n for n, k in layers.items() if k == "nchwc"}
    expected = {"pw1", "dw2", "pw3", "pw4", "dw5", "pw6", "pw13", "pw7", "dw8", "y1", "pw10"}
    expected |= {"dw11", "y2"}
    assert blocked == expected, layers
    assert not any(layers[n] == "nchwc" for n in ("odd1", "odd2", "y4")), layers
    kernels = stats["kernels"]
    assert kernels["Conv: 1x1, channel blocks (enters)"] == 2, kernels  # pw1, pw10
    assert kernels["Conv: 1x1, channel blocks (leaves)"] == 3, kernels  # pw13, y1, y2
    assert kernels["Conv: depthwise 3x3 stride 2, channel blocks"] == 2, kernels
    assert kernels["GlobalAveragePool: channel blocks"] == 1, kernels  # y5; y6 reads NCHW


def test_plan_is_pure_and_switches_off(chain: tuple, tmp_path: Path) -> None:
    path = chain[0]
    proto = onnx.load(path)
    before = proto.SerializeToString()
    graph = graph_from_model(proto)
    assert plan_layout(graph, {"nchwc": "off"}).roles == {}
    assert proto.SerializeToString() == before
    stats = api.convert(path, "c", tmp_path / "off", options={"kernels": "nchwc=off"}).stats
    assert "nchwc" not in stats["layer_kernels"].values()
    manifest = json.loads((tmp_path / "off" / "onnx2edge.json").read_text())
    assert "nchwc=off" in json.dumps(manifest)


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_chain_matches_onnxruntime(chain: tuple, arch: str) -> None:
    path, feeds, out, _ = chain
    _check(api.run(out, feeds, options={"arch": arch}), ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize(
    "flags",
    [["-O2", "-DO2E_NCHWC_SCALAR"], [*NATIVE, "-DO2E_THREADS=3", "-pthread", "-DO2E_NC_KC=32"]],
    ids=["portable", "native_3threads_kslices"],
)
def test_portable_and_threaded(
    chain: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer split across threads
    path, feeds, _, _ = chain
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    _check(got, ort_run(onnx.load(path), feeds))


@pytest.mark.parametrize(
    "build", [["-O2", "-DO2E_NCHWC_SCALAR"], ["-O3", "-march=x86-64-v3", "-DO2E_NC_KC=32"]]
)
def test_nan_inf(chain: tuple, tmp_path: Path, build: list[str]) -> None:
    """NaN / +-Inf inputs: NaN where onnxruntime has NaN, the same infinities, through the
    blocked kernels' activations (compare and select) and residuals."""
    path, feeds, out, _ = chain
    x = feeds["x"].copy()
    x[0, 3, 2, 5], x[0, 7, 13, 13], x[1, 0, 0, 0], x[1, 31, 6, 9] = np.nan, np.inf, -np.inf, np.nan
    io = json.loads((out / "onnx2edge.json").read_text())
    native = run_executable(build_executable(out, NATIVE, "nat"), io, {"x": x}, tmp_path)
    got = run_executable(build_executable(out, build, "b"), io, {"x": x}, tmp_path)
    ref = ort_run(onnx.load(path), {"x": x})
    # onnxruntime's optimised run (its own NCHWc kernels, block 16 with AVX-512, 8 with AVX2)
    # turns some Inf - Inf sums into NaN where its unoptimised run keeps the Inf (the refused
    # 24-channel branch y4 on an AVX-512 host): NaN / Inf must sit as in one of the two runs,
    # the rule of verify.within_spread
    plain = ort_run(onnx.load(path), {"x": x}, optimize=False)
    for k, r in ref.items():
        for g in (got[k], native[k]):
            rep = within_spread(compare(k, g, r, 1e-4, 1e-6), g, plain[k], r)
            assert rep.ok, rep
        assert np.isnan(r).any(), k  # the case reaches every output


def test_per_layer_verify_sees_nchw_tensors(chain: tuple) -> None:
    """`verify --per-layer` compares every intermediate tensor: its build keeps them NCHW."""
    rep = api.verify(chain[0], target="c", per_layer=True)
    assert rep.ok and rep.layers and all(r.ok for r in rep.layers), rep


def _wide_model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Maps over MAX_P (30x31): blocked only where a depthwise layer writes or reads them."""
    rng = np.random.default_rng(7)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(x: str, y: str, c: int, m: int, k: int = 1, s: int = 1) -> str:
        g = c if k == 3 else 1
        w = (rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
        inits.append(tensor(f"w_{y}", w))
        p = [k // 2] * 4
        nodes.append(
            helper.make_node(
                "Conv", [x, f"w_{y}"], [y], kernel_shape=[k, k], strides=[s, s], pads=p, group=g
            )
        )
        nodes[-1].name = y
        r = f"{y}_relu"
        nodes.append(helper.make_node("Relu", [y], [r]))
        return r

    t = conv(conv(conv("x", "wa", 16, 32), "wdw", 32, 32, 3), "wb", 32, 32)
    conv(t, "wc", 32, 16)  # 1x1 -> 1x1 over MAX_P: NCHW (the GEMM's)
    t = conv(conv("x", "sa", 16, 48), "sdw", 48, 48, 3, 2)  # stride 2: 30x31 -> 15x16
    conv(t, "sb", 48, 32)
    outs = [vi("wc_relu", [1, 16, 30, 31]), vi("sb_relu", [1, 32, 15, 16])]
    m = make_model(nodes, [vi("x", [1, 16, 30, 31])], outs, inits, opset=13)
    return save(m, tmp / "wide.onnx"), {"x": rng.standard_normal((1, 16, 30, 31), np.float32)}


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path, dict]:
    tmp = tmp_path_factory.mktemp("nchwc_wide")
    path, feeds = _wide_model(tmp)
    out = tmp / "out"
    return path, feeds, out, api.convert(path, "c", out).stats


def test_wide_maps_blocked_next_to_depthwise_only(wide: tuple) -> None:
    layers = wide[3]["layer_kernels"]
    blocked = {n for n, k in layers.items() if k == "nchwc"}
    assert blocked == {"wa", "wdw", "wb", "sa", "sdw", "sb"}, layers


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_wide_maps_match_onnxruntime(wide: tuple, arch: str) -> None:
    path, feeds, out, _ = wide
    _check(api.run(out, feeds, options={"arch": arch}), ort_run(onnx.load(path), feeds))
