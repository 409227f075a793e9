"""TensorFlow Lite flatbuffer -> ONNX, with TFLite's semantics.

The flatbuffer is read with the `tflite` package (classes generated from LiteRT's schema.fbs).
Tensors stay NHWC as the model declares them at its inputs and outputs; convolutions, pooling,
resize and depth/space rearrangements run in NCHW between two Transposes, which the `nhwc`
passes cancel where they can. Quantized tensors become QuantizeLinear/DequantizeLinear pairs:
every quantized tensor T is the int8 value `T` followed by a DequantizeLinear its consumers read,
so the float ops in between are the QDQ form the int8 paths recognise. Float16 weights behind
DEQUANTIZE are folded to float32 weights.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import Onnx2EdgeError, UnsupportedError
from ._builder import Builder

_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min

# tflite.TensorType -> numpy
_DTYPES = {
    0: np.float32,
    1: np.float16,
    2: np.int32,
    3: np.uint8,
    4: np.int64,
    6: np.bool_,
    7: np.int16,
    9: np.int8,
    10: np.float64,
    12: np.uint64,
    15: np.uint32,
    16: np.uint16,
}
NCHW = (0, 3, 1, 2)
NHWC = (0, 2, 3, 1)


def _tflite() -> Any:
    try:
        import tflite
    except ImportError as e:
        raise Onnx2EdgeError(
            "reading .tflite models needs the 'tflite' package: pip install 'onnx2edge[import]'"
        ) from e
    return tflite


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _same_pads(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


class _Importer:
    def __init__(self, data: bytes, source: Path) -> None:
        self.tfl = _tflite()
        self.source = source
        self.data = data
        try:
            self.model = self.tfl.Model.GetRootAsModel(data, 0)
            if self.model.SubgraphsLength() < 1:
                raise ValueError("no subgraph")
            self.sg = self.model.Subgraphs(0)
        except Exception as e:  # noqa: BLE001 - any flatbuffer decoding failure
            raise Onnx2EdgeError(f"{source}: not a readable TFLite flatbuffer ({e})") from e
        self.op_names = _enum_names(self.tfl.BuiltinOperator)
        self.opt_names = _enum_names(self.tfl.BuiltinOptions)
        self.b = Builder()
        self.names: dict[int, str] = {}  # tensor index -> name of its float (or plain) value
        self.folded: dict[int, np.ndarray] = {}  # DEQUANTIZE(fp16 const) outputs
        self.alias: dict[int, int] = {}  # DEQUANTIZE(int8 const) output -> its input
        # quantized activations: tensor index -> (integer value's name, its quantization, dtype)
        self.qnames: dict[int, tuple[str, tuple, Any]] = {}
        self.nchw_src: dict[int, str] = {}  # tensors an NCHW op wrote: the value before NHWC
        self.graph_outputs = {int(i) for i in self.sg.OutputsAsNumpy()}

    # -- tensors ---------------------------------------------------------------------------
    def tensor(self, i: int) -> Any:
        return self.sg.Tensors(i)

    def tname(self, i: int) -> str:
        return self.tensor(i).Name().decode("utf-8", "replace") or f"tensor_{i}"

    def shape(self, i: int) -> list[int]:
        t = self.tensor(i)
        return [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []

    def dtype(self, i: int) -> Any:
        code = self.tensor(i).Type()
        if code not in _DTYPES:
            raise UnsupportedError(
                f"{self.source}: tensor {i} '{self.tname(i)}' has TFLite type {code}, which the "
                "importer does not read"
            )
        return _DTYPES[code]

    def raw(self, i: int) -> np.ndarray | None:
        """The tensor's constant data, or None for an activation."""
        t = self.tensor(i)
        buf = self.model.Buffers(t.Buffer())
        if buf is None:
            return None
        if buf.DataLength() > 0:
            data = buf.DataAsNumpy().tobytes()
        elif buf.Offset() > 1:
            data = self.data[buf.Offset() : buf.Offset() + buf.Size()]
        else:
            return None
        values = np.frombuffer(data, dtype=self.dtype(i))
        if t.Sparsity() is not None:
            return self._densify(t.Sparsity(), values, self.shape(i))
        return values.reshape(self.shape(i)).copy()

    def _index_vector(self, kind: int, table: Any) -> np.ndarray:
        cls = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}.get(kind)
        if cls is None or table is None:
            return np.zeros(0, np.int64)
        v = getattr(self.tfl, cls)()
        v.Init(table.Bytes, table.Pos)
        return v.ValuesAsNumpy().astype(np.int64) if v.ValuesLength() else np.zeros(0, np.int64)

    def _densify(self, sp: Any, values: np.ndarray, shape: list[int]) -> np.ndarray:
        """TFLite's sparse tensor format (schema.fbs SparsityParameters, the FormatConverter's
        SparseToDense): levels in traversal order over the dims and their blocks, each DENSE
        (a size) or SPARSE_CSR (segments + indices); values in traversal order."""
        n = len(shape)
        order = (
            [int(v) for v in sp.TraversalOrderAsNumpy()]
            if sp.TraversalOrderLength()
            else list(range(n))
        )
        block_map = [int(v) for v in sp.BlockMapAsNumpy()] if sp.BlockMapLength() else []
        levels = []
        for lv in range(sp.DimMetadataLength()):
            dm = sp.DimMetadata(lv)
            if dm.Format() == 0:
                levels.append((int(dm.DenseSize()), None, None))
            else:
                seg = self._index_vector(dm.ArraySegmentsType(), dm.ArraySegments())
                idx = self._index_vector(dm.ArrayIndicesType(), dm.ArrayIndices())
                levels.append((0, seg, idx))
        block_size = [levels[order.index(n + j)][0] for j in range(len(block_map))]
        # coordinates of every stored value, level by level (prev: the parent's position)
        coords = np.zeros((1, 0), np.int64)
        prev = np.zeros(1, np.int64)
        for size, seg, idx in levels:
            if seg is None:
                pos = (prev[:, None] * size + np.arange(size)[None, :]).reshape(-1)
                here = np.tile(np.arange(size), len(prev))
                coords = np.repeat(coords, size, axis=0)
            else:
                counts = seg[prev + 1] - seg[prev]
                pos = (
                    np.concatenate([np.arange(seg[p], seg[p + 1]) for p in prev])
                    if len(prev)
                    else prev
                )
                here = idx[pos]
                coords = np.repeat(coords, counts, axis=0)
            coords = np.concatenate([coords, here[:, None]], axis=1)
            prev = pos
        expanded = np.zeros((len(coords), n + len(block_map)), np.int64)
        expanded[:, order] = coords
        full = expanded[:, :n].copy()
        for j, d in enumerate(block_map):
            full[:, d] = full[:, d] * block_size[j] + expanded[:, n + j]
        dense = np.zeros(shape, dtype=values.dtype)
        if len(full) != len(values):
            raise Onnx2EdgeError(
                f"{self.source}: a sparse tensor stores {len(values)} values for {len(full)} "
                "positions: the file is corrupt"
            )
        dense[tuple(full.T)] = values
        return dense

    def quant(self, i: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        q = self.tensor(i).Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        scale = q.ScaleAsNumpy().astype(np.float32)
        zp = q.ZeroPointAsNumpy() if q.ZeroPointLength() else np.zeros(len(scale), np.int64)
        return scale, zp.astype(np.int64), int(q.QuantizedDimension())

    def is_const(self, i: int) -> bool:
        return i in self.folded or i in self.alias or self.raw(i) is not None

    def array(self, i: int) -> np.ndarray:
        """A constant operand's value (shapes, axes, paddings...), dequantized if needed."""
        if i in self.folded:
            return self.folded[i]
        src = self.alias.get(i, i)
        a = self.raw(src)
        if a is None:
            raise UnsupportedError(
                f"{self.source}: tensor {i} '{self.tname(i)}' must be a constant here "
                "(a computed shape, axis or padding is not supported)"
            )
        q = self.quant(src)
        if q is not None and a.dtype in (np.int8, np.uint8, np.int16, np.int32):
            scale, zp, axis = q
            shape = [1] * a.ndim
            if len(scale) > 1:
                shape[axis] = -1
            a = (a.astype(np.float32) - zp.reshape(shape)) * scale.reshape(shape)
        if a.dtype == np.float16:
            a = a.astype(np.float32)
        return a

    def _dq(
        self,
        q_name: str,
        q: tuple[np.ndarray, np.ndarray, int],
        qtype: Any,
        axis_map: Callable[[int], int] | None = None,
    ) -> str:
        scale, zp, axis = q
        attrs = {}
        if len(scale) > 1:
            attrs["axis"] = axis_map(axis) if axis_map else axis
            s, z = scale, zp.astype(qtype)
        else:
            s, z = scale[0], np.asarray(zp[0]).astype(qtype)
        return self.b.node(
            "DequantizeLinear",
            [
                q_name,
                self.b.const(np.asarray(s, np.float32), "scale"),
                self.b.const(z, "zero_point"),
            ],
            base=q_name + "_dq",
            **attrs,
        )

    def weight(self, i: int, perm: tuple[int, ...] | None = None) -> str:
        """A constant operand, laid out by `perm`: quantized ones as int8 + DequantizeLinear
        (per-channel axis carried through the permutation), float16 ones as float32."""
        src = self.alias.get(i, i)
        q = self.quant(src) if i not in self.folded else None
        raw = self.raw(src) if i not in self.folded else None
        if q is not None and raw is not None and raw.dtype in (np.int8, np.uint8, np.int32):
            data = raw.transpose(perm) if perm else raw
            name = self.b.const(data, self.tname(src))
            return self._dq(name, q, raw.dtype, (lambda a: perm.index(a)) if perm else None)
        a = self.array(i)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        return self.b.const(a.transpose(perm) if perm else a, self.tname(i))

    def act(self, i: int) -> str:
        """The float value (or plain integer value) a consumer reads for tensor `i`."""
        if i in self.names:
            return self.names[i]
        if self.is_const(i):
            self.names[i] = self.weight(i)
            return self.names[i]
        raise Onnx2EdgeError(
            f"{self.source}: tensor {i} '{self.tname(i)}' is read before it is written"
        )

    def emit_out(self, i: int, value: str, nchw: bool = False) -> None:
        """Bind the op's float result `value` to tensor `i`: through Quantize/Dequantize when the
        tensor is quantized, renamed to the tensor's name when it is a graph output. `nchw`: the
        value is NCHW and tensor `i` NHWC; a quantized one is transposed on the integer side, so
        the op sits between DequantizeLinear and QuantizeLinear as the int8 paths expect."""
        q = self.quant(i)
        dt = self.dtype(i)
        if q is not None and dt in (np.int8, np.uint8):
            scale, zp, _ = q
            name = self.tname(i) if i in self.graph_outputs else self.b.fresh(self.tname(i))
            if i in self.graph_outputs:
                self.b.used.add(name)
            qargs = [
                self.b.const(np.float32(scale[0]), "scale"),
                self.b.const(np.asarray(zp[0]).astype(dt), "zero_point"),
            ]
            if nchw:
                qv = self.b.node("QuantizeLinear", [value, *qargs])
                self.nchw_src[i] = qv
                self.b.node("Transpose", [qv], name, perm=list(NHWC))
            else:
                self.b.node("QuantizeLinear", [value, *qargs], name)
            self.qnames[i] = (name, (scale[:1], zp[:1], 0), dt)
            self.names[i] = self._dq(name, (scale[:1], zp[:1], 0), dt)
            return
        if q is not None and dt == np.int16:
            raise UnsupportedError(
                f"{self.source}: tensor {i} '{self.tname(i)}' is an int16-quantized activation "
                "(16x8 quantization), which the importer does not support"
            )
        if nchw:
            self.nchw_src[i] = value
            value = self.t(value, NHWC)
        if i in self.graph_outputs:
            value = self.b.output_as(value, self.tname(i))
        self.names[i] = value

    def nchw_in(self, i: int) -> str:
        """Tensor `i` (NHWC) as NCHW float: a quantized activation transposed as integers, then
        dequantized (see `emit_out`)."""
        src = self.nchw_src.get(i)  # produced NCHW: read before its Transpose, no pair
        if i in self.qnames:
            name, q, dt = self.qnames[i]
            return self._dq(src or self.t(name, NCHW), q, dt)
        return src or self.t(self.act(i), NCHW)

    # -- helpers ---------------------------------------------------------------------------
    def fused(self, x: str, code: int) -> str:
        if code == 0:
            return x
        if code == 1:
            return self.b.node("Relu", [x])
        if code in (2, 3):
            lo, hi = (-1.0, 1.0) if code == 2 else (0.0, 6.0)
            return self.b.node(
                "Clip", [x, self.b.const(np.float32(lo), "lo"), self.b.const(np.float32(hi), "hi")]
            )
        if code == 4:
            return self.b.node("Tanh", [x])
        raise UnsupportedError(
            f"{self.source}: fused activation {code} (SIGN_BIT) is not supported"
        )

    def t(self, x: str, perm: tuple[int, ...]) -> str:
        return self.b.node("Transpose", [x], perm=list(perm))

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.b.node("Reshape", [x, self.b.i64(shape)])

    def options(self, op: Any) -> Any:
        kind = op.BuiltinOptionsType()
        table = op.BuiltinOptions()
        if kind == 0 or table is None:
            return None
        o = getattr(self.tfl, self.opt_names[kind])()
        o.Init(table.Bytes, table.Pos)
        return o

    # -- the graph -------------------------------------------------------------------------
    def run(self) -> onnx.ModelProto:
        b = self.b
        for i in map(int, self.sg.InputsAsNumpy()):
            name = self.tname(i)
            b.used.add(name)
            dt = self.dtype(i)
            b.inputs.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), self.shape(i)
                )
            )
            q = self.quant(i)
            if q is not None and dt in (np.int8, np.uint8):
                self.qnames[i] = (name, (q[0][:1], q[1][:1], 0), dt)
                self.names[i] = self._dq(name, q, dt)
            else:
                self.names[i] = name
        ops = [self.sg.Operators(k) for k in range(self.sg.OperatorsLength())]
        codes = []
        for k, op in enumerate(ops):
            oc = self.model.OperatorCodes(op.OpcodeIndex())
            code = max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode()))
            name = self.op_names.get(code, str(code))
            if name == "CUSTOM":
                custom = (oc.CustomCode() or b"?").decode("utf-8", "replace")
                raise UnsupportedError(
                    f"{self.source}: operator {k} is the custom operator '{custom}', which the "
                    "TFLite importer cannot convert"
                )
            if not hasattr(self, "op_" + name):
                raise UnsupportedError(
                    f"{self.source}: operator {k} ({name}, builtin code {code}) is not supported by "
                    "the TFLite importer (see docs/importers.md)"
                )
            codes.append(name)
        for op, name in zip(ops, codes, strict=True):
            ins = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outs = [int(x) for x in op.OutputsAsNumpy()]
            if name == "DENSIFY":  # the sparse constant is read dense: an alias of it
                self.folded[outs[0]] = self.array(ins[0])
                if self.quant(ins[0]) is not None:
                    self.folded.pop(outs[0])
                    self.alias[outs[0]] = ins[0]
                if outs[0] not in self.graph_outputs:
                    continue
            if name == "DEQUANTIZE" and ins[0] >= 0 and self.raw(ins[0]) is not None:
                if self.quant(ins[0]) is not None and outs[0] not in self.graph_outputs:
                    self.alias[outs[0]] = ins[0]
                    continue
                if self.quant(ins[0]) is None:
                    self.folded[outs[0]] = self.array(ins[0])
                    if outs[0] not in self.graph_outputs:
                        continue
            getattr(self, "op_" + name)(op, ins, outs)
        for i in map(int, self.sg.OutputsAsNumpy()):
            if i not in self.names:
                self.emit_out(i, self.act(i))
            dt = self.dtype(i)
            b.outputs.append(
                helper.make_tensor_value_info(
                    self.tname(i), helper.np_dtype_to_tensor_dtype(np.dtype(dt)), self.shape(i)
                )
            )
        b.drop_dead()
        return b.model(
            self.source.stem, "onnx2edge-import-tflite", f"imported from {self.source.name}"
        )

    # -- operators (each: op, input tensor indices, output tensor indices) ------------------
    def _unary(onnx_op: str, **attrs: Any) -> Callable:  # noqa: N805 - a method factory
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            self.emit_out(outs[0], self.b.node(onnx_op, [self.act(ins[0])], **attrs))

        return conv

    op_LOGISTIC = _unary("Sigmoid")
    op_TANH = _unary("Tanh")
    op_RELU = _unary("Relu")
    op_HARD_SWISH = _unary("HardSwish")
    op_ELU = _unary("Elu")
    op_EXP = _unary("Exp")
    op_LOG = _unary("Log")
    op_SQRT = _unary("Sqrt")
    op_ABS = _unary("Abs")
    op_NEG = _unary("Neg")
    op_FLOOR = _unary("Floor")
    op_CEIL = _unary("Ceil")
    op_SIN = _unary("Sin")
    op_COS = _unary("Cos")
    op_LOG_SOFTMAX = _unary("LogSoftmax", axis=-1)

    def op_RSQRT(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.b.node("Reciprocal", [self.b.node("Sqrt", [self.act(ins[0])])]))

    def op_SQUARE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        x = self.act(ins[0])
        self.emit_out(outs[0], self.b.node("Mul", [x, x]))

    def op_RELU6(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.fused(self.act(ins[0]), 3))

    def op_RELU_N1_TO_1(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.fused(self.act(ins[0]), 2))

    def op_LEAKY_RELU(self, op: Any, ins: list[int], outs: list[int]) -> None:
        alpha = float(self.options(op).Alpha())
        self.emit_out(outs[0], self.b.node("LeakyRelu", [self.act(ins[0])], alpha=alpha))

    def op_PRELU(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.b.node("PRelu", [self.act(ins[0]), self.act(ins[1])]))

    def op_GELU(self, op: Any, ins: list[int], outs: list[int]) -> None:
        x = self.act(ins[0])
        o = self.options(op)
        c = self.b.const
        if o is not None and o.Approximate():
            inner = self.b.node(
                "Mul",
                [
                    x,
                    self.b.node(
                        "Add",
                        [
                            c(np.float32(1), "one"),
                            self.b.node(
                                "Mul", [c(np.float32(0.044715), "k"), self.b.node("Mul", [x, x])]
                            ),
                        ],
                    ),
                ],
            )
            t = self.b.node(
                "Tanh", [self.b.node("Mul", [inner, c(np.float32(np.sqrt(2 / np.pi)), "k")])]
            )
        else:
            t = self.b.node("Erf", [self.b.node("Mul", [x, c(np.float32(1 / np.sqrt(2)), "k")])])
        y = self.b.node(
            "Mul",
            [
                self.b.node("Mul", [x, c(np.float32(0.5), "half")]),
                self.b.node("Add", [t, c(np.float32(1), "one")]),
            ],
        )
        self.emit_out(outs[0], y)

    def _binary(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            o = self.options(op)
            act = (
                o.FusedActivationFunction()
                if o is not None and hasattr(o, "FusedActivationFunction")
                else 0
            )
            y = self.b.node(onnx_op, [self.act(ins[0]), self.act(ins[1])])
            self.emit_out(outs[0], self.fused(y, act))

        return conv

    op_ADD = _binary("Add")
    op_SUB = _binary("Sub")
    op_MUL = _binary("Mul")
    op_DIV = _binary("Div")
    op_MAXIMUM = _binary("Max")
    op_MINIMUM = _binary("Min")
    op_POW = _binary("Pow")

    op_LESS = _binary("Less")
    op_GREATER = _binary("Greater")
    op_LESS_EQUAL = _binary("LessOrEqual")
    op_GREATER_EQUAL = _binary("GreaterOrEqual")
    op_EQUAL = _binary("Equal")
    op_LOGICAL_AND = _binary("And")
    op_LOGICAL_OR = _binary("Or")
    op_LOGICAL_NOT = _unary("Not")

    def op_NOT_EQUAL(self, op: Any, ins: list[int], outs: list[int]) -> None:
        eq = self.b.node("Equal", [self.act(ins[0]), self.act(ins[1])])
        self.emit_out(outs[0], self.b.node("Not", [eq]))

    def _select(self, op: Any, ins: list[int], outs: list[int]) -> None:
        args = [self.act(i) for i in ins[:3]]
        self.emit_out(outs[0], self.b.node("Where", args))

    op_SELECT = _select
    op_SELECT_V2 = _select

    def op_SQUARED_DIFFERENCE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        d = self.b.node("Sub", [self.act(ins[0]), self.act(ins[1])])
        self.emit_out(outs[0], self.b.node("Mul", [d, d]))

    def op_QUANTIZE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.act(ins[0]))  # emit_out quantizes with the output's params

    def op_DEQUANTIZE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.act(ins[0]))  # the input is read as its dequantized value

    def op_DENSIFY(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.act(outs[0]) if outs[0] in self.folded else self.act(ins[0]))

    def op_CAST(self, op: Any, ins: list[int], outs: list[int]) -> None:
        to = helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype(outs[0])))
        self.emit_out(outs[0], self.b.node("Cast", [self.act(ins[0])], to=to))

    # shapes
    def _to_shape(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self.emit_out(outs[0], self.reshape(self.act(ins[0]), self.shape(outs[0])))

    op_RESHAPE = _to_shape
    op_SQUEEZE = _to_shape
    op_EXPAND_DIMS = _to_shape

    def op_TRANSPOSE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        perm = [int(p) for p in self.array(ins[1])]
        self.emit_out(outs[0], self.t(self.act(ins[0]), tuple(perm)))

    def op_CONCATENATION(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        y = self.b.node("Concat", [self.act(i) for i in ins], axis=int(o.Axis()))
        self.emit_out(outs[0], self.fused(y, o.FusedActivationFunction()))

    def op_PACK(self, op: Any, ins: list[int], outs: list[int]) -> None:
        axis = int(self.options(op).Axis())
        parts = [self.b.node("Unsqueeze", [self.act(i), self.b.i64([axis])]) for i in ins]
        self.emit_out(outs[0], self.b.node("Concat", parts, axis=axis))

    def _split(self, x: str, axis: int, sizes: list[int], outs: list[int]) -> None:
        names = [self.b.fresh("split") for _ in outs]
        self.b.nodes.append(
            helper.make_node(
                "Split", [x, self.b.i64(sizes)], names, axis=axis, name=self.b.fresh("Split")
            )
        )
        for i, n in zip(outs, names, strict=True):
            self.emit_out(i, n)

    def op_SPLIT(self, op: Any, ins: list[int], outs: list[int]) -> None:
        axis = int(self.array(ins[0]).reshape(-1)[0])
        self._split(self.act(ins[1]), axis, [self.shape(o)[axis] for o in outs], outs)

    def op_SPLIT_V(self, op: Any, ins: list[int], outs: list[int]) -> None:
        axis = int(self.array(ins[2]).reshape(-1)[0])
        self._split(self.act(ins[0]), axis, [self.shape(o)[axis] for o in outs], outs)

    def op_UNPACK(self, op: Any, ins: list[int], outs: list[int]) -> None:
        axis = int(self.options(op).Axis())
        rank = len(self.shape(ins[0]))
        axis = axis % rank
        names = [self.b.fresh("unpack") for _ in outs]
        self.b.nodes.append(
            helper.make_node(
                "Split",
                [self.act(ins[0]), self.b.i64([1] * len(outs))],
                names,
                axis=axis,
                name=self.b.fresh("Split"),
            )
        )
        for i, n in zip(outs, names, strict=True):
            self.emit_out(i, self.reshape(n, self.shape(i)))

    def op_GATHER(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        if o is not None and o.BatchDims():
            raise UnsupportedError(f"{self.source}: GATHER with batch_dims is not supported")
        idx = self.act(ins[1])
        self.emit_out(
            outs[0], self.b.node("Gather", [self.act(ins[0]), idx], axis=int(o.Axis()) if o else 0)
        )

    def op_TILE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        reps = self.array(ins[1]).astype(np.int64)
        self.emit_out(outs[0], self.b.node("Tile", [self.act(ins[0]), self.b.i64(reps)]))

    def op_SLICE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        begin = self.array(ins[1]).astype(np.int64)
        size = self.array(ins[2]).astype(np.int64)
        end = np.where(size < 0, _INT64_MAX, begin + size)
        axes = list(range(len(begin)))
        y = self.b.node(
            "Slice", [self.act(ins[0]), self.b.i64(begin), self.b.i64(end), self.b.i64(axes)]
        )
        self.emit_out(outs[0], y)

    def op_STRIDED_SLICE(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        if o.EllipsisMask() or o.NewAxisMask():
            raise UnsupportedError(
                f"{self.source}: STRIDED_SLICE with an ellipsis or new-axis mask is not supported"
            )
        begin = [int(v) for v in self.array(ins[1])]
        end = [int(v) for v in self.array(ins[2])]
        strides = [int(v) for v in self.array(ins[3])] if len(ins) > 3 else [1] * len(begin)
        offset = bool(o.Offset()) if hasattr(o, "Offset") else False
        starts, ends = [], []
        for d, (b0, e0, s) in enumerate(zip(begin, end, strides, strict=True)):
            if o.BeginMask() >> d & 1:
                b0 = 0 if s > 0 else _INT64_MAX
            if o.EndMask() >> d & 1:
                e0 = _INT64_MAX if s > 0 else _INT64_MIN
            elif offset:
                e0 = b0 + e0
            if o.ShrinkAxisMask() >> d & 1:
                e0 = b0 + 1 if b0 != -1 else _INT64_MAX
                strides[d] = 1
            starts.append(b0)
            ends.append(e0)
        axes = list(range(len(begin)))
        y = self.b.node(
            "Slice",
            [
                self.act(ins[0]),
                self.b.i64(starts),
                self.b.i64(ends),
                self.b.i64(axes),
                self.b.i64(strides),
            ],
        )
        self.emit_out(outs[0], self.reshape(y, self.shape(outs[0])))

    def _pad(self, op: Any, ins: list[int], outs: list[int], mode: str = "constant") -> None:
        p = self.array(ins[1]).astype(np.int64)
        pads = self.b.i64(list(p[:, 0]) + list(p[:, 1]))
        args = [self.act(ins[0]), pads]
        if len(ins) > 2 and ins[2] >= 0:
            args.append(self.act(ins[2]))
        self.emit_out(outs[0], self.b.node("Pad", args, mode=mode))

    op_PAD = _pad
    op_PADV2 = _pad

    def op_MIRROR_PAD(self, op: Any, ins: list[int], outs: list[int]) -> None:
        if self.options(op).Mode() != 0:
            raise UnsupportedError(f"{self.source}: MIRROR_PAD in SYMMETRIC mode is not supported")
        self._pad(op, ins, outs, "reflect")

    # reductions
    def _reduce(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            rank = len(self.shape(ins[0]))
            axes = sorted({int(a) % rank for a in self.array(ins[1]).reshape(-1)})
            keep = int(bool(self.options(op).KeepDims()))
            if onnx_op == "ReduceSum":
                y = self.b.node(onnx_op, [self.act(ins[0]), self.b.i64(axes)], keepdims=keep)
            else:
                y = self.b.node(onnx_op, [self.act(ins[0])], axes=axes, keepdims=keep)
            self.emit_out(outs[0], self.reshape(y, self.shape(outs[0])))

        return conv

    op_MEAN = _reduce("ReduceMean")
    op_SUM = _reduce("ReduceSum")
    op_REDUCE_MAX = _reduce("ReduceMax")
    op_REDUCE_MIN = _reduce("ReduceMin")
    op_REDUCE_PROD = _reduce("ReduceProd")

    def _arg(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            axis = int(self.array(ins[1]).reshape(-1)[0])
            y = self.b.node(onnx_op, [self.act(ins[0])], axis=axis, keepdims=0)
            to = helper.np_dtype_to_tensor_dtype(np.dtype(self.dtype(outs[0])))
            self.emit_out(outs[0], self.b.node("Cast", [y], to=to))

        return conv

    op_ARG_MAX = _arg("ArgMax")
    op_ARG_MIN = _arg("ArgMin")

    def op_SOFTMAX(self, op: Any, ins: list[int], outs: list[int]) -> None:
        x = self.act(ins[0])
        beta = float(self.options(op).Beta())
        if beta != 1.0:
            x = self.b.node("Mul", [x, self.b.const(np.float32(beta), "beta")])
        self.emit_out(outs[0], self.b.node("Softmax", [x], axis=-1))

    def op_L2_NORMALIZATION(self, op: Any, ins: list[int], outs: list[int]) -> None:
        x = self.act(ins[0])
        ss = self.b.node("ReduceSum", [self.b.node("Mul", [x, x]), self.b.i64([-1])], keepdims=1)
        ss = self.b.node("Max", [ss, self.b.const(np.float32(1e-6), "eps")])
        y = self.b.node("Div", [x, self.b.node("Sqrt", [ss])])
        self.emit_out(outs[0], self.fused(y, self.options(op).FusedActivationFunction()))

    # matrix products
    def op_FULLY_CONNECTED(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        if o is not None and o.WeightsFormat() != 0:
            raise UnsupportedError(
                f"{self.source}: FULLY_CONNECTED with shuffled weights is not supported"
            )
        x = self.act(ins[0])
        w_shape = self.shape(ins[1])
        if len(self.shape(ins[0])) != 2:
            x = self.reshape(x, [-1, w_shape[1]])
        if self.hybrid(ins[0], ins[1]):
            x = self.quantize_rows(x, [-1], bool(o.AsymmetricQuantizeInputs()))
        w = self.weight(ins[1]) if self.is_const(ins[1]) else self.act(ins[1])
        args = [x, w]
        if len(ins) > 2 and ins[2] >= 0:
            args.append(self.weight(ins[2]) if self.is_const(ins[2]) else self.act(ins[2]))
        y = self.b.node("Gemm", args, transB=1)
        y = self.fused(y, o.FusedActivationFunction() if o is not None else 0)
        if len(self.shape(outs[0])) != 2:
            y = self.reshape(y, self.shape(outs[0]))
        self.emit_out(outs[0], y)

    def hybrid(self, x: int, w: int) -> bool:
        """A float input read by int8 weights: TFLite's hybrid kernels quantize the input to
        int8 on the fly (dynamic-range quantization) before the integer product."""
        src = self.alias.get(w, w)
        return (
            self.dtype(x) == np.float32
            and w not in self.folded
            and self.quant(src) is not None
            and self.raw(src) is not None
            and self.raw(src).dtype == np.int8
        )

    def quantize_rows(self, x: str, axes: list[int], asymmetric: bool) -> str:
        """x rounded to TFLite's on-the-fly int8 grid, one scale per batch row
        (tensor_utils SymmetricQuantizeFloats / AsymmetricQuantizeFloats), in float ops; the
        product with the int8 weights is then the hybrid kernel's."""
        b, c = self.b, self.b.const
        zero, one = c(np.float32(0), "zero"), c(np.float32(1), "one")
        if asymmetric:
            lo = b.node("Min", [b.node("ReduceMin", [x], axes=axes, keepdims=1), zero])
            hi = b.node("Max", [b.node("ReduceMax", [x], axes=axes, keepdims=1), zero])
            scale = b.node("Div", [b.node("Sub", [hi, lo]), c(np.float32(255), "k")])
        else:
            hi = b.node("ReduceMax", [b.node("Abs", [x])], axes=axes, keepdims=1)
            scale = b.node("Div", [hi, c(np.float32(127), "k")])
        scale = b.node("Where", [b.node("Equal", [scale, zero]), one, scale])
        if asymmetric:  # zero point on the grid of [-128, 127]
            zp = b.node(
                "Round", [b.node("Sub", [c(np.float32(-128), "k"), b.node("Div", [lo, scale])])]
            )
            q = b.node("Add", [b.node("Round", [b.node("Div", [x, scale])]), zp])
            q = b.node("Clip", [q, c(np.float32(-128), "lo"), c(np.float32(127), "hi")])
            return b.node("Mul", [b.node("Sub", [q, zp]), scale])
        q = b.node("Round", [b.node("Div", [x, scale])])
        q = b.node("Clip", [q, c(np.float32(-127), "lo"), c(np.float32(127), "hi")])
        return b.node("Mul", [q, scale])

    def op_BATCH_MATMUL(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        a, b_ = self.act(ins[0]), self.act(ins[1])

        def swap(x: str, rank: int) -> str:
            return self.t(x, (*range(rank - 2), rank - 1, rank - 2))

        if o is not None and o.AdjX():
            a = swap(a, len(self.shape(ins[0])))
        if o is not None and o.AdjY():
            b_ = swap(b_, len(self.shape(ins[1])))
        self.emit_out(outs[0], self.b.node("MatMul", [a, b_]))

    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op: Any, ins: list[int], outs: list[int]) -> None:
        """ONNX LSTM (gates i, o, f, c) from TFLite's 24 inputs (lstm_shared.h): input, the
        input / recurrent weights and biases of gates i, f, c, o, peepholes, projection, the
        state variables (zero at the start, as a fresh interpreter has them), layer norms."""
        o = self.options(op)
        ins = ins + [-1] * (24 - len(ins))

        def given(k: int) -> bool:
            return ins[k] >= 0

        what = (
            "CIFG (no input gate)"
            if not given(1)
            else "a projection"
            if given(16)
            else "layer normalisation"
            if any(given(k) for k in range(20, 24))
            else "peepholes and a cell clip"
            if given(9) and o.CellClip() > 0
            else ""
        )
        if what:
            raise UnsupportedError(
                f"{self.source}: UNIDIRECTIONAL_SEQUENCE_LSTM with {what} is not supported"
            )
        act = {1: "Relu", 4: "Tanh"}.get(o.FusedActivationFunction())
        if act is None:
            raise UnsupportedError(
                f"{self.source}: UNIDIRECTIONAL_SEQUENCE_LSTM with fused activation "
                f"{o.FusedActivationFunction()} is not supported"
            )
        gates = {"i": 0, "f": 1, "c": 2, "o": 3}
        order = "iofc"
        w = np.concatenate([self.array(ins[1 + gates[g]]) for g in order])[None].astype(np.float32)
        r = np.concatenate([self.array(ins[5 + gates[g]]) for g in order])[None].astype(np.float32)
        hidden = r.shape[1] // 4
        bias = np.concatenate([self.array(ins[12 + gates[g]]) for g in order]).astype(np.float32)
        b = np.concatenate([bias, np.zeros_like(bias)])[None]
        x_shape = self.shape(ins[0])
        time_major = bool(o.TimeMajor())
        batch = x_shape[1] if time_major else x_shape[0]
        if o.CellClip() > 0:
            # TFLite clips the cell state; ONNX's LSTM `clip` bounds the gates' inputs instead,
            # so a clipped LSTM is unrolled over its (static) time steps.
            y = self._lstm_unrolled(ins[0], w[0], r[0], bias, act, float(o.CellClip()), time_major)
            self.emit_out(outs[0], self.reshape(y, self.shape(outs[0])))
            return
        state = self.b.const(np.zeros((1, batch, hidden), np.float32), "lstm_state")
        # layout 0 (onnxruntime runs no batch-major LSTM): time-major around it
        x = self.act(ins[0]) if time_major else self.t(self.act(ins[0]), (1, 0, 2))
        args = [x, self.b.const(w, "lstm_W"), self.b.const(r, "lstm_R")]
        args += [self.b.const(b, "lstm_B"), "", state, state]
        if given(9):  # peepholes: ONNX orders them i, o, f
            p = np.concatenate([self.array(ins[k]) for k in (9, 11, 10)])[None]
            args.append(self.b.const(p.astype(np.float32), "lstm_P"))
        y = self.b.node("LSTM", args, hidden_size=hidden, activations=["Sigmoid", act, act])
        if not time_major:  # Y is [seq, 1, batch, hidden]
            y = self.t(y, (2, 0, 1, 3))
        self.emit_out(outs[0], self.reshape(y, self.shape(outs[0])))

    def _lstm_unrolled(
        self,
        x_idx: int,
        w: np.ndarray,
        r: np.ndarray,
        bias: np.ndarray,
        act: str,
        clip: float,
        time_major: bool,
    ) -> str:
        """The LSTM step by step (gates in ONNX order i, o, f, c), the cell state clipped to
        [-clip, clip] after each step as TFLite's lstm_eval does."""
        b, c = self.b, self.b.const
        shape = self.shape(x_idx)
        steps, axis = (shape[0], 0) if time_major else (shape[1], 1)
        hidden = r.shape[0] // 4
        xw = b.node(
            "Add",
            [b.node("MatMul", [self.act(x_idx), c(w.T.copy(), "lstm_Wt")]), c(bias, "lstm_b")],
        )
        rt = c(r.T.copy(), "lstm_Rt")
        lo, hi = c(np.float32(-clip), "lo"), c(np.float32(clip), "hi")
        h = cell = None
        hs = []
        for t in range(steps):
            g = b.node("Gather", [xw, c(np.int64(t), "t")], axis=axis)
            if h is not None:
                g = b.node("Add", [g, b.node("MatMul", [h, rt])])
            names = [b.fresh("gate") for _ in range(4)]
            b.nodes.append(
                helper.make_node(
                    "Split", [g, b.i64([hidden] * 4)], names, axis=-1, name=b.fresh("Split")
                )
            )
            gi, go, gf, gc = names
            i_, f_, o_ = (b.node("Sigmoid", [v]) for v in (gi, gf, go))
            new = b.node("Mul", [i_, b.node(act, [gc])])
            cell = new if cell is None else b.node("Add", [b.node("Mul", [f_, cell]), new])
            cell = b.node("Clip", [cell, lo, hi])
            h = b.node("Mul", [o_, b.node(act, [cell])])
            hs.append(b.node("Unsqueeze", [h, b.i64([axis])]))
        return b.node("Concat", hs, axis=axis)

    # convolutions and pooling: NCHW between two Transposes
    def _conv_pads(
        self, padding: int, in_hw: list[int], k: list[int], s: list[int], d: list[int]
    ) -> list[int]:
        if padding == 1:  # VALID
            return [0, 0, 0, 0]
        (t, bt), (l_, r) = (_same_pads(in_hw[j], k[j], s[j], d[j]) for j in range(2))
        return [t, l_, bt, r]

    def _conv(self, op: Any, ins: list[int], outs: list[int], depthwise: bool) -> None:
        o = self.options(op)
        x_shape = self.shape(ins[0])
        w_shape = self.shape(ins[1])  # OHWI, or 1HW(C*M) for depthwise
        perm = (3, 0, 1, 2) if depthwise else (0, 3, 1, 2)
        w = self.weight(ins[1], perm)
        k = [w_shape[1], w_shape[2]]
        s = [int(o.StrideH()), int(o.StrideW())]
        d = [int(o.DilationHFactor()), int(o.DilationWFactor())]
        group = x_shape[3] if depthwise else x_shape[3] // w_shape[3]
        x = self.nchw_in(ins[0])
        if self.hybrid(ins[0], ins[1]):  # per-channel weights: asymmetric rows (conv.cc)
            per_channel = len(self.quant(self.alias.get(ins[1], ins[1]))[0]) > 1
            x = self.quantize_rows(x, [1, 2, 3], per_channel)
        args = [x, w]
        if len(ins) > 2 and ins[2] >= 0:
            args.append(self.weight(ins[2]))
        y = self.b.node(
            "Conv",
            args,
            kernel_shape=k,
            strides=s,
            dilations=d,
            group=group,
            pads=self._conv_pads(o.Padding(), x_shape[1:3], k, s, d),
        )
        y = self.fused(y, o.FusedActivationFunction())
        self.emit_out(outs[0], y, nchw=True)

    def op_CONV_2D(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self._conv(op, ins, outs, False)

    def op_DEPTHWISE_CONV_2D(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self._conv(op, ins, outs, True)

    def op_TRANSPOSE_CONV(self, op: Any, ins: list[int], outs: list[int]) -> None:
        o = self.options(op)
        out_shape = [int(v) for v in self.array(ins[0])]
        w_shape = self.shape(ins[1])  # O H W I
        x_shape = self.shape(ins[2])
        k = [w_shape[1], w_shape[2]]
        s = [int(o.StrideH()), int(o.StrideW())]
        pads = [0, 0, 0, 0]
        for j in range(2):
            total = (x_shape[1 + j] - 1) * s[j] + k[j] - out_shape[1 + j]
            if o.Padding() == 0:
                before = max(total, 0) // 2
            else:
                before = 0
            pads[j], pads[j + 2] = before, total - before
        if min(pads) < 0:
            raise UnsupportedError(
                f"{self.source}: TRANSPOSE_CONV with an output larger than its input covers is not supported"
            )
        args = [self.nchw_in(ins[2]), self.weight(ins[1], (3, 0, 1, 2))]
        if len(ins) > 3 and ins[3] >= 0:
            args.append(self.weight(ins[3]))
        y = self.b.node("ConvTranspose", args, kernel_shape=k, strides=s, pads=pads)
        act = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
        self.emit_out(outs[0], self.fused(y, act), nchw=True)

    def _pool(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            o = self.options(op)
            k = [int(o.FilterHeight()), int(o.FilterWidth())]
            s = [int(o.StrideH()), int(o.StrideW())]
            pads = self._conv_pads(o.Padding(), self.shape(ins[0])[1:3], k, s, [1, 1])
            y = self.b.node(onnx_op, [self.nchw_in(ins[0])], kernel_shape=k, strides=s, pads=pads)
            y = self.fused(y, o.FusedActivationFunction())
            self.emit_out(outs[0], y, nchw=True)

        return conv

    op_AVERAGE_POOL_2D = _pool("AveragePool")
    op_MAX_POOL_2D = _pool("MaxPool")

    def _resize(self, op: Any, ins: list[int], outs: list[int], mode: str) -> None:
        o = self.options(op)
        n, _, _, c = self.shape(ins[0])
        h, w = (int(v) for v in self.array(ins[1]))
        align = bool(o.AlignCorners()) if o is not None else False
        half = bool(o.HalfPixelCenters()) if o is not None else False
        attrs: dict[str, Any] = {"mode": mode}
        if mode == "linear":
            attrs["coordinate_transformation_mode"] = (
                "align_corners" if align else "half_pixel" if half else "asymmetric"
            )
        else:
            attrs["coordinate_transformation_mode"] = (
                "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
            )
            attrs["nearest_mode"] = "round_prefer_ceil" if align else "floor"
        y = self.b.node("Resize", [self.nchw_in(ins[0]), "", "", self.b.i64([n, c, h, w])], **attrs)
        self.emit_out(outs[0], y, nchw=True)

    def op_RESIZE_BILINEAR(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self._resize(op, ins, outs, "linear")

    def op_RESIZE_NEAREST_NEIGHBOR(self, op: Any, ins: list[int], outs: list[int]) -> None:
        self._resize(op, ins, outs, "nearest")

    def _space(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, op: Any, ins: list[int], outs: list[int]) -> None:
            bs = int(self.options(op).BlockSize())
            attrs = {"mode": "DCR"} if onnx_op == "DepthToSpace" else {}
            y = self.b.node(onnx_op, [self.nchw_in(ins[0])], blocksize=bs, **attrs)
            self.emit_out(outs[0], y, nchw=True)

        return conv

    op_DEPTH_TO_SPACE = _space("DepthToSpace")
    op_SPACE_TO_DEPTH = _space("SpaceToDepth")


def import_tflite(path: str | Path) -> onnx.ModelProto:
    source = Path(path)
    data = source.read_bytes()
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise Onnx2EdgeError(f"{source}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    try:
        return _Importer(data, source).run()
    except Onnx2EdgeError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, struct.error) as e:
        # offsets or sizes pointing outside the buffer, counts that do not match
        raise Onnx2EdgeError(
            f"{source}: corrupt TFLite flatbuffer ({type(e).__name__}: {e}); re-export it"
        ) from e
