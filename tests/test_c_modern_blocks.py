"""Modern network blocks in the C backend (issue 34 item 2), at every ISA.

Transcendental activations fused into GEMM-based producers:
The o2e_vmath.h epilogue kinds (Sigmoid, Tanh, HardSigmoid, HardSwish, SiLU / Swish, GELU in
both forms, Mish) are applied to each tile right after it is stored. The shapes reach every
store of o2e_gemm.h: K past one K slice (the last slice's partial-sum epilogue), M and N not
multiples of the tiles (edge tiles), a matrix-vector product (N == 1 path), and the 1x1
convolution's residual pass (o2e_conv1x1.h). SiLU and GELU come as torch writes them below
opset 20 (Mul(t, Sigmoid(t)); Div, Erf, Add, Mul, Mul): the C backend's fuse_activation pass
must fold them into the producer. NaN / +-Inf inputs must land where onnxruntime puts them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi

# (op, attributes): "SiLU" and "GeluErf" are the multi-node patterns
ACTS = [
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.45}),
    ("HardSwish", {}),
    ("SiLU", {}),
    ("GeluErf", {}),
    ("Mish", {}),
]


def _act(op: str, kw: dict, x: str, y: str, tag: str) -> list[onnx.NodeProto]:
    if op == "SiLU":
        return [
            helper.make_node("Sigmoid", [x], [f"s_{tag}"]),
            helper.make_node("Mul", [f"s_{tag}", x], [y]),  # the other operand order
        ]
    if op == "GeluErf":  # torch.onnx.export of F.gelu at opset 17
        return [
            helper.make_node("Div", [x, "sqrt2"], [f"d_{tag}"]),
            helper.make_node("Erf", [f"d_{tag}"], [f"e_{tag}"]),
            helper.make_node("Add", [f"e_{tag}", "one"], [f"a_{tag}"]),
            helper.make_node("Mul", [x, f"a_{tag}"], [f"m_{tag}"]),
            helper.make_node("Mul", [f"m_{tag}", "half"], [y]),
        ]
    return [helper.make_node(op, [x], [y], **kw)]


def _model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(34)
    M, K, N = 13, 300, 70  # K > one K slice (256), M and N off the tile sizes
    x = rng.standard_normal((M, K)).astype(np.float32)
    x[2, 5] = np.nan
    x[7, :] = 0.0
    x[7, 0] = np.inf  # row 7: +Inf times weights of both signs
    x[9, 3] = -np.inf
    v = rng.standard_normal((1, K)).astype(np.float32)  # matrix-vector
    v[0, 1] = np.nan
    C, H = 128, 7  # 1x1 on a 7x7 map, residual: o2e_conv1x1.h's residual pass
    img = rng.standard_normal((1, C, H, H)).astype(np.float32)
    img[0, 3, 2, 2] = np.inf
    res = rng.standard_normal((1, 40, H, H)).astype(np.float32)
    res[0, 5, 1, 1] = np.nan
    inits = [
        tensor("sqrt2", np.array(np.sqrt(2.0), np.float32)),
        tensor("one", np.array(1.0, np.float32)),
        tensor("half", np.array(0.5, np.float32)),
        tensor("W", (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)),
        tensor("B", rng.standard_normal(N).astype(np.float32)),
        tensor("Wv", (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)),
        tensor("Wc", (rng.standard_normal((40, C, 1, 1)) / np.sqrt(C)).astype(np.float32)),
        tensor("Bc", rng.standard_normal(40).astype(np.float32)),
    ]
    nodes, outs = [], []
    for i, (op, kw) in enumerate(ACTS):
        # MatMul + bias Add (torch's Linear), Gemm on a vector, 1x1 conv + residual
        nodes += [
            helper.make_node("MatMul", ["x", "W"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", "B"], [f"t{i}"]),
            *_act(op, kw, f"t{i}", f"y_mm_{op}", f"mm{i}"),
            helper.make_node("Gemm", ["v", "Wv", "B"], [f"g{i}"], transB=1),
            *_act(op, kw, f"g{i}", f"y_gemv_{op}", f"g{i}"),
            helper.make_node("Conv", ["img", "Wc", "Bc"], [f"c{i}"]),
            helper.make_node("Add", [f"c{i}", "res"], [f"r{i}"]),
            *_act(op, kw, f"r{i}", f"y_conv_{op}", f"c{i}"),
        ]
        outs += [
            vi(f"y_mm_{op}", [M, N]),
            vi(f"y_gemv_{op}", [1, N]),
            vi(f"y_conv_{op}", [1, 40, H, H]),
        ]
    ins = [vi("x", [M, K]), vi("v", [1, K]), vi("img", [1, C, H, H]), vi("res", [1, 40, H, H])]
    path = save(make_model(nodes, ins, outs, inits, opset=18), tmp_path / "m.onnx")  # Mish
    return path, {"x": x, "v": v, "img": img, "res": res}


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_transcendental_epilogues_match_onnxruntime(tmp_path: Path, arch: str) -> None:
    from onnx2edge.verify import compare

    path, feeds = _model(tmp_path)
    api.convert(path, "c", tmp_path / "out")
    code = (tmp_path / "out" / "model.c").read_text()
    ops = re.findall(r"/\* node [^:]*: ([\w.]+)\(", code)
    # every activation (and SiLU's / GELU's several nodes) folded into its producer
    assert not {"Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Mish", "Mul", "Erf", "Div"} & set(
        ops
    ), ops
    for kind in ("SIGMOID", "TANH", "HARD_SIGMOID", "HARD_SWISH", "SWISH", "GELU", "MISH"):
        assert f"O2E_ACT_{kind}," in code, kind  # in an epilogue, not a loop of its own
    ref = ort_run(onnx.load(path), feeds)
    assert any(np.isnan(v).any() for v in ref.values())  # the check is not vacuous
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_epilogue_loops_vectorise(tmp_path: Path) -> None:
    """Each vmath kind's loop in o2e_act_vm_n_ (o2e_gemm.h) is vectorised by gcc at x86-64-v3
    (compile only): the pragma the writer puts first in model.c reaches the header's code."""
    path, _ = _model(tmp_path)
    out = tmp_path / "out"
    api.convert(path, "c", out)
    header = (out / "o2e_gemm.h").read_text().splitlines()
    start = next(i for i, s in enumerate(header) if s.startswith("O2E_GEMM_FN void o2e_act_vm_n_("))
    end = next(i for i in range(start, len(header)) if header[i] == "}")
    loops = {i + 1 for i in range(start, end) if re.search(r"\bfor \(|O2E_ACT_LOOP_\(", header[i])}
    assert len(loops) >= 7, loops  # Swish and GELU: two loops each
    r = subprocess.run(
        ["gcc", "-O3", "-march=x86-64-v3", "-ffp-contract=fast", "-c", "model.c", "-o",
         "/dev/null", "-fopt-info-vec-optimized"],
        cwd=out, capture_output=True, text=True, check=True,
    )  # fmt: skip
    done = {
        int(m) for m in re.findall(r"o2e_gemm\.h:(\d+):\d+: optimized: loop vectorized", r.stderr)
    }
    assert loops <= done, sorted(loops - done)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_reduce_mean_trailing_axes(tmp_path: Path, arch: str) -> None:
    """ReduceMean over trailing axes (SE's x.mean((2, 3))) takes GlobalAveragePool's vectorised
    kernel; other axes keep the generic loop. NaN / +-Inf planes as onnxruntime."""
    from onnx2edge.verify import compare

    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 40, 7, 9)).astype(np.float32)
    x[0, 3, 2, 2] = np.nan
    x[0, 4, 0, 0] = np.inf
    x[0, 5, 1, 1], x[0, 5, 2, 2] = np.inf, -np.inf
    z = rng.standard_normal((2, 5, 33)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x", "hw"], ["se"], keepdims=1),
        helper.make_node("ReduceMean", ["x", "chw"], ["all"], keepdims=0),
        helper.make_node("ReduceMean", ["z", "last"], ["row"], keepdims=0),
        helper.make_node("ReduceMean", ["x", "c"], ["mid"], keepdims=1),  # not trailing
    ]
    inits = [
        tensor("hw", np.array([2, 3], np.int64)),
        tensor("chw", np.array([3, 1, 2], np.int64)),  # any order
        tensor("last", np.array([-1], np.int64)),
        tensor("c", np.array([1], np.int64)),
    ]
    outs = [vi("se", [1, 40, 1, 1]), vi("all", [1]), vi("row", [2, 5]), vi("mid", [1, 1, 7, 9])]
    ins = [vi("x", [1, 40, 7, 9]), vi("z", [2, 5, 33])]
    path = save(make_model(nodes, ins, outs, inits, opset=18), tmp_path / "m.onnx")
    kernels = api.convert(path, "c", tmp_path / "out").stats["kernels"]
    assert kernels.get("ReduceMean: vectorised sum") == 3, kernels
    feeds = {"x": x, "z": z}
    ref = ort_run(onnx.load(path), feeds)
    got = api.run(tmp_path / "out", feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-5, 1e-6) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]
    assert np.isnan(got["se"][0, 3]).all() and np.isnan(got["se"][0, 5]).all()
