//! The content-addressed cubin/PTX cache: hits, misses on every key ingredient, damaged
//! entries rebuilt (or skipped when there is no compiler), lookups without a compiler,
//! concurrent builders. A counting stand-in compiler makes these run everywhere; the last
//! tests use the real NVRTC when it is installed and skip otherwise.

use hidet_cuda::cache::{CacheOutcome, CudaKernelCache, ImageCompiler};
use hidet_cuda::{Arch, CompileOptions, CudaError, ImageKind, KernelImage, Nvrtc};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A compiler whose image is a deterministic function of its inputs; counts its runs.
struct CountingCompiler {
    version: (i32, i32),
    kind: ImageKind,
    runs: AtomicUsize,
}

impl CountingCompiler {
    fn new(version: (i32, i32), kind: ImageKind) -> CountingCompiler {
        CountingCompiler {
            version,
            kind,
            runs: AtomicUsize::new(0),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

impl ImageCompiler for CountingCompiler {
    fn version(&self) -> (i32, i32) {
        self.version
    }

    fn image_kind(&self) -> ImageKind {
        self.kind
    }

    fn compile_image(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<KernelImage, CudaError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(KernelImage {
            kind: self.kind,
            arch,
            bytes: format!(
                "{name}|{arch}|{:?}|{:?}|{}",
                self.version, options.extra, source
            )
            .into_bytes(),
            log: String::new(),
        })
    }
}

const SOURCE: &str = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }";

fn image_file(kernel: &hidet_cuda::CachedKernel) -> std::path::PathBuf {
    kernel
        .dir
        .join(format!("kernel.{}", kernel.image.kind.extension()))
}

#[test]
fn a_second_request_hits_and_every_key_ingredient_misses() {
    let root = tempfile::tempdir().unwrap();
    let cache = CudaKernelCache::new(root.path());
    let nvrtc = CountingCompiler::new((12, 9), ImageKind::Cubin);
    let opts = CompileOptions::default();

    let first = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(first.outcome, CacheOutcome::Compiled);
    assert!(first.dir.starts_with(root.path().join("cuda")));
    assert!(image_file(&first).is_file());
    assert!(first.dir.join("source.cu").is_file());
    let again = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(again.outcome, CacheOutcome::Hit);
    assert_eq!(again.image.bytes, first.image.bytes);
    assert_eq!(again.key, first.key);
    assert_eq!(again.nvrtc_version, (12, 9));
    assert_eq!(again.name, "k");
    assert_eq!(nvrtc.runs(), 1, "a hit does not compile");

    // Another source, architecture, option set, NVRTC version or image kind is another key.
    let other_source = cache
        .get_or_compile(&nvrtc, "k", &format!("{SOURCE}\n"), Arch::SM90, &opts)
        .unwrap();
    let other_arch = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM80, &opts)
        .unwrap();
    let with_option = CompileOptions {
        extra: vec!["-DFOO=1".to_string()],
        ..CompileOptions::default()
    };
    let other_options = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &with_option)
        .unwrap();
    let debug = CompileOptions {
        debug: true,
        ..CompileOptions::default()
    };
    let other_debug = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &debug)
        .unwrap();
    let newer = CountingCompiler::new((13, 0), ImageKind::Cubin);
    let other_version = cache
        .get_or_compile(&newer, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    let ptx_only = CountingCompiler::new((12, 9), ImageKind::Ptx);
    let other_kind = cache
        .get_or_compile(&ptx_only, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    let mut keys = vec![
        first.key.clone(),
        other_source.key,
        other_arch.key,
        other_options.key,
        other_debug.key,
        other_version.key,
        other_kind.key,
    ];
    for outcome in [
        other_source.outcome,
        other_arch.outcome,
        other_options.outcome,
        other_debug.outcome,
        other_version.outcome,
        other_kind.outcome,
    ] {
        assert_eq!(outcome, CacheOutcome::Compiled);
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 7, "seven distinct entries");
    assert_eq!(other_arch.image.arch, Arch::SM80);
    assert_eq!(other_kind.image.kind, ImageKind::Ptx);
    // The name is a label, not part of the key.
    let renamed = cache
        .get_or_compile(&nvrtc, "renamed", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(renamed.outcome, CacheOutcome::Hit);
}

#[test]
fn damaged_entries_are_detected_and_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let cache = CudaKernelCache::new(root.path());
    let nvrtc = CountingCompiler::new((12, 9), ImageKind::Cubin);
    let opts = CompileOptions::default();
    let good = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    let image = image_file(&good);

    // Overwritten bytes of the same length.
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[3] ^= 0x5a;
    std::fs::write(&image, &bytes).unwrap();
    let rebuilt = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(rebuilt.outcome, CacheOutcome::Compiled);
    assert_eq!(rebuilt.image.bytes, good.image.bytes);
    assert_eq!(
        std::fs::read(&image).unwrap(),
        good.image.bytes,
        "repaired on disk"
    );

    // A truncated image.
    std::fs::write(&image, &good.image.bytes[..5]).unwrap();
    let rebuilt = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(rebuilt.outcome, CacheOutcome::Compiled);

    // A missing digest.
    std::fs::remove_file(good.dir.join("kernel.sha256")).unwrap();
    let rebuilt = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(rebuilt.outcome, CacheOutcome::Compiled);

    // Garbled metadata.
    std::fs::write(good.dir.join("meta.txt"), "nonsense").unwrap();
    let rebuilt = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(rebuilt.outcome, CacheOutcome::Compiled);
    assert_eq!(nvrtc.runs(), 5);

    let hit = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(hit.outcome, CacheOutcome::Hit, "healthy again");
    assert_eq!(nvrtc.runs(), 5);
}

#[test]
fn entries_compiled_elsewhere_are_found_without_a_compiler() {
    let root = tempfile::tempdir().unwrap();
    let opts = CompileOptions::default();
    {
        // "Here": a machine with NVRTC fills a cache root...
        let cache = CudaKernelCache::new(root.path());
        let old = CountingCompiler::new((12, 4), ImageKind::Cubin);
        let new = CountingCompiler::new((12, 9), ImageKind::Cubin);
        cache
            .get_or_compile(&old, "k", SOURCE, Arch::SM90, &opts)
            .unwrap();
        cache
            .get_or_compile(&new, "k", SOURCE, Arch::SM90, &opts)
            .unwrap();
    }
    // ...which is carried (copied) to "there", a machine without NVRTC.
    let carried = tempfile::tempdir().unwrap();
    copy_tree(root.path(), carried.path());
    let cache = CudaKernelCache::new(carried.path());
    let found = cache
        .find_compiled(SOURCE, Arch::SM90, &opts)
        .unwrap()
        .expect("carried entry");
    assert_eq!(found.outcome, CacheOutcome::Hit);
    assert_eq!(found.nvrtc_version, (12, 9), "the newest NVRTC wins");
    assert_eq!(found.image.arch, Arch::SM90);
    assert!(found.image.bytes.starts_with(b"k|sm_90|(12, 9)"));
    assert!(cache
        .find_compiled(SOURCE, Arch::SM80, &opts)
        .unwrap()
        .is_none());
    assert!(cache
        .find_compiled("other source", Arch::SM90, &opts)
        .unwrap()
        .is_none());

    // A damaged newest entry is skipped in favour of the intact older one.
    let newest = found.dir.join("kernel.cubin");
    std::fs::write(&newest, b"garbage").unwrap();
    let fallback = cache
        .find_compiled(SOURCE, Arch::SM90, &opts)
        .unwrap()
        .expect("the older intact entry");
    assert_eq!(fallback.nvrtc_version, (12, 4));

    // An empty cache finds nothing and creates nothing.
    let empty = tempfile::tempdir().unwrap();
    let none = CudaKernelCache::new(empty.path().join("absent"));
    assert!(none
        .find_compiled(SOURCE, Arch::SM90, &opts)
        .unwrap()
        .is_none());
    assert!(!empty.path().join("absent").exists());
}

#[test]
fn concurrent_builders_of_one_key_all_succeed() {
    let root = tempfile::tempdir().unwrap();
    let cache = CudaKernelCache::new(root.path());
    let nvrtc = CountingCompiler::new((12, 9), ImageKind::Cubin);
    let opts = CompileOptions::default();
    let images: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    cache
                        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
                        .unwrap()
                        .image
                        .bytes
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(images.windows(2).all(|w| w[0] == w[1]));
    let hit = cache
        .get_or_compile(&nvrtc, "k", SOURCE, Arch::SM90, &opts)
        .unwrap();
    assert_eq!(hit.outcome, CacheOutcome::Hit);
    assert_eq!(hit.image.bytes, images[0]);
}

#[test]
fn the_cache_root_follows_hidet_cache_dir() {
    // Read-only check of the convention shared with the CPU cache: the variable, when set,
    // is the root; the CUDA entries live in its `cuda` directory.
    let root = hidet_cuda::cache::default_cache_root();
    match std::env::var_os(hidet_cuda::cache::CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => assert_eq!(root, std::path::PathBuf::from(dir)),
        _ => assert!(root.ends_with("hidet") || root.ends_with("hidet-cache")),
    }
    let cache = CudaKernelCache::new("/some/root");
    let key = "ab".repeat(32);
    assert_eq!(
        cache.entry_dir(&key),
        std::path::Path::new("/some/root/cuda/ab").join(&key)
    );
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// NVRTC when installed; `None` (the test then skips, saying so) otherwise.
fn nvrtc_or_skip() -> Option<&'static Nvrtc> {
    match Nvrtc::global() {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("skipped: NVRTC not found ({e})");
            None
        }
    }
}

#[test]
fn real_nvrtc_images_are_cached_and_found_again() {
    let Some(nvrtc) = nvrtc_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let cache = CudaKernelCache::new(root.path());
    let opts = CompileOptions::default();
    for arch in [Arch::SM80, Arch::SM90] {
        let compiled = cache
            .get_or_compile(nvrtc, "k", SOURCE, arch, &opts)
            .unwrap();
        assert_eq!(compiled.outcome, CacheOutcome::Compiled);
        assert_eq!(compiled.image.kind, nvrtc.image_kind());
        assert_eq!(compiled.nvrtc_version, nvrtc.version());
        let hit = cache
            .get_or_compile(nvrtc, "k", SOURCE, arch, &opts)
            .unwrap();
        assert_eq!(hit.outcome, CacheOutcome::Hit);
        assert_eq!(hit.image.bytes, compiled.image.bytes);
        let found = cache.find_compiled(SOURCE, arch, &opts).unwrap().unwrap();
        assert_eq!(found.key, compiled.key);
        let resolved = cache.resolve("k", SOURCE, arch, &opts).unwrap();
        assert_eq!(resolved.outcome, CacheOutcome::Hit);
    }
}
