"""Fused attention (passes/fuse_attention.py -> o2e.FusedAttention -> runtime/o2e_attention.h),
checked against onnxruntime at every instruction set (x86-64-v2, v3, the host's own, aarch64
under qemu): the exporters' packed-qkv layout with the head merge taken in, a K^T operand, a
mask with -Inf entries and an all-masked row, NaN / Inf in Q, K, V and the mask, sequences that
are not a multiple of a row block or of a vector."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.passes import run_passes
from onnx2edge.runtime import ort_run
from onnx2edge.semantics.fused import attention_reference
from onnx2edge.verify import compare

from conftest import ALL_ISAS, make_model, save, tensor, vi


def _c(name: str, arr: np.ndarray | list[int], dtype: type = np.int64) -> onnx.TensorProto:
    return tensor(name, np.asarray(arr, dtype=dtype))


def _packed(p: str, T: int, H: int, D: int) -> tuple[list, list, list]:
    """timm / Whisper: qkv [1, T, 3HD] -> Reshape -> Transpose(2, 0, 3, 1, 4) -> Split ->
    Squeeze, K^T by Transpose, MatMul, Mul(d^-0.5), Softmax, MatMul, Transpose(0, 2, 1, 3),
    Reshape [1, T, HD]."""
    n = helper.make_node
    nodes = [
        n("Reshape", [f"x_{p}", f"{p}_s5"], [f"{p}_r"]),
        n("Transpose", [f"{p}_r"], [f"{p}_t"], perm=[2, 0, 3, 1, 4]),
        n("Split", [f"{p}_t", f"{p}_ones"], [f"{p}_q5", f"{p}_k5", f"{p}_v5"], axis=0),
        *[n("Squeeze", [f"{p}_{c}5", f"{p}_z"], [f"{p}_{c}"]) for c in "qkv"],
        n("Transpose", [f"{p}_k"], [f"{p}_kt"], perm=[0, 1, 3, 2]),
        n("MatMul", [f"{p}_q", f"{p}_kt"], [f"{p}_s"]),
        n("Mul", [f"{p}_s", f"{p}_c"], [f"{p}_ss"]),
        n("Softmax", [f"{p}_ss"], [f"{p}_p"], axis=-1),
        n("MatMul", [f"{p}_p", f"{p}_v"], [f"{p}_o"]),
        n("Transpose", [f"{p}_o"], [f"{p}_om"], perm=[0, 2, 1, 3]),
        n("Reshape", [f"{p}_om", f"{p}_s3"], [f"y_{p}"]),
    ]
    inits = [
        _c(f"{p}_s5", [1, T, 3, H, D]),
        _c(f"{p}_ones", [1, 1, 1]),
        _c(f"{p}_z", [0]),
        _c(f"{p}_s3", [1, T, H * D]),
        tensor(f"{p}_c", np.array(D**-0.5, dtype=np.float32)),
    ]
    return nodes, [vi(f"x_{p}", [1, T, 3 * H * D])], inits


def _masked(p: str) -> tuple[list, list, list]:
    """BERT-style: separate Q, K, V [1, 3, 40, 16 / 8], Div by sqrt(d), an additive mask
    [1, 1, 40, 40] input, no head merge."""
    n = helper.make_node
    nodes = [
        n("Transpose", [f"k_{p}"], [f"{p}_kt"], perm=[0, 1, 3, 2]),
        n("MatMul", [f"q_{p}", f"{p}_kt"], [f"{p}_s"]),
        n("Div", [f"{p}_s", f"{p}_c"], [f"{p}_ss"]),
        n("Add", [f"m_{p}", f"{p}_ss"], [f"{p}_sm"]),
        n("Softmax", [f"{p}_sm"], [f"{p}_p"], axis=-1),
        n("MatMul", [f"{p}_p", f"v_{p}"], [f"y_{p}"]),
    ]
    ins = [
        vi(f"q_{p}", [1, 3, 40, 16]),
        vi(f"k_{p}", [1, 3, 40, 16]),
        vi(f"v_{p}", [1, 3, 40, 8]),
        vi(f"m_{p}", [1, 1, 40, 40]),
    ]
    return nodes, ins, [tensor(f"{p}_c", np.array(4.0, dtype=np.float32))]


def _rank3_kt(p: str) -> tuple[list, list, list]:
    """[B, M, D] . K^T given as [B, D, N] (no Transpose to look through), no scale, a mask of
    N values broadcast to every row."""
    n = helper.make_node
    nodes = [
        n("MatMul", [f"q_{p}", f"kt_{p}"], [f"{p}_s"]),
        n("Add", [f"{p}_s", f"m_{p}"], [f"{p}_sm"]),
        n("Softmax", [f"{p}_sm"], [f"{p}_p"], axis=2),
        n("MatMul", [f"{p}_p", f"v_{p}"], [f"y_{p}"]),
    ]
    ins = [
        vi(f"q_{p}", [2, 5, 8]),
        vi(f"kt_{p}", [2, 8, 70]),
        vi(f"v_{p}", [2, 70, 40]),
        vi(f"m_{p}", [70]),
    ]
    return nodes, ins, []


def _feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    f = {
        "x_pk": rng.standard_normal((1, 37, 3 * 2 * 24)).astype(np.float32),
        "x_pw": rng.standard_normal((1, 70, 3 * 3 * 64)).astype(np.float32),
        "x_pt": rng.standard_normal((1, 45, 3 * 64)).astype(np.float32),
        "q_mk": rng.standard_normal((1, 3, 40, 16)).astype(np.float32),
        "k_mk": rng.standard_normal((1, 3, 40, 16)).astype(np.float32),
        "v_mk": rng.standard_normal((1, 3, 40, 8)).astype(np.float32),
        "m_mk": np.where(rng.random((1, 1, 40, 40)) < 0.2, -np.inf, 0.0).astype(np.float32),
        "q_r3": rng.standard_normal((2, 5, 8)).astype(np.float32),
        "kt_r3": rng.standard_normal((2, 8, 70)).astype(np.float32),
        "v_r3": rng.standard_normal((2, 70, 40)).astype(np.float32),
        "m_r3": rng.standard_normal(70).astype(np.float32),
    }
    x = f["x_pk"]
    x[0, 3, 5] = np.nan  # a Q value of head 0: row 3 NaN in that head
    x[0, 7, 48 + 2] = np.inf  # a K value of head 0: every row of head 0 meets Inf * q
    x[0, 11, 96 + 30] = -np.inf  # a V value of head 1: its column 6 NaN / Inf
    f["x_pw"] *= 3.0  # large spreads: exp underflows for most keys
    f["q_mk"][0, 1, 4, 0] = np.inf
    f["k_mk"][0, 2, 9, 3] = np.nan
    f["v_mk"][0, 0, 13, 1] = np.nan
    m = f["m_mk"]
    m[0, 0, 6, :] = -np.inf  # an all-masked row: NaN, as onnxruntime's Softmax
    m[0, 0, 8, 17] = np.nan
    m[0, 0, 12, 5] = np.inf
    # HF's additive mask value, float32's finite minimum (times log2(e) it would be -Inf): a
    # row masked whole with it is uniform in onnxruntime (not NaN), a row masked in part drops
    # those keys
    fmin = np.finfo(np.float32).min
    m[0, 0, 10, :] = fmin
    m[0, 0, 14, :25] = fmin
    f["m_r3"][[3, 64]] = -np.inf
    # no mask, the row maxima fused into the score tiles: keys 41.. (past the whole tiles of
    # every build but the scalar one) score about +127, the others about -125, so a maximum
    # that missed them gives exp(+252) = Inf and NaN rows; row 5 is -Inf at every key (-Inf
    # q . positive k): NaN, as onnxruntime's Softmax of a row of -Inf
    x = f["x_pt"]
    q, k = x[0, :, :64], x[0, :, 64:128]
    q[:] = 8.0 + 0.1 * q
    k[:41] = -2.0 + 0.1 * k[:41]
    k[41:] = 2.0 + 0.1 * k[41:]
    k[:, 0] = 1.0
    q[5, 0] = -np.inf
    return f


@pytest.fixture(scope="module")
def attn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict, dict]:
    tmp = tmp_path_factory.mktemp("fused_attention")
    nodes, ins, inits = [], [], []
    for part in (
        _packed("pk", 37, 2, 24),
        _packed("pw", 70, 3, 64),
        _packed("pt", 45, 1, 64),
        _masked("mk"),
        _rank3_kt("r3"),
    ):
        nodes += part[0]
        ins += part[1]
        inits += part[2]
    model = make_model(nodes, ins, [], inits)
    model = onnx.shape_inference.infer_shapes(model)
    model.graph.output.extend(v for v in model.graph.value_info if v.name.startswith("y_"))
    path = save(model, tmp / "m.onnx")
    feeds = _feeds(np.random.default_rng(35))
    ref = ort_run(onnx.load(path), feeds)
    assert all(np.isnan(ref[k]).any() for k in ("y_pk", "y_mk", "y_pt"))
    assert np.isfinite(np.delete(ref["y_pt"], 5, axis=1)).all()
    api.convert(path, "c", tmp / "out")
    return path, tmp / "out", feeds, ref


def test_every_attention_fused(attn: tuple[Path, Path, dict, dict]) -> None:
    """Each chain is one o2e.FusedAttention in the layout the pass read; the packed one's Transpose
    / Split / Squeeze copies and the head-merge Transpose are gone."""
    src = (attn[1] / "model.c").read_text()
    ops = re.findall(r"/\* node \S+: o2e\.FusedAttention\((\w+)[^\n]*", src)
    assert sorted(ops) == ["pk_r", "pt_r", "pw_r", "q_mk", "q_r3"], ops
    assert "o2e_attention_rows(" in src
    assert not re.search(r"/\* node \S+: (Softmax|Transpose|Split|Squeeze|Div)\(", src)
    attrs = dict(re.findall(r"o2e\.FusedAttention\((\w+),[^\n]*?(qkv_layout=\w+)", src))
    assert attrs == {"pk_r": "qkv_layout=packed", "pw_r": "qkv_layout=packed",
                     "pt_r": "qkv_layout=packed",
                     "q_mk": "qkv_layout=bhsd", "q_r3": "qkv_layout=bhsd"}, attrs  # fmt: skip


def test_pass_keeps_the_meaning(attn: tuple[Path, Path, dict, dict]) -> None:
    """attention_reference on the fused node's operands is onnxruntime's unfused result."""
    path, _, feeds, ref = attn
    g = run_passes(graph_from_model(onnx.load(path)), ["fold_constants", "fuse_attention"])
    fused = [nd for nd in g.nodes if nd.op_type == "FusedAttention"]
    assert len(fused) == 5
    for nd in fused:
        y = nd.outputs[0]
        if y not in ref:  # the packed ones write the merge Transpose's output, reshaped after
            y = "y_" + y.split("_")[0]
        # the packed ones read the qkv input's [1, T, 3, H, D] view
        args = [
            (feeds[i] if i in feeds else feeds["x_" + i[:2]]).reshape(g.shape_of(i))
            for i in nd.inputs
        ]
        kw = {k: nd.attr(k) for k in ("scale", "k_transposed", "out_layout")}
        kw["layout"] = nd.attr("qkv_layout")
        got = attention_reference(*args, **kw).reshape(ref[y].shape)
        r = compare(y, got, ref[y], 1e-4, 1e-5)
        assert r.ok, (y, r.max_abs, r.max_rel)


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_attention_vs_onnxruntime(arch: str, attn: tuple[Path, Path, dict, dict]) -> None:
    """NaN where onnxruntime has NaN, the same infinities, else verify's tolerance."""
    _, out, feeds, ref = attn
    got = api.run(out, feeds, options={"arch": arch})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_attention_plain_floats(attn: tuple[Path, Path, dict, dict]) -> None:
    """The portable tiles (plain floats, what a compiler without GNU vectors builds)."""
    _, out, feeds, ref = attn
    got = api.run(out, feeds, options={"cflags": ["-O2", "-DO2E_ATT_SCALAR"]})
    bad = [r for r in (compare(k, got[k], ref[k], 1e-4, 1e-5) for k in ref) if not r.ok]
    assert not bad, [(r.name, r.max_abs, r.max_rel) for r in bad]


def test_attention_threads(
    tmp_path: Path, attn: tuple[Path, Path, dict, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads (heads x row blocks split) give the one-thread result bit for bit."""
    from onnx2edge.backends.c.kernels import par_split

    path, _, feeds, ref = attn
    monkeypatch.setattr(par_split, "PAR_MIN_US", 0)  # split however small the test's heads
    api.convert(path, "c", tmp_path / "t2", options={"max_threads": 2})
    assert "o2e_parallel_for(" in (tmp_path / "t2" / "model.c").read_text()
    one = api.run(tmp_path / "t2", feeds, options={"cflags": ["-O2"]})
    two = api.run(
        tmp_path / "t2", feeds, options={"cflags": ["-O2", "-DO2E_THREADS=2", "-pthread"]}
    )
    for k in ref:
        np.testing.assert_array_equal(one[k], two[k])
        assert compare(k, two[k], ref[k], 1e-4, 1e-5).ok, k


def test_schema_leaves_onnx_reference_working() -> None:
    """onnx's reference evaluator (fold_constants) wants op names unique across domains: the
    internal op is not called `Attention` (ONNX 23's op)."""
    import subprocess
    import sys

    code = "import onnx2edge.semantics.fused; import onnx.reference"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_attention_macs(attn: tuple[Path, Path, dict, dict]) -> None:
    """bench --profile's GFLOP/s column: a fused attention counts the MACs of the two MatMuls
    it replaced (it read 0 before)."""
    from onnx2edge.analysis import node_macs

    path = attn[0]
    g = api.prepare(path, "c")
    fused = [nd for nd in g.nodes if nd.op_type == "FusedAttention"]
    assert fused and all(node_macs(g, nd) > 0 for nd in fused)
    total = sum(node_macs(g, nd) for nd in g.nodes)
    assert total == api.inspect(path)["total_macs"]


EXP2_HARNESS = r"""#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math") /* as the generated model.c starts (o2e_vmath.h) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include "o2e_attention.h"

static void f_att(const float *x, float *y, size_t n) { for (size_t i = 0; i < n; ++i) y[i] = o2e_att_exp2neg(x[i]); }

int main(int argc, char **argv)
{
  if (argc != 3) return 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 3;
  fseek(f, 0, SEEK_END);
  const size_t n = (size_t)ftell(f) / sizeof(float);
  fseek(f, 0, SEEK_SET);
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  if (!x || !y || fread(x, sizeof(float), n, f) != n) return 4;
  fclose(f);
  f_att(x, y, n);
  FILE *o = fopen(argv[2], "wb");
  if (!o || fwrite(y, sizeof(float), n, o) != n) return 5;
  fclose(o);
  return 0;
}
"""


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_softmax_exp2_bound(tmp_path: Path, arch: str) -> None:
    """o2e_att_exp2neg (the softmax's 2^x of log2-unit scores, x = s - max <= 0) within 2 ulps
    of 2^x wherever 2^x >= 2^-126 (a strided sweep of every binade, the flush edge, the
    halfway points the rounding to n meets, denormal inputs), at most 2^-126 below (0 under
    -126.5), 1 at -0, 0 at -Inf, NaN at NaN: vectorised or not, at every ISA."""
    import subprocess

    from onnx2edge.backends.c.build import STRICT_FLAGS, arch_flags, compiler, emulator

    runtime = Path(__file__).parents[1] / "src/onnx2edge/backends/c/runtime"
    bits = np.arange(0x80000000, 0xFF800001, 4099, dtype=np.uint64).astype(np.uint32)
    edge = np.linspace(-128.0, -120.0, 20001, dtype=np.float32)
    halves = -np.arange(0, 128, dtype=np.float32) - 0.5
    special = np.array([-0.0, -np.inf, np.nan, -127.0, -126.5, -126.0, -1e-45], np.float32)
    x = np.concatenate([bits.view(np.float32), edge, halves, np.nextafter(halves, 0), special])
    src = tmp_path / "exp2.c"
    src.write_text(EXP2_HARNESS)
    exe, cc = tmp_path / "exp2", compiler(arch)
    static = ["-static"] if emulator(arch) else []
    cmd = [cc, *STRICT_FLAGS, *arch_flags(arch), *static, f"-I{runtime}", str(src), "-o", str(exe)]
    r = subprocess.run([*cmd, "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    x.tofile(tmp_path / "x.bin")
    run = [*emulator(arch), str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    r = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    y = np.fromfile(tmp_path / "y.bin", np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.exp2(x.astype(np.float64))
    normal = t >= 2.0**-126
    ulp = np.spacing(t[normal].astype(np.float32)).astype(np.float64)
    err = np.abs(y[normal] - t[normal]) / ulp
    assert err.max() <= 2.0, (x[normal][err.argmax()], y[normal][err.argmax()], err.max())
    tiny = ~normal & ~np.isnan(x)
    assert np.all((y[tiny] >= 0.0) & (y[tiny] <= 2.0**-126))
    assert np.all(y[x < -126.5] == 0.0)
    assert np.isnan(y[-5]) and y[-6] == 0.0 and y[-7] == 1.0
