//! Tuning the matmul template on the real CPU backend: a tiny task at level 1 with a handful
//! of candidates picks its measured-fastest candidate, persists every measurement, and a
//! second session hits the cache without invoking the compiler; in a compiled graph,
//! tuning rebuilds the fused kernel with the winner (still correct) and a later compilation
//! without tuning lowers with the cached winner; a corrupt record is ignored with a warning;
//! the in-model check times the winner against the heuristic inside the graph, records it
//! once, and later compilations lower with the faster.

mod common;

use std::sync::{Arc, Mutex};

use common::{options_in, Rng};
use hidet_cpu::graph_backend::tuning::matmul::schedule_label;
use hidet_cpu::graph_backend::tuning::model_check::{
    check_in_model, pending_checks, time_alternately, CheckPlan,
};
use hidet_cpu::graph_backend::tuning::{matmul_choice, tuning_cache};
use hidet_cpu::graph_backend::tuning::{CpuTuneBackend, CpuTuning, MatmulCandidate, MatmulTask};
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_cpu::{build, compiler_invocations, CpuTarget, KernelArg};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::fusion::{partition_with, FusedTask, GroupKind, Specialization};
use hidet_graph::{
    run_reference, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet_ir::function::{IRModule, Target};
use hidet_tune::observer::ResultSource;
use hidet_tune::{
    CandidateOutcome, Lookup, MeasureConfig, TaskIdentity, Tunable, TuneBackend, TuneConfig,
    TuneEvent, TuneLevel, TuneObserver, Tuner, TuningCache,
};

/// Tests that count compiler invocations (a process-wide counter) run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn quick_measure() -> MeasureConfig {
    MeasureConfig {
        min_runs: 5,
        max_runs: 15,
        min_time: std::time::Duration::from_millis(20),
        ..MeasureConfig::default()
    }
}

/// `c = a · b` in float64 from f32 operands.
fn reference(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
        }
    }
    c
}

#[test]
fn workloads_rotate_cold_copies_of_the_read_only_inputs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let (m, n, k) = (45i64, 67i64, 83i64);
    let task = MatmulTask::plain(m, n, k, CpuTarget::host(), 2);
    let function = task
        .function(&task.heuristic(), "cold_probe")
        .expect("the heuristic builds");
    let opts = options_in(dir.path());
    let read_only = |elements: i64| ((elements * 4) as usize).next_multiple_of(64);
    let inputs = read_only(m * k) + read_only(k * n);
    let cold = CpuTuneBackend::new(&opts, 2).with_cold_bytes(1 << 20);
    let mut workload = cold
        .workload(std::slice::from_ref(&function))
        .expect("a workload");
    assert_eq!(workload.copies(), (1usize << 20).div_ceil(inputs));
    let unit = cold
        .compile("cold_probe_unit", vec![vec![function.clone()]])
        .expect("compiles");
    for _ in 0..workload.copies() + 2 {
        cold.run(&unit, "cold_probe", &mut workload).expect("runs");
    }
    let warm = CpuTuneBackend::new(&opts, 2).with_cold_bytes(0);
    assert_eq!(
        warm.workload(std::slice::from_ref(&function))
            .expect("a workload")
            .copies(),
        1
    );
}

#[test]
fn tiny_matmul_tunes_persists_and_hits_the_cache() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let (m, n, k) = (45usize, 67usize, 83usize);
    let target = CpuTarget::host();
    let task = MatmulTask::plain(m as i64, n as i64, k as i64, target, 2).with_limit(Some(5));
    let opts = options_in(dir.path());
    let runner = CpuTuneBackend::new(&opts, 2);
    let cache = TuningCache::in_cache_dir(dir.path());
    let mut config = TuneConfig::new(TuneLevel::Subset, Some(cache.clone()));
    config.measure = quick_measure();
    config.jobs = 2;

    let before = compiler_invocations();
    let results = Tuner::new(&runner, config.clone())
        .tune(std::slice::from_ref(&task))
        .expect("compiler available");
    let tuned = results[0].as_ref().expect("tuned");
    assert!(compiler_invocations() > before);
    assert_eq!(tuned.summary.source, ResultSource::Tuned);
    assert_eq!(tuned.summary.candidates, 5);
    assert_eq!(tuned.summary.failed, 0, "{:?}", tuned.record);

    // Every measurement is persisted; the winner is the fastest complete measurement.
    let identity = TaskIdentity {
        task: task.key(),
        space: task.space(),
        template_version: task.template_version(),
        environment: hidet_tune::TuneBackend::environment(&runner).expect("environment"),
    };
    let Lookup::Hit(record) = cache.lookup::<MatmulCandidate>(&identity) else {
        panic!("record not stored at {}", cache.path(&identity).display())
    };
    assert_eq!(record.candidates.len(), 5);
    assert_eq!(record.heuristic, Some(0));
    let fastest = record
        .candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.outcome.median().map(|t| (i, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("something measured");
    assert_eq!(record.winner, fastest.0);
    assert_eq!(record.candidates[record.winner].schedule, tuned.winner);
    for c in &record.candidates {
        assert!(
            matches!(&c.outcome, CandidateOutcome::Measured(s) | CandidateOutcome::Pruned(s) if s.runs >= 1 && s.median > 0.0),
            "{c:?}"
        );
    }

    // The winner computes the product.
    let f = task
        .function(&tuned.winner, "winner")
        .expect("winner builds");
    let module = build(IRModule::new("winner_check", Target::Cpu).with(f), &opts).expect("builds");
    module.set_num_threads(2).expect("launcher setter exported");
    let mut rng = Rng::new(11);
    let (a, b) = (rng.vec_f32(m * k), rng.vec_f32(k * n));
    let mut c = vec![f32::NAN; m * n];
    module
        .kernel("winner")
        .expect("kernel")
        .call(&mut [
            KernelArg::tensor(&a, &[m, k]),
            KernelArg::tensor(&b, &[k, n]),
            KernelArg::tensor_mut(&mut c, &[m, n]),
        ])
        .expect("arguments match");
    for (got, want) in c.iter().zip(reference(&a, &b, m, n, k)) {
        assert!(
            (f64::from(*got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "{got} vs {want}"
        );
    }

    // A second session is answered by the cache: nothing is compiled.
    let before = compiler_invocations();
    let again = Tuner::new(&runner, config)
        .tune(std::slice::from_ref(&task))
        .expect("compiler available");
    let cached = again[0].as_ref().expect("cached");
    assert_eq!(compiler_invocations(), before);
    assert_eq!(cached.summary.source, ResultSource::Cache);
    assert_eq!(cached.winner, tuned.winner);
}

const M: usize = 39;
const K: usize = 71;
const N: usize = 43;

fn node(op: &str, inputs: &[&str], output: &str) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{output}"),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs: Attributes::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
    }
}

fn random(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), rng.vec_f32(n)).expect("shape matches")
}

/// `y = relu(x · w + b)`: the bias and ReLU are fused into the matmul template's stores.
fn dense(rng: &mut Rng) -> (Graph, Tensor, Tensor, Tensor) {
    dense_with_rows(rng, M)
}

/// [`dense`] with `rows` rows of `x`.
fn dense_with_rows(rng: &mut Rng, rows: usize) -> (Graph, Tensor, Tensor, Tensor) {
    let (w, b) = (random(rng, &[K, N]), random(rng, &[N]));
    let mut g = GraphBuilder::new("dense");
    g.input("x", TensorType::fixed(DType::F32, &[rows, K]));
    g.initializer("w", w.clone());
    g.initializer("b", b.clone());
    g.node(node("MatMul", &["x", "w"], "xw"));
    g.node(node("Add", &["xw", "b"], "biased"));
    g.node(node("Relu", &["biased"], "y"));
    g.output("y");
    let graph = g.build(Registry::global()).expect("valid graph");
    (graph, random(rng, &[rows, K]), w, b)
}

/// Compile options for 2 threads.
fn two_threads() -> CompileOptions {
    CompileOptions {
        threads: Some(2),
        ..CompileOptions::default()
    }
}

/// The fused task of `graph`'s first anchored group at input `shapes`.
fn anchored_task(graph: &Graph, shapes: &[Vec<usize>]) -> FusedTask {
    let given: Vec<_> = graph
        .inputs()
        .iter()
        .copied()
        .zip(shapes.iter().cloned())
        .collect();
    let spec = Specialization::new(graph, &given).expect("specializes");
    let part = partition_with(graph, &spec, true);
    let group = part
        .groups
        .iter()
        .find(|g| g.kind == GroupKind::Anchored)
        .expect("an anchored group");
    FusedTask::new(graph, &spec, group, 0).expect("a task")
}

fn backend(dir: &std::path::Path, tuning: CpuTuning) -> Arc<CpuBackend> {
    let options = CpuBackendOptions {
        build: options_in(dir),
        matmul_template: true,
        compile_jobs: Some(2),
        loaded_threads: None,
    };
    Arc::new(CpuBackend::new(options).with_tuning(tuning))
}

#[derive(Default)]
struct Collect {
    warnings: Mutex<Vec<String>>,
    finished: Mutex<Vec<hidet_tune::TaskSummary>>,
}

impl TuneObserver for Collect {
    fn event(&self, e: &TuneEvent<'_>) {
        match e {
            TuneEvent::Warning(w) => self.warnings.lock().expect("lock").push(w.to_string()),
            TuneEvent::TaskFinished(s) => self.finished.lock().expect("lock").push((*s).clone()),
            _ => {}
        }
    }
}

fn check_output(out: &[(String, Tensor)], x: &Tensor, w: &Tensor, b: &Tensor) {
    let got = out[0].1.as_slice::<f32>().expect("f32 output");
    let (x, w, b) = (
        x.as_slice::<f32>().expect("f32"),
        w.as_slice::<f32>().expect("f32"),
        b.as_slice::<f32>().expect("f32"),
    );
    let xw = reference(x, w, M, N, K);
    for i in 0..M {
        for j in 0..N {
            let want = (xw[i * N + j] + f64::from(b[j])).max(0.0);
            let g = f64::from(got[i * N + j]);
            assert!(
                (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "y[{i}][{j}] = {g}, want {want}"
            );
        }
    }
}

#[test]
fn graph_compile_tunes_fused_matmul_and_later_compiles_reuse_the_winner() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = Rng::new(5);
    let (graph, x, w, b) = dense(&mut rng);
    let inputs = vec![("x".to_string(), x.clone())];
    let shapes = [vec![M, K]];
    let opts = two_threads();

    let collect = Arc::new(Collect::default());
    let tuning = CpuTuning {
        level: Some(TuneLevel::Subset),
        candidate_limit: Some(4),
        measure: Some(quick_measure()),
        observer: Some(collect.clone()),
        ..CpuTuning::default()
    };
    let tuned = CompiledGraph::compile(&graph, &shapes, backend(dir.path(), tuning), &opts)
        .expect("compiles with tuning");
    assert_eq!(tuned.report().kernels, 1, "{}", tuned.report().partition);
    check_output(&tuned.run(&inputs).expect("runs"), &x, &w, &b);
    let reference_out = run_reference(&graph, &inputs).expect("reference runs");
    check_output(&reference_out, &x, &w, &b);
    let summaries = collect.finished.lock().expect("lock").clone();
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let summary = &summaries[0];
    assert_eq!(
        (summary.source, summary.candidates),
        (ResultSource::Tuned, 4)
    );
    assert!(
        summary.task.contains(&format!("m={M} n={N} k={K}")),
        "{}",
        summary.task
    );
    // The bias and ReLU are fused: the key carries a fingerprint, not `plain`.
    assert!(!summary.task.ends_with("fusion=plain"), "{}", summary.task);

    // Lowering the task without tuning picks the recorded winner.
    let task = anchored_task(&graph, &shapes);
    let choice = matmul_choice(&backend(dir.path(), CpuTuning::default()), &task, 2);
    assert_eq!(schedule_label(&choice.schedule), summary.winner);
    assert!(choice.tunable.is_none());

    // A later compilation without tuning lowers with the winner: the module it builds is
    // exactly the tuned one, so the kernel cache answers and the compiler does not run.
    let before = compiler_invocations();
    let plain = CompiledGraph::compile(
        &graph,
        &shapes,
        backend(dir.path(), CpuTuning::default()),
        &opts,
    )
    .expect("compiles");
    assert_eq!(
        compiler_invocations(),
        before,
        "the tuned kernel was not reused"
    );
    assert_eq!(plain.report().module.compiled, 0);
    check_output(&plain.run(&inputs).expect("runs"), &x, &w, &b);

    // Retuning at the same level is answered by the cache.
    let collect2 = Arc::new(Collect::default());
    let tuning = CpuTuning {
        level: Some(TuneLevel::Subset),
        observer: Some(collect2.clone()),
        ..CpuTuning::default()
    };
    CompiledGraph::compile(&graph, &shapes, backend(dir.path(), tuning), &opts).expect("compiles");
    let s = collect2.finished.lock().expect("lock").clone();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].source, ResultSource::Cache);
    assert_eq!(s[0].winner, summary.winner);

    // A corrupt record: lowering warns and falls back to the heuristic; nothing crashes.
    let records: Vec<std::path::PathBuf> = walk(&dir.path().join("tuning"));
    assert_eq!(records.len(), 1, "{records:?}");
    std::fs::write(&records[0], b"{\"format\": 1, \"identity\": ").expect("corrupt it");
    let collect3 = Arc::new(Collect::default());
    let tuning = CpuTuning {
        observer: Some(collect3.clone()),
        ..CpuTuning::default()
    };
    let fallback = CompiledGraph::compile(&graph, &shapes, backend(dir.path(), tuning), &opts)
        .expect("compiles despite the corrupt record");
    check_output(&fallback.run(&inputs).expect("runs"), &x, &w, &b);
    let warnings = collect3.warnings.lock().expect("lock").clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("ignoring the tuning record"),
        "{warnings:?}"
    );
}

/// Every `.json` file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    out
}

/// `runs` interleaved runs whose verdicts are stored however the machine's load spreads them
/// (the tests check what is stored, not how noisy the test machine is).
fn steady(runs: usize) -> CheckPlan {
    CheckPlan {
        runs,
        max_spread: f64::INFINITY,
    }
}

#[test]
fn in_model_check_records_the_faster_schedule_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = Rng::new(9);
    let (graph, x, w, b) = dense(&mut rng);
    let inputs = vec![("x".to_string(), x.clone())];
    let shapes = [vec![M, K]];
    let opts = two_threads();
    let subset = || CpuTuning {
        level: Some(TuneLevel::Subset),
        candidate_limit: Some(3),
        measure: Some(quick_measure()),
        ..CpuTuning::default()
    };
    CompiledGraph::compile(&graph, &shapes, backend(dir.path(), subset()), &opts)
        .expect("compiles with tuning");

    // Make the second candidate the recorded winner, so the check has two schedules to
    // compare whatever the measurements said.
    let records = walk(&dir.path().join("tuning"));
    assert_eq!(records.len(), 1, "{records:?}");
    let text = std::fs::read_to_string(&records[0]).expect("record");
    let mut record: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(record["heuristic"], 0);
    record["winner"] = 1.into();
    record["candidates"][1]["outcome"] = serde_json::json!({
        "measured": {"median": 1e-9, "min": 1e-9, "max": 1e-9, "mad": 0.0, "runs": 5}
    });
    std::fs::write(&records[0], record.to_string()).expect("rewrite");

    let tuned_backend = backend(dir.path(), subset());
    let cache = tuning_cache(&tuned_backend);
    let build = tuned_backend.options.build.clone();
    let tuned = CompiledGraph::compile(&graph, &shapes, tuned_backend, &opts).expect("tuned");
    let heuristic_tuning = CpuTuning {
        ignore_cache: true,
        ..CpuTuning::default()
    };
    let heuristic = CompiledGraph::compile(
        &graph,
        &shapes,
        backend(dir.path(), heuristic_tuning),
        &opts,
    )
    .expect("heuristic");
    check_output(&tuned.run(&inputs).expect("runs"), &x, &w, &b);
    check_output(&heuristic.run(&inputs).expect("runs"), &x, &w, &b);

    let pending = || pending_checks(&tuned, &build, &cache).expect("records readable");
    let check_with = |plan: &CheckPlan| {
        check_in_model(
            &tuned,
            &heuristic,
            &inputs,
            pending(),
            &cache,
            plan,
            "dense",
        )
        .expect("checks")
    };
    assert!(!pending().is_empty());
    // A limit no real run times meet: the verdicts are reported, not stored.
    let strict = CheckPlan {
        runs: 5,
        max_spread: 0.0,
    };
    let noisy = check_with(&strict);
    assert_eq!(noisy.stored, noisy.spread <= 0.0, "{noisy:?}");
    assert_eq!(noisy.tasks.len(), 1, "{noisy:?}");
    if !noisy.stored {
        assert!(
            !pending().is_empty(),
            "nothing stored: the task still awaits its check"
        );
    }
    let report = check_with(&steady(5));
    assert!(pending().is_empty());
    let (t, h) = time_alternately(&tuned, &heuristic, &inputs, 3).expect("runs");
    assert!(
        t > 0.0 && h > 0.0 && t.is_finite() && h.is_finite(),
        "{t} {h}"
    );
    assert_eq!((report.runs, report.tasks.len()), (5, 1), "{report:?}");
    assert!(report.stored && report.spread >= 0.0, "{report:?}");
    let t = &report.tasks[0];
    assert_eq!(t.kernels, 1);
    let check = &t.check;
    assert!(
        check.winner_seconds > 0.0 && check.heuristic_seconds > 0.0,
        "{check:?}"
    );
    let kept = if check.prefers_heuristic() {
        check.heuristic_seconds
    } else {
        check.winner_seconds
    };
    let expected_chosen = report.tuned_seconds - (check.winner_seconds - kept);
    assert!(
        (report.estimated_seconds - expected_chosen).abs() < 1e-12,
        "{report:?}"
    );

    let identity = hidet_cpu::graph_backend::tuning::task_identity(
        &build,
        tuned.module().tunable(0).expect("the kernel's task"),
    )
    .expect("identity");
    let Lookup::Hit(stored) = cache.lookup::<MatmulCandidate>(&identity) else {
        panic!("the checked record is readable");
    };
    assert_eq!(stored.in_model.as_deref(), Some(check));
    let chosen = stored.chosen().expect("a chosen candidate").label.clone();
    let expected = if check.prefers_heuristic() { 0 } else { 1 };
    assert_eq!(chosen, stored.candidates[expected].label);

    // Checked once: a second check finds nothing to do.
    let again = check_with(&steady(5));
    assert!(again.tasks.is_empty() && again.runs == 0, "{again:?}");

    // Later compilations lower with the chosen schedule.
    let task = anchored_task(&graph, &shapes);
    let choice = matmul_choice(&backend(dir.path(), CpuTuning::default()), &task, 2);
    assert_eq!(schedule_label(&choice.schedule), chosen);

    // Builds of different graphs are refused.
    let (other, ..) = dense_with_rows(&mut rng, M + 5);
    let other = CompiledGraph::compile(
        &other,
        &[vec![M + 5, K]],
        backend(dir.path(), CpuTuning::default()),
        &opts,
    )
    .expect("compiles");
    let err = check_in_model(
        &tuned,
        &other,
        &inputs,
        pending(),
        &cache,
        &steady(5),
        "dense",
    )
    .expect_err("different graphs");
    assert!(err.to_string().contains("differ"), "{err}");
}

/// The spread of run times is their median absolute deviation over their median; one run,
/// or none, has none.
#[test]
fn run_spread_is_the_relative_median_absolute_deviation() {
    use hidet_cpu::graph_backend::tuning::model_check::run_spread;
    assert_eq!(run_spread(&[]), 0.0);
    assert_eq!(run_spread(&[0.05]), 0.0);
    assert_eq!(run_spread(&[0.05, 0.05, 0.05]), 0.0);
    let spread = run_spread(&[1.0, 1.1, 0.9, 1.0, 5.0]);
    assert!((spread - 0.1).abs() < 1e-12, "{spread}");
}
