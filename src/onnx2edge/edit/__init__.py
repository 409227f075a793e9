"""Model editing (issue 16, seed 002): rewrite rules for a target, surgery, NCHW -> NHWC.

Everything here reads a model, builds a new one (inputs are never mutated), verifies it
against the original with onnxruntime where numerics could change, and writes atomically.

The package itself holds only the graph-level part, the rule registry and the rules (the
frontend's importers and `check` use them): the commands that load, verify and save models
(`edit.rewrite`, `edit.nhwc`, `edit.surgery`) import it, never the other way round, so the
import graph stays a DAG (tests/test_import_graph.py).
"""

from . import rules_activation, rules_arith, rules_linear, rules_shape  # noqa: F401, I001
from . import transposes  # noqa: F401  (registers transpose_cancel last)
from .rules import RULES, Rule, apply_rules, list_rules, register_rule

__all__ = ["RULES", "Rule", "apply_rules", "list_rules", "register_rule"]
