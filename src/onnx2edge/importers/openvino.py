"""OpenVINO IR (model.xml + model.bin) -> ONNX.

The IR is read with xml.etree and numpy, no OpenVINO needed: layers, their ports and edges;
Const data sliced out of the .bin. Layers are opset1..opset15 operations in NCHW, so most map
one to one. Constant sub-graphs (FP16 Const -> Convert decompression, weight reshapes, ShapeOf of
a static shape) are folded into initializers by `fold_constants`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import Onnx2EdgeError, UnsupportedError
from ._builder import Builder

_ETYPES = {
    "f32": np.float32,
    "f16": np.float16,
    "f64": np.float64,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "boolean": np.bool_,
}
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def _ints(text: str | None) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()] if text else []


def _floats(text: str | None) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()] if text else []


class _Layer:
    def __init__(self, el: ET.Element) -> None:
        self.id = el.get("id", "")
        self.name = el.get("name", self.id)
        self.type = el.get("type", "")
        self.version = el.get("version", "")
        data = el.find("data")
        self.data: dict[str, str] = dict(data.attrib) if data is not None else {}
        self.in_ports = [p.get("id", "") for p in el.findall("input/port")]
        self.out_ports: list[tuple[str, str, list[int]]] = []
        for p in el.findall("output/port"):
            names = p.get("names", "")
            dims = [int(d.text or "0") for d in p.findall("dim")]
            self.out_ports.append((p.get("id", ""), names, dims))


class _Importer:
    def __init__(self, xml_path: Path) -> None:
        self.source = xml_path
        try:
            root = ET.parse(xml_path).getroot()
        except ET.ParseError as e:
            raise Onnx2EdgeError(f"{xml_path}: not a readable OpenVINO IR ({e})") from e
        if root.tag != "net":
            raise Onnx2EdgeError(f"{xml_path}: not an OpenVINO IR (root element <{root.tag}>)")
        bin_path = xml_path.with_suffix(".bin")
        self.weights = bin_path.read_bytes() if bin_path.is_file() else b""
        self.bin_path = bin_path
        self.layers = {el.get("id", ""): _Layer(el) for el in root.findall("layers/layer")}
        self.src: dict[tuple[str, str], tuple[str, str]] = {}
        for e in root.findall("edges/edge"):
            self.src[(e.get("to-layer", ""), e.get("to-port", ""))] = (
                e.get("from-layer", ""),
                e.get("from-port", ""),
            )
        self.b = Builder(fold=True)
        self.values: dict[tuple[str, str], str] = {}
        self.shapes: dict[tuple[str, str], list[int]] = {}
        self.name = root.get("name", xml_path.stem)

    # -- values ----------------------------------------------------------------------------
    def inputs(self, layer: _Layer) -> list[str]:
        return [
            self.values[self.src[(layer.id, p)]]
            for p in layer.in_ports
            if (layer.id, p) in self.src
        ]

    def in_shape(self, layer: _Layer, k: int) -> list[int]:
        return self.shapes.get(self.src[(layer.id, layer.in_ports[k])], [])

    def out_shape(self, layer: _Layer, k: int = 0) -> list[int]:
        return layer.out_ports[k][2]

    def const_of(self, layer: _Layer, k: int) -> np.ndarray:
        name = self.inputs(layer)[k]
        arr = self.b.const_value(name)
        if arr is None:
            raise UnsupportedError(
                f"{self.source}: layer '{layer.name}' ({layer.type}) needs a constant input {k} "
                "(computed shapes and axes are not supported)"
            )
        return arr

    def order(self) -> list[_Layer]:
        deps = {
            lid: {self.src[(lid, p)][0] for p in lay.in_ports if (lid, p) in self.src}
            for lid, lay in self.layers.items()
        }
        done: list[_Layer] = []
        seen: set[str] = set()
        for lid in self.layers:  # iterative DFS: IRs can be deep
            stack = [(lid, False)]
            while stack:
                cur, expanded = stack.pop()
                if cur in seen:
                    continue
                if expanded:
                    seen.add(cur)
                    done.append(self.layers[cur])
                    continue
                stack.append((cur, True))
                stack.extend((d, False) for d in deps.get(cur, ()) if d not in seen)
        return done

    def run(self) -> onnx.ModelProto:
        b = self.b
        results: list[_Layer] = []
        for layer in self.order():
            if layer.type == "Result":
                results.append(layer)
                continue
            conv = getattr(self, "op_" + layer.type, None)
            if conv is None:
                raise UnsupportedError(
                    f"{self.source}: layer '{layer.name}' ({layer.type}, {layer.version}) is not "
                    "supported by the OpenVINO importer (see docs/importers.md)"
                )
            outs = conv(layer)
            outs = [outs] if isinstance(outs, str) else outs
            for (pid, _, dims), name in zip(layer.out_ports, outs, strict=False):
                self.values[(layer.id, pid)] = name
                self.shapes[(layer.id, pid)] = dims
        inits = {t.name for t in b.inits}
        for r in results:
            key = self.src[(r.id, r.in_ports[0])]
            value = self.values[key]
            producer = self.layers[key[0]]
            port = next(p for p in producer.out_ports if p[0] == key[1])
            want = (port[1].split(",")[0].strip() if port[1] else "") or r.name
            if (
                want in b.used
                and want != value
                or value in inits
                or value in {i.name for i in b.inputs}
            ):
                want = b.fresh(want)
            if value != want:
                want = b.output_as(value, want)
            dt = self._value_dtype(value, producer)
            b.outputs.append(helper.make_tensor_value_info(want, dt, self._dims(port[2])))
        model = b.model(self.name, "onnx2edge-import-openvino", f"imported from {self.source.name}")
        return _drop_unused(model)

    def _dims(self, dims: list[int]) -> list[Any]:
        return [d if d >= 0 else f"d{i}" for i, d in enumerate(dims)]

    def _value_dtype(self, value: str, producer: _Layer) -> int:
        et = producer.data.get("element_type") or producer.data.get("destination_type")
        if producer.type in ("Parameter", "Convert") and et in _ETYPES:
            return helper.np_dtype_to_tensor_dtype(np.dtype(_ETYPES[et]))
        return onnx.TensorProto.FLOAT

    # -- sources ---------------------------------------------------------------------------
    def op_Parameter(self, layer: _Layer) -> str:
        et = layer.data.get("element_type", "f32")
        if et not in _ETYPES:
            raise UnsupportedError(f"{self.source}: input '{layer.name}' has element type {et}")
        pid, names, dims = layer.out_ports[0]
        name = (names.split(",")[0].strip() if names else "") or layer.name
        self.b.used.add(name)
        tt = helper.np_dtype_to_tensor_dtype(np.dtype(_ETYPES[et]))
        self.b.inputs.append(helper.make_tensor_value_info(name, tt, self._dims(dims)))
        return name

    def op_Const(self, layer: _Layer) -> str:
        et = layer.data.get("element_type", "")
        if et not in _ETYPES:
            raise UnsupportedError(
                f"{self.source}: constant '{layer.name}' has element type {et}, which the "
                "importer does not read (packed u1/u4/i4 weights are not supported)"
            )
        shape = _ints(layer.data.get("shape"))
        off, size = int(layer.data.get("offset", 0)), int(layer.data.get("size", 0))
        if not self.bin_path.is_file():
            raise Onnx2EdgeError(
                f"{self.source}: constant '{layer.name}' needs {self.bin_path.name}, which is not "
                "beside the .xml"
            )
        if off + size > len(self.weights):
            raise Onnx2EdgeError(
                f"{self.source}: constant '{layer.name}' needs bytes {off}..{off + size} of "
                f"{self.bin_path.name}, which has {len(self.weights)}"
            )
        arr = np.frombuffer(self.weights[off : off + size], dtype=_ETYPES[et]).reshape(shape)
        return self.b.const(arr.copy(), layer.name)

    # -- element-wise ----------------------------------------------------------------------
    def _plain(onnx_op: str, **attrs: Any) -> Callable:  # noqa: N805 - a method factory
        def conv(self: _Importer, layer: _Layer) -> str:
            return self.b.node(onnx_op, self.inputs(layer), **attrs)

        return conv

    op_Add = _plain("Add")
    op_Subtract = _plain("Sub")
    op_Multiply = _plain("Mul")
    op_Divide = _plain("Div")
    op_Maximum = _plain("Max")
    op_Minimum = _plain("Min")
    op_Power = _plain("Pow")
    op_Equal = _plain("Equal")
    op_Less = _plain("Less")
    op_Greater = _plain("Greater")
    op_Select = _plain("Where")
    op_Relu = _plain("Relu")
    op_ReLU = _plain("Relu")
    op_Sigmoid = _plain("Sigmoid")
    op_Tanh = _plain("Tanh")
    op_Exp = _plain("Exp")
    op_Log = _plain("Log")
    op_Sqrt = _plain("Sqrt")
    op_Abs = _plain("Abs")
    op_Negative = _plain("Neg")
    op_Floor = _plain("Floor")
    op_Ceiling = _plain("Ceil")
    op_Erf = _plain("Erf")
    op_Sin = _plain("Sin")
    op_Cos = _plain("Cos")
    op_SoftPlus = _plain("Softplus")
    op_HSwish = _plain("HardSwish")
    op_HSigmoid = _plain("HardSigmoid", alpha=1.0 / 6.0, beta=0.5)
    op_PRelu = _plain("PRelu")

    def op_Tile(self, layer: _Layer) -> str:
        x, reps = self.inputs(layer)
        return self.b.node("Tile", [x, self.b.node("Cast", [reps], to=onnx.TensorProto.INT64)])

    def op_SquaredDifference(self, layer: _Layer) -> str:
        d = self.b.node("Sub", self.inputs(layer))
        return self.b.node("Mul", [d, d])

    def op_Convert(self, layer: _Layer) -> str:
        et = layer.data.get("destination_type", "f32")
        if et not in _ETYPES:
            raise UnsupportedError(
                f"{self.source}: Convert '{layer.name}' to {et} is not supported"
            )
        to = helper.np_dtype_to_tensor_dtype(np.dtype(_ETYPES[et]))
        return self.b.node("Cast", self.inputs(layer)[:1], to=to)

    def op_Clamp(self, layer: _Layer) -> str:
        c = self.b.const
        lo, hi = float(layer.data.get("min", "-inf")), float(layer.data.get("max", "inf"))
        return self.b.node(
            "Clip", [self.inputs(layer)[0], c(np.float32(lo), "lo"), c(np.float32(hi), "hi")]
        )

    def op_Elu(self, layer: _Layer) -> str:
        return self.b.node("Elu", self.inputs(layer), alpha=float(layer.data.get("alpha", 1.0)))

    def op_Swish(self, layer: _Layer) -> str:
        ins = self.inputs(layer)
        x = ins[0]
        z = self.b.node("Mul", [x, ins[1]]) if len(ins) > 1 else x
        return self.b.node("Mul", [x, self.b.node("Sigmoid", [z])])

    def op_Mish(self, layer: _Layer) -> str:
        x = self.inputs(layer)[0]
        return self.b.node("Mul", [x, self.b.node("Tanh", [self.b.node("Softplus", [x])])])

    def op_Gelu(self, layer: _Layer) -> str:
        x = self.inputs(layer)[0]
        c = self.b.const
        if layer.data.get("approximation_mode", "ERF").upper() == "TANH":
            cube = self.b.node("Mul", [self.b.node("Mul", [x, x]), x])
            inner = self.b.node(
                "Add", [x, self.b.node("Mul", [cube, c(np.float32(0.044715), "k")])]
            )
            t = self.b.node(
                "Tanh", [self.b.node("Mul", [inner, c(np.float32(np.sqrt(2 / np.pi)), "k")])]
            )
        else:
            t = self.b.node("Erf", [self.b.node("Mul", [x, c(np.float32(1 / np.sqrt(2)), "k")])])
        half = self.b.node("Mul", [x, c(np.float32(0.5), "half")])
        return self.b.node("Mul", [half, self.b.node("Add", [t, c(np.float32(1), "one")])])

    def _softmax(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, layer: _Layer) -> str:
            return self.b.node(onnx_op, self.inputs(layer)[:1], axis=int(layer.data.get("axis", 1)))

        return conv

    op_SoftMax = _softmax("Softmax")
    op_Softmax = _softmax("Softmax")
    op_LogSoftmax = _softmax("LogSoftmax")

    def op_FakeQuantize(self, layer: _Layer) -> str:
        """QuantizeLinear + DequantizeLinear (uint8) where that is exactly FakeQuantize: one
        range, the same in and out, 256 levels, the zero on a level; otherwise the spec's
        formula in float ops (folded when the input is a constant weight)."""
        x, il, ih, ol, oh = self.inputs(layer)[:5]
        levels = int(layer.data.get("levels", 256))
        b, c = self.b, self.b.const
        rng = [b.const_value(v) for v in (il, ih, ol, oh)]
        if b.const_value(x) is None and all(r is not None and r.size == 1 for r in rng):
            lo, hi, olo, ohi = (float(r.reshape(-1)[0]) for r in rng)
            scale = (hi - lo) / (levels - 1) if hi > lo else 0.0
            zp = -lo / scale if scale else -1.0
            if (
                levels == 256
                and (lo, hi) == (olo, ohi)
                and abs(zp - round(zp)) < 1e-3
                and 0 <= round(zp) <= 255
            ):
                qargs = [c(np.float32(scale), "scale"), c(np.uint8(round(zp)), "zero_point")]
                return b.node("DequantizeLinear", [b.node("QuantizeLinear", [x, *qargs]), *qargs])
        steps = c(np.float32(levels - 1), "levels")
        t = b.node(
            "Round",
            [
                b.node(
                    "Mul", [b.node("Div", [b.node("Sub", [x, il]), b.node("Sub", [ih, il])]), steps]
                )
            ],
        )
        t = b.node("Add", [b.node("Mul", [b.node("Div", [t, steps]), b.node("Sub", [oh, ol])]), ol])
        low = b.node("LessOrEqual", [x, b.node("Min", [il, ih])])
        high = b.node("Greater", [x, b.node("Max", [il, ih])])
        return b.node("Where", [low, ol, b.node("Where", [high, oh, t])])

    # -- convolution and pooling -----------------------------------------------------------
    def _pads(self, layer: _Layer, kernel: list[int] | None = None) -> dict[str, Any]:
        auto = layer.data.get("auto_pad", "explicit").lower()
        if auto in ("same_upper", "same_lower"):
            # explicit pads where the sizes are static: Core ML and MPS take no auto_pad
            size = self.in_shape(layer, 0)[2:]
            if kernel is None or not size or min(size) < 0:
                return {"auto_pad": auto.upper()}
            s = _ints(layer.data.get("strides")) or [1] * len(size)
            d = _ints(layer.data.get("dilations")) or [1] * len(size)
            total = [
                max((-(-size[j] // s[j]) - 1) * s[j] + (kernel[j] - 1) * d[j] + 1 - size[j], 0)
                for j in range(len(size))
            ]
            small = [t // 2 for t in total]
            begin = (
                small
                if auto == "same_upper"
                else [t - h for t, h in zip(total, small, strict=True)]
            )
            return {"pads": begin + [t - b0 for t, b0 in zip(total, begin, strict=True)]}
        if auto == "valid":
            n = len(_ints(layer.data.get("strides")))
            return {"pads": [0] * (2 * n)}
        return {"pads": _ints(layer.data.get("pads_begin")) + _ints(layer.data.get("pads_end"))}

    def _conv_attrs(self, layer: _Layer, kernel: list[int] | None = None) -> dict[str, Any]:
        return {
            "strides": _ints(layer.data.get("strides")),
            "dilations": _ints(layer.data.get("dilations")),
            **self._pads(layer, kernel),
        }

    def op_Convolution(self, layer: _Layer) -> str:
        x, w = self.inputs(layer)[:2]
        return self.b.node("Conv", [x, w], **self._conv_attrs(layer, self.in_shape(layer, 1)[2:]))

    def op_GroupConvolution(self, layer: _Layer) -> str:
        x, w = self.inputs(layer)[:2]
        ws = self.in_shape(layer, 1)  # G, O/G, I/G, k...
        w = self.b.node("Reshape", [w, self.b.i64([ws[0] * ws[1], *ws[2:]])])
        return self.b.node(
            "Conv", [x, w], group=ws[0], **self._conv_attrs(layer, self.in_shape(layer, 1)[3:])
        )

    def _deconv(self, layer: _Layer, grouped: bool) -> str:
        ins = self.inputs(layer)
        x, w = ins[:2]
        attrs = self._conv_attrs(layer)
        op = _ints(layer.data.get("output_padding"))
        ws = self.in_shape(layer, 1)  # [G,] I(/G), O(/G), k...
        if len(ins) > 2:
            # output_shape given: pads_begin / pads_end are ignored, auto_pad splits the total;
            # as ONNX's ConvTranspose, same_upper puts the odd one at the beginning (the output
            # is cropped, not padded) and same_lower at the end (checked against OpenVINO)
            xs, out = self.in_shape(layer, 0)[2:], self.out_shape(layer)[2:]
            k = ws[-len(xs) :]
            s = attrs["strides"] or [1] * len(xs)
            d = attrs["dilations"] or [1] * len(xs)
            opad = op or [0] * len(xs)
            total = [
                (xs[j] - 1) * s[j] + (k[j] - 1) * d[j] + 1 + opad[j] - out[j]
                for j in range(len(xs))
            ]
            lower = layer.data.get("auto_pad", "").lower() == "same_lower"
            begin = [t // 2 if lower else t - t // 2 for t in total]
            attrs.pop("auto_pad", None)
            attrs["pads"] = begin + [t - b0 for t, b0 in zip(total, begin, strict=True)]
        elif any(op):
            attrs["output_padding"] = op
        if any(op) and len(ins) > 2:
            attrs["output_padding"] = op
        if grouped:
            w = self.b.node("Reshape", [w, self.b.i64([ws[0] * ws[1], *ws[2:]])])
            attrs["group"] = ws[0]
        return self.b.node("ConvTranspose", [x, w], **attrs)

    def op_ConvolutionBackpropData(self, layer: _Layer) -> str:
        return self._deconv(layer, False)

    def op_GroupConvolutionBackpropData(self, layer: _Layer) -> str:
        return self._deconv(layer, True)

    def _pool_attrs(self, layer: _Layer) -> dict[str, Any]:
        attrs = {
            "kernel_shape": _ints(layer.data.get("kernel")),
            "strides": _ints(layer.data.get("strides")),
            **self._pads(layer, _ints(layer.data.get("kernel"))),
        }
        if layer.data.get("rounding_type", "floor").lower() == "ceil":
            attrs["ceil_mode"] = 1
        return attrs

    def op_MaxPool(self, layer: _Layer) -> str:
        attrs = self._pool_attrs(layer)
        dil = _ints(layer.data.get("dilations"))
        if dil and any(d != 1 for d in dil):
            attrs["dilations"] = dil
        return self.b.node("MaxPool", self.inputs(layer)[:1], **attrs)

    def op_AvgPool(self, layer: _Layer) -> str:
        exclude = layer.data.get("exclude-pad", "false").lower() == "true"
        return self.b.node(
            "AveragePool",
            self.inputs(layer)[:1],
            count_include_pad=0 if exclude else 1,
            **self._pool_attrs(layer),
        )

    def op_BatchNormInference(self, layer: _Layer) -> str:
        ins = self.inputs(layer)
        if layer.version == "opset1":  # input, gamma, beta, mean, variance as in opset5
            pass
        return self.b.node(
            "BatchNormalization", ins, epsilon=float(layer.data.get("epsilon", 1e-5))
        )

    def op_MVN(self, layer: _Layer) -> str:
        ins = self.inputs(layer)
        x = ins[0]
        if len(ins) > 1:
            axes = [int(a) for a in self.const_of(layer, 1).reshape(-1)]
        else:  # opset2: across_channels
            rank = len(self.in_shape(layer, 0))
            start = 1 if layer.data.get("across_channels", "false").lower() == "true" else 2
            axes = list(range(start, rank))
        eps = float(layer.data.get("eps", 1e-9))
        mean = self.b.node("ReduceMean", [x], axes=axes, keepdims=1)
        d = self.b.node("Sub", [x, mean])
        if layer.data.get("normalize_variance", "true").lower() != "true":
            return d
        var = self.b.node("ReduceMean", [self.b.node("Mul", [d, d])], axes=axes, keepdims=1)
        e = self.b.const(np.float32(eps), "eps")
        if layer.data.get("eps_mode", "inside_sqrt").lower() == "outside_sqrt":
            den = self.b.node("Add", [self.b.node("Sqrt", [var]), e])
        else:
            den = self.b.node("Sqrt", [self.b.node("Add", [var, e])])
        return self.b.node("Div", [d, den])

    def op_NormalizeL2(self, layer: _Layer) -> str:
        x = self.inputs(layer)[0]
        axes = [int(a) for a in self.const_of(layer, 1).reshape(-1)]
        ss = self.b.node("ReduceSum", [self.b.node("Mul", [x, x]), self.b.i64(axes)], keepdims=1)
        e = self.b.const(np.float32(float(layer.data.get("eps", 1e-12))), "eps")
        ss = self.b.node("Add" if layer.data.get("eps_mode", "add") == "add" else "Max", [ss, e])
        return self.b.node("Div", [x, self.b.node("Sqrt", [ss])])

    # -- shapes ----------------------------------------------------------------------------
    def op_Reshape(self, layer: _Layer) -> str:
        x = self.inputs(layer)[0]
        shape = self.const_of(layer, 1).astype(np.int64).reshape(-1)
        if layer.data.get("special_zero", "false").lower() != "true" and (shape == 0).any():
            raise UnsupportedError(f"{self.source}: Reshape '{layer.name}' to a zero-size shape")
        return self.b.node("Reshape", [x, self.b.i64(shape)])

    def op_Transpose(self, layer: _Layer) -> str:
        perm = [int(p) for p in self.const_of(layer, 1).reshape(-1)]
        if not perm:
            perm = list(reversed(range(len(self.in_shape(layer, 0)))))
        return self.b.node("Transpose", self.inputs(layer)[:1], perm=perm)

    def _axes_op(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, layer: _Layer) -> str:
            ins = self.inputs(layer)
            if len(ins) < 2:
                return self.b.node(onnx_op, ins)
            axes = self.const_of(layer, 1).astype(np.int64).reshape(-1)
            return self.b.node(onnx_op, [ins[0], self.b.i64(axes)])

        return conv

    op_Squeeze = _axes_op("Squeeze")
    op_Unsqueeze = _axes_op("Unsqueeze")

    def op_Concat(self, layer: _Layer) -> str:
        return self.b.node("Concat", self.inputs(layer), axis=int(layer.data.get("axis", 0)))

    def op_ShapeOf(self, layer: _Layer) -> str:
        shape = self.in_shape(layer, 0)
        et = _ETYPES.get(layer.data.get("output_type", "i64"), np.int64)
        if shape and min(shape) >= 0:
            return self.b.const(np.asarray(shape, dtype=et), "shape")
        s = self.b.node("Shape", self.inputs(layer)[:1])
        return self.b.node("Cast", [s], to=helper.np_dtype_to_tensor_dtype(np.dtype(et)))

    def op_Range(self, layer: _Layer) -> str:
        et = layer.data.get("output_type")
        if et is None:  # Range-1: the inputs' type
            return self.b.node("Range", self.inputs(layer)[:3])
        if et not in _ETYPES:
            raise UnsupportedError(f"{self.source}: Range '{layer.name}' of type {et}")
        to = helper.np_dtype_to_tensor_dtype(np.dtype(_ETYPES[et]))
        return self.b.node(
            "Range", [self.b.node("Cast", [i], to=to) for i in self.inputs(layer)[:3]]
        )

    def op_Broadcast(self, layer: _Layer) -> str:
        mode = layer.data.get("mode", "numpy").lower()
        if mode not in ("numpy", "bidirectional"):
            raise UnsupportedError(f"{self.source}: Broadcast '{layer.name}' in mode {mode}")
        ins = self.inputs(layer)
        return self.b.node(
            "Expand", [ins[0], self.b.node("Cast", [ins[1]], to=onnx.TensorProto.INT64)]
        )

    def op_Gather(self, layer: _Layer) -> str:
        if int(layer.data.get("batch_dims", 0)):
            raise UnsupportedError(f"{self.source}: Gather '{layer.name}' with batch_dims")
        ins = self.inputs(layer)
        axis = int(self.const_of(layer, 2).reshape(-1)[0])
        return self.b.node("Gather", ins[:2], axis=axis)

    def op_Slice(self, layer: _Layer) -> str:
        ins = self.inputs(layer)
        cast = [self.b.node("Cast", [i], to=onnx.TensorProto.INT64) for i in ins[1:]]
        x = ins[0]
        return self.b.node(
            "Slice", [x, cast[0], cast[1], cast[3] if len(cast) > 3 else "", cast[2]]
        )

    def op_StridedSlice(self, layer: _Layer) -> str:
        d = layer.data
        if any(_ints(d.get("new_axis_mask"))) or any(_ints(d.get("ellipsis_mask"))):
            raise UnsupportedError(
                f"{self.source}: StridedSlice '{layer.name}' with new-axis / ellipsis masks"
            )
        begin = [int(v) for v in self.const_of(layer, 1).reshape(-1)]
        end = [int(v) for v in self.const_of(layer, 2).reshape(-1)]
        ins = self.inputs(layer)
        strides = (
            [int(v) for v in self.const_of(layer, 3).reshape(-1)]
            if len(ins) > 3
            else [1] * len(begin)
        )
        bm, em, sm = (_ints(d.get(k)) for k in ("begin_mask", "end_mask", "shrink_axis_mask"))
        starts, ends = [], []
        for i, (b0, e0, s) in enumerate(zip(begin, end, strides, strict=True)):
            if i < len(bm) and bm[i]:
                b0 = 0 if s > 0 else _INT64_MAX
            if i < len(em) and em[i]:
                e0 = _INT64_MAX if s > 0 else _INT64_MIN
            if i < len(sm) and sm[i]:
                e0 = b0 + 1 if b0 != -1 else _INT64_MAX
                strides[i] = 1
            starts.append(b0)
            ends.append(e0)
        axes = list(range(len(begin)))
        y = self.b.node(
            "Slice",
            [ins[0], self.b.i64(starts), self.b.i64(ends), self.b.i64(axes), self.b.i64(strides)],
        )
        if any(sm):
            out = self.out_shape(layer)
            y = self.b.node("Reshape", [y, self.b.i64([v if v >= 0 else -1 for v in out])])
        return y

    def _split(self, layer: _Layer, x: str, axis: int, sizes: list[int]) -> list[str]:
        names = [self.b.fresh(f"{layer.name}_{i}") for i in range(len(sizes))]
        self.b.nodes.append(
            helper.make_node(
                "Split", [x, self.b.i64(sizes)], names, axis=axis, name=self.b.fresh("Split")
            )
        )
        return names

    def op_Split(self, layer: _Layer) -> list[str]:
        axis = int(self.const_of(layer, 1).reshape(-1)[0])
        n = int(layer.data.get("num_splits", 1))
        dim = self.in_shape(layer, 0)[axis]
        return self._split(layer, self.inputs(layer)[0], axis, [dim // n] * n)

    def op_VariadicSplit(self, layer: _Layer) -> list[str]:
        axis = int(self.const_of(layer, 1).reshape(-1)[0])
        sizes = [int(v) for v in self.const_of(layer, 2).reshape(-1)]
        if -1 in sizes:
            dim = self.in_shape(layer, 0)[axis]
            sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
        return self._split(layer, self.inputs(layer)[0], axis, sizes)

    def op_Pad(self, layer: _Layer) -> str:
        ins = self.inputs(layer)
        pb = self.const_of(layer, 1).astype(np.int64).reshape(-1)
        pe = self.const_of(layer, 2).astype(np.int64).reshape(-1)
        mode = layer.data.get("pad_mode", "constant").lower()
        if mode == "symmetric":
            raise UnsupportedError(f"{self.source}: Pad '{layer.name}' in symmetric mode")
        args = [ins[0], self.b.i64([*pb, *pe])]
        if len(ins) > 3 and mode == "constant":
            args.append(ins[3])
        return self.b.node("Pad", args, mode=mode)

    def op_DepthToSpace(self, layer: _Layer) -> str:
        mode = "DCR" if layer.data.get("mode", "blocks_first") == "blocks_first" else "CRD"
        return self.b.node(
            "DepthToSpace",
            self.inputs(layer)[:1],
            blocksize=int(layer.data.get("block_size", 1)),
            mode=mode,
        )

    def op_SpaceToDepth(self, layer: _Layer) -> str:
        if layer.data.get("mode", "blocks_first") != "blocks_first":
            raise UnsupportedError(
                f"{self.source}: SpaceToDepth '{layer.name}' in depth_first mode"
            )
        return self.b.node(
            "SpaceToDepth", self.inputs(layer)[:1], blocksize=int(layer.data.get("block_size", 1))
        )

    # -- reductions, products, resize ------------------------------------------------------
    def _reduce(onnx_op: str) -> Callable:  # noqa: N805
        def conv(self: _Importer, layer: _Layer) -> str:
            rank = len(self.in_shape(layer, 0))
            axes = sorted({int(a) % rank for a in self.const_of(layer, 1).reshape(-1)})
            keep = int(layer.data.get("keep_dims", "false").lower() == "true")
            x = self.inputs(layer)[0]
            if onnx_op == "ReduceSum":
                return self.b.node(onnx_op, [x, self.b.i64(axes)], keepdims=keep)
            return self.b.node(onnx_op, [x], axes=axes, keepdims=keep)

        return conv

    op_ReduceMean = _reduce("ReduceMean")
    op_ReduceSum = _reduce("ReduceSum")
    op_ReduceMax = _reduce("ReduceMax")
    op_ReduceMin = _reduce("ReduceMin")
    op_ReduceProd = _reduce("ReduceProd")

    def op_MatMul(self, layer: _Layer) -> str:
        a, b_ = self.inputs(layer)[:2]

        def swap(x: str, rank: int) -> str:
            return self.b.node("Transpose", [x], perm=[*range(rank - 2), rank - 1, rank - 2])

        if layer.data.get("transpose_a", "false").lower() == "true":
            a = swap(a, len(self.in_shape(layer, 0)))
        if layer.data.get("transpose_b", "false").lower() == "true":
            b_ = swap(b_, len(self.in_shape(layer, 1)))
        return self.b.node("MatMul", [a, b_])

    def op_Interpolate(self, layer: _Layer) -> str:
        d = layer.data
        if layer.version == "opset1":
            raise UnsupportedError(f"{self.source}: Interpolate-1 '{layer.name}' is not supported")
        if (
            d.get("antialias", "false").lower() == "true"
            or any(_ints(d.get("pads_begin")))
            or any(_ints(d.get("pads_end")))
        ):
            raise UnsupportedError(
                f"{self.source}: Interpolate '{layer.name}' with antialias or pads"
            )
        mode = {
            "nearest": "nearest",
            "linear": "linear",
            "linear_onnx": "linear",
            "cubic": "cubic",
        }.get(d.get("mode", ""))
        if mode is None:
            raise UnsupportedError(
                f"{self.source}: Interpolate '{layer.name}' in mode {d.get('mode')}"
            )
        nearest = d.get("nearest_mode", "round_prefer_floor")
        if nearest == "simple":
            raise UnsupportedError(
                f"{self.source}: Interpolate '{layer.name}' with nearest_mode simple"
            )
        ins, outs = self.in_shape(layer, 0), self.out_shape(layer)
        attrs: dict[str, Any] = {
            "mode": mode,
            "coordinate_transformation_mode": d.get("coordinate_transformation_mode", "half_pixel"),
        }
        if mode == "nearest":
            attrs["nearest_mode"] = nearest
        if mode == "cubic":
            attrs["cubic_coeff_a"] = float(d.get("cube_coeff", -0.75))
        x = self.inputs(layer)[0]
        n_in = len(self.inputs(layer))
        rank = len(ins)
        by_scales = d.get("shape_calculation_mode", "sizes") == "scales"
        # Interpolate-4: data, sizes, scales[, axes]; Interpolate-11: data, scales_or_sizes[, axes]
        v4 = layer.version == "opset4"
        arg = (2 if by_scales else 1) if v4 else 1
        has_axes = n_in > (3 if v4 else 2)
        axes = (
            [int(a) % rank for a in self.const_of(layer, n_in - 1).reshape(-1)]
            if has_axes
            else list(range(rank))
        )
        if by_scales:
            given = self.const_of(layer, arg).astype(np.float32).reshape(-1)
            full = np.ones(rank, np.float32)
            full[axes] = given[-len(axes) :] if len(given) != len(axes) else given
            y_in = [x, "", self.b.const(full, "scales")]
        elif min(ins) > 0 and min(outs) > 0:
            y_in = [x, "", "", self.b.i64(outs)]
        else:  # sizes of some axes, the rest as the input has them
            sizes = self.const_of(layer, arg).astype(np.int64).reshape(-1)
            shape = self.b.node("Shape", [x])
            full = self.b.node(
                "ScatterElements", [shape, self.b.i64(axes), self.b.i64(sizes)], axis=0
            )
            y_in = [x, "", "", full]
        nhwc = rank == 4 and axes == [1, 2]
        if nhwc:
            # spatial dims 1, 2 of an NHWC tensor: resized NCHW (the layout targets resize in)
            x = self.b.node("Transpose", [x], perm=[0, 3, 1, 2])
            y_in[0] = x
            if by_scales:
                y_in[2] = self.b.const(full[[0, 3, 1, 2]], "scales")
            elif len(y_in) == 4 and min(outs) > 0:
                y_in[3] = self.b.i64([outs[0], outs[3], outs[1], outs[2]])
            else:
                raise UnsupportedError(
                    f"{self.source}: Interpolate '{layer.name}' of dynamic NHWC sizes is not supported"
                )
            y = self.b.node("Resize", y_in, **attrs)
            return self.b.node("Transpose", [y], perm=[0, 2, 3, 1])
        return self.b.node("Resize", y_in, **attrs)


def _drop_unused(model: onnx.ModelProto) -> onnx.ModelProto:
    """Initializers only folding read (FP16 weights before their Convert, shape operands)."""
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    keep = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model


def import_openvino(path: str | Path) -> onnx.ModelProto:
    source = Path(path)
    try:
        return _Importer(source).run()
    except Onnx2EdgeError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, StopIteration) as e:
        # a dangling edge, an attribute that is not a number, a shape the data does not fill
        raise Onnx2EdgeError(f"{source}: inconsistent OpenVINO IR ({type(e).__name__}: {e})") from e
