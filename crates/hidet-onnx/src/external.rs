//! External tensor data, confined to the model's folder.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use crate::error::OnnxError;

fn ext_err(location: &str, reason: impl Into<String>) -> OnnxError {
    OnnxError::ExternalData {
        location: location.to_string(),
        reason: reason.into(),
    }
}

/// Resolves `location` inside `base_dir`.
///
/// Rejects absolute paths, `..` components, and paths that leave `base_dir` after resolving
/// symlinks (both sides are canonicalized and compared).
pub fn resolve_location(base_dir: &Path, location: &str) -> Result<PathBuf, OnnxError> {
    let rel = Path::new(location);
    if location.is_empty() {
        return Err(ext_err(location, "empty location"));
    }
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(ext_err(location, "`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(ext_err(location, "absolute paths are not allowed"))
            }
        }
    }
    // A model given by a bare file name (`model.onnx`) has the empty path as its folder.
    let base_dir = if base_dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base_dir
    };
    let base = base_dir
        .canonicalize()
        .map_err(|e| ext_err(location, format!("model folder: {e}")))?;
    let full = base
        .join(rel)
        .canonicalize()
        .map_err(|e| ext_err(location, e.to_string()))?;
    if !full.starts_with(&base) {
        return Err(ext_err(location, "resolves outside the model folder"));
    }
    Ok(full)
}

/// Reads `length` bytes (or the rest of the file when `None`) at `offset` of the external
/// file `location`, checking the range against the file size before touching any data.
/// The file is memory-mapped; `f` sees the bytes without an intermediate copy.
pub fn with_external_bytes<R>(
    base_dir: &Path,
    location: &str,
    offset: u64,
    length: Option<u64>,
    f: impl FnOnce(&[u8]) -> Result<R, OnnxError>,
) -> Result<R, OnnxError> {
    let path = resolve_location(base_dir, location)?;
    let file = File::open(&path).map_err(|e| OnnxError::Io {
        path: path.clone(),
        source: e,
    })?;
    let size = file
        .metadata()
        .map_err(|e| OnnxError::Io {
            path: path.clone(),
            source: e,
        })?
        .len();
    let len = length.unwrap_or(size.saturating_sub(offset));
    let end = offset
        .checked_add(len)
        .ok_or_else(|| ext_err(location, "offset + length overflows"))?;
    if end > size {
        return Err(ext_err(
            location,
            format!("range {offset}..{end} exceeds file size {size}"),
        ));
    }
    if len == 0 {
        return f(&[]);
    }
    // SAFETY: the map is read-only and private to this call; the model file is not expected to
    // change while being imported (like any reader of a file, a concurrent truncation is
    // outside our contract). Bounds were checked against the file size above.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OnnxError::Io {
        path: path.clone(),
        source: e,
    })?;
    let (s, e) = (
        usize::try_from(offset).map_err(|_| ext_err(location, "offset too large"))?,
        usize::try_from(end).map_err(|_| ext_err(location, "length too large"))?,
    );
    let bytes = map
        .get(s..e)
        .ok_or_else(|| ext_err(location, "range outside the mapped file"))?;
    f(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_escapes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.bin"), [0u8; 8]).unwrap();
        assert!(resolve_location(dir.path(), "w.bin").is_ok());
        assert!(resolve_location(dir.path(), "../w.bin").is_err());
        assert!(resolve_location(dir.path(), "/etc/passwd").is_err());
        assert!(resolve_location(dir.path(), "").is_err());
        #[cfg(unix)]
        {
            let outside = tempfile::tempdir().unwrap();
            std::fs::write(outside.path().join("secret"), [1u8; 4]).unwrap();
            std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link"))
                .unwrap();
            assert!(resolve_location(dir.path(), "link").is_err());
        }
    }

    #[test]
    fn a_bare_file_name_has_the_current_folder() {
        // `hidet run model.onnx`: the model's folder is the empty path. Cargo runs tests in
        // the package's folder.
        let full = resolve_location(Path::new(""), "Cargo.toml").unwrap();
        assert_eq!(full, Path::new("Cargo.toml").canonicalize().unwrap());
        assert!(resolve_location(Path::new(""), "../Cargo.toml").is_err());
    }

    #[test]
    fn range_is_checked_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.bin"), [7u8; 8]).unwrap();
        let r = with_external_bytes(dir.path(), "w.bin", 4, Some(8), |_| Ok(()));
        assert!(r.is_err());
        let v = with_external_bytes(dir.path(), "w.bin", 2, Some(4), |b| Ok(b.to_vec())).unwrap();
        assert_eq!(v, vec![7u8; 4]);
    }
}
