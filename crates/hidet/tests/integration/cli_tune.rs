//! Integration test of `hidet tune`: tuning a small zoo model stores a record per matmul
//! task, a second session is answered by the cache, a later `hidet compile` builds exactly
//! the tuned kernels (the kernel cache answers, the compiler does not run), and bad levels
//! are refused.

use std::path::Path;
use std::process::{Command, Output};

fn hidet(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(args)
        .env("HIDET_CACHE_DIR", cache)
        .output()
        .expect("the hidet binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn last_json(o: &Output) -> serde_json::Value {
    let out = text(&o.stdout);
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}\nstdout:\n{out}"))
}

fn records(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                records(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "json"))
            }
        })
        .sum()
}

/// `hidet tune zoo:tiny_mlp` at level 1 on 2 threads with at most `candidates` candidates
/// per task, then `extra`.
fn tune_tiny_mlp(candidates: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "tune",
        "zoo:tiny_mlp",
        "--level",
        "1",
        "--threads",
        "2",
        "--max-candidates",
        candidates,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn tune_stores_results_that_later_sessions_and_compiles_reuse() {
    let cache = tempfile::tempdir().expect("temp dir");
    // A microsecond model's run times spread by several percent on a busy test machine; this
    // test is about what is stored and reused, so every verdict is stored.
    let args = tune_tiny_mlp("3", &["--model-check-max-spread", "1000"]);
    let mut with_json = args.clone();
    with_json.push("--json");
    let first = hidet(cache.path(), &with_json);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let v = last_json(&first);
    let tasks = v["tasks"].as_array().expect("tasks array");
    assert!(!tasks.is_empty(), "{v}");
    for t in tasks {
        assert_eq!(t["source"], "tuned", "{t}");
        assert_eq!(t["candidates"], 3, "{t}");
        assert!(t["best"]["median"].as_f64().is_some_and(|m| m > 0.0), "{t}");
        assert!(
            t["task"]
                .as_str()
                .is_some_and(|k| k.starts_with("matmul_f32 ")),
            "{t}"
        );
    }
    let distinct: std::collections::HashSet<&str> =
        tasks.iter().filter_map(|t| t["task"].as_str()).collect();
    assert_eq!(records(&cache.path().join("tuning")), distinct.len());
    // The in-model check ran on every tuned task whose winner is not its heuristic.
    let check = &v["model_check"];
    let checked = check["tasks"].as_array().expect("model_check.tasks");
    assert!(checked.len() <= distinct.len(), "{check}");
    for t in checked {
        assert!(distinct.contains(t["task"].as_str().unwrap_or("")), "{t}");
        assert!(t["winner_seconds"].as_f64().is_some_and(|s| s > 0.0), "{t}");
        assert!(
            t["heuristic_seconds"].as_f64().is_some_and(|s| s > 0.0),
            "{t}"
        );
        assert!(t["keeps"] == "winner" || t["keeps"] == "heuristic", "{t}");
    }
    let runs = if checked.is_empty() { 0 } else { 20 };
    assert_eq!(check["runs"], runs, "{check}");
    let spread = check["spread"].as_f64().expect("model_check.spread");
    assert!(spread >= 0.0, "{check}");
    assert_eq!(check["stored"], !checked.is_empty(), "{check}");
    assert_eq!(
        check["measured"].is_object(),
        !checked.is_empty(),
        "{check}"
    );

    let second = hidet(cache.path(), &args);
    assert!(second.status.success(), "{}", text(&second.stderr));
    let out = text(&second.stdout);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("matmul_f32"))
        .collect();
    assert_eq!(rows.len(), distinct.len(), "{out}");
    assert!(rows.iter().all(|r| r.contains(" cache ")), "{out}");
    assert!(out.contains("total "), "{out}");

    let compile = hidet(
        cache.path(),
        &["compile", "zoo:tiny_mlp", "--threads", "2", "--json"],
    );
    assert!(compile.status.success(), "{}", text(&compile.stderr));
    let c = last_json(&compile);
    assert_eq!(c["compiler_invocations"], 0, "{c}");
}

#[test]
fn model_check_runs_zero_skips_the_check() {
    let cache = tempfile::tempdir().expect("temp dir");
    let args = tune_tiny_mlp("2", &["--model-check-runs", "0", "--json"]);
    let o = hidet(cache.path(), &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = last_json(&o);
    assert!(v["model_check"].is_null(), "{v}");
    let too_many = hidet(
        cache.path(),
        &["tune", "zoo:tiny_mlp", "--model-check-runs", "20000"],
    );
    assert!(!too_many.status.success());
    assert!(
        text(&too_many.stderr).contains("--model-check-runs"),
        "{}",
        text(&too_many.stderr)
    );
}

/// `--model-check-max-spread` takes a finite, non-negative fraction; a limit no real run
/// times meet reports the check without storing it.
#[test]
fn model_check_max_spread_bounds_what_is_stored() {
    let cache = tempfile::tempdir().expect("temp dir");
    for bad in ["-0.1", "nan", "inf", "much"] {
        let flag = format!("--model-check-max-spread={bad}");
        let o = hidet(cache.path(), &["tune", "zoo:tiny_mlp", &flag]);
        assert!(!o.status.success(), "{bad} accepted");
        assert!(
            text(&o.stderr).contains("non-negative fraction"),
            "{bad}: {}",
            text(&o.stderr)
        );
    }
    let args = tune_tiny_mlp("2", &["--model-check-max-spread", "0", "--json"]);
    let o = hidet(cache.path(), &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let check = &last_json(&o)["model_check"];
    let checked = check["tasks"].as_array().expect("model_check.tasks");
    if !checked.is_empty() {
        let spread = check["spread"].as_f64().expect("model_check.spread");
        assert_eq!(check["stored"], spread <= 0.0, "{check}");
    }
}

#[test]
fn bad_level_is_an_error() {
    let cache = tempfile::tempdir().expect("temp dir");
    let o = hidet(cache.path(), &["tune", "zoo:tiny_mlp", "--level", "3"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("tuning level 3 does not exist"), "{err}");
}

/// Tuning needs timing: `--device cuda-sim` is refused with the reason (the simulator has
/// none); `--device cuda` on a machine without a GPU fails naming what is missing (no driver,
/// or no device), without a panic; neither writes a record.
#[test]
fn tuning_on_the_simulator_or_without_a_gpu_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let o = hidet(
        dir.path(),
        &["tune", "zoo:tiny_mlp", "--device", "cuda-sim"],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("no timing"), "{err}");
    if matches!(hidet_cuda::runtime::Gpu::device_count(), Ok(n) if n > 0) {
        eprintln!("this machine has a GPU: `hidet tune --device cuda` is not refused here");
    } else {
        let o = hidet(dir.path(), &["tune", "zoo:tiny_mlp", "--device", "cuda"]);
        assert_eq!(o.status.code(), Some(1));
        let err = text(&o.stderr);
        assert!(
            err.contains("--device cuda:")
                && (err.contains("driver") || err.contains("no CUDA device"))
                && !err.contains("panicked"),
            "{err}"
        );
    }
    assert_eq!(records(dir.path()), 0);
}
