//! ONNX backend node-test conformance (`cargo test -p hidet --test conformance`).
//!
//! Runs every case under the ONNX node-test folder through `hidet::pipeline` (the path of
//! `hidet run`) twice — with the reference executor on the graph as imported, and compiled
//! (graph passes, fused kernels) — prints passed / failed /
//! unsupported per operator and path, and fails if any case in
//! `tests/conformance/expected_pass.txt` does not pass both ways. A case counts as passing
//! (for the list update) only when it passes both ways.
//!
//! - Data: `$HIDET_ONNX_NODE_TESTS`, or `.venv/lib/python3.*/site-packages/onnx/backend/test/data/node`
//!   at the repository root (created by `scripts/setup_python.sh`). Missing data is a failure.
//! - `HIDET_UPDATE_CONFORMANCE=1` rewrites the list as (old list ∪ passing cases).
//! - `HIDET_CONFORMANCE_FILTER=substr` runs only cases whose name contains `substr`.
//! - `HIDET_CONFORMANCE_VERBOSE=1` prints every failure's message.
//! - `HIDET_CONFORMANCE_PATHS=reference` (or `compiled`) runs one path only; listed cases are
//!   then checked on that path alone.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hidet::graph::{DType, Datum, GraphError, OpError, Tensor, ValueKind};
use hidet::onnx::{load_value_file, OnnxError};
use hidet::pipeline::{self, PipelineError};

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data_dir() -> Result<PathBuf, String> {
    if let Ok(d) = std::env::var("HIDET_ONNX_NODE_TESTS") {
        let p = PathBuf::from(d);
        return if p.is_dir() {
            Ok(p)
        } else {
            Err(format!(
                "HIDET_ONNX_NODE_TESTS={} is not a folder",
                p.display()
            ))
        };
    }
    let lib = repo_root().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path().join("site-packages/onnx/backend/test/data/node"))
            .find(|p| p.is_dir())
    });
    found.ok_or_else(|| {
        format!(
            "ONNX node tests not found under {}: run scripts/setup_python.sh (installs onnx==1.17.0) \
             or set HIDET_ONNX_NODE_TESTS",
            lib.display()
        )
    })
}

fn list_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/expected_pass.txt")
}

/// The operator a case is reported under: the node whose op type best matches the name.
fn primary_op(case: &Path) -> String {
    let Ok(bytes) = std::fs::read(case.join("model.onnx")) else {
        return "?".into();
    };
    let Ok(m) = hidet::onnx::decode_model(&bytes) else {
        return "?".into();
    };
    let name = case
        .file_name()
        .map(|n| n.to_string_lossy().replace('_', "").to_lowercase())
        .unwrap_or_default();
    let nodes = m.graph.map(|g| g.node).unwrap_or_default();
    nodes
        .iter()
        .map(|n| n.op_type().to_string())
        .filter(|op| name.contains(&op.to_lowercase()))
        .max_by_key(|op| op.len())
        .or_else(|| nodes.first().map(|n| n.op_type().to_string()))
        .unwrap_or_else(|| "?".into())
}

/// Reinterprets uint16 bit patterns as bf16 (the node tests' encoding of bf16 data).
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
    let float = a.dtype().is_float();
    if !float {
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

/// [`close`] for values of any kind: the same kind, sequence lengths and optional presence,
/// and close tensors.
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

/// Which executor a case runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path_ {
    Reference,
    Compiled,
}

fn run_case(case: &Path, path: Path_) -> Outcome {
    let model = match pipeline::load(&case.join("model.onnx")) {
        Ok(m) => m,
        Err(PipelineError::Onnx(
            e @ (OnnxError::UnsupportedOps(_) | OnnxError::Unsupported(_)),
        )) => return Outcome::Unsupported(e.to_string()),
        Err(PipelineError::Onnx(OnnxError::Graph(
            e @ GraphError::Node {
                source: OpError::Unsupported(_),
                ..
            },
        ))) => return Outcome::Unsupported(e.to_string()),
        Err(e) => return Outcome::Fail(format!("load: {e}")),
    };
    let mut sets: Vec<PathBuf> = match std::fs::read_dir(case) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    sets.sort();
    let compiled = match path {
        Path_::Reference => None,
        Path_::Compiled => {
            match pipeline::compile(&model, hidet::graph::compiled::CompileOptions::default()) {
                Ok(c) => Some(c),
                Err(e) => return Outcome::Fail(format!("graph passes: {e}")),
            }
        }
    };
    let graph = &model.graph;
    let input_names: Vec<String> = graph
        .inputs()
        .iter()
        .map(|&id| graph.value(id).name.clone())
        .collect();
    // The kind of the i-th input / output file: that of the i-th graph input / output (the
    // ONNX runner feeds and checks them by position).
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
        let inputs = match read("input", &input_kinds) {
            Ok(v) => v,
            Err(e) => return Outcome::Unsupported(e),
        };
        let expected = match read("output", &output_kinds) {
            Ok(v) => v,
            Err(e) => return Outcome::Unsupported(e),
        };
        // Node-test tensors usually carry the graph's input names; the ONNX runner feeds them
        // by position, so an unnamed tensor or one whose name is not a graph input (some
        // cases name their data `x` for an input called `input`) goes to its position.
        let inputs: Vec<(String, Datum)> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, (n, t))| {
                let name = if n.is_empty() || !input_names.contains(&n) {
                    input_names.get(i).cloned().unwrap_or(n)
                } else {
                    n
                };
                // The node tests store bf16 data as uint16 bit patterns (numpy has no bf16).
                let declared = graph
                    .inputs()
                    .iter()
                    .map(|&id| graph.value(id))
                    .find(|v| v.name == name);
                let t = match (declared, t) {
                    (Some(v), Datum::Tensor(t))
                        if v.ty.dtype == DType::BF16 && t.dtype() == DType::U16 =>
                    {
                        Datum::Tensor(u16_bits_to_bf16(&t))
                    }
                    (_, t) => t,
                };
                (name, t)
            })
            .collect();
        let result = match &compiled {
            Some(c) => pipeline::run_data(c, &inputs),
            None => pipeline::run_reference_data(&model, &inputs),
        };
        let outputs = match result {
            Ok(o) => o,
            Err(e) => return Outcome::Fail(format!("run: {e}")),
        };
        if outputs.len() != expected.len() {
            return Outcome::Fail(format!(
                "{} outputs, expected {}",
                outputs.len(),
                expected.len()
            ));
        }
        for (i, ((name, got), (_, want))) in outputs.iter().zip(&expected).enumerate() {
            if let Err(e) = close_data(got, want) {
                return Outcome::Fail(format!("output #{i} `{name}`: {e}"));
            }
        }
    }
    Outcome::Pass
}

/// One outcome from the outcomes of the paths that ran: a failure on either path fails (named
/// by path); unsupported if the reference path found it unsupported.
fn combine(reference: Option<Outcome>, compiled: Option<Outcome>) -> Outcome {
    match (reference, compiled) {
        (Some(Outcome::Fail(m)), _) => Outcome::Fail(format!("reference: {m}")),
        (_, Some(Outcome::Fail(m))) => Outcome::Fail(format!("compiled: {m}")),
        (Some(u @ Outcome::Unsupported(_)), _) | (None, Some(u @ Outcome::Unsupported(_))) => u,
        (Some(Outcome::Pass) | None, Some(Outcome::Pass) | None) => Outcome::Pass,
        (Some(Outcome::Pass), Some(u @ Outcome::Unsupported(_))) => u,
    }
}

fn main() {
    let dir = match data_dir() {
        Ok(d) => d,
        Err(msg) => {
            eprintln!("conformance: {msg}");
            std::process::exit(1);
        }
    };
    let filter = std::env::var("HIDET_CONFORMANCE_FILTER").unwrap_or_default();
    let verbose = std::env::var("HIDET_CONFORMANCE_VERBOSE").is_ok_and(|v| v == "1");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("model.onnx").exists())
                .collect()
        })
        .unwrap_or_default();
    cases.retain(|c| {
        c.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(&filter))
    });
    cases.sort();
    if cases.is_empty() {
        eprintln!(
            "conformance: no cases found in {} (filter `{filter}`)",
            dir.display()
        );
        std::process::exit(1);
    }
    let paths = match std::env::var("HIDET_CONFORMANCE_PATHS").as_deref() {
        Ok("reference") => (true, false),
        Ok("compiled") => (false, true),
        _ => (true, true),
    };
    let compiled_only = std::sync::atomic::AtomicUsize::new(0);
    let start = std::time::Instant::now();
    let results: Mutex<Vec<(String, String, Outcome)>> = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // Panics are caught and reported as failures; silence the default hook's output.
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let name = case
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let op = primary_op(case);
                let run = |path: Path_| {
                    catch_unwind(AssertUnwindSafe(|| run_case(case, path)))
                        .unwrap_or_else(|_| Outcome::Fail("panicked".into()))
                };
                let reference = paths.0.then(|| run(Path_::Reference));
                let compiled = paths.1.then(|| run(Path_::Compiled));
                if matches!(
                    (&reference, &compiled),
                    (Some(Outcome::Pass), Some(Outcome::Fail(_)))
                ) {
                    compiled_only.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let outcome = combine(reference, compiled);
                if let Ok(mut r) = results.lock() {
                    r.push((name, op, outcome));
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.0.cmp(&b.0));

    // Per-operator table.
    let mut per_op: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for (_, op, o) in &results {
        let e = per_op.entry(op.as_str()).or_default();
        match o {
            Outcome::Pass => e[0] += 1,
            Outcome::Fail(_) => e[1] += 1,
            Outcome::Unsupported(_) => e[2] += 1,
        }
    }
    println!(
        "{:<32} {:>6} {:>6} {:>11}",
        "operator", "passed", "failed", "unsupported"
    );
    for (op, [p, f, u]) in &per_op {
        println!("{op:<32} {p:>6} {f:>6} {u:>11}");
    }
    let passed: BTreeSet<String> = results
        .iter()
        .filter(|r| r.2 == Outcome::Pass)
        .map(|r| r.0.clone())
        .collect();
    let failed: Vec<&(String, String, Outcome)> = results
        .iter()
        .filter(|r| matches!(r.2, Outcome::Fail(_)))
        .collect();
    let unsupported = results.len() - passed.len() - failed.len();
    if verbose {
        for (name, _, o) in &results {
            if let Outcome::Fail(m) | Outcome::Unsupported(m) = o {
                println!("  {name}: {m}");
            }
        }
    }
    println!(
        "\nconformance: {} cases, {} passed, {} failed ({} of them only compiled), {} unsupported ({:.1}s)",
        results.len(),
        passed.len(),
        failed.len(),
        compiled_only.load(std::sync::atomic::Ordering::Relaxed),
        unsupported,
        start.elapsed().as_secs_f64()
    );

    let list = list_path();
    let expected: BTreeSet<String> = std::fs::read_to_string(&list)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if std::env::var("HIDET_UPDATE_CONFORMANCE").is_ok_and(|v| v == "1") {
        let all: BTreeSet<&String> = expected.iter().chain(passed.iter()).collect();
        let text: String = all.iter().map(|s| format!("{s}\n")).collect();
        if let Err(e) = std::fs::write(&list, text) {
            eprintln!("conformance: cannot write {}: {e}", list.display());
            std::process::exit(1);
        }
        println!(
            "conformance: wrote {} cases to {}",
            all.len(),
            list.display()
        );
    }
    let ran: BTreeSet<&String> = results.iter().map(|r| &r.0).collect();
    let regressions: Vec<String> = expected
        .iter()
        .filter(|c| ran.contains(c) && !passed.contains(*c))
        .map(|c| {
            let why = results
                .iter()
                .find(|r| &r.0 == c)
                .map(|r| format!("{:?}", r.2))
                .unwrap_or_default();
            format!("  {c}: {why}")
        })
        .collect();
    let missing: Vec<&String> = if filter.is_empty() {
        expected.iter().filter(|c| !ran.contains(c)).collect()
    } else {
        vec![]
    };
    if !regressions.is_empty() || !missing.is_empty() {
        eprintln!(
            "conformance: {} listed cases fail:\n{}",
            regressions.len(),
            regressions.join("\n")
        );
        for m in &missing {
            eprintln!("  {m}: listed but not found in {}", dir.display());
        }
        std::process::exit(1);
    }
    println!("conformance: all {} listed cases pass", expected.len());
}
