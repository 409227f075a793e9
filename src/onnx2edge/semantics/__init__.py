"""What each operator means, in one place (issue 10): attribute defaults from the ONNX schemas
(attrs.py), convolution / pooling geometry (conv_geometry.py), the activation table
(activations.py) and the internal fused ops (fused.py). Pure: imports onnx, numpy and
onnx2edge.ir only, so every backend and pass can read it without import circles."""

from . import fused  # noqa: E402, F401  (registers the o2e schemas attrs.py reads)
