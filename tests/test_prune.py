"""Issue 14: `onnx2edge prune` and the sparse C kernels (o2e_sparse.h) against onnxruntime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge import api
from onnx2edge.cli import main
from onnx2edge.prune import prune_model
from onnx2edge.runtime import ort_run

# every vector path of o2e_sparse.h: AVX-512 (this host), AVX2 + FMA, SSE (no AVX) and NEON
# (cross-built, run under qemu-user; correctness only, never timed)
ISAS = ["native", "x86-64-v3", "x86-64-v2", "aarch64"]
HAS_AARCH64 = shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")


def _isa(isa: str) -> object:
    skip = pytest.mark.skipif(
        isa == "aarch64" and not HAS_AARCH64,
        reason="needs aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu) and qemu-aarch64 (qemu-user)",
    )
    return pytest.param(isa, marks=skip)


ALL_ISAS = [_isa(i) for i in ISAS]


@pytest.fixture
def force_sparse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every eligible layer sparse whatever the measured break-even, so the kernels are tested
    at the sparsities the tests use on every ISA (`convert --kernels sparse=force`)."""
    monkeypatch.setitem(KERNELS, "sparse", "force")


KERNELS: dict[str, str] = {"sparse": "auto"}  # the kernels option `_run_c` converts with


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:  # noqa: ANN001
    m = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m


def mlp(
    batch: int, dims=(64, 200, 96, 10), seed: int = 0, matmul_last: bool = True
) -> onnx.ModelProto:  # noqa: ANN001
    """Gemm(transB=1)+Relu layers and a MatMul + Add head: both FC spellings of exporters."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    last = len(dims) - 2
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=False)):
        w = (rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32)
        bias = (rng.standard_normal(b) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(bias, f"b{i}"))
        if i == last and matmul_last:
            inits.append(numpy_helper.from_array(w.T.copy(), f"w{i}"))
            nodes += [
                helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"fc{i}"),
                helper.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"add{i}"),
            ]
        else:
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(
                helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], name=f"fc{i}", transB=1)
            )
        x = f"h{i}"
        if i < last:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, dims[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, dims[-1]])],
        inits,
    )


def conv1x1(n: int = 1, c: int = 96, m: int = 128, hw: int = 7, seed: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="pw"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, hw, hw])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )


def _w(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def _zeros(a: np.ndarray) -> float:
    return 1.0 - np.count_nonzero(a) / a.size


# --- the pruning pass -------------------------------------------------------------------------


def test_global_and_layer_scope_and_input_untouched() -> None:
    m = mlp(1)
    before = m.SerializeToString()
    g, rep = prune_model(m, 0.8, scope="global")
    assert m.SerializeToString() == before  # the input model is not mutated
    assert abs(rep.sparsity - 0.8) < 1e-3
    sizes = {n: _w(g, n).size for n in ("w0", "w1", "w2")}
    total = sum(_zeros(_w(g, n)) * s for n, s in sizes.items()) / sum(sizes.values())
    assert abs(total - 0.8) < 1e-3
    # global: one threshold, so the kept weights are exactly the largest |w| overall
    allw = np.concatenate([np.abs(_w(m, n)).ravel() for n in sizes])
    thr = np.sort(allw)[int(round(0.8 * allw.size))]
    for n in sizes:
        kept = np.abs(_w(g, n))[_w(g, n) != 0]
        assert kept.min() >= thr
    lay, _ = prune_model(m, 0.8, scope="layer")
    for n in sizes:
        assert abs(_zeros(_w(lay, n)) - 0.8) < 1.0 / sizes[n] + 1e-9
        # what stays are the originals, unchanged
        np.testing.assert_array_equal(_w(lay, n)[_w(lay, n) != 0], _w(m, n)[_w(lay, n) != 0])


def test_structured_channels_and_blocks() -> None:
    m = mlp(1)
    ch, _ = prune_model(m, 0.5, scope="layer", structured="channels")
    w0 = _w(ch, "w0")  # Gemm transB=1: rows are output channels
    rows = np.count_nonzero(w0, axis=1)
    assert set(rows.tolist()) <= {0, w0.shape[1]} and (rows == 0).mean() == 0.5
    w2 = _w(ch, "w2")  # MatMul B is (K, N): output channels are columns
    cols = np.count_nonzero(w2, axis=0)
    assert set(cols.tolist()) <= {0, w2.shape[0]} and (cols == 0).sum() == 5
    bl, _ = prune_model(m, 0.75, scope="layer", structured="blocks:4x8")
    w1 = _w(bl, "w1")  # (96, 200): 24 x 25 blocks of 4 x 8
    blocks = (w1.reshape(24, 4, 25, 8) != 0).any(axis=(1, 3))
    dense_blocks = (w1.reshape(24, 4, 25, 8) != 0).all(axis=(1, 3))
    np.testing.assert_array_equal(blocks, dense_blocks)  # whole blocks kept or removed
    assert abs(1 - blocks.mean() - 0.75) < 0.01


def test_skip_and_shared_weights() -> None:
    m = mlp(1)
    s, rep = prune_model(m, 0.9, skip=["fc1"])
    np.testing.assert_array_equal(_w(s, "w1"), _w(m, "w1"))
    assert _zeros(_w(s, "w0")) > 0.5 and "w1" not in rep.weights
    # two Gemms reading one initializer (tied weights): pruned once, one mask for both
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 128)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["a"], name="g1", transB=1),
        helper.make_node("Gemm", ["a2", "w"], ["b"], name="g2", transB=1),
        helper.make_node("Relu", ["x"], ["a2"], name="r"),
    ]
    vi = helper.make_tensor_value_info
    tied = _model(
        nodes,
        [vi("x", TensorProto.FLOAT, [1, 128])],
        [vi("a", TensorProto.FLOAT, [1, 32]), vi("b", TensorProto.FLOAT, [1, 32])],
        [numpy_helper.from_array(w, "w")],
    )
    p, rep = prune_model(tied, 0.5)
    assert len(p.graph.initializer) == 1 and abs(_zeros(_w(p, "w")) - 0.5) < 1e-3
    assert rep.weights["w"]["nodes"] == ["g1", "g2"] and any("pruned once" in n for n in rep.notes)
    # skipping one of the users leaves the shared tensor dense for both, with a note
    p2, rep2 = prune_model(tied, 0.5, skip=["g2"])
    np.testing.assert_array_equal(_w(p2, "w"), w)
    assert any("g2 skipped" in n for n in rep2.notes)
    # a weight also read by a node we do not prune (here an Add) is left dense
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["a"], name="g1", transB=1),
        helper.make_node("Add", ["w", "w"], ["ww"], name="add"),
    ]
    other = _model(
        nodes,
        [vi("x", TensorProto.FLOAT, [1, 128])],
        [vi("a", TensorProto.FLOAT, [1, 32]), vi("ww", TensorProto.FLOAT, [32, 128])],
        [numpy_helper.from_array(w, "w")],
    )
    p3, rep3 = prune_model(other, 0.5)
    np.testing.assert_array_equal(_w(p3, "w"), w)
    assert any("not pruned" in n for n in rep3.notes)


def test_cli_prune_sweep_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(mlp(40), src)
    out = tmp_path / "p.onnx"
    assert main(["prune", str(src), "-o", str(out), "--sparsity", "0.7", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert abs(rep["sparsity"] - 0.7) < 1e-3 and onnx.load(out).graph.node
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    np.savez(tmp_path / "eval.npz", x=x)
    sw = tmp_path / "sw.onnx"
    args = [
        "prune",
        str(src),
        "-o",
        str(sw),
        "--sweep",
        "0.3,0.6,0.95",
        "--eval",
        str(tmp_path / "eval.npz"),
        "--no-latency",
        "--tolerance",
        "0.2",
        "--json",
    ]
    assert main(args) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["sparsity"] for r in res["rows"]] == [0.0, 0.3, 0.6, 0.95]
    agree = [r["agreement"] for r in res["rows"]]
    assert agree[0] == 1.0 and agree[-1] < 1.0
    ok = [lv for lv, a in zip([0.3, 0.6, 0.95], agree[1:], strict=True) if a >= 0.8]
    assert res["chosen"] == (max(ok) if ok else None)  # the sparsest level within tolerance
    saved = onnx.load(sw)
    assert (
        abs(
            _zeros(np.concatenate([_w(saved, n).ravel() for n in ("w0", "w1", "w2")]))
            - (max(ok) if ok else 0.0)
        )
        < 1e-3
    )
    for bad in (
        ["--sparsity", "1.5"],
        ["--structured", "blocks:0x4"],
        ["--skip", "nope"],
        ["--sweep", "0.5"],
    ):
        assert main(["prune", str(src), "-o", str(tmp_path / "bad.onnx"), *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "bad.onnx").exists()


# --- sparse kernels in the C backend ----------------------------------------------------------


def _run_c(model: onnx.ModelProto, tmp: Path, isa: str, x: np.ndarray) -> tuple[dict, dict]:
    from onnx2edge.backends.c.build import build_and_run

    path = tmp / "m.onnx"
    onnx.save(model, path)
    out = tmp / "c"
    res = api.convert(path, "c", out, options={"kernels": dict(KERNELS)})
    return build_and_run(out, isa, {"x": x}), res.stats


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("batch", [1, 83])
def test_sparse_fc_matches_onnxruntime(
    tmp_path: Path, isa: str, batch: int, force_sparse: None
) -> None:
    pruned, _ = prune_model(mlp(batch), 0.9, scope="layer")
    x = np.random.default_rng(2).standard_normal((batch, 64)).astype(np.float32)
    got, stats = _run_c(pruned, tmp_path, isa, x)
    ref = ort_run(pruned, {"x": x})
    layers = {d["node"] for d in stats["sparse_layers"]}
    assert {"fc0", "fc1"} <= layers  # the head (960 weights) is below MIN_WEIGHTS: dense
    assert stats["sparse_bytes_saved"] > 0.7 * 4 * (64 * 200 + 200 * 96)
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("hw", [7, 9])  # 49 pixels: 3 vectors + a 1-lane tail; 81: 5 + 1
def test_sparse_conv1x1_matches_onnxruntime(
    tmp_path: Path, isa: str, hw: int, force_sparse: None
) -> None:
    pruned, _ = prune_model(conv1x1(n=2, hw=hw), 0.92)
    x = np.random.default_rng(3).standard_normal((2, 96, hw, hw)).astype(np.float32)
    got, stats = _run_c(pruned, tmp_path, isa, x)
    assert [d["node"] for d in stats["sparse_layers"]] == ["pw"]
    ref = ort_run(pruned, {"x": x})
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4, atol=1e-5)


def test_dense_stays_dense(tmp_path: Path) -> None:
    pruned, _ = prune_model(mlp(1), 0.3, scope="layer")  # well above every break-even density
    x = np.ones((1, 64), np.float32)
    got, stats = _run_c(pruned, tmp_path, "native", x)
    assert stats["sparse_layers"] == [] and stats["sparse_bytes_saved"] == 0
    np.testing.assert_allclose(got["h2"], ort_run(pruned, {"x": x})["h2"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("batch", [1, 70])
def test_sparse_nan_inf_like_dense_onnxruntime(
    tmp_path: Path, isa: str, batch: int, force_sparse: None
) -> None:
    """Pruned weights are zeros: onnxruntime's dense GEMM computes 0 * Inf = NaN for them, so
    the sparse kernels must turn those outputs into NaN too (and propagate NaN)."""
    pruned, _ = prune_model(mlp(batch, dims=(64, 200, 96)), 0.9, scope="layer")
    x = np.random.default_rng(4).standard_normal((batch, 64)).astype(np.float32)
    x[0, 3] = np.inf
    x[-1, 10] = -np.inf
    x[batch // 2, 20] = np.nan
    got, stats = _run_c(pruned, tmp_path, isa, x)
    assert len(stats["sparse_layers"]) == 2
    ref = ort_run(pruned, {"x": x})
    for k, v in ref.items():
        assert np.isnan(v).any()
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(v))
        np.testing.assert_array_equal(np.isposinf(got[k]), np.isposinf(v))
        fin = np.isfinite(v)
        np.testing.assert_allclose(got[k][fin], v[fin], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ALL_ISAS)
def test_sparse_conv1x1_inf(tmp_path: Path, isa: str, force_sparse: None) -> None:
    pruned, _ = prune_model(conv1x1(n=1, hw=5), 0.92)
    x = np.random.default_rng(5).standard_normal((1, 96, 5, 5)).astype(np.float32)
    x[0, 7, 2, 3] = np.inf
    got, _ = _run_c(pruned, tmp_path, isa, x)
    ref = ort_run(pruned, {"x": x})["y"]
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got["y"]), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got["y"][fin], ref[fin], rtol=1e-4, atol=1e-5)


def test_trained_digits_mlp_pruned_90(tmp_path: Path) -> None:
    """The committed digits MLP (examples/train_digits_mlp.py --hidden 256,128): the 90% model
    really is 90% sparse, converts to sparse kernels, and at batch 360 (the held-out set) the C
    build's predictions and logits match onnxruntime's."""
    from onnx2edge.prune import weight_sparsity

    fx = Path(__file__).parent / "fixtures" / "digits"
    m = onnx.load(fx / "mlp_prune_small_90.onnx")
    assert abs(weight_sparsity(m) - 0.9) < 1e-3
    x = np.load(fx / "mlp_prune_small_test.npz")["x"]
    labels = np.load(fx / "mlp_prune_small_labels.npy")
    for d in m.graph.input[0].type.tensor_type.shape.dim[:1]:
        d.ClearField("dim_param")
        d.dim_value = x.shape[0]
    for d in m.graph.output[0].type.tensor_type.shape.dim[:1]:
        d.ClearField("dim_param")
        d.dim_value = x.shape[0]
    got, stats = _run_c(m, tmp_path, "native", x)
    assert {d["node"] for d in stats["sparse_layers"]} == {"fc0", "fc1"}
    ref = ort_run(m, {"x": x})["fc2"]
    np.testing.assert_allclose(got["fc2"], ref, rtol=1e-4, atol=1e-4)
    dense = ort_run(onnx.load(fx / "mlp_prune_small_00.onnx"), {"x": x})["fc2"]
    acc_dense, acc_sparse = (
        (dense.argmax(1) == labels).mean(),
        (got["fc2"].argmax(1) == labels).mean(),
    )
    assert acc_dense > 0.95 and acc_sparse > 0.85  # small model: 90% costs it ~10 points


@pytest.mark.parametrize("isa", ALL_ISAS)
def test_block_sparse_batch1_matches_onnxruntime(tmp_path: Path, isa: str) -> None:
    """blocks:16x1 pruning takes the BSR kernel at batch 1 (full 16-lane FMAs per block); an
    Inf input is NaN in the rows of skipped blocks, as in onnxruntime's dense product."""
    pruned, _ = prune_model(
        mlp(1, dims=(64, 200, 90)), 0.8, scope="layer", structured="blocks:16x1"
    )
    x = np.random.default_rng(6).standard_normal((1, 64)).astype(np.float32)
    got, stats = _run_c(pruned, tmp_path, isa, x)
    assert {d["kind"] for d in stats["sparse_layers"]} == {"fc_batch1_bsr"}
    ref = ort_run(pruned, {"x": x})
    np.testing.assert_allclose(got["h1"], ref["h1"], rtol=1e-4, atol=1e-5)
    x[0, 5] = np.inf
    (tmp_path / "inf").mkdir()
    got, _ = _run_c(pruned, tmp_path / "inf", isa, x)
    ref = ort_run(pruned, {"x": x})["h1"]
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got["h1"]), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got["h1"][fin], ref[fin], rtol=1e-4, atol=1e-5)


# --- all-zero layers (issue 29 item 2) ----------------------------------------------------------


def _zeroed(model: onnx.ModelProto, name: str, keep: int = 0) -> onnx.ModelProto:
    """A copy of `model` whose initializer `name` is all zeros but its first `keep` values."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == name:
            a = numpy_helper.to_array(t).copy()
            a.reshape(-1)[keep:] = 0
            t.CopyFrom(numpy_helper.from_array(a, name))
    return out


def conv3x3(c: int = 16, m: int = 32, hw: int = 9) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    vi = helper.make_tensor_value_info
    return _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c3", pads=[1, 1, 1, 1])],
        [vi("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [vi("y", TensorProto.FLOAT, [1, m, hw, hw])],
        [numpy_helper.from_array(w, "w")],
    )


# (model, zeroed weight, nonzeros kept, input shape, sparse kind expected or None: dense path)
ZERO_LAYERS = {
    "gemm_batch1_bsc": (lambda: mlp(1), "w1", 0, (1, 64), "fc_batch1_bsr"),
    "gemm_batchN_spmm": (lambda: mlp(70), "w1", 0, (70, 64), "fc_batchN"),
    "matmul_head_spmv": (lambda: mlp(70, dims=(64, 512, 10)), "w1", 0, (70, 64), "fc_batchN"),
    "matmul_head_one_nz": (lambda: mlp(70, dims=(64, 512, 10)), "w1", 1, (70, 64), "fc_batchN"),
    "gemm_batch1_one_nz": (lambda: mlp(1), "w1", 1, (1, 64), "fc_batch1_bsr"),
    "conv1x1_spmm": (lambda: conv1x1(n=2), "w", 0, (2, 96, 7, 7), "conv1x1"),
    "conv3x3_dense": (conv3x3, "w", 0, (1, 16, 9, 9), None),
}


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("case", list(ZERO_LAYERS))
def test_all_zero_layer_builds_and_matches(
    tmp_path: Path, case: str, isa: str, force_sparse: None
) -> None:
    """A layer whose weight is all zeros (what a global prune used to leave) takes its sparse
    kernel with no stored nonzero / block: the C still compiles under -Werror (it did not:
    `array subscript ... outside array bounds of 'const float[1]'`) and matches onnxruntime,
    Inf inputs included (0 * Inf is NaN for every output of a zero layer)."""
    make, name, keep, shape, kind = ZERO_LAYERS[case]
    model = _zeroed(make(), name, keep)
    from onnx2edge.backends.c.build import build_and_run

    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    got, stats = _run_c(model, tmp_path, isa, x)
    kinds = {d["kind"] for d in stats["sparse_layers"]}
    assert kinds == ({kind} if kind else set())
    ref = ort_run(model, {"x": x})
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)
    x.reshape(-1)[5] = np.inf
    x.reshape(-1)[-3] = np.nan
    got = build_and_run(tmp_path / "c", isa, {"x": x})  # the same build, cached
    ref = ort_run(model, {"x": x})
    for k, v in ref.items():
        assert np.isnan(v).any()
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(v))
        np.testing.assert_array_equal(np.isposinf(got[k]), np.isposinf(v))
        fin = np.isfinite(v)
        np.testing.assert_allclose(got[k][fin], v[fin], rtol=1e-4, atol=1e-5)


# --- the per-layer ceiling (issue 29 item 2) --------------------------------------------------


def _small_middle(batch: int = 1) -> onnx.ModelProto:
    """mlp() whose middle layer's weights are all small (as trained layers can be): one global
    magnitude threshold at 90% takes all of them."""
    m = mlp(batch, dims=(64, 200, 96, 10))
    return _scaled(m, "w1", 1e-3)


def _scaled(model: onnx.ModelProto, name: str, f: float) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(f), name))
    return out


def test_global_prune_used_to_empty_a_layer_silently() -> None:
    m = _small_middle()
    p, rep = prune_model(m, 0.9, max_layer_sparsity=1.0)  # no cap: the former behaviour
    assert _zeros(_w(p, "w1")) == 1.0  # the whole layer gone ...
    assert any("every weight is zero" in w and "w1" in w for w in rep.warnings)  # ... now said


def test_max_layer_sparsity_caps_and_redistributes() -> None:
    m = _small_middle()
    p, rep = prune_model(m, 0.9)  # default cap
    assert rep.max_layer_sparsity == 0.98
    w1 = _w(p, "w1")
    assert abs(_zeros(w1) - 0.98) < 1.0 / w1.size + 1e-9
    # the target is still reached, from the other layers
    assert abs(rep.sparsity - 0.9) < 1e-3
    sizes = {n: _w(m, n).size for n in ("w0", "w1", "w2")}
    total = sum(_zeros(_w(p, n)) * s for n, s in sizes.items()) / sum(sizes.values())
    assert abs(total - 0.9) < 1e-3
    # the capped layer keeps its largest weights; among the others one threshold still holds
    kept1 = np.abs(w1[w1 != 0])
    assert kept1.min() >= np.sort(np.abs(_w(m, "w1")).ravel())[-kept1.size]
    thr = min(np.abs(_w(p, n)[_w(p, n) != 0]).min() for n in ("w0", "w2"))
    for n in ("w0", "w2"):
        pruned = np.abs(_w(m, n))[_w(p, n) == 0]
        assert pruned.max() <= thr
    (warn,) = rep.warnings
    assert warn.startswith("w1: capped at 98.0%") and "100.0%" in warn
    assert "warning: w1: capped" in rep.format()


def test_max_layer_sparsity_changes_nothing_below_the_cap() -> None:
    m = mlp(1)
    a, ra = prune_model(m, 0.8)
    b, rb = prune_model(m, 0.8, max_layer_sparsity=1.0)
    assert a.SerializeToString() == b.SerializeToString() and ra.warnings == rb.warnings == []


def test_max_layer_sparsity_structured_and_layer_scope() -> None:
    m = _small_middle()
    p, rep = prune_model(m, 0.5, structured="channels", max_layer_sparsity=0.75)
    rows = np.count_nonzero(_w(p, "w1"), axis=1)  # 96 output channels
    assert (rows == 0).sum() == 72 and any(w.startswith("w1: capped") for w in rep.warnings)
    assert abs(rep.sparsity - 0.5) < 0.02
    with pytest.raises(Exception, match="above --max-layer-sparsity 0.5"):
        prune_model(m, 0.6, scope="layer", max_layer_sparsity=0.5)
    _, rep = prune_model(m, 0.5, scope="layer", max_layer_sparsity=0.5)
    assert rep.warnings == []


def test_cli_max_layer_sparsity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_small_middle(), src)
    out = tmp_path / "p.onnx"
    assert main(["prune", str(src), "-o", str(out), "--sparsity", "0.9", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["max_layer_sparsity"] == 0.98 and len(rep["warnings"]) == 1
    assert abs(_zeros(_w(onnx.load(out), "w1")) - 0.98) < 1e-3
    assert main(["prune", str(src), "-o", str(out), "--max-layer-sparsity", "1"]) == 0
    assert "every weight is zero" in capsys.readouterr().out
    # unreachable under the cap, or a cap out of range: one line, exit 2, nothing written
    for bad in (["--sparsity", "0.99"], ["--max-layer-sparsity", "0"]):
        assert main(["prune", str(src), "-o", str(tmp_path / "bad.onnx"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "max-layer-sparsity" in err
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.parametrize("batch", [1, 40])
def test_emptied_layer_converts_with_default_kernels(tmp_path: Path, batch: int) -> None:
    """The issue's chain: a global prune that empties a layer (now only with the cap lifted),
    then `convert --target c` with the default kernels (the empty layer goes sparse), built
    with -Werror and checked against onnxruntime."""
    p, _ = prune_model(_small_middle(batch), 0.9, max_layer_sparsity=1.0)
    x = np.random.default_rng(9).standard_normal((batch, 64)).astype(np.float32)
    got, stats = _run_c(p, tmp_path, "native", x)
    assert "fc1" in {d["node"] for d in stats["sparse_layers"]}
    for k, v in ort_run(p, {"x": x}).items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)
