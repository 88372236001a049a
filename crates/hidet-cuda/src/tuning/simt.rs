//! The SIMT matmul template as a [`Tunable`]: a task is a matmul or convolution anchor the
//! template implements ([`SimtAnchor`]), with the task's prologues and epilogue fused into
//! every candidate, on one architecture.
//!
//! A candidate ([`SimtCandidate`]) is a tile schedule and its parallel-k parts; a parallel-k
//! candidate is two kernels ([`Tunable::kernels`]: the partial products, named after the
//! candidate, then `<name>_reduce`, with the graph backend's parameter convention:
//! `(inputs…, workspace)` and `(workspace, inputs…, output)`).

use std::sync::OnceLock;

use hidet_graph::fusion::{fingerprint, FusedTask};
use hidet_ir::function::Function;
use hidet_tune::{Tunable, TuneLevel};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::candidates::{full_space, promising};
use crate::schedule::matmul_anchor::{SimtChoice, TemplateOutcome, MAX_K_PARTS};
use crate::schedule::simt_anchor::SimtAnchor;
use crate::schedule::GpuTarget;
use crate::templates::matmul_simt::{
    build_k_reduce, build_parallel_k, schedule_space, showcase_schedules, Batch, LaneOrder,
    MatmulSimtSchedule, SimtLimits,
};
use crate::Arch;

/// The name of the SIMT template's schedule space.
pub const SIMT_SPACE: &str = "cuda.matmul_simt_f32";

/// Bumped by hand when the template changes in a way the generated-IR probe of
/// [`simt_template_version`] might not show, or when measurements change meaning.
pub const SIMT_TEMPLATE_REVISION: u32 = 1;

/// A SIMT choice as stored in the tuning cache. Deserializing validates the schedule
/// (under [`SimtLimits::largest`]) and the parts, so a tampered record cannot yield an invalid
/// kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "CandidateJson", into = "CandidateJson")]
pub struct SimtCandidate(pub SimtChoice);

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum LaneOrderJson {
    Row,
    Column,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct CandidateJson {
    block_warps: [i64; 2],
    warp_outer: [i64; 2],
    lanes: [i64; 2],
    lane_order: LaneOrderJson,
    warp_inner: [i64; 2],
    block_k: i64,
    k_parts: i64,
}

impl From<SimtCandidate> for CandidateJson {
    fn from(SimtCandidate(c): SimtCandidate) -> CandidateJson {
        let s = c.schedule;
        CandidateJson {
            block_warps: s.block_warps,
            warp_outer: s.warp_outer,
            lanes: s.lanes,
            lane_order: match s.lane_order {
                LaneOrder::RowMajor => LaneOrderJson::Row,
                LaneOrder::ColumnMajor => LaneOrderJson::Column,
            },
            warp_inner: s.warp_inner,
            block_k: s.block_k,
            k_parts: c.k_parts,
        }
    }
}

impl TryFrom<CandidateJson> for SimtCandidate {
    type Error = String;
    fn try_from(j: CandidateJson) -> Result<SimtCandidate, String> {
        let schedule = MatmulSimtSchedule {
            block_warps: j.block_warps,
            warp_outer: j.warp_outer,
            lanes: j.lanes,
            lane_order: match j.lane_order {
                LaneOrderJson::Row => LaneOrder::RowMajor,
                LaneOrderJson::Column => LaneOrder::ColumnMajor,
            },
            warp_inner: j.warp_inner,
            block_k: j.block_k,
        };
        schedule
            .validate(&SimtLimits::largest())
            .map_err(|e| e.to_string())?;
        if !(1..=MAX_K_PARTS).contains(&j.k_parts) {
            return Err(format!(
                "{} parallel-k parts (1 to {MAX_K_PARTS})",
                j.k_parts
            ));
        }
        Ok(SimtCandidate(SimtChoice {
            schedule,
            k_parts: j.k_parts,
        }))
    }
}

/// A readable one-line description: `128x128x8 w4x2 o2x2 l4x8r i4x4`, with ` pk6` for six
/// parallel-k parts.
pub fn candidate_label(c: &SimtChoice) -> String {
    let s = &c.schedule;
    let [bm, bn] = s.block_tile();
    let order = match s.lane_order {
        LaneOrder::RowMajor => 'r',
        LaneOrder::ColumnMajor => 'c',
    };
    let mut label = format!(
        "{bm}x{bn}x{} w{}x{} o{}x{} l{}x{}{order} i{}x{}",
        s.block_k,
        s.block_warps[0],
        s.block_warps[1],
        s.warp_outer[0],
        s.warp_outer[1],
        s.lanes[0],
        s.lanes[1],
        s.warp_inner[0],
        s.warp_inner[1]
    );
    if c.k_parts > 1 {
        label.push_str(&format!(" pk{}", c.k_parts));
    }
    label
}

/// The template's version: [`SIMT_TEMPLATE_REVISION`] and a hash of the IR it generates for
/// probe problems (a batched product with a broadcast operand, rank 2 with and without
/// parallel-k, dynamic shared memory, and the reduction kernel), so any change to the
/// generated kernels changes the version. Computed once per process.
pub fn simt_template_version() -> String {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let mut hasher = Sha256::new();
            let probes = [
                (showcase_schedules().into_iter().next(), 1),
                (showcase_schedules().into_iter().next(), 3),
                (
                    schedule_space(&SimtLimits::largest())
                        .into_iter()
                        .find(|s| s.dynamic_shared_bytes() > 0),
                    1,
                ),
            ];
            for (schedule, parts) in probes {
                let Some(schedule) = schedule else {
                    hasher.update(b"no schedule");
                    continue;
                };
                for batch in [
                    None,
                    Some(Batch {
                        batch: 2,
                        a_batch: 2,
                        b_batch: 1,
                    }),
                ] {
                    match build_parallel_k(batch, 37, 29, 301, &schedule, parts) {
                        Ok(m) => hasher.update(m.to_string().as_bytes()),
                        Err(e) => hasher.update(e.to_string().as_bytes()),
                    }
                }
            }
            match build_k_reduce("probe_reduce", 3, &[2, 37, 29]) {
                Ok(f) => hasher.update(f.to_string().as_bytes()),
                Err(e) => hasher.update(e.to_string().as_bytes()),
            }
            let digest: String = hasher
                .finalize()
                .iter()
                .take(6)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("r{SIMT_TEMPLATE_REVISION}-{digest}")
        })
        .clone()
}

/// A tunable SIMT anchor task (see the module docs).
#[derive(Clone, Debug)]
pub struct SimtTask {
    task: Box<FusedTask>,
    anchor: SimtAnchor,
    target: GpuTarget,
    key: String,
    heuristic: SimtChoice,
    limit: Option<usize>,
}

impl SimtTask {
    /// The task of `task` for `target` (its architecture, SM count and parallel-k setting)
    /// when its anchor is one the SIMT template implements; `None` otherwise.
    pub fn from_fused(task: &FusedTask, target: &GpuTarget) -> Option<SimtTask> {
        let anchor = SimtAnchor::of(task)?;
        let heuristic = anchor.heuristic(target)?;
        Some(SimtTask {
            key: task_key(&anchor, target, &fingerprint(&task.def)),
            task: Box::new(task.clone()),
            anchor,
            target: *target,
            heuristic,
            limit: None,
        })
    }

    /// This task trying at most `limit` candidates at any level (the first of the level's
    /// list, heuristic first). The key does not change.
    pub fn with_limit(self, limit: Option<usize>) -> SimtTask {
        SimtTask { limit, ..self }
    }

    /// The anchor (kind and product shape).
    pub fn anchor(&self) -> &SimtAnchor {
        &self.anchor
    }

    /// The architecture the task is tuned for.
    pub fn arch(&self) -> Arch {
        self.target.arch
    }

    /// The fused task.
    pub fn fused(&self) -> &FusedTask {
        &self.task
    }

    /// The kernels of `choice` for this task, named after `name` (see the module docs).
    pub fn kernels_of(&self, choice: &SimtChoice, name: &str) -> Result<Vec<Function>, String> {
        let mut task = (*self.task).clone();
        task.name = name.to_string();
        match self.anchor.kernel(&task, choice) {
            TemplateOutcome::Kernel(f) => {
                let mut f = *f;
                f.name = name.to_string();
                Ok(vec![f])
            }
            TemplateOutcome::ParallelK(k) => {
                let (mut partial, mut reduce) = (k.partial, k.reduce);
                partial.name = name.to_string();
                reduce.name = format!("{name}_reduce");
                Ok(vec![partial, reduce])
            }
            TemplateOutcome::Refused(reason) => Err(reason),
            TemplateOutcome::NotApplicable => {
                Err("the task's anchor is not one the SIMT template implements".into())
            }
        }
    }
}

/// The task's name in the tuning cache: the anchor's kind and product, the architecture, the
/// SM count the parallel-k heuristic fills, whether parallel-k may be chosen, and the
/// fingerprint of the fused work.
fn task_key(anchor: &SimtAnchor, target: &GpuTarget, fusion: &str) -> String {
    let s = &anchor.shape;
    let batch = s.batch.map_or(String::new(), |b| {
        format!(
            " batch={} a_batch={} b_batch={}",
            b.batch, b.a_batch, b.b_batch
        )
    });
    format!(
        "{}_f32{batch} m={} n={} k={} arch={} sms={} parallel_k={} fusion={fusion}",
        anchor.kind.name(),
        s.m,
        s.n,
        s.k,
        target.arch,
        target.sm_count,
        if target.parallel_k { "on" } else { "off" }
    )
}

impl Tunable for SimtTask {
    type Schedule = SimtCandidate;

    fn key(&self) -> String {
        self.key.clone()
    }

    fn space(&self) -> String {
        SIMT_SPACE.into()
    }

    fn template_version(&self) -> String {
        simt_template_version()
    }

    fn heuristic(&self) -> SimtCandidate {
        SimtCandidate(self.heuristic)
    }

    fn candidates(&self, level: TuneLevel) -> Vec<SimtCandidate> {
        let shape = &self.anchor.shape;
        let rest = match level {
            TuneLevel::Heuristic => Vec::new(),
            TuneLevel::Subset => promising(shape, &self.target),
            TuneLevel::Full => full_space(shape, &self.target),
        };
        let mut out = vec![self.heuristic];
        for c in rest {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out.into_iter()
            .take(self.limit.unwrap_or(usize::MAX).max(1))
            .map(SimtCandidate)
            .collect()
    }

    fn label(&self, c: &SimtCandidate) -> String {
        candidate_label(&c.0)
    }

    /// The kernel of a candidate without parallel-k; a parallel-k candidate is two kernels
    /// ([`Tunable::kernels`]) and fails here.
    fn function(&self, c: &SimtCandidate, name: &str) -> Result<Function, String> {
        let mut kernels = self.kernels_of(&c.0, name)?;
        match kernels.len() {
            1 => Ok(kernels.remove(0)),
            n => Err(format!(
                "candidate {} is {n} kernels (parallel-k)",
                candidate_label(&c.0)
            )),
        }
    }

    fn kernels(&self, c: &SimtCandidate, name: &str) -> Result<Vec<Function>, String> {
        self.kernels_of(&c.0, name)
    }
}
