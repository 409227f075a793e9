"""Train the seed-003 MLP on scikit-learn's digits in numpy, prune it by global weight magnitude
at several sparsities with a short masked fine-tune, and export one ONNX per sparsity.

    python examples/train_digits_mlp.py --out build/digits_prune            # 64-1000-500-10
    python examples/train_digits_mlp.py --hidden 256,128 --levels 0,0.9 \
        --out tests/fixtures/digits --prefix mlp_prune_small                # the test fixture

Writes {prefix}_{sparsity%}.onnx (batch dimension symbolic), {prefix}_test.npz (x: the 360
held-out images, scaled to [0, 1]) and {prefix}_labels.npy, and prints the accuracies. Pruning
uses onnx2edge.prune on the exported model, so the experiment exercises the real command.
numpy is enough for an MLP this size (a few seconds per epoch on one core); no torch needed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return train_test_split(x, d.target, test_size=360, random_state=seed, stratify=d.target)


def init(dims: list[int], rng: np.random.Generator) -> list[list[np.ndarray]]:
    return [
        [
            (rng.standard_normal((b, a)) * np.sqrt(2.0 / a)).astype(np.float32),
            np.zeros(b, np.float32),
        ]
        for a, b in zip(dims[:-1], dims[1:], strict=False)
    ]


def forward(params: list[list[np.ndarray]], x: np.ndarray) -> list[np.ndarray]:
    acts = [x]
    for i, (w, b) in enumerate(params):
        z = acts[-1] @ w.T + b
        acts.append(np.maximum(z, 0) if i < len(params) - 1 else z)
    return acts


def train(params, x, y, epochs: int, rng, masks=None, lr: float = 1e-3, batch: int = 32):  # noqa: ANN001, ANN201
    """Adam on softmax cross-entropy; `masks` keep pruned weights at zero while fine-tuning."""
    m = [[np.zeros_like(p) for p in layer] for layer in params]
    v = [[np.zeros_like(p) for p in layer] for layer in params]
    t = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), batch):
            idx = order[s : s + batch]
            acts = forward(params, x[idx])
            logits = acts[-1]
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            g = p
            g[np.arange(len(idx)), y[idx]] -= 1
            g /= len(idx)
            t += 1
            for i in reversed(range(len(params))):
                w, _b = params[i]
                gw, gb = g.T @ acts[i], g.sum(axis=0)
                if i > 0:
                    g = (g @ w) * (acts[i] > 0)
                for j, gr in enumerate((gw, gb)):
                    m[i][j] = 0.9 * m[i][j] + 0.1 * gr
                    v[i][j] = 0.999 * v[i][j] + 0.001 * gr * gr
                    upd = lr * (m[i][j] / (1 - 0.9**t)) / (np.sqrt(v[i][j] / (1 - 0.999**t)) + 1e-8)
                    params[i][j] = (params[i][j] - upd).astype(np.float32)
                if masks is not None:
                    params[i][0] *= masks[i]
    return params


def accuracy(params, x, y) -> float:  # noqa: ANN001
    return float((forward(params, x)[-1].argmax(axis=1) == y).mean())


def to_onnx(params: list[list[np.ndarray]]) -> onnx.ModelProto:
    nodes, inits, x = [], [], "x"
    for i, (w, b) in enumerate(params):
        inits += [
            numpy_helper.from_array(w, f"fc{i}.weight"),
            numpy_helper.from_array(b, f"fc{i}.bias"),
        ]
        nodes.append(
            helper.make_node(
                "Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"fc{i}"], name=f"fc{i}", transB=1
            )
        )
        x = f"fc{i}"
        if i < len(params) - 1:
            nodes.append(helper.make_node("Relu", [x], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    g = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def from_onnx(m: onnx.ModelProto, n_layers: int) -> list[list[np.ndarray]]:
    t = {i.name: numpy_helper.to_array(i).copy() for i in m.graph.initializer}
    return [[t[f"fc{i}.weight"], t[f"fc{i}.bias"]] for i in range(n_layers)]


def main() -> None:
    from onnx2edge.prune import prune_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/digits_prune")
    ap.add_argument("--prefix", default="mlp_prune")
    ap.add_argument("--hidden", default="1000,500")
    ap.add_argument("--levels", default="0,0.5,0.6,0.7,0.8,0.9,0.95")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--finetune", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    xtr, xte, ytr, yte = load_digits_split()
    dims = [64, *map(int, a.hidden.split(",")), 10]
    params = train(init(dims, rng), xtr, ytr, a.epochs, rng)
    dense = to_onnx(params)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"{a.prefix}_test.npz", x=xte)
    np.save(out / f"{a.prefix}_labels.npy", yte.astype(np.int64))
    print(f"dense {dims}: test accuracy {accuracy(params, xte, yte):.4f}")
    for s in (float(v) for v in a.levels.split(",")):
        if s == 0:
            m, acc = dense, accuracy(params, xte, yte)
        else:
            pruned, _ = prune_model(dense, s, scope="global")
            p = from_onnx(pruned, len(dims) - 1)
            before = accuracy(p, xte, yte)
            masks = [w != 0 for w, _ in p]
            p = train(p, xtr, ytr, a.finetune, rng, masks=masks, lr=3e-4)
            m, acc = to_onnx(p), accuracy(p, xte, yte)
            print(
                f"sparsity {s:.2f}: accuracy {before:.4f} after pruning, {acc:.4f} after {a.finetune} epochs"
            )
        onnx.save(m, out / f"{a.prefix}_{round(s * 100):02d}.onnx")
        (out / f"{a.prefix}_{round(s * 100):02d}.acc").write_text(f"{acc:.4f}\n")


if __name__ == "__main__":
    main()
