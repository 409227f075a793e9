"""IR -> model.c / model.h.

Layout of the generated model.c:
  includes and kernels (static helpers, only those some node uses)
  weights            static const arrays, or offsets into model_weights.bin
  arena              one static buffer; every intermediate tensor is an offset (planner.py)
  <p>_init()         loads model_weights.bin when weights live there
  <p>_run()          one block per ONNX node, in topological order, each commented with it

Shapes are all static at conversion time, so every loop bound is a constant.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import UnsupportedError
from ...ir import Graph, Node
from ...ir.graph import STRING_BYTES, STRING_DTYPE
from ...ir.proto import release_pages
from ...semantics.attrs import attr as semantic_attr
from ...semantics.fused import base_domain, base_op
from .device import GENERIC, MAX_THREADS, Device, build_guard
from .fp16 import fp16_storable
from .nchwc_plan import EMPTY, BlockedRole, LayoutPlan
from .ops import load_all
from .planner import Buffer

if TYPE_CHECKING:
    from .phases import Analyses

# the run-time If conditions a node runs under, outermost first: ((cond tensor, taken), ...)
# (passes/control_flow.runtime_if_guards, run by the if_guards phase)
Guard = tuple[tuple[str, bool], ...]

CTYPES: dict[str, str] = {
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "bool": "bool",
}
# Strings: fixed-capacity, NUL-terminated (ir.graph.STRING_BYTES); data movement copies the
# struct, the string ops (ops/strings.py) read `.s`. Other ops refuse them (STRING_OPS).
CTYPES[STRING_DTYPE.name] = "o2e_str"
STRING_OPS = frozenset(
    {
        "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
        "Gather", "Slice", "Split", "Expand", "Tile", "Equal", "StringConcat",
        "StringNormalizer", "StringSplit", "RegexFullMatch", "LabelEncoder",
    }
)  # fmt: skip
STRING_TYPEDEF = (
    "#ifndef O2E_STR_DEFINED\n#define O2E_STR_DEFINED\n"
    f"typedef struct {{ char s[{STRING_BYTES}]; }} o2e_str;  /* UTF-8, NUL-terminated */\n"
    "#endif"
)
# Types C has no arithmetic for, stored as their raw bits (numpy / ml_dtypes keep one element a
# byte for the 4- and 2-bit types, holding the low bits). Emitters convert them with the helpers
# of ops/dtypes.py; only ops listed in STORAGE_DTYPE_OPS (ops that know to) may see them.
STORAGE_CTYPES: dict[str, str] = {
    "float16": "uint16_t",
    "bfloat16": "uint16_t",
    "float8_e4m3fn": "uint8_t",
    "float8_e4m3fnuz": "uint8_t",
    "float8_e5m2": "uint8_t",
    "float8_e5m2fnuz": "uint8_t",
    "float8_e8m0fnu": "uint8_t",
    "float4_e2m1fn": "uint8_t",
    "int4": "uint8_t",
    "uint4": "uint8_t",
    "int2": "uint8_t",
    "uint2": "uint8_t",
}
STORAGE_DTYPE_OPS: set[str] = set()
INLINE_WEIGHT_LIMIT = 4 << 20  # bytes: above this, weights go to model_weights.bin by default
# convert --weights-storage: const arrays in the image / model_weights.bin read by init into a
# static buffer / model_weights.bin's bytes wherever the caller keeps them, read in place
STORAGES = ("inline", "file", "external")
# model_weights.bin: magic, payload bytes, checksum, zeros up to 64 (so every weight is 64-byte
# aligned in a mapped or flashed copy of the file), then the weights at their offsets
WEIGHTS_MAGIC = b"O2EW0002"
WEIGHTS_HEADER = 64


# C99 keywords and names the generated code itself uses.
_RESERVED = set(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "_Bool _Complex _Imaginary bool true false inputs outputs o2e_in o2e_out ctx".split()
)


def op_key(node: Node) -> str:
    """A node's name in the op registry: the op type in the default domain, `domain:op`
    elsewhere (ops/ml.py and ops/training.py register `ai.onnx.ml:Binarizer`, ...). A fused op
    is its base op's (o2e.ConvAct: Conv, o2e.QGemmAct: o2e:QGemm)."""
    domain, op = base_domain(node), base_op(node)
    return op if domain in ("", "ai.onnx") else f"{domain}:{op}"


def c_ident(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    if not s or s[0].isdigit():
        s = "_" + s
    if s in _RESERVED:
        s += "_"
    if len(s) > 48:
        s = s[:40] + "_" + hashlib.sha1(name.encode()).hexdigest()[:7]
    return s


def ctype_of(dtype: np.dtype) -> str:
    name = np.dtype(dtype).name
    try:
        return CTYPES[name] if name in CTYPES else STORAGE_CTYPES[name]
    except KeyError:
        raise UnsupportedError(
            f"dtype {np.dtype(dtype).name} is not supported by the C backend"
        ) from None


@dataclass(frozen=True)
class Tensor:
    """A tensor as generated code sees it: `sym` is a C pointer expression."""

    name: str
    sym: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str  # "input" | "output" | "const" | "arena"

    @property
    def ctype(self) -> str:
        return ctype_of(self.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)


class ConstTensor(Tensor):
    """A constant (an initializer or a derived copy: packed, transformed, folded) as the op
    emitters see it. Its C symbol is the only way to name it in generated code, so reading
    `sym` records the constant as referenced (`ModelEmitter.referenced`), and the writer emits
    exactly the referenced constants: an emitter may look at a weight (`ctx.x(1)` for its shape,
    `ctx.const(1)` for its values) and write only a repacked copy, and then the original is not
    written."""

    def __getattribute__(self, name: str) -> Any:
        if name == "sym":
            object.__getattribute__(self, "_referenced").add(object.__getattribute__(self, "_key"))
        return object.__getattribute__(self, name)


def c_literal(value: Any, dtype: np.dtype) -> str:
    """An exact C literal for one value of `dtype`."""
    dtype = np.dtype(dtype)
    if dtype.name in STORAGE_CTYPES:  # the raw bits, as stored
        return str(int(_storage_bits(np.asarray(value, dtype=dtype))))
    if dtype.kind == "f":
        v = float(value)
        if np.isnan(v):
            return "NAN" if dtype == np.float64 else "(float)NAN"
        if np.isinf(v):
            return ("-" if v < 0 else "") + (
                "INFINITY" if dtype == np.float64 else "(float)INFINITY"
            )
        if dtype == np.float32:
            return _f32(np.float32(v))
        return repr(v)
    if dtype.kind == "b":
        return "1" if value else "0"
    iv = int(value)
    if dtype == np.int64:
        return f"INT64_C({iv})" if iv != -(2**63) else "INT64_MIN"
    if dtype == np.uint64:
        return f"UINT64_C({iv})"
    if dtype == np.int32 and iv == -(2**31):
        return "INT32_MIN"
    if dtype == np.uint32:
        return f"{iv}u"
    return str(iv)


def _storage_bits(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint16 if arr.dtype.itemsize == 2 else np.uint8)


def _f32(x: np.float32) -> str:
    s = (
        np.format_float_scientific(x, unique=True, trim="-")
        if x != 0
        else ("-0.0" if np.signbit(x) else "0.0")
    )
    if "e" in s and "." not in s.split("e")[0]:
        s = s.replace("e", ".0e")
    return s + "f"


def array_literal(arr: np.ndarray, per_line: int = 8) -> str:
    """Comma-separated C literals, `per_line` a line."""
    flat = np.asarray(arr).reshape(-1)
    dt = flat.dtype
    if dt.name in STORAGE_CTYPES:
        texts = [str(v) for v in _storage_bits(flat).tolist()]
    elif dt == np.float32 and np.isfinite(flat).all():
        texts = [_f32(v) for v in flat]
    elif _plain_ints(flat):
        # c_literal's str(int) for each value, without its per-value dtype dispatch: an int8
        # model's packed weights are millions of values (MobileNetV3-small int8 took 21 s here)
        texts = list(map(str, flat.tolist()))
    else:
        texts = [c_literal(v, dt) for v in flat]
    lines = [", ".join(texts[i : i + per_line]) for i in range(0, len(texts), per_line)]
    return ",\n  ".join(lines) if lines else "0"


def _plain_ints(flat: np.ndarray) -> bool:
    """Integers whose every value c_literal writes as a bare decimal."""
    dt = flat.dtype
    if dt.kind in "iu" and dt.itemsize <= 2:
        return True
    return dt == np.int32 and not (flat == np.iinfo(np.int32).min).any()


_SCHEMA: Any = object()  # NodeContext.attr's "no default passed": use the schema's


@dataclass
class NodeContext:
    """What an op emitter sees of the model while it writes one node's code: a narrow
    interface. The graph, the node and its tensors; the conversion's options (read-only); the
    analyses about this node (layout role, Concat aliases); and small recording methods for
    what the emitter reports to the phases after it (runtime headers, the strategy chosen and
    the ones refused, sparse layers, in-place residuals). The emitter itself stays private
    (`_emitter`): ops and kernels never reach past this interface into it
    (tests/test_c_node_context.py)."""

    _emitter: ModelEmitter = field(repr=False)
    node: Node
    step: int
    scratch_requests: list[tuple[str, int]] = field(default_factory=list)
    # tensors of later nodes this node writes (a fused pool's output): live from this step
    early_writes: list[str] = field(default_factory=list)
    # tensors this node reads that are not its inputs (a folded SE gate's x and s): live
    # through this step
    extra_reads: list[str] = field(default_factory=list)
    # outputs this node leaves unwritten (a folded SE gate's product): never traced
    unwritten: list[str] = field(default_factory=list)

    @property
    def graph(self) -> Graph:
        return self._emitter.graph

    # --- the conversion's options (read-only) ---------------------------------------------
    @property
    def device(self) -> Device:
        """convert --device: the build the workspaces are planned for (device.py)."""
        return self._emitter.device

    @property
    def kernel_options(self) -> Mapping[str, str]:
        """convert --kernels as the emitter applies it (effective_kernel_options)."""
        return MappingProxyType(self._emitter.kernel_options)

    @property
    def optimize(self) -> str:
        """convert --optimize: "speed" or "size"."""
        return self._emitter.optimize

    @property
    def max_threads(self) -> int:
        """Thread slots a per-thread workspace holds (convert --max-threads; one on a
        microcontroller device)."""
        return self._emitter.max_threads

    # --- the analyses about this node ------------------------------------------------------
    @property
    def layout_role(self) -> BlockedRole | None:
        """This node's channel-blocked layouts (nchwc_plan.py), None when it runs NCHW."""
        return self._emitter.layout_plan.role(self.node)

    def layout_role_of(self, node: str) -> BlockedRole | None:
        """Node `node`'s channel-blocked layouts (se_fold.py asks about a gate's neighbour)."""
        return self._emitter.layout_plan.roles.get(node)

    def concat_alias(self, name: str) -> tuple[str, int] | None:
        """(Concat output, byte offset) when tensor `name` is written in place in a Concat's
        output (concat_alias.py), else None."""
        return self._emitter.concat_aliases.get(name)

    def guarded(self, node: str) -> bool:
        """Whether node `node` runs under a run-time If guard (phases.if_guards)."""
        return bool(self._emitter.analyses.guards.get(node))

    def tensor(self, name: str) -> Tensor:
        """Any tensor of the graph by name (a consumer's output a fused kernel writes)."""
        return self._emitter.tensor(name)

    @property
    def pooled_by(self) -> str | None:
        """The depthwise layer that writes this GlobalAveragePool's means (se_pool.py)."""
        return self._emitter.pooled_by.get(self.node.name)

    # --- what this node reports -------------------------------------------------------------
    def require_runtime(self, *files: str) -> None:
        """Ship these files of runtime/ with the generated code (the code includes them)."""
        self._emitter.runtime_files.update(files)

    def record_strategy(self, name: str, refusals: Sequence[tuple[str, str]]) -> None:
        """The strategy that writes this node and (strategy, why) for each one before it that
        refused (the manifest's stats.layer_kernels and stats.kernel_refusals)."""
        self._emitter.layer_strategies[self.node.name] = name
        self._emitter.kernel_refusals[self.node.name] = list(refusals)

    def record_sparse(self, entry: Mapping[str, Any]) -> None:
        """This node runs a sparse kernel (kernels/gemm/sparse.py; the manifest's
        sparse_layers)."""
        self._emitter.sparse_layers.append(dict(entry))

    def offer_residual(self, residual: str) -> None:
        """This node's output may take `residual`'s buffer (its kernel adds the residual in
        place); the residual_aliases phase decides (residual_alias.py)."""
        self._emitter.residual_candidates[self.node.outputs[0]] = (residual, self.step)

    def claim_pool(self, pool_node: str, out: str) -> None:
        """This node's kernel writes GlobalAveragePool `pool_node`'s output `out` (se_pool.py):
        that pool emits nothing and `out` is live from this step."""
        self._emitter.pooled_by[pool_node] = self.node.name
        self.early_writes.append(out)

    def also_reads(self, *names: str) -> None:
        """This node's kernel reads tensors `names` besides its inputs (conv_nchwc: an SE
        gate folded into the 1x1 layer reads the gate's inputs), so they stay live through
        this step."""
        self.extra_reads.extend(names)

    def leaves_unwritten(self) -> None:
        """This node writes none of its outputs: the node reading them computes from this
        node's inputs instead (se_fold.py), so `verify --per-layer` does not trace them (their
        arena bytes are whatever was there)."""
        self.unwritten.extend(o for o in self.node.outputs if o)

    def fp16_in_kernel(self, weights: np.ndarray) -> bool:
        """Whether this node's kernel, one that can read half weights itself, should store
        `weights` as fp16 (--weights fp16 and they fit); if so the node is recorded as one
        reading fp16 in its kernel (ModelEmitter.fp16_in_kernel)."""
        return self._emitter.fp16_in_kernel(self.node.name, weights)

    @property
    def n_inputs(self) -> int:
        return len(self.node.inputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def x(self, i: int) -> Tensor:
        """Input i (raise if absent: check has_input for optional inputs)."""
        return self._emitter.tensor(self.node.inputs[i])

    def y(self, i: int = 0) -> Tensor:
        return self._emitter.tensor(self.node.outputs[i])

    def has_output(self, i: int) -> bool:
        return i < len(self.node.outputs) and bool(self.node.outputs[i])

    def const(self, i: int) -> np.ndarray | None:
        return self.graph.const(self.node.inputs[i]) if self.has_input(i) else None

    def attr(self, name: str, default: Any = _SCHEMA) -> Any:
        """The node's attribute `name`; absent, `default` when one is passed, else the default
        the op's schema declares at the graph's opset (semantics.attrs: read from onnx.defs,
        never retyped), else None (an optional attribute without a default, or an op onnx has
        no schema for: those callers pass an explicit default)."""
        if default is not _SCHEMA or name in self.node.attrs:
            return self.node.attr(name, None if default is _SCHEMA else default)
        return semantic_attr(self.node, name, self.graph.opset)

    @property
    def op(self) -> str:
        """The ONNX op this node computes: its op_type, or a fused op's base (ConvAct: Conv)."""
        return base_op(self.node)

    def helper(self, name: str, code: str) -> str:
        """Add a static C function (or other top-level code) once; returns `name`."""
        self._emitter.add_helper(name, code)
        return name

    def weight(self, hint: str, arr: np.ndarray) -> str:
        """A derived constant (e.g. repacked weights); returns its C symbol."""
        return self._emitter.add_constant(f"{self.node.name}_{hint}", arr).sym

    def scratch(self, nbytes: int, ctype: str = "float") -> str:
        """Arena memory for this node only (e.g. im2col columns); a C pointer expression."""
        key = f"scratch:{self.node.name}:{len(self.scratch_requests)}"
        self.scratch_requests.append((key, int(nbytes)))
        macro = f"S_{c_ident(self.node.name)}_{len(self.scratch_requests) - 1}"
        self._emitter.scratch_macros[key] = (macro, ctype)
        return macro

    def unique(self, base: str) -> str:
        return self._emitter.unique_local(base)

    def kernel(self, name: str) -> None:
        """Record which kernel this node runs (reported by `convert` and `bench`)."""
        key = f"{self.op}: {name}"
        self._emitter.kernels[key] = self._emitter.kernels.get(key, 0) + 1
        self._emitter.node_kernels.setdefault(self.node.name, []).append(name)


OpEmitFn = Callable[[NodeContext], str]


def effective_kernel_options(
    device: Device, kernel_options: Mapping[str, str] | None
) -> Mapping[str, str]:
    """convert --kernels: strategy name -> "off" or its own setting (kernels/conv/conv_spec.py). A
    microcontroller (--device) keeps tensors NCHW: the channel-blocked chains are built for
    SIMD lanes, and on one scalar core their 1x1 layers ran 2.2x the instructions of the GEMM
    (DS-CNN float on mps2-an386: 4.15 M against 1.92 M per pointwise layer)."""
    return {**({"nchwc": "off"} if device.is_mcu else {}), **dict(kernel_options or {})}


class ModelEmitter:
    """Writes one C block a node, in graph order, from the analyses the phases before it
    made (phases.py: run-time If guards, layout plan, Concat aliases); it reports what the
    phases after it need (steps, scratch, residual candidates) and plans nothing itself."""

    def __init__(
        self,
        graph: Graph,
        analyses: Analyses,
        prefix: str = "model",
        weights_file: bool | None = None,
        optimize: str = "speed",
        kernel_options: Mapping[str, str] | None = None,
        device: Device = GENERIC,
        weights_fp16: bool = False,
        max_threads: int = MAX_THREADS,
    ) -> None:
        self.graph = graph
        self.analyses = analyses
        # convert --max-threads: thread slots every per-thread workspace is planned for (one
        # on a microcontroller device: its build guard refuses threads)
        self.max_threads = 1 if device.is_mcu else max_threads
        # convert --weights fp16: float32 constants fp16 can hold (fp16_storable) are stored as
        # half and widened per layer, into that layer's arena scratch, right before it runs
        # (_widen_fp16): never a float32 copy of all weights. Keys -> the layers that read them.
        self.weights_fp16 = weights_fp16
        self.fp16_keys: set[str] = set()
        self.fp16_layers: dict[str, list[str]] = {}  # node -> fp16 constants it widens
        self.fp16_layer_bytes: dict[str, int] = {}  # node -> float32 scratch bytes of those
        self.fp16_kernel_layers: set[str] = set()  # nodes whose kernel reads half itself
        self.fp16_sym: dict[str, str] = {}  # key -> the stored half array's C symbol
        self._sym_of: dict[str, str] = {}  # constant key -> C symbol (read without recording)
        self._key_of: dict[str, str] = {}
        # convert --device: the build the workspaces are planned for (device.py)
        self.device = device
        self.prefix = prefix
        self.ops = load_all()
        self.helpers: dict[str, str] = {}
        self.constants: dict[str, Tensor] = {}
        self.const_data: dict[str, np.ndarray] = {}
        # keys of `constants` whose C symbol generated code names (ConstTensor.sym)
        self.referenced: set[str] = set()
        self.scratch_macros: dict[str, tuple[str, str]] = {}
        self.kernels: dict[str, int] = {}
        self.sparse_layers: list[
            dict[str, Any]
        ] = []  # layers on sparse kernels (kernels/gemm/sparse.py)
        self.runtime_files: set[str] = set()  # files from runtime/ the generated code includes
        self.idents: set[str] = set()
        self.tensors: dict[str, Tensor] = {}
        self.locals = 0
        self.weights_file = weights_file
        # "speed": every specialised kernel, even one that stores its weights larger
        # (Winograd's transformed 3x3 weights: 16/9 of the ONNX size); "size": weights kept at
        # about their ONNX size (only layout padding)
        self.optimize = optimize
        self.kernel_options = effective_kernel_options(device, kernel_options)
        self.layer_strategies: dict[str, str] = {}  # node -> the strategy that wrote it
        # node -> (strategy, why) for each strategy before the chosen one (strategy.select;
        # the manifest's stats.kernel_refusals)
        self.kernel_refusals: dict[str, list[tuple[str, str]]] = {}
        # per node, for `onnx2edge report` (not in the manifest): the kernels it recorded, its
        # scratch bytes and the constants it named first (a constant shared by layers counts
        # for the first)
        self.node_kernels: dict[str, list[str]] = {}
        self.node_scratch: dict[str, int] = {}
        self.node_constants: dict[str, list[str]] = {}
        # fused residual adds that may run in place (residual_alias.py): output -> (residual,
        # step), registered by the kernels; the residual_aliases phase keeps those it can take
        self.residual_candidates: dict[str, tuple[str, int]] = {}
        # squeeze-and-excitation (issue 34): GlobalAveragePool node -> the depthwise Conv that
        # already wrote its means (kernels/conv/se_pool.py); the pool then emits nothing
        self.pooled_by: dict[str, str] = {}
        self._make_tensors()

    @property
    def layout_plan(self) -> LayoutPlan:
        """Tensors kept channel-blocked between layers, and the layers that run so (issue 9)."""
        return self.analyses.layout_plan or EMPTY

    @property
    def concat_aliases(self) -> dict[str, tuple[str, int]]:
        """Concat inputs written in place in their output's buffer (concat_alias.py)."""
        return self.analyses.concat_aliases

    @property
    def residual_inplace(self) -> dict[str, str]:
        return self.analyses.residual_inplace

    # --- naming ------------------------------------------------------------------------------
    def _ident(self, base: str) -> str:
        s, i = base, 1
        while s in self.idents:
            s, i = f"{base}_{i}", i + 1
        self.idents.add(s)
        return s

    def unique_local(self, base: str) -> str:
        self.locals += 1
        return f"{base}{self.locals}"

    # --- tensors -------------------------------------------------------------------------------
    def _make_tensors(self) -> None:
        g = self.graph
        for name in g.inputs:
            self.tensors[name] = self._tensor(name, "input", "in_")
        for name in g.outputs:
            if name not in self.tensors and name not in g.initializers:
                self.tensors[name] = self._tensor(name, "output", "out_")
        for node in g.nodes:
            for o in node.outputs:
                if o and o not in self.tensors:
                    self.tensors[o] = self._tensor(o, "arena", "T_")

    def _tensor(self, name: str, kind: str, pre: str) -> Tensor:
        t = self.graph.type_of(name)
        if t is None or not t.is_static:  # the static_shapes phase said why first
            raise UnsupportedError(f"tensor {name!r} has no static shape")
        return Tensor(name, self._ident(pre + c_ident(name)), t.static_shape, t.dtype, kind)

    def tensor(self, name: str) -> Tensor:
        if name in self.tensors:
            return self.tensors[name]
        if name in self.graph.initializers:
            return self.add_constant(name, self.graph.initializers[name], onnx_name=name)
        raise KeyError(name)

    def add_constant(self, hint: str, arr: np.ndarray, onnx_name: str | None = None) -> Tensor:
        key = onnx_name or f"derived:{hint}"
        if key in self.constants:
            return self.constants[key]
        arr = np.ascontiguousarray(arr)
        ctype_of(arr.dtype)
        t = ConstTensor(
            onnx_name or hint,
            self._ident("W_" + c_ident(hint)),
            tuple(arr.shape),
            arr.dtype,
            "const",
        )
        object.__setattr__(t, "_key", key)
        self._sym_of[key] = object.__getattribute__(t, "sym")
        self._key_of[self._sym_of[key]] = key
        object.__setattr__(t, "_referenced", self.referenced)
        self.constants[key] = t
        self.const_data[key] = arr
        if onnx_name is not None:
            self.tensors[onnx_name] = t
        return t

    def add_helper(self, name: str, code: str) -> None:
        if name not in self.helpers:
            self.helpers[name] = code

    # --- emission ------------------------------------------------------------------------------
    def emit(self) -> dict[str, Any]:
        """Every node's block; returns the emit phase's results (phases.py)."""
        g = self.graph
        blocks: list[str] = []
        steps: dict[str, list[int]] = {}
        scratch: list[Buffer] = []
        guards = self.analyses.guards
        if self.device.is_mcu:  # first in model.c: a build it was not planned for stops here
            self.add_helper("o2e_device_guard", build_guard(self.device))
        opened: Guard = ()
        written_under: dict[str, Guard] = {}
        for step, node in enumerate(g.nodes):
            guard = guards.get(node.name, ())
            written_under.update({o: guard for o in node.outputs if o})
            blocks.extend(self._guard_lines(opened, guard))
            opened = guard
            ctx = NodeContext(self, node, step)
            named_before = set(self.referenced)
            if node.name in self.analyses.if_selects:
                body = self._if_select(node)
            else:
                body = self.ops[op_key(node)].emit(ctx)
            if self.weights_fp16:
                body = self._widen_fp16(ctx, body)
            self.node_constants[node.name] = sorted(self.referenced - named_before)
            self.node_scratch[node.name] = sum(n for _, n in ctx.scratch_requests)
            for key, nbytes in ctx.scratch_requests:
                scratch.append(Buffer(key, nbytes, step, step, guard))
            attrs = ", ".join(f"{k}={_short(a.value)}" for k, a in node.attrs.items())
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            header = (
                f"/* node {_cmt(node.name)}: {op}({_cmt(', '.join(i or '-' for i in node.inputs))})"
            )
            header += f" -> {_cmt(', '.join(node.outputs))}{'  [' + _cmt(attrs) + ']' if attrs else ''} */"
            block = f"  {header}\n  {{\n{_indent(body.strip(), 4)}\n  }}\n  O2E_PROF({step}); {self._trace_calls(node, ctx.unwritten)}"
            blocks.append(_indent(block, 2 * len(guard)) if guard else block)
            for name in (*node.inputs, *node.outputs, *ctx.early_writes, *ctx.extra_reads):
                if name:
                    steps.setdefault(name, []).append(step)
            for name in node.inputs:
                release_pages(g.initializers.get(name))
        blocks.extend(self._guard_lines(opened, ()))
        # graph outputs that are constants or inputs get copied at the end
        tail = []
        for i, name in enumerate(g.outputs):
            t = self.tensor(name)
            if t.kind in ("const", "input"):
                out = f"(({t.ctype} *)outputs[{i}])"
                tail.append(f"  memcpy({out}, {t.sym}, {t.nbytes});  /* output {_cmt(name)} */")
        return {
            "blocks": blocks,
            "tail": tail,
            "steps": steps,
            "scratch": scratch,
            "written_under": written_under,
            "residual_candidates": self.residual_candidates,
        }

    def fp16_in_kernel(self, node: str, weights: np.ndarray) -> bool:
        """Whether a kernel that can read half weights itself (o2e_sgemv_packed_h,
        o2e_fc_skip_zeros_h) should store `weights` as fp16: --weights fp16 and they fit.
        Records the layer as one reading fp16 in its kernel (the manifest's
        fp16_weight_layers)."""
        if not self.weights_fp16 or not fp16_storable(np.asarray(weights, np.float32)):
            return False
        self.fp16_kernel_layers.add(node)
        return True

    def _widen_fp16(self, ctx: NodeContext, body: str) -> str:
        """Node code reading fp16-stored weights: each is widened into scratch of this node
        (o2e_f16_decode; the arena grows by the largest layer's, not by all weights) and named
        by a block-local pointer, so the kernels keep reading float32. The stored half array is
        `<sym>_f16` (writer.py); constants that are graph outputs stay float32."""
        syms = sorted(set(re.findall(r"\bW_\w+", body)) & self._key_of.keys())
        outputs = set(self.graph.outputs)
        lines = []
        used = []
        for sym in syms:
            key = self._key_of[sym]
            arr = self.const_data[key]
            if key in outputs or not fp16_storable(arr):
                continue
            if key not in self.fp16_sym:
                self.fp16_sym[key] = self._ident(sym + "_f16")
            buf = ctx.scratch(4 * arr.size, "float")
            half = self.fp16_sym[key]
            lines.append(f"o2e_f16_decode({buf}, {half}, {arr.size});  /* fp16 weights */")
            lines.append(f"const float *const {sym} = {buf};")
            self.fp16_keys.add(key)
            used.append(key)
        if not used:
            return body
        self.fp16_layers[ctx.node.name] = [self.constants[k].name for k in used]
        self.fp16_layer_bytes[ctx.node.name] = sum(4 * self.const_data[k].size for k in used)
        return "\n".join([*lines, body])

    def check_fp16_scope(self, tail: list[str]) -> None:
        """Widened fp16 weights exist only inside the block of a layer that reads them: code
        outside any block (helper functions, output copies) may not name them."""
        outside = "\n".join([*self.helpers.values(), *tail])
        for key in self.fp16_keys:
            if re.search(rf"\b{self._sym_of[key]}\b", outside):
                raise UnsupportedError(
                    f"--weights fp16: constant '{self.constants[key].name}' is read outside "
                    "a layer's code; convert with --weights fp32"
                )

    def _guard_lines(self, opened: Guard, guard: Guard) -> list[str]:
        """Close the `if` blocks of `opened` that `guard` does not share, open its others."""
        n = 0
        while n < min(len(opened), len(guard)) and opened[n] == guard[n]:
            n += 1
        lines = [" " * (2 * d) + "  }" for d in range(len(opened) - 1, n - 1, -1)]
        for d, (cond, taken) in enumerate(guard[n:], n):
            c = self.tensor(cond)
            pad = " " * (2 * d)
            lines.append(f"{pad}  if ({'' if taken else '!'}{c.sym}[0]) {{  /* {_cmt(cond)} */")
        return lines

    def _if_select(self, node: Node) -> str:
        """A run-time If's output: a copy of the side its condition took (only that side was
        computed)."""
        c, t, e = (self.tensor(x) for x in node.inputs)
        y = self.tensor(node.outputs[0])
        if y.nbytes == 0:
            return "/* empty */"
        return f"memcpy({y.sym}, {c.sym}[0] ? (const void *){t.sym} : (const void *){e.sym}, {y.nbytes});"

    def _trace_calls(self, node: Node, unwritten: Sequence[str]) -> str:
        calls = []
        for o in node.outputs:
            if o and o in self.tensors and o not in unwritten:
                t = self.tensors[o]
                calls.append(f"O2E_TRACE({_cstr(o)}, {t.sym}, {t.nbytes});")
        return " ".join(calls)


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor{list(v.shape)}"
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(map(str, v[:8]))}, ...]"
    if isinstance(v, str):
        return v
    return str(v) if not hasattr(v, "SerializeToString") else "<graph>"


def _cmt(s: str) -> str:
    return s.replace("*/", "* /").replace("/*", "/ *").replace("\n", " ")


def _cstr(s: str) -> str:
    return '"' + s.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def _indent(s: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + ln if ln.strip() else "" for ln in s.splitlines())
