"""Which ops have a typed attribute record, and its reader (issue 32, item 1).

The emitters of these ops (C, MPS, Core ML) and the rewrite rules read the record, never the
attribute by name: tests/test_c_attr_defaults.py fails on a by-name read of an attribute that
only recorded ops declare (e.g. `perm`, `count_include_pad`, `keepdims`, `select_last_index`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .attrs import gemm_attrs
from .batchnorm import bn_affine
from .conv_geometry import geometry
from .norms import group_norm_attrs, layer_norm_attrs, lp_norm_attrs, lrn_attrs
from .numeric import cast_attrs, clip_attrs, quant_attrs
from .pooling import POOLS, pool_attrs
from .records import (
    arg_attrs,
    pad_attrs,
    reduce_attrs,
    resize_attrs,
    scatter_reduction,
    softmax_attrs,
    topk_attrs,
)
from .rnn import recurrent_attrs
from .shape_ops import (
    axes_attr,
    axis_attr,
    depth_space_attrs,
    slice_attrs,
    split_attrs,
    transpose_perm,
)

REDUCE = (
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceSum",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)

_GROUPS: tuple[tuple[tuple[str, ...], Callable[..., Any]], ...] = (
    (POOLS, pool_attrs),
    (("Conv", "ConvTranspose"), geometry),
    (("Gemm",), gemm_attrs),
    (REDUCE, reduce_attrs),
    (("ArgMax", "ArgMin"), arg_attrs),
    (("TopK",), topk_attrs),
    (("LayerNormalization", "RMSNormalization"), layer_norm_attrs),
    (("GroupNormalization",), group_norm_attrs),
    (("LRN",), lrn_attrs),
    (("LpNormalization",), lp_norm_attrs),
    (("BatchNormalization",), bn_affine),
    (("Concat", "Gather", "GatherElements", "Flatten"), axis_attr),
    (("Transpose",), transpose_perm),
    (("Split",), split_attrs),
    (("Slice",), slice_attrs),
    (("Squeeze", "Unsqueeze"), axes_attr),
    (("DepthToSpace", "SpaceToDepth"), depth_space_attrs),
    (("Cast", "CastLike"), cast_attrs),
    (("Clip",), clip_attrs),
    (("QuantizeLinear", "DequantizeLinear"), quant_attrs),
    (("Resize", "Upsample"), resize_attrs),
    (("Softmax", "LogSoftmax", "Hardmax"), softmax_attrs),
    (("Pad",), pad_attrs),
    (("ScatterElements", "ScatterND", "Scatter"), scatter_reduction),
    (("RNN", "GRU", "LSTM"), recurrent_attrs),
)

RECORDS: Mapping[str, Callable[..., Any]] = {op: fn for ops, fn in _GROUPS for op in ops}
