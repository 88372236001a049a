//! The build pipeline: IR module to loaded library.

use crate::cache::write_atomically;
use crate::compile::Compiler;
use crate::error::CpuError;
use crate::module::CompiledModule;
use crate::options::BuildOptions;
use hidet_ir::function::{IRModule, Target};

/// Compiles `source`, a C translation unit implementing `module`'s CPU
/// kernels with the packed calling convention (see [`crate::module`]),
/// through the cache, and loads it. Signatures come from `module`.
pub fn build_from_source(
    module: &IRModule,
    source: &str,
    opts: &BuildOptions,
) -> Result<CompiledModule, CpuError> {
    if module.target != Target::Cpu {
        return Err(CpuError::Unsupported(format!(
            "module `{}` targets {:?}, not the CPU",
            module.name, module.target
        )));
    }
    if let Some(dir) = &opts.keep_source_dir {
        std::fs::create_dir_all(dir).map_err(|source| CpuError::Io {
            path: dir.clone(),
            source,
        })?;
        write_atomically(&dir.join(format!("{}.c", module.name)), source.as_bytes())?;
    }
    let compiler = Compiler::system()?;
    let cached = opts
        .cache()
        .get_or_compile(source, compiler, &opts.cflags())?;
    CompiledModule::load_cached(module, &cached)
}
