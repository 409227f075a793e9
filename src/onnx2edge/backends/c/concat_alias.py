"""Concat and Reshape without copies: inputs written straight into their slice of the output.

A Concat whose slices are contiguous in its output (everything before the axis has extent 1:
batch-1 NCHW concatenated on channels, as in SqueezeNet's fire modules, Inception's and
GoogLeNet's mixed blocks) only moves bytes: each input is one contiguous run of the output.
When such an input is an arena tensor that nothing else reads, its producer can write it in
place, at its offset inside the output's buffer, and the Concat copies nothing for it. On
SqueezeNet the eight concats were 1.2 ms of 22 (AVX-512, 1 thread), the bytes of every fire
module's output written and read twice.

The planner then keeps one buffer for the output, live from the first of its aliased inputs'
producers to the output's last reader; an aliased input gets no buffer of its own (its
offset is the output's plus its slice's). Skipped, and copied as before: graph inputs and
outputs, inputs read by other nodes too or repeated in the Concat, inputs that are
themselves concat outputs with aliases (no chains), and nodes under a run-time If guard.
Reshape / Flatten / Squeeze / Unsqueeze are a Concat of one input under the same rules.

Dense blocks (DenseNet): layer i of a block concatenates the block input and every earlier
layer's output, so each feature map is read by every later Concat and the plain rule above
(one reader) aliases none of them: each layer copied the whole growing stack again, O(L^2)
bytes per block. When a batch-1 Concat's inputs start with exactly the inputs of other
Concats on the same axis (their input lists are prefixes of its own), all of them are views
of its buffer: every input is written in place at its offset in the largest Concat (the
block's home), each prefix Concat's output is the home's first bytes (an alias at offset 0),
and no Concat of the block copies anything. Taken only when every input of the home can be
placed (arena tensors, read by nothing but these Concats, unguarded producers).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...ir import Graph


def concat_aliases(
    graph: Graph, kinds: Mapping[str, str], guarded: set[str]
) -> dict[str, tuple[str, int]]:
    """{input tensor: (Concat output tensor, byte offset of its slice)} for the inputs that
    can be written in place. kinds: tensor name -> "input" | "output" | "const" | "arena";
    guarded: names of nodes under a run-time If."""
    readers: dict[str, int] = {}
    producer: dict[str, str] = {}
    for node in graph.nodes:
        for name in node.outputs:
            producer[name] = node.name
        for name in node.inputs:
            if name:
                readers[name] = readers.get(name, 0) + 1
    outputs = set(graph.outputs)
    targets: set[str] = set()  # concat outputs that received aliases
    aliases: dict[str, tuple[str, int]] = {}
    _dense_chains(graph, kinds, guarded, readers, producer, outputs, aliases, targets)
    for node in graph.nodes:
        if node.outputs and (node.outputs[0] in targets or node.outputs[0] in aliases):
            continue  # placed as a dense chain
        reshape = node.op_type in RESHAPES
        # o2e.QConcat (int8, passes/qdq_int8): inputs (x_i, table_i), placed like a Concat's:
        # an x_i without a table is copied byte for byte (its scale is the output's), one with a
        # table is then looked up in place (o2e_qlut reads each vector before it writes it)
        qconcat = node.op_type == "QConcat" and node.domain == "o2e"
        onnx_op = (node.op_type == "Concat" or reshape) and node.domain in ("", "ai.onnx")
        if node.name in guarded or not (onnx_op or qconcat):
            continue
        y = node.outputs[0]
        ty = graph.type_of(y)
        if kinds.get(y) != "arena" or ty is None or not ty.is_static:
            continue
        shape = ty.static_shape
        axis = 0 if reshape else int(node.attrs["axis"].value)
        axis += len(shape) if axis < 0 else 0
        if int(np.prod(shape[:axis], dtype=np.int64)) != 1:
            continue  # slices interleave: every outer index has its own run
        itemsize = np.dtype(ty.dtype).itemsize
        off = 0
        ins = node.inputs[0::2] if qconcat else node.inputs[:1] if reshape else node.inputs
        for x in ins:
            if not x:
                continue
            tx = graph.type_of(x)
            if tx is None or not tx.is_static:
                break  # shapes unknown: leave the node to its emitter
            nbytes = int(np.prod(tx.static_shape, dtype=np.int64)) * itemsize
            if (
                kinds.get(x) == "arena"
                and x not in outputs
                and x not in targets
                and x not in aliases
                and readers.get(x) == 1
                and x in producer
                and producer[x] not in guarded
                and tx.dtype == ty.dtype
                and nbytes > 0
            ):
                aliases[x] = (y, off)
                targets.add(y)
            off += nbytes
    return aliases


def _contiguous_concat(
    node, graph: Graph, kinds: Mapping[str, str], guarded: set[str]
) -> tuple[int, list[int]] | None:
    """(axis, byte size of each input) of a Concat whose inputs are contiguous runs of its
    arena output (batch-1 style), all static, non-empty, of the output's dtype; else None."""
    if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or node.name in guarded:
        return None
    y = node.outputs[0]
    ty = graph.type_of(y)
    if kinds.get(y) != "arena" or ty is None or not ty.is_static:
        return None
    shape = ty.static_shape
    axis = int(node.attrs["axis"].value)
    axis += len(shape) if axis < 0 else 0
    if int(np.prod(shape[:axis], dtype=np.int64)) != 1:
        return None
    sizes = []
    for x in node.inputs:
        tx = graph.type_of(x) if x else None
        if tx is None or not tx.is_static or tx.dtype != ty.dtype:
            return None
        nbytes = int(np.prod(tx.static_shape, dtype=np.int64)) * np.dtype(ty.dtype).itemsize
        if nbytes <= 0:
            return None
        sizes.append(nbytes)
    return axis, sizes


def _dense_chains(
    graph: Graph,
    kinds: Mapping[str, str],
    guarded: set[str],
    readers: Mapping[str, int],
    producer: Mapping[str, str],
    outputs: set[str],
    aliases: dict[str, tuple[str, int]],
    targets: set[str],
) -> None:
    """Place dense blocks (module docstring): fills `aliases` and `targets` in place."""
    concats = {}
    for node in graph.nodes:
        got = _contiguous_concat(node, graph, kinds, guarded)
        if got is not None and node.outputs[0] not in outputs:
            concats[node.outputs[0]] = (node, *got)
    placed: set[str] = set()
    # largest first: a block's last Concat is the home of every earlier one
    for home in sorted(concats, key=lambda y: -len(concats[y][0].inputs)):
        if home in placed:
            continue
        node, axis, sizes = concats[home]
        ins = list(node.inputs)
        prefixes = [
            y
            for y, (q, qaxis, _) in concats.items()
            if y != home
            and y not in placed
            and qaxis == axis
            and len(q.inputs) < len(ins)
            and list(q.inputs) == ins[: len(q.inputs)]
        ]
        if not prefixes or len(set(ins)) != len(ins):
            continue
        # each input is read once by the home and once by every prefix that holds it
        held = {x: 1 + sum(x in concats[p][0].inputs for p in prefixes) for x in ins}
        if not all(
            kinds.get(x) == "arena"
            and x not in outputs
            and x not in aliases
            and x not in targets
            and x not in concats
            and x in producer
            and producer[x] not in guarded
            and readers.get(x) == held[x]
            for x in ins
        ):
            continue
        off = 0
        for x, nbytes in zip(ins, sizes, strict=True):
            aliases[x] = (home, off)
            off += nbytes
        for p in prefixes:
            aliases[p] = (home, 0)
            placed.add(p)
        targets.add(home)
        placed.add(home)


# Ops that only rename bytes: their input, written by its producer straight into the output's
# buffer (one slice at offset 0), leaves them nothing to copy (ops/shape.py `reshape`).
# Attention's head split runs three of them per block (Reshape, Squeeze after Split...).
RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
