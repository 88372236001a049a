//! The file format of a saved compiled model: one file holding a JSON manifest and the
//! binary blobs it refers to (weights, kernel libraries), every part checksummed.
//!
//! Layout (all integers little-endian):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `HIDETMDL` |
//! | 4 | format version ([`FORMAT_VERSION`]) |
//! | 8 | manifest length `m` |
//! | 32 | SHA-256 of the manifest |
//! | `m` | the manifest: JSON `{"blobs": [{"offset", "len", "sha256"}], "payload": …}` |
//! | rest | the blobs, each at its `offset` from the start of this region (a multiple of 64), the last one ending the file |
//!
//! A file is untrusted input: [`ArtifactReader::read`] checks the magic, the version, every
//! length against the file's size and every checksum before it hands anything out, so a
//! truncated or corrupted file is an [`ArtifactError`] naming the part, never a crash or a
//! wrong answer. Equal blobs are stored once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first bytes of every artifact.
pub const MAGIC: &[u8; 8] = b"HIDETMDL";
/// The version of the layout and of the manifest's meaning this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 8 + 4 + 8 + 32;
/// Blobs start at multiples of this many bytes within the blob region.
const BLOB_ALIGN: usize = 64;

/// Errors of writing or reading an artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a compiled hidet model (no `HIDETMDL` header)")]
    NotAnArtifact { path: PathBuf },
    #[error(
        "{path}: compiled model format version {found}, this build reads version {FORMAT_VERSION}; compile the model again with this build"
    )]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: the compiled model is truncated or corrupted: {what}")]
    Corrupt { path: PathBuf, what: String },
    /// The manifest is valid JSON with the right checksum but not what this build expects.
    #[error("{path}: the compiled model's manifest does not describe a model this build can load: {what}")]
    Manifest { path: PathBuf, what: String },
    #[error("blob #{index} does not exist in the compiled model")]
    NoSuchBlob { index: usize },
}

/// A reference to one blob of an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlobId(pub usize);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BlobEntry {
    offset: u64,
    len: u64,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
struct Manifest<T> {
    blobs: Vec<BlobEntry>,
    payload: T,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Collects blobs, then writes them with a payload as one artifact file.
#[derive(Debug, Default)]
pub struct ArtifactWriter {
    blobs: Vec<Vec<u8>>,
    by_hash: HashMap<[u8; 32], BlobId>,
}

impl ArtifactWriter {
    pub fn new() -> ArtifactWriter {
        ArtifactWriter::default()
    }

    /// Adds a blob and returns its id; a blob equal to one added before gets that one's id.
    pub fn add(&mut self, bytes: Vec<u8>) -> BlobId {
        let hash = sha256(&bytes);
        if let Some(id) = self.by_hash.get(&hash) {
            return *id;
        }
        let id = BlobId(self.blobs.len());
        self.blobs.push(bytes);
        self.by_hash.insert(hash, id);
        id
    }

    /// The artifact's bytes: header, manifest (`payload` and the blob table), blobs.
    pub fn to_bytes<T: Serialize>(&self, payload: &T) -> Result<Vec<u8>, serde_json::Error> {
        let mut entries = Vec::with_capacity(self.blobs.len());
        let mut offset = 0usize;
        for blob in &self.blobs {
            offset = offset.div_ceil(BLOB_ALIGN) * BLOB_ALIGN;
            entries.push(BlobEntry {
                offset: offset as u64,
                len: blob.len() as u64,
                sha256: hex(&sha256(blob)),
            });
            offset += blob.len();
        }
        let offsets: Vec<usize> = entries.iter().map(|e| e.offset as usize).collect();
        let manifest = serde_json::to_vec(&Manifest {
            blobs: entries,
            payload,
        })?;
        let mut out = Vec::with_capacity(HEADER_BYTES + manifest.len() + offset);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
        out.extend_from_slice(&sha256(&manifest));
        out.extend_from_slice(&manifest);
        let region = out.len();
        for (blob, start) in self.blobs.iter().zip(offsets) {
            // Padding goes between blobs only, so any truncation cuts into the last one.
            out.resize(region + start, 0);
            out.extend_from_slice(blob);
        }
        Ok(out)
    }

    /// Writes the artifact to `path` through a temporary file in the same folder renamed
    /// into place, so an interrupted write never leaves a partial file under `path`.
    pub fn write<T: Serialize>(&self, path: &Path, payload: &T) -> Result<(), ArtifactError> {
        let io = |source| ArtifactError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = self
            .to_bytes(payload)
            .map_err(|e| ArtifactError::Manifest {
                path: path.to_path_buf(),
                what: e.to_string(),
            })?;
        let file_name = path.file_name().ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path names no file",
            ))
        })?;
        let mut partial = file_name.to_os_string();
        partial.push(format!(".partial-{}", std::process::id()));
        let tmp = path.with_file_name(partial);
        std::fs::write(&tmp, &bytes).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}

/// A checked artifact in memory: its payload and its blobs.
#[derive(Debug)]
pub struct ArtifactReader {
    path: PathBuf,
    bytes: Vec<u8>,
    /// `(start, end)` of each blob in `bytes`.
    blobs: Vec<(usize, usize)>,
    payload: serde_json::Value,
}

impl ArtifactReader {
    /// Whether `bytes` start like an artifact (the magic), for telling one from other files.
    pub fn is_artifact(bytes: &[u8]) -> bool {
        bytes.starts_with(MAGIC)
    }

    /// Whether the file at `path` starts like an artifact; `false` when it cannot be read.
    pub fn is_artifact_file(path: &Path) -> bool {
        use std::io::Read;
        let mut head = [0u8; 8];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
            && Self::is_artifact(&head)
    }

    /// Reads and checks the artifact at `path` (see the module docs).
    pub fn read(path: &Path) -> Result<ArtifactReader, ArtifactError> {
        let bytes = std::fs::read(path).map_err(|source| ArtifactError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ArtifactReader::from_bytes(path, bytes)
    }

    /// Checks `bytes` as an artifact; `path` names it in errors.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<ArtifactReader, ArtifactError> {
        let corrupt = |what: String| ArtifactError::Corrupt {
            path: path.to_path_buf(),
            what,
        };
        if !Self::is_artifact(&bytes) {
            return Err(ArtifactError::NotAnArtifact {
                path: path.to_path_buf(),
            });
        }
        if bytes.len() < HEADER_BYTES {
            return Err(corrupt(format!(
                "{} bytes, shorter than the {HEADER_BYTES}-byte header",
                bytes.len()
            )));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(ArtifactError::Version {
                path: path.to_path_buf(),
                found: version,
            });
        }
        let manifest_len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let manifest_end = usize::try_from(manifest_len)
            .ok()
            .and_then(|m| m.checked_add(HEADER_BYTES))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "the manifest claims {manifest_len} bytes, the file has {} after the header",
                    bytes.len() - HEADER_BYTES
                ))
            })?;
        let manifest = &bytes[HEADER_BYTES..manifest_end];
        if sha256(manifest)[..] != bytes[20..52] {
            return Err(corrupt("the manifest's checksum does not match".into()));
        }
        let parsed: Manifest<serde_json::Value> =
            serde_json::from_slice(manifest).map_err(|e| corrupt(format!("manifest: {e}")))?;
        let region = bytes.len() - manifest_end;
        let mut blobs = Vec::with_capacity(parsed.blobs.len());
        for (i, entry) in parsed.blobs.iter().enumerate() {
            let range = usize::try_from(entry.offset)
                .ok()
                .zip(usize::try_from(entry.len).ok())
                .and_then(|(o, l)| Some((o, o.checked_add(l)?)))
                .filter(|&(_, end)| end <= region)
                .ok_or_else(|| {
                    corrupt(format!(
                        "blob #{i} ({} bytes at {}) lies beyond the file's end",
                        entry.len, entry.offset
                    ))
                })?;
            let (start, end) = (manifest_end + range.0, manifest_end + range.1);
            if hex(&sha256(&bytes[start..end])) != entry.sha256 {
                return Err(corrupt(format!("blob #{i}'s checksum does not match")));
            }
            blobs.push((start, end));
        }
        Ok(ArtifactReader {
            path: path.to_path_buf(),
            bytes,
            blobs,
            payload: parsed.payload,
        })
    }

    /// The file this artifact was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The payload as `T`; an error names what does not fit.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, ArtifactError> {
        T::deserialize(&self.payload).map_err(|e| self.manifest_error(e.to_string()))
    }

    /// The bytes of blob `id` (checked against its checksum when the file was read).
    pub fn blob(&self, id: BlobId) -> Result<&[u8], ArtifactError> {
        let (start, end) = *self
            .blobs
            .get(id.0)
            .ok_or(ArtifactError::NoSuchBlob { index: id.0 })?;
        Ok(&self.bytes[start..end])
    }

    /// An [`ArtifactError::Manifest`] for this file.
    pub fn manifest_error(&self, what: impl Into<String>) -> ArtifactError {
        ArtifactError::Manifest {
            path: self.path.clone(),
            what: what.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = ArtifactWriter::new();
        let a = w.add(vec![1, 2, 3]);
        let b = w.add((0..200u8).collect());
        assert_eq!(w.add(vec![1, 2, 3]), a, "equal blobs are stored once");
        w.to_bytes(&serde_json::json!({"a": a, "b": b}))
            .expect("a JSON value serializes")
    }

    #[test]
    fn blobs_and_payload_round_trip() {
        let r = ArtifactReader::from_bytes(Path::new("x"), sample()).expect("valid artifact");
        let p: serde_json::Value = r.payload().expect("JSON payload");
        let a: BlobId = serde_json::from_value(p["a"].clone()).expect("blob id");
        let b: BlobId = serde_json::from_value(p["b"].clone()).expect("blob id");
        assert_eq!(r.blob(a).expect("blob a"), &[1, 2, 3]);
        assert_eq!(r.blob(b).expect("blob b").len(), 200);
        assert!(matches!(
            r.blob(BlobId(7)),
            Err(ArtifactError::NoSuchBlob { index: 7 })
        ));
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error() {
        let bytes = sample();
        for len in 0..bytes.len() {
            let cut = bytes[..len].to_vec();
            let err = ArtifactReader::from_bytes(Path::new("x"), cut)
                .expect_err("a truncated artifact is refused");
            assert!(
                matches!(
                    err,
                    ArtifactError::Corrupt { .. } | ArtifactError::NotAnArtifact { .. }
                ),
                "{len}: {err}"
            );
        }
        // Every byte but the padding between blobs is covered by a check.
        let valid = ArtifactReader::from_bytes(Path::new("x"), bytes.clone()).expect("valid");
        let manifest_end = valid.blobs[0].0;
        let covered =
            |i: &usize| *i < manifest_end || valid.blobs.iter().any(|&(s, e)| (s..e).contains(i));
        for i in (0..bytes.len()).filter(covered) {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x40;
            assert!(
                ArtifactReader::from_bytes(Path::new("x"), flipped).is_err(),
                "flipping byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn a_newer_version_is_named() {
        let mut bytes = sample();
        bytes[8] = 9;
        let err =
            ArtifactReader::from_bytes(Path::new("m.hidet"), bytes).expect_err("unknown version");
        assert!(err.to_string().contains("version 9"), "{err}");
    }
}
