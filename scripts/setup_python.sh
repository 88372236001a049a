#!/usr/bin/env bash
# Creates the project-local Python environment (.venv) that the tests use:
#   - onnx 1.17.0 (ships the ONNX backend node test cases) and onnxruntime (reference outputs)
#   - nvidia-cuda-nvrtc-cu12 / nvidia-cuda-nvcc-cu12 (NVRTC and ptxas, for CUDA compile checks without a GPU)
#   - maturin and pytest, then the Python package in python/ (import name `hidet_rs`), built
#     with the workspace's release profile in the workspace's target folder, so it shares the
#     release build of the workspace crates with `cargo build --release` / `cargo test --release`
# Idempotent: re-running only installs what is missing (the package is rebuilt, which is a
# no-op for cargo when no source changed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/scripts/requirements.txt"
# `--no-build-isolation`: the build uses the venv's maturin (no download per build); maturin
# must then be on PATH.
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps "$root/python"
