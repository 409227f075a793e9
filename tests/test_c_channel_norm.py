"""ConvNeXt's channels-last blocks on NCHW (issue 34): passes/channel_norm.py rewrites
Transpose -> LayerNorm(last axis) -> MatMul MLP (GELU) -> layer scale -> Transpose as
o2e.ChannelLayerNorm + 1x1 convolutions; o2e_norm.h's o2e_channel_norm normalises over the
channels. Checked: the rewrite's meaning (the fused op expanded back to Transpose /
LayerNormalization / Transpose, run by onnxruntime), the regions it must leave alone, and the
generated C against onnxruntime on the original model with NaN / Inf positions at every
instruction set (x86-64-v2's portable loop, v3's AVX2, the host's, aarch64's NEON under
qemu)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.frontend import load
from onnx2edge.ir import Graph, Node
from onnx2edge.ir.proto import model_from_graph
from onnx2edge.passes import fold_constants
from onnx2edge.passes.channel_norm import channel_norm
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, make_model, save, tensor, vi

R2 = float(np.sqrt(2.0))


def _r(rng: np.random.Generator, *shape: int, s: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * s).astype(np.float32)


def _block(p: str, x: str, c: int, rng: np.random.Generator) -> tuple[list, list, str]:
    """timm's ConvNeXt block as torch exports it: dwconv 7x7, permute, LayerNorm, Linear,
    GELU (Div, Erf, Add, Mul, Mul), Linear, gamma, permute back, residual."""
    h = 4 * c
    inits = [
        tensor(f"{p}dw_w", _r(rng, c, 1, 7, 7, s=0.2)),
        tensor(f"{p}dw_b", _r(rng, c)),
        tensor(f"{p}ln_s", _r(rng, c)),
        tensor(f"{p}ln_b", _r(rng, c)),
        tensor(f"{p}w1", _r(rng, c, h, s=1 / np.sqrt(c))),
        tensor(f"{p}b1", _r(rng, h)),
        tensor(f"{p}w2", _r(rng, h, c, s=1 / np.sqrt(h))),
        tensor(f"{p}b2", _r(rng, c)),
        tensor(f"{p}gamma", _r(rng, c, s=0.5)),
        tensor(f"{p}sqrt2", np.array(R2, np.float32)),
        tensor(f"{p}one", np.array(1.0, np.float32)),
        tensor(f"{p}half", np.array(0.5, np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", [x, f"{p}dw_w", f"{p}dw_b"], [f"{p}dw"], group=c, pads=[3] * 4, name=f"{p}dw"),
        n("Transpose", [f"{p}dw"], [f"{p}t1"], perm=[0, 2, 3, 1]),
        n("LayerNormalization", [f"{p}t1", f"{p}ln_s", f"{p}ln_b"], [f"{p}ln"], epsilon=1e-6),
        n("MatMul", [f"{p}ln", f"{p}w1"], [f"{p}mm1"], name=f"{p}fc1"),
        n("Add", [f"{p}b1", f"{p}mm1"], [f"{p}fc1"]),
        n("Div", [f"{p}fc1", f"{p}sqrt2"], [f"{p}d"]),
        n("Erf", [f"{p}d"], [f"{p}e"]),
        n("Add", [f"{p}e", f"{p}one"], [f"{p}a"]),
        n("Mul", [f"{p}fc1", f"{p}a"], [f"{p}m"]),
        n("Mul", [f"{p}m", f"{p}half"], [f"{p}g"]),
        n("MatMul", [f"{p}g", f"{p}w2"], [f"{p}mm2"], name=f"{p}fc2"),
        n("Add", [f"{p}b2", f"{p}mm2"], [f"{p}fc2"]),
        n("Mul", [f"{p}fc2", f"{p}gamma"], [f"{p}ls"]),
        n("Transpose", [f"{p}ls"], [f"{p}t2"], perm=[0, 3, 1, 2]),
        n("Add", [x, f"{p}t2"], [f"{p}out"]),
    ]
    return nodes, inits, f"{p}out"


def _norm(p: str, x: str, c: int, rng: np.random.Generator) -> tuple[list, list, str]:
    """The stem / downsample norm: permute, LayerNorm, permute back."""
    n = helper.make_node
    nodes = [
        n("Transpose", [x], [f"{p}t1"], perm=[0, 2, 3, 1]),
        n("LayerNormalization", [f"{p}t1", f"{p}s", f"{p}b"], [f"{p}ln"], epsilon=1e-6),
        n("Transpose", [f"{p}ln"], [f"{p}out"], perm=[0, 3, 1, 2]),
    ]
    return nodes, [tensor(f"{p}s", _r(rng, c)), tensor(f"{p}b", _r(rng, c))], f"{p}out"


def _convnext(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Stem (4x4 stride 4 conv + norm), a block, downsample (norm + 2x2 stride 2 conv), a
    block on a 7x7 map (49 positions: a step of 16 with a tail); left alone: a channels-last
    tensor another op reads too (a Softmax over channels) and one that is a graph output."""
    rng = np.random.default_rng(35)
    n = helper.make_node
    nodes = [n("Conv", ["x", "stem_w", "stem_b"], ["stem"], kernel_shape=[4, 4], strides=[4, 4])]
    inits = [tensor("stem_w", _r(rng, 24, 3, 4, 4, s=0.3)), tensor("stem_b", _r(rng, 24))]
    for part in (
        _norm("sn_", "stem", 24, rng),
        _block("b1_", "sn_out", 24, rng),
        _norm("dn_", "b1_out", 24, rng),
    ):
        nodes += part[0]
        inits += part[1]
    nodes.append(n("Conv", ["dn_out", "ds_w", "ds_b"], ["ds"], kernel_shape=[2, 2], strides=[2, 2]))
    inits += [tensor("ds_w", _r(rng, 40, 24, 2, 2, s=0.2)), tensor("ds_b", _r(rng, 40))]
    b2 = _block("b2_", "ds", 40, rng)
    nodes += b2[0]
    inits += b2[1]
    # left alone: the LayerNorm's output feeds a Softmax too; a channels-last graph output
    kept = _norm("k_", "b2_out", 40, rng)
    nodes += [*kept[0], n("Softmax", ["k_ln"], ["y_soft"], axis=-1)]
    inits += kept[1]
    nodes += [n("Transpose", ["ds"], ["y_last"], perm=[0, 2, 3, 1])]
    # a norm of the input itself: 2 x 1665 positions (104 steps of 16 and a tail of 1), 20
    # channels: enough to split across threads
    direct = _norm("d_", "x2", 20, rng)
    nodes += direct[0]
    inits += direct[1]
    outs = [vi("y", [1, 40, 7, 7]), vi("y_soft", [1, 7, 7, 40]), vi("y_last", [1, 7, 7, 40])]
    outs.append(vi("d_out", [2, 20, 45, 37]))
    nodes.append(n("Identity", ["k_out"], ["y"]))
    model = make_model(nodes, [vi("x", [1, 3, 56, 56]), vi("x2", [2, 20, 45, 37])], outs, inits)
    x = _r(rng, 1, 3, 56, 56)
    x[0, :, 0, 0] = np.nan  # stem position (0, 0): NaN at every channel from there on
    x[0, 1, 52, 53] = np.inf  # (all within the 7x7 map's lower right; its (0, 5) stays finite)
    x[0, :, 28:36, 28:36] += 100  # a mean far above the spread
    x2 = _r(rng, 2, 20, 45, 37)
    x2[0, 3, 0, 1] = np.nan
    x2[0, 5, 2, 2] = np.inf
    x2[1, 0, 44, 36] = -np.inf  # in the tail
    x2[1, 7, 1, 1], x2[1, 8, 1, 1] = np.inf, -np.inf
    x2[1, :, 3, :] += 1000  # a mean far above the spread
    return save(model, tmp / "convnext.onnx"), {"x": x, "x2": x2}


@pytest.fixture(scope="module")
def convnext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    tmp = tmp_path_factory.mktemp("channel_norm")
    path, feeds = _convnext(tmp)
    ref = ort_run(onnx.load(path), feeds)
    for y in ("y", "d_out"):
        assert np.isnan(ref[y]).any() and np.isfinite(ref[y]).any(), y
    api.convert(path, "c", tmp / "out")
    return tmp / "out", feeds, ref


def _expanded(g: Graph) -> Graph:
    """o2e.ChannelLayerNorm replaced by its declared meaning (semantics/fused.py):
    Transpose(0,2,3,1) -> LayerNormalization(axis -1) -> Transpose(0,3,1,2)."""
    nodes: list[Node] = []
    for node in g.nodes:
        if node.op_type != "ChannelLayerNorm":
            nodes.append(node)
            continue
        a, b = f"{node.name}_a", f"{node.name}_b"
        perm = helper.make_attribute("perm", [0, 2, 3, 1])
        back = helper.make_attribute("perm", [0, 3, 1, 2])
        from onnx2edge.ir.proto import _attr_from_proto

        nodes += [
            Node(f"{a}_t", "Transpose", (node.inputs[0],), (a,), {"perm": _attr_from_proto(perm)}),
            Node(node.name, "LayerNormalization", (a, *node.inputs[1:]), (b,), dict(node.attrs)),
            Node(f"{b}_t", "Transpose", (b,), node.outputs, {"perm": _attr_from_proto(back)}),
        ]
    return g.replace(nodes=tuple(nodes))


def test_rewrite_meaning(convnext: tuple[Path, dict, dict]) -> None:
    """Both blocks and both norms rewritten: no Transpose nor MatMul left there, the layer
    scale folded; the two regions read elsewhere untouched; the input graph not mutated; the
    rewritten graph (its fused op expanded) computes what the original does."""
    path = convnext[0].parent / "convnext.onnx"
    g = fold_constants(load(path))
    before = (g.nodes, dict(g.initializers))
    f = channel_norm(g)
    assert (g.nodes, dict(g.initializers)) == before
    ops = [n.op_type for n in f.nodes]
    assert ops.count("ChannelLayerNorm") == 5, ops
    assert ops.count("MatMul") == 0 and ops.count("Transpose") == 3, ops  # k_ (2) + y_last
    assert not any(n.op_type == "Mul" and "gamma" in "".join(n.inputs) for n in f.nodes)
    assert any(n.op_type == "LayerNormalization" and n.inputs[0] == "k_t1" for n in f.nodes)
    a = ort_run(model_from_graph(g), convnext[1])
    b = ort_run(model_from_graph(_expanded(f)), convnext[1])
    for k in a:
        r = compare(k, b[k], a[k], 1e-4, 1e-5)
        assert r.ok, (k, r.max_abs, r.max_rel)


def test_generated_c(convnext: tuple[Path, dict, dict]) -> None:
    """The C runs the MLP as 1x1 convolutions with GELU and the residual in their epilogues,
    the norms by o2e_channel_norm."""
    src = (convnext[0] / "model.c").read_text()
    assert src.count("o2e_channel_norm(") + src.count("o2e_channel_norm, &a") == 5
    assert src.count(": o2e.ConvAct(") == 2 and src.count("activation=Gelu") == 2
    assert src.count(": o2e.ConvAddAct(") == 2
    assert ": Erf(" not in src and ": MatMul(" not in src


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_convnext_vs_onnxruntime(arch: str, convnext: tuple[Path, dict, dict]) -> None:
    """NaN where onnxruntime has NaN (a position holding an Inf or NaN), the same infinities,
    else verify's tolerance."""
    out, feeds, ref = convnext
    got = api.run(out, feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_elementwise_region_and_unfolded_scale(tmp_path: Path) -> None:
    """Constants first in Sub / Div (operand order kept), a [1, 1, 1, K] constant, a unary op
    with attributes, two region tensors combined; a MatMul's product scaled by a gamma holding
    an Inf stays a Mul (folding it would turn its zeros' NaN into Inf * 0 elsewhere)."""
    rng = np.random.default_rng(7)
    n = helper.make_node
    nodes = [
        n("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        n("Sub", ["c1", "t"], ["s"]),
        n("Div", ["s", "c2"], ["d"]),
        n("LeakyRelu", ["d"], ["r"], alpha=0.3),
        n("Mul", ["r", "t"], ["p"]),
        n("MatMul", ["p", "w"], ["mm"]),
        n("Mul", ["mm", "g"], ["ls"]),
        n("Transpose", ["ls"], ["y"], perm=[0, 3, 1, 2]),
    ]
    g = np.ones(5, np.float32)
    g[2] = np.inf
    inits = [
        tensor("c1", _r(rng, 6)),
        tensor("c2", _r(rng, 1, 1, 1, 6) + 3),
        tensor("w", _r(rng, 6, 5)),
        tensor("g", g),
    ]
    model = make_model(nodes, [vi("x", [2, 6, 3, 4])], [vi("y", [2, 5, 3, 4])], inits)
    path = save(model, tmp_path / "m.onnx")
    graph = fold_constants(load(path))
    f = channel_norm(graph)
    ops = [node.op_type for node in f.nodes]
    assert "Transpose" not in ops and ops.count("Mul") == 2 and "Conv" in ops, ops
    feeds = {"x": _r(rng, 2, 6, 3, 4)}
    # unoptimised: onnxruntime's own Conv + Mul fusion would fold the Inf into the weights
    a = ort_run(model_from_graph(graph), feeds, optimize=False)["y"]
    b = ort_run(model_from_graph(f), feeds, optimize=False)["y"]
    assert compare("y", b, a, 1e-5, 1e-6).ok
    assert np.isinf(a).any()
    assert api.verify(path, target="c", inputs=feeds).ok
