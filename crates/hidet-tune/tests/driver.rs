//! The tuning driver against a fake backend whose candidates busy-wait for a known time:
//! the measured-fastest wins, every measurement is persisted, the cache answers later
//! sessions without compiling, keys are sensitive to the environment and template version,
//! and a corrupt record is ignored with a warning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hidet_ir::dtype::DataType;
use hidet_ir::expr::Var;
use hidet_ir::function::{Function, FunctionKind};
use hidet_ir::stmt::Stmt;
use hidet_ir::ty::Type;
use hidet_tune::observer::ResultSource;
use hidet_tune::{
    CandidateOutcome, Environment, InModelCheck, Lookup, TaskIdentity, Tunable, TuneBackend,
    TuneConfig, TuneError, TuneEvent, TuneLevel, TuneObserver, Tuner, TuningCache,
};

/// A schedule is a busy-wait in microseconds; `GEN_FAIL` cannot be generated and `RUN_FAIL`
/// fails when run.
const GEN_FAIL: u32 = 1;
const RUN_FAIL: u32 = 2;

struct SpinTask {
    key: String,
    version: String,
    subset: Vec<u32>,
    full: Vec<u32>,
}

impl SpinTask {
    fn new(key: &str, subset: &[u32], full: &[u32]) -> SpinTask {
        SpinTask {
            key: key.into(),
            version: "v1".into(),
            subset: subset.to_vec(),
            full: full.to_vec(),
        }
    }
}

impl Tunable for SpinTask {
    type Schedule = u32;
    fn key(&self) -> String {
        self.key.clone()
    }
    fn space(&self) -> String {
        "test.spin".into()
    }
    fn template_version(&self) -> String {
        self.version.clone()
    }
    fn heuristic(&self) -> u32 {
        self.subset[0]
    }
    fn candidates(&self, level: TuneLevel) -> Vec<u32> {
        match level {
            TuneLevel::Heuristic => vec![self.heuristic()],
            TuneLevel::Subset => self.subset.clone(),
            TuneLevel::Full => self.full.clone(),
        }
    }
    fn label(&self, s: &u32) -> String {
        format!("spin {s}us")
    }
    fn function(&self, s: &u32, name: &str) -> Result<Function, String> {
        if *s == GEN_FAIL {
            return Err("this schedule cannot be generated".into());
        }
        Ok(Function {
            name: name.into(),
            kind: FunctionKind::CpuKernel,
            params: vec![Var::new(format!("spin_{s}"), DataType::I32)],
            ret: Type::Void,
            body: Stmt::seq(Vec::new()),
        })
    }
}

struct SpinBackend {
    environment: Environment,
    compiles: AtomicUsize,
    kernels_compiled: AtomicUsize,
    /// Runs left in a burst of machine noise: each is five times slower.
    noisy_runs: AtomicUsize,
}

impl SpinBackend {
    fn new() -> SpinBackend {
        SpinBackend {
            environment: Environment {
                device: "test cpu".into(),
                features: vec!["avx2".into(), "fma".into()],
                compiler: "cc 1.0".into(),
                flags: vec!["-O2".into()],
            },
            compiles: AtomicUsize::new(0),
            kernels_compiled: AtomicUsize::new(0),
            noisy_runs: AtomicUsize::new(0),
        }
    }
}

impl TuneBackend for SpinBackend {
    type Unit = HashMap<String, u32>;
    type Workload = usize;
    fn environment(&self) -> Result<Environment, TuneError> {
        Ok(self.environment.clone())
    }
    fn compile(
        &self,
        _name: &str,
        candidates: Vec<Vec<Function>>,
    ) -> Result<Self::Unit, TuneError> {
        self.compiles.fetch_add(1, Ordering::SeqCst);
        self.kernels_compiled
            .fetch_add(candidates.len(), Ordering::SeqCst);
        Ok(candidates
            .iter()
            .flatten()
            .map(|f| {
                let spin = f.params[0]
                    .name()
                    .trim_start_matches("spin_")
                    .parse()
                    .unwrap_or(0);
                (f.name.clone(), spin)
            })
            .collect())
    }
    fn workload(&self, _f: &[Function]) -> Result<usize, TuneError> {
        Ok(0)
    }
    fn run(&self, unit: &Self::Unit, kernel: &str, runs: &mut usize) -> Result<(), TuneError> {
        let spin = *unit.get(kernel).ok_or_else(|| TuneError::Run {
            kernel: kernel.into(),
            message: "no such kernel".into(),
        })?;
        if spin == RUN_FAIL {
            return Err(TuneError::Run {
                kernel: kernel.into(),
                message: "this kernel fails".into(),
            });
        }
        *runs += 1;
        let noisy = self
            .noisy_runs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let spin = if noisy { spin * 5 } else { spin };
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(u64::from(spin)) {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

#[derive(Default)]
struct Events {
    warnings: Mutex<Vec<String>>,
    measured: AtomicUsize,
}

impl TuneObserver for Events {
    fn event(&self, e: &TuneEvent<'_>) {
        match e {
            TuneEvent::Warning(w) => self
                .warnings
                .lock()
                .expect("not poisoned")
                .push(w.to_string()),
            TuneEvent::CandidateMeasured { .. } => {
                self.measured.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
    }
}

fn config(level: TuneLevel, cache: &TuningCache) -> TuneConfig {
    let mut c = TuneConfig::new(level, Some(cache.clone()));
    c.jobs = 2;
    c.max_unit_kernels = 2;
    c
}

fn identity(task: &SpinTask, backend: &SpinBackend) -> TaskIdentity {
    TaskIdentity {
        task: task.key(),
        space: task.space(),
        template_version: task.template_version(),
        environment: backend.environment.clone(),
    }
}

#[test]
fn measured_fastest_wins_and_every_measurement_is_persisted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    // Heuristic 1500 µs; 300 µs is the fastest that works.
    let task = SpinTask::new("spin/a", &[1500, 700, GEN_FAIL, 300, RUN_FAIL, 4000], &[]);
    let events = Events::default();
    let results = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .with_observer(&events)
        .tune(std::slice::from_ref(&task))
        .expect("environment known");
    let r = results[0].as_ref().expect("tuned");
    assert_eq!(r.winner, 300);
    assert_eq!(r.summary.source, ResultSource::Tuned);
    assert_eq!((r.summary.candidates, r.summary.failed), (6, 2));
    let speedup = r.summary.speedup().expect("heuristic and winner measured");
    assert!(speedup > 2.5, "speedup {speedup}");
    assert_eq!(events.measured.load(Ordering::SeqCst), 6);
    // Five generated kernels in units of at most two.
    assert_eq!(backend.kernels_compiled.load(Ordering::SeqCst), 5);
    assert_eq!(backend.compiles.load(Ordering::SeqCst), 3);

    let Lookup::Hit(record) = cache.lookup::<u32>(&identity(&task, &backend)) else {
        panic!("the record was not stored")
    };
    assert_eq!(record.candidates.len(), 6);
    assert_eq!(record.candidates[record.winner].schedule, 300);
    assert_eq!(record.heuristic, Some(0));
    for c in &record.candidates {
        match (&c.outcome, c.schedule) {
            (CandidateOutcome::Failed(_), GEN_FAIL | RUN_FAIL) => {}
            (CandidateOutcome::Measured(s) | CandidateOutcome::Pruned(s), spin) => {
                assert!(spin > RUN_FAIL && s.min >= f64::from(spin) * 1e-6, "{c:?}")
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    // 4000 µs cannot beat 300 µs: it is cut short.
    assert!(matches!(
        record.candidates[5].outcome,
        CandidateOutcome::Pruned(_)
    ));
}

#[test]
fn second_session_hits_the_cache_without_compiling() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let task = SpinTask::new("spin/b", &[900, 200, 600], &[900, 200, 600, 100]);
    let tuner = Tuner::new(&backend, config(TuneLevel::Subset, &cache));
    let first = tuner.tune(std::slice::from_ref(&task)).expect("env");
    let compiles = backend.compiles.load(Ordering::SeqCst);
    assert!(compiles > 0);
    let second = tuner.tune(std::slice::from_ref(&task)).expect("env");
    assert_eq!(backend.compiles.load(Ordering::SeqCst), compiles);
    let (a, b) = (
        first[0].as_ref().expect("tuned"),
        second[0].as_ref().expect("cached"),
    );
    assert_eq!((a.winner, b.winner), (200, 200));
    assert_eq!(b.summary.source, ResultSource::Cache);
    assert_eq!(a.summary.best, b.summary.best);
    // A level-1 record does not answer a level-2 request, which finds the faster 100 µs.
    let full = Tuner::new(&backend, config(TuneLevel::Full, &cache))
        .tune(std::slice::from_ref(&task))
        .expect("env");
    assert!(backend.compiles.load(Ordering::SeqCst) > compiles);
    assert_eq!(full[0].as_ref().expect("tuned").winner, 100);
    // ... and the level-2 record now answers level 1.
    let again = tuner.tune(std::slice::from_ref(&task)).expect("env");
    assert_eq!(again[0].as_ref().expect("cached").winner, 100);
}

#[test]
fn cache_hits_compile_the_schedule_an_in_model_check_chose() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let task = SpinTask::new("spin/in-model", &[900, 200, 600], &[900, 200, 600]);
    let tuner = Tuner::new(&backend, config(TuneLevel::Subset, &cache));
    let first = tuner.tune(std::slice::from_ref(&task)).expect("env");
    assert_eq!(first[0].as_ref().expect("tuned").winner, 200);
    let Lookup::Hit(mut record) = cache.lookup::<u32>(&identity(&task, &backend)) else {
        panic!("the record was stored");
    };
    record.in_model = Some(Box::new(InModelCheck {
        winner_seconds: 2e-3,
        heuristic_seconds: 1e-3,
        runs: 20,
        model: "m".into(),
    }));
    cache.store(&record).expect("stored");
    let second = tuner.tune(std::slice::from_ref(&task)).expect("env");
    let cached = second[0].as_ref().expect("cached");
    assert_eq!(cached.winner, 900, "the heuristic, faster in the model");
    assert_eq!(cached.summary.winner, "spin 200us");
    assert_eq!(cached.summary.chosen, "spin 900us");
}

#[test]
fn key_changes_with_environment_and_template_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let task = SpinTask::new("spin/c", &[400, 150], &[]);
    Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .tune(std::slice::from_ref(&task))
        .expect("env");
    let base = identity(&task, &backend);
    assert!(matches!(cache.lookup::<u32>(&base), Lookup::Hit(_)));
    let mut variants = Vec::new();
    let mut v = base.clone();
    v.template_version = "v2".into();
    variants.push(v);
    let mut v = base.clone();
    v.environment.compiler = "cc 2.0".into();
    variants.push(v);
    let mut v = base.clone();
    v.environment.features.push("avx512f".into());
    variants.push(v);
    let mut v = base.clone();
    v.environment.device = "other cpu".into();
    variants.push(v);
    let mut v = base.clone();
    v.environment.flags = vec!["-O3".into()];
    variants.push(v);
    let mut v = base.clone();
    v.task = "spin/c2".into();
    variants.push(v);
    for v in &variants {
        assert_ne!(v.key(), base.key(), "{v:?}");
        assert!(matches!(cache.lookup::<u32>(v), Lookup::Miss), "{v:?}");
    }
    // Through the tuner: a new template version compiles again.
    let compiles = backend.compiles.load(Ordering::SeqCst);
    let mut task2 = SpinTask::new("spin/c", &[400, 150], &[]);
    task2.version = "v2".into();
    Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .tune(std::slice::from_ref(&task2))
        .expect("env");
    assert!(backend.compiles.load(Ordering::SeqCst) > compiles);
}

#[test]
fn corrupt_record_is_ignored_with_a_warning_and_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let task = SpinTask::new("spin/d", &[500, 120], &[]);
    let tuner = Tuner::new(&backend, config(TuneLevel::Subset, &cache));
    tuner.tune(std::slice::from_ref(&task)).expect("env");
    let path = cache.path(&identity(&task, &backend));
    let text = std::fs::read_to_string(&path).expect("record written");
    std::fs::write(&path, &text[..text.len() / 2]).expect("truncate");
    assert!(matches!(
        cache.lookup::<u32>(&identity(&task, &backend)),
        Lookup::Corrupt { .. }
    ));
    let events = Events::default();
    let compiles = backend.compiles.load(Ordering::SeqCst);
    let r = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .with_observer(&events)
        .tune(std::slice::from_ref(&task))
        .expect("env");
    assert_eq!(r[0].as_ref().expect("retuned").winner, 120);
    assert!(backend.compiles.load(Ordering::SeqCst) > compiles);
    let warnings = events.warnings.lock().expect("not poisoned").clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&path.display().to_string()),
        "{warnings:?}"
    );
    assert!(matches!(
        cache.lookup::<u32>(&identity(&task, &backend)),
        Lookup::Hit(_)
    ));
    // A record whose winner is not the fastest measured is rejected too.
    let mut record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("rewritten")).expect("json");
    record["winner"] = serde_json::json!(0);
    std::fs::write(&path, record.to_string()).expect("write");
    assert!(matches!(
        cache.lookup::<u32>(&identity(&task, &backend)),
        Lookup::Corrupt { reason, .. } if reason.contains("faster")
    ));
}

#[test]
fn level_zero_measures_nothing_and_duplicates_are_tuned_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let tasks = [
        SpinTask::new("spin/e", &[700, 100], &[]),
        SpinTask::new("spin/f", &[100, 600], &[]),
        SpinTask::new("spin/e", &[700, 100], &[]),
    ];
    let zero = Tuner::new(&backend, config(TuneLevel::Heuristic, &cache))
        .tune(&tasks)
        .expect("env");
    assert_eq!(backend.compiles.load(Ordering::SeqCst), 0);
    let winners: Vec<u32> = zero
        .iter()
        .map(|r| r.as_ref().expect("ok").winner)
        .collect();
    assert_eq!(winners, [700, 100, 700]);
    let events = Events::default();
    let one = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .with_observer(&events)
        .tune(&tasks)
        .expect("env");
    let winners: Vec<u32> = one.iter().map(|r| r.as_ref().expect("ok").winner).collect();
    assert_eq!(winners, [100, 100, 100]);
    // Two distinct tasks of two candidates each.
    assert_eq!(events.measured.load(Ordering::SeqCst), 4);
}

#[test]
fn task_whose_candidates_all_fail_is_an_error_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    let tasks = [
        SpinTask::new("spin/g", &[RUN_FAIL, GEN_FAIL], &[]),
        SpinTask::new("spin/h", &[300, 100], &[]),
    ];
    let r = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .tune(&tasks)
        .expect("env");
    assert!(matches!(
        &r[0],
        Err(TuneError::NoCandidate { candidates: 2, .. })
    ));
    assert_eq!(r[1].as_ref().expect("tuned").winner, 100);
}

/// A burst of noise during the heuristic's measurement (it is measured first) is undone by
/// the confirmation round: the record keeps its quiet median, not the burst's.
#[test]
fn confirmation_round_undoes_a_burst_of_noise() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SpinBackend::new();
    // Every run of the heuristic's first measurement (one warm-up and at most 50 timed).
    backend.noisy_runs.store(51, Ordering::SeqCst);
    let task = SpinTask::new("spin/burst", &[600, 500, 2000], &[]);
    let results = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .tune(std::slice::from_ref(&task))
        .expect("environment known");
    let r = results[0].as_ref().expect("tuned");
    assert_eq!(r.winner, 500);
    let Lookup::Hit(record) = cache.lookup::<u32>(&identity(&task, &backend)) else {
        panic!("the record was not stored")
    };
    let CandidateOutcome::Measured(heuristic) = &record.candidates[0].outcome else {
        panic!("the heuristic is measured: {:?}", record.candidates[0]);
    };
    assert!(
        heuristic.median < 1200e-6,
        "the heuristic keeps its quiet median, got {} s",
        heuristic.median
    );
}

/// A task whose candidates are two kernels each (a product and the reduction of its parts):
/// schedule `s` reports `s` µs.
struct PairTask;

impl Tunable for PairTask {
    type Schedule = u32;
    fn key(&self) -> String {
        "pair/a".into()
    }
    fn space(&self) -> String {
        "test.pair".into()
    }
    fn template_version(&self) -> String {
        "v1".into()
    }
    fn heuristic(&self) -> u32 {
        900
    }
    fn candidates(&self, _level: TuneLevel) -> Vec<u32> {
        vec![900, 40, 20_000, 60]
    }
    fn label(&self, s: &u32) -> String {
        format!("pair {s}us")
    }
    fn function(&self, _s: &u32, _name: &str) -> Result<Function, String> {
        Err("a pair candidate has two kernels".into())
    }
    fn kernels(&self, s: &u32, name: &str) -> Result<Vec<Function>, String> {
        let kernel = |name: String, param: String| Function {
            name,
            kind: FunctionKind::CpuKernel,
            params: vec![Var::new(param, DataType::I32)],
            ret: Type::Void,
            body: Stmt::seq(Vec::new()),
        };
        Ok(vec![
            kernel(name.into(), format!("time_{s}")),
            kernel(format!("{name}_reduce"), "reduce".into()),
        ])
    }
}

/// A device that times its own runs (as a GPU does with events): `time` reports the
/// candidate's time without taking it, and counts the kernels each run launches.
#[derive(Default)]
struct SelfTimedBackend {
    launches: AtomicUsize,
}

impl TuneBackend for SelfTimedBackend {
    /// Candidate name → (reported µs, kernels).
    type Unit = HashMap<String, (u32, usize)>;
    type Workload = ();
    fn environment(&self) -> Result<Environment, TuneError> {
        Ok(Environment {
            device: "test gpu".into(),
            features: vec!["sm_90".into()],
            compiler: "nvrtc 1.0".into(),
            flags: vec![],
        })
    }
    fn compile(
        &self,
        _name: &str,
        candidates: Vec<Vec<Function>>,
    ) -> Result<Self::Unit, TuneError> {
        Ok(candidates
            .iter()
            .map(|kernels| {
                let time = kernels[0].params[0]
                    .name()
                    .trim_start_matches("time_")
                    .parse()
                    .unwrap_or(0);
                (kernels[0].name.clone(), (time, kernels.len()))
            })
            .collect())
    }
    fn workload(&self, candidate: &[Function]) -> Result<(), TuneError> {
        assert_eq!(candidate.len(), 2, "the workload sees a whole candidate");
        Ok(())
    }
    fn run(&self, unit: &Self::Unit, candidate: &str, _w: &mut ()) -> Result<(), TuneError> {
        let (_, kernels) = unit.get(candidate).ok_or_else(|| TuneError::Run {
            kernel: candidate.into(),
            message: "no such candidate".into(),
        })?;
        self.launches.fetch_add(*kernels, Ordering::SeqCst);
        Ok(())
    }
    fn time(&self, unit: &Self::Unit, candidate: &str, w: &mut ()) -> Result<f64, TuneError> {
        self.run(unit, candidate, w)?;
        Ok(f64::from(unit[candidate].0) * 1e-6)
    }
}

/// A backend's own timing is what the tuner records (not the wall clock around a call that
/// takes no time), and a candidate of two kernels is compiled, run and recorded as one.
#[test]
fn self_timed_multi_kernel_candidates_are_measured_by_the_device_times() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let backend = SelfTimedBackend::default();
    let results = Tuner::new(&backend, config(TuneLevel::Subset, &cache))
        .tune(&[PairTask])
        .expect("environment known");
    let r = results[0].as_ref().expect("tuned");
    assert_eq!(r.winner, 40);
    let record = r.record.as_ref().expect("a record");
    for c in &record.candidates {
        match &c.outcome {
            CandidateOutcome::Measured(s) => {
                assert_eq!(s.median, f64::from(c.schedule) * 1e-6, "{c:?}")
            }
            // Slower than 1.3 × the best 40 µs when measured: cut short.
            CandidateOutcome::Pruned(s) => {
                assert!(
                    c.schedule > 52 && s.min == f64::from(c.schedule) * 1e-6,
                    "{c:?}"
                )
            }
            CandidateOutcome::Failed(m) => panic!("{c:?} failed: {m}"),
        }
    }
    // Every run launched both kernels of its candidate.
    assert_eq!(backend.launches.load(Ordering::SeqCst) % 2, 0);
}
