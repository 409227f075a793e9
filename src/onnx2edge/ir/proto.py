"""Conversion between onnx.ModelProto and the IR, both ways.

`graph_from_model` is the frontend's last step; `model_from_graph` re-emits ONNX, which is how
`verify` checks the frontend and the passes against onnxruntime, and how passes that need
onnx's own machinery (shape inference, the reference evaluator) call it.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, external_data_helper, helper, numpy_helper

from .graph import Attr, Graph, Node, TensorType, Value

# onnxruntime 1.31 refuses IR versions above 13; onnx 1.23 writes 14 by default.
MAX_IR_VERSION = 13


def _type_from_proto(tp: onnx.TypeProto) -> TensorType | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return TensorType(tt.elem_type, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorType(tt.elem_type, tuple(dims))


def _attr_from_proto(a: AttributeProto) -> Attr:
    if a.type == AttributeProto.TENSOR:
        return Attr(a.type, numpy_helper.to_array(a.t))
    if a.type == AttributeProto.TENSORS:
        return Attr(a.type, [numpy_helper.to_array(t) for t in a.tensors])
    value = helper.get_attribute_value(a)
    if a.type == AttributeProto.STRING:
        value = value.decode("utf-8", errors="surrogateescape")
    elif a.type == AttributeProto.STRINGS:
        value = [v.decode("utf-8", errors="surrogateescape") for v in value]
    elif a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        value = list(value)
    return Attr(a.type, value)


def _attr_to_proto(name: str, a: Attr) -> AttributeProto:
    value = a.value
    if a.type == AttributeProto.TENSOR:
        value = numpy_helper.from_array(np.asarray(value))
    elif a.type == AttributeProto.TENSORS:
        value = [numpy_helper.from_array(np.asarray(v)) for v in value]
    elif a.type == AttributeProto.STRING:
        value = value.encode("utf-8", errors="surrogateescape")
    elif a.type == AttributeProto.STRINGS:
        value = [v.encode("utf-8", errors="surrogateescape") for v in value]
    return helper.make_attribute(name, value, attr_type=a.type)


def node_from_proto(p: onnx.NodeProto, name: str | None = None) -> Node:
    return Node(
        name=name if name is not None else p.name,
        op_type=p.op_type,
        inputs=tuple(p.input),
        outputs=tuple(p.output),
        attrs={a.name: _attr_from_proto(a) for a in p.attribute},
        domain="" if p.domain == "ai.onnx" else p.domain,
        doc_string=p.doc_string,
    )


def node_to_proto(n: Node) -> onnx.NodeProto:
    p = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name, domain=n.domain)
    p.attribute.extend(_attr_to_proto(k, a) for k, a in n.attrs.items())
    if n.doc_string:
        p.doc_string = n.doc_string
    return p


def _unique_node_names(nodes: list[onnx.NodeProto]) -> list[str]:
    """ONNX allows empty or repeated node names; the IR needs unique ones for messages and
    generated identifiers. Named nodes keep their name; the rest get `<op>_<index>`."""
    seen: set[str] = set()
    names = []
    for i, p in enumerate(nodes):
        name = p.name or f"{p.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        names.append(name)
    return names


def _mapped(t: onnx.TensorProto, base_dir: Path) -> np.ndarray | None:
    """A read-only memory map of an external tensor stored as plain little-endian values, or
    None when it must be decoded (e.g. sub-byte types). The loader has already checked that
    the location stays inside `base_dir` and that the file is long enough."""
    if not external_data_helper.uses_external_data(t):
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    except (KeyError, TypeError, ValueError):
        return None
    shape = tuple(t.dims)
    count = int(np.prod(shape, dtype=np.int64))
    info = {e.key: e.value for e in t.external_data}
    if dtype.kind not in "fiub" or dtype.itemsize * 8 != _storage_bits(t.data_type) or count == 0:
        return None
    mapped = np.memmap(
        base_dir / info["location"],
        dtype=dtype.newbyteorder("<"),
        mode="r",
        offset=int(info.get("offset", 0) or 0),
        shape=shape,
    )
    # A plain read-only ndarray over the map: passes that would write to it fail loudly.
    return mapped.view(np.ndarray).astype(dtype, copy=False)


def release_pages(arr: np.ndarray | None) -> None:
    """Drop the resident pages of a memory-mapped initializer once a backend has made what it
    needs of it; they are read from the file again if touched. This is what keeps converting a
    2 GB model near 1x its size in memory instead of 2x (mapped original + packed copy)."""
    base = arr
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def _storage_bits(data_type: int) -> int:
    """Bits one element takes in raw_data (sub-byte types pack, so they are never mapped)."""
    packed = {onnx.TensorProto.INT4, onnx.TensorProto.UINT4}
    packed |= {
        getattr(onnx.TensorProto, n) for n in ("FLOAT4E2M1",) if hasattr(onnx.TensorProto, n)
    }
    if data_type in packed:
        return 4
    return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize * 8


def _initializer(t: onnx.TensorProto, base_dir: Path | None) -> np.ndarray:
    mapped = _mapped(t, base_dir) if base_dir is not None else None
    if mapped is not None:
        return mapped
    if base_dir is not None and external_data_helper.uses_external_data(t):
        loaded = onnx.TensorProto()
        loaded.CopyFrom(t)
        external_data_helper.load_external_data_for_tensor(loaded, str(base_dir))
        loaded.data_location = onnx.TensorProto.DEFAULT
        del loaded.external_data[:]
        return numpy_helper.to_array(loaded)
    return numpy_helper.to_array(t)


def graph_from_model(model: onnx.ModelProto, base_dir: Path | None = None) -> Graph:
    """Build the IR from a (shape-inferred) model. External data is either already loaded, or
    (with `base_dir`) memory-mapped from the files next to the model, read-only."""
    g = model.graph
    inits: dict[str, np.ndarray] = {t.name: _initializer(t, base_dir) for t in g.initializer}
    for sp in g.sparse_initializer:
        dense = numpy_helper.to_array(sp.values)
        full = np.zeros(tuple(sp.dims), dtype=dense.dtype)
        idx = numpy_helper.to_array(sp.indices)
        if idx.ndim == 1:
            full.reshape(-1)[idx] = dense
        else:
            full[tuple(idx.T)] = dense
        inits[sp.values.name] = full
    values: dict[str, Value] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        values[vi.name] = Value(vi.name, _type_from_proto(vi.type))
    names = _unique_node_names(list(g.node))
    return Graph(
        name=g.name or "model",
        nodes=tuple(node_from_proto(p, nm) for p, nm in zip(g.node, names, strict=True)),
        inputs=tuple(vi.name for vi in g.input if vi.name not in inits),
        outputs=tuple(vi.name for vi in g.output),
        values=values,
        initializers=inits,
        opset_imports={
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import
        },
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        model_doc_string=model.doc_string,
        metadata={p.key: p.value for p in model.metadata_props},
        functions=tuple(model.functions),
        value_docs={vi.name: vi.doc_string for vi in (*g.input, *g.output) if vi.doc_string},
    )


def _value_info(name: str, t: TensorType | None) -> onnx.ValueInfoProto:
    if t is None:
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(
        name, t.elem_type, None if t.shape is None else list(t.shape)
    )


def model_from_graph(
    graph: Graph, *, value_info: bool = True, skeleton: bool = False
) -> onnx.ModelProto:
    """Emit ONNX for the IR (weights embedded), loadable by the onnxruntime we depend on.

    `skeleton=True` turns large initializers into typed graph inputs: shape inference needs
    only their types, and copying hundreds of MB of weights through protobuf is what makes it
    slow on VGG-sized models.
    """
    small = {k: v for k, v in graph.initializers.items() if not skeleton or np.size(v) <= 64}
    inits = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in small.items()]
    weight_inputs = [k for k in graph.initializers if k not in small]
    io = set(graph.inputs) | set(graph.outputs)
    g = helper.make_graph(
        [node_to_proto(n) for n in graph.nodes],
        graph.name,
        [_value_info(n, graph.type_of(n)) for n in (*graph.inputs, *weight_inputs)],
        [_value_info(n, graph.type_of(n)) for n in graph.outputs],
        initializer=inits,
        value_info=[
            _value_info(k, v.type)
            for k, v in graph.values.items()
            if value_info and k not in io and k not in graph.initializers and v.type is not None
        ],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()],
        producer_name=graph.producer_name or "onnx2edge",
        producer_version=graph.producer_version,
        doc_string=graph.model_doc_string,
        functions=list(graph.functions),
    )
    m.ir_version = min(max(graph.ir_version, 3), MAX_IR_VERSION)
    for k, v in graph.metadata.items():
        m.metadata_props.add(key=k, value=v)
    return m
