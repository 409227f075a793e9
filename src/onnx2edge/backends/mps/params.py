"""The parameter blob of a generated package: one `weights.bin` plus a `weights.json` manifest.

Every tensor starts at a 16-byte aligned offset (Metal and NEON like aligned loads; mapped
pages are page aligned) and is recorded in the manifest with its shape, dtype, MPS layout and
a sha256, so a tool can check or replace one layer's weights without reading Swift.
Convolution weights may be stored as float16 (`--fp16`); biases and normalization parameters
stay float32 because `MPSCNNConvolutionDataSource.biasTerms()` returns `Float` pointers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALIGN = 16


@dataclass
class ParamBlob:
    fp16: bool = False
    data: bytearray = field(default_factory=bytearray)
    layers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def weight_dtype(self) -> np.dtype:
        return np.dtype(np.float16 if self.fp16 else np.float32)

    def add(
        self, array: np.ndarray, *, dtype: np.dtype | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Append a tensor; returns its byte offset and its manifest entry."""
        arr = np.ascontiguousarray(array, dtype=dtype or np.float32)
        pad = (-len(self.data)) % ALIGN
        self.data.extend(b"\0" * pad)
        offset = len(self.data)
        raw = arr.tobytes()
        self.data.extend(raw)
        entry = {
            "offset": offset,
            "bytes": len(raw),
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        return offset, entry

    def layer(
        self, name: str, onnx_nodes: list[str], kind: str, tensors: dict[str, dict[str, Any]]
    ) -> None:
        self.layers.append(
            {"name": name, "kind": kind, "onnx_nodes": onnx_nodes, "tensors": tensors}
        )

    def manifest(self, model: str) -> str:
        doc = {
            "format": "onnx2edge-mps-parameters",
            "version": 1,
            "model": model,
            "file": "weights.bin",
            "bytes": len(self.data),
            "sha256": hashlib.sha256(bytes(self.data)).hexdigest(),
            "weights_dtype": str(self.weight_dtype),
            "layouts": {
                "OHWI": "convolution [outputChannels][kernelHeight][kernelWidth][inputChannels/groups]",
                "OHW": "depthwise convolution [channels][kernelHeight][kernelWidth]",
                "OWHI": "fully connected [outputChannels][sourceWidth][sourceHeight][inputChannels]",
                "C": "one value per feature channel",
            },
            "layers": self.layers,
        }
        return json.dumps(doc, indent=1) + "\n"
