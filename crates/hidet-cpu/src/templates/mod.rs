//! CPU schedule templates, written with task mappings.

pub mod matmul;

pub use matmul::{matmul_f32, MatmulSchedule};
