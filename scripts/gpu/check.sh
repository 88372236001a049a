#!/usr/bin/env bash
# Device check of the CUDA backend on a lent GPU machine (issue 30, item 6).
#
# The lent machine (an H100 or H200, x86-64, Ubuntu, PyTorch in python3) has no Rust
# toolchain and no network: everything is built HERE and carried THERE in `.gpu/` (ignored by
# git; a few MiB, far under the 64 MiB a call may carry).
#
# 1. Here, once per change (needs cargo, and NVRTC in .venv: scripts/setup_python.sh):
#
#        scripts/gpu/check.sh --prepare
#
#    builds `gpu_smoke` (crates/hidet-cuda/examples/gpu_smoke.rs) and the `hidet` CLI in
#    release mode; compiles every kernel the check runs (the smoke kernels and every kernel of
#    the five paper models, `hidet compile --device cuda --arch sm_90`) into the cubin/PTX
#    cache `.gpu/cache` with NVRTC for sm_90 (no GPU needed); copies the binaries to
#    `.gpu/bin`.
#
# 2. There, with the device tool (from the repository the session was started in: the
#    tool sends that checkout, so run --prepare in it, not in another worktree):
#
#        run(command="bash scripts/gpu/check.sh", carry=[".gpu"], timeout_s=540)
#
#    prints the device, then one row per kernel from `gpu_smoke` (max error against a
#    float64 CPU reference, median stream-launch and CUDA-graph-replay times and GFLOP/s),
#    then torch.mm (fp32, TF32 off) at the same sizes for comparison, then the model table of
#    scripts/gpu/torch_peers.py: per paper model, hidet's max relative error against PyTorch
#    fp32 on the GPU (the zoo model exported with `hidet export` and run as plain torch calls,
#    scripts/gpu/onnx_to_torch.py) and against hidet's reference executor, hidet's median
#    latency with and without CUDA graphs, PyTorch eager, and torch.compile (default, then
#    max-autotune-no-cudagraphs, while HIDET_CHECK_COMPILE_BUDGET seconds last, 120 by
#    default); the rows also land in $OUT/hidet_torch_peers.json. Last, a quick level-1
#    `hidet tune --device cuda` of zoo:tiny_mlp's matmuls (at most 8 candidates each, compiled
#    there with the NVRTC of PyTorch's wheels, timed with CUDA events). About 6 minutes (each
#    step has its own timeout; give the call timeout_s=540); exits non-zero when a check
#    failed. Record the tables in BENCHMARKS.md with the device name.
#
# 3. There, when device time is left (a second call):
#
#        run(command="bash scripts/gpu/check.sh --tune", carry=[".gpu"], timeout_s=540)
#
#    tunes every SIMT task of the five paper models at level 1 on that GPU (candidates
#    compiled there by NVRTC on all cores, timed with CUDA events) and prints the model table
#    again with the winners (hidet and eager only). The records come back as
#    $OUT/tuning.tar.gz; copied here to .gpu/tuning.tar.gz, later checks start from them.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/.gpu"

if [ "${1:-}" = "--prepare" ]; then
    set -e
    cd "$root"
    cargo build --release -p hidet-cuda --example gpu_smoke
    mkdir -p "$out/bin"
    rm -rf "$out/cache"
    cp target/release/examples/gpu_smoke "$out/bin/"
    cargo build --release -p hidet
    cp target/release/hidet "$out/bin/"
    strip "$out/bin/hidet" "$out/bin/gpu_smoke" 2>/dev/null || true
    "$out/bin/gpu_smoke" --prepare --cache "$out/cache" --arch sm_90
    # Every kernel of the five paper models, compiled by NVRTC for sm_90 into the same cache
    # (no GPU needed here; the GPU finds them there without a compiler).
    for model in resnet50 inception_v3 mobilenet_v2 bert_base gpt2; do
        HIDET_CACHE_DIR="$out/cache" "$out/bin/hidet" compile "zoo:$model" --device cuda \
            --arch sm_90 | grep -E "kernels|target"
    done
    du -sh "$out"
    exit 0
fi

# The NVRTC of PyTorch's CUDA wheels on the GPU machine (tuning compiles candidates there).
find_nvrtc() {
    python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for pattern in ("nvidia/cuda_nvrtc/lib/libnvrtc.so.1*", "nvidia/cu13/lib/libnvrtc.so.1*"):
        for hit in sorted(glob.glob(os.path.join(root, pattern))):
            if "builtins" not in hit and "alt" not in hit:
                print(hit)
                raise SystemExit
PY
}

start=$(date +%s)
status=0
echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
if [ ! -x "$out/bin/gpu_smoke" ] || [ ! -d "$out/cache" ]; then
    echo "missing $out/bin/gpu_smoke or $out/cache: run scripts/gpu/check.sh --prepare here and carry .gpu" >&2
    exit 2
fi
# Tuning records an earlier `--tune` run brought back (copied to .gpu/tuning.tar.gz).
if [ -f "$out/tuning.tar.gz" ]; then
    mkdir -p "$out/cache" && tar -xzf "$out/tuning.tar.gz" -C "$out/cache" && echo "(tuning records from .gpu/tuning.tar.gz in use)"
fi

if [ "${1:-}" = "--tune" ]; then
    # Level-1 tuning of every SIMT task of the five paper models on this GPU (candidates
    # compiled here by NVRTC on all cores, timed with CUDA events), then the model table again
    # with the recorded winners (hidet and PyTorch eager only). The records come back as
    # $OUT/tuning.tar.gz: copy it to .gpu/tuning.tar.gz to start the next check from them.
    nvrtc=$(find_nvrtc)
    if [ -z "$nvrtc" ]; then
        echo "no NVRTC in python3's site-packages: cannot compile candidates here" >&2
        exit 2
    fi
    for model in resnet50 inception_v3 mobilenet_v2 bert_base gpt2; do
        echo "== hidet tune zoo:$model --device cuda --level 1"
        HIDET_NVRTC_PATH="$nvrtc" HIDET_CACHE_DIR="$out/cache" timeout 75 "$out/bin/hidet" tune \
            "zoo:$model" --device cuda --level 1 | tail -n 4 || status=1
    done
    if [ -d "$out/cache/tuning" ]; then
        tar -czf /tmp/tuning.tar.gz -C "$out/cache" tuning && ls -l /tmp/tuning.tar.gz
        [ -n "${OUT:-}" ] && cp /tmp/tuning.tar.gz "$OUT/"
    fi
    echo "== models with the tuned schedules (scripts/gpu/torch_peers.py, no torch.compile rows)"
    HIDET_CACHE_DIR="$out/cache" PYTHONUNBUFFERED=1 timeout 150 python3 "$root/scripts/gpu/torch_peers.py" \
        --hidet "$out/bin/hidet" --device cuda --runs 30 --work /tmp/hidet_torch_peers \
        --compile-modes "" --json /tmp/hidet_torch_peers_tuned.json || status=1
    [ -n "${OUT:-}" ] && [ -f /tmp/hidet_torch_peers_tuned.json ] && cp /tmp/hidet_torch_peers_tuned.json "$OUT/"
    echo "== done in $(( $(date +%s) - start )) s, status $status"
    exit $status
fi

echo "== hidet runtime: SIMT fp32 matmul and dynamic shared memory (gpu_smoke)"
timeout 90 "$out/bin/gpu_smoke" --cache "$out/cache" || status=1

echo "== torch.mm, fp32, TF32 off (median of 20, CUDA events)"
PYTHONUNBUFFERED=1 timeout 60 python3 - <<'PY' || echo "torch.mm rows unavailable (no PyTorch with CUDA here?)"
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
for m, n, k in [(333, 517, 129), (1024, 1024, 1024), (4096, 4096, 4096)]:
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.mm(a, b); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    ms = sorted(times)[len(times) // 2]
    print(f"torch.mm {m}x{n}x{k:<8} {ms:11.4f} ms {2 * m * n * k / ms / 1e6:10.0f} GFLOP/s")
PY

echo "== models: hidet against PyTorch fp32 (TF32 off), scripts/gpu/torch_peers.py"
# Per paper model: hidet's outputs on the GPU against the same graph run by PyTorch (max
# relative error) and by hidet's reference executor on the CPU; median latency (host inputs to
# host outputs) of hidet with and without CUDA graphs, PyTorch eager, and torch.compile
# (default, then max-autotune-no-cudagraphs) while HIDET_CHECK_COMPILE_BUDGET seconds last.
if [ -x "$out/bin/hidet" ]; then
    HIDET_CACHE_DIR="$out/cache" PYTHONUNBUFFERED=1 timeout 330 python3 "$root/scripts/gpu/torch_peers.py" \
        --hidet "$out/bin/hidet" --device cuda --runs 30 --work /tmp/hidet_torch_peers \
        --compile-budget "${HIDET_CHECK_COMPILE_BUDGET:-120}" --json /tmp/hidet_torch_peers.json || status=1
    if [ -n "${OUT:-}" ] && [ -f /tmp/hidet_torch_peers.json ]; then
        cp /tmp/hidet_torch_peers.json "$OUT/"
    fi
else
    echo "skipped: no .gpu/bin/hidet (run scripts/gpu/check.sh --prepare here)"
fi

echo "== tuning: hidet tune zoo:tiny_mlp --device cuda --level 1 (at most 8 candidates per task, timed with CUDA events)"
# Candidates are compiled on the GPU machine, so this needs NVRTC there: PyTorch's CUDA wheels
# ship it (nvidia/cuda_nvrtc/lib, or nvidia/cu13/lib for CUDA 13). Records go to the carried
# cache's tuning/ folder (`--tune` below brings the paper models' records back).
nvrtc=$(find_nvrtc)
if [ -x "$out/bin/hidet" ] && [ -n "$nvrtc" ]; then
    HIDET_NVRTC_PATH="$nvrtc" HIDET_CACHE_DIR="$out/cache" timeout 90 "$out/bin/hidet" tune \
        zoo:tiny_mlp --device cuda --level 1 --max-candidates 8 --retune || status=1
else
    echo "skipped: no .gpu/bin/hidet, or no NVRTC found in python3's site-packages"
fi

echo "== done in $(( $(date +%s) - start )) s, status $status"
exit $status
