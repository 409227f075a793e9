"""`onnx2edge conformance --target T`: the ONNX backend node tests through any target.

`cases.py` holds what every target shares (the cases, loading one through the frontend with
the test's data, comparison, summary, `tests/conformance/<target>.expected`); a runner per
target turns cases into results: `c.py` compiles generated C in batches, `runner.py` takes any
backend through its own `check` / `emit` / `run` (MPS on its CPU model of Metal, Core ML on
its evaluator with Core ML's validator). This package sits above the backends and below the
CLI; it never imports the API.
"""
