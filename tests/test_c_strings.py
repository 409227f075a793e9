"""C backend: string tensors (fixed-capacity UTF-8, ir.graph.STRING_BYTES) through StringConcat,
StringNormalizer, StringSplit, LabelEncoder and Equal, each compared with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_and_run
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.ir.graph import STRING_DTYPE

from conftest import make_model, save, vi

S, I64, B = TensorProto.STRING, TensorProto.INT64, TensorProto.BOOL


def _c_vs_ort(tmp_path: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    path = save(model, tmp_path / "m.onnx")
    api.convert(path, "c", tmp_path / "out")
    c_feeds = {
        k: np.array([s.encode() for s in v.reshape(-1)], STRING_DTYPE).reshape(v.shape)
        if v.dtype == object
        else v
        for k, v in feeds.items()
    }
    got = build_and_run(tmp_path / "out", "native", c_feeds)
    for name, w in want.items():
        g = got[name]
        if w.dtype == object:
            g = np.array([b.decode() for b in g.reshape(-1)], object).reshape(g.shape)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert (g == w).all(), (name, g, w)
    return got


def _strs(*xs: str) -> np.ndarray:
    return np.array(list(xs), dtype=object)


def test_string_concat_broadcast_and_utf8(tmp_path: Path) -> None:
    node = helper.make_node("StringConcat", ["x", "y"], ["z"])
    model = make_model([node], [vi("x", [3], S), vi("y", [1], S)], [vi("z", [3], S)], opset=20)
    _c_vs_ort(tmp_path, model, {"x": _strs("cat", "中", ""), "y": _strs("s的")})


def test_equal_on_strings(tmp_path: Path) -> None:
    node = helper.make_node("Equal", ["x", "y"], ["z"])
    model = make_model([node], [vi("x", [3], S), vi("y", [3], S)], [vi("z", [3], B)], opset=19)
    _c_vs_ort(tmp_path, model, {"x": _strs("a", "bc", ""), "y": _strs("a", "b", "")})


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
def test_string_normalizer_stopwords_and_case(tmp_path: Path, action: str) -> None:
    node = helper.make_node(
        "StringNormalizer",
        ["x"],
        ["y"],
        case_change_action=action,
        is_case_sensitive=0,
        stopwords=["monday"],
        locale="C",  # onnxruntime needs the locale installed; the C changes ASCII case anyway
    )
    model = make_model([node], [vi("x", [1, 4], S)], [vi("y", [1, 2], S)], opset=10)
    x = _strs("MonDay", "Tuesday", "monday", "wedNESday").reshape(1, 4)
    _c_vs_ort(tmp_path, model, {"x": x})


def test_string_normalizer_other_size_than_declared_fails_the_run(tmp_path: Path) -> None:
    """A data-dependent size: the declared shape is what C writes; other data makes _run fail."""
    node = helper.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a"], locale="C")
    model = make_model([node], [vi("x", [3], S)], [vi("y", [2], S)], opset=10)
    api.convert(save(model, tmp_path / "m.onnx"), "c", tmp_path / "out")
    x = np.array([b"a", b"a", b"b"], STRING_DTYPE)  # one kept, two declared
    with pytest.raises(Onnx2EdgeError):
        build_and_run(tmp_path / "out", "native", {"x": x})


@pytest.mark.parametrize(
    ("attrs", "width", "data"),
    [
        ({"delimiter": "-"}, 6, ["o-n-n--x-", "o-n----nx"]),
        ({}, 3, [" hello world   ! ", "a  b c"]),
        ({"maxsplit": 1}, 2, ["hello big world ", "x"]),
        ({"delimiter": "ab", "maxsplit": 2}, 3, ["1ab2ab3ab4", "ab"]),
    ],
)
def test_string_split(tmp_path: Path, attrs: dict, width: int, data: list[str]) -> None:
    node = helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs)
    outs = [vi("y", [2, width], S), vi("n", [2], I64)]
    model = make_model([node], [vi("x", [2], S)], outs, opset=20)
    _c_vs_ort(tmp_path, model, {"x": _strs(*data)})


def test_label_encoder_string_to_int_and_back(tmp_path: Path) -> None:
    nodes = [
        helper.make_node(
            "LabelEncoder",
            ["x"],
            ["i"],
            domain="ai.onnx.ml",
            keys_strings=["a", "b", "中"],
            values_int64s=[0, 1, 2],
            default_int64=42,
        ),
        helper.make_node(
            "LabelEncoder",
            ["i"],
            ["s"],
            domain="ai.onnx.ml",
            keys_int64s=[0, 1, 2],
            values_strings=["zero", "one", "two"],
        ),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [vi("x", [4], S)], [vi("i", [4], I64), vi("s", [4], S)]),
        opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)],
        ir_version=10,
    )
    _c_vs_ort(tmp_path, model, {"x": _strs("a", "中", "zz", "b")})


@pytest.mark.parametrize(
    ("pattern", "data"),
    [
        (r"www\.[\w.-]+\.\bcom\b", ["www.google.com", "www.bbc.co.uk", "www..com", "x"]),
        (
            r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
            ["a@gmail.com", " b@yahoo.com!", "c@x.com", ""],
        ),
        (r"a.c|[^x]{2,3}\d+", ["abc", "a中c", "中中7", "xx12", "a\nc"]),
        (r"(ab)*c?\s*[A-Fa-f0-9]+", ["ababc  ff", "c", "abab", "ab 0G"]),
        (r"\D\S\B.", ["a1bc", "中 b", "ab c", "!!"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_regex_full_match(tmp_path: Path, pattern: str, data: list[str]) -> None:
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)
    n = len(data)
    model = make_model([node], [vi("x", [n], S)], [vi("y", [n], B)], opset=20)
    _c_vs_ort(tmp_path, model, {"x": _strs(*data)})


def test_regex_without_c_meaning_is_refused() -> None:
    from onnx2edge.backends.c.ops.regex import RegexError, compile_nfa

    with pytest.raises(RegexError, match="groupref"):
        compile_nfa(r"(a)\1")
    with pytest.raises(RegexError, match="assert"):
        compile_nfa(r"a(?=b)")
