//! The build pipeline: IR module to loaded library.

use crate::cache::{write_atomically, CacheOutcome};
use crate::compile::Compiler;
use crate::error::CpuError;
use crate::module::CompiledModule;
use crate::options::BuildOptions;
use hidet_codegen::{emit_module, CDialect};
use hidet_ir::function::{Function, IRModule, Target};
use hidet_ir::passes::{lower_function, lower_module};
use hidet_ir::verify::verify_module;

/// Builds `module` for the CPU: verifies it (an invalid module fails here,
/// with the verifier's message naming the statement, before any C exists),
/// lowers it (task mappings to loops and index arithmetic,
/// simplification), emits C, compiles it through the kernel cache and
/// loads it. Kernel signatures are those of `module`.
pub fn build(module: IRModule, opts: &BuildOptions) -> Result<CompiledModule, CpuError> {
    let source = emit_source(&module, opts)?;
    build_from_source(&module, &source, opts)
}

/// The C translation unit of `module`: the first half of [`build`] (verification, lowering,
/// C emission), without compiling anything.
pub fn emit_source(module: &IRModule, opts: &BuildOptions) -> Result<String, CpuError> {
    check_target(module)?;
    if opts.dump_ir {
        eprintln!(
            "// IR of module `{}` before lowering\n{module}",
            module.name
        );
    }
    verify_module(module).map_err(|e| CpuError::Pipeline {
        stage: "IR verification",
        message: e.to_string(),
    })?;
    let lowered = lower_module(module.clone()).map_err(|e| CpuError::Pipeline {
        stage: "lowering",
        message: e.to_string(),
    })?;
    if opts.dump_ir {
        eprintln!(
            "// IR of module `{}` after lowering\n{lowered}",
            lowered.name
        );
    }
    emit_module(&lowered, &CDialect).map_err(|e| CpuError::Pipeline {
        stage: "C code generation",
        message: e.to_string(),
    })
}

/// The C translation unit of `module`, whose functions are lowered already
/// ([`hidet_ir::passes::lower_function`]): C emission alone.
pub fn emit_lowered_source(module: &IRModule) -> Result<String, CpuError> {
    check_target(module)?;
    emit_module(module, &CDialect).map_err(|e| CpuError::Pipeline {
        stage: "C code generation",
        message: e.to_string(),
    })
}

/// `function`, a CPU kernel, verified and lowered as [`emit_source`] verifies and lowers a
/// module's functions.
pub fn verify_and_lower(function: Function) -> Result<Function, CpuError> {
    let mut module = IRModule::new(function.name.clone(), Target::Cpu);
    module.functions.push(function);
    verify_module(&module).map_err(|e| CpuError::Pipeline {
        stage: "IR verification",
        message: e.to_string(),
    })?;
    let function = module
        .functions
        .pop()
        .expect("the module holds the one function pushed above");
    lower_function(function).map_err(|e| CpuError::Pipeline {
        stage: "lowering",
        message: e.to_string(),
    })
}

fn check_target(module: &IRModule) -> Result<(), CpuError> {
    if module.target == Target::Cpu {
        Ok(())
    } else {
        Err(CpuError::Unsupported(format!(
            "module `{}` targets {:?}, not the CPU",
            module.name, module.target
        )))
    }
}

/// Compiles `source`, a C translation unit implementing `module`'s CPU
/// kernels with the packed calling convention (see [`crate::module`]),
/// through the cache, and loads it (a cached library that fails to load is rebuilt, with a
/// warning). Signatures come from `module`.
pub fn build_from_source(
    module: &IRModule,
    source: &str,
    opts: &BuildOptions,
) -> Result<CompiledModule, CpuError> {
    check_target(module)?;
    if let Some(dir) = &opts.keep_source_dir {
        std::fs::create_dir_all(dir).map_err(|source| CpuError::Io {
            path: dir.clone(),
            source,
        })?;
        write_atomically(&dir.join(format!("{}.c", module.name)), source.as_bytes())?;
    }
    let compiler = Compiler::system()?;
    let cache = opts.cache();
    let flags = opts.cflags();
    let cached = cache.get_or_compile(source, compiler, &flags)?;
    let loaded = match CompiledModule::load_cached(module, &cached) {
        Err(error @ CpuError::Load { .. }) if cached.outcome == CacheOutcome::Hit => {
            eprintln!(
                "warning: cannot load the cached kernel library {} ({error}); rebuilding it",
                cached.library_path.display()
            );
            CompiledModule::load_cached(module, &cache.rebuild(source, compiler, &flags)?)?
        }
        loaded => loaded?,
    };
    Ok(loaded.compiled_for(opts.target()))
}
