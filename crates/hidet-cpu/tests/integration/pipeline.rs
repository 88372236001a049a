//! The build pipeline: invalid IR is rejected by the verifier before any C
//! is generated; valid IR is lowered, compiled, cached and runs.

use crate::common;

use common::{options_in, Rng};
use hidet_cpu::{build, Arch, CacheOutcome, CpuError, CpuFeatures, CpuTarget, KernelArg};
use hidet_ir::prelude::*;

#[test]
fn undefined_variable_is_a_verifier_error_not_a_c_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut fb = FunctionBuilder::cpu_kernel("uses_undefined");
    let out = fb.tensor_param("out", DataType::F32, [4]);
    let ghost = Var::new("ghost", DataType::F32);
    fb.store(&out, [0], ghost.expr());
    let module = IRModule::new("bad", Target::Cpu).with(fb.finish());
    let err = build(module, &options_in(dir.path())).expect_err("invalid IR");
    match &err {
        CpuError::Pipeline { stage, message } => {
            assert_eq!(*stage, "IR verification");
            assert!(message.contains("ghost"), "{message}");
        }
        other => panic!("expected a verifier error, got {other:?}"),
    }
    assert!(!dir.path().join("kernels").exists(), "no C was compiled");
}

#[test]
fn shared_memory_on_the_cpu_is_a_verifier_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut fb = FunctionBuilder::cpu_kernel("uses_shared");
    let out = fb.tensor_param("out", DataType::F32, [4]);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([4]));
    fb.store(&smem, [0], Expr::f32(1.0));
    fb.store(&out, [0], smem.at([0]));
    let module = IRModule::new("bad_shared", Target::Cpu).with(fb.finish());
    let err = build(module, &options_in(dir.path())).expect_err("invalid IR");
    assert!(
        matches!(
            err,
            CpuError::Pipeline {
                stage: "IR verification",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn cuda_modules_are_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = IRModule::new("gpu", Target::Cuda);
    assert!(matches!(
        build(module, &options_in(dir.path())),
        Err(CpuError::Unsupported(_))
    ));
}

/// `y[i] = x[i] * scale + i` over `n` elements (a dynamic size), spread over
/// 3 threads with a spatial × repeat mapping; built twice, the second time
/// from the cache.
#[test]
fn task_mapped_kernel_runs_and_is_cached() {
    let dir = tempfile::tempdir().expect("temp dir");
    let make = || {
        let mut fb = FunctionBuilder::cpu_kernel("scale_add");
        let n = fb.param("n", DataType::I32);
        let scale = fb.param("scale", DataType::F32);
        let x = fb.tensor_param("x", DataType::F32, [n.expr()]);
        let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
        let per_thread = 16;
        let chunks = spatial([3]).expect("positive") * repeat([per_thread]).expect("positive");
        fb.for_range(
            "outer",
            (&n + (3 * per_thread - 1)) / (3 * per_thread),
            |fb, outer| {
                fb.for_range_with("t", 3, LoopKind::Parallel, |fb, t| {
                    fb.for_each(chunks.on(t), |fb, idx| {
                        let i = &outer * (3 * per_thread) + &idx[0];
                        fb.if_then(i.lt(&n), |fb| {
                            let value = x.at([i.clone()]) * &scale + i.cast(DataType::F32);
                            fb.store(&y, [i], value);
                        });
                    });
                });
            },
        );
        IRModule::new("scale_add_module", Target::Cpu).with(fb.finish())
    };
    let opts = options_in(dir.path());
    let first = build(make(), &opts).expect("builds");
    assert_eq!(first.cache_outcome(), Some(CacheOutcome::Compiled));
    let second = build(make(), &opts).expect("builds");
    assert_eq!(second.cache_outcome(), Some(CacheOutcome::Hit));
    let source =
        std::fs::read_to_string(second.source_path().expect("from the cache")).expect("kept");
    assert!(source.contains("scale_add__packed"));
    let mut rng = Rng::new(7);
    let n = 101usize;
    let x = rng.vec_f32(n);
    let scale = rng.nonzero_f32();
    let mut y = vec![f32::NAN; n];
    second
        .kernel("scale_add")
        .expect("kernel exists")
        .call(&mut [
            KernelArg::scalar(n as i32),
            KernelArg::scalar(scale),
            KernelArg::tensor(&x, &[n]),
            KernelArg::tensor_mut(&mut y, &[n]),
        ])
        .expect("arguments match");
    for i in 0..n {
        let expected = f64::from(x[i]) * f64::from(scale) + i as f64;
        assert!(
            (f64::from(y[i]) - expected).abs() < 1e-4,
            "y[{i}] = {}, expected {expected}",
            y[i]
        );
    }
}

#[test]
fn keep_source_dir_receives_the_generated_c() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keep = dir.path().join("kept");
    let mut fb = FunctionBuilder::cpu_kernel("fill");
    let out = fb.tensor_param("out", DataType::I32, [5]);
    fb.for_range("i", 5, |fb, i| fb.store(&out, [i.clone()], &i * 3 + 1));
    let module = IRModule::new("fill_module", Target::Cpu).with(fb.finish());
    let opts = hidet_cpu::BuildOptions {
        keep_source_dir: Some(keep.clone()),
        ..options_in(dir.path())
    };
    let compiled = build(module, &opts).expect("builds");
    let kept = std::fs::read_to_string(keep.join("fill_module.c")).expect("source kept");
    assert!(kept.contains("fill__packed"));
    let mut out = vec![0i32; 5];
    compiled
        .kernel("fill")
        .expect("kernel exists")
        .call(&mut [KernelArg::tensor_mut(&mut out, &[5])])
        .expect("arguments match");
    assert_eq!(out, vec![1, 4, 7, 10, 13]);
}

/// Kernels built for a CPU feature this machine lacks compile, but refuse to run, naming the
/// feature (a `neon` target on x86-64, or an `avx2` one on aarch64: a feature no machine of
/// this architecture has).
#[test]
fn kernels_for_a_feature_this_cpu_lacks_refuse_to_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut fb = FunctionBuilder::cpu_kernel("fill");
    let out = fb.tensor_param("out", DataType::I32, [5]);
    fb.for_range("i", 5, |fb, i| fb.store(&out, [i.clone()], &i * 3 + 1));
    let module = IRModule::new("fill_module", Target::Cpu).with(fb.finish());
    let mut target = CpuTarget::detected().clone();
    let foreign = if target.arch == Arch::X86_64 {
        "neon"
    } else {
        "avx2"
    };
    target.features = CpuFeatures::parse(foreign).expect("a known feature");
    let opts = hidet_cpu::BuildOptions {
        target: Some(target),
        ..options_in(dir.path())
    };
    let compiled = build(module, &opts).expect("builds");
    let mut out = vec![0i32; 5];
    let error = compiled
        .kernel("fill")
        .expect("kernel exists")
        .call(&mut [KernelArg::tensor_mut(&mut out, &[5])])
        .expect_err("cannot run here");
    assert!(
        matches!(&error, CpuError::TargetUnavailable { missing, .. } if missing.contains(&foreign)),
        "{error}"
    );
    assert!(error.to_string().contains(foreign), "{error}");
    assert_eq!(out, vec![0; 5], "nothing ran");
    assert!(compiled.set_num_threads(2).is_err());
}
