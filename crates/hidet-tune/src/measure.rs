//! Timing one candidate: warmup, repeated runs until enough runs and enough time, the median;
//! a candidate that cannot beat the best so far is cut short.
//!
//! Measurements must not overlap (on a machine with few cores two concurrent measurements
//! disturb each other), so every measurement in the process holds [`exclusive`].

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::TuneError;
use crate::stats::Stats;

/// How a candidate is timed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasureConfig {
    /// Untimed runs before the first timed one (at least one is always made).
    pub warmup: usize,
    /// Timed runs always made (unless pruned).
    pub min_runs: usize,
    /// Timed runs never exceeded.
    pub max_runs: usize,
    /// After `min_runs`, runs continue until their total time reaches this.
    pub min_time: Duration,
    /// A candidate is pruned once `prune_after` runs are timed and its fastest run is slower
    /// than `prune_ratio` times the best median so far. `f64::INFINITY` disables pruning.
    pub prune_ratio: f64,
    pub prune_after: usize,
}

impl Default for MeasureConfig {
    fn default() -> Self {
        MeasureConfig {
            warmup: 1,
            min_runs: 5,
            max_runs: 50,
            min_time: Duration::from_millis(100),
            prune_ratio: 1.3,
            prune_after: 2,
        }
    }
}

/// The result of timing one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measured {
    /// Every run the configuration asks for was made.
    Complete(Stats),
    /// Stopped early: it cannot beat the best so far. The statistics cover the runs made.
    Pruned(Stats),
}

static MEASURING: Mutex<()> = Mutex::new(());

/// Holds the process-wide measurement lock; no two measurements run at once while it is held.
pub fn exclusive() -> MutexGuard<'static, ()> {
    // A panic while measuring leaves no state to repair: the lock only orders measurements.
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Times `run` under `config` with the wall clock around each call. `best` is the best median
/// (seconds) measured so far for the same task, if any, for pruning. The caller should hold
/// [`exclusive`]. Fails with the first error `run` returns.
pub fn measure(
    run: &mut dyn FnMut() -> Result<(), TuneError>,
    config: &MeasureConfig,
    best: Option<f64>,
) -> Result<Measured, TuneError> {
    measure_timed(
        &mut || {
            let start = Instant::now();
            run()?;
            Ok(start.elapsed().as_secs_f64())
        },
        config,
        best,
    )
}

/// [`measure`] for a `run` that reports how long it took itself (seconds, e.g. from a GPU's
/// events, [`crate::TuneBackend::time`]): those times are the samples, and the run count and
/// `min_time` are judged by them.
pub fn measure_timed(
    run: &mut dyn FnMut() -> Result<f64, TuneError>,
    config: &MeasureConfig,
    best: Option<f64>,
) -> Result<Measured, TuneError> {
    for _ in 0..config.warmup.max(1) {
        run()?;
    }
    let max_runs = config.max_runs.max(config.min_runs).max(1);
    let mut samples: Vec<f64> = Vec::with_capacity(max_runs.min(64));
    let mut total = Duration::ZERO;
    while samples.len() < max_runs {
        let seconds = run()?;
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(invalid(&[seconds]));
        }
        total += Duration::from_secs_f64(seconds);
        samples.push(seconds);
        if let Some(best) = best {
            let fastest = samples.iter().copied().fold(f64::INFINITY, f64::min);
            if samples.len() >= config.prune_after.max(1) && fastest > best * config.prune_ratio {
                let stats = Stats::from_samples(&samples).ok_or_else(|| invalid(&samples))?;
                return Ok(Measured::Pruned(stats));
            }
        }
        if samples.len() >= config.min_runs.max(1) && total >= config.min_time {
            break;
        }
    }
    let stats = Stats::from_samples(&samples).ok_or_else(|| invalid(&samples))?;
    Ok(Measured::Complete(stats))
}

fn invalid(samples: &[f64]) -> TuneError {
    TuneError::Run {
        kernel: "<timer>".into(),
        message: format!("invalid timing samples {samples:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let start = Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn runs_warmup_then_at_least_min_runs() {
        let config = MeasureConfig {
            warmup: 2,
            min_runs: 4,
            max_runs: 6,
            min_time: Duration::ZERO,
            ..MeasureConfig::default()
        };
        let mut calls = 0;
        let m = measure(
            &mut || {
                calls += 1;
                spin(Duration::from_micros(200));
                Ok(())
            },
            &config,
            None,
        )
        .expect("runs succeed");
        let Measured::Complete(s) = m else {
            panic!("pruned without a best: {m:?}")
        };
        assert_eq!((calls, s.runs), (6, 4));
        assert!(s.median >= 200e-6 && s.min <= s.median && s.median <= s.max);
    }

    #[test]
    fn slow_candidate_is_pruned_against_a_fast_best() {
        let config = MeasureConfig {
            min_runs: 10,
            max_runs: 10,
            ..MeasureConfig::default()
        };
        let mut calls = 0;
        let m = measure(
            &mut || {
                calls += 1;
                spin(Duration::from_millis(2));
                Ok(())
            },
            &config,
            Some(0.5e-3),
        )
        .expect("runs succeed");
        assert!(matches!(m, Measured::Pruned(s) if s.runs == 2), "{m:?}");
        assert_eq!(calls, 3);
    }

    #[test]
    fn self_timed_runs_are_their_own_samples() {
        let config = MeasureConfig {
            warmup: 1,
            min_runs: 3,
            max_runs: 100,
            min_time: Duration::from_micros(100),
            ..MeasureConfig::default()
        };
        // 20 µs per run as the device reports it, however long the call takes: runs continue
        // until the reported times reach `min_time` (5 runs), not the wall clock's.
        let mut calls = 0;
        let m = measure_timed(
            &mut || {
                calls += 1;
                Ok(20e-6)
            },
            &config,
            None,
        )
        .expect("runs succeed");
        let Measured::Complete(s) = m else {
            panic!("pruned without a best: {m:?}")
        };
        assert_eq!((calls, s.runs), (6, 5));
        assert!((s.median - 20e-6).abs() < 1e-12, "{s:?}");
        let bad = measure_timed(&mut || Ok(f64::NAN), &config, None);
        assert!(matches!(bad, Err(TuneError::Run { .. })), "{bad:?}");
    }

    #[test]
    fn run_errors_propagate() {
        let r = measure(
            &mut || {
                Err(TuneError::Run {
                    kernel: "k".into(),
                    message: "boom".into(),
                })
            },
            &MeasureConfig::default(),
            None,
        );
        assert!(matches!(r, Err(TuneError::Run { kernel, .. }) if kernel == "k"));
    }
}
