"""A small, immutable graph IR.

Seed 000 §3.1: the converter reads `graph.node` and `graph.initializer` and links each node to
its parameters. Here that link is `Graph.params(node)`; `Graph.consumers(name)` answers the
reverse question, so a pass never has to assume that a node owns its weights (exporters let
several nodes share one initializer).

Everything is a frozen dataclass; passes build new graphs with `Graph.replace(...)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

Dim = int | str | None  # int: static; str: symbolic name; None: unknown

# A string element's capacity in bytes (UTF-8, NUL-terminated, so at most STRING_BYTES - 1
# bytes of text): string tensors are numpy fixed-size byte strings, so every pass and backend
# sees a fixed itemsize (the C backend: `o2e_str`, a struct of that many chars).
STRING_BYTES = 64
STRING_DTYPE = np.dtype(f"S{STRING_BYTES}")


@dataclass(frozen=True)
class TensorType:
    """Element type (ONNX TensorProto enum) and shape (None when the rank is unknown)."""

    elem_type: int
    shape: tuple[Dim, ...] | None

    @property
    def dtype(self) -> np.dtype:
        from onnx import TensorProto
        from onnx.helper import tensor_dtype_to_np_dtype

        if self.elem_type == TensorProto.STRING:
            return STRING_DTYPE
        return np.dtype(tensor_dtype_to_np_dtype(self.elem_type))

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def static_shape(self) -> tuple[int, ...]:
        if not self.is_static:
            raise ValueError(f"shape {self.shape} is not static")
        return tuple(int(d) for d in self.shape)  # type: ignore[arg-type, union-attr]

    @property
    def size(self) -> int:
        return int(np.prod(self.static_shape, dtype=np.int64))


@dataclass(frozen=True)
class Value:
    """A named tensor flowing between nodes (graph input, node output or initializer)."""

    name: str
    type: TensorType | None


@dataclass(frozen=True)
class Attr:
    """An ONNX attribute: its AttributeProto type (kept so re-emission is exact) and value.

    Values are plain Python: int, float, str, lists of them, np.ndarray for tensors,
    onnx.GraphProto for subgraphs.
    """

    type: int
    value: Any


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input, as in ONNX
    outputs: tuple[str, ...]
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    domain: str = ""
    doc_string: str = ""

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attrs.get(name)
        return default if a is None else a.value

    def replace(self, **changes: Any) -> Node:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Graph:
    """A model graph. `nodes` are in topological order."""

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]  # runtime inputs only; initializers are never listed here
    outputs: tuple[str, ...]
    values: Mapping[str, Value]  # type information, by tensor name
    initializers: Mapping[str, np.ndarray]
    opset_imports: Mapping[str, int]
    ir_version: int = 8
    producer_name: str = ""
    producer_version: str = ""
    model_doc_string: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    functions: tuple[Any, ...] = ()  # onnx.FunctionProto, passed through untouched
    # doc strings of graph inputs / outputs (ValueInfoProto.doc_string), by tensor name
    value_docs: Mapping[str, str] = field(default_factory=dict)

    # --- queries ---------------------------------------------------------------------------
    @property
    def opset(self) -> int:
        """The default-domain opset version."""
        return int(self.opset_imports.get("", self.opset_imports.get("ai.onnx", 1)))

    def type_of(self, name: str) -> TensorType | None:
        if name in self.initializers:
            from onnx.helper import np_dtype_to_tensor_dtype

            arr = self.initializers[name]
            return TensorType(np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
        v = self.values.get(name)
        return v.type if v else None

    def shape_of(self, name: str) -> tuple[int, ...]:
        t = self.type_of(name)
        if t is None or not t.is_static:
            raise ValueError(f"tensor '{name}' has no static shape")
        return t.static_shape

    def is_const(self, name: str) -> bool:
        return name in self.initializers

    def const(self, name: str) -> np.ndarray | None:
        return self.initializers.get(name)

    def params(self, node: Node) -> dict[str, np.ndarray]:
        """The initializers a node reads (its weights), by tensor name."""
        return {n: self.initializers[n] for n in node.inputs if n in self.initializers}

    @cached_property
    def _producer(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    @cached_property
    def _consumers(self) -> dict[str, tuple[Node, ...]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                if i:
                    out.setdefault(i, []).append(n)
        return {k: tuple(v) for k, v in out.items()}

    def producer(self, name: str) -> Node | None:
        return self._producer.get(name)

    def consumers(self, name: str) -> tuple[Node, ...]:
        return self._consumers.get(name, ())

    # --- construction ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> Graph:
        return dataclasses.replace(self, **changes)

    def with_nodes(
        self,
        nodes: Iterable[Node],
        initializers: Mapping[str, np.ndarray] | None = None,
        values: Mapping[str, Value] | None = None,
    ) -> Graph:
        """A new graph with these nodes; drops initializers and value infos nobody uses."""
        nodes = tuple(nodes)
        inits = dict(self.initializers if initializers is None else initializers)
        vals = dict(self.values if values is None else values)
        used = {i for n in nodes for i in n.inputs if i} | set(self.outputs)
        used |= _subgraph_refs(nodes)  # outer-scope names If/Loop/Scan bodies read
        inits = {k: v for k, v in inits.items() if k in used}
        live = used | {o for n in nodes for o in n.outputs} | set(self.inputs)
        vals = {k: v for k, v in vals.items() if k in live}
        return self.replace(nodes=nodes, initializers=inits, values=vals)

    def unique_name(self, base: str) -> str:
        taken = set(self.values) | set(self.initializers) | {n.name for n in self.nodes}
        taken |= {o for n in self.nodes for o in n.outputs}
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"


def name_factory(taken: set[str]) -> Callable[[str], str]:
    """A function giving each call a name not in `taken` (base, else base_1, base_2, ...) and
    adding it there: for passes that add many names to a graph they are still building."""

    def fresh(base: str) -> str:
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        return name

    return fresh


def _subgraph_refs(nodes: Iterable[Node]) -> set[str]:
    """Every name read by a node inside the nodes' subgraph attributes (recursively)."""
    refs: set[str] = set()
    stack = [
        g
        for n in nodes
        for a in n.attrs.values()
        for g in (a.value if isinstance(a.value, list) else [a.value])
        if hasattr(g, "node") and hasattr(g, "initializer")
    ]
    while stack:
        g = stack.pop()
        for p in g.node:
            refs.update(i for i in p.input if i)
            for a in p.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return refs
