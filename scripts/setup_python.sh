#!/usr/bin/env bash
# Creates the project-local Python environment (.venv) that the tests use:
#   - onnx 1.17.0 (ships the ONNX backend node test cases) and onnxruntime (reference outputs)
#   - nvidia-cuda-nvrtc-cu12 / nvidia-cuda-nvcc-cu12 (NVRTC and ptxas, for CUDA compile checks without a GPU)
# Idempotent: re-running only installs what is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/scripts/requirements.txt"
