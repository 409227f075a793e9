"""`onnx2edge bench --suite seed|modern`: the seed-001 comparison (2015-era CNNs) and today's edge
networks (issue 34), for today's CPU, at 1 and 2 threads, against onnxruntime and optionally
OpenVINO (`--against ort,openvino`: ratios then against the faster of the two whose outputs
agree with onnxruntime's), fp32 and optionally int8 (`--int8`: the project's static QDQ)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import Onnx2EdgeError
from ..frontend.handle import LoadedModel
from ..fsutil import write_text_atomic
from ..host import cpu_name
from . import zoo
from .harness import QUANT_SPREAD, QUANT_TOL, bench_model

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


# Issue 34's networks (bench/modern.py builds them with torch and caches the exports)
MODERN_SUITE = [
    "mobilenetv3_small",
    "mobilenetv3_large",
    "efficientnet_b0",
    "efficientnet_b1",
    "lraspp_mobilenetv3",
    "convnext_atto",
    "vit_tiny",
    "regnetx_200mf",
    "densenet121",
    "shufflenetv2_x0_5",
    "mobilevit_xs",
    "yolov8n",
    "minilm_l6",
    "whisper_tiny_encoder",
]
# Issue 34 item 4: ours / the faster of onnxruntime and OpenVINO at 1 thread <= 1.0 for every
# network, <= 0.9 for EfficientNet-B0 and the MobileNetV3s
MODERN_TARGETS = {
    **dict.fromkeys(MODERN_SUITE, 1.0),
    "efficientnet_b0": 0.9,
    "mobilenetv3_small": 0.9,
    "mobilenetv3_large": 0.9,
}
SUITES = {"seed": SEED_SUITE, "modern": MODERN_SUITE}
DOCS = {"seed": "docs/benchmarks.md", "modern": "docs/benchmarks-modern.md"}
# the quantized seed networks issue 34 item 6 tracks (`--int8` on the seed suite runs these)
SEED_INT8 = ["squeezenet", "mobilenet_v2", "resnet50"]
INT8 = " int8"  # the suffix of a quantized variant's row name
# item 6: int8 ours / the faster of onnxruntime's and OpenVINO's int8 <= 1.0 on the seed nets
INT8_TARGETS = {f"{n}{INT8}": 1.0 for n in SEED_INT8}
# calibration samples for --int8 (N(0,1) images, as docs/quantization.md measured)
CALIB_SAMPLES = 16


def target_for(name: str, suite: str = "seed") -> float | None:
    if name.endswith(INT8):
        return INT8_TARGETS.get(name)
    return (MODERN_TARGETS if suite == "modern" else TARGETS).get(name)


def ratio_of(r: dict[str, Any]) -> float:
    """The ratio a target is judged by: ours / the fastest runtime whose outputs agreed with
    onnxruntime's (onnxruntime alone when only it ran)."""
    return r.get("ratio_best", r["ratio"])


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
    suite: str = "seed",
    against: Sequence[str] = ("ort",),
    int8: bool = False,
    cache_dir: str | Path | None = None,
    min_seconds: float | None = None,
    held: Sequence[dict[str, Any]] = (),
    on_network: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Bench each model at each thread count; for a model that misses its 1-thread target, a
    profiled run (both sides per node) records where the gap is (`gaps`). rounds: ours and
    onnxruntime alternate in that many rounds (bench_model). int8: each model's static-QDQ
    copy too (on the seed suite without --models: the SEED_INT8 networks).
    held: rows of an earlier, interrupted run (`bench --results`): a network whose rows at
    this arch are all there and timed is not run again, its rows are reused. on_network: told
    the rows so far after each network, so that an interrupted suite loses at most one."""
    if suite not in SUITES:
        raise Onnx2EdgeError(f"bench --suite: expected one of {', '.join(SUITES)} (got {suite!r})")
    say = log or (lambda m: None)
    plan = suite_plan(suite, models, int8)
    if any(source == "modern" for source, _, _ in plan):
        _need_torch()
    _check_options(arch, rounds, ort_isa, against)
    secs = MIN_SECONDS if min_seconds is None else min_seconds
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="onnx2edge-suite-") as tmp:
        for i, (source, base, q) in enumerate(plan, 1):
            name = base + (INT8 if q else "")
            tag = f"[{i}/{len(plan)}] {name}"
            meta = {
                "name": name,
                "suite": suite,
                "precision": "int8" if q else "fp32",
                "arch": arch or "native",
            }
            kept = held_rows(held, name, meta["arch"], threads)
            if kept:
                say(f"{tag}: kept from the results file")
                results += kept
                continue
            try:
                path = _source(source, base, Path(tmp), cache_dir, say)
                if q:
                    say(f"{tag}: quantizing (static QDQ, per-channel, {CALIB_SAMPLES} samples)")
                    path = quantize_for_bench(path, Path(tmp) / f"{base}_int8.onnx")
                # the frontend runs once a network: each thread count and the profile reuse it
                model = LoadedModel(path, quiet=False)
                for t in threads:
                    say(f"{tag}, {t} thread(s)")
                    r = bench_model(
                        model,
                        threads=t,
                        runs=runs,
                        warmup=warmup,
                        log=say,
                        min_seconds=secs,
                        arch=arch,
                        cpu_clock=cpu_clock and t == 1,
                        rounds=rounds,
                        ort_isa=ort_isa,
                        against=against,
                    )
                    r.update(meta)
                    r["target_ratio"] = target_for(name, suite)
                    if suite == "modern":
                        r["description"] = _describe(source, base) + (
                            " (static QDQ int8)" if q else ""
                        )
                    results.append(r)
                    say(f"{tag}: {_summary(r)}")
                    if (
                        explain_misses
                        and t == 1
                        and r["target_ratio"] is not None
                        and ratio_of(r) > r["target_ratio"]
                    ):
                        say(f"{tag} misses its target: profiling both sides per node")
                        r["gaps"] = _profiled_gaps(
                            model, runs, warmup, say, arch, cpu_clock, rounds, ort_isa
                        )
            except Onnx2EdgeError as e:
                # one network our side (or onnxruntime) cannot run must not cost the rest of a
                # suite that takes an hour: its row says why
                say(f"{tag}: failed: {e}")
                done = {
                    r["threads"]
                    for r in results
                    if r["name"] == name and r.get("arch") == meta["arch"]
                }
                results += [
                    {**meta, "threads": t, "error": str(e).splitlines()[0][:300]}
                    for t in threads
                    if t not in done
                ]
            for f in Path(tmp).glob("*.onnx"):
                f.unlink()
            if on_network:
                on_network(results)
    return results


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """The rows a `--results` file holds ([] when it does not exist yet)."""
    p = Path(path)
    if not p.exists():
        return []
    try:
        rows = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise Onnx2EdgeError(f"bench --results {p}: not a results file ({e})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "name" in r for r in rows):
        raise Onnx2EdgeError(f"bench --results {p}: not a results file (expected a list of rows)")
    return rows


def save_results(
    path: str | Path, rows: list[dict[str, Any]], held: Sequence[dict[str, Any]] = ()
) -> None:
    """Write this run's rows and the held rows it did not redo (other networks, arches)."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("name"), r.get("arch", "native"), r.get("threads"))

    new = {key(r) for r in rows}
    merged = [r for r in held if key(r) not in new] + list(rows)
    write_text_atomic(Path(path), json.dumps(merged, indent=1))


def held_rows(
    held: Sequence[dict[str, Any]], name: str, arch: str, threads: Sequence[int]
) -> list[dict[str, Any]]:
    """An earlier run's rows of this network at this arch, one a thread count, when all were
    timed (a row with an error is run again: the cause may have been fixed since)."""
    rows = {
        r["threads"]: r
        for r in held
        if r.get("name") == name and r.get("arch", "native") == arch and "error" not in r
    }
    return [rows[t] for t in threads] if all(t in rows for t in threads) else []


def suite_plan(suite: str, models: Sequence[str] | None, int8: bool) -> list[tuple[str, str, bool]]:
    """(where the network comes from, name, int8?) in run order. int8 adds each network's QDQ
    copy; on the seed suite without --models only SEED_INT8's. The modern suite also reports
    the seed int8 networks (issue 34 item 6): with --int8 and no --models they follow the modern
    ones, and --models may name them (int8 only: their fp32 rows belong to the seed suite)."""
    if suite not in SUITES:
        raise Onnx2EdgeError(f"bench --suite: expected one of {', '.join(SUITES)} (got {suite!r})")
    names = list(models or SUITES[suite])
    seed_int8 = SEED_INT8 if suite == "modern" else []
    unknown = [n for n in names if n not in SUITES[suite] and n not in seed_int8]
    if unknown:
        extra = f"; with --int8: {', '.join(seed_int8)}" if seed_int8 else ""
        raise Onnx2EdgeError(
            f"bench --suite {suite} --models: unknown network {unknown[0]!r} "
            f"(known: {', '.join(SUITES[suite])}{extra})"
        )
    own = [n for n in names if n in SUITES[suite]]
    borrowed = [n for n in names if n not in SUITES[suite]]
    if borrowed and not int8:
        raise Onnx2EdgeError(
            f"bench --suite {suite} --models {borrowed[0]}: a seed network runs here as int8 "
            "only (add --int8; its fp32 row is the seed suite's)"
        )
    plan = [(suite, n, False) for n in own]
    if int8:
        if suite == "seed":
            plan += [("seed", n, True) for n in (own if models else SEED_INT8)]
        else:
            plan += [(suite, n, True) for n in own]
            plan += [("seed", n, True) for n in (borrowed if models else SEED_INT8)]
    return plan


def _profiled_gaps(
    model: LoadedModel,
    runs: int,
    warmup: int,
    say: Callable[[str], None],
    arch: str | None,
    cpu_clock: bool,
    rounds: int,
    ort_isa: str,
) -> dict[str, Any]:
    """The gap table of a network that missed its target (a profiled 1-thread run of ours and
    onnxruntime); a profiling failure is recorded, not raised: the timed rows stand."""
    try:
        p = bench_model(
            model,
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
    except Onnx2EdgeError as e:
        say(f"profiling failed: {e}")
        return {"error": str(e).splitlines()[0][:300], "nodes": []}
    return gap_nodes(p)


def timed(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results that ran (a failed network's rows carry "error" and no times)."""
    return [r for r in results if "error" not in r]


def failure_lines(results: list[dict[str, Any]]) -> list[str]:
    failed = {}
    for r in results:
        if "error" in r:
            failed.setdefault((r["name"], r.get("arch", "native")), r["error"])
    return [f"- {n}: failed: {e}" for (n, _), e in failed.items()]


def _summary(r: dict[str, Any]) -> str:
    text = f"ours {r['ours_ms']:.2f} ms, onnxruntime {r['ort_ms']:.2f} ms"
    ov = r.get("openvino")
    if ov is not None:
        text += f", OpenVINO {ov['ms']:.2f} ms" if "ms" in ov else f", OpenVINO: {ov.get('error')}"
    return text + f", ratio {ratio_of(r):.2f}" + (f" (vs {r['best']})" if ov is not None else "")


def _source(
    suite: str, name: str, tmp: Path, cache_dir: str | Path | None, say: Callable[[str], None]
) -> Path:
    """The ONNX file of a suite network: the seed zoo builds it into tmp; the modern suite's
    come from the export cache (torch needed only to fill it)."""
    if suite == "seed":
        return zoo.save(name, tmp / f"{name}.onnx")
    from . import modern

    return modern.cached(name, cache_dir, log=say)


def _check_options(arch: str | None, rounds: int, ort_isa: str, against: Sequence[str]) -> None:
    """Refuse up front what would fail every network alike: the suite goes on past a network
    that fails, which would turn a bad option into an hour of failed rows."""
    from ..backends.c.build import compiler
    from .harness import parse_against
    from .ort_isa import level_for, preload_env

    parse_against(against)
    if rounds < 1:
        raise Onnx2EdgeError(f"bench: --rounds must be at least 1 (got {rounds})")
    if ort_isa not in ("host", "match"):
        raise Onnx2EdgeError(f"bench: --ort-isa must be host or match (got {ort_isa!r})")
    if ort_isa == "match" and level_for(arch) is not None:
        with tempfile.TemporaryDirectory(prefix="onnx2edge-isa-") as tmp:
            preload_env(level_for(arch), Path(tmp), compiler())


def _need_torch() -> None:
    """Before any timing: the modern networks are exported with torch (once, then cached)."""
    try:
        from . import modern  # noqa: F401
    except ImportError as e:
        raise Onnx2EdgeError(
            f"bench --suite modern exports its networks with torch, which is not installed ({e})"
        ) from None


def _describe(source: str, name: str) -> str:
    if source == "seed":
        return f"seed zoo: {zoo.MODELS[name].description}"
    from . import modern

    return modern.NETS[name].description


def calibration(model: str | Path, samples: int = CALIB_SAMPLES, seed: int = 0) -> dict:
    """Calibration arrays for every input of `model` (samples on a new first axis): N(0,1)
    floats, small non-negative integers (valid token ids / indices), as random_inputs draws."""
    import numpy as np
    import onnx
    from onnx import helper

    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value or 1 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype.kind == "f":
            out[vi.name] = rng.standard_normal((samples, *shape)).astype(dtype)
        else:
            out[vi.name] = rng.integers(0, 4, size=(samples, *shape)).astype(dtype)
    return out


def quantize_for_bench(src: Path, out: Path) -> Path:
    """The int8 variant benched: `onnx2edge quantize --mode static --per-channel` (QDQ, uint8
    activations, int8 weights) calibrated on CALIB_SAMPLES random inputs."""
    import numpy as np

    from ..quantization import quantize

    calib = out.with_suffix(".calib.npz")
    np.savez(calib, **calibration(src))
    quantize(src, out, mode="static", calib=calib, per_channel=True)
    calib.unlink()
    return out


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
    failed = failure_lines(results)
    results = timed(results)
    by = {(r["name"], r["threads"]): r for r in results}
    names = list(dict.fromkeys(r["name"] for r in results))
    ov = has_openvino(results)
    if ov:
        lines = [
            "| model | ours 1T (ms) | ORT 1T (ms) | OpenVINO 1T (ms) | ratio 1T | target | "
            "ours 2T (ms) | ORT 2T (ms) | OpenVINO 2T (ms) | ratio 2T | ours 2T/1T time | "
            "max rel err | convert (s) | build (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        lines = [
            "| model | ours 1T (ms) | ORT 1T (ms) | ratio 1T | target | ours 2T (ms) | ORT 2T (ms) | ratio 2T | 2T/1T ratio | ours 2T/1T time | max rel err | convert (s) | build (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    for n in names:
        a, b = by.get((n, 1)), by.get((n, 2))
        if a is None:
            continue
        tgt = a.get("target_ratio")
        err = max(v["max_rel_error"] for v in a["accuracy"].values())
        tail = f"{err:.1e} | {a['convert_s']:.2f} | {a['build_s']:.1f} |"
        if ov:
            two = (
                f"{b['ours_ms']:.2f} | {b['ort_ms']:.2f} | {openvino_cell(b)} | {_ratio_cell(b)} | "
                f"{scaling_cell(a, b)}"
                if b
                else "– | – | – | – | –"
            )
            lines.append(
                f"| {n} | {a['ours_ms']:.2f} | {a['ort_ms']:.2f} | {openvino_cell(a)} | "
                f"{_ratio_cell(a)}{met_mark(a)} | {tgt if tgt is not None else '–'} | {two} | {tail}"
            )
            continue
        two = (
            f"{b['ours_ms']:.2f} | {b['ort_ms']:.2f} | {b['ratio']:.2f} | "
            f"{b['ratio'] / a['ratio']:.2f} | {scaling_cell(a, b)}"
            if b
            else "– | – | – | – | –"
        )
        lines.append(
            f"| {n} | {a['ours_ms']:.2f} | {a['ort_ms']:.2f} | {a['ratio']:.2f}{met_mark(a)} | "
            f"{tgt if tgt is not None else '–'} | {two} | {tail}"
        )
    if failed:
        lines += ["", "Did not run:", *failed]
    return "\n".join(lines)


def has_openvino(results: list[dict[str, Any]]) -> bool:
    return any("openvino" in r for r in results)


def met_mark(r: dict[str, Any]) -> str:
    tgt = r.get("target_ratio")
    return "" if tgt is None else (" ✓" if ratio_of(r) <= tgt else " ✗")


def openvino_cell(r: dict[str, Any]) -> str:
    """OpenVINO's median, or why there is none: it could not load / run the model (its own
    message), or its outputs disagreed with onnxruntime's (then it is not compared with)."""
    ov = r.get("openvino")
    if ov is None:
        return "–"
    if "ms" not in ov:
        return "cannot run: " + _cell_text(ov.get("error", "?"))
    if not ov.get("ok"):
        errs = [
            a["max_rel_error"] for a in ov["accuracy"].values() if a["max_rel_error"] is not None
        ]
        return f"{ov['ms']:.2f} (wrong output{f', max rel err {max(errs):.1e}' if errs else ''}: not compared)"
    return f"{ov['ms']:.2f}"


def _ratio_cell(r: dict[str, Any]) -> str:
    """ours / the faster runtime, naming it when OpenVINO ran (ORT / OV)."""
    if "openvino" not in r:
        return f"{ratio_of(r):.2f}"
    return f"{ratio_of(r):.2f} ({'OV' if r.get('best') == 'OpenVINO' else 'ORT'})"


def scaling_cell(one: dict[str, Any], two: dict[str, Any]) -> str:
    """Our 2-thread time over our 1-thread time; flagged where 2 threads are slower (item 5)."""
    s = two["ours_ms"] / one["ours_ms"]
    return f"{s:.2f}" + (" ⚠ slower at 2T" if s > 1.0 else "")


def _cell_text(text: str, limit: int = 90) -> str:
    t = " ".join(str(text).split()).replace("|", "/")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def slower_at_two(results: list[dict[str, Any]]) -> list[str]:
    """Networks whose 2-thread run of ours took longer than the 1-thread one."""
    by = {(r["name"], r.get("arch", "native"), r["threads"]): r for r in results}
    out = []
    for (n, arch, t), r in by.items():
        two = by.get((n, arch, 2))
        if t == 1 and two is not None and two["ours_ms"] > r["ours_ms"]:
            out.append(n if arch == "native" else f"{n} ({arch})")
    return out


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
            "# Benchmarks: generated C vs onnxruntime"
            + (" and OpenVINO" if has_openvino(results) else "")
            + (", today's edge networks" if results[0].get("suite") == "modern" else ""),
            "",
            "One section per instruction set our C was built for "
            f"(`bench --suite {results[0].get('suite', 'seed')} --arch A,B`). "
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
    """The bench options besides --suite and --arch that the results were measured with."""
    suite = results[0].get("suite", "seed") if results else "seed"
    names = list(dict.fromkeys(r["name"] for r in results))
    fp32 = [n for n in names if not n.endswith(INT8)]
    int8 = [n[: -len(INT8)] for n in names if n.endswith(INT8)]
    full = [b + (INT8 if q else "") for _, b, q in suite_plan(suite, None, bool(int8))]
    models = fp32 + [n for n in int8 if n not in fp32]
    extra = f" --models {','.join(models)}" if names != full else ""
    extra += " --against ort,openvino" if has_openvino(results) else ""
    extra += " --int8" if int8 else ""
    extra += " --cpu-clock" if results and results[0].get("clock", "wall") != "wall" else ""
    rounds = results[0].get("rounds", 1) if results else 1
    extra += f" --rounds {rounds}" if rounds > 1 else ""
    return extra + (" --ort-isa match" if any(_held(r) for r in results) else "")


def host_isa() -> str:
    """The vector extensions this host has that matter to both sides' kernels."""
    from ..host import cpu_flags

    flags = cpu_flags()
    named = [
        ("avx512f", "AVX-512F"),
        ("avx512bw", "AVX-512BW"),
        ("avx512_vnni", "AVX-512 VNNI"),
        ("avx512_bf16", "AVX-512 BF16"),
        ("amx_tile", "AMX"),
        ("avx2", "AVX2"),
        ("fma", "FMA"),
        ("avx_vnni", "AVX-VNNI"),
        ("asimd", "NEON"),
        ("asimddp", "NEON dot product"),
    ]
    have = [label for flag, label in named if flag in flags]
    return ", ".join(have) or "no AVX2/AVX-512/NEON flags reported"


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
    everything, results = results, timed(results)
    r0 = results[0] if results else {}
    has_chart = _chart(results, chart)
    kernels = sorted({r["gemm_kernel"] for r in results})
    sub = level + "#"
    suite = (everything[0] if everything else {}).get("suite", "seed")
    ov = has_openvino(results)
    ov_version = next(
        (r["openvino"]["version"].split("-")[0] for r in results if "ms" in r.get("openvino", {})),
        "?",
    )
    precisions = sorted({r.get("precision", "fp32") for r in results})
    return [
        f"{level} Benchmarks: generated C vs onnxruntime"
        + (" and OpenVINO" if ov else "")
        + (", today's edge networks" if suite == "modern" else "")
        + (f": {title}" if title else ""),
        "",
        f"Measured with `onnx2edge bench --suite {suite} --arch {r0.get('arch', 'native')}{_cmd_extra(everything)} "
        f"--write-doc {DOCS.get(suite, path.name)}` "
        f"on {cpu_name()} ({os.cpu_count()} logical CPUs; ISA: {host_isa()}), onnxruntime {r0.get('onnxruntime', '?')}"
        + (f", OpenVINO {ov_version}" if ov else "")
        + f", {' and '.join(precisions)}, batch 1, "
        f"at least {min((r['runs'] for r in results), default='?')} timed runs per side after warm-up, raised so that "
        f"each side's timed loop lasts about {MIN_SECONDS:g} s (run counts per model in the JSON); medians. "
        + (
            "Ratio = ours / the faster of onnxruntime and OpenVINO (named in brackets), lower is "
            "better; OpenVINO counts only where its outputs agree with onnxruntime's."
            if ov
            else "Ratio = ours / onnxruntime (lower is better)."
        ),
        *(
            [
                "OpenVINO: its CPU plugin reading the ONNX file, `INFERENCE_NUM_THREADS` = the "
                "column's thread count, `PERFORMANCE_HINT` LATENCY with one stream, "
                "`INFERENCE_PRECISION_HINT` f32 (no bf16 on hosts that have it), inputs bound once, "
                "the synchronous `infer` timed in its own process with its Python call overhead "
                "measured and subtracted (`src/onnx2edge/bench/openvino_runner.py`). Its outputs "
                "are checked against onnxruntime's like ours (int8 models: within "
                f"{QUANT_TOL:g} of the output's largest magnitude or {QUANT_SPREAD:g}x "
                "onnxruntime's own int8-vs-unoptimised spread on that model, its int8 rounding "
                "being its own); a model it cannot load says so in its cell."
            ]
            if ov
            else []
        ),
        *(
            [
                f"int8 rows: the fp32 network quantized with `onnx2edge quantize --mode static "
                f"--per-channel` (QDQ, uint8 activations, int8 weights, {CALIB_SAMPLES} N(0,1) "
                "calibration inputs); every runtime runs that same QDQ file."
            ]
            if "int8" in precisions
            else []
        ),
        f"Our build: `gcc {r0.get('cflags', '')}`; GEMM micro-kernel: {', '.join(kernels)}; "
        f"timed by {r0.get('clock', 'wall')} clock.",
        *(
            [
                f"onnxruntime{' and OpenVINO' if ov else ''} held to {r0['ort_isa']} like our "
                "build (`--ort-isa match`)."
            ]
            if _held(r0)
            else []
        ),
        *(
            [
                f"OpenVINO held to {r0['openvino_isa']} like our build: oneDNN's documented cap, "
                "which its convolution, MatMul and element-wise kernels obey on any host (checked "
                "in its runtime model: brgconv_avx2_*); its own Reduce and MVN (LayerNorm) "
                "kernels still use AVX-512."
            ]
            if r0.get("openvino_isa") and not _held(r0)
            else []
        ),
        "How each side is timed: see `src/onnx2edge/bench/harness.py` (C harness with clock_gettime for ours; "
        "IOBinding loop in a separate process for onnxruntime, its Python per-call overhead measured and subtracted).",
        (
            "Random weights from `onnx2edge.bench.modern` (the networks defined in torch, seeded, "
            "exported by `torch.onnx.export` at opset 17 into a cache directory; sizes below)"
            if suite == "modern"
            else "Random weights from `onnx2edge.bench.zoo`"
        )
        + "; every run also checks our outputs against onnxruntime's "
        "(max rel err column: within 1e-4, or within twice the spread between onnxruntime's optimised and "
        "unoptimised runs where that is larger).",
        "",
        format_table(everything),
        "",
        *_descriptions(results),
        *([f"![ratio chart]({chart.name})", ""] if has_chart else []),
        *_targets_section(results, sub),
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
        json.dumps(everything, indent=1),
        "```",
        "</details>",
        "",
    ]


def _descriptions(results: list[dict[str, Any]]) -> list[str]:
    """What each network is (layout, input size), where the run recorded it."""
    seen = {r["name"]: r["description"] for r in results if r.get("description")}
    if not seen:
        return []
    return ["Networks:", "", *[f"- {n}: {d}" for n, d in seen.items()], ""]


def _targets_section(results: list[dict[str, Any]], level: str) -> list[str]:
    """Each network's 1-thread ratio against its target, met or missed, and the networks our
    2-thread run was slower on."""
    ones = [r for r in results if r["threads"] == 1 and r.get("target_ratio") is not None]
    if not ones:
        return []
    suite = results[0].get("suite", "seed")
    issue = "issue 34, items 4 and 6" if suite == "modern" or has_openvino(results) else "issue 9"
    out = [
        f"{level} Targets ({issue}; 1 thread, this ISA)",
        "",
        "| network | ratio 1T | target | |",
        "|---|---:|---:|---|",
    ]
    for r in ones:
        met = ratio_of(r) <= r["target_ratio"]
        why = "met" if met else "missed" + (": gap table below" if r.get("gaps") else "")
        out.append(f"| {r['name']} | {_ratio_cell(r)} | {r['target_ratio']} | {why} |")
    slow = slower_at_two(results)
    met_n = sum(ratio_of(r) <= r["target_ratio"] for r in ones)
    out += [
        "",
        f"{met_n} of {len(ones)} met. "
        + (
            f"Slower at 2 threads than at 1 (ours): {', '.join(slow)}."
            if slow
            else "No network ran slower at 2 threads than at 1 (ours)."
            if any(r["threads"] == 2 for r in results)
            else ""
        ),
        "",
    ]
    return out


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
        f"Listed: the {GAP_NODES} nodes where ours exceeds onnxruntime the most."
        + (
            " The per-node comparison is with onnxruntime's profile (its node names map to the "
            "model's); where OpenVINO is the faster runtime the gap to it is larger than the "
            "table's by the ratio of the two runtimes' totals."
            if has_openvino(results)
            else ""
        ),
        "",
    ]
    for r in missed:
        g = r["gaps"]
        if "error" in g:
            out += [f"**{r['name']}**: the profiled run failed: {g['error']}", ""]
            continue
        out += [
            f"**{r['name']}** (ratio {ratio_of(r):.2f}"
            + (f" vs {r['best']}" if "openvino" in r else "")
            + f", target {r['target_ratio']}): profiled totals ours "
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
    by = {(r["name"], r["threads"]): ratio_of(r) for r in results}
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
    ov = has_openvino(results)
    ax.set_ylabel(
        "time ours / "
        + ("the faster of ORT, OpenVINO" if ov else "onnxruntime")
        + " (lower is better)"
    )
    ax.set_title(
        "onnx2edge generated C vs "
        + ("onnxruntime and OpenVINO" if ov else "onnxruntime")
        + ", batch 1"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True
