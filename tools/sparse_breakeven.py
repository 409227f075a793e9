"""Measure where the sparse kernels (runtime/o2e_sparse.h) start beating our dense ones, per
kernel kind and ISA: one-layer models with random unstructured masks (16x1 block masks for
fc_batch1_bsr, whose density is then the share of stored blocks) at several densities, built
with the break-even table forced open and shut, timed by the bench harness (one thread, thread CPU time,
medians). The FC layers read Relu(x) as in an MLP's hidden layers: about half their inputs are
zero, which both our dense batch-1 kernel and the sparse ones skip. The result sets
BREAK_EVEN_BY_ISA in backends/c/kernels/gemm/sparse.py.

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
        b = 64 if kind == "fc_batchN" else 1
        w = rng.standard_normal((500, 1000)).astype(np.float32)
        if kind == "fc_batch1_bsr":  # 16x1 blocks: 16 consecutive outputs of one input
            w *= np.repeat(rng.random((32, 1000)) < density, 16, axis=0)[:500]
        else:
            w *= rng.random(w.shape) < density
        node = [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Gemm", ["r", "w"], ["y"], name="fc", transB=1),
        ]
        ins, outs = [vi("x", TensorProto.FLOAT, [b, 1000])], [vi("y", TensorProto.FLOAT, [b, 500])]
    nodes = node if isinstance(node, list) else [node]
    m = helper.make_model(
        helper.make_graph(nodes, "l", ins, outs, [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    m.ir_version = 8
    return m


def main() -> None:
    from onnx2edge.backends.c.kernels.gemm import sparse
    from onnx2edge.bench.harness import bench_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="breakeven.json")
    ap.add_argument("--densities", default="0.05,0.1,0.2,0.3,0.4")
    ap.add_argument("--kinds", default="fc_batch1,fc_batch1_bsr,fc_batchN,conv1x1")
    ap.add_argument("--isas", default="native,x86-64-v3")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for isa in a.isas.split(","):
            for kind in a.kinds.split(","):
                for dens in map(float, a.densities.split(",")):
                    p = Path(d) / f"{kind}_{dens}.onnx"
                    onnx.save(layer(kind, dens), p)
                    t, ks = {}, {}
                    for mode in ("force", "off"):
                        # "force": only the kind under test may go sparse, whatever its density
                        for k in sparse.BREAK_EVEN:
                            sparse.BREAK_EVEN[k] = 1.0 if (mode, k) == ("force", kind) else 0.0
                        r = bench_model(
                            p, runs=20, warmup=3, min_seconds=0.3, arch=isa, cpu_clock=True
                        )
                        t[mode], ks[mode] = r["ours_ms"], r["kernels"]
                    row = {
                        "isa": isa,
                        "kind": kind,
                        "density": dens,
                        "sparse_ms": t["force"],
                        "dense_ms": t["off"],
                        "kernels": ks["force"],
                        "sparse_over_dense": t["force"] / t["off"],
                        "load": os.getloadavg()[0],
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
