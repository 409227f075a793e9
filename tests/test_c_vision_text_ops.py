"""C backend: RoiAlign, DeformConv, MaxUnpool, TfIdfVectorizer and ai.onnx.ml TreeEnsemble
against onnxruntime, and FlexAttention (ai.onnx.preview, expanded by the frontend into its ONNX
function) against onnx's reference evaluator (onnxruntime does not run preview ops)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.backend import CBackend

from conftest import make_model, save, tensor, vi

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _verify(tmp_path: Path, m: onnx.ModelProto, feeds: dict, **kw) -> None:  # noqa: ANN003
    rep = api.verify(save(m, tmp_path / "m.onnx"), target="c", inputs=feeds, **kw)
    assert rep.ok, rep.format()


@pytest.mark.parametrize(
    ("mode", "ctm", "ratio"), [("avg", "half_pixel", 0), ("max", "output_half_pixel", 2)]
)
def test_roi_align(tmp_path: Path, mode: str, ctm: str, ratio: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array(
        [[0, 0, 9, 9], [1.5, 2.2, 8.1, 7.7], [-2, -1, 3, 14], [4, 4, 4.5, 4.2]], np.float32
    )
    bidx = np.array([0, 1, 1, 0], np.int64)
    node = helper.make_node(
        "RoiAlign",
        ["x", "r", "b"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode=ctm,
        output_height=3,
        output_width=4,
        sampling_ratio=ratio,
        spatial_scale=0.8,
    )
    m = make_model(
        [node],
        [vi("x", [2, 3, 10, 12]), vi("r", [4, 4]), vi("b", [4], I64)],
        [vi("y", [4, 3, 3, 4])],
        opset=16,
    )
    _verify(tmp_path, m, {"x": x, "r": rois, "b": bidx}, rtol=1e-5, atol=1e-5)


def test_deform_conv(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    off = (rng.standard_normal((1, 2 * 2 * 9, 4, 3)) * 2).astype(np.float32)
    mask = rng.random((1, 2 * 9, 4, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node(
        "DeformConv",
        ["x", "w", "off", "b", "mask"],
        ["y"],
        group=2,
        offset_group=2,
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 0],
        dilations=[1, 1],
    )
    m = make_model(
        [node],
        [vi("x", [1, 4, 7, 6]), vi("off", [1, 36, 4, 3]), vi("mask", [1, 18, 4, 3])],
        [vi("y", [1, 6, 4, 3])],
        [tensor("w", w), tensor("b", b)],
        opset=19,
    )
    _verify(tmp_path, m, {"x": x, "off": off, "mask": mask}, rtol=1e-4, atol=1e-4)


def test_max_unpool(tmp_path: Path) -> None:
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    idx = np.array([[[[5, 7], [13, 15]], [[16, 19], [25, 30]]]], np.int64)
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    m = make_model(
        [node],
        [vi("x", [1, 2, 2, 2]), vi("i", [1, 2, 2, 2], I64)],
        [vi("y", [1, 2, 4, 4])],
        opset=11,
    )
    _verify(tmp_path, m, {"x": x, "i": idx - np.array([0, 16]).reshape(1, 2, 1, 1)}, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("mode", "skip", "lo", "hi"), [("TF", 0, 1, 2), ("IDF", 2, 2, 2), ("TFIDF", 1, 1, 3)]
)
def test_tfidf_vectorizer(tmp_path: Path, mode: str, skip: int, lo: int, hi: int) -> None:
    x = np.array(
        [[1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], [8, 8, 5, 7, 6, 1, 3, 5, 7, 3, 1, 1]], np.int32
    )
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 8, 1, 3, 1, 5, 7]  # 4 unigrams, 3 bigrams, 2 trigrams
    node = helper.make_node(
        "TfIdfVectorizer",
        ["x"],
        ["y"],
        mode=mode,
        min_gram_length=lo,
        max_gram_length=hi,
        max_skip_count=skip,
        ngram_counts=[0, 4, 10],
        ngram_indexes=list(range(9)),
        pool_int64s=pool,
        weights=[0.5, 1, 2, 3, 1.5, 1, 1, 0.25, 4],
    )
    m = make_model([node], [vi("x", [2, 12], TensorProto.INT32)], [vi("y", [2, 9])], opset=9)
    _verify(tmp_path, m, {"x": x}, rtol=0, atol=0)


def test_tree_ensemble(tmp_path: Path) -> None:
    """Two trees, a set-membership split and a NaN following the true branch."""
    node = helper.make_node(
        "TreeEnsemble",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        n_targets=2,
        aggregate_function=1,
        nodes_featureids=[0, 1, 0, 1],
        nodes_modes=tensor("m", np.array([0, 6, 3, 1], np.uint8)),
        nodes_splits=tensor("s", np.array([0.5, np.nan, -1.0, 2.0], np.float32)),
        membership_values=tensor("mv", np.array([1.0, 3.0, np.nan], np.float32)),
        nodes_truenodeids=[1, 0, 3, 2],
        nodes_trueleafs=[0, 1, 0, 1],
        nodes_falsenodeids=[1, 1, 2, 3],
        nodes_falseleafs=[1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0],
        leaf_targetids=[0, 1, 1, 0],
        leaf_weights=tensor("lw", np.array([1.5, -2.0, 4.0, 0.25], np.float32)),
        tree_roots=[0, 2],
    )
    x = np.array([[0.0, 1.0], [1.0, 3.0], [np.nan, 5.0], [-2.0, 1.0], [2.0, 2.5]], np.float32)
    g = helper.make_graph([node], "t", [vi("x", [5, 2])], [vi("y", [5, 2])])
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)]
    )
    m.ir_version = 10
    try:
        _verify(tmp_path, m, {"x": x}, rtol=1e-6, atol=1e-6)
    except AssertionError:
        raise
    except Exception as e:
        if "onnxruntime" not in str(e):
            raise
        pytest.skip(f"onnxruntime does not run TreeEnsemble: {str(e)[:80]}")


def test_flex_attention_matches_reference(tmp_path: Path) -> None:
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview")
    g = helper.make_graph(
        [node], "t", [vi(n, [1, 2, 4, 8]) for n in "qkv"], [vi("y", [1, 2, 4, 8])]
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    )
    m.ir_version = 10
    path = save(m, tmp_path / "m.onnx")
    out = api.convert(path, target="c", out_dir=tmp_path / "c")
    got = CBackend().run(out.out_dir, {"q": q, "k": k, "v": v}, {})["y"]
    want = ReferenceEvaluator(m).run(None, {"q": q, "k": k, "v": v})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
