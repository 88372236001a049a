//! Reusable reference kernels shared by operator families.

pub mod broadcast;
pub mod stack;
pub mod axis;
pub mod conv;
pub mod pool;
pub mod quant;
pub mod window;
pub mod movement;
pub mod resize;
