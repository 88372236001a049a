//! One kernel for every size of a task whose extents change from one compilation to the
//! next: a decoder's attention, softmax and cache concatenation take the cache length, which
//! grows by one per generated token, and a model with symbolic inputs compiles every new
//! length. Compiling those kernels' C again at every step dominated a first generation; this
//! memo lets the backend compile them once with the changing extents as run-time parameters
//! (`hidet_ir::size_params`).
//!
//! For each task (by its name, which carries its position in the fused graph) and lowered
//! skeleton the memo keeps the last few distinct lowerings. A task lowered to the same
//! skeleton with [`MIN_SAMPLES`] different sets of constants before is taken to keep
//! changing: the sites where its lowerings differ become scalar parameters, grouped by the
//! values they take, and the lifted function serves every later lowering that is an exact
//! instance of it (equal skeleton, equal constants outside the parameters, one value per
//! parameter; checked per lowering, so a new size is never run on a kernel it does not
//! match). A task lowered once or twice — a model used at one or two shapes — keeps its
//! fully specialized kernels; a task lifted once is known to change, and a new skeleton of
//! it (a length whose remainder loop vanishes) is lifted from its second lowering.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use hidet_ir::function::Function;
use hidet_ir::size_params::{lift, lifting_for, Lifting, Site, Sites};
use sha2::{Digest, Sha256};

/// Distinct lowerings of a task's skeleton seen before one is lifted (one for a task lifted
/// before under another skeleton: it is known to change).
pub const MIN_SAMPLES: usize = 2;
/// At most this many size parameters per lifted kernel.
pub const MAX_PARAMS: usize = 16;
/// At most this many lifted kernels per task and skeleton (a new one replaces the last
/// when a lowering varies at sites the last kept fixed).
pub const MAX_LIFTS: u32 = 8;
/// Distinct lowerings kept per task and skeleton.
const KEPT_SAMPLES: usize = 3;
/// At most this many tasks and skeletons remembered; all are forgotten when full.
const MAX_ENTRIES: usize = 4096;

/// How a task's lowering is to be built.
#[derive(Debug, Clone)]
pub enum SizeChoice {
    /// As lowered, every constant in place.
    Specialized,
    /// As `function` (lowered, with size parameters appended) called with `values`, one per
    /// size parameter in order.
    Lifted {
        function: Arc<Function>,
        values: Vec<i64>,
        /// The function's C source, once emitted (shared by every instance).
        source: Arc<OnceLock<Arc<str>>>,
    },
}

#[derive(Debug)]
struct Lifted {
    /// The sites of the lowering the function was lifted from.
    base: Vec<Site>,
    lifting: Lifting,
    function: Arc<Function>,
    source: Arc<OnceLock<Arc<str>>>,
}

/// What is remembered of one task's lowerings with one skeleton (known by its SHA-256, so a
/// model's hundreds of tasks do not keep their skeletons' text).
#[derive(Debug, Default)]
struct Entry {
    samples: Vec<Vec<Site>>,
    lifted: Option<Lifted>,
    lifts: u32,
}

#[derive(Debug, Default)]
struct Entries {
    by_skeleton: HashMap<(String, [u8; 32]), Entry>,
    /// Tasks lifted under some skeleton.
    varying: HashSet<String>,
}

/// The lowerings a backend has seen per task and skeleton (shared by its clones).
#[derive(Debug, Default)]
pub struct SizeMemo {
    entries: Mutex<Entries>,
}

impl SizeMemo {
    /// How to build `lowered`, the lowered kernel of task `task` taken apart as `sites`
    /// (see the module docs); remembers the lowering.
    pub fn choose(&self, task: &str, sites: &Sites, lowered: &Function) -> SizeChoice {
        let key = (
            task.to_string(),
            Sha256::digest(sites.skeleton.as_bytes()).into(),
        );
        // A panic while holding the lock leaves every entry usable (each update completes
        // before the next starts), so a poisoned lock is still usable.
        let mut guard = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let Entries {
            by_skeleton,
            varying,
        } = &mut *guard;
        if by_skeleton.len() >= MAX_ENTRIES && !by_skeleton.contains_key(&key) {
            by_skeleton.clear();
            varying.clear();
        }
        let needed = if varying.contains(task) {
            1
        } else {
            MIN_SAMPLES
        };
        let entry = by_skeleton.entry(key).or_default();
        if let Some(lifted) = &entry.lifted {
            if let Some(values) = lifted.lifting.values(&lifted.base, &sites.sites) {
                return SizeChoice::Lifted {
                    function: Arc::clone(&lifted.function),
                    values,
                    source: Arc::clone(&lifted.source),
                };
            }
        }
        if entry.samples.contains(&sites.sites) {
            return SizeChoice::Specialized;
        }
        let choice = if entry.samples.len() >= needed && entry.lifts < MAX_LIFTS {
            let mut all: Vec<&[Site]> = entry.samples.iter().map(Vec::as_slice).collect();
            all.push(&sites.sites);
            match lifting_for(&all) {
                Some(lifting) if lifting.groups.len() <= MAX_PARAMS => {
                    let function = Arc::new(lift(lowered, &lifting));
                    let values = lifting
                        .values(&sites.sites, &sites.sites)
                        .expect("a lowering is an instance of the function lifted from it");
                    entry.lifts += 1;
                    let source = Arc::<OnceLock<Arc<str>>>::default();
                    entry.lifted = Some(Lifted {
                        base: sites.sites.clone(),
                        lifting,
                        function: Arc::clone(&function),
                        source: Arc::clone(&source),
                    });
                    varying.insert(task.to_string());
                    SizeChoice::Lifted {
                        function,
                        values,
                        source,
                    }
                }
                _ => SizeChoice::Specialized,
            }
        } else {
            SizeChoice::Specialized
        };
        if entry.samples.len() == KEPT_SAMPLES {
            entry.samples.remove(0);
        }
        entry.samples.push(sites.sites.clone());
        choice
    }
}
