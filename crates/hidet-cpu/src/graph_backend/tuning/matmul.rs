//! The matmul template as a [`Tunable`]: a task is an f32 matmul `M × N × K` (or a batch of
//! them, keyed with its batch sizes) on a number of threads, either alone or with the prologues and epilogue of a fused task inlined into
//! every candidate (post-scheduling fusion).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use hidet_graph::fusion::{fingerprint, FusedTask};
use hidet_ir::function::Function;
use hidet_tune::{Tunable, TuneLevel};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::graph_backend::anchor::{
    a_is_gathered, a_layout, is_batched, matmul_kernel, matmul_shape, stores_by_column,
    TemplateOutcome,
};
use crate::target::CpuTarget;
use crate::templates::matmul::{
    heuristic_for_gathered_rows, heuristic_for_gathered_rows_stored_by_column,
    heuristic_for_product, heuristic_for_stored_rows_on_avx512, matmul_candidates,
    matmul_f32_with_layout, matmul_space, with_depth, ALayout, MatmulSchedule, MatmulShape,
    ThreadSplit,
};

/// The name of the matmul template's schedule space.
pub const MATMUL_SPACE: &str = "cpu.matmul_f32";

/// Bumped by hand when the template changes in a way that the generated-IR probe of
/// [`matmul_template_version`] might not show, or when measurements change meaning (2: a
/// guard-free gather is packed when the register tile is narrower than the product; 3:
/// candidates are measured with cold inputs, see [`super::runner`]; 4: a stored left matrix
/// of a rank-2 product, or a reshape of one, is read in place, not packed; 5: a product
/// whose epilogue stores it column-major stores each tile column by column; 6: a product of
/// weight panels visits its tiles row panel by row panel).
pub const MATMUL_TEMPLATE_REVISION: u32 = 6;

/// Candidates measured at level 1: the best-ranked of the space that build distinct kernels
/// for the task's shape.
pub const LEVEL1_CANDIDATES: usize = 32;

/// A matmul schedule as stored in the tuning cache. Deserializing checks
/// [`MatmulSchedule::validate`], so a tampered record cannot yield an invalid schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ScheduleJson", into = "ScheduleJson")]
pub struct MatmulCandidate(pub MatmulSchedule);

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SplitJson {
    Auto,
    Rows,
    Columns,
    ParallelK,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct ScheduleJson {
    mr: i64,
    nr: i64,
    lanes: u16,
    mc: i64,
    nc: i64,
    kc: i64,
    threads: i64,
    split: SplitJson,
}

impl From<MatmulCandidate> for ScheduleJson {
    fn from(MatmulCandidate(s): MatmulCandidate) -> ScheduleJson {
        ScheduleJson {
            mr: s.mr,
            nr: s.nr,
            lanes: s.lanes,
            mc: s.mc,
            nc: s.nc,
            kc: s.kc,
            threads: s.threads,
            split: match s.split {
                ThreadSplit::Auto => SplitJson::Auto,
                ThreadSplit::Rows => SplitJson::Rows,
                ThreadSplit::Columns => SplitJson::Columns,
                ThreadSplit::ParallelK => SplitJson::ParallelK,
            },
        }
    }
}

impl TryFrom<ScheduleJson> for MatmulCandidate {
    type Error = String;
    fn try_from(j: ScheduleJson) -> Result<MatmulCandidate, String> {
        let s = MatmulSchedule {
            split: match j.split {
                SplitJson::Auto => ThreadSplit::Auto,
                SplitJson::Rows => ThreadSplit::Rows,
                SplitJson::Columns => ThreadSplit::Columns,
                SplitJson::ParallelK => ThreadSplit::ParallelK,
            },
            ..MatmulSchedule::new(j.mr, j.nr, j.lanes, j.mc, j.nc, j.kc, j.threads)
        };
        s.validate().map_err(|e| e.to_string())?;
        Ok(MatmulCandidate(s))
    }
}

/// A readable one-line description of `s`: `6x16 mc192 nc512 kc256 auto`.
pub fn schedule_label(s: &MatmulSchedule) -> String {
    let split = match s.split {
        ThreadSplit::Auto => "auto",
        ThreadSplit::Rows => "rows",
        ThreadSplit::Columns => "cols",
        ThreadSplit::ParallelK => "par-k",
    };
    format!("{}x{} mc{} nc{} kc{} {split}", s.mr, s.nr, s.mc, s.nc, s.kc)
}

/// The version of the matmul template for `target`: [`MATMUL_TEMPLATE_REVISION`] and a
/// hash of the IR the template generates for four probe problems (with and without
/// parallel-k, `A` packed and read in place), so any change to the generated kernels
/// changes the version. Computed once per process and target.
pub fn matmul_template_version(target: &CpuTarget) -> String {
    static VERSIONS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let id = format!(
        "{:?}/{:?}/{}",
        target.arch,
        target.features,
        target.f32_lanes()
    );
    let versions = VERSIONS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = versions.lock().ok().and_then(|m| m.get(&id).cloned()) {
        return v;
    }
    let mut hasher = Sha256::new();
    for split in [ThreadSplit::Auto, ThreadSplit::ParallelK] {
        let schedule = MatmulSchedule {
            split,
            ..MatmulSchedule::for_target(target, 2)
        };
        for layout in [ALayout::RowMajor, ALayout::InPlace] {
            match matmul_f32_with_layout("probe", 37, 29, 301, layout, &schedule) {
                Ok(f) => hasher.update(f.to_string().as_bytes()),
                Err(e) => hasher.update(e.to_string().as_bytes()),
            }
        }
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    let version = format!("r{MATMUL_TEMPLATE_REVISION}-{digest}");
    if let Ok(mut m) = versions.lock() {
        m.insert(id, version.clone());
    }
    version
}

#[derive(Clone, Debug)]
enum Work {
    /// A task of a compiled graph: the template with its fusion.
    Fused(Box<FusedTask>),
    /// `C = A · B` alone.
    Plain,
}

/// A tunable matmul task (see the module docs).
#[derive(Clone, Debug)]
pub struct MatmulTask {
    work: Work,
    shape: MatmulShape,
    threads: i64,
    target: CpuTarget,
    key: String,
    limit: Option<usize>,
}

impl MatmulTask {
    /// The task of `task` when its anchor is an f32 matmul or batch matmul the template
    /// implements; `None` otherwise.
    pub fn from_fused(task: &FusedTask, target: &CpuTarget, threads: i64) -> Option<MatmulTask> {
        let anchor = task.anchor.as_ref()?;
        let shape = matmul_shape(&anchor.def)?;
        let fusion = if task.nodes.len() == 1 && task.def.inputs.len() == 2 {
            "plain".to_string()
        } else {
            fingerprint(&task.def)
        };
        Some(MatmulTask {
            work: Work::Fused(Box::new(task.clone())),
            shape,
            threads,
            target: target.clone(),
            key: task_key(&shape, threads, &fusion),
            limit: None,
        })
    }

    /// `C[m, n] = A[m, k] · B[k, n]` alone, with the same key and kernel (`A` read in place)
    /// as an unfused matmul task of a graph with these sizes.
    pub fn plain(m: i64, n: i64, k: i64, target: &CpuTarget, threads: i64) -> MatmulTask {
        let shape = MatmulShape::plain(m, n, k);
        MatmulTask {
            work: Work::Plain,
            shape,
            threads,
            target: target.clone(),
            key: task_key(&shape, threads, "plain"),
            limit: None,
        }
    }

    /// This task trying at most `limit` candidates at any level (the first ones of the
    /// level's list, heuristic first). The key does not change: a record made with a limit
    /// answers later requests at its level.
    pub fn with_limit(self, limit: Option<usize>) -> MatmulTask {
        MatmulTask { limit, ..self }
    }

    /// `(m, n, k)` of one product of the batch.
    pub fn shape(&self) -> (i64, i64, i64) {
        (self.shape.m, self.shape.n, self.shape.k)
    }

    pub fn threads(&self) -> i64 {
        self.threads
    }
}

/// The task's name in the tuning cache; a batch matmul names its batches too (a plain
/// matmul keeps the key it had before batches were tuned).
/// Multiply-adds below which the heuristic schedule runs a product on one thread: a
/// recurrent layer's per-step product (3 rows by 384 columns over 96, 0.11 M) takes about as
/// long as handing half of it to a second thread and joining it, and its output stays in the
/// cache of the core that runs the next step's gates.
const MIN_PARALLEL_MACS: i64 = 1 << 18;

fn task_key(shape: &MatmulShape, threads: i64, fusion: &str) -> String {
    let MatmulShape {
        batch,
        a_batch,
        b_batch,
        m,
        n,
        k,
    } = *shape;
    let plain = format!("m={m} n={n} k={k} threads={threads} fusion={fusion}");
    if is_batched(shape) {
        format!("batch_matmul_f32 batch={batch} a_batch={a_batch} b_batch={b_batch} {plain}")
    } else {
        format!("matmul_f32 {plain}")
    }
}

impl Tunable for MatmulTask {
    type Schedule = MatmulCandidate;

    fn key(&self) -> String {
        self.key.clone()
    }

    fn space(&self) -> String {
        MATMUL_SPACE.into()
    }

    fn template_version(&self) -> String {
        matmul_template_version(&self.target)
    }

    fn heuristic(&self) -> MatmulCandidate {
        let (layout, gathered, by_column) = match &self.work {
            Work::Fused(task) => (a_layout(task), a_is_gathered(task), stores_by_column(task)),
            Work::Plain => (Some(ALayout::InPlace), false, false),
        };
        let macs = [self.shape.batch, self.shape.m, self.shape.n, self.shape.k]
            .iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(d));
        let threads = if macs.is_some_and(|macs| macs < MIN_PARALLEL_MACS) {
            1
        } else {
            self.threads
        };
        let (target, n) = (&self.target, self.shape.n);
        let gathered = if gathered {
            by_column
                .then(|| {
                    heuristic_for_gathered_rows_stored_by_column(target, threads, n, self.shape.k)
                })
                .flatten()
                .or_else(|| heuristic_for_gathered_rows(target, threads, n))
        } else {
            None
        };
        let a_panel_rows = match layout {
            Some(ALayout::Panels { rows }) => Some(rows),
            _ => None,
        };
        let stored_rows = matches!(layout, Some(ALayout::RowMajor | ALayout::InPlace));
        let schedule = gathered
            .or_else(|| {
                stored_rows
                    .then(|| heuristic_for_stored_rows_on_avx512(target, threads, self.shape.m))
                    .flatten()
            })
            .unwrap_or_else(|| {
                let (m, n) = (self.shape.m, self.shape.n);
                heuristic_for_product(&self.target, threads, m, n, a_panel_rows)
            });
        MatmulCandidate(with_depth(&self.target, schedule, self.shape.k))
    }

    fn candidates(&self, level: TuneLevel) -> Vec<MatmulCandidate> {
        let mut schedules = vec![self.heuristic().0];
        match level {
            TuneLevel::Heuristic => {}
            TuneLevel::Subset => {
                schedules.extend(matmul_candidates(&self.target, self.threads, usize::MAX))
            }
            TuneLevel::Full => schedules.extend(matmul_space(&self.target, self.threads)),
        }
        // Schedules that differ only in a split yielding the same thread grid for this shape
        // build the same kernel: keep the first of each.
        let shape = self.shape;
        let mut seen = HashSet::new();
        schedules
            .into_iter()
            .filter(|s| {
                seen.insert((
                    (s.mr, s.nr, s.lanes, s.mc, s.nc, s.kc, s.threads),
                    s.thread_grid(&shape),
                ))
            })
            .take(match level {
                TuneLevel::Subset => LEVEL1_CANDIDATES,
                _ => usize::MAX,
            })
            .take(self.limit.unwrap_or(usize::MAX).max(1))
            .map(MatmulCandidate)
            .collect()
    }

    fn label(&self, s: &MatmulCandidate) -> String {
        schedule_label(&s.0)
    }

    fn function(&self, s: &MatmulCandidate, name: &str) -> Result<Function, String> {
        match &self.work {
            Work::Plain => {
                let MatmulShape { m, n, k, .. } = self.shape;
                matmul_f32_with_layout(name, m, n, k, ALayout::InPlace, &s.0)
                    .map_err(|e| e.to_string())
            }
            Work::Fused(task) => match matmul_kernel(task, &s.0) {
                TemplateOutcome::Kernel(f) => {
                    let mut f = *f;
                    f.name = name.to_string();
                    Ok(f)
                }
                TemplateOutcome::Refused(reason) => Err(reason),
                TemplateOutcome::NotApplicable => {
                    Err("the task's anchor is not an f32 matmul or batch matmul".into())
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_round_trip_through_json_and_invalid_ones_are_rejected() {
        let target = CpuTarget::host();
        for s in matmul_space(target, 2) {
            let json = serde_json::to_string(&MatmulCandidate(s)).expect("serializable");
            let back: MatmulCandidate = serde_json::from_str(&json).expect("valid schedule");
            assert_eq!(back.0, s);
        }
        let mut bad = serde_json::to_value(MatmulCandidate(MatmulSchedule::for_target(target, 2)))
            .expect("serializable");
        bad["mc"] = serde_json::json!(7);
        assert!(serde_json::from_value::<MatmulCandidate>(bad).is_err());
    }

    #[test]
    fn small_products_run_on_one_thread_by_default() {
        let step = MatmulTask::plain(3, 384, 96, CpuTarget::host(), 2);
        assert_eq!(step.heuristic().0.threads, 1);
        let layer = MatmulTask::plain(150, 384, 96, CpuTarget::host(), 2);
        assert_eq!(layer.heuristic().0.threads, 2);
    }

    #[test]
    fn level_candidates_start_with_the_heuristic() {
        let t = MatmulTask::plain(33, 47, 65, CpuTarget::host(), 2);
        let h = t.heuristic();
        assert_eq!(t.candidates(TuneLevel::Heuristic), vec![h]);
        let one = t.candidates(TuneLevel::Subset);
        let two = t.candidates(TuneLevel::Full);
        assert_eq!((one[0], two[0]), (h, h));
        assert!(one.len() <= LEVEL1_CANDIDATES && two.len() >= one.len());
        assert!(one.iter().all(|c| two.contains(c)));
        // No two candidates build the same kernel: equal blocking means different grids.
        let shape = MatmulShape::plain(33, 47, 65);
        for (i, a) in two.iter().enumerate() {
            for b in &two[..i] {
                let same_blocking = (a.0.mr, a.0.nr, a.0.mc, a.0.nc, a.0.kc)
                    == (b.0.mr, b.0.nr, b.0.mc, b.0.nc, b.0.kc);
                assert!(
                    !same_blocking || a.0.thread_grid(&shape) != b.0.thread_grid(&shape),
                    "{a:?} duplicates {b:?}"
                );
            }
        }
        let big = MatmulTask::plain(1024, 1024, 1024, CpuTarget::host(), 2);
        let full = big.candidates(TuneLevel::Full);
        assert!(full.len() < matmul_space(CpuTarget::host(), 2).len());
        assert_eq!(full[0], big.heuristic());
        assert_eq!(t.key(), "matmul_f32 m=33 n=47 k=65 threads=2 fusion=plain");
        assert_eq!(
            t.template_version(),
            matmul_template_version(CpuTarget::host())
        );
    }
}
