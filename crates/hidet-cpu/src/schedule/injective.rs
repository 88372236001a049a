//! Injective outputs: one parallel loop nest per output shape.

use super::error::ScheduleError;
use super::output_value;
use super::params::Kernel;
use super::threads::{bind_all, ceil_div, parallel_items, product, static_product, unravel};
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_shape, ComputeDef};
use hidet_ir::expr::Expr;
use hidet_ir::stmt::LoopKind;

/// Work items per thread below which rows are cut into column blocks.
const ITEMS_PER_THREAD: i64 = 4;
/// The smallest column block, in SIMD vectors.
const MIN_BLOCK_VECTORS: i64 = 16;

/// Emits the loop nest computing the outputs at `positions` (all of one
/// shape): the outer dimensions (flattened, and cut into column blocks when
/// there are too few rows to keep `threads` threads busy) are spread over
/// threads in contiguous chunks; the innermost dimension is a
/// `LoopKind::Vectorize` loop writing every output of the group.
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
