//! Calling kernels: arguments are checked against the IR signature before
//! anything runs; correct calls compute the right values.

use crate::common;

use common::{options_in, Rng};
use hidet_cpu::{build_from_source, ArgError, CompiledModule, CpuError, KernelArg};
use hidet_ir::prelude::*;

/// `axpy(n: i32, alpha: f32, x: f32[n], y: f32[n])`: `y += alpha * x`, and
/// `probe_threads(out: i32[1])`, with hand-written C implementations.
fn axpy_module(dir: &std::path::Path) -> CompiledModule {
    let mut fb = FunctionBuilder::cpu_kernel("axpy");
    let n = fb.param("n", DataType::I32);
    let alpha = fb.param("alpha", DataType::F32);
    let x = fb.tensor_param("x", DataType::F32, [n.expr()]);
    let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
    fb.for_range("i", &n, |fb, i| {
        let value = y.at([i.clone()]) + &alpha * x.at([i.clone()]);
        fb.store(&y, [i], value);
    });
    let axpy = fb.finish();
    let mut fb = FunctionBuilder::cpu_kernel("probe_threads");
    let out = fb.tensor_param("out", DataType::I32, [1]);
    fb.store(&out, [0], Expr::int(0));
    let probe = fb.finish();
    let module = IRModule::new("axpy_module", Target::Cpu)
        .with(axpy)
        .with(probe);
    let source = r#"
#include <stdint.h>
static void axpy(const float *x, float *y, int32_t n, float alpha) {
    for (int32_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void axpy__packed(void *const *args) {
    axpy((const float *)args[2], (float *)args[3], *(const int32_t *)args[0], *(const float *)args[1]);
}
typedef void (*task_fn)(void *env, int32_t task);
typedef void (*launch_fn)(task_fn task, void *env, int32_t tasks, int32_t threads);
static launch_fn launcher;
static int threads = 1;
int hidet_set_launcher(launch_fn launch, int n) {
    int previous = threads;
    launcher = launch;
    threads = n;
    return previous;
}
static void mark(void *env, int32_t t) { ((int32_t *)env)[t] = t + 1; }
void probe_threads__packed(void *const *args) {
    int32_t *out = (int32_t *)args[0];
    int32_t marks[64] = {0};
    if (launcher && threads > 1) launcher(mark, marks, 64, threads);
    else for (int32_t t = 0; t < 64; t++) mark(marks, t);
    int ok = 1;
    for (int32_t t = 0; t < 64; t++) ok &= marks[t] == t + 1;
    out[0] = ok ? threads : -1;
}
"#;
    build_from_source(&module, source, &options_in(dir)).expect("hand-written module builds")
}

fn arg_error(result: Result<(), CpuError>) -> ArgError {
    match result {
        Err(CpuError::Arg(e)) => e,
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[test]
fn correct_call_computes_axpy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let mut rng = Rng::new(1);
    let n = 37usize;
    let x = rng.vec_f32(n);
    let y0 = rng.vec_f32(n);
    let alpha = rng.nonzero_f32();
    let mut y = y0.clone();
    kernel
        .call(&mut [
            KernelArg::scalar(n as i32),
            KernelArg::scalar(alpha),
            KernelArg::tensor(&x, &[n]),
            KernelArg::tensor_mut(&mut y, &[n]),
        ])
        .expect("arguments match");
    for i in 0..n {
        let expected = f64::from(y0[i]) + f64::from(alpha) * f64::from(x[i]);
        assert!(
            (f64::from(y[i]) - expected).abs() < 1e-5,
            "y[{i}] = {}, expected {expected}",
            y[i]
        );
    }
}

#[test]
fn wrong_shape_names_parameter_expected_and_given() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let x = vec![1.0f32; 8];
    let mut y = vec![2.0f32; 9];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(8i32),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&x, &[8]),
        KernelArg::tensor_mut(&mut y, &[9]),
    ]));
    assert_eq!(
        err,
        ArgError::Shape {
            param: "y".into(),
            expected: vec![8],
            given: vec![9]
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`y`") && message.contains("[8]") && message.contains("[9]"),
        "{message}"
    );
    assert!(y.iter().all(|&v| v == 2.0), "nothing ran");
}

#[test]
fn wrong_dtype_is_rejected_for_tensors_and_scalars() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let x = vec![1.0f64; 4];
    let mut y = vec![2.0f32; 4];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(4i32),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&x, &[4]),
        KernelArg::tensor_mut(&mut y, &[4]),
    ]));
    assert_eq!(
        err,
        ArgError::DType {
            param: "x".into(),
            expected: DataType::F32,
            given: DataType::F64
        }
    );
    let xf = vec![1.0f32; 4];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(4i64),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&xf, &[4]),
        KernelArg::tensor_mut(&mut y, &[4]),
    ]));
    assert_eq!(
        err,
        ArgError::DType {
            param: "n".into(),
            expected: DataType::I32,
            given: DataType::I64
        }
    );
    let err = arg_error(kernel.call(&mut [
        KernelArg::tensor(&xf, &[4]),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&xf, &[4]),
        KernelArg::tensor_mut(&mut y, &[4]),
    ]));
    assert!(
        matches!(err, ArgError::Kind { ref param, .. } if param == "n"),
        "{err:?}"
    );
    assert!(y.iter().all(|&v| v == 2.0), "nothing ran");
}

#[test]
fn wrong_argument_count_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let x = vec![1.0f32; 4];
    let mut y = vec![2.0f32; 4];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(4i32),
        KernelArg::tensor(&x, &[4]),
        KernelArg::tensor_mut(&mut y, &[4]),
    ]));
    assert_eq!(
        err,
        ArgError::Count {
            kernel: "axpy".into(),
            expected: 4,
            given: 3
        }
    );
}

#[test]
fn written_tensor_must_be_mutable_and_buffers_large_enough() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let x = vec![1.0f32; 4];
    let y = vec![2.0f32; 4];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(4i32),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&x, &[4]),
        KernelArg::tensor(&y, &[4]),
    ]));
    assert_eq!(err, ArgError::ReadOnly { param: "y".into() });
    let short = vec![1.0f32; 3];
    let mut y = vec![2.0f32; 4];
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(4i32),
        KernelArg::scalar(0.5f32),
        KernelArg::tensor(&short, &[4]),
        KernelArg::tensor_mut(&mut y, &[4]),
    ]));
    assert_eq!(
        err,
        ArgError::BufferTooSmall {
            param: "x".into(),
            needed: 4,
            given: 3
        }
    );
}

#[test]
fn unknown_kernel_and_thread_count() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    assert!(matches!(
        module.kernel("gemm"),
        Err(CpuError::NoSuchKernel(_))
    ));
    let probe = module.kernel("probe_threads").expect("kernel exists");
    for threads in [1usize, 3] {
        module.set_num_threads(threads).expect("exported");
        let mut out = vec![-1i32];
        probe
            .call(&mut [KernelArg::tensor_mut(&mut out, &[1])])
            .expect("arguments match");
        assert_eq!(out[0], threads as i32);
    }
}

#[test]
fn raw_buffers_are_checked_like_slices() {
    let dir = tempfile::tempdir().expect("temp dir");
    let module = axpy_module(dir.path());
    let kernel = module.kernel("axpy").expect("kernel exists");
    let mut rng = Rng::new(5);
    let x = rng.vec_f32(6);
    let mut y = rng.vec_f32(6);
    let y0 = y.clone();
    let y_ptr = y.as_mut_ptr() as *mut std::ffi::c_void;
    // SAFETY: `y` holds 6 initialized f32 values and is not touched until
    // the call returns.
    let y_arg = unsafe { KernelArg::raw(y_ptr, 6, DataType::F32, &[6], true) };
    // SAFETY: as above; the wrong dtype is rejected before any access.
    let wrong = unsafe { KernelArg::raw(y_ptr, 6, DataType::I32, &[6], true) };
    let err = arg_error(kernel.call(&mut [
        KernelArg::scalar(6i32),
        KernelArg::scalar(2.0f32),
        KernelArg::tensor(&x, &[6]),
        wrong,
    ]));
    assert!(
        matches!(err, ArgError::DType { ref param, .. } if param == "y"),
        "{err:?}"
    );
    kernel
        .call(&mut [
            KernelArg::scalar(6i32),
            KernelArg::scalar(2.0f32),
            KernelArg::tensor(&x, &[6]),
            y_arg,
        ])
        .expect("arguments match");
    for i in 0..6 {
        let expected = f64::from(y0[i]) + 2.0 * f64::from(x[i]);
        assert!((f64::from(y[i]) - expected).abs() < 1e-5);
    }
}
