//! Tuning levels.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::TuneError;

/// How hard to tune. Levels are ordered: a result tuned at a level satisfies every request at
/// that level or below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TuneLevel {
    /// Level 0: the template's heuristic pick, nothing compiled or measured.
    Heuristic,
    /// Level 1: a few dozen of the most promising candidates are measured.
    Subset,
    /// Level 2: the whole schedule space is measured.
    Full,
}

impl TuneLevel {
    /// The level numbered `n` (0, 1 or 2).
    pub fn from_number(n: u32) -> Result<TuneLevel, TuneError> {
        match n {
            0 => Ok(TuneLevel::Heuristic),
            1 => Ok(TuneLevel::Subset),
            2 => Ok(TuneLevel::Full),
            _ => Err(TuneError::BadLevel(n)),
        }
    }

    /// The level's number.
    pub fn number(self) -> u32 {
        match self {
            TuneLevel::Heuristic => 0,
            TuneLevel::Subset => 1,
            TuneLevel::Full => 2,
        }
    }

    /// Whether candidates are measured at this level.
    pub fn measures(self) -> bool {
        self != TuneLevel::Heuristic
    }
}

impl fmt::Display for TuneLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_order() {
        for n in 0..3 {
            assert_eq!(
                TuneLevel::from_number(n).map(TuneLevel::number).ok(),
                Some(n)
            );
        }
        assert!(matches!(
            TuneLevel::from_number(3),
            Err(TuneError::BadLevel(3))
        ));
        assert!(TuneLevel::Heuristic < TuneLevel::Subset && TuneLevel::Subset < TuneLevel::Full);
        assert!(!TuneLevel::Heuristic.measures() && TuneLevel::Full.measures());
    }
}
