//! Robust statistics of timing samples.

use serde::{Deserialize, Serialize};

/// Statistics of the timed runs of one candidate, in seconds. The median is the figure of
/// merit: a few runs disturbed by other activity move it little.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Median absolute deviation from the median.
    pub mad: f64,
    /// Timed runs (warmup excluded).
    pub runs: usize,
}

impl Stats {
    /// The statistics of `samples`; `None` when there are none or one is not a finite,
    /// non-negative number.
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = median_of_sorted(&sorted);
        let mut deviations: Vec<f64> = sorted.iter().map(|s| (s - median).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        Some(Stats {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            mad: median_of_sorted(&deviations),
            runs: samples.len(),
        })
    }
}

/// The median of a non-empty sorted slice (the mean of the two middle values for even
/// lengths).
fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ignores_an_outlier() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0, 100.0, 2.5]).expect("valid samples");
        assert_eq!(s.median, 2.5);
        assert_eq!((s.min, s.max, s.runs), (1.0, 100.0, 5));
        // |x - 2.5| = 0.5, 1.5, 0.5, 97.5, 0 → sorted 0, 0.5, 0.5, 1.5, 97.5.
        assert_eq!(s.mad, 0.5);
    }

    #[test]
    fn even_count_and_invalid_samples() {
        let s = Stats::from_samples(&[4.0, 1.0, 3.0, 2.0]).expect("valid samples");
        assert_eq!(s.median, 2.5);
        assert!(Stats::from_samples(&[]).is_none());
        assert!(Stats::from_samples(&[1.0, f64::NAN]).is_none());
        assert!(Stats::from_samples(&[-1.0]).is_none());
    }
}
