"""Transformer and audio blocks on the C backend's fast paths (issue 34): 1-D convolutions
(Whisper's stem) through the 2-D kernels, checked against onnxruntime with NaN / Inf in
the input and the bias, at every instruction set (x86-64-v2, v3, the host's own, aarch64
under qemu)."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run
from onnx2edge.verify import compare

from conftest import ALL_ISAS, erf_gelu, make_model, save, tensor, vi

# case: (strategy the 2-D view goes to, C, M, L, k, stride, pad, group, dilation, activation)
CONV1D = {
    "c1": ("implicit_gemm", 16, 48, 40, 3, 1, 1, 1, 1, "Gelu"),  # Whisper's first layer
    "c2": ("taps1d", 192, 64, 160, 3, 2, 1, 1, 1, "Gelu"),  # and its strided second
    "taps_s1": ("taps1d", 128, 48, 70, 3, 1, 1, 1, 1, "Gelu"),  # one plane, taps at offsets
    "taps_dil": ("taps1d", 128, 40, 140, 3, 2, 2, 1, 2, None),  # every tap in plane 0
    "taps_s3": ("taps1d", 128, 24, 50, 5, 3, 2, 1, 1, "Relu"),  # three planes, offsets 0 / 1
    "few": ("direct", 8, 4, 40, 5, 1, 2, 1, 1, "Relu"),
    "pointwise": ("gemm_1x1", 16, 24, 30, 1, 1, 0, 1, 1, "Sigmoid"),
    "strided1x1": ("subsample_gemm", 16, 24, 30, 1, 2, 0, 1, 1, None),
    "dilated": ("implicit_gemm", 8, 40, 37, 3, 1, 2, 1, 2, "Tanh"),
    "grouped": ("grouped", 8, 16, 33, 3, 1, 1, 2, 1, None),  # 4 channels a group
    "depthwise": ("dw_rows", 16, 16, 40, 7, 1, 3, 16, 1, "Relu"),
    "short": ("im2col_gemm", 8, 48, 7, 3, 1, 0, 1, 1, None),  # < 16 outputs
}


def _conv1d_branch(name: str, rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """Conv(1-D) -> activation with NaN / +-Inf input samples and bias channels."""
    _, C, M, L, k, s, p, g, d, act = CONV1D[name]
    w = (rng.standard_normal((M, C // g, k)) / np.sqrt(C * k / g)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    b[:2] = [np.nan, np.inf]
    x = rng.standard_normal((1, C, L)).astype(np.float32)
    x[0, :, 3] = np.nan
    x[0, 0, L - 2] = np.inf
    x[0, C - 1, L // 2] = -np.inf
    attrs = {"kernel_shape": [k], "strides": [s], "pads": [p, p], "group": g, "dilations": [d]}
    c = f"c_{name}"
    nodes = [
        helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [c], name=c, **attrs)
    ]
    y = f"y_{name}"
    nodes.append(helper.make_node(act, [c], [y]) if act else helper.make_node("Identity", [c], [y]))
    inits = [tensor(f"w_{name}", w), tensor(f"b_{name}", b)]
    return nodes, [vi(f"x_{name}", [1, C, L])], {f"x_{name}": x}, inits


def _conv1d_residual(
    rng: np.random.Generator, C: int = 32, p: str = "res", L: int = 50
) -> tuple[list, list, dict, list]:
    """x + Conv1d(x) -> Relu: the residual fused into the GEMM epilogue (from 128 channels
    into the first of taps1d's per-tap GEMMs, the later ones adding the sum so far; over 64
    positions, where the narrow-map kernel stops)."""
    w = (rng.standard_normal((C, C, 3)) / np.sqrt(3 * C)).astype(np.float32)
    x = rng.standard_normal((1, C, L)).astype(np.float32)
    x[0, 1, 7] = np.inf
    nodes = [
        helper.make_node("Conv", [f"x_{p}", f"w_{p}"], [f"c_{p}"], pads=[1, 1], name=f"c_{p}"),
        helper.make_node("Add", [f"c_{p}", f"x_{p}"], [f"a_{p}"]),
        helper.make_node("Relu", [f"a_{p}"], [f"y_{p}"]),
    ]
    return nodes, [vi(f"x_{p}", [1, C, L])], {f"x_{p}": x}, [tensor(f"w_{p}", w)]


def _softmax_rows(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """Softmax / LogSoftmax over the last axis (runtime/o2e_softmax.h): rows shorter than a
    vector, of a vector multiple and with a tail, with NaN, +Inf, only -Inf, large spreads;
    an opset-11-style flattening axis and a non-last axis (the generic loop) beside them."""
    nodes, ins, feeds = [], [], {}
    for name, shape, op, axis in [
        ("sm7", [3, 7], "Softmax", -1),
        ("sm48", [2, 5, 48], "Softmax", -1),
        ("sm37", [4, 37], "Softmax", -1),
        ("lsm37", [4, 37], "LogSoftmax", -1),
        ("lsm64", [2, 3, 64], "LogSoftmax", 2),
        ("smmid", [3, 21, 5], "Softmax", 1),
    ]:
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        rows = x.reshape(-1, shape[-1])
        rows[0, 3] = np.nan
        rows[1, 2] = np.inf
        rows[2, :] = -np.inf
        if len(rows) > 3:
            rows[3, :4] = [100, -100, 88, -300]  # exp underflows to 0 beside exp(0)
        nodes.append(helper.make_node(op, [f"x_{name}"], [f"y_{name}"], axis=axis))
        ins.append(vi(f"x_{name}", shape))
        feeds[f"x_{name}"] = x
    return nodes, ins, feeds, []


def _scaled_softmaxes(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """Attention's Softmax(scores * 1/sqrt(d)): the scalar Mul folded into the softmax kernel
    (o2e.ScaledSoftmax), operands in either order, LogSoftmax, a negative scale; left alone: a
    non-last axis, and a product something else reads too."""
    nodes, ins, feeds, inits = [], [], {}, []
    cases = [
        ("ss", [2, 3, 40], "Softmax", -1, 0.125, False),
        ("ssr", [5, 19], "Softmax", 1, 0.3, True),  # Mul(c, x); axis 1 of 2-D is the last
        ("sls", [4, 33], "LogSoftmax", -1, -0.7, False),
        ("smid", [3, 6, 5], "Softmax", 1, 0.5, False),  # not the last axis: unfused
        ("sboth", [4, 20], "Softmax", -1, 0.25, False),  # the product is an output too
    ]
    for name, shape, op, axis, c, rev in cases:
        x = (rng.standard_normal(shape) * 6).astype(np.float32)
        rows = x.reshape(-1, shape[-1])
        rows[0, 3] = np.nan
        rows[1, 2] = np.inf
        rows[2, :] = -np.inf
        rows[3, :3] = [200, -200, 150]
        mul_in = [f"c_{name}", f"x_{name}"] if rev else [f"x_{name}", f"c_{name}"]
        prod = f"y_{name}_prod" if name == "sboth" else f"p_{name}"
        nodes += [
            helper.make_node("Mul", mul_in, [prod]),
            helper.make_node(op, [prod], [f"y_{name}"], axis=axis),
        ]
        ins.append(vi(f"x_{name}", shape))
        feeds[f"x_{name}"] = x
        inits.append(tensor(f"c_{name}", np.array(c, np.float32)))
    return nodes, ins, feeds, inits


def _linear_layers(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """nn.Linear as transformers export it, MatMul(x, W) + b (+ activation), fused into one
    GEMM with the bias and activation in its epilogue (o2e.MatMulAddAct): [B, T, K] inputs
    (the batch folded into M), the bias first or second, shaped [N], [1, 1, N] or one value,
    GELU as torch writes it (Div, Erf, Add, Mul, Mul), one row (the GEMV and the zero-skipping
    fully connected kernels); left alone: a product something else reads too."""
    nodes, ins, feeds, inits = [], [], {}, []
    cases = [  # name, x shape, N, bias shape, bias first, activation
        ("lg", [2, 9, 24], 40, [40], False, "gelu"),
        ("lr", [1, 17, 32], 48, [1, 1, 48], True, "Relu"),
        ("l1", [3, 5, 8], 12, [1], False, None),
        ("lv", [1, 1, 64], 24, [24], False, "Sigmoid"),  # one row: fc_gemv
        ("lz", [1, 40], 256, [256], True, "Tanh"),  # one row, N = 256: fc_skip_zeros
        ("lo", [2, 6, 16], 8, [8], False, None),  # the product is an output too
        ("lw", [1, 21, 32], 100, [100], False, "gelu"),  # whole 48-wide tiles (AVX-512 GELU)
    ]
    for name, shape, N, bshape, first, act in cases:
        K = shape[-1]
        x = rng.standard_normal(shape).astype(np.float32)
        xr = x.reshape(-1, K)
        xr[0, 1] = np.nan
        if len(xr) > 1:
            xr[1, 2] = np.inf
        # lw: products up to ~+-12, through both of erf's ranges and its saturation
        w = (rng.standard_normal((K, N)) / np.sqrt(K) * (4 if name == "lw" else 1)).astype(
            np.float32
        )
        b = rng.standard_normal(bshape).astype(np.float32)
        b.reshape(-1)[-1] = -np.inf if b.size > 1 else b.reshape(-1)[-1]
        mm = f"y_{name}_mm" if name == "lo" else f"m_{name}"
        add_in = [f"b_{name}", mm] if first else [mm, f"b_{name}"]
        t = f"t_{name}" if act else f"y_{name}"
        nodes += [
            helper.make_node("MatMul", [f"x_{name}", f"w_{name}"], [mm]),
            helper.make_node("Add", add_in, [t]),
        ]
        if act == "gelu":
            nodes += erf_gelu(t, f"y_{name}", f"gelu_{name}")
        elif act:
            nodes.append(helper.make_node(act, [t], [f"y_{name}"]))
        ins.append(vi(f"x_{name}", shape))
        feeds[f"x_{name}"] = x
        inits += [tensor(f"w_{name}", w), tensor(f"b_{name}", b)]
    inits += [
        tensor("sqrt2", np.array(np.sqrt(2), np.float32)),
        tensor("one", np.array(1, np.float32)),
        tensor("half", np.array(0.5, np.float32)),
    ]
    return nodes, ins, feeds, inits


def _residual_layers(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """A transformer block's end, r + (h W + b), with the residual Add in the GEMM epilogue
    (o2e.MatMulAddAct's 4th input; without a bias its 3rd): the residual either side of the
    Add, an arena tensor nothing reads after (the output takes its buffer) or a graph input,
    a Relu after the Add (fused after the residual), one row, one column (the GEMV path);
    left alone: a residual broadcast along the rows."""
    nodes, ins, feeds, inits = [], [], {}, []
    cases = [  # name, h shape, bias shape or None, residual first, Abs'd residual, activation
        ("ra", [1, 9, 24], [24], True, True, None),
        ("rb", [2, 5, 16], None, False, True, None),
        ("rg", [1, 7, 32], [1, 32], False, False, "Relu"),
        ("r1", [1, 1, 40], [40], True, True, None),
        ("rn", [1, 6, 8], [1], False, True, None),  # N = 1
        ("rw", [2, 3, 8], [8], False, False, None),  # the residual [1, 3, 8] broadcast
    ]
    for name, shape, bshape, first, absd, act in cases:
        K = shape[-1]
        N = 1 if name == "rn" else K
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1, K)[0, 1] = np.nan
        x.reshape(-1, K)[-1, 0] = np.inf
        w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
        rshape = [*shape[:-1], N] if name != "rw" else [1, *shape[1:]]
        r = rng.standard_normal(rshape).astype(np.float32)
        r.reshape(-1)[-1] = -np.inf
        mm = f"m_{name}"
        nodes.append(helper.make_node("MatMul", [f"h_{name}", f"w_{name}"], [mm]))
        if bshape is not None:
            nodes.append(helper.make_node("Add", [mm, f"b_{name}"], [f"mb_{name}"]))
            mm = f"mb_{name}"
            inits.append(tensor(f"b_{name}", rng.standard_normal(bshape).astype(np.float32)))
        res = f"r_{name}"
        if absd:
            nodes.append(helper.make_node("Abs", [f"r_{name}"], [f"ra_{name}"]))
            res = f"ra_{name}"
        t = f"t_{name}" if act else f"y_{name}"
        nodes.append(helper.make_node("Add", [res, mm] if first else [mm, res], [t]))
        if act:
            nodes.append(helper.make_node(act, [t], [f"y_{name}"]))
        ins += [vi(f"h_{name}", shape), vi(f"r_{name}", rshape)]
        feeds.update({f"h_{name}": x, f"r_{name}": r})
        inits.append(tensor(f"w_{name}", w))
    return nodes, ins, feeds, inits


def _head_split(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """Attention's head split as torch exports it: qkv = x W + b -> Reshape [T, 3, H, d] ->
    Transpose -> Split -> Squeeze: the Reshape and the Squeezes copy nothing (their inputs are
    written in place); a Reshape of a graph input, and one whose input is read twice, copy."""
    T, H, d = 7, 2, 4
    D = H * d
    x = rng.standard_normal((1, T, D)).astype(np.float32)
    x[0, 1, 2] = np.nan
    shape = np.array([1, T, 3, H, d], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x_hs", "w_hs"], ["qkv_hs"]),
        helper.make_node("Reshape", ["qkv_hs", "shape_hs"], ["r_hs"]),
        helper.make_node("Transpose", ["r_hs"], ["t_hs"], perm=[2, 0, 3, 1, 4]),
        helper.make_node("Split", ["t_hs"], ["q_hs", "k_hs", "v_hs"], axis=0, num_outputs=3),
        *[
            helper.make_node("Squeeze", [f"{n}_hs", "zero_hs"], [f"s{n}_hs"])
            for n in ("q", "k", "v")
        ],
        *[helper.make_node("Neg", [f"s{n}_hs"], [f"y_hs_{n}"]) for n in ("q", "k", "v")],
        helper.make_node("Reshape", ["x_hs", "flat_hs"], ["y_hs_flat"]),  # a graph input
        helper.make_node("Abs", ["x_hs"], ["u_hs"]),
        helper.make_node("Reshape", ["u_hs", "flat_hs"], ["y_hs_u"]),  # u read twice
        helper.make_node("Neg", ["u_hs"], ["y_hs_neg"]),
    ]
    inits = [
        tensor("w_hs", (rng.standard_normal((D, 3 * D)) / np.sqrt(D)).astype(np.float32)),
        tensor("shape_hs", shape),
        tensor("zero_hs", np.array([0], np.int64)),
        tensor("flat_hs", np.array([1, -1], np.int64)),
    ]
    return nodes, [vi("x_hs", [1, T, D])], {"x_hs": x}, inits


def _layer_norms(rng: np.random.Generator) -> tuple[list, list, dict, list]:
    """LayerNormalization / RMSNormalization over the last axis (the vectorised row kernel):
    rows with NaN, Inf, a mean far above the spread (100 + N(0, 1)), rows shorter than the
    lanes; Mean / InvStdDev asked for; a scale without bias; axis -2 (two dims per row)."""
    nodes, ins, feeds, inits = [], [], {}, []
    for name, shape, op, axis, bias, stats in [
        ("ln192", [2, 5, 192], "LayerNormalization", -1, True, True),
        ("ln7", [3, 7], "LayerNormalization", -1, False, False),
        ("ln2d", [2, 4, 6, 10], "LayerNormalization", -2, True, False),
        ("rms48", [4, 48], "RMSNormalization", -1, False, False),
    ]:
        row = shape[axis:]
        x = rng.standard_normal(shape).astype(np.float32)
        rows = x.reshape(-1, int(np.prod(row)))
        rows[0, 3] = np.nan
        rows[1, 2] = np.inf
        rows[2, :] += 100  # (onnxruntime's float mean drifts from the exact result past this)
        scale = rng.standard_normal(row).astype(np.float32)
        inputs = [f"x_{name}", f"s_{name}"] + ([f"b_{name}"] if bias else [])
        outs = [f"y_{name}"] + ([f"y_{name}_mean", f"y_{name}_inv"] if stats else [])
        nodes.append(helper.make_node(op, inputs, outs, axis=axis, epsilon=1e-5))
        ins.append(vi(f"x_{name}", shape))
        feeds[f"x_{name}"] = x
        inits.append(tensor(f"s_{name}", scale))
        if bias:
            inits.append(tensor(f"b_{name}", rng.standard_normal(row).astype(np.float32)))
    return nodes, ins, feeds, inits


def _build(tmp: Path) -> tuple[Path, dict[str, np.ndarray], dict[str, str]]:
    rng = np.random.default_rng(34)
    nodes, ins, feeds, inits = [], [], {}, []
    branches = [_conv1d_branch(n, rng) for n in CONV1D]
    branches += [_conv1d_residual(rng), _conv1d_residual(rng, 128, "res128", 70)]
    branches += [_softmax_rows(rng), _layer_norms(rng)]
    branches += [_scaled_softmaxes(rng), _linear_layers(rng), _head_split(rng)]
    branches.append(_residual_layers(rng))
    for n, i, f, w in branches:
        nodes += n
        ins += i
        feeds.update(f)
        inits += w
    model = make_model(nodes, ins, [], inits, opset=23)  # Gelu, RMSNormalization
    model = onnx.shape_inference.infer_shapes(model)
    model.graph.output.extend(v for v in model.graph.value_info if v.name.startswith("y_"))
    path = save(model, tmp / "m.onnx")
    res = api.convert(path, "c", tmp / "out")
    return path, feeds, res.stats["layer_kernels"]


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, dict]:
    """The converted folder (the C does not depend on the ISA), feeds, onnxruntime's outputs
    and the strategy of each Conv."""
    tmp = tmp_path_factory.mktemp("transformer_blocks")
    path, feeds, chosen = _build(tmp)
    ref = ort_run(onnx.load(path), feeds)
    assert any(np.isnan(v).any() for v in ref.values())
    assert any(np.isinf(v).any() for v in ref.values())
    return tmp / "out", feeds, ref, chosen


def test_conv1d_runs_the_2d_kernels(blocks: tuple[Path, dict, dict, dict]) -> None:
    """Every 1-D case goes to the 2-D strategy of its shape, none to the N-d loop."""
    chosen = blocks[3]
    assert "o2e_layer_norm_rows(" in (blocks[0] / "model.c").read_text()
    assert "o2e_rms_norm_rows(" in (blocks[0] / "model.c").read_text()
    want = {f"c_{n}": case[0] for n, case in CONV1D.items()}
    assert {k: v for k, v in chosen.items() if k in want} == want, chosen
    assert chosen["c_res"] not in ("nd_loop", None), chosen
    assert chosen["c_res128"] == "taps1d", chosen


def test_scaled_softmax_fused(blocks: tuple[Path, dict, dict, dict]) -> None:
    """The scalar Mul before a last-axis softmax is gone, the others stay."""
    src = (blocks[0] / "model.c").read_text()
    fused = set(re.findall(r"/\* node \S+: o2e\.ScaledSoftmax\((x_\w+), ", src))
    assert fused == {"x_ss", "x_ssr", "x_sls"}, fused
    assert re.search(r": Mul\(x_smid, c_smid\)", src) and re.search(r": Mul\(x_sboth, ", src)


def test_linear_layers_fused(blocks: tuple[Path, dict, dict, dict]) -> None:
    """MatMul + bias (+ activation) is one node, the activation in the GEMM's epilogue; the
    Add after a product something else reads stays."""
    src = (blocks[0] / "model.c").read_text()
    fused = dict(
        re.findall(r"/\* node \S+: o2e\.MatMulAddAct\(x_(\w+), [^\]]*activation=(\w*)", src)
    )
    want = {"lg": "Gelu", "lr": "Relu", "l1": "", "lv": "Sigmoid", "lz": "Tanh", "lw": "Gelu"}
    assert fused == want, fused
    assert re.search(r": Add\(y_lo_mm, b_lo\)", src)
    assert not re.search(r": (Erf|Sigmoid|Tanh|Relu)\(", src)
    chosen = blocks[3]
    assert chosen["MatMul_" + _node_index(src, "x_lv")] == "fc_gemv", chosen
    assert chosen["MatMul_" + _node_index(src, "x_lz")] == "fc_skip_zeros", chosen
    assert chosen["MatMul_" + _node_index(src, "x_lg")] == "folded_gemm", chosen


def test_residual_fused(blocks: tuple[Path, dict, dict, dict]) -> None:
    """r + (h W + b) is one GEMM adding b and r in its epilogue; an Abs'd residual nothing
    reads after gives the output its buffer; a residual broadcast along the rows stays an
    Add."""
    src = (blocks[0] / "model.c").read_text()
    fused = dict(re.findall(r"/\* node \S+: o2e\.MatMulAddAct\(h_(r\w), [^)]*, (\w+)\)", src))
    want = {"ra": "ra_ra", "rb": "ra_rb", "rg": "r_rg", "r1": "ra_r1", "rn": "ra_rn"}
    assert fused == {**want, "rw": "b_rw"}, fused  # rw: its bias only
    assert re.search(r": Add\(mb_rw, r_rw\)", src)
    assert re.search(r"MatMulAddAct\(h_rg, [^\]]*activation=Relu", src)
    for name in ("ra", "rb", "r1", "rn"):  # (y_ names are graph outputs: their own buffers)
        assert re.search(rf"o2e_sgemm\([^;]*\bT_ra_{name}\b", src), name


def _node_index(src: str, x: str) -> str:
    m = re.search(r"/\* node MatMul_(\d+): o2e\.MatMulAddAct\(" + x + ",", src)
    assert m is not None, x
    return m.group(1)


def test_reshapes_copy_nothing(blocks: tuple[Path, dict, dict, dict]) -> None:
    """The head split's Reshape and Squeezes are written in place by their producers."""
    src = (blocks[0] / "model.c").read_text()
    for x in ("qkv_hs", "q_hs", "k_hs", "v_hs"):
        assert re.search(rf"T_{x}: written in place", src), x
    for x in ("x_hs", "u_hs"):
        assert not re.search(rf"\w*_{x}: written in place", src), x


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_blocks_vs_onnxruntime(arch: str, blocks: tuple[Path, dict, dict, dict]) -> None:
    """NaN where onnxruntime has NaN, the same infinities, else verify's tolerance."""
    out, feeds, ref, _ = blocks
    got = api.run(out, feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_softmax_loops_vectorise(tmp_path: Path, blocks: tuple[Path, dict, dict, dict]) -> None:
    """Every loop of o2e_softmax.h over a row is vectorised at x86-64-v3 (compile only; the
    scalar tails and the lane merges aside), with the model.c's pragma in force."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the -march names are x86-64 levels")
    out = blocks[0]
    assert "o2e_softmax_rows" in (out / "model.c").read_text()
    cmd = ["gcc", "-O3", "-march=x86-64-v3", "-ffp-contract=fast", f"-I{out}", "-c"]
    r = subprocess.run(
        [*cmd, str(out / "model.c"), "-o", str(tmp_path / "m.o"), "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    done = set(re.findall(r"o2e_softmax\.h:(\d+):\d+: optimized: loop vectorized", r.stderr))
    lines = (out / "o2e_softmax.h").read_text().splitlines()
    # the loops over a row's vectors: j in steps of 16 with their 16-lane bodies, and the
    # whole-row stores
    loops = [
        i + 1
        for i, ln in enumerate(lines)
        if re.match(r"\s*for \(l = 0; l < 16; \+\+l\) (m|s)\[l\] (=|\+=) [^0-]", ln)
        or re.match(r"\s*for \(l = 0; l < 16; \+\+l\) \{$", ln)
        or re.match(r"\s*for \(j = 0; j < n; \+\+j\)", ln)
    ]
    assert len(loops) == 5, loops
    scalar = [(n, lines[n - 1].strip()) for n in loops if str(n) not in done]
    assert not scalar, (scalar, sorted(done))
