"""The C backend: plain C99 with the weights inside (seed 001, Caffe2C), verified by ctypes."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Onnx2EdgeError
from ...ir import Graph
from ..base import Backend, BackendOption, ConvertResult, read_manifest, register_backend
from . import widen as _widen  # noqa: F401  (registers the widen_small_floats pass)
from .build import DEBUG_FLAGS, arch_flags, arch_of, build_and_run, cached_shared, is_emulated
from .device import DEVICES, device
from .emitter import ModelEmitter
from .writer import write_model, write_support_files

# convert --optimize: speed = every specialised kernel; size = weights at about their ONNX size
OPTIMIZE = ("speed", "size")


def kernel_settings() -> dict[str, tuple[str, ...]]:
    """Strategy name -> the values `--kernels NAME=VALUE` takes (ops/conv.py and
    ops/matmul.py STRATEGIES; a name in both, `sparse`, is one switch with one setting list)."""
    # imported here, not at the top: the kernel modules load when a conversion starts, not
    # with every `onnx2edge` command (no circle: ops never import this module)
    from .ops import conv as conv_ops  # noqa: PLC0415
    from .ops import matmul as matmul_ops  # noqa: PLC0415

    out: dict[str, tuple[str, ...]] = {}
    for s in (*conv_ops.STRATEGIES, *matmul_ops.STRATEGIES):
        assert out.setdefault(s.name, s.settings) == s.settings, f"{s.name}: two setting lists"
    return out


def parse_kernels(value: str | Mapping[str, str] | None) -> dict[str, str]:
    """`--kernels winograd=off,lanes=off` (or the same as a mapping) -> {name: setting},
    checked against the strategies; "auto" entries dropped (that is the default)."""
    if value is None or isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in (value or {}).items()]
    else:
        pairs = []
        for item in filter(None, (i.strip() for i in str(value).split(","))):
            name, eq, setting = item.partition("=")
            if not eq or not name.strip() or not setting.strip():
                raise Onnx2EdgeError(f"--kernels {item!r}: expected NAME=SETTING, e.g. lanes=off")
            pairs.append((name.strip(), setting.strip()))
    known = kernel_settings()
    out: dict[str, str] = {}
    for name, setting in pairs:
        if name not in known:
            raise Onnx2EdgeError(
                f"--kernels {name}: unknown kernel strategy (one of {', '.join(sorted(known))})"
            )
        if setting not in known[name]:
            raise Onnx2EdgeError(
                f"--kernels {name}={setting}: expected one of {', '.join(known[name])}"
            )
        if setting != "auto":  # the default
            out[name] = setting
    return dict(sorted(out.items()))


def _traceable(kernels: dict[str, str], options: Mapping[str, Any]) -> dict[str, str]:
    """`verify --per-layer` compares every intermediate tensor with onnxruntime's NCHW ones:
    its build keeps them all NCHW (no channel-blocked chains, nchwc_plan.py)."""
    return {**kernels, "nchwc": "off"} if options.get("per_layer") else kernels


@register_backend
class CBackend(Backend):
    name = "c"
    label = "C"
    options = (
        BackendOption(
            "weights_file", "weights in model_weights.bin instead of C arrays", switch=True
        ),
        BackendOption(
            "weights",
            "store weights as fp16 (half the size; widened to fp32 by model_init)",
            choices=("fp32", "fp16"),
            default="fp32",
            record_default=False,
        ),
        BackendOption(
            "optimize",
            "speed (default) or size (weights at their ONNX size: no Winograd-transformed copies)",
            choices=OPTIMIZE,
            default="speed",
        ),
        BackendOption(
            "device",
            "the build the arena is planned for: generic (every instruction set, up to 4 "
            "threads) or a microcontroller, cortex-m4|cortex-m7|cortex-m33|cortex-m55 (the "
            "portable kernels on one thread; other builds refused with #error)",
            choices=tuple(DEVICES),
            default="generic",
            record_default=False,
        ),
        BackendOption(
            "kernels",
            "kernel strategies, comma-separated NAME=SETTING: NAME=off skips one (winograd, "
            "lanes, direct, depthwise, sparse, implicit_gemm, fc_skip_zeros, fc_gemv, ...), "
            "winograd=2|4 forces the tile, "
            "sparse=force takes every pruned layer (recorded in the manifest)",
            default="",
            record_default=False,
            metavar="NAME=SETTING,...",
        ),
    )

    def normalize_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(options)
        kernels = parse_kernels(out.pop("kernels", None))
        if kernels:  # canonical text: the manifest records it and `convert` reads it back
            out["kernels"] = ",".join(f"{k}={v}" for k, v in kernels.items())
        return out

    required_passes = (
        "fold_constants",
        "remove_identity",
        "fold_batchnorm",
        "bound_data_dependent",  # NonMaxSuppression, Unique: outputs sized by a bound
        "widen_small_floats",  # before the fusions: each widened op rounds its own result
        "fuse_residual",
        "fuse_activation",
        "qdq_to_int8",
        "eliminate_dead_nodes",
    )

    def unsupported(self, graph: Graph) -> list[str]:
        return ModelEmitter(graph).unsupported()

    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        wf = options.get("weights_file")
        wdt = options.get("weights", "fp32")
        if wdt not in ("fp32", "fp16"):
            raise Onnx2EdgeError(f"--weights {wdt}: expected fp32 or fp16")
        optimize = str(options.get("optimize", "speed"))
        if optimize not in OPTIMIZE:
            raise Onnx2EdgeError(
                f"--optimize must be one of {', '.join(OPTIMIZE)}, not {optimize!r}"
            )
        stats = write_model(
            graph,
            out_dir,
            weights_file=True if wf else None,
            source_name=str(options.get("source", graph.name)),
            weights_fp16=wdt == "fp16",
            optimize=optimize,
            kernel_options=_traceable(parse_kernels(options.get("kernels")), options),
            device=device(options.get("device")),
        )
        files = [
            "model.c",
            "model.h",
            *stats["runtime_files"],
            *write_support_files(graph, out_dir),
            "tensors.json",
        ]
        # dtype and shape of every traced tensor, for `verify --per-layer`
        tensors = {}
        for node in graph.nodes:
            for o in node.outputs:
                t = graph.type_of(o) if o else None
                if t is not None and t.is_static:
                    tensors[o] = [t.dtype.name, list(t.static_shape)]
        (out_dir / "tensors.json").write_text(json.dumps(tensors, indent=0, sort_keys=True))
        if stats["weights_in_file"]:
            files.append("model_weights.bin")
        return ConvertResult(out_dir, files, stats)

    def run(
        self, out_dir: Path, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        manifest = read_manifest(out_dir)
        per_layer = bool(options.get("per_layer"))
        arch = arch_of(options)
        if is_emulated(arch):
            # a foreign ISA cannot be loaded with ctypes: build the example program, run it
            # under emulation (build.build_and_run)
            if per_layer:
                raise Onnx2EdgeError(
                    f"--per-layer needs a library this host can load, not --arch {arch}"
                )
            return build_and_run(out_dir, str(arch), dict(inputs), options.get("cflags", ()))
        base = (
            options.get("cflags", DEBUG_FLAGS)
            if arch is None
            else [*arch_flags(arch), *options.get("cflags", ())]
        )
        flags = [*base, *(["-DO2E_TRACE_ENABLED"] if per_layer else [])]
        extra = [out_dir / f for f in manifest.get("stats", {}).get("runtime_files", [])]
        lib_path = cached_shared(out_dir, [out_dir / "model.c"], flags, hashed=extra)
        io = {**manifest, "tensors": json.loads((out_dir / "tensors.json").read_text())}
        return run_library(lib_path, "model", io, inputs, out_dir / "model_weights.bin", per_layer)


def run_library(
    lib_path: Path,
    prefix: str,
    io: Mapping[str, Any],
    inputs: Mapping[str, np.ndarray],
    weights_path: Path | None = None,
    per_layer: bool = False,
) -> dict[str, np.ndarray]:
    """Call `<prefix>_init` and `<prefix>_run` of a built library on numpy buffers."""
    lib = ctypes.CDLL(str(lib_path))
    trace: dict[str, np.ndarray] = {}
    keep: list[Any] = []
    if per_layer:
        cb_type = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)

        def on_trace(name: bytes, ptr: int, n: int) -> None:
            trace[name.decode()] = (
                np.ctypeslib.as_array((ctypes.c_ubyte * n).from_address(ptr)).copy()
                if n
                else np.zeros(0, np.uint8)
            )

        cb = cb_type(on_trace)
        keep.append(cb)
        getattr(lib, f"{prefix}_set_trace")(cb)
    init = getattr(lib, f"{prefix}_init")
    init.argtypes = [ctypes.c_char_p]
    rc = init(
        str(weights_path).encode() if weights_path is not None and weights_path.is_file() else None
    )
    if rc != 0:
        raise Onnx2EdgeError(
            f"{prefix}_init failed with code {rc} (weights file missing or corrupt?)"
        )
    in_arrays = [np.ascontiguousarray(inputs[s["name"]], dtype=s["dtype"]) for s in io["inputs"]]
    out_arrays = [np.zeros(s["shape"], dtype=s["dtype"]) for s in io["outputs"]]
    in_ptrs = (ctypes.c_void_p * max(len(in_arrays), 1))(*[a.ctypes.data for a in in_arrays])
    out_ptrs = (ctypes.c_void_p * max(len(out_arrays), 1))(*[a.ctypes.data for a in out_arrays])
    run = getattr(lib, f"{prefix}_run")
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if run(in_ptrs, out_ptrs) != 0:
        raise Onnx2EdgeError(f"{prefix}_run failed")
    result = {s["name"]: a for s, a in zip(io["outputs"], out_arrays, strict=True)}
    for i, s in enumerate(io["outputs"]):
        if s.get("bounded_axis") is not None:  # passes/bounded.py: the bound, partly filled
            count = getattr(lib, f"{prefix}_output_count")
            count.restype, count.argtypes = ctypes.c_int64, [ctypes.c_int]
            shape = list(s["shape"])
            shape[s["bounded_axis"]] = int(count(i))
            n = int(np.prod(shape, dtype=np.int64))
            result[s["name"]] = out_arrays[i].reshape(-1)[:n].reshape(shape)
    if per_layer:
        dtypes = {
            **{s["name"]: (s["dtype"], s["shape"]) for s in io["outputs"]},
            **io.get("tensors", {}),
        }
        for name, raw in trace.items():
            if name in result or name not in dtypes:
                continue
            dt, shape = dtypes[name]
            result[name] = raw.view(dt).reshape(shape)
    return result
