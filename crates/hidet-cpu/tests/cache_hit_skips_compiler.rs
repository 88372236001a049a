//! A cache hit does not invoke the C compiler (its own test binary, so no
//! other test compiles concurrently).

use hidet_cpu::{compiler_invocations, CacheOutcome, Compiler, CpuTarget, KernelCache};

#[test]
fn cache_hit_does_not_invoke_the_compiler() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = KernelCache::new(dir.path());
    let compiler = Compiler::system().expect("a C compiler is installed");
    let flags = CpuTarget::host().cflags();
    let src = "int hidet_hit_probe(int x) { return 3 * x; }\n";
    let before = compiler_invocations();
    let first = cache
        .get_or_compile(src, compiler, &flags)
        .expect("compiles");
    assert_eq!(first.outcome, CacheOutcome::Compiled);
    assert_eq!(compiler_invocations(), before + 1);
    for _ in 0..3 {
        let again = KernelCache::new(dir.path())
            .get_or_compile(src, compiler, &flags)
            .expect("cached");
        assert_eq!(again.outcome, CacheOutcome::Hit);
    }
    assert_eq!(compiler_invocations(), before + 1);
}
