//! Helpers shared by the integration tests.
#![allow(dead_code)]

use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_cpu::{BuildOptions, CpuFeatures, CpuTarget, KernelCache};
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
        loaded_threads: None,
    })
}

/// [`cpu_backend`] building for `target` instead of the host.
pub fn cpu_backend_for(dir: &Path, template: bool, target: &CpuTarget) -> CpuBackend {
    let mut backend = cpu_backend(dir, template);
    backend.options.build.target = Some(target.clone());
    backend
}

/// The targets whose generated code the code-shape tests check, pinned rather than taken
/// from the host so the tests mean the same on every machine: on x86-64 an AVX2 CPU and an
/// AVX-512 CPU, elsewhere this machine; plus this machine when it can run neither. Kernels
/// of a target this machine lacks features for are compiled and inspected, not run
/// ([`runs_here`]).
pub fn codegen_targets() -> Vec<CpuTarget> {
    let detected = CpuTarget::detected();
    let mut targets: Vec<CpuTarget> = if cfg!(target_arch = "x86_64") {
        ["avx2,fma", "avx512f,avx512bw,avx512dq,avx512vl"]
            .into_iter()
            .map(|list| {
                let features = CpuFeatures::parse(list).expect("known feature names");
                detected.with_features(features).expect("x86-64 features")
            })
            .collect()
    } else {
        vec![detected.clone()]
    };
    if !targets.iter().any(runs_here) {
        targets.push(detected.clone());
    }
    targets
}

/// Whether kernels built for `target` can run on this machine.
pub fn runs_here(target: &CpuTarget) -> bool {
    target.missing_here().is_empty()
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
