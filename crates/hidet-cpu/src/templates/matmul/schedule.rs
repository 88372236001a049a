//! The hardware-centric schedule of the matmul template and the thread grid
//! it derives for a problem.

use super::split::PanelSplit;
use crate::error::TemplateError;
use crate::target::CpuTarget;

/// How the threads of a [`MatmulSchedule`] share the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThreadSplit {
    /// The split of batch, rows, columns and (when the partial sums fit
    /// [`PARALLEL_K_MAX_ELEMENTS`]) `K` that gives the busiest thread the
    /// least work; `K` is split only when that is strictly less work.
    Auto,
    /// Threads over the batch, then over rows.
    Rows,
    /// Threads over the batch, then over columns.
    Columns,
    /// Every thread computes all of `C` over its own part of `K`; a second
    /// parallel pass adds the parts. Acts as [`ThreadSplit::Auto`] when the
    /// partial sums would exceed [`PARALLEL_K_MAX_ELEMENTS`].
    ParallelK,
}

/// Which axis of `A` is contiguous in memory. It steers only the order in
/// which the template packs `A` (the kernel is correct with either), so that
/// the packing loop reads memory in order and vectorizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ALayout {
    /// `A[i, k]` and `A[i, k + 1]` are adjacent: packed along `K`.
    #[default]
    RowMajor,
    /// `A[i, k]` and `A[i + 1, k]` are adjacent (`A` is read through a
    /// transpose): packed column by column.
    ColumnMajor,
    /// Panels of `rows` rows, `Ap[⌈M / rows⌉, K, rows]` with `A[i, k] = Ap[i / rows, k,
    /// i % rows]` (constant weights prepacked at compile time): the micro-kernel broadcasts
    /// its elements in place and nothing is packed. Panels as tall as the register tile
    /// (`rows = MR`) give each tile one contiguous panel; any `rows` from 1 to 64 is correct.
    /// Rank-2 products only.
    Panels { rows: i64 },
    /// `A[i, k]` as it is, read by the micro-kernel's broadcasts one element at a time:
    /// nothing is packed. Meant for a stored row-major `A` (packing it would copy every
    /// element once more than the broadcasts read it, the whole cost of a product with few
    /// column panels; the `MR` rows of a tile are `MR` streams the hardware prefetches as
    /// well as one packed panel), and for an `A` that a fused prologue gathers without guards
    /// (a convolution's pixels-as-rows im2col over an unpadded input), where the
    /// broadcasts become a direct convolution's loads: the row part of each address is
    /// the same at every `k` and the `k` part the same for every row of the tile.
    InPlace,
}

/// How the template's `B` operand is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BLayout {
    /// `B[k, n]`, row-major: packed into `NR`-column panels on every use.
    #[default]
    RowMajor,
    /// Panels of [`B_PANEL_WIDTH`] columns, `Bp[⌈N / 16⌉, K, 16]` with `B[k, j] =
    /// Bp[j / 16, k, j % 16]` (padded with anything past `N`): the micro-kernel reads its
    /// vectors in place and nothing is packed (a batched product: one such tensor per batch,
    /// `Bp[b, ⌈N / 16⌉, K, 16]`). SIMD widths that divide the panel width only.
    Panels,
}

/// Which axis of `C` is contiguous where the task finally stores it (after fusion, the
/// layout the epilogue writes). It steers only the order of the loop that stores a finished
/// register tile (the kernel is correct with either), so that consecutive stores land on
/// consecutive addresses and vectorize.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CLayout {
    /// `C[i, j]` and `C[i, j + 1]` are adjacent: a tile is stored row by row.
    #[default]
    RowMajor,
    /// `C[i, j]` and `C[i + 1, j]` are adjacent (an epilogue that transposes, such as a
    /// convolution computed pixels-as-rows and stored channels-first): a tile is stored
    /// column by column.
    ColumnMajor,
}

/// Rows of a register tile whose column one vector store of 8 `f32` writes
/// ([`CLayout::ColumnMajor`]).
pub const COLUMN_STORE_ROWS: i64 = 8;

/// How the template reads its operands and stores its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Layouts {
    pub a: ALayout,
    pub b: BLayout,
    pub c: CLayout,
}

impl Layouts {
    /// `a` and `b` as given, `C` row-major.
    pub fn of(a: ALayout, b: BLayout) -> Layouts {
        Layouts {
            a,
            b,
            c: CLayout::RowMajor,
        }
    }
}

/// Columns per panel of [`BLayout::Panels`].
pub const B_PANEL_WIDTH: i64 = 16;

/// The largest number of `f32` partial sums (`K`-parts × batch × padded
/// `M × N`) a parallel-k kernel may keep; they live on the calling thread's
/// stack.
pub const PARALLEL_K_MAX_ELEMENTS: i64 = 1 << 17;

/// What packing one element of `A` costs, in multiply-adds of the micro-kernel: a scalar,
/// transposing copy against one lane of a vector FMA.
const PACK_A_COST: i64 = 16;
/// What packing one element of `B` costs, in multiply-adds: a vector copy (with masks for
/// fused prologues such as im2col).
const PACK_B_COST: i64 = 2;

/// What the second pass of parallel-k costs per partial sum, in multiply-adds: a store to
/// the stack buffer and a load and add in a separate parallel loop.
const REDUCE_COST: i64 = 16;

/// The schedule of the matmul template; every field is a plain value chosen
/// for the hardware, independent of the problem size.
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
    /// Threads the work is spread over.
    pub threads: i64,
    /// How the threads share the work.
    pub split: ThreadSplit,
}

/// The sizes of a (batch) matmul problem `C[b] = A[b] · B[b]`, with
/// `A: [a_batch, m, k]`, `B: [b_batch, k, n]`, `C: [batch, m, n]` where an
/// operand's batch is either `batch` or 1 (broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulShape {
    pub batch: i64,
    pub a_batch: i64,
    pub b_batch: i64,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

impl MatmulShape {
    /// A plain (batch 1) `m × n × k` matmul.
    pub fn plain(m: i64, n: i64, k: i64) -> MatmulShape {
        MatmulShape {
            batch: 1,
            a_batch: 1,
            b_batch: 1,
            m,
            n,
            k,
        }
    }

    /// Checks positive sizes, operand batches of `batch` or 1, and fewer
    /// than `2^31` elements per operand (indices are `i32`).
    pub fn validate(&self) -> Result<(), TemplateError> {
        let s = self;
        if [s.batch, s.a_batch, s.b_batch, s.m, s.n, s.k]
            .iter()
            .any(|&v| v <= 0)
        {
            return Err(TemplateError::InvalidShape(format!(
                "matmul sizes must be positive, got {s:?}"
            )));
        }
        for (name, b) in [("A", s.a_batch), ("B", s.b_batch)] {
            if b != 1 && b != s.batch {
                return Err(TemplateError::InvalidShape(format!(
                    "batch of {name} is {b}, neither 1 nor the batch {}",
                    s.batch
                )));
            }
        }
        let sizes = [
            s.a_batch.checked_mul(s.m).and_then(|v| v.checked_mul(s.k)),
            s.b_batch.checked_mul(s.k).and_then(|v| v.checked_mul(s.n)),
            s.batch.checked_mul(s.m).and_then(|v| v.checked_mul(s.n)),
        ];
        if sizes
            .iter()
            .any(|v| v.is_none_or(|v| v >= i64::from(i32::MAX)))
        {
            return Err(TemplateError::InvalidShape(format!(
                "matmul {s:?} has an operand of 2^31 elements or more"
            )));
        }
        Ok(())
    }

    /// Multiply-adds of the problem.
    pub fn macs(&self) -> i64 {
        self.batch * self.m * self.n * self.k
    }
}

/// How the threads of a kernel are arranged: `k · batch · rows · cols`
/// equals the schedule's thread count. Thread `t` is the row-major unravel
/// of `t` over `[k, batch, rows, cols]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThreadGrid {
    pub k: i64,
    pub batch: i64,
    pub rows: i64,
    pub cols: i64,
}

pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

pub(crate) fn round_up(a: i64, b: i64) -> i64 {
    ceil_div(a, b) * b
}

impl MatmulSchedule {
    /// A schedule with [`ThreadSplit::Auto`].
    pub fn new(mr: i64, nr: i64, lanes: u16, mc: i64, nc: i64, kc: i64, threads: i64) -> Self {
        MatmulSchedule {
            mr,
            nr,
            lanes,
            mc,
            nc,
            kc,
            threads,
            split: ThreadSplit::Auto,
        }
    }

    /// The level-0 pick for `target`'s SIMD width and register count, for
    /// `threads` threads (a member of `matmul_space(target, threads)`).
    pub fn for_target(target: &CpuTarget, threads: i64) -> MatmulSchedule {
        let lanes = target.f32_lanes();
        let (mr, nr, mc, nc, kc) = match lanes {
            // 54 row panels: a packed `A` block of 756 × 256 floats (756 KiB) stays in a
            // 1 MiB L2 (AVX-512 cores), and problems of up to 756 rows per thread with few
            // columns (late convolution stages) pack each `B` slice once.
            16 => (14, 32, 756, 512, 256),
            8 => (6, 16, 192, 512, 256),
            4 => (6, 8, 192, 512, 256),
            _ => (4, 4, 128, 256, 128),
        };
        MatmulSchedule::new(mr, nr, lanes, mc, nc, kc, threads)
    }

    /// This schedule with an `mr × nr` register tile, its cache blocks rounded up to the tile.
    pub fn with_tile(self, mr: i64, nr: i64) -> MatmulSchedule {
        MatmulSchedule {
            mr,
            nr,
            mc: round_up(self.mc, mr),
            nc: round_up(self.nc, nr),
            ..self
        }
    }

    /// Checks the schedule's constraints: positive sizes, `nr` a multiple
    /// of `lanes`, `mc` of `mr`, `nc` of `nr`, and `lanes` a power of two.
    pub fn validate(&self) -> Result<(), TemplateError> {
        let bad = |why: String| Err(TemplateError::InvalidSchedule(format!("{self:?}: {why}")));
        let w = i64::from(self.lanes);
        if [self.mr, self.nr, self.mc, self.nc, self.kc, self.threads, w]
            .iter()
            .any(|&v| v <= 0)
        {
            return bad("every size must be positive".into());
        }
        if !self.lanes.is_power_of_two() {
            return bad(format!("lanes = {w} is not a power of two"));
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

    /// The thread grid for `shape` under this schedule's [`ThreadSplit`]:
    /// among the grids the split allows, the one whose busiest thread has
    /// the least work: multiply-adds (rows exact, columns padded to `lanes`),
    /// packing (weighted by `PACK_A_COST` and `PACK_B_COST`) and the
    /// reduction pass of parallel-k; on ties, the fewest idle
    /// threads, the fewest `K` parts, then the most batch threads, then the
    /// most column threads.
    pub fn thread_grid(&self, shape: &MatmulShape) -> ThreadGrid {
        let t = self.threads.max(1);
        let (pm, pn) = (ceil_div(shape.m, self.mr), ceil_div(shape.n, self.nr));
        let w = i64::from(self.lanes.max(1));
        let k_fits = |tk: i64| {
            tk == 1
                || tk
                    .checked_mul(shape.batch * pm * self.mr * pn * self.nr)
                    .is_some_and(|v| v <= PARALLEL_K_MAX_ELEMENTS)
        };
        let divisors: Vec<i64> = (1..=t).filter(|d| t % d == 0).collect();
        let mut grids = Vec::new();
        for &tk in &divisors {
            for &tb in divisors.iter().filter(|&&d| (t / tk) % d == 0) {
                for &tm in divisors.iter().filter(|&&d| (t / tk / tb) % d == 0) {
                    let tn = t / tk / tb / tm;
                    grids.push(ThreadGrid {
                        k: tk,
                        batch: tb,
                        rows: tm,
                        cols: tn,
                    });
                }
            }
        }
        let allowed = |g: &ThreadGrid, split: ThreadSplit| match split {
            ThreadSplit::Auto => k_fits(g.k),
            ThreadSplit::Rows => g.k == 1 && g.cols == 1,
            ThreadSplit::Columns => g.k == 1 && g.rows == 1,
            ThreadSplit::ParallelK => g.k == t && k_fits(t),
        };
        let split = if self.split == ThreadSplit::ParallelK && !k_fits(t) {
            ThreadSplit::Auto
        } else {
            self.split
        };
        let cost = |g: &ThreadGrid| {
            let rows = PanelSplit::new(shape.m, self.mr, 1, g.rows).max_granules();
            let cols = PanelSplit::new(shape.n, self.nr, w, g.cols).max_granules() * w;
            let depth = ceil_div(shape.k, g.k);
            let batches = ceil_div(shape.batch, g.batch);
            let work = batches * rows * cols * depth;
            // Each thread packs its rows of `A` once per column block and its columns of
            // `B` once per row block.
            let row_blocks = ceil_div(rows, self.mc.max(1));
            let col_blocks = ceil_div(cols, self.nc.max(1));
            let packing = batches
                * depth
                * (PACK_A_COST * rows * col_blocks + PACK_B_COST * cols * row_blocks);
            let reduce = if g.k > 1 {
                REDUCE_COST * ceil_div(shape.batch * shape.m * shape.n * g.k, t)
            } else {
                0
            };
            let busy =
                g.k.min(shape.k) * g.batch.min(shape.batch) * g.rows.min(pm) * g.cols.min(pn);
            (work + packing + reduce, t - busy, g.k, -g.batch, -g.cols)
        };
        grids
            .into_iter()
            .filter(|g| allowed(g, split))
            .min_by_key(cost)
            .unwrap_or(ThreadGrid {
                k: 1,
                batch: 1,
                rows: 1,
                cols: t,
            })
    }
}
