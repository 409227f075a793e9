#!/usr/bin/env bash
# Rebuild the exporter-corpus models whose exporters cannot share the project's environment:
#   tf      tests/fixtures/exporters/*.tf2onnx.onnx     (tensorflow-cpu + tf2onnx)
#   paddle  tests/fixtures/exporters/*.paddle2onnx.onnx (paddlepaddle + paddle2onnx)
#   tflite  tests/fixtures/tflite/*.tflite               (tensorflow-cpu's TFLiteConverter)
# Both pin their own numpy / protobuf / onnx, so each lives in a venv of its own (VENV,
# default /tmp/venv-KIND), never in the project's environment. CI does not run this: the
# fixtures are committed, and tests/test_exporters.py needs neither package.
#   usage: tools/build_venv_fixtures.sh tf|paddle|tflite [VENV]
set -euo pipefail
kind="${1:?usage: $0 tf|paddle|tflite [VENV]}"
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${2:-/tmp/venv-$kind}"
case "$kind" in
  tf) pkgs=("tensorflow-cpu==2.21.*" "tf2onnx==1.17.*" scikit-learn)
      models=(digits_cnn.tf2onnx text_rnn.tf2onnx heads.tf2onnx gate.tf2onnx) ;;
  paddle) pkgs=("paddlepaddle==3.3.*" "paddle2onnx==2.1.*" packaging onnxruntime)
      models=(attention.paddle2onnx) ;;
  tflite) pkgs=("tensorflow-cpu==2.21.*" "tf_keras==2.21.*" onnx2tf onnx onnx_graphsurgeon sng4onnx psutil ai_edge_litert) ;;
  *) echo "$0: unknown kind '$kind' (tf, paddle or tflite)" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "${pkgs[@]}"
fi
cd "$here"
if [ "$kind" = tflite ]; then
  exec "$venv/bin/python" tests/fixtures/tflite/build.py tests/fixtures/tflite
fi
"$venv/bin/python" tests/fixtures/exporters/build.py tests/fixtures/exporters "${models[@]}"
