//! The fp32 matmul template for the CPU: `C[M, N] = A[M, K] · B[K, N]`, all
//! row-major, written with task mappings.
//!
//! The schedule is hardware-centric (see [`MatmulSchedule`]): a micro-kernel
//! of `MR × NR` outputs held in `MR × NR/W` SIMD registers of `W` lanes,
//! cache blocks `MC × NC × KC`, and a thread count. The output is cut into
//! `MC × NC` tiles; a spatial mapping of threads over the tile grid, composed
//! with a repeat mapping, gives each thread a contiguous block of tiles. For
//! every tile and every `KC`-slice of `K`, a thread packs the slice of `A`
//! into `MR`-row panels and the slice of `B` into `NR`-column panels (its own
//! buffers, zero-padded past `M` and `N`), then runs the micro-kernel over
//! every pair of panels. Sizes need not be multiples of anything: panels
//! beyond `M`/`N` are skipped, partial panels are zero-padded when packed,
//! and partial output tiles are written with per-element predication.

use crate::error::TemplateError;
use crate::target::CpuTarget;
use hidet_ir::prelude::*;

/// The schedule of [`matmul_f32`]; every field is a plain value chosen for
/// the hardware, independent of the problem size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulSchedule {
    /// Rows of the micro-kernel's register tile.
    pub mr: i64,
    /// Columns of the micro-kernel's register tile; a multiple of `lanes`.
    pub nr: i64,
    /// `f32` lanes per SIMD vector (`W`).
    pub lanes: u16,
    /// Rows of a cache block of `A` (a multiple of `mr`).
    pub mc: i64,
    /// Columns of a cache block of `B` (a multiple of `nr`).
    pub nc: i64,
    /// Depth of a cache block.
    pub kc: i64,
    /// Threads the output tiles are spread over.
    pub threads: i64,
}

impl MatmulSchedule {
    /// A schedule suited to `target`'s SIMD width and register count, for
    /// `threads` threads.
    pub fn for_target(target: &CpuTarget, threads: i64) -> MatmulSchedule {
        let lanes = target.f32_lanes();
        let (mr, nr, kc) = match lanes {
            16 => (14, 32, 256),
            8 => (6, 16, 256),
            4 => (6, 8, 256),
            _ => (4, 4, 128),
        };
        MatmulSchedule {
            mr,
            nr,
            lanes,
            mc: mr * 12,
            nc: nr * 16,
            kc,
            threads,
        }
    }

    /// Checks the schedule's constraints: positive sizes, `nr` a multiple
    /// of `lanes`, `mc` of `mr`, `nc` of `nr`.
    pub fn validate(&self) -> Result<(), TemplateError> {
        let bad = |why: String| Err(TemplateError::InvalidSchedule(format!("{self:?}: {why}")));
        let w = i64::from(self.lanes);
        if [self.mr, self.nr, self.mc, self.nc, self.kc, self.threads, w]
            .iter()
            .any(|&v| v <= 0)
        {
            return bad("every size must be positive".into());
        }
        if self.nr % w != 0 {
            return bad(format!("nr = {} is not a multiple of lanes = {w}", self.nr));
        }
        if self.mc % self.mr != 0 {
            return bad(format!(
                "mc = {} is not a multiple of mr = {}",
                self.mc, self.mr
            ));
        }
        if self.nc % self.nr != 0 {
            return bad(format!(
                "nc = {} is not a multiple of nr = {}",
                self.nc, self.nr
            ));
        }
        Ok(())
    }

    /// The thread grid `(tm, tn)` with `tm · tn = threads` that gives the
    /// fewest tiles to the busiest thread for a `gm × gn` tile grid,
    /// preferring to split rows on ties.
    pub fn thread_grid(&self, gm: i64, gn: i64) -> (i64, i64) {
        let t = self.threads;
        (1..=t)
            .filter(|tm| t % tm == 0)
            .map(|tm| (tm, t / tm))
            .min_by_key(|&(tm, tn)| (ceil_div(gm, tm) * ceil_div(gn, tn), -tm))
            .unwrap_or((1, t))
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn round_up(a: i64, b: i64) -> i64 {
    ceil_div(a, b) * b
}

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
    schedule.validate()?;
    if m <= 0 || n <= 0 || k <= 0 {
        return Err(TemplateError::InvalidShape(format!(
            "matmul sizes must be positive, got m={m} n={n} k={k}"
        )));
    }
    let largest = [m * k, k * n, m * n].into_iter().max().unwrap_or(0);
    if largest >= i64::from(i32::MAX) {
        return Err(TemplateError::InvalidShape(format!(
            "matmul of m={m} n={n} k={k} has an operand of 2^31 elements or more"
        )));
    }
    let mut fb = FunctionBuilder::cpu_kernel(name);
    let a = fb.tensor_param("A", DataType::F32, [m, k]);
    let b = fb.tensor_param("B", DataType::F32, [k, n]);
    let c = fb.tensor_param("C", DataType::F32, [m, n]);
    let s = schedule;
    let plan = Plan {
        a,
        b,
        c,
        m,
        n,
        mr: s.mr,
        nr: s.nr,
        w: i64::from(s.lanes),
        vec_t: DataType::vector(ScalarType::F32, s.lanes),
        // Cache blocks never exceed the (padded) problem, so buffers stay small.
        mc: s.mc.min(round_up(m, s.mr)),
        nc: s.nc.min(round_up(n, s.nr)),
        kc: s.kc.min(k),
    };
    let (gm, gn) = (ceil_div(m, plan.mc), ceil_div(n, plan.nc));
    let (tm, tn) = s.thread_grid(gm, gn);
    // Thread t owns a contiguous block of ceil(gm/tm) x ceil(gn/tn) tiles.
    let tiles_of_thread = spatial([tm, tn])? * repeat([ceil_div(gm, tm), ceil_div(gn, tn)])?;
    let k_slices = ceil_div(k, plan.kc);

    fb.for_range_with("t", s.threads, LoopKind::Parallel, |fb, t| {
        let packed_a = fb.register_tensor(
            "packed_a",
            DataType::F32,
            row_major([plan.mc / plan.mr, plan.kc, plan.mr]),
        );
        let packed_b = fb.register_tensor(
            "packed_b",
            DataType::F32,
            row_major([plan.nc / plan.nr, plan.kc, plan.nr]),
        );
        fb.for_each(tiles_of_thread.on(t), |fb, tile| {
            fb.if_then(tile[0].lt(gm).and(tile[1].lt(gn)), |fb| {
                let m0 = &tile[0] * plan.mc;
                let n0 = &tile[1] * plan.nc;
                fb.for_range("kb", k_slices, |fb, kb| {
                    let k0 = &kb * plan.kc;
                    let kc_len = Expr::int(plan.kc).min(Expr::int(k) - &k0);
                    fb.let_in("kc", kc_len, |fb, kc_len| {
                        let slice = Slice {
                            m0: &m0,
                            n0: &n0,
                            k0: &k0,
                            kc_len: &kc_len,
                            first: kb.eq(0),
                        };
                        plan.pack_a(fb, &packed_a, &slice);
                        plan.pack_b(fb, &packed_b, &slice);
                        plan.macro_kernel(fb, &packed_a, &packed_b, &slice);
                    });
                });
            });
        });
    });
    Ok(fb.finish())
}

/// The constants of one instantiation and its parameters.
struct Plan {
    a: Var,
    b: Var,
    c: Var,
    m: i64,
    n: i64,
    mr: i64,
    nr: i64,
    w: i64,
    vec_t: DataType,
    mc: i64,
    nc: i64,
    kc: i64,
}

/// The position of one packed block: output tile origin, K-slice origin and
/// length, and whether it is the first K-slice.
struct Slice<'e> {
    m0: &'e Expr,
    n0: &'e Expr,
    k0: &'e Expr,
    kc_len: &'e Expr,
    first: Expr,
}

impl Plan {
    fn mapping(result: Result<TaskMapping, hidet_ir::mapping::MappingError>) -> TaskMapping {
        result.expect("extents are positive: the schedule and shape were validated")
    }

    fn vector_load(&self, ptr: Expr) -> Expr {
        Expr::call(Intrinsic::VectorLoad { dtype: self.vec_t }, vec![ptr])
    }

    /// `packed_a[p, kk, i] = A[m0 + p·MR + i, k0 + kk]`, zero for rows past
    /// `M`; panels starting past `M` are skipped.
    fn pack_a(&self, fb: &mut FunctionBuilder, packed_a: &Var, at: &Slice<'_>) {
        let rows = Plan::mapping(repeat([self.mc / self.mr, self.mr]));
        fb.for_each(rows.on(0), |fb, pi| {
            let (p, i) = (&pi[0], &pi[1]);
            let panel_row0 = at.m0 + p * self.mr;
            let row = &panel_row0 + i;
            fb.if_then(panel_row0.lt(self.m), |fb| {
                fb.if_then_else(
                    row.lt(self.m),
                    |fb| {
                        fb.for_range("kk", at.kc_len, |fb, kk| {
                            let value = self.a.at([row.clone(), at.k0 + &kk]);
                            fb.store(packed_a, [p.clone(), kk, i.clone()], value);
                        });
                    },
                    |fb| {
                        fb.for_range("kk", at.kc_len, |fb, kk| {
                            fb.store(packed_a, [p.clone(), kk, i.clone()], Expr::f32(0.0));
                        });
                    },
                );
            });
        });
    }

    /// `packed_b[q, kk, j] = B[k0 + kk, n0 + q·NR + j]`, zero for columns
    /// past `N`; whole vectors where the panel lies inside `N`.
    fn pack_b(&self, fb: &mut FunctionBuilder, packed_b: &Var, at: &Slice<'_>) {
        let panels = Plan::mapping(repeat([self.nc / self.nr]));
        let vectors = Plan::mapping(repeat_unrolled([self.nr / self.w]));
        fb.for_each(panels.on(0), |fb, qv| {
            let q = &qv[0];
            let col0 = at.n0 + q * self.nr;
            fb.if_then(col0.lt(self.n), |fb| {
                fb.for_range("kk", at.kc_len, |fb, kk| {
                    let krow = at.k0 + &kk;
                    fb.if_then_else(
                        (&col0 + self.nr).le(self.n),
                        |fb| {
                            fb.for_each(vectors.on(0), |fb, jv| {
                                let j = &jv[0] * self.w;
                                let v = self
                                    .vector_load(self.b.at([krow.clone(), &col0 + &j]).address());
                                let dst = packed_b.at([q.clone(), kk.clone(), j]).address();
                                fb.call(Intrinsic::VectorStore, vec![dst, v]);
                            });
                        },
                        |fb| {
                            fb.for_range("j", self.nr, |fb, j| {
                                let col = &col0 + &j;
                                fb.if_then_else(
                                    col.lt(self.n),
                                    |fb| {
                                        let value = self.b.at([krow.clone(), col.clone()]);
                                        fb.store(
                                            packed_b,
                                            [q.clone(), kk.clone(), j.clone()],
                                            value,
                                        );
                                    },
                                    |fb| {
                                        fb.store(
                                            packed_b,
                                            [q.clone(), kk.clone(), j.clone()],
                                            Expr::f32(0.0),
                                        );
                                    },
                                );
                            });
                        },
                    );
                });
            });
        });
    }

    /// Runs the micro-kernel on every pair of packed panels inside `M × N`,
    /// panels of `A` innermost so one `B` panel stays in L1.
    fn macro_kernel(
        &self,
        fb: &mut FunctionBuilder,
        packed_a: &Var,
        packed_b: &Var,
        at: &Slice<'_>,
    ) {
        let micro_tiles = Plan::mapping(column_repeat([self.mc / self.mr, self.nc / self.nr]));
        let registers = Plan::mapping(repeat_unrolled([self.mr, self.nr / self.w]));
        fb.for_each(micro_tiles.on(0), |fb, pq| {
            let (p, q) = (&pq[0], &pq[1]);
            let row0 = at.m0 + p * self.mr;
            let col0 = at.n0 + q * self.nr;
            fb.if_then(row0.lt(self.m).and(col0.lt(self.n)), |fb| {
                let acc =
                    fb.register_tensor("acc", self.vec_t, row_major([self.mr, self.nr / self.w]));
                fb.for_each(registers.on(0), |fb, ij| {
                    fb.store(&acc, ij.to_vec(), Expr::zero(self.vec_t));
                });
                fb.for_range("kk", at.kc_len, |fb, kk| {
                    fb.for_each(registers.on(0), |fb, ij| {
                        let (i, j) = (&ij[0], &ij[1]);
                        let a_i = packed_a.at([p.clone(), kk.clone(), i.clone()]);
                        let b_j = self.vector_load(
                            packed_b.at([q.clone(), kk.clone(), j * self.w]).address(),
                        );
                        let sum = a_i.broadcast(self.vec_t.lanes).fma(b_j, acc.at([i, j]));
                        fb.store(&acc, [i, j], sum);
                    });
                });
                self.write_back(fb, &acc, &row0, &col0, &at.first);
            });
        });
    }

    /// Stores (first K-slice) or adds (later slices) the register tile `acc`
    /// into `C[row0.., col0..]`: whole vectors when the tile lies inside
    /// `C`, element by element with predication otherwise.
    fn write_back(
        &self,
        fb: &mut FunctionBuilder,
        acc: &Var,
        row0: &Expr,
        col0: &Expr,
        first: &Expr,
    ) {
        let registers = Plan::mapping(repeat_unrolled([self.mr, self.nr / self.w]));
        let elements = Plan::mapping(repeat([self.mr, self.nr]));
        let inside = (row0 + self.mr).le(self.m).and((col0 + self.nr).le(self.n));
        let c_vector = |ij: &[Expr]| self.c.at([row0 + &ij[0], col0 + &ij[1] * self.w]).address();
        fb.if_then_else(
            inside,
            |fb| {
                fb.if_then_else(
                    first,
                    |fb| {
                        fb.for_each(registers.on(0), |fb, ij| {
                            fb.call(
                                Intrinsic::VectorStore,
                                vec![c_vector(ij), acc.at(ij.to_vec())],
                            );
                        });
                    },
                    |fb| {
                        fb.for_each(registers.on(0), |fb, ij| {
                            let sum = self.vector_load(c_vector(ij)) + acc.at(ij.to_vec());
                            fb.call(Intrinsic::VectorStore, vec![c_vector(ij), sum]);
                        });
                    },
                );
            },
            |fb| {
                let tile = fb.register_tensor("tile", DataType::F32, row_major([self.mr, self.nr]));
                fb.for_each(registers.on(0), |fb, ij| {
                    let dst = tile.at([ij[0].clone(), &ij[1] * self.w]).address();
                    fb.call(Intrinsic::VectorStore, vec![dst, acc.at(ij.to_vec())]);
                });
                fb.for_each(elements.on(0), |fb, ij| {
                    let (row, col) = (row0 + &ij[0], col0 + &ij[1]);
                    fb.if_then(row.lt(self.m).and(col.lt(self.n)), |fb| {
                        let old = Expr::select(
                            first.clone(),
                            Expr::f32(0.0),
                            self.c.at([row.clone(), col.clone()]),
                        );
                        fb.store(&self.c, [row, col], old + tile.at(ij.to_vec()));
                    });
                });
            },
        );
    }
}
