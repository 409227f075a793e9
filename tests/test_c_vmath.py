"""runtime/o2e_vmath.h (issue 34 item 1): the vectorisable exp, log, log1p, tanh, sigmoid and erf
against the correctly rounded value (float64 numpy / math.erf, rounded to float32), at every ISA
the C is built for (x86-64-v2, x86-64-v3, native; aarch64 under qemu).

One harness binary per ISA applies every function in a loop over one array (the loop gcc
vectorises, as in the generated code) to a sweep of special values (NaN, +-Inf, +-0, denormals,
the overflow / underflow edges of exp, the saturation of tanh / sigmoid / erf), every binade with
several mantissas, dense ranges where the formulas switch, and random bit patterns; each result
is compared in ulps with the bound o2e_vmath.h states, and NaN / Inf / signed zero exactly.
"""

from __future__ import annotations

import math
import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx.compose
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import STRICT_FLAGS, arch_flags, compiler, emulator
from onnx2edge.runtime import ort_run

from conftest import ALL_ISAS, make_model, save, tensor, vi

RUNTIME = Path(__file__).parents[1] / "src/onnx2edge/backends/c/runtime"

# the bounds o2e_vmath.h's header comment states (ulps against the correctly rounded float)
BOUNDS = {"exp": 2, "log": 2, "log1p": 2, "tanh": 3, "sigmoid": 3, "erf": 3}
FUNCS = list(BOUNDS)

HARNESS = r"""#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math") /* as the generated model.c starts (o2e_vmath.h) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include "o2e_vmath.h"

#define APPLY(NAME, F) static void NAME(const float *x, float *y, size_t n) { \
  for (size_t i = 0; i < n; ++i) y[i] = F(x[i]); }
APPLY(f_exp, o2e_expf)
APPLY(f_log, o2e_logf)
APPLY(f_log1p, o2e_log1pf)
APPLY(f_tanh, o2e_tanhf)
APPLY(f_sigmoid, o2e_sigmoidf)
APPLY(f_erf, o2e_erff)

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
  FILE *o = fopen(argv[2], "wb");
  if (!o) return 5;
  void (*fns[])(const float *, float *, size_t) = {f_exp, f_log, f_log1p, f_tanh, f_sigmoid, f_erf};
  for (size_t k = 0; k < sizeof fns / sizeof fns[0]; ++k) {
    fns[k](x, y, n);
    if (fwrite(y, sizeof(float), n, o) != n) return 6;
  }
  fclose(o);
  free(x);
  free(y);
  return 0;
}
"""


def sweep() -> np.ndarray:
    """The inputs: specials and edges, every binade, dense ranges, random bit patterns."""
    f32 = np.float32
    special = [
        np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0,
        1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, 1.17549435e-38, 3.4028235e38, -3.4028235e38,
        88.72283, 88.72284, 88.8, 89.0, 100.0, -87.33655, -87.3366, -103.97207, -103.9721,
        -104.0, -150.0, 0.625, -0.625, 0.921875, -0.921875, 3.9375, -3.9375, 9.0, -9.0,
        -0.99999994, -0.5, 2.0, 0.5,
    ]  # fmt: skip
    bits = [np.array(special, f32).view(np.uint32)]
    # every binade of both signs, 64 mantissas each (the first and last included)
    exps = np.arange(256, dtype=np.uint32) << 23
    mant = np.concatenate([[0, 1, 0x7FFFFF], np.linspace(0, 0x7FFFFF, 61).astype(np.uint32)])
    grid = (exps[:, None] | mant[None, :]).reshape(-1)
    bits += [grid, grid | np.uint32(0x80000000)]
    # neighbours of the switch points and edges, bit by bit
    for edge in (0.625, 0.921875, 3.9375, 9.0, 88.72283, 103.97208, 1.0, 0.70710677, 1.4142135):
        c = np.array([edge, -edge], f32).view(np.uint32).astype(np.int64)
        bits.append((c[:, None] + np.arange(-300, 301)[None, :]).reshape(-1).astype(np.uint32))
    rng = np.random.default_rng(34)
    dense = [np.linspace(-12, 12, 60001), np.linspace(-110, 95, 20001), rng.uniform(-1, 3, 20000)]
    bits += [np.asarray(d, f32).view(np.uint32) for d in dense]
    bits.append(rng.integers(0, 2**32, 100000, dtype=np.uint64).astype(np.uint32))
    return np.concatenate(bits).view(f32)


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """The correctly rounded float result (float64, then one rounding to float32)."""
    with np.errstate(all="ignore"):
        d = x.astype(np.float64)
        if name == "exp":
            r = np.exp(d)
        elif name == "log":
            r = np.log(d)
        elif name == "log1p":
            r = np.log1p(d)
        elif name == "tanh":
            r = np.tanh(d)
        elif name == "sigmoid":
            r = np.where(d < 0, np.exp(d) / (1 + np.exp(d)), 1 / (1 + np.exp(-d)))
        else:
            r = np.frompyfunc(lambda v: math.erf(v) if v == v else v, 1, 1)(d).astype(np.float64)
        return r.astype(np.float32)


def ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distance in representable floats (0 when both are the same NaN class / infinity)."""

    def ordered(v: np.ndarray) -> np.ndarray:
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    both_nan = np.isnan(got) & np.isnan(ref)
    d = np.abs(ordered(got) - ordered(ref))
    return np.where(both_nan, 0, np.where(np.isnan(got) | np.isnan(ref), 2**32, d))


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    return sweep()


# onnxruntime's ops of the same functions, on the same sweep (log1p has no ONNX op)
ORT_OPS = {"exp": "Exp", "log": "Log", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf"}


@pytest.fixture(scope="module")
def ort_outputs(inputs: np.ndarray) -> dict[str, np.ndarray]:
    n = len(inputs)
    nodes = [helper.make_node(op, ["x"], [f]) for f, op in ORT_OPS.items()]
    model = make_model(nodes, [vi("x", [n])], [vi(f, [n]) for f in ORT_OPS])
    return ort_run(model, {"x": inputs})


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_vmath_ulp_bounds(
    tmp_path: Path, arch: str, inputs: np.ndarray, ort_outputs: dict[str, np.ndarray]
) -> None:
    src = tmp_path / "vmath.c"
    src.write_text(HARNESS)
    exe = tmp_path / "vmath"
    cc = compiler(arch)
    static = ["-static"] if emulator(arch) else []
    cmd = [cc, *STRICT_FLAGS, *arch_flags(arch), *static, f"-I{RUNTIME}", str(src), "-o", str(exe)]
    r = subprocess.run([*cmd, "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    inputs.tofile(tmp_path / "x.bin")
    run = [*emulator(arch), str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    r = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(len(FUNCS), -1)
    worst, signs = {}, {}
    for k, name in enumerate(FUNCS):
        ref = reference(name, inputs)
        e = ulps(got[k], ref)
        i = int(np.argmax(e))
        worst[name] = (int(e[i]), float(inputs[i]), float(got[k][i]), float(ref[i]))
        # signed zeros and infinities exactly (a 1-ulp slip from 0 is a sign error)
        exact = (ref == 0) | np.isinf(ref)
        wrong = exact & (np.signbit(got[k]) != np.signbit(ref))
        if wrong.any():
            signs[name] = inputs[wrong][:5].tolist()
        if name in ort_outputs:  # onnxruntime: NaN / Inf alike, else verify's tolerance per value
            o = ort_outputs[name]
            fin = np.isfinite(o)
            same = np.array_equal(np.isnan(got[k]), np.isnan(o)) and np.array_equal(
                got[k][np.isinf(o)], o[np.isinf(o)]
            )
            err = np.abs(got[k][fin].astype(np.float64) - o[fin])
            if not same or (err > 1e-6 + 1e-4 * np.abs(o[fin])).any():
                signs[f"{name} vs onnxruntime"] = float(inputs[fin][np.argmax(err)])
    bad = {n: w for n, w in worst.items() if w[0] > BOUNDS[n]}
    assert not bad, f"{arch}: worst (ulps, x, got, ref) beyond the bounds {BOUNDS}: {bad}"
    assert not signs, f"{arch}: wrong sign of 0 / Inf, or off onnxruntime, at inputs {signs}"


GELU_HARNESS = r"""#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "o2e_vmath.h"
#include "o2e_gemm.h"

int main(int argc, char **argv)
{
  FILE *f = argc == 3 ? fopen(argv[1], "rb") : NULL;
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  const size_t n = (size_t)ftell(f) / sizeof(float);
  fseek(f, 0, SEEK_SET);
  float *x = malloc(n * sizeof(float)), *y = malloc(2 * n * sizeof(float));
  if (!x || !y || fread(x, sizeof(float), n, f) != n) return 4;
  fclose(f);
  o2e_act act;
  act.kind = O2E_ACT_GELU, act.a = 0.0f, act.b = 0.0f;
  for (size_t i = 0; i < n; ++i) y[i] = o2e_gelu_erff(x[i]); /* the loop gcc vectorises */
  memcpy(y + n, x, n * sizeof(float));
  o2e_act_vm_n_(y + n, n, act); /* the epilogue's: AVX-512 / AVX2 intrinsics, then the tail */
  FILE *o = fopen(argv[2], "wb");
  if (!o || fwrite(y, sizeof(float), 2 * n, o) != 2 * n) return 6;
  fclose(o);
  free(x);
  free(y);
  return 0;
}
"""


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_gelu_epilogue_bound(tmp_path: Path, arch: str, inputs: np.ndarray) -> None:
    """The fused GELU (erf form) of GEMM and convolution epilogues: o2e_vmath.h's o2e_gelu_erff
    as gcc vectorises it and o2e_gemm.h's intrinsics copies (o2e_act_vm_n_), within the stated
    absolute bound 2^-23 |x| + 2 ulps of the exact value, and NaN / Inf / signed zeros as
    onnxruntime's Gelu (-Inf gives NaN there: -Inf * 0), values within verify's tolerance."""
    src = tmp_path / "gelu.c"
    src.write_text(GELU_HARNESS)
    exe = tmp_path / "gelu"
    static = ["-static"] if emulator(arch) else []
    cmd = [compiler(arch), *STRICT_FLAGS, *arch_flags(arch), *static, f"-I{RUNTIME}", str(src)]
    r = subprocess.run([*cmd, "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    inputs.tofile(tmp_path / "x.bin")
    run = [*emulator(arch), str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    r = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(2, -1)
    n = len(inputs)
    model = make_model(
        [helper.make_node("Gelu", ["x"], ["y"])], [vi("x", [n])], [vi("y", [n])], opset=20
    )
    o = ort_run(model, {"x": inputs})["y"]
    with np.errstate(all="ignore"):
        d = inputs.astype(np.float64)
        erf = np.frompyfunc(lambda v: math.erf(v) if v == v else v, 1, 1)
        exact = 0.5 * d * (1 + erf(d / math.sqrt(2)).astype(np.float64))
        fin = np.isfinite(exact) & np.isfinite(o)
        bound = np.abs(d[fin]) * 2.0**-23 + 2 * np.spacing(np.abs(exact[fin]).astype(np.float32))
    for k, path in enumerate(("o2e_gelu_erff", "o2e_act_vm_n_")):
        g = got[k]
        assert np.array_equal(np.isnan(g), np.isnan(o)), (
            f"{arch} {path}: NaN where onnxruntime's is not"
        )
        assert np.array_equal(g[np.isinf(o)], o[np.isinf(o)]), f"{arch} {path}: Inf"
        zero = fin & (exact == 0)
        assert np.array_equal(np.signbit(g[zero]), np.signbit(o[zero])), f"{arch} {path}: sign of 0"
        ratio = np.abs(g[fin].astype(np.float64) - exact[fin]) / bound
        i = int(np.argmax(ratio))
        assert ratio[i] <= 1, f"{arch} {path}: {ratio[i]:.2f} x the bound at x = {inputs[fin][i]!r}"
        err = np.abs(g[fin].astype(np.float64) - o[fin])
        assert (err <= 1e-6 + 1e-4 * np.abs(o[fin])).all(), f"{arch} {path}: off onnxruntime"


VEC_TARGETS = {  # compile only: which loops gcc vectorises does not depend on the host CPU
    "x86-64-v2": ("gcc", "-march=x86-64-v2"),
    "x86-64-v3": ("gcc", "-march=x86-64-v3"),
    "x86-64-v4": ("gcc", "-march=x86-64-v4"),
    "aarch64": ("aarch64-linux-gnu-gcc", "-march=armv8-a"),
}


@pytest.mark.parametrize("target", list(VEC_TARGETS))
def test_vmath_loops_vectorise(tmp_path: Path, target: str) -> None:
    """Each function's loop becomes SIMD code (SSE / AVX2 / AVX-512 / NEON): the point of the
    header; a change that leaves a branch gcc cannot if-convert would silently go scalar."""
    cc, march = VEC_TARGETS[target]
    if shutil.which(cc) is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"needs {cc} on an x86-64 host (the -march names are x86-64 levels)")
    src = tmp_path / "vmath.c"
    src.write_text(HARNESS)
    cmd = [cc, "-O3", march, "-ffp-contract=fast", f"-I{RUNTIME}", "-c", str(src)]
    r = subprocess.run(
        [*cmd, "-o", str(tmp_path / "v.o"), "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    apply_lines = [i + 1 for i, ln in enumerate(HARNESS.splitlines()) if ln.startswith("APPLY(f_")]
    done = {int(m) for m in re.findall(r"vmath\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    missing = [FUNCS[k] for k, ln in enumerate(apply_lines) if ln not in done]
    assert not missing, f"{target}: scalar loops for {missing}\n{r.stderr}"


# ---- models: the functions inside the ops and fused epilogues, against onnxruntime ----------
def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _silu(nodes: list, x: str, name: str) -> str:
    """SiLU as torch exports nn.SiLU: Mul(x, Sigmoid(x))."""
    nodes.append(helper.make_node("Sigmoid", [x], [f"{name}_s"]))
    nodes.append(helper.make_node("Mul", [x, f"{name}_s"], [name]))
    return name


def efficientnet_block() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MBConv: 1x1 expand + SiLU, 3x3 depthwise + SiLU, squeeze-and-excitation (pool, FC, SiLU,
    FC, Sigmoid gate), 1x1 project, and a HardSwish / Mish / Softplus / Tanh tail."""
    rng = np.random.default_rng(1)
    C, E, H = 8, 24, 9
    inits = {
        "w1": _w(rng, E, C, 1, 1), "b1": _w(rng, E),
        "wd": _w(rng, E, 1, 3, 3), "bd": _w(rng, E),
        "ws1": _w(rng, 6, E, 1, 1), "bs1": _w(rng, 6),
        "ws2": _w(rng, E, 6, 1, 1), "bs2": _w(rng, E),
        "wp": _w(rng, C, E, 1, 1), "bp": _w(rng, C),
    }  # fmt: skip
    n: list = [helper.make_node("Conv", ["x", "w1", "b1"], ["e"])]
    _silu(n, "e", "ea")
    n.append(helper.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=E, pads=[1] * 4))
    _silu(n, "d", "da")
    n.append(helper.make_node("GlobalAveragePool", ["da"], ["sq"]))
    n.append(helper.make_node("Conv", ["sq", "ws1", "bs1"], ["s1"]))
    _silu(n, "s1", "s1a")
    n.append(helper.make_node("Conv", ["s1a", "ws2", "bs2"], ["s2"]))
    n.append(helper.make_node("Sigmoid", ["s2"], ["gate"]))
    n.append(helper.make_node("Mul", ["da", "gate"], ["se"]))
    n.append(helper.make_node("Conv", ["se", "wp", "bp"], ["p"]))
    n.append(helper.make_node("HardSwish", ["p"], ["y_hswish"]))
    for op in ("Mish", "Softplus", "Tanh"):
        n.append(helper.make_node(op, ["p"], [f"y_{op.lower()}"]))
    outs = [vi(f"y_{k}", [1, C, H, H]) for k in ("hswish", "mish", "softplus", "tanh")]
    m = make_model(n, [vi("x", [1, C, H, H])], outs, [tensor(k, v) for k, v in inits.items()], 18)
    x = rng.standard_normal((1, C, H, H)).astype(np.float32) * 3
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[0, 1, 4, 4] = 90.0  # exp overflow inside the sigmoids
    x[0, 2, 8, 8] = -110.0
    return m, {"x": x}


def gelu_mlp() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A transformer MLP: MatMul + Add + GELU (erf, as torch exports it: Div, Erf, Add, Mul,
    Mul), MatMul + Add + Gelu (tanh form, opset 20), LayerNormalization; Exp / Log / Erf /
    Sigmoid / SiLU on the input."""
    rng = np.random.default_rng(2)
    D, F, T = 16, 32, 7
    inits = {"w1": _w(rng, F, D).T.copy(), "b1": _w(rng, F), "w2": _w(rng, D, F).T.copy()}
    inits["b2"] = _w(rng, D)
    inits.update(
        sq2=np.array(np.sqrt(2), np.float32), one=np.array(1, np.float32),
        half=np.array(0.5, np.float32), g=np.ones(D, np.float32), be=np.zeros(D, np.float32),
    )  # fmt: skip
    n = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h"]),
        helper.make_node("Div", ["h", "sq2"], ["hd"]),
        helper.make_node("Erf", ["hd"], ["he"]),
        helper.make_node("Add", ["he", "one"], ["h1"]),
        helper.make_node("Mul", ["h", "h1"], ["h2"]),
        helper.make_node("Mul", ["h2", "half"], ["ga"]),
        helper.make_node("MatMul", ["ga", "w2"], ["o0"]),
        helper.make_node("Add", ["o0", "b2"], ["o"]),
        helper.make_node("Gelu", ["o"], ["y_gelu_tanh"], approximate="tanh"),
        helper.make_node("Gelu", ["o"], ["y_gelu"]),
        helper.make_node("LayerNormalization", ["o", "g", "be"], ["y_ln"], axis=-1),
        helper.make_node("Exp", ["x"], ["y_exp"]),
        helper.make_node("Log", ["x"], ["y_log"]),
        helper.make_node("Erf", ["x"], ["y_erf"]),
        helper.make_node("Sigmoid", ["x"], ["y_sigmoid"]),
        helper.make_node("Sigmoid", ["x"], ["xs"]),  # SiLU of a graph input: no producer to
        helper.make_node("Mul", ["xs", "x"], ["y_silu"]),  # fuse into, two vectorised passes
    ]
    names = ("y_gelu_tanh", "y_gelu", "y_ln", "y_exp", "y_log", "y_erf", "y_sigmoid", "y_silu")
    outs = [vi(k, [T, D]) for k in names]
    m = make_model(n, [vi("x", [T, D])], outs, [tensor(k, v) for k, v in inits.items()], 20)
    x = (rng.standard_normal((T, D)) * 4).astype(np.float32)
    x[0, :8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -104.0, 1e-40]
    return m, {"x": x}


def attention_block() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Single-head attention over the last axis: softmax(Q K^T / sqrt(d)) V, LogSoftmax too."""
    rng = np.random.default_rng(3)
    T, D = 12, 8
    inits = {k: _w(rng, D, D) for k in ("wq", "wk", "wv")} | {
        "scale": np.array(1 / np.sqrt(D), np.float32)
    }
    n = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y_att"]),
        helper.make_node("LogSoftmax", ["s"], ["y_logp"], axis=-1),
        helper.make_node("Softmax", ["x"], ["y_sm_x"], axis=-1),
    ]
    outs = [vi("y_att", [T, D]), vi("y_logp", [T, T]), vi("y_sm_x", [T, D])]
    m = make_model(n, [vi("x", [T, D])], outs, [tensor(k, v) for k, v in inits.items()], 18)
    x = (rng.standard_normal((T, D)) * 3).astype(np.float32)
    x[1, 2], x[2, :] = np.nan, [np.inf, 1, 2, 3, -np.inf, 0, 0, 0]
    x[3, :] = [100, -100, 88, 87, -200, 0, 1, 2]  # large spreads: exp of -300 underflows to 0
    return m, {"x": x}


MODELS = {"eff": efficientnet_block, "mlp": gelu_mlp, "att": attention_block}


def all_blocks() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The three blocks side by side in one graph (names prefixed): one build per ISA."""
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    for name, build in MODELS.items():
        model, f = build()
        g = onnx.compose.add_prefix(model, f"{name}_").graph
        nodes += g.node
        ins += g.input
        outs += g.output
        inits += g.initializer
        feeds.update({f"{name}_{k}": v for k, v in f.items()})
    return make_model(nodes, ins, outs, inits, 20), feeds


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """The converted folder (the C does not depend on the ISA), the feeds, onnxruntime's."""
    tmp = tmp_path_factory.mktemp("vmath_blocks")
    model, feeds = all_blocks()
    path = save(model, tmp / "blocks.onnx")
    res = api.convert(path, "c", tmp / "out")
    src = (tmp / "out" / "model.c").read_text()
    assert "o2e_vmath.h" in res.stats["runtime_files"]
    assert not re.search(r"\b(expf|erff|tanhf|log1pf|logf)\(", src)  # no libm call left
    # the three SiLUs of the MBConv block fused into their convolutions
    assert src.count("activation=Swish,") == 3 and ": Sigmoid(eff_ea" not in src
    ref = ort_run(onnx.load(path), feeds)
    # the checks are not vacuous: NaN comes out of every block, Inf out of some
    for name in MODELS:
        assert any(np.isnan(v).any() for k, v in ref.items() if k.startswith(f"{name}_")), name
    assert any(np.isinf(v).any() for v in ref.values())
    return tmp / "out", feeds, ref


@pytest.mark.parametrize("arch", ALL_ISAS)
def test_models_vs_onnxruntime(arch: str, blocks: tuple[Path, dict, dict]) -> None:
    """An EfficientNet MBConv block (SiLU, squeeze-and-excitation, HardSwish, Mish, Softplus,
    Tanh), a GELU MLP (erf as torch exports it, tanh Gelu, LayerNormalization, Exp / Log /
    Erf) and an attention block (Softmax, LogSoftmax), NaN / Inf / overflowing inputs included,
    at every ISA: NaN where onnxruntime has NaN, the same infinities, else verify's tolerance."""
    from onnx2edge.verify import compare

    out, feeds, ref = blocks
    got = api.run(out, feeds, options={"arch": arch})
    bad = [
        (r.name, r.max_abs, r.max_rel)
        for k in ref
        if not (r := compare(k, got[k], ref[k], 1e-4, 1e-6)).ok
    ]
    assert not bad, bad


def test_model_loops_vectorise(tmp_path: Path, blocks: tuple[Path, dict, dict]) -> None:
    """In the generated model.c (after writer.py's pragma), every loop that calls an o2e_vmath
    function is vectorised at x86-64-v3 (compile only) - but LogSoftmax's sum of exponentials,
    a double reduction gcc keeps in order."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the -march names are x86-64 levels")
    out = blocks[0]
    cmd = ["gcc", "-O3", "-march=x86-64-v3", "-ffp-contract=fast", f"-I{out}", "-c"]
    r = subprocess.run(
        [*cmd, str(out / "model.c"), "-o", str(tmp_path / "m.o"), "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    done = {int(m) for m in re.findall(r"model\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    lines = (out / "model.c").read_text().splitlines()
    calls = [
        i + 1
        for i, ln in enumerate(lines)
        if re.search(r"\bo2e_(?:exp|log|log1p|tanh|sigmoid|erf)f\(", ln) and "sum +=" not in ln
    ]
    assert len(calls) >= 10
    scalar = [(n, lines[n - 1].strip()[:100]) for n in calls if not {n, n - 1} & done]
    assert not scalar, scalar
