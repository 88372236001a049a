//! The SIMT fp32 matmul template of the Hidet paper (§4, Fig. 7), written
//! once with task mappings and instantiated for any schedule of its
//! hardware-centric space.
//!
//! `C[M, N] = A[M, K] · B[K, N]`, all row-major fp32. One thread block
//! computes a `BM × BN` tile of `C`:
//! - the block's threads form
//!   `block_map = spatial(WM, WN) * repeat(OM, ON) * lanes(LM, LN) * repeat(IM, IN)`:
//!   a block-level spatial mapping of warps, then the warp mapping
//!   `repeat(outer) * spatial(lane layout) * repeat(inner)`, so
//!   `BM = WM·OM·LM·IM` and `BN = WN·ON·LN·IN`;
//! - each `BK`-slice of `A` and `B` is copied global → registers → shared
//!   with `auto_map` copy mappings over all threads;
//! - double buffering in shared memory *and* registers: while tile `k0` is
//!   multiplied out of shared buffer `k0 % 2`, tile `k0 + 1` is prefetched
//!   from global memory into registers and stored to the other buffer
//!   afterwards; inside a tile the fragments for step `k1 + 1` are loaded
//!   from shared memory into the other register buffer while step `k1` is
//!   computed;
//! - `M`, `N`, `K` are arbitrary: loads outside the matrices read zero and
//!   the epilogue stores only in-bounds elements;
//! - batched products ([`build_batched`]) run one grid layer per batch entry
//!   on `blockIdx.z`, an operand of batch 1 broadcast.

use crate::templates::levels::{for_each_levels, unrolled};
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Dim, Expr, Var};
use hidet_ir::function::{IRModule, Target};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::layout::row_major;
use hidet_ir::mapping::{
    auto_map, column_spatial, repeat_unrolled, spatial, MappingError, TaskMapping,
};
use std::fmt;

/// The order in which a warp's 32 lanes are laid out over its `LM × LN` grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaneOrder {
    /// Consecutive lanes run along `N` (`spatial(LM, LN)`).
    RowMajor,
    /// Consecutive lanes run along `M` (`spatial(LM, LN)` in column-major order).
    ColumnMajor,
}

/// One point of the template's schedule space. Every field is a property of
/// the hardware mapping, none a divisor of the input shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulSimtSchedule {
    /// Warps per block along `M` and `N` (`WM × WN`).
    pub block_warps: [i64; 2],
    /// Repeats of the lane grid per warp (`OM × ON`).
    pub warp_outer: [i64; 2],
    /// The lane grid (`LM × LN`, `LM·LN = 32`).
    pub lanes: [i64; 2],
    pub lane_order: LaneOrder,
    /// The contiguous tile each thread computes per repeat (`IM × IN`).
    pub warp_inner: [i64; 2],
    /// The k-tile `BK`.
    pub block_k: i64,
}

/// Shared memory a block may declare statically; a schedule whose two buffers need more
/// keeps them in dynamic shared memory (the runtime raises the kernel's limit at launch,
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
pub const STATIC_SHARED_LIMIT: i64 = 48 * 1024;

/// Hardware limits a schedule must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimtLimits {
    pub max_threads_per_block: i64,
    /// Shared memory per block, in bytes (above [`STATIC_SHARED_LIMIT`], dynamic).
    pub max_shared_bytes: i64,
    /// Registers per thread the compiler may use (architectural maximum).
    pub max_registers_per_thread: i64,
    /// Registers per SM, which caps `threads × registers per thread`.
    pub registers_per_sm: i64,
}

impl Default for SimtLimits {
    /// The limits of sm_80 and sm_90 with static shared memory.
    fn default() -> Self {
        SimtLimits {
            max_threads_per_block: 1024,
            max_shared_bytes: 48 * 1024,
            max_registers_per_thread: 255,
            registers_per_sm: 65536,
        }
    }
}

impl SimtLimits {
    /// The limits of `arch` with its opt-in shared memory per block
    /// ([`crate::Arch::max_shared_bytes_per_block`]: sm_80 163 KiB, sm_86/sm_89 99 KiB,
    /// sm_90 227 KiB), so the schedule space includes tiles in dynamic shared memory.
    pub fn for_arch(arch: crate::Arch) -> SimtLimits {
        SimtLimits {
            max_shared_bytes: arch.max_shared_bytes_per_block() as i64,
            ..SimtLimits::default()
        }
    }

    /// The loosest limits of any supported architecture (sm_90's 227 KiB of shared memory):
    /// what instantiating a schedule checks; the architecture's own limit is the schedule
    /// chooser's to apply ([`SimtLimits::for_arch`]).
    pub fn largest() -> SimtLimits {
        SimtLimits::for_arch(crate::Arch::SM90)
    }
}

/// Why a schedule or a problem cannot be instantiated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MatmulSimtError {
    #[error("invalid schedule {schedule}: {reason}")]
    InvalidSchedule { schedule: String, reason: String },
    #[error(
        "matmul sizes must be positive and every matrix below 2^31 elements, got m={m} n={n} k={k}"
    )]
    BadShape { m: i64, n: i64, k: i64 },
    #[error(
        "batch {batch} (operands {a_batch} and {b_batch}): each operand's batch must be the \
         batch or 1, and the batch in 1..=65535 (grid z)"
    )]
    BadBatch {
        batch: i64,
        a_batch: i64,
        b_batch: i64,
    },
    #[error(
        "parallel-k reduction of {parts} parts of shape {shape:?}: parts and sizes must be \
         positive and the workspace below 2^31 elements"
    )]
    BadReduction { parts: i64, shape: Vec<i64> },
    #[error(transparent)]
    Mapping(#[from] MappingError),
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

impl MatmulSimtSchedule {
    /// The block tile `[BM, BN]`.
    pub fn block_tile(&self) -> [i64; 2] {
        [0, 1]
            .map(|d| self.block_warps[d] * self.warp_outer[d] * self.lanes[d] * self.warp_inner[d])
    }

    /// Threads per block (`32 · WM · WN`).
    pub fn threads(&self) -> i64 {
        32 * self.block_warps[0] * self.block_warps[1]
    }

    /// Static shared memory of the two `A` and `B` buffers, in bytes.
    pub fn shared_bytes(&self) -> i64 {
        let [bm, bn] = self.block_tile();
        2 * self.block_k * (bm + bn) * 4
    }

    /// Dynamic shared memory a block of this schedule launches with: its buffers' bytes when
    /// they exceed [`STATIC_SHARED_LIMIT`] (they then live there), else 0 (static).
    pub fn dynamic_shared_bytes(&self) -> i64 {
        let bytes = self.shared_bytes();
        if bytes > STATIC_SHARED_LIMIT {
            bytes
        } else {
            0
        }
    }

    /// Elements of `C` each thread accumulates.
    pub fn accumulators_per_thread(&self) -> i64 {
        self.warp_outer[0] * self.warp_outer[1] * self.warp_inner[0] * self.warp_inner[1]
    }

    /// An estimate of the registers per thread (ptxas lands within a few
    /// registers of it on sm_80/sm_90): accumulators,
    /// two fragment buffers, the global prefetch registers and a fixed
    /// allowance for addresses and loop counters.
    pub fn estimated_registers(&self) -> i64 {
        let [bm, bn] = self.block_tile();
        let frag_a = self.warp_outer[0] * self.warp_inner[0];
        let frag_b = self.warp_outer[1] * self.warp_inner[1];
        let prefetch = ceil_div(bm * self.block_k, self.threads())
            + ceil_div(bn * self.block_k, self.threads());
        self.accumulators_per_thread() + 2 * (frag_a + frag_b) + prefetch + 32
    }

    /// A short unique name, usable in identifiers and file names, e.g.
    /// `w2x2_o2x2_l4x8r_i4x4_k8`.
    pub fn tag(&self) -> String {
        let order = match self.lane_order {
            LaneOrder::RowMajor => "r",
            LaneOrder::ColumnMajor => "c",
        };
        format!(
            "w{}x{}_o{}x{}_l{}x{}{order}_i{}x{}_k{}",
            self.block_warps[0],
            self.block_warps[1],
            self.warp_outer[0],
            self.warp_outer[1],
            self.lanes[0],
            self.lanes[1],
            self.warp_inner[0],
            self.warp_inner[1],
            self.block_k
        )
    }

    /// The lane layout as a task mapping over the warp's 32 lanes.
    pub fn lane_mapping(&self) -> Result<TaskMapping, MappingError> {
        match self.lane_order {
            LaneOrder::RowMajor => spatial(self.lanes.to_vec()),
            LaneOrder::ColumnMajor => column_spatial(self.lanes.to_vec()),
        }
    }

    /// `spatial(WM, WN) * repeat(OM, ON) * lanes * repeat(IM, IN)` over the
    /// block's threads; its task shape is the block tile `[BM, BN]`.
    pub fn block_mapping(&self) -> Result<TaskMapping, MappingError> {
        Ok(spatial(self.block_warps.to_vec())?
            * repeat_unrolled(self.warp_outer.to_vec())?
            * self.lane_mapping()?
            * repeat_unrolled(self.warp_inner.to_vec())?)
    }

    /// The rows (`d = 0`, for `A`) or columns (`d = 1`, for `B`) of the block
    /// tile a thread reads: `block_mapping` with the other dimension's
    /// repeats removed. Task index `d` is the row/column; the other index is
    /// the lane's coordinate and carries no meaning.
    fn fragment_mapping(&self, d: usize) -> Result<TaskMapping, MappingError> {
        let keep = |v: [i64; 2]| {
            let mut v = v;
            v[1 - d] = 1;
            v.to_vec()
        };
        Ok(spatial(self.block_warps.to_vec())?
            * repeat_unrolled(keep(self.warp_outer))?
            * self.lane_mapping()?
            * repeat_unrolled(keep(self.warp_inner))?)
    }

    /// The global → shared copy mapping of a `rows × cols` tile over the
    /// block's threads (consecutive threads read consecutive columns).
    fn copy_mapping(&self, rows: i64, cols: i64) -> Result<TaskMapping, MappingError> {
        unrolled(&auto_map(&[rows, cols], self.threads())?)
    }

    /// Checks the schedule against the template's structure and `limits`.
    pub fn validate(&self, limits: &SimtLimits) -> Result<(), MatmulSimtError> {
        let fail = |reason: String| {
            Err(MatmulSimtError::InvalidSchedule {
                schedule: self.tag(),
                reason,
            })
        };
        let all = [
            self.block_warps,
            self.warp_outer,
            self.lanes,
            self.warp_inner,
            [self.block_k, 1],
        ];
        if all.iter().flatten().any(|&v| v <= 0) {
            return fail("every factor must be positive".into());
        }
        if self.lanes[0] * self.lanes[1] != 32 {
            return fail(format!(
                "the lane grid {}x{} does not have 32 lanes",
                self.lanes[0], self.lanes[1]
            ));
        }
        let threads = self.threads();
        if threads > limits.max_threads_per_block {
            return fail(format!(
                "{threads} threads exceed {}",
                limits.max_threads_per_block
            ));
        }
        if self.shared_bytes() > limits.max_shared_bytes {
            return fail(format!(
                "{} bytes of shared memory exceed {}",
                self.shared_bytes(),
                limits.max_shared_bytes
            ));
        }
        let [bm, bn] = self.block_tile();
        for (what, rows, cols) in [("A", bm, self.block_k), ("B", self.block_k, bn)] {
            if (rows * cols) % threads != 0 || auto_map(&[rows, cols], threads).is_err() {
                return fail(format!(
                    "the {rows}x{cols} tile of {what} cannot be spread evenly over {threads} threads"
                ));
            }
        }
        let register_cap = limits
            .max_registers_per_thread
            .min(limits.registers_per_sm / threads);
        if self.estimated_registers() > register_cap {
            return fail(format!(
                "about {} registers per thread exceed {register_cap}",
                self.estimated_registers()
            ));
        }
        Ok(())
    }
}

impl fmt::Display for MatmulSimtSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [bm, bn] = self.block_tile();
        write!(
            f,
            "block {bm}x{bn}x{} | warps {}x{} | outer {}x{} | lanes {}x{} {:?} | inner {}x{} | {} threads",
            self.block_k,
            self.block_warps[0],
            self.block_warps[1],
            self.warp_outer[0],
            self.warp_outer[1],
            self.lanes[0],
            self.lanes[1],
            self.lane_order,
            self.warp_inner[0],
            self.warp_inner[1],
            self.threads()
        )
    }
}

/// Every valid schedule of the space: warps per block, warp repeats, lane
/// layouts, per-thread tiles and k-tiles from the lists below, filtered by
/// [`MatmulSimtSchedule::validate`]. The space does not depend on the
/// problem size; it depends on the architecture through `limits`
/// ([`SimtLimits::for_arch`]: tiles whose buffers exceed 48 KiB use dynamic shared memory).
pub fn schedule_space(limits: &SimtLimits) -> Vec<MatmulSimtSchedule> {
    let block_warps = [[1, 1], [1, 2], [2, 1], [2, 2], [2, 4], [4, 2], [4, 4]];
    let warp_outer = [[1, 1], [1, 2], [2, 1], [2, 2]];
    let lanes = [
        ([4, 8], LaneOrder::RowMajor),
        ([8, 4], LaneOrder::RowMajor),
        ([4, 8], LaneOrder::ColumnMajor),
        ([8, 4], LaneOrder::ColumnMajor),
        ([2, 16], LaneOrder::RowMajor),
        ([16, 2], LaneOrder::ColumnMajor),
    ];
    let warp_inner = [[2, 2], [4, 4], [4, 8], [8, 4], [8, 8]];
    let block_k = [4, 8, 16, 32];
    let mut space = Vec::new();
    for &bw in &block_warps {
        for &wo in &warp_outer {
            for &(ln, order) in &lanes {
                for &wi in &warp_inner {
                    for &bk in &block_k {
                        let s = MatmulSimtSchedule {
                            block_warps: bw,
                            warp_outer: wo,
                            lanes: ln,
                            lane_order: order,
                            warp_inner: wi,
                            block_k: bk,
                        };
                        if s.validate(limits).is_ok() {
                            space.push(s);
                        }
                    }
                }
            }
        }
    }
    space
}

/// A fixed, diverse sample of the space (the paper's 128×128×8 schedule
/// first), used by the `matmul_cuda` example and the compile tests: block
/// tiles from 32×16 to 256×32, 64 to 512 threads, all four lane layouts,
/// per-thread tiles 2×2 to 8×4 and k-tiles 4, 8 and 16. Every entry is
/// valid under [`SimtLimits::default`].
pub fn showcase_schedules() -> Vec<MatmulSimtSchedule> {
    let s = |block_warps, warp_outer, lanes, lane_order, warp_inner, block_k| MatmulSimtSchedule {
        block_warps,
        warp_outer,
        lanes,
        lane_order,
        warp_inner,
        block_k,
    };
    use LaneOrder::{ColumnMajor as Col, RowMajor as Row};
    vec![
        s([4, 2], [2, 2], [4, 8], Row, [4, 4], 8),
        s([2, 2], [2, 2], [8, 4], Row, [4, 4], 8),
        s([2, 4], [1, 1], [4, 8], Col, [4, 4], 16),
        s([1, 2], [2, 1], [8, 4], Col, [2, 2], 4),
        s([4, 4], [1, 1], [4, 8], Row, [4, 4], 8),
        s([2, 2], [1, 2], [2, 16], Row, [8, 4], 8),
        s([2, 1], [2, 2], [16, 2], Col, [4, 4], 4),
    ]
}

/// The kernel's name for a schedule.
pub fn kernel_name(schedule: &MatmulSimtSchedule) -> String {
    format!("matmul_simt_{}", schedule.tag())
}

/// Instantiates the template for `C[m, n] = A[m, k] · B[k, n]` with
/// `schedule`: a CUDA module with the kernel ([`kernel_name`]) and a host
/// launcher `<kernel>_launch(a, b, c)`. The kernel's parameters are
/// `a`, `b`, `c` (row-major fp32 tensors) and it runs on a
/// `ceil(n / BN) × ceil(m / BM)` grid of [`MatmulSimtSchedule::threads`] threads.
///
/// Fails for an invalid schedule (under [`SimtLimits::largest`]; a schedule whose buffers
/// exceed 48 KiB launches with them in dynamic shared memory,
/// [`MatmulSimtSchedule::dynamic_shared_bytes`]) or for
/// non-positive sizes or matrices of 2^31 elements or more (indices are `i32`).
pub fn build(
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSimtSchedule,
) -> Result<IRModule, MatmulSimtError> {
    build_general(None, m, n, k, schedule, 1)
}

/// The batch of a batched product: `C[b] = A[b'] · B[b'']`, where an operand's batch index is
/// `b` when its batch is `batch`, or 0 when its batch is 1 (broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub batch: i64,
    pub a_batch: i64,
    pub b_batch: i64,
}

/// [`build`] for a batched product: `a: [a_batch, m, k]`, `b: [b_batch, k, n]`,
/// `c: [batch, m, n]` (row-major fp32), one grid layer per batch entry on `blockIdx.z`
/// (`batch ≤ 65535`); an operand of batch 1 is broadcast. Every batch entry is the rank-2
/// kernel's tile loop.
pub fn build_batched(
    batch: Batch,
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSimtSchedule,
) -> Result<IRModule, MatmulSimtError> {
    check_batch(batch)?;
    build_general(Some(batch), m, n, k, schedule, 1)
}

/// How a parallel-k product splits its reduction: `parts` parts of `tiles_per_part` k-tiles
/// each (the last part may hold fewer real tiles; its loads past `k` read zero). Every part
/// holds at least one real tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KSplit {
    pub parts: i64,
    pub tiles_per_part: i64,
}

impl KSplit {
    /// The split of `k` in k-tiles of `block_k` into at most `parts` parts (fewer when there
    /// are fewer tiles, or when fewer parts of the same length cover them).
    pub fn new(k: i64, block_k: i64, parts: i64) -> KSplit {
        let tiles = ceil_div(k.max(1), block_k.max(1));
        let tiles_per_part = ceil_div(tiles, parts.clamp(1, tiles));
        KSplit {
            parts: ceil_div(tiles, tiles_per_part),
            tiles_per_part,
        }
    }
}

/// The partial-product kernel of a parallel-k (split-k) product: [`build`] or
/// [`build_batched`] (`batch: None` or `Some`) with the reduction over `k` split into
/// `KSplit::new(k, BK, k_parts).parts` parts `P` along a leading output axis:
/// `c: [P, m, n]` (rank 2) or `[P, batch, m, n]`, `c[p, …] = Σ_{k in part p} a·b`. The grid
/// runs `batch · P` layers on `blockIdx.z` (part fastest), which must stay ≤ 65535. The parts
/// are summed by [`build_k_reduce`]'s kernel. With `k_parts = 1` this is exactly
/// [`build`]/[`build_batched`].
pub fn build_parallel_k(
    batch: Option<Batch>,
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSimtSchedule,
    k_parts: i64,
) -> Result<IRModule, MatmulSimtError> {
    if let Some(b) = batch {
        check_batch(b)?;
    }
    if k_parts < 1 {
        return Err(MatmulSimtError::InvalidSchedule {
            schedule: schedule.tag(),
            reason: format!("{k_parts} k parts"),
        });
    }
    build_general(batch, m, n, k, schedule, k_parts)
}

/// Threads per block of the parallel-k reduction kernel.
pub const REDUCE_THREADS: i64 = 256;

/// The reduction kernel of a parallel-k product: `c[idx] = Σ_{p < parts} partial[p, idx]`
/// (parts summed in order), `partial: [parts, out_shape…]`, `c: [out_shape…]`, fp32; one
/// output element per thread (`spatial(out_shape)` over the grid's threads), or, when the
/// last dimension is a multiple of 4, four consecutive elements per thread read with one
/// vector load per part and stored one by one; on as many blocks of [`REDUCE_THREADS`] as
/// that takes. The task's epilogue is fused onto this kernel's stores of `c`.
pub fn build_k_reduce(
    name: &str,
    parts: i64,
    out_shape: &[i64],
) -> Result<hidet_ir::function::Function, MatmulSimtError> {
    let total = out_shape
        .iter()
        .try_fold(1i64, |t, &d| (d > 0).then(|| t.checked_mul(d)).flatten());
    let limit = i64::from(i32::MAX);
    let Some(total) =
        total.filter(|&t| parts >= 1 && t.checked_mul(parts).is_some_and(|e| e <= limit))
    else {
        return Err(MatmulSimtError::BadReduction {
            parts,
            shape: out_shape.to_vec(),
        });
    };
    let lanes: u16 = match out_shape.last() {
        Some(&last) if last % 4 == 0 => 4,
        _ => 1,
    };
    let v = i64::from(lanes);
    let blocks = ceil_div(total / v, REDUCE_THREADS);
    let mut fb =
        FunctionBuilder::cuda_kernel(name, [blocks, 1, 1].map(Expr::int), [REDUCE_THREADS, 1, 1]);
    let partial_shape: Vec<i64> = std::iter::once(parts)
        .chain(out_shape.iter().copied())
        .collect();
    let partial = fb.tensor_param("partial", DataType::F32, partial_shape);
    let c = fb.tensor_param("c", DataType::F32, out_shape.to_vec());
    let worker = Expr::block_idx(Dim::X) * REDUCE_THREADS + Expr::thread_idx(Dim::X);
    let mut vector_shape = out_shape.to_vec();
    if let Some(last) = vector_shape.last_mut() {
        *last /= v;
    }
    fb.for_each(spatial(vector_shape)?.on(worker), |fb, idx| {
        let mut first = idx.to_vec();
        if let Some(last) = first.last_mut() {
            *last = last.clone() * v;
        }
        let at =
            |p: Expr| -> Vec<Expr> { std::iter::once(p).chain(first.iter().cloned()).collect() };
        if lanes == 1 {
            let acc = fb.var("acc", partial.at(at(Expr::int(0))));
            fb.for_range("p", parts - 1, |fb, p| {
                fb.assign(&acc, acc.expr() + partial.at(at(p + 1)));
            });
            fb.store(&c, first.clone(), acc.expr());
            return;
        }
        let load = |p: Expr| {
            Expr::call(
                Intrinsic::VectorLoad {
                    dtype: DataType::F32.with_lanes(lanes),
                },
                vec![partial.at(at(p)).address()],
            )
        };
        let acc = fb.var("acc", load(Expr::int(0)));
        fb.for_range("p", parts - 1, |fb, p| {
            fb.assign(&acc, acc.expr() + load(p + 1));
        });
        for l in 0..lanes {
            let mut index = first.clone();
            if let Some(last) = index.last_mut() {
                *last = last.clone() + i64::from(l);
            }
            let lane = Expr::call(Intrinsic::ExtractLane { lane: l }, vec![acc.expr()]);
            fb.store(&c, index, lane);
        }
    });
    Ok(fb.finish())
}

fn check_batch(batch: Batch) -> Result<(), MatmulSimtError> {
    let Batch {
        batch: nb,
        a_batch,
        b_batch,
    } = batch;
    let fits = |x: i64| x == nb || x == 1;
    if !(1..=65535).contains(&nb) || !fits(a_batch) || !fits(b_batch) {
        return Err(MatmulSimtError::BadBatch {
            batch: nb,
            a_batch,
            b_batch,
        });
    }
    Ok(())
}

fn build_general(
    batch: Option<Batch>,
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSimtSchedule,
    k_parts: i64,
) -> Result<IRModule, MatmulSimtError> {
    let limit = i64::from(i32::MAX);
    let nb = batch.map_or(1, |b| b.batch);
    let (ab, bb) = batch.map_or((1, 1), |b| (b.a_batch, b.b_batch));
    let too_big = |rows: i64, x: i64, y: i64| rows.checked_mul(x * y).is_none_or(|e| e > limit);
    if m <= 0 || n <= 0 || k <= 0 || too_big(ab, m, k) || too_big(bb, k, n) || too_big(nb, m, n) {
        return Err(MatmulSimtError::BadShape { m, n, k });
    }
    schedule.validate(&SimtLimits::largest())?;
    let s = schedule;
    let [bm, bn] = s.block_tile();
    let bk = s.block_k;
    let threads = s.threads();
    let split = KSplit::new(k, bk, k_parts);
    let parts = split.parts;
    // The k-tiles this block multiplies: `tiles_per_part` from tile `part · tiles_per_part`.
    let k_tiles = split.tiles_per_part;
    if nb * parts > 65535 {
        return Err(MatmulSimtError::BadBatch {
            batch: nb * parts,
            a_batch: ab,
            b_batch: bb,
        });
    }
    if parts > 1 && too_big(parts * nb, m, n) {
        return Err(MatmulSimtError::BadShape { m, n, k });
    }
    let name = if parts > 1 {
        format!("{}_p{parts}", kernel_name(s))
    } else {
        kernel_name(s)
    };

    let block_map = s.block_mapping()?;
    let frag_a_map = s.fragment_mapping(0)?;
    let frag_b_map = s.fragment_mapping(1)?;
    let copy_a_map = s.copy_mapping(bm, bk)?;
    let copy_b_map = s.copy_mapping(bk, bn)?;
    let frag_a_len = s.warp_outer[0] * s.warp_inner[0];
    let frag_b_len = s.warp_outer[1] * s.warp_inner[1];

    let grid = [ceil_div(n, bn), ceil_div(m, bm), nb * parts].map(Expr::int);
    let mut fb = FunctionBuilder::cuda_kernel(name.clone(), grid, [threads, 1, 1]);
    if threads <= 32 {
        // With `__launch_bounds__(32)` alone, ptxas (CUDA 12, sm_90) caps a kernel near 80
        // registers and spills where the fused im2col arithmetic needs more; one block per SM
        // as the minimum lets it allocate what the kernel needs (no spills).
        fb.min_blocks_per_sm(1);
    }
    let lead = |rows: i64, dims: [i64; 2]| -> Vec<i64> {
        batch.map(|_| rows).into_iter().chain(dims).collect()
    };
    let a = fb.tensor_param("a", DataType::F32, lead(ab, [m, k]));
    let b = fb.tensor_param("b", DataType::F32, lead(bb, [k, n]));
    // A parallel-k product writes one partial product per part, on a leading axis.
    let c_shape = |lead_dims: Vec<i64>| -> Vec<i64> {
        (parts > 1)
            .then_some(parts)
            .into_iter()
            .chain(lead_dims)
            .collect()
    };
    let c = fb.tensor_param("c", DataType::F32, c_shape(lead(nb, [m, n])));
    // blockIdx.z = batch entry · parts + part.
    let (bz, part) = if parts > 1 {
        (
            Expr::block_idx(Dim::Z) / parts,
            Expr::block_idx(Dim::Z) % parts,
        )
    } else {
        (Expr::block_idx(Dim::Z), Expr::int(0))
    };
    let k_tile0 = &part * k_tiles;
    // Each operand's leading index: none for the rank-2 kernel, the batch entry, or 0.
    let index_of = |rows: i64| -> Vec<Expr> {
        match batch {
            None => vec![],
            Some(_) if rows == 1 => vec![Expr::int(0)],
            Some(_) => vec![bz.clone()],
        }
    };
    let (a_lead, b_lead) = (index_of(ab), index_of(bb));
    let c_lead: Vec<Expr> = (parts > 1)
        .then(|| part.clone())
        .into_iter()
        .chain(index_of(nb))
        .collect();

    // The double-buffered tiles: static shared memory, or views of the dynamic shared
    // memory when they exceed the static limit (`B` after `A`, 16-byte aligned).
    let (smem_a, smem_b) = if s.dynamic_shared_bytes() > 0 {
        fb.dynamic_shared_bytes(Expr::int(s.dynamic_shared_bytes()));
        let dynamic = fb.declare(
            "smem",
            hidet_ir::ty::Type::pointer_to(hidet_ir::ty::Type::Data(DataType::F32)),
            hidet_ir::stmt::Scope::Shared,
        );
        let a = fb.view(
            "smem_a",
            DataType::F32,
            row_major([2, bk, bm]),
            dynamic.at([0]).address(),
        );
        let b = fb.view(
            "smem_b",
            DataType::F32,
            row_major([2, bk, bn]),
            dynamic.at([2 * bk * bm]).address(),
        );
        (a, b)
    } else {
        (
            fb.shared_tensor("smem_a", DataType::F32, row_major([2, bk, bm])),
            fb.shared_tensor("smem_b", DataType::F32, row_major([2, bk, bn])),
        )
    };
    let acc = fb.register_tensor(
        "acc",
        DataType::F32,
        row_major([block_map.tasks_per_worker()]),
    );
    let frag_a = fb.register_tensor("frag_a", DataType::F32, row_major([2, frag_a_len]));
    let frag_b = fb.register_tensor("frag_b", DataType::F32, row_major([2, frag_b_len]));
    let ldg_a = fb.register_tensor(
        "ldg_a",
        DataType::F32,
        row_major([copy_a_map.tasks_per_worker()]),
    );
    let ldg_b = fb.register_tensor(
        "ldg_b",
        DataType::F32,
        row_major([copy_b_map.tasks_per_worker()]),
    );

    let tid = Expr::thread_idx(Dim::X);
    let m0 = Expr::block_idx(Dim::Y) * bm;
    let n0 = Expr::block_idx(Dim::X) * bn;
    let tile = Tiles {
        a: &a,
        b: &b,
        a_lead: &a_lead,
        b_lead: &b_lead,
        m,
        n,
        k,
        bk,
        k_tile0: &k_tile0,
        m0: &m0,
        n0: &n0,
        tid: &tid,
    };

    for_each_levels(&mut fb, &block_map, tid.clone(), |fb, t| {
        fb.store(&acc, [t.slot.clone()], Expr::f32(0.0));
    });
    tile.load_global(
        &mut fb,
        &copy_a_map,
        &copy_b_map,
        &ldg_a,
        &ldg_b,
        Expr::int(0),
    );
    tile.store_shared(
        &mut fb,
        &copy_a_map,
        &copy_b_map,
        &ldg_a,
        &ldg_b,
        &smem_a,
        &smem_b,
        Expr::int(0),
    );
    fb.sync_threads();

    fb.for_range("k0", k_tiles, |fb, k0| {
        let buf = &k0 % 2;
        fb.if_then((&k0 + 1).lt(k_tiles), |fb| {
            tile.load_global(fb, &copy_a_map, &copy_b_map, &ldg_a, &ldg_b, &k0 + 1);
        });
        let load_fragments = |fb: &mut FunctionBuilder, k1: Expr, reg_buf: Expr| {
            for_each_levels(fb, &frag_a_map, tid.clone(), |fb, t| {
                let v = smem_a.at([buf.clone(), k1.clone(), t.index[0].clone()]);
                fb.store(&frag_a, [reg_buf.clone(), t.slot.clone()], v);
            });
            for_each_levels(fb, &frag_b_map, tid.clone(), |fb, t| {
                let v = smem_b.at([buf.clone(), k1.clone(), t.index[1].clone()]);
                fb.store(&frag_b, [reg_buf.clone(), t.slot.clone()], v);
            });
        };
        load_fragments(fb, Expr::int(0), Expr::int(0));
        fb.for_range_with(
            "k1",
            bk,
            hidet_ir::stmt::LoopKind::Unroll(None),
            |fb, k1| {
                fb.if_then((&k1 + 1).lt(bk), |fb| {
                    load_fragments(fb, &k1 + 1, (&k1 + 1) % 2);
                });
                let cur = &k1 % 2;
                for_each_levels(fb, &block_map, tid.clone(), |fb, t| {
                    let (outer, inner) = (&t.levels[1], &t.levels[3]);
                    let ia = &outer[0] * s.warp_inner[0] + inner[0].clone();
                    let ib = &outer[1] * s.warp_inner[1] + inner[1].clone();
                    let prod = frag_a.at([cur.clone(), ia]) * frag_b.at([cur.clone(), ib]);
                    fb.store(&acc, [t.slot.clone()], acc.at([t.slot.clone()]) + prod);
                });
            },
        );
        fb.if_then((&k0 + 1).lt(k_tiles), |fb| {
            tile.store_shared(
                fb,
                &copy_a_map,
                &copy_b_map,
                &ldg_a,
                &ldg_b,
                &smem_a,
                &smem_b,
                (&k0 + 1) % 2,
            );
        });
        fb.sync_threads();
    });

    for_each_levels(&mut fb, &block_map, tid.clone(), |fb, t| {
        let row = &m0 + t.index[0].clone();
        let col = &n0 + t.index[1].clone();
        fb.if_then(row.lt(m).and(col.lt(n)), |fb| {
            let index: Vec<Expr> = c_lead
                .iter()
                .cloned()
                .chain([row.clone(), col.clone()])
                .collect();
            fb.store(&c, index, acc.at([t.slot.clone()]));
        });
    });
    let kernel = fb.finish();

    let mut launcher = FunctionBuilder::host_launcher(format!("{name}_launch"));
    let la = launcher.tensor_param("a", DataType::F32, lead(ab, [m, k]));
    let lb = launcher.tensor_param("b", DataType::F32, lead(bb, [k, n]));
    let lc = launcher.tensor_param("c", DataType::F32, c_shape(lead(nb, [m, n])));
    launcher.launch(&kernel, vec![la.expr(), lb.expr(), lc.expr()]);
    let launcher = launcher.finish();

    Ok(IRModule::new(name, Target::Cuda)
        .with(kernel)
        .with(launcher))
}

/// The global-memory side of the block's tiles: bounds-checked loads of
/// k-tile slices into prefetch registers and their stores to shared memory.
struct Tiles<'a> {
    a: &'a Var,
    b: &'a Var,
    /// The leading (batch) indices of `a` and `b`: empty for the rank-2 kernel.
    a_lead: &'a [Expr],
    b_lead: &'a [Expr],
    m: i64,
    n: i64,
    k: i64,
    bk: i64,
    /// The first k-tile of this block's part (0 without parallel-k).
    k_tile0: &'a Expr,
    m0: &'a Expr,
    n0: &'a Expr,
    tid: &'a Expr,
}

impl Tiles<'_> {
    /// `ldg_a ← A[m0.., (k_tile0 + k_tile)·BK..]`, `ldg_b ← B[(k_tile0 + k_tile)·BK.., n0..]`, zero
    /// outside the matrices.
    fn load_global(
        &self,
        fb: &mut FunctionBuilder,
        copy_a: &TaskMapping,
        copy_b: &TaskMapping,
        ldg_a: &Var,
        ldg_b: &Var,
        k_tile: Expr,
    ) {
        let k_base = (self.k_tile0 + k_tile) * self.bk;
        for_each_levels(fb, copy_a, self.tid.clone(), |fb, t| {
            let row = self.m0 + t.index[0].clone();
            let col = &k_base + t.index[1].clone();
            let slot = t.slot.clone();
            fb.if_then_else(
                row.lt(self.m).and(col.lt(self.k)),
                |fb| {
                    let index = self
                        .a_lead
                        .iter()
                        .cloned()
                        .chain([row.clone(), col.clone()]);
                    fb.store(ldg_a, [slot.clone()], self.a.at(index))
                },
                |fb| fb.store(ldg_a, [slot.clone()], Expr::f32(0.0)),
            );
        });
        for_each_levels(fb, copy_b, self.tid.clone(), |fb, t| {
            let row = &k_base + t.index[0].clone();
            let col = self.n0 + t.index[1].clone();
            let slot = t.slot.clone();
            fb.if_then_else(
                row.lt(self.k).and(col.lt(self.n)),
                |fb| {
                    let index = self
                        .b_lead
                        .iter()
                        .cloned()
                        .chain([row.clone(), col.clone()]);
                    fb.store(ldg_b, [slot.clone()], self.b.at(index))
                },
                |fb| fb.store(ldg_b, [slot.clone()], Expr::f32(0.0)),
            );
        });
    }

    /// `smem_a[buf, kk, i] ← ldg_a`, `smem_b[buf, kk, j] ← ldg_b` (A is
    /// stored transposed so a k-step reads a contiguous row).
    #[allow(clippy::too_many_arguments)]
    fn store_shared(
        &self,
        fb: &mut FunctionBuilder,
        copy_a: &TaskMapping,
        copy_b: &TaskMapping,
        ldg_a: &Var,
        ldg_b: &Var,
        smem_a: &Var,
        smem_b: &Var,
        buf: Expr,
    ) {
        for_each_levels(fb, copy_a, self.tid.clone(), |fb, t| {
            fb.store(
                smem_a,
                [buf.clone(), t.index[1].clone(), t.index[0].clone()],
                ldg_a.at([t.slot.clone()]),
            );
        });
        for_each_levels(fb, copy_b, self.tid.clone(), |fb, t| {
            fb.store(
                smem_b,
                [buf.clone(), t.index[0].clone(), t.index[1].clone()],
                ldg_b.at([t.slot.clone()]),
            );
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper_schedule() -> MatmulSimtSchedule {
        MatmulSimtSchedule {
            block_warps: [4, 2],
            warp_outer: [2, 2],
            lanes: [4, 8],
            lane_order: LaneOrder::RowMajor,
            warp_inner: [4, 4],
            block_k: 8,
        }
    }

    #[test]
    fn paper_schedule_is_valid_and_tiles_128x128() {
        let s = paper_schedule();
        assert_eq!(s.block_tile(), [128, 128]);
        assert_eq!(s.threads(), 256);
        assert_eq!(s.shared_bytes(), 2 * 8 * 256 * 4);
        s.validate(&SimtLimits::default()).unwrap();
    }

    #[test]
    fn block_mapping_covers_the_block_tile_once() {
        let s = MatmulSimtSchedule {
            block_warps: [2, 1],
            warp_outer: [1, 2],
            lanes: [8, 4],
            lane_order: LaneOrder::ColumnMajor,
            warp_inner: [2, 4],
            block_k: 8,
        };
        let map = s.block_mapping().unwrap();
        assert_eq!(map.task_shape(), s.block_tile().to_vec());
        assert_eq!(map.num_workers(), s.threads());
        let [bm, bn] = s.block_tile();
        let mut seen = vec![0u32; (bm * bn) as usize];
        for w in 0..s.threads() {
            for t in map.tasks_of(w) {
                seen[(t[0] * bn + t[1]) as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
    }

    #[test]
    fn invalid_schedules_are_rejected_with_a_reason() {
        let mut s = paper_schedule();
        s.lanes = [4, 4];
        assert!(matches!(
            s.validate(&SimtLimits::default()),
            Err(MatmulSimtError::InvalidSchedule { .. })
        ));
        let mut s = paper_schedule();
        s.block_k = 64;
        let err = s.validate(&SimtLimits::default()).unwrap_err().to_string();
        assert!(err.contains("shared memory"), "{err}");
        let mut s = paper_schedule();
        s.warp_inner = [8, 8];
        s.warp_outer = [2, 2];
        let err = s.validate(&SimtLimits::default()).unwrap_err().to_string();
        assert!(err.contains("registers"), "{err}");
    }

    #[test]
    fn space_is_nonempty_and_all_valid() {
        let space = schedule_space(&SimtLimits::default());
        assert!(space.len() >= 50, "only {} schedules", space.len());
        assert!(space.contains(&paper_schedule()));
        for s in &space {
            assert!(s.threads() <= 1024);
            assert!(s.shared_bytes() <= 48 * 1024);
        }
    }

    #[test]
    fn the_space_grows_with_the_architectures_shared_memory() {
        use crate::Arch;
        let base = schedule_space(&SimtLimits::default());
        assert!(base.iter().all(|s| s.dynamic_shared_bytes() == 0));
        for arch in [Arch::SM80, Arch::SM86, Arch::SM89, Arch::SM90] {
            let limits = SimtLimits::for_arch(arch);
            let space = schedule_space(&limits);
            let dynamic: Vec<_> = space
                .iter()
                .filter(|s| s.dynamic_shared_bytes() > 0)
                .collect();
            assert!(!dynamic.is_empty(), "{arch}");
            assert!(space.len() > base.len(), "{arch}");
            assert!(
                space
                    .iter()
                    .all(|s| s.shared_bytes() <= arch.max_shared_bytes_per_block() as i64),
                "{arch}"
            );
        }
        assert!(
            schedule_space(&SimtLimits::for_arch(Arch::SM86)).len()
                <= schedule_space(&SimtLimits::for_arch(Arch::SM90)).len()
        );
    }

    #[test]
    fn bad_reductions_are_errors() {
        for (parts, shape) in [
            (0, vec![4, 4]),
            (2, vec![0, 4]),
            (4, vec![1 << 16, 1 << 15]),
        ] {
            assert!(matches!(
                build_k_reduce("r", parts, &shape),
                Err(MatmulSimtError::BadReduction { .. })
            ));
        }
        assert!(build_k_reduce("r", 3, &[2, 5, 7]).is_ok());
    }

    #[test]
    fn bad_shapes_are_errors() {
        let s = paper_schedule();
        assert!(matches!(
            build(0, 5, 5, &s),
            Err(MatmulSimtError::BadShape { .. })
        ));
        assert!(matches!(
            build(1 << 20, 1 << 12, 5, &s),
            Err(MatmulSimtError::BadShape { .. })
        ));
        let module = build(257, 129, 33, &s).unwrap();
        assert_eq!(module.functions.len(), 2);
    }
}
