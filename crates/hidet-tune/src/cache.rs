//! The persistent tuning cache: one JSON [`TuningRecord`] per task and environment.
//!
//! A record lives at `<root>/<space>/<first 2 hex digits>/<key>.json`, where the key is the
//! SHA-256 of the [`TaskIdentity`] (task key, space, template version, environment) and of
//! [`RECORD_FORMAT`]. Changing any of them — another CPU, other instruction-set features,
//! another compiler or flags, a new template version — therefore misses. Records are written
//! to a temporary file in the same directory and renamed into place, so readers in any
//! process see either no record or a complete one.
//!
//! A record that cannot be read or parsed, or whose contents disagree with the identity it
//! was looked up by, is reported as [`Lookup::Corrupt`] and otherwise ignored (the task is
//! tuned again and the record overwritten).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::environment::Environment;
use crate::error::TuneError;
use crate::record::{TuningRecord, RECORD_FORMAT};

/// The environment variable that selects the cache root (records go to its `tuning/`).
pub const CACHE_DIR_ENV: &str = "HIDET_CACHE_DIR";

/// Everything a tuning result depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskIdentity {
    /// The task's stable key ([`crate::Tunable::key`]).
    pub task: String,
    /// The schedule space's name ([`crate::Tunable::space`]).
    pub space: String,
    /// The template's version ([`crate::Tunable::template_version`]).
    pub template_version: String,
    pub environment: Environment,
}

impl TaskIdentity {
    /// The hex SHA-256 cache key.
    pub fn key(&self) -> String {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(&RECORD_FORMAT.to_le_bytes());
        field(self.task.as_bytes());
        field(self.space.as_bytes());
        field(self.template_version.as_bytes());
        let e = &self.environment;
        field(e.device.as_bytes());
        field(e.features.join("\0").as_bytes());
        field(e.compiler.as_bytes());
        field(e.flags.join("\0").as_bytes());
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The answer of [`TuningCache::lookup`].
#[derive(Debug)]
pub enum Lookup<S> {
    Hit(TuningRecord<S>),
    Miss,
    /// A file exists but is unusable; `reason` says why. Callers warn and tune again.
    Corrupt {
        path: PathBuf,
        reason: String,
    },
}

/// A tuning cache rooted at a directory (created on first store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuningCache {
    root: PathBuf,
}

impl TuningCache {
    /// A cache whose records live under `root`.
    pub fn new(root: impl Into<PathBuf>) -> TuningCache {
        TuningCache { root: root.into() }
    }

    /// The cache under `<dir>/tuning`, for a hidet cache directory `dir`.
    pub fn in_cache_dir(dir: &Path) -> TuningCache {
        TuningCache::new(dir.join("tuning"))
    }

    /// The cache under `$HIDET_CACHE_DIR/tuning` if the variable is set and non-empty, else
    /// under `hidet/tuning` in the user's cache directory, else `hidet-cache/tuning` in the
    /// system temporary directory (the same cache directory as the kernel cache's).
    pub fn from_env() -> TuningCache {
        let dir = match std::env::var_os(CACHE_DIR_ENV) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => dirs::cache_dir()
                .map(|d| d.join("hidet"))
                .unwrap_or_else(|| std::env::temp_dir().join("hidet-cache")),
        };
        TuningCache::in_cache_dir(&dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of `identity`'s record.
    pub fn path(&self, identity: &TaskIdentity) -> PathBuf {
        let key = identity.key();
        let space: String = identity
            .space
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.root
            .join(if space.is_empty() { "_".into() } else { space })
            .join(&key[..2])
            .join(format!("{key}.json"))
    }

    /// The record of `identity`: a hit only when the file parses, its identity equals
    /// `identity` and it passes [`TuningRecord::validate`].
    pub fn lookup<S: DeserializeOwned>(&self, identity: &TaskIdentity) -> Lookup<S> {
        let path = self.path(identity);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Miss,
            Err(e) => {
                return Lookup::Corrupt {
                    path,
                    reason: e.to_string(),
                }
            }
        };
        let record: TuningRecord<S> = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(e) => {
                return Lookup::Corrupt {
                    path,
                    reason: format!("not a tuning record: {e}"),
                }
            }
        };
        if &record.identity != identity {
            return Lookup::Corrupt {
                path,
                reason: "the record belongs to another task or environment".into(),
            };
        }
        match record.validate() {
            Ok(()) => Lookup::Hit(record),
            Err(reason) => Lookup::Corrupt { path, reason },
        }
    }

    /// Stores `record` under its identity, atomically; returns the file written.
    pub fn store<S: Serialize>(&self, record: &TuningRecord<S>) -> Result<PathBuf, TuneError> {
        let path = self.path(&record.identity);
        let text = serde_json::to_vec_pretty(record).map_err(|source| TuneError::Serialize {
            task: record.identity.task.clone(),
            source,
        })?;
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
        file.write_all(&text)
            .and_then(|()| file.as_file().sync_data())
            .map_err(|e| io_error(file.path(), e))?;
        file.persist(&path).map_err(|e| io_error(&path, e.error))?;
        Ok(path)
    }
}

fn io_error(path: &Path, source: std::io::Error) -> TuneError {
    TuneError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::TuneLevel;
    use crate::record::{CandidateOutcome, CandidateRecord};
    use crate::stats::Stats;

    fn identity() -> TaskIdentity {
        TaskIdentity {
            task: "t m=3".into(),
            space: "cpu/matmul f32".into(),
            template_version: "r1-abc".into(),
            environment: Environment {
                device: "cpu".into(),
                features: vec!["avx2".into()],
                compiler: "cc 1".into(),
                flags: vec!["-O3".into()],
            },
        }
    }

    #[test]
    fn records_round_trip_exactly() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = TuningCache::in_cache_dir(dir.path());
        let stats = |m: f64| Stats {
            median: m,
            min: m * 0.9,
            max: m * 1.7,
            mad: m / 3.0,
            runs: 7,
        };
        let record = TuningRecord {
            format: RECORD_FORMAT,
            identity: identity(),
            level: TuneLevel::Full,
            winner: 1,
            heuristic: Some(0),
            candidates: vec![
                CandidateRecord {
                    schedule: vec![1u32, 2],
                    label: "a".into(),
                    outcome: CandidateOutcome::Measured(stats(1.0 / 3.0e3)),
                },
                CandidateRecord {
                    schedule: vec![3u32],
                    label: "b".into(),
                    outcome: CandidateOutcome::Measured(stats(0.1 / 7.0e3)),
                },
                CandidateRecord {
                    schedule: vec![],
                    label: "c".into(),
                    outcome: CandidateOutcome::Failed("no".into()),
                },
            ],
            tuning_seconds: 0.123_456_789,
            created_unix: 1_700_000_000,
            in_model: Some(Box::new(crate::record::InModelCheck {
                winner_seconds: 2.5e-4,
                heuristic_seconds: 2.25e-4,
                runs: 20,
                model: "resnet50".into(),
            })),
        };
        let path = cache.store(&record).expect("stored");
        assert!(path.starts_with(dir.path().join("tuning").join("cpu_matmul_f32")));
        match cache.lookup::<Vec<u32>>(&identity()) {
            Lookup::Hit(back) => {
                assert_eq!(back, record);
                assert_eq!(
                    back.chosen_index(),
                    0,
                    "the in-model check preferred the heuristic"
                );
            }
            other => panic!("{other:?}"),
        }
        // A schedule of another type does not parse: reported, not a crash.
        assert!(matches!(
            cache.lookup::<String>(&identity()),
            Lookup::Corrupt { .. }
        ));
    }
}
