#!/usr/bin/env bash
# The project's test command (README, CI): sets up the Python test environment,
# then checks formatting and lints and runs every test of the workspace, of the Python
# package (python/) and of the Python scripts.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/setup_python.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
# The Python package (python/, built and installed by setup_python.sh); after the cargo tests,
# so the `hidet` binary whose error messages it compares with is built.
.venv/bin/python -m pytest -q python/tests
# The Python scripts' own tests (benchmark and comparison scripts, with stand-in binaries).
.venv/bin/python -m unittest discover -s scripts -p 'test_*.py'
