#!/usr/bin/env bash
# Regenerates crates/hidet-onnx/src/generated/onnx.rs from crates/hidet-onnx/proto/onnx.proto.
#
# The generated Rust is committed so that building hidet never needs protoc. Run this only
# when the .proto changes. It builds a throwaway prost-build project in a temp dir and uses
# protoc from the `grpcio-tools` PyPI package (no system protoc needed).
#   - The .proto is onnx/onnx.proto (proto2 syntax) from the onnx==1.17.0 wheel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet grpcio-tools
cat > "$work/protoc" <<EOS
#!/bin/sh
exec "$work/venv/bin/python" -m grpc_tools.protoc "\$@"
EOS
chmod +x "$work/protoc"
mkdir -p "$work/gen/src" "$work/out"
cat > "$work/gen/Cargo.toml" <<'EOS'
[package]
name = "protogen"
version = "0.1.0"
edition = "2021"
[dependencies]
prost-build = "0.13"
[workspace]
EOS
cat > "$work/gen/src/main.rs" <<'EOS'
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut cfg = prost_build::Config::new();
    cfg.out_dir(&args[3]);
    cfg.compile_protos(&[&args[1]], &[&args[2]]).expect("compile protos");
}
EOS
(cd "$work/gen" && CARGO_TARGET_DIR="$work/target" cargo build --quiet)
PROTOC="$work/protoc" "$work/target/debug/protogen" \
    "$root/crates/hidet-onnx/proto/onnx.proto" "$root/crates/hidet-onnx/proto" "$work/out"
cp "$work/out/onnx.rs" "$root/crates/hidet-onnx/src/generated/onnx.rs"
echo "wrote crates/hidet-onnx/src/generated/onnx.rs"
