//! The thread pool that runs the parallel loops of every loaded kernel library.
//!
//! A kernel's `LoopKind::Parallel` loop is a task function called once per
//! iteration (see `hidet_codegen`'s C dialect); the library hands its tasks to
//! [`launch`], installed into it by [`crate::CompiledModule::set_num_threads`].
//! Tasks are claimed one at a time from a shared counter by the calling thread
//! and by as many pool workers as the library's thread count allows, so a worker
//! that the operating system does not run (a vCPU taken by a neighbour, another
//! process on the core) only holds back the task it has claimed: the calling
//! thread runs every task nobody else has taken, and never waits for a worker
//! that has not started. OpenMP's fork-join, which this replaces, waited for
//! every thread of the team at the end of every loop.
//!
//! One launch runs at a time; a launch that finds the pool busy (kernels called
//! from several threads at once, or from inside a task) runs its tasks on the
//! calling thread. Workers are started on first use, up to the largest thread
//! count asked for, and live for the rest of the process; idle, they spin for
//! a short while (a model's next kernel usually follows within microseconds)
//! and then sleep.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A task function of a kernel library: `task(env, index)`.
pub type TaskFn = unsafe extern "C" fn(*mut c_void, i32);

/// The launcher's C type, as the C dialect's `hidet_launch_fn`.
pub type LaunchFn = unsafe extern "C" fn(TaskFn, *mut c_void, i32, i32);

/// How long an idle worker polls for the next launch before it sleeps.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_millis(2);

/// Stack of each worker: tasks keep their packing buffers and register tiles on the
/// stack (up to a few MiB for the largest matmul blocks).
const WORKER_STACK_BYTES: usize = 64 << 20;

/// Runs `task(env, t)` for every `t` in `0..tasks` on up to `threads` threads (the
/// calling thread included) and returns when all have finished.
///
/// # Safety
/// `task` must be safe to call with `env` and any index in `0..tasks`, from any
/// thread and concurrently with itself, until this function returns.
pub unsafe extern "C" fn launch(task: TaskFn, env: *mut c_void, tasks: i32, threads: i32) {
    let workers = usize::try_from(threads.saturating_sub(1)).unwrap_or(0);
    if tasks <= 1 || workers == 0 {
        for t in 0..tasks.max(0) {
            // SAFETY: the caller's contract covers every index in `0..tasks`.
            unsafe { task(env, t) };
        }
        return;
    }
    pool().run(task, env, tasks, workers);
}

/// The most workers the pool starts (a thread count above 256 uses 256 threads).
const MAX_WORKERS: usize = 255;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Pool::new)
}

/// One launch: the task function, its environment and the task counters. Shared with
/// the workers through an `Arc`, so a worker that looks at a launch after it has
/// ended still reads valid counters (it finds no task left and never calls `task`).
struct Job {
    task: TaskFn,
    env: *mut c_void,
    tasks: i32,
    /// Workers allowed to join, beyond the calling thread.
    seats: AtomicI32,
    next: AtomicI32,
    done: AtomicI32,
}

// SAFETY: `env` is only passed to `task`, whose contract (see `launch`) allows calls
// from any thread while the launch lasts; tasks are only claimed while it lasts.
unsafe impl Send for Job {}
// SAFETY: as for `Send`; every other field is atomic or immutable.
unsafe impl Sync for Job {}

impl Job {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let t = self.next.fetch_add(1, Ordering::AcqRel);
            if t >= self.tasks {
                return;
            }
            // SAFETY: `t` is in `0..tasks` and was claimed once; the launch is still
            // running (it waits for `done == tasks`), so `launch`'s contract holds.
            unsafe { (self.task)(self.env, t) };
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Pool {
    shared: Arc<Shared>,
    /// Set while a launch runs.
    busy: AtomicBool,
    /// Workers started so far (guarded, so that two first uses start them once).
    started: Mutex<usize>,
}

struct Shared {
    /// The launch in progress, if any.
    current: Mutex<Option<Arc<Job>>>,
    /// Incremented by every launch; workers compare it with the last one they saw.
    epoch: AtomicU64,
    /// Workers asleep (or about to be) on `wake`.
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            shared: Arc::new(Shared {
                current: Mutex::new(None),
                epoch: AtomicU64::new(0),
                sleepers: AtomicUsize::new(0),
                sleep_lock: Mutex::new(()),
                wake: Condvar::new(),
            }),
            busy: AtomicBool::new(false),
            started: Mutex::new(0),
        }
    }

    fn run(&self, task: TaskFn, env: *mut c_void, tasks: i32, workers: usize) {
        let workers = workers.min(MAX_WORKERS);
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            for t in 0..tasks {
                // SAFETY: as in `launch`, whose contract the caller upholds.
                unsafe { task(env, t) };
            }
            return;
        }
        let available = self.start_workers(workers);
        let job = Arc::new(Job {
            task,
            env,
            tasks,
            seats: AtomicI32::new(i32::try_from(available).unwrap_or(i32::MAX)),
            next: AtomicI32::new(0),
            done: AtomicI32::new(0),
        });
        *lock(&self.shared.current) = Some(Arc::clone(&job));
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if self.shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.shared.sleep_lock);
            self.shared.wake.notify_all();
        }
        job.work();
        let mut spins = 0u32;
        while job.done.load(Ordering::Acquire) < tasks {
            if spins < 1 << 14 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *lock(&self.shared.current) = None;
        self.busy.store(false, Ordering::Release);
    }

    /// Starts workers until `wanted` run (bounded by what the system lets us start);
    /// returns how many run.
    fn start_workers(&self, wanted: usize) -> usize {
        let mut started = lock(&self.started);
        while *started < wanted {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name(format!("hidet-worker-{}", *started))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || worker(&shared));
            if spawned.is_err() {
                break;
            }
            *started += 1;
        }
        (*started).min(wanted)
    }
}

fn worker(shared: &Shared) {
    let mut seen = shared.epoch.load(Ordering::SeqCst);
    loop {
        seen = wait_for_launch(shared, seen);
        let job = lock(&shared.current).clone();
        if let Some(job) = job {
            if job.seats.fetch_sub(1, Ordering::AcqRel) > 0 {
                job.work();
            }
        }
    }
}

/// Waits until the epoch differs from `seen` and returns it: polls for
/// [`SPIN_BEFORE_SLEEP`], then sleeps on the condition variable.
fn wait_for_launch(shared: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        let now = shared.epoch.load(Ordering::SeqCst);
        if now != seen {
            return now;
        }
        polls = polls.wrapping_add(1);
        if !polls.is_multiple_of(64) || start.elapsed() < SPIN_BEFORE_SLEEP {
            std::hint::spin_loop();
            continue;
        }
        let mut guard = lock(&shared.sleep_lock);
        shared.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let now = shared.epoch.load(Ordering::SeqCst);
            if now != seen {
                shared.sleepers.fetch_sub(1, Ordering::SeqCst);
                return now;
            }
            guard = shared
                .wake
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// Locks a mutex whose data stays valid even if a holder panicked (the pool's locks
/// guard plain values that are written whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    struct Counts {
        hits: Vec<AtomicU32>,
        threads: Mutex<std::collections::HashSet<std::thread::ThreadId>>,
    }

    unsafe extern "C" fn count(env: *mut c_void, t: i32) {
        // SAFETY: the tests pass a `Counts` that outlives the launch.
        let counts = unsafe { &*(env as *const Counts) };
        counts.hits[t as usize].fetch_add(1, Ordering::Relaxed);
        lock(&counts.threads).insert(std::thread::current().id());
        let mut x = 0u64;
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }

    fn run(tasks: i32, threads: i32) -> Counts {
        let counts = Counts {
            hits: (0..tasks.max(0)).map(|_| AtomicU32::new(0)).collect(),
            threads: Mutex::new(Default::default()),
        };
        // SAFETY: `count` only reads `counts`, which outlives the call.
        unsafe {
            launch(
                count,
                &counts as *const Counts as *mut c_void,
                tasks,
                threads,
            )
        };
        counts
    }

    #[test]
    fn every_task_runs_exactly_once() {
        for (tasks, threads) in [(0, 2), (1, 4), (7, 1), (7, 2), (64, 3), (1000, 2)] {
            let counts = run(tasks, threads);
            assert!(
                counts.hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{tasks} tasks on {threads} threads"
            );
        }
    }

    #[test]
    fn one_thread_runs_on_the_caller() {
        let counts = run(16, 1);
        let threads = counts.threads.into_inner().unwrap();
        assert_eq!(threads.len(), 1);
        assert!(threads.contains(&std::thread::current().id()));
    }

    #[test]
    fn concurrent_launches_all_complete() {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let counts = run(50 + i, 2);
                    counts.hits.iter().all(|h| h.load(Ordering::Relaxed) == 1)
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap());
        }
    }
}
