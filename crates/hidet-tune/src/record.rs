//! The JSON record of one tuned task: the winner and every measurement.

use serde::{Deserialize, Serialize};

use crate::cache::TaskIdentity;
use crate::level::TuneLevel;
use crate::stats::Stats;

/// Bumped whenever the record's layout or meaning changes; records of another format are
/// ignored.
pub const RECORD_FORMAT: u32 = 1;

/// What happened to one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateOutcome {
    /// Timed completely.
    Measured(Stats),
    /// Stopped early because it could not beat the best so far.
    Pruned(Stats),
    /// Could not be generated, compiled or run; the message says why.
    Failed(String),
}

impl CandidateOutcome {
    /// The median of a complete measurement.
    pub fn median(&self) -> Option<f64> {
        match self {
            CandidateOutcome::Measured(s) => Some(s.median),
            _ => None,
        }
    }
}

/// One candidate of a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateRecord<S> {
    pub schedule: S,
    /// A short readable description of the schedule.
    pub label: String,
    pub outcome: CandidateOutcome,
}

/// The tuning result of one task in one environment.
///
/// Invariants of a valid record (checked by [`TuningRecord::validate`]): `winner` indexes a
/// [`CandidateOutcome::Measured`] candidate with the least median of all measured ones, and
/// `heuristic`, when present, indexes a candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord<S> {
    pub format: u32,
    pub identity: TaskIdentity,
    pub level: TuneLevel,
    pub winner: usize,
    /// The index of the level-0 pick among the candidates.
    pub heuristic: Option<usize>,
    pub candidates: Vec<CandidateRecord<S>>,
    /// Wall time spent compiling and measuring this task's candidates (compile time shared
    /// with other tasks is apportioned).
    pub tuning_seconds: f64,
    /// Seconds since the Unix epoch when the record was made.
    pub created_unix: u64,
}

impl<S> TuningRecord<S> {
    /// The winning candidate.
    pub fn winner(&self) -> Option<&CandidateRecord<S>> {
        self.candidates.get(self.winner)
    }

    /// The heuristic candidate.
    pub fn heuristic(&self) -> Option<&CandidateRecord<S>> {
        self.heuristic.and_then(|i| self.candidates.get(i))
    }

    /// Checks the record's invariants (see the type docs) and its format; the message says
    /// what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != RECORD_FORMAT {
            return Err(format!(
                "record format {} is not {RECORD_FORMAT}",
                self.format
            ));
        }
        let best = self
            .winner()
            .and_then(|w| w.outcome.median())
            .ok_or_else(|| format!("winner #{} is not a measured candidate", self.winner))?;
        if let Some(c) = self
            .candidates
            .iter()
            .find(|c| c.outcome.median().is_some_and(|m| m < best))
        {
            return Err(format!(
                "candidate `{}` is faster than the recorded winner",
                c.label
            ));
        }
        if let Some(h) = self.heuristic {
            if h >= self.candidates.len() {
                return Err(format!("heuristic index {h} is out of range"));
            }
        }
        Ok(())
    }
}
