"""Measure where the sparse kernels (runtime/o2e_sparse.h) start beating our dense ones, per
kernel kind and ISA: one-layer models with random unstructured masks at several densities,
built with ONNX2EDGE_SPARSE=force and =off, timed by the bench harness (one thread, medians).
The result sets BREAK_EVEN in backends/c/ops/sparse.py.

    python tools/sparse_breakeven.py --out /tmp/breakeven.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def layer(kind: str, density: float, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    vi = helper.make_tensor_value_info
    if kind == "conv1x1":
        w = rng.standard_normal((256, 256, 1, 1)).astype(np.float32)
        w *= rng.random(w.shape) < density
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="pw")
        ins, outs = (
            [vi("x", TensorProto.FLOAT, [1, 256, 14, 14])],
            [vi("y", TensorProto.FLOAT, [1, 256, 14, 14])],
        )
    else:
        b = 1 if kind == "fc_batch1" else 64
        w = rng.standard_normal((500, 1000)).astype(np.float32)
        w *= rng.random(w.shape) < density
        node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)
        ins, outs = [vi("x", TensorProto.FLOAT, [b, 1000])], [vi("y", TensorProto.FLOAT, [b, 500])]
    m = helper.make_model(
        helper.make_graph([node], "l", ins, outs, [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m


def main() -> None:
    from onnx2edge.backends.c import build
    from onnx2edge.bench.harness import bench_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="breakeven.json")
    ap.add_argument("--densities", default="0.2,0.35,0.5")
    ap.add_argument("--isas", default="native,x86-64-v3")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for isa in a.isas.split(","):
            build.RELEASE_FLAGS = ("-O3", f"-march={isa}", "-ffp-contract=fast")
            for kind in ("fc_batch1", "fc_batchN", "conv1x1"):
                for dens in map(float, a.densities.split(",")):
                    p = Path(d) / f"{kind}_{dens}.onnx"
                    onnx.save(layer(kind, dens), p)
                    t = {}
                    for mode in ("force", "off"):
                        os.environ["ONNX2EDGE_SPARSE"] = mode
                        t[mode] = bench_model(p, runs=20, warmup=3, min_seconds=0.3)["ours_ms"]
                    row = {
                        "isa": isa,
                        "kind": kind,
                        "density": dens,
                        "sparse_ms": t["force"],
                        "dense_ms": t["off"],
                        "sparse_over_dense": t["force"] / t["off"],
                        "load": os.getloadavg()[0],
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
