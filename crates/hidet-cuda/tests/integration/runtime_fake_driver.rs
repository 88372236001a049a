//! The driver checks against stand-in `libcuda.so` libraries (see `common::fake_driver`): one
//! whose `cuInit` reports `CUDA_ERROR_NO_DEVICE` (a machine with a driver but no GPU) and one
//! that lacks most entry points (a driver older than the runtime needs). Skipped when no C
//! compiler is found.

use crate::common;

use common::fake_driver::{build, is_child, run_child};
use hidet_cuda::runtime::driver::REQUIRED_SYMBOLS;
use hidet_cuda::runtime::Gpu;
use hidet_cuda::CudaError;

/// C source exporting `symbols`, each returning `init_status` for `cuInit` and 0 otherwise.
fn trivial_driver(symbols: &[&str], init_status: i32) -> String {
    symbols
        .iter()
        .map(|symbol| {
            let status = if *symbol == "cuInit" { init_status } else { 0 };
            format!("int {symbol}(void) {{ return {status}; }}\n")
        })
        .collect()
}

#[test]
fn a_driver_without_devices_gives_no_device() {
    if is_child() {
        match Gpu::open(0) {
            Err(CudaError::NoDevice { detail }) => {
                assert!(detail.contains("CUDA_ERROR_NO_DEVICE"), "{detail}");
            }
            other => panic!("expected NoDevice, got {other:?}"),
        }
        assert!(matches!(
            Gpu::device_count(),
            Err(CudaError::NoDevice { .. })
        ));
        println!("child checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path(), &trivial_driver(REQUIRED_SYMBOLS, 100)) {
        run_child(
            concat!(module_path!(), "::a_driver_without_devices_gives_no_device"),
            dir.path(),
        );
    }
}

#[test]
fn a_driver_missing_entry_points_is_too_old() {
    if is_child() {
        match Gpu::open(0) {
            Err(CudaError::DriverTooOld { symbol, .. }) => {
                assert_eq!(symbol, REQUIRED_SYMBOLS[2], "the first missing entry point");
                let message = Gpu::open(0).unwrap_err().to_string();
                assert!(message.contains("CUDA 12.4 or newer"), "{message}");
            }
            other => panic!("expected DriverTooOld, got {other:?}"),
        }
        println!("child checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path(), &trivial_driver(&REQUIRED_SYMBOLS[..2], 0)) {
        run_child(
            concat!(module_path!(), "::a_driver_missing_entry_points_is_too_old"),
            dir.path(),
        );
    }
}
