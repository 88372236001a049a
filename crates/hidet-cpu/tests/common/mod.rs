//! Helpers shared by the integration tests.
#![allow(dead_code)]

use hidet_cpu::{BuildOptions, KernelCache};
use std::path::Path;

/// Build options using a private cache under `dir`.
pub fn options_in(dir: &Path) -> BuildOptions {
    BuildOptions {
        cache: Some(KernelCache::new(dir)),
        ..BuildOptions::default()
    }
}

/// A small deterministic generator of non-zero test data (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `[-1, -0.05] ∪ [0.05, 1]`.
    pub fn nonzero_f32(&mut self) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let magnitude = 0.05 + 0.95 * unit;
        if self.next_u64() & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }

    pub fn vec_f32(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.nonzero_f32()).collect()
    }
}
