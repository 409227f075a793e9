#!/usr/bin/env bash
# Rebuild the tf2onnx models of the exporter corpus (tests/fixtures/exporters/*.tf2onnx.onnx).
# tensorflow-cpu and tf2onnx pin their own numpy / protobuf / onnx, so they live in a venv of
# their own (VENV, default /tmp/venv-tf), never in the project's environment. CI does not run
# this: the fixtures are committed, and tests/test_exporters.py needs neither package.
#   usage: tools/build_tf_fixtures.sh [VENV]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-/tmp/venv-tf}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "tensorflow-cpu==2.21.*" "tf2onnx==1.17.*" scikit-learn
fi
cd "$here"
"$venv/bin/python" tests/fixtures/exporters/build.py tests/fixtures/exporters \
  digits_cnn.tf2onnx text_rnn.tf2onnx heads.tf2onnx
