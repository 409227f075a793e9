"""docs/pruning.md's measurements: the digits MLP (examples/train_digits_mlp.py) at each sparsity,
batch 1 and 360: our sparse build, our dense build (--kernels sparse=off) and onnxruntime dense
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

    opts = {"kernels": f"sparse={mode}"}
    r = bench_model(path, runs=30, warmup=3, input_shapes=shape, min_seconds=0.5, options=opts)
    return {
        "ours_ms": r["ours_ms"],
        "ort_ms": r["ort_ms"],
        "kernels": r["kernels"],
        "cpu": r["cpu"],
        "accurate": r["accurate"],
    }


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
            row = {
                "sparsity": int(lv) / 100,
                "batch": b,
                "accuracy": acc,
                "sparse_ms": sp["ours_ms"],
                "ort_ms_sparse_run": sp["ort_ms"],
                "dense_ms": de["ours_ms"],
                "ort_ms_dense_run": de["ort_ms"],
                "sparse_kernels": sp["kernels"],
                "accurate": sp["accurate"] and de["accurate"],
            }
            res["mlp"].append(row)
            print(json.dumps(row), flush=True)
    if a.cnn:
        from onnx2edge.bench.zoo import MODELS
        from onnx2edge.prune import prune_model

        base = MODELS["mobilenet_v1"].build(seed=0)
        with tempfile.TemporaryDirectory() as d:
            for lv in a.cnn.split(","):
                pw = [n.name for n in base.graph.node if n.op_type == "Conv" and _is_1x1(base, n)]
                skip = [
                    n.name
                    for n in base.graph.node
                    if n.op_type in ("Conv", "Gemm", "MatMul") and n.name not in pw
                ]
                m, _ = prune_model(base, int(lv) / 100, scope="layer", skip=skip)
                p = Path(d) / f"mnv1_{lv}.onnx"
                onnx.save(m, p)
                sp, de = _bench(p, None, "auto"), _bench(p, None, "off")
                row = {
                    "sparsity_1x1": int(lv) / 100,
                    "sparse_ms": sp["ours_ms"],
                    "dense_ms": de["ours_ms"],
                    "ort_ms": de["ort_ms"],
                    "ort_ms_sparse_run": sp["ort_ms"],
                    "sparse_kernels": sp["kernels"],
                }
                res["cnn"].append(row)
                print(json.dumps(row), flush=True)
    res["load_after"] = os.getloadavg()
    Path(a.out).write_text(json.dumps(res, indent=1))


def _is_1x1(m: onnx.ModelProto, n: onnx.NodeProto) -> bool:
    w = next((t for t in m.graph.initializer if t.name == n.input[1]), None)
    g = next((at.i for at in n.attribute if at.name == "group"), 1)
    return w is not None and list(w.dims[2:]) == [1, 1] and g == 1


def report(bench_json: str, png: str) -> str:
    """Markdown tables and the chart (matplotlib) from the JSON main() wrote."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.loads(Path(bench_json).read_text())
    lines = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, b in zip(axes, (1, 360), strict=True):
        rows = [x for x in r["mlp"] if x["batch"] == b]
        lines += [
            f"\n**Batch {b}** (ms, medians; each ratio is against onnxruntime timed in the same run)\n",
            "| sparsity | accuracy | ours sparse | ort (same run) | sparse / ort | ours dense | ort (same run) "
            "| dense / ort | kernels |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for x in rows:
            ks = ", ".join(f"{k.split(': ', 1)[1]} x{v}" for k, v in x["sparse_kernels"].items())
            lines.append(
                f"| {x['sparsity']:.2f} | {x['accuracy']:.4f} | {x['sparse_ms']:.4f} | {x['ort_ms_sparse_run']:.4f} | "
                f"{x['sparse_ms'] / x['ort_ms_sparse_run']:.2f} | {x['dense_ms']:.4f} | {x['ort_ms_dense_run']:.4f} | "
                f"{x['dense_ms'] / x['ort_ms_dense_run']:.2f} | {ks} |"
            )
        s = [x["sparsity"] for x in rows]
        ax.plot(
            s,
            [x["sparse_ms"] / x["ort_ms_sparse_run"] for x in rows],
            "o-",
            label="ours, sparse kernels",
        )
        ax.plot(
            s,
            [x["dense_ms"] / x["ort_ms_dense_run"] for x in rows],
            "s-",
            label="ours, dense kernels",
        )
        ax.axhline(1.0, color="gray", ls="--", label="onnxruntime dense")
        ax.set_title(f"digits MLP 64-1000-500-10, batch {b}")
        ax.set_xlabel("sparsity (global magnitude pruning)")
        ax.set_ylabel("time / onnxruntime time (same run)")
        ax2 = ax.twinx()
        ax2.plot(s, [x["accuracy"] for x in rows], "k:", label="accuracy")
        ax2.set_ylabel("test accuracy (dotted)")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    if r["cnn"]:
        lines += [
            "\n**MobileNet v1, 1x1 convolutions pruned per layer** (batch 1, ms, medians)\n",
            "| 1x1 sparsity | ours sparse | ours dense | ort | sparse / dense | sparse layers |",
            "|---|---|---|---|---|---|",
        ]
        for x in r["cnn"]:
            n = sum(v for k, v in x["sparse_kernels"].items() if "sparse" in k)
            lines.append(
                f"| {x['sparsity_1x1']:.2f} | {x['sparse_ms']:.3f} | {x['dense_ms']:.3f} | {x['ort_ms']:.3f} | "
                f"{x['sparse_ms'] / x['dense_ms']:.2f} | {n} |"
            )
    lines.append(
        f"\nload average before / after: {r['load'][0]:.1f} / {r['load_after'][0]:.1f} (2 cores)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--report"]:
        print(report(sys.argv[2], sys.argv[3]))
    else:
        main()
