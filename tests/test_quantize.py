"""`onnx2edge quantize` and `verify --reference`: every mode checked against onnxruntime's fp32
run of the original on real samples (the digits fixtures, tools/train_digits.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2edge
from onnx2edge import quantization as Q
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_session

DIGITS = Path(__file__).parent / "fixtures" / "digits"


def _run(path: Path | onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    # the reference verify uses: integer products exact even on AVX2 hosts (no VNNI)
    sess = ort_session(path if isinstance(path, onnx.ModelProto) else onnx.load(path))
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _rms_rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.sqrt(((got - ref) ** 2).sum() / (ref**2).sum()))


@pytest.fixture(scope="module")
def digits() -> dict[str, np.ndarray]:
    with np.load(DIGITS / "digits.npz") as z:
        return {k: z[k] for k in z.files}


def _x(digits: dict[str, np.ndarray], part: str, model: str, n: int | None = None) -> np.ndarray:
    x = (digits[f"x_{part}"][:n] / 16).astype(np.float32)
    return x.reshape(-1, 1, 8, 8) if model == "cnn" else x


@pytest.fixture(scope="module")
def calib(
    tmp_path_factory: pytest.TempPathFactory, digits: dict[str, np.ndarray]
) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("calib")
    out = {}
    for m in ("mlp", "cnn"):
        np.savez(d / f"{m}.npz", input=_x(digits, "train", m, 64))
        out[m] = d / f"{m}.npz"
    return out


def test_fixtures_are_trained(digits: dict[str, np.ndarray]) -> None:
    for m in ("mlp", "cnn"):
        assert (DIGITS / f"{m}.onnx").stat().st_size < 1_000_000
        acc = (
            _run(DIGITS / f"{m}.onnx", _x(digits, "test", m)).argmax(1) == digits["y_test"]
        ).mean()
        assert acc > 0.95, (m, acc)


# --- modes ----------------------------------------------------------------------------------
STATIC = [
    {"method": "minmax"},
    {"method": "percentile"},
    {"method": "entropy"},
    {"method": "minmax", "per_channel": True},
    {"method": "minmax", "activations": "int8"},
]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("opts", STATIC, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_static(model: str, opts: dict, tmp_path: Path, calib: dict[str, Path], digits) -> None:
    out = tmp_path / "q.onnx"
    res = onnx2edge.quantize(
        DIGITS / f"{model}.onnx", out, mode="static", calib=calib[model], **opts
    )
    q = onnx.load(out)
    ops = [n.op_type for n in q.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    assert q.ir_version <= Q.MAX_IR
    zp_types = {
        numpy_helper.to_array(t).dtype
        for t in q.graph.initializer
        if t.name.endswith("_zero_point") and "weight" not in t.name
    }
    want = np.dtype(np.uint8 if opts.get("activations", "uint8") == "uint8" else np.int8)
    assert want in zp_types
    if opts.get("per_channel"):
        w_scales = [
            t for t in q.graph.initializer if "weight" in t.name and t.name.endswith("_scale")
        ]
        assert any(len(t.dims) == 1 and t.dims[0] > 1 for t in w_scales)
    # MatMul + Add are fused into Gemm by pre-processing: "fc1/MatMulAddFusion"
    assert {n.split("/")[0] for n in res.quantized_nodes} >= (
        {"fc1", "fc2", "fc3"} if model == "mlp" else {"conv1", "conv2", "fc"}
    )
    x = _x(digits, "test", model)
    ref, got = _run(DIGITS / f"{model}.onnx", x), _run(out, x)
    assert _rms_rel(got, ref) <= 0.05
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.97
    assert res.size_after < 0.6 * res.size_before
    meta = {p.key: p.value for p in q.metadata_props}
    assert json.loads(meta["onnx2edge.quantize"])["method"] == opts["method"]


def test_dynamic_and_fp16(tmp_path: Path, digits) -> None:
    x = _x(digits, "test", "mlp")
    ref = _run(DIGITS / "mlp.onnx", x)
    res = onnx2edge.quantize(DIGITS / "mlp.onnx", tmp_path / "d.onnx", mode="dynamic")
    assert res.quantized_nodes == [f"fc{i}/MatMulAddFusion" for i in (1, 2, 3)]
    q = onnx.load(tmp_path / "d.onnx")
    assert [n.op_type for n in q.graph.node].count("MatMulInteger") == 3
    got = _run(tmp_path / "d.onnx", x)
    assert _rms_rel(got, ref) <= 0.05
    onnx2edge.quantize(DIGITS / "mlp.onnx", tmp_path / "h.onnx", mode="fp16")
    h = onnx.load(tmp_path / "h.onnx")
    assert {t.data_type for t in h.graph.initializer} == {TensorProto.FLOAT16}
    assert h.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # keep_io_types
    got = _run(tmp_path / "h.onnx", x)
    assert np.abs(got - ref).max() <= 2e-3 * np.abs(ref).max()
    assert (got.argmax(1) == ref.argmax(1)).all()


def _resize_model() -> onnx.ModelProto:
    """Conv -> Resize(scales) -> Conv: the fp16 trap (scales must stay float32)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c1", "", "scales"], ["r"], name="up", mode="nearest"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(
        nodes,
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 10])],
        [
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_fp16_keeps_resize_scales_and_sorts(tmp_path: Path) -> None:
    src = tmp_path / "r.onnx"
    onnx.save(_resize_model(), src)
    onnx2edge.quantize(src, tmp_path / "h.onnx", mode="fp16")
    h = onnx.load(tmp_path / "h.onnx")
    inits = {t.name: t.data_type for t in h.graph.initializer}
    assert inits["scales"] == TensorProto.FLOAT and inits["w1"] == TensorProto.FLOAT16
    onnx.checker.check_model(h)
    avail = {i.name for i in h.graph.input} | set(inits) | {""}
    for n in h.graph.node:  # topologically sorted
        assert all(i in avail for i in n.input), n.name
        avail.update(n.output)
    x = np.random.default_rng(1).standard_normal((1, 1, 5, 5)).astype(np.float32)
    ref, got = _run(src, x), _run(tmp_path / "h.onnx", x)
    assert got.shape == (1, 2, 10, 10)
    np.testing.assert_allclose(got, ref, atol=5e-3 * np.abs(ref).max())


def test_topo_sort_restores_order() -> None:
    m = _resize_model()
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(m)
    nodes = list(shuffled.graph.node)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes[::-1])
    assert [n.name for n in Q.topo_sort(shuffled).graph.node] == ["c1", "up", "c2"]


def test_exclude_named_nodes(tmp_path: Path, calib) -> None:
    res = onnx2edge.quantize(
        DIGITS / "cnn.onnx",
        tmp_path / "q.onnx",
        mode="static",
        calib=calib["cnn"],
        exclude=["conv2"],
    )
    assert "conv2" not in res.quantized_nodes and "conv1" in res.quantized_nodes
    q = onnx.load(tmp_path / "q.onnx")
    conv2 = next(n for n in q.graph.node if n.name == "conv2")
    w = next(t for t in q.graph.initializer if t.name == conv2.input[1])
    assert w.data_type == TensorProto.FLOAT  # its weight kept in fp32


def test_deterministic(tmp_path: Path, calib) -> None:
    for name in ("a", "b"):
        onnx2edge.quantize(
            DIGITS / "cnn.onnx",
            tmp_path / f"{name}.onnx",
            mode="static",
            calib=calib["cnn"],
            method="entropy",
        )
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


# --- calibration input ----------------------------------------------------------------------
def test_calib_formats(tmp_path: Path, digits) -> None:
    model = onnx.load(DIGITS / "cnn.onnx")
    x = _x(digits, "train", "cnn", 10)
    (tmp_path / "per_input").mkdir()
    np.save(tmp_path / "per_input" / "input.npy", x)
    (tmp_path / "files").mkdir()
    for i in range(10):  # one sample per file, batch axis included
        np.save(tmp_path / "files" / f"{i:03d}.npy", x[i : i + 1])
    for src in (tmp_path / "per_input", tmp_path / "files"):
        d = Q.load_calib(src, model)
        assert d.count == 10 and d.feeds["input"].shape == (10, 1, 1, 8, 8)
        np.testing.assert_array_equal(d.feeds["input"][:, 0], x)
    np.savez(tmp_path / "odd.npz", pixels=x)  # single input: any name
    assert Q.load_calib(tmp_path / "odd.npz", model).count == 10


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"input": np.zeros((4, 64), np.float32)}, "axes"),
        ({"input": np.zeros((4, 1, 7, 8), np.float32)}, "shape"),
        ({"input": np.full((4, 1, 8, 8), np.nan, np.float32)}, "NaN"),
        ({"a": np.zeros((4, 1, 8, 8)), "b": np.zeros((4, 1, 8, 8))}, "no array for input"),
    ],
)
def test_calib_errors(tmp_path: Path, arrays: dict, message: str) -> None:
    np.savez(tmp_path / "c.npz", **arrays)
    with pytest.raises(Onnx2EdgeError, match=message):
        Q.load_calib(tmp_path / "c.npz", onnx.load(DIGITS / "cnn.onnx"))


# --- automatic exclusion ----------------------------------------------------------------------
def _fragile_mlp(path: Path) -> None:
    """16-64-64-10 MLP where fc1's channel 0 is 1000x larger and fc2 reads it 1000x smaller:
    the same function in fp32, but a per-tensor int8 scale on fc1's output leaves the other 63
    channels a few levels, so quantizing that tensor ruins top-1 agreement."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 64)).astype(np.float32)
    w2 = rng.standard_normal((64, 64)).astype(np.float32) / 8
    w3 = rng.standard_normal((64, 10)).astype(np.float32) / 8
    w1[:, 0] *= 1000
    w2[0, :] /= 1000
    mk = helper.make_node
    nodes = [
        mk("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        mk("Relu", ["h1"], ["r1"], name="relu1"),
        mk("MatMul", ["r1", "w2"], ["h2"], name="fc2"),
        mk("Relu", ["h2"], ["r2"], name="relu2"),
        mk("MatMul", ["r2", "w3"], ["y"], name="fc3"),
    ]
    g = helper.make_graph(
        nodes,
        "fragile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2), ("w3", w3))],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


@pytest.fixture(scope="module")
def fragile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("fragile")
    _fragile_mlp(d / "m.onnx")
    np.savez(d / "c.npz", x=np.random.default_rng(4).standard_normal((128, 16)).astype(np.float32))
    return d / "m.onnx", d / "c.npz"


def test_auto_exclude_reaches_max_drop(tmp_path: Path, fragile) -> None:
    model, cal = fragile
    plain = onnx2edge.quantize(model, tmp_path / "p.onnx", mode="static", calib=cal)
    assert plain.metric_fp32 - plain.metric_quantized > 0.05  # the trap works
    res = onnx2edge.quantize(
        model, tmp_path / "a.onnx", mode="static", calib=cal, exclude="auto", max_drop=0.01
    )
    assert res.reached and res.metric_fp32 - res.metric_quantized <= 0.01
    assert res.excluded and len(res.excluded) < len(res.table)
    assert {r.node for r in res.table} >= {"fc1", "fc2", "fc3"}
    # the reported metric is what the written model does on the samples
    x = np.load(cal)["x"]
    agree = (_run(tmp_path / "a.onnx", x).argmax(1) == _run(model, x).argmax(1)).mean()
    assert agree == pytest.approx(res.metric_quantized)
    assert "fp32 kept" in res.format() and res.excluded[0] in res.format()


def test_auto_with_labels_uses_accuracy(tmp_path: Path, calib, digits) -> None:
    np.save(tmp_path / "y.npy", digits["y_train"][:64])
    res = onnx2edge.quantize(
        DIGITS / "cnn.onnx",
        tmp_path / "q.onnx",
        mode="static",
        calib=calib["cnn"],
        exclude="auto",
        labels=tmp_path / "y.npy",
    )
    assert res.metric_name == "accuracy"
    acc = (
        _run(DIGITS / "cnn.onnx", _x(digits, "train", "cnn", 64)).argmax(1)
        == digits["y_train"][:64]
    ).mean()
    assert res.metric_fp32 == pytest.approx(acc)
    assert res.reached and res.metric_fp32 - res.metric_quantized <= 0.01


def test_auto_fp16_and_dynamic(tmp_path: Path, fragile) -> None:
    """The sensitivity pass also runs for fp16 (every convertible node a candidate) and dynamic."""
    model, cal = fragile
    res = onnx2edge.quantize(model, tmp_path / "h.onnx", mode="fp16", calib=cal, exclude="auto")
    assert [r.node for r in sorted(res.table, key=lambda r: r.node)] == [
        "fc1",
        "fc2",
        "fc3",
        "relu1",
        "relu2",
    ]
    assert res.reached and res.metric_quantized == 1.0 and not res.excluded
    res = onnx2edge.quantize(
        model, tmp_path / "d.onnx", mode="dynamic", calib=cal, exclude="auto", max_drop=0.0
    )
    assert {r.node for r in res.table} == {"fc1", "fc2", "fc3"}
    assert res.reached and res.metric_quantized == res.metric_fp32


# --- per-layer comparison -------------------------------------------------------------------
def test_compare_names_the_fragile_layer(tmp_path: Path, fragile) -> None:
    model, cal = fragile
    onnx2edge.quantize(model, tmp_path / "q.onnx", mode="static", calib=cal)
    rep = onnx2edge.compare_quantized(tmp_path / "q.onnx", model, calib=cal)
    assert rep.samples == 128
    # fc1's output has the per-tensor scale that crushes 63 channels; the error shows where
    # they are consumed: fc2 (fused with relu2 by the quantizer)
    assert rep.worst(1)[0].node == "fc2+relu2"
    assert rep.worst(1)[0].added > 0.5
    names = [r.name for r in rep.layers]
    assert "y" in names and rep.outputs[0].name == "y"
    ref = {r.name: r for r in rep.layers}
    x = np.load(cal)["x"]
    got = _run(tmp_path / "q.onnx", x)
    want = _run(model, x)
    assert ref["y"].max_abs == pytest.approx(float(np.abs(got - want).max()), rel=1e-5)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "onnx2edge.cli", *args], capture_output=True, text=True, check=False
    )


def test_cli(tmp_path: Path, calib) -> None:
    out = tmp_path / "q.onnx"
    r = _cli(
        "quantize",
        str(DIGITS / "cnn.onnx"),
        "-o",
        str(out),
        "--mode",
        "static",
        "--calib",
        str(calib["cnn"]),
        "--per-channel",
        "--exclude",
        "fc",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["excluded"] == ["fc"] and doc["settings"]["per_channel"] is True
    r = _cli(
        "verify", str(out), "--reference", str(DIGITS / "cnn.onnx"), "--calib", str(calib["cnn"])
    )
    assert r.returncode == 0, r.stderr
    assert "diverges most at: node 'relu" in r.stdout or "diverges most at: node 'conv" in r.stdout
    assert "top-1 agreement with the reference: 1.0000" in r.stdout
    r = _cli("quantize", str(DIGITS / "cnn.onnx"), "-o", str(tmp_path / "x.onnx"), "--mode", "fp16")
    assert r.returncode == 0, r.stderr
    assert "8 nodes quantized" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "static"], "needs --calib"),
        (["--mode", "dynamic", "--activations", "int8"], "uint8 only"),
        (["--mode", "dynamic", "--exclude", "nosuch"], "no node named nosuch"),
        (["--mode", "dynamic", "--exclude", "auto"], "--exclude auto needs --calib"),
    ],
)
def test_cli_errors(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "q.onnx"
    r = _cli("quantize", str(DIGITS / "cnn.onnx"), "-o", str(out), *args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _conv_bn(path: Path) -> None:
    rng = np.random.default_rng(5)
    c = 8
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 2, c).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "m"),
        numpy_helper.from_array(rng.uniform(0.5, 2, c).astype(np.float32), "v"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "cbn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_batchnorm_folded_and_names_mapped(tmp_path: Path) -> None:
    """Pre-processing folds BatchNormalization into its Conv (no float BN between int8
    layers); --exclude names of fused nodes map, names of folded ones are refused clearly."""
    _conv_bn(tmp_path / "m.onnx")
    x = np.random.default_rng(6).standard_normal((32, 1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x)
    onnx2edge.quantize(
        tmp_path / "m.onnx", tmp_path / "q.onnx", mode="static", calib=tmp_path / "c.npz"
    )
    ops = [n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node]
    assert "BatchNormalization" not in ops and "Conv" in ops
    got, ref = _run(tmp_path / "q.onnx", x[0]), _run(tmp_path / "m.onnx", x[0])
    assert _rms_rel(got, ref) < 0.05
    with pytest.raises(Onnx2EdgeError, match="'bn' .*folded"):
        onnx2edge.quantize(
            tmp_path / "m.onnx",
            tmp_path / "e.onnx",
            mode="static",
            calib=tmp_path / "c.npz",
            exclude=["bn"],
        )
    res = onnx2edge.quantize(
        DIGITS / "mlp.onnx", tmp_path / "d.onnx", mode="dynamic", exclude=["fc2"]
    )
    assert res.excluded == ["fc2/MatMulAddFusion"]
    assert "fc2/MatMulAddFusion" not in res.quantized_nodes and len(res.quantized_nodes) == 2
