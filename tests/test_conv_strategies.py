"""Conv kernels as a declared list of strategies (backends/c/ops/conv.py STRATEGIES, issue 10
item 4): the first one that does not refuse a layer writes it; `--kernels NAME=off` takes one
out of the running, and the manifest records the options and each layer's strategy so
`convert` reproduces an output from its manifest. Every strategy is checked against
onnxruntime on a layer it takes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.backend import parse_kernels
from onnx2edge.backends.c.kernels.conv.conv_spec import AUTO, OFF
from onnx2edge.backends.c.ops import conv as conv_ops
from onnx2edge.errors import Onnx2EdgeError

from conftest import make_model, save, tensor, vi


def _conv(
    path: Path,
    C: int,
    M: int,
    H: int,
    k: int,
    *,
    stride: int = 1,
    pad: int = 0,
    group: int = 1,
    nd: int = 2,
    density: float = 1.0,
    residual: bool = False,
) -> Path:
    """x -> Conv (+ x when residual) -> Relu, random weights; shapes from onnxruntime's rules."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((M, C // group, *[k] * nd)) / np.sqrt(C * k**nd)).astype(np.float32)
    w[rng.random(w.shape) >= density] = 0
    out = (H + 2 * pad - k) // stride + 1
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["c"],
            kernel_shape=[k] * nd,
            strides=[stride] * nd,
            pads=[pad] * (2 * nd),
            group=group,
            name="conv",
        )
    ]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "x"], ["r"], name="add"))
        last = "r"
    nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
    inits = [tensor("w", w), tensor("b", rng.standard_normal(M).astype(np.float32))]
    return save(
        make_model(
            nodes, [vi("x", [1, C, *[H] * nd])], [vi("y", [1, M, *[out] * nd])], inits, opset=17
        ),
        path,
    )


# strategy -> (model arguments, the --kernels that leave it the first to apply)
CASES = {
    # a chain of layers, not one (the plan needs a blocked neighbour): test_c_conv_nchwc.py
    "nchwc": (None, ""),
    "sparse": ({"C": 256, "M": 256, "H": 6, "k": 1, "density": 0.05}, ""),
    "depthwise": ({"C": 16, "M": 16, "H": 6, "k": 3, "pad": 1, "group": 16}, ""),  # rows < 7
    "dw_rows": ({"C": 16, "M": 16, "H": 20, "k": 3, "pad": 1, "group": 16}, ""),
    # RegNetX-style: 8 channels a group; 12 outputs a group leave half a tile of 8 idle
    "grouped": ({"C": 32, "M": 48, "H": 15, "k": 3, "stride": 2, "pad": 1, "group": 4}, ""),
    "winograd": ({"C": 32, "M": 32, "H": 20, "k": 3, "pad": 1}, ""),
    "stem": ({"C": 3, "M": 16, "H": 40, "k": 3, "stride": 2, "pad": 1}, ""),
    "stem_lanes": ({"C": 3, "M": 48, "H": 40, "k": 7, "stride": 2, "pad": 3}, ""),
    # 1-D (its 2-D view), Whisper's strided second layer in small; 100 outputs: not narrow
    "taps1d": ({"C": 128, "M": 48, "H": 200, "k": 3, "stride": 2, "pad": 1, "nd": 1}, ""),
    "lanes": ({"C": 32, "M": 64, "H": 20, "k": 5, "pad": 2}, ""),
    "direct": ({"C": 16, "M": 4, "H": 20, "k": 3, "pad": 1}, ""),
    "pointwise": ({"C": 128, "M": 64, "H": 7, "k": 1}, "sparse=off"),
    "implicit_gemm": ({"C": 16, "M": 48, "H": 21, "k": 3, "stride": 2, "pad": 1}, ""),
    "gemm_1x1": ({"C": 32, "M": 64, "H": 9, "k": 1}, "sparse=off"),
    "subsample_gemm": ({"C": 32, "M": 64, "H": 9, "k": 1, "stride": 2}, ""),
    "narrow": ({"C": 64, "M": 48, "H": 14, "k": 3, "stride": 2, "pad": 1}, ""),
    # outputs under 16 positions: the narrow-map kernel (K >= 128, M >= 32) comes first
    "im2col_gemm": ({"C": 16, "M": 48, "H": 5, "k": 3}, "narrow=off"),
    "nd_loop": ({"C": 4, "M": 8, "H": 5, "k": 3, "pad": 1, "nd": 3}, ""),  # 1-D: the 2-D view
}


def test_strategy_modules_register_themselves() -> None:
    """A strategy module registers its strategy at a rank (no central list to edit): every
    kernels/conv module's STRATEGY is in the list, in rank order, and a rank or name taken
    twice is refused."""
    import importlib
    import pkgutil

    from onnx2edge.backends.c.kernels import conv as package
    from onnx2edge.backends.c.kernels.conv import conv_spec

    for m in pkgutil.iter_modules(package.__path__):
        s = getattr(importlib.import_module(f"{package.__name__}.{m.name}"), "STRATEGY", None)
        assert s is None or s in conv_ops.STRATEGIES, m.name
    ranks = [conv_spec._REGISTERED[s.name][0] for s in conv_ops.STRATEGIES]
    assert ranks == sorted(set(ranks))
    first = conv_ops.STRATEGIES[0]
    with pytest.raises(ValueError, match="share rank"):
        conv_spec.register(conv_spec.ConvStrategy("x", first.refuse, first.emit), rank=ranks[0])
    with pytest.raises(ValueError, match="registered twice"):
        conv_spec.register(conv_spec.ConvStrategy(first.name, first.refuse, first.emit), rank=1)
    assert conv_spec.strategies() == conv_ops.STRATEGIES  # nothing left registered by the test


def test_the_list_is_declared_once_and_ends_with_fallbacks() -> None:
    names = [s.name for s in conv_ops.STRATEGIES]
    assert len(names) == len(set(names)) and set(CASES) == set(names)
    for s in conv_ops.STRATEGIES:
        assert s.settings[0] == AUTO, s.name
    # the fallbacks take any layer of their rank, so they come last and cannot be switched off
    assert names[-2:] == ["im2col_gemm", "nd_loop"]
    assert all(OFF not in s.settings for s in conv_ops.STRATEGIES[-2:])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_strategy_against_onnxruntime(tmp_path: Path, name: str) -> None:
    """The layer goes to `name` (first applicable in the declared order), and its output
    matches onnxruntime; a fused residual where the kernel cannot fuse it runs after it."""
    args, kernels = CASES[name]
    if args is None:
        pytest.skip("channel-blocked chains are tested in tests/test_c_conv_nchwc.py")
    path = _conv(tmp_path / "m.onnx", **args)
    opts = {"kernels": kernels} if kernels else {}
    res = api.convert(path, "c", tmp_path / "out", options=opts)
    assert res.stats["layer_kernels"] == {"conv": name}, res.stats["layer_kernels"]
    rep = api.verify(path, target="c", options=opts)
    assert rep.ok, rep


@pytest.mark.parametrize("name", ["depthwise", "nd_loop"])
def test_residual_after_kernels_that_cannot_fuse_it(tmp_path: Path, name: str) -> None:
    args = {**CASES[name][0], "M": CASES[name][0]["C"]}  # x + conv(x)
    path = _conv(tmp_path / "m.onnx", **args, residual=True)
    res = api.convert(path, "c", tmp_path / "out")
    assert res.stats["layer_kernels"] == {"conv": name}
    assert api.verify(path, target="c").ok


def test_switching_off_falls_to_the_next(tmp_path: Path) -> None:
    path = _conv(tmp_path / "m.onnx", **CASES["winograd"][0])
    chosen = []
    off = [
        "",
        "winograd=off",
        "winograd=off,direct=off",
        "winograd=off,direct=off,implicit_gemm=off",
    ]
    for kernels in off:
        out = tmp_path / f"o{len(chosen)}"
        chosen.append(
            api.convert(path, "c", out, options={"kernels": kernels}).stats["layer_kernels"]["conv"]
        )
    assert chosen == ["winograd", "direct", "implicit_gemm", "im2col_gemm"]


def test_kernels_option_parsing() -> None:
    assert parse_kernels("lanes=off, winograd=2,direct=auto") == {"lanes": "off", "winograd": "2"}
    assert parse_kernels({"sparse": "force"}) == {"sparse": "force"}
    assert parse_kernels(None) == parse_kernels("") == {}
    for bad in ["winograd=3", "nosuch=off", "lanes", "im2col_gemm=off", "=off"]:
        with pytest.raises(Onnx2EdgeError):
            parse_kernels(bad)


def test_manifest_reproduces_the_output(tmp_path: Path) -> None:
    """The options in onnx2edge.json, given back to convert, give the same files."""
    path = _conv(tmp_path / "m.onnx", **CASES["winograd"][0])
    a = tmp_path / "a"
    api.convert(path, "c", a, options={"kernels": "winograd=2,lanes=off"})
    manifest = json.loads((a / "onnx2edge.json").read_text())
    assert manifest["options"]["kernels"] == "lanes=off,winograd=2"  # canonical order
    assert manifest["stats"]["layer_kernels"] == {"conv": "winograd"}
    assert manifest["stats"]["kernels"] == {"Conv: winograd F(2x2,3x3)": 1}
    b = tmp_path / "b"
    api.convert(path, manifest["target"], b, options=manifest["options"])
    for f in manifest["files"]:
        if f != "onnx2edge.json":
            assert (a / f).read_bytes() == (b / f).read_bytes(), f
    default = api.convert(path, "c", tmp_path / "c").stats["kernels"]
    assert default == {"Conv: winograd F(4x4,3x3)": 1}


def test_cli_kernels_flag(tmp_path: Path) -> None:
    path = _conv(tmp_path / "m.onnx", **CASES["winograd"][0])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "onnx2edge.cli", "convert", str(path), "--target", "c"]
    r = subprocess.run(
        [*cmd, "-o", str(out), "--kernels", "winograd=off"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "onnx2edge.json").read_text())
    assert manifest["options"]["kernels"] == "winograd=off"
    assert manifest["stats"]["layer_kernels"] == {"conv": "direct"}
    bad = subprocess.run(
        [*cmd, "-o", str(tmp_path / "bad"), "--kernels", "winograd=7"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "winograd=7" in bad.stderr and not (tmp_path / "bad").exists()
