//! Helpers shared by the integration tests.
#![allow(dead_code)]

use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_cpu::{BuildOptions, KernelCache};
use hidet_graph::{Attributes, NodeSpec, Tensor};
use std::path::Path;

/// Build options using a private cache under `dir`.
pub fn options_in(dir: &Path) -> BuildOptions {
    BuildOptions {
        cache: Some(KernelCache::new(dir)),
        ..BuildOptions::default()
    }
}

/// The CPU graph backend with a private kernel cache under `dir`, two compile jobs, and
/// the matmul template when `template`.
pub fn cpu_backend(dir: &Path, template: bool) -> CpuBackend {
    CpuBackend::new(CpuBackendOptions {
        build: options_in(dir),
        matmul_template: template,
        compile_jobs: Some(2),
    })
}

/// A default-domain, opset-17 node `op` named after its single `output`.
pub fn node(op: &str, inputs: &[&str], output: &str, attrs: Attributes) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{output}"),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
    }
}

/// An `f32` tensor of `shape` filled by `rng` ([`Rng::vec_f32`]).
pub fn random(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), rng.vec_f32(n)).expect("the data has the shape's length")
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
