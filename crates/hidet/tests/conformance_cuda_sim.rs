//! ONNX backend node tests on the CUDA backend in the GPU simulator (`--device cuda-sim`):
//! `cargo test -p hidet --test conformance_cuda_sim`.
//!
//! The cases are those of `tests/conformance/expected_pass.txt` (passing on the reference and
//! the compiled CPU path), loaded and checked exactly as `tests/conformance.rs` does (same
//! harness, same tolerances), compiled with the CUDA backend (target-neutral graph passes,
//! the default GPU scheduler) and run on the simulator device: every block of every launch,
//! with the simulator's checkers.
//!
//! `tests/conformance/cuda_sim_expected_fail.txt` lists, as `case  # reason`, the cases that
//! fail on the simulated GPU. The suite fails when a case outside that list fails, when a
//! listed case passes (`HIDET_UPDATE_CONFORMANCE=1` rewrites the list), or when fewer than
//! [`MIN_PASSING`] passing cases launched at least one simulated kernel (many cases run
//! partly or wholly on the host: strings, data-dependent shapes; the count says how many ran
//! every step as a kernel). `HIDET_CONFORMANCE_FILTER=substr` runs only matching cases
//! (and checks neither the list's stale entries nor the minimum).

#[allow(dead_code)]
#[path = "conformance.rs"]
mod conformance;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

use conformance::Outcome;
use hidet::graph::compiled::CompileOptions;
use hidet::pipeline;
use hidet_cuda::graph_backend::CudaBackendOptions;

/// The fewest cases that must pass on the simulated GPU.
const MIN_PASSING: usize = 300;

const FAIL_FILE: &str = "cuda_sim_expected_fail.txt";

const FAIL_HEADER: &str = "# ONNX node tests (of expected_pass.txt) that fail on the simulated GPU, as `case  # reason` (see tests/conformance_cuda_sim.rs).";

fn fail(msg: &str) -> ! {
    eprintln!("conformance (cuda-sim): {msg}");
    std::process::exit(1);
}

fn main() {
    let dir = conformance::data_dir().unwrap_or_else(|m| fail(&m));
    let lists = conformance::list_dir();
    let filter = std::env::var("HIDET_CONFORMANCE_FILTER").unwrap_or_default();
    let update = std::env::var("HIDET_UPDATE_CONFORMANCE").is_ok_and(|v| v == "1");
    let pass_list =
        conformance::read_pass_list(&lists.join("expected_pass.txt")).unwrap_or_else(|e| fail(&e));
    let fail_path = lists.join(FAIL_FILE);
    let fail_list = if fail_path.exists() {
        conformance::read_fail_list(&fail_path).unwrap_or_else(|e| fail(&e))
    } else {
        BTreeMap::new()
    };
    let cases: Vec<(String, PathBuf)> = pass_list
        .iter()
        .filter(|n| n.contains(&filter))
        .map(|n| (n.clone(), dir.join(n)))
        .filter(|(_, p)| p.join("model.onnx").exists())
        .collect();
    if cases.is_empty() {
        fail(&format!(
            "no cases found in {} (filter `{filter}`)",
            dir.display()
        ));
    }
    let start = std::time::Instant::now();
    let results: Mutex<Vec<(String, Outcome, f64, conformance::CompiledSteps)>> =
        Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, case)) = cases.get(i) else {
                    break;
                };
                let t = std::time::Instant::now();
                let compile = |m: &hidet::onnx::OnnxModel| {
                    pipeline::compile_sim(
                        m,
                        CompileOptions::default(),
                        // Every elementwise task whose layout allows it vectorized.
                        CudaBackendOptions {
                            min_vector_threads: Some(0),
                            ..CudaBackendOptions::default()
                        },
                    )
                };
                let mut steps = conformance::CompiledSteps::default();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    conformance::run_case_with(case, Some(compile), Some(&mut steps))
                }))
                .unwrap_or_else(|_| Outcome::Fail("panicked".into()));
                if let Ok(mut r) = results.lock() {
                    r.push((name.clone(), outcome, t.elapsed().as_secs_f64(), steps));
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let passed = results.iter().filter(|r| r.1 == Outcome::Pass).count();
    let with_kernels = results
        .iter()
        .filter(|r| r.1 == Outcome::Pass && r.3.kernels > 0)
        .count();
    let all_kernels = results
        .iter()
        .filter(|r| r.1 == Outcome::Pass && r.3.kernels > 0 && r.3.host.is_empty())
        .count();
    let mut problems = Vec::new();
    let mut new_fail_list = BTreeMap::new();
    for (name, outcome, _, _) in &results {
        match (outcome, fail_list.get(name)) {
            (Outcome::Pass, Some(_)) => {
                problems.push(format!("{name}: passes but is listed in {FAIL_FILE}"))
            }
            (Outcome::Pass, None) => {}
            (o, listed) => {
                let reason = listed.cloned().unwrap_or_else(|| conformance::reason_of(o));
                if listed.is_none() {
                    problems.push(format!("{name}: {}", conformance::reason_of(o)));
                }
                new_fail_list.insert(name.clone(), reason);
            }
        }
    }
    let mut slowest: Vec<_> = results.iter().collect();
    slowest.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (name, _, secs, _) in slowest.iter().take(5) {
        println!("  slowest: {name} {secs:.2} s");
    }
    println!(
        "cuda-sim: {passed} of {} cases pass ({} listed as failing) in {:.1} s; {with_kernels} \
         passing cases launched simulated kernels, {all_kernels} of them ran no host step",
        results.len(),
        new_fail_list.len(),
        start.elapsed().as_secs_f64()
    );
    if update {
        let width = new_fail_list.keys().map(|k| k.len()).max().unwrap_or(0);
        let text: String = std::iter::once(FAIL_HEADER.to_string())
            .chain(
                new_fail_list
                    .iter()
                    .map(|(k, r)| format!("{k:<width$}  # {r}")),
            )
            .map(|s| format!("{s}\n"))
            .collect();
        std::fs::write(&fail_path, text)
            .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", fail_path.display())));
        println!("wrote {}", fail_path.display());
        return;
    }
    if filter.is_empty() && passed < MIN_PASSING {
        problems.push(format!(
            "only {passed} cases pass, fewer than {MIN_PASSING}"
        ));
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("  {p}");
        }
        fail(&format!("{} problems", problems.len()));
    }
}
