//! Kernels a CPU backend has lowered and emitted, remembered for its later tasks: the repeated
//! blocks of a network, and the same tasks met again when a model with symbolic inputs is
//! compiled for another set of shapes (most kernels of a decoder step do not depend on the
//! cache length), are lowered and printed as C once.
//!
//! A task is known by its [`LoweringKey`]: everything [`CpuBackend::lower`] reads of it —
//! its composed definition up to names ([`canonical_digest`]), its kernel name without the
//! position ([`content_name`]: the name is the C symbol), its anchor operator and operand
//! layouts, whether it is fused — and the threads it is scheduled for. Two tasks with equal
//! keys compute the same thing on the same shapes with the same parameters, so either's
//! kernel serves both. Template kernels offered for measured tuning are not remembered (the
//! tuner replaces them).
//!
//! [`CpuBackend::lower`]: super::CpuBackend

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hidet_graph::fusion::fingerprint::canonical_digest;
use hidet_graph::fusion::{content_name, FusedTask};
use hidet_ir::function::Function;
use sha2::{Digest, Sha256};

use super::KernelOrigin;

/// At most this many tasks are remembered; the least recently used go first.
pub const MEMO_TASKS: usize = 1024;
/// At most this many bytes of remembered C source.
pub const MEMO_SOURCE_BYTES: usize = 64 << 20;

/// What determines the kernel of a task (see the module docs): the SHA-256 of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoweringKey([u8; 32]);

impl LoweringKey {
    /// The key of `task` lowered for `threads` threads, with (`template`) or without the
    /// matmul template.
    pub fn of(task: &FusedTask, threads: i64, template: bool) -> LoweringKey {
        let mut hash = Sha256::new();
        let mut part = |text: &str| {
            hash.update((text.len() as u64).to_le_bytes());
            hash.update(text.as_bytes());
        };
        part(&content_name(&task.name));
        part(&format!(
            "threads {threads} template {template} fused {}",
            task.nodes.len() > 1
        ));
        if let Some(anchor) = &task.anchor {
            part(&anchor.op_type);
            part(&format!("{:?}", anchor.layouts));
        }
        hash.update(canonical_digest(&task.def));
        LoweringKey(hash.finalize().into())
    }
}

/// How a remembered task was lowered.
#[derive(Debug, Clone)]
pub enum Lowered {
    /// To this kernel (named after the task it was lowered for).
    Kernel {
        function: Arc<Function>,
        origin: KernelOrigin,
    },
    /// Refused, for this reason (the graph layer splits the task).
    Refused(String),
}

#[derive(Debug)]
struct Entry {
    lowered: Lowered,
    /// The kernel's C source, once emitted.
    source: Option<Arc<str>>,
    used: u64,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<LoweringKey, Entry>,
    tick: u64,
    source_bytes: usize,
}

impl Entries {
    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Drops least recently used entries until at most `tasks` remain and their sources
    /// fit [`MEMO_SOURCE_BYTES`].
    fn shrink_to(&mut self, tasks: usize) {
        while !self.map.is_empty()
            && (self.map.len() > tasks || self.source_bytes > MEMO_SOURCE_BYTES)
        {
            let Some(oldest) = self.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k) else {
                break;
            };
            if let Some(gone) = self.map.remove(&oldest) {
                self.source_bytes -= gone.source.map_or(0, |s| s.len());
            }
        }
    }
}

/// The remembered tasks of one backend (shared by its clones).
#[derive(Debug, Default)]
pub struct KernelMemo {
    entries: Mutex<Entries>,
}

impl KernelMemo {
    /// How the task of `key` was lowered, if remembered.
    pub fn lowered(&self, key: &LoweringKey) -> Option<Lowered> {
        let mut entries = self.lock();
        let tick = entries.touch();
        let entry = entries.map.get_mut(key)?;
        entry.used = tick;
        Some(entry.lowered.clone())
    }

    /// Remembers how the task of `key` was lowered.
    pub fn remember(&self, key: LoweringKey, lowered: Lowered) {
        let mut entries = self.lock();
        if entries.map.contains_key(&key) {
            return;
        }
        entries.shrink_to(MEMO_TASKS - 1);
        let used = entries.touch();
        entries.map.insert(
            key,
            Entry {
                lowered,
                source: None,
                used,
            },
        );
    }

    /// The C source emitted for the kernel of `key`, if remembered.
    pub fn source(&self, key: &LoweringKey) -> Option<Arc<str>> {
        self.lock().map.get(key)?.source.clone()
    }

    /// Remembers `source` as the C of the kernel of `key` (a task not remembered is left
    /// out: its source is of no use without it).
    pub fn remember_source(&self, key: &LoweringKey, source: &str) {
        let mut entries = self.lock();
        if entries.map.get(key).is_none_or(|e| e.source.is_some()) {
            return;
        }
        if source.len() > MEMO_SOURCE_BYTES / 4 {
            return;
        }
        entries.source_bytes += source.len();
        if let Some(entry) = entries.map.get_mut(key) {
            entry.source = Some(Arc::from(source));
        }
        entries.shrink_to(MEMO_TASKS);
    }

    /// Tasks remembered now.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether no task is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock leaves the map consistent (every update is one
        // insert or remove), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
