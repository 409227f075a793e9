"""1x1 convolutions on narrow maps, output channels in the lanes (kernels/conv/conv_pointwise.py,
runtime/o2e_conv1x1.h), at every ISA the C backend emits: x86-64-v2 (SSE vectors), x86-64-v3
(AVX2: 16 lanes x 6 pixels), native (AVX-512: 32 x 12) and aarch64 (NEON, under qemu).

One model holds every edge of the kernel: M not a multiple of the 8 / 16 / 32-channel tiles
(40, 33), pixel counts below one tile (3x3), between tiles (7x7: balanced tiles) and at the
path's limit (8x8), K across several K slices (O2E_PW_KC = 256: K = 600), strides 2 and 3
(the input subsampled while packing), a residual add followed by Clip, no bias, a batch of 2,
and an activation the tile cannot apply (Sigmoid: a separate pass). NaN / Inf handling is in test_c_isa.py's kernel-path test.
"""

from __future__ import annotations

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

LABEL = "Conv: 1x1 on a narrow map (output channels in lanes)"
AVX2_LABEL = "Conv: 1x1 as GEMM: at AVX2 output channels in lanes over the packed weights"
ROWS_LABEL = "Conv: 1x1 as GEMM: at AVX-512 input rows read in place"


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], int]:
    rng = np.random.default_rng(11)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    # name: (N, K, M, H, W, stride, bias, residual, activation); H x W is the output map
    cases = {
        "a": (1, 128, 40, 7, 7, 1, True, False, "Relu"),
        "b": (2, 600, 33, 3, 3, 1, False, False, None),
        "c": (1, 160, 96, 8, 8, 1, True, True, "Clip"),
        "d": (1, 256, 64, 7, 7, 1, True, False, "Sigmoid"),
        "e": (1, 300, 70, 5, 5, 1, True, False, "LeakyRelu"),
        "f": (1, 256, 48, 7, 7, 2, True, False, "Relu"),  # ResNet50's res5a downsample: 14 -> 7
        "g": (2, 200, 32, 3, 4, 3, True, True, None),  # stride 3 on 9x11: 3x4
    }
    for name, (N, K, M, H, W, s, has_b, res, act) in cases.items():
        ih, iw = (H - 1) * s + 1 + (s > 1), (W - 1) * s + 1 + (s > 2)  # uneven leftovers
        x = rng.standard_normal((N, K, ih, iw)).astype(np.float32)
        w = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [N, K, ih, iw]))
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        nodes.append(helper.make_node("Conv", conv_in, [cur], kernel_shape=[1, 1], strides=[s, s]))
        if res:
            feeds[f"r{name}"] = rng.standard_normal((N, M, H, W)).astype(np.float32) * 3
            ins.append(vi(f"r{name}", [N, M, H, W]))
            nodes.append(helper.make_node("Add", [cur, f"r{name}"], [f"s{name}"]))
            cur = f"s{name}"
        nodes.append(act_node(act, cur, f"y{name}"))
        outs.append(vi(f"y{name}", [N, M, H, W]))
    inits += act_inits()
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "pw.onnx")
    return path, feeds, len(cases)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_pointwise_lanes_matches_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str
) -> None:

    path, feeds, n = _model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(LABEL) == n, kernels  # every case takes the path
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.parametrize(
    "flags",
    [
        ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"],
        ["-O2", "-DO2E_THREADS=2", "-pthread"],
    ],
    ids=["native_asan_3threads", "portable_2threads"],
)
def test_pointwise_lanes_threads_and_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Split across threads (each with its own partial-sum slot), under ASan / UBSan: the
    padded weight and bias reads stay inside their arrays, and the results do not change."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds, _ = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, "t"), io, feeds, tmp_path)
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_wider_maps_and_small_k_keep_the_gemm(tmp_path: Path) -> None:
    """14x14 maps (the GEMM's strips are full there) and K < MIN_K stay on the packed GEMM, at
    AVX2 too under 1 MB of weights (conv_pointwise.avx2_lanes)."""
    rng = np.random.default_rng(3)
    nodes, ins, outs, inits = [], [], [], []
    shapes = {"wide": (256, 64, 14), "thin": (64, 64, 7), "m768": (256, 768, 13)}
    for name, (K, M, H) in shapes.items():
        inits.append(tensor(f"w{name}", rng.standard_normal((M, K, 1, 1)).astype(np.float32)))
        ins.append(vi(f"x{name}", [1, K, H, H]))
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}"], [f"y{name}"]))
        outs.append(vi(f"y{name}", [1, M, H, H]))
    path = save(make_model(nodes, ins, outs, inits, opset=13), tmp_path / "g.onnx")
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels == {"Conv: 1x1 as GEMM": 3}, kernels


# name: (N, K, M, H, W, bias, residual, activation)
Case = tuple[int, int, int, int, int, bool, bool, str]


def _layers_model(
    path: Path, cases: dict[str, Case], seed: int, nan_at: tuple, opset: int
) -> tuple[Path, dict[str, np.ndarray]]:
    """One 1x1 Conv per case, NaN / Inf at nan_at in case "a"'s input; a residual is an
    intermediate used once (its buffer may hold the output), and a last Neg keeps the
    convolution's output from being a graph output, so that it may alias."""
    rng = np.random.default_rng(seed)
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    acts = {"Clip": {}, "LeakyRelu": {"alpha": 0.2}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4}}
    for name, (N, K, M, H, W, has_b, res, act) in cases.items():
        x = rng.standard_normal((N, K, H, W)).astype(np.float32)
        if name == "a":
            for (c, i, j), v in zip(nan_at, (np.nan, np.inf, -np.inf), strict=True):
                x[0, c, i, j] = v
        feeds[f"x{name}"] = x
        ins.append(vi(f"x{name}", [N, K, H, W]))
        w = (rng.standard_normal((M, K, 1, 1)) / np.sqrt(K)).astype(np.float32)
        inits.append(tensor(f"w{name}", w))
        conv_in = [f"x{name}", f"w{name}"]
        if has_b:
            inits.append(tensor(f"b{name}", rng.standard_normal(M).astype(np.float32)))
            conv_in.append(f"b{name}")
        cur = f"c{name}"
        nodes.append(helper.make_node("Conv", conv_in, [cur], kernel_shape=[1, 1]))
        if res:
            feeds[f"r{name}"] = rng.standard_normal((N, M, H, W)).astype(np.float32)
            ins.append(vi(f"r{name}", [N, M, H, W]))
            nodes.append(helper.make_node("Neg", [f"r{name}"], [f"n{name}"]))
            nodes.append(helper.make_node("Add", [cur, f"n{name}"], [f"s{name}"]))
            cur = f"s{name}"
        act_in = [cur, "zero", "six"] if act == "Clip" else [cur]
        nodes.append(helper.make_node(act, act_in, [f"a{name}"], **acts.get(act, {})))
        nodes.append(helper.make_node("Neg", [f"a{name}"], [f"y{name}"]))
        outs.append(vi(f"y{name}", [N, M, H, W]))
    inits += act_inits()
    return save(make_model(nodes, ins, outs, inits, opset=opset), path), feeds


def _packed_model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """1x1 layers of 65..196 pixels with K >= 256 and >= 1 MB of weights
    (conv_pointwise.avx2_lanes): at AVX2 the lanes kernel over the GEMM's packed weights,
    elsewhere the GEMM. M not a multiple of the 16-channel tile or of the 8-row panels (1030,
    513, 520), odd pixel counts (9x11, 13x13), K across K slices and not a multiple of 256
    (520, 300), no bias, a batch of 2, NaN / Inf in the input, and residuals whose buffer the
    output may take (each used only by its Add) before Relu, Clip and an activation the tile
    cannot apply (Sigmoid)."""
    cases = {
        "a": (1, 256, 1030, 9, 11, True, True, "Relu"),
        "b": (2, 520, 513, 13, 13, False, False, "Clip"),
        "c": (1, 300, 880, 14, 14, True, True, "Sigmoid"),
        "d": (1, 512, 520, 9, 9, True, False, "LeakyRelu"),
    }
    nan_at = ((3, 2, 5), (7, 8, 10), (9, 0, 0))
    return _layers_model(tmp_path / "pa.onnx", cases, 5, nan_at, 13)


def _rows_model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """1x1 layers of >= 512 pixels with K <= 128 (conv_pointwise.avx512_rows): at AVX-512 the
    input rows read in place over the GEMM's packed weights, elsewhere the GEMM. M not a
    multiple of the 8-row panels (13, 60), pixel counts whose last 32-pixel strip is partial
    in either vector (575, 540, 784: its second vector empty) or whole (544), no bias, a batch
    of 2, NaN / Inf in the input, residuals whose buffer the output may take, every register
    activation, and one the kernel cannot apply (Sigmoid: the GEMM keeps that layer)."""
    cases = {
        "a": (1, 16, 64, 23, 25, True, True, "Relu"),
        "b": (2, 24, 13, 20, 27, False, False, "HardSwish"),
        "c": (1, 72, 60, 28, 28, True, True, "Clip"),
        "d": (1, 8, 24, 32, 17, True, False, "LeakyRelu"),
        "e": (1, 40, 16, 16, 40, True, True, "HardSigmoid"),
        "f": (1, 16, 16, 23, 23, True, False, "Sigmoid"),
    }
    nan_at = ((3, 2, 5), (7, 22, 24), (9, 0, 0))
    return _layers_model(tmp_path / "rows.onnx", cases, 7, nan_at, 14)


def _assert_matches(path: Path, feeds: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    ref = ort_run(onnx.load(path), feeds)
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
    ya = got["ya"]  # NaN / Inf propagate (Relu keeps NaN) as in onnxruntime
    assert np.array_equal(np.isnan(ya), np.isnan(ref["ya"])) and np.isnan(ya).any()


def _threaded_asan(path: Path, feeds: dict[str, np.ndarray], out: Path, march: str) -> None:
    """Built with 3 threads under ASan / UBSan at march, compared with onnxruntime."""
    import json

    from onnx2edge.backends.c.build import build_executable, run_executable

    io = json.loads((out / "onnx2edge.json").read_text())
    flags = [f"-march={march}", *ASAN, "-DO2E_THREADS=3", "-pthread"]
    got = run_executable(build_executable(out, flags, "t"), io, feeds, out)  # weights file
    _assert_matches(path, feeds, got)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_avx2_lanes_over_packed_weights_match_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _packed_model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(AVX2_LABEL) == 4 and kernels.get("Conv: 1x1 as GEMM") == 4, kernels
    _assert_matches(path, feeds, api.run(tmp_path / "out", feeds, options={"arch": arch}))


def test_avx2_lanes_over_packed_weights_threads_and_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AVX2 branch split across threads under ASan / UBSan: the clamped panel reads of M
    tails (1030, 513, 520 channels) stay inside the packed weights."""
    from onnx2edge.backends.c.kernels.pool import pool2d

    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0)  # every layer threaded
    path, feeds = _packed_model(tmp_path)
    api.convert(path, "c", tmp_path / "out")
    _threaded_asan(path, feeds, tmp_path / "out", "x86-64-v3")


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_avx512_rows_over_packed_weights_match_onnxruntime(tmp_path: Path, arch: str) -> None:
    path, feeds = _rows_model(tmp_path)
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get(ROWS_LABEL) == 5 and kernels.get("Conv: 1x1 as GEMM") == 6, kernels
    _assert_matches(path, feeds, api.run(tmp_path / "out", feeds, options={"arch": arch}))


def test_avx512_rows_threads_and_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The AVX-512 branch split across threads under ASan / UBSan: the masked last strips and
    the panels' rows past M stay inside the input, residual and output."""
    from onnx2edge.backends.c.kernels.conv import conv_pointwise

    monkeypatch.setattr(conv_pointwise, "ROWS_RATE_MACS", 0)  # every layer threaded
    path, feeds = _rows_model(tmp_path)
    api.convert(path, "c", tmp_path / "out")
    assert "o2e_conv1x1_rows_packed_a(&a, 1)" in (tmp_path / "out" / "model.c").read_text()
    _threaded_asan(path, feeds, tmp_path / "out", "native")
