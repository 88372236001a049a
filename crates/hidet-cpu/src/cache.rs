//! The content-addressed on-disk cache of compiled kernel libraries.
//!
//! An entry lives at `<root>/kernels/<first 2 hex digits>/<key>/` and holds
//! `source.c` and `lib.so`. The key is the SHA-256 of the source, the
//! compiler's path and version, the flags and [`CACHE_FORMAT_VERSION`]. Both
//! files are written to a temporary file in the entry directory and renamed
//! into place, so a reader (in this or another process) sees either no
//! library or a complete one, and concurrent builders of one key all succeed.

use crate::compile::Compiler;
use crate::error::CpuError;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bumped whenever the layout or meaning of cache entries changes, so old
/// entries are never reused.
pub const CACHE_FORMAT_VERSION: u32 = 1;

/// The environment variable that overrides the cache location.
pub const CACHE_DIR_ENV: &str = "HIDET_CACHE_DIR";

/// Whether a library came from the cache or was compiled by this call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The library was already in the cache; the compiler did not run.
    Hit,
    /// The compiler ran and the library was stored.
    Compiled,
}

/// A complete library in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedLibrary {
    /// The hex SHA-256 key.
    pub key: String,
    /// The entry directory.
    pub dir: PathBuf,
    pub source_path: PathBuf,
    pub library_path: PathBuf,
    pub outcome: CacheOutcome,
}

/// A kernel cache rooted at a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    root: PathBuf,
}

impl KernelCache {
    /// A cache rooted at `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> KernelCache {
        KernelCache { root: root.into() }
    }

    /// The cache at the default location: `$HIDET_CACHE_DIR` if set and
    /// non-empty, else `hidet` under the user's cache directory, else
    /// `hidet-cache` under the system temporary directory.
    pub fn from_env() -> KernelCache {
        KernelCache::new(default_cache_dir())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key of a source compiled by `compiler` with `flags`.
    pub fn key(source: &str, compiler: &Compiler, flags: &[String]) -> String {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(&CACHE_FORMAT_VERSION.to_le_bytes());
        field(source.as_bytes());
        field(compiler.program.to_string_lossy().as_bytes());
        field(compiler.leading_args.join("\0").as_bytes());
        field(compiler.version.as_bytes());
        field(flags.join("\0").as_bytes());
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The entry directory of `key`.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        let prefix = key.get(..2).unwrap_or(key);
        self.root.join("kernels").join(prefix).join(key)
    }

    /// The library for `source`: from the cache when present, else compiled
    /// with `compiler` and `flags` and stored. On a compile failure the
    /// error names the kept `source.c` of the entry.
    pub fn get_or_compile(
        &self,
        source: &str,
        compiler: &Compiler,
        flags: &[String],
    ) -> Result<CachedLibrary, CpuError> {
        let key = KernelCache::key(source, compiler, flags);
        let dir = self.entry_dir(&key);
        let source_path = dir.join("source.c");
        let library_path = dir.join("lib.so");
        let entry = |outcome| CachedLibrary {
            key: key.clone(),
            dir: dir.clone(),
            source_path: source_path.clone(),
            library_path: library_path.clone(),
            outcome,
        };
        if library_path.is_file() {
            return Ok(entry(CacheOutcome::Hit));
        }
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        write_atomically(&source_path, source.as_bytes())?;
        let staged = tempfile::Builder::new()
            .prefix(".lib-")
            .suffix(".so")
            .tempfile_in(&dir)
            .map_err(|e| io_error(&dir, e))?
            .into_temp_path();
        compiler.compile(&source_path, &staged, flags)?;
        staged
            .persist(&library_path)
            .map_err(|e| io_error(&library_path, e.error))?;
        Ok(entry(CacheOutcome::Compiled))
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so readers never see a partial file.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CpuError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_data())
        .map_err(|e| io_error(file.path(), e))?;
    file.persist(path).map_err(|e| io_error(path, e.error))?;
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> CpuError {
    CpuError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn default_cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()
            .map(|d| d.join("hidet"))
            .unwrap_or_else(|| std::env::temp_dir().join("hidet-cache")),
    }
}
