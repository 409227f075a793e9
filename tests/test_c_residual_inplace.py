"""Fused Conv + Add + activation written over the residual's buffer (backends/c/residual_alias.py,
issue 9), at every ISA the C backend emits (x86-64-v2, x86-64-v3, native, aarch64 under qemu).

One model holds the cases: a 1x1 GEMM whose residual carries NaN / +-Inf (Relu in the
epilogue), a chain of such blocks sharing one buffer, K = 300 (two K slices: partial sums go
to scratch when R overlaps C), a strided 1x1 (subsample + GEMM), a 3x3 implicit GEMM, and the
cases that must keep their own buffer: the residual is the conv's own input, and the residual
is read again by a later node. Sizes are odd (13 x 15 = 195 pixels, 7 x 8 after the stride),
so every vector-width tail and edge tile runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, make_model, save, tensor, vi

H, W = 13, 15
# the direct / Winograd kernels would take the 3x3 layer: leave it to the implicit GEMM
KERNELS = {"kernels": "winograd=off,lanes=off,direct=off,narrow=off,stem=off"}


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    inits = []

    def conv(name: str, x: str, cin: int, cout: int, k: int = 1, s: int = 1) -> onnx.NodeProto:
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        inits.extend([tensor(f"w{name}", w), tensor(f"b{name}", b)])
        p = k // 2
        return helper.make_node(
            "Conv", [x, f"w{name}", f"b{name}"], [f"c{name}"], kernel_shape=[k, k],
            strides=[s, s], pads=[p] * 4,
        )  # fmt: skip

    def add_relu(name: str, a: str, b: str) -> list[onnx.NodeProto]:
        return [
            helper.make_node("Add", [a, b], [f"s{name}"]),
            helper.make_node("Relu", [f"s{name}"], [name]),
        ]

    nodes = [
        helper.make_node("Mul", ["z", "three"], ["r0"]),  # arena residual with NaN / Inf
        conv("1", "x", 16, 24),
        *add_relu("y1", "c1", "r0"),  # in place over r0
        helper.make_node("Mul", ["y1", "one"], ["o1"]),  # y1 observed (its buffer is r0's)
        conv("2a", "y1", 24, 24),
        helper.make_node("Relu", ["c2a"], ["t2"]),
        conv("2", "t2", 24, 24),
        *add_relu("y2", "c2", "y1"),  # chain: over y1, so over r0 too
        conv("3", "y2", 24, 24),
        *add_relu("y3", "c3", "y2"),  # r is the conv's own input: own buffer
        conv("4", "y3", 24, 300),
        helper.make_node("Relu", ["c4"], ["h"]),
        conv("5", "h", 300, 32),
        conv("6", "y3", 24, 32),
        *add_relu("y5", "c5", "c6"),  # K = 300, two K slices, over c6
        conv("7", "y5", 32, 32, s=2),
        conv("8", "y5", 32, 32, s=2),
        *add_relu("y7", "c7", "c8"),  # strided 1x1 over c8
        conv("9", "y7", 32, 32, k=3),
        conv("10", "y7", 32, 32),
        *add_relu("y9", "c9", "c10"),  # 3x3 implicit GEMM over c10
        conv("11", "y9", 32, 32),
        conv("12", "y9", 32, 32),
        *add_relu("y11", "c11", "c12"),  # c12 is read again below: own buffer
        helper.make_node("Add", ["y11", "c12"], ["out"]),
    ]
    inits += [tensor("three", np.array(3, np.float32)), tensor("one", np.array(1, np.float32))]
    z = rng.standard_normal((1, 24, H, W)).astype(np.float32)
    z.reshape(-1)[[0, 7, 100, 1001, 4679]] = [np.nan, np.inf, -np.inf, np.nan, np.inf]
    feeds = {"x": rng.standard_normal((1, 16, H, W)).astype(np.float32), "z": z}
    ins = [vi("x", [1, 16, H, W]), vi("z", [1, 24, H, W])]
    outs = [vi("out", [1, 32, 7, 8]), vi("o1", [1, 24, H, W])]
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "res.onnx")
    return path, feeds


def _arena_offsets(model_c: str) -> dict[str, int]:
    """Tensor name -> arena offset, from the generated model.c's tensor pointers."""
    pat = r"float \*const T_\w+ = \(float \*\)\(o2e_arena \+ (\d+)\);  /\* (\S+): "
    return {name: int(off) for off, name in re.findall(pat, model_c)}


def test_residual_outputs_take_the_residual_buffer(tmp_path: Path) -> None:
    path, _ = _model(tmp_path)
    res = api.convert(path, "c", tmp_path / "out", options=KERNELS)
    assert res.stats["kernels"] == {
        "Conv: 1x1 as GEMM": 10,
        "Conv: implicit GEMM (im2col fused into B packing)": 1,
        "Conv: residual add in the GEMM epilogue": 7,
        "Conv: strided 1x1: subsample + GEMM": 2,
    }, res.stats["kernels"]
    off = _arena_offsets((tmp_path / "out" / "model.c").read_text())
    assert off["y1"] == off["r0"] == off["y2"]  # a chain shares one buffer
    assert off["y5"] == off["c6"]  # K = 300
    assert off["y7"] == off["c8"]  # strided
    assert off["y9"] == off["c10"]  # 3x3 implicit GEMM
    assert off["y3"] != off["y2"]  # the residual is the conv's own input
    assert off["y11"] != off["c12"]  # the residual is read again later


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_residual_inplace_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    api.convert(path, "c", tmp_path / "out", options=KERNELS)
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    assert np.isnan(ref["o1"]).any() and np.isinf(ref["o1"]).any()  # non-finite values reach it
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
