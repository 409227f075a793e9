"""The `mps` backend: ONNX -> a Swift package building an MPSNNGraph (seed paper 000,
ONNX2MPSNNGraph), verified on Linux against a CPU model of Metal Performance Shaders."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Onnx2EdgeError
from ...ir import Graph, Node
from ...passes.fuse_activation import fuse_activations
from ...passes.registry import register_pass
from ...semantics.activations import ACTIVATIONS, Activation, mps_neuron
from ..base import Backend, BackendOption, ConvertResult, register_backend
from ..refusal import Refusal
from . import build
from .core import Refuse, swift_ident
from .cpu import CPU_EMITTERS
from .lower import lower
from .ops import EMITTERS
from .swift import render_model, render_package, render_readme

MODEL_INFO = "mps-model.json"

# Which fusions MPS takes is decided here, as options of the shared fuse_activation pass, not
# undone later: MPSNNGraph applies an activation only as the fusedNeuronDescriptor of a
# convolution / fully connected layer (a BatchNormalization the fold pass left is a 1x1
# depthwise convolution here, so it takes one too), and only an MPSCNNNeuronType (the activation
# table's `mps` column: not HardSwish, not a Clip whose lower bound is not 0, not tanh-GELU).
# Refusing up front keeps the activation a node of its own, with its name, which the GPU
# emitters lower as before. Where a node runs (GPU or the CPU tail) is only known while
# lowering, so a fused node the GPU refuses is split again in one place: cpu.cpu_fused.
MPS_FUSION_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization")
MPS_NEURONS = tuple(op for op, d in ACTIVATIONS.items() if d.mps is not None)


def _has_neuron(graph: Graph, producer: Node, act: Activation) -> bool:
    return mps_neuron(act) is not None


@register_pass("fuse_activation_mps", after=("fold_constants", "fold_batchnorm"))
def fuse_activation_mps(graph: Graph) -> Graph:
    """fuse_activation with MPS's options (above)."""
    return fuse_activations(
        graph, producers=MPS_FUSION_PRODUCERS, activations=MPS_NEURONS, accept=_has_neuron
    )


def model_class_name(graph: Graph, options: Mapping[str, Any]) -> str:
    return swift_ident(str(options.get("model_name") or graph.name or "Model"), upper=True)


@register_backend
class MPSBackend(Backend):
    name = "mps"
    label = "MPS"
    run_options = (*Backend.run_options, "model_name")
    aliases = {("weights", "fp16"): ("fp16", True), ("weights", "fp32"): ("fp16", False)}
    options = (
        BackendOption("fp16", "float16 weights", switch=True),
        BackendOption(
            "gpu_only",
            "refuse nodes MPSNNGraph cannot run instead of a CPU tail in Swift",
            switch=True,
        ),
    )

    required_passes = (
        "lower_if_select",  # o2e.IfSelect: both branches run, then Where selects
        "lower_dynamic_quantize_lstm",
        "fold_constants",
        "infer_shapes",
        "remove_identity",
        "eliminate_dead_nodes",
        "fold_batchnorm",
        "decompose_hardswish",  # no HardSwish neuron: x * HardSigmoid(x), two MPSNN nodes
        "decompose_mish",  # no Mish neuron: softPlus and tanH neurons, a multiplication node
        "compose_gelu",  # Erf GELU (torch below opset 20) -> Gelu: one geLU neuron, no Erf node
        "fuse_activation_mps",
    )

    # check: MPSNNGraph's verdict per node; what it cannot run but the Swift CPU tail can is
    # 'supported' on the cpu (or 'replaceable' when a rewrite moves it onto the GPU)
    check_placement = "gpu"
    check_as = {"gpu_only": True}
    check_fallback = ("cpu", {})

    @property
    def supported_ops(self) -> frozenset[tuple[str, str]]:
        """The ops with an MPSNNGraph node or Swift CPU code."""
        return frozenset(("", op) for op in (*EMITTERS, *CPU_EMITTERS))

    def check(self, graph: Graph, options: Mapping[str, Any] | None = None) -> list[Refusal]:
        """With `gpu_only`, every node MPSNNGraph cannot run; else only what the Swift CPU
        tail cannot take either."""
        cpu = not (options or {}).get("gpu_only", False)
        try:
            return lower(graph, check_only=True, cpu=cpu).refusals
        except Refuse as e:  # pragma: no cover - check_only collects instead of raising
            return [Refusal.graph(str(e))]

    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        fp16 = bool(options.get("fp16", False))
        gpu_only = bool(options.get("gpu_only", False))
        try:
            lowered = lower(graph, fp16=fp16, cpu=not gpu_only)
        except Refuse as e:
            raise Onnx2EdgeError(f"cannot convert to MPS: {e}") from e
        cls = model_class_name(graph, options)
        n_layers = sum(len(s.layers) for s in lowered.gpu_segments) or len(lowered.layers)
        names = [*graph.inputs, *graph.outputs]
        out_dir = Path(out_dir)
        src = out_dir / "Sources" / cls
        src.mkdir(parents=True, exist_ok=True)
        files = {
            "Package.swift": render_package(cls),
            f"Sources/{cls}/{cls}.swift": render_model(
                lowered,
                class_name=cls,
                graph_name=graph.name,
                opset=graph.opset,
                fp16=fp16,
                shapes={n: [int(d) for d in graph.shape_of(n)] for n in names},
                input_names=list(graph.inputs),
                output_names=list(graph.outputs),
            ),
            f"Sources/{cls}/weights.json": lowered.blob.manifest(graph.name),
            "README.md": render_readme(cls, graph.name, fp16, n_layers, len(lowered.blob.data)),
        }
        gpu_images = {n: [i.c, i.h, i.w] for n, i in lowered.outputs}
        info = {
            "class": cls,
            "inputs": [{"name": n, "shape": list(graph.shape_of(n))} for n in graph.inputs],
            "outputs": [
                {
                    "name": n,
                    "shape": list(graph.shape_of(n)),
                    "on": "gpu" if n in gpu_images else "cpu",
                    **({"mps": gpu_images[n]} if n in gpu_images else {}),
                }
                for n in graph.outputs
            ],
            "placement": [
                {"node": label, "on": on, **({"reason": why} if why else {})}
                for label, on, why in lowered.placement
            ],
            "weights": f"Sources/{cls}/weights.bin",
            "fp16": fp16,
        }
        files[MODEL_INFO] = json.dumps(info, indent=1) + "\n"
        for rel, text in files.items():
            (out_dir / rel).write_text(text)
        (src / "weights.bin").write_bytes(bytes(lowered.blob.data))
        names = sorted([*files, info["weights"]])
        return ConvertResult(
            out_dir,
            names,
            {
                "graph_nodes": n_layers,
                "weight_bytes": len(lowered.blob.data),
                "class": cls,
                "placement": placement_summary(lowered.placement),
            },
        )

    def default_rtol(self, options: Mapping[str, Any]) -> tuple[float, str]:
        # --fp16: convolutions read float16 weights and inputs on a device (kernelWeightsDataType;
        # the CPU model models it), which costs about 1e-2 of the output's scale (SqueezeNet).
        if options.get("fp16"):
            return 3e-2, "float16 convolutions (--fp16; --rtol to hold it tighter)"
        return 1e-4, ""

    def describe_run(self, out_dir: Path, options: Mapping[str, Any]) -> str:
        return (
            "a CPU model of MPS (sim): the generated Swift compiled by swiftc against "
            "onnx2edge's CPU model of Metal / MetalPerformanceShaders, not Apple hardware"
        )

    def run(
        self, out_dir: Path, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        out_dir = Path(out_dir).resolve()
        info_path = out_dir / MODEL_INFO
        if not info_path.is_file():
            raise Onnx2EdgeError(
                f"{out_dir}: no {MODEL_INFO}; convert the model with --target mps again"
            )
        info = json.loads(info_path.read_text())
        binary = build.build_model(out_dir, info["class"])
        with tempfile.TemporaryDirectory(prefix="onnx2edge-mps-") as tmp:
            args = [str(binary), str(out_dir / info["weights"]), str(Path(tmp) / "out")]
            for spec in info["inputs"]:
                if spec["name"] not in inputs:
                    raise Onnx2EdgeError(
                        f"missing input '{spec['name']}' (inputs: {', '.join(i['name'] for i in info['inputs'])})"
                    )
                arr = np.asarray(inputs[spec["name"]], dtype=np.float32)
                if tuple(arr.shape) != tuple(spec["shape"]):
                    raise Onnx2EdgeError(
                        f"input '{spec['name']}' has shape {list(arr.shape)}, the model wants {spec['shape']}"
                    )
                path = Path(tmp) / f"in{len(args)}.f32"
                np.ascontiguousarray(arr).tofile(path)  # batch 1 NCHW == CHW
                args.append(str(path))
            proc = subprocess.run(
                args, capture_output=True, text=True, timeout=float(options.get("timeout", 3600))
            )
            if proc.returncode != 0:
                raise Onnx2EdgeError(
                    f"the MPS model (CPU model of MPS) failed: {proc.stderr.strip()[-2000:]}"
                )
            results: dict[str, np.ndarray] = {}
            for i, spec in enumerate(info["outputs"]):
                out = np.fromfile(Path(tmp) / f"out{i}.f32", dtype=np.float32)
                shape = spec["shape"]
                if out.size != int(np.prod(shape)):
                    raise Onnx2EdgeError(
                        f"the MPS result has {out.size} values, ONNX output {spec['name']} has "
                        f"shape {shape}"
                    )
                results[spec["name"]] = out.reshape(shape)
        self.last_timing = proc.stdout.strip()
        return results


def placement_summary(placement: list[tuple[str, str, str]]) -> str:
    """Where each node runs, for `convert`'s report: counts, then every CPU node and why."""
    gpu = sum(1 for _, on, _ in placement if on == "gpu")
    cpu = [(label, why) for label, on, why in placement if on == "cpu"]
    text = f"{gpu} nodes on the GPU (MPSNNGraph), {len(cpu)} on the CPU (Swift)"
    for label, why in cpu:
        text += f"\n  cpu: {label}: {why}"
    return text
