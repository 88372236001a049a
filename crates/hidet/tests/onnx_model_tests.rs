//! ONNX backend model tests (`cargo test -p hidet --test onnx_model_tests`).
//!
//! Runs every case of the model-test suites shipped with `onnx==1.17.0`
//! (`pytorch-converted`, `pytorch-operator`, `simple`: whole small models, most of opset 6 and
//! older) through `hidet::pipeline` (the path of `hidet run`), with the reference executor and
//! compiled, and compares the outputs with the stored `test_data_set_*/output_*.pb` under the
//! tolerances of ONNX's backend runner (`|got - want| <= 1e-7 + 1e-3 * |want|`, exact for
//! non-floats). Fails if a case fails on either path and is not in [`EXPECTED_FAIL`], or if a
//! case listed there passes (the list is kept exact).
//!
//! - Data: `$HIDET_ONNX_MODEL_TESTS` (the folder holding the three suites), or
//!   `.venv/lib/python3.*/site-packages/onnx/backend/test/data` at the repository root
//!   (created by `scripts/setup_python.sh`). A missing or empty suite is a failure.
//! - `HIDET_MODEL_TESTS_FILTER=substr` runs only cases whose `suite/case` name contains
//!   `substr` (the exactness check of the list is then skipped for cases that did not run).
//! - `HIDET_MODEL_TESTS_VERBOSE=1` prints every failure's message.
//!
//! The data loading and comparison follow `tests/conformance.rs` (the node tests).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hidet::graph::compiled::CompileOptions;
use hidet::graph::{DType, Datum, Tensor, ValueKind};
use hidet::onnx::load_value_file;
use hidet::pipeline;

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

/// The suites under the ONNX test-data folder that this test runs.
const SUITES: [&str; 3] = ["pytorch-converted", "pytorch-operator", "simple"];

/// Cases expected to fail (`suite/case`, reason). Only operators hidet deliberately does not
/// run belong here.
const EXPECTED_FAIL: &[(&str, &str)] = &[
    (
        "simple/test_gradient_of_add",
        "Gradient (ai.onnx.preview.training) differentiates the graph: training only",
    ),
    (
        "simple/test_gradient_of_add_and_mul",
        "Gradient (ai.onnx.preview.training) differentiates the graph: training only",
    ),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding the suites.
fn data_dir() -> Result<PathBuf, String> {
    if let Ok(d) = std::env::var("HIDET_ONNX_MODEL_TESTS") {
        let p = PathBuf::from(d);
        return if p.is_dir() {
            Ok(p)
        } else {
            Err(format!(
                "HIDET_ONNX_MODEL_TESTS={} is not a folder",
                p.display()
            ))
        };
    }
    let lib = repo_root().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path().join("site-packages/onnx/backend/test/data"))
            .find(|p| p.join(SUITES[0]).is_dir())
    });
    found.ok_or_else(|| {
        format!(
            "ONNX model tests not found under {}: run scripts/setup_python.sh (installs \
             onnx==1.17.0) or set HIDET_ONNX_MODEL_TESTS",
            lib.display()
        )
    })
}

/// Reinterprets uint16 bit patterns as bf16 (how ONNX test data stores bf16).
fn u16_bits_to_bf16(t: &Tensor) -> Tensor {
    let bits = t.as_slice::<u16>().unwrap_or(&[]);
    let v: Vec<hidet::graph::half::bf16> = bits
        .iter()
        .map(|&b| hidet::graph::half::bf16::from_bits(b))
        .collect();
    Tensor::new(t.shape().to_vec(), v).unwrap_or_else(|_| t.clone())
}

fn close(a: &Tensor, b: &Tensor) -> Result<(), String> {
    let b = &if a.dtype() == DType::BF16 && b.dtype() == DType::U16 {
        u16_bits_to_bf16(b)
    } else {
        b.clone()
    };
    if a.dtype() != b.dtype() {
        return Err(format!("dtype {} != expected {}", a.dtype(), b.dtype()));
    }
    if a.shape() != b.shape() {
        return Err(format!("shape {:?} != expected {:?}", a.shape(), b.shape()));
    }
    if !a.dtype().is_float() {
        return if a == b {
            Ok(())
        } else {
            Err("values differ (exact comparison)".into())
        };
    }
    for (i, (x, y)) in a.to_f64_vec().into_iter().zip(b.to_f64_vec()).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= ATOL + RTOL * y.abs();
        if !ok {
            return Err(format!("element {i}: {x} != expected {y}"));
        }
    }
    Ok(())
}

fn close_data(a: &Datum, b: &Datum) -> Result<(), String> {
    match (a, b) {
        (Datum::Tensor(x), Datum::Tensor(y)) => close(x, y),
        (Datum::Sequence(x), Datum::Sequence(y)) => {
            if x.len() != y.len() {
                return Err(format!("sequence of {} != expected {}", x.len(), y.len()));
            }
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                close(p, q).map_err(|e| format!("sequence element {i}: {e}"))?;
            }
            Ok(())
        }
        (Datum::Optional(None), Datum::Optional(None)) => Ok(()),
        (Datum::Optional(Some(x)), Datum::Optional(Some(y))) => close_data(x, y),
        _ => Err(format!("{} != expected {}", a.describe(), b.describe())),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Executor {
    Reference,
    Compiled,
}

/// Runs one case on one executor: `Ok` when every data set's outputs match.
fn run_case(case: &Path, executor: Executor) -> Result<(), String> {
    let model = pipeline::load(&case.join("model.onnx")).map_err(|e| format!("load: {e}"))?;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(case)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    if sets.is_empty() {
        return Err("no test_data_set_* folder".into());
    }
    let compiled = (executor == Executor::Compiled)
        .then(|| pipeline::compile(&model, CompileOptions::default()));
    let graph = &model.graph;
    let input_names: Vec<String> = graph
        .inputs()
        .iter()
        .map(|&id| graph.value(id).name.clone())
        .collect();
    let input_kinds: Vec<ValueKind> = graph
        .inputs()
        .iter()
        .map(|&id| graph.value(id).kind)
        .collect();
    let output_kinds: Vec<ValueKind> = graph
        .outputs()
        .iter()
        .map(|&id| graph.value(id).kind)
        .collect();
    for set in sets {
        let read = |prefix: &str, kinds: &[ValueKind]| -> Result<Vec<(String, Datum)>, String> {
            let mut v = Vec::new();
            for i in 0.. {
                let p = set.join(format!("{prefix}_{i}.pb"));
                if !p.exists() {
                    break;
                }
                let kind = kinds.get(i).copied().unwrap_or(ValueKind::Tensor);
                v.push(load_value_file(&p, kind).map_err(|e| format!("{}: {e}", p.display()))?);
            }
            Ok(v)
        };
        let inputs = read("input", &input_kinds)?;
        let expected = read("output", &output_kinds)?;
        // Fed by position, as ONNX's runner does: stored names do not always match the graph's.
        let inputs: Vec<(String, Datum)> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, (n, t))| {
                let name = if n.is_empty() || !input_names.contains(&n) {
                    input_names.get(i).cloned().unwrap_or(n)
                } else {
                    n
                };
                (name, t)
            })
            .collect();
        let outputs = match &compiled {
            Some(c) => pipeline::run_data(c, &inputs),
            None => pipeline::run_reference_data(&model, &inputs),
        }
        .map_err(|e| format!("run: {e}"))?;
        if outputs.len() != expected.len() {
            return Err(format!(
                "{} outputs, expected {}",
                outputs.len(),
                expected.len()
            ));
        }
        for (i, ((name, got), (_, want))) in outputs.iter().zip(&expected).enumerate() {
            close_data(got, want).map_err(|e| format!("output #{i} `{name}`: {e}"))?;
        }
    }
    Ok(())
}

/// A case's result on both executors.
struct CaseResult {
    name: String,
    reference: Result<(), String>,
    compiled: Result<(), String>,
}

impl CaseResult {
    fn passed(&self) -> bool {
        self.reference.is_ok() && self.compiled.is_ok()
    }

    fn why(&self) -> String {
        let mut parts = Vec::new();
        if let Err(e) = &self.reference {
            parts.push(format!("reference: {e}"));
        }
        if let Err(e) = &self.compiled {
            parts.push(format!("compiled: {e}"));
        }
        parts.join("; ")
    }
}

fn main() {
    let dir = match data_dir() {
        Ok(d) => d,
        Err(msg) => {
            eprintln!("onnx_model_tests: {msg}");
            std::process::exit(1);
        }
    };
    let filter = std::env::var("HIDET_MODEL_TESTS_FILTER").unwrap_or_default();
    let verbose = std::env::var("HIDET_MODEL_TESTS_VERBOSE").is_ok_and(|v| v == "1");
    let mut cases: Vec<(String, PathBuf)> = Vec::new();
    for suite in SUITES {
        let before = cases.len();
        if let Ok(rd) = std::fs::read_dir(dir.join(suite)) {
            for e in rd.flatten() {
                let p = e.path();
                if p.join("model.onnx").exists() {
                    let name = format!("{suite}/{}", e.file_name().to_string_lossy());
                    cases.push((name, p));
                }
            }
        }
        if cases.len() == before {
            eprintln!(
                "onnx_model_tests: no cases in {}",
                dir.join(suite).display()
            );
            std::process::exit(1);
        }
    }
    cases.retain(|(n, _)| n.contains(&filter));
    cases.sort();

    let start = std::time::Instant::now();
    let results: Mutex<Vec<CaseResult>> = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // Panics are caught and reported as failures; silence the default hook's output.
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((name, case)) = cases.get(i) else {
                    break;
                };
                let run = |executor| {
                    catch_unwind(AssertUnwindSafe(|| run_case(case, executor)))
                        .unwrap_or_else(|_| Err("panicked".into()))
                };
                let r = CaseResult {
                    name: name.clone(),
                    reference: run(Executor::Reference),
                    compiled: run(Executor::Compiled),
                };
                if let Ok(mut v) = results.lock() {
                    v.push(r);
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.name.cmp(&b.name));

    for suite in SUITES {
        let of_suite: Vec<&CaseResult> = results
            .iter()
            .filter(|r| r.name.starts_with(&format!("{suite}/")))
            .collect();
        let reference = of_suite.iter().filter(|r| r.reference.is_ok()).count();
        let compiled = of_suite.iter().filter(|r| r.compiled.is_ok()).count();
        println!(
            "{suite:<20} {:>3} cases: {reference:>3} pass with the reference executor, \
             {compiled:>3} compiled",
            of_suite.len()
        );
    }
    if verbose {
        for r in results.iter().filter(|r| !r.passed()) {
            println!("  {}: {}", r.name, r.why());
        }
    }
    println!(
        "onnx_model_tests: {} cases, {} pass both ways ({:.1}s)",
        results.len(),
        results.iter().filter(|r| r.passed()).count(),
        start.elapsed().as_secs_f64()
    );

    let expected_fail = |name: &str| EXPECTED_FAIL.iter().any(|(n, _)| *n == name);
    let mut problems: Vec<String> = Vec::new();
    for r in &results {
        match (r.passed(), expected_fail(&r.name)) {
            (false, false) => problems.push(format!("  {} fails: {}", r.name, r.why())),
            (true, true) => problems.push(format!(
                "  {} passes but is listed in EXPECTED_FAIL: remove it",
                r.name
            )),
            _ => {}
        }
    }
    if filter.is_empty() {
        for (n, _) in EXPECTED_FAIL {
            if !results.iter().any(|r| r.name == *n) {
                problems.push(format!("  {n} is listed in EXPECTED_FAIL but not found"));
            }
        }
    }
    if !problems.is_empty() {
        eprintln!("onnx_model_tests:\n{}", problems.join("\n"));
        std::process::exit(1);
    }
    println!(
        "onnx_model_tests: every case passes but the {} expected failures",
        EXPECTED_FAIL.len()
    );
}
