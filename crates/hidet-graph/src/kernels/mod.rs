//! Reusable reference kernels shared by operator families.

pub mod axis;
pub mod broadcast;
pub mod conv;
pub mod gemm;
pub mod movement;
pub mod pool;
pub mod quant;
pub mod resize;
pub mod stack;
pub mod values;
pub mod window;
