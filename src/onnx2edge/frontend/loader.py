"""Load and check an ONNX model, fix its symbolic dimensions, build the IR.

Every way a file can be wrong ends in one `Onnx2EdgeError` naming the file and what to do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import external_data_helper

from ..errors import Onnx2EdgeError, UnsupportedError
from ..fsutil import resolve_inside
from ..ir import Graph
from ..ir.proto import graph_from_model
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
                where = f"{path}.{field.name}[{i}]" if _is_repeated(field) else f"{path}.{field.name}"
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
        bits = 4 if t.data_type in _PACKED_4BIT else 8 * onnx.helper.tensor_dtype_to_np_dtype(
            t.data_type
        ).itemsize
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
            raise Onnx2EdgeError(f"{source}: tensor '{t.name}' has a negative dimension {list(t.dims)}")
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


def read_model_proto(path: str | Path, *, load_external: bool = True) -> onnx.ModelProto:
    """Parse the file; check (and optionally load) its external data. No op or opset checks."""
    source = Path(path)
    if not source.exists():
        raise Onnx2EdgeError(f"{source}: no such file")
    if not source.is_file():
        raise Onnx2EdgeError(f"{source}: not a file")
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
    opset = _check_opsets(model, source)
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


def fix_input_shapes(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]],
    *,
    default_dim: int = 1,
    quiet: bool = False,
) -> onnx.ModelProto:
    """Return a copy whose graph inputs have static shapes.

    Dims given by the user win; remaining symbolic dims become `default_dim` (batch 1), with
    a notice on stderr so the choice is never silent.
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
                if dim.HasField("dim_value") and dim.dim_value != w:
                    raise Onnx2EdgeError(
                        f"--input-shape {name}: dimension {d} is fixed to {dim.dim_value} by the model, not {w}"
                    )
            tt.ClearField("shape")
            for w in want:
                tt.shape.dim.add().dim_value = int(w)
            continue
        for d, dim in enumerate(tt.shape.dim):
            if not dim.HasField("dim_value"):
                label = dim.dim_param or "?"
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


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def skeleton(model: onnx.ModelProto, max_elements: int = 64) -> onnx.ModelProto:
    """The model without its large weights: they become typed graph inputs.

    Shape inference and the checker need only their types; serialising hundreds of MB of
    weights through protobuf for them is what made conversion of big models slow.
    """
    from onnx import helper

    m = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if model.HasField(f):
            setattr(m, f, getattr(model, f))
    m.opset_import.extend(model.opset_import)
    m.metadata_props.extend(model.metadata_props)
    m.functions.extend(model.functions)
    g, src = m.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    listed = {vi.name for vi in src.input}
    g.input.extend(src.input)
    for t in src.initializer:
        # External tensors are never kept: their data is not loaded (the frontend maps it).
        small = int(np.prod(t.dims, dtype=np.int64)) <= max_elements
        if small and not external_data_helper.uses_external_data(t):
            g.initializer.append(t)
        elif t.name not in listed:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's shape inference with data propagation (folds Shape->Gather->... dims).

    Runs on the weightless skeleton and copies the inferred shapes back."""
    try:
        inferred = onnx.shape_inference.infer_shapes(
            skeleton(model), check_type=False, strict_mode=False, data_prop=True
        )
    except Exception as e:  # noqa: BLE001 - onnx raises several unrelated types here
        raise Onnx2EdgeError(f"shape inference failed: {str(e).splitlines()[0]}") from e
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    by_name = {o.name: o for o in inferred.graph.output}
    for o in out.graph.output:
        if o.name in by_name:
            o.CopyFrom(by_name[o.name])
    return out


def load(
    path: str | Path | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fold: bool = True,
    quiet: bool = False,
) -> Graph:
    """The whole frontend: file -> checked model -> static input shapes -> IR -> folded IR."""
    from ..passes import fold_constants
    from ..passes import infer_shapes as infer_shapes_pass

    # External data stays on disk, memory-mapped by graph_from_model: a 2 GB model is then
    # neither copied into the protobuf nor copied again with every ModelProto copy below.
    model = load_model(path, load_external=False)
    base_dir = None if isinstance(path, onnx.ModelProto) else Path(path).resolve().parent
    model = fix_input_shapes(model, input_shapes or {}, quiet=quiet)
    graph = graph_from_model(infer_shapes(model), base_dir=base_dir)
    if fold:
        graph = infer_shapes_pass(fold_constants(graph))
    return graph
