//! Stand-in CUDA driver libraries (`libcuda.so`) built with the system C compiler, and a
//! way to run one test of the current test binary in a child process against one: the
//! dynamic loader reads `LD_LIBRARY_PATH` once per process, and the runtime loads the driver
//! once per process.

use std::path::Path;
use std::process::Command;

/// Set in the child process: the test then checks the runtime instead of spawning.
pub const CHILD_ENV: &str = "HIDET_FAKE_DRIVER_CHILD";

/// Whether this process is the child of [`run_child`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Compiles `c_source` into `<dir>/libcuda.so`. Returns false (the test then skips, saying
/// so) when no C compiler runs; panics when the compiler rejects the source.
pub fn build(dir: &Path, c_source: &str) -> bool {
    let source = dir.join("fake_cuda.c");
    std::fs::write(&source, c_source).unwrap();
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    match Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&source)
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!(
            "{compiler} failed to build the stand-in driver:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: no C compiler ({compiler}: {e})");
            false
        }
    }
}

/// Runs `test` of this test binary in a child process that loads the stand-in in `dir`;
/// fails unless the child passes and printed `child checked`. `test` is the test's module
/// path followed by its name (`concat!(module_path!(), "::name")`); the path's first
/// segment, the test binary's crate, is not part of a test's name.
pub fn run_child(test: &str, dir: &Path) {
    run_child_with(test, dir, &[]);
}

/// [`run_child`] with extra environment variables for the child.
pub fn run_child_with(test: &str, dir: &Path, env: &[(&str, &str)]) {
    let test = test.split_once("::").map_or(test, |(_, name)| name);
    let output = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", dir)
        .env(CHILD_ENV, "1")
        .envs(env.iter().copied())
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
