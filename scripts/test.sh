#!/usr/bin/env bash
# The project's test command (README, CI): sets up the Python test environment,
# then checks formatting and lints and runs every test of the workspace and of the
# Python scripts.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/setup_python.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
# The Python scripts' own tests (benchmark and comparison scripts, with stand-in binaries).
.venv/bin/python -m unittest discover -s scripts -p 'test_*.py'
