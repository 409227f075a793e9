"""Build a > 2 GB model with external data and measure `convert --target c` on it.

    python tools/big_model.py DIR [--layers 9] [--width 8192]

Writes DIR/big.onnx + DIR/big.data (fully connected layers with ReLU between them, fp32
weights written in slices: a protobuf over 2 GB cannot be built in memory), then runs
`onnx2edge convert` under /usr/bin/time and prints the model's size, the peak resident memory
and the ratio of the two. The figure in docs/robustness.md comes from this script.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def _external(name: str, shape: tuple[int, ...], location: str, offset: int) -> onnx.TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
    t.data_location = TensorProto.EXTERNAL
    length = int(np.prod(shape)) * 4
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = t.external_data.add()
        entry.key, entry.value = key, str(value)
    return t


def build(folder: Path, layers: int, width: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    inits, nodes, offset = [], [], 0
    with (folder / "big.data").open("wb") as f:
        for i in range(layers):
            for _ in range(0, width, 1024):
                w = rng.standard_normal((1024, width), dtype=np.float32) * np.float32(width**-0.5)
                w.tofile(f)
            inits.append(_external(f"w{i}", (width, width), "big.data", offset))
            offset += width * width * 4
            src = "x" if i == 0 else f"r{i - 1}"
            nodes.append(helper.make_node("MatMul", [src, f"w{i}"], [f"h{i}"], name=f"fc{i}"))
            last = i == layers - 1
            nodes.append(
                helper.make_node("Relu", [f"h{i}"], ["y" if last else f"r{i}"], name=f"relu{i}")
            )
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "big.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def measure(model: Path, out: Path) -> tuple[int, int]:
    proc = subprocess.run(
        [
            "/usr/bin/time",
            "-v",
            sys.executable,
            "-m",
            "onnx2edge.cli",
            "convert",
            str(model),
            "--target",
            "c",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    size = model.stat().st_size + (model.parent / "big.data").stat().st_size
    return size, peak_kb * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--width", type=int, default=8192)
    args = ap.parse_args()
    model = build(args.folder, args.layers, args.width)
    size, peak = measure(model, args.folder / "out")
    print(f"model {size / 1e9:.2f} GB, convert peak RSS {peak / 1e9:.2f} GB ({peak / size:.2f}x)")


if __name__ == "__main__":
    main()
