//! A rough cost model of the SIMT template on a GPU: how many thread blocks a product
//! launches, which parallel-k splits are worth considering, and an estimate of the busiest
//! SM's cycles. The heuristic ([`super::matmul_anchor::heuristic_choice`]) picks its default
//! schedule with it and tuning ranks its level-1 candidates with it; neither trusts it
//! further (it is not calibrated on a GPU: measurement decides).

use super::matmul_anchor::{choose_k_parts, MatmulShape, SimtChoice, MAX_K_PARTS, MIN_K_PER_PART};
use crate::schedule::GpuTarget;
use crate::templates::matmul_simt::{KSplit, MatmulSimtSchedule};
use crate::Arch;

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// Cycles a k-tile costs besides its arithmetic and traffic: the two barriers and the loop.
const K_TILE_OVERHEAD: f64 = 32.0;

/// Thread blocks of one part of a product of `shape` with `schedule`.
pub fn output_blocks(shape: &MatmulShape, schedule: &MatmulSimtSchedule) -> i64 {
    let [bm, bn] = schedule.block_tile();
    shape.batch.map_or(1, |b| b.batch) * ceil_div(shape.m, bm) * ceil_div(shape.n, bn)
}

/// The parallel-k parts tried for `schedule` on a product of `shape`: 1 (no split) always;
/// when parallel-k is allowed and the output tiles do not fill `target`'s SMs, also 2, 4, 8,
/// 16, 32 and the paper's heuristic ([`choose_k_parts`]), each kept only when every part
/// keeps at least [`MIN_K_PER_PART`] of `k` and the grid's z dimension holds them;
/// normalized as the template does ([`KSplit`]) and without repeats.
pub fn k_part_options(
    shape: &MatmulShape,
    schedule: &MatmulSimtSchedule,
    target: &GpuTarget,
) -> Vec<i64> {
    let mut out = vec![1];
    if !target.parallel_k {
        return out;
    }
    let blocks = output_blocks(shape, schedule);
    if blocks >= target.sm_count {
        return out;
    }
    let batch = shape.batch.map_or(1, |b| b.batch).max(1);
    let heuristic = choose_k_parts(blocks, shape.k, target.sm_count);
    for parts in [2, 4, 8, 16, MAX_K_PARTS, heuristic] {
        if parts < 2 || shape.k / parts < MIN_K_PER_PART || batch * parts > 65535 {
            continue;
        }
        let parts = KSplit::new(shape.k, schedule.block_k, parts).parts;
        if !out.contains(&parts) {
            out.push(parts);
        }
    }
    out
}

/// Shared memory of one SM that resident blocks share (bytes): the opt-in per-block limit
/// plus the 1 KiB the driver reserves per block.
fn shared_per_sm(arch: Arch) -> i64 {
    arch.max_shared_bytes_per_block() as i64 + 1024
}

/// A rough estimate, in SM cycles, of the busiest SM's time for `choice` on a product of
/// `shape`: blocks per SM × k-tiles per block × (the larger of a k-tile's FMA time — 128 FP32
/// lanes per SM, slowed by the shared-memory fragment loads each FMA needs,
/// `1/IM·OM + 1/IN·ON`, and by too few resident warps to hide latency — and its global
/// traffic, about 32 bytes per cycle per SM through L2, plus a fixed cost per k-tile for its
/// barriers), plus the parallel-k partial products written and read once.
pub fn estimated_cycles(shape: &MatmulShape, choice: &SimtChoice, target: &GpuTarget) -> f64 {
    let s = &choice.schedule;
    let [bm, bn] = s.block_tile();
    let split = KSplit::new(shape.k, s.block_k, choice.k_parts);
    let blocks = output_blocks(shape, s) * split.parts;
    let sms = target.sm_count.max(1);
    let per_sm = ceil_div(blocks, sms) as f64;
    let threads = s.threads();
    let resident = (2048 / threads)
        .min(65536 / (threads * s.estimated_registers().max(32)))
        .min(shared_per_sm(target.arch) / s.shared_bytes().max(1))
        .clamp(1, 32);
    let warps = (resident.min(ceil_div(blocks, sms)) * threads / 32) as f64;
    let latency = (warps / 8.0).min(1.0);
    let tm = (s.warp_outer[0] * s.warp_inner[0]) as f64;
    let tn = (s.warp_outer[1] * s.warp_inner[1]) as f64;
    let fma_rate = tm * tn / (tm * tn + tm + tn);
    let bk = s.block_k as f64;
    let (bm, bn) = (bm as f64, bn as f64);
    let compute = bm * bn * bk / (128.0 * fma_rate * latency);
    let traffic = (bm + bn) * bk * 4.0 / 32.0;
    let block = split.tiles_per_part as f64 * (compute.max(traffic) + K_TILE_OVERHEAD);
    let reduce = if split.parts > 1 {
        let out = (shape.batch.map_or(1, |b| b.batch) * shape.m * shape.n) as f64;
        2.0 * split.parts as f64 * out * 4.0 / 32.0 / sms as f64
    } else {
        0.0
    };
    per_sm * block + reduce
}
