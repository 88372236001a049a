//! The runtime's host side end to end against a stand-in driver (`tests/fake_gpu/driver.c`,
//! built with the system C compiler) whose "device memory" is host memory and whose one
//! kernel, `saxpy(float* x, float* y, int n, float a)`, runs on the host. This checks what
//! the runtime hands the driver — addresses, sizes, alignment, argument packing, dynamic
//! shared memory attributes, JIT logs, capture and replay — without a GPU. Skipped when no
//! C compiler is found. Real GPU behaviour is checked by `examples/gpu_smoke.rs`.

use crate::common;

use common::fake_driver::{build, is_child, run_child, run_child_with};
use hidet_cuda::runtime::{Gpu, KernelParam, LaunchConfig};
use hidet_cuda::{Arch, CudaError, ImageKind, KernelImage};

fn image(text: &str) -> KernelImage {
    KernelImage {
        kind: ImageKind::Ptx,
        arch: Arch::SM90,
        bytes: text.as_bytes().to_vec(),
        log: String::new(),
    }
}

fn check_runtime_against_the_stand_in() {
    let gpu = Gpu::open(0).expect("the stand-in has one device");
    let info = gpu.info();
    assert_eq!(info.name, "Fake GPU");
    assert_eq!(info.arch, Arch::SM90);
    assert_eq!(info.multiprocessors, 132);
    assert_eq!(info.driver_version, 13000);
    assert_eq!(Gpu::device_count().unwrap(), 1);
    assert!(matches!(
        Gpu::open(3),
        Err(CudaError::DeviceOrdinal {
            ordinal: 3,
            count: 1
        })
    ));
    assert_eq!(gpu.memory_info().unwrap().1, 80 << 30);

    // Memory: alignment, round trips, memset, device copies, range checks.
    let n = 1000usize;
    let x = gpu.alloc(n * 4, 4096).unwrap();
    let y = gpu.alloc(n * 4, 8).unwrap();
    assert_eq!(x.ptr() % 4096, 0);
    assert_eq!(x.len(), n * 4);
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    x.upload_f32(&xs).unwrap();
    assert_eq!(x.download_f32(n).unwrap(), xs);
    gpu.memset(y.ptr(), 0, n * 4).unwrap();
    assert_eq!(y.download_f32(n).unwrap(), vec![0.0; n]);
    let mut tail = [0u8; 8];
    x.download(4 * (n - 2), &mut tail).unwrap();
    assert_eq!(tail[..4], ((n - 2) as f32).to_ne_bytes());
    assert!(matches!(
        x.upload(4 * n - 2, &[0; 4]),
        Err(CudaError::InvalidDeviceRange { .. })
    ));
    assert!(matches!(
        gpu.download(x.ptr() + 4 * n as u64 + 64, &mut tail),
        Err(CudaError::InvalidDeviceRange { .. })
    ));
    assert!(matches!(gpu.alloc(64, 3), Err(CudaError::BadAlignment(3))));
    let scratch = gpu.alloc(n * 4, 256).unwrap();
    gpu.copy_device(scratch.ptr(), x.ptr(), n * 4).unwrap();
    assert_eq!(scratch.download_f32(n).unwrap(), xs);
    let freed = scratch.ptr();
    drop(scratch);
    assert!(
        gpu.memset(freed, 0, 4).is_err(),
        "a freed buffer's address is refused"
    );
    let empty = gpu.alloc(0, 256).unwrap();
    assert!(empty.is_empty());
    empty.upload(0, &[]).unwrap();

    // Modules: the JIT log of a rejected image, kernel lookup and attributes.
    match gpu.load_module(&image("not an image")) {
        Err(CudaError::ModuleLoad { kind, log, .. }) => {
            assert_eq!(kind, "PTX");
            assert!(log.contains("does not start with FAKE"), "{log}");
        }
        other => panic!("expected a module load error, got {other:?}"),
    }
    let module = gpu.load_module(&image("FAKE module")).unwrap();
    assert!(matches!(
        module.kernel("missing"),
        Err(CudaError::KernelNotFound { .. })
    ));
    let saxpy = module.kernel("saxpy").unwrap();
    assert_eq!(saxpy.param_sizes(), Some(&[8, 8, 4, 4][..]));
    assert_eq!(saxpy.static_shared_bytes(), 1024);
    assert_eq!(saxpy.registers(), 32);
    assert_eq!(saxpy.max_dynamic_shared_bytes(), 47 * 1024);
    drop(module); // the kernel keeps its module loaded

    // Launches: argument checks, then y = 2x + y.
    let config = LaunchConfig::new([4, 1, 1], [256, 1, 1]);
    let args = [
        KernelParam::Ptr(x.ptr()),
        KernelParam::Ptr(y.ptr()),
        KernelParam::I32(n as i32),
        KernelParam::F32(2.0),
    ];
    let refused = |result: Result<(), CudaError>, why: &str| match result {
        Err(CudaError::Launch { reason, .. }) => assert!(reason.contains(why), "{reason}"),
        other => panic!("expected a refused launch ({why}), got {other:?}"),
    };
    refused(gpu.launch(&saxpy, &config, &args[..3]), "argument sizes");
    refused(
        gpu.launch(
            &saxpy,
            &config,
            &[args[0], args[1], KernelParam::I64(1), args[3]],
        ),
        "argument sizes",
    );
    refused(
        gpu.launch(
            &saxpy,
            &config,
            &[KernelParam::Ptr(0xdead_0000), args[1], args[2], args[3]],
        ),
        "pointer argument",
    );
    refused(
        gpu.launch(&saxpy, &LaunchConfig::new([1, 1, 1], [2048, 1, 1]), &args),
        "threads per block",
    );
    refused(
        gpu.launch(&saxpy, &LaunchConfig::new([0, 1, 1], [32, 1, 1]), &args),
        "empty grid",
    );
    gpu.launch(&saxpy, &config, &args).unwrap();
    gpu.synchronize().unwrap();
    let expected: Vec<f32> = xs.iter().map(|v| 2.0 * v).collect();
    assert_eq!(y.download_f32(n).unwrap(), expected);

    // Dynamic shared memory above 48 KiB raises the kernel's limit first; beyond the
    // device's opt-in limit it is refused.
    gpu.launch(&saxpy, &config.with_dynamic_shared(100 * 1024), &args)
        .unwrap();
    assert_eq!(saxpy.max_dynamic_shared_bytes(), 100 * 1024);
    refused(
        gpu.launch(&saxpy, &config.with_dynamic_shared(227 * 1024), &args),
        "exceed the device's",
    );

    // Events.
    let start = gpu.record_event().unwrap();
    gpu.launch(&saxpy, &config, &args).unwrap();
    let end = gpu.record_event().unwrap();
    assert!(start.elapsed_ms(&end).unwrap() > 0.0);

    // CUDA graphs: capture does not run the work; each replay does.
    y.upload_f32(&vec![1.0; n]).unwrap();
    let graph = gpu
        .capture(|g| {
            g.launch(&saxpy, &config, &args)?;
            g.launch(&saxpy, &config, &args)
        })
        .unwrap();
    assert_eq!(
        y.download_f32(n).unwrap(),
        vec![1.0; n],
        "captured, not run"
    );
    graph.replay().unwrap();
    graph.replay().unwrap();
    gpu.synchronize().unwrap();
    let replayed: Vec<f32> = xs.iter().map(|v| 1.0 + 8.0 * v).collect();
    assert_eq!(y.download_f32(n).unwrap(), replayed);

    // A failing capture (a host copy inside it, or the closure's own error) is a typed
    // error and leaves the stream usable.
    assert!(matches!(
        gpu.capture(|g| g.upload(y.ptr(), &[0; 4])),
        Err(CudaError::Capture(_))
    ));
    assert!(matches!(
        gpu.capture(|_| Err(CudaError::BadAlignment(7))),
        Err(CudaError::Capture(inner)) if matches!(*inner, CudaError::BadAlignment(7))
    ));
    y.upload_f32(&vec![0.0; n]).unwrap();
    gpu.launch(&saxpy, &config, &args).unwrap();
    assert_eq!(y.download_f32(n).unwrap(), expected);

    // Another Gpu's kernel is refused.
    let other = Gpu::open(0).unwrap();
    refused(other.launch(&saxpy, &config, &args), "another Gpu");
    drop(graph);
    drop(saxpy);
}

#[test]
fn the_runtime_drives_a_stand_in_driver_correctly() {
    if is_child() {
        check_runtime_against_the_stand_in();
        println!("child checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path(), include_str!("../fake_gpu/driver.c")) {
        run_child(
            concat!(
                module_path!(),
                "::the_runtime_drives_a_stand_in_driver_correctly"
            ),
            dir.path(),
        );
    }
}

#[test]
fn allocations_stay_aligned_when_the_driver_under_aligns() {
    if is_child() {
        let gpu = Gpu::open(0).unwrap();
        for (bytes, align) in [(1000, 256), (1000, 8), (100, 4096), (0, 512)] {
            let buffer = gpu.alloc(bytes, align).unwrap();
            assert_eq!(
                buffer.ptr() % align as u64,
                0,
                "{bytes} bytes aligned to {align}"
            );
            let data: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
            buffer.upload(0, &data).unwrap();
            let mut back = vec![0u8; bytes];
            buffer.download(0, &mut back).unwrap();
            assert_eq!(back, data);
        }
        println!("child checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path(), include_str!("../fake_gpu/driver.c")) {
        run_child_with(
            concat!(
                module_path!(),
                "::allocations_stay_aligned_when_the_driver_under_aligns"
            ),
            dir.path(),
            &[("FAKE_CUDA_MISALIGN", "1")],
        );
    }
}
