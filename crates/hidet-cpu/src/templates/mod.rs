//! CPU schedule templates, written with task mappings.

pub mod int4_linear;
pub mod integer_linear;
pub mod integer_matmul;
pub mod matmul;

pub use int4_linear::{int4_linear, Int4LinearSchedule, Int4LinearShape};
pub use integer_linear::{integer_linear, IntegerLinearSchedule, IntegerLinearShape};
pub use integer_matmul::{integer_matmul, IntegerMatmulSchedule, IntegerMatmulShape};
pub use matmul::{
    batch_matmul_f32, matmul_candidates, matmul_f32, matmul_space, MatmulSchedule, MatmulShape,
    ThreadSplit,
};
