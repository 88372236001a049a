//! The runtime on a machine without a GPU (every CI machine): opening a device is a typed
//! error that names what is missing, never a panic or an abort; on a GPU machine the same
//! calls open the device.

use hidet_cuda::runtime::Gpu;
use hidet_cuda::CudaError;

#[test]
fn opening_a_gpu_without_a_driver_or_device_is_a_typed_error() {
    for attempt in 0..2 {
        match Gpu::open(0) {
            Err(CudaError::DriverNotFound { searched }) => {
                assert!(
                    searched.iter().any(|s| s.contains("libcuda.so")),
                    "the search names libcuda: {searched:?}"
                );
                let message = Gpu::open(0).unwrap_err().to_string();
                assert!(
                    message.contains("CUDA driver library not found"),
                    "{message}"
                );
                assert!(matches!(
                    Gpu::device_count(),
                    Err(CudaError::DriverNotFound { .. })
                ));
            }
            Err(CudaError::NoDevice { detail }) => {
                assert!(!detail.is_empty(), "attempt {attempt}");
                assert!(matches!(Gpu::open(0), Err(CudaError::NoDevice { .. })));
            }
            Err(CudaError::DeviceOrdinal { .. }) => panic!("device 0 must exist or be NoDevice"),
            Err(other) => panic!("unexpected error opening a GPU: {other}"),
            Ok(gpu) => {
                // A GPU machine: the device is real and described.
                assert!(!gpu.info().name.is_empty());
                assert!(gpu.info().multiprocessors > 0);
                assert!(Gpu::device_count().unwrap() >= 1);
            }
        }
    }
}

#[test]
fn a_missing_device_ordinal_is_a_typed_error() {
    match Gpu::open(1 << 20) {
        Err(CudaError::DeviceOrdinal { ordinal, count }) => {
            assert_eq!(ordinal, 1 << 20);
            assert!(count < ordinal);
        }
        Err(CudaError::DriverNotFound { .. } | CudaError::NoDevice { .. }) => {}
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("no machine has 2^20 GPUs"),
    }
}
