"""`convert --target c --weights fp16`: weights stored as IEEE half, widened to float32 by
each layer that reads them into its own arena scratch (no float32 copy of all weights),
computed in float32. Checked against onnxruntime on the original model and, bit
for bit up to float32 reassociation, on the same model with its weights rounded to fp16."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx2edge import api

from conftest import ALL_ISAS, SANITIZE_NATIVE, build_and_run, make_model, save, tensor, vi

DIGITS = Path(__file__).parent / "fixtures" / "digits"


def _rounded(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 initializer of >= 64 elements rounded to fp16 and back:
    what the C code computes with."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.size >= 64:
            t.CopyFrom(numpy_helper.from_array(a.astype(np.float16).astype(np.float32), t.name))
    return m


def _special_mlp() -> onnx.ModelProto:
    """Weights with fp16 subnormals, values near fp16's maximum and exact zeros."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((32, 96)).astype(np.float32)
    w1[0, :8] = [1e-6, -3e-7, 6e-8, 0.0, -0.0, 60000.0, -65504.0, 5.9e-5]
    w2 = (rng.standard_normal((96, 10)) / 8).astype(np.float32)
    b = np.linspace(-1, 1, 96, dtype=np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    return make_model(
        nodes,
        [vi("x", [1, 32])],
        [vi("y", [1, 10])],
        [tensor("w1", w1), tensor("w2", w2), tensor("b", b)],
    )


@pytest.mark.parametrize("weights_file", [False, True])
def test_fp16_storage_matches_rounded_model(tmp_path: Path, weights_file: bool) -> None:
    m = _special_mlp()
    src, ref = save(m, tmp_path / "m.onnx"), save(_rounded(m), tmp_path / "r.onnx")
    x = {"x": np.random.default_rng(1).standard_normal((1, 32)).astype(np.float32)}
    opts = {"weights": "fp16", "weights_file": weights_file}
    out = tmp_path / "c"
    res = api.convert(src, "c", out, options=opts)
    assert res.stats["weights_fp16_tensors"] == 3
    assert res.stats["weight_bytes"] * 2 == pytest.approx(res.stats["weight_bytes_fp32"], rel=0.01)
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert manifest["options"]["weights"] == "fp16"
    got = api.run(out, x)["y"]
    import onnxruntime as ort

    # against onnxruntime on the fp16-rounded weights: float32 reassociation only
    r = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"]).run(None, x)[0]
    o = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.abs(got - r).max() <= 1e-4 * np.abs(r).max() + 1e-6
    # against the fp32 original: fp16's 11-bit mantissa
    assert np.abs(got - o).max() <= 2e-3 * np.abs(o).max()
    if weights_file:
        assert (out / "model_weights.bin").stat().st_size < 0.55 * res.stats["weight_bytes_fp32"]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_fp16_digits_verify(tmp_path: Path, model: str) -> None:
    """The digits fixtures through `verify --target c` with fp16 weights, against onnxruntime
    on the original fp32 model with fp16-level tolerance, and top-1 unchanged."""
    shape = {"input": [1, 64] if model == "mlp" else [1, 1, 8, 8]}
    with np.load(DIGITS / "digits.npz") as z:
        xs = (z["x_test"][:2] / 16).astype(np.float32)
    for x in xs:
        rep = api.verify(
            DIGITS / f"{model}.onnx",
            target="c",
            input_shapes=shape,
            rtol=3e-3,
            inputs={"input": x.reshape(shape["input"])},
            options={"weights": "fp16"},
        )
        assert rep.ok, rep.format()


def test_fp16_sanitized(tmp_path: Path) -> None:
    """The decoder under ASan + UBSan (shifts of uint16 values, memcpy type punning)."""
    import onnxruntime as ort

    from onnx2edge.backends.c.build import build_executable, run_executable

    m = _special_mlp()
    src, ref = save(m, tmp_path / "m.onnx"), save(_rounded(m), tmp_path / "r.onnx")
    out = tmp_path / "c"
    api.convert(src, "c", out, options={"weights": "fp16", "weights_file": True})
    io = json.loads((out / "onnx2edge.json").read_text())
    x = {"x": np.random.default_rng(2).standard_normal((1, 32)).astype(np.float32)}
    got = run_executable(build_executable(out, SANITIZE_NATIVE, name="asan"), io, x, out)["y"]
    want = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-6


def test_cli_weights_fp16(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "onnx2edge.cli",
            "convert",
            str(DIGITS / "mlp.onnx"),
            "--target",
            "c",
            "-o",
            str(tmp_path / "c"),
            "--weights",
            "fp16",
            "--input-shape",
            "input=1x64",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "weights_fp16_tensors: 5" in r.stdout


def _ram_of_build(out: Path, name: str) -> int:
    """.data + .bss of the Makefile's build of model.c (`size -A`)."""
    from onnx2edge.backends.c.footprint import section_sizes

    proc = subprocess.run(["make", "-s", "-C", str(out), f"lib{name}.a"], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    sizes = section_sizes(out / f"{name}.o")
    return sum(n for s, n in sizes.items() if s.startswith((".data", ".bss")))


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("size") is None, reason="gcc")
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_fp16_weights_make_no_float32_copy(tmp_path: Path, model: str) -> None:
    """RAM (.data + .bss of the built object) with fp16 weights grows by at most the largest
    layer's float32 scratch, never by a float32 copy of all weights; the manifest names the
    layers that widen fp16 and the RAM figure convert states matches `size`."""
    shapes = {"input": [1, 64] if model == "mlp" else [1, 1, 8, 8]}
    res = {}
    for w in ("fp32", "fp16"):
        res[w] = api.convert(
            DIGITS / f"{model}.onnx", "c", tmp_path / w, input_shapes=shapes, options={"weights": w}
        )
    ram = {w: _ram_of_build(tmp_path / w, model) for w in res}
    s16 = res["fp16"].stats
    fp32_weights = s16["weight_bytes_fp32"]
    assert s16["weights_fp16_tensors"] > 0 and s16["fp16_weight_layers"]
    layers = set(s16["fp16_in_kernel_layers"]) | set(s16["fp16_scratch_layers"])
    assert set(s16["fp16_weight_layers"]) == layers
    if model == "mlp":  # every fully-connected layer widens its weights in registers
        assert set(s16["fp16_in_kernel_layers"]) == {"fc1", "fc2", "fc3"}, s16
    assert s16["fp16_scratch_bytes"] < fp32_weights
    assert ram["fp16"] <= ram["fp32"] + s16["fp16_scratch_bytes"] + 64, (ram, s16)
    assert ram["fp16"] < ram["fp32"] + fp32_weights / 8, ram  # no float32 copy
    fp = s16["footprint"]
    assert fp["weights_ram_bytes"] == 0
    assert abs(fp["ram_bytes"] - ram["fp16"]) <= 0.05 * ram["fp16"], (fp, ram)
    manifest = json.loads((tmp_path / "fp16" / "onnx2edge.json").read_text())
    assert manifest["stats"]["fp16_weight_layers"] == s16["fp16_weight_layers"]


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_fp16_at_every_isa(tmp_path: Path, arch: str) -> None:
    """The half -> float decoders (F16C at x86-64-v3 and native, the portable one at
    x86-64-v2, NEON fcvtl on aarch64 under qemu) through the digits CNN (scratch-widened
    convolutions, a packed GEMV), the digits MLP (fully connected skipping zero inputs) and
    the special-value MLP (subnormals, +-65504, signed zeros), against onnxruntime on the
    fp16-rounded models."""
    import onnxruntime as ort

    m = _special_mlp()
    cases = [
        (save(m, tmp_path / "m.onnx"), save(_rounded(m), tmp_path / "r.onnx"), None),
        (DIGITS / "cnn.onnx", None, {"input": [1, 1, 8, 8]}),
        (DIGITS / "mlp.onnx", None, {"input": [1, 64]}),
    ]
    with np.load(DIGITS / "digits.npz") as z:
        digit = (z["x_test"][:1] / 16).astype(np.float32)
    for i, (src, ref, shapes) in enumerate(cases):
        if ref is None:
            ref = save(_rounded(onnx.load(src)), tmp_path / f"r{i}.onnx")
        out = tmp_path / f"c{i}"
        api.convert(src, "c", out, input_shapes=shapes, options={"weights": "fp16"})
        sess = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        x = {
            name: digit.reshape(shapes[name])
            if shapes
            else np.random.default_rng(3).standard_normal((1, 32))
        }
        x = {k: v.astype(np.float32) for k, v in x.items()}
        want = sess.run(None, x)
        got = build_and_run(out, arch, x)
        stats = json.loads((out / "onnx2edge.json").read_text())["stats"]
        assert stats["fp16_weight_layers"], stats
        for o, w in zip(sess.get_outputs(), want, strict=True):
            assert np.abs(got[o.name] - w).max() <= 1e-4 * np.abs(w).max() + 1e-6, (arch, o.name)
