//! The fp32 matmul and batch-matmul template for the CPU:
//! `C[b, M, N] = A[b, M, K] · B[b, K, N]`, all row-major, written with task
//! mappings, and its hardware-centric schedule space.
//!
//! The schedule ([`MatmulSchedule`]) fixes a micro-kernel of `MR × NR`
//! outputs held in `MR × NR/W` SIMD registers of `W` lanes, cache blocks
//! `MC × NC × KC`, a thread count and a [`ThreadSplit`]. A spatial task
//! mapping over `[K-parts, batch, row panels, column panels]` gives every
//! thread a contiguous block of `MR`-row and `NR`-column panels (and of
//! `K` with parallel-k); the thread walks its block in `MC × NC` tiles.
//! For every tile and every `KC`-slice it packs `A` into `MR`-row panels
//! (unless [`ALayout`] says to read it in place) and `B` into `NR`-column
//! panels (thread-local buffers) and runs the micro-kernel over every pair
//! of panels (column panel by column panel, or row panel by row panel when `A` is
//! constant weights in panels and `C` is stored by rows); when `K` is one slice, `B` is
//! packed once per column block, for all its row blocks. When a tile has a single row
//! panel (matrix-vector products), a packed `B` panel would be read once,
//! so the micro-kernel instead copies each row of `B` it needs into a
//! one-row buffer that stays in L1. A `B` stored as 16-column panels
//! ([`BLayout::Panels`], constant weights prepacked at compile time) is
//! never copied: the micro-kernel reads its vectors in place.
//!
//! The output is fusion-friendly: sums over earlier `K`-slices are kept in
//! a thread-local partial tile (never in `C`), and the final value of every
//! element of `C` is written exactly once, by an element store
//! `C[b, i, j] = v` in a constant-trip, unrolled loop over the register
//! tile (which the C compiler turns into vector stores when the fused
//! epilogue is elementwise). With parallel-k the parts go to a local
//! buffer and a second parallel pass stores `C[b, i, j] = Σ parts`. `A` and
//! `B` are read only by element loads in the packing loops, so prologues
//! can be fused into both (see [`hidet_ir::fusion::fuse`]).
//!
//! Sizes need not be multiples of anything: the last row panel and the
//! last column panel run micro-kernels specialized for their (static)
//! sizes, so no work is spent on padding rows and every store is
//! unpredicated.

mod plan;
mod schedule;
mod space;
mod split;

pub use schedule::{
    ALayout, BLayout, CLayout, Layouts, MatmulSchedule, MatmulShape, ThreadGrid, ThreadSplit,
    B_PANEL_WIDTH, COLUMN_STORE_ROWS, PARALLEL_K_MAX_ELEMENTS,
};
pub use space::{
    heuristic_for_gathered_rows, heuristic_for_gathered_rows_stored_by_column,
    heuristic_for_product, heuristic_for_rows, heuristic_for_stored_rows_on_avx512,
    matmul_candidates, matmul_space, micro_kernels, product_cost, with_depth,
    AVX512_STORED_ROWS_TILE, DEEP_COLUMN_STORE,
};

use crate::error::TemplateError;
use hidet_ir::function::Function;

/// The kernel `name(A: f32[m, k], B: f32[k, n], C: f32[m, n])` computing
/// `C = A · B` with `schedule`. Fails on non-positive sizes, an invalid
/// schedule, or operands with `2^31` elements or more (indices are `i32`).
pub fn matmul_f32(
    name: &str,
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    matmul_f32_with_layout(name, m, n, k, ALayout::RowMajor, schedule)
}

/// [`matmul_f32`] for an `A` whose memory layout is `a_layout` (after
/// fusion, the layout of whatever its prologue reads).
pub fn matmul_f32_with_layout(
    name: &str,
    m: i64,
    n: i64,
    k: i64,
    a_layout: ALayout,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    let layouts = Layouts::of(a_layout, BLayout::RowMajor);
    matmul_f32_with_layouts(name, m, n, k, layouts, schedule)
}

/// [`matmul_f32_with_layout`] for a `B` stored as `layouts.b` and a `C` stored as
/// `layouts.c`; with [`BLayout::Panels`] the kernel's `B` parameter is the panels tensor
/// `[⌈n / 16⌉, k, 16]`. Fails also when the target's SIMD width does not divide the panel
/// width.
pub fn matmul_f32_with_layouts(
    name: &str,
    m: i64,
    n: i64,
    k: i64,
    layouts: Layouts,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    plan::build(name, &MatmulShape::plain(m, n, k), false, layouts, schedule)
}

/// The kernel `name(A: f32[a_batch, m, k], B: f32[b_batch, k, n],
/// C: f32[batch, m, n])` computing `C[b] = A[b'] · B[b'']` where an operand
/// of batch 1 is broadcast over the batch. Fails like [`matmul_f32`], and
/// when an operand's batch is neither 1 nor `batch`.
pub fn batch_matmul_f32(
    name: &str,
    shape: &MatmulShape,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    batch_matmul_f32_with_layout(name, shape, ALayout::RowMajor, schedule)
}

/// [`batch_matmul_f32`] for an `A` whose memory layout is `a_layout`: the packing orders
/// [`ALayout::RowMajor`] and [`ALayout::ColumnMajor`] and [`ALayout::InPlace`] (a batch of
/// gathered operands, a grouped direct convolution) apply to a batch; panels are refused.
pub fn batch_matmul_f32_with_layout(
    name: &str,
    shape: &MatmulShape,
    a_layout: ALayout,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    let layouts = Layouts::of(a_layout, BLayout::RowMajor);
    batch_matmul_f32_with_layouts(name, shape, layouts, schedule)
}

/// [`batch_matmul_f32_with_layout`] for an `A` stored as `layouts.a`, a `B` stored as
/// `layouts.b` and a `C` stored as `layouts.c`; with [`BLayout::Panels`] the kernel's `B`
/// parameter is the panels tensor `[b_batch, ⌈n / 16⌉, k, 16]` (each batch's matrix in
/// 16-column panels), with [`ALayout::Panels`] `{ rows }` its `A` parameter is
/// `[⌈m / rows⌉, k, rows]`, one matrix read by every batch (`a_batch` must be 1). Fails also
/// when the target's SIMD width does not divide the panel width.
pub fn batch_matmul_f32_with_layouts(
    name: &str,
    shape: &MatmulShape,
    layouts: Layouts,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    plan::build(name, shape, true, layouts, schedule)
}
