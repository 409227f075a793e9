"""The accuracy / size / latency table of docs/quantization.md, and its chart.

    PYTHONPATH=src python3 tools/quant_table.py [--write-doc docs/quantization.md]

For the digits MLP and CNN (tests/fixtures/digits, tools/train_digits.py): fp32, fp16 (ONNX),
fp32 with fp16 weight storage in C, dynamic int8, static int8 (minmax / percentile / entropy,
per-channel, int8 activations) and `--exclude auto`. Each variant: accuracy on the 540 test
digits and top-1 agreement with fp32 (onnxruntime), file size, onnxruntime and generated-C
latency (1 thread, batch 1, medians of the same run, `onnx2edge.bench.harness.bench_model`),
and the C code's own accuracy on the test digits where the C backend converts the model.
Calibration: the first 200 training digits.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "tests" / "fixtures" / "digits"

VARIANTS: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [
    # label, quantize() options (None: the fp32 file itself), C convert options
    ("fp32", None, {}),
    ("fp32, C weights fp16", None, {"weights": "fp16"}),
    ("fp16 (ONNX)", {"mode": "fp16"}, {}),
    ("dynamic int8", {"mode": "dynamic"}, {}),
    ("static minmax", {"mode": "static", "method": "minmax"}, {}),
    ("static percentile", {"mode": "static", "method": "percentile"}, {}),
    ("static entropy", {"mode": "static", "method": "entropy"}, {}),
    ("static minmax per-channel", {"mode": "static", "per_channel": True}, {}),
    ("static minmax s8 activations", {"mode": "static", "activations": "int8"}, {}),
    ("static auto-exclude (max drop 1%)", {"mode": "static", "exclude": "auto"}, {}),
]


def _x(split: dict[str, np.ndarray], part: str, model: str) -> np.ndarray:
    x = (split[f"x_{part}"] / 16).astype(np.float32)
    return x.reshape(-1, 1, 8, 8) if model == "cnn" else x


def _ort_predict(path: Path, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _c_predict(path: Path, x: np.ndarray, shape: list[int], opts: dict, work: Path) -> np.ndarray:
    from onnx2edge import api

    out = work / "c_eval"
    api.convert(path, "c", out, input_shapes={"input": shape}, options=opts)
    return np.concatenate([api.run(out, {"input": xi.reshape(shape)})["logits"] for xi in x])


def run(log: Any = print) -> dict[str, Any]:
    import onnx2edge
    from onnx2edge.bench.harness import bench_model
    from onnx2edge.errors import Onnx2EdgeError
    from onnx2edge.host import cpu_name

    with np.load(DIGITS / "digits.npz") as z:
        split = {k: z[k] for k in z.files}
    rows = []
    with tempfile.TemporaryDirectory(prefix="quant-table-") as tmp:
        work = Path(tmp)
        for model in ("mlp", "cnn"):
            src = DIGITS / f"{model}.onnx"
            shape = [1, 64] if model == "mlp" else [1, 1, 8, 8]
            xc, xt, yt = _x(split, "train", model)[:200], _x(split, "test", model), split["y_test"]
            np.savez(work / "calib.npz", input=xc)
            np.save(work / "labels.npy", split["y_train"][:200])
            ref = _ort_predict(src, xt).argmax(1)
            for label, qopts, copts in VARIANTS:
                log(f"{model}: {label}")
                path, note = src, ""
                if qopts is not None:
                    path = work / f"{model}_{len(rows)}.onnx"
                    extra = (
                        {"labels": work / "labels.npy"} if qopts.get("exclude") == "auto" else {}
                    )
                    res = onnx2edge.quantize(src, path, calib=work / "calib.npz", **qopts, **extra)
                    if res.excluded:
                        note = "kept in fp32: " + ", ".join(res.excluded)
                    elif qopts.get("exclude") == "auto":
                        note = "nothing kept in fp32 (drop already <= 1%)"
                pred = _ort_predict(path, xt).argmax(1)
                row: dict[str, Any] = {
                    "model": model,
                    "variant": label,
                    "note": note,
                    "accuracy": float((pred == yt).mean()),
                    "agreement": float((pred == ref).mean()),
                    "onnx_bytes": path.stat().st_size,
                }
                try:
                    b = bench_model(
                        path,
                        input_shapes={"input": shape},
                        runs=50,
                        warmup=20,
                        min_seconds=1.0,
                        options=copts,
                        work_dir=work / "bench",
                    )
                    cpred = _c_predict(path, xt, shape, copts, work).argmax(1)
                    row.update(
                        ort_us=b["ort_ms"] * 1e3,
                        c_us=b["ours_ms"] * 1e3,
                        ratio=b["ratio"],
                        c_weight_bytes=b["weight_bytes"],
                        gemm_kernel=b["gemm_kernel"],
                        c_accuracy=float((cpred == yt).mean()),
                        c_agreement_ort=float((cpred == pred).mean()),
                        onnxruntime=b["onnxruntime"],
                        cflags=b["cflags"],
                    )
                except Onnx2EdgeError as e:
                    row["c_error"] = str(e)[:200]
                    import onnx2edge.bench.harness as h

                    row["ort_us"] = _ort_only_us(path, shape, h)
                rows.append(row)
    return {
        "rows": rows,
        "cpu": cpu_name(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
    }


def _ort_only_us(path: Path, shape: list[int], h: Any) -> float:
    """onnxruntime alone (when our C backend cannot convert the model): median of 2000 runs."""
    import time

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = {"input": np.random.default_rng(0).random(shape, dtype=np.float32)}
    for _ in range(100):
        s.run(None, x)
    ts = []
    for _ in range(2000):
        t = time.perf_counter_ns()
        s.run(None, x)
        ts.append((time.perf_counter_ns() - t) / 1e3)
    return float(np.median(ts))


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"Measured on {res['cpu']}, onnxruntime {res['onnxruntime']}, 1 thread, batch 1; "
        "medians; **the machine was shared with other jobs (2 cores, 8 sessions)**, so "
        "absolute times are noisy: compare within a row (same run).",
        "",
        "| model | variant | accuracy | agreement with fp32 | ONNX bytes | C weight bytes | "
        "onnxruntime µs | our C µs | C / ORT | C accuracy | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        c = (
            (
                f"{r['c_weight_bytes']:,} | {r['ort_us']:.1f} | {r['c_us']:.1f} | {r['ratio']:.2f} | "
                f"{r['c_accuracy']:.4f}"
            )
            if "c_us" in r
            else (f"— | {r['ort_us']:.1f} | — | — | — ")
        )
        note = r["note"] or (_short(r["c_error"]) if "c_error" in r else "")
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['accuracy']:.4f} | {r['agreement']:.4f} | "
            f"{r['onnx_bytes']:,} | {c} | {note} |"
        )
    return "\n".join(lines)


def _short(err: str) -> str:
    if "dtype float16" in err:
        return "our C has no float16 arithmetic (fp16 storage: `--weights fp16`)"
    return "C: " + err[:120]


def chart(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    for col, model in enumerate(("mlp", "cnn")):
        rows = [r for r in res["rows"] if r["model"] == model]
        labels = [r["variant"] for r in rows]
        y = np.arange(len(rows))
        ax = axes[0][col]
        ax.barh(y, [100 * r["accuracy"] for r in rows], color="#4477aa")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        lo = min(100 * r["accuracy"] for r in rows)
        ax.set_xlim(max(0, lo - 3), 100)
        ax.set_xlabel("test accuracy % (onnxruntime)")
        ax.set_title(f"digits {model.upper()}")
        ax = axes[1][col]
        ort_us = [r.get("ort_us", np.nan) for r in rows]
        c_us = [r.get("c_us", np.nan) for r in rows]
        ax.barh(y - 0.2, ort_us, 0.4, label="onnxruntime", color="#cc6677")
        ax.barh(y + 0.2, c_us, 0.4, label="our C", color="#117733")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("latency µs, 1 thread, batch 1 (shared machine)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--write-doc", type=Path, help="replace the block between <!-- table --> markers"
    )
    ap.add_argument("--json", type=Path, help="also write the raw results")
    ap.add_argument("--from-json", type=Path, help="render saved results instead of measuring")
    a = ap.parse_args()
    if a.from_json:
        res = json.loads(a.from_json.read_text())
    else:
        res = run(lambda m: print(m, file=sys.stderr, flush=True))
    md = markdown(res)
    print(md)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    if a.write_doc:
        text = a.write_doc.read_text()
        start, end = "<!-- table -->", "<!-- /table -->"
        i, j = text.index(start) + len(start), text.index(end)
        a.write_doc.write_text(text[:i] + "\n" + md + "\n" + text[j:])
        chart(res, a.write_doc.with_suffix(".png"))


if __name__ == "__main__":
    main()
