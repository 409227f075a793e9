"""Gemm <-> 1x1 Conv and MatMul + Add -> Gemm."""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..semantics.attrs import gemm_attrs
from ..semantics.conv_geometry import conv_geometry
from .rules import Builder, default_domain, register_rule, single_consumer


def _static(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    return t.static_shape if t is not None and t.is_static else None


@register_rule("gemm_to_conv", ops=("Gemm",))
def gemm_to_conv(graph: Graph) -> Graph:
    """Gemm with constant B (and C of shape [], [M] or [1, M]) -> a 1x1 Conv on [N, K, 1, 1]
    (alpha / beta folded into the weights). For runtimes whose fully connected layer is a
    convolution (MPS, the ANE).

    before:  A[N,K] -> Gemm(B, C) -> Y[N,M]
    after:   A -> Reshape[N,K,1,1] -> Conv(W[M,K,1,1], bias[M]) -> Reshape[N,M] -> Y
    """
    b = Builder(graph)
    for n in graph.nodes:
        bv = graph.const(n.inputs[1]) if n.op_type == "Gemm" and len(n.inputs) > 1 else None
        cv = (
            graph.const(n.inputs[2])
            if bv is not None and len(n.inputs) > 2 and n.inputs[2]
            else None
        )
        a_shape = _static(graph, n.inputs[0]) if bv is not None else None
        ga = gemm_attrs(n, graph.opset)
        if (
            a_shape is None
            or len(a_shape) != 2
            or not default_domain(n)
            or ga.trans_a
            or (
                len(n.inputs) > 2
                and n.inputs[2]
                and (
                    cv is None
                    or cv.size not in (1, bv.shape[1 - int(ga.trans_b)])
                    or (cv.ndim == 2 and cv.shape[0] != 1)
                )
            )
        ):
            b.keep(n)
            continue
        w = bv.T if ga.trans_b else bv  # [K, M]
        w = (w.astype(np.float64) * ga.alpha).astype(bv.dtype)
        m = w.shape[1]
        ins = [None, b.const(n, "weight", np.ascontiguousarray(w.T).reshape(m, w.shape[0], 1, 1))]
        if cv is not None:
            bias = np.broadcast_to(cv.reshape(-1).astype(np.float64) * ga.beta, (m,))
            ins.append(b.const(n, "bias", bias.astype(bv.dtype)))
        x4 = b.add(
            n,
            "to4d",
            "Reshape",
            [n.inputs[0], b.const(n, "shape4", np.array([a_shape[0], a_shape[1], 1, 1], np.int64))],
        )
        ins[0] = x4
        y4 = b.add(n, "conv", "Conv", ins, kernel_shape=[1, 1])
        b.add(
            n,
            "to2d",
            "Reshape",
            [y4, b.const(n, "shape2", np.array([a_shape[0], m], np.int64))],
            output=n.outputs[0],
        )
    return b.result()


@register_rule("conv_to_gemm", ops=("Conv",))
def conv_to_gemm(graph: Graph) -> Graph:
    """A 1x1 Conv (group 1, no padding) on a [N, C, 1, 1] map -> Gemm (the inverse of
    gemm_to_conv; the classifier head after global pooling).

    before:  X[N,C,1,1] -> Conv(W[M,C,1,1], b) -> Y[N,M,1,1]
    after:   X -> Reshape[N,C] -> Gemm(W[M,C], b, transB=1) -> Reshape[N,M,1,1] -> Y
    """
    b = Builder(graph)
    for n in graph.nodes:
        wv = graph.const(n.inputs[1]) if n.op_type == "Conv" and len(n.inputs) > 1 else None
        xs = _static(graph, n.inputs[0]) if wv is not None else None
        # the window as every backend reads it (auto_pad resolved: SAME on a 1x1 kernel pads 0)
        geo = (
            conv_geometry(n, xs, wv.shape, None, graph.opset)
            if xs is not None and len(xs) == 4 and wv is not None and wv.ndim == 4
            else None
        )
        ok = (
            geo is not None
            and geo.in_spatial == (1, 1)
            and geo.kernel == (1, 1)
            and geo.group == 1
            and default_domain(n)
            and not any(geo.pads)
            and (len(n.inputs) < 3 or not n.inputs[2] or graph.const(n.inputs[2]) is not None)
        )
        if not ok:
            b.keep(n)
            continue
        m, c = wv.shape[:2]
        x2 = b.add(
            n,
            "to2d",
            "Reshape",
            [n.inputs[0], b.const(n, "shape2", np.array([xs[0], c], np.int64))],
        )
        ins = [x2, b.const(n, "weight", wv.reshape(m, c))]
        if len(n.inputs) > 2 and n.inputs[2]:
            ins.append(n.inputs[2])
        y2 = b.add(n, "gemm", "Gemm", ins, transB=1)
        b.add(
            n,
            "to4d",
            "Reshape",
            [y2, b.const(n, "shape4", np.array([xs[0], m, 1, 1], np.int64))],
            output=n.outputs[0],
        )
    return b.result()


@register_rule("matmul_add_gemm", ops=("MatMul", "Add"))
def matmul_add_gemm(graph: Graph) -> Graph:
    """MatMul(X[N,K], W[K,M] constant) followed by Add(bias [M] / [1,M] constant) -> Gemm.

    before:  X -> MatMul(W) -> t -> Add(bias) -> Y      (t used only by the Add)
    after:   X -> Gemm(W, bias) -> Y
    """
    b = Builder(graph)
    fused: set[str] = set()
    for n in graph.nodes:
        if n.op_type == "Add" and default_domain(n) and len(n.inputs) == 2:
            for i, j in ((0, 1), (1, 0)):
                p = graph.producer(n.inputs[i])
                bias = graph.const(n.inputs[j])
                w = graph.const(p.inputs[1]) if p is not None and p.op_type == "MatMul" else None
                xs = _static(graph, p.inputs[0]) if w is not None else None
                if (
                    xs is not None
                    and len(xs) == 2
                    and w is not None
                    and w.ndim == 2
                    and bias is not None
                    and bias.ndim <= 2
                    and bias.size in (1, w.shape[1])
                    and (bias.ndim < 2 or bias.shape[0] == 1)
                    and default_domain(p)
                    and single_consumer(graph, p.outputs[0]) is n
                ):
                    fused.add(p.name)
                    bname = b.const(
                        n, "bias", np.broadcast_to(bias.reshape(-1), (w.shape[1],)).copy()
                    )
                    b.add(n, "gemm", "Gemm", [p.inputs[0], p.inputs[1], bname], output=n.outputs[0])
                    break
            else:
                b.keep(n)
        else:
            b.keep(n)
    b.nodes = [n for n in b.nodes if n.name not in fused]
    return b.result()
