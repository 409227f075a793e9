"""Winograd convolution (backends/c/kernels/conv/winograd.py): exact transforms, and generated C against
onnxruntime on the shapes and fusions that reach it (odd sizes, pads, bias, activations,
residual, batch), plus which kernel a Conv gets."""

from __future__ import annotations

import functools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.kernels.conv import winograd

from conftest import ISA_CFLAGS, X86_V3, make_model, save, tensor, vi
from conv_models import conv_model

# x -> Conv 3x3 [-> Add r] [-> activation] -> y, He-initialised (tests/conv_models.py)
_conv_model = functools.partial(
    conv_model, C=32, M=48, H=13, W=11, pads=(1, 1, 1, 1), he_init=True, leaky_alpha=0.1
)


def _kernels(path: Path, out: Path, kernels: str = "") -> dict[str, int]:
    return api.convert(path, "c", out, options={"kernels": kernels}).stats["kernels"]


# --------------------------------------------------------------------------------------------
# the transforms, exactly
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_compute_correlation_exactly(m: int) -> None:
    """Aᵀ·[(G·g) ⊙ (Bᵀ·d)] is the 1-D correlation y_i = Σ_k g_k d_{i+k}, in exact arithmetic."""
    at, g, bt = winograd.matrices(m)
    n = m + 2
    rng = np.random.default_rng(m)
    for _ in range(5):
        gk = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        d = [Fraction(int(v)) for v in rng.integers(-9, 10, n)]
        u = [sum(g[j][k] * gk[k] for k in range(3)) for j in range(n)]
        v = [sum(bt[j][i] * d[i] for i in range(n)) for j in range(n)]
        y = [sum(at[i][j] * u[j] * v[j] for j in range(n)) for i in range(m)]
        assert y == [sum(gk[k] * d[i + k] for k in range(3)) for i in range(m)]
    # power-of-two normalisation leaves integer Bᵀ and Aᵀ
    assert all(v.denominator == 1 for row in bt for v in row)
    assert all(v.denominator == 1 for row in at for v in row)


def test_transformed_weights_match_a_direct_convolution() -> None:
    """numpy model of the whole algorithm in float64 against a direct 3x3 correlation."""
    rng = np.random.default_rng(0)
    C, M, m = 3, 2, 4
    x = rng.standard_normal((C, 6, 6))
    w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
    at_q, _, bt_q = winograd.matrices(m)
    at, bt = (np.array([[float(v) for v in row] for row in mat]) for mat in (at_q, bt_q))
    u = winograd.transform_weights(w, m).astype(np.float64).reshape(6, 6, M, C)
    v = np.einsum("ik,ckl,jl->ijc", bt, x, bt)
    y = np.einsum("ai,ijo,bj->oab", at, np.einsum("ijoc,ijc->ijo", u, v), at)
    ref = np.array(
        [
            [
                [np.sum(w[o].astype(np.float64) * x[:, a : a + 3, b : b + 3]) for b in range(m)]
                for a in range(m)
            ]
            for o in range(M)
        ]
    )
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# generated C against onnxruntime
# --------------------------------------------------------------------------------------------
CASES = {
    "odd_13x11_pad1": {},
    "valid_10x9_pad0": {"H": 10, "W": 9, "pads": (0, 0, 0, 0)},
    "pad2": {"H": 9, "W": 12, "pads": (2, 2, 2, 2)},
    "asymmetric_pads": {"H": 11, "W": 14, "pads": (2, 0, 1, 2)},
    "no_bias": {"bias": False},
    "relu": {"act": "Relu"},
    "clip": {"act": "Clip", "H": 17, "W": 19},
    "leaky_relu": {"act": "LeakyRelu"},
    "sigmoid_after": {"act": "Sigmoid"},
    "residual": {"residual": True, "M": 32},
    "residual_relu_no_bias": {
        "residual": True,
        "act": "Relu",
        "bias": False,
        "M": 32,
        "H": 15,
        "W": 15,
    },
    "batch2": {"batch": 2, "act": "Relu"},
    "wide_map_many_blocks": {"C": 64, "M": 64, "H": 58, "W": 61, "act": "Relu"},
    "f2_small_map": {"C": 48, "M": 40, "H": 7, "W": 9, "act": "Relu"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_winograd_matches_onnxruntime(tmp_path: Path, case: str) -> None:
    path = _conv_model(tmp_path / "m.onnx", **CASES[case])
    kernels = _kernels(path, tmp_path / "out")
    assert any(k.startswith("Conv: winograd") for k in kernels), kernels
    rep = api.verify(path, target="c")
    assert rep.ok, rep


@pytest.mark.parametrize("relu", [False, True], ids=["conv", "conv_relu"])
def test_deep_networks_start_with_f2(tmp_path: Path, relu: bool) -> None:
    """Where DEEP or more weighted layers follow (errors amplified the most), F(2x2) is used.
    With a Relu after each Conv the layers are fused o2e.ConvAct nodes by then, and count too
    (they did not, once: Inception-v3 ran F(4x4) in its stem and missed 1e-4)."""
    depth = winograd.DEEP + 3
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    for i in range(depth):
        w = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
        inits.append(tensor(f"w{i}", w))
        out = "y" if i == depth - 1 else f"t{i}"
        conv_out = f"c{i}" if relu else out
        nodes.append(
            helper.make_node(
                "Conv",
                [f"t{i - 1}" if i else "x", f"w{i}"],
                [conv_out],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                name=f"conv{i}",
            )
        )
        if relu:
            nodes.append(helper.make_node("Relu", [conv_out], [out], name=f"relu{i}"))
    path = save(
        make_model(nodes, [vi("x", [1, 16, 20, 20])], [vi("y", [1, 16, 20, 20])], inits),
        tmp_path / "deep.onnx",
    )
    graph = api.prepare(path, "c")
    assert [winograd.layers_after(graph, n) for n in graph.nodes][:2] == [depth - 1, depth - 2]
    kernels = _kernels(path, tmp_path / "out")
    f2 = depth - winograd.DEEP  # conv0 .. conv{f2-1} have >= DEEP layers after them
    assert kernels == {"Conv: winograd F(2x2,3x3)": f2, "Conv: winograd F(4x4,3x3)": depth - f2}


@pytest.mark.parametrize(
    "case", ["asymmetric_pads", "residual_relu_no_bias", "wide_map_many_blocks"]
)
def test_winograd_native_and_threaded_builds(tmp_path: Path, case: str) -> None:
    """The vectorised code (-march=native) and the threaded GEMMs compute the same."""
    path = _conv_model(tmp_path / "m.onnx", **CASES[case])
    flags = ["-O3", "-march=native", "-ffp-contract=fast", "-DO2E_THREADS=2", "-pthread"]
    rep = api.verify(path, target="c", options={"cflags": flags})
    assert rep.ok, rep
    if X86_V3 in ISA_CFLAGS:  # the AVX2 kernels on an AVX-512 host
        rep = api.verify(path, target="c", options={"cflags": X86_V3})
        assert rep.ok, rep


@pytest.mark.parametrize("m", ["2", "4"])
def test_forced_tile_size_on_edge_tiles(tmp_path: Path, m: str) -> None:
    path = _conv_model(tmp_path / "m.onnx", C=8, M=8, H=5, W=6, act="Relu", residual=True)
    forced = f"winograd={m}"  # convert --kernels winograd=2|4
    assert f"Conv: winograd F({m}x{m},3x3)" in _kernels(path, tmp_path / "out", forced)
    assert api.verify(path, target="c", options={"kernels": forced}).ok


@pytest.mark.parametrize(("hw", "c", "m"), [(13, 64, 2), (16, 64, 2), (17, 64, 4), (14, 512, 4)])
def test_f4_needs_25_tiles(tmp_path: Path, hw: int, c: int, m: int) -> None:
    """13x13 .. 16x16 maps (16 F(4x4) tiles: SqueezeNet fire9, GoogLeNet 4a-4e) run F(2x2),
    unless the layer has many input channels (VGG16 conv5)."""
    ks = _kernels(_conv_model(tmp_path / "a.onnx", C=c, M=64, H=hw, W=hw), tmp_path / "a")
    assert ks == {f"Conv: winograd F({m}x{m},3x3)": 1}, ks


def test_kernel_choice(tmp_path: Path) -> None:
    big = _kernels(_conv_model(tmp_path / "a.onnx", C=64, M=64, H=28, W=28), tmp_path / "a")
    assert big.get("Conv: winograd F(4x4,3x3)") == 1, big
    small_map = _kernels(_conv_model(tmp_path / "b.onnx", C=64, M=64, H=7, W=7), tmp_path / "b")
    assert small_map.get("Conv: winograd F(2x2,3x3)") == 1, small_map
    residual = _kernels(
        _conv_model(tmp_path / "c.onnx", C=64, M=64, H=28, W=28, residual=True), tmp_path / "c"
    )
    assert "Conv: residual add in the Winograd output transform" in residual
    # not for strided, grouped or narrow convolutions
    for name, kw in {
        "strided": {"strides": (2, 2)},
        "grouped": {"group": 2},
        "narrow": {"C": 3},
        "tiny_map": {"H": 3, "W": 3},
    }.items():
        ks = _kernels(_conv_model(tmp_path / f"{name}.onnx", **kw), tmp_path / name)
        assert not any(k.startswith("Conv: winograd") for k in ks), (name, ks)
    d = _conv_model(tmp_path / "d.onnx", C=64, M=64, H=28, W=28)
    off = _kernels(d, tmp_path / "d", "winograd=off")
    assert not any(k.startswith("Conv: winograd") for k in off), off


# --------------------------------------------------------------------------------------------
# the kernels on buffers of exactly the planned sizes, under AddressSanitizer
# --------------------------------------------------------------------------------------------
HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "o2e_winograd.h"
static float *load(const char *path, size_t n) {
  float *p = malloc(n * sizeof(float));
  FILE *f = fopen(path, "rb");
  if (!p || !f || fread(p, sizeof(float), n, f) != n) exit(2);
  fclose(f);
  return p;
}
int main(int argc, char **argv) {
  (void)argc;
  float *x = load(argv[1], @XN@), *u = load(argv[2], @UN@), *bias = load(argv[3], @M@), *res = load(argv[4], @YN@);
  unsigned char *bits = malloc(@BN@);
  FILE *fb = fopen(argv[6], "rb");
  if (!bits || !fb || fread(bits, 1, @BN@, fb) != @BN@) exit(2);
  fclose(fb);
  const o2e_wino_direct dx = {x, u, bits, bits + @NZN@, @US@, @C@, @H@, @W@, @PT@, @PL@, 0};
  float *y = malloc(@YN@ * sizeof(float));
  float *e = malloc(@EN@ * sizeof(float)), *rb = malloc(@RBN@ * sizeof(float));
  float *v = malloc(@VN@ * sizeof(float)), *mm = malloc(@MN@ * sizeof(float));
  void *ws = malloc(@WSN@);
@CALLS@
  FILE *f = fopen(argv[5], "wb");
  fwrite(y, sizeof(float), @YN@, f);
  fclose(f);
  free(x); free(u); free(bias); free(res); free(y); free(e); free(rb); free(v); free(mm); free(ws); free(bits);
  return 0;
}
"""


@pytest.mark.parametrize(
    ("m", "C", "M", "H", "W", "pads", "rows"),
    [
        (4, 5, 9, 13, 11, (1, 1, 1, 1), None),
        (4, 3, 8, 9, 18, (2, 0, 1, 2), 1),
        (4, 4, 4, 6, 6, (0, 0, 0, 0), 1),
        (2, 6, 7, 7, 9, (1, 2, 0, 1), 2),
        (2, 3, 5, 4, 3, (2, 2, 2, 2), None),
    ],
)
def test_kernels_stay_inside_planned_scratch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    m: int,
    C: int,
    M: int,
    H: int,
    W: int,
    pads: tuple[int, ...],
    rows: int | None,
) -> None:
    import shutil
    import subprocess

    from onnx2edge.backends.c.gemm_pack import pack_a, packed_a_size, sgemm_workspace_bytes
    from onnx2edge.backends.c.kernels.gemm.gemm import HEADER

    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc not found")
    pt, pl, pb, pr = pads
    OH, OW = H + pt + pb - 2, W + pl + pr - 2
    plan = winograd.Plan(m, C, M, -(-OH // m), -(-OW // m))
    if rows is not None:
        monkeypatch.setattr(winograd, "rows_per_block", lambda *_: rows)
    n, TW, r = plan.n, plan.TW, plan.rows
    rng = np.random.default_rng(C * M)
    x = rng.standard_normal((C, H, W)).astype(np.float32)
    # a tile with NaN / Inf is computed directly (o2e_wino_direct_tile): its reads checked too
    x[C - 1, H // 2, W // 2], x[0, H - 1, 0] = np.inf, np.nan
    w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
    w[:, C - 1, 1, 1] = 0.0  # 0 * Inf = NaN where the Inf sits at the centre of the window
    nzbits, negbits = winograd.weight_bits(w)
    bias = rng.standard_normal(M).astype(np.float32)
    res = rng.standard_normal((M, OH, OW)).astype(np.float32)
    packed = np.concatenate([pack_a(k) for k in winograd.transform_weights(w, m)])
    stride = packed_a_size(M, C)
    fin, fout = f"o2e_winograd_f{m}_in", f"o2e_winograd_f{m}_out"  # runtime/o2e_winograd.h
    calls, ws = [], 64
    for row0 in range(0, plan.TH, r):
        nth = min(r, plan.TH - row0)
        nt, ld, vs, ms = plan.strides(nth)
        ws = max(ws, sgemm_workspace_bytes(M, nt, C))
        calls += [
            f"  {fin}(x, {C}, {H}, {W}, {pt}, {pl}, {row0}, {nth}, {TW}, {ld}, {vs}, e, rb, v);",
            f"  for (int k = 0; k < {n * n}; ++k) o2e_sgemm_packed({M}, {nt}, {C}, u + (size_t)k * {stride}, "
            f"v + (size_t)k * {vs}, {ld}, mm + (size_t)k * {ms}, {ld}, 0, NULL, NULL, NULL, 0, (o2e_act){{0, 0, 0}}, ws);",
            f"  {fout}(mm, {M}, {row0}, {nth}, {TW}, {ld}, {ms}, {OH}, {OW}, bias, res, y, (o2e_act){{1, 0, 0}}, e, &dx);",
        ]
    sizes = plan.scratch()
    src = HARNESS
    for key, val in {
        "@BN@": nzbits.size + negbits.size,
        "@NZN@": nzbits.size,
        "@US@": stride,
        "@C@": C,
        "@H@": H,
        "@W@": W,
        "@PT@": pt,
        "@PL@": pl,
        "@CALLS@": "\n".join(calls),
        "@XN@": x.size,
        "@UN@": packed.size,
        "@M@": M,
        "@YN@": res.size,
        "@EN@": sizes[0],
        "@RBN@": sizes[1],
        "@VN@": sizes[2],
        "@MN@": sizes[3],
        "@WSN@": ws,
    }.items():
        src = src.replace(key, str(val))
    (tmp_path / "h.c").write_text(src)
    from onnx2edge.backends.c.headers import RUNTIME as runtime

    assert (runtime / HEADER).is_file()
    exe = tmp_path / "h"
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            f"-I{runtime}",
            str(tmp_path / "h.c"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    files = []
    for name, arr in (("x", x), ("u", packed), ("b", bias), ("r", res)):
        arr.astype(np.float32).tofile(tmp_path / name)
        files.append(str(tmp_path / name))
    np.concatenate([nzbits, negbits]).tofile(tmp_path / "bits")
    subprocess.run([str(exe), *files, str(tmp_path / "y"), str(tmp_path / "bits")], check=True)
    y = np.fromfile(tmp_path / "y", np.float32).reshape(M, OH, OW)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr)))
    ref = np.einsum(
        "ocij,cyxij->oyx",
        w.astype(np.float64),
        np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2)),
    )
    ref = ref + bias[:, None, None] + res
    ref = np.where(ref < 0, 0, ref)  # Relu keeping NaN, as the kernel's
    assert np.isnan(ref).any() and np.isposinf(ref).any()
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(y[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-4 * np.abs(ref[fin]).max())


@pytest.mark.parametrize(
    ("case", "blocks"), [("wide_map_many_blocks", True), ("f2_small_map", False)]
)
def test_threading_scheme_builds_alone(tmp_path: Path, case: str, blocks: bool) -> None:
    """A model whose only Winograd layer shares whole blocks between threads (or only its
    products) compiles without unused helpers and computes the same at 1 and 3 threads."""
    path = _conv_model(tmp_path / "m.onnx", **CASES[case])
    api.convert(path, "c", tmp_path / "out")
    code = (tmp_path / "out" / "model.c").read_text()
    assert ("o2e_winograd_blocks_" in code) == blocks
    assert ("o2e_wino_gemms" in code) != blocks
    for flags in (
        ["-O3", "-march=native"],
        ["-O3", "-march=native", "-DO2E_THREADS=3", "-pthread"],
    ):
        rep = api.verify(path, target="c", options={"cflags": flags})
        assert rep.ok, (flags, rep)
