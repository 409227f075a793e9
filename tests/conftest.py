from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT_DIR.glob("*.onnx"))


def save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = min(model.ir_version, 8) if model.ir_version else 8
    path.write_bytes(model.SerializeToString())
    return path


def make_model(nodes, inputs, outputs, inits=(), opset: int = 17, **kw) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(inits), **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:  # noqa: ANN001
    return helper.make_tensor_value_info(name, elem, shape)


def erf_gelu(x: str, y: str, tag: str) -> list[onnx.NodeProto]:
    """y = x * (1 + erf(x / sqrt2)) * half, the pattern torch exports for nn.GELU(); the model
    supplies the constants "sqrt2", "one" and "half". `tag` names the intermediates."""
    return [
        helper.make_node("Div", [x, "sqrt2"], [f"{tag}_d"]),
        helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"]),
        helper.make_node("Add", [f"{tag}_e", "one"], [f"{tag}_a"]),
        helper.make_node("Mul", [x, f"{tag}_a"], [f"{tag}_m"]),
        helper.make_node("Mul", [f"{tag}_m", "half"], [y]),
    ]


def tensor(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def check_golden(golden: Path, data: bytes) -> None:
    """`data` must equal the committed file `golden` byte for byte (tests/golden/).

    With ONNX2EDGE_UPDATE_GOLDEN=1 the file is rewritten instead: review its diff like code.
    """
    if os.environ.get("ONNX2EDGE_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(data)
    assert golden.is_file(), f"missing golden file {golden}; run with ONNX2EDGE_UPDATE_GOLDEN=1"
    assert data == golden.read_bytes(), (
        f"{golden.name} differs from {golden}; if intended, rerun with ONNX2EDGE_UPDATE_GOLDEN=1"
    )


@pytest.fixture
def example() -> Path:
    return EXAMPLE


@pytest.fixture(autouse=True)
def _keep_env() -> None:
    # Tests must never change the BLAS core type the machine is configured with.
    before = os.environ.get("OPENBLAS_CORETYPE")
    yield
    assert os.environ.get("OPENBLAS_CORETYPE") == before


# C build flags shared by the backend tests: the release flags (native kernels), the same with
# the thread pool, and ASan + UBSan (portable kernels; SANITIZE_NATIVE for the native ones)
NATIVE = ["-O3", "-march=native", "-ffp-contract=fast"]
THREADED = [*NATIVE, "-DO2E_THREADS=2", "-pthread"]
# the AVX2 + FMA kernels, whatever this host has (x86-64-v3 = AVX2, FMA, no AVX-512)
AVX2 = ["-O3", "-march=x86-64-v3", "-ffp-contract=fast"]
ASAN = [
    "-O1",
    "-g",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]
SANITIZE_NATIVE = [
    "-O1",
    "-g",
    "-march=native",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]


def assert_sanitized_run_matches_ort(
    path: Path, out: Path, seed: int = 3, options: dict | None = None
) -> None:
    """Convert `path`, build it as an ASan + UBSan executable with the native (AVX-512 / AVX2)
    kernels, run it on seeded random inputs and compare with onnxruntime (rtol 1e-4)."""
    import json

    from onnx2edge import api
    from onnx2edge.backends.c.build import build_executable, run_executable
    from onnx2edge.runtime import ort_run

    api.convert(path, "c", out, options=options)
    io = json.loads((out / "onnx2edge.json").read_text())
    exe = build_executable(out, SANITIZE_NATIVE, name="asan")
    x = {
        s["name"]: np.random.default_rng(seed).standard_normal(s["shape"]).astype(np.float32)
        for s in io["inputs"]
    }
    got = run_executable(exe, io, x, out)
    ref = ort_run(onnx.load(path), x)
    for k, v in got.items():
        assert np.abs(v - ref[k]).max() <= 1e-4 * np.abs(ref[k]).max() + 1e-6, k


# Instruction sets the C backend is tested at (issue 9), whatever CPU CI lands on: no AVX
# (x86-64-v2), AVX2 + FMA (x86-64-v3), the host's own (AVX-512 where present) and aarch64
# (NEON) cross-compiled and run under qemu-aarch64 for a small subset (emulation is slow).
# `arch_param` skips, with the reason, where the host cannot build or run that code.
X86_ARCHES = ["x86-64-v2", "x86-64-v3", "native"]
AARCH64 = "aarch64"


def arch_unavailable(arch: str) -> str | None:
    """Why this host cannot test `arch` (missing toolchain, CPU without the ISA), or None."""
    from onnx2edge.backends.c.build import arch_flags
    from onnx2edge.errors import Onnx2EdgeError

    try:
        arch_flags(arch)
    except Onnx2EdgeError as e:
        return str(e)
    return None


def arch_param(arch: str):  # noqa: ANN201 - a pytest ParameterSet
    why = arch_unavailable(arch)
    return pytest.param(arch, id=arch, marks=pytest.mark.skipif(why is not None, reason=why or ""))


X86_ISAS = [arch_param(a) for a in X86_ARCHES]
ALL_ISAS = [*X86_ISAS, arch_param(AARCH64)]


def build_and_run(out_dir: Path, arch: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Build a converted folder for `arch` (release flags, its -march) and run it, under qemu
    for aarch64: the one helper NEON / AVX2 kernel tests reuse."""
    from onnx2edge.backends.c.build import build_and_run as run

    return run(out_dir, arch, inputs)


def verify_at(path: Path, arch: str, inputs: dict[str, np.ndarray] | None = None, **kw):  # noqa: ANN003, ANN201
    """api.verify through the C target built for `arch`."""
    from onnx2edge import api

    return api.verify(path, target="c", inputs=inputs, options={"arch": arch}, **kw)


def _v3_distinct() -> bool:
    """An AVX2 build differs from NATIVE: the host has AVX-512 (an AVX2-only host covers AVX2
    with NATIVE; a host without AVX2 cannot run it)."""
    from onnx2edge.host import cpu_flags

    return arch_unavailable("x86-64-v3") is None and "avx512f" in cpu_flags()


# kernel tests' builds: portable (None: the default -O2), AVX2 + FMA where distinct, native
X86_V3 = AVX2  # x86-64-v3: AVX2 + FMA
ISA_CFLAGS = [None, *([X86_V3] if _v3_distinct() else []), NATIVE]
