//! The 8-bit product of activations by a constant weight stored in panels, rows of the result
//! stored as they come: `C[r, n] = Σ_{k<K} X[r, k] · W[n, k]` for `uint8` activations `X`
//! `[R, K]` (a transformer's tokens) and an `int8` weight stored as
//! `[⌈N/NR⌉, Kp/G, NR, G]` panels (`NR` = [`LINEAR_PANEL_WIDTH`] columns, `G` consecutive `k`
//! of a column side by side, zeros past `N` and `K`), the anchor of `hidet::IntegerLinear`.
//!
//! Each thread takes panels of `MR` rows of `X` (and, when there are fewer row panels than
//! threads, a share of the column panels). It packs a row panel once as `[Kp/G][MR]` 32-bit
//! words (rows copied along `k`, then interleaved word by word; zero past `K` and past the
//! last row), then for every column panel keeps an `MR × NR/lanes` tile of `i32 × lanes`
//! accumulators: per group of `k`, each row's word is broadcast and multiplied into the
//! panel's vectors, read in place. With `G` = 4 a word is four bytes and the product
//! [`Intrinsic::DotU8I8`] (one `vpdpbusd` with VNNI); with `G` = 2 a word is two bytes
//! zero-extended to 16 bits when packed and the product [`Intrinsic::DotI16I8`] (the weights
//! sign-extended as they are loaded, one `vpmaddwd`): without VNNI, half the instructions and
//! registers of emulating `dot_u8i8`. The tile goes through a small buffer to the stores of
//! `C`, row by row and contiguous, that an epilogue is fused into.

use crate::error::TemplateError;
use crate::target::{CpuFeatures, CpuTarget};
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
    /// Consecutive `k` of a column side by side in the weight panels: 4 or 2.
    pub depth_group: i64,
}

/// The depth group of the weight panels for `target` (see the module docs): 4 where the
/// schedule's vectors multiply four byte pairs per lane in one instruction (AVX-512 VNNI,
/// AVX-VNNI), else 2. Measured on AVX2 (Zen 3, bert_small_dynq at batch 8): see
/// `BENCHMARKS.md`, "int8 products without VNNI".
pub fn depth_group_for(target: &CpuTarget) -> i64 {
    let lanes = IntegerLinearSchedule::for_target(target, 1).lanes;
    if multiplies_quads(&target.features, lanes) {
        4
    } else {
        2
    }
}

/// Whether `features` multiply four byte pairs per 32-bit lane in one instruction on vectors
/// of `lanes` lanes (`vpdpbusd`: AVX-512 VNNI on 16 lanes; AVX-VNNI, or AVX-512 VNNI with VL,
/// on 8), as the C dialect's `dot_u8i8` helper tests.
fn multiplies_quads(features: &CpuFeatures, lanes: u16) -> bool {
    let f = features;
    if lanes == 16 {
        f.avx512vnni
    } else {
        f.avxvnni || (f.avx512vnni && f.avx512vl)
    }
}

/// The register tile and thread count of one instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntegerLinearSchedule {
    /// 32-bit lanes per vector: 16 (AVX-512) or 8; divides [`LINEAR_PANEL_WIDTH`].
    pub lanes: u16,
    /// Rows of `X` per register tile.
    pub mr: i64,
    /// Vectors per tile row: a tile covers `vecs · lanes` columns of a panel, a divisor of
    /// [`LINEAR_PANEL_WIDTH`].
    pub vecs: i64,
    pub threads: i64,
}

/// The largest packed row panel a thread keeps on its stack (bytes).
const MAX_PACKED_BYTES: i64 = 1 << 20;

impl IntegerLinearSchedule {
    /// The level-0 choice for `target`: 16-lane vectors and 12 × 32-column tiles with
    /// AVX-512BW (24 accumulators: each weight vector, streamed from L2 once per row panel,
    /// serves twice the rows of 6 × 32 tiles; BERT-small's 8-bit products at batch 8 on a
    /// Sapphire Rapids core 1.06–1.15× faster, batch 1 even); with 8-lane VNNI, 2 × 32 tiles
    /// (8 accumulators); else
    /// (AVX2) 6 × 16 tiles: 12 accumulators, 2 weight vectors sign-extended once per pair of
    /// `k` for 6 rows (on Zen 3, `llvm-mca` of the inner loops: 1.21 multiply-adds per
    /// cycle against 0.88 for 2 × 32 tiles, which sign-extend four vectors for two rows).
    pub fn for_target(target: &CpuTarget, threads: i64) -> Self {
        let f = &target.features;
        let (lanes, mr, vecs) = if f.avx512bw {
            (16, 12, 2)
        } else if multiplies_quads(f, 8) {
            (8, 2, 4)
        } else {
            (8, 6, 2)
        };
        IntegerLinearSchedule {
            lanes,
            mr,
            vecs,
            threads: threads.max(1),
        }
    }

    fn validate(&self, shape: &IntegerLinearShape) -> Result<(), TemplateError> {
        let lanes = i64::from(self.lanes);
        if !matches!(self.lanes, 8 | 16)
            || LINEAR_PANEL_WIDTH % lanes != 0
            || self.vecs < 1
            || (LINEAR_PANEL_WIDTH / lanes) % self.vecs != 0
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
        if !matches!(shape.depth_group, 2 | 4) {
            return Err(TemplateError::InvalidShape(format!(
                "weight panels in depth groups of {}; the template reads 2 or 4",
                shape.depth_group
            )));
        }
        // Staged and packed copies of the row panel (of the rows a tile takes), 16 bits per
        // byte of `X` with pairs.
        let (rows, depth) = (self.mr.min(shape.rows), padded_depth(shape.k));
        let bytes = depth * rows * if shape.depth_group == 2 { 4 } else { 2 };
        if bytes > MAX_PACKED_BYTES {
            return Err(TemplateError::InvalidShape(format!(
                "the packed copies of a row panel ({rows} rows of depth {depth}) take {bytes} \
                 bytes, more than {MAX_PACKED_BYTES}"
            )));
        }
        Ok(())
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The kernel `name(X: u8[rows, k], W: i8[⌈n/NR⌉, Kp/G, NR, G], C: i32[rows, n])` (see the
/// module docs). Errors: a shape or schedule the template cannot run.
pub fn integer_linear(
    name: &str,
    shape: &IntegerLinearShape,
    schedule: &IntegerLinearSchedule,
) -> Result<Function, TemplateError> {
    schedule.validate(shape)?;
    let s = *shape;
    let (lanes, nr) = (schedule.lanes, LINEAR_PANEL_WIDTH);
    // Fewer rows than a tile (a decoder's token): as many rows as there are, and then, at
    // two rows or fewer, whole panels per tile (no rows of zeros multiplied, each weight
    // vector loaded once).
    let mr = schedule.mr.min(s.rows);
    let vecs = if mr < schedule.mr && mr <= 2 {
        nr / i64::from(lanes)
    } else {
        schedule.vecs
    };
    // Columns per register tile, and tiles per panel.
    let width = vecs * i64::from(lanes);
    let blocks = nr / width;
    let group = s.depth_group;
    let groups = padded_depth(s.k) / group;
    // The element type of a packed row: a byte, or a byte zero-extended to 16 bits.
    let i32v = DataType::vector(ScalarType::I32, lanes);
    let (element, dot, weight_vector) = if group == 4 {
        (DataType::U8, Intrinsic::DotU8I8 { lanes }, i32v)
    } else {
        let bytes = DataType::vector(ScalarType::I8, 2 * lanes);
        (DataType::U16, Intrinsic::DotI16I8 { lanes }, bytes)
    };
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let x = fb.tensor_param("X", DataType::U8, [s.rows, s.k]);
    let col_panels = ceil_div(s.n, nr);
    let w = fb.tensor_param("W", DataType::I8, [col_panels, groups, nr, group]);
    let c = fb.tensor_param("C", DataType::I32, [s.rows, s.n]);
    let row_panels = ceil_div(s.rows, mr);
    // Column panels are shared out when row panels are too few to keep every thread busy.
    let splits = ceil_div(schedule.threads, row_panels).min(col_panels);
    let per_split = ceil_div(col_panels, splits);
    let tasks = row_panels * splits;
    let per_thread = ceil_div(tasks, schedule.threads);
    let busy = ceil_div(tasks, per_thread);
    fb.for_range_with("t", busy, LoopKind::Parallel, |fb, t| {
        let packed = fb.register_tensor("packed", element, row_major([groups, mr, group]));
        let staged = fb.register_tensor("staged", element, row_major([mr, groups * group]));
        let acc = fb.register_tensor("acc", i32v, row_major([mr, vecs]));
        let tile = fb.register_tensor("tile", DataType::I32, row_major([mr, width]));
        fb.for_range("item", per_thread, |fb, item| {
            let task = &t * per_thread + &item;
            fb.if_then(task.lt(tasks), |fb| {
                let r0 = (&task / splits) * mr;
                let first_panel = (&task % splits) * per_split;
                // Pack the row panel: each row copied along `k` (where a computed operand, such
                // as activations quantized on the fly, vectorizes), zero past `K` and past the
                // last row; then `group` consecutive k of a row side by side, one word at a time.
                let kp = groups * group;
                fb.for_range("r", mr, |fb, r| {
                    let row = &r0 + &r;
                    let copy = |fb: &mut FunctionBuilder| {
                        fb.for_range_with("k", s.k, LoopKind::Vectorize, |fb, k| {
                            let value = x.at([row.clone(), k.clone()]).cast(element);
                            fb.store(&staged, [r.clone(), k], value);
                        });
                        if kp > s.k {
                            fb.for_range("k", kp - s.k, |fb, k| {
                                let at = [r.clone(), k + s.k];
                                fb.store(&staged, at, Expr::zero(element));
                            });
                        }
                    };
                    let zero = |fb: &mut FunctionBuilder| {
                        fb.for_range_with("k", kp, LoopKind::Vectorize, |fb, k| {
                            fb.store(&staged, [r.clone(), k], Expr::zero(element));
                        });
                    };
                    fb.if_then_else(row.lt(s.rows), copy, zero);
                });
                fb.for_range("g", groups, |fb, g| {
                    for r in 0..mr {
                        let word = staged.at([Expr::int(r), &g * group]);
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
                    let in_panel = |fb: &mut FunctionBuilder, block: Expr| {
                        zero_tile(fb, &acc, mr, vecs, i32v);
                        fb.for_range("g", groups, |fb, g| {
                            let weights: Vec<Expr> = (0..vecs)
                                .map(|v| {
                                    let at = w.at([
                                        panel.clone(),
                                        g.clone(),
                                        &block * width + v * i64::from(lanes),
                                        Expr::int(0),
                                    ]);
                                    Expr::call(
                                        Intrinsic::VectorLoad {
                                            dtype: weight_vector,
                                        },
                                        vec![at.address()],
                                    )
                                })
                                .collect();
                            for r in 0..mr {
                                let at = packed.at([g.clone(), Expr::int(r), Expr::int(0)]);
                                let word = broadcast_word(at, lanes);
                                // The row's word times each weight vector.
                                let operands = |w| (word.clone(), w);
                                accumulate(fb, dot.clone(), &acc, r, &weights, operands);
                            }
                        });
                        spill(fb, &acc, &tile, mr, vecs, lanes);
                        let n0 = &panel * nr + &block * width;
                        let at = |r: &Expr, col: Expr| vec![&r0 + r, col];
                        store_tile(fb, &tile, &c, at, (&r0, s.rows), (&n0, width, s.n), mr);
                    };
                    fb.if_then(panel.lt(col_panels), |fb| {
                        if blocks == 1 {
                            in_panel(fb, Expr::int(0));
                        } else {
                            fb.for_range("block", blocks, in_panel);
                        }
                    });
                });
            });
        });
    });
    Ok(fb.finish())
}
