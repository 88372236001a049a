//! The SIMT template's schedule space for one product, and which of its points are tried at
//! each tuning level.
//!
//! A point is a [`SimtChoice`]: a tile schedule of [`schedule_space`] under the
//! architecture's limits ([`SimtLimits::for_arch`], dynamic shared memory included) and the
//! parts of a parallel-k split ([`k_part_options`]). The space depends on the hardware and,
//! through the parallel-k options only, on whether the product's tiles fill the GPU.
//!
//! Level 1 measures the [`LEVEL1_CANDIDATES`] points ranked best by [`estimated_cycles`], a
//! rough occupancy-and-traffic estimate (the heuristic's model too; measurement decides), at most [`PER_TILE`] per block tile and parallel-k split so the list spans
//! different tiles rather than one tile's k-tiles and lane orders; level 2 measures the whole
//! space (thousands of points on sm_90: hours of compiling).

use crate::schedule::matmul_anchor::{MatmulShape, SimtChoice};
pub use crate::schedule::simt_cost::{estimated_cycles, k_part_options, output_blocks};
use crate::schedule::GpuTarget;
use crate::templates::matmul_simt::{schedule_space, SimtLimits};

/// Points measured at level 1 (besides the heuristic, which is always measured).
pub const LEVEL1_CANDIDATES: usize = 32;

/// The most level-1 points sharing a block tile and a parallel-k split.
pub const PER_TILE: usize = 2;

/// Every point of the space for a product of `shape` on `target` (see the module docs), in
/// the order of [`schedule_space`], parts ascending.
pub fn full_space(shape: &MatmulShape, target: &GpuTarget) -> Vec<SimtChoice> {
    schedule_space(&SimtLimits::for_arch(target.arch))
        .into_iter()
        .flat_map(|schedule| {
            k_part_options(shape, &schedule, target)
                .into_iter()
                .map(move |k_parts| SimtChoice { schedule, k_parts })
        })
        .collect()
}

/// The level-1 points: the [`LEVEL1_CANDIDATES`] of [`full_space`] with the lowest
/// [`estimated_cycles`], at most [`PER_TILE`] per block tile and parallel-k split (ties in
/// space order).
pub fn promising(shape: &MatmulShape, target: &GpuTarget) -> Vec<SimtChoice> {
    let mut ranked: Vec<(f64, SimtChoice)> = full_space(shape, target)
        .into_iter()
        .map(|c| (estimated_cycles(shape, &c, target), c))
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
    use crate::schedule::matmul_anchor::MIN_K_PER_PART;
    use crate::templates::matmul_simt::Batch;
    use crate::Arch;

    fn h100() -> GpuTarget {
        GpuTarget::for_arch(Arch::SM90)
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
        let off = GpuTarget {
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
            let target = GpuTarget { arch, ..h100() };
            let full = full_space(&shape, &target);
            let one = promising(&shape, &target);
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
        let best = promising(&big, &h100())[0];
        let [bm, bn] = best.schedule.block_tile();
        assert!(bm * bn >= 64 * 64, "{:?}", best);
    }
}
