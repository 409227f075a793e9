"""`onnx2edge bench --suite seed`: the seed-001 comparison, for today's CPU, at 1 and 2 threads."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..host import cpu_name
from . import zoo
from .harness import bench_model

SEED_SUITE = [
    "alexnet",
    "alexnet_bn",
    "nin",
    "nin_bn",
    "googlenet",
    "vgg16",
    "vgg19",
    "inception_v3",
    "resnet50",
    "squeezenet",
    "mobilenet_v1",
    "mobilenet_v2",
    "convdeconv",
    "mnist_mlp",
]
# Issue 9's targets (on AVX2 and AVX-512 hosts alike): ratio ours/onnxruntime at 1 thread
TARGETS = {
    "resnet50": 1.0,
    "vgg16": 1.0,
    "vgg19": 1.0,
    "inception_v3": 1.0,
    "googlenet": 1.0,
    "squeezenet": 1.0,
    "mobilenet_v1": 0.9,
    "mobilenet_v2": 0.9,
    "alexnet": 0.9,
    "alexnet_bn": 0.9,
    "nin": 0.9,
    "nin_bn": 0.9,
    "convdeconv": 0.8,
    "mnist_mlp": 0.7,
}


# Each side's timed loop lasts at least about this long (runs are raised for small models):
# medians of 20 runs of a 5 ms model moved by 10-20 % between suite runs on a 2-core machine.
MIN_SECONDS = 2.0
# Nodes listed per model that misses its target: where ours exceeds onnxruntime the most.
GAP_NODES = 6


def run_suite(
    models: Sequence[str] | None = None,
    threads: Sequence[int] = (1, 2),
    runs: int = 20,
    warmup: int = 3,
    log: Callable[[str], None] | None = None,
    explain_misses: bool = True,
    arch: str | None = None,
    cpu_clock: bool = False,
    rounds: int = 1,
    ort_isa: str = "host",
) -> list[dict[str, Any]]:
    """Bench each model at each thread count; for a model that misses its 1-thread target, a
    profiled run (both sides per node) records where the gap is (`gaps`). rounds: ours and
    onnxruntime alternate in that many rounds (bench_model)."""
    say = log or (lambda m: None)
    names = list(models or SEED_SUITE)
    results = []
    with tempfile.TemporaryDirectory(prefix="onnx2edge-suite-") as tmp:
        for i, name in enumerate(names, 1):
            path = zoo.save(name, Path(tmp) / f"{name}.onnx")
            for t in threads:
                say(f"[{i}/{len(names)}] {name}, {t} thread(s)")
                r = bench_model(
                    path,
                    threads=t,
                    runs=runs,
                    warmup=warmup,
                    log=say,
                    min_seconds=MIN_SECONDS,
                    arch=arch,
                    cpu_clock=cpu_clock and t == 1,
                    rounds=rounds,
                    ort_isa=ort_isa,
                )
                r["name"] = name
                r["target_ratio"] = TARGETS.get(name)
                results.append(r)
                say(
                    f"[{i}/{len(names)}] {name}: ours {r['ours_ms']:.2f} ms, onnxruntime {r['ort_ms']:.2f} ms, ratio {r['ratio']:.2f}"
                )
                if (
                    explain_misses
                    and t == 1
                    and r["target_ratio"] is not None
                    and r["ratio"] > r["target_ratio"]
                ):
                    say(
                        f"[{i}/{len(names)}] {name} misses its target: profiling both sides per node"
                    )
                    p = bench_model(
                        path,
                        threads=1,
                        runs=max(5, runs // 2),
                        warmup=warmup,
                        log=say,
                        profile=True,
                        arch=arch,
                        cpu_clock=cpu_clock,
                        rounds=rounds,
                        ort_isa=ort_isa,
                    )
                    r["gaps"] = gap_nodes(p)
            path.unlink()
    return results


def gap_nodes(profiled: dict[str, Any], n: int = GAP_NODES) -> dict[str, Any]:
    """The n nodes where our time exceeds onnxruntime's the most, from a profiled bench run."""
    prof = profiled.get("profile") or []
    ours = sum(p["ms"] for p in prof)
    theirs = sum(p["ort_ms"] or 0.0 for p in prof) + (
        profiled.get("ort_profile_unattributed_ms") or 0.0
    )
    rows = sorted(prof, key=lambda p: -(p["ms"] - (p["ort_ms"] or 0.0)))[:n]
    return {"ours_total_ms": ours, "ort_total_ms": theirs, "nodes": rows}


def format_table(results: list[dict[str, Any]]) -> str:
    arches = list(dict.fromkeys(r.get("arch", "native") for r in results))
    if len(arches) > 1:  # one table per ISA
        return "\n\n".join(
            f"{ARCH_TITLES.get(a, a)}:\n"
            + format_table([r for r in results if r.get("arch", "native") == a])
            for a in arches
        )
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
        two = (
            f"{b['ours_ms']:.2f} | {b['ort_ms']:.2f} | {b['ratio']:.2f} | {b['ratio'] / a['ratio']:.2f}"
            if b
            else "– | – | – | –"
        )
        lines.append(
            f"| {n} | {a['ours_ms']:.2f} | {a['ort_ms']:.2f} | {a['ratio']:.2f}{met} | {tgt if tgt is not None else '–'} | "
            f"{two} | {err:.1e} | {a['convert_s']:.2f} | {a['build_s']:.1f} |"
        )
    return "\n".join(lines)


ARCH_TITLES = {
    "native": "native (`-march=native`)",
    "x86-64-v2": "x86-64-v2 (SSE4.2, no AVX: portable kernels)",
    "x86-64-v3": "x86-64-v3 (AVX2 + FMA kernels)",
    "x86-64-v4": "x86-64-v4 (AVX-512 kernels)",
}


def write_doc(results: list[dict[str, Any]], path: Path) -> None:
    """One section per ISA the results were measured at (`arch`), in the order measured."""
    from ..fsutil import write_text_atomic

    arches = list(dict.fromkeys(r.get("arch", "native") for r in results))
    if len(arches) <= 1:
        text = _doc_part(results, path, path.with_suffix(".png"), level="#")
    else:
        text = [
            "# Benchmarks: generated C vs onnxruntime",
            "",
            "One section per instruction set our C was built for (`bench --suite seed --arch A,B`). "
            + (
                "With `--ort-isa match` onnxruntime is held to the same instruction set (CPUID "
                "masked, see each section); otherwise it picks its kernels from the CPU it runs "
                "on, whatever `--arch` says."
                if any(_held(r) for r in results)
                else "onnxruntime picks its kernels at run time from the CPU it runs on, "
                "whatever `--arch` says."
            ),
            "",
            *_notes(path),
        ]
        for a in arches:
            part = [r for r in results if r.get("arch", "native") == a]
            text += _doc_part(
                part,
                path,
                path.with_name(f"{path.stem}-{a}.png"),
                level="##",
                title=ARCH_TITLES.get(a, a),
                notes=False,
            )
    write_text_atomic(path, "\n".join(text))


def _cmd_extra(results: list[dict[str, Any]]) -> str:
    """The bench options besides --arch that the results were measured with."""
    names = list(dict.fromkeys(r["name"] for r in results))
    extra = f" --models {','.join(names)}" if names != SEED_SUITE else ""
    extra += " --cpu-clock" if results and results[0].get("clock", "wall") != "wall" else ""
    rounds = results[0].get("rounds", 1) if results else 1
    extra += f" --rounds {rounds}" if rounds > 1 else ""
    return extra + (" --ort-isa match" if any(_held(r) for r in results) else "")


def _held(r: dict[str, Any]) -> bool:
    return r.get("ort_isa", "host") != "host"


def _doc_part(
    results: list[dict[str, Any]],
    path: Path,
    chart: Path,
    *,
    level: str,
    title: str = "",
    notes: bool = True,
) -> list[str]:
    r0 = results[0] if results else {}
    has_chart = _chart(results, chart)
    kernels = sorted({r["gemm_kernel"] for r in results})
    sub = level + "#"
    return [
        f"{level} Benchmarks: generated C vs onnxruntime" + (f": {title}" if title else ""),
        "",
        f"Measured with `onnx2edge bench --suite seed --arch {r0.get('arch', 'native')}{_cmd_extra(results)} "
        "--write-doc docs/benchmarks.md` "
        f"on {cpu_name()} (2 cores), onnxruntime {r0.get('onnxruntime', '?')}, fp32, batch 1, "
        f"at least {min((r['runs'] for r in results), default='?')} timed runs per side after warm-up, raised so that "
        f"each side's timed loop lasts about {MIN_SECONDS:g} s (run counts per model in the JSON); medians. "
        "Ratio = ours / onnxruntime (lower is better).",
        f"Our build: `gcc {r0.get('cflags', '')}`; GEMM micro-kernel: {', '.join(kernels)}; "
        f"timed by {r0.get('clock', 'wall')} clock.",
        *(
            [f"onnxruntime held to {r0['ort_isa']} like our build (`--ort-isa match`)."]
            if _held(r0)
            else []
        ),
        "How each side is timed: see `src/onnx2edge/bench/harness.py` (C harness with clock_gettime for ours; "
        "IOBinding loop in a separate process for onnxruntime, its Python per-call overhead measured and subtracted).",
        "Random weights from `onnx2edge.bench.zoo`; every run also checks our outputs against onnxruntime's "
        "(max rel err column: within 1e-4, or within twice the spread between onnxruntime's optimised and "
        "unoptimised runs where that is larger).",
        "",
        format_table(results),
        "",
        *([f"![ratio chart]({chart.name})", ""] if has_chart else []),
        *(_notes(path) if notes else []),
        *_gap_section(results, sub),
        f"{sub} Kernels that ran",
        "",
        f"GEMM micro-kernel: {', '.join(kernels)}.",
        "",
        *[
            f"- {r['name']} ({r['threads']}T): "
            + ", ".join(f"{k} ×{v}" for k, v in r["kernels"].items())
            for r in results
            if r["threads"] == 1
        ],
        "",
        "<details><summary>raw results (JSON)</summary>",
        "",
        "```json",
        json.dumps(results, indent=1),
        "```",
        "</details>",
        "",
    ]


NOTES_BEGIN = "<!-- notes: kept when the table is regenerated -->"
NOTES_END = "<!-- /notes -->"


def _notes(path: Path) -> list[str]:
    """The hand-written block of an existing doc (between the markers), carried over."""
    try:
        old = path.read_text()
    except OSError:
        return []
    a, b = old.find(NOTES_BEGIN), old.find(NOTES_END)
    if a < 0 or b < a:
        return []
    return [old[a : b + len(NOTES_END)], ""]


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _gap_section(results: list[dict[str, Any]], level: str = "##") -> list[str]:
    missed = [r for r in results if r.get("gaps")]
    if not missed:
        return []
    out = [
        f"{level} Where the gap is, per model that misses its target",
        "",
        "From a profiled 1-thread run of each side (`onnx2edge bench MODEL --profile`: our per-node timers, "
        "onnxruntime's own profiler; its fused nodes are attributed to the node of ours that absorbed the same "
        "layers). Profiling adds overhead on both sides, so the totals differ a little from the table. "
        f"Listed: the {GAP_NODES} nodes where ours exceeds onnxruntime the most.",
        "",
    ]
    for r in missed:
        g = r["gaps"]
        out += [
            f"**{r['name']}** (ratio {r['ratio']:.2f}, target {r['target_ratio']}): profiled totals ours "
            f"{g['ours_total_ms']:.2f} ms, onnxruntime {g['ort_total_ms']:.2f} ms",
            "",
            "| node | op | output | ours (ms) | onnxruntime (ms) | ours GFLOP/s |",
            "|---|---|---|---:|---:|---:|",
            *[
                f"| {p['node']} | {p['op']} | {'x'.join(map(str, p['shape']))} | {p['ms']:.3f} | "
                f"{_ms(p['ort_ms'])} | {p['gflops']:.0f} |"
                for p in g["nodes"]
            ],
            "",
        ]
    return out


def _chart(results: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # no chart without matplotlib (`pip install onnx2edge[bench]`); one an earlier run drew
        # would sit beside the new tables showing the old figures, so it goes
        path.unlink(missing_ok=True)
        return False
    names = list(dict.fromkeys(r["name"] for r in results))
    by = {(r["name"], r["threads"]): r["ratio"] for r in results}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(names))
    for k, t in enumerate((1, 2)):
        ax.bar(
            [x + (k - 0.5) * 0.38 for x in xs],
            [by.get((n, t), 0) for n in names],
            width=0.38,
            label=f"{t} thread(s)",
        )
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(list(xs), names, rotation=35, ha="right")
    ax.set_ylabel("time ours / onnxruntime (lower is better)")
    ax.set_title("onnx2edge generated C vs onnxruntime, fp32, batch 1")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True
