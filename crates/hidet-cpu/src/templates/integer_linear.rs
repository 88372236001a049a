//! The 8-bit product of activations by a constant weight stored in panels, rows of the result
//! stored as they come: `C[r, n] = Σ_{k<K} X[r, k] · W[n, k]` for `uint8` activations `X`
//! `[R, K]` (a transformer's tokens) and an `int8` weight stored as
//! `[⌈N/NR⌉, Kp/4, NR, 4]` panels (`NR` = [`LINEAR_PANEL_WIDTH`] columns, four consecutive `k`
//! of a column side by side, zeros past `N` and `K`), the anchor of `hidet::IntegerLinear`.
//!
//! Each thread takes panels of `MR` rows of `X` (and, when there are fewer row panels than
//! threads, a share of the column panels). It packs a row panel once as `[Kp/4][MR]` words of
//! four bytes (rows copied along `k`, then interleaved word by word; zero past `K` and past the
//! last row), then for every column panel keeps an
//! `MR × NR/lanes` tile of `i32 × lanes` accumulators: per group of four `k`, each row's word
//! is broadcast and multiplied into the panel's vectors, read in place, by
//! [`Intrinsic::DotU8I8`]. The tile goes through a small buffer to the stores of `C`, row by
//! row and contiguous, that an epilogue is fused into.

use crate::error::TemplateError;
use crate::target::CpuTarget;
use crate::templates::integer_matmul::{
    accumulate, broadcast_word, padded_depth, spill, store_tile, zero_tile,
};
use hidet_ir::prelude::*;

/// Columns per weight panel.
pub const LINEAR_PANEL_WIDTH: i64 = 32;

/// The sizes of one product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntegerLinearShape {
    /// Rows of `X` and `C`.
    pub rows: i64,
    /// Columns of `C`.
    pub n: i64,
    /// The reduction length.
    pub k: i64,
}

/// The register tile and thread count of one instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntegerLinearSchedule {
    /// 32-bit lanes per vector: 16 (AVX-512) or 8; divides [`LINEAR_PANEL_WIDTH`].
    pub lanes: u16,
    /// Rows of `X` per register tile.
    pub mr: i64,
    pub threads: i64,
}

/// The largest packed row panel a thread keeps on its stack (bytes).
const MAX_PACKED_BYTES: i64 = 1 << 20;

impl IntegerLinearSchedule {
    /// The level-0 choice for `target`: 16-lane vectors and 6-row tiles with AVX-512BW (12
    /// accumulators), else 8-lane vectors and 2-row tiles (8 accumulators, leaving registers
    /// for the 16-bit fallback of AVX2).
    pub fn for_target(target: &CpuTarget, threads: i64) -> Self {
        let (lanes, mr) = if target.features.avx512bw {
            (16, 6)
        } else {
            (8, 2)
        };
        IntegerLinearSchedule {
            lanes,
            mr,
            threads: threads.max(1),
        }
    }

    fn validate(&self, shape: &IntegerLinearShape) -> Result<(), TemplateError> {
        let lanes = i64::from(self.lanes);
        if !matches!(self.lanes, 8 | 16)
            || LINEAR_PANEL_WIDTH % lanes != 0
            || self.mr < 1
            || self.threads < 1
        {
            return Err(TemplateError::InvalidSchedule(format!(
                "{self:?} for the integer linear product"
            )));
        }
        if shape.rows < 1 || shape.n < 1 || shape.k < 1 {
            return Err(TemplateError::InvalidShape(format!(
                "an integer linear product needs positive sizes, got {shape:?}"
            )));
        }
        if 2 * padded_depth(shape.k) * self.mr > MAX_PACKED_BYTES {
            return Err(TemplateError::InvalidShape(format!(
                "a packed row panel of {}×{} bytes exceeds {MAX_PACKED_BYTES}",
                self.mr,
                padded_depth(shape.k)
            )));
        }
        Ok(())
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The kernel `name(X: u8[rows, k], W: i8[⌈n/NR⌉, Kp/4, NR, 4], C: i32[rows, n])` (see the
/// module docs). Errors: a shape or schedule the template cannot run.
pub fn integer_linear(
    name: &str,
    shape: &IntegerLinearShape,
    schedule: &IntegerLinearSchedule,
) -> Result<Function, TemplateError> {
    schedule.validate(shape)?;
    let s = *shape;
    let (lanes, mr, nr) = (schedule.lanes, schedule.mr, LINEAR_PANEL_WIDTH);
    let vecs = nr / i64::from(lanes);
    let k4 = padded_depth(s.k) / 4;
    let i32v = DataType::vector(ScalarType::I32, lanes);
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let x = fb.tensor_param("X", DataType::U8, [s.rows, s.k]);
    let col_panels = ceil_div(s.n, nr);
    let w = fb.tensor_param("W", DataType::I8, [col_panels, k4, nr, 4]);
    let c = fb.tensor_param("C", DataType::I32, [s.rows, s.n]);
    let row_panels = ceil_div(s.rows, mr);
    // Column panels are shared out when row panels are too few to keep every thread busy.
    let splits = ceil_div(schedule.threads, row_panels).min(col_panels);
    let per_split = ceil_div(col_panels, splits);
    let tasks = row_panels * splits;
    let per_thread = ceil_div(tasks, schedule.threads);
    let busy = ceil_div(tasks, per_thread);
    fb.for_range_with("t", busy, LoopKind::Parallel, |fb, t| {
        let packed = fb.register_tensor("packed", DataType::U8, row_major([k4, mr, 4]));
        let staged = fb.register_tensor("staged", DataType::U8, row_major([mr, k4 * 4]));
        let acc = fb.register_tensor("acc", i32v, row_major([mr, vecs]));
        let tile = fb.register_tensor("tile", DataType::I32, row_major([mr, nr]));
        fb.for_range("item", per_thread, |fb, item| {
            let task = &t * per_thread + &item;
            fb.if_then(task.lt(tasks), |fb| {
                let r0 = (&task / splits) * mr;
                let first_panel = (&task % splits) * per_split;
                // Pack the row panel: each row copied along `k` (where a computed operand, such
                // as activations quantized on the fly, vectorizes), zero past `K` and past the
                // last row; then four consecutive k of a row side by side, one word at a time.
                let kp = k4 * 4;
                fb.for_range("r", mr, |fb, r| {
                    let row = &r0 + &r;
                    let copy = |fb: &mut FunctionBuilder| {
                        fb.for_range_with("k", s.k, LoopKind::Vectorize, |fb, k| {
                            let value = x.at([row.clone(), k.clone()]);
                            fb.store(&staged, [r.clone(), k], value);
                        });
                        if kp > s.k {
                            fb.for_range("k", kp - s.k, |fb, k| {
                                let at = [r.clone(), k + s.k];
                                fb.store(&staged, at, Expr::zero(DataType::U8));
                            });
                        }
                    };
                    let zero = |fb: &mut FunctionBuilder| {
                        fb.for_range_with("k", kp, LoopKind::Vectorize, |fb, k| {
                            fb.store(&staged, [r.clone(), k], Expr::zero(DataType::U8));
                        });
                    };
                    fb.if_then_else(row.lt(s.rows), copy, zero);
                });
                fb.for_range("g", k4, |fb, g| {
                    for r in 0..mr {
                        let word = staged.at([Expr::int(r), &g * 4]);
                        let word = Expr::call(
                            Intrinsic::VectorLoad {
                                dtype: DataType::I32,
                            },
                            vec![word.address()],
                        );
                        let at = packed.at([g.clone(), Expr::int(r), Expr::int(0)]);
                        fb.call(Intrinsic::VectorStore, vec![at.address(), word]);
                    }
                });
                fb.for_range("cp", per_split, |fb, cp| {
                    let panel = &first_panel + &cp;
                    fb.if_then(panel.lt(col_panels), |fb| {
                        zero_tile(fb, &acc, mr, vecs, i32v);
                        fb.for_range("g", k4, |fb, g| {
                            let weights: Vec<Expr> = (0..vecs)
                                .map(|v| {
                                    let at = w.at([
                                        panel.clone(),
                                        g.clone(),
                                        Expr::int(v * i64::from(lanes)),
                                        Expr::int(0),
                                    ]);
                                    Expr::call(
                                        Intrinsic::VectorLoad { dtype: i32v },
                                        vec![at.address()],
                                    )
                                })
                                .collect();
                            for r in 0..mr {
                                let at = packed.at([g.clone(), Expr::int(r), Expr::int(0)]);
                                let word = broadcast_word(at, lanes);
                                // The row's four bytes times each weight vector.
                                accumulate(fb, &acc, r, &weights, |w| (word.clone(), w));
                            }
                        });
                        spill(fb, &acc, &tile, mr, vecs, lanes);
                        let n0 = &panel * nr;
                        let at = |r: &Expr, col: Expr| vec![&r0 + r, col];
                        store_tile(fb, &tile, &c, at, (&r0, s.rows), (&n0, nr, s.n), mr);
                    });
                });
            });
        });
    });
    Ok(fb.finish())
}
