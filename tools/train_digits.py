"""Train the quantization fixtures on scikit-learn's digits (8x8 images, 10 classes).

    python3 tools/train_digits.py            # writes tests/fixtures/digits/

Two models, both trained here in plain numpy (no torch: the fixtures must be reproducible
with what the dev extra installs, plus scikit-learn for the data set):
- `mlp.onnx`: the seed-003 fully connected classifier (784-1000-500-10 on MNIST), scaled to the
  64 digits features: 64-500-250-10 with ReLU (MatMul + Add, as torch exports Linear).
- `cnn.onnx`: Conv3x3(16)-ReLU-MaxPool2-Conv3x3(32)-ReLU-MaxPool2-Flatten-Gemm(10), on
  1x1x8x8 inputs.
Both take pixels scaled to [0, 1] (the raw digits are 0..16) and output logits.
`digits.npz` holds the fixed train / test split as uint8 (x_*: raw 0..16 values), so tests and
the accuracy table need neither scikit-learn nor retraining.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "digits"
OPSET, IR = 17, 8


def load_split(seed: int = 0) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    xtr, xte, ytr, yte = train_test_split(
        d.data.astype(np.uint8),
        d.target.astype(np.int64),
        test_size=0.3,
        random_state=seed,
        stratify=d.target,
    )
    return {"x_train": xtr, "y_train": ytr, "x_test": xte, "y_test": yte}


# --- layers (forward returns a cache for backward) ----------------------------------------
def im2col(x: np.ndarray, k: int, pad: int) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    cols = np.empty((n, c, k, k, oh, ow), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i : i + oh, j : j + ow]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * oh * ow, c * k * k)


def col2im(dcols: np.ndarray, shape: tuple[int, ...], k: int, pad: int) -> np.ndarray:
    n, c, h, w = shape
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    d = dcols.reshape(n, oh, ow, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    dx = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dcols.dtype)
    for i in range(k):
        for j in range(k):
            dx[:, :, i : i + oh, j : j + ow] += d[:, :, i, j]
    return dx[:, :, pad : pad + h, pad : pad + w]


def conv_fwd(x, w, b):
    n, _, h, wd = x.shape
    cols = im2col(x, 3, 1)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_bwd(dy, x, w, cols):
    dyf = dy.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (dyf.T @ cols).reshape(w.shape)
    db = dyf.sum(0)
    dx = col2im(dyf @ w.reshape(w.shape[0], -1), x.shape, 3, 1)
    return dx, dw, db


def pool_fwd(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    y = r.max(axis=(3, 5))
    mask = r == y[:, :, :, None, :, None]
    return y, mask


def pool_bwd(dy, mask):
    n, c, h2, _, w2, _ = mask.shape
    d = mask * dy[:, :, :, None, :, None]
    return d.reshape(n, c, h2 * 2, w2 * 2)


def softmax_xent(logits, y):
    z = logits - logits.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
    d = p
    d[np.arange(len(y)), y] -= 1
    return loss, d / len(y)


class Adam:
    def __init__(self, params: dict[str, np.ndarray], lr: float = 1e-3) -> None:
        self.p, self.lr, self.t = params, lr, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, g in grads.items():
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            mh = self.m[k] / (1 - 0.9**self.t)
            vh = self.v[k] / (1 - 0.999**self.t)
            self.p[k] -= self.lr * mh / (np.sqrt(vh) + 1e-8)


def he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


# --- the two models ---------------------------------------------------------------------
def mlp_init(rng) -> dict[str, np.ndarray]:
    dims = [64, 500, 250, 10]
    p = {}
    for i in range(3):
        p[f"w{i}"] = he(rng, (dims[i], dims[i + 1]), dims[i])
        p[f"b{i}"] = np.zeros(dims[i + 1], np.float32)
    return p


def mlp_step(p, x, y):
    h0 = x.reshape(len(x), -1)
    a1 = h0 @ p["w0"] + p["b0"]
    h1 = np.maximum(a1, 0)
    a2 = h1 @ p["w1"] + p["b1"]
    h2 = np.maximum(a2, 0)
    logits = h2 @ p["w2"] + p["b2"]
    loss, d = softmax_xent(logits, y)
    g = {"w2": h2.T @ d, "b2": d.sum(0)}
    d = (d @ p["w2"].T) * (a2 > 0)
    g.update(w1=h1.T @ d, b1=d.sum(0))
    d = (d @ p["w1"].T) * (a1 > 0)
    g.update(w0=h0.T @ d, b0=d.sum(0))
    return loss, g


def mlp_predict(p, x):
    h = np.maximum(x.reshape(len(x), -1) @ p["w0"] + p["b0"], 0)
    h = np.maximum(h @ p["w1"] + p["b1"], 0)
    return h @ p["w2"] + p["b2"]


def cnn_init(rng) -> dict[str, np.ndarray]:
    return {
        "c1w": he(rng, (16, 1, 3, 3), 9),
        "c1b": np.zeros(16, np.float32),
        "c2w": he(rng, (32, 16, 3, 3), 144),
        "c2b": np.zeros(32, np.float32),
        "fw": he(rng, (10, 128), 128),
        "fb": np.zeros(10, np.float32),
    }


def cnn_forward(p, x):
    x = x.reshape(len(x), 1, 8, 8)
    a1, cols1 = conv_fwd(x, p["c1w"], p["c1b"])
    r1 = np.maximum(a1, 0)
    q1, m1 = pool_fwd(r1)
    a2, cols2 = conv_fwd(q1, p["c2w"], p["c2b"])
    r2 = np.maximum(a2, 0)
    q2, m2 = pool_fwd(r2)
    f = q2.reshape(len(x), -1)
    logits = f @ p["fw"].T + p["fb"]
    return logits, (x, a1, cols1, m1, q1, a2, cols2, m2, q2, f)


def cnn_step(p, x, y):
    logits, (x, a1, cols1, m1, q1, a2, cols2, m2, q2, f) = cnn_forward(p, x)
    loss, d = softmax_xent(logits, y)
    g = {"fw": d.T @ f, "fb": d.sum(0)}
    d = (d @ p["fw"]).reshape(q2.shape)
    d = pool_bwd(d, m2) * (a2 > 0)
    d, g["c2w"], g["c2b"] = conv_bwd(d, q1, p["c2w"], cols2)
    d = pool_bwd(d, m1) * (a1 > 0)
    _, g["c1w"], g["c1b"] = conv_bwd(d, x, p["c1w"], cols1)
    return loss, g


def train(params, step, predict, data, epochs: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x = data["x_train"].astype(np.float32) / 16
    y = data["y_train"]
    opt = Adam(params, lr=2e-3)
    for ep in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), 32):
            idx = order[i : i + 32]
            loss, g = step(params, x[idx], y[idx])
            opt.step({k: v.astype(np.float32) for k, v in g.items()})
        acc = (
            predict(params, data["x_test"].astype(np.float32) / 16).argmax(1) == data["y_test"]
        ).mean()
        print(f"  epoch {ep + 1}: loss {loss:.4f}, test accuracy {acc:.4f}")
    return float(acc)


# --- ONNX export ------------------------------------------------------------------------
def _model(nodes, inits, in_shape, name) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *in_shape])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in inits.items()],
    )
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="onnx2edge tools/train_digits.py",
    )
    m.ir_version = IR
    onnx.checker.check_model(m, full_check=True)
    return m


def mlp_onnx(p) -> onnx.ModelProto:
    mk = helper.make_node
    nodes = [
        mk("MatMul", ["input", "fc1.weight"], ["fc1.mm"], name="fc1"),
        mk("Add", ["fc1.mm", "fc1.bias"], ["fc1.out"], name="fc1.add"),
        mk("Relu", ["fc1.out"], ["relu1"], name="relu1"),
        mk("MatMul", ["relu1", "fc2.weight"], ["fc2.mm"], name="fc2"),
        mk("Add", ["fc2.mm", "fc2.bias"], ["fc2.out"], name="fc2.add"),
        mk("Relu", ["fc2.out"], ["relu2"], name="relu2"),
        mk("MatMul", ["relu2", "fc3.weight"], ["fc3.mm"], name="fc3"),
        mk("Add", ["fc3.mm", "fc3.bias"], ["logits"], name="fc3.add"),
    ]
    inits = {
        "fc1.weight": p["w0"],
        "fc1.bias": p["b0"],
        "fc2.weight": p["w1"],
        "fc2.bias": p["b1"],
        "fc3.weight": p["w2"],
        "fc3.bias": p["b2"],
    }
    return _model(nodes, inits, [64], "digits_mlp")


def cnn_onnx(p) -> onnx.ModelProto:
    mk = helper.make_node
    nodes = [
        mk(
            "Conv",
            ["input", "conv1.weight", "conv1.bias"],
            ["conv1"],
            name="conv1",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        mk("Relu", ["conv1"], ["relu1"], name="relu1"),
        mk("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        mk(
            "Conv",
            ["pool1", "conv2.weight", "conv2.bias"],
            ["conv2"],
            name="conv2",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        mk("Relu", ["conv2"], ["relu2"], name="relu2"),
        mk("MaxPool", ["relu2"], ["pool2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        mk("Flatten", ["pool2"], ["flat"], name="flatten", axis=1),
        mk("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    inits = {
        "conv1.weight": p["c1w"],
        "conv1.bias": p["c1b"],
        "conv2.weight": p["c2w"],
        "conv2.bias": p["c2b"],
        "fc.weight": p["fw"],
        "fc.bias": p["fb"],
    }
    return _model(nodes, inits, [1, 8, 8], "digits_cnn")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    ap.add_argument("--epochs", type=int, default=30)
    a = ap.parse_args()
    a.output.mkdir(parents=True, exist_ok=True)
    data = load_split()
    np.savez_compressed(a.output / "digits.npz", **data)
    rng = np.random.default_rng(0)
    print("MLP 64-500-250-10")
    p = mlp_init(rng)
    train(p, mlp_step, mlp_predict, data, a.epochs, seed=1)
    onnx.save(mlp_onnx(p), a.output / "mlp.onnx")
    print("CNN conv16-conv32-fc10")
    p = cnn_init(rng)
    train(p, cnn_step, lambda q, x: cnn_forward(q, x)[0], data, a.epochs, seed=2)
    onnx.save(cnn_onnx(p), a.output / "cnn.onnx")
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
