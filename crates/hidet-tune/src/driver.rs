//! The tuning driver: cache lookups, parallel compilation of candidates, serialized
//! measurement, winners and records.
//!
//! [`Tuner::tune`] works in two phases so that compilation never disturbs a measurement:
//! 1. every candidate of every task to tune is turned into its kernels
//!    ([`Tunable::kernels`]) and they are compiled in units (several candidates of one task
//!    per library), `jobs` units at a time;
//! 2. holding [`measure::exclusive`], the candidates are measured one after another, task by
//!    task, each on one workload of random inputs of the task's real shapes; then the
//!    heuristic and the fastest few are measured again and keep their better median (a
//!    confirmation round against bursts of machine noise).
//!
//! Identical tasks (equal [`TaskIdentity`]) are tuned once and share the result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hidet_ir::function::Function;

use crate::cache::{Lookup, TaskIdentity, TuningCache};
use crate::error::TuneError;
use crate::level::TuneLevel;
use crate::measure::{self, MeasureConfig, Measured};
use crate::observer::{ResultSource, TaskSummary, TuneEvent, TuneObserver};
use crate::record::{CandidateOutcome, CandidateRecord, TuningRecord, RECORD_FORMAT};
use crate::tunable::{Tunable, TuneBackend};

/// How [`Tuner::tune`] works.
#[derive(Clone, Debug)]
pub struct TuneConfig {
    pub level: TuneLevel,
    /// Compile units built at once; 0 means one per available core.
    pub jobs: usize,
    /// The most candidates compiled into one library.
    pub max_unit_kernels: usize,
    pub measure: MeasureConfig,
    /// Where records are looked up and stored; `None` keeps nothing.
    pub cache: Option<TuningCache>,
    /// Whether a cached record (tuned at this level or higher) answers a task.
    pub reuse: bool,
}

impl TuneConfig {
    /// The defaults for `level`, with `cache`.
    pub fn new(level: TuneLevel, cache: Option<TuningCache>) -> TuneConfig {
        TuneConfig {
            level,
            jobs: 0,
            max_unit_kernels: 8,
            measure: MeasureConfig::default(),
            cache,
            reuse: true,
        }
    }
}

/// The result of one task.
#[derive(Clone, Debug)]
pub struct TaskResult<S> {
    /// The schedule to compile the task with: the record's
    /// [`chosen`](TuningRecord::chosen) candidate (the measured winner unless an in-model
    /// check preferred the heuristic), or the heuristic at level 0.
    pub winner: S,
    pub summary: TaskSummary,
    /// The full record (absent at level 0).
    pub record: Option<TuningRecord<S>>,
}

/// One result per task given to [`Tuner::tune`]; a task fails alone.
pub type TaskResults<S> = Vec<Result<TaskResult<S>, TuneError>>;

/// Tunes tasks on a backend (see the module docs).
pub struct Tuner<'a, B: TuneBackend> {
    backend: &'a B,
    config: TuneConfig,
    observer: Option<&'a dyn TuneObserver>,
}

/// A task being tuned in this session.
/// Candidates of a task measured a second time in its confirmation round, besides the
/// heuristic.
const CONFIRMED: usize = 3;

struct Pending<S> {
    /// Index of the first task with this identity.
    task: usize,
    identity: TaskIdentity,
    name: String,
    candidates: Vec<S>,
    labels: Vec<String>,
    outcomes: Vec<Option<CandidateOutcome>>,
    seconds: f64,
}

/// One library's worth of candidates.
struct UnitJob {
    pending: usize,
    range: std::ops::Range<usize>,
}

struct UnitBuilt<U> {
    unit: Result<U, TuneError>,
    /// The kernels of the first generated candidate (for the workload).
    sample: Option<Vec<Function>>,
    /// Candidate index and kernel name of each generated kernel.
    kernels: Vec<(usize, String)>,
    /// Candidate index and reason of each candidate that could not be generated.
    failures: Vec<(usize, String)>,
}

impl<'a, B: TuneBackend> Tuner<'a, B> {
    pub fn new(backend: &'a B, config: TuneConfig) -> Tuner<'a, B> {
        Tuner {
            backend,
            config,
            observer: None,
        }
    }

    /// Sends every event to `observer`.
    pub fn with_observer(mut self, observer: &'a dyn TuneObserver) -> Tuner<'a, B> {
        self.observer = Some(observer);
        self
    }

    fn emit(&self, event: TuneEvent<'_>) {
        if let Some(o) = self.observer {
            o.event(&event);
        }
    }

    /// Tunes `tasks` at the configured level and returns one result per task, in order: the
    /// winner, a summary and the record. At level 0 nothing is compiled or measured (the
    /// heuristic wins). Otherwise a cached record tuned at this level or higher answers a
    /// task; the others are compiled and measured, and their records stored. A task fails
    /// alone when none of its candidates can be built and measured; the whole call fails
    /// only when the backend's environment cannot be determined.
    pub fn tune<T: Tunable>(&self, tasks: &[T]) -> Result<TaskResults<T::Schedule>, TuneError> {
        let level = self.config.level;
        let mut results: Vec<Option<Result<TaskResult<T::Schedule>, TuneError>>> =
            (0..tasks.len()).map(|_| None).collect();
        if !level.measures() {
            for (i, task) in tasks.iter().enumerate() {
                let summary = heuristic_summary(task);
                self.emit(TuneEvent::TaskFinished(&summary));
                results[i] = Some(Ok(TaskResult {
                    winner: task.heuristic(),
                    summary,
                    record: None,
                }));
            }
            return Ok(results.into_iter().flatten().collect());
        }
        let environment = self.backend.environment()?;
        let mut pending: Vec<Pending<T::Schedule>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        // Task index → pending index, for tasks tuned in this session.
        let mut tuned_as: Vec<Option<usize>> = vec![None; tasks.len()];
        let mut distinct = 0usize;
        let mut cached = 0usize;
        let mut answered: HashMap<String, TaskResult<T::Schedule>> = HashMap::new();
        for (i, task) in tasks.iter().enumerate() {
            let identity = TaskIdentity {
                task: task.key(),
                space: task.space(),
                template_version: task.template_version(),
                environment: environment.clone(),
            };
            let key = identity.key();
            if let Some(&p) = by_key.get(&key) {
                tuned_as[i] = Some(p);
                continue;
            }
            if let Some(r) = answered.get(&key) {
                results[i] = Some(Ok(r.clone()));
                continue;
            }
            distinct += 1;
            if let Some(r) = self.cached(task, &identity) {
                cached += 1;
                answered.insert(key, r.clone());
                results[i] = Some(Ok(r));
                continue;
            }
            let candidates = candidates_of(task, level);
            let labels = candidates.iter().map(|s| task.label(s)).collect();
            by_key.insert(key.clone(), pending.len());
            tuned_as[i] = Some(pending.len());
            pending.push(Pending {
                task: i,
                name: format!("tune_{}", &key[..12]),
                identity,
                outcomes: vec![None; candidates.len()],
                candidates,
                labels,
                seconds: 0.0,
            });
        }

        let jobs = self.jobs();
        let units = self.plan_units(&pending, jobs);
        let total: usize = pending.iter().map(|p| p.candidates.len()).sum();
        self.emit(TuneEvent::Started {
            tasks: distinct,
            cached,
            units: units.len(),
            candidates: total,
        });
        if !pending.is_empty() {
            let compile_start = Instant::now();
            let built = self.compile_units(tasks, &pending, &units, jobs)?;
            let compile_seconds = compile_start.elapsed().as_secs_f64();
            self.emit(TuneEvent::CompileFinished {
                seconds: compile_seconds,
            });
            for p in pending.iter_mut() {
                p.seconds = compile_seconds * p.candidates.len() as f64 / total.max(1) as f64;
            }
            self.measure_all(&mut pending, &units, built);
        }
        let finished: TaskResults<T::Schedule> = pending
            .into_iter()
            .map(|p| self.finish(&tasks[p.task], p, level))
            .collect();
        for (i, p) in tuned_as.iter().enumerate() {
            if let Some(p) = p {
                results[i] = Some(match &finished[*p] {
                    Ok(r) => Ok(r.clone()),
                    Err(TuneError::NoCandidate {
                        task,
                        candidates,
                        first,
                    }) => Err(TuneError::NoCandidate {
                        task: task.clone(),
                        candidates: *candidates,
                        first: first.clone(),
                    }),
                    Err(e) => Err(TuneError::NoCandidate {
                        task: tasks[i].key(),
                        candidates: 0,
                        first: e.to_string(),
                    }),
                });
            }
        }
        let results: TaskResults<T::Schedule> = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    Err(TuneError::NoCandidate {
                        task: tasks[i].key(),
                        candidates: 0,
                        first: "the task was not tuned".into(),
                    })
                })
            })
            .collect();
        for r in results.iter().flatten() {
            self.emit(TuneEvent::TaskFinished(&r.summary));
        }
        Ok(results)
    }

    fn jobs(&self) -> usize {
        if self.config.jobs > 0 {
            self.config.jobs
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// A usable cached result for `task`, warning about corrupt records.
    fn cached<T: Tunable>(
        &self,
        task: &T,
        identity: &TaskIdentity,
    ) -> Option<TaskResult<T::Schedule>> {
        let cache = self.config.cache.as_ref().filter(|_| self.config.reuse)?;
        match cache.lookup::<T::Schedule>(identity) {
            Lookup::Hit(record) if record.level >= self.config.level => {
                let winner = record.chosen()?.schedule.clone();
                let summary = summarize(task, &record, ResultSource::Cache);
                Some(TaskResult {
                    winner,
                    summary,
                    record: Some(record),
                })
            }
            Lookup::Hit(_) | Lookup::Miss => None,
            Lookup::Corrupt { path, reason } => {
                self.emit(TuneEvent::Warning(&format!(
                    "ignoring the tuning record {}: {reason}",
                    path.display()
                )));
                None
            }
        }
    }

    /// Splits every pending task's candidates into units: about one unit per job over all
    /// candidates, but at most `max_unit_kernels` per unit and never two tasks in one unit.
    fn plan_units<S>(&self, pending: &[Pending<S>], jobs: usize) -> Vec<UnitJob> {
        let total: usize = pending.iter().map(|p| p.candidates.len()).sum();
        let per_unit = total
            .div_ceil(jobs.max(1))
            .clamp(1, self.config.max_unit_kernels.max(1));
        let mut units = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            let n = p.candidates.len();
            let count = n.div_ceil(per_unit).max(1);
            let size = n.div_ceil(count).max(1);
            let mut start = 0;
            while start < n {
                let end = (start + size).min(n);
                units.push(UnitJob {
                    pending: i,
                    range: start..end,
                });
                start = end;
            }
        }
        units
    }

    /// Builds every unit, `jobs` at a time; unit `u` of the result is `units[u]`.
    fn compile_units<T: Tunable>(
        &self,
        tasks: &[T],
        pending: &[Pending<T::Schedule>],
        units: &[UnitJob],
        jobs: usize,
    ) -> Result<Vec<UnitBuilt<B::Unit>>, TuneError> {
        let next = AtomicUsize::new(0);
        let slots: Mutex<Vec<Option<UnitBuilt<B::Unit>>>> =
            Mutex::new((0..units.len()).map(|_| None).collect());
        let worker = || loop {
            let u = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = units.get(u) else { break };
            let p = &pending[job.pending];
            let built = self.compile_unit(&tasks[p.task], p, job, u);
            self.emit(TuneEvent::UnitCompiled {
                task: &p.identity.task,
                kernels: job.range.len(),
            });
            if let Ok(mut s) = slots.lock() {
                s[u] = Some(built);
            }
        };
        let panicked = std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs.clamp(1, units.len().max(1)))
                .map(|_| s.spawn(worker))
                .collect();
            handles.into_iter().any(|h| h.join().is_err())
        });
        if panicked {
            return Err(TuneError::WorkerPanicked);
        }
        let slots = slots.into_inner().map_err(|_| TuneError::WorkerPanicked)?;
        slots
            .into_iter()
            .map(|s| s.ok_or(TuneError::WorkerPanicked))
            .collect()
    }

    fn compile_unit<T: Tunable>(
        &self,
        task: &T,
        p: &Pending<T::Schedule>,
        job: &UnitJob,
        index: usize,
    ) -> UnitBuilt<B::Unit> {
        let mut functions = Vec::new();
        let mut kernels = Vec::new();
        let mut failures = Vec::new();
        for c in job.range.clone() {
            let name = format!("{}_c{c}", p.name);
            match task.kernels(&p.candidates[c], &name) {
                Ok(f) if f.first().is_some_and(|f| f.name == name) => {
                    kernels.push((c, name));
                    functions.push(f);
                }
                Ok(_) => failures.push((
                    c,
                    format!("the template's first kernel is not named `{name}`"),
                )),
                Err(reason) => failures.push((c, reason)),
            }
        }
        let sample = functions.first().cloned();
        let unit = if functions.is_empty() {
            Err(TuneError::Compile {
                task: p.identity.task.clone(),
                message: "no candidate of this unit could be generated".into(),
            })
        } else {
            self.backend
                .compile(&format!("{}_u{index}", p.name), functions)
        };
        UnitBuilt {
            unit,
            sample,
            kernels,
            failures,
        }
    }

    /// Measures every generated candidate, one at a time, task by task.
    fn measure_all<S>(
        &self,
        pending: &mut [Pending<S>],
        units: &[UnitJob],
        built: Vec<UnitBuilt<B::Unit>>,
    ) {
        let _exclusive = measure::exclusive();
        let mut by_task: Vec<Vec<UnitBuilt<B::Unit>>> =
            (0..pending.len()).map(|_| Vec::new()).collect();
        for (job, b) in units.iter().zip(built) {
            by_task[job.pending].push(b);
        }
        for (p, built) in pending.iter_mut().zip(by_task) {
            let start = Instant::now();
            let sample = built.iter().find_map(|b| b.sample.as_ref());
            let mut workload = match sample.map(|f| self.backend.workload(f)) {
                Some(Ok(w)) => Some(w),
                Some(Err(e)) => {
                    self.emit(TuneEvent::Warning(&e.to_string()));
                    None
                }
                None => None,
            };
            let mut best: Option<f64> = None;
            for b in &built {
                for (c, reason) in &b.failures {
                    self.record(p, *c, CandidateOutcome::Failed(reason.clone()));
                }
                for (c, kernel) in &b.kernels {
                    let outcome = match (&b.unit, workload.as_mut()) {
                        (Err(e), _) => CandidateOutcome::Failed(e.to_string()),
                        (Ok(_), None) => {
                            CandidateOutcome::Failed("no workload for this task".into())
                        }
                        (Ok(unit), Some(w)) => {
                            let mut run = || self.backend.time(unit, kernel, w);
                            match measure::measure_timed(&mut run, &self.config.measure, best) {
                                Ok(Measured::Complete(s)) => {
                                    best = Some(best.map_or(s.median, |b| b.min(s.median)));
                                    CandidateOutcome::Measured(s)
                                }
                                Ok(Measured::Pruned(s)) => CandidateOutcome::Pruned(s),
                                Err(e) => CandidateOutcome::Failed(e.to_string()),
                            }
                        }
                    };
                    self.record(p, *c, outcome);
                }
            }
            if let Some(w) = workload.as_mut() {
                self.confirm(p, &built, w);
            }
            p.seconds += start.elapsed().as_secs_f64();
        }
    }

    /// The confirmation round of a task: the heuristic (candidate 0) and the
    /// [`CONFIRMED`] fastest candidates are measured once more, unpruned, and each keeps
    /// the run with the lower median. A slow burst of the machine (another process, a
    /// frequency change) during a candidate's first measurement then neither hides a
    /// winner nor makes the heuristic look worse than it is.
    fn confirm<S>(
        &self,
        p: &mut Pending<S>,
        built: &[UnitBuilt<B::Unit>],
        workload: &mut B::Workload,
    ) {
        let median = |o: &Option<CandidateOutcome>| match o {
            Some(CandidateOutcome::Measured(s)) => Some(s.median),
            _ => None,
        };
        let mut ranked: Vec<(usize, f64)> = p
            .outcomes
            .iter()
            .enumerate()
            .filter_map(|(c, o)| median(o).map(|m| (c, m)))
            .collect();
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut again: Vec<usize> = ranked.iter().take(CONFIRMED).map(|(c, _)| *c).collect();
        let heuristic_timed = matches!(
            p.outcomes.first(),
            Some(Some(
                CandidateOutcome::Measured(_) | CandidateOutcome::Pruned(_)
            ))
        );
        if heuristic_timed && !again.contains(&0) {
            again.push(0);
        }
        for c in again {
            let Some((Ok(unit), kernel)) = built.iter().find_map(|b| {
                b.kernels
                    .iter()
                    .find(|(k, _)| *k == c)
                    .map(|(_, name)| (&b.unit, name))
            }) else {
                continue;
            };
            let mut run = || self.backend.time(unit, kernel, workload);
            let Ok(Measured::Complete(second)) =
                measure::measure_timed(&mut run, &self.config.measure, None)
            else {
                continue;
            };
            let keep_first = median(&p.outcomes[c]).is_some_and(|m| m <= second.median);
            if !keep_first {
                p.outcomes[c] = Some(CandidateOutcome::Measured(second));
            }
        }
    }

    fn record<S>(&self, p: &mut Pending<S>, c: usize, outcome: CandidateOutcome) {
        self.emit(TuneEvent::CandidateMeasured {
            task: &p.identity.task,
            label: &p.labels[c],
            outcome: &outcome,
        });
        p.outcomes[c] = Some(outcome);
    }

    /// The winner and record of a measured task; stores the record.
    fn finish<T: Tunable>(
        &self,
        task: &T,
        p: Pending<T::Schedule>,
        level: TuneLevel,
    ) -> Result<TaskResult<T::Schedule>, TuneError> {
        let candidates: Vec<CandidateRecord<T::Schedule>> = p
            .candidates
            .into_iter()
            .zip(p.labels)
            .zip(p.outcomes)
            .map(|((schedule, label), outcome)| CandidateRecord {
                schedule,
                label,
                outcome: outcome.unwrap_or_else(|| CandidateOutcome::Failed("not measured".into())),
            })
            .collect();
        let winner = candidates
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.outcome.median().map(|m| (i, m)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i);
        let Some(winner) = winner else {
            let first = candidates
                .iter()
                .find_map(|c| match &c.outcome {
                    CandidateOutcome::Failed(m) => Some(m.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| "nothing was measured".into());
            return Err(TuneError::NoCandidate {
                task: p.identity.task,
                candidates: candidates.len(),
                first,
            });
        };
        let heuristic = task.heuristic();
        let record = TuningRecord {
            format: RECORD_FORMAT,
            identity: p.identity,
            level,
            winner,
            heuristic: candidates.iter().position(|c| c.schedule == heuristic),
            candidates,
            tuning_seconds: p.seconds,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            in_model: None,
        };
        if let Some(cache) = &self.config.cache {
            if let Err(e) = cache.store(&record) {
                self.emit(TuneEvent::Warning(&format!(
                    "the tuning record was not saved: {e}"
                )));
            }
        }
        let summary = summarize(task, &record, ResultSource::Tuned);
        Ok(TaskResult {
            winner: record.candidates[winner].schedule.clone(),
            summary,
            record: Some(record),
        })
    }
}

/// The candidates of `task` at `level`, heuristic first, without duplicates.
fn candidates_of<T: Tunable>(task: &T, level: TuneLevel) -> Vec<T::Schedule> {
    let mut out = vec![task.heuristic()];
    for s in task.candidates(level) {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn heuristic_summary<T: Tunable>(task: &T) -> TaskSummary {
    TaskSummary {
        task: task.key(),
        space: task.space(),
        level: TuneLevel::Heuristic,
        candidates: 1,
        measured: 0,
        pruned: 0,
        failed: 0,
        winner: task.label(&task.heuristic()),
        chosen: task.label(&task.heuristic()),
        best: None,
        heuristic: None,
        source: ResultSource::Heuristic,
        seconds: 0.0,
    }
}

fn summarize<T: Tunable>(
    task: &T,
    record: &TuningRecord<T::Schedule>,
    source: ResultSource,
) -> TaskSummary {
    let count = |f: fn(&CandidateOutcome) -> bool| {
        record.candidates.iter().filter(|c| f(&c.outcome)).count()
    };
    let stats = |c: &CandidateRecord<T::Schedule>| match &c.outcome {
        CandidateOutcome::Measured(s) | CandidateOutcome::Pruned(s) => Some(*s),
        CandidateOutcome::Failed(_) => None,
    };
    TaskSummary {
        task: task.key(),
        space: task.space(),
        level: record.level,
        candidates: record.candidates.len(),
        measured: count(|o| matches!(o, CandidateOutcome::Measured(_))),
        pruned: count(|o| matches!(o, CandidateOutcome::Pruned(_))),
        failed: count(|o| matches!(o, CandidateOutcome::Failed(_))),
        winner: record.winner().map(|w| w.label.clone()).unwrap_or_default(),
        chosen: record.chosen().map(|c| c.label.clone()).unwrap_or_default(),
        best: record.winner().and_then(stats),
        heuristic: record.heuristic().and_then(stats),
        source,
        seconds: record.tuning_seconds,
    }
}
