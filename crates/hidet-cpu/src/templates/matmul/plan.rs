//! The IR of one instantiation of the matmul template (see the module docs
//! of [`super`]).

use super::schedule::{
    ceil_div, ALayout, BLayout, CLayout, Layouts, MatmulSchedule, MatmulShape, ThreadGrid,
    B_PANEL_WIDTH,
};
use super::split::PanelSplit;
use crate::error::TemplateError;
use hidet_ir::mapping::MappingError;
use hidet_ir::prelude::*;

/// Builds the kernel for `shape` (with rank-3 operands when `rank3`, else
/// rank 2, which requires a batch of 1), packing `A` in the order `layouts.a` favours,
/// reading `B` as `layouts.b` stores it and storing each register tile in the order
/// `layouts.c` favours.
pub(super) fn build(
    name: &str,
    shape: &MatmulShape,
    rank3: bool,
    layouts: Layouts,
    schedule: &MatmulSchedule,
) -> Result<Function, TemplateError> {
    let Layouts {
        a: a_layout,
        b: b_layout,
        c: c_layout,
    } = layouts;
    schedule.validate()?;
    shape.validate()?;
    if !rank3 && shape.batch != 1 {
        return Err(TemplateError::InvalidShape(format!(
            "a rank-2 matmul has batch 1, got {shape:?}"
        )));
    }
    if let ALayout::Panels { rows } = a_layout {
        if (rank3 && shape.a_batch != 1) || !(1..=MAX_A_PANEL_ROWS).contains(&rows) {
            return Err(TemplateError::InvalidShape(format!(
                "A in panels of {rows} rows needs one matrix (a batch of 1) and 1 to \
                 {MAX_A_PANEL_ROWS} rows, got a batch of {} of A",
                shape.a_batch
            )));
        }
    }
    let panels = b_layout == BLayout::Panels;
    if panels && B_PANEL_WIDTH % i64::from(schedule.lanes) != 0 {
        return Err(TemplateError::InvalidShape(format!(
            "B in {B_PANEL_WIDTH}-column panels needs a SIMD width dividing \
             {B_PANEL_WIDTH}, got {} lanes",
            schedule.lanes
        )));
    }
    let s = shape;
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let f32_ = DataType::F32;
    let a = if let ALayout::Panels { rows } = a_layout {
        fb.tensor_param("A", f32_, [ceil_div(s.m, rows), s.k, rows])
    } else if rank3 {
        fb.tensor_param("A", f32_, [s.a_batch, s.m, s.k])
    } else {
        fb.tensor_param("A", f32_, [s.m, s.k])
    };
    let (b, c) = if rank3 {
        let b = if panels {
            let count = ceil_div(s.n, B_PANEL_WIDTH);
            fb.tensor_param("B", f32_, [s.b_batch, count, s.k, B_PANEL_WIDTH])
        } else {
            fb.tensor_param("B", f32_, [s.b_batch, s.k, s.n])
        };
        (b, fb.tensor_param("C", f32_, [s.batch, s.m, s.n]))
    } else {
        let b = if panels {
            let count = ceil_div(s.n, B_PANEL_WIDTH);
            fb.tensor_param("B", f32_, [count, s.k, B_PANEL_WIDTH])
        } else {
            fb.tensor_param("B", f32_, [s.k, s.n])
        };
        (b, fb.tensor_param("C", f32_, [s.m, s.n]))
    };
    let plan = Plan {
        a_layout,
        b_layout,
        c_layout,
        ..Plan::new(a, b, c, *shape, rank3, schedule)
    };
    plan.emit(&mut fb)?;
    Ok(fb.finish())
}

/// An operand's batch index in batch `batch`: 0 when the operand (of `operand_batch`
/// matrices) is broadcast.
fn batch_index(operand_batch: i64, batch: &Expr) -> Expr {
    if operand_batch == 1 {
        Expr::int(0)
    } else {
        batch.clone()
    }
}

/// The constants of one instantiation.
struct Plan {
    a: Var,
    b: Var,
    c: Var,
    s: MatmulShape,
    rank3: bool,
    a_layout: ALayout,
    b_layout: BLayout,
    c_layout: CLayout,
    threads: i64,
    mr: i64,
    nr: i64,
    w: i64,
    vec_t: DataType,
    grid: ThreadGrid,
    /// Row and column panels of the whole problem.
    pm: i64,
    pn: i64,
    /// How row and column panels are shared among the grid's row and column threads.
    row_split: PanelSplit,
    col_split: PanelSplit,
    /// Batches, row panels, column panels and `K` of the busiest thread.
    cb: i64,
    cm: i64,
    cn: i64,
    ck: i64,
    /// `K`-parts that have work.
    kparts: i64,
    /// Panels per cache block (at most the schedule's, as even as that allows over one
    /// thread's share) and the block depth (clamped to that share).
    mcp: i64,
    ncp: i64,
    kc: i64,
    /// A thread's `K` spans several `KC`-slices: partial sums are kept.
    sliced: bool,
    /// Every cache block holds one row panel, so a packed `B` panel would be read by one
    /// micro-kernel only: the micro-kernel reads `B` row by row instead (see
    /// [`Plan::micro_kernel`]).
    stream_b: bool,
    /// Rows of the last row panel and columns of the last column panel
    /// when they are partial, else 0.
    m_edge: i64,
    n_edge: i64,
}

/// Shape of one micro-kernel variant: rows, vectors per row, and columns
/// stored (`cols ≤ vecs · W`).
#[derive(Clone, Copy)]
struct Micro {
    rows: i64,
    vecs: i64,
    cols: i64,
}

/// The thread-local buffers of the main pass.
struct Buffers {
    /// `None` for [`ALayout::Panels`] and [`ALayout::InPlace`].
    packed_a: Option<Var>,
    /// `None` when [`Plan::stream_b`].
    packed_b: Option<Var>,
    partial: Option<Var>,
    scratch: Option<Var>,
}

/// Where the micro-kernel reads `B`: the packed panel, a one-row buffer it refills
/// from `B` at every `k` ([`Plan::stream_b`]), or `B` itself ([`BLayout::Panels`]).
enum BPanel<'a> {
    Packed(&'a Var),
    Row(Var),
    InPlace,
}

/// Where one thread is: its `K`-part and range, batch, the current tile
/// (first panels and panel counts) and `K`-slice.
struct At {
    pk: Expr,
    batch: Expr,
    k_len: Expr,
    pb0: Expr,
    qb0: Expr,
    np: Expr,
    nq: Expr,
    k0: Expr,
    kb: Expr,
    kc_len: Expr,
}

/// The tallest panels of [`ALayout::Panels`] the template takes: those `hidet::ColumnPanels`
/// stores.
const MAX_A_PANEL_ROWS: i64 = crate::graph_ops::column_panels::MAX_PANEL_WIDTH as i64;

/// Reduction steps per iteration of the micro-kernel's loop, as the C compiler unrolls it: the
/// loop's counter update and branch are shared by that many steps' multiply-adds, so the loop
/// issues fewer instructions per multiply-add (the front end is what a busy sibling hyperthread
/// takes away).
const MICRO_KERNEL_UNROLL: u32 = 4;

fn mapping(result: Result<TaskMapping, MappingError>) -> TaskMapping {
    result.expect("extents are positive: the schedule and shape were validated")
}

impl Plan {
    fn new(a: Var, b: Var, c: Var, s: MatmulShape, rank3: bool, sch: &MatmulSchedule) -> Plan {
        let grid = sch.thread_grid(&s);
        let (pm, pn) = (ceil_div(s.m, sch.mr), ceil_div(s.n, sch.nr));
        let w = i64::from(sch.lanes);
        let row_split = PanelSplit::new(s.m, sch.mr, 1, grid.rows);
        let col_split = PanelSplit::new(s.n, sch.nr, w, grid.cols);
        let (cm, cn) = (row_split.max_panels(), col_split.max_panels());
        let ck = ceil_div(s.k, grid.k);
        let mcp = balanced_block(cm, sch.mc / sch.mr);
        let kc = sch.kc.min(ck);
        Plan {
            a,
            b,
            c,
            s,
            rank3,
            a_layout: ALayout::RowMajor,
            b_layout: BLayout::RowMajor,
            c_layout: CLayout::RowMajor,
            threads: sch.threads,
            mr: sch.mr,
            nr: sch.nr,
            w,
            vec_t: DataType::vector(ScalarType::F32, sch.lanes),
            grid,
            pm,
            pn,
            row_split,
            col_split,
            cb: ceil_div(s.batch, grid.batch),
            cm,
            cn,
            ck,
            kparts: ceil_div(s.k, ck),
            mcp,
            ncp: balanced_block(cn, sch.nc / sch.nr),
            kc,
            sliced: ck > kc,
            stream_b: mcp == 1,
            m_edge: s.m % sch.mr,
            n_edge: s.n % sch.nr,
        }
    }

    fn parallel_k(&self) -> bool {
        self.grid.k > 1
    }

    fn a_at(&self, batch: &Expr, row: Expr, col: Expr) -> Expr {
        if let ALayout::Panels { rows } = self.a_layout {
            let rows = Expr::int(rows);
            return self.a.at([&row / rows.clone(), col, row % rows]);
        }
        if self.rank3 {
            self.a.at([batch_index(self.s.a_batch, batch), row, col])
        } else {
            self.a.at([row, col])
        }
    }

    fn b_at(&self, batch: &Expr, row: Expr, col: Expr) -> Expr {
        if self.b_layout == BLayout::Panels {
            let width = Expr::int(B_PANEL_WIDTH);
            return self.b_panel_at(batch, &col / width.clone(), row, col % width);
        }
        if self.rank3 {
            self.b.at([batch_index(self.s.b_batch, batch), row, col])
        } else {
            self.b.at([row, col])
        }
    }

    /// Element `offset` of row `row` of 16-column panel `panel` of a [`BLayout::Panels`] `B`.
    fn b_panel_at(&self, batch: &Expr, panel: Expr, row: Expr, offset: Expr) -> Expr {
        if self.rank3 {
            self.b
                .at([batch_index(self.s.b_batch, batch), panel, row, offset])
        } else {
            self.b.at([panel, row, offset])
        }
    }

    /// `C[batch, row, col] = value` (or `C[row, col]` for rank 2).
    fn store_c(&self, fb: &mut FunctionBuilder, batch: &Expr, row: Expr, col: Expr, value: Expr) {
        if self.rank3 {
            fb.store(&self.c, [batch.clone(), row, col], value);
        } else {
            fb.store(&self.c, [row, col], value);
        }
    }

    fn vector_load(&self, ptr: Expr) -> Expr {
        Expr::call(Intrinsic::VectorLoad { dtype: self.vec_t }, vec![ptr])
    }

    fn emit(&self, fb: &mut FunctionBuilder) -> Result<(), TemplateError> {
        let scratch = self.parallel_k().then(|| {
            fb.register_tensor(
                "k_parts",
                DataType::F32,
                row_major([
                    self.kparts,
                    self.s.batch,
                    self.pm * self.mr,
                    self.pn * self.nr,
                ]),
            )
        });
        let g = self.grid;
        let threads = spatial([g.k, g.batch, g.rows, g.cols])?;
        let batches = repeat([self.cb])?;
        let col_blocks = repeat([ceil_div(self.cn, self.ncp)])?;
        let row_blocks = repeat([ceil_div(self.cm, self.mcp)])?;
        fb.for_range_with("t", self.threads, LoopKind::Parallel, |fb, t| {
            let f32_ = DataType::F32;
            let bufs = Buffers {
                packed_a: matches!(self.a_layout, ALayout::RowMajor | ALayout::ColumnMajor).then(
                    || {
                        fb.register_tensor(
                            "packed_a",
                            f32_,
                            row_major([self.mcp, self.kc, self.mr]),
                        )
                    },
                ),
                packed_b: (!self.stream_b && self.b_layout != BLayout::Panels).then(|| {
                    fb.register_tensor("packed_b", f32_, row_major([self.ncp, self.kc, self.nr]))
                }),
                partial: self.sliced.then(|| {
                    fb.register_tensor(
                        "partial",
                        self.vec_t,
                        row_major([self.ncp, self.mcp, self.mr, self.nr / self.w]),
                    )
                }),
                scratch: scratch.clone(),
            };
            fb.for_each(threads.on(t), |fb, tg| {
                let (pk, pb, pr, pc) = (&tg[0], &tg[1], &tg[2], &tg[3]);
                let (rp0, rp1) = (self.row_split.start_expr(pr), self.row_split.end_expr(pr));
                let (cp0, cp1) = (self.col_split.start_expr(pc), self.col_split.end_expr(pc));
                let mut busy = Vec::new();
                if (g.k - 1) * self.ck >= self.s.k {
                    busy.push(pk.lt(self.kparts));
                }
                if self.row_split.has_idle_thread() {
                    busy.push(rp0.lt(&rp1));
                }
                if self.col_split.has_idle_thread() {
                    busy.push(cp0.lt(&cp1));
                }
                guarded(fb, busy, |fb| {
                    let k_len = if g.k > 1 {
                        Expr::int(self.ck).min(Expr::int(self.s.k) - pk * self.ck)
                    } else {
                        Expr::int(self.s.k)
                    };
                    fb.let_in("k_len", k_len, |fb, k_len| {
                        fb.for_each(batches.on(0), |fb, bi| {
                            let batch = pb * self.cb + &bi[0];
                            let guard =
                                (self.cb * g.batch > self.s.batch).then(|| batch.lt(self.s.batch));
                            guarded(fb, guard.into_iter().collect(), |fb| {
                                fb.let_in("b", batch, |fb, batch| {
                                    self.thread_blocks(
                                        fb,
                                        &bufs,
                                        pk,
                                        &batch,
                                        &k_len,
                                        &rp0,
                                        &rp1,
                                        &cp0,
                                        &cp1,
                                        &col_blocks,
                                        &row_blocks,
                                    );
                                });
                            });
                        });
                    });
                });
            });
        });
        if let Some(scratch) = &scratch {
            self.reduce_parts(fb, scratch)?;
        }
        Ok(())
    }

    /// One thread's work in one batch: its `MC × NC` tiles, each over its
    /// `KC`-slices.
    #[allow(clippy::too_many_arguments)]
    fn thread_blocks(
        &self,
        fb: &mut FunctionBuilder,
        bufs: &Buffers,
        pk: &Expr,
        batch: &Expr,
        k_len: &Expr,
        rp0: &Expr,
        rp1: &Expr,
        cp0: &Expr,
        cp1: &Expr,
        col_blocks: &TaskMapping,
        row_blocks: &TaskMapping,
    ) {
        // With one `KC`-slice the packed `B` block is the same for every row block: pack it
        // once per column block instead of once per tile.
        let hoisted_b = bufs
            .packed_b
            .as_ref()
            .filter(|_| ceil_div(self.ck, self.kc) == 1 && ceil_div(self.cm, self.mcp) > 1);
        fb.for_each(col_blocks.on(0), |fb, nb| {
            let qb0 = cp0 + &nb[0] * self.ncp;
            fb.if_then(qb0.lt(cp1), |fb| {
                fb.let_in("nq", Expr::int(self.ncp).min(cp1 - &qb0), |fb, nq| {
                    let slice_at = |pb0: Expr, np: Expr, kb: Expr, kc_len: Expr| At {
                        pk: pk.clone(),
                        batch: batch.clone(),
                        k_len: k_len.clone(),
                        pb0,
                        qb0: qb0.clone(),
                        np,
                        nq: nq.clone(),
                        k0: pk * self.ck + &kb * self.kc,
                        kb,
                        kc_len,
                    };
                    if let Some(packed_b) = hoisted_b {
                        let kc_len = Expr::int(self.kc).min(k_len.clone());
                        fb.let_in("kc", kc_len, |fb, kc_len| {
                            let at = slice_at(Expr::int(0), Expr::int(0), Expr::int(0), kc_len);
                            self.pack_b(fb, packed_b, &at);
                        });
                    }
                    fb.for_each(row_blocks.on(0), |fb, mb| {
                        let pb0 = rp0 + &mb[0] * self.mcp;
                        fb.if_then(pb0.lt(rp1), |fb| {
                            fb.let_in("np", Expr::int(self.mcp).min(rp1 - &pb0), |fb, np| {
                                fb.for_range("kb", ceil_div(self.ck, self.kc), |fb, kb| {
                                    let kofs = &kb * self.kc;
                                    let guard = self.parallel_k().then(|| kofs.lt(k_len));
                                    guarded(fb, guard.into_iter().collect(), |fb| {
                                        let kc_len = Expr::int(self.kc).min(k_len - &kofs);
                                        fb.let_in("kc", kc_len, |fb, kc_len| {
                                            let at = slice_at(pb0.clone(), np.clone(), kb, kc_len);
                                            if let Some(packed_a) = &bufs.packed_a {
                                                self.pack_a(fb, packed_a, &at);
                                            }
                                            if let (Some(packed_b), None) =
                                                (&bufs.packed_b, hoisted_b)
                                            {
                                                self.pack_b(fb, packed_b, &at);
                                            }
                                            self.macro_kernel(fb, bufs, &at);
                                        });
                                    });
                                });
                            });
                        });
                    });
                });
            });
        });
    }

    /// `packed_a[p, kk, i] = A[b, (pb0 + p)·MR + i, k0 + kk]` for the real
    /// rows of each panel of the tile (padding rows are never read): along `K`
    /// for a row-major `A`; for a column-major one, column by column of the
    /// tile (so each column is read contiguously), each panel's part a SIMD loop.
    fn pack_a(&self, fb: &mut FunctionBuilder, packed_a: &Var, at: &At) {
        let panels = mapping(repeat([self.mcp]));
        match self.a_layout {
            ALayout::RowMajor => fb.for_each(panels.on(0), |fb, pv| {
                let p = &pv[0];
                fb.if_then(p.lt(&at.np), |fb| {
                    let row0 = (&at.pb0 + p) * self.mr;
                    let rows = Expr::int(self.mr).min(Expr::int(self.s.m) - &row0);
                    fb.for_range("i", rows, |fb, i| {
                        fb.for_range("kk", &at.kc_len, |fb, kk| {
                            let value = self.a_at(&at.batch, &row0 + &i, &at.k0 + &kk);
                            fb.store(packed_a, [p.clone(), kk, i.clone()], value);
                        });
                    });
                });
            }),
            ALayout::Panels { .. } | ALayout::InPlace => {}
            ALayout::ColumnMajor => fb.for_range("kk", &at.kc_len, |fb, kk| {
                fb.for_each(panels.on(0), |fb, pv| {
                    let p = &pv[0];
                    fb.if_then(p.lt(&at.np), |fb| {
                        let gp = &at.pb0 + p;
                        let row0 = &gp * self.mr;
                        let copy = |fb: &mut FunctionBuilder, rows: i64| {
                            fb.for_range_with("i", rows, LoopKind::Vectorize, |fb, i| {
                                let value = self.a_at(&at.batch, &row0 + &i, &at.k0 + &kk);
                                fb.store(packed_a, [p.clone(), kk.clone(), i], value);
                            });
                        };
                        let last = gp.eq(self.pm - 1);
                        full_or_edge(fb, self.m_edge > 0, last, self.mr, self.m_edge, copy);
                    });
                });
            }),
        }
    }

    /// `packed_b[q, kk, j] = B[b, k0 + kk, (qb0 + q)·NR + j]`, panel by panel, each
    /// panel's rows in order (the buffer is written sequentially, and a fused gather's
    /// index arithmetic on the column, such as im2col's division by the output width,
    /// stays the same across the panel's rows, where the C compiler hoists it); in the
    /// last, partial panel the columns past `N` up to a whole vector are zero.
    fn pack_b(&self, fb: &mut FunctionBuilder, packed_b: &Var, at: &At) {
        let panels = mapping(repeat([self.ncp]));
        fb.for_each(panels.on(0), |fb, qv| {
            let q = &qv[0];
            fb.if_then(q.lt(&at.nq), |fb| {
                fb.for_range("kk", &at.kc_len, |fb, kk| {
                    let krow = &at.k0 + &kk;
                    let gq = &at.qb0 + q;
                    let col0 = &gq * self.nr;
                    let copy = |fb: &mut FunctionBuilder, cols: i64, zeros: i64| {
                        let dst = |j: Expr| (packed_b.clone(), vec![q.clone(), kk.clone(), j]);
                        self.copy_b_row(fb, &at.batch, &krow, &col0, cols, zeros, dst);
                    };
                    let padded = ceil_div(self.n_edge, self.w) * self.w;
                    let (full, edge) = ((self.nr, 0), (self.n_edge, padded - self.n_edge));
                    full_or_edge(
                        fb,
                        self.n_edge > 0,
                        gq.eq(self.pn - 1),
                        full,
                        edge,
                        |fb, c| copy(fb, c.0, c.1),
                    );
                });
            });
        });
    }

    /// `dst(j) = B[b, krow, col0 + j]` for the `cols` columns `j < cols` (a SIMD loop), then
    /// `dst(j) = 0` for the next `zeros`.
    #[allow(clippy::too_many_arguments)]
    fn copy_b_row(
        &self,
        fb: &mut FunctionBuilder,
        batch: &Expr,
        krow: &Expr,
        col0: &Expr,
        cols: i64,
        zeros: i64,
        dst: impl Fn(Expr) -> (Var, Vec<Expr>),
    ) {
        fb.for_range_with("j", cols, LoopKind::Vectorize, |fb, j| {
            let value = self.b_at(batch, krow.clone(), col0 + &j);
            let (buf, at) = dst(j);
            fb.store(&buf, at, value);
        });
        if zeros > 0 {
            let pads = mapping(repeat_unrolled([zeros]));
            fb.for_each(pads.on(0), |fb, jv| {
                let (buf, at) = dst(&jv[0] + cols);
                fb.store(&buf, at, Expr::f32(0.0));
            });
        }
    }

    /// Whether [`Plan::macro_kernel`] visits a cache block's tiles row panel by row panel
    /// (panels of `B` innermost, so one `A` panel stays in L1) rather than column panel by
    /// column panel: for constant weights stored as panels ([`ALayout::Panels`]) times
    /// activations, stored row by row ([`CLayout::RowMajor`]: a channels-first pointwise
    /// convolution). Consecutive tiles then store, and an epilogue reads (a residual), runs
    /// of `NC` consecutive columns of each row rather than `NR` columns of every row in
    /// turn, which the hardware prefetches: ResNet-50's pointwise convolutions with a
    /// residual 1.06–1.2× faster, 1.4× with cold caches. Other products keep the column
    /// order, where the `B` panel in L1 is a constant weight (direct convolutions 1.1–1.2×
    /// slower row by row).
    fn tiles_by_row(&self) -> bool {
        matches!(self.a_layout, ALayout::Panels { .. }) && self.c_layout == CLayout::RowMajor
    }

    /// Runs the micro-kernel on every pair of packed panels of the tile, in the order of
    /// [`Plan::tiles_by_row`]; the last row and column panels use variants sized for them.
    fn macro_kernel(&self, fb: &mut FunctionBuilder, bufs: &Buffers, at: &At) {
        let block = [self.mcp, self.ncp];
        let tiles = mapping(if self.tiles_by_row() {
            repeat(block)
        } else {
            column_repeat(block)
        });
        let full = Micro {
            rows: self.mr,
            vecs: self.nr / self.w,
            cols: self.nr,
        };
        let m_edge = Micro {
            rows: self.m_edge,
            ..full
        };
        let n_edge = Micro {
            vecs: ceil_div(self.n_edge, self.w),
            cols: self.n_edge,
            ..full
        };
        let both = Micro {
            rows: self.m_edge,
            ..n_edge
        };
        fb.for_each(tiles.on(0), |fb, pq| {
            let (p, q) = (&pq[0], &pq[1]);
            fb.if_then(p.lt(&at.np).and(q.lt(&at.nq)), |fb| {
                let gp = &at.pb0 + p;
                let gq = &at.qb0 + q;
                let last_row = gp.eq(self.pm - 1);
                let last_col = gq.eq(self.pn - 1);
                let micro = |fb: &mut FunctionBuilder, shape: Micro| {
                    self.micro_kernel(fb, bufs, at, p, q, &gp, &gq, shape)
                };
                let by_col = |fb: &mut FunctionBuilder, rows_variant: Micro, col_variant: Micro| {
                    let last = last_col.clone();
                    full_or_edge(fb, self.n_edge > 0, last, rows_variant, col_variant, micro);
                };
                full_or_edge(
                    fb,
                    self.m_edge > 0,
                    last_row,
                    (full, n_edge),
                    (m_edge, both),
                    |fb, v| by_col(fb, v.0, v.1),
                );
            });
        });
    }

    /// One `rows × vecs·W` register tile over the current `K`-slice: start
    /// from zero (first slice) or the partial tile, accumulate, then keep
    /// the sums (not the last slice) or hand them to [`Plan::sink`]. With
    /// [`Plan::stream_b`] each row of the `B` panel is first copied to a
    /// one-row buffer that stays in L1, rather than packed for reuse.
    #[allow(clippy::too_many_arguments)]
    fn micro_kernel(
        &self,
        fb: &mut FunctionBuilder,
        bufs: &Buffers,
        at: &At,
        p: &Expr,
        q: &Expr,
        gp: &Expr,
        gq: &Expr,
        shape: Micro,
    ) {
        let registers = mapping(repeat_unrolled([shape.rows, shape.vecs]));
        let acc = fb.register_tensor("acc", self.vec_t, row_major([shape.rows, shape.vecs]));
        let zero = |fb: &mut FunctionBuilder| {
            fb.for_each(registers.on(0), |fb, ij| {
                fb.store(&acc, ij.to_vec(), Expr::zero(self.vec_t));
            });
        };
        let partial_at = |ij: &[Expr]| vec![q.clone(), p.clone(), ij[0].clone(), ij[1].clone()];
        match &bufs.partial {
            Some(partial) => fb.if_then_else(at.kb.eq(0), zero, |fb| {
                fb.for_each(registers.on(0), |fb, ij| {
                    fb.store(&acc, ij.to_vec(), partial.at(partial_at(ij)));
                });
            }),
            None => zero(fb),
        }
        let row_len = shape.vecs * self.w;
        let b_source = match &bufs.packed_b {
            _ if self.b_layout == BLayout::Panels => BPanel::InPlace,
            Some(packed_b) => BPanel::Packed(packed_b),
            None => BPanel::Row(fb.register_tensor("b_row", DataType::F32, row_major([row_len]))),
        };
        let col0 = gq * self.nr;
        let steps = LoopKind::Unroll(Some(MICRO_KERNEL_UNROLL));
        fb.for_range_with("kk", &at.kc_len, steps, |fb, kk| {
            if let BPanel::Row(b_row) = &b_source {
                let krow = &at.k0 + &kk;
                let dst = |j: Expr| (b_row.clone(), vec![j]);
                self.copy_b_row(
                    fb,
                    &at.batch,
                    &krow,
                    &col0,
                    shape.cols,
                    row_len - shape.cols,
                    dst,
                );
            }
            fb.for_each(registers.on(0), |fb, ij| {
                let (i, j) = (&ij[0], &ij[1]);
                let a_i = match &bufs.packed_a {
                    Some(packed_a) => packed_a.at([p.clone(), kk.clone(), i.clone()]),
                    None => self.a_at(&at.batch, gp * self.mr + i, &at.k0 + &kk),
                };
                let b_at = match &b_source {
                    BPanel::Packed(packed_b) => packed_b.at([q.clone(), kk.clone(), j * self.w]),
                    BPanel::Row(b_row) => b_row.at([j * self.w]),
                    BPanel::InPlace => self.b_in_place(&at.batch, gq, &at.k0 + &kk, j),
                };
                let b_j = self.vector_load(b_at.address());
                let sum = a_i.broadcast(self.vec_t.lanes).fma(b_j, acc.at([i, j]));
                fb.store(&acc, [i, j], sum);
            });
        });
        let row0 = gp * self.mr;
        match &bufs.partial {
            Some(partial) => {
                let last = (&at.kb * self.kc + self.kc).ge(&at.k_len);
                fb.if_then_else(
                    last,
                    |fb| self.sink(fb, bufs, at, &acc, &row0, &col0, shape),
                    |fb| {
                        fb.for_each(registers.on(0), |fb, ij| {
                            fb.store(partial, partial_at(ij), acc.at(ij.to_vec()));
                        });
                    },
                );
            }
            None => self.sink(fb, bufs, at, &acc, &row0, &col0, shape),
        }
    }

    /// The element of a [`BLayout::Panels`] `B` where vector `j` of column panel `gq` of the
    /// micro-kernel starts in row `krow`: `NR`-column panels are whole 16-column panels when
    /// `NR` is a multiple of 16, so the panel and offset are then known per vector.
    fn b_in_place(&self, batch: &Expr, gq: &Expr, krow: Expr, j: &Expr) -> Expr {
        let width = B_PANEL_WIDTH;
        if self.nr % width == 0 {
            let panel = gq * (self.nr / width) + j * self.w / width;
            self.b_panel_at(batch, panel, krow, j * self.w % width)
        } else {
            self.b_at(batch, krow, gq * self.nr + j * self.w)
        }
    }

    /// Hands the finished sums of a register tile on: into this `K`-part's
    /// slot of the parallel-k buffer (whole vectors), or as the final value
    /// of each element of `C`, stored once with an element store.
    #[allow(clippy::too_many_arguments)]
    fn sink(
        &self,
        fb: &mut FunctionBuilder,
        bufs: &Buffers,
        at: &At,
        acc: &Var,
        row0: &Expr,
        col0: &Expr,
        shape: Micro,
    ) {
        let registers = mapping(repeat_unrolled([shape.rows, shape.vecs]));
        if let Some(scratch) = &bufs.scratch {
            fb.for_each(registers.on(0), |fb, ij| {
                let dst = scratch
                    .at([
                        at.pk.clone(),
                        at.batch.clone(),
                        row0 + &ij[0],
                        col0 + &ij[1] * self.w,
                    ])
                    .address();
                fb.call(Intrinsic::VectorStore, vec![dst, acc.at(ij.to_vec())]);
            });
            return;
        }
        let tile = fb.register_tensor(
            "tile",
            DataType::F32,
            row_major([shape.rows, shape.vecs * self.w]),
        );
        fb.for_each(registers.on(0), |fb, ij| {
            let dst = tile.at([ij[0].clone(), &ij[1] * self.w]).address();
            fb.call(Intrinsic::VectorStore, vec![dst, acc.at(ij.to_vec())]);
        });
        // Each row (each column, for a column-major `C`) is a SIMD loop, so the
        // compiler turns it into vector stores and the fused epilogue's selects
        // (clip, relu) into blends rather than data-dependent branches; the outer
        // axis stays a loop, which keeps the epilogue's code (and compile time) small.
        let (outer, inner) = match self.c_layout {
            CLayout::RowMajor => (shape.rows, shape.cols),
            CLayout::ColumnMajor => (shape.cols, shape.rows),
        };
        let elements = mapping(repeat_with(
            [outer, inner],
            vec![0, 1],
            vec![LoopKind::Serial, LoopKind::Vectorize],
        ));
        fb.for_each(elements.on(0), |fb, ij| {
            let (i, j) = match self.c_layout {
                CLayout::RowMajor => (&ij[0], &ij[1]),
                CLayout::ColumnMajor => (&ij[1], &ij[0]),
            };
            let value = tile.at([i.clone(), j.clone()]);
            self.store_c(fb, &at.batch, row0 + i, col0 + j, value);
        });
    }

    /// The second pass of parallel-k: `C[b, i, j] = Σ_p parts[p, b, i, j]`,
    /// rows of `batch × M` spread over the threads.
    fn reduce_parts(&self, fb: &mut FunctionBuilder, scratch: &Var) -> Result<(), TemplateError> {
        let rows = self.s.batch * self.s.m;
        let per_thread = ceil_div(rows, self.threads);
        let rows_of_thread = spatial([self.threads])? * repeat([per_thread])?;
        fb.for_range_with("t", self.threads, LoopKind::Parallel, |fb, t| {
            fb.for_each(rows_of_thread.on(t), |fb, r| {
                let r = &r[0];
                fb.if_then(r.lt(rows), |fb| {
                    let (batch, row) = if self.s.batch == 1 {
                        (Expr::int(0), r.clone())
                    } else {
                        (r / self.s.m, r % self.s.m)
                    };
                    fb.let_in("b", batch, |fb, batch| {
                        fb.let_in("i", row, |fb, row| {
                            fb.for_range("j", self.s.n, |fb, j| {
                                let total = (0..self.kparts)
                                    .map(|p| {
                                        scratch.at([
                                            Expr::int(p),
                                            batch.clone(),
                                            row.clone(),
                                            j.clone(),
                                        ])
                                    })
                                    .reduce(|x, y| x + y)
                                    .unwrap_or_else(|| Expr::f32(0.0));
                                self.store_c(fb, &batch, row.clone(), j, total);
                            });
                        });
                    });
                });
            });
        });
        Ok(())
    }
}

/// `body(full)`; but when the last panel is partial (`has_edge`), `body(edge)` where `last`
/// holds and `body(full)` elsewhere.
fn full_or_edge<T: Copy>(
    fb: &mut FunctionBuilder,
    has_edge: bool,
    last: Expr,
    full: T,
    edge: T,
    body: impl Fn(&mut FunctionBuilder, T),
) {
    if has_edge {
        fb.if_then_else(last, |fb| body(fb, edge), |fb| body(fb, full));
    } else {
        body(fb, full);
    }
}

/// The size of each of the fewest blocks of at most `max` panels that cover `panels`,
/// as even as possible (the last may be smaller by less than one block count).
fn balanced_block(panels: i64, max: i64) -> i64 {
    let max = max.max(1);
    let blocks = ceil_div(panels, max);
    ceil_div(panels, blocks)
}

/// `if c1 && c2 && … { body }`, or just `body` when there is no condition.
fn guarded(fb: &mut FunctionBuilder, conds: Vec<Expr>, body: impl FnOnce(&mut FunctionBuilder)) {
    match conds.into_iter().reduce(|x, y| x.and(y)) {
        Some(cond) => fb.if_then(cond, body),
        None => body(fb),
    }
}
