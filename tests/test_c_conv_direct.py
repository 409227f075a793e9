"""Direct convolution for few output channels (backends/c/kernels/conv/conv_direct.py) and ConvTranspose
by sub-pixel phases (ops/conv_transpose.py _convtranspose_phases), against onnxruntime.

Two ONNX models hold the cases. Conv: output channels 1 to 18 (one to five passes), kernels
1x1 to 9x9 with dilations, symmetric, asymmetric and huge pads, widths that leave full and
masked blocks, fused activations and residual, batch 2. ConvTranspose: strides 1 / 2 / 3,
kernels 1 to 5, pads, output_padding, groups, auto_pad, output_shape, kernels smaller than the
stride (output phases no tap reaches). Each is converted once per build and built several
ways: portable C99, AVX2 without AVX-512, native with threads (parallel threshold at zero and
small row blocks, so even small cases split and take the tail paths), and
AddressSanitizer/UBSan (masked loads at the row edges must stay inside the input).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.backends.c.kernels.conv import conv_direct
from onnx2edge.backends.c.kernels.pool import pool2d
from onnx2edge.backends.c.ops import conv_transpose
from onnx2edge.runtime import ort_run

from conftest import ASAN, NATIVE, make_model, save, tensor, vi

# Conv cases: (C, M, H, W, kernel, pads, dilations, bias, activation, residual, batch)
CONVS = [
    (32, 3, 20, 40, (9, 9), (4, 4, 4, 4), (1, 1), True, "Tanh", False, 1),  # conv_out, small
    (4, 1, 9, 37, (3, 3), (1, 1, 1, 1), (1, 1), False, None, False, 1),
    (5, 3, 7, 113, (5, 5), (2, 0, 1, 3), (1, 1), True, "Relu", False, 1),  # full + masked blocks
    (3, 5, 6, 29, (1, 1), (0, 0, 0, 0), (1, 1), True, None, False, 2),  # two passes, batch 2
    (6, 8, 5, 50, (3, 5), (0, 2, 1, 2), (2, 1), True, "Clip", False, 1),  # dilated, 4 + 4
    (2, 3, 5, 17, (9, 9), (4, 100, 4, 101), (1, 1), True, "LeakyRelu", False, 1),  # pad > block
    (7, 4, 11, 96, (3, 3), (1, 1, 1, 1), (1, 1), False, "Sigmoid", False, 1),  # OW = 96
    (8, 2, 4, 20, (9, 9), (4, 4, 4, 4), (1, 1), True, "Relu", True, 1),  # H < kernel; residual
    (3, 3, 12, 21, (5, 5), (2, 2, 2, 2), (2, 2), True, None, True, 1),  # dilation 2, residual
    (3, 18, 6, 33, (3, 3), (1, 1, 1, 1), (1, 1), True, "Relu", False, 1),  # 5 passes
]

# ConvTranspose cases: (C, M, H, W, kernel, strides, attrs, group, bias, activation, batch)
DECONVS = [
    (
        8,
        4,
        6,
        7,
        (3, 3),
        (2, 2),
        {"pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        1,
        True,
        "Relu",
        1,
    ),
    (4, 6, 5, 9, (4, 4), (2, 2), {"pads": [1, 1, 1, 1]}, 2, True, None, 1),
    (3, 2, 7, 5, (2, 2), (2, 2), {}, 1, False, "Tanh", 2),
    (5, 3, 6, 8, (3, 3), (1, 1), {"pads": [1, 1, 1, 1]}, 1, True, None, 1),
    (4, 3, 5, 6, (2, 2), (3, 3), {}, 1, True, "Relu", 1),  # phases no tap reaches: act(bias)
    (
        3,
        4,
        5,
        7,
        (3, 4),
        (2, 3),
        {"pads": [1, 0, 2, 1], "output_padding": [1, 2]},
        1,
        True,
        "Sigmoid",
        1,
    ),
    (4, 4, 6, 6, (3, 3), (2, 2), {"auto_pad": "SAME_UPPER"}, 1, True, None, 1),
    (2, 3, 4, 5, (3, 3), (2, 2), {"output_shape": [9, 11]}, 1, True, None, 1),
    (
        6,
        6,
        5,
        5,
        (5, 5),
        (2, 2),
        {"pads": [2, 2, 2, 2], "output_padding": [1, 1]},
        3,
        False,
        None,
        1,
    ),
    (4, 2, 6, 8, (1, 1), (2, 2), {}, 1, True, "Relu", 1),
    (3, 2, 5, 6, (3, 3), (2, 2), {"dilations": [2, 2]}, 1, True, None, 1),  # dilated: scatter path
]


def _model(tmp: Path, deconv: bool) -> tuple[Path, dict, dict, dict[str, str]]:
    """The model of CONVS or DECONVS, its inputs, onnxruntime's outputs, a description per output."""
    rng = np.random.default_rng(0)
    nodes, inputs, inits, feeds, what = [], [], [], {}, {}

    def feed(name: str, shape: tuple[int, ...]) -> None:
        inputs.append(vi(name, list(shape)))
        feeds[name] = rng.standard_normal(shape).astype(np.float32)

    for k, (C, M, H, W, ks, pads, dil, bias, act, res, batch) in enumerate([] if deconv else CONVS):
        feed(f"x{k}", (batch, C, H, W))
        w = (rng.standard_normal((M, C, *ks)) / np.sqrt(C * ks[0] * ks[1])).astype(np.float32)
        inits.append(tensor(f"w{k}", w))
        ins = [f"x{k}", f"w{k}"]
        if bias:
            inits.append(tensor(f"b{k}", rng.standard_normal(M).astype(np.float32)))
            ins.append(f"b{k}")
        nodes.append(
            helper.make_node(
                "Conv",
                ins,
                [f"c{k}"],
                kernel_shape=list(ks),
                pads=list(pads),
                dilations=list(dil),
                name=f"conv{k}",
            )
        )
        cur = f"c{k}"
        if res:
            OH = H + pads[0] + pads[2] - dil[0] * (ks[0] - 1)
            OW = W + pads[1] + pads[3] - dil[1] * (ks[1] - 1)
            feed(f"r{k}", (batch, M, OH, OW))
            nodes.append(helper.make_node("Add", [cur, f"r{k}"], [f"a{k}"], name=f"add{k}"))
            cur = f"a{k}"
        _act(nodes, inits, act, cur, f"y{k}", str(k))
        what[f"y{k}"] = (
            f"Conv {C}->{M} {H}x{W} k{ks} pads{pads} dil{dil} bias={bias} {act} res={res} N={batch}"
        )

    for k, (C, M, H, W, ks, st, attrs, group, bias, act, batch) in enumerate(
        DECONVS if deconv else []
    ):
        feed(f"dx{k}", (batch, C, H, W))
        w = (rng.standard_normal((C, M // group, *ks)) / np.sqrt(C * ks[0] * ks[1])).astype(
            np.float32
        )
        inits.append(tensor(f"dw{k}", w))
        ins = [f"dx{k}", f"dw{k}"]
        if bias:
            inits.append(tensor(f"db{k}", rng.standard_normal(M).astype(np.float32)))
            ins.append(f"db{k}")
        nodes.append(
            helper.make_node(
                "ConvTranspose",
                ins,
                [f"dc{k}"],
                kernel_shape=list(ks),
                strides=list(st),
                group=group,
                name=f"deconv{k}",
                **attrs,
            )
        )
        _act(nodes, inits, act, f"dc{k}", f"dy{k}", f"d{k}")
        what[f"dy{k}"] = (
            f"ConvTranspose {C}->{M} {H}x{W} k{ks} s{st} {attrs} g{group} bias={bias} {act} N={batch}"
        )

    outs = list(what)
    m = make_model(nodes, inputs, [vi(o, None) for o in outs], inits, opset=17)
    ref = ort_run(m, feeds)
    m = make_model(nodes, inputs, [vi(o, list(ref[o].shape)) for o in outs], inits, opset=17)
    return save(m, tmp / "cases.onnx"), feeds, ref, what


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict[str, str]]:
    return _model(tmp_path_factory.mktemp("conv_direct"), deconv=False)


@pytest.fixture(scope="module")
def deconv_model(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict, dict, dict[str, str]]:
    return _model(tmp_path_factory.mktemp("deconv_phases"), deconv=True)


def _act(nodes: list, inits: list, act: str | None, src: str, dst: str, tag: str) -> None:
    if act == "Clip":
        inits += [
            tensor(f"lo{tag}", np.array(-0.5, np.float32)),
            tensor(f"hi{tag}", np.array(0.7, np.float32)),
        ]
        nodes.append(helper.make_node("Clip", [src, f"lo{tag}", f"hi{tag}"], [dst]))
    elif act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [src], [dst], alpha=0.1))
    elif act is not None:
        nodes.append(helper.make_node(act, [src], [dst]))
    else:
        nodes.append(helper.make_node("Identity", [src], [dst]))


def _check(
    case: tuple[Path, dict, dict, dict[str, str]], flags: list[str], build: str, tmp: Path
) -> dict[str, int]:
    """Convert, build with `flags`, compare every output with onnxruntime; the kernel counts."""
    path, feeds, ref, what = case
    out = tmp / "out"
    kernels = api.convert(path, "c", out).stats["kernels"]
    io = json.loads((out / "onnx2edge.json").read_text())
    got = run_executable(build_executable(out, flags, build), io, feeds, tmp)
    bad = []
    for spec in io["outputs"]:
        name = spec["name"]
        r, o = ref[name], got[name]
        err = float(np.abs(o - r).max() / max(1.0, float(np.abs(r).max())))
        if o.shape != r.shape or not err <= 1e-5:
            bad.append(f"{name} ({what[name]}): max error {err:.2e}")
    assert not bad, "\n".join(bad)
    return kernels


# Serial direct convolutions need no GEMM engine: their builds skip its (slow to compile) header.
CONV_BUILDS = {
    "portable": ["-O2"],
    "avx2": ["-O2", "-mavx2", "-mfma"],
    "avx2_asan": ["-mavx2", "-mfma", *ASAN],
    "native_asan": ["-march=native", *ASAN],
    "native_2threads": [*NATIVE, "-DO2E_THREADS=2", "-pthread"],  # every conv split across threads
}


@pytest.mark.parametrize("build", list(CONV_BUILDS))
def test_direct_conv_matches_onnxruntime(
    build: str, conv_model: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = CONV_BUILDS[build]
    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", 0 if "-pthread" in flags else pool2d.PAR_MIN_WORK)
    kernels = _check(conv_model, flags, build, tmp_path)
    assert kernels.get("Conv: direct conv (few output channels)") == len(CONVS), kernels


DECONV_BUILDS = {
    # name: (gcc flags, parallel threshold, row block bytes)
    "portable": (["-O2"], pool2d.PAR_MIN_WORK, conv_transpose.DECONV_BLOCK_BYTES),
    "native_2threads": ([*NATIVE, "-DO2E_THREADS=2", "-pthread"], 0, 3000),  # many blocks, tails
    "native_asan_3threads": (["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"], 0, 3000),
}


@pytest.mark.parametrize("build", list(DECONV_BUILDS))
def test_deconv_phases_match_onnxruntime(
    build: str, deconv_model: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags, par_min, block_bytes = DECONV_BUILDS[build]
    monkeypatch.setattr(pool2d, "PAR_MIN_WORK", par_min)
    monkeypatch.setattr(conv_transpose, "DECONV_BLOCK_BYTES", block_bytes)
    kernels = _check(deconv_model, flags, build, tmp_path)
    # all but the dilated one
    assert (
        kernels.get("ConvTranspose: sub-pixel phases (GEMM per tap offset)") == len(DECONVS) - 1
    ), kernels


def _single_conv(path: Path, C: int, M: int, H: int, W: int, **attrs: object) -> Path:
    attrs = {"kernel_shape": [3, 3], "group": 1, **attrs}
    kh, kw = attrs["kernel_shape"]
    w = np.full((M, C // attrs["group"], kh, kw), 0.1, np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    ref = ort_run(
        make_model([node], [vi("x", [1, C, H, W])], [vi("y", None)], [tensor("w", w)]),
        {"x": np.ones((1, C, H, W), np.float32)},
    )["y"]
    return save(
        make_model([node], [vi("x", [1, C, H, W])], [vi("y", list(ref.shape))], [tensor("w", w)]),
        path,
    )


def test_kernel_choice(tmp_path: Path) -> None:
    """Up to 32 output channels (8 for 1x1), stride 1, group 1, at least one vector of output
    columns; Winograd first where it applies."""
    direct = "Conv: direct conv (few output channels)"

    def kernels(
        name: str, C: int, M: int, H: int, W: int, off: str = "", **attrs: object
    ) -> dict[str, int]:
        path = _single_conv(tmp_path / f"{name}.onnx", C, M, H, W, **attrs)
        return api.convert(path, "c", tmp_path / name, options={"kernels": off}).stats["kernels"]

    assert direct in kernels("rgb_out", 32, 3, 40, 40, kernel_shape=[9, 9], pads=[4, 4, 4, 4])
    assert direct in kernels("eight", 3, 8, 20, 30)
    assert direct in kernels("stem", 3, 32, 30, 40, kernel_shape=[9, 9])
    assert direct in kernels("pointwise", 16, 8, 20, 30, kernel_shape=[1, 1])
    for name, args in {
        "many_channels": (4, 33, 40, 40, {"kernel_shape": [5, 5]}),
        "pointwise_many": (16, 9, 40, 40, {"kernel_shape": [1, 1]}),
        "winograd": (16, 9, 40, 40, {}),
        "strided": (16, 3, 40, 40, {"strides": [2, 2]}),
        "grouped": (4, 2, 40, 40, {"group": 2}),
        "narrow": (16, 3, 40, 12, {}),
    }.items():
        C, M, H, W, attrs = args
        assert direct not in kernels(name, C, M, H, W, **attrs), name
    assert direct not in kernels("off", 32, 3, 40, 40, off="direct=off")


def test_passes_split_output_channels_evenly() -> None:
    assert [conv_direct.passes(m) for m in range(1, 10)] == [
        [1],
        [2],
        [3],
        [4],
        [3, 2],
        [3, 3],
        [4, 3],
        [4, 4],
        [3, 3, 3],
    ]


@pytest.mark.parametrize(
    "k, s, p, out, phases",
    [
        # ConvTranspose k3 s2 p1 output_padding 1 on 4 inputs -> 8 outputs: even outputs take tap
        # 1 at offset 0, odd ones taps 2 (offset 0) then 0 (offset 1)
        (3, 2, 1, 8, [([1], 0, 4), ([2, 0], 0, 4)]),
        (4, 2, 1, 8, [([3, 1], -1, 4), ([2, 0], 0, 4)]),
        (2, 3, 0, 9, [([0], 0, 3), ([1], 0, 3), ([], 0, 3)]),
        (3, 1, 1, 5, [([2, 1, 0], -1, 5)]),
    ],
)
def test_deconv_phase_taps(k: int, s: int, p: int, out: int, phases: list) -> None:
    assert [conv_transpose._deconv_phase(k, s, p, r, out) for r in range(s)] == phases


def test_deconv_phase_taps_reproduce_the_scatter() -> None:
    """Σ over phases of the per-phase correlations equals the 1-D transposed convolution."""
    rng = np.random.default_rng(3)
    for k, s, p, n, opad in [
        (3, 2, 1, 6, 1),
        (4, 2, 1, 5, 0),
        (5, 3, 2, 4, 2),
        (2, 3, 0, 4, 0),
        (3, 1, 0, 5, 0),
    ]:
        x, w = rng.standard_normal(n), rng.standard_normal(k)
        out = (n - 1) * s - 2 * p + k + opad
        ref = np.zeros(out)
        for i in range(n):
            for t in range(k):
                o = i * s - p + t
                if 0 <= o < out:
                    ref[o] += x[i] * w[t]
        got = np.zeros(out)
        for r in range(s):
            taps, d0, q = conv_transpose._deconv_phase(k, s, p, r, out)
            for qq in range(q):
                got[s * qq + r] = sum(
                    w[t] * x[qq + d0 + u] for u, t in enumerate(taps) if 0 <= qq + d0 + u < n
                )
        np.testing.assert_allclose(got, ref, atol=1e-12)
