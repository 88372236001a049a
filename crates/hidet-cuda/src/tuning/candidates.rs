//! The SIMT template's schedule space for one product, and which of its points are tried at
//! each tuning level.
//!
//! A point is a [`SimtChoice`]: a tile schedule of [`schedule_space`] under the
//! architecture's limits ([`SimtLimits::for_arch`], dynamic shared memory included) and the
//! parts of a parallel-k split ([`k_part_options`]). The space depends on the hardware and,
//! through the parallel-k options only, on whether the product's tiles fill the GPU.
//!
//! Level 1 measures the [`LEVEL1_CANDIDATES`] points ranked best by [`estimated_cycles`], a
//! rough occupancy-and-traffic estimate used for nothing but that ranking (measurement
//! decides), at most [`PER_TILE`] per block tile and parallel-k split so the list spans
//! different tiles rather than one tile's k-tiles and lane orders; level 2 measures the whole
//! space (thousands of points on sm_90: hours of compiling).

use crate::schedule::matmul_anchor::{
    choose_k_parts, AnchorTarget, MatmulShape, SimtChoice, MAX_K_PARTS, MIN_K_PER_PART,
};
use crate::templates::matmul_simt::{schedule_space, KSplit, MatmulSimtSchedule, SimtLimits};
use crate::Arch;

/// Points measured at level 1 (besides the heuristic, which is always measured).
pub const LEVEL1_CANDIDATES: usize = 32;

/// The most level-1 points sharing a block tile and a parallel-k split.
pub const PER_TILE: usize = 2;

/// Cycles a k-tile costs besides its arithmetic and traffic: the two barriers and the loop.
const K_TILE_OVERHEAD: f64 = 32.0;

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

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
    target: &AnchorTarget,
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

/// Every point of the space for a product of `shape` on `arch` (see the module docs), in
/// the order of [`schedule_space`], parts ascending.
pub fn full_space(shape: &MatmulShape, target: &AnchorTarget, arch: Arch) -> Vec<SimtChoice> {
    schedule_space(&SimtLimits::for_arch(arch))
        .into_iter()
        .flat_map(|schedule| {
            k_part_options(shape, &schedule, target)
                .into_iter()
                .map(move |k_parts| SimtChoice { schedule, k_parts })
        })
        .collect()
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
/// barriers), plus the parallel-k partial products written and read once. Used only to rank
/// level-1 candidates.
pub fn estimated_cycles(
    shape: &MatmulShape,
    choice: &SimtChoice,
    target: &AnchorTarget,
    arch: Arch,
) -> f64 {
    let s = &choice.schedule;
    let [bm, bn] = s.block_tile();
    let split = KSplit::new(shape.k, s.block_k, choice.k_parts);
    let blocks = output_blocks(shape, s) * split.parts;
    let sms = target.sm_count.max(1);
    let per_sm = ceil_div(blocks, sms) as f64;
    let threads = s.threads();
    let resident = (2048 / threads)
        .min(65536 / (threads * s.estimated_registers().max(32)))
        .min(shared_per_sm(arch) / s.shared_bytes().max(1))
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

/// The level-1 points: the [`LEVEL1_CANDIDATES`] of [`full_space`] with the lowest
/// [`estimated_cycles`], at most [`PER_TILE`] per block tile and parallel-k split (ties in
/// space order).
pub fn promising(shape: &MatmulShape, target: &AnchorTarget, arch: Arch) -> Vec<SimtChoice> {
    let mut ranked: Vec<(f64, SimtChoice)> = full_space(shape, target, arch)
        .into_iter()
        .map(|c| (estimated_cycles(shape, &c, target, arch), c))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut per_tile: std::collections::HashMap<([i64; 2], i64), usize> = Default::default();
    ranked
        .into_iter()
        .filter(|(_, c)| {
            let n = per_tile
                .entry((c.schedule.block_tile(), c.k_parts))
                .or_insert(0);
            *n += 1;
            *n <= PER_TILE
        })
        .take(LEVEL1_CANDIDATES)
        .map(|(_, c)| c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::matmul_anchor::heuristic_choice;
    use crate::templates::matmul_simt::Batch;

    fn h100() -> AnchorTarget {
        AnchorTarget {
            sm_count: 132,
            parallel_k: true,
        }
    }

    fn plain(m: i64, n: i64, k: i64) -> MatmulShape {
        MatmulShape {
            batch: None,
            m,
            n,
            k,
        }
    }

    #[test]
    fn parts_are_offered_only_where_tiles_do_not_fill_the_gpu() {
        let s = heuristic_choice(&plain(4096, 4096, 4096), &h100())
            .expect("a schedule")
            .schedule;
        assert_eq!(k_part_options(&plain(4096, 4096, 4096), &s, &h100()), [1]);
        let small = plain(1, 768, 3072);
        let s = heuristic_choice(&small, &h100()).expect("a schedule");
        let parts = k_part_options(&small, &s.schedule, &h100());
        assert!(parts.len() > 2 && parts[0] == 1, "{parts:?}");
        assert!(parts.contains(&s.k_parts), "{parts:?} lacks {s:?}");
        for p in &parts {
            assert!(*p == 1 || 3072 / p >= MIN_K_PER_PART, "{p}");
        }
        let off = AnchorTarget {
            parallel_k: false,
            ..h100()
        };
        assert_eq!(k_part_options(&small, &s.schedule, &off), [1]);
        // A short reduction is never split.
        assert_eq!(
            k_part_options(&plain(1, 768, 200), &s.schedule, &h100()),
            [1]
        );
    }

    #[test]
    fn level_one_is_a_few_dozen_points_of_the_architectures_space() {
        let shape = MatmulShape {
            batch: Some(Batch {
                batch: 3,
                a_batch: 3,
                b_batch: 1,
            }),
            m: 97,
            n: 130,
            k: 611,
        };
        for arch in [Arch::SM80, Arch::SM86, Arch::SM90] {
            let full = full_space(&shape, &h100(), arch);
            let one = promising(&shape, &h100(), arch);
            assert_eq!(one.len(), LEVEL1_CANDIDATES, "{arch}");
            let limits = SimtLimits::for_arch(arch);
            for c in &one {
                assert!(full.contains(c), "{arch}: {c:?}");
                c.schedule
                    .validate(&limits)
                    .expect("valid under the arch's limits");
            }
            assert!(full.len() > 4 * one.len(), "{arch}: {}", full.len());
            let mut tiles: Vec<_> = one
                .iter()
                .map(|c| (c.schedule.block_tile(), c.k_parts))
                .collect();
            tiles.sort();
            tiles.dedup();
            assert!(tiles.len() * PER_TILE >= one.len(), "{arch}: {tiles:?}");
        }
        // Sizes ranked by the estimate: the 4096³ product prefers big tiles to small ones.
        let big = plain(4096, 4096, 4096);
        let best = promising(&big, &h100(), Arch::SM90)[0];
        let [bm, bn] = best.schedule.block_tile();
        assert!(bm * bn >= 64 * 64, "{:?}", best);
    }
}
