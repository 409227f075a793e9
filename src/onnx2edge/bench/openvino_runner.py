"""OpenVINO's CPU plugin as a second comparison runtime for `onnx2edge bench --against ort,openvino`.

Timed like onnxruntime in harness.py: a separate Python process compiles the ONNX file with
OpenVINO's CPU plugin (INFERENCE_NUM_THREADS = the bench's thread count, the LATENCY
performance hint, which runs one stream, and INFERENCE_PRECISION_HINT f32, so an AVX-512 BF16
or AMX host does not quietly run bf16), binds the inputs once (ov.Tensor over the numpy
arrays: no copy per call) and times the synchronous `infer(share_outputs=True)` with
perf_counter_ns (or the thread CPU clock): the synchronous call runs the graph on the calling
thread as onnxruntime's 1-thread session does, so `--cpu-clock` times the inference itself;
`start_async()/wait()` hands each call to OpenVINO's worker thread, which on a loaded machine
measured 0.8-3 ms bimodal for a 0.8 ms network. The Python cost of that loop is measured on a one-element Identity model in the
same process and subtracted, as on onnxruntime's side. The outputs of the last timed run are
written to an .npz so that the caller checks them against onnxruntime: a runtime that computes
something else must not become the one we are compared with.

Where OpenVINO cannot read or compile a model (an op its ONNX frontend lacks), the process
prints {"error": ...} with OpenVINO's first line of explanation, and the bench reports that
instead of a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

NAME = "OpenVINO"

OV_SCRIPT = r"""
import json, sys, time
import numpy as np

cfg = json.loads(sys.argv[1])

def first_line(e):
    lines = [l.strip().lstrip("- ").strip() for l in str(e).splitlines() if l.strip()]
    # OpenVINO's messages open with C++ source locations and a summary banner; the reason
    # (e.g. "No conversion rule found for operations: X") comes after them
    banner = ("Exception from", "Check '", "FrontEnd API failed", "Model wasn't fully",
              "Summary:")
    useful = [l for l in lines if not l.startswith(banner)] or lines
    return ("; ".join(useful) if useful else type(e).__name__)[:300]

try:
    import openvino as ov
except ImportError as e:
    print(json.dumps({"error": "openvino is not installed (pip install openvino)"}))
    sys.exit(0)

core = ov.Core()
config = {
    "INFERENCE_NUM_THREADS": cfg["threads"],
    "PERFORMANCE_HINT": "LATENCY",
    "NUM_STREAMS": 1,
    "INFERENCE_PRECISION_HINT": "f32",
}

def compile_(model):
    return core.compile_model(model, "CPU", config)

def bound(compiled, feeds):
    req = compiled.create_infer_request()
    keep = []
    for port in compiled.inputs:
        name = next((n for n in port.get_names() if n in feeds), None)
        if name is None:
            raise KeyError(f"input {sorted(port.get_names())} not among {sorted(feeds)}")
        a = np.ascontiguousarray(feeds[name])
        keep.append(a)
        req.set_tensor(port, ov.Tensor(a, shared_memory=True))
    return req, keep

def timed(req, runs, warmup):
    for _ in range(warmup):
        req.infer(share_outputs=True)
    clock = time.thread_time_ns if cfg.get("cpu_clock") else time.perf_counter_ns
    out = []
    for _ in range(runs):
        t0 = clock()
        req.infer(share_outputs=True)
        out.append((clock() - t0) / 1e6)
    return out

feeds = {k: np.load(v) for k, v in cfg["inputs"].items()}
try:
    compiled = compile_(cfg["model"])
    req, keep = bound(compiled, feeds)
    req.infer(share_outputs=True)
except Exception as e:  # an op OpenVINO's ONNX frontend or CPU plugin does not take
    print(json.dumps({"error": first_line(e), "version": ov.__version__}))
    sys.exit(0)
times = timed(req, cfg["runs"], cfg["warmup"])
outs = {}
for port in compiled.outputs:
    name = next((n for n in cfg["output_names"] if n in port.get_names()), None)
    if name is not None:
        outs[name] = np.array(req.get_tensor(port).data)
np.savez(cfg["outputs"], **outs)

# the Python cost of one infer() round trip, on a one-element model
p = ov.opset13.parameter([1], ov.Type.f32, name="x")
empty = ov.Model([ov.opset13.relu(p)], [p], "empty")
ereq, ekeep = bound(compile_(empty), {"x": np.zeros(1, np.float32)})
overhead = float(np.median(timed(ereq, max(cfg["runs"], 200), 20)))

nodes = {}
if cfg.get("profile"):
    # OpenVINO's own per-layer counters (PERF_COUNT) in a separate compiled model, as
    # onnxruntime's profile runs in a separate session: the counters cost time of their own
    pc = core.compile_model(cfg["model"], "CPU", {**config, "PERF_COUNT": True})
    preq, pkeep = bound(pc, feeds)
    for _ in range(cfg["warmup"]):
        preq.infer(share_outputs=True)
    for _ in range(cfg["runs"]):
        preq.infer(share_outputs=True)
        for info in preq.get_profiling_info():
            ms = info.real_time.total_seconds() * 1e3
            if ms > 0:  # layers fused away or not executed report 0
                d = nodes.setdefault(info.node_name, {"op": info.exec_type, "ms": 0.0})
                d["ms"] += ms / cfg["runs"]

def peak_kb():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1

print(json.dumps({"times_ms": times, "overhead_ms": overhead, "maxrss_kb": peak_kb(),
                  "nodes": nodes,
                  "version": ov.__version__,
                  "threads": compiled.get_property("INFERENCE_NUM_THREADS"),
                  "precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
                  "pinning": bool(compiled.get_property("ENABLE_CPU_PINNING"))}))
"""


def run_openvino(
    model: str | Path,
    inputs: Mapping[str, str | Path],
    output_names: list[str],
    outputs: str | Path,
    *,
    threads: int = 1,
    runs: int = 20,
    warmup: int = 3,
    cpu_clock: bool = False,
    env: Mapping[str, str] | None = None,
    profile: bool = False,
) -> dict[str, Any]:
    """Time `model` with OpenVINO's CPU plugin in a child process.

    inputs: input name -> .npy file; outputs: the .npz the outputs of the last run go to
    (keys: output_names). Returns {"times_ms", "overhead_ms", "maxrss_kb", "version", ...},
    or {"error": why} where OpenVINO cannot load or run the model. profile: also "nodes",
    {layer name: {"op": OpenVINO's kernel, "ms": mean per run}} from its performance counters
    (untimed runs of a separate compiled model; layers named after the ONNX node they came
    from, with a suffix: "conv1/WithoutBiases")."""
    cfg = {
        "model": str(model),
        "threads": threads,
        "runs": runs,
        "warmup": warmup,
        "inputs": {k: str(v) for k, v in inputs.items()},
        "output_names": list(output_names),
        "outputs": str(outputs),
        "cpu_clock": cpu_clock,
        "profile": profile,
    }
    p = subprocess.run(
        [sys.executable, "-c", OV_SCRIPT, json.dumps(cfg)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return {"error": f"OpenVINO process failed: {err[:300]}"}
    return json.loads(lines[-1])


def load_outputs(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}
