"""A small ONNX graph builder shared by the importers: unique names, constants, nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17


# Never folded: the QDQ pairs around weights are what the int8 paths look for.
_KEEP = {"QuantizeLinear", "DequantizeLinear"}


class Builder:
    """`fold=True`: a node whose inputs are all constants is evaluated (onnx's reference
    evaluator) and becomes an initializer, so constant sub-graphs never reach the ONNX."""

    def __init__(self, fold: bool = False) -> None:
        self.fold = fold
        self.values: dict[str, np.ndarray] = {}
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
        self.values[name] = arr
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
        node = helper.make_node(op, list(inputs), ["y"], **attrs)
        if self.fold and op not in _KEEP and all(not i or i in self.values for i in inputs):
            value = self._evaluate(node)
            if out is None:
                return self.const(value, base or op.lower())
            self.used.add(out)
            self.inits.append(numpy_helper.from_array(value.copy(order="C"), out))
            self.values[out] = value
            return out
        out = out if out is not None else self.fresh(base or op.lower())
        node.output[0] = out
        node.name = self.fresh(f"{op}_{len(self.nodes)}")
        self.nodes.append(node)
        return out

    def output_as(self, value: str, name: str) -> str:
        """`value` under the graph output name `name`: the producing node's output renamed when
        nothing read it yet, else an Identity (Core ML and MPS convert no Identity)."""
        self.used.add(name)
        if value == name:
            return name
        producer = next((n for n in reversed(self.nodes) if value in n.output), None)
        read = any(value in n.input for n in self.nodes)
        if producer is not None and not read:
            producer.output[list(producer.output).index(value)] = name
            return name
        return self.node("Identity", [value], name)

    def drop_dead(self) -> None:
        """Nodes (and initializers) no graph output depends on: the NHWC Transposes an NCHW
        consumer read around."""
        live = {o.name for o in self.outputs}
        keep: list[onnx.NodeProto] = []
        for n in reversed(self.nodes):
            if any(o in live for o in n.output):
                keep.append(n)
                live.update(i for i in n.input if i)
        self.nodes = keep[::-1]
        self.inits = [t for t in self.inits if t.name in live]

    def const_value(self, name: str) -> np.ndarray | None:
        return self.values.get(name)

    def _evaluate(self, node: onnx.NodeProto) -> np.ndarray:
        from onnx.reference import ReferenceEvaluator

        feeds = {i: self.values[i] for i in node.input if i}
        graph = helper.make_graph(
            [node],
            "fold",
            [
                helper.make_tensor_value_info(
                    i, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
                )
                for i, v in feeds.items()
            ],
            [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])

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
