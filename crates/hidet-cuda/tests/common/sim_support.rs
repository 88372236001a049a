//! Launching kernels in the GPU simulator and reading back their buffers.

use hidet_cuda::sim::{
    DeviceBuffer, Fault, LaunchOptions, LaunchReport, SimArg, SimError, Simulator,
};
use hidet_ir::prelude::*;

/// Simulates the kernel named like `module` with `args` under the default options.
pub fn simulate(module: &IRModule, args: &mut [SimArg]) -> Result<LaunchReport, SimError> {
    simulate_with(module, args, &LaunchOptions::default())
}

/// Simulates the kernel named like `module` with `args` under `options`.
pub fn simulate_with(
    module: &IRModule,
    args: &mut [SimArg],
    options: &LaunchOptions,
) -> Result<LaunchReport, SimError> {
    Simulator::from_module(module, &module.name)?.launch(args, options)
}

/// Simulates the kernel named like `module`; panics with the simulator's error.
pub fn run(module: &IRModule, args: &mut [SimArg]) -> LaunchReport {
    let sim = Simulator::from_module(module, &module.name).unwrap_or_else(|e| panic!("{e}"));
    sim.launch(args, &LaunchOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The error of a launch that must fail (the module itself must load).
pub fn run_err(module: &IRModule, args: &mut [SimArg]) -> SimError {
    let sim = Simulator::from_module(module, &module.name).unwrap_or_else(|e| panic!("{e}"));
    sim.launch(args, &LaunchOptions::default())
        .expect_err("the launch must fail")
}

/// The fault, statement and thread of a `SimError::Fault`.
pub fn fault<T: std::fmt::Debug>(r: Result<T, SimError>) -> (Fault, String, [i64; 3]) {
    match r {
        Err(SimError::Fault(r)) => (r.fault, r.stmt, r.thread.0),
        other => panic!("expected a fault, got {other:?}"),
    }
}

/// A buffer of `dtype` holding `values`.
pub fn buf(values: &[f64], dtype: DataType) -> SimArg {
    SimArg::Buffer(DeviceBuffer::from_f64(dtype, values))
}

/// An f32 buffer holding `0, 1, …, len - 1`.
pub fn f32s(len: usize) -> SimArg {
    SimArg::Buffer(DeviceBuffer::from_f32(
        &(0..len).map(|v| v as f32).collect::<Vec<_>>(),
    ))
}

/// An f32 output buffer of `len` elements (checked to be written exactly once).
pub fn output(len: usize) -> SimArg {
    SimArg::Buffer(DeviceBuffer::output(DataType::F32, len))
}

/// Buffer argument `i` as float64 values.
pub fn out(args: &[SimArg], i: usize) -> Vec<f64> {
    args[i].buffer().expect("a buffer").to_f64()
}

/// Equal bit for bit as values of their type (NaNs equal NaNs).
pub fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}[{i}]: got {g:e}, want {w:e}"
        );
    }
}

/// Buffer argument `i` as f32 values (it must be an f32 buffer).
pub fn out_f32(args: &[SimArg], i: usize) -> Vec<f32> {
    args[i]
        .buffer()
        .and_then(DeviceBuffer::to_f32)
        .expect("an f32 buffer")
}
