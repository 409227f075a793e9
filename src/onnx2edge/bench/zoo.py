"""A zoo of classic CNNs built with ``onnx.helper`` and seeded random weights.

The architectures follow the published layouts (BVLC Caffe prototxts, torchvision, the
papers cited per builder) so converters and backends can be exercised on real graph
shapes without downloading any weights.  Weights are random but *calibrated* so that the
numerics are meaningful for verification tests:

* weights start He-scaled (He et al., "Delving Deep into Rectifiers", 2015) and are drawn
  from a uniform distribution of the same variance, like torchvision's default
  ``kaiming_uniform_``: numpy draws uniforms ~8x faster than normals, which keeps VGG-19
  (143 M parameters) within a few seconds;
* every graph is built *eagerly*: each node is run with onnxruntime on a small seeded
  calibration batch as soon as it is added, so the builder always knows the activations;
* BatchNormalization running mean/var are the statistics measured on that batch, so each
  BN output is roughly zero-mean unit-variance; gamma/beta and biases get small random
  variation and convolutions feeding a BN get a per-channel scale spread, so a BN-folding
  bug changes the outputs visibly;
* layers without a following normalization are rescaled to unit output variance (LSUV,
  Mishkin & Matas, "All you need is a good init", ICLR 2016), so deep stacks neither
  overflow nor vanish;
* classifier heads are centred on the calibration batch: with random weights the logits
  are otherwise dominated by an input-independent offset (global average pooling of a
  noise image is nearly the same for every noise image), and the argmax never changes.

Classification nets end in logits (no Softmax) and have a batch size of 1.  Every model is
opset 17 with ``ir_version = 8`` (onnxruntime 1.31 refuses the IR 14 that onnx 1.23 writes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from ..fsutil import write_bytes_atomic

__all__ = ["MODELS", "UnknownModelError", "ZooModel", "build", "save"]

OPSET = 17
IR_VERSION = 8
_CALIBRATION_STREAM = 0xCA1B  # second seed word: calibration inputs never share weight draws
_IntPair = int | tuple[int, int]


class UnknownModelError(KeyError, ValueError):
    """Raised by :func:`build` / :func:`save` for a name that is not in :data:`MODELS`.

    Derives from both ``KeyError`` (it is a failed registry look-up) and ``ValueError``
    (it is a bad argument), so either ``except`` clause catches it.
    """

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and show it in quotes.
        return str(self.args[0])


@dataclass(frozen=True)
class ZooModel:
    """One entry of the zoo: ``build(seed=...)`` returns a fresh ``onnx.ModelProto``."""

    name: str
    description: str
    input_shape: tuple[int, ...]
    build: Callable[..., onnx.ModelProto]


def _pair(value: _IntPair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else value


def _session_options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # calibration runs are an implementation detail
    return options


class _Builder:
    """Graph under construction that runs every node as soon as it is added.

    ``values`` holds the activation of every tensor on the calibration batch (and every
    parameter), which gives the channel counts for the next layer and the statistics used
    to calibrate BatchNormalization and the heads.  Parameters stay numpy arrays until
    :meth:`finish`, so calibration can still rescale them in place.
    """

    def __init__(
        self,
        name: str,
        input_shape: tuple[int, ...],
        seed: int,
        *,
        calib_batch: int = 2,
        calib_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.name = name
        self.input_shape = input_shape
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.params: dict[str, np.ndarray] = {}
        self.input = "input"
        # Fully convolutional nets may calibrate on a smaller image (calib_shape): every op
        # they use is resolution-agnostic, and full-size calibration would only cost time.
        shape = (calib_batch, *(calib_shape or input_shape[1:]))
        calib_rng = np.random.default_rng([seed, _CALIBRATION_STREAM])
        self.values: dict[str, np.ndarray] = {
            self.input: calib_rng.standard_normal(shape, dtype=np.float32)
        }
        self._options = _session_options()

    # -- plumbing -----------------------------------------------------------------------

    def channels(self, x: str) -> int:
        return int(self.values[x].shape[1])

    def uniform(self, shape: Sequence[int], std: float) -> np.ndarray:
        """Zero-mean float32 draws with standard deviation ``std`` (uniform, see module doc)."""
        bound = np.float32(std * np.sqrt(3.0))
        array = self.rng.random(tuple(shape), dtype=np.float32)
        array *= 2 * bound
        array -= bound
        return array

    def jitter(self, n: int, scale: float = 0.1, center: float = 0.0) -> np.ndarray:
        """``center`` plus small random variation, for biases, gamma and beta."""
        return (center + self.uniform((n,), scale)).astype(np.float32)

    def param(self, name: str, array: np.ndarray) -> str:
        if name in self.values:
            raise ValueError(f"{self.name}: duplicate tensor name {name!r}")
        self.params[name] = array
        self.values[name] = array
        return name

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        *,
        out: str | None = None,
        **attrs: object,
    ) -> str:
        """Append a node whose single output is named ``out`` (default: the node name)."""
        output = out or name
        if output in self.values:
            raise ValueError(f"{self.name}: duplicate tensor name {output!r}")
        node = helper.make_node(op_type, list(inputs), [output], name=name, **attrs)
        self.nodes.append(node)
        self.values[output] = self._run(node)
        return output

    def _run(self, node: onnx.NodeProto) -> np.ndarray:
        """Run one node in onnxruntime; the parameters are fed as inputs, not copied."""
        names = list(dict.fromkeys(i for i in node.input if i))
        inputs = [
            helper.make_tensor_value_info(
                n,
                helper.np_dtype_to_tensor_dtype(self.values[n].dtype),
                self.values[n].shape,
            )
            for n in names
        ]
        output = helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)
        graph = helper.make_graph([node], f"{self.name}_step", inputs, [output])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        session = ort.InferenceSession(
            model.SerializeToString(), self._options, providers=["CPUExecutionProvider"]
        )
        (result,) = session.run(None, {n: self.values[n] for n in names})
        return np.asarray(result)

    def standardize(
        self, layer: str, out: str, *, center: bool, per_channel: bool, out_axis: int = 0
    ) -> None:
        """Rescale ``layer``'s weight and bias so that its output ``out`` is standardized.

        ``center`` subtracts the per-channel mean (heads), otherwise only the scale changes
        (LSUV); ``per_channel`` divides each channel by its own std instead of a global one.
        The stored activation is updated the same way, so later layers see the new values.
        """
        z = self.values[out].astype(np.float64)
        axes = (0, *range(2, z.ndim))
        channel_shape = (1, -1) + (1,) * (z.ndim - 2)
        mean = z.mean(axis=axes) if center else np.zeros(z.shape[1])
        centered = z - mean.reshape(channel_shape)
        if per_channel:
            std = centered.std(axis=axes)
        else:
            std = np.full(z.shape[1], centered.std())
        scale = 1.0 / np.maximum(std, 1e-12)
        weight = self.params[f"{layer}.weight"]
        weight_shape = [1] * weight.ndim
        weight_shape[out_axis] = -1
        if per_channel:
            weight *= scale.astype(np.float32).reshape(weight_shape)
        else:
            weight *= np.float32(scale[0])
        bias = self.params[f"{layer}.bias"]
        bias[:] = ((bias - mean) * scale).astype(np.float32)
        self.values[out] = (centered * scale.reshape(channel_shape)).astype(np.float32)

    # -- layers -------------------------------------------------------------------------

    def conv(
        self,
        x: str,
        name: str,
        c_out: int,
        kernel: _IntPair,
        *,
        stride: _IntPair = 1,
        pad: _IntPair = 0,
        group: int = 1,
        bias: bool = True,
        norm_follows: bool = False,
        head: bool = False,
        out: str | None = None,
    ) -> str:
        """Conv with He-scaled weights, ``(C_out, C_in/group, kH, kW)`` as in ONNX/PyTorch.

        ``norm_follows``: a BN/IN will normalize the output, so instead of LSUV each output
        channel gets a random scale in ~[0.4, 2.5]: the running variances then differ per
        channel like in a trained net, which makes BN folding mistakes visible.
        ``head``: centre and standardize every channel (class) on the calibration batch.
        """
        kh, kw = _pair(kernel)
        ph, pw = _pair(pad)
        c_in = self.channels(x)
        weight = self.uniform(
            (c_out, c_in // group, kh, kw), np.sqrt(2.0 / (c_in // group * kh * kw))
        )
        if norm_follows:
            weight *= np.exp(self.uniform((c_out, 1, 1, 1), 0.5))
        inputs = [x, self.param(f"{name}.weight", weight)]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.jitter(c_out)))
        y = self.node(
            "Conv",
            inputs,
            name,
            out=out,
            kernel_shape=[kh, kw],
            strides=list(_pair(stride)),
            pads=[ph, pw, ph, pw],
            group=group,
        )
        if head:
            self.standardize(name, y, center=True, per_channel=True)
        elif not norm_follows:
            self.standardize(name, y, center=False, per_channel=False)
        return y

    def conv_transpose(
        self,
        x: str,
        name: str,
        c_out: int,
        kernel: int,
        *,
        stride: int,
        pad: int = 0,
        output_padding: int = 0,
        norm_follows: bool = False,
    ) -> str:
        """ConvTranspose, weight ``(C_in, C_out, k, k)``; each output sees ~C_in*k*k/stride**2 inputs."""
        c_in = self.channels(x)
        weight = self.uniform(
            (c_in, c_out, kernel, kernel), np.sqrt(2.0 * stride**2 / (c_in * kernel**2))
        )
        inputs = [
            x,
            self.param(f"{name}.weight", weight),
            self.param(f"{name}.bias", self.jitter(c_out)),
        ]
        y = self.node(
            "ConvTranspose",
            inputs,
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            output_padding=[output_padding] * 2,
        )
        if not norm_follows:
            self.standardize(name, y, center=False, per_channel=False, out_axis=1)
        return y

    def gemm(
        self, x: str, name: str, n_out: int, *, head: bool = False, out: str | None = None
    ) -> str:
        """Fully connected layer as Gemm(transB=1): weight ``(out, in)`` like Caffe/PyTorch."""
        n_in = int(self.values[x].shape[1])
        weight = self.param(f"{name}.weight", self.uniform((n_out, n_in), np.sqrt(2.0 / n_in)))
        bias = self.param(f"{name}.bias", self.jitter(n_out))
        y = self.node("Gemm", [x, weight, bias], name, out=out, transB=1)
        # A head is centred per class (one value per image, so one global scale); hidden
        # layers just get LSUV.
        self.standardize(name, y, center=head, per_channel=False)
        return y

    def batchnorm(
        self, x: str, name: str, *, eps: float = 1e-5, gamma: float = 1.0, spread: float = 0.1
    ) -> str:
        """BatchNormalization whose running statistics are measured on the calibration batch.

        ``gamma`` scales the affine part down where a residual branch would otherwise make
        the trunk grow (the idea of zero-init residual gammas, Goyal et al. 2017).
        """
        values = self.values[x].astype(np.float64)
        axes = (0, *range(2, values.ndim))
        c = values.shape[1]
        inputs = [
            x,
            self.param(f"{name}.weight", self.jitter(c, spread, center=gamma)),
            self.param(f"{name}.bias", self.jitter(c, spread * gamma)),
            self.param(f"{name}.running_mean", values.mean(axis=axes).astype(np.float32)),
            self.param(f"{name}.running_var", values.var(axis=axes).astype(np.float32)),
        ]
        return self.node("BatchNormalization", inputs, name, epsilon=eps)

    def instancenorm(self, x: str, name: str, *, gamma: float = 1.0) -> str:
        c = self.channels(x)
        scale = self.param(f"{name}.weight", self.jitter(c, center=gamma))
        bias = self.param(f"{name}.bias", self.jitter(c, 0.1 * gamma))
        return self.node("InstanceNormalization", [x, scale, bias], name, epsilon=1e-5)

    def relu(self, x: str, name: str | None = None) -> str:
        return self.node("Relu", [x], name or f"{x}/relu")

    def relu6(self, x: str, name: str | None = None) -> str:
        """ReLU6 as Clip(0, 6) (MobileNet); opset >= 11 takes the bounds as inputs."""
        if "relu6.min" not in self.params:
            self.param("relu6.min", np.array(0.0, dtype=np.float32))
            self.param("relu6.max", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, "relu6.min", "relu6.max"], name or f"{x}/relu6")

    def maxpool(
        self, x: str, name: str, kernel: int, stride: int, *, pad: int = 0, ceil: bool = False
    ) -> str:
        # Caffe rounds pooled sizes up: ceil=True reproduces the BVLC shapes.
        return self.node(
            "MaxPool",
            [x],
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            ceil_mode=int(ceil),
        )

    def avgpool(
        self,
        x: str,
        name: str,
        kernel: int,
        stride: int,
        *,
        pad: int = 0,
        count_include_pad: bool = False,
    ) -> str:
        return self.node(
            "AveragePool",
            [x],
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            count_include_pad=int(count_include_pad),
        )

    def global_avgpool(self, x: str, name: str) -> str:
        return self.node("GlobalAveragePool", [x], name)

    def lrn(self, x: str, name: str) -> str:
        # AlexNet / GoogLeNet LRN: local_size 5, alpha 1e-4, beta 0.75, k 1.  Caffe and ONNX
        # both divide alpha by the window size.
        return self.node("LRN", [x], name, size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def concat(self, xs: Sequence[str], name: str) -> str:
        return self.node("Concat", xs, name, axis=1)

    def add(self, a: str, b: str, name: str) -> str:
        return self.node("Add", [a, b], name)

    def flatten(self, x: str, name: str = "flatten") -> str:
        return self.node("Flatten", [x], name, axis=1)

    def reflect_pad(self, x: str, name: str, pad: int) -> str:
        pads = self.param(
            f"{name}.pads", np.array([0, 0, pad, pad, 0, 0, pad, pad], dtype=np.int64)
        )
        return self.node("Pad", [x, pads], name, mode="reflect")

    def tanh(self, x: str, name: str, *, out: str | None = None) -> str:
        return self.node("Tanh", [x], name, out=out)

    # -- result -------------------------------------------------------------------------

    def finish(self, output: str, output_shape: tuple[int, ...] | None = None) -> onnx.ModelProto:
        """Freeze into a ModelProto; ``output_shape`` is needed when calibrated on another size."""
        shape = output_shape or (self.input_shape[0], *self.values[output].shape[1:])
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(self.input, TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="onnx2edge.bench.zoo",
            doc_string=MODELS[self.name].description if self.name in MODELS else "",
        )
        model.ir_version = IR_VERSION
        # Initializers are written straight into the model: make_graph/make_model copy
        # every TensorProto, which for VGG's 550 MB costs seconds.
        for name, array in self.params.items():
            tensor = model.graph.initializer.add()
            tensor.name = name
            tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
            tensor.dims.extend(array.shape)
            tensor.raw_data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        return model


# ---------------------------------------------------------------------------------------
# Shared blocks
# ---------------------------------------------------------------------------------------


def _conv_bn_relu(
    g: _Builder,
    x: str,
    name: str,
    c_out: int,
    kernel: _IntPair,
    *,
    stride: _IntPair = 1,
    pad: _IntPair = 0,
    group: int = 1,
    bn: str | None = None,
    eps: float = 1e-5,
    bias: bool = False,
    act: str = "relu",
) -> str:
    """Conv -> BatchNormalization -> ReLU/ReLU6 (BN named ``bn`` or ``<name>/bn``)."""
    y = g.conv(
        x, name, c_out, kernel, stride=stride, pad=pad, group=group, bias=bias, norm_follows=True
    )
    y = g.batchnorm(y, bn or f"{name}/bn", eps=eps)
    return g.relu6(y) if act == "relu6" else g.relu(y)


def _conv_relu(
    g: _Builder,
    x: str,
    name: str,
    c_out: int,
    kernel: _IntPair,
    *,
    stride: int = 1,
    pad: int = 0,
    group: int = 1,
    batchnorm: bool = False,
) -> str:
    """Caffe-style conv (with bias) -> ReLU, optionally with a BN inserted before the ReLU."""
    if batchnorm:
        return _conv_bn_relu(
            g, x, name, c_out, kernel, stride=stride, pad=pad, group=group, bias=True
        )
    return g.relu(g.conv(x, name, c_out, kernel, stride=stride, pad=pad, group=group))


def _classifier(g: _Builder, x: str, name: str, n_classes: int = 1000) -> str:
    """Flatten -> Gemm head whose output is the graph output ``logits`` (no Softmax)."""
    return g.gemm(g.flatten(x), name, n_classes, head=True, out="logits")


# ---------------------------------------------------------------------------------------
# Caffe-era networks
# ---------------------------------------------------------------------------------------


def _alexnet(seed: int, *, batchnorm: bool) -> onnx.ModelProto:
    """BVLC AlexNet (Krizhevsky et al. 2012; caffe/models/bvlc_alexnet/deploy.prototxt).

    conv2/4/5 use group=2, the two-GPU split of the original.  The BN variant replaces
    each LRN by a BatchNormalization between the conv (which keeps its bias) and the ReLU.
    """
    g = _Builder("alexnet_bn" if batchnorm else "alexnet", (1, 3, 227, 227), seed)
    x = g.input
    layers = [
        (96, 11, 4, 0, 1),
        (256, 5, 1, 2, 2),
        (384, 3, 1, 1, 1),
        (384, 3, 1, 1, 2),
        (256, 3, 1, 1, 2),
    ]
    for i, (c, k, s, p, group) in enumerate(layers, start=1):
        x = _conv_relu(g, x, f"conv{i}", c, k, stride=s, pad=p, group=group, batchnorm=batchnorm)
        if i <= 2 and not batchnorm:
            x = g.lrn(x, f"norm{i}")
        if i in (1, 2, 5):
            x = g.maxpool(x, f"pool{i}", 3, 2, ceil=True)
    x = g.flatten(x)
    for i in (6, 7):  # dropout layers are identities at inference and left out
        x = g.relu(g.gemm(x, f"fc{i}", 4096))
    return g.finish(g.gemm(x, "fc8", 1000, head=True, out="logits"))


def _nin(seed: int, *, batchnorm: bool) -> onnx.ModelProto:
    """Network in Network, ImageNet model of the Caffe zoo (Lin et al., ICLR 2014).

    Four mlpconv stages (a spatial conv followed by two 1x1 "cccp" convs); the last one
    emits 1000 channels which are ReLU'd and globally averaged: there is no FC layer.
    """
    g = _Builder("nin_bn" if batchnorm else "nin", (1, 3, 224, 224), seed, calib_batch=8)
    stages = [
        ("conv1", 96, 11, 4, 0, ("cccp1", "cccp2")),
        ("conv2", 256, 5, 1, 2, ("cccp3", "cccp4")),
        ("conv3", 384, 3, 1, 1, ("cccp5", "cccp6")),
        ("conv4-1024", 1024, 3, 1, 1, ("cccp7-1024",)),
    ]
    x = g.input
    for i, (name, c, k, s, p, cccps) in enumerate(stages, start=1):
        x = _conv_relu(g, x, name, c, k, stride=s, pad=p, batchnorm=batchnorm)
        for cccp in cccps:
            x = _conv_relu(g, x, cccp, c, 1, batchnorm=batchnorm)
        if i < len(stages):
            x = g.maxpool(x, f"pool{i}", 3, 2, ceil=True)
    # The class maps are ReLU'd before pooling, so centring alone would leave a per-class
    # offset (E[relu(z)] grows with std(z)): standardize every class map instead.
    if batchnorm:
        x = g.conv(x, "cccp8-1024", 1000, 1, norm_follows=True)
        x = g.batchnorm(x, "cccp8-1024/bn", spread=0.01)
    else:
        x = g.conv(x, "cccp8-1024", 1000, 1, head=True)
    x = g.global_avgpool(g.relu(x), "pool4")
    return g.finish(g.node("Flatten", [x], "flatten", out="logits", axis=1))


def _inception_v1(
    g: _Builder, x: str, name: str, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int
) -> str:
    """GoogLeNet inception module: 1x1 | 1x1->3x3 | 1x1->5x5 | maxpool->1x1, concatenated."""
    b1 = _conv_relu(g, x, f"{name}/1x1", c1, 1)
    b2 = _conv_relu(g, _conv_relu(g, x, f"{name}/3x3_reduce", c3r, 1), f"{name}/3x3", c3, 3, pad=1)
    b3 = _conv_relu(g, _conv_relu(g, x, f"{name}/5x5_reduce", c5r, 1), f"{name}/5x5", c5, 5, pad=2)
    b4 = _conv_relu(g, g.maxpool(x, f"{name}/pool", 3, 1, pad=1), f"{name}/pool_proj", cp, 1)
    return g.concat([b1, b2, b3, b4], f"{name}/output")


def _googlenet(seed: int) -> onnx.ModelProto:
    """BVLC GoogLeNet (Szegedy et al. 2014; caffe/models/bvlc_googlenet), without aux heads."""
    g = _Builder("googlenet", (1, 3, 224, 224), seed)
    x = _conv_relu(g, g.input, "conv1/7x7_s2", 64, 7, stride=2, pad=3)
    x = g.lrn(g.maxpool(x, "pool1/3x3_s2", 3, 2, ceil=True), "pool1/norm1")
    x = _conv_relu(g, x, "conv2/3x3_reduce", 64, 1)
    x = g.lrn(_conv_relu(g, x, "conv2/3x3", 192, 3, pad=1), "conv2/norm2")
    x = g.maxpool(x, "pool2/3x3_s2", 3, 2, ceil=True)
    # (name, #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj): Table 1 of the paper.
    modules = {
        "3": [("3a", 64, 96, 128, 16, 32, 32), ("3b", 128, 128, 192, 32, 96, 64)],
        "4": [
            ("4a", 192, 96, 208, 16, 48, 64),
            ("4b", 160, 112, 224, 24, 64, 64),
            ("4c", 128, 128, 256, 24, 64, 64),
            ("4d", 112, 144, 288, 32, 64, 64),
            ("4e", 256, 160, 320, 32, 128, 128),
        ],
        "5": [("5a", 256, 160, 320, 32, 128, 128), ("5b", 384, 192, 384, 48, 128, 128)],
    }
    for stage, specs in modules.items():
        for tag, *widths in specs:
            x = _inception_v1(g, x, f"inception_{tag}", *widths)
        if stage != "5":
            x = g.maxpool(x, f"pool{stage}/3x3_s2", 3, 2, ceil=True)
    x = g.avgpool(x, "pool5/7x7_s1", 7, 1)
    return g.finish(_classifier(g, x, "loss3/classifier"))


def _vgg(seed: int, *, depth: int) -> onnx.ModelProto:
    """VGG-16/19 (Simonyan & Zisserman 2014, configurations D and E), Caffe layer names."""
    per_stage = {16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}[depth]
    # One calibration image: the net is big and the Gemm layers see 7x7 positions each.
    g = _Builder(f"vgg{depth}", (1, 3, 224, 224), seed)
    x = g.input
    for stage, (n, c) in enumerate(zip(per_stage, (64, 128, 256, 512, 512), strict=True), start=1):
        for i in range(1, n + 1):
            x = _conv_relu(g, x, f"conv{stage}_{i}", c, 3, pad=1)
        x = g.maxpool(x, f"pool{stage}", 2, 2)
    x = g.flatten(x)
    for i in (6, 7):
        x = g.relu(g.gemm(x, f"fc{i}", 4096))
    return g.finish(g.gemm(x, "fc8", 1000, head=True, out="logits"))


def _fire(g: _Builder, x: str, name: str, squeeze: int, expand: int) -> str:
    """SqueezeNet fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""
    s = _conv_relu(g, x, f"{name}/squeeze1x1", squeeze, 1)
    e1 = _conv_relu(g, s, f"{name}/expand1x1", expand, 1)
    e3 = _conv_relu(g, s, f"{name}/expand3x3", expand, 3, pad=1)
    return g.concat([e1, e3], f"{name}/concat")


def _squeezenet(seed: int) -> onnx.ModelProto:
    """SqueezeNet 1.0 (Iandola et al. 2016; DeepScale Caffe prototxt = torchvision 1_0)."""
    g = _Builder("squeezenet", (1, 3, 227, 227), seed, calib_batch=8)
    x = g.maxpool(_conv_relu(g, g.input, "conv1", 96, 7, stride=2), "pool1", 3, 2, ceil=True)
    fires = [
        (2, 16, 64),
        (3, 16, 64),
        (4, 32, 128),
        (5, 32, 128),
        (6, 48, 192),
        (7, 48, 192),
        (8, 64, 256),
    ]
    for index, squeeze, expand in fires:
        x = _fire(g, x, f"fire{index}", squeeze, expand)
        if index in (4, 8):
            x = g.maxpool(x, f"pool{index}", 3, 2, ceil=True)
    x = _fire(g, x, "fire9", 64, 256)
    # conv10 -> ReLU -> global pool, as in the original: standardize each class map (see NIN).
    x = g.relu(g.conv(x, "conv10", 1000, 1, head=True))
    x = g.global_avgpool(x, "pool10")
    return g.finish(g.node("Flatten", [x], "flatten", out="logits", axis=1))


def _mnist_mlp(seed: int) -> onnx.ModelProto:
    """784-1000-500-10 perceptron with ReLU (a Caffe/Keras MNIST classic), Gemm layers."""
    g = _Builder("mnist_mlp", (1, 784), seed, calib_batch=16)
    x = g.relu(g.gemm(g.input, "fc1", 1000))
    x = g.relu(g.gemm(x, "fc2", 500))
    return g.finish(g.gemm(x, "fc3", 10, head=True, out="logits"))


# ---------------------------------------------------------------------------------------
# torchvision-era networks (BatchNormalization everywhere)
# ---------------------------------------------------------------------------------------


def _basic_conv(
    g: _Builder,
    x: str,
    name: str,
    c_out: int,
    kernel: _IntPair,
    *,
    stride: int = 1,
    pad: _IntPair = 0,
) -> str:
    """torchvision ``BasicConv2d``: conv (no bias) -> BN(eps=1e-3) -> ReLU, state-dict names."""
    y = g.conv(
        x, f"{name}.conv", c_out, kernel, stride=stride, pad=pad, bias=False, norm_follows=True
    )
    return g.relu(g.batchnorm(y, f"{name}.bn", eps=1e-3), f"{name}.relu")


def _inception_a(g: _Builder, x: str, name: str, pool_features: int) -> str:
    b1 = _basic_conv(g, x, f"{name}.branch1x1", 64, 1)
    b5 = _basic_conv(g, x, f"{name}.branch5x5_1", 48, 1)
    b5 = _basic_conv(g, b5, f"{name}.branch5x5_2", 64, 5, pad=2)
    b3 = _basic_conv(g, x, f"{name}.branch3x3dbl_1", 64, 1)
    b3 = _basic_conv(g, b3, f"{name}.branch3x3dbl_2", 96, 3, pad=1)
    b3 = _basic_conv(g, b3, f"{name}.branch3x3dbl_3", 96, 3, pad=1)
    bp = _basic_conv(g, _avgpool_3x3(g, x, name), f"{name}.branch_pool", pool_features, 1)
    return g.concat([b1, b5, b3, bp], name)


def _inception_b(g: _Builder, x: str, name: str) -> str:
    b3 = _basic_conv(g, x, f"{name}.branch3x3", 384, 3, stride=2)
    bd = _basic_conv(g, x, f"{name}.branch3x3dbl_1", 64, 1)
    bd = _basic_conv(g, bd, f"{name}.branch3x3dbl_2", 96, 3, pad=1)
    bd = _basic_conv(g, bd, f"{name}.branch3x3dbl_3", 96, 3, stride=2)
    return g.concat([b3, bd, g.maxpool(x, f"{name}.pool", 3, 2)], name)


def _inception_c(g: _Builder, x: str, name: str, c7: int) -> str:
    """17x17 module with factorized 7x7 convolutions (1x7 then 7x1)."""
    b1 = _basic_conv(g, x, f"{name}.branch1x1", 192, 1)
    b7 = _basic_conv(g, x, f"{name}.branch7x7_1", c7, 1)
    b7 = _basic_conv(g, b7, f"{name}.branch7x7_2", c7, (1, 7), pad=(0, 3))
    b7 = _basic_conv(g, b7, f"{name}.branch7x7_3", 192, (7, 1), pad=(3, 0))
    bd = _basic_conv(g, x, f"{name}.branch7x7dbl_1", c7, 1)
    for i, (c, k, p) in enumerate(
        [(c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))],
        start=2,
    ):
        bd = _basic_conv(g, bd, f"{name}.branch7x7dbl_{i}", c, k, pad=p)
    bp = _basic_conv(g, _avgpool_3x3(g, x, name), f"{name}.branch_pool", 192, 1)
    return g.concat([b1, b7, bd, bp], name)


def _inception_d(g: _Builder, x: str, name: str) -> str:
    b3 = _basic_conv(g, x, f"{name}.branch3x3_1", 192, 1)
    b3 = _basic_conv(g, b3, f"{name}.branch3x3_2", 320, 3, stride=2)
    b7 = _basic_conv(g, x, f"{name}.branch7x7x3_1", 192, 1)
    b7 = _basic_conv(g, b7, f"{name}.branch7x7x3_2", 192, (1, 7), pad=(0, 3))
    b7 = _basic_conv(g, b7, f"{name}.branch7x7x3_3", 192, (7, 1), pad=(3, 0))
    b7 = _basic_conv(g, b7, f"{name}.branch7x7x3_4", 192, 3, stride=2)
    return g.concat([b3, b7, g.maxpool(x, f"{name}.pool", 3, 2)], name)


def _inception_e(g: _Builder, x: str, name: str) -> str:
    """8x8 module whose 3x3 branches split into parallel 1x3 and 3x1 convs."""

    def split(y: str, prefix: str) -> str:
        a = _basic_conv(g, y, f"{prefix}a", 384, (1, 3), pad=(0, 1))
        b = _basic_conv(g, y, f"{prefix}b", 384, (3, 1), pad=(1, 0))
        return g.concat([a, b], f"{prefix}.concat")

    b1 = _basic_conv(g, x, f"{name}.branch1x1", 320, 1)
    b3 = split(_basic_conv(g, x, f"{name}.branch3x3_1", 384, 1), f"{name}.branch3x3_2")
    bd = _basic_conv(g, x, f"{name}.branch3x3dbl_1", 448, 1)
    bd = split(
        _basic_conv(g, bd, f"{name}.branch3x3dbl_2", 384, 3, pad=1), f"{name}.branch3x3dbl_3"
    )
    bp = _basic_conv(g, _avgpool_3x3(g, x, name), f"{name}.branch_pool", 192, 1)
    return g.concat([b1, b3, bd, bp], name)


def _avgpool_3x3(g: _Builder, x: str, name: str) -> str:
    # torchvision's F.avg_pool2d(kernel 3, stride 1, padding 1) counts the zero padding.
    return g.avgpool(x, f"{name}.avg_pool", 3, 1, pad=1, count_include_pad=True)


def _inception_v3(seed: int) -> onnx.ModelProto:
    """Inception-v3 in torchvision's layout (Szegedy et al. 2015), no aux head."""
    g = _Builder("inception_v3", (1, 3, 299, 299), seed)
    x = _basic_conv(g, g.input, "Conv2d_1a_3x3", 32, 3, stride=2)
    x = _basic_conv(g, x, "Conv2d_2a_3x3", 32, 3)
    x = _basic_conv(g, x, "Conv2d_2b_3x3", 64, 3, pad=1)
    x = g.maxpool(x, "maxpool1", 3, 2)
    x = _basic_conv(g, x, "Conv2d_3b_1x1", 80, 1)
    x = _basic_conv(g, x, "Conv2d_4a_3x3", 192, 3)
    x = g.maxpool(x, "maxpool2", 3, 2)
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = _inception_a(g, x, name, pool_features)
    x = _inception_b(g, x, "Mixed_6a")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _inception_c(g, x, name, c7)
    x = _inception_d(g, x, "Mixed_7a")
    x = _inception_e(g, x, "Mixed_7b")
    x = _inception_e(g, x, "Mixed_7c")
    return g.finish(_classifier(g, g.global_avgpool(x, "avgpool"), "fc"))


def _bottleneck(g: _Builder, x: str, tag: str, width: int, stride: int) -> str:
    """ResNet bottleneck 1x1 -> 3x3 -> 1x1(x4) with MSRA Caffe names (res2a_branch2a, ...).

    Stride sits on the 3x3 conv (torchvision's "ResNet v1.5"), not on the first 1x1 as in
    the Caffe model; the projection shortcut (branch1) appears when the shape changes.
    """
    c_in, c_out = g.channels(x), 4 * width
    y = _conv_bn_relu(g, x, f"res{tag}_branch2a", width, 1, bn=f"bn{tag}_branch2a")
    y = _conv_bn_relu(
        g, y, f"res{tag}_branch2b", width, 3, stride=stride, pad=1, bn=f"bn{tag}_branch2b"
    )
    y = g.conv(y, f"res{tag}_branch2c", c_out, 1, bias=False, norm_follows=True)
    # gamma 0.5 on the branch end keeps the trunk variance from growing block after block.
    y = g.batchnorm(y, f"bn{tag}_branch2c", gamma=0.5)
    shortcut = x
    if stride != 1 or c_in != c_out:
        shortcut = g.conv(
            x, f"res{tag}_branch1", c_out, 1, stride=stride, bias=False, norm_follows=True
        )
        shortcut = g.batchnorm(shortcut, f"bn{tag}_branch1")
    return g.relu(g.add(shortcut, y, f"res{tag}"))


def _resnet50(seed: int) -> onnx.ModelProto:
    """ResNet-50 (He et al. 2015), torchvision layout: stages of 3, 4, 6, 3 bottlenecks."""
    g = _Builder("resnet50", (1, 3, 224, 224), seed)
    x = _conv_bn_relu(g, g.input, "conv1", 64, 7, stride=2, pad=3, bn="bn_conv1")
    x = g.maxpool(x, "pool1", 3, 2, pad=1)
    for stage, (blocks, width) in enumerate(
        zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True), start=2
    ):
        for b in range(blocks):
            x = _bottleneck(
                g, x, f"{stage}{chr(ord('a') + b)}", width, 2 if b == 0 and stage > 2 else 1
            )
    return g.finish(_classifier(g, g.global_avgpool(x, "pool5"), "fc1000"))


def _mobilenet_v1(seed: int) -> onnx.ModelProto:
    """MobileNet v1 1.0-224 (Howard et al. 2017): 13 depthwise-separable blocks, ReLU6.

    Names follow the widely used Caffe port (conv2_1/dw, conv2_1/sep, ..., fc7).
    """
    g = _Builder("mobilenet_v1", (1, 3, 224, 224), seed)
    x = _conv_bn_relu(g, g.input, "conv1", 32, 3, stride=2, pad=1, act="relu6")
    blocks = [
        ("2_1", 64, 1),
        ("2_2", 128, 2),
        ("3_1", 128, 1),
        ("3_2", 256, 2),
        ("4_1", 256, 1),
        ("4_2", 512, 2),
        *((f"5_{i}", 512, 1) for i in range(1, 6)),
        ("5_6", 1024, 2),
        ("6", 1024, 1),
    ]
    for tag, c_out, stride in blocks:
        c_in = g.channels(x)
        x = _conv_bn_relu(
            g, x, f"conv{tag}/dw", c_in, 3, stride=stride, pad=1, group=c_in, act="relu6"
        )
        x = _conv_bn_relu(g, x, f"conv{tag}/sep", c_out, 1, act="relu6")
    return g.finish(_classifier(g, g.global_avgpool(x, "pool6"), "fc7"))


def _inverted_residual(g: _Builder, x: str, name: str, expand: int, c_out: int, stride: int) -> str:
    """MobileNetV2 block: 1x1 expand -> 3x3 depthwise -> linear 1x1 projection (+ skip)."""
    c_in = g.channels(x)
    hidden = c_in * expand
    y = x if expand == 1 else _conv_bn_relu(g, x, f"{name}/expand", hidden, 1, act="relu6")
    y = _conv_bn_relu(
        g, y, f"{name}/dwise", hidden, 3, stride=stride, pad=1, group=hidden, act="relu6"
    )
    residual = stride == 1 and c_in == c_out
    y = g.conv(y, f"{name}/linear", c_out, 1, bias=False, norm_follows=True)
    y = g.batchnorm(y, f"{name}/linear/bn", gamma=0.5 if residual else 1.0)
    return g.add(x, y, f"{name}/add") if residual else y


def _mobilenet_v2(seed: int) -> onnx.ModelProto:
    """MobileNetV2 1.0-224 (Sandler et al. 2018), torchvision's inverted-residual table."""
    g = _Builder("mobilenet_v2", (1, 3, 224, 224), seed)
    x = _conv_bn_relu(g, g.input, "conv1", 32, 3, stride=2, pad=1, act="relu6")
    # (expansion t, channels c, repeats n, first stride s): Table 2 of the paper.
    table = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    for stage, (t, c, n, s) in enumerate(table, start=2):
        for i in range(n):
            x = _inverted_residual(g, x, f"block{stage}_{i + 1}", t, c, s if i == 0 else 1)
    x = _conv_bn_relu(g, x, "conv_last", 1280, 1, act="relu6")
    return g.finish(_classifier(g, g.global_avgpool(x, "pool"), "classifier"))


# ---------------------------------------------------------------------------------------
# Image-to-image networks
# ---------------------------------------------------------------------------------------


def _padded_conv_in(
    g: _Builder, x: str, name: str, c_out: int, kernel: int, stride: int = 1, gamma: float = 1.0
) -> str:
    """Reflection pad (kernel // 2) -> conv -> InstanceNormalization (no ReLU)."""
    y = g.reflect_pad(x, f"{name}/pad", kernel // 2)
    y = g.conv(y, name, c_out, kernel, stride=stride, norm_follows=True)
    return g.instancenorm(y, f"{name}/in", gamma=gamma)


def _convdeconv(seed: int) -> onnx.ModelProto:
    """Johnson et al. 2016 fast style transfer net (supplementary Table 1), 480x640.

    Per-conv reflection padding as in the reference PyTorch port (examples/fast_neural_style),
    InstanceNormalization (Ulyanov et al. 2016) instead of BN, five residual blocks without a
    ReLU after the sum, two stride-2 ConvTranspose upsamplings and a Tanh output.
    """
    # Every op is resolution-agnostic and InstanceNorm needs no batch statistics: calibrate
    # on 120x160 rather than spend seconds on a full 480x640 forward pass.
    g = _Builder("convdeconv", (1, 3, 480, 640), seed, calib_batch=1, calib_shape=(3, 120, 160))
    x = g.relu(_padded_conv_in(g, g.input, "conv1", 32, 9))
    x = g.relu(_padded_conv_in(g, x, "conv2", 64, 3, stride=2))
    x = g.relu(_padded_conv_in(g, x, "conv3", 128, 3, stride=2))
    for i in range(1, 6):
        y = g.relu(_padded_conv_in(g, x, f"res{i}/conv1", 128, 3))
        # gamma 0.5: five un-normalized residual sums would otherwise grow the trunk.
        y = _padded_conv_in(g, y, f"res{i}/conv2", 128, 3, gamma=0.5)
        x = g.add(x, y, f"res{i}")
    for i, c in ((1, 64), (2, 32)):
        # kernel 3, stride 2, pad 1, output_padding 1 doubles H and W exactly.
        x = g.conv_transpose(
            x, f"deconv{i}", c, 3, stride=2, pad=1, output_padding=1, norm_follows=True
        )
        x = g.relu(g.instancenorm(x, f"deconv{i}/in"))
    x = g.conv(g.reflect_pad(x, "conv_out/pad", 4), "conv_out", 3, 9)
    return g.finish(g.tanh(x, "tanh", out="output"), output_shape=(1, 3, 480, 640))


def _double_conv(g: _Builder, x: str, name: str, c_out: int) -> str:
    """Two (3x3 conv -> BN -> ReLU), the U-Net level body."""
    x = _conv_bn_relu(g, x, f"{name}.conv1", c_out, 3, pad=1, bn=f"{name}.bn1")
    return _conv_bn_relu(g, x, f"{name}.conv2", c_out, 3, pad=1, bn=f"{name}.bn2")


def _unet_small(seed: int) -> onnx.ModelProto:
    """A small U-Net (Ronneberger et al. 2015) on 64x64 RGB: 3 levels + bottleneck.

    Padded convs keep the skip tensors the size of the upsampled ones, so the skips join
    by Concat on the channel axis without cropping; 2x2 stride-2 ConvTranspose upsamples.
    """
    g = _Builder("unet_small", (1, 3, 64, 64), seed)
    widths = (16, 32, 64)
    skips: list[str] = []
    x = g.input
    for level, c in enumerate(widths, start=1):
        x = _double_conv(g, x, f"enc{level}", c)
        skips.append(x)
        x = g.maxpool(x, f"pool{level}", 2, 2)
    x = _double_conv(g, x, "bottleneck", 2 * widths[-1])
    for level, c in reversed(list(enumerate(widths, start=1))):
        x = g.conv_transpose(x, f"up{level}", c, 2, stride=2)
        x = g.concat([skips[level - 1], x], f"dec{level}.concat")
        x = _double_conv(g, x, f"dec{level}", c)
    return g.finish(g.conv(x, "head", 3, 1, out="output"))


# ---------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------


def _entry(
    name: str,
    description: str,
    input_shape: tuple[int, ...],
    builder: Callable[[int], onnx.ModelProto],
) -> ZooModel:
    def build_model(*, seed: int = 0) -> onnx.ModelProto:
        return builder(seed)

    build_model.__name__ = f"build_{name}"
    build_model.__doc__ = description
    return ZooModel(name, description, input_shape, build_model)


_IMAGENET = (1, 3, 224, 224)

MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        _entry(
            "alexnet",
            "BVLC Caffe AlexNet: LRN, grouped conv2/4/5, 1000 logits",
            (1, 3, 227, 227),
            lambda seed: _alexnet(seed, batchnorm=False),
        ),
        _entry(
            "alexnet_bn",
            "AlexNet with BatchNormalization after every conv instead of LRN, 1000 logits",
            (1, 3, 227, 227),
            lambda seed: _alexnet(seed, batchnorm=True),
        ),
        _entry(
            "nin",
            "Caffe Network-in-Network (ImageNet), global average pooling, 1000 logits",
            _IMAGENET,
            lambda seed: _nin(seed, batchnorm=False),
        ),
        _entry(
            "nin_bn",
            "Network-in-Network with BatchNormalization after every conv, 1000 logits",
            _IMAGENET,
            lambda seed: _nin(seed, batchnorm=True),
        ),
        _entry(
            "googlenet",
            "BVLC GoogLeNet / Inception v1 with LRN, no aux heads, 1000 logits",
            _IMAGENET,
            _googlenet,
        ),
        _entry(
            "vgg16",
            "VGG-16 (configuration D), 1000 logits",
            _IMAGENET,
            lambda seed: _vgg(seed, depth=16),
        ),
        _entry(
            "vgg19",
            "VGG-19 (configuration E), 1000 logits",
            _IMAGENET,
            lambda seed: _vgg(seed, depth=19),
        ),
        _entry(
            "inception_v3",
            "torchvision Inception-v3 with BN, no aux head, 1000 logits",
            (1, 3, 299, 299),
            _inception_v3,
        ),
        _entry(
            "resnet50", "torchvision ResNet-50 (v1.5) with BN, 1000 logits", _IMAGENET, _resnet50
        ),
        _entry(
            "squeezenet",
            "SqueezeNet 1.0 (fire modules, conv10 + global pool), 1000 logits",
            (1, 3, 227, 227),
            _squeezenet,
        ),
        _entry(
            "mobilenet_v1",
            "MobileNet v1 1.0-224: depthwise separable convs, BN, ReLU6 (Clip), 1000 logits",
            _IMAGENET,
            _mobilenet_v1,
        ),
        _entry(
            "mobilenet_v2",
            "MobileNetV2 1.0-224: inverted residuals, BN, ReLU6 (Clip), 1000 logits",
            _IMAGENET,
            _mobilenet_v2,
        ),
        _entry(
            "convdeconv",
            "Johnson fast style transfer: reflect Pad, InstanceNormalization, residual blocks, "
            "ConvTranspose upsampling, Tanh; 1x3x480x640 image out",
            (1, 3, 480, 640),
            _convdeconv,
        ),
        _entry(
            "mnist_mlp", "MNIST MLP 784-1000-500-10 (Gemm + Relu), 10 logits", (1, 784), _mnist_mlp
        ),
        _entry(
            "unet_small",
            "Small U-Net: 3 levels, BN + Relu, ConvTranspose up, Concat skips; 1x3x64x64 out",
            (1, 3, 64, 64),
            _unet_small,
        ),
    )
}


def _lookup(name: str) -> ZooModel:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown zoo model {name!r}; known models: {', '.join(MODELS)}"
        ) from None


def build(name: str, *, seed: int = 0) -> onnx.ModelProto:
    """Build zoo model ``name`` with weights drawn from ``np.random.default_rng(seed)``.

    Raises :class:`UnknownModelError` (a ``KeyError`` and a ``ValueError``) listing the
    known names when ``name`` is not in :data:`MODELS`.
    """
    return _lookup(name).build(seed=seed)


def save(name: str, path: str | Path, *, seed: int = 0) -> Path:
    """Build ``name`` and write it to ``path`` atomically (temporary file, then os.replace)."""
    model = build(name, seed=seed)
    return write_bytes_atomic(path, model.SerializeToString(deterministic=True))
