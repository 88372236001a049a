//! The 8-bit matrix product with 32-bit accumulation: `C[b, m, n] = Σ_{k<K} A[m, k] · X[b, k,
//! n]` for a signed 8-bit `A` (a quantized weight, rows padded to a multiple of four columns)
//! and an unsigned 8-bit `X` (quantized activations, a convolution's column matrix), the
//! anchor of `hidet::IntegerMatMul`.
//!
//! Each thread takes whole column tiles of `NR = lanes · vecs` columns of one batch. It packs
//! the tile's `X` into `P[K/4][NR][4]` (four consecutive `k` of a column side by side: four rows
//! copied along the columns, where a column matrix's reads are contiguous, then interleaved;
//! zero beyond `K` and beyond the last column), then for every panel of `MR` rows of `A` keeps an
//! `MR × vecs` tile of `i32 × lanes` accumulators: per group of four `k`, each row's four
//! weights (one 32-bit load) are broadcast and multiplied into every vector of `P` by
//! [`Intrinsic::DotU8I8`] (`vpdpbusd` with VNNI, 16-bit multiply-adds without). Rows past
//! `M` read the last row and are not stored; the tile goes through a small buffer to the
//! scalar stores of `C` that an epilogue is fused into.
//!
//! With `A` widened to `int16` ahead (a target without VNNI: see
//! [`crate::templates::integer_linear::depth_group_for`]), `k` goes by pairs instead: the
//! tile's `X` is packed as `[K/2][NR][2]` values zero-extended to 16 bits, each row's two
//! weights are one 32-bit broadcast, and the multiply-add is [`Intrinsic::DotI16`] (one
//! `vpmaddwd`; emulating `dot_u8i8` takes two, and registers to split the bytes).

use crate::error::TemplateError;
use crate::target::CpuTarget;
use hidet_ir::prelude::*;

/// The sizes of one integer product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntegerMatmulShape {
    /// Batches of `X` and `C` (`A` is shared).
    pub batch: i64,
    pub m: i64,
    pub n: i64,
    /// The reduction length (rows of `X`).
    pub k: i64,
    /// Columns `A` is stored with: `k` rounded up to a multiple of 4.
    pub a_cols: i64,
    /// Consecutive `k` multiplied together: 4 (`A` of `int8`, [`Intrinsic::DotU8I8`]) or 2
    /// (`A` of `int16`, [`Intrinsic::DotI16`]).
    pub depth_group: i64,
}

impl IntegerMatmulShape {
    /// The shape of a product by an `int8` `A`, when the sizes are positive; `a_cols` is `k`
    /// rounded up to 4.
    pub fn new(batch: i64, m: i64, n: i64, k: i64) -> Result<Self, TemplateError> {
        if batch < 1 || m < 1 || n < 1 || k < 1 {
            return Err(TemplateError::InvalidShape(format!(
                "an integer product needs positive sizes, got batch {batch}, {m}×{n}×{k}"
            )));
        }
        Ok(IntegerMatmulShape {
            batch,
            m,
            n,
            k,
            a_cols: padded_depth(k),
            depth_group: 4,
        })
    }

    /// The same product by `A` widened to `int16`, multiplied by pairs of `k`.
    pub fn widened(self) -> Self {
        IntegerMatmulShape {
            depth_group: 2,
            ..self
        }
    }
}

/// `k` rounded up to a multiple of 4: the columns of `A` as the template reads it.
pub fn padded_depth(k: i64) -> i64 {
    (k + 3) / 4 * 4
}

/// The register tile and thread count of one instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntegerMatmulSchedule {
    /// 32-bit lanes per vector: 16 (AVX-512) or 8.
    pub lanes: u16,
    /// Vectors per tile row.
    pub vecs: i64,
    /// Rows of `A` per register tile.
    pub mr: i64,
    pub threads: i64,
}

/// The largest packed column tile a thread keeps on its stack (bytes).
const MAX_PACKED_BYTES: i64 = 1 << 20;

impl IntegerMatmulSchedule {
    /// The level-0 choice for `target`: 16-lane vectors with AVX-512BW (6 × 2 tiles), else
    /// 8-lane ones (4 × 2 tiles: the 16-bit fallback of AVX2 needs spare registers).
    pub fn for_target(target: &CpuTarget, threads: i64) -> Self {
        let f = &target.features;
        let (lanes, mr) = if f.avx512bw { (16, 6) } else { (8, 4) };
        IntegerMatmulSchedule {
            lanes,
            vecs: 2,
            mr,
            threads: threads.max(1),
        }
    }

    /// Columns per tile.
    pub fn nr(&self) -> i64 {
        i64::from(self.lanes) * self.vecs
    }

    fn validate(&self, shape: &IntegerMatmulShape) -> Result<(), TemplateError> {
        if !matches!(self.lanes, 8 | 16) || self.vecs < 1 || self.mr < 1 || self.threads < 1 {
            return Err(TemplateError::InvalidSchedule(format!(
                "{self:?} for the integer product"
            )));
        }
        if !matches!(shape.depth_group, 2 | 4) {
            return Err(TemplateError::InvalidShape(format!(
                "an integer product by depth groups of {}; the template takes 2 or 4",
                shape.depth_group
            )));
        }
        let element_bytes = if shape.depth_group == 2 { 2 } else { 1 };
        if shape.a_cols * self.nr() * element_bytes > MAX_PACKED_BYTES {
            return Err(TemplateError::InvalidShape(format!(
                "a packed column tile of {}×{}×{element_bytes} bytes exceeds {MAX_PACKED_BYTES}",
                shape.a_cols,
                self.nr()
            )));
        }
        Ok(())
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The kernel `name(A: i8[m, a_cols], X: u8[batch, k, n], C: i32[batch, m, n])` (`A` of `i16`
/// with a depth group of 2; see the module docs). Errors: a shape or schedule the template
/// cannot run.
pub fn integer_matmul(
    name: &str,
    shape: &IntegerMatmulShape,
    schedule: &IntegerMatmulSchedule,
) -> Result<Function, TemplateError> {
    schedule.validate(shape)?;
    let s = *shape;
    let lanes = schedule.lanes;
    let nr = schedule.nr();
    let mr = schedule.mr;
    let vecs = schedule.vecs;
    let group = s.depth_group;
    let groups = s.a_cols / group;
    let i32v = DataType::vector(ScalarType::I32, lanes);
    // The weights' type, the packed columns' and the multiply-add.
    let (weight, element, dot) = if group == 4 {
        (DataType::I8, DataType::U8, Intrinsic::DotU8I8 { lanes })
    } else {
        (DataType::I16, DataType::U16, Intrinsic::DotI16 { lanes })
    };
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let a = fb.tensor_param("A", weight, [s.m, s.a_cols]);
    let x = fb.tensor_param("X", DataType::U8, [s.batch, s.k, s.n]);
    let c = fb.tensor_param("C", DataType::I32, [s.batch, s.m, s.n]);
    let col_tiles = ceil_div(s.n, nr);
    let tasks = s.batch * col_tiles;
    let per_thread = ceil_div(tasks, schedule.threads);
    let busy = ceil_div(tasks, per_thread);
    let row_panels = ceil_div(s.m, mr);
    fb.for_range_with("t", busy, LoopKind::Parallel, |fb, t| {
        let packed = fb.register_tensor("packed", element, row_major([groups, nr, group]));
        let rows = fb.register_tensor("rows", element, row_major([group, nr]));
        let acc = fb.register_tensor("acc", i32v, row_major([mr, vecs]));
        let tile = fb.register_tensor("tile", DataType::I32, row_major([mr, nr]));
        fb.for_range("item", per_thread, |fb, item| {
            let task = &t * per_thread + &item;
            fb.if_then(task.lt(tasks), |fb| {
                let b = &task / col_tiles;
                let n0 = (&task % col_tiles) * nr;
                // Pack: `group` consecutive k of one column side by side; zero from row `K` on
                // and beyond the last column.
                let full = (&n0 + nr).le(s.n);
                fb.if_then_else(
                    full,
                    |fb| {
                        fb.for_range("g", groups, |fb, g| {
                            for q in 0..group {
                                let row = &g * group + q;
                                let copy = |fb: &mut FunctionBuilder| {
                                    fb.for_range_with("col", nr, LoopKind::Vectorize, |fb, col| {
                                        let value = x.at([b.clone(), row.clone(), &n0 + &col]);
                                        fb.store(&rows, [Expr::int(q), col], value.cast(element));
                                    })
                                };
                                let zero = |fb: &mut FunctionBuilder| {
                                    fb.for_range_with("col", nr, LoopKind::Vectorize, |fb, col| {
                                        fb.store(&rows, [Expr::int(q), col], Expr::zero(element));
                                    })
                                };
                                fb.if_then_else(row.lt(s.k), copy, zero);
                            }
                            fb.for_range_with("col", nr, LoopKind::Vectorize, |fb, col| {
                                for q in 0..group {
                                    let value = rows.at([Expr::int(q), col.clone()]);
                                    fb.store(
                                        &packed,
                                        [g.clone(), col.clone(), Expr::int(q)],
                                        value,
                                    );
                                }
                            });
                        });
                    },
                    |fb| {
                        fb.for_range("g", groups, |fb, g| {
                            fb.for_range("col", nr, |fb, col| {
                                let column = &n0 + &col;
                                for q in 0..group {
                                    let at = [g.clone(), col.clone(), Expr::int(q)];
                                    fb.store(&packed, at.clone(), Expr::zero(element));
                                    let row = &g * group + q;
                                    let value = x.at([b.clone(), row.clone(), column.clone()]);
                                    let value = value.cast(element);
                                    let inside = column.lt(s.n).and(row.lt(s.k));
                                    fb.if_then(inside, |fb| fb.store(&packed, at, value));
                                }
                            });
                        });
                    },
                );
                fb.for_range("p", row_panels, |fb, p| {
                    let m0 = &p * mr;
                    zero_tile(fb, &acc, mr, vecs, i32v);
                    fb.for_range("g", groups, |fb, g| {
                        let columns: Vec<Expr> = (0..vecs)
                            .map(|v| {
                                let at = packed.at([
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
                            let row = (&m0 + r).min(s.m - 1);
                            let word = broadcast_word(a.at([row, &g * group]), lanes);
                            // Columns of X times the row's `group` weights.
                            let operands = |column| (column, word.clone());
                            accumulate(fb, dot.clone(), &acc, r, &columns, operands);
                        }
                    });
                    spill(fb, &acc, &tile, mr, vecs, lanes);
                    let at = |r: &Expr, col: Expr| vec![b.clone(), &m0 + r, col];
                    store_tile(fb, &tile, &c, at, (&m0, s.m), (&n0, nr, s.n), mr);
                });
            });
        });
    });
    Ok(fb.finish())
}

/// Stores rows `r < mr` of a register `tile` (`[mr, nr]` `i32`) whose first row is row `row0`
/// of `rows` and first column is column `n0` of `n`, each element at `at(r, column)` of `c`:
/// rows past `rows` are skipped, and columns past `n` (in the last column tile only, the other
/// tiles store unguarded, vectorized rows).
pub(super) fn store_tile(
    fb: &mut FunctionBuilder,
    tile: &Var,
    c: &Var,
    at: impl Fn(&Expr, Expr) -> Vec<Expr>,
    (row0, rows): (&Expr, i64),
    (n0, nr, n): (&Expr, i64, i64),
    mr: i64,
) {
    fb.for_range("r", mr, |fb, r| {
        fb.if_then((row0 + &r).lt(rows), |fb| {
            let store = |fb: &mut FunctionBuilder, col: Expr| {
                let value = tile.at([r.clone(), col.clone()]);
                fb.store(c, at(&r, n0 + &col), value);
            };
            fb.if_then_else(
                (n0 + nr).le(n),
                |fb| fb.for_range_with("col", nr, LoopKind::Vectorize, store),
                |fb| {
                    fb.for_range_with("col", nr, LoopKind::Vectorize, |fb, col| {
                        fb.if_then((n0 + &col).lt(n), |fb| store(fb, col));
                    })
                },
            );
        });
    });
}

/// Sets every accumulator of the `mr × vecs` tile `acc` (of `i32v` vectors) to zero.
pub(super) fn zero_tile(fb: &mut FunctionBuilder, acc: &Var, mr: i64, vecs: i64, i32v: DataType) {
    for r in 0..mr {
        for v in 0..vecs {
            fb.store(acc, [Expr::int(r), Expr::int(v)], Expr::zero(i32v));
        }
    }
}

/// The four bytes at `element` (a tensor element) read as one 32-bit word and broadcast to
/// `lanes` lanes.
pub(super) fn broadcast_word(element: Expr, lanes: u16) -> Expr {
    let load = Intrinsic::VectorLoad {
        dtype: DataType::I32,
    };
    Expr::call(load, vec![element.address()]).broadcast(lanes)
}

/// `acc[r][v] = dot(acc[r][v], a, b)` for each vector `vectors[v]`, where `operands` gives
/// `(a, b)` from that vector and `dot` is a multiply-add intrinsic (`dot_u8i8`, `dot_i16i8`,
/// `dot_i16`).
pub(super) fn accumulate(
    fb: &mut FunctionBuilder,
    dot: Intrinsic,
    acc: &Var,
    r: i64,
    vectors: &[Expr],
    operands: impl Fn(Expr) -> (Expr, Expr),
) {
    for (v, vector) in vectors.iter().enumerate() {
        let at = [Expr::int(r), Expr::int(v as i64)];
        let (a, b) = operands(vector.clone());
        let sum = Expr::call(dot.clone(), vec![acc.at(at.clone()), a, b]);
        fb.store(acc, at, sum);
    }
}

/// Stores the accumulators of the `mr × vecs` tile `acc` into the `[mr, vecs · lanes]` buffer
/// `tile`, which the scalar stores of the output read.
pub(super) fn spill(
    fb: &mut FunctionBuilder,
    acc: &Var,
    tile: &Var,
    mr: i64,
    vecs: i64,
    lanes: u16,
) {
    for r in 0..mr {
        for v in 0..vecs {
            let at = tile.at([Expr::int(r), Expr::int(v * i64::from(lanes))]);
            let value = acc.at([Expr::int(r), Expr::int(v)]);
            fb.call(Intrinsic::VectorStore, vec![at.address(), value]);
        }
    }
}
