"""`onnx2edge quantize`: FP16 and INT8 (dynamic / static QDQ) models, with automatic fallback.

The quantizers are the field's: `onnxconverter_common.float16` for fp16 and
`onnxruntime.quantization` (`quant_pre_process`, `quantize_dynamic`, `quantize_static` in QDQ
format) for int8. What this module adds is what their users keep writing by hand:

- the known traps handled: fp16 keeps the ops whose float inputs are sizes or indices
  (Resize scales, Range, ...) in fp32 and the graph re-sorted after the casts it inserts;
  int8 first runs quant_pre_process (BatchNormalization folded, shapes inferred) with the
  names --exclude uses mapped through its fusions; every result is re-sorted, checked, and
  re-loaded in onnxruntime with an IR version it accepts;
- calibration data from an .npz / a folder of .npy files (`CalibData`);
- `exclude="auto"`: a per-layer sensitivity pass that keeps the layers whose int8 version hurts
  most in fp32 until the metric drop is within `max_drop` (`sensitivity`, `auto_exclude`);
- `compare_layers`: a quantized model against its fp32 original, tensor by tensor, matched by
  name through the QuantizeLinear / DequantizeLinear pairs.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .errors import Onnx2EdgeError
from .fsutil import write_bytes_atomic
from .ir.expose import constant_tensors as constant_tensors
from .ir.expose import expose_outputs

MODES = ("fp16", "dynamic", "static")
METHODS = ("minmax", "percentile", "entropy")
ACTIVATIONS = ("uint8", "int8")
# onnxruntime 1.31 refuses IR > 13; 10 is what opsets up to 21 need.
MAX_IR = 10
# fp16: ops whose float inputs are sizes, scales or indices. onnxconverter-common's default
# block list already holds Resize / Range / Upsample / TopK / ...; these are added because a
# scale or a bound in fp16 silently changes shapes (its issue tracker: Resize scales cast to
# fp16, Range with fp16 limits off by one element).
FP16_EXTRA_BLOCK = ("ConstantOfShape", "RandomNormal", "RandomUniform", "Multinomial", "EyeLike")


Log = Callable[[str], None] | None


# --- calibration data -------------------------------------------------------------------
@dataclass
class CalibData:
    """Samples per model input: `feeds[name][i]` is what the model is fed for sample i."""

    feeds: dict[str, np.ndarray]

    @property
    def count(self) -> int:
        return len(next(iter(self.feeds.values())))

    def sample(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[i] for k, v in self.feeds.items()}

    def subset(self, n: int) -> CalibData:
        return CalibData({k: v[:n] for k, v in self.feeds.items()})


def _input_specs(model: onnx.ModelProto) -> list[tuple[str, list[int | None], np.dtype]]:
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        out.append((vi.name, dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))
    return out


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        if path.is_dir():
            files = sorted(path.glob("*.npy"))
            if not files:
                raise Onnx2EdgeError(f"--calib {path}: the folder holds no .npy file")
            return {f.stem: np.load(f, allow_pickle=False) for f in files}
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        if path.suffix == ".npy":
            return {path.stem: np.load(path, allow_pickle=False)}
    except (OSError, ValueError) as e:
        raise Onnx2EdgeError(f"--calib {path}: cannot read it: {e}") from None
    raise Onnx2EdgeError(f"--calib {path}: expected an .npz file, an .npy file or a folder of .npy")


def load_calib(path: str | Path, model: onnx.ModelProto, *, limit: int | None = None) -> CalibData:
    """Read calibration samples for `model`'s inputs.

    An .npz holds one array per input (named after it; a single-input model takes any single
    array), first axis = samples. A folder holds `<input>.npy` per input, or, for a
    single-input model, any .npy files whose samples are concatenated in file-name order.
    A sample is fed as `arr[i]` when the array has one more axis than the input, and as
    `arr[i:i+1]` when it has as many (the input's first axis is then the batch of one).
    """
    path = Path(path)
    if not path.exists():
        raise Onnx2EdgeError(f"--calib {path}: no such file or folder")
    arrays = _read_arrays(path)
    specs = _input_specs(model)
    names = [n for n, _, _ in specs]
    if len(specs) == 1 and names[0] not in arrays:
        if path.is_dir():
            parts = [a if a.ndim > len(specs[0][1]) else a[None] for a in arrays.values()]
            if len({p.shape[1:] for p in parts}) != 1:
                raise Onnx2EdgeError(f"--calib {path}: the .npy files have different shapes")
            arrays = {names[0]: np.concatenate(parts)}
        elif len(arrays) == 1:
            arrays = {names[0]: next(iter(arrays.values()))}
    missing = [n for n in names if n not in arrays]
    if missing:
        raise Onnx2EdgeError(
            f"--calib {path}: no array for input(s) {', '.join(missing)} "
            f"(found {', '.join(sorted(arrays)) or 'none'})"
        )
    feeds: dict[str, np.ndarray] = {}
    for name, dims, dtype in specs:
        a = arrays[name]
        if a.ndim == len(dims):
            if dims and dims[0] not in (None, 1):
                raise Onnx2EdgeError(
                    f"--calib {path}: '{name}' has shape {list(a.shape)}; the input's first axis "
                    f"is {dims[0]}, so give samples x {dims} (one more axis)"
                )
            a = a[:, None]
        elif a.ndim != len(dims) + 1:
            raise Onnx2EdgeError(
                f"--calib {path}: '{name}' has {a.ndim} axes; the input has {len(dims)} "
                f"(give samples along a first axis)"
            )
        for ax, (want, got) in enumerate(zip(dims, a.shape[1:], strict=True)):
            if want is not None and want != got:
                raise Onnx2EdgeError(
                    f"--calib {path}: '{name}' samples have shape {list(a.shape[1:])}, "
                    f"the input needs {[d if d is not None else '?' for d in dims]} (axis {ax})"
                )
        if np.issubdtype(dtype, np.floating) and not np.all(np.isfinite(a)):
            raise Onnx2EdgeError(f"--calib {path}: '{name}' holds NaN or Inf")
        feeds[name] = a.astype(dtype, copy=False)
    counts = {len(v) for v in feeds.values()}
    if len(counts) != 1 or 0 in counts:
        raise Onnx2EdgeError(f"--calib {path}: the inputs have different or zero sample counts")
    data = CalibData(feeds)
    return data.subset(limit) if limit else data


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over a CalibData (one sample per call)."""

    def __init__(self, data: CalibData) -> None:
        self.data, self.i = data, 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.i >= self.data.count:
            return None
        self.i += 1
        return self.data.sample(self.i - 1)

    def rewind(self) -> None:
        self.i = 0

    def __len__(self) -> int:
        return self.data.count

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self.data.sample(i) for i in range(self.data.count))


# --- running a model over the samples ---------------------------------------------------
def _session(model: onnx.ModelProto | bytes) -> Any:
    """onnxruntime as `verify` runs it (runtime.ort_session): u8 x s8 products exact on every
    CPU. onnxruntime's default saturates them on x86 without VNNI (AVX2 hosts), which moved
    the accuracy figures and the `--exclude auto` choice with the host: 0.17 RMS error on the
    per-channel digits CNN there against 0.017 (tools/quant_ort_avx2.py)."""
    from .runtime import ort_session

    return ort_session(
        model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
    )


def run_samples(
    model: onnx.ModelProto | bytes, data: CalibData, names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Every sample through onnxruntime; outputs stacked on a new first axis (sample)."""
    sess = _session(model)
    outs = list(names) if names is not None else [o.name for o in sess.get_outputs()]
    # Batch the samples when every input's first axis is symbolic and each sample is a batch
    # of one: 64x fewer calls, the same results up to float32 summation order.
    batchable = all(
        (not isinstance(i.shape[0], int)) and data.feeds[i.name].shape[1:2] == (1,)
        for i in sess.get_inputs()
        if i.shape
    )
    step = 64 if batchable else 1
    res: dict[str, list[np.ndarray]] = {n: [] for n in outs}
    for s in range(0, data.count, step):
        if batchable:
            feed = {k: v[s : s + step].reshape(-1, *v.shape[2:]) for k, v in data.feeds.items()}
        else:
            feed = data.sample(s)
        for n, v in zip(outs, sess.run(outs, feed), strict=True):
            if batchable:
                count = len(next(iter(feed.values())))
                res[n].extend(v[:, None] if v.ndim else [v] * count)
            else:
                res[n].append(v)
    return {n: np.stack(v) for n, v in res.items()}


def top1(out: np.ndarray) -> np.ndarray:
    """Class per sample (argmax over the last axis, per position for outputs of rank > 2)."""
    return out.reshape(len(out), -1, out.shape[-1] if out.ndim > 1 else 1).argmax(-1)


@dataclass
class Metric:
    """End-to-end score of a candidate: top-1 agreement with fp32, or accuracy with labels."""

    reference: np.ndarray  # fp32 output over the samples
    labels: np.ndarray | None = None

    @property
    def name(self) -> str:
        return "accuracy" if self.labels is not None else "top-1 agreement with fp32"

    def score(self, out: np.ndarray) -> float:
        pred = top1(out)
        if self.labels is not None and self.labels.size != pred.size:
            raise Onnx2EdgeError(
                f"--labels: {self.labels.size} labels, the model predicts {pred.size} classes "
                f"over the samples (one label per sample and output position)"
            )
        want = top1(self.reference) if self.labels is None else self.labels.reshape(pred.shape)
        return float((pred == want).mean())

    @property
    def baseline(self) -> float:
        return self.score(self.reference)

    def rel_error(self, out: np.ndarray) -> float:
        """max|out - fp32| / max|fp32| over all samples: the continuous sensitivity."""
        ref = self.reference.astype(np.float64)
        scale = float(np.abs(ref).max()) or 1.0
        return float(np.abs(out.astype(np.float64) - ref).max() / scale)


def load_labels(path: str | Path, count: int) -> np.ndarray:
    path = Path(path)
    try:
        labels = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise Onnx2EdgeError(f"--labels {path}: cannot read it: {e}") from None
    if labels.dtype.kind not in "iu":
        raise Onnx2EdgeError(f"--labels {path}: expected integer class labels, got {labels.dtype}")
    if len(labels) < count:
        raise Onnx2EdgeError(f"--labels {path}: {len(labels)} labels for {count} samples")
    return labels[:count].astype(np.int64)


# --- graph helpers ------------------------------------------------------------------------
def name_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose nodes all have unique names (`<op>_<index>` for unnamed / duplicate ones),
    so --exclude and the sensitivity table can name every node."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    seen: set[str] = set()
    for i, n in enumerate(m.graph.node):
        if not n.name or n.name in seen:
            n.name = f"{n.op_type}_{i}"
        seen.add(n.name)
    return m


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (If / Loop / Scan bodies) read from the enclosing scope."""
    names: set[str] = set()
    for a in node.attribute:
        for g in [a.g] if a.HasField("g") else list(a.graphs):
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                local.update(n.output)
            for n in g.node:
                names.update(x for x in (*n.input, *_subgraph_inputs(n)) if x and x not in local)
    return names


def topo_sort(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with the nodes in a topological order, stable (original order where possible).

    float16's keep_io_types can append Cast nodes after their consumers; onnx.checker and
    some runtimes refuse such graphs (onnxconverter-common's issue tracker)."""
    g = model.graph
    avail = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    pending = list(g.node)
    order: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for n in pending:
            if all(x in avail for x in (*n.input, *_subgraph_inputs(n))):
                order.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise Onnx2EdgeError(
                f"the graph has a cycle or reads undefined tensors at node '{rest[0].name}'"
            )
        pending = rest
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(order)
    return m


def _finish(model: onnx.ModelProto, options: Mapping[str, Any]) -> onnx.ModelProto:
    """IR version onnxruntime loads, options recorded, checked, loadable."""
    m = topo_sort(model)
    m.ir_version = min(m.ir_version, MAX_IR)
    for p in list(m.metadata_props):
        if p.key == "onnx2edge.quantize":
            m.metadata_props.remove(p)
    m.metadata_props.add(key="onnx2edge.quantize", value=json.dumps(dict(options), sort_keys=True))
    try:
        onnx.checker.check_model(m)
    except onnx.checker.ValidationError as e:
        raise Onnx2EdgeError(f"the quantized model is invalid: {str(e).splitlines()[0]}") from None
    _session(m)
    return m


# --- the three modes ----------------------------------------------------------------------
def fp16_blocked_ops() -> list[str]:
    from onnxconverter_common import float16

    return sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(FP16_EXTRA_BLOCK))


def to_fp16(model: onnx.ModelProto, exclude: Sequence[str] = ()) -> onnx.ModelProto:
    from onnxconverter_common import float16

    block = fp16_blocked_ops()
    # keep_io_types: callers keep feeding float32 and reading float32. The converter warns
    # once per weight it clamps to float16's range (~25 UserWarnings on ResNet50):
    # `quantize` states the count in one line instead (fp16_clamped).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"the float32 number .* will be truncated to")
        return float16.convert_float_to_float16(
            model, keep_io_types=True, op_block_list=block, node_block_list=list(exclude)
        )


def fp16_clamped(model: onnx.ModelProto) -> int:
    """Float32 weight values onnxconverter-common clamps on the way to float16: nonzero ones
    below 1e-7 and ones beyond 1e4 in magnitude (its min_positive_val / max_finite_val)."""
    from onnx import numpy_helper

    n = 0
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        a = np.abs(numpy_helper.to_array(t))
        n += int(((a > 0) & (a < 1e-7)).sum() + (a > 1e4).sum())
    return n


def _preprocess(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    """onnxruntime's recommended pre-processing: its basic graph optimisation (Conv +
    BatchNormalization folded, MatMul + Add fused into Gemm, constants folded) and shape
    inference. Without it a BatchNormalization stays in float between a quantized Conv and the
    next QuantizeLinear, which costs accuracy and speed. The optimiser keeps node names except
    for the fusions (`resolve_names` maps them); symbolic shape inference fails on some graphs,
    so it is retried without, then without the optimiser."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dst = tmp / "pre_in.onnx", tmp / "pre_out.onnx"
    onnx.save(model, src)
    attempts: list[dict[str, bool]] = [
        {},
        {"skip_symbolic_shape": True},
        {"skip_optimization": True},
    ]
    for i, kw in enumerate(attempts):
        try:
            with _quiet(), contextlib.redirect_stdout(io.StringIO()):
                quant_pre_process(str(src), str(dst), **kw)
            break
        except Exception:  # noqa: BLE001 - onnxruntime's own exception types
            if i == len(attempts) - 1:
                raise
    return name_nodes(onnx.load(dst))


def resolve_names(
    names: Sequence[str], original: onnx.ModelProto, pre: onnx.ModelProto
) -> list[str]:
    """--exclude names (of the user's model) -> node names of the pre-processed model."""
    have = {n.name for n in pre.graph.node}
    ops = {n.name: n.op_type for n in original.graph.node}
    out = []
    for name in names:
        if name in have:
            out.append(name)
        elif f"{name}/MatMulAddFusion" in have:  # onnxruntime's MatMul + Add -> Gemm
            out.append(f"{name}/MatMulAddFusion")
        else:
            raise Onnx2EdgeError(
                f"--exclude: node '{name}' ({ops.get(name, '?')}) was folded into another node "
                f"by onnxruntime's pre-processing (BatchNormalization into its Conv, an Add into "
                f"its MatMul, constants folded); exclude the node it was folded into"
            )
    return out


@dataclass
class Settings:
    mode: str
    method: str = "minmax"
    per_channel: bool = False
    activations: str = "uint8"

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mode": self.mode}
        if self.mode != "fp16":
            d["per_channel"] = self.per_channel
        if self.mode == "static":
            d.update(method=self.method, activations=self.activations)
        return d


class Quantizer:
    """One model, one set of settings; `build(exclude)` quantizes all but `exclude`. Static
    calibration runs once (onnxruntime's calibration cache), so the sensitivity pass's many
    variants only re-run the cheap QDQ rewrite."""

    def __init__(
        self, model: onnx.ModelProto, settings: Settings, calib: CalibData | None, tmp: Path
    ) -> None:
        self.settings, self.calib, self.tmp = settings, calib, tmp
        self.model = name_nodes(model)
        self.pre = _preprocess(self.model, tmp) if settings.mode != "fp16" else self.model
        self.cache = tmp / "calibration.json"
        # A path, not a ModelProto: onnxruntime re-saves a ModelProto with its weights as
        # external data in a temporary folder it deletes, and a later call with the cached
        # calibration then reads weights that are gone.
        self.pre_path = tmp / "preprocessed.onnx"
        onnx.save(self.pre, self.pre_path)
        self.n = 0

    def build(
        self, exclude: Sequence[str] = (), only: Sequence[str] | None = None
    ) -> onnx.ModelProto:
        from onnxruntime.quantization import (
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_dynamic,
            quantize_static,
        )

        if only is not None and not only:  # nodes_to_quantize=[] means "all" to onnxruntime
            raise ValueError("only=[] would quantize every node")
        s = self.settings
        if s.mode == "fp16":
            excl = list(exclude)
            if only is not None:
                excl += [n.name for n in self.model.graph.node if n.name not in set(only)]
            return to_fp16(self.model, excl)
        self.n += 1
        out = self.tmp / f"q{self.n}.onnx"
        common: dict[str, Any] = {
            "per_channel": s.per_channel,
            "weight_type": QuantType.QInt8,
            # dynamic: onnxruntime splits a Gemm into "<name>_MatMul" + Add before matching
            # nodes_to_exclude, so a Gemm named alone would still be quantized
            "nodes_to_exclude": [*exclude, *(f"{e}_MatMul" for e in exclude)]
            if s.mode == "dynamic"
            else list(exclude),
            "nodes_to_quantize": (
                None
                if only is None
                else [*only, *(f"{e}_MatMul" for e in only)]
                if s.mode == "dynamic"
                else list(only)
            ),
        }
        # onnxruntime logs "please pre-process" warnings through the root logger and its
        # histogram calibrators print progress on stdout (our stdout is the report).
        with _quiet(), contextlib.redirect_stdout(io.StringIO()):
            if s.mode == "dynamic":
                quantize_dynamic(self.pre_path, out, **common)
            else:
                if self.calib is None:
                    raise Onnx2EdgeError("--mode static needs --calib FILE.npz or DIR/")
                method = {
                    "minmax": CalibrationMethod.MinMax,
                    "percentile": CalibrationMethod.Percentile,
                    "entropy": CalibrationMethod.Entropy,
                }[s.method]
                act = QuantType.QUInt8 if s.activations == "uint8" else QuantType.QInt8
                quantize_static(
                    self.pre_path,
                    out,
                    _Reader(self.calib),
                    quant_format=QuantFormat.QDQ,
                    activation_type=act,
                    calibrate_method=method,
                    calibration_cache_path=self.cache,
                    **common,
                )
        return onnx.load(out)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def candidates(quantized: onnx.ModelProto, original: onnx.ModelProto) -> list[str]:
    """Nodes of the original that the quantizer rewrote: their names survive in the quantized
    graph and at least one of their inputs now comes out of a DequantizeLinear (static) or
    they became an integer op (dynamic: `<name>_quant`, Gemm `<name>_MatMul_quant`)."""
    dq_out = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    by_name = {n.name: n for n in quantized.graph.node}
    non_float = {
        t.name
        for t in quantized.graph.initializer
        if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    }
    out = []
    for n in original.graph.node:
        q = by_name.get(n.name)
        # quantized = every float input dequantized: an excluded Conv may still read a
        # dequantized activation, but its weight stays float
        ins = [i for i in (q.input if q is not None else []) if i and i not in non_float]
        if ins and all(i in dq_out for i in ins):
            out.append(n.name)
        elif q is None and ({f"{n.name}_quant", f"{n.name}_MatMul_quant"} & by_name.keys()):
            out.append(n.name)
    return out


# --- sensitivity and automatic exclusion -------------------------------------------------
@dataclass
class LayerSensitivity:
    node: str
    op: str
    rel_error: float  # max|out - fp32| / max|fp32| with only this node quantized
    metric_only: float  # metric with only this node quantized
    metric_without: float  # metric with every other candidate quantized, this one in fp32

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "rel_error_only_this": self.rel_error,
            "metric_only_this": self.metric_only,
            "metric_all_but_this": self.metric_without,
        }


def sensitivity(
    q: Quantizer, metric: Metric, data: CalibData, nodes: Sequence[str], log: Log = None
) -> list[LayerSensitivity]:
    """Each candidate's own int8 effect ("only this node quantized": output error and metric)
    and how much keeping it alone in fp32 recovers ("all but this"). Sorted most sensitive
    first: by the metric it loses alone, then by its output error."""
    say = log or (lambda m: None)
    ops = {n.name: n.op_type for n in q.pre.graph.node}
    first = next(iter(metric_outputs(q.model)))
    rows = []
    for i, name in enumerate(nodes):
        say(f"sensitivity {i + 1}/{len(nodes)}: {name}")
        only = run_samples(q.build(only=[name]), data, [first])[first]
        without = run_samples(q.build(exclude=[name]), data, [first])[first]
        rows.append(
            LayerSensitivity(
                name,
                ops.get(name, "?"),
                metric.rel_error(only),
                metric.score(only),
                metric.score(without),
            )
        )
    return sorted(rows, key=lambda r: (r.metric_only, -r.rel_error, -r.metric_without))


def metric_outputs(model: onnx.ModelProto) -> list[str]:
    return [o.name for o in model.graph.output]


@dataclass
class QuantizeResult:
    output: Path
    settings: dict[str, Any]
    excluded: list[str]
    quantized_nodes: list[str]
    size_before: int
    size_after: int
    metric_name: str = ""
    metric_fp32: float | None = None
    metric_quantized: float | None = None
    samples: int = 0
    table: list[LayerSensitivity] = field(default_factory=list)
    steps: list[tuple[list[str], float]] = field(default_factory=list)
    reached: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "settings": self.settings,
            "excluded": self.excluded,
            "quantized_nodes": self.quantized_nodes,
            "size_before": self.size_before,
            "size_after": self.size_after,
            "metric": self.metric_name,
            "metric_fp32": self.metric_fp32,
            "metric_quantized": self.metric_quantized,
            "samples": self.samples,
            "sensitivity": [r.as_dict() for r in self.table],
            "auto_steps": [{"excluded": e, "metric": m} for e, m in self.steps],
            "reached_max_drop": self.reached,
        }

    def format(self) -> str:
        lines = []
        if self.table:
            w = max(len(r.node) for r in self.table)
            lines.append(
                f"per-layer sensitivity ({self.metric_name}, {self.samples} samples; "
                "'only': this node alone int8; 'all but': every other node int8)"
            )
            lines.append(
                f"{'node':<{w}}  {'op':<14} {'rel err only':>12} {'only':>7} {'all but':>8}"
            )
            for r in self.table:
                lines.append(
                    f"{r.node:<{w}}  {r.op:<14} {r.rel_error:12.4g} {r.metric_only:7.4f} "
                    f"{r.metric_without:8.4f}"
                )
            # one short line per step (the node it adds), not the growing list each time
            lines.extend(_step_line(excl, m, self.metric_name) for excl, m in self.steps)
        lines.append(
            f"{self.settings['mode']}: {len(self.quantized_nodes)} nodes quantized, "
            f"{len(self.excluded)} kept in fp32{': ' + ', '.join(self.excluded) if self.excluded else ''}"
        )
        if self.metric_fp32 is not None and self.metric_quantized is not None:
            lines.append(
                f"{self.metric_name} on {self.samples} samples: fp32 {self.metric_fp32:.4f}, "
                f"quantized {self.metric_quantized:.4f} "
                f"(drop {self.metric_fp32 - self.metric_quantized:+.4f})"
            )
        if not self.reached:
            lines.append(
                "warning: the drop stays above --max-drop even with every sensitive node in fp32"
            )
        lines.append(
            f"size: {self.size_before:,} -> {self.size_after:,} bytes; wrote {self.output}"
        )
        return "\n".join(lines)


def _step_line(excl: Sequence[str], metric: float, name: str) -> str:
    what = f"+ {excl[-1]} (fp32 kept: {len(excl)})" if excl else "every candidate int8"
    return f"step {len(excl)}: {what} -> {name} {metric:.4f}"


def quantize(
    model: str | Path | onnx.ModelProto,
    out: str | Path,
    *,
    mode: str,
    calib: str | Path | None = None,
    method: str = "minmax",
    per_channel: bool = False,
    activations: str = "uint8",
    exclude: Sequence[str] | str = (),
    max_drop: float = 0.01,
    labels: str | Path | None = None,
    samples: int | None = None,
    log: Log = None,
) -> QuantizeResult:
    """Quantize `model` into `out`. `exclude` names nodes kept in fp32, or is "auto"."""
    from .frontend.loader import load_model

    say = log or (lambda m: None)
    if mode not in MODES:
        raise Onnx2EdgeError(f"--mode {mode}: expected one of {', '.join(MODES)}")
    if method not in METHODS:
        raise Onnx2EdgeError(f"--method {method}: expected one of {', '.join(METHODS)}")
    if activations not in ACTIVATIONS:
        raise Onnx2EdgeError(
            f"--activations {activations}: expected one of {', '.join(ACTIVATIONS)}"
        )
    if mode == "dynamic" and activations != "uint8":
        raise Onnx2EdgeError(
            "--mode dynamic quantizes activations at run time to uint8 only "
            "(onnxruntime's DynamicQuantizeLinear); use --mode static for int8 activations"
        )
    auto = exclude == "auto" or list(exclude) == ["auto"]
    if mode == "static" and calib is None:
        raise Onnx2EdgeError("--mode static needs --calib FILE.npz or DIR/ (calibration samples)")
    if auto and calib is None:
        raise Onnx2EdgeError("--exclude auto needs --calib (the samples the drop is measured on)")
    if not 0 <= max_drop <= 1:
        raise Onnx2EdgeError(f"--max-drop {max_drop}: expected a fraction in [0, 1], e.g. 0.01")
    src = model if isinstance(model, onnx.ModelProto) else Path(model)
    label = str(src) if isinstance(src, Path) else f"{src.graph.name or 'the model'} (in memory)"
    proto = name_nodes(load_model(src))
    data = load_calib(calib, proto, limit=samples) if calib is not None else None
    names = {n.name for n in proto.graph.node}
    excl = [] if auto else [e.strip() for e in exclude if e.strip()]
    unknown = [e for e in excl if e not in names]
    if unknown:
        raise Onnx2EdgeError(f"--exclude: no node named {', '.join(unknown)} in {label}")
    settings = Settings(mode, method, per_channel, activations)
    size = src.ByteSize() if isinstance(src, onnx.ModelProto) else src.stat().st_size
    res = QuantizeResult(Path(out), settings.as_dict(), excl, [], size, 0)
    with tempfile.TemporaryDirectory(prefix="onnx2edge-quant-") as tmp:
        q = Quantizer(proto, settings, data, Path(tmp))
        excl = resolve_names(excl, proto, q.pre)
        res.excluded = excl
        say(f"quantizing ({mode})")
        if mode == "fp16" and (clamped := fp16_clamped(proto)):
            say(f"note: {clamped:,} weight value(s) outside float16's range are clamped to it")
        qm = q.build(excl)
        metric = None
        if data is not None:
            ref = first_output(proto, data)
            lab = load_labels(labels, data.count) if labels is not None else None
            metric = Metric(ref, lab)
            res.metric_name, res.samples = metric.name, data.count
            res.metric_fp32 = metric.baseline
            res.metric_quantized = metric.score(first_output(qm, data))
        if auto:
            assert metric is not None and data is not None
            qm = _auto(q, qm, metric, data, max_drop, res, say)
        res.quantized_nodes = (
            candidates(qm, q.pre)
            if mode != "fp16"
            else [
                n.name
                for n in proto.graph.node
                if n.name not in set(res.excluded) and n.op_type not in fp16_blocked_ops()
            ]
        )
        final = _finish(qm, {**settings.as_dict(), "exclude": res.excluded})
    data_bytes = final.SerializeToString(deterministic=True)
    write_bytes_atomic(out, data_bytes)
    res.size_after = len(data_bytes)
    return res


def _auto(
    q: Quantizer,
    qm: onnx.ModelProto,
    metric: Metric,
    data: CalibData,
    max_drop: float,
    res: QuantizeResult,
    say: Callable[[str], None],
) -> onnx.ModelProto:
    """Greedy fallback: keep the most sensitive nodes in fp32, one more at a time, until the
    metric drop is <= max_drop. Returns the chosen model (the last one tried if none reaches)."""
    assert res.metric_fp32 is not None and res.metric_quantized is not None
    base = res.metric_fp32
    if q.settings.mode == "fp16":
        blocked = fp16_blocked_ops()
        nodes = [n.name for n in q.model.graph.node if n.op_type not in blocked]
    else:
        nodes = candidates(qm, q.pre)
    res.table = sensitivity(q, metric, data, nodes, say)
    excl: list[str] = []
    score = res.metric_quantized
    res.steps.append(([], score))
    for row in res.table:
        if base - score <= max_drop:
            break
        excl.append(row.node)
        qm = q.build(excl)
        score = metric.score(first_output(qm, data))
        res.steps.append((list(excl), score))
        say(_step_line(excl, score, metric.name))
    res.reached = base - score <= max_drop
    res.excluded, res.metric_quantized = excl, score
    return qm


# --- per-layer comparison of a quantized model with its fp32 original -------------------
@dataclass
class LayerDiff:
    name: str  # tensor name in the fp32 model
    node: str  # its producer there
    op: str
    seen_as: str  # tensor read in the quantized model (the DequantizeLinear output if any)
    max_abs: float
    rel: float  # max|q - fp32| / max|fp32|
    sqnr_db: float  # 10 log10(sum fp32^2 / sum (q - fp32)^2): higher is closer
    rms_rel: float = 0.0  # sqrt(sum (q - fp32)^2 / sum fp32^2): relative RMS error
    added: float = 0.0  # rms_rel minus its worst float input's: the error this node adds

    def as_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.name,
            "node": self.node,
            "op": self.op,
            "quantized_tensor": self.seen_as,
            "max_abs_error": self.max_abs,
            "max_rel_error": self.rel,
            "sqnr_db": self.sqnr_db,
            "rms_rel_error": self.rms_rel,
            "rms_rel_error_added": self.added,
        }


@dataclass
class CompareReport:
    reference: str
    samples: int
    layers: list[LayerDiff]
    outputs: list[LayerDiff]
    unmatched: list[str]
    agreement: float | None = None

    def worst(self, n: int = 5) -> list[LayerDiff]:
        """Where int8 diverges most: the nodes that add the most error themselves (a layer
        downstream of a bad one inherits its error; this ranks the cause, not the heirs)."""
        return sorted(self.layers, key=lambda r: -r.added)[:n]

    def as_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "samples": self.samples,
            "top1_agreement": self.agreement,
            "outputs": [r.as_dict() for r in self.outputs],
            "layers": [r.as_dict() for r in self.layers],
            "most_divergent": [r.as_dict() for r in self.worst()],
            "unmatched": self.unmatched,
        }

    def format(self) -> str:
        lines = [
            f"compared with {self.reference} on {self.samples} sample(s), "
            "tensors matched by name through QuantizeLinear/DequantizeLinear pairs"
        ]
        if self.layers:
            w = max(len(r.name) for r in self.layers)
            lines.append(
                f"{'tensor':<{w}}  {'op':<14} {'max abs err':>11} {'rel err':>9} "
                f"{'SQNR dB':>8} {'rms rel':>9} {'added':>9}"
            )
            for r in self.layers:
                lines.append(
                    f"{r.name:<{w}}  {r.op:<14} {r.max_abs:11.4g} {r.rel:9.4g} "
                    f"{r.sqnr_db:8.2f} {r.rms_rel:9.4g} {r.added:9.4g}"
                )
        for r in self.outputs:
            lines.append(
                f"output {r.name}: max abs error {r.max_abs:.4g}, rel {r.rel:.4g}, "
                f"SQNR {r.sqnr_db:.2f} dB"
            )
        if self.agreement is not None:
            lines.append(f"top-1 agreement with the reference: {self.agreement:.4f}")
        worst = [r for r in self.worst(3) if r.added > 0]
        if worst:
            lines.append(
                "diverges most at: "
                + "; ".join(
                    f"node '{r.node}' ({r.op}) output '{r.name}' adds {100 * r.added:.3g}% "
                    "relative RMS error"
                    for r in worst
                )
            )
        if self.unmatched:
            lines.append(
                f"{len(self.unmatched)} fp32 tensor(s) have no counterpart in the "
                f"quantized model (fused or removed): {', '.join(self.unmatched[:8])}"
                f"{' ...' if len(self.unmatched) > 8 else ''}"
            )
        return "\n".join(lines)


def _diff(ref: np.ndarray, got: np.ndarray) -> tuple[float, float, float]:
    r, g = ref.astype(np.float64), got.astype(np.float64)
    err = g - r
    max_abs = float(np.abs(err).max()) if err.size else 0.0
    scale = float(np.abs(r).max()) if r.size else 0.0
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    noise = float((err**2).sum())
    sig = float((r**2).sum())
    sqnr = (
        10 * np.log10(sig / noise) if noise > 0 and sig > 0 else (200.0 if noise == 0 else -200.0)
    )
    return max_abs, rel, float(min(sqnr, 200.0))


def _expose_all(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with every activation a graph output (constants left alone: constant_tensors)."""
    return expose_outputs(model, typed=False)[0]


def first_output(model: onnx.ModelProto | bytes, data: CalibData) -> np.ndarray:
    """The model's first output over the samples, the model run as it is deployed: no
    intermediate tensor exposed, since exposing one keeps onnxruntime from fusing the nodes
    around it, which moves an fp16 model's rounding (and so its top-1 on near ties). Both
    `quantize`'s metric and `verify --reference`'s agreement come from here."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
    first = metric_outputs(m)[0]
    return run_samples(m, data, [first])[first]


def quantized_views(quantized: onnx.ModelProto) -> dict[str, str]:
    """fp32 tensor name -> the tensor consumers read in the quantized model: the output of the
    DequantizeLinear fed by QuantizeLinear(name), which carries the tensor's own rounding."""
    q_of = {n.input[0]: n.output[0] for n in quantized.graph.node if n.op_type == "QuantizeLinear"}
    dq_of = {
        n.input[0]: n.output[0] for n in quantized.graph.node if n.op_type == "DequantizeLinear"
    }
    views = {}
    for name, qo in q_of.items():
        if qo in dq_of:
            views[name] = dq_of[qo]
    return views


def compare_layers(quantized: str | Path, reference: str | Path, data: CalibData) -> CompareReport:
    """Run both models on `data` with every intermediate tensor exposed and compare the fp32
    model's float tensors with their quantized counterparts."""
    from .frontend.loader import load_model

    qm, rm = load_model(quantized), name_nodes(load_model(reference))
    views = quantized_views(qm)
    q_tensors = {o for n in qm.graph.node for o in n.output} | {i.name for i in qm.graph.input}
    ref_out = run_samples(_expose_all(rm), data)
    wanted = {}
    unmatched = []
    producer = {o: n for n in rm.graph.node for o in n.output}
    for n in rm.graph.node:
        for o in n.output:
            if not o or o not in ref_out or ref_out[o].dtype.kind != "f":
                continue
            if o in views:
                wanted[o] = views[o]
            elif o in q_tensors:
                wanted[o] = o
            else:
                unmatched.append(o)
    q_out = run_samples(_expose_all(qm), data, sorted(set(wanted.values())))
    rms: dict[str, float] = {}

    def upstream(name: str, seen: frozenset[str] = frozenset()) -> float:
        """Worst relative RMS error reaching `name`; through tensors with no counterpart (fused
        away) to their own inputs; graph inputs and weights are exact (0)."""
        if name in rms:
            return rms[name]
        p = producer.get(name)
        if p is None or name in seen:
            return 0.0
        return max((upstream(i, seen | {name}) for i in p.input if i), default=0.0)

    layers = []
    unmatched_set = set(unmatched)
    for o, seen_as in wanted.items():
        got = q_out[seen_as]
        if got.shape != ref_out[o].shape or got.dtype.kind != "f":
            unmatched.append(o)
            continue
        max_abs, rel, s = _diff(ref_out[o], got)
        r64 = ref_out[o].astype(np.float64)
        sig = float((r64**2).sum())
        err = float(((got.astype(np.float64) - r64) ** 2).sum())
        rms[o] = float(np.sqrt(err / sig)) if sig > 0 else (0.0 if err == 0 else float("inf"))
        node = producer[o]
        before = max((upstream(i) for i in node.input if i), default=0.0)
        # The quantizer fuses Conv/MatMul + Relu into one node writing the Relu's output:
        # name the whole chain ("fc2+relu2"), whose first node is where the error arises.
        chain = [node]
        while prev := [producer[i] for i in chain[0].input if i in unmatched_set]:
            chain.insert(0, prev[0])
        label = "+".join(n.name for n in chain)
        ops = "+".join(n.op_type for n in chain)
        layers.append(LayerDiff(o, label, ops, seen_as, max_abs, rel, s, rms[o], rms[o] - before))
    outs = [r for r in layers if r.name in {x.name for x in rm.graph.output}]
    agreement = None
    first = rm.graph.output[0].name
    if first in wanted and first in {r.name for r in layers}:
        # as `quantize` measures it (Metric, first_output): both models as deployed
        agreement = Metric(first_output(rm, data)).score(first_output(qm, data))
    return CompareReport(str(reference), data.count, layers, outs, unmatched, agreement)
