//! The kernel cache: keys, hits, concurrent builders, and compile errors.

use hidet_cpu::{CacheOutcome, Compiler, CpuError, CpuTarget, KernelCache};

fn source(tag: u64) -> String {
    format!(
        "int hidet_probe_{tag}(int x) {{ return x * {tag} + 1; }}\n\
         void probe__packed(void *const *args) {{ (void)args; }}\n"
    )
}

#[test]
fn second_request_is_a_hit_and_does_not_compile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::new(dir.path());
    let compiler = Compiler::system().expect("a C compiler is installed");
    let flags = CpuTarget::host().cflags();
    let src = source(17);
    let first = cache
        .get_or_compile(&src, compiler, &flags)
        .expect("compiles");
    assert_eq!(first.outcome, CacheOutcome::Compiled);
    assert!(first.library_path.is_file());
    assert_eq!(
        std::fs::read_to_string(&first.source_path).expect("source kept"),
        src
    );
    let expected_dir = dir
        .path()
        .join("kernels")
        .join(&first.key[..2])
        .join(&first.key);
    assert_eq!(first.dir, expected_dir);
    let second = cache
        .get_or_compile(&src, compiler, &flags)
        .expect("cached");
    assert_eq!(second.outcome, CacheOutcome::Hit);
    assert_eq!(second.library_path, first.library_path);
    // No temporary files are left next to the entry.
    let names: Vec<String> = std::fs::read_dir(&first.dir)
        .expect("entry dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["lib.so", "lib.so.sha256", "source.c"]);
}

#[test]
fn key_depends_on_source_flags_and_compiler_version() {
    let compiler = Compiler::system().expect("a C compiler is installed");
    let flags = CpuTarget::host().cflags();
    let base = KernelCache::key(&source(1), compiler, &flags);
    assert_eq!(base.len(), 64);
    assert_eq!(base, KernelCache::key(&source(1), compiler, &flags));
    assert_ne!(base, KernelCache::key(&source(2), compiler, &flags));
    let mut more_flags = flags.clone();
    more_flags.push("-DHIDET_TEST".to_string());
    assert_ne!(base, KernelCache::key(&source(1), compiler, &more_flags));
    let mut other = compiler.clone();
    other.version.push_str(" (patched)");
    assert_ne!(base, KernelCache::key(&source(1), &other, &flags));
}

#[test]
fn concurrent_builders_of_one_key_all_succeed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = Compiler::system().expect("a C compiler is installed");
    let flags = CpuTarget::host().cflags();
    let src = source(23);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let cache = KernelCache::new(dir.path());
                let (src, flags) = (&src, &flags);
                scope.spawn(move || cache.get_or_compile(src, compiler, flags))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    let libs: Vec<_> = results
        .into_iter()
        .map(|r| r.expect("every concurrent build succeeds"))
        .collect();
    assert!(libs.iter().all(|l| l.library_path == libs[0].library_path));
    assert!(libs.iter().any(|l| l.outcome == CacheOutcome::Compiled));
    // The library in place is complete: it loads.
    let module = hidet_ir::function::IRModule::new("probe", hidet_ir::function::Target::Cpu);
    hidet_cpu::CompiledModule::load(&module, &libs[0].library_path).expect("loads");
    let again = KernelCache::new(dir.path())
        .get_or_compile(&src, compiler, &flags)
        .expect("cached");
    assert_eq!(again.outcome, CacheOutcome::Hit);
}

#[test]
fn compile_error_shows_stderr_and_kept_source() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::new(dir.path());
    let compiler = Compiler::system().expect("a C compiler is installed");
    let src = "void broken__packed(void *const *args) { int x = ; }\n";
    let err = cache
        .get_or_compile(src, compiler, &CpuTarget::host().cflags())
        .expect_err("the source does not compile");
    let CpuError::CompileFailed {
        stderr,
        source_path,
        ..
    } = &err
    else {
        panic!("expected CompileFailed, got {err:?}");
    };
    assert!(stderr.contains("error"), "stderr: {stderr}");
    assert_eq!(std::fs::read_to_string(source_path).expect("kept"), src);
    let message = err.to_string();
    assert!(
        message.contains(&source_path.display().to_string()),
        "{message}"
    );
    assert!(message.contains(stderr.trim()), "{message}");
    assert!(!source_path.with_file_name("lib.so").exists());
}

/// A library overwritten with garbage, truncated, or missing its digest is rebuilt on the
/// next request (not returned as a hit), and is then intact again.
#[test]
fn damaged_entries_are_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::new(dir.path());
    let compiler = Compiler::system().expect("a C compiler is installed");
    let flags = CpuTarget::host().cflags();
    let src = source(23);
    let first = cache
        .get_or_compile(&src, compiler, &flags)
        .expect("compiles");
    let good = std::fs::read(&first.library_path).expect("library");
    let digest = first.library_path.with_extension("so.sha256");
    let damages: [(&str, &dyn Fn()); 3] = [
        ("garbage", &|| {
            std::fs::write(&first.library_path, b"not an ELF file").unwrap()
        }),
        ("truncated", &|| {
            std::fs::write(&first.library_path, &good[..good.len() / 2]).unwrap()
        }),
        ("no digest", &|| std::fs::remove_file(&digest).unwrap()),
    ];
    for (what, damage) in damages {
        damage();
        let again = cache
            .get_or_compile(&src, compiler, &flags)
            .expect("rebuilds");
        assert_eq!(again.outcome, CacheOutcome::Compiled, "{what}");
        assert_eq!(again.library_path, first.library_path, "{what}");
        let hit = cache
            .get_or_compile(&src, compiler, &flags)
            .expect("cached");
        assert_eq!(hit.outcome, CacheOutcome::Hit, "{what}");
    }
}
