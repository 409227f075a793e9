"""The MPS op emitters, one module per op family; importing this package registers them all
in `EMITTERS` (see docs/ARCHITECTURE.md, "Adding an MPS op")."""

from . import binary, conv, neuron, norm, pool, shape  # noqa: F401  (registers the emitters)
from .common import EMITTERS, HEAVY_OPS, MATMUL_OF_ACTIVATIONS, NO_NODE

__all__ = ["EMITTERS", "HEAVY_OPS", "MATMUL_OF_ACTIVATIONS", "NO_NODE"]
