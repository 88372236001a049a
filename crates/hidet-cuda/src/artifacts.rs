//! Keeping inputs of failed compilations on disk, so errors can point at them.

use crate::error::CudaError;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// The directory kept files go to: `$HIDET_CACHE_DIR/cuda-kept` when that
/// variable is set, else `hidet-cuda-kept` in the system temporary directory.
pub fn kept_dir() -> PathBuf {
    match std::env::var_os("HIDET_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("cuda-kept"),
        _ => std::env::temp_dir().join("hidet-cuda-kept"),
    }
}

/// Writes `contents` to `<kept_dir>/<stem>-<hash>.<ext>` and returns the
/// path. The name depends only on `stem` and the contents, so keeping the
/// same text twice reuses one file.
pub fn keep(stem: &str, ext: &str, contents: &str) -> Result<PathBuf, CudaError> {
    let dir = kept_dir();
    std::fs::create_dir_all(&dir).map_err(|source| CudaError::Io {
        action: "creating directory",
        path: dir.clone(),
        source,
    })?;
    let mut hasher = DefaultHasher::new();
    contents.hash(&mut hasher);
    let safe_stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{safe_stem}-{:016x}.{ext}", hasher.finish()));
    std::fs::write(&path, contents).map_err(|source| CudaError::Io {
        action: "writing",
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
