//! Regression inputs for the ONNX loader (`crates/hidet-onnx/fuzz`): every file under
//! `tests/fuzz_regressions/` is decoded and imported (operator construction and shape
//! inference included), each on its own thread with a time limit.
//!
//! - `crash-*`: inputs the fuzzer found crashing, hanging or over-allocating; importing them
//!   must return an error.
//! - `adversarial-*`: hand-written valid-looking models that ask for huge values at import
//!   time (folding a 10^15-element Range, a Loop with 10^18 iterations, deeply nested
//!   subgraphs); importing them must finish quickly, with a model or an error.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Decodes and imports `bytes`: `Some(true)` for a model, `Some(false)` for an error,
/// `None` on a panic.
fn import(bytes: Vec<u8>) -> Option<bool> {
    std::panic::catch_unwind(move || {
        hidet_onnx::decode_model(&bytes)
            .and_then(|m| hidet_onnx::import_model(&m, None, hidet_graph::Registry::global()))
            .is_ok()
    })
    .ok()
}

#[test]
fn stored_inputs_are_errors_not_panics_or_hangs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fuzz_regressions is part of the repository")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no regression inputs in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(path).expect("listed file is readable");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(import(bytes));
        });
        match rx.recv_timeout(LIMIT) {
            Err(_) => failures.push(format!("{name}: no answer within {LIMIT:?}")),
            Ok(None) => failures.push(format!("{name}: panicked")),
            Ok(Some(true)) if name.starts_with("crash-") => {
                failures.push(format!("{name}: imported, expected an error"))
            }
            Ok(Some(_)) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
