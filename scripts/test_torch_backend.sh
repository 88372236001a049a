#!/usr/bin/env bash
# Tests of the torch.compile backend `hidet_rs` (python/tests_torch): torchvision ResNet-18 and a
# transformers BERT encoder (random weights, nothing downloaded) against eager PyTorch, with a
# second batch size; graph breaks, fallbacks, recompiles. Not part of CI: torch is too heavy
# to install there. Run it before every change to python/hidet_rs/dynamo.py.
#
# Uses the venv .venv-torch (created if missing) with torch, torchvision, transformers and onnx
# from scripts/requirements-models.txt. To reuse packages already installed in another venv
# instead of downloading them again, set HIDET_TORCH_SITE to its site-packages folder (e.g.
# HIDET_TORCH_SITE=$PWD/.venv-models/lib/python3.11/site-packages): it is added to the venv's
# path with a .pth file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/.venv-torch"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -n "${HIDET_TORCH_SITE:-}" ]; then
    echo "$HIDET_TORCH_SITE" > "$site/zz_hidet_torch_site.pth"
fi
if ! "$venv/bin/python" -c 'import torch, torchvision, transformers, onnx' 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r scripts/requirements-models.txt
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" "pytest>=7"
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps "$root/python"
export HIDET_CACHE_DIR="${HIDET_CACHE_DIR:-$root/target/hidet-cache}"
"$venv/bin/python" -m pytest -v python/tests_torch "$@"
