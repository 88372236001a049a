//! Why the rule-based scheduler cannot produce a kernel.

use hidet_ir::compute::ComputeError;
use hidet_ir::mapping::MappingError;

/// A failure of [`crate::schedule::schedule`].
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The compute definition itself is invalid.
    #[error("invalid compute definition: {0}")]
    Invalid(#[from] ComputeError),
    /// The definition is valid but has a structure these rules do not
    /// schedule into one kernel (for example reductions of different
    /// shapes, or a grid reading a reduction at another output's index).
    /// The caller can split the definition into smaller ones (one per
    /// reduction) and schedule each.
    #[error("the rule-based CPU scheduler does not support this definition: {reason}")]
    Unsupported { reason: String },
    /// The thread count is not positive.
    #[error("thread count must be at least 1, got {0}")]
    InvalidThreads(i64),
    /// A task mapping could not be built (an internal invariant failed).
    #[error(transparent)]
    Mapping(#[from] MappingError),
}

impl ScheduleError {
    pub(crate) fn unsupported(reason: impl Into<String>) -> ScheduleError {
        ScheduleError::Unsupported {
            reason: reason.into(),
        }
    }
}
