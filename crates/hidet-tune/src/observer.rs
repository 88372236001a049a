//! Events of a tuning session and the per-task summary.

use serde::{Deserialize, Serialize};

use crate::level::TuneLevel;
use crate::record::CandidateOutcome;
use crate::stats::Stats;

/// Where a task's result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultSource {
    /// Level 0: the heuristic, nothing measured.
    Heuristic,
    /// A record of the tuning cache.
    Cache,
    /// Measured in this session.
    Tuned,
}

/// What tuning one task produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    /// The task's key.
    pub task: String,
    pub space: String,
    /// The level the result was tuned at.
    pub level: TuneLevel,
    /// Candidates tried.
    pub candidates: usize,
    /// Candidates timed completely.
    pub measured: usize,
    /// Candidates stopped early.
    pub pruned: usize,
    /// Candidates that could not be built or run.
    pub failed: usize,
    /// The winner's label (the fastest candidate measured alone).
    pub winner: String,
    /// The label of the schedule the task compiles with: the winner, unless an in-model
    /// check found the heuristic faster inside a model.
    pub chosen: String,
    /// The winner's timing.
    pub best: Option<Stats>,
    /// The heuristic's timing (possibly cut short if it was pruned).
    pub heuristic: Option<Stats>,
    pub source: ResultSource,
    /// Seconds spent on this task in this session, or in the session that made the record.
    pub seconds: f64,
}

impl TaskSummary {
    /// Heuristic median over winner median, when both were measured.
    pub fn speedup(&self) -> Option<f64> {
        match (&self.heuristic, &self.best) {
            (Some(h), Some(b)) if b.median > 0.0 => Some(h.median / b.median),
            _ => None,
        }
    }
}

/// Something that happened while tuning.
#[derive(Debug)]
pub enum TuneEvent<'a> {
    /// Tuning begins: `tasks` distinct tasks, of which `cached` are answered without
    /// measuring; the rest have `candidates` candidates in `units` compile units.
    Started {
        tasks: usize,
        cached: usize,
        units: usize,
        candidates: usize,
    },
    /// One compile unit of `task` is built (or failed).
    UnitCompiled { task: &'a str, kernels: usize },
    /// Every unit is built; measuring begins.
    CompileFinished { seconds: f64 },
    /// One candidate is measured (or failed).
    CandidateMeasured {
        task: &'a str,
        label: &'a str,
        outcome: &'a CandidateOutcome,
    },
    /// A task's result, once per task given to the tuner (repeated tasks repeat it), when the
    /// session ends.
    TaskFinished(&'a TaskSummary),
    /// Something the user should know that does not stop tuning (e.g. a corrupt record).
    Warning(&'a str),
}

/// Receives tuning events, from any thread.
pub trait TuneObserver: Send + Sync {
    fn event(&self, event: &TuneEvent<'_>);
}
