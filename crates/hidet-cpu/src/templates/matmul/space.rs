//! The hardware-centric schedule space of the matmul template: micro-kernel
//! shapes chosen for the target's SIMD width and register file, cache
//! blocks, and thread splits. It depends on the target and the thread
//! count only, never on the problem's shape.

use super::schedule::{round_up, MatmulSchedule, ThreadSplit};
use crate::target::{Arch, CpuTarget};

/// The micro-kernel shapes `(MR, NR)` of `target`, best first (by the
/// loads per multiply-add of the register tile, `1/NR + 1/MR`). Each keeps
/// its `MR · NR/W` accumulators, the `NR/W` vectors of a `B` row and one
/// broadcast within the register file (32 vector registers with AVX-512
/// and NEON, 16 with AVX2 and SSE).
pub fn micro_kernels(target: &CpuTarget) -> Vec<(i64, i64)> {
    let lanes = target.f32_lanes();
    let kernels: &[(i64, i64)] = match (lanes, target.arch) {
        (16, _) => &[(14, 32), (12, 32), (6, 64), (8, 48), (8, 32), (4, 64)],
        (8, _) => &[(6, 16), (4, 24), (5, 16), (4, 16), (8, 8)],
        (4, Arch::Aarch64) => &[(8, 12), (12, 8), (6, 16), (8, 8), (4, 16)],
        (4, _) => &[(6, 8), (4, 12), (4, 8), (8, 4)],
        _ => &[(4, 4), (2, 8)],
    };
    kernels.to_vec()
}

/// Depths of a cache block in the space.
const KC_CHOICES: [i64; 3] = [128, 256, 384];
/// Approximate `(MC, NC)` cache blocks in the space, rounded up to the
/// micro-kernel.
const BLOCK_CHOICES: [(i64, i64); 4] = [(96, 256), (96, 512), (192, 512), (192, 1024)];
/// The `(mc, nc)` of [`BLOCK_CHOICES`] level 1 tries first.
const PREFERRED_BLOCK: (i64, i64) = BLOCK_CHOICES[2];

fn splits(threads: i64) -> Vec<ThreadSplit> {
    if threads > 1 {
        vec![
            ThreadSplit::Auto,
            ThreadSplit::Columns,
            ThreadSplit::Rows,
            ThreadSplit::ParallelK,
        ]
    } else {
        vec![ThreadSplit::Auto]
    }
}

/// The level-0 schedule for a problem of `m` rows: the target's default
/// ([`MatmulSchedule::for_target`]) unless `m` is smaller than its register tile, in which
/// case the micro-kernel of [`micro_kernels`] with the fewest rows that still covers `m`
/// (the widest among equals), with the preferred cache blocks of the space rounded to it
/// and the deepest `kc` whose `B` panel fits a 32 KiB L1 (at most the default's); the pick
/// is a schedule of [`matmul_space`]. Matrix-vector
/// products (`m = 1`) then use a short, wide tile instead of computing mostly padding.
pub fn heuristic_for_rows(target: &CpuTarget, threads: i64, m: i64) -> MatmulSchedule {
    let default = MatmulSchedule::for_target(target, threads);
    if m >= default.mr {
        return default;
    }
    let tile = micro_kernels(target)
        .into_iter()
        .filter(|&(mr, _)| mr >= m)
        .min_by_key(|&(mr, nr)| (mr, -nr));
    let Some((mr, nr)) = tile else {
        return default;
    };
    let l1_kc = (32 * 1024 / (4 * nr)).max(1);
    let kc = KC_CHOICES
        .iter()
        .copied()
        .filter(|&kc| kc <= l1_kc && kc <= default.kc)
        .max()
        .unwrap_or(default.kc);
    let (mc, nc) = PREFERRED_BLOCK;
    MatmulSchedule::new(
        mr,
        nr,
        default.lanes,
        round_up(mc, mr),
        round_up(nc, nr),
        kc,
        threads,
    )
}

/// Padded work, in percent of the first tile's, at or below which level 0 takes the second
/// register tile of [`micro_kernels`] instead of the first.
const SECOND_TILE_MAX_WORK_PERCENT: i64 = 97;

/// The level-0 schedule for an `m × n` product: [`heuristic_for_rows`] for products shorter
/// than the default tile; otherwise the default, unless the second register tile of
/// [`micro_kernels`] (the first two fill the register file alike) computes at least 3% less
/// padded work, `⌈m / MR⌉·MR × ⌈n / NR⌉·NR`: then that tile with the default's blocks. (32
/// rows are 5⅓ tiles of 6 but 8 of 4: on AVX2, 4×24 spares a 2-row edge tile whose
/// multiply-adds per load are a third of a full tile's. 128 rows by 768, 2304 or 3072
/// columns, 3% less work, as every product of BERT-base and GPT-2 at 128 tokens: level-1
/// tuning picks 4×24 too, the models 0.97–0.98× in an A/B; ResNet-50's 64 output channels by
/// 3136 pixels, 2.8% less, stay.) The pick is a schedule of [`matmul_space`].
pub fn heuristic_for_product(target: &CpuTarget, threads: i64, m: i64, n: i64) -> MatmulSchedule {
    let default = MatmulSchedule::for_target(target, threads);
    if m < default.mr {
        return heuristic_for_rows(target, threads, m);
    }
    let padded = |(mr, nr): (i64, i64)| round_up(m, mr) * round_up(n.max(1), nr);
    let kernels = micro_kernels(target);
    let (Some(&first), Some(&second)) = (kernels.first(), kernels.get(1)) else {
        return default;
    };
    if first != (default.mr, default.nr)
        || padded(second) * 100 > padded(first) * SECOND_TILE_MAX_WORK_PERCENT
    {
        return default;
    }
    default.with_tile(second.0, second.1)
}

/// The level-0 `kc` of `schedule` for a reduction of depth `k`: 384 (a choice of the space)
/// when the schedule's 256 would leave a ragged last block that 384 does not (`k` = 384,
/// 1152, …) and a `B` micro-panel of 384 rows still fits a 32 KiB L1 (`nr` ≤ 21 floats), else
/// unchanged. Each `K` block re-packs the packed operand and round-trips
/// the partial sums, so three blocks of 384 cost less than four of 256 and one of 128:
/// Inception-V3's four `3×1` convolutions at 8² (384 channels, `k` = 1152) 0.79× in the
/// model, the model 0.99×; ResNet-50 and MobileNet-V2 (`k` = 1152 and 384) even. Only a
/// schedule of [`matmul_space`] for `target` is picked.
pub fn with_depth(target: &CpuTarget, schedule: MatmulSchedule, k: i64) -> MatmulSchedule {
    const DEEP: i64 = 384;
    let ragged = |kc: i64| kc > 0 && k % kc != 0;
    let fits_l1 = DEEP * schedule.nr * 4 <= 32 * 1024;
    if schedule.kc == 256 && k > schedule.kc && ragged(schedule.kc) && !ragged(DEEP) && fits_l1 {
        let deeper = MatmulSchedule {
            kc: DEEP,
            ..schedule
        };
        if matmul_space(target, schedule.threads).contains(&deeper) {
            return deeper;
        }
    }
    schedule
}

/// The level-0 schedule for a product of `n` columns whose left operand is gathered in place
/// (a direct convolution, [`super::ALayout::InPlace`]): the micro-kernel of
/// [`micro_kernels`] with the narrowest tile that covers `n` (the most rows among equals),
/// so each gathered element is read by one tile row only, with the target default's cache
/// blocks; `None` when no tile is that wide.
pub fn heuristic_for_gathered_rows(
    target: &CpuTarget,
    threads: i64,
    n: i64,
) -> Option<MatmulSchedule> {
    let default = MatmulSchedule::for_target(target, threads);
    let (mr, nr) = micro_kernels(target)
        .into_iter()
        .filter(|&(_, nr)| nr >= n)
        .min_by_key(|&(mr, nr)| (nr, -mr))?;
    Some(default.with_tile(mr, nr))
}

/// Every schedule of the space for `target` and `threads` (tuning level 2),
/// with [`MatmulSchedule::for_target`] first. Each is valid and correct on
/// every shape.
pub fn matmul_space(target: &CpuTarget, threads: i64) -> Vec<MatmulSchedule> {
    let lanes = target.f32_lanes();
    let default = MatmulSchedule::for_target(target, threads);
    let mut space = vec![default];
    // The default's blocks with every micro-kernel (heuristic_for_gathered_rows).
    for (mr, nr) in micro_kernels(target) {
        let s = default.with_tile(mr, nr);
        if !space.contains(&s) {
            space.push(s);
        }
    }
    for (mr, nr) in micro_kernels(target) {
        for kc in KC_CHOICES {
            for (mc, nc) in BLOCK_CHOICES {
                for split in splits(threads) {
                    let s = MatmulSchedule {
                        split,
                        ..MatmulSchedule::new(
                            mr,
                            nr,
                            lanes,
                            round_up(mc, mr),
                            round_up(nc, nr),
                            kc,
                            threads,
                        )
                    };
                    if !space.contains(&s) {
                        space.push(s);
                    }
                }
            }
        }
    }
    space
}

/// The `count` most promising schedules of the space (tuning level 1):
/// the level-0 pick first, then, for each micro-kernel in order of
/// [`micro_kernels`], each thread split with the block that keeps one
/// `B` micro-panel (`KC × NR`) within 32 KiB, then the other blocks.
pub fn matmul_candidates(target: &CpuTarget, threads: i64, count: usize) -> Vec<MatmulSchedule> {
    let space = matmul_space(target, threads);
    let kernels = micro_kernels(target);
    let rank = |s: &MatmulSchedule| {
        let kernel = kernels
            .iter()
            .position(|&(mr, nr)| (mr, nr) == (s.mr, s.nr))
            .unwrap_or(kernels.len());
        let fits_l1 = s.kc * s.nr * 4 <= 32 * 1024;
        let largest_fitting_kc = s.kc * s.nr * 4 + 128 * s.nr * 4 > 32 * 1024;
        let preferred_block =
            round_up(PREFERRED_BLOCK.0, s.mr) == s.mc && round_up(PREFERRED_BLOCK.1, s.nr) == s.nc;
        let tier = match (fits_l1 && largest_fitting_kc, preferred_block) {
            (true, true) => 0,
            (true, false) | (false, true) => 1,
            (false, false) => 2,
        };
        (tier, kernel)
    };
    let (first, rest) = space.split_at(1);
    let mut ordered: Vec<MatmulSchedule> = rest.to_vec();
    ordered.sort_by_key(rank);
    first
        .iter()
        .copied()
        .chain(ordered)
        .take(count.max(1))
        .collect()
}
