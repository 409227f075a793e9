"""ONNX <-> JSON: byte-identical round trips, editable weights, errors that name the JSON path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_run

from conftest import LIGHT_MODELS, make_model, save, tensor, vi

FMAX = float(np.finfo(np.float32).max)


def _det(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString(deterministic=True)


def _roundtrip(path: Path, tmp_path: Path, weights: str) -> onnx.ModelProto:
    out_json = tmp_path / f"m_{weights}.json"
    api.to_json(path, out_json, weights=weights)
    back = tmp_path / f"back_{weights}.onnx"
    api.from_json(out_json, back)
    return onnx.load(back, load_external_data=False)


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_light_models_roundtrip_byte_identical(path: Path, tmp_path: Path) -> None:
    orig = onnx.load(path)
    for mode in ("inline", "npy"):
        back = _roundtrip(path, tmp_path, mode)
        assert _det(back) == _det(orig), mode
    inits = {t.name for t in orig.graph.initializer}
    inp = next(i for i in orig.graph.input if i.name not in inits)
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in inp.type.tensor_type.shape.dim]
    )
    feeds = {inp.name: x.astype(np.float32)}
    a, b = ort_run(orig, feeds), ort_run(back, feeds)
    for k in a:
        assert np.array_equal(a[k], b[k])


def _special_values_model() -> onnx.ModelProto:
    special = np.array([np.nan, np.inf, -np.inf, FMAX, -FMAX, 0.0, -0.0, 1e-45, 0.1], np.float32)
    raw = numpy_helper.from_array(special, "raw")  # raw_data
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [9], special.tolist())  # float_data
    with np.errstate(over="ignore"):
        half = numpy_helper.from_array(special.astype(np.float16), "half")
    half_typed = helper.make_tensor(
        "half_typed", TensorProto.FLOAT16, [3], np.array([1.5, np.inf, -2], np.float16)
    )
    ints = helper.make_tensor(
        "ints", TensorProto.INT64, [3], [np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]
    )
    bools = numpy_helper.from_array(np.array([True, False]), "bools")
    u8 = helper.make_tensor("u8", TensorProto.UINT8, [2], [0, 255])
    dbl = helper.make_tensor("dbl", TensorProto.DOUBLE, [2], [np.nan, 1e308])
    strs = helper.make_tensor("strs", TensorProto.STRING, [2], [b"a", b"\xff\x00"])
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("LeakyRelu", ["c"], ["y"], name="lr", alpha=FMAX),
        helper.make_node(
            "Constant", [], ["k"], name="k", value=numpy_helper.from_array(special, "kv")
        ),
        helper.make_node("Add", ["y", "k"], ["z"], name="add"),
    ]
    m = make_model(
        nodes,
        [vi("x", [9])],
        [vi("z", [9])],
        [
            tensor("lo", np.array(-FMAX, np.float32)),
            tensor("hi", np.array(FMAX, np.float32)),
            raw,
            typed,
            half,
            half_typed,
            ints,
            bools,
            u8,
            dbl,
            strs,
        ],
    )
    m.doc_string = "unicode ✓"
    m.metadata_props.add(key="k", value="v")
    return m


@pytest.mark.parametrize("mode", ["inline", "npy", "auto"])
def test_special_values_roundtrip(tmp_path: Path, mode: str) -> None:
    path = save(_special_values_model(), tmp_path / "s.onnx")
    orig = onnx.load(path)
    assert _det(_roundtrip(path, tmp_path, mode)) == _det(orig)


def test_json_is_strict_and_readable(tmp_path: Path) -> None:
    path = save(_special_values_model(), tmp_path / "s.onnx")
    api.to_json(path, tmp_path / "s.json", weights="inline")
    text = (tmp_path / "s.json").read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    inits = {t["name"]: t for t in doc["model"]["graph"]["initializer"]}
    assert inits["raw"]["values"][:3] == ["NaN", "Infinity", "-Infinity"]
    assert inits["raw"]["values"][8] == 0.1  # shortest text, not 0.10000000149011612
    assert inits["raw"]["data_type"] == "FLOAT" and inits["raw"]["storage"] == "raw_data"
    assert inits["typed"]["storage"] == "float_data"


def test_edit_values_by_hand(tmp_path: Path, example: Path) -> None:
    api.to_json(example, tmp_path / "m.json", weights="inline")
    doc = json.loads((tmp_path / "m.json").read_text())
    fc_bias = next(t for t in doc["model"]["graph"]["initializer"] if t["name"] == "fc.bias")
    fc_bias["values"] = [float(i) for i in range(10)]
    (tmp_path / "m.json").write_text(json.dumps(doc))
    api.from_json(tmp_path / "m.json", tmp_path / "edited.onnx")
    w = {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(tmp_path / "edited.onnx").graph.initializer
    }
    assert np.array_equal(w["fc.bias"], np.arange(10, dtype=np.float32))


def test_edit_npy_by_hand(tmp_path: Path, example: Path) -> None:
    api.to_json(example, tmp_path / "m.json", weights="npy")
    doc = json.loads((tmp_path / "m.json").read_text())
    ref = next(t for t in doc["model"]["graph"]["initializer"] if t["name"] == "conv1.weight")[
        "npy"
    ]
    arr = np.load(tmp_path / ref)
    np.save(tmp_path / ref, arr * 2)
    api.from_json(tmp_path / "m.json", tmp_path / "edited.onnx")
    w = {
        t.name: numpy_helper.to_array(t)
        for t in onnx.load(tmp_path / "edited.onnx").graph.initializer
    }
    assert np.array_equal(w["conv1.weight"], arr * 2)


def test_external_data_survives(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    m = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [vi("x", [2, 3])],
        [vi("y", [2, 4])],
        [tensor("w", w)],
    )
    onnx.external_data_helper.convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    onnx.save_model(m, src / "m.onnx")
    orig = onnx.load(src / "m.onnx", load_external_data=False)
    (tmp_path / "j").mkdir()
    api.to_json(src / "m.onnx", tmp_path / "j" / "m.json")
    assert (tmp_path / "j" / "w.bin").is_file()
    (tmp_path / "o").mkdir()
    api.from_json(tmp_path / "j" / "m.json", tmp_path / "o" / "m.onnx")
    back = onnx.load(tmp_path / "o" / "m.onnx", load_external_data=False)
    assert _det(back) == _det(orig)
    loaded = onnx.load(tmp_path / "o" / "m.onnx")
    assert np.array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), w)


def _write_doc(tmp_path: Path, example: Path, edit) -> Path:  # noqa: ANN001
    api.to_json(example, tmp_path / "m.json", weights="inline")
    doc = json.loads((tmp_path / "m.json").read_text())
    edit(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    return tmp_path / "m.json"


@pytest.mark.parametrize(
    "edit,where",
    [
        (
            lambda d: d["model"]["graph"]["node"][2].update(bogus=1),
            r"\$\.model\.graph\.node\[2\]\.bogus: unknown field",
        ),
        (
            lambda d: d["model"]["graph"]["node"][0].update(input="x"),
            r"\$\.model\.graph\.node\[0\]\.input: expected a list",
        ),
        (
            lambda d: d["model"]["graph"]["initializer"][0].update(data_type="FLOAT99"),
            r"\$\.model\.graph\.initializer\[0\]\.data_type: unknown DataType 'FLOAT99'",
        ),
        (
            lambda d: d["model"]["graph"]["initializer"][0].update(values=[1.0, 2.0]),
            r"\$\.model\.graph\.initializer\[0\]\.values: 2 values for dims",
        ),
        (
            lambda d: d["model"]["graph"]["node"][3]["attribute"][0].update(ints=["a"]),
            r"\$\.model\.graph\.node\[3\]\.attribute\[0\]\.ints\[0\]: expected an integer",
        ),
        (
            lambda d: d["model"].update(ir_version="eight"),
            r"\$\.model\.ir_version: expected an integer",
        ),
        (lambda d: d.update(format="other"), r"\$: not an onnx2edge-json document"),
    ],
)
def test_bad_json_names_path(tmp_path: Path, example: Path, edit, where: str) -> None:  # noqa: ANN001
    path = _write_doc(tmp_path, example, edit)
    out = tmp_path / "out.onnx"
    with pytest.raises(Onnx2EdgeError, match=where):
        api.from_json(path, out)
    assert not out.exists()


def test_npy_path_outside_folder_refused(tmp_path: Path, example: Path) -> None:
    def edit(d):  # noqa: ANN001, ANN202
        t = d["model"]["graph"]["initializer"][0]
        t.pop("values")
        t["npy"] = "../../etc/passwd.npy"

    path = _write_doc(tmp_path, example, edit)
    with pytest.raises(Onnx2EdgeError, match=r"initializer\[0\]\.npy: .*outside"):
        api.from_json(path, tmp_path / "out.onnx")


def test_invalid_json_syntax(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('{"format": "onnx2edge-json", ')
    with pytest.raises(Onnx2EdgeError, match="invalid JSON at line 1"):
        api.from_json(p, tmp_path / "o.onnx")
    assert not (tmp_path / "o.onnx").exists()
