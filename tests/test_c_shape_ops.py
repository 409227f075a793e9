"""C backend data-movement and indexing ops (shape.py, indexing.py, resize.py) against
onnxruntime, on small hand-built models: each is converted, compiled, run, and compared.

Where onnxruntime departs from the ONNX spec's reference implementation (which the backend
node tests are generated from), the case is checked against onnx.reference instead; each such
place says why (`oracle="reference"`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnx2edge import api

from conftest import make_model, save, tensor, vi

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """The same data for a test however pytest-xdist distributes the tests."""
    global rng
    rng = np.random.default_rng(0)


def check(
    tmp_path: Path,
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    out_shape: list[int] | tuple[int, ...],
    *,
    consts: dict[str, np.ndarray] | None = None,
    opset: int = 19,
    out_type: int | None = None,
    outputs: dict[str, tuple[list[int], int]] | None = None,
    oracle: str = "ort",
) -> None:
    """One node; `inputs` are runtime inputs (fed as given), `consts` initializers."""
    ins = [
        vi(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for n, a in inputs.items()
    ]
    first = next(iter(inputs.values()))
    outs = outputs or {
        node.output[0]: (list(out_shape), out_type or helper.np_dtype_to_tensor_dtype(first.dtype))
    }
    model = make_model(
        [node],
        ins,
        [vi(n, s, t) for n, (s, t) in outs.items()],
        [tensor(n, a) for n, a in (consts or {}).items()],
        opset=opset,
    )
    path = save(model, tmp_path / "m.onnx")
    if oracle == "ort":
        rep = api.verify(path, target="c", inputs=inputs, rtol=1e-5, atol=1e-5)
        assert rep.ok, rep.format()
        return
    api.convert(path, "c", tmp_path / "c")
    got = api.run(tmp_path / "c", inputs)
    want = ReferenceEvaluator(model).run(None, inputs)
    for name, w in zip(outs, want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)


def img(*shape: int, dtype: type = np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Resize / Upsample
# --------------------------------------------------------------------------------------------
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
COORD_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("ctm", COORD_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.6, 0.8], [1, 1, 1.7, 0.5]])
def test_resize_nearest_scales(
    tmp_path: Path, nearest_mode: str, ctm: str, scales: list[float]
) -> None:
    x = img(1, 2, 5, 6)
    out = [int(np.floor(d * s)) for d, s in zip(x.shape, scales, strict=True)]
    node = helper.make_node(
        "Resize",
        ["x", "", "s"],
        ["y"],
        mode="nearest",
        nearest_mode=nearest_mode,
        coordinate_transformation_mode=ctm,
    )
    # Fractional scales: onnxruntime maps coordinates in float32 (the reference in float64, so
    # they round apart at exact boundaries) and align_corners divides by the integer output
    # length (the reference by scale * length, as test_resize_downsample_scales_linear_align_corners).
    oracle = "ort" if scales[0] == 1 and all(s == int(s) for s in scales) else "reference"
    check(tmp_path, node, {"x": x}, out, consts={"s": np.array(scales, np.float32)}, oracle=oracle)


@pytest.mark.parametrize("ctm", [*COORD_MODES, "half_pixel_symmetric"])
@pytest.mark.parametrize("sizes", [[1, 3, 9, 10], [1, 3, 3, 2], [1, 3, 4, 1]])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_sizes(tmp_path: Path, ctm: str, sizes: list[int], mode: str) -> None:
    node = helper.make_node(
        "Resize", ["x", "", "", "sz"], ["y"], mode=mode, coordinate_transformation_mode=ctm
    )
    check(tmp_path, node, {"x": img(1, 3, 4, 5)}, sizes, consts={"sz": np.array(sizes, np.int64)})


@pytest.mark.parametrize(
    "ctm", ["half_pixel", "asymmetric", "align_corners", "half_pixel_symmetric"]
)
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 2.0], [1, 1, 0.6, 0.8], [1, 1, 2.3, 2.94]])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_scales_runtime(tmp_path: Path, ctm: str, scales: list[float], mode: str) -> None:
    """Scales fed at run time: the static output shape does not carry the scale itself."""
    x = img(1, 2, 4, 5)
    out = [int(np.floor(d * s)) for d, s in zip(x.shape, scales, strict=True)]
    node = helper.make_node(
        "Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=ctm
    )
    # align_corners with a fractional output width: see test_resize_nearest_scales
    oracle = "reference" if ctm == "align_corners" and any(s != int(s) for s in scales) else "ort"
    check(tmp_path, node, {"x": x, "s": np.array(scales, np.float32)}, out, oracle=oracle)


@pytest.mark.parametrize("a", [-0.75, -0.5])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 2.0], [1, 1, 0.8, 0.6]])
def test_resize_cubic_options(
    tmp_path: Path, a: float, exclude_outside: int, scales: list[float]
) -> None:
    x = img(2, 1, 5, 5)
    out = [int(np.floor(d * s)) for d, s in zip(x.shape, scales, strict=True)]
    node = helper.make_node(
        "Resize",
        ["x", "", "s"],
        ["y"],
        mode="cubic",
        cubic_coeff_a=a,
        exclude_outside=exclude_outside,
    )
    check(tmp_path, node, {"x": x}, out, consts={"s": np.array(scales, np.float32)})


@pytest.mark.parametrize("extrapolation", [0.0, 10.0])
def test_resize_tf_crop_and_resize(tmp_path: Path, extrapolation: float) -> None:
    roi = np.array([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], np.float32)
    node = helper.make_node(
        "Resize",
        ["x", "roi", "", "sz"],
        ["y"],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=extrapolation,
    )
    check(
        tmp_path,
        node,
        {"x": img(1, 1, 4, 4), "roi": roi},
        [1, 1, 3, 3],
        consts={"sz": np.array([1, 1, 3, 3], np.int64)},
    )


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2]])
def test_resize_axes_keep_aspect(tmp_path: Path, policy: str, axes: list[int]) -> None:
    x = img(1, 2, 4, 6)
    sizes = np.array([7, 8], np.int64)
    want = dict(zip(axes, sizes.tolist(), strict=True))
    if policy == "stretch":
        out = [1, 2, want[2], want[3]]
    else:
        pick = min if policy == "not_larger" else max
        s = pick(want[a] / x.shape[a] for a in axes)
        out = [1, 2, int(s * 4 + 0.5), int(s * 6 + 0.5)]
    node = helper.make_node(
        "Resize",
        ["x", "", "", "sz"],
        ["y"],
        mode="nearest",
        axes=axes,
        keep_aspect_ratio_policy=policy,
    )
    check(tmp_path, node, {"x": x, "sz": sizes}, out)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(tmp_path: Path, mode: str) -> None:
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=1)
    check(
        tmp_path,
        node,
        {"x": img(1, 1, 8, 8)},
        [1, 1, 4, 3],
        consts={"s": np.array([1, 1, 0.5, 0.4], np.float32)},
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_integer(tmp_path: Path, dtype: type, mode: str) -> None:
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)
    # integers: the reference rounds the interpolated value (saturate_cast), onnxruntime truncates
    oracle = "reference" if mode == "linear" else "ort"
    check(
        tmp_path,
        node,
        {"x": img(1, 3, 4, 4, dtype=dtype)},
        [1, 3, 8, 6],
        consts={"s": np.array([1, 1, 2, 1.5], np.float32)},
        oracle=oracle,
    )


@pytest.mark.parametrize("opset", [11, 13])
def test_resize_opset11_13(tmp_path: Path, opset: int) -> None:
    node = helper.make_node(
        "Resize",
        ["x", "roi", "s"],
        ["y"],
        mode="linear",
        coordinate_transformation_mode="align_corners",
    )
    consts = {"roi": np.array([], np.float32), "s": np.array([1, 1, 1.5, 2], np.float32)}
    check(tmp_path, node, {"x": img(1, 2, 4, 4)}, [1, 2, 6, 8], consts=consts, opset=opset)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.6, 1.5]])
def test_resize_opset10(tmp_path: Path, mode: str, scales: list[float]) -> None:
    x = img(1, 2, 5, 4)
    out = [int(np.floor(d * s)) for d, s in zip(x.shape, scales, strict=True)]
    node = helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)
    check(tmp_path, node, {"x": x}, out, consts={"s": np.array(scales, np.float32)}, opset=10)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(tmp_path: Path, mode: str) -> None:
    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
    check(
        tmp_path,
        node,
        {"x": img(1, 2, 3, 4)},
        [1, 2, 6, 6],
        consts={"s": np.array([1, 1, 2, 1.5], np.float32)},
        opset=9,
    )
    node7 = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 2.0])
    check(tmp_path, node7, {"x": img(1, 2, 3, 4)}, [1, 2, 6, 8], opset=7)


# --------------------------------------------------------------------------------------------
# gathers and scatters
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(tmp_path: Path, axis: int) -> None:
    x = img(3, 4, 5)
    shape = [3, 4, 5]
    shape[axis] = 2
    idx = rng.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    check(tmp_path, node, {"x": x}, shape, consts={"i": idx})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(tmp_path: Path, batch_dims: int) -> None:
    x = img(2, 3, 4)
    if batch_dims:
        idx = np.array([[[1, 2], [0, -1]], [[2, 3], [1, 0]]], np.int64)
        out = [2, 2]
    else:
        idx = np.array([[1, 2], [0, 1], [1, -1]], np.int64)
        out = [3, 4]
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    check(tmp_path, node, {"x": x}, out, consts={"i": idx})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(tmp_path: Path, reduction: str) -> None:
    x = img(4, 3, 2)
    idx = np.array([[0], [2], [0]] if reduction != "none" else [[0], [2], [-1]], np.int64)
    upd = img(3, 3, 2)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    check(tmp_path, node, {"x": x, "u": upd}, [4, 3, 2], consts={"i": idx}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(tmp_path: Path, reduction: str) -> None:
    x = img(3, 5)
    idx = np.array(
        [[1, 3], [0, 4], [2, -1]] if reduction == "none" else [[1, 1], [0, 4], [2, 2]], np.int64
    )
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=reduction)
    check(tmp_path, node, {"x": x, "u": img(3, 2)}, [3, 5], consts={"i": idx}, opset=18)


def test_gather_int_data(tmp_path: Path) -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    check(
        tmp_path,
        node,
        {"x": img(2, 5, 3, dtype=np.int32)},
        [2, 2, 2, 3],
        consts={"i": np.array([[0, -1], [4, 2]], np.int64)},
    )


# --------------------------------------------------------------------------------------------
# Slice, Pad, Transpose, Split, Tile, DepthToSpace / SpaceToDepth
# --------------------------------------------------------------------------------------------
SLICES = [
    ([20, 10, 4], [0, 0, 1], [0, 1, 2], [-1, -3, -2]),
    ([-1, 8], [-100, 2], [0, 2], [-2, 2]),
    ([2, 0], [100, -1], [0, 1], [1, 1]),
]


@pytest.mark.parametrize("runtime", [False, True])
@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(
    tmp_path: Path,
    runtime: bool,
    starts: list[int],
    ends: list[int],
    axes: list[int],
    steps: list[int],
) -> None:
    x = img(6, 10, 5)
    ref = x[tuple(slice(s, e, k) for s, e, k in _full(x.ndim, starts, ends, axes, steps))]
    params = {
        n: np.array(v, np.int64)
        for n, v in zip(["st", "en", "ax", "sp"], [starts, ends, axes, steps], strict=True)
    }
    node = helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])
    if runtime:
        check(tmp_path, node, {"x": x, **params}, ref.shape, out_type=F)
    else:
        check(tmp_path, node, {"x": x}, ref.shape, consts=params)


def _full(
    r: int, starts: list[int], ends: list[int], axes: list[int], steps: list[int]
) -> list[tuple]:
    out = [(None, None, None)] * r
    for s, e, a, k in zip(starts, ends, axes, steps, strict=True):
        out[a] = (s, e, k)
    return out


@pytest.mark.parametrize("runtime", [False, True])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(tmp_path: Path, runtime: bool, mode: str) -> None:
    x = img(1, 2, 4, 5)
    pads = np.array([0, 1, 3, 2, 0, 0, 2, 4], np.int64)
    out = [int(x.shape[d] + pads[d] + pads[d + 4]) for d in range(4)]
    inputs = ["x", "p", "v"] if mode == "constant" else ["x", "p"]
    node = helper.make_node("Pad", inputs, ["y"], mode=mode)
    params = {"p": pads, **({"v": np.array(1.5, np.float32)} if mode == "constant" else {})}
    if runtime:
        check(tmp_path, node, {"x": x, **params}, out, out_type=F)
    else:
        check(tmp_path, node, {"x": x}, out, consts=params)


def test_pad_axes_and_crop(tmp_path: Path) -> None:
    """Pad-18 axes, negative pads (a crop), and an int dtype."""
    node = helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="edge")
    consts = {"p": np.array([2, -1, 1, 3], np.int64), "a": np.array([-1, 1], np.int64)}
    check(tmp_path, node, {"x": img(2, 5, 4, dtype=np.int32)}, [2, 7, 7], consts=consts)


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [3, 1, 0, 2], [1, 0, 2, 3], [2, 3, 0, 1]])
def test_transpose(tmp_path: Path, perm: list[int]) -> None:
    x = img(2, 3, 4, 5)
    check(
        tmp_path,
        helper.make_node("Transpose", ["x"], ["y"], perm=perm),
        {"x": x},
        x.transpose(perm).shape,
    )


@pytest.mark.parametrize(
    "shape, perm",
    [
        ((1, 20, 16, 2, 32, 2), [0, 3, 5, 2, 4, 1]),  # MobileViT's unfold: read in x's order
        ((2, 2, 16, 16, 20), [0, 4, 2, 1, 3]),  # its fold: reads 20 apart, y's order kept
        ((3, 17, 1030), [0, 2, 1]),  # an odd-sized far read
        ((1, 384, 1500), [0, 2, 1]),  # Whisper's, beyond L2: copied in 16 x 16 tiles
        ((3, 300, 2, 331), [0, 3, 2, 1]),  # tiled with part tiles and a dim between
    ],
)
def test_transpose_far_reads(tmp_path: Path, shape: tuple[int, ...], perm: list[int]) -> None:
    """Transposes whose write order reads x >= 4 KB apart loop in x's order instead, or in
    tiles when bigger than L2."""
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[[0, 5, 77]] = [np.nan, np.inf, -np.inf]
    check(
        tmp_path,
        helper.make_node("Transpose", ["x"], ["y"], perm=perm),
        {"x": x},
        x.transpose(perm).shape,
    )


@pytest.mark.parametrize("runtime", [False, True])
def test_split_input(tmp_path: Path, runtime: bool) -> None:
    x = img(2, 9, 3)
    split = np.array([2, 3, 4], np.int64)
    node = helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=1)
    outs = {"a": ([2, 2, 3], F), "b": ([2, 3, 3], F), "c": ([2, 4, 3], F)}
    if runtime:
        check(tmp_path, node, {"x": x, "s": split}, [], outputs=outs, opset=13)
    else:
        check(tmp_path, node, {"x": x}, [], consts={"s": split}, outputs=outs, opset=13)


def test_split_num_outputs(tmp_path: Path) -> None:
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3)
    outs = {"a": ([2, 3], F), "b": ([2, 3], F), "c": ([2, 1], F)}
    check(tmp_path, node, {"x": img(2, 7)}, [], outputs=outs, opset=18)


@pytest.mark.parametrize(
    "op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", None)]
)
def test_depth_space(tmp_path: Path, op: str, mode: str | None) -> None:
    attrs = {"blocksize": 2, **({"mode": mode} if mode else {})}
    if op == "DepthToSpace":
        check(
            tmp_path,
            helper.make_node(op, ["x"], ["y"], **attrs),
            {"x": img(1, 8, 2, 3)},
            [1, 2, 4, 6],
            opset=13,
        )
    else:
        check(
            tmp_path,
            helper.make_node(op, ["x"], ["y"], **attrs),
            {"x": img(2, 3, 4, 6)},
            [2, 12, 2, 3],
            opset=13,
        )


def test_tile_and_expand(tmp_path: Path) -> None:
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    check(
        tmp_path,
        node,
        {"x": img(2, 3, dtype=np.int64)},
        [4, 9],
        consts={"r": np.array([2, 3], np.int64)},
    )
    node = helper.make_node("Expand", ["x", "s"], ["y"])
    check(tmp_path, node, {"x": img(3, 1)}, [2, 3, 4], consts={"s": np.array([2, 1, 4], np.int64)})


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint16, np.int64, np.bool_])
def test_identity_dtypes(tmp_path: Path, dtype: type) -> None:
    x = img(2, 3, dtype=dtype) if dtype is not np.bool_ else rng.random((2, 3)) > 0.5
    check(tmp_path, helper.make_node("Identity", ["x"], ["y"]), {"x": x}, [2, 3])


# --------------------------------------------------------------------------------------------
# masks, generators, selections
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_trilu(tmp_path: Path, upper: int, k: int) -> None:
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    check(
        tmp_path,
        node,
        {"x": img(2, 4, 5)},
        [2, 4, 5],
        consts={"k": np.array(k, np.int64)},
        opset=14,
    )


def test_onehot(tmp_path: Path) -> None:
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=1)
    inputs = {"i": np.array([[1, -2], [0, 7]], np.int64)}
    consts = {"d": np.array(5, np.int64), "v": np.array([-1, 4], np.float32)}
    check(tmp_path, node, inputs, [2, 5, 2], consts=consts, out_type=F, opset=11)


def test_range_and_constant_of_shape(tmp_path: Path) -> None:
    inputs = {
        "a": np.array(2.5, np.float32),
        "b": np.array(9.0, np.float32),
        "c": np.array(0.75, np.float32),
    }
    check(tmp_path, helper.make_node("Range", ["a", "b", "c"], ["y"]), inputs, [9], opset=11)
    node = helper.make_node(
        "ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", TensorProto.INT32, [1], [7])
    )
    check(
        tmp_path,
        node,
        {"s": np.array([2, 3], np.int64)},
        [2, 3],
        out_type=TensorProto.INT32,
        opset=11,
    )


def test_eyelike(tmp_path: Path) -> None:
    node = helper.make_node("EyeLike", ["x"], ["y"], k=-1, dtype=TensorProto.DOUBLE)
    check(tmp_path, node, {"x": img(4, 5)}, [4, 5], out_type=TensorProto.DOUBLE, opset=11)


def test_compress_and_reverse_sequence(tmp_path: Path) -> None:
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    check(
        tmp_path,
        node,
        {"x": img(3, 4)},
        [3, 2],
        consts={"c": np.array([True, False, False, True])},
        opset=11,
    )
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1)
    check(
        tmp_path,
        node,
        {"x": img(3, 4, 2)},
        [3, 4, 2],
        consts={"l": np.array([4, 1, 3], np.int64)},
        opset=11,
    )


# --------------------------------------------------------------------------------------------
# GridSample, AffineGrid, Col2Im, CenterCropPad
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample(tmp_path: Path, mode: str, padding_mode: str, align_corners: int) -> None:
    grid = (rng.random((2, 3, 4, 2)) * 2.6 - 1.3).astype(np.float32)
    node = helper.make_node(
        "GridSample",
        ["x", "g"],
        ["y"],
        mode=mode,
        padding_mode=padding_mode,
        align_corners=align_corners,
    )
    check(tmp_path, node, {"x": img(2, 3, 5, 6), "g": grid}, [2, 3, 3, 4], opset=20)


@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid(tmp_path: Path, align_corners: int) -> None:
    node = helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=align_corners)
    check(
        tmp_path,
        node,
        {"t": img(2, 2, 3)},
        [2, 4, 5, 2],
        consts={"s": np.array([2, 3, 4, 5], np.int64)},
        opset=20,
    )


def test_col2im(tmp_path: Path) -> None:
    node = helper.make_node(
        "Col2Im", ["x", "im", "b"], ["y"], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2]
    )
    # blocks: H (5 + 2 - 2 - 1) / 2 + 1 = 3, W (6 + 1 - 4 - 1) / 1 + 1 = 3
    consts = {"im": np.array([5, 6], np.int64), "b": np.array([2, 3], np.int64)}
    check(tmp_path, node, {"x": img(1, 12, 9)}, [1, 2, 5, 6], consts=consts, opset=18)


def test_center_crop_pad(tmp_path: Path) -> None:
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, 1])
    check(
        tmp_path,
        node,
        {"x": img(7, 4, 3)},
        [4, 7, 3],
        consts={"s": np.array([4, 7], np.int64)},
        opset=18,
    )


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(tmp_path: Path, mode: str) -> None:
    node = helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode, axis=2)
    inputs = {"c": img(2, 3, 5, 4), "u": img(2, 3, 2, 4), "w": np.array([1, 4], np.int64)}
    if mode == "linear":
        inputs["w"] = np.array([1, 3], np.int64)
    check(tmp_path, node, inputs, [2, 3, 5, 4], opset=24)


def test_nonzero_static_count(tmp_path: Path) -> None:
    """NonZero's output length is data-dependent: the model's static shape fixes it."""
    x = np.array([[0, 3, 0], [1, 0, 2]], np.int32)
    check(
        tmp_path,
        helper.make_node("NonZero", ["x"], ["y"]),
        {"x": x},
        [2, 3],
        out_type=TensorProto.INT64,
        opset=13,
    )


def test_dropout_inference_and_run_time_training_flag(tmp_path: Path) -> None:
    """Inference against onnxruntime; a run-time training flag converts (the random mask:
    ops/random.py, checked in tests/test_c_random.py)."""
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"])
    outs = {"y": ([2, 3], F), "m": ([2, 3], TensorProto.BOOL)}
    consts = {"r": np.array(0.3, np.float32), "t": np.array(False)}
    check(tmp_path, node, {"x": img(2, 3)}, [], consts=consts, outputs=outs, opset=13)
    model = make_model(
        [node],
        [vi("x", [2, 3]), vi("t", [], TensorProto.BOOL)],
        [vi("y", [2, 3]), vi("m", [2, 3], TensorProto.BOOL)],
        [tensor("r", np.array(0.3, np.float32))],
        opset=13,
    )
    api.convert(save(model, tmp_path / "t.onnx"), "c", tmp_path / "t")
    assert (tmp_path / "t" / "model.c").is_file()


def test_attribute_opsets(tmp_path: Path) -> None:
    """Slice-1, Pad-2 and Split-11 take their parameters as attributes."""
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[0, 2])
    check(tmp_path, node, {"x": img(3, 4, 5)}, [2, 4, 2], opset=9)
    node = helper.make_node("Pad", ["x"], ["y"], pads=[1, 0, 0, 2], mode="constant", value=-2.0)
    check(tmp_path, node, {"x": img(3, 4)}, [4, 6], opset=10)
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, split=[1, 2])
    check(
        tmp_path, node, {"x": img(3, 4)}, [], outputs={"a": ([1, 4], F), "b": ([2, 4], F)}, opset=11
    )


def test_resize_identity_and_tf_half_pixel(tmp_path: Path) -> None:
    """not_larger sizes equal to the input (no axis changes); Resize-11 tf_half_pixel_for_nn."""
    node = helper.make_node(
        "Resize", ["x", "", "", "sz"], ["y"], axes=[2, 3], keep_aspect_ratio_policy="not_larger"
    )
    check(
        tmp_path,
        node,
        {"x": img(1, 2, 3, 4)},
        [1, 2, 3, 4],
        consts={"sz": np.array([3, 9], np.int64)},
    )
    node = helper.make_node(
        "Resize", ["x", "roi", "s"], ["y"], coordinate_transformation_mode="tf_half_pixel_for_nn"
    )
    consts = {"roi": np.array([], np.float32), "s": np.array([1, 1, 2, 0.5], np.float32)}
    check(tmp_path, node, {"x": img(1, 2, 3, 4)}, [1, 2, 6, 2], consts=consts, opset=11)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_storage_dtypes(tmp_path: Path, dtype: object) -> None:
    """float16 / bfloat16 are stored as bits: copies stay exact, arithmetic converts (checked
    against the reference: onnxruntime lacks most of these kernels for them)."""
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x = img(1, 2, 3, 4).astype(dt)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
    scales = {"s": np.array([1, 1, 2, 1.5], np.float32)}
    check(tmp_path, node, {"x": x}, [1, 2, 6, 6], consts=scales, oracle="reference")
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")
    consts = {"i": np.array([[0, 1], [0, 1]], np.int64)}
    inputs = {"x": x, "u": img(2, 3, 4).astype(dt)}
    check(tmp_path, node, inputs, [1, 2, 3, 4], consts=consts, opset=18, oracle="reference")
    inputs = {"a": np.array(1.5, dt), "b": np.array(9, dt), "c": np.array(1.25, dt)}
    check(
        tmp_path, helper.make_node("Range", ["a", "b", "c"], ["y"]), inputs, [6], oracle="reference"
    )
