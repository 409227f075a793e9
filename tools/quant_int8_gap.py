"""INT8 latency of our generated C versus onnxruntime on the issue's CNNs (docs/quantization.md).

    PYTHONPATH=src python3 tools/quant_int8_gap.py [--models squeezenet,mobilenet_v2,resnet50]
        [--write-doc docs/quantization.md]

Models come from the zoo (`onnx2edge.bench.zoo`: published layouts, calibrated random
weights, no downloads). Each is quantized twice with 16 N(0,1) calibration inputs, per-channel
int8 weights, uint8 activations: QDQ with `onnx2edge quantize` (what the C backend runs as
float convolutions between QuantizeLinear / DequantizeLinear) and QOperator with
onnxruntime's `quantize_static` (QLinearConv etc.: what exercises the C backend's integer
kernels). Each variant: our C and onnxruntime in the same `bench_model` run (1 thread, batch
1, medians); onnxruntime fp32 on the original is timed alone for its int8 speed-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort


def _ort_ms(path: Path, runs: int = 10) -> float:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    x = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)}
    s.run(None, x)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, x)
        ts.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ts))


def run(models: list[str], log: Any) -> dict[str, Any]:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    import onnx2edge
    from onnx2edge.bench import zoo
    from onnx2edge.bench.harness import bench_model
    from onnx2edge.errors import Onnx2EdgeError
    from onnx2edge.host import cpu_name
    from onnx2edge.quantization import _Reader, load_calib

    rows = []
    with tempfile.TemporaryDirectory(prefix="int8-gap-") as tmp:
        work = Path(tmp)
        for name in models:
            src = work / f"{name}.onnx"
            zoo.save(name, src)
            m = onnx.load(src)
            dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
            x = np.random.default_rng(0).standard_normal((16, *dims)).astype(np.float32)
            np.savez(work / "calib.npz", x=x)
            log(f"{name}: quantizing")
            qdq = work / f"{name}_qdq.onnx"
            onnx2edge.quantize(src, qdq, mode="static", calib=work / "calib.npz", per_channel=True)
            qop = work / f"{name}_qop.onnx"
            pre = work / f"{name}_pre.onnx"
            from onnxruntime.quantization.shape_inference import quant_pre_process

            quant_pre_process(str(src), str(pre))
            quantize_static(
                pre,
                qop,
                _Reader(load_calib(work / "calib.npz", m)),
                quant_format=QuantFormat.QOperator,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
            fp32_ms = _ort_ms(src)
            row: dict[str, Any] = {"model": name, "ort_fp32_ms": fp32_ms}
            for label, path in (("qdq", qdq), ("qoperator", qop)):
                log(f"{name}: bench {label}")
                try:
                    b = bench_model(path, runs=5, warmup=1)
                    row[label] = {
                        "c_ms": b["ours_ms"],
                        "ort_ms": b["ort_ms"],
                        "ratio": b["ratio"],
                        "kernels": b["kernels"],
                        "gemm_kernel": b["gemm_kernel"],
                        "accuracy": b["accuracy"],
                        "cflags": b["cflags"],
                    }
                except Onnx2EdgeError as e:
                    row[label] = {"error": str(e)[:300]}
            rows.append(row)
    return {"rows": rows, "cpu": cpu_name(), "onnxruntime": ort.__version__}


def _short(err: str) -> str:
    import re

    ops = sorted(set(re.findall(r"op (\w+), domain 'com.microsoft'", err)))
    return f"not converted: {', '.join(ops)} (com.microsoft)" if ops else err[:80]


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"{res['cpu']}, onnxruntime {res['onnxruntime']}, 1 thread, batch 1, medians of 5 runs; "
        "**shared, heavily loaded machine (load average ~15 on 2 cores)**: ratios within a row "
        "were measured in the same run, absolute times are several times the quiet-machine "
        "anchors of the issue.",
        "",
        "| model | onnxruntime fp32 ms | ORT int8 QDQ ms | our C on QDQ ms | C / ORT (QDQ) | "
        "ORT int8 QOperator ms | our C on QOperator ms | C / ORT (QOperator) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        cells = []
        for k in ("qdq", "qoperator"):
            v = r[k]
            cells.append(
                f"{v['ort_ms']:.1f} | {v['c_ms']:.1f} | {v['ratio']:.2f}"
                if "c_ms" in v
                else f"— | {_short(v['error'])} | —"
            )
        lines.append(f"| {r['model']} | {r['ort_fp32_ms']:.1f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,mobilenet_v2,resnet50")
    ap.add_argument("--write-doc", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--from-json", type=Path)
    a = ap.parse_args()
    if a.from_json:
        res = json.loads(a.from_json.read_text())
    else:
        res = run(a.models.split(","), lambda m: print(m, file=sys.stderr, flush=True))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    print(md)
    if a.write_doc:
        text = a.write_doc.read_text()
        start, end = "<!-- int8 -->", "<!-- /int8 -->"
        i, j = text.index(start) + len(start), text.index(end)
        a.write_doc.write_text(text[:i] + "\n" + md + "\n" + text[j:])


if __name__ == "__main__":
    main()
