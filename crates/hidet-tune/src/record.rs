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

/// How the winner and the heuristic compared inside a whole model (see [`TuningRecord::in_model`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InModelCheck {
    /// Seconds per model run spent in this task's kernels with the winner's schedule (the
    /// sum over its kernels of their median times).
    pub winner_seconds: f64,
    /// The same with the heuristic's schedule, measured interleaved with the winner's.
    pub heuristic_seconds: f64,
    /// Interleaved model runs of each variant.
    pub runs: usize,
    /// The model the check ran in (a label for reports).
    pub model: String,
}

/// How much faster than the winner (as a fraction of the winner's time) the heuristic must
/// be in a model to replace it. Per-kernel medians of 20 model runs move by a percent or two
/// between checks; within that, the winner's lead when measured alone decides.
pub const IN_MODEL_MARGIN: f64 = 0.02;

impl InModelCheck {
    /// Whether the heuristic was faster than the winner in the model by more than
    /// [`IN_MODEL_MARGIN`].
    pub fn prefers_heuristic(&self) -> bool {
        self.heuristic_seconds < self.winner_seconds * (1.0 - IN_MODEL_MARGIN)
    }
}

/// The tuning result of one task in one environment.
///
/// Invariants of a valid record (checked by [`TuningRecord::validate`]): `winner` indexes a
/// [`CandidateOutcome::Measured`] candidate with the least median of all measured ones,
/// `heuristic`, when present, indexes a candidate, and an `in_model` check is present only
/// with a `heuristic`.
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
    /// The winner against the heuristic inside a model, when checked. Candidates are timed
    /// alone, where a kernel's operands stay in caches that a model's other kernels would
    /// have evicted or filled; a winner that loses in the model gives way to the heuristic
    /// ([`TuningRecord::chosen`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_model: Option<Box<InModelCheck>>,
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

    /// The index of the candidate to compile the task with: the heuristic when the in-model
    /// check found it faster than the winner, else the winner.
    pub fn chosen_index(&self) -> usize {
        match (&self.in_model, self.heuristic) {
            (Some(check), Some(h)) if check.prefers_heuristic() => h,
            _ => self.winner,
        }
    }

    /// The candidate to compile the task with (see [`TuningRecord::chosen_index`]).
    pub fn chosen(&self) -> Option<&CandidateRecord<S>> {
        self.candidates.get(self.chosen_index())
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
        if let Some(check) = &self.in_model {
            if self.heuristic.is_none_or(|h| h == self.winner) {
                return Err(
                    "an in-model check without a heuristic candidate apart from the winner".into(),
                );
            }
            if check.runs == 0 {
                return Err("an in-model check of no runs".into());
            }
            let valid = |s: f64| s.is_finite() && s >= 0.0;
            if !valid(check.winner_seconds) || !valid(check.heuristic_seconds) {
                return Err("an in-model check with invalid times".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::Environment;

    fn record(in_model: Option<InModelCheck>, heuristic: Option<usize>) -> TuningRecord<u32> {
        let in_model = in_model.map(Box::new);
        let measured = |median: f64| {
            CandidateOutcome::Measured(Stats {
                median,
                min: median,
                max: median,
                mad: 0.0,
                runs: 5,
            })
        };
        TuningRecord {
            format: RECORD_FORMAT,
            identity: TaskIdentity {
                task: "t".into(),
                space: "s".into(),
                template_version: "v".into(),
                environment: Environment {
                    device: "d".into(),
                    features: vec![],
                    compiler: "c".into(),
                    flags: vec![],
                },
            },
            level: TuneLevel::Subset,
            winner: 1,
            heuristic,
            candidates: vec![
                CandidateRecord {
                    schedule: 7,
                    label: "heuristic".into(),
                    outcome: measured(2e-3),
                },
                CandidateRecord {
                    schedule: 8,
                    label: "winner".into(),
                    outcome: measured(1e-3),
                },
            ],
            tuning_seconds: 1.0,
            created_unix: 0,
            in_model,
        }
    }

    fn check(winner_seconds: f64, heuristic_seconds: f64) -> InModelCheck {
        InModelCheck {
            winner_seconds,
            heuristic_seconds,
            runs: 10,
            model: "m".into(),
        }
    }

    #[test]
    fn the_in_model_check_decides_between_winner_and_heuristic() {
        let unchecked = record(None, Some(0));
        assert_eq!(unchecked.chosen().map(|c| c.schedule), Some(8));
        let winner_holds = record(Some(check(1.1e-3, 1.2e-3)), Some(0));
        assert_eq!(winner_holds.chosen().map(|c| c.schedule), Some(8));
        let heuristic_faster = record(Some(check(1.3e-3, 1.2e-3)), Some(0));
        assert_eq!(heuristic_faster.chosen().map(|c| c.schedule), Some(7));
        let within_noise = record(Some(check(1.01e-3, 1.0e-3)), Some(0));
        assert_eq!(within_noise.chosen().map(|c| c.schedule), Some(8));
        for r in [unchecked, winner_holds, heuristic_faster] {
            r.validate().expect("valid");
        }
    }

    #[test]
    fn malformed_in_model_checks_are_invalid() {
        let no_heuristic = record(Some(check(1.0, 0.5)), None);
        assert!(no_heuristic.validate().unwrap_err().contains("heuristic"));
        let nan = record(Some(check(f64::NAN, 0.5)), Some(0));
        assert!(nan.validate().unwrap_err().contains("invalid times"));
        let heuristic_won = record(Some(check(1.0, 0.5)), Some(1));
        assert!(heuristic_won
            .validate()
            .unwrap_err()
            .contains("apart from the winner"));
        let no_runs = record(
            Some(InModelCheck {
                runs: 0,
                ..check(1.0, 0.5)
            }),
            Some(0),
        );
        assert!(no_runs.validate().unwrap_err().contains("no runs"));
    }
}
