//! Tuning for hidet (DESIGN §2, "hardware-centric schedule space"): every tunable task has a
//! small schedule space that depends on the hardware only, so its candidates are compiled
//! together, in parallel, and measured exhaustively — no cost model.
//!
//! - [`tunable`]: what a task and a backend provide ([`Tunable`], [`TuneBackend`]).
//! - [`level`]: tuning levels 0 (heuristic), 1 (a few dozen candidates), 2 (whole space).
//! - [`measure`]: timing one candidate (warmup, repeated runs, median, pruning), serialized.
//! - [`stats`]: robust statistics of timing samples.
//! - [`cache`] and [`record`]: the persistent tuning cache and its JSON records.
//! - [`driver`]: [`Tuner`], which compiles candidates of many tasks in parallel, measures them
//!   one at a time, and stores winners and every measurement.
//! - [`observer`], [`progress`], [`report`]: events, the progress bar, the summary table.
//!
//! This crate knows nothing of a particular backend or template: the CPU backend implements
//! [`Tunable`] for its templates and [`TuneBackend`] for compiling and running kernels.

pub mod cache;
pub mod driver;
pub mod environment;
pub mod error;
pub mod level;
pub mod measure;
pub mod observer;
pub mod progress;
pub mod record;
pub mod report;
pub mod stats;
pub mod tunable;

pub use cache::{Lookup, TaskIdentity, TuningCache};
pub use driver::{TaskResult, TaskResults, TuneConfig, Tuner};
pub use environment::Environment;
pub use error::TuneError;
pub use level::TuneLevel;
pub use measure::MeasureConfig;
pub use observer::{TaskSummary, TuneEvent, TuneObserver};
pub use progress::ProgressReporter;
pub use record::{CandidateOutcome, CandidateRecord, InModelCheck, TuningRecord, IN_MODEL_MARGIN};
pub use stats::Stats;
pub use tunable::{Tunable, TuneBackend};
