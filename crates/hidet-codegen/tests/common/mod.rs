//! Test-only helpers: compile emitted C into a shared library, load it, call
//! `NAME__packed`, and make random data. (The CPU runtime crate owns real
//! compilation and caching.)

#![allow(dead_code)]

use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Command;

/// A compiled and loaded module; the temp dir lives as long as the library.
/// The library is never unloaded (a test may leak a handle to it).
pub struct Compiled {
    lib: std::mem::ManuallyDrop<libloading::Library>,
    pub dir: tempfile::TempDir,
}

/// Flags every test compiles with; `-Werror` keeps the generated C warning-free.
pub const CFLAGS: &[&str] = &[
    "-std=gnu11",
    "-O2",
    "-march=native",
    "-fopenmp-simd",
    "-ffp-contract=fast",
    "-shared",
    "-fPIC",
    "-Wall",
    "-Wextra",
    "-Werror",
];

/// Writes `source` to a temp dir, compiles it with `cc` and loads it.
/// Panics with the compiler's message and the source on failure.
pub fn compile(source: &str) -> Compiled {
    compile_with(source, CFLAGS)
}

/// [`compile`] with `flags` instead of [`CFLAGS`] (they must produce a
/// shared library: include `-shared -fPIC`).
pub fn compile_with(source: &str, flags: &[&str]) -> Compiled {
    let dir = tempfile::tempdir().expect("temp dir");
    let c_path: PathBuf = dir.path().join("module.c");
    let so_path: PathBuf = dir.path().join("module.so");
    std::fs::write(&c_path, source).expect("write C source");
    let out = Command::new("cc")
        .args(flags)
        .arg(&c_path)
        .arg("-o")
        .arg(&so_path)
        .arg("-lm")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}\n--- source ---\n{source}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: the library is our own freshly compiled module; its
    // initializers are those of the C runtime only.
    let lib = unsafe { libloading::Library::new(&so_path) }.expect("load compiled module");
    Compiled {
        lib: std::mem::ManuallyDrop::new(lib),
        dir,
    }
}

impl Compiled {
    /// Calls `NAME__packed(args)`.
    pub fn call(&self, name: &str, args: &mut [*mut c_void]) {
        let symbol = format!("{name}__packed");
        // SAFETY: every `NAME__packed` the C dialect emits has exactly this
        // signature; callers pass pointers matching the kernel's parameters.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*const *mut c_void)> =
                self.lib.get(symbol.as_bytes()).expect("packed entry point");
            f(args.as_ptr());
        }
    }

    /// Calls `hidet_set_launcher(test_launch, n)`: the module's parallel loops then run
    /// on `n` threads (see [`test_launch`]). Returns the previous thread count.
    pub fn set_num_threads(&self, n: i32) -> i32 {
        type Launch = unsafe extern "C" fn(TaskFn, *mut c_void, i32, i32);
        // SAFETY: emitted once per module with this signature.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(Launch, i32) -> i32> = self
                .lib
                .get(b"hidet_set_launcher")
                .expect("hidet_set_launcher");
            f(test_launch, n)
        }
    }

    /// Whether the library exports `symbol`.
    pub fn exports(&self, symbol: &str) -> bool {
        // SAFETY: only looks the symbol up; never calls it.
        unsafe { self.lib.get::<*const c_void>(symbol.as_bytes()).is_ok() }
    }
}

/// A task function of a module: `task(env, index)`.
pub type TaskFn = unsafe extern "C" fn(*mut c_void, i32);

/// Runs the tasks of a parallel loop on `threads` scoped threads, each claiming
/// tasks from a shared counter (the contract of the C dialect's `hidet_launch_fn`).
///
/// # Safety
/// `task` must be callable with `env` and every index in `0..tasks` from any thread.
pub unsafe extern "C" fn test_launch(task: TaskFn, env: *mut c_void, tasks: i32, threads: i32) {
    use std::sync::atomic::{AtomicI32, Ordering};
    let next = AtomicI32::new(0);
    let env = env as usize;
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= tasks {
                    break;
                }
                // SAFETY: the caller's contract covers every index in `0..tasks`.
                unsafe { task(env as *mut c_void, t) };
            });
        }
    });
}

/// A pointer argument for `NAME__packed`.
pub fn ptr<T>(v: &mut [T]) -> *mut c_void {
    v.as_mut_ptr().cast()
}

/// A scalar argument for `NAME__packed`: a pointer to the value.
pub fn scalar<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

/// A small deterministic xorshift generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `[-1, -0.05] ∪ [0.05, 1]`: random sign, never near zero.
    pub fn f32_nonzero(&mut self) -> f32 {
        let mag = 0.05 + 0.95 * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32);
        if self.next_u64() & 1 == 0 {
            mag
        } else {
            -mag
        }
    }

    pub fn vec_f32(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32_nonzero()).collect()
    }

    /// Uniform integer in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

/// The largest relative error of `got` against the float64 `want`
/// (relative to `max(|want|, 1e-3)`).
pub fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).abs() / w.abs().max(1e-3))
        .fold(0.0, f64::max)
}

/// The flags the CPU backend compiles kernels with (`hidet-cpu`'s
/// `CpuTarget::cflags` with the host's ISA), plus warnings as errors.
pub const BACKEND_FLAGS: &[&str] = &[
    "-std=gnu11",
    "-O3",
    "-march=native",
    "-fopenmp-simd",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-shared",
    "-fPIC",
    "-Wall",
    "-Wextra",
    "-Werror",
];

/// The assembly of `source` compiled with [`BACKEND_FLAGS`] (`-S`) and
/// `extra` flags.
pub fn assembly(source: &str, dir: &std::path::Path, stem: &str, extra: &[&str]) -> String {
    let c_path = dir.join(format!("{stem}.c"));
    let s_path = dir.join(format!("{stem}.s"));
    std::fs::write(&c_path, source).expect("write C source");
    let out = Command::new("cc")
        .args(BACKEND_FLAGS.iter().filter(|f| **f != "-shared"))
        .args(extra)
        .arg("-S")
        .arg(&c_path)
        .arg("-o")
        .arg(&s_path)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc -S failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&s_path).expect("read assembly")
}
