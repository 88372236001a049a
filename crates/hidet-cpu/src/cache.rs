//! The content-addressed on-disk cache of compiled kernel libraries.
//!
//! An entry lives at `<root>/kernels/<first 2 hex digits>/<key>/` and holds
//! `source.c`, `lib.so` and `lib.so.sha256` (the SHA-256 of the library). The key is the
//! SHA-256 of the source, the compiler's path and version, the flags and
//! [`CACHE_FORMAT_VERSION`]. Every file is written to a temporary file in the entry directory
//! and renamed into place (the digest before the library), so a reader (in this or another
//! process) sees either no library or a complete one with its digest, and concurrent
//! builders of one key all succeed.
//!
//! The cache heals itself: a library whose bytes do not match its digest (overwritten,
//! truncated) is rebuilt with a warning on stderr naming it, and so is one that matches but
//! fails to load ([`KernelCache::rebuild`], used by [`crate::build_from_source`]).

use crate::compile::Compiler;
use crate::error::CpuError;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bumped whenever the layout or meaning of cache entries changes, so old
/// entries are never reused.
pub const CACHE_FORMAT_VERSION: u32 = 2;

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

    /// The library for `source`: from the cache when present and intact (its bytes match
    /// its digest), else compiled with `compiler` and `flags` and stored. A present but
    /// damaged entry is rebuilt, with a warning on stderr naming it. On a compile failure
    /// the error names the kept `source.c` of the entry.
    pub fn get_or_compile(
        &self,
        source: &str,
        compiler: &Compiler,
        flags: &[String],
    ) -> Result<CachedLibrary, CpuError> {
        let key = KernelCache::key(source, compiler, flags);
        let library_path = self.entry_dir(&key).join(LIBRARY);
        if library_path.is_file() {
            match verify_digest(&library_path) {
                Ok(()) => return Ok(self.entry(&key, CacheOutcome::Hit)),
                Err(problem) => eprintln!(
                    "warning: kernel cache entry {} is damaged ({problem}); rebuilding it",
                    library_path.display()
                ),
            }
        }
        self.compile_into(&key, source, compiler, flags)
    }

    /// Compiles `source` again into its entry, replacing whatever is there: for a library
    /// that is in the cache but cannot be loaded.
    pub fn rebuild(
        &self,
        source: &str,
        compiler: &Compiler,
        flags: &[String],
    ) -> Result<CachedLibrary, CpuError> {
        let key = KernelCache::key(source, compiler, flags);
        self.compile_into(&key, source, compiler, flags)
    }

    fn entry(&self, key: &str, outcome: CacheOutcome) -> CachedLibrary {
        let dir = self.entry_dir(key);
        CachedLibrary {
            key: key.to_string(),
            source_path: dir.join(SOURCE),
            library_path: dir.join(LIBRARY),
            dir,
            outcome,
        }
    }

    fn compile_into(
        &self,
        key: &str,
        source: &str,
        compiler: &Compiler,
        flags: &[String],
    ) -> Result<CachedLibrary, CpuError> {
        let entry = self.entry(key, CacheOutcome::Compiled);
        let dir = &entry.dir;
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        write_atomically(&entry.source_path, source.as_bytes())?;
        let staged = tempfile::Builder::new()
            .prefix(".lib-")
            .suffix(".so")
            .tempfile_in(dir)
            .map_err(|e| io_error(dir, e))?
            .into_temp_path();
        compiler.compile(&entry.source_path, &staged, flags)?;
        let bytes = std::fs::read(&staged).map_err(|e| io_error(&staged, e))?;
        write_atomically(
            &digest_path(&entry.library_path),
            hex_sha256(&bytes).as_bytes(),
        )?;
        staged
            .persist(&entry.library_path)
            .map_err(|e| io_error(&entry.library_path, e.error))?;
        Ok(entry)
    }
}

/// The file names of an entry.
const SOURCE: &str = "source.c";
const LIBRARY: &str = "lib.so";

/// Where the digest of the library at `library` is kept.
fn digest_path(library: &Path) -> PathBuf {
    library.with_extension("so.sha256")
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether the library at `library` has the digest recorded beside it; the problem otherwise.
fn verify_digest(library: &Path) -> Result<(), String> {
    let recorded =
        std::fs::read_to_string(digest_path(library)).map_err(|e| format!("no digest: {e}"))?;
    let bytes = std::fs::read(library).map_err(|e| format!("unreadable: {e}"))?;
    if hex_sha256(&bytes) == recorded.trim() {
        Ok(())
    } else {
        Err("its bytes do not match its digest".to_string())
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
