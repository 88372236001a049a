//! NVRTC is found in the CUDA 13 wheels' layout (`nvidia/cu13/lib/libnvrtc.so.13`) of the
//! virtual environment named by `$VIRTUAL_ENV`. The stand-in environment links the real
//! NVRTC (found the usual way) under the CUDA 13 name; skipped when there is none. This file
//! holds one test because it sets `$VIRTUAL_ENV` for its process.

use hidet_cuda::Nvrtc;

#[test]
fn nvrtc_is_found_in_the_cu13_wheel_layout() {
    let real = match Nvrtc::locate() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("skipped: NVRTC not found ({e})");
            return;
        }
    };
    let real_path = std::path::Path::new(real.path());
    if !real_path.is_absolute() {
        eprintln!(
            "skipped: NVRTC came from the dynamic loader ({})",
            real.path()
        );
        return;
    }
    let venv = tempfile::tempdir().unwrap();
    let lib = venv
        .path()
        .join("lib/python3.12/site-packages/nvidia/cu13/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(real_path, lib.join("libnvrtc.so.13")).unwrap();
    // SAFETY (std::env::set_var): this test binary runs this one test, on one thread.
    std::env::set_var("VIRTUAL_ENV", venv.path());
    let found = Nvrtc::locate().expect("NVRTC in the cu13 layout");
    assert!(
        found.path().ends_with("nvidia/cu13/lib/libnvrtc.so.13"),
        "loaded {}",
        found.path()
    );
    assert!(found.path().starts_with(&*venv.path().to_string_lossy()));
    assert_eq!(found.version(), real.version());
}
