//! Runs emitted CUDA C on the CPU, to check kernels numerically without a
//! GPU: the translation unit is compiled as C++ by the system compiler with
//! a shim in which every thread of a block is a POSIX thread,
//! `__syncthreads()` is a `pthread_barrier_t`, `__shared__` variables are
//! function-local statics and `threadIdx`/`blockIdx` are thread-locals.
//! Blocks run one after another. Inline PTX, warp intrinsics and `half`
//! are not available; the SIMT templates use none of them.
//!
//! This is a test harness, not the project's GPU simulator.

use std::path::Path;
use std::process::Command;

const SHIM: &str = r#"
#include <pthread.h>
struct dim3 { unsigned x, y, z; };
static thread_local dim3 threadIdx, blockIdx;
static pthread_barrier_t hidet_host_barrier;
#define __CUDACC_RTC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
static inline void __syncthreads() { pthread_barrier_wait(&hidet_host_barrier); }
"#;

/// A CUDA kernel compiled for the CPU.
pub struct HostKernel {
    _dir: tempfile::TempDir,
    library: libloading::Library,
}

type RunFn = unsafe extern "C" fn(*const *mut f32, u32, u32, u32, u32) -> i32;

impl HostKernel {
    /// Compiles `source` (one emitted CUDA C translation unit) with a driver
    /// that launches `kernel`, whose `num_params` parameters are all `float*`.
    pub fn compile(source: &str, kernel: &str, num_params: usize) -> HostKernel {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let args: Vec<String> = (0..num_params)
            .map(|i| format!("(float*)g_args[{i}]"))
            .collect();
        let driver = format!(
            r#"
namespace hidet_host {{
static float* const* g_args;
static dim3 g_block;
static void* thread_main(void* t) {{
    threadIdx = dim3{{(unsigned)(uintptr_t)t, 0u, 0u}};
    blockIdx = g_block;
    {kernel}({args});
    return nullptr;
}}
}}
extern "C" int hidet_host_run(float* const* args, unsigned gx, unsigned gy, unsigned gz, unsigned threads) {{
    hidet_host::g_args = args;
    pthread_t ts[1024];
    for (unsigned bz = 0; bz < gz; bz++)
    for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++) {{
        hidet_host::g_block = dim3{{bx, by, bz}};
        if (pthread_barrier_init(&hidet_host_barrier, nullptr, threads) != 0) return 1;
        for (unsigned t = 0; t < threads; t++)
            if (pthread_create(&ts[t], nullptr, hidet_host::thread_main, (void*)(uintptr_t)t) != 0) return 2;
        for (unsigned t = 0; t < threads; t++) pthread_join(ts[t], nullptr);
        pthread_barrier_destroy(&hidet_host_barrier);
    }}
    return 0;
}}
"#,
            args = args.join(", ")
        );
        let src_path = dir.path().join("kernel.cpp");
        let shim_path = dir.path().join("shim.h");
        let lib_path = dir.path().join("libkernel.so");
        std::fs::write(&shim_path, SHIM).expect("writing the shim");
        std::fs::write(&src_path, format!("{source}\n{driver}")).expect("writing the source");
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
        let output = Command::new(&cxx)
            .args([
                "-std=c++17",
                "-O1",
                "-shared",
                "-fPIC",
                "-pthread",
                "-w",
                "-include",
            ])
            .arg(&shim_path)
            .arg(&src_path)
            .arg("-o")
            .arg(&lib_path)
            .output()
            .unwrap_or_else(|e| panic!("running the C++ compiler {cxx:?} failed: {e}"));
        assert!(
            output.status.success(),
            "{cxx} rejected the CUDA C (kept in {}):\n{}",
            keep(dir.path(), &src_path),
            String::from_utf8_lossy(&output.stderr)
        );
        // SAFETY: the library was just built from generated code whose only
        // initializers are zero-initialized statics.
        let library = unsafe { libloading::Library::new(&lib_path) }.expect("loading the kernel");
        HostKernel { _dir: dir, library }
    }

    /// Runs the kernel on a `grid` of blocks of `threads` threads; `args`
    /// are the kernel's `float*` parameters, in order. Requires the buffers
    /// to be as large as the kernel indexes them.
    pub fn run(&self, grid: [u32; 3], threads: u32, args: &mut [&mut [f32]]) {
        let ptrs: Vec<*mut f32> = args.iter_mut().map(|a| a.as_mut_ptr()).collect();
        // SAFETY: the symbol is the driver's `hidet_host_run` with this exact
        // C signature; the pointers stay valid for the call, and the kernel
        // only accesses in-bounds elements (which the test checks).
        let rc = unsafe {
            let run = self
                .library
                .get::<RunFn>(b"hidet_host_run\0")
                .expect("the driver exports hidet_host_run");
            run(ptrs.as_ptr(), grid[0], grid[1], grid[2], threads)
        };
        assert_eq!(rc, 0, "the host driver could not start threads");
    }
}

fn keep(dir: &Path, src: &Path) -> String {
    let kept = std::env::temp_dir().join(format!(
        "hidet-host-kernel-{}.cpp",
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    match std::fs::copy(src, &kept) {
        Ok(_) => kept.display().to_string(),
        Err(_) => src.display().to_string(),
    }
}
