//! Shared test support: tool checks that fail loudly, deterministic random
//! data, a float64 matmul reference, the CUDA dialect's kernels and GPU simulator
//! launches.

#![allow(dead_code)]

pub mod dialect_kernels;
pub mod fake_driver;
pub mod host_threads;
pub mod sim_support;

use hidet_cuda::{locate_ptxas, Nvrtc};
use std::path::PathBuf;

/// NVRTC, or a test failure that says how to install it.
pub fn require_nvrtc() -> &'static Nvrtc {
    match Nvrtc::global() {
        Ok(n) => n,
        Err(e) => panic!(
            "NVRTC is required by this test and was not found ({e}). \
             Run scripts/setup_python.sh (CI does) to install it into .venv."
        ),
    }
}

/// `ptxas`, or a test failure that says how to install it.
pub fn require_ptxas() -> PathBuf {
    match locate_ptxas() {
        Ok(p) => p,
        Err(e) => panic!(
            "ptxas is required by this test and was not found ({e}). \
             Run scripts/setup_python.sh (CI does) to install it into .venv."
        ),
    }
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[-1, 1)`, never exactly zero.
    pub fn unit(&mut self) -> f32 {
        loop {
            let v = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if v != 0.0 {
                return v;
            }
        }
    }

    pub fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.unit()).collect()
    }
}

/// `C = A · B` in float64 for row-major `A[m, k]`, `B[k, n]`; also returns
/// `Σ_k |A[i, k]| |B[k, j]|` per element, the scale of the rounding error.
pub fn matmul_f64(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0f64; m * n];
    let mut scale = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = f64::from(a[i * k + p]);
            for j in 0..n {
                let y = f64::from(b[p * n + j]);
                c[i * n + j] += x * y;
                scale[i * n + j] += (x * y).abs();
            }
        }
    }
    (c, scale)
}
