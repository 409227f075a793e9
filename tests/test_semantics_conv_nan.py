"""Every C convolution kernel path with NaN / Inf inputs and fused activations, against
onnxruntime (issue 10, item 2: the activation table's meaning holds whichever kernel is picked).

One model holds a case per kernel: im2col + GEMM, implicit GEMM, 1x1 as GEMM, strided 1x1,
depthwise, Winograd, lanes, direct, k x k on a narrow map, ConvTranspose by sub-pixel phases,
and the residual (o2e.ConvAddAct) epilogues of the GEMM, Winograd and direct kernels; each
followed by an activation of the table (epilogue kinds Relu / Clip / LeakyRelu and post-loop
ones). The input holds NaN, +Inf and -Inf. The kernel counts prove each path ran. Built
portable (C99 epilogue), AVX2 and native (AVX-512 here), compared with onnxruntime without
graph optimisations (each op's own meaning) and with them (its fused kernels): NaN where it
has NaN, the same infinities.

Winograd included (issue 29 item 8): its transforms mix a whole input tile, so a non-finite
input used to reach every output of its tile as NaN (where onnxruntime's direct sums stay
finite, or give +-Inf); a tile with a non-finite value is now computed directly, and Winograd is
held to the same position-by-position comparison as every other path.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable

from conftest import AVX2, NATIVE, make_model, save, tensor, vi

H = W = 20
C = 16
# name: (M, kernel, strides, pads, group, activation, residual, expected kernel)
CASES = {
    # 24 outputs: the narrow-map kernel (>= 32) would take this 2x2 output
    "im2col": (24, 5, 8, 0, 1, "Relu", False, "Conv: im2col + GEMM"),
    "narrow": (40, 3, 3, 1, 1, "Clip", False, "Conv: k x k on a narrow map"),
    "implicit": (
        40,
        5,
        2,
        2,
        1,
        "Clip",
        False,
        "Conv: implicit GEMM (im2col fused into B packing)",
    ),
    "pointwise": (24, 1, 1, 0, 1, "LeakyRelu", False, "Conv: 1x1 as GEMM"),
    "strided1x1": (40, 1, 2, 0, 1, "HardSwish", False, "Conv: strided 1x1: subsample + GEMM"),
    # stride 4: 5x5 outputs, the plane kernel (rows of >= 7 outputs and stride 1 / 2: dw rows)
    "depthwise": (16, 3, 4, 1, 16, "Clip", False, "Conv: depthwise direct"),
    "depthwise_sig": (16, 3, 2, 1, 16, "Sigmoid", False, "Conv: depthwise rows"),
    "winograd": (24, 3, 1, 1, 1, "Relu", False, "Conv: winograd"),
    "grouped": (24, 3, 2, 1, 2, "HardSwish", False, "Conv: grouped"),
    "grouped_sig": (12, 5, 1, 2, 4, "Sigmoid", False, "Conv: grouped"),
    "res_grouped": (16, 3, 1, 1, 2, "Clip", True, "Conv: grouped"),
    "lanes": (64, 7, 1, 3, 1, "LeakyRelu", False, "Conv: direct conv (output channels in lanes)"),
    "direct": (4, 5, 1, 2, 1, "Tanh", False, "Conv: direct conv (few output channels)"),
    "direct_clip": (3, 3, 1, 1, 1, "Clip", False, "Conv: direct conv (few output channels)"),
    "res_gemm": (40, 5, 1, 2, 1, "Relu", True, "Conv: residual add in the GEMM epilogue"),
    "res_winograd": (16, 3, 1, 1, 1, "Clip", True, "Conv: residual add in the Winograd"),
    "res_direct": (8, 5, 1, 2, 1, "HardSigmoid", True, "Conv: residual add in the direct conv"),
    "deconv": (8, 3, 2, 1, 1, "Relu", False, "ConvTranspose: sub-pixel phases"),
}


def _model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, C, H, W)).astype(np.float32)
    for val, (c, i, j) in zip(
        (np.nan, np.inf, -np.inf, np.nan, np.inf),
        ((0, 3, 4), (2, 10, 11), (5, 15, 2), (9, 18, 18), (12, 6, 16)),
        strict=True,
    ):
        x[0, c, i, j] = val
    nodes, inits, outs = [], [], []
    feeds, ins = {"x": x}, [vi("x", [1, C, H, W])]
    for name, (M, k, s, p, g, act, res, _) in CASES.items():
        deconv = name == "deconv"
        wshape = (C, M // g, k, k) if deconv else (M, C // g, k, k)
        inits.append(tensor(f"w_{name}", rng.standard_normal(wshape).astype(np.float32) * 0.3))
        inits.append(tensor(f"b_{name}", rng.standard_normal(M).astype(np.float32)))
        op = "ConvTranspose" if deconv else "Conv"
        attrs = dict(strides=[s, s], pads=[p] * 4, group=g)
        if deconv:
            attrs["output_padding"] = [1, 1]
        nodes.append(helper.make_node(op, ["x", f"w_{name}", f"b_{name}"], [f"c_{name}"], **attrs))
        src = f"c_{name}"
        if res:  # residual: an input of the output's shape (stride 1, same pads), NaN / Inf too
            r = rng.standard_normal((1, M, H, W)).astype(np.float32)
            r[0, 1, 2, 3], r[0, 0, 7, 9], r[0, 2, 19, 0] = np.nan, -np.inf, np.inf
            feeds[f"r_{name}"] = r
            ins.append(vi(f"r_{name}", list(r.shape)))
            nodes.append(helper.make_node("Add", [f"r_{name}", src], [f"s_{name}"]))
            src = f"s_{name}"
        if act == "Clip":
            inits += [
                tensor(f"lo_{name}", np.array(-0.5, np.float32)),
                tensor(f"hi_{name}", np.array(0.8, np.float32)),
            ]
            nodes.append(helper.make_node("Clip", [src, f"lo_{name}", f"hi_{name}"], [name]))
        else:
            kw = {"alpha": 0.2} if act == "LeakyRelu" else {}
            nodes.append(helper.make_node(act, [src], [name], **kw))
        outs.append(vi(name, None))
    m = make_model(nodes, ins, outs, inits)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for o, r in zip(m.graph.output, sess.run(None, feeds), strict=True):
        o.CopyFrom(vi(o.name, list(r.shape)))  # declared output shapes
    return save(m, tmp / "convs.onnx"), feeds


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("conv_nan")
    path, feeds = _model(tmp)
    out = tmp / "out"
    kernels = api.convert(path, "c", out).stats["kernels"]
    refs = {}
    for level in ("none", "all"):
        so = ort.SessionOptions()
        so.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            if level == "none"
            else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        refs[level] = dict(zip(names, sess.run(None, feeds), strict=True))
    return out, feeds, refs, kernels


def test_every_kernel_path_ran(converted: tuple) -> None:
    kernels = converted[3]
    for name, case in CASES.items():
        assert any(k.startswith(case[-1]) for k in kernels), (name, case[-1], kernels)


def _compare(name: str, got: np.ndarray, ref: np.ndarray) -> None:
    assert got.shape == ref.shape, name
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=name)
    inf = np.isinf(ref)
    np.testing.assert_array_equal(got[inf], ref[inf], err_msg=name)
    fin = np.isfinite(ref)
    err = np.abs(got[fin] - ref[fin]).max() / max(1.0, float(np.abs(ref[fin]).max()))
    assert err <= 2e-5, (name, err)


BUILDS = {"portable": ["-O2"], "avx2": AVX2, "native": NATIVE}


@pytest.mark.parametrize("build", list(BUILDS))
def test_nan_inf_through_every_conv_kernel(converted: tuple, build: str, tmp_path: Path) -> None:
    out, feeds, refs, kernels = converted
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, BUILDS[build], f"nan_{build}"), io, feeds, tmp_path)
    for name in CASES:
        for level in ("none", "all"):
            try:
                _compare(name, got[name], refs[level][name])
            except AssertionError as e:
                raise AssertionError(f"{name} vs onnxruntime (optimisation {level}): {e}") from e
