//! The machine and toolchain a measurement belongs to.

use serde::{Deserialize, Serialize};

/// What makes a measurement valid only on this machine with this toolchain: a tuning record
/// is reused only when every field is equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Environment {
    /// The processor model (e.g. `/proc/cpuinfo`'s model name).
    pub device: String,
    /// The instruction-set features code is generated for, in a fixed order.
    pub features: Vec<String>,
    /// The compiler's identity (program, version).
    pub compiler: String,
    /// The compiler flags candidates are built with.
    pub flags: Vec<String>,
}
