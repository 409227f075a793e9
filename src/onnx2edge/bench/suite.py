"""`onnx2edge bench --suite seed`: the seed-001 comparison, for today's CPU, at 1 and 2 threads."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import zoo
from .harness import bench_model, cpu_name

SEED_SUITE = [
    "alexnet", "alexnet_bn", "nin", "nin_bn", "googlenet", "vgg16", "vgg19", "inception_v3", "resnet50",
    "squeezenet", "mobilenet_v1", "mobilenet_v2", "convdeconv", "mnist_mlp",
]
# Issue 5's targets: ratio ours/onnxruntime at 1 thread
TARGETS = {
    "resnet50": 1.0, "vgg16": 1.0, "vgg19": 1.0, "inception_v3": 1.0, "googlenet": 1.0, "squeezenet": 1.0,
    "mobilenet_v1": 0.8, "mobilenet_v2": 0.8, "alexnet": 0.8, "alexnet_bn": 0.8, "nin": 0.8, "nin_bn": 0.8,
    "convdeconv": 0.8, "mnist_mlp": 0.5,
}


def run_suite(
    models: Sequence[str] | None = None,
    threads: Sequence[int] = (1, 2),
    runs: int = 20,
    warmup: int = 3,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    say = log or (lambda m: None)
    names = list(models or SEED_SUITE)
    results = []
    with tempfile.TemporaryDirectory(prefix="onnx2edge-suite-") as tmp:
        for i, name in enumerate(names, 1):
            path = zoo.save(name, Path(tmp) / f"{name}.onnx")
            for t in threads:
                say(f"[{i}/{len(names)}] {name}, {t} thread(s)")
                r = bench_model(path, threads=t, runs=runs, warmup=warmup, log=say)
                r["name"] = name
                r["target_ratio"] = TARGETS.get(name)
                results.append(r)
                say(f"[{i}/{len(names)}] {name}: ours {r['ours_ms']:.2f} ms, onnxruntime {r['ort_ms']:.2f} ms, ratio {r['ratio']:.2f}")
            path.unlink()
    return results


def format_table(results: list[dict[str, Any]]) -> str:
    by = {(r["name"], r["threads"]): r for r in results}
    names = list(dict.fromkeys(r["name"] for r in results))
    lines = [
        "| model | ours 1T (ms) | ORT 1T (ms) | ratio 1T | target | ours 2T (ms) | ORT 2T (ms) | ratio 2T | 2T/1T ratio | max rel err | convert (s) | build (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        a, b = by.get((n, 1)), by.get((n, 2))
        if a is None:
            continue
        tgt = a.get("target_ratio")
        met = "" if tgt is None else (" ✓" if a["ratio"] <= tgt else " ✗")
        err = max(v["max_rel_error"] for v in a["accuracy"].values())
        two = (f"{b['ours_ms']:.2f} | {b['ort_ms']:.2f} | {b['ratio']:.2f} | {b['ratio'] / a['ratio']:.2f}"
               if b else "– | – | – | –")
        lines.append(
            f"| {n} | {a['ours_ms']:.2f} | {a['ort_ms']:.2f} | {a['ratio']:.2f}{met} | {tgt if tgt is not None else '–'} | "
            f"{two} | {err:.1e} | {a['convert_s']:.2f} | {a['build_s']:.1f} |"
        )
    return "\n".join(lines)


def write_doc(results: list[dict[str, Any]], path: Path) -> None:
    from ..fsutil import write_text_atomic

    r0 = results[0] if results else {}
    chart = path.with_suffix(".png")
    has_chart = _chart(results, chart)
    kernels = sorted({r["gemm_kernel"] for r in results})
    text = [
        "# Benchmarks: generated C vs onnxruntime",
        "",
        "Measured with `onnx2edge bench --suite seed --write-doc docs/benchmarks.md` "
        f"on {cpu_name()} (2 cores), onnxruntime {r0.get('onnxruntime', '?')}, fp32, batch 1, "
        f"{r0.get('runs', '?')} timed runs after warm-up; medians. Ratio = ours / onnxruntime (lower is better).",
        f"Our build: `gcc {r0.get('cflags', '')}`; GEMM micro-kernel: {', '.join(kernels)}.",
        "How each side is timed: see `src/onnx2edge/bench/harness.py` (C harness with clock_gettime for ours; "
        "IOBinding loop in a separate process for onnxruntime, its Python per-call overhead measured and subtracted).",
        "Random weights from `onnx2edge.bench.zoo`; every run also checks our outputs against onnxruntime's "
        "(max rel err column, tolerance 1e-4).",
        "",
        format_table(results),
        "",
        *([f"![ratio chart]({chart.name})", ""] if has_chart else []),
        "## Kernels that ran",
        "",
        *[f"- {r['name']} ({r['threads']}T): " + ", ".join(f"{k} ×{v}" for k, v in r["kernels"].items())
          for r in results if r["threads"] == 1],
        "",
        "<details><summary>raw results (JSON)</summary>",
        "",
        "```json",
        json.dumps(results, indent=1),
        "```",
        "</details>",
        "",
    ]
    write_text_atomic(path, "\n".join(text))


def _chart(results: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(dict.fromkeys(r["name"] for r in results))
    by = {(r["name"], r["threads"]): r["ratio"] for r in results}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(names))
    for k, t in enumerate((1, 2)):
        ax.bar([x + (k - 0.5) * 0.38 for x in xs], [by.get((n, t), 0) for n in names], width=0.38, label=f"{t} thread(s)")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(list(xs), names, rotation=35, ha="right")
    ax.set_ylabel("time ours / onnxruntime (lower is better)")
    ax.set_title("onnx2edge generated C vs onnxruntime, fp32, batch 1")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True
