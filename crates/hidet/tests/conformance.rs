//! ONNX backend node-test conformance (`cargo test -p hidet --test conformance`).
//!
//! Every case under the ONNX node-test folder runs two ways through `hidet::pipeline` (the
//! path of `hidet run`):
//!
//! - *reference*: the reference executor (every operator's `eval`) on the graph exactly as
//!   imported, before any graph pass: an oracle that shares no rewrite with the compiled path;
//! - *compiled*: the CPU graph passes, specialization and fused kernels. For every data set
//!   the suite reads the report of the compiled graph for that run's shapes and records
//!   whether every step ran as a generated kernel, or which operators ran on the host (their
//!   `eval`, for a reason that no kernel could remove: strings, sequences, data-dependent
//!   shapes, an operator without a compute definition). A compute definition that fails is a
//!   compile error naming the node, so the case fails.
//!
//! A case passes when it passes on every path that ran. Every case is classified in exactly
//! one of two lists:
//!
//! - `tests/conformance/expected_pass.txt`: one case per line, passing both ways. It only
//!   grows: a listed case that fails is a regression.
//! - `tests/conformance/expected_fail.txt`: `case  # reason`, the failing and unsupported
//!   cases, each with why (a reason is required).
//!
//! The suite fails when a listed pass fails, when a case found in the data is in neither list
//! or in both, when a listed case is not found (unfiltered runs), and, when both paths ran,
//! when a case listed as failing passes (`HIDET_UPDATE_CONFORMANCE=1` moves it).
//!
//! It prints passed / failed / unsupported per operator, then the host steps of the cases that
//! pass on the compiled path (per operator: how many cases and why; per reason: how many
//! cases), and ends with `N cases compiled to kernels, M ran some step on the host`, counted
//! over those cases (one of the N may launch no kernel at all when every node folds or
//! aliases a buffer; the line says how many).
//!
//! - Data: `$HIDET_ONNX_NODE_TESTS`, or `.venv/lib/python3.*/site-packages/onnx/backend/test/data/node`
//!   at the repository root (created by `scripts/setup_python.sh`). Missing data is a failure.
//! - `HIDET_UPDATE_CONFORMANCE=1` (both paths only) adds the passing cases to the pass list
//!   and removes them from the fail list, and adds every failing case not in the pass list
//!   to the fail list, keeping its reason when listed and otherwise giving its error message.
//! - `HIDET_CONFORMANCE_FILTER=substr` runs only cases whose name contains `substr`.
//! - `HIDET_CONFORMANCE_VERBOSE=1` prints every failure's message and every case's host steps.
//! - `HIDET_CONFORMANCE_PATHS=reference` (or `compiled`) runs one path only; listed passes are
//!   then checked on that path alone, and the lists are not updated.

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
pub(crate) enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn data_dir() -> Result<PathBuf, String> {
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

pub(crate) fn list_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// The operator a case is reported under: the node whose op type best matches the name.
pub(crate) fn primary_op(case: &Path) -> String {
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

/// What the compiled path ran, over every data set of a case.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CompiledSteps {
    /// Kernels launched by the largest of the case's compiled graphs.
    pub(crate) kernels: usize,
    /// Operator type → kinds of reason of its host steps.
    pub(crate) host: BTreeMap<String, BTreeSet<&'static str>>,
    /// Every host step as `op_type node: reason`, for the verbose listing.
    host_detail: BTreeSet<String>,
}

/// The outcome of one path; for the compiled path, what it ran until it stopped.
#[derive(Debug, Clone)]
struct PathResult {
    outcome: Outcome,
    steps: Option<CompiledSteps>,
}

fn run_case(case: &Path, path: Path_) -> PathResult {
    let mut steps = (path == Path_::Compiled).then(CompiledSteps::default);
    let outcome = run_case_into(case, path, steps.as_mut());
    PathResult { outcome, steps }
}

/// Runs `case` on `path`; on the compiled path `steps` collects what each compiled graph ran.
fn run_case_into(case: &Path, path: Path_, steps: Option<&mut CompiledSteps>) -> Outcome {
    type Compile = fn(&hidet::onnx::OnnxModel) -> pipeline::CpuModel;
    let compile: Option<Compile> = match path {
        Path_::Reference => None,
        Path_::Compiled => Some(|model| {
            pipeline::compile(model, hidet::graph::compiled::CompileOptions::default())
        }),
    };
    run_case_with(case, compile, steps)
}

/// Runs `case` with the model `compile` makes (any backend), or with the reference executor
/// when `compile` is `None`; `steps` collects what each compiled graph ran.
pub(crate) fn run_case_with<B: hidet::graph::compiled::Backend>(
    case: &Path,
    compile: Option<
        impl FnOnce(&hidet::onnx::OnnxModel) -> hidet::graph::compiled::CompiledModel<B>,
    >,
    mut steps: Option<&mut CompiledSteps>,
) -> Outcome {
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
    let compiled = compile.map(|f| f(&model));
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
            Some(c) => {
                let graph = match c.compiled_for(&inputs) {
                    Ok(g) => g,
                    Err(e) => return Outcome::Fail(format!("compile: {e}")),
                };
                if let Some(steps) = steps.as_deref_mut() {
                    let report = graph.report();
                    steps.kernels = steps.kernels.max(report.kernels);
                    for h in &report.host_steps {
                        steps
                            .host
                            .entry(h.op_type.clone())
                            .or_default()
                            .insert(h.reason.kind());
                        steps
                            .host_detail
                            .insert(format!("{} `{}`: {}", h.op_type, h.node, h.reason));
                    }
                }
                graph.run_data(&inputs).map_err(PipelineError::from)
            }
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
fn combine(reference: Option<&Outcome>, compiled: Option<&Outcome>) -> Outcome {
    match (reference, compiled) {
        (Some(Outcome::Fail(m)), _) => Outcome::Fail(format!("reference: {m}")),
        (_, Some(Outcome::Fail(m))) => Outcome::Fail(format!("compiled: {m}")),
        (Some(u @ Outcome::Unsupported(_)), _) | (None, Some(u @ Outcome::Unsupported(_))) => {
            u.clone()
        }
        (Some(Outcome::Pass) | None, Some(Outcome::Pass) | None) => Outcome::Pass,
        (Some(Outcome::Pass), Some(u @ Outcome::Unsupported(_))) => u.clone(),
    }
}

/// One case's results.
struct CaseResult {
    name: String,
    op: String,
    outcome: Outcome,
    reference: Option<Outcome>,
    /// The compiled path's outcome and steps, when it ran.
    compiled: Option<PathResult>,
}

impl CaseResult {
    /// The compiled path's steps when it ran and passed.
    fn passing_steps(&self) -> Option<&CompiledSteps> {
        self.compiled
            .as_ref()
            .filter(|c| c.outcome == Outcome::Pass)
            .and_then(|c| c.steps.as_ref())
    }
}

/// `expected_pass.txt`: case names, one a line (`#` starts a comment line).
pub(crate) fn read_pass_list(path: &Path) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

/// `expected_fail.txt`: `case  # reason` a line (`#` at the start of a line: a comment).
/// A line without a reason, or a case listed twice, is an error.
pub(crate) fn read_fail_list(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut list = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line.split_once('#').unwrap_or((line, ""));
        let (name, reason) = (name.trim(), reason.trim());
        if name.is_empty() || reason.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!(
                "{}:{}: expected `case  # reason`, got `{line}`",
                path.display(),
                i + 1
            ));
        }
        if list.insert(name.to_string(), reason.to_string()).is_some() {
            return Err(format!(
                "{}:{}: `{name}` is listed twice",
                path.display(),
                i + 1
            ));
        }
    }
    Ok(list)
}

/// The fail-list reason of a new failure: its message on one line, at most 240 characters.
pub(crate) fn reason_of(outcome: &Outcome) -> String {
    let m = match outcome {
        Outcome::Fail(m) => m.clone(),
        Outcome::Unsupported(m) => format!("unsupported: {m}"),
        Outcome::Pass => String::new(),
    };
    let one_line = m.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(240) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// The first line of `expected_pass.txt`.
const PASS_HEADER: &str =
    "# ONNX node tests that pass on both paths (see tests/conformance.rs); this list only grows.";

/// The first line of `expected_fail.txt`.
const FAIL_HEADER: &str =
    "# ONNX node tests that fail or are unsupported, as `case  # reason` (see tests/conformance.rs).";

/// Writes both lists, sorted, each under its header.
fn write_lists(
    dir: &Path,
    pass: &BTreeSet<String>,
    fail: &BTreeMap<String, String>,
) -> Result<(), String> {
    let pass_text: String = std::iter::once(PASS_HEADER.to_string())
        .chain(pass.iter().cloned())
        .map(|s| format!("{s}\n"))
        .collect();
    let width = fail.keys().map(|k| k.len()).max().unwrap_or(0);
    let fail_text: String = std::iter::once(FAIL_HEADER.to_string())
        .chain(fail.iter().map(|(k, r)| format!("{k:<width$}  # {r}")))
        .map(|s| format!("{s}\n"))
        .collect();
    for (file, text) in [
        ("expected_pass.txt", pass_text),
        ("expected_fail.txt", fail_text),
    ] {
        let p = dir.join(file);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(())
}

fn fail(msg: &str) -> ! {
    eprintln!("conformance: {msg}");
    std::process::exit(1);
}

fn main() {
    let dir = data_dir().unwrap_or_else(|msg| fail(&msg));
    let filter = std::env::var("HIDET_CONFORMANCE_FILTER").unwrap_or_default();
    let verbose = std::env::var("HIDET_CONFORMANCE_VERBOSE").is_ok_and(|v| v == "1");
    let update = std::env::var("HIDET_UPDATE_CONFORMANCE").is_ok_and(|v| v == "1");
    let lists = list_dir();
    let mut pass_list =
        read_pass_list(&lists.join("expected_pass.txt")).unwrap_or_else(|e| fail(&e));
    let mut fail_list =
        read_fail_list(&lists.join("expected_fail.txt")).unwrap_or_else(|e| fail(&e));
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
        fail(&format!(
            "no cases found in {} (filter `{filter}`)",
            dir.display()
        ));
    }
    let (run_reference, run_compiled) = match std::env::var("HIDET_CONFORMANCE_PATHS").as_deref() {
        Ok("reference") => (true, false),
        Ok("compiled") => (false, true),
        _ => (true, true),
    };
    let both = run_reference && run_compiled;
    if update && !both {
        fail("HIDET_UPDATE_CONFORMANCE=1 needs both paths (unset HIDET_CONFORMANCE_PATHS)");
    }
    let start = std::time::Instant::now();
    let results: Mutex<Vec<CaseResult>> = Mutex::new(Vec::new());
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
                    catch_unwind(AssertUnwindSafe(|| run_case(case, path))).unwrap_or_else(|_| {
                        PathResult {
                            outcome: Outcome::Fail("panicked".into()),
                            steps: None,
                        }
                    })
                };
                let reference = run_reference.then(|| run(Path_::Reference).outcome);
                let compiled = run_compiled.then(|| run(Path_::Compiled));
                let outcome = combine(reference.as_ref(), compiled.as_ref().map(|c| &c.outcome));
                if let Ok(mut r) = results.lock() {
                    r.push(CaseResult {
                        name,
                        op,
                        outcome,
                        reference,
                        compiled,
                    });
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.name.cmp(&b.name));
    let seconds = start.elapsed().as_secs_f64();

    // Per-operator table.
    let mut per_op: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for r in &results {
        let e = per_op.entry(r.op.as_str()).or_default();
        match r.outcome {
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
    if verbose {
        for r in &results {
            if let Outcome::Fail(m) | Outcome::Unsupported(m) = &r.outcome {
                println!("  {}: {m}", r.name);
            }
            for h in r
                .passing_steps()
                .map(|s| &s.host_detail)
                .into_iter()
                .flatten()
            {
                println!("  {}: host step {h}", r.name);
            }
        }
    }
    let passed: BTreeSet<&str> = results
        .iter()
        .filter(|r| r.outcome == Outcome::Pass)
        .map(|r| r.name.as_str())
        .collect();
    let failed = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail(_)))
        .count();
    let compiled_only = results
        .iter()
        .filter(|r| {
            r.reference == Some(Outcome::Pass)
                && matches!(
                    r.compiled.as_ref().map(|c| &c.outcome),
                    Some(Outcome::Fail(_))
                )
        })
        .count();
    println!(
        "\nconformance: {} cases, {} passed, {} failed ({compiled_only} of them only compiled), {} unsupported ({seconds:.1}s)",
        results.len(),
        passed.len(),
        failed,
        results.len() - passed.len() - failed,
    );

    if update {
        for r in &results {
            if r.outcome == Outcome::Pass {
                pass_list.insert(r.name.clone());
                fail_list.remove(&r.name);
            } else if !pass_list.contains(&r.name) && !fail_list.contains_key(&r.name) {
                fail_list.insert(r.name.clone(), reason_of(&r.outcome));
            }
        }
        write_lists(&lists, &pass_list, &fail_list).unwrap_or_else(|e| fail(&e));
        println!(
            "conformance: wrote {} passing and {} failing cases to {}",
            pass_list.len(),
            fail_list.len(),
            lists.display()
        );
    }

    let mut problems: Vec<String> = Vec::new();
    for r in &results {
        let (in_pass, in_fail) = (pass_list.contains(&r.name), fail_list.get(&r.name));
        match (in_pass, in_fail, &r.outcome) {
            (true, Some(_), _) => problems.push(format!(
                "  {}: listed in both expected_pass.txt and expected_fail.txt",
                r.name
            )),
            (false, None, o) => problems.push(format!(
                "  {}: in neither list (now {}); classify it, e.g. with HIDET_UPDATE_CONFORMANCE=1",
                r.name,
                match o {
                    Outcome::Pass => "passing".to_string(),
                    o => reason_of(o),
                }
            )),
            (true, None, o) if *o != Outcome::Pass => {
                problems.push(format!("  {}: listed as passing, {o:?}", r.name))
            }
            (false, Some(reason), Outcome::Pass) if both => problems.push(format!(
                "  {}: listed as failing ({reason}) but passes; HIDET_UPDATE_CONFORMANCE=1 moves it",
                r.name
            )),
            _ => {}
        }
    }
    if filter.is_empty() {
        let ran: BTreeSet<&str> = results.iter().map(|r| r.name.as_str()).collect();
        for c in pass_list
            .iter()
            .chain(fail_list.keys())
            .filter(|c| !ran.contains(c.as_str()))
        {
            problems.push(format!("  {c}: listed but not found in {}", dir.display()));
        }
    }

    // Host steps of the cases that pass on the compiled path.
    let passing: Vec<&CompiledSteps> = results.iter().filter_map(|r| r.passing_steps()).collect();
    let on_host = passing.iter().filter(|s| !s.host.is_empty()).count();
    let no_kernel = passing
        .iter()
        .filter(|s| s.host.is_empty() && s.kernels == 0)
        .count();
    let mut host_ops: BTreeMap<&str, (usize, BTreeSet<&str>)> = BTreeMap::new();
    let mut host_reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &passing {
        for (op, reasons) in &s.host {
            let e = host_ops.entry(op.as_str()).or_default();
            e.0 += 1;
            e.1.extend(reasons.iter().copied());
        }
        let reasons: BTreeSet<&str> = s.host.values().flatten().copied().collect();
        for r in reasons {
            *host_reasons.entry(r).or_default() += 1;
        }
    }
    if !host_ops.is_empty() {
        println!("\nhost steps of passing cases by operator (cases, reasons):");
        for (op, (n, reasons)) in &host_ops {
            let reasons: Vec<&str> = reasons.iter().copied().collect();
            println!("  {op:<28} {n:>5}  {}", reasons.join("; "));
        }
        println!("host steps of passing cases by reason (cases):");
        for (reason, n) in &host_reasons {
            println!("  {reason:<28} {n:>5}");
        }
    }
    println!();
    if problems.is_empty() {
        let listed = results
            .iter()
            .filter(|r| pass_list.contains(&r.name))
            .count();
        println!(
            "conformance: every case classified; the {listed} listed as passing pass {}",
            if both { "both ways" } else { "on the path run" }
        );
    } else {
        eprintln!(
            "conformance: {} problems:\n{}",
            problems.len(),
            problems.join("\n")
        );
    }
    if run_compiled {
        println!(
            "{} cases compiled to kernels, {on_host} ran some step on the host \
             (of the {} cases passing on the compiled path; {no_kernel} of the {} launch no \
             kernel: every node folds or aliases a buffer)",
            passing.len() - on_host,
            passing.len(),
            passing.len() - on_host,
        );
    }
    if !problems.is_empty() {
        std::process::exit(1);
    }
}
