"""runtime/o2e_qgemm.h o2e_qphase: strided int8 convolutions on phase planes (no im2col),
bit-exact against onnxruntime's QLinearConv at every ISA.

The models take and return the quantized bytes (DQ -> Conv -> Q between uint8 / int8 graph
inputs and outputs), so every output byte is compared, with no float edge in between.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.backends.c.kernels.int8.qgemm_kernels import phase_offsets
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, save
from conv_models import qdq_conv_model

# name: (C, M, H, W, kernel (kh, kw), strides, pads, dilation, x type, x zp, y zp, activation)
CASES = {
    # a ResNet stem in small: 7x7 stride 2, rows long enough for the 16-byte deinterleave
    "stem_7x7_s2": (3, 8, 45, 47, (7, 7), (2, 2), [3, 3, 3, 3], 1, np.uint8, 128, 0, "Relu"),
    # odd sizes, int8 activations, 3x3 stride 2 (ResNet's res3a / res4a / res5a)
    "s8_3x3_s2": (13, 19, 15, 17, (3, 3), (2, 2), [1, 1, 1, 1], 1, np.int8, -30, -5, None),
    # stride 3 x 2, asymmetric pads wider than the kernel's reach, 1 x 5 kernel
    "s3x2_asym": (5, 9, 20, 41, (1, 5), (3, 2), [2, 0, 3, 4], 1, np.uint8, 3, 128, None),
    # stride 2 with dilation 2 (plane row / column = tap * 2 / 2)
    "s2_dilated": (4, 17, 23, 21, (3, 3), (2, 2), [2, 2, 2, 2], 2, np.uint8, 200, 7, "Relu"),
    # 1x1 stride 2 with padding (not the plain subsample) and no padding on a 3x3 stride 2
    "1x1_s2_pad": (6, 16, 9, 10, (1, 1), (2, 2), [1, 1, 0, 0], 1, np.uint8, 77, 250, None),
    "3x3_s2_nopad": (7, 33, 8, 34, (3, 3), (2, 2), [0, 0, 0, 0], 1, np.int8, 0, 9, None),
}


def _model(case: tuple, rng: np.random.Generator) -> onnx.ModelProto:
    C, M, H, W, (kh, kw), (sh, sw), pads, dl, dt, xz, yz, act = case
    wq = rng.integers(-128, 128, (M, C, kh, kw)).astype(np.int8)
    wq[0] = -128  # the widest products
    ws = (rng.random(M) * 0.004 + 0.0005).astype(np.float32)
    xs = np.float32(0.05)
    bq = rng.integers(-5000, 5000, M).astype(np.int32)
    ys = np.float32(0.3)
    return qdq_conv_model(
        (1, C, H, W),
        wq,
        ws,
        bq,
        x_q=(xs, xz),
        y_q=(ys, yz),
        dtype=dt,
        strides=(sh, sw),
        pads=pads,
        dilation=dl,
        act=act,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("qphase")
    rng = np.random.default_rng(31)
    out = {}
    for name, case in CASES.items():
        q = save(_model(case, rng), d / f"{name}.onnx")
        c = d / f"{name}_c"
        api.convert(q, "c", c)
        code = (c / "model.c").read_text()
        assert "o2e_qphase(" in code and "o2e_qim2col(" not in code, name
        out[name] = (q, c)
    return out


@pytest.mark.parametrize("arch", ALL_ISAS)
@pytest.mark.parametrize("case", list(CASES))
def test_strided_conv_phase_planes_bit_exact(models: dict, case: str, arch: str) -> None:
    """Every output byte equals onnxruntime's QLinearConv: strides 2 and 3 x 2, 7x7 / 3x3 /
    1x5 / 1x1 kernels, asymmetric pads, dilation, int8 and uint8 activations with zero points
    != 0, a fused Relu, outputs saturating."""
    q, c = models[case]
    C, H, W, dt = CASES[case][0], CASES[case][2], CASES[case][3], CASES[case][8]
    i = np.iinfo(dt)
    rng = np.random.default_rng(32)
    xv = rng.integers(i.min, i.max + 1, (1, C, H, W)).astype(dt)
    xv[0, 0, :2] = i.max  # extreme inputs under the -128 weights of output channel 0
    xv[0, 0, 2:4] = i.min
    x = {"x": xv}
    ref = ort_run(onnx.load(str(q)), x)["y"]
    got = build_and_run(c, arch, x)["y"]
    assert len(np.unique(ref)) > 16, case  # not a constant output
    bad = np.argwhere(got != ref)
    assert bad.size == 0, (bad[:5], got[tuple(bad[:5].T)], ref[tuple(bad[:5].T)])


def test_phase_offsets_address_the_padded_pixels() -> None:
    """Row (c, ky, kx) at offset + oy * Wq + ox reads padded pixel (oy*sh + ky*dh, ox*sw + kx*dw)
    of channel c: checked by rebuilding the planes in numpy and gathering through the offsets."""
    rng = np.random.default_rng(5)
    C, H, W, (kh, kw), (sh, sw), (ph, pw), dl = 3, 11, 13, (3, 2), (2, 3), (1, 2), (2, 1)
    x = rng.integers(0, 256, (C, H, W))
    xp = np.full((C, H + 2 * ph + 8, W + 2 * pw + 8), -1)
    xp[:, ph : ph + H, pw : pw + W] = x
    oh = (H + 2 * ph - dl[0] * (kh - 1) - 1) // sh + 1
    ow = (W + 2 * pw - dl[1] * (kw - 1) - 1) // sw + 1
    wq = ow + (kw - 1) * dl[1] // sw
    hq = oh + (kh - 1) * dl[0] // sh + 1
    planes = np.zeros((C, sh, sw, hq, wq), np.int64)
    for a in range(sh):
        for b in range(sw):
            planes[:, a, b] = xp[:, a : a + hq * sh : sh, b : b + wq * sw : sw][:, :hq, :wq]
    flat = planes.reshape(-1)
    off = phase_offsets(C, (kh, kw), [sh, sw], list(dl), hq, wq).reshape(C, kh, kw)
    for c in range(C):
        for ky in range(kh):
            for kx in range(kw):
                e = off[c, ky, kx] + np.arange(oh)[:, None] * wq + np.arange(ow)[None, :]
                want = xp[c, ky * dl[0] :: sh, kx * dl[1] :: sw][:oh, :ow]
                assert np.array_equal(flat[e], want), (c, ky, kx)
