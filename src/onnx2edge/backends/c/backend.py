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
from ..refusal import Refusal
from . import widen as _widen  # noqa: F401  (registers the widen_small_floats pass)
from .build import DEBUG_FLAGS, arch_flags, arch_of, build_and_run, cached_shared, is_emulated
from .device import DEVICES, MAX_THREADS, MAX_THREADS_LIMIT, device
from .emitter import STORAGES
from .footprint import MODES as FOOTPRINT_MODES
from .footprint import footprint
from .phases import refusals
from .quantized_io import quantized_io_of
from .readme import readme
from .writer import check_name, default_name, write_model, write_support_files

# convert --io: float, or a quantized model's own 8-bit type at its ends (quantized_io.py)
IO_TYPES = ("float", "int8", "uint8")
# convert --optimize: speed = every specialised kernel; size = weights at about their ONNX size
OPTIMIZE = ("speed", "size")


def kernel_settings() -> dict[str, tuple[str, ...]]:
    """Strategy name -> the values `--kernels NAME=VALUE` takes (the STRATEGIES lists of
    ops/conv.py, ops/matmul.py, ops/pool.py and ops/quant.py; a name in two lists, `sparse`, is
    one switch with one setting list)."""
    # imported here, not at the top: the kernel modules load when a conversion starts, not
    # with every `onnx2edge` command (no circle: ops never import this module)
    from .ops import conv as conv_ops  # noqa: PLC0415
    from .ops import matmul as matmul_ops  # noqa: PLC0415
    from .ops import pool as pool_ops  # noqa: PLC0415
    from .ops import quant as quant_ops  # noqa: PLC0415

    out: dict[str, tuple[str, ...]] = {}
    lists = (conv_ops.STRATEGIES, matmul_ops.STRATEGIES, pool_ops.STRATEGIES)
    lists += (pool_ops.GLOBAL_STRATEGIES, quant_ops.QCONV_STRATEGIES)
    for s in (x for strategies in lists for x in strategies):
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
    run_options = (*Backend.run_options, "source")
    aliases = {("fp16", True): ("weights", "fp16"), ("fp16", False): ("weights", "fp32")}
    options = (
        BackendOption(
            "name",
            "C identifier prefixing every exported symbol and macro (NAME_init, "
            "NAME_INPUT_0_SIZE) and naming NAME.h (default: the model file's name)",
            metavar="NAME",
        ),
        BackendOption(
            "weights_storage",
            "inline: const arrays (read-only data, never copied); file: model_weights.bin "
            "loaded by NAME_init into a static buffer; external: NAME_init_with_weights(blob, "
            "len) reads the caller's copy in place (default: inline up to 4 MB, else file)",
            choices=STORAGES,
            metavar="{inline,file,external}",
        ),
        BackendOption(
            "io",
            "int8 / uint8: a quantized model's inputs and outputs stay quantized (scale and "
            "zero point in NAME.h and the manifest), skipping the float round trip",
            choices=IO_TYPES,
            default="float",
            record_default=False,
        ),
        BackendOption(
            "weights_file", "weights in model_weights.bin (= --weights-storage file)", switch=True
        ),
        BackendOption(
            "weights",
            "store weights as fp16 (half the size; each layer widens its own into arena scratch "
            "as it runs: no float32 copy)",
            choices=("fp32", "fp16"),
            default="fp32",
            record_default=False,
        ),
        BackendOption(
            "footprint",
            "measure: flash/RAM from the compiled model.c's sections (size -A; needs gcc); "
            "estimate: from the writer's counts, code not counted",
            choices=FOOTPRINT_MODES,
            default="measure",
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
            "the build the arena is planned for: generic (every instruction set, up to "
            f"{MAX_THREADS} threads) or a microcontroller, cortex-m4|cortex-m7|cortex-m33|cortex-m55 (the "
            "portable kernels on one thread; other builds refused with #error)",
            choices=tuple(DEVICES),
            default="generic",
            record_default=False,
        ),
        BackendOption(
            "max_threads",
            "threads the arena's per-thread workspaces are sized for: NAME_set_threads(ctx, n) "
            f"chooses 1 .. N at run time in a build with the pool (-DO2E_THREADS=m); default "
            f"{MAX_THREADS}, at most {MAX_THREADS_LIMIT}",
            default=MAX_THREADS,
            metavar="N",
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
        if out.get("name"):  # refused before the model is read
            out["name"] = check_name(str(out["name"]))
        out["max_threads"] = _max_threads(out.get("max_threads", MAX_THREADS))
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
        "fuse_attention",  # MatMul, scale, mask, Softmax, MatMul: one op (o2e_attention.h)
        "channel_norm",  # ConvNeXt's channels-last LayerNorm + MLP on NCHW: 1x1 convs
        "pool_before_pointwise",  # 1x1 Conv -> AveragePool: the conv on the pooled map
        "fuse_residual",
        "fuse_matmul_bias",  # MatMul + bias Add: one GEMM with the bias in its epilogue
        "fuse_activation",
        "fuse_softmax_scale",  # attention's 1/sqrt(d) Mul folded into its Softmax
        "qdq_to_int8",
        "eliminate_dead_nodes",
    )

    def passes_for(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        quantized = options.get("io", "float") != "float"
        return (*self.required_passes, *(("quantized_io",) if quantized else ()))

    @property
    def supported_ops(self) -> frozenset[tuple[str, str]]:
        from .ops import load_all

        return frozenset(
            tuple(k.split(":", 1)) if ":" in k else ("", k)  # type: ignore[misc]
            for k in load_all()
        )

    def check(self, graph: Graph, options: Mapping[str, Any] | None = None) -> list[Refusal]:
        return refusals(graph)  # the checks alone: no emitter built

    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        wf = options.get("weights_file")
        wdt = options.get("weights", "fp32")
        if wdt not in ("fp32", "fp16"):
            raise Onnx2EdgeError(f"--weights {wdt}: expected fp32 or fp16")
        storage = options.get("weights_storage")
        if storage is not None and wf and storage != "file":
            raise Onnx2EdgeError(f"--weights-file contradicts --weights-storage {storage}")
        name = (
            check_name(str(options["name"]))
            if options.get("name")
            else default_name(options.get("model_file"))
        )
        _check_io(graph, str(options.get("io", "float")))
        optimize = str(options.get("optimize", "speed"))
        if optimize not in OPTIMIZE:
            raise Onnx2EdgeError(
                f"--optimize must be one of {', '.join(OPTIMIZE)}, not {optimize!r}"
            )
        stats = write_model(
            graph,
            out_dir,
            prefix=name,
            file_stem="model",
            weights_file=True if wf else None,
            weights_storage=str(storage) if storage else None,
            source_name=str(options.get("source", graph.name)),
            weights_fp16=wdt == "fp16",
            optimize=optimize,
            kernel_options=_traceable(parse_kernels(options.get("kernels")), options),
            device=device(options.get("device")),
            max_threads=_max_threads(options.get("max_threads", MAX_THREADS)),
        )
        blob = (out_dir / "model_weights.bin").stat().st_size if stats["weights_in_file"] else 0
        files = [
            "model.c",
            f"{name}.h",
            *stats["runtime_files"],
            *write_support_files(
                graph, out_dir, name, storage=stats["weights_storage"], blob_bytes=blob
            ),
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
        stats["footprint"] = footprint(out_dir, stats, str(options.get("footprint", "measure")))
        io = [[_io_spec(graph, n) for n in names] for names in (graph.inputs, graph.outputs)]
        (out_dir / "README.md").write_text(
            readme(
                name=name,
                source=str(options.get("model_file") or options.get("source", graph.name)),
                stats=stats,
                inputs=io[0],
                outputs=io[1],
                max_threads=int(stats["max_threads"]),
            )
        )
        files.append("README.md")
        return ConvertResult(out_dir, files, stats)

    def describe_run(self, out_dir: Path, options: Mapping[str, Any]) -> str:
        import platform

        from ...host import cpu_name
        from .build import compiler

        arch = arch_of(options)
        cc = Path(compiler(arch)).name
        if is_emulated(arch):
            return (
                f"the generated C built by {cc} for {arch}, run under qemu-{arch} emulation "
                f"on this {platform.machine()} host (correctness only)"
            )
        flags = options.get("cflags", DEBUG_FLAGS) if arch is None else arch_flags(str(arch))
        return (
            f"the generated C compiled by {cc} {' '.join(flags)} and run natively on this host "
            f"({platform.machine()}, {cpu_name()})"
        )

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
        return run_library(
            lib_path,
            c_name(manifest),
            io,
            inputs,
            out_dir / "model_weights.bin",
            per_layer,
            external=manifest.get("stats", {}).get("weights_storage") == "external",
        )


def _max_threads(value: Any) -> int:
    """--max-threads: a whole number 1 .. MAX_THREADS_LIMIT."""
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_THREADS_LIMIT:
        raise Onnx2EdgeError(
            f"--max-threads {value}: expected a whole number from 1 to {MAX_THREADS_LIMIT}"
        )
    return n


def _check_io(graph: Graph, io: str) -> None:
    """--io int8|uint8 needs a quantized end to expose, of that type."""
    if io == "float":
        return
    if io not in IO_TYPES:
        raise Onnx2EdgeError(f"--io {io}: expected one of {', '.join(IO_TYPES)}")
    exposed = quantized_io_of(graph)
    if not exposed:
        raise Onnx2EdgeError(
            f"--io {io}: no input read by a QuantizeLinear, nor output made by a "
            "DequantizeLinear, with a constant per-tensor scale and zero point"
        )
    for name in exposed:
        t = graph.type_of(name)
        if t is not None and t.dtype.name != io:
            raise Onnx2EdgeError(f"--io {io}: '{name}' is quantized as {t.dtype.name}")


def _io_spec(graph: Graph, name: str) -> dict[str, Any]:
    t = graph.type_of(name)
    assert t is not None and t.is_static
    spec: dict[str, Any] = {"name": name, "shape": list(t.static_shape), "dtype": t.dtype.name}
    if name in (quant := quantized_io_of(graph)):
        spec["quantization"] = quant[name]
    return spec


def c_name(manifest: Mapping[str, Any]) -> str:
    """The symbol prefix of a converted folder (`model` for folders converted before --name)."""
    return str(manifest.get("stats", {}).get("name", "model"))


def run_library(
    lib_path: Path,
    prefix: str,
    io: Mapping[str, Any],
    inputs: Mapping[str, np.ndarray],
    weights_path: Path | None = None,
    per_layer: bool = False,
    external: bool = False,
) -> dict[str, np.ndarray]:
    """Call `<prefix>_init` (or, for external weights, `<prefix>_init_with_weights` on the
    file's bytes in a 64-byte aligned buffer) and `<prefix>_run` of a built library."""
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
    if external:
        if weights_path is None or not weights_path.is_file():
            raise Onnx2EdgeError(f"{prefix}: external weights, but no {weights_path}")
        raw = np.fromfile(weights_path, dtype=np.uint8)
        blob = np.zeros(raw.size + 64, np.uint8)
        start = -blob.ctypes.data % 64
        blob[start : start + raw.size] = raw
        keep.append(blob)  # the library reads it in place while it runs
        init_ext = getattr(lib, f"{prefix}_init_with_weights")
        init_ext.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        rc = init_ext(blob.ctypes.data + start, raw.size)
    else:
        init = getattr(lib, f"{prefix}_init")
        init.argtypes = [ctypes.c_char_p]
        rc = init(
            str(weights_path).encode()
            if weights_path is not None and weights_path.is_file()
            else None
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
