"""Graph passes: pure functions `Graph -> Graph` that never mutate their input.

Each pass is registered by decorator with the passes it must run after; a backend declares the
list it needs and `run_passes` orders it. A pass's docstring draws the graph before and after.
"""

from .fold_constants import fold_constants  # noqa: E402, I001  (registers itself)
from .fold_batchnorm import fold_batchnorm  # noqa: E402
from .bounded import bound_data_dependent  # noqa: E402, F401
from .fuse_activation import activation_of, fuse_activation  # noqa: E402
from .pool_before_pointwise import pool_before_pointwise  # noqa: E402, F401
from .fuse_residual import fuse_residual, has_residual  # noqa: E402
from .channel_norm import channel_norm  # noqa: E402, F401
from .fuse_softmax_scale import fuse_softmax_scale  # noqa: E402, F401
from .fuse_attention import fuse_attention  # noqa: E402, F401
from .fuse_matmul_bias import fuse_matmul_bias  # noqa: E402, F401
from .infer_shapes import infer_shapes  # noqa: E402
from .compose_gelu import compose_gelu  # noqa: E402, F401
from .decompose import decompose_hardswish, decompose_mish  # noqa: E402, F401
from .qdq_int8 import qdq_to_int8  # noqa: E402
from .registry import PASSES, fixed_point, register_pass, run_passes
from .simplify import eliminate_dead_nodes, remove_identity  # noqa: E402

__all__ = [
    "activation_of",
    "fold_batchnorm",
    "fuse_activation",
    "fuse_residual",
    "has_residual",
    "PASSES",
    "eliminate_dead_nodes",
    "fixed_point",
    "fold_constants",
    "infer_shapes",
    "qdq_to_int8",
    "register_pass",
    "remove_identity",
    "run_passes",
]
