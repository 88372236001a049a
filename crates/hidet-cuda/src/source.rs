//! From an IR module to CUDA C and PTX: lowering, the CUDA C dialect, NVRTC.

use crate::arch::Arch;
use crate::error::CudaError;
use crate::nvrtc::{compile_to_ptx, CompileOptions, Ptx};
use hidet_codegen::{emit_module, CudaDialect};
use hidet_ir::function::IRModule;
use hidet_ir::passes::lower_module;
use hidet_ir::verify::verify_module;

/// Verifies `module` (types, definitions before use, scopes, launch shape
/// against the mappings: errors name the offending statement), lowers it
/// (task mappings to loops and index arithmetic, then simplification) and
/// emits it as one CUDA C translation unit that NVRTC
/// compiles as is (host launchers are guarded by `!defined(__CUDACC_RTC__)`).
pub fn emit_cuda(module: &IRModule) -> Result<String, CudaError> {
    verify_module(module)?;
    let lowered = lower_module(module.clone())?;
    Ok(emit_module(&lowered, &CudaDialect)?)
}

/// [`emit_cuda`] followed by NVRTC for `arch`; returns the source and the PTX.
pub fn module_to_ptx(
    module: &IRModule,
    arch: Arch,
    options: &CompileOptions,
) -> Result<(String, Ptx), CudaError> {
    let source = emit_cuda(module)?;
    let ptx = compile_to_ptx(&module.name, &source, arch, options)?;
    Ok((source, ptx))
}
