"""docs/pruning.md's measurements: the digits MLP (examples/train_digits_mlp.py) at each sparsity,
batch 1 and 360: our sparse build, our dense build (ONNX2EDGE_SPARSE=off) and onnxruntime dense
on the same pruned model, each pair timed in the same run by the bench harness (medians, one
thread); then MobileNet v1 (bench zoo) with its 1x1 convolutions pruned per layer.

    python examples/bench_pruning.py --models build/digits_prune --out docs/pruning_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import onnx


def _bench(path: Path, shape: dict | None, mode: str) -> dict:
    from onnx2edge.bench.harness import bench_model

    os.environ["ONNX2EDGE_SPARSE"] = mode
    r = bench_model(path, runs=30, warmup=3, input_shapes=shape, min_seconds=0.5)
    return {"ours_ms": r["ours_ms"], "ort_ms": r["ort_ms"], "kernels": r["kernels"], "cpu": r["cpu"],
            "accurate": r["accurate"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="build/digits_prune")
    ap.add_argument("--out", default="docs/pruning_bench.json")
    ap.add_argument("--levels", default="0,50,60,70,80,90,95")
    ap.add_argument("--cnn", default="70,80,90")
    a = ap.parse_args()
    res: dict = {"load": os.getloadavg(), "mlp": [], "cnn": []}
    for lv in a.levels.split(","):
        p = Path(a.models) / f"mlp_prune_{int(lv):02d}.onnx"
        acc = float((p.with_suffix(".acc")).read_text())
        for b in (1, 360):
            sp, de = _bench(p, {"x": [b, 64]}, "auto"), _bench(p, {"x": [b, 64]}, "off")
            row = {"sparsity": int(lv) / 100, "batch": b, "accuracy": acc, "sparse_ms": sp["ours_ms"],
                   "ort_ms_sparse_run": sp["ort_ms"], "dense_ms": de["ours_ms"], "ort_ms_dense_run": de["ort_ms"],
                   "sparse_kernels": sp["kernels"], "accurate": sp["accurate"] and de["accurate"]}
            res["mlp"].append(row)
            print(json.dumps(row), flush=True)
    if a.cnn:
        from onnx2edge.bench.zoo import MODELS
        from onnx2edge.prune import prune_model

        base = MODELS["mobilenet_v1"].build(seed=0)
        with tempfile.TemporaryDirectory() as d:
            for lv in a.cnn.split(","):
                pw = [n.name for n in base.graph.node if n.op_type == "Conv" and _is_1x1(base, n)]
                skip = [n.name for n in base.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and n.name not in pw]
                m, _ = prune_model(base, int(lv) / 100, scope="layer", skip=skip)
                p = Path(d) / f"mnv1_{lv}.onnx"
                onnx.save(m, p)
                sp, de = _bench(p, None, "auto"), _bench(p, None, "off")
                row = {"sparsity_1x1": int(lv) / 100, "sparse_ms": sp["ours_ms"], "dense_ms": de["ours_ms"],
                       "ort_ms": de["ort_ms"], "ort_ms_sparse_run": sp["ort_ms"], "sparse_kernels": sp["kernels"]}
                res["cnn"].append(row)
                print(json.dumps(row), flush=True)
    res["load_after"] = os.getloadavg()
    Path(a.out).write_text(json.dumps(res, indent=1))


def _is_1x1(m: onnx.ModelProto, n: onnx.NodeProto) -> bool:
    w = next((t for t in m.graph.initializer if t.name == n.input[1]), None)
    g = next((at.i for at in n.attribute if at.name == "group"), 1)
    return w is not None and list(w.dims[2:]) == [1, 1] and g == 1


if __name__ == "__main__":
    main()
