"""Depthwise convolutions over a ring of padded rows (kernels/conv/conv_dwrows.py) against onnxruntime,
at every ISA the C backend emits: x86-64-v2 (the portable loop), x86-64-v3 (AVX2, 8 lanes),
native (AVX-512, 16) and aarch64 (NEON, 4, under qemu).

One model holds the kernel's edges: rows of 7 .. 37 outputs (whole vectors and tails of
every width), strides 1 and 2 in each direction, odd and even input sizes (stride 2 with
the last column / row left over), asymmetric and zero padding, odd padding (a padded row
that starts on the odd phase), 5x5 and 1x3 / 7x1 filters, no bias, a batch of 2, Relu /
Clip fused, an activation the kernel cannot apply (LeakyRelu: a pass after it), a residual
add, and NaN / +-Inf in the input and the bias. ASan / UBSan with threads check the ring's
reads and writes stay inside the scratch slots.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ASAN, make_model, save, tensor, vi
from conv_models import act_inits, act_node

LABEL = "Conv: depthwise rows"
# name: (N, C, H, W, kh, kw, sh, sw, pads (t, l, b, r), bias, residual, activation)
CASES = {
    "a": (1, 5, 19, 17, 3, 3, 1, 1, (1, 1, 1, 1), True, False, "Relu"),
    "b": (2, 3, 34, 33, 3, 3, 2, 2, (1, 1, 1, 1), True, False, "Clip"),
    "c": (1, 4, 35, 36, 3, 3, 2, 2, (0, 0, 1, 1), False, False, None),  # TF "SAME" stride 2
    "d": (1, 3, 20, 40, 5, 5, 2, 2, (2, 3, 2, 1), True, False, "LeakyRelu"),  # odd left pad
    "e": (1, 6, 9, 37, 1, 3, 1, 1, (0, 1, 0, 1), True, True, "Relu"),  # residual add
    "f": (1, 2, 21, 24, 7, 1, 2, 1, (3, 0, 3, 0), True, False, "Clip"),
    "g": (1, 3, 12, 34, 3, 3, 1, 2, (0, 0, 0, 0), True, False, None),  # no padding, 1x2
    "h": (1, 7, 16, 31, 3, 3, 1, 1, (1, 1, 1, 1), True, False, "Relu"),  # NaN / Inf
    # small maps (issue 34): rows of 7 .. 14 outputs, steps of R rows that do not divide OH
    # (the last step recomputes rows), OH under a step, fused HardSwish / HardSigmoid
    "i": (1, 6, 7, 7, 5, 5, 1, 1, (2, 2, 2, 2), True, False, "HardSwish"),  # OH 7: one step
    "j": (1, 4, 28, 28, 3, 3, 2, 2, (1, 1, 1, 1), True, False, "HardSigmoid"),  # 14x14, s2
    "k": (1, 3, 9, 11, 3, 3, 1, 1, (1, 1, 1, 1), False, False, "Relu"),  # OH 9: 5 + 5 rows
    "l": (2, 3, 21, 15, 7, 7, 1, 1, (3, 3, 3, 3), True, False, None),  # ConvNeXt's 7x7
    "m": (1, 3, 11, 8, 3, 1, 1, 1, (1, 0, 1, 0), True, True, "Clip"),  # 3x1, 8 wide, OH 11
}


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    nodes, ins, outs, feeds = [], [], [], {}
    inits = act_inits()
    for name, (N, C, H, W, kh, kw, sh, sw, pads, has_b, res, act) in CASES.items():
        x = rng.standard_normal((N, C, H, W)).astype(np.float32) * 2
        wt = rng.standard_normal((C, 1, kh, kw)).astype(np.float32)
        conv_in = [f"x{name}", f"w{name}"]
        inits.append(tensor(f"w{name}", wt))
        if has_b:
            b = rng.standard_normal(C).astype(np.float32)
            if name in ("h", "i"):
                b[:3] = [np.nan, np.inf, -np.inf]  # whole channels NaN / +Inf / -Inf
                x[0, 3, 1, 2] = np.nan
                x[0, 4, H - 1, W - 1] = np.inf
                x[0, 5, H // 2, 0] = -np.inf
            inits.append(tensor(f"b{name}", b))
            conv_in.append(f"b{name}")
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [N, C, H, W]))
        OH = (H + pads[0] + pads[2] - kh) // sh + 1
        OW = (W + pads[1] + pads[3] - kw) // sw + 1
        assert OW >= 7, name  # the kernel's minimum row
        cur = f"c{name}"
        nodes.append(
            helper.make_node(
                "Conv",
                conv_in,
                [cur],
                group=C,
                kernel_shape=[kh, kw],
                strides=[sh, sw],
                pads=[pads[0], pads[1], pads[2], pads[3]],
            )
        )
        if res:
            feeds[f"r{name}"] = rng.standard_normal((N, C, OH, OW)).astype(np.float32)
            ins.append(vi(f"r{name}", [N, C, OH, OW]))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(act_node(act, cur, f"y{name}", alpha=0.1))
        outs.append(vi(f"y{name}", [N, C, OH, OW]))
    return save(make_model(nodes, ins, outs, inits, opset=14), tmp_path / "dw.onnx"), feeds


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    # NaN where the reference has NaN, the same infinities, then 1e-4 relative
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_depthwise_rows_matches_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(LABEL) == len(CASES), kernels  # every case takes the path
    ref = ort_run(onnx.load(path), feeds)
    assert np.isnan(ref["yh"]).any() and np.isinf(ref["yh"]).any()  # not vacuous
    _check(api.run(tmp_path / "out", feeds, options={"arch": arch}), ref)


@pytest.mark.parametrize(
    "flags",
    [
        ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"],
        ["-march=x86-64-v3", *ASAN],
    ],
    ids=["native_asan_3threads", "avx2_asan"],
)
def test_depthwise_rows_threads_and_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Split across threads (each with its own ring), under ASan / UBSan."""
    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    _check(got, ort_run(onnx.load(path), feeds))


def test_narrow_maps_and_dilation_keep_the_plane_kernel(tmp_path: Path) -> None:
    """Rows under 7 outputs (5x5, 6x6) and dilated filters stay on the plane kernel, and
    `--kernels dw_rows=off` switches the path off."""
    rng = np.random.default_rng(1)
    nodes, ins, outs, feeds, inits = [], [], [], {}, []
    for name, (H, s, d) in {"n5": (7, 1, 1), "n6": (14, 2, 1), "dil": (32, 1, 2)}.items():
        x = rng.standard_normal((1, 4, H, H)).astype(np.float32)
        inits.append(tensor(f"w{name}", rng.standard_normal((4, 1, 3, 3)).astype(np.float32)))
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [1, 4, H, H]))
        attrs = {"group": 4, "kernel_shape": [3, 3], "strides": [s, s], "dilations": [d, d]}
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}"], [f"y{name}"], **attrs))
        o = (H + 2 * 0 - 2 * d - 1) // s + 1
        outs.append(vi(f"y{name}", [1, 4, o, o]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "n.onnx")
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels == {"Conv: depthwise direct": 3}, kernels
    _check(api.run(tmp_path / "out", feeds), ort_run(onnx.load(path), feeds))
    off = api.convert(path, "c", tmp_path / "off", options={"kernels": "dw_rows=off"})
    assert LABEL not in off.stats["kernels"]
