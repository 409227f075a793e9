"""Load and check an ONNX model, fix its symbolic dimensions, build the IR.

Every way a file can be wrong ends in one `Onnx2EdgeError` naming the file and what to do.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import external_data_helper

from ..errors import Onnx2EdgeError, UnsupportedError
from ..fsutil import resolve_inside
from ..ir import Graph
from ..ir.expose import expose_outputs
from ..ir.onnx_shapes import infer_shapes as infer_shapes  # re-exported: edit/, tests
from ..ir.onnx_shapes import skeleton
from ..ir.proto import graph_from_model
from ..passes import infer_shapes as infer_shapes_pass
from ..passes.control_flow import check_if_selects, select_runtime_if
from ..passes.lower_contrib import KEPT, LOWERINGS, lower_contrib
from ..passes.specialise import dynamic_tensors, observe_shapes, specialise
from ..pipeline import Phase
from ..pipeline import run as run_phases
from .sequences import SequenceSpec, lower_sequences
from .validate import check_consistency

MIN_OPSET = 7
MAX_OPSET = onnx.defs.onnx_opset_version()
# Domains whose ops onnxruntime implements natively; anything else must come with a function.
KNOWN_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"}


def _all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    yield from external_data_helper._get_all_tensors(model)


def _check_external_data(model: onnx.ModelProto, base_dir: Path, source: Path) -> None:
    """Refuse external-data locations that escape the model's folder, or point past a file's end."""
    for t in _all_tensors(model):
        if not external_data_helper.uses_external_data(t):
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc:
            raise Onnx2EdgeError(
                f"{source}: tensor '{t.name}' uses external data without a location"
            )
        path = resolve_inside(base_dir, loc, f"{source}: external data of tensor '{t.name}'")
        if not path.is_file():
            raise Onnx2EdgeError(
                f"{source}: external data file '{loc}' of tensor '{t.name}' not found next to the model"
            )
        size = path.stat().st_size
        offset = int(info.get("offset", 0) or 0)
        length = int(info.get("length", size - offset) or 0)
        if offset < 0 or length < 0 or offset + length > size:
            raise Onnx2EdgeError(
                f"{source}: external data of tensor '{t.name}' needs bytes {offset}..{offset + length} "
                f"of '{loc}', which has {size}: the file is truncated"
            )


# Preview ops the ONNX spec defines by a function of standard ops (FlexAttention): replaced by
# that function, expanded by onnx itself for the node's attributes and input types.
_EXPANDED_DOMAINS = ("ai.onnx.preview",)


def _expand_preview_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    if not any(n.domain in _EXPANDED_DOMAINS for n in model.graph.node):
        return model
    import onnx.inliner

    out = _copy(model)
    g = out.graph
    nodes = [n for n in g.node if n.domain in _EXPANDED_DOMAINS]
    types = {vi.name: vi.type for vi in (*g.input, *g.value_info, *g.output)}
    types |= {
        t.name: onnx.helper.make_tensor_type_proto(t.data_type, t.dims) for t in g.initializer
    }
    versions = {o.domain: o.version for o in out.opset_import}
    done: set[tuple[str, str]] = set()
    for n in nodes:
        try:
            s = onnx.defs.get_schema(n.op_type, versions.get(n.domain, 1), n.domain)
        except onnx.defs.SchemaError:
            return model  # _check_ops names it
        if not (s.has_function or s.has_context_dependent_function) or not all(
            i in types for i in n.input if i
        ):
            return model
        if (n.domain, n.op_type) in done:
            return model  # two such nodes would need two bodies under one name: not expanded
        done.add((n.domain, n.op_type))
        node = onnx.NodeProto()
        node.CopyFrom(n)
        names = {a.name for a in node.attribute}
        node.attribute.extend(
            v.default_value
            for k, v in s.attributes.items()
            if k not in names and v.default_value.name
        )
        if s.has_context_dependent_function:
            ins = [types[i].SerializeToString() for i in n.input if i]
            body = s.get_context_dependent_function(node.SerializeToString(), ins)
        else:
            body = s.function_body.SerializeToString()
        out.functions.append(onnx.FunctionProto.FromString(body))
        n.ClearField("attribute")
        n.attribute.extend(node.attribute)
    return onnx.inliner.inline_local_functions(out)


def _import_default_domain(model: onnx.ModelProto) -> onnx.ModelProto:
    """A model of ai.onnx.ml or training ops only may import no default-domain opset; one is
    added (no node uses it, so its version only has to be one every tool knows) so the rest of
    the pipeline has its usual opset."""
    domains = {("" if o.domain == "ai.onnx" else o.domain) for o in model.opset_import}
    if "" in domains or not domains & {"ai.onnx.ml", "ai.onnx.preview.training"}:
        return model
    if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model  # default-domain nodes without an opset: _check_opsets refuses it
    out = _copy(model)
    out.opset_import.append(onnx.helper.make_opsetid("", 17))
    return out


def _upgrade_old_opset(model: onnx.ModelProto, source: Path) -> onnx.ModelProto:
    """A model below MIN_OPSET, converted up by onnx's version converter (the adapters are the
    spec's own); unchanged when it cannot convert it, so _check_opsets names the opset."""
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if versions.get("", MIN_OPSET) >= MIN_OPSET:
        return model
    try:
        from onnx import version_converter

        up = version_converter.convert_version(model, MIN_OPSET)
    except Exception:  # noqa: BLE001 - any converter failure: the opset error below stands
        return model
    print(
        f"onnx2edge: note: {source}: opset {versions['']} converted to {MIN_OPSET} "
        "(onnx.version_converter)",
        file=sys.stderr,
    )
    return up


def _check_opsets(model: onnx.ModelProto, source: Path) -> int:
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if "" not in versions:
        raise Onnx2EdgeError(f"{source}: the model imports no default-domain opset")
    opset = versions[""]
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UnsupportedError(
            f"{source}: opset {opset} is not supported (supported: {MIN_OPSET} to {MAX_OPSET}); "
            "convert it with onnx.version_converter.convert_version first"
        )
    return opset


def _check_ops(model: onnx.ModelProto, source: Path, opset: int) -> None:
    """Name every node whose op is not defined at the model's opset, all at once."""
    local = {(f.domain, f.name) for f in model.functions}
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    bad = []
    for i, n in enumerate(model.graph.node):
        domain = "" if n.domain == "ai.onnx" else n.domain
        label = f"node '{n.name or f'#{i}'}' (op {n.op_type}, domain '{domain or 'ai.onnx'}', opset {versions.get(domain, opset)})"
        if (n.domain, n.op_type) in local:
            continue
        if domain not in KNOWN_DOMAINS:
            bad.append(f"{label}: unknown domain")
            continue
        if domain == "com.microsoft":
            if n.op_type not in LOWERINGS and n.op_type not in KEPT:
                bad.append(f"{label}: onnxruntime contrib op not supported by onnx2edge")
            continue
        try:
            onnx.defs.get_schema(n.op_type, versions.get(domain, opset), domain)
        except onnx.defs.SchemaError:
            bad.append(label)
    if bad:
        raise UnsupportedError(
            f"{source}: unknown op{'s' if len(bad) > 1 else ''}: "
            + "; ".join(bad)
            + " — not in the ONNX spec at this opset; replace the node or update the opset import"
        )


def _bad_text(msg: Message, path: str) -> str | None:
    """The path of the first string field that is not valid UTF-8 (protobuf hands those back as
    bytes, which then fail far from here, e.g. in onnx.defs.get_schema)."""
    for field, value in msg.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            items = value if _is_repeated(field) else [value]
            if any(not isinstance(v, str) for v in items):
                return f"{path}.{field.name}"
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if _is_repeated(field) else [value]
            for i, v in enumerate(items):
                where = (
                    f"{path}.{field.name}[{i}]" if _is_repeated(field) else f"{path}.{field.name}"
                )
                found = _bad_text(v, where)
                if found:
                    return found
    return None


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


_T = onnx.TensorProto
# The typed field each data type keeps its values in when not in raw_data (onnx.proto3's
# TensorProto comments), and how many entries one element takes there.
_FIELD = {
    _T.FLOAT: ("float_data", 1),
    _T.COMPLEX64: ("float_data", 2),
    _T.DOUBLE: ("double_data", 1),
    _T.COMPLEX128: ("double_data", 2),
    _T.INT64: ("int64_data", 1),
    _T.UINT32: ("uint64_data", 1),
    _T.UINT64: ("uint64_data", 1),
    _T.STRING: ("string_data", 1),
}
_PACKED_4BIT = {_T.INT4, _T.UINT4} | ({_T.FLOAT4E2M1} if hasattr(_T, "FLOAT4E2M1") else set())


def _expected_entries(t: onnx.TensorProto, count: int) -> tuple[str, int]:
    if t.HasField("raw_data"):
        if t.data_type == _T.STRING:
            return "raw_data", -1  # strings never use raw_data; the checker reports it
        bits = (
            4
            if t.data_type in _PACKED_4BIT
            else 8 * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        )
        return "raw_data", (count * bits + 7) // 8
    field, per = _FIELD.get(t.data_type, ("int32_data", 1))
    if t.data_type in _PACKED_4BIT:
        return field, (count + 1) // 2
    return field, count * per


def _check_tensors(model: onnx.ModelProto, source: Path) -> None:
    """Every tensor's data type is defined and its data has as many values as its dims say (a
    mismatch otherwise surfaces as a reshape error far from the file)."""
    known = set(_T.DataType.values()) - {_T.UNDEFINED}
    for t in _all_tensors(model):
        if t.data_type not in known:
            raise Onnx2EdgeError(
                f"{source}: tensor '{t.name}' has data type {t.data_type}, which ONNX does not "
                "define; the file is corrupt or written by an incompatible tool"
            )
        if external_data_helper.uses_external_data(t) or t.HasField("segment"):
            continue
        if any(d < 0 for d in t.dims):
            raise Onnx2EdgeError(
                f"{source}: tensor '{t.name}' has a negative dimension {list(t.dims)}"
            )
        count = int(np.prod(t.dims, dtype=object))
        field, want = _expected_entries(t, count)
        got = len(t.raw_data) if field == "raw_data" else len(getattr(t, field))
        if want >= 0 and got != want:
            unit = "bytes" if field == "raw_data" else "values"
            dims = "x".join(map(str, t.dims)) or "scalar"
            raise Onnx2EdgeError(
                f"{source}: tensor '{t.name}' ({dims}) needs {want} {unit} of {field} but has "
                f"{got}: the file is corrupt or was edited inconsistently"
            )


def _import_used_domains(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's transformer optimizer writes com.microsoft nodes without importing the
    domain; onnxruntime accepts that (version 1), onnx's checker does not. Add the import."""
    have = {o.domain for o in model.opset_import}
    used = {n.domain for n in model.graph.node} - have - {"", "ai.onnx"}
    if "com.microsoft" not in used:
        return model
    model = _copy(model)
    model.opset_import.add(domain="com.microsoft", version=1)
    return model


def read_model_proto(path: str | Path, *, load_external: bool = True) -> onnx.ModelProto:
    """Parse the file; check (and optionally load) its external data. No op or opset checks."""
    source = Path(path)
    if not source.exists():
        raise Onnx2EdgeError(f"{source}: no such file")
    if not source.is_file():
        raise Onnx2EdgeError(f"{source}: not a file")
    from ..importers import import_model, model_format

    if model_format(source) is not None:
        # TFLite / OpenVINO IR: converted on the way in, so every command reads them.
        return import_model(source)
    model = parse_model_bytes(source.read_bytes(), source)
    base_dir = source.resolve().parent
    _check_external_data(model, base_dir, source)
    if load_external:
        try:
            external_data_helper.load_external_data_for_model(model, str(base_dir))
        except (OSError, ValueError) as e:
            raise Onnx2EdgeError(f"{source}: cannot read external data: {e}") from e
    return model


def parse_model_bytes(data: bytes, source: Path) -> onnx.ModelProto:
    """Bytes -> ModelProto, refusing what is not a readable ONNX model. No op or opset checks."""
    if not data:
        raise Onnx2EdgeError(f"{source}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise Onnx2EdgeError(
            f"{source}: not a valid ONNX model (truncated or corrupt protobuf: {e}); re-export it"
        ) from e
    if model.ir_version < 3 or not model.HasField("graph"):
        raise Onnx2EdgeError(f"{source}: not an ONNX model (no graph or IR version)")
    bad = _bad_text(model, "model")
    if bad:
        raise Onnx2EdgeError(f"{source}: {bad} is not valid UTF-8 text: the file is corrupt")
    _check_tensors(model, source)
    return model


def load_model(
    path: str | Path | onnx.ModelProto, *, check: bool = True, load_external: bool = True
) -> onnx.ModelProto:
    """Read, validate and return a model with its external data loaded (or, with
    `load_external=False`, checked but left on disk for `graph_from_model` to map).

    An in-memory ModelProto (already carrying its weights) is checked the same way.
    """
    if isinstance(path, onnx.ModelProto):
        source, model = Path(path.graph.name or "model"), path
    else:
        source = Path(path)
        model = read_model_proto(source, load_external=load_external)
    model = _expand_preview_ops(model)
    model = _upgrade_old_opset(_import_default_domain(model), source)
    opset = _check_opsets(model, source)
    model = _import_used_domains(model)
    if check:
        _check_ops(model, source, opset)
        bare = skeleton(model, max_elements=1 << 16)
        try:
            onnx.checker.check_model(bare)
        except (onnx.checker.ValidationError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise Onnx2EdgeError(f"{source}: invalid ONNX model: {first}") from e
        check_consistency(bare, str(source))
    return model


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse `NAME=1x3x224x224` (or `NAME=1,3,224,224`) items."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        if not sep or not name or not dims:
            raise Onnx2EdgeError(
                f"bad --input-shape '{spec}': expected NAME=DIMS, e.g. input=1x3x224x224"
            )
        try:
            shape = tuple(int(d) for d in dims.replace(",", "x").split("x"))
        except ValueError:
            raise Onnx2EdgeError(
                f"bad --input-shape '{spec}': dimensions must be integers, e.g. input=1x3x224x224"
            ) from None
        if any(d <= 0 for d in shape):
            raise Onnx2EdgeError(f"bad --input-shape '{spec}': dimensions must be positive")
        shapes[name] = shape
    return shapes


def _refuse_symbolic(name: str, tt: onnx.TypeProto.Tensor) -> None:
    """Symbolic dimensions past the first one cannot default: the error spells out the
    `--input-shape` to give, with the unknown dims by name (the batch shown as 1)."""
    dims = list(tt.shape.dim)
    unknown = [d for d, dim in enumerate(dims) if d > 0 and not _declared_static(dim)]
    unknown = [d for d in unknown if not (dims[d].HasField("dim_value") and dims[d].dim_value == 0)]
    if not unknown:
        return

    def label(d: int) -> str:
        dim = dims[d]
        if dim.HasField("dim_value") and dim.dim_value > 0:
            return str(dim.dim_value)
        if d == 0:
            return "1"
        p = dim.dim_param
        return p if p and all(c.isalnum() or c == "_" for c in p) else f"D{d}"

    names = [label(d) for d in unknown]
    shape = "x".join(label(d) for d in range(len(dims)))
    raise Onnx2EdgeError(
        f"input '{name}' has symbolic dimension{'s' if len(unknown) > 1 else ''} "
        + ", ".join(f"{d} ('{n}')" for d, n in zip(unknown, names, strict=True))
        + f" with no size to assume (only a leading batch dimension defaults to 1): give "
        f"--input-shape {name}={shape} with {', '.join(names)} as numbers"
    )


def fix_input_shapes(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]],
    *,
    default_dim: int = 1,
    quiet: bool = False,
) -> onnx.ModelProto:
    """Return a copy whose graph inputs have static shapes.

    Dims given by the user win. A symbolic leading dimension (the batch) becomes
    `default_dim`, with a notice on stderr so the choice is never silent; any other symbolic
    dimension (a height, a width, a sequence length) has no size to guess -- 1 would silently
    give a different model -- so it is an error naming the `--input-shape` to give.
    """
    model = _copy(model)
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name in shapes:
        if name not in inputs:
            raise Onnx2EdgeError(
                f"--input-shape names '{name}', which is not an input of the model "
                f"(inputs: {', '.join(inputs) or 'none'})"
            )
    for name, vi in inputs.items():
        tt = vi.type.tensor_type
        if name in shapes:
            want = shapes[name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(want):
                raise Onnx2EdgeError(
                    f"--input-shape {name}={'x'.join(map(str, want))} has rank {len(want)}, "
                    f"but input '{name}' has rank {len(tt.shape.dim)}"
                )
            for d, (dim, w) in enumerate(zip(tt.shape.dim, want, strict=False)):
                if _declared_static(dim) and dim.dim_value != w:
                    raise Onnx2EdgeError(
                        f"--input-shape {name}: dimension {d} is fixed to {dim.dim_value} by the model, not {w}"
                    )
            tt.ClearField("shape")
            for w in want:
                tt.shape.dim.add().dim_value = int(w)
            continue
        _refuse_symbolic(name, tt)
        for d, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value == 0:
                # empty unless --input-shape says otherwise (some exporters write 0 for dynamic)
                if not quiet:
                    print(
                        f"onnx2edge: note: input '{name}' dimension {d} is declared 0 (empty); "
                        f"if it is dynamic, give --input-shape {name}=...",
                        file=sys.stderr,
                    )
                continue
            if not _declared_static(dim):
                label = dim.dim_param or (str(dim.dim_value) if dim.HasField("dim_value") else "?")
                dim.Clear()
                dim.dim_value = default_dim
                if not quiet:
                    print(
                        f"onnx2edge: note: input '{name}' dimension {d} ('{label}') set to "
                        f"{default_dim}; use --input-shape {name}=... to choose",
                        file=sys.stderr,
                    )
    # Stale intermediate shapes would contradict the new input shapes.
    del model.graph.value_info[:]
    return model


def _declared_static(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Exporters write -1, 0, '' or '?' for a dimension they leave dynamic."""
    return dim.HasField("dim_value") and dim.dim_value > 0


def parse_fixed_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """Parse `NAME=VALUE` items: a number, a comma list, or a .npy file."""
    fixed: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise Onnx2EdgeError(
                f"bad --fix-input '{spec}': expected NAME=VALUE (a number, a comma list or "
                "FILE.npy), e.g. sr=16000"
            )
        if text.endswith(".npy"):
            try:
                fixed[name] = np.load(text, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise Onnx2EdgeError(f"--fix-input {name}: cannot read '{text}': {e}") from e
            continue
        try:
            vals = [float(v) for v in text.split(",")]
        except ValueError:
            raise Onnx2EdgeError(
                f"bad --fix-input '{spec}': VALUE must be a number, a comma list or FILE.npy"
            ) from None
        arr = np.array(vals)
        fixed[name] = arr.reshape(()) if "," not in text else arr
    return fixed


def bind_inputs(model: onnx.ModelProto, fixed: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """Return a copy where each fixed input is an initializer (so it folds; it leaves the API).

    The value takes the input's declared dtype; its shape is the declared one when the sizes
    agree (a scalar or a flat list may be given for a [1] or [2, 3] input)."""
    if not fixed:
        return model
    from onnx import numpy_helper

    model = _copy(model)
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, value in fixed.items():
        if name not in inputs:
            raise Onnx2EdgeError(
                f"--fix-input names '{name}', which is not an input of the model "
                f"(inputs: {', '.join(inputs) or 'none'})"
            )
        arr = _fixed_value(name, np.asarray(value), inputs[name].type.tensor_type)
        model.graph.initializer.append(numpy_helper.from_array(arr, name))
        model.graph.input.remove(inputs[name])
    model.ir_version = max(model.ir_version, 4)  # initializers need not be inputs from IR 4
    return model


def _fixed_value(name: str, arr: np.ndarray, tt: onnx.TypeProto.Tensor) -> np.ndarray:
    from onnx.helper import tensor_dtype_to_np_dtype

    try:
        dtype = np.dtype(tensor_dtype_to_np_dtype(tt.elem_type))
    except (KeyError, TypeError, ValueError):
        raise Onnx2EdgeError(f"--fix-input {name}: the input is not a tensor") from None
    if dtype.kind in "iub" and arr.dtype.kind == "f" and not np.all(np.round(arr) == arr):
        raise Onnx2EdgeError(f"--fix-input {name}: input '{name}' is {dtype}, not a fraction")
    arr = arr.astype(dtype)
    if not tt.HasField("shape"):
        return arr
    dims = [d.dim_value if _declared_static(d) else None for d in tt.shape.dim]
    if len(dims) == arr.ndim and all(
        d is None or d == s for d, s in zip(dims, arr.shape, strict=True)
    ):
        return arr
    if all(d is not None for d in dims) and int(np.prod(dims, dtype=np.int64)) == arr.size:
        return arr.reshape(dims)
    if len(dims) == 1 and arr.ndim == 0:
        return arr.reshape(1)
    raise Onnx2EdgeError(
        f"--fix-input {name}: value of shape {list(arr.shape)} does not fit input '{name}' "
        f"of shape {[d if d is not None else '?' for d in dims]}"
    )


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def strip_output_shapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """Declared output shapes are hints (exporters get them wrong: a declared [1, seqlen] that
    is really [32, 1, 8210]); drop them so inference decides, keep them to report conflicts."""
    model = _copy(model)
    declared = {}
    for o in model.graph.output:
        tt = o.type.tensor_type
        if o.type.HasField("tensor_type") and tt.HasField("shape"):
            # 0 stays a size here: an empty output is real (only inputs never are empty)
            declared[o.name] = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                for d in tt.shape.dim
            )
            tt.ClearField("shape")
    return model, declared


def _note_declared(graph: Graph, declared: Mapping[str, tuple], quiet: bool) -> None:
    for name, want in declared.items():
        t = graph.type_of(name)
        if quiet or t is None or not t.is_static:
            continue
        got = t.static_shape
        if _contradicts(got, want):
            print(
                f"onnx2edge: note: output '{name}' is declared {[w or '?' for w in want]} but "
                f"is {list(got)}; using {list(got)}",
                file=sys.stderr,
            )


def ort_observer(  # noqa: ANN201 - see passes.specialise
    model: onnx.ModelProto, graph: Graph, base_dir: Path | None = None
):
    """An `Observer` for `observe_shapes`: runs the (input-fixed) model once in onnxruntime
    on a sample input (normal floats, zero integers: valid indices) with the asked-for node
    outputs as graph outputs. External data (left on disk by `load`) is read only then."""

    def observe(names: list[str]) -> dict[str, np.ndarray] | None:
        import onnxruntime as ort

        m = _copy(model)
        if base_dir is not None:
            external_data_helper.load_external_data_for_model(m, str(base_dir))
        m, _ = expose_outputs(m, names, typed=False, constants=True)
        m.ir_version = min(m.ir_version, 10)
        rng = np.random.default_rng(0)
        feeds = {}
        for name in graph.inputs:
            t = graph.type_of(name)
            if t is None or not t.is_static or t.dtype.kind not in "fiub":
                return None
            shape = t.static_shape
            if t.dtype.kind == "f":
                feeds[name] = rng.standard_normal(shape).astype(t.dtype)
            else:
                feeds[name] = np.zeros(shape, t.dtype)
        try:
            opts = ort.SessionOptions()
            # fatal only: a model onnxruntime cannot load is handled below, its error log
            # would only interleave with onnx2edge's own message
            opts.log_severity_level = 4
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(
                m.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            outs = [o.name for o in sess.get_outputs()]
            return dict(zip(outs, sess.run(outs, feeds), strict=True))
        except Exception:  # noqa: BLE001 - a model onnxruntime cannot run is simply not observed
            return None

    return observe


@dataclass(frozen=True)
class LoadOptions:
    """`load`'s options, as the frontend phases read them."""

    input_shapes: Mapping[str, Sequence[int]] = dataclasses.field(default_factory=dict)
    fixed_inputs: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    quiet: bool = False
    sequence_inputs: Mapping[str, SequenceSpec] | None = None


@dataclass
class Loaded:
    """The frontend phases' results, one field each (the names FRONTEND_PIPELINE declares)."""

    model: onnx.ModelProto | None = None  # read: checked, external data left on disk
    base_dir: Path | None = None
    bound: onnx.ModelProto | None = None  # fixed inputs bound as constants
    tensor_model: onnx.ModelProto | None = None  # sequences and optionals made tensors
    shaped: onnx.ModelProto | None = None  # static input shapes
    bare: onnx.ModelProto | None = None  # output shapes stripped (kept in `declared`)
    declared: dict = dataclasses.field(default_factory=dict)
    ir: Graph | None = None  # IR, contrib ops lowered, defaults spelled out
    specialised: Graph | None = None  # folded and inferred to a fixed point, Ifs inlined
    observed: Graph | None = None  # shapes inference left open, from onnxruntime
    graph: Graph | None = None  # the frontend's result


def _read(source: str | Path | onnx.ModelProto, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    # External data stays on disk, memory-mapped by graph_from_model: a 2 GB model is then
    # neither copied into the protobuf nor copied again with every ModelProto copy below.
    base_dir = None if isinstance(source, onnx.ModelProto) else Path(source).resolve().parent
    return {"model": load_model(source, load_external=False), "base_dir": base_dir}


def _bind(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    return {"bound": bind_inputs(r.model, o.fixed_inputs)}


def _sequences(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    return {"tensor_model": _present_optional_inputs(lower_sequences(r.bound, o.sequence_inputs))}


def _input_shapes(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    return {"shaped": fix_input_shapes(r.tensor_model, o.input_shapes, quiet=o.quiet)}


def _strip_outputs(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    bare, declared = strip_output_shapes(r.shaped)
    return {"bare": bare, "declared": declared}


def _to_ir(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    graph = _spell_out_defaults(lower_contrib(graph_from_model(r.bare, base_dir=r.base_dir)))
    # The IR never lists initializers as inputs, which IR 3 requires (inference ignores them).
    return {"ir": graph.replace(ir_version=max(graph.ir_version, 4))}


def _specialise(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    graph = specialise(r.ir)
    # each round makes the Ifs nested one level deeper in branches top-level (or folds them)
    while any(n.op_type == "If" for n in graph.nodes):
        selected = select_runtime_if(graph)
        if selected is graph:
            break
        graph = specialise(selected)
    return {"specialised": graph}


def _observe(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    graph = _declared_fallback(r.specialised, r.declared)
    if dynamic_tensors(graph) or declared_conflict(graph, r.declared):
        graph = observe_shapes(graph, ort_observer(r.shaped, graph, r.base_dir), quiet=o.quiet)
    return {"observed": graph}


def _check_selects(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    check_if_selects(r.observed)
    _note_declared(r.observed, r.declared, o.quiet)
    return {"graph": r.observed}


def _infer_only(source: Any, o: LoadOptions, r: Loaded) -> dict[str, Any]:
    return {"graph": infer_shapes_pass(r.ir)}


_FRONT = (
    Phase("read", _read, provides=("model", "base_dir")),
    Phase("bind_inputs", _bind, requires=("model",), provides=("bound",)),
    Phase("lower_sequences", _sequences, requires=("bound",), provides=("tensor_model",)),
    Phase("fix_input_shapes", _input_shapes, requires=("tensor_model",), provides=("shaped",)),
    Phase(
        "strip_output_shapes", _strip_outputs, requires=("shaped",), provides=("bare", "declared")
    ),
    Phase("to_ir", _to_ir, requires=("bare", "base_dir"), provides=("ir",)),
)
# The whole frontend: file -> checked model -> fixed inputs -> sequences and optionals to
# tensors -> static input shapes -> IR -> contrib ops lowered -> static specialisation (fold
# + infer to a fixed point, control flow inlined) -> shapes checked against onnxruntime.
FRONTEND_PIPELINE: tuple[Phase, ...] = (
    *_FRONT,
    Phase("specialise", _specialise, requires=("ir",), provides=("specialised",)),
    Phase(
        "observe_shapes",
        _observe,
        requires=("specialised", "declared", "shaped", "base_dir"),
        provides=("observed",),
    ),
    Phase(
        "check_if_selects", _check_selects, requires=("observed", "declared"), provides=("graph",)
    ),
)
# load(fold=False): the IR with onnx's shape inference only
UNFOLDED_PIPELINE: tuple[Phase, ...] = (
    *_FRONT,
    Phase("infer_shapes", _infer_only, requires=("ir",), provides=("graph",)),
)


def load(
    path: str | Path | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fixed_inputs: Mapping[str, np.ndarray] | None = None,
    fold: bool = True,
    quiet: bool = False,
    sequence_inputs: Mapping[str, SequenceSpec] | None = None,
) -> Graph:
    """The whole frontend (FRONTEND_PIPELINE, or UNFOLDED_PIPELINE without `fold`).
    `sequence_inputs`: each sequence input's element dtypes and shapes, None for an absent
    optional (frontend/sequences.py)."""
    opts = LoadOptions(input_shapes or {}, fixed_inputs or {}, quiet, sequence_inputs)
    phases = FRONTEND_PIPELINE if fold else UNFOLDED_PIPELINE
    graph = run_phases(phases, Loaded(), path, opts).graph
    assert graph is not None
    return graph


# Attributes onnx's shape inference reads with another default than the op's schema: spelled
# out, so inference and every later pass see the schema's meaning (STFT's inference takes a
# missing `onesided` as 0, its schema default is 1).
_DEFAULTS_TO_SPELL = {"STFT": {"onesided": 1}}


def _spell_out_defaults(graph: Graph) -> Graph:
    from ..ir import Attr

    nodes = []
    for n in graph.nodes:
        add = {
            k: Attr(onnx.AttributeProto.INT, v)
            for k, v in _DEFAULTS_TO_SPELL.get(n.op_type, {}).items()
            if n.domain in ("", "ai.onnx") and k not in n.attrs
        }
        nodes.append(n.replace(attrs={**n.attrs, **add}) if add else n)
    return graph.replace(nodes=tuple(nodes))


def _present_optional_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Graph inputs of type optional(tensor) become plain tensor inputs: generated code always
    receives them (an absent value has no form in a C buffer). OptionalHasElement and
    OptionalGetElement take tensors from opset 18, so older models are left as they are."""
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    opt = [
        i
        for i in model.graph.input
        if i.type.HasField("optional_type")
        and i.type.optional_type.elem_type.HasField("tensor_type")
    ]
    if not opt or versions.get("", 0) < 18:
        return model
    out = _copy(model)
    for vi in out.graph.input:
        if vi.type.HasField("optional_type") and vi.type.optional_type.elem_type.HasField(
            "tensor_type"
        ):
            tensor = onnx.TypeProto()
            tensor.CopyFrom(vi.type.optional_type.elem_type)
            vi.type.CopyFrom(tensor)
    return out


def _declared_fallback(graph: Graph, declared: Mapping[str, tuple]) -> Graph:
    """A graph output nothing else could make static takes its declared static shape (the
    hint is all there is, e.g. a Resize whose scales arrive at run time)."""
    from ..ir import TensorType, Value

    values = dict(graph.values)
    for name, want in declared.items():
        t = graph.type_of(name)
        if t is None or t.is_static or None in want or not t.elem_type:
            continue
        if t.shape is not None and len(t.shape) != len(want):
            continue
        values[name] = Value(name, TensorType(t.elem_type, tuple(int(w) for w in want)))
    return graph.replace(values=values) if values != dict(graph.values) else graph


def declared_conflict(graph: Graph, declared: Mapping[str, tuple]) -> bool:
    for name, want in declared.items():
        t = graph.type_of(name)
        if t is None or not t.is_static:
            return True
        if _contradicts(t.static_shape, want):
            return True
    return False


def _contradicts(got: tuple[int, ...], want: tuple) -> bool:
    return len(got) != len(want) or any(
        w is not None and w != g for w, g in zip(want, got, strict=True)
    )
