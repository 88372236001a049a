//! The product of `float32` activations by a constant weight quantized to 4 bits in blocks
//! along the depth, the anchor of `hidet::Int4Linear` (ONNX Runtime's `MatMulNBits`):
//! `C[r, n] = Σ_{k<K} X[r, k] · w(k, n)` with `w(k, n) = (q(k, n) − Z[n, k / bs]) · S[n, k / bs]`,
//! the weights read as they are stored, half a byte each.
//!
//! Operands: `X` `[R, K]`; `W` `[⌈N/16⌉, B, bs/8, 16, 4]` bytes (`B = ⌈K/bs⌉`), 16-column panels
//! of blocks, each column's values for eight consecutive depths in one little-endian 32-bit
//! word: bits `4t … 4t + 3` of word `W[p, b, g, j, 0…3]` hold `q(b·bs + 8g + t, 16p + j)`
//! (depths past `K` never read); `S` and `Z` `[⌈N/16⌉, B, 16]`, each block's scales and zero
//! points per panel column (zero past `N`).
//!
//! Threads share out (column panel, chunk of up to [`ROW_CHUNK`] rows) tasks. For a task and each
//! block of `bs` depths, the panel's block is dequantized once into a buffer of `bs × 16` floats
//! that stays in L1 (a vector of words per eight depths, each depth's values shifted and masked
//! out of it, converted, `(q − z) · s`: each weight exactly the float its dense form holds), then
//! every register tile of `MR` rows of the chunk adds that block's contribution to its sums,
//! kept between blocks in a `rows × 16` partial tile. A tile of few rows splits the depth over
//! independent accumulators to hide the multiply-add latency. A product of one row (a decoder's
//! token) skips the buffer: each depth's `q` is converted in registers and multiplied into the
//! accumulators (four vector operations per 16 weights), and each block's sum is corrected and
//! scaled once, `Σ x·(q − z)·s = s·(Σ x·q − z·Σ x)`, with the row's sum over each block computed
//! once per thread. The chunk's
//! sums then go to `C` row by row, contiguous, where an epilogue is fused. So the weights are read
//! from memory once per chunk, at a quarter of a byte per multiply-add of a one-token product,
//! an eighth of what their dense form costs.

use crate::error::TemplateError;
use crate::target::CpuTarget;
use crate::templates::integer_matmul::store_tile;
use hidet_ir::prelude::*;

/// Columns per weight panel.
pub const INT4_PANEL_WIDTH: i64 = 16;

/// Depths whose 4-bit values share one 32-bit word of `W`.
pub const WORD_DEPTHS: i64 = 8;

/// Rows of `X` one task covers at most.
pub const ROW_CHUNK: i64 = 64;

/// The longest block the template dequantizes into its buffer (`bs × 16` floats).
pub const MAX_BLOCK_SIZE: i64 = 256;

/// Multiply-add chains a register tile keeps in flight at least (the latency of a
/// multiply-add times the ports that issue them).
const CHAINS: i64 = 8;

/// The sizes of one product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int4LinearShape {
    /// Rows of `X` and `C`.
    pub rows: i64,
    /// Columns of `C`.
    pub n: i64,
    /// The depth.
    pub k: i64,
    /// Depths per quantization block.
    pub block_size: i64,
}

/// The register tile and thread count of one instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int4LinearSchedule {
    /// `float32` lanes per vector of the multiply-adds: 4, 8 or 16.
    pub lanes: u16,
    /// Rows of `X` per register tile.
    pub mr: i64,
    pub threads: i64,
}

impl Int4LinearSchedule {
    /// The level-0 choice for `target`: the widest vectors, and `MR` rows so that the tile's
    /// `MR × 16 / lanes` accumulators are [`CHAINS`].
    pub fn for_target(target: &CpuTarget, threads: i64) -> Self {
        let lanes = target.f32_lanes().clamp(4, 16);
        let vecs = INT4_PANEL_WIDTH / i64::from(lanes);
        Int4LinearSchedule {
            lanes,
            mr: (CHAINS / vecs).max(1),
            threads: threads.max(1),
        }
    }

    fn validate(&self, shape: &Int4LinearShape) -> Result<(), TemplateError> {
        if !matches!(self.lanes, 4 | 8 | 16) || self.mr < 1 || self.threads < 1 {
            return Err(TemplateError::InvalidSchedule(format!(
                "{self:?} for the 4-bit linear product"
            )));
        }
        if shape.rows < 1 || shape.n < 1 || shape.k < 1 {
            return Err(TemplateError::InvalidShape(format!(
                "a 4-bit linear product needs positive sizes, got {shape:?}"
            )));
        }
        if !(1..=MAX_BLOCK_SIZE).contains(&shape.block_size) || shape.block_size % WORD_DEPTHS != 0
        {
            return Err(TemplateError::InvalidShape(format!(
                "blocks of {} depths (a multiple of {WORD_DEPTHS}, at most {MAX_BLOCK_SIZE})",
                shape.block_size
            )));
        }
        Ok(())
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// What every part of the kernel reads.
struct Plan {
    s: Int4LinearShape,
    lanes: u16,
    vecs: i64,
    mr: i64,
    x: Var,
    w: Var,
    scales: Var,
    zeros: Var,
    /// The dequantized block, `[bs, 16]`.
    block: Var,
    /// The chunk's sums, `[ROW_CHUNK, 16]`.
    partial: Var,
    /// For a product of one row, the sum of the row over each block, `[B]`.
    block_sums: Option<Var>,
}

/// The kernel `name(X: f32[R, K], W: u8[⌈N/16⌉, B, bs/8, 16, 4], S: f32[⌈N/16⌉, B, 16],
/// Z: f32[⌈N/16⌉, B, 16], C: f32[R, N])` (`B = ⌈K/bs⌉`) (see the module docs). Errors: a shape or
/// schedule the template cannot run.
pub fn int4_linear(
    name: &str,
    shape: &Int4LinearShape,
    schedule: &Int4LinearSchedule,
) -> Result<Function, TemplateError> {
    schedule.validate(shape)?;
    let s = *shape;
    let panels = ceil_div(s.n, INT4_PANEL_WIDTH);
    let blocks = ceil_div(s.k, s.block_size);
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let x = fb.tensor_param("X", DataType::F32, [s.rows, s.k]);
    let w = fb.tensor_param(
        "W",
        DataType::U8,
        [
            panels,
            blocks,
            s.block_size / WORD_DEPTHS,
            INT4_PANEL_WIDTH,
            4,
        ],
    );
    let scales = fb.tensor_param("S", DataType::F32, [panels, blocks, INT4_PANEL_WIDTH]);
    let zeros = fb.tensor_param("Z", DataType::F32, [panels, blocks, INT4_PANEL_WIDTH]);
    let c = fb.tensor_param("C", DataType::F32, [s.rows, s.n]);
    let chunks = ceil_div(s.rows, ROW_CHUNK);
    let last_chunk_rows = s.rows - (chunks - 1) * ROW_CHUNK;
    let tasks = panels * chunks;
    let per_thread = ceil_div(tasks, schedule.threads);
    let busy = ceil_div(tasks, per_thread);
    fb.for_range_with("t", busy, LoopKind::Parallel, |fb, t| {
        let block = fb.register_tensor(
            "block",
            DataType::F32,
            row_major([s.block_size, INT4_PANEL_WIDTH]),
        );
        let partial = fb.register_tensor(
            "partial",
            DataType::F32,
            row_major([ROW_CHUNK.min(s.rows), INT4_PANEL_WIDTH]),
        );
        // One row: its sum over each block, once per thread (every task reads the same row).
        let blocks = ceil_div(s.k, s.block_size);
        let block_sums = (s.rows == 1).then(|| {
            let sums = fb.register_tensor("block_sums", DataType::F32, row_major([blocks]));
            fb.for_range("b", blocks, |fb, b| {
                let sum = fb.var("sum", Expr::zero(DataType::F32));
                let k0 = &b * s.block_size;
                let len = Expr::int(s.block_size).min(Expr::int(s.k) - &k0);
                fb.for_range("kk", len, |fb, kk| {
                    fb.assign(&sum, sum.expr() + x.at([Expr::int(0), &k0 + &kk]));
                });
                fb.store(&sums, [b], sum.expr());
            });
            sums
        });
        let plan = Plan {
            block_sums,
            s,
            lanes: schedule.lanes,
            vecs: INT4_PANEL_WIDTH / i64::from(schedule.lanes),
            mr: schedule.mr,
            x: x.clone(),
            w: w.clone(),
            scales: scales.clone(),
            zeros: zeros.clone(),
            block,
            partial,
        };
        fb.for_range("item", per_thread, |fb, item| {
            let task = &t * per_thread + &item;
            fb.if_then(task.lt(tasks), |fb| {
                let panel = &task / chunks;
                let chunk = &task % chunks;
                let row0 = &chunk * ROW_CHUNK;
                if chunks == 1 {
                    plan.chunk(fb, &c, &panel, &row0, s.rows);
                } else {
                    fb.if_then_else(
                        chunk.lt(chunks - 1),
                        |fb| plan.chunk(fb, &c, &panel, &row0, ROW_CHUNK),
                        |fb| plan.chunk(fb, &c, &panel, &row0, last_chunk_rows),
                    );
                }
            });
        });
    });
    Ok(fb.finish())
}

impl Plan {
    /// `rows` rows from `row0` of column panel `panel`: every block, then the stores of `C`.
    fn chunk(&self, fb: &mut FunctionBuilder, c: &Var, panel: &Expr, row0: &Expr, rows: i64) {
        let width = INT4_PANEL_WIDTH;
        fb.for_range("r", rows, |fb, r| {
            fb.for_range_with("col", width, LoopKind::Vectorize, |fb, col| {
                fb.store(&self.partial, [r.clone(), col], Expr::zero(DataType::F32));
            });
        });
        let (full, tail) = (self.s.k / self.s.block_size, self.s.k % self.s.block_size);
        let block = |fb: &mut FunctionBuilder, b: &Expr, len: i64| {
            if rows == 1 {
                self.block_one_row(fb, panel, b, row0, len);
            } else {
                self.block(fb, panel, b, row0, rows, len);
            }
        };
        fb.for_range("b", full, |fb, b| block(fb, &b, self.s.block_size));
        if tail > 0 {
            block(fb, &Expr::int(full), tail);
        }
        let n0 = panel * width;
        let at = |r: &Expr, col: Expr| vec![row0 + r, col];
        store_tile(
            fb,
            &self.partial,
            c,
            at,
            (row0, self.s.rows),
            (&n0, width, self.s.n),
            rows,
        );
    }

    /// Block `b` (`len` depths) of the panel dequantized, then added to the sums of every
    /// register tile of the chunk's `rows` rows.
    fn block(
        &self,
        fb: &mut FunctionBuilder,
        panel: &Expr,
        b: &Expr,
        row0: &Expr,
        rows: i64,
        len: i64,
    ) {
        let lanes = self.lanes;
        let f32v = DataType::vector(ScalarType::F32, lanes);
        let i32v = DataType::vector(ScalarType::I32, lanes);
        let load = |dtype: DataType, element: Expr| {
            Expr::call(Intrinsic::VectorLoad { dtype }, vec![element.address()])
        };
        let k0 = b * self.s.block_size;
        let mask = Expr::int(15).cast(DataType::I32).broadcast(lanes);
        // Eight depths per word: groups of eight rows of the block, the last one padded.
        fb.for_range("g", ceil_div(len, WORD_DEPTHS), |fb, g| {
            for v in 0..self.vecs {
                let col = Expr::int(v * i64::from(lanes));
                let at = [
                    panel.clone(),
                    b.clone(),
                    g.clone(),
                    col.clone(),
                    Expr::int(0),
                ];
                let words = fb.var("words", load(i32v, self.w.at(at))).expr();
                let param = |t: &Var| load(f32v, t.at([panel.clone(), b.clone(), col.clone()]));
                let (z, s) = (param(&self.zeros), param(&self.scales));
                let (z, s) = (fb.var("z", z).expr(), fb.var("s", s).expr());
                for t in 0..WORD_DEPTHS {
                    let shift = Expr::int(4 * t).cast(DataType::I32).broadcast(lanes);
                    let q = ((words.clone() >> shift) & mask.clone()).cast(f32v);
                    let at = self.block.at([&g * WORD_DEPTHS + t, col.clone()]);
                    fb.call(
                        Intrinsic::VectorStore,
                        vec![at.address(), (q - z.clone()) * s.clone()],
                    );
                }
            }
        });
        let (tiles, edge) = (rows / self.mr, rows % self.mr);
        fb.for_range("g", tiles, |fb, g| {
            self.tile(fb, row0, &(g * self.mr), self.mr, &k0, len);
        });
        if edge > 0 {
            self.tile(fb, row0, &Expr::int(tiles * self.mr), edge, &k0, len);
        }
    }

    /// Block `b` (`len` depths) of the panel times the one row `row0`, without the buffer:
    /// each depth's `q` converted in registers and multiplied into accumulators split over the
    /// depths, their sum corrected by the zero point times the row's block sum and scaled once
    /// per block (a decoder's token: no later row reads the dequantized block).
    fn block_one_row(
        &self,
        fb: &mut FunctionBuilder,
        panel: &Expr,
        b: &Expr,
        row0: &Expr,
        len: i64,
    ) {
        let (lanes, vecs) = (self.lanes, self.vecs);
        let f32v = DataType::vector(ScalarType::F32, lanes);
        let i32v = DataType::vector(ScalarType::I32, lanes);
        let load = |dtype: DataType, element: Expr| {
            Expr::call(Intrinsic::VectorLoad { dtype }, vec![element.address()])
        };
        let param_at =
            |t: &Var, v: i64| t.at([panel.clone(), b.clone(), Expr::int(v * i64::from(lanes))]);
        let sets = (CHAINS / vecs).clamp(1, 4);
        let acc = fb.register_tensor("acc", f32v, row_major([sets, vecs]));
        for set in 0..sets {
            for v in 0..vecs {
                fb.store(&acc, [Expr::int(set), Expr::int(v)], Expr::zero(f32v));
            }
        }
        let k0 = b * self.s.block_size;
        let mask = Expr::int(15).cast(DataType::I32).broadcast(lanes);
        let group = |fb: &mut FunctionBuilder, g: Expr, depths: i64| {
            for v in 0..vecs {
                let col = Expr::int(v * i64::from(lanes));
                let at = [panel.clone(), b.clone(), g.clone(), col, Expr::int(0)];
                let words = fb.var("words", load(i32v, self.w.at(at))).expr();
                for t in 0..depths {
                    let shifted = if t == 0 {
                        words.clone()
                    } else {
                        words.clone() >> Expr::int(4 * t).cast(DataType::I32).broadcast(lanes)
                    };
                    let q = (shifted & mask.clone()).cast(f32v);
                    let x = self.x.at([row0.clone(), &k0 + &g * WORD_DEPTHS + t]);
                    let at = [Expr::int(t % sets), Expr::int(v)];
                    let sum = x.broadcast(lanes).fma(q, acc.at(at.clone()));
                    fb.store(&acc, at, sum);
                }
            }
        };
        fb.for_range("g", len / WORD_DEPTHS, |fb, g| group(fb, g, WORD_DEPTHS));
        if len % WORD_DEPTHS > 0 {
            group(fb, Expr::int(len / WORD_DEPTHS), len % WORD_DEPTHS);
        }
        let row_sum = self
            .block_sums
            .as_ref()
            .expect("a one-row product has its block sums")
            .at([b.clone()])
            .broadcast(lanes);
        for v in 0..vecs {
            let total = (0..sets)
                .map(|set| acc.at([Expr::int(set), Expr::int(v)]))
                .reduce(|a, b| a + b)
                .expect("at least one set of accumulators");
            // Σ x·(q − z) = Σ x·q − z·Σ x, then scaled.
            let zero = load(f32v, param_at(&self.zeros, v));
            let centered = total - zero * row_sum.clone();
            let at = self
                .partial
                .at([Expr::int(0), Expr::int(v * i64::from(lanes))]);
            let scale = load(f32v, param_at(&self.scales, v));
            let sum = centered.fma(scale, load(f32v, at.clone()));
            fb.call(Intrinsic::VectorStore, vec![at.address(), sum]);
        }
    }

    /// Rows `first … first + m` of the chunk times the dequantized block of `len` depths from
    /// `k0`, added to their partial sums. With few accumulators the depths alternate between
    /// `sets` independent ones, summed at the end.
    fn tile(
        &self,
        fb: &mut FunctionBuilder,
        row0: &Expr,
        first: &Expr,
        m: i64,
        k0: &Expr,
        len: i64,
    ) {
        let (lanes, vecs) = (self.lanes, self.vecs);
        let vec_t = DataType::vector(ScalarType::F32, lanes);
        let sets = (CHAINS / (m * vecs)).clamp(1, 4).min(len);
        let acc = fb.register_tensor("acc", vec_t, row_major([sets, m, vecs]));
        let weight = |kk: &Expr, v: i64| {
            let at = self.block.at([kk.clone(), Expr::int(v * i64::from(lanes))]);
            Expr::call(Intrinsic::VectorLoad { dtype: vec_t }, vec![at.address()])
        };
        for set in 0..sets {
            for i in 0..m {
                for v in 0..vecs {
                    let value = if set == 0 {
                        let at = self
                            .partial
                            .at([first + i, Expr::int(v * i64::from(lanes))]);
                        Expr::call(Intrinsic::VectorLoad { dtype: vec_t }, vec![at.address()])
                    } else {
                        Expr::zero(vec_t)
                    };
                    fb.store(&acc, [Expr::int(set), Expr::int(i), Expr::int(v)], value);
                }
            }
        }
        let step = |fb: &mut FunctionBuilder, kk: Expr, set: i64| {
            let weights: Vec<Expr> = (0..vecs).map(|v| weight(&kk, v)).collect();
            for i in 0..m {
                let xi = self.x.at([row0 + first + i, k0 + &kk]).broadcast(lanes);
                for (v, wv) in weights.iter().enumerate() {
                    let at = [Expr::int(set), Expr::int(i), Expr::int(v as i64)];
                    let sum = xi.clone().fma(wv.clone(), acc.at(at.clone()));
                    fb.store(&acc, at, sum);
                }
            }
        };
        fb.for_range("kq", len / sets, |fb, kq| {
            for set in 0..sets {
                step(fb, &kq * sets + set, set);
            }
        });
        for kk in (len / sets) * sets..len {
            step(fb, Expr::int(kk), 0);
        }
        for i in 0..m {
            for v in 0..vecs {
                let total = (0..sets)
                    .map(|set| acc.at([Expr::int(set), Expr::int(i), Expr::int(v)]))
                    .reduce(|a, b| a + b)
                    .expect("at least one set of accumulators");
                let at = self
                    .partial
                    .at([first + i, Expr::int(v * i64::from(lanes))]);
                fb.call(Intrinsic::VectorStore, vec![at.address(), total]);
            }
        }
    }
}
