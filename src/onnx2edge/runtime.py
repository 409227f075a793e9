"""onnxruntime as the reference: sessions, seeded inputs, input files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from .errors import Onnx2EdgeError
from .host import cpu_flags
from .ir import Graph


def ort_session(model: onnx.ModelProto, *, threads: int = 1, optimize: bool = True):  # noqa: ANN201
    import onnxruntime as ort

    def options(precise: bool):  # noqa: ANN202
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if precise:
            # Without VNNI (AVX2, AVX-512F-only CPUs) onnxruntime's u8 x s8 integer products use
            # vpmaddubsw, which saturates pairs of products to int16: a reference wrong by up to
            # 1e-2 relative on quantized models, different from one x86 host to the next. This
            # option (kOrtSessionOptionsAvx2PrecisionMode) shifts constant s8 weights to u8
            # first: exact on every CPU, no effect elsewhere. (Non-constant s8 operands stay
            # exposed: `ort_integer_products_exact`.)
            so.add_session_config_entry("session.x64quantprecision", "1")
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return so

    model = _loadable_by_ort(model)
    try:
        try:
            return ort.InferenceSession(
                model.SerializeToString(), options(True), providers=["CPUExecutionProvider"]
            )
        except Exception:  # noqa: BLE001
            # onnxruntime 1.31's s8 -> u8 weight rewrite fails on a weight two nodes share
            # ("Attempt to replace the existing tensor"): load without it
            return ort.InferenceSession(
                model.SerializeToString(), options(False), providers=["CPUExecutionProvider"]
            )
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Onnx2EdgeError(f"onnxruntime cannot load the model: {first}") from e


def _loadable_by_ort(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its IR version clamped to what onnxruntime loads (onnx 1.23 writes 14,
    onnxruntime 1.31 refuses above 13; the IR versions differ in file-format features this
    tool never writes). Returns the model itself when nothing needs changing."""
    from .ir.proto import MAX_IR_VERSION

    if model.ir_version <= MAX_IR_VERSION:
        return model
    clamped = onnx.ModelProto()
    clamped.CopyFrom(model)
    clamped.ir_version = MAX_IR_VERSION
    return clamped


def ort_integer_products_exact() -> bool:
    """False on x86 CPUs whose onnxruntime u8 x s8 products saturate for int8 operands that are
    not constant weights (MatMulInteger / ConvInteger on two inputs): AVX2 without AVX-512 VNNI
    or AVX-VNNI. Measured under qemu-x86_64 (255 x 127 summed over 64): Haswell and Skylake give
    1048544 instead of 2072640; Nehalem (SSE4.2), Westmere and SandyBridge (AVX) are exact."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return True
    # onnxruntime picks its kernels from CPUID, so that is what decides, not /proc/cpuinfo: the
    # two differ under an emulated CPU (qemu-x86_64 -cpu Haswell, tests/test_emulated_cpu.py) or
    # a masked one (bench --ort-isa match). numpy reads CPUID the same way; it has no AVX-VNNI
    # (VEX) bit, so that one comes from /proc/cpuinfo, trusted only where both agree on AVX-512.
    from numpy._core._multiarray_umath import __cpu_features__ as cpuid

    if cpuid.get("AVX512VNNI"):
        return True
    flags = cpu_flags()
    if (
        "avx_vnni" in flags
        and cpuid.get("AVX2")
        and (bool(cpuid.get("AVX512F")) == ("avx512f" in flags))
    ):
        return True
    return not cpuid.get("AVX2")


def ort_run(
    model: onnx.ModelProto,
    inputs: Mapping[str, np.ndarray],
    outputs: Sequence[str] | None = None,
    *,
    optimize: bool = True,
) -> dict[str, np.ndarray]:
    sess = ort_session(model, optimize=optimize)
    names = list(outputs) if outputs is not None else [o.name for o in sess.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs() if i.name in inputs}
    try:
        res = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001
        raise Onnx2EdgeError(
            f"onnxruntime failed to run the model: {str(e).splitlines()[0]}"
        ) from e
    return dict(zip(names, (np.asarray(r) for r in res), strict=True))


def memory_budget() -> int:
    """Bytes one verification may allocate for its inputs: half of the machine's RAM (the
    reference run and ours each need the inputs, outputs and intermediates besides)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def check_allocatable(name: str, shape: Sequence[int], dtype: np.dtype, peak: int = 1) -> None:
    """Refuse, with its size, a tensor this machine cannot hold instead of a MemoryError.

    `peak` is how many bytes per byte of the tensor making it takes at its peak."""
    size = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    budget = memory_budget()
    if size * peak > budget:
        dims = "x".join(map(str, shape))
        raise Onnx2EdgeError(
            f"input '{name}' ({dims} {np.dtype(dtype).name}) is {size / 2**30:.1f} GiB, more "
            f"than this machine can hold for a run ({budget / 2**30:.1f} GiB); "
            f"pass a smaller --input-shape {name}=..."
        )


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs: N(0,1) floats, small non-negative integers (valid as indices), random bools."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.type_of(name)
        if t is None or not t.is_static:
            raise Onnx2EdgeError(
                f"input '{name}' has no static shape; pass --input-shape {name}=..."
            )
        shape, dtype = t.static_shape, t.dtype
        # standard_normal draws float64 before the cast: budget for that, not just the result.
        check_allocatable(
            name, shape, dtype, peak=1 + 8 // dtype.itemsize if dtype.kind == "f" else 1
        )
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 4, size=shape).astype(dtype)
        else:
            raise Onnx2EdgeError(
                f"input '{name}' has dtype {dtype}; pass it with --input {name}=FILE.npy"
            )
    return feeds


def parse_input_files(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """`NAME=FILE.npy` items -> arrays."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise Onnx2EdgeError(f"bad --input '{spec}': expected NAME=FILE.npy")
        path = Path(file)
        if not path.is_file():
            raise Onnx2EdgeError(f"--input {name}: no such file '{file}'")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise Onnx2EdgeError(f"--input {name}: cannot read '{file}' as .npy: {e}") from None
    return out


def complete_inputs(
    graph: Graph, given: Mapping[str, np.ndarray], seed: int = 0
) -> dict[str, np.ndarray]:
    """Check user inputs against the graph; fill the missing ones with seeded random data."""
    for name in given:
        if name not in graph.inputs:
            raise Onnx2EdgeError(
                f"--input names '{name}', which is not an input of the model (inputs: {', '.join(graph.inputs)})"
            )
    feeds = random_inputs(
        graph.replace(inputs=tuple(n for n in graph.inputs if n not in given)), seed
    )
    for name, arr in given.items():
        t = graph.type_of(name)
        assert t is not None
        if t.is_static and tuple(arr.shape) != t.static_shape:
            raise Onnx2EdgeError(
                f"--input {name}: array shape {'x'.join(map(str, arr.shape))} does not match the model's "
                f"{'x'.join(map(str, t.static_shape))} (use --input-shape to change the model's)"
            )
        if arr.dtype != t.dtype:
            if not np.can_cast(arr.dtype, t.dtype, casting="same_kind"):
                raise Onnx2EdgeError(
                    f"--input {name}: dtype {arr.dtype} cannot be used for {t.dtype}"
                )
            arr = arr.astype(t.dtype)
        feeds[name] = arr
    return {n: feeds[n] for n in graph.inputs}
