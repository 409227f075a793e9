"""Detection / segmentation heads (issue 34): Softmax over an axis before the last
(runtime/o2e_softmax_cols.h: YOLOv8's DFL, [1, 16, 4, 8400] over axis 1) and float32 Resize of
the last two axes (ops/resize.py's o2e_resize2d_f32: LR-ASPP's 8x bilinear upsample, YOLOv8's
2x nearest), each built at every ISA (aarch64 under qemu) and compared with onnxruntime, NaN
and infinities included."""

from __future__ import annotations

import json
import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, ASAN, build_and_run, make_model, save, tensor, vi

F = TensorProto.FLOAT


def _specials(x: np.ndarray, seed: int) -> np.ndarray:
    """A few NaN / +-Inf at random places (their columns or rows come out NaN or Inf)."""
    x = x.copy()
    idx = np.random.default_rng(seed).choice(x.size, 6, replace=False)
    x.reshape(-1)[idx] = [np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf]
    return x


def _check(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    bad = [r for r in (compare(k, got[k], ref[k], 1e-5, 1e-6) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


# ------------------------------------------------------------------------------------------
# Softmax / LogSoftmax over a middle axis
# ------------------------------------------------------------------------------------------
def _softmax_model(path: Path, shape: list[int], axis: int) -> Path:
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], axis=axis),
        helper.make_node("LogSoftmax", ["x"], ["z"], axis=axis),
    ]
    outs = [vi("y", shape), vi("z", shape)]
    return save(make_model(nodes, [vi("x", shape)], outs, opset=13), path)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_softmax_columns_vs_onnxruntime(tmp_path: Path, arch: str) -> None:
    """The DFL layout (16 bins over axis 1), a column count that leaves a partial block of 64
    (4 * 70 = 280), several outer rows, axis 0; then the same with NaN / Inf placed."""
    rng = np.random.default_rng(0)
    for i, (shape, axis) in enumerate(
        [([1, 16, 4, 70], 1), ([3, 7, 130], 1), ([5, 2, 3], 0), ([2, 300, 9], -2)]
    ):
        path = _softmax_model(tmp_path / f"m{i}.onnx", shape, axis)
        out = tmp_path / f"c{i}"
        api.convert(path, "c", out)
        assert "o2e_softmax_cols(" in (out / "model.c").read_text()
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        for feed in (x, _specials(x, i)):
            got = build_and_run(out, arch, {"x": feed})
            _check(got, ort_run(onnx.load(path), {"x": feed}))


def test_softmax_columns_loops_vectorise(tmp_path: Path) -> None:
    """Every loop of o2e_softmax_cols.h along a block of columns vectorises at x86-64-v3 (compile
    only), with the generated model.c's pragma in force."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the -march names are x86-64 levels")
    path = _softmax_model(tmp_path / "m.onnx", [1, 16, 4, 70], 1)
    out = tmp_path / "c"
    api.convert(path, "c", out)
    cmd = ["gcc", "-O3", "-march=x86-64-v3", "-ffp-contract=fast", f"-I{out}", "-c"]
    r = subprocess.run(
        [*cmd, str(out / "model.c"), "-o", str(tmp_path / "m.o"), "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    done = set(re.findall(r"o2e_softmax_cols\.h:(\d+):\d+: optimized: loop vectorized", r.stderr))
    lines = (out / "o2e_softmax_cols.h").read_text().splitlines()
    # the loops over a block's columns: m's init, the max, exp + sum, LogSoftmax's sum and its
    # stores, 1 / sum, the scaling (s's zeroing becomes a memset, LogSoftmax's w calls of libm's
    # double log stay scalar: once a block, not once an element)
    loops = [
        i + 1
        for i, ln in enumerate(lines)
        if re.match(r"\s*for \(l = 0; l < w; \+\+l\)", ln) and not re.search(r"0\.0;|log\(", ln)
    ]
    assert len(loops) == 7, loops
    scalar = [(n, lines[n - 1].strip()) for n in loops if str(n) not in done]
    assert not scalar, (scalar, sorted(done))


# ------------------------------------------------------------------------------------------
# Resize of the last two axes, separably
# ------------------------------------------------------------------------------------------
RESIZE_CASES = {
    # name: (input shape, scales, mode, coordinate_transformation_mode)
    "bilinear_8x": ([1, 3, 7, 6], [1, 1, 8, 8], "linear", "half_pixel"),
    "nearest_2x": ([1, 4, 5, 6], [1, 1, 2, 2], "nearest", "asymmetric"),
    "cubic_down": ([2, 2, 9, 11], [1, 1, 0.5, 0.75], "cubic", "half_pixel"),
    "w_only": ([1, 2, 5, 6], [1, 1, 1, 2.5], "linear", "align_corners"),
    "h_only": ([1, 2, 5, 6], [1, 1, 3, 1], "linear", "pytorch_half_pixel"),
    "rank3": ([3, 4, 5], [1, 2, 2], "linear", "half_pixel"),
    "rank5": ([1, 2, 2, 3, 4], [1, 1, 1, 2, 2], "linear", "half_pixel"),
}


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_resize_rows_vs_onnxruntime(tmp_path: Path, arch: str) -> None:
    """Finite inputs against onnxruntime, NaN / Inf against the reference (see below)."""
    rng = np.random.default_rng(1)
    for name, (shape, scales, mode, ctm) in RESIZE_CASES.items():
        out_shape = [int(np.floor(d * s)) for d, s in zip(shape, scales, strict=True)]
        node = helper.make_node(
            "Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=ctm
        )
        model = make_model(
            [node],
            [vi("x", shape)],
            [vi("y", out_shape)],
            [tensor("s", np.array(scales, np.float32))],
            opset=19,
        )
        path = save(model, tmp_path / f"{name}.onnx")
        out = tmp_path / name
        api.convert(path, "c", out)
        assert "o2e_resize2d_planes(" in (out / "model.c").read_text(), name
        x = rng.standard_normal(shape).astype(np.float32)
        _check(build_and_run(out, arch, {"x": x}), ort_run(model, {"x": x}))
        # NaN / Inf: nearest copies, as onnxruntime (the reference sums 0 * Inf: NaN); linear
        # and cubic against the spec's reference: at a tap of weight 0 (a border, an exact
        # sample position) onnxruntime reads another neighbour than the reference (0 * NaN: NaN
        # in other places), and the generic loop follows the reference too
        x = _specials(x, 7)
        if mode == "nearest":
            _check(build_and_run(out, arch, {"x": x}), ort_run(model, {"x": x}))
            continue
        want = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.float32)
        big = np.finfo(np.float32).max  # the reference's cast saturates infinities to it
        want[np.abs(want) == big] *= np.inf
        _check(build_and_run(out, arch, {"x": x}), {"y": want})


# ------------------------------------------------------------------------------------------
# BatchNormalization left unfolded (DenseNet's pre-activation) with its activation fused
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ALL_ISAS)
def test_batchnorm_act_vs_onnxruntime(tmp_path: Path, arch: str) -> None:
    """Concat -> BN -> Relu (DenseNet: nothing before the BN to fold it into) and BN -> HardSwish
    become o2e.BatchNormalizationAct, one loop storing act(x * s + t), NaN / Inf included."""
    rng = np.random.default_rng(3)
    c = 6
    bn = [
        tensor(n, v.astype(np.float32))
        for n, v in (
            ("g", rng.standard_normal(c)),
            ("b", rng.standard_normal(c)),
            ("m", rng.standard_normal(c)),
            ("v", rng.random(c) + 0.5),
        )
    ]
    nodes = [
        helper.make_node("Concat", ["a", "c"], ["x"], axis=1),
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["t"]),
        helper.make_node("Relu", ["t"], ["y"]),
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["u"]),
        helper.make_node("HardSwish", ["u"], ["z"]),
    ]
    shape = [1, 3, 5, 7]
    full = [1, c, 5, 7]
    model = make_model(
        nodes, [vi("a", shape), vi("c", shape)], [vi("y", full), vi("z", full)], bn, opset=17
    )
    path = save(model, tmp_path / "m.onnx")
    out = tmp_path / "c"
    api.convert(path, "c", out)
    code = (out / "model.c").read_text()
    assert code.count("const float s = ") == 2, "two BN loops, in float (vector-wide)"
    assert "activation=Relu" in code and "activation=HardSwish" in code, "both fused"
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    for feed in ({"a": a, "c": b}, {"a": _specials(a, 4), "c": _specials(b, 5)}):
        _check(build_and_run(out, arch, feed), ort_run(model, feed))


def test_heads_split_across_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resize planes and softmax column blocks split across threads (each thread its own row
    cache), under ASan / UBSan: the same results as onnxruntime, NaN / Inf included."""
    from onnx2edge.backends.c.kernels import par_split

    monkeypatch.setattr(par_split, "PAR_MIN_US", 0)  # every node threaded
    shape = [2, 5, 6, 7]
    nodes = [
        helper.make_node("Resize", ["x", "", "s"], ["r"], mode="nearest"),
        helper.make_node("Resize", ["x", "", "s"], ["q"], mode="linear"),
        helper.make_node("Softmax", ["x"], ["y"], axis=1),
    ]
    big = [2, 5, 12, 14]
    outs = [vi("r", big), vi("q", big), vi("y", shape)]
    inits = [tensor("s", np.array([1, 1, 2, 2], np.float32))]
    model = make_model(nodes, [vi("x", shape)], outs, inits, opset=19)
    path = save(model, tmp_path / "m.onnx")
    out = tmp_path / "out"
    api.convert(path, "c", out)
    code = (out / "model.c").read_text()
    assert code.count("o2e_parallel_for(") == 3, "all three nodes threaded"
    io = json.loads((out / "onnx2edge.json").read_text())
    exe = build_executable(out, ["-march=native", *ASAN, "-DO2E_THREADS=3", "-pthread"], "t")
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    got = run_executable(exe, io, {"x": x}, tmp_path)
    _check(got, ort_run(model, {"x": x}))
    # NaN / Inf: nearest and Softmax as onnxruntime (linear: see test_resize_rows_vs_onnxruntime)
    x = _specials(x, 9)
    got = run_executable(exe, io, {"x": x}, tmp_path)
    ref = ort_run(model, {"x": x})
    _check({k: got[k] for k in ("r", "y")}, {k: ref[k] for k in ("r", "y")})
