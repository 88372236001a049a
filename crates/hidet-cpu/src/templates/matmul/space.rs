//! The hardware-centric schedule space of the matmul template: micro-kernel
//! shapes chosen for the target's SIMD width and register file, cache
//! blocks, and thread splits. It depends on the target and the thread
//! count only, never on the problem's shape.

use super::schedule::{round_up, MatmulSchedule, ThreadSplit, COLUMN_STORE_ROWS};
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

/// Multiply-adds a core issues per cycle, and the cycles before a multiply-add's sum can feed
/// the next one into the same accumulator: two pipes of latency 4, as Skylake, Ice Lake and
/// Zen 3 cores have.
const FMA_PER_CYCLE: i64 = 2;
const FMA_LATENCY: i64 = 4;

/// Register tiles of [`micro_kernels`] level 0 chooses among for a product: the first three,
/// which keep at least 10 accumulators busy.
const PRODUCT_TILES: usize = 3;

/// The least estimated saving, in percent of the default tile's [`product_cost`], for which
/// level 0 leaves the default tile: the estimate counts neither loads nor packing, so near
/// ties stay with the most-measured tile (a Winograd output transform of 6272 rows by 16
/// columns is 0.03% cheaper in 4×24 tiles by the estimate, 1.1× slower measured).
const PRODUCT_TILE_MIN_GAIN_PERCENT: i64 = 1;

/// The estimated cost, in cycles per step of `K` times [`FMA_PER_CYCLE`], of an `m × n`
/// product in `mr × nr` register tiles of `lanes`-wide vectors: a tile of `r ≤ mr` rows and
/// `v` vectors issues `r·v` multiply-adds into as many accumulators each step, and takes
/// `max(r·v / FMA_PER_CYCLE, FMA_LATENCY)` cycles: a short edge tile waits on its
/// accumulators rather than on the pipes.
pub fn product_cost(m: i64, n: i64, (mr, nr): (i64, i64), lanes: i64) -> i64 {
    let tile = |r: i64, v: i64| (r * v).max(FMA_PER_CYCLE * FMA_LATENCY);
    let rows = [(m / mr, mr), (i64::from(m % mr > 0), m % mr)];
    let cols = [
        (n / nr, nr / lanes),
        (i64::from(n % nr > 0), (n % nr + lanes - 1) / lanes),
    ];
    rows.iter()
        .flat_map(|&(rc, r)| cols.iter().map(move |&(cc, v)| rc * cc * tile(r, v)))
        .sum()
}

/// The register tile `(MR, NR)` and depth `kc` of [`heuristic_for_stored_rows_on_avx512`].
pub const AVX512_STORED_ROWS_TILE: (i64, i64, i64) = (6, 64, 128);

/// The level-0 schedule, on a core with AVX-512, for a product of `m` rows whose left operand
/// is read row by row as stored (a transformer's activations times its weights):
/// [`AVX512_STORED_ROWS_TILE`], the tile of fewest vector loads per multiply-add (`W/NR + 1/MR`:
/// 4 loads of `B` and 6 broadcasts for 24 multiply-adds), its `B` micro-panel of 128 × 64
/// floats filling a 32 KiB L1, with the preferred cache blocks. Level-1 tuning on a Zen 4
/// picked it or a tile as thin for every product of BERT-small at batch 8 and for 1024³
/// (1.1–1.35× faster than 14 × 32 with `mc` 756); on a Sapphire Rapids Xeon it made BERT-base,
/// GPT-2 and BERT-small at batch 8 1.07–1.1× faster end to end. `None` on other vector widths
/// and for `m` below the default tile's rows: products whose left operand is read through a
/// transpose or stored in panels (convolutions) keep the default (ResNet-18 at batch 8 was
/// 1.17× slower in 6-row tiles on the Zen 4).
pub fn heuristic_for_stored_rows_on_avx512(
    target: &CpuTarget,
    threads: i64,
    m: i64,
) -> Option<MatmulSchedule> {
    let default = MatmulSchedule::for_target(target, threads);
    if target.f32_lanes() != 16 || m < default.mr {
        return None;
    }
    let (mr, nr, kc) = AVX512_STORED_ROWS_TILE;
    let (mc, nc) = PREFERRED_BLOCK;
    Some(MatmulSchedule::new(
        mr,
        nr,
        default.lanes,
        mc,
        nc,
        kc,
        threads,
    ))
}

/// The level-0 schedule for an `m × n` product: [`heuristic_for_rows`] for products shorter
/// than the default tile; otherwise, among the first [`PRODUCT_TILES`] register tiles of
/// [`micro_kernels`], the one of least [`product_cost`] (the earliest among equals; the
/// default unless another saves [`PRODUCT_TILE_MIN_GAIN_PERCENT`]) with the default's blocks. What this weighs is the edge tiles: on AVX2,
/// 49 rows (a 7×7 image's pixels) are 8 tiles of 6 and a 1-row edge that waits 4 cycles for
/// 2 multiply-adds, but 9 tiles of 5 and a 4-row edge that does not wait, so 5×16; 32 or
/// 128 rows (BERT's and GPT-2's 128 tokens) take 4×24, whole tiles of 4 instead of a 2-row
/// edge; 64 rows keep 6×16 (its 4-row edge is as fast). Level-1 tuning of MobileNet-V2 and
/// GPT-2 picks the same tiles for these shapes. A left operand stored as panels of
/// `a_panel_rows` rows (constant weights, `super::ALayout::Panels`) keeps the tiles of as
/// many rows: a tile straddling two panels reads both (ResNet-50's 128-row products by
/// 784 pixels: 4×24 over panels of 6 rows 1.07× slower). The pick is a schedule of
/// [`matmul_space`].
pub fn heuristic_for_product(
    target: &CpuTarget,
    threads: i64,
    m: i64,
    n: i64,
    a_panel_rows: Option<i64>,
) -> MatmulSchedule {
    let default = MatmulSchedule::for_target(target, threads);
    if m < default.mr {
        return heuristic_for_rows(target, threads, m);
    }
    let lanes = i64::from(default.lanes);
    let n = n.max(1);
    let tiles = micro_kernels(target);
    let candidates = tiles
        .into_iter()
        .take(PRODUCT_TILES)
        .filter(|&(mr, _)| mr <= m && a_panel_rows.is_none_or(|rows| rows == mr));
    let default_cost = product_cost(m, n, (default.mr, default.nr), lanes);
    let cheapest = candidates
        .map(|tile| (tile, product_cost(m, n, tile, lanes)))
        .min_by_key(|&(_, cost)| cost)
        .filter(|&(_, cost)| cost * 100 <= default_cost * (100 - PRODUCT_TILE_MIN_GAIN_PERCENT));
    match cheapest {
        Some(((mr, nr), _)) => default.with_tile(mr, nr),
        None => default,
    }
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

/// The level-0 schedule for a product whose left operand is gathered in place (a direct
/// convolution) and whose output is stored column-major ([`super::CLayout::ColumnMajor`]: a
/// convolution computed pixels-as-rows and stored channels-first): the widest micro-kernel of
/// [`micro_kernels`] with [`COLUMN_STORE_ROWS`] rows, so each column of a finished tile is one
/// 8-float vector store rather than a run of scalar ones, with the target default's cache
/// blocks. `None` unless that tile is at least three vectors wide and the product fills it
/// (`n ≥ nr`): with fewer accumulators in flight the multiply-adds lose what the stores gain.
/// Measured on AVX-512 (2 threads): SqueezeNet 1.1's stem (27-deep window, 64 channels) at
/// batch 8 4.5 ms with `8 × 48`, against 8.5 ms with the `6 × 64` tile that covers the
/// columns and 5.6 ms with `14 × 32`; ResNet-50's 7×7 stem 0.91 ms against 1.50 ms; Inception-V3's (27 deep, 32 channels) 0.49 ms with
/// `8 × 32` against 0.34 ms with `14 × 32` stored by rows; on AVX2, the one-vector `8 × 8`
/// tile makes SqueezeNet's stem 1.3× slower.
///
/// A product too narrow for such a tile (`n` below three vectors) but at least
/// [`DEEP_COLUMN_STORE`] deep takes the narrowest tile of [`COLUMN_STORE_ROWS`] rows and two or
/// more vectors that covers `n`, with the space's preferred cache blocks: its multiply-adds
/// then outweigh its stores, which are a vector per column instead of scalars 64 KiB apart.
/// Measured on AVX-512 (2 threads, `scripts/ab_binaries.py`): a 7×7 stride-2 convolution of 3
/// channels to 32 at 256² (`K` = 147) 1.47 → 1.21 ms with `8 × 32` (`mc` 192; with the
/// default's blocks it was no faster), DETR's backbone 3.02 → 2.44 ms; at `K` = 27 (3×3 stems
/// of 32 channels) level-1 tuning keeps `14 × 32` stored by rows or gains under 1.1×.
pub fn heuristic_for_gathered_rows_stored_by_column(
    target: &CpuTarget,
    threads: i64,
    n: i64,
    k: i64,
) -> Option<MatmulSchedule> {
    let default = MatmulSchedule::for_target(target, threads);
    let lanes = i64::from(target.f32_lanes());
    let column_tiles = micro_kernels(target)
        .into_iter()
        .filter(|&(mr, _)| mr == COLUMN_STORE_ROWS);
    if let Some((mr, nr)) = column_tiles
        .clone()
        .filter(|&(_, nr)| nr >= 3 * lanes && nr <= n)
        .max_by_key(|&(_, nr)| nr)
    {
        return Some(default.with_tile(mr, nr));
    }
    if k < DEEP_COLUMN_STORE || n >= 3 * lanes {
        return None;
    }
    let (mr, nr) = column_tiles
        .filter(|&(_, nr)| nr >= 2 * lanes && nr >= n)
        .min_by_key(|&(_, nr)| nr)?;
    let (mc, nc) = PREFERRED_BLOCK;
    Some(MatmulSchedule::new(
        mr,
        nr,
        default.lanes,
        round_up(mc, mr),
        round_up(nc, nr),
        default.kc,
        threads,
    ))
}

/// The depth from which a product gathered in place and stored by column, too narrow for a
/// three-vector tile, takes a [`COLUMN_STORE_ROWS`]-row tile anyway (see
/// [`heuristic_for_gathered_rows_stored_by_column`]): between the 27 measured to keep the row
/// store and the 147 measured to gain from the column store.
pub const DEEP_COLUMN_STORE: i64 = 96;

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
