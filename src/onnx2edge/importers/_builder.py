"""A small ONNX graph builder shared by the importers: unique names, constants, nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.used: set[str] = set()
        self._consts: dict[tuple, str] = {}

    def fresh(self, base: str) -> str:
        base = base or "t"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        return name

    def const(self, arr: np.ndarray, base: str = "const") -> str:
        """An initializer holding `arr`; equal small constants (shapes, axes) share one."""
        arr = np.asarray(arr)
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._consts:
                return self._consts[key]
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(arr.copy(order="C"), name))
        if key is not None:
            self._consts[key] = name
        return name

    def i64(self, values: Sequence[int], base: str = "shape") -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), base)

    def node(
        self,
        op: str,
        inputs: Sequence[str],
        out: str | None = None,
        *,
        base: str = "",
        **attrs: Any,
    ) -> str:
        out = out if out is not None else self.fresh(base or op.lower())
        self.nodes.append(
            helper.make_node(
                op, list(inputs), [out], name=self.fresh(f"{op}_{len(self.nodes)}"), **attrs
            )
        )
        return out

    def model(self, name: str, producer: str, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, self.inputs, self.outputs, initializer=self.inits
        )
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name=producer,
            doc_string=doc,
        )
        m.ir_version = 8
        return m
