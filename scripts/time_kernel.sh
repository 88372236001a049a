#!/usr/bin/env bash
# Times one generated CPU kernel in isolation, on synthetic data.
#
#   hidet compile MODEL --threads 2 --emit-source DIR
#   scripts/time_kernel.sh DIR/k4_matmul_im2col_add_reshape.src [THREADS]
#
# The kernel source is compiled with flags close to hidet's (GCC, -O3, the host's ISA) together
# with a driver that gives every parameter its own 64 MiB buffer (BUF_MIB=N: N MiB, for a tensor
# larger than that) of small positive floats,
# calls the kernel's `__packed` entry 45 times and prints the median of the last 40 calls.
# With FLUSH=1 every call starts with cold caches (128 MiB are written in between), as
# a model's weights often are. ISA='-mavx2 -mfma …' replaces -march=native (hidet itself passes
# explicit -m flags, see crates/hidet-cpu/src/target.rs). RANDOM_DATA=1 fills the buffers with
# pseudo-random floats in [-0.5, 0.5) instead: the default pattern is predictable, and hides
# branch mispredictions (GCC leaves scalar, branchy `max` selects inside some strided pooling
# loops, 2-3x slower on random data). Synthetic data hides data-dependent costs (branches on signs, denormals): confirm a
# finding with `hidet bench MODEL --profile`. BIN_OUT=PATH also keeps the driver binary there,
# to alternate two variants of a kernel (`OMP_NUM_THREADS=2 PATH`) on a noisy host. The driver
# runs the kernel's parallel loops through an OpenMP launcher (`schedule(dynamic)`, OMP_NUM_THREADS
# threads), standing in for hidet's own thread pool (crates/hidet-cpu/src/parallel.rs).
set -euo pipefail
src=${1:?usage: time_kernel.sh KERNEL.src [THREADS]}
threads=${2:-2}
entry=$(grep -oE 'HIDET_EXPORT void [A-Za-z0-9_]+__packed' "$src" | head -1 | awk '{print $3}')
[ -n "$entry" ] || { echo "no __packed entry in $src" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src" "$work/kernel.c"
cat > "$work/driver.c" <<'C'
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
#include "kernel.c"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void omp_launch(hidet_task_fn task, void *env, int32_t tasks, int32_t threads) {
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int32_t t = 0; t < tasks; t++) task(env, t);
}
int main(void) {
    hidet_set_launcher(omp_launch, omp_get_max_threads());
    void *args[16];
    const char *buf_env = getenv("BUF_MIB");
    const size_t buf_mib = buf_env ? (size_t)atol(buf_env) : 64;
    for (int i = 0; i < 16; i++) {
        float *p = aligned_alloc(64, buf_mib << 20);
        if (!p) { perror("aligned_alloc"); return 1; }
        uint32_t state = 2463534242u + (uint32_t)i;
        const char *random_data = getenv("RANDOM_DATA");
        const int random = random_data && random_data[0] == '1';
        for (size_t j = 0; j < (buf_mib << 18); j++) {
            if (random) {
                state ^= state << 13; state ^= state >> 17; state ^= state << 5;
                p[j] = (float)(state >> 8) * (1.0f / 16777216.0f) - 0.5f;
            } else {
                p[j] = (float)((j * 7919) % 1000) * 1e-3f;
            }
        }
        args[i] = p;
    }
    double times[40];
    const char *flush_env = getenv("FLUSH");
    char *flush = flush_env && flush_env[0] == '1' ? malloc((size_t)128 << 20) : NULL;
    for (int r = 0; r < 45; r++) {
        if (flush) for (size_t j = 0; j < ((size_t)128 << 20); j += 64) flush[j] = (char)r;
        double t = now();
        ENTRY(args);
        if (r >= 5) times[r - 5] = now() - t;
    }
    qsort(times, 40, sizeof times[0], by_value);
    printf("%s: median %.3f ms over 40 calls\n", ENTRY_NAME, times[20] * 1e3);
    return 0;
}
C
# hidet's flags (crates/hidet-cpu/src/target.rs): -O3, the host's ISA, 512-bit vectors with AVX-512.
flags=(-O3 -std=gnu11 -fopenmp -ffp-contract=fast -fno-math-errno -fno-trapping-math -fno-tree-loop-distribute-patterns ${ISA:--march=native})
if grep -q avx512f /proc/cpuinfo 2>/dev/null; then flags+=(-mprefer-vector-width=512); fi
gcc "${flags[@]}" -DENTRY="$entry" -DENTRY_NAME="\"$entry\"" -I"$work" "$work/driver.c" -o "$work/driver" -lm
if [ -n "${BIN_OUT:-}" ]; then cp "$work/driver" "$BIN_OUT"; fi
OMP_NUM_THREADS=$threads "$work/driver"
