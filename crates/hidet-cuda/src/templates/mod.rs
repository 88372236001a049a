//! CUDA schedule templates, written with task mappings.

pub mod levels;
pub mod matmul_simt;
