//! CPU schedule templates, written with task mappings.

pub mod matmul;

pub use matmul::{
    batch_matmul_f32, matmul_candidates, matmul_f32, matmul_space, MatmulSchedule, MatmulShape,
    ThreadSplit,
};
