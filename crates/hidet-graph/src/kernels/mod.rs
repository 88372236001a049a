//! Reusable reference kernels shared by operator families.

pub mod broadcast;
pub mod axis;
