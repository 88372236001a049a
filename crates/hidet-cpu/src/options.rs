//! Options of the CPU build pipeline.

use crate::cache::KernelCache;
use crate::target::CpuTarget;
use std::path::PathBuf;

/// How [`crate::build`] compiles a module.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// When set, the generated C source is also written to
    /// `<dir>/<module name>.c` (the cache keeps its own copy regardless).
    pub keep_source_dir: Option<PathBuf>,
    /// Print the IR before and after lowering to stderr.
    pub dump_ir: bool,
    /// The cache to use; `None` means [`KernelCache::from_env`].
    pub cache: Option<KernelCache>,
    /// The CPU to compile for; `None` means the host.
    pub target: Option<CpuTarget>,
    /// Flags appended after the target's flags.
    pub extra_cflags: Vec<String>,
}

impl BuildOptions {
    /// The cache these options select.
    pub fn cache(&self) -> KernelCache {
        self.cache.clone().unwrap_or_else(KernelCache::from_env)
    }

    /// The target these options select.
    pub fn target(&self) -> &CpuTarget {
        self.target.as_ref().unwrap_or_else(|| CpuTarget::host())
    }

    /// The complete C compiler flags: the target's, then `extra_cflags`.
    pub fn cflags(&self) -> Vec<String> {
        let mut flags = self.target().cflags();
        flags.extend(self.extra_cflags.iter().cloned());
        flags
    }
}
