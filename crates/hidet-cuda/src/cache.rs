//! The content-addressed on-disk cache of compiled CUDA kernels (cubins and PTX).
//!
//! The cache lives under the same root as the CPU's kernel cache (`$HIDET_CACHE_DIR`, else
//! `hidet` in the user's cache directory, else `hidet-cache` in the temporary directory),
//! in its own `cuda/` directory, so a root compiled on a machine without a GPU can be
//! carried, whole, to one:
//!
//! ```text
//! <root>/cuda/<first 2 hex digits>/<key>/source.cu       the CUDA C compiled
//!                                       /meta.txt        name, architecture, NVRTC version, kind
//!                                       /kernel.sha256   SHA-256 of the image
//!                                       /kernel.cubin    or kernel.ptx: the image
//! <root>/cuda/by-source/<source key>/<key>               one empty marker per compiled entry
//! ```
//!
//! The *source key* is the SHA-256 of [`CACHE_FORMAT_VERSION`], the source, the
//! architecture and the caller's [`CompileOptions`] (its include directories, extra
//! options and debug flag; not the CUDA header directory found on the machine, which
//! belongs to the NVRTC installation); the entry *key* adds the NVRTC version and the image
//! kind. [`CudaKernelCache::get_or_compile`] looks up the exact key of the NVRTC at hand;
//! [`CudaKernelCache::find_compiled`] finds an entry for the source key compiled by any NVRTC
//! (through the `by-source` markers), which is what a machine without NVRTC (a lent GPU
//! machine) uses; [`CudaKernelCache::resolve`] chooses between the two.
//!
//! Every file is written to a temporary file in its directory and renamed into place, the
//! image last (after its digest), then the marker: a reader in this or another process sees
//! either no image or a complete one with its digest, and concurrent builders of one key all
//! succeed. An image whose bytes do not match its digest (overwritten, truncated) is
//! reported on stderr and rebuilt by [`CudaKernelCache::get_or_compile`], and skipped by
//! [`CudaKernelCache::find_compiled`].

use crate::arch::Arch;
use crate::error::CudaError;
use crate::image::{ImageKind, KernelImage};
use crate::nvrtc::{CompileOptions, Nvrtc};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bumped whenever the layout or meaning of cache entries changes, so old entries are never
/// reused.
pub const CACHE_FORMAT_VERSION: u32 = 1;

/// The environment variable that overrides the cache root (shared with the CPU cache).
pub const CACHE_DIR_ENV: &str = "HIDET_CACHE_DIR";

/// Whether an image came from the cache or was compiled by this call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The image was in the cache and intact; NVRTC did not run.
    Hit,
    /// NVRTC ran and the image was stored (a miss, or a damaged entry rebuilt).
    Compiled,
}

/// A complete, verified cache entry with its image read into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedKernel {
    /// The hex SHA-256 key of the entry.
    pub key: String,
    /// The entry directory.
    pub dir: PathBuf,
    /// The kernel (translation unit) name given when it was compiled.
    pub name: String,
    /// NVRTC's `(major, minor)` version that compiled it.
    pub nvrtc_version: (i32, i32),
    /// The image, ready for [`crate::runtime::Gpu::load_module`].
    pub image: KernelImage,
    pub outcome: CacheOutcome,
}

/// A CUDA kernel cache rooted at a directory (the cache root; entries go to `<root>/cuda`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernelCache {
    root: PathBuf,
}

impl CudaKernelCache {
    /// A cache rooted at `root` (created on first store).
    pub fn new(root: impl Into<PathBuf>) -> CudaKernelCache {
        CudaKernelCache { root: root.into() }
    }

    /// The cache at the default root (see the module docs).
    pub fn from_env() -> CudaKernelCache {
        CudaKernelCache::new(default_cache_root())
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key of `source` for `arch` and `options`, independent of the compiler.
    pub fn source_key(source: &str, arch: Arch, options: &CompileOptions) -> String {
        let mut h = KeyHasher::default();
        h.field(&CACHE_FORMAT_VERSION.to_le_bytes());
        h.field(source.as_bytes());
        h.field(arch.real_name().as_bytes());
        for dir in &options.include_dirs {
            h.field(dir.to_string_lossy().as_bytes());
        }
        h.field(b"--");
        for option in &options.extra {
            h.field(option.as_bytes());
        }
        h.field(&[u8::from(options.debug)]);
        h.finish()
    }

    /// The entry key: the source key, NVRTC's version and the image kind.
    pub fn key(source_key: &str, nvrtc_version: (i32, i32), kind: ImageKind) -> String {
        let mut h = KeyHasher::default();
        h.field(source_key.as_bytes());
        h.field(&nvrtc_version.0.to_le_bytes());
        h.field(&nvrtc_version.1.to_le_bytes());
        h.field(kind.extension().as_bytes());
        h.finish()
    }

    /// The entry directory of `key`.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        let prefix = key.get(..2).unwrap_or(key);
        self.cuda_dir().join(prefix).join(key)
    }

    fn cuda_dir(&self) -> PathBuf {
        self.root.join("cuda")
    }

    fn markers_dir(&self, source_key: &str) -> PathBuf {
        self.cuda_dir().join("by-source").join(source_key)
    }

    /// The image of `source` for `arch` compiled by `nvrtc` ([`Nvrtc::compile_image`]): from
    /// the cache when its entry is present and intact, else compiled and stored. A damaged
    /// entry is rebuilt, with a warning on stderr naming it. `name` names the program in
    /// NVRTC's messages and the entry's metadata.
    pub fn get_or_compile<C: ImageCompiler + ?Sized>(
        &self,
        nvrtc: &C,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<CachedKernel, CudaError> {
        let source_key = CudaKernelCache::source_key(source, arch, options);
        let key = CudaKernelCache::key(&source_key, nvrtc.version(), nvrtc.image_kind());
        let dir = self.entry_dir(&key);
        match read_entry(&dir, &key) {
            Ok(Some(found)) if found.image.arch == arch => return Ok(found),
            Ok(Some(_)) | Ok(None) => {}
            Err(problem) => eprintln!(
                "warning: CUDA kernel cache entry {} is damaged ({problem}); rebuilding it",
                dir.display()
            ),
        }
        let image = nvrtc.compile_image(name, source, arch, options)?;
        self.store(&source_key, &key, name, source, nvrtc.version(), &image)?;
        Ok(CachedKernel {
            key,
            dir,
            name: name.to_string(),
            nvrtc_version: nvrtc.version(),
            image,
            outcome: CacheOutcome::Compiled,
        })
    }

    /// An intact entry for `source`, `arch` and `options` compiled by any NVRTC (the newest
    /// NVRTC version among the intact ones), or `None`. Damaged entries are skipped with a
    /// warning on stderr. Needs no NVRTC: this is how a machine without one uses kernels
    /// compiled elsewhere.
    pub fn find_compiled(
        &self,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<Option<CachedKernel>, CudaError> {
        let source_key = CudaKernelCache::source_key(source, arch, options);
        let markers = self.markers_dir(&source_key);
        let entries = match std::fs::read_dir(&markers) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(CudaError::Io {
                    action: "reading",
                    path: markers,
                    source,
                })
            }
        };
        let mut best: Option<CachedKernel> = None;
        for entry in entries.filter_map(Result::ok) {
            let key = entry.file_name().to_string_lossy().into_owned();
            if !is_hex_key(&key) {
                continue;
            }
            let dir = self.entry_dir(&key);
            match read_entry(&dir, &key) {
                Ok(Some(found)) if found.image.arch == arch => {
                    if best
                        .as_ref()
                        .is_none_or(|b| found.nvrtc_version > b.nvrtc_version)
                    {
                        best = Some(found);
                    }
                }
                Ok(_) => {}
                Err(problem) => eprintln!(
                    "warning: CUDA kernel cache entry {} is damaged ({problem}); skipping it",
                    dir.display()
                ),
            }
        }
        Ok(best)
    }

    /// The image of `source`: compiled through the cache with the process-wide NVRTC
    /// ([`Nvrtc::global`]) when one is found, else an entry compiled elsewhere
    /// ([`CudaKernelCache::find_compiled`]); [`CudaError::NotCached`] when neither exists.
    pub fn resolve(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<CachedKernel, CudaError> {
        match Nvrtc::global() {
            Ok(nvrtc) => self.get_or_compile(nvrtc, name, source, arch, options),
            Err(nvrtc_error) => {
                self.find_compiled(source, arch, options)?
                    .ok_or_else(|| CudaError::NotCached {
                        name: name.to_string(),
                        arch: arch.to_string(),
                        root: self.root.clone(),
                        nvrtc: Box::new(nvrtc_error),
                    })
            }
        }
    }

    /// Writes a complete entry (see the module docs for the order) and its marker.
    fn store(
        &self,
        source_key: &str,
        key: &str,
        name: &str,
        source: &str,
        nvrtc_version: (i32, i32),
        image: &KernelImage,
    ) -> Result<(), CudaError> {
        let dir = self.entry_dir(key);
        create_dir(&dir)?;
        write_atomically(&dir.join(SOURCE), source.as_bytes())?;
        let meta = Meta {
            name: name.to_string(),
            arch: image.arch,
            nvrtc_version,
            kind: image.kind,
        };
        write_atomically(&dir.join(META), meta.render().as_bytes())?;
        write_atomically(&dir.join(DIGEST), hex_sha256(&image.bytes).as_bytes())?;
        write_atomically(&image_path(&dir, image.kind), &image.bytes)?;
        let markers = self.markers_dir(source_key);
        create_dir(&markers)?;
        write_atomically(&markers.join(key), b"")?;
        Ok(())
    }
}

/// What the cache needs of a compiler: [`Nvrtc`] implements it.
pub trait ImageCompiler {
    /// The `(major, minor)` version, part of every entry key.
    fn version(&self) -> (i32, i32);
    /// The kind of image [`ImageCompiler::compile_image`] produces.
    fn image_kind(&self) -> ImageKind;
    /// Compiles `source` for `arch` into an image of kind [`ImageCompiler::image_kind`].
    fn compile_image(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<KernelImage, CudaError>;
}

impl ImageCompiler for Nvrtc {
    fn version(&self) -> (i32, i32) {
        Nvrtc::version(self)
    }

    fn image_kind(&self) -> ImageKind {
        Nvrtc::image_kind(self)
    }

    fn compile_image(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<KernelImage, CudaError> {
        Nvrtc::compile_image(self, name, source, arch, options)
    }
}

/// The file names of an entry.
const SOURCE: &str = "source.cu";
const META: &str = "meta.txt";
const DIGEST: &str = "kernel.sha256";

fn image_path(dir: &Path, kind: ImageKind) -> PathBuf {
    dir.join(format!("kernel.{}", kind.extension()))
}

/// What `meta.txt` records: `key value` lines.
struct Meta {
    name: String,
    arch: Arch,
    nvrtc_version: (i32, i32),
    kind: ImageKind,
}

impl Meta {
    fn render(&self) -> String {
        format!(
            "name {}\narch {}\nnvrtc {}.{}\nkind {}\n",
            self.name, self.arch, self.nvrtc_version.0, self.nvrtc_version.1, self.kind
        )
    }

    fn parse(text: &str) -> Result<Meta, String> {
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
                .ok_or_else(|| format!("no {key} line"))
        };
        let arch = field("arch")?.parse::<Arch>().map_err(|e| e.to_string())?;
        let nvrtc = field("nvrtc")?;
        let (major, minor) = nvrtc
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or_else(|| format!("bad NVRTC version {nvrtc:?}"))?;
        let kind = field("kind")?;
        let kind = ImageKind::from_extension(kind).ok_or_else(|| format!("bad kind {kind:?}"))?;
        Ok(Meta {
            name: field("name")?.to_string(),
            arch,
            nvrtc_version: (major, minor),
            kind,
        })
    }
}

/// The entry at `dir`: `Ok(None)` when it holds no image yet, `Err(problem)` when it is
/// damaged (unreadable metadata, an image that does not match its digest).
fn read_entry(dir: &Path, key: &str) -> Result<Option<CachedKernel>, String> {
    let meta_path = dir.join(META);
    let meta_text = match std::fs::read_to_string(&meta_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("metadata unreadable: {e}")),
    };
    let meta = Meta::parse(&meta_text).map_err(|e| format!("metadata: {e}"))?;
    let path = image_path(dir, meta.kind);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("image unreadable: {e}")),
    };
    let recorded =
        std::fs::read_to_string(dir.join(DIGEST)).map_err(|e| format!("no digest: {e}"))?;
    if hex_sha256(&bytes) != recorded.trim() {
        return Err(format!(
            "{} does not match its digest",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
    }
    Ok(Some(CachedKernel {
        key: key.to_string(),
        dir: dir.to_path_buf(),
        name: meta.name,
        nvrtc_version: meta.nvrtc_version,
        image: KernelImage {
            kind: meta.kind,
            arch: meta.arch,
            bytes,
            log: String::new(),
        },
        outcome: CacheOutcome::Hit,
    }))
}

/// SHA-256 over length-prefixed fields, as lowercase hex.
#[derive(Default)]
struct KeyHasher(Sha256);

impl KeyHasher {
    fn field(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    fn finish(self) -> String {
        to_hex(&self.0.finalize())
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_sha256(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

fn is_hex_key(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn create_dir(dir: &Path) -> Result<(), CudaError> {
    std::fs::create_dir_all(dir).map_err(|source| CudaError::Io {
        action: "creating directory",
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so
/// readers never see a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CudaError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| CudaError::Io {
            action,
            path,
            source,
        }
    };
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io("creating a file in", dir))?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_data())
        .map_err(io("writing", file.path()))?;
    file.persist(path)
        .map_err(|e| io("renaming into", path)(e.error))?;
    Ok(())
}

/// The default cache root (see the module docs).
pub fn default_cache_root() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()
            .map(|d| d.join("hidet"))
            .unwrap_or_else(|| std::env::temp_dir().join("hidet-cache")),
    }
}
