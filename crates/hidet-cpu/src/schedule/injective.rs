//! Injective outputs: one parallel loop nest per output shape.

use super::error::ScheduleError;
use super::output_value;
use super::params::Kernel;
use super::threads::{bind_all, ceil_div, parallel_items, product, static_product, unravel};
use super::vectorize::coefficient;
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_shape, ComputeDef};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, Var};
use hidet_ir::stmt::LoopKind;

/// Work items per thread below which rows are cut into column blocks.
const ITEMS_PER_THREAD: i64 = 4;
/// The smallest column block, in SIMD vectors.
const MIN_BLOCK_VECTORS: i64 = 16;

/// Innermost extents above this many elements are cut into blocks of [`TRANSPOSE_BLOCK`]
/// when the nest is reordered for a transposed read (see [`transposed_axis`]).
const TRANSPOSE_MAX_INNER: i64 = 128;
/// The innermost block of a nest reordered for a transposed read, in elements: its reads
/// touch this many cache lines, which stay in L1 while the contiguous axis runs over them.
const TRANSPOSE_BLOCK: i64 = 64;

/// Emits the loop nest computing the outputs at `positions` (all of one
/// shape): the outer dimensions (flattened, and cut into column blocks when
/// there are too few rows to keep `threads` threads busy) are spread over
/// threads in contiguous chunks; the innermost dimension is a
/// `LoopKind::Vectorize` loop writing every output of the group. A group that
/// reads an input across its innermost dimension with a stride, and contiguously
/// along an outer one (a transpose), runs that outer dimension just outside the
/// innermost, in blocks of the innermost (see [`transposed_axis`]).
pub(crate) fn emit_group(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    positions: &[usize],
    lanes: u16,
    threads: i64,
) -> Result<(), ScheduleError> {
    let Some(&first) = positions.first() else {
        return Ok(());
    };
    let shape: Vec<Expr> = tensor_shape(&def.outputs[first])
        .iter()
        .map(|d| kernel.extent(d))
        .collect();
    if static_product(&shape) == Some(0) {
        return Ok(());
    }
    let store_all = |fb: &mut FunctionBuilder, index: &[Expr]| {
        for &p in positions {
            let value = output_value(kernel, def, p, index);
            fb.store(&kernel.outputs[p], index.to_vec(), value);
        }
    };
    if let Some(axis) = transposed_axis(kernel, def, positions, &shape) {
        return emit_transposed(fb, &shape, axis, threads, store_all);
    }
    match shape.split_last() {
        None => {
            store_all(fb, &[]);
            Ok(())
        }
        Some((inner, outer)) => {
            let rows = product(outer);
            let (blocks, block) = column_blocks(rows.as_int(), inner.as_int(), lanes, threads);
            let items = match rows.as_int() {
                Some(r) => Expr::int(r * blocks),
                None => rows.clone(),
            };
            parallel_items(fb, &items, threads, |fb, item| {
                let (row, start) = if blocks == 1 {
                    (item, None)
                } else {
                    (&item / blocks, Some((&item % blocks) * block))
                };
                bind_all(fb, "i", &unravel(&row, outer), |fb, rho| {
                    let count = match &start {
                        None => inner.clone(),
                        Some(s) => Expr::int(block).min(inner - s),
                    };
                    fb.for_range_with("j", count, LoopKind::Vectorize, |fb, j| {
                        let col = match &start {
                            None => j,
                            Some(s) => s + j,
                        };
                        let mut index = rho;
                        index.push(col);
                        store_all(fb, &index);
                    });
                });
            })
        }
    }
}

/// The outer dimension of `shape` to run just outside the innermost one: the first that
/// some input read of the group's values walks with stride 1 while the innermost
/// dimension walks it with a stride of 2 or more (a transpose moving the read's contiguous
/// axis outward). Row after row of the innermost dimension, such a read touches one
/// cache line per element; running the contiguous dimension inside reuses each line for
/// as many elements as it holds, where the row-major order comes back to it only after
/// every row between. `None` when no read is strided that way, a read's offset is not
/// affine in the indices, a size is not constant, or the dimension is already innermost
/// but one.
fn transposed_axis(
    kernel: &Kernel,
    def: &ComputeDef,
    positions: &[usize],
    shape: &[Expr],
) -> Option<usize> {
    let extents: Vec<i64> = shape.iter().map(Expr::as_int).collect::<Option<_>>()?;
    let inner = extents.len().checked_sub(1)?;
    let axes: Vec<Var> = (0..extents.len())
        .map(|d| Var::new(format!("axis{d}"), DataType::I32))
        .collect();
    let index: Vec<Expr> = axes.iter().map(Var::expr).collect();
    let mut chosen = None;
    for &p in positions {
        output_value(kernel, def, p, &index).visit(&mut |e| {
            let ExprKind::TensorElement { tensor, indices } = e.kind() else {
                return;
            };
            let Some(t) = tensor.ty().as_tensor() else {
                return;
            };
            let offset = t.layout.offset(indices);
            let Some(stride) = coefficient(&offset, &axes[inner]) else {
                return;
            };
            if stride.abs() < 2 || chosen.is_some() {
                return;
            }
            chosen =
                (0..inner).find(|&d| extents[d] > 1 && coefficient(&offset, &axes[d]) == Some(1));
        });
    }
    let axis = chosen?;
    let later_outer = (axis + 1..inner).any(|d| extents[d] > 1);
    (later_outer || extents[inner] > TRANSPOSE_MAX_INNER).then_some(axis)
}

/// The nest of [`emit_group`] for a transposed read along outer dimension `axis` of
/// `shape` (constant extents): the other outer dimensions and blocks of the innermost one
/// are the parallel items; within one, `axis` runs, then the innermost block as a
/// `LoopKind::Vectorize` loop.
fn emit_transposed(
    fb: &mut FunctionBuilder,
    shape: &[Expr],
    axis: usize,
    threads: i64,
    store_all: impl Fn(&mut FunctionBuilder, &[Expr]),
) -> Result<(), ScheduleError> {
    let (inner, outer) = shape
        .split_last()
        .expect("a transposed axis implies rank 2 or more");
    let inner_len = inner
        .as_int()
        .expect("transposed_axis requires constant extents");
    let block = if inner_len > TRANSPOSE_MAX_INNER {
        TRANSPOSE_BLOCK
    } else {
        inner_len
    };
    let blocks = ceil_div(inner_len, block);
    let others: Vec<Expr> = (0..outer.len())
        .filter(|&d| d != axis)
        .map(|d| outer[d].clone())
        .collect();
    let items = Expr::int(
        static_product(&others).expect("transposed_axis requires constant extents") * blocks,
    );
    parallel_items(fb, &items, threads, |fb, item| {
        let (row, start) = (&item / blocks, (&item % blocks) * block);
        bind_all(fb, "i", &unravel(&row, &others), |fb, rho| {
            fb.let_in("j0", start, |fb, start| {
                fb.for_range("a", outer[axis].clone(), |fb, a| {
                    let count = Expr::int(block).min(inner - &start);
                    fb.for_range_with("j", count, LoopKind::Vectorize, |fb, j| {
                        let mut index = rho.clone();
                        index.insert(axis, a.clone());
                        index.push(&start + j);
                        store_all(fb, &index);
                    });
                });
            });
        });
    })
}

/// `(blocks per row, block length)`: one block per row when rows alone keep
/// every thread busy (or sizes are not constant); otherwise rows are cut
/// into blocks of whole SIMD vectors, at least `MIN_BLOCK_VECTORS` long.
fn column_blocks(rows: Option<i64>, inner: Option<i64>, lanes: u16, threads: i64) -> (i64, i64) {
    let (Some(rows), Some(inner)) = (rows, inner) else {
        return (1, 0);
    };
    let w = i64::from(lanes.max(1));
    let wanted = ITEMS_PER_THREAD * threads;
    if rows >= wanted || inner <= w * MIN_BLOCK_VECTORS {
        return (1, inner);
    }
    let most = ceil_div(inner, w * MIN_BLOCK_VECTORS);
    let blocks = ceil_div(wanted, rows).min(most).max(1);
    let block = ceil_div(ceil_div(inner, blocks), w) * w;
    (ceil_div(inner, block), block)
}
