"""TEMPLATE: how to add an op to the C backend. Copy what you need into the module of the op's
family (ops/elementwise.py, ops/reduce.py, ...) or into a new ops/<family>.py: every module in
this package is imported by `load_all()` (this file excepted), so registering is enough.

The example is a made-up op `MyOp` with LeakyRelu's meaning, y = x < 0 ? alpha * x : x.
tests/test_op_coverage.py runs this very file under the name LeakyRelu against onnxruntime,
so it stays true to the code.

1. Register: `@register_op("MyOp", check=_check)`. One name, one emitter; registering a name
   twice raises. A backend claims exactly the ops it registers (tests/test_op_coverage.py):
   an ONNX op you do not register goes in ops/unsupported.py with its reason.
2. Check: `_check(node, graph) -> str | None` refuses a node the emitter cannot do, with a
   reason the user reads (`convert`, `check` and the conformance list print it). It runs after
   the generic checks of phases.refusals(): every tensor has a static shape and a
   dtype of emitter.CTYPES (float16 etc. only for ops listed in STORAGE_DTYPE_OPS).
3. Emit: `my_op(ctx) -> str` returns the C statements of one node. Everything comes from the
   NodeContext (emitter.py): ctx.x(i) / ctx.y(i) are the input / output Tensors (.sym the C
   pointer, .shape, .size, .ctype, .dtype), ctx.has_input(i) for optional inputs, ctx.const(i)
   an input's value when it is known at conversion time, ctx.attr(name) an attribute
   (absent: the ONNX schema's default, read from onnx.defs - the nearest version's where this
   opset lacks the attribute; an attribute whose meaning changes with the opset has a record in
   semantics/records.py; a literal default only where no schema has one, allow-listed with its
   reason in tests/test_c_attr_defaults.py), ctx.helper(name, code) a static C function added once,
   ctx.scratch(nbytes, ctype) arena memory for this node only, ctx.weight(hint, array) a
   derived constant (repacked weights), ctx.kernel(name) records the kernel chosen; the
   conversion's options are read-only properties (ctx.device, ctx.kernel_options, ctx.optimize,
   ctx.max_threads) and what the phases after the emitter read goes through small recording
   methods (ctx.require_runtime, ctx.offer_residual, ...): the emitter itself is not part of the
   interface (no ctx.model; tests/test_c_node_context.py). Shapes are
   static, so loop bounds are constants; the code must be C99 that compiles under
   build.STRICT_FLAGS (-Wall -Wextra -Werror) and follow onnxruntime on NaN and Inf.
4. Static C (a function that does not depend on the node, e.g. a vector helper): a header
   runtime/o2e_<name>.h with an include guard that compiles on its own (it #includes the
   runtime headers it needs; tests/test_c_runtime_headers.py compiles every header for each
   ISA), included with `headers.include(ctx, "o2e_<name>.h")` from the emitter; C that the
   node's constants specialise stays a Python template given to ctx.helper(name, code).
5. Several kernels for one op: a record of the node (a frozen dataclass with a `kernels` field,
   built once by a `Spec.of(ctx)`), a tuple of `strategy.Strategy(name, refuse, emit)` in the
   order they are preferred, the last taking any node (`settings=("auto",)`), and
   `select(ctx, STRATEGIES, spec).emit(ctx, spec)`: refusal reasons, `--kernels NAME=off`, the
   manifest's stats.layer_kernels / kernel_refusals and `convert --explain-kernels` follow
   (ops/pool.py is a small example; add the list to backend.kernel_settings).
6. Test: a unit test in tests/test_c_<family>.py that builds the model with conftest.make_model
   and compares the compiled C with onnxruntime (see tests/test_c_reduce_norm.py); then
   `onnx2edge conformance --target c --filter '^test_myop'` and regenerate the per-case list
   with `onnx2edge conformance --target c --write-expected tests/conformance/c.expected`.
"""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
from . import register_op

OP_TYPE = "MyOp"


def _check(node: Node, graph: Graph) -> str | None:
    """None if the emitter handles `node`, else why not (one line)."""
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.kind != "f":
        return f"{node.op_type} takes float input"
    return None


@register_op(OP_TYPE, check=_check)
def my_op(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    alpha = c_literal(ctx.attr("alpha"), x.dtype)  # schema default if absent; exact C literal
    # NaN < 0 is false, so NaN passes through unchanged, as in onnxruntime
    return (
        f"for (size_t i = 0; i < {y.size}; ++i) {{\n"
        f"  const {x.ctype} v = {x.sym}[i];\n"
        f"  {y.sym}[i] = v < 0 ? {alpha} * v : v;\n"
        "}"
    )
