"""What each operator means, in one place (issue 10, issue 32): attribute defaults from the ONNX
schemas (attrs.py), the typed attribute records of each op family (records.py, pooling.py,
shape_ops.py, numeric.py, norms.py, batchnorm.py, rnn.py; families.py maps op -> reader;
invalid.py the error they raise), convolution / pooling geometry (conv_geometry.py), the
activation table (activations.py) and the internal fused ops (fused.py). Pure: imports onnx,
numpy, onnx2edge.ir and onnx2edge.errors only, so every backend and pass can read it without
import circles."""

from . import fused  # noqa: E402, F401  (registers the o2e schemas attrs.py reads)
