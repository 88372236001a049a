//! The driver checks against stand-in `libcuda.so` libraries built with the system C
//! compiler: one whose `cuInit` reports `CUDA_ERROR_NO_DEVICE` (a machine with a driver but
//! no GPU) and one that lacks most entry points (a driver older than the runtime needs).
//! Each case runs in a child process of this test binary with `LD_LIBRARY_PATH` pointing at
//! the stand-in, since the dynamic loader reads that variable once per process. Skipped
//! when no C compiler is found.

use hidet_cuda::runtime::driver::REQUIRED_SYMBOLS;
use hidet_cuda::runtime::Gpu;
use hidet_cuda::CudaError;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "HIDET_FAKE_DRIVER_CHILD";

/// Builds `<dir>/libcuda.so` exporting `symbols`, each returning `init_status` for `cuInit`
/// and 0 (success) otherwise. Returns false when no C compiler runs.
fn build_fake_driver(dir: &Path, symbols: &[&str], init_status: i32) -> bool {
    let mut c = String::new();
    for symbol in symbols {
        let status = if *symbol == "cuInit" { init_status } else { 0 };
        c.push_str(&format!("int {symbol}(void) {{ return {status}; }}\n"));
    }
    let source = dir.join("fake_cuda.c");
    std::fs::write(&source, c).unwrap();
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    match Command::new(&compiler)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&source)
        .status()
    {
        Ok(status) if status.success() => true,
        Ok(status) => panic!("{compiler} failed to build the stand-in driver: {status}"),
        Err(e) => {
            eprintln!("skipped: no C compiler ({compiler}: {e})");
            false
        }
    }
}

/// Runs `test` of this binary in a child process against the stand-in in `dir`.
fn run_child(test: &str, dir: &Path) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", dir)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("child checked"),
        "child {test} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

#[test]
fn a_driver_without_devices_gives_no_device() {
    if std::env::var_os(CHILD_ENV).is_some() {
        match Gpu::open(0) {
            Err(CudaError::NoDevice { detail }) => {
                assert!(detail.contains("CUDA_ERROR_NO_DEVICE"), "{detail}");
            }
            other => panic!("expected NoDevice, got {other:?}"),
        }
        assert!(matches!(Gpu::device_count(), Err(CudaError::NoDevice { .. })));
        println!("child checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if build_fake_driver(dir.path(), REQUIRED_SYMBOLS, 100) {
        run_child("a_driver_without_devices_gives_no_device", dir.path());
    }
}

#[test]
fn a_driver_missing_entry_points_is_too_old() {
    if std::env::var_os(CHILD_ENV).is_some() {
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
    if build_fake_driver(dir.path(), &REQUIRED_SYMBOLS[..2], 0) {
        run_child("a_driver_missing_entry_points_is_too_old", dir.path());
    }
}
