"""`onnx2edge prune --sweep`: prune at several levels, score each against the dense model and
time our C build (bench.harness). Above both `prune` (the pruning itself, which the API's
`prune` calls) and the bench harness (which converts through the API), so `prune` never
reaches back up to the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import Onnx2EdgeError
from ..prune import evaluate, prune_model


def sweep(
    model_path: str | Path,
    out: str | Path,
    levels: Sequence[float],
    eval_file: str | Path,
    *,
    labels_file: str | Path | None = None,
    tolerance: float = 0.01,
    latency: bool = True,
    log: Callable[[str], None] = lambda s: None,
    **prune_kw: Any,
) -> dict[str, Any]:
    """Prune at each level, evaluate (accuracy or agreement with the dense model) and time our
    C build; save the sparsest model within `tolerance` of the dense score."""
    from ..frontend.loader import load_model
    from ..fsutil import write_bytes_atomic

    model = load_model(model_path)
    try:
        data = dict(np.load(eval_file))
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input error
        raise Onnx2EdgeError(f"--eval {eval_file}: cannot read ({e})") from None
    labels = None
    if labels_file is not None:
        try:
            labels = np.load(labels_file)
        except Exception as e:  # noqa: BLE001
            raise Onnx2EdgeError(f"--labels {labels_file}: cannot read ({e})") from None
    dense_score, dense_pred = evaluate(model, data, labels, None)
    if labels is None:
        dense_score = 1.0
    metric = "accuracy" if labels is not None else "agreement"
    rows = [{"sparsity": 0.0, metric: dense_score, **_latency(model, data, latency)}]
    best, best_model = None, model
    for s in levels:
        pm, rep = prune_model(model, s, **prune_kw)
        score, _ = evaluate(pm, data, labels, dense_pred)
        row = {"sparsity": round(rep.sparsity, 4), metric: score, **_latency(pm, data, latency)}
        rows.append(row)
        log(f"sparsity {row['sparsity']:.2f}: {metric} {score:.4f}")
        if score >= dense_score - tolerance and (best is None or s > best):
            best, best_model = s, pm
    write_bytes_atomic(out, best_model.SerializeToString())
    return {
        "metric": metric,
        "rows": rows,
        "chosen": best,
        "tolerance": tolerance,
        "output": str(out),
    }


def _latency(model: onnx.ModelProto, data: Mapping[str, np.ndarray], on: bool) -> dict[str, Any]:
    """Median ms of our C build and onnxruntime (1 thread) on the eval batch, same run."""
    if not on:
        return {}
    import tempfile

    from .harness import bench_model

    with tempfile.TemporaryDirectory(prefix="o2e_prune_") as d:
        p = Path(d) / "m.onnx"
        p.write_bytes(model.SerializeToString())
        shapes = {k: list(v.shape) for k, v in data.items()}
        r = bench_model(p, runs=10, warmup=2, input_shapes=shapes, work_dir=Path(d) / "w")
    return {"ours_ms": r["ours_ms"], "ort_ms": r["ort_ms"]}


def format_sweep(res: Mapping[str, Any]) -> str:
    m = res["metric"]
    lines = [f"{'sparsity':>8}  {m:>9}  {'ours ms':>8}  {'ort ms':>8}"]
    for r in res["rows"]:
        o, t = r.get("ours_ms"), r.get("ort_ms")
        lines.append(f"{r['sparsity']:>8.2f}  {r[m]:>9.4f}  {_f(o):>8}  {_f(t):>8}")
    ch = res["chosen"]
    lines.append(
        f"chosen: {'dense (no level within tolerance)' if ch is None else ch} -> {res['output']}"
    )
    return "\n".join(lines)


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
