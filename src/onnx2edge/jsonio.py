"""Lossless ONNX <-> JSON, for editing a model by hand (seed 002's onnx2json / json2onnx).

Why not protobuf's json_format: it refuses float fields at ±FLT_MAX on the way back ("Float
value too large", the bug PINTO's json2onnx inherits), prints weights as base64 blobs, and
cannot write them to .npy files. This codec walks the protobuf descriptors itself:

- every field that is set is written under its proto name, enums by their names;
- floats as exact decimals (the shortest text that reads back to the same float32), NaN and
  ±Inf as the strings "NaN", "Infinity", "-Infinity" (JSON has no literal for them);
- bytes fields as base64; TensorProto as readable arrays (`values`, nested by `dims`) or as a
  `.npy` file next to the JSON (`npy`), remembering which proto field held the data
  (`storage`), so the re-serialised model is byte-identical to the original's deterministic
  serialisation. Tensors it cannot show as numpy arrays (bfloat16, float8, 4-bit, complex,
  NaNs with payloads, several data fields) are kept field by field, still losslessly.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from onnx import TensorProto

from .errors import Onnx2EdgeError
from .fsutil import resolve_inside

FORMAT = "onnx2edge-json"
VERSION = 1
WEIGHT_MODES = ("auto", "inline", "npy")
INLINE_LIMIT = 4096  # elements; in `auto` mode larger tensors go to .npy files
_SHORTEST_LIMIT = 1 << 16  # past this, exact doubles instead of shortest float32 text (speed)

_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
_NUMPY_TYPES: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype("<f4"),
    TensorProto.DOUBLE: np.dtype("<f8"),
    TensorProto.FLOAT16: np.dtype("<f2"),
    TensorProto.INT8: np.dtype("i1"),
    TensorProto.INT16: np.dtype("<i2"),
    TensorProto.INT32: np.dtype("<i4"),
    TensorProto.INT64: np.dtype("<i8"),
    TensorProto.UINT8: np.dtype("u1"),
    TensorProto.UINT16: np.dtype("<u2"),
    TensorProto.UINT32: np.dtype("<u4"),
    TensorProto.UINT64: np.dtype("<u8"),
    TensorProto.BOOL: np.dtype("?"),
}
# Which typed field ONNX uses for each element type (onnx.proto3 comments on TensorProto).
_TYPED_FIELD = {
    TensorProto.FLOAT: "float_data",
    TensorProto.DOUBLE: "double_data",
    TensorProto.FLOAT16: "int32_data",
    TensorProto.INT8: "int32_data",
    TensorProto.INT16: "int32_data",
    TensorProto.INT32: "int32_data",
    TensorProto.UINT8: "int32_data",
    TensorProto.UINT16: "int32_data",
    TensorProto.BOOL: "int32_data",
    TensorProto.INT64: "int64_data",
    TensorProto.UINT32: "uint64_data",
    TensorProto.UINT64: "uint64_data",
}
# int32 fields that hold a TensorProto.DataType: written by name so a person can read them.
_DATATYPE_FIELDS = {
    "onnx.TensorProto.data_type",
    "onnx.TypeProto.Tensor.elem_type",
    "onnx.TypeProto.SparseTensor.elem_type",
}
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class JsonModelError(Onnx2EdgeError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")


# ---------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------
def _float_out(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


class _Encoder:
    def __init__(self, weights: str, npy_dir: Path | None, npy_ref: str, inline_limit: int) -> None:
        self.weights = weights
        self.npy_dir = npy_dir
        self.npy_ref = npy_ref
        self.inline_limit = inline_limit
        self.npy_files: dict[str, np.ndarray] = {}

    def message(self, msg: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fd, value in msg.ListFields():
            if fd.message_type is not None and fd.message_type.full_name == "onnx.TensorProto":
                enc = self.tensor
            elif fd.message_type is not None:
                enc = self.message
            else:
                enc = _scalar_encoder(fd)
            if fd.is_repeated:
                out[fd.name] = [enc(v) for v in value]
            else:
                out[fd.name] = enc(value)
        return out

    def tensor(self, t: TensorProto) -> dict[str, Any]:
        arr, storage = _readable_array(t)
        if arr is None:
            return self.message(t)
        out: dict[str, Any] = {}
        for fd, value in t.ListFields():
            if fd.name in _DATA_FIELDS:
                continue
            enc = self.message if fd.message_type is not None else _scalar_encoder(fd)
            out[fd.name] = [enc(v) for v in value] if fd.is_repeated else enc(value)
        out["storage"] = storage
        to_npy = self.weights == "npy" or (self.weights == "auto" and arr.size > self.inline_limit)
        if to_npy and self.npy_dir is not None:
            fname = self._npy_name(t.name or "tensor")
            self.npy_files[fname] = arr
            out["npy"] = f"{self.npy_ref}/{fname}"
        else:
            out["values"] = _array_to_json(arr)
        return out

    def _npy_name(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "tensor"
        fname, i = f"{base}.npy", 1
        while fname in self.npy_files:
            fname, i = f"{base}_{i}.npy", i + 1
        return fname


def _scalar_encoder(fd: FieldDescriptor) -> Callable[[Any], Any]:
    if fd.full_name in _DATATYPE_FIELDS:
        names = TensorProto.DataType.DESCRIPTOR.values_by_number
        return lambda v: names[v].name if v in names else v
    if fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return _float_out
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return lambda v: base64.b64encode(v).decode("ascii")
    if fd.type == FieldDescriptor.TYPE_ENUM:
        names = fd.enum_type.values_by_number
        return lambda v: names[v].name if v in names else v
    return lambda v: v


def _readable_array(t: TensorProto) -> tuple[np.ndarray | None, str]:
    """The tensor's data as a numpy array, and the field it came from; None if not exact."""
    fields = [
        f
        for f in _DATA_FIELDS
        if f == "raw_data" and t.HasField("raw_data") or f != "raw_data" and len(getattr(t, f))
    ]
    if (
        len(fields) != 1
        or t.data_location == TensorProto.EXTERNAL
        or t.data_type not in _NUMPY_TYPES
    ):
        return None, ""
    field = fields[0]
    dtype = _NUMPY_TYPES[t.data_type]
    count = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
    if field == "raw_data":
        if len(t.raw_data) != count * dtype.itemsize:
            return None, ""
        arr = np.frombuffer(t.raw_data, dtype=dtype)
    elif field == _TYPED_FIELD.get(t.data_type):
        data = getattr(t, field)
        if len(data) != count:
            return None, ""
        if t.data_type == TensorProto.FLOAT16:
            bits = np.array(data, dtype=np.int64)
            if bits.min() < 0 or bits.max() > 0xFFFF:
                return None, ""
            arr = bits.astype(np.uint16).view(np.float16)
        else:
            src = np.array(data)
            arr = src.astype(dtype)
            if t.data_type != TensorProto.FLOAT and not np.array_equal(arr.astype(src.dtype), src):
                return None, ""  # values out of the element type's range: keep them verbatim
    else:
        return None, ""
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        canon = np.array(np.nan, dtype=arr.dtype).view(f"u{arr.itemsize}")
        payloads = np.abs(arr[np.isnan(arr)]).view(f"u{arr.itemsize}")
        if (
            field == "raw_data"
            and (arr[np.isnan(arr)].view(f"u{arr.itemsize}") != canon).any()
            or (payloads != canon).any()
        ):
            return None, ""
    return arr.reshape(tuple(t.dims)), field


def _array_to_json(arr: np.ndarray) -> Any:
    if arr.dtype.kind != "f":
        return arr.tolist()
    if arr.size <= _SHORTEST_LIMIT:
        # shortest decimal that reads back to the same float32/float16: readable and exact
        flat: list[Any] = [
            _float_out(float(repr(x).split("(")[-1].rstrip(")")))
            if np.isfinite(x)
            else _float_out(float(x))
            for x in arr.reshape(-1)
        ]
        return np.array(flat, dtype=object).reshape(arr.shape).tolist()
    flat = [_float_out(x) for x in arr.astype(np.float64).reshape(-1).tolist()]
    return np.array(flat, dtype=object).reshape(arr.shape).tolist()


def model_to_json(
    model: onnx.ModelProto,
    *,
    weights: str = "auto",
    npy_ref: str = "weights",
    inline_limit: int = INLINE_LIMIT,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Return the JSON document and the .npy files it references (relative name -> array)."""
    if weights not in WEIGHT_MODES:
        raise Onnx2EdgeError(
            f"unknown weights mode '{weights}' (choose from {', '.join(WEIGHT_MODES)})"
        )
    enc = _Encoder(weights, Path(npy_ref), npy_ref, inline_limit)
    doc = {"format": FORMAT, "version": VERSION, "model": enc.message(model)}
    return doc, enc.npy_files


# ---------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------
class _Decoder:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    def message(self, obj: Any, desc: Descriptor, cls: type[Message], path: str) -> Message:
        if not isinstance(obj, dict):
            raise JsonModelError(
                path, f"expected an object for {desc.name}, got {type(obj).__name__}"
            )
        msg = cls()
        for key, value in obj.items():
            fd = desc.fields_by_name.get(key)
            if fd is None:
                raise JsonModelError(f"{path}.{key}", f"unknown field of {desc.name}")
            self._field(msg, fd, value, f"{path}.{key}")
        return msg

    def _field(self, msg: Message, fd: FieldDescriptor, value: Any, path: str) -> None:
        repeated = fd.is_repeated
        if repeated and not isinstance(value, list):
            raise JsonModelError(path, f"expected a list, got {type(value).__name__}")
        items = value if repeated else [value]
        if fd.message_type is not None:
            sub_cls = type(getattr(msg, fd.name).add() if repeated else getattr(msg, fd.name))
            if repeated:
                del getattr(msg, fd.name)[:]
            subs = [
                self.tensor(v, f"{path}[{i}]" if repeated else path)
                if fd.message_type.full_name == "onnx.TensorProto"
                else self.message(v, fd.message_type, sub_cls, f"{path}[{i}]" if repeated else path)
                for i, v in enumerate(items)
            ]
            if repeated:
                getattr(msg, fd.name).extend(subs)
            else:
                getattr(msg, fd.name).CopyFrom(subs[0])
            return
        conv = [
            self._scalar(fd, v, f"{path}[{i}]" if repeated else path) for i, v in enumerate(items)
        ]
        if repeated:
            getattr(msg, fd.name).extend(conv)
        else:
            setattr(msg, fd.name, conv[0])

    def _scalar(self, fd: FieldDescriptor, v: Any, path: str) -> Any:
        t = fd.type
        if fd.full_name in _DATATYPE_FIELDS and isinstance(v, str):
            ev = TensorProto.DataType.DESCRIPTOR.values_by_name.get(v)
            if ev is None:
                raise JsonModelError(
                    path, f"unknown DataType '{v}' (e.g. FLOAT, FLOAT16, INT64, UINT8, BOOL)"
                )
            return ev.number
        if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            if isinstance(v, str) and v in _NONFINITE:
                return _NONFINITE[v]
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise JsonModelError(
                    path, f'expected a number or "NaN"/"Infinity"/"-Infinity", got {v!r}'
                )
            if t == FieldDescriptor.TYPE_FLOAT:
                return float(np.float32(v))  # protobuf refuses doubles past FLT_MAX; round first
            return float(v)
        if t == FieldDescriptor.TYPE_BYTES:
            if not isinstance(v, str):
                raise JsonModelError(path, f"expected a base64 string, got {type(v).__name__}")
            try:
                return base64.b64decode(v, validate=True)
            except ValueError:
                raise JsonModelError(path, "invalid base64") from None
        if t == FieldDescriptor.TYPE_STRING:
            if not isinstance(v, str):
                raise JsonModelError(path, f"expected a string, got {type(v).__name__}")
            return v
        if t == FieldDescriptor.TYPE_BOOL:
            if not isinstance(v, bool):
                raise JsonModelError(path, f"expected true or false, got {v!r}")
            return v
        if t == FieldDescriptor.TYPE_ENUM:
            if isinstance(v, str):
                ev = fd.enum_type.values_by_name.get(v)
                if ev is None:
                    names = ", ".join(x.name for x in fd.enum_type.values)
                    raise JsonModelError(
                        path, f"unknown {fd.enum_type.name} '{v}' (one of: {names})"
                    )
                return ev.number
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            raise JsonModelError(path, f"expected a {fd.enum_type.name} name, got {v!r}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise JsonModelError(path, f"expected an integer, got {v!r}")
        return v

    def tensor(self, obj: Any, path: str) -> TensorProto:
        if not isinstance(obj, dict):
            raise JsonModelError(
                path, f"expected an object for TensorProto, got {type(obj).__name__}"
            )
        if "storage" not in obj:
            return self.message(obj, TensorProto.DESCRIPTOR, TensorProto, path)  # type: ignore[return-value]
        rest = {k: v for k, v in obj.items() if k not in ("storage", "values", "npy")}
        t: TensorProto = self.message(rest, TensorProto.DESCRIPTOR, TensorProto, path)  # type: ignore[assignment]
        storage = obj["storage"]
        if storage not in _DATA_FIELDS or storage == "string_data":
            raise JsonModelError(f"{path}.storage", f"unknown storage '{storage}'")
        if t.data_type not in _NUMPY_TYPES:
            raise JsonModelError(f"{path}.data_type", "this element type cannot be given as values")
        dtype = _NUMPY_TYPES[t.data_type]
        if ("values" in obj) == ("npy" in obj):
            raise JsonModelError(path, "a tensor needs exactly one of 'values' or 'npy'")
        shape = tuple(t.dims)
        if "npy" in obj:
            arr = self._load_npy(obj["npy"], f"{path}.npy")
        else:
            try:
                arr = np.array(obj["values"], dtype=dtype)
            except (ValueError, TypeError) as e:
                raise JsonModelError(
                    f"{path}.values", f"not an array of {dtype.name}: {e}"
                ) from None
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise JsonModelError(
                f"{path}.{'npy' if 'npy' in obj else 'values'}",
                f"{arr.size} values for dims {list(shape)} ({int(np.prod(shape, dtype=np.int64))} expected)",
            )
        if "npy" in obj and arr.dtype != dtype:
            raise JsonModelError(
                f"{path}.npy", f"array has dtype {arr.dtype}, data_type needs {dtype}"
            )
        arr = arr.astype(dtype, copy=False).reshape(-1)
        _store(t, storage, arr, path)
        return t

    def _load_npy(self, ref: Any, path: str) -> np.ndarray:
        if not isinstance(ref, str):
            raise JsonModelError(path, "expected a path to a .npy file")
        try:
            file = resolve_inside(self.base_dir, ref, f"{path}: .npy file")
        except Onnx2EdgeError as e:
            raise JsonModelError(path, str(e).split(": ", 1)[-1]) from None
        if not file.is_file():
            raise JsonModelError(path, f"file '{ref}' not found next to the JSON")
        try:
            return np.load(file, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise JsonModelError(path, f"cannot read '{ref}': {e}") from None


def _store(t: TensorProto, storage: str, arr: np.ndarray, path: str) -> None:
    if storage == "raw_data":
        t.raw_data = arr.tobytes()
        return
    if storage != _TYPED_FIELD.get(t.data_type):
        raise JsonModelError(
            f"{path}.storage",
            f"'{storage}' cannot hold data_type {TensorProto.DataType.Name(t.data_type)}",
        )
    if t.data_type == TensorProto.FLOAT16:
        getattr(t, storage).extend(arr.view(np.uint16).astype(np.int64).tolist())
    elif t.data_type == TensorProto.BOOL:
        getattr(t, storage).extend(arr.astype(np.int64).tolist())
    else:
        getattr(t, storage).extend(arr.tolist())


def model_from_json(doc: Any, base_dir: str | Path) -> onnx.ModelProto:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise JsonModelError("$", f'not an {FORMAT} document (missing "format": "{FORMAT}")')
    if doc.get("version") != VERSION:
        raise JsonModelError(
            "$.version", f"unsupported version {doc.get('version')!r} (this tool reads {VERSION})"
        )
    if "model" not in doc:
        raise JsonModelError("$", 'missing "model"')
    dec = _Decoder(Path(base_dir))
    return dec.message(doc["model"], onnx.ModelProto.DESCRIPTOR, onnx.ModelProto, "$.model")  # type: ignore[return-value]


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def loads(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise Onnx2EdgeError(
            f"{source}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
