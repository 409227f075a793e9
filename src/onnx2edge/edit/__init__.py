"""Model editing (issue 16, seed 002): rewrite rules for a target, surgery, NCHW -> NHWC.

Everything here reads a model, builds a new one (inputs are never mutated), verifies it
against the original with onnxruntime where numerics could change, and writes atomically.
"""

from . import rules_activation, rules_arith, rules_linear, rules_shape  # noqa: F401, I001
from . import nhwc  # noqa: F401  (registers transpose_cancel last)
from .rewrite import apply_rules, list_rules, rewrite, rules_for_target
from .rules import RULES, Rule, register_rule

__all__ = [
    "RULES",
    "Rule",
    "apply_rules",
    "list_rules",
    "register_rule",
    "rewrite",
    "rules_for_target",
]
