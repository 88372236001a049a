//! The CUDA C dialect: kernels using each CUDA construct are emitted from IR,
//! compiled by NVRTC for sm_80 and sm_90 and assembled by `ptxas` (which
//! checks the inline PTX operands that NVRTC passes through unchecked).
//! Fails (never skips) when NVRTC or ptxas is missing. The kernels are built in
//! `common/dialect_kernels.rs`, which `sim_constructs.rs` runs in the GPU simulator.

use crate::common;

use common::dialect_kernels::{
    asserts, cp_async_module, cpu_only_kernel, dynamic_shared, half_math, host_launcher,
    ldmatrix_module, math_functions, mma_module, parallel_loop_kernel, shuffles, vectors,
    MMA_VARIANTS,
};
use common::{require_nvrtc, require_ptxas};
use hidet_cuda::ptxas::assemble_with;
use hidet_cuda::{emit_cuda, Arch, CompileOptions, CudaError};
use hidet_ir::prelude::*;

/// Emits `module`, compiles it for sm_80 and sm_90 and assembles the PTX;
/// returns the source. Every kernel must be reported by ptxas without spills.
fn compile_everywhere(module: &IRModule) -> String {
    let nvrtc = require_nvrtc();
    let ptxas = require_ptxas();
    let source = emit_cuda(module).unwrap_or_else(|e| panic!("{}: {e}", module.name));
    for arch in [Arch::SM80, Arch::SM90] {
        let ptx = nvrtc
            .compile_to_ptx(&module.name, &source, arch, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n--- source ---\n{source}"));
        let report = assemble_with(&ptxas, &module.name, &ptx)
            .unwrap_or_else(|e| panic!("{e}\n--- source ---\n{source}"));
        for f in &module.functions {
            if let FunctionKind::CudaKernel(_) = f.kind {
                let k = report
                    .kernel(&f.name)
                    .unwrap_or_else(|| panic!("no kernel {} in {report:?}", f.name));
                assert!(k.is_entry && !k.spills(), "{}: {k:?}", f.name);
            }
        }
    }
    source
}

#[test]
fn warp_shuffles_of_every_kind_and_type() {
    let module = shuffles();
    let src = compile_everywhere(&module);
    assert!(
        src.contains("__shfl_xor_sync(0xffffffffu, vf, 16, 32)"),
        "{src}"
    );
    assert!(src.contains("__shfl_down_sync(0xffffffffu,"));
    assert!(src.contains("__shfl_up_sync(0xffffffffu,"));
    assert!(src.contains("__shfl_sync(0xffffffffu,"));
    assert!(src.contains("__syncwarp()"));
}

#[test]
fn fp16_and_bf16_storage_math_casts_and_constants() {
    let module = half_math();
    let src = compile_everywhere(&module);
    assert!(src.contains("#include <cuda_fp16.h>") && src.contains("#include <cuda_bf16.h>"));
    assert!(
        src.contains("half* __restrict__ xh") && src.contains("__nv_bfloat16* __restrict__ xb")
    );
    assert!(
        src.contains("__ushort_as_half((unsigned short)0x2e66u)"),
        "0.1 in f16: {src}"
    );
    assert!(src.contains("__hfma("));
}

#[test]
fn fp32_and_fp64_math_functions() {
    for dtype in [DataType::F32, DataType::F64] {
        let module = math_functions(dtype);
        let src = compile_everywhere(&module);
        assert!(
            src.contains("hidet_floordiv_i32"),
            "negative operands need floor division"
        );
    }
}

#[test]
fn mma_sync_variants_assemble() {
    let ptx = [
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    ];
    for ((shape, input, acc, a_len, b_len, c_len), ptx) in MMA_VARIANTS.into_iter().zip(ptx) {
        let src = compile_everywhere(&mma_module(shape, input, acc, a_len, b_len, c_len));
        assert!(src.contains(ptx), "{ptx} missing from\n{src}");
    }
}

#[test]
fn unsupported_mma_is_a_typed_codegen_error() {
    let module = mma_module(MmaShape::M16N8K16, DataType::F32, DataType::F32, 4, 2, 4);
    match emit_cuda(&module) {
        Err(CudaError::Codegen(e)) => assert!(e.to_string().contains("mma"), "{e}"),
        other => panic!("expected a codegen error, got {other:?}"),
    }
}

#[test]
fn ldmatrix_from_shared_memory() {
    for (count, trans) in [(4u32, false), (2, true), (1, false)] {
        let module = ldmatrix_module(count, trans, 8);
        let src = compile_everywhere(&module);
        let t = if trans { ".trans" } else { "" };
        assert!(src.contains(&format!(
            "ldmatrix.sync.aligned.m8n8.x{count}{t}.shared.b16"
        )));
        assert!(src.contains("__cvta_generic_to_shared"));
    }
}

#[test]
fn cp_async_with_zero_fill_commit_and_wait() {
    let module = cp_async_module(8);
    let src = compile_everywhere(&module);
    assert!(src.contains("cp.async.cg.shared.global [%0], [%1], 16, %2;"));
    assert!(src.contains("cp.async.ca.shared.global [%0], [%1], 8, %2;"));
    assert!(src.contains("cp.async.commit_group;") && src.contains("cp.async.wait_group 0;"));
}

#[test]
fn vector_loads_stores_and_float4_arithmetic() {
    let module = vectors();
    let src = compile_everywhere(&module);
    assert!(src.contains("float4 v = hidet_load_f32x4("), "{src}");
    assert!(src.contains("make_float4(2e0f, 2e0f, 2e0f, 2e0f)"));
    assert!(src.contains("half2 hv"));
}

#[test]
fn dynamic_shared_memory_views_and_launch_bounds() {
    let module = dynamic_shared();
    let src = compile_everywhere(&module);
    assert!(
        src.contains("extern __shared__ __align__(16) unsigned char"),
        "{src}"
    );
    assert!(src.contains("__launch_bounds__(128, 2)"));
}

#[test]
fn host_launchers_are_hidden_from_nvrtc() {
    let module = host_launcher();
    let src = compile_everywhere(&module);
    let guard = src.find("#if !defined(__CUDACC_RTC__)\nextern \"C\" void scale_launch(");
    let launch = src.find("scale<<<dim3(4, 1, 1), dim3(256, 1, 1), 0>>>(x)");
    assert!(
        guard.is_some() && launch.is_some() && guard < launch,
        "{src}"
    );
    assert!(src.contains("extern \"C\" __global__ void __launch_bounds__(256) scale("));
}

#[test]
fn asserts_compile_to_printf_and_trap() {
    let module = asserts();
    let src = compile_everywhere(&module);
    assert!(src.contains("__trap()") && src.contains("hidet_assert_fail(\"checked\""));
}

#[test]
fn cpu_constructs_are_rejected_before_nvrtc() {
    let module = IRModule::new("parallel", Target::Cuda).with(parallel_loop_kernel());
    let err = emit_cuda(&module).expect_err("parallel loops are CPU only");
    assert!(err.to_string().contains("parallel"), "{err}");

    let module = IRModule::new("cpu_only", Target::Cpu).with(cpu_only_kernel());
    let err = emit_cuda(&module).expect_err("CPU kernels are not CUDA C");
    assert!(
        matches!(err, CudaError::Verify(_) | CudaError::Codegen(_)),
        "{err}"
    );
}

#[test]
fn nvrtc_errors_show_the_log_and_keep_the_source() {
    let nvrtc = require_nvrtc();
    let source = "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n";
    let err = nvrtc
        .compile_to_ptx("broken", source, Arch::SM80, &CompileOptions::default())
        .expect_err("the source does not compile");
    let CudaError::Compile {
        log,
        source_path,
        arch,
    } = &err
    else {
        panic!("expected a compile error, got {err:?}");
    };
    assert_eq!(arch, "sm_80");
    assert!(log.contains("undefined_name"), "{log}");
    assert_eq!(
        std::fs::read_to_string(source_path).ok().as_deref(),
        Some(source)
    );
    assert!(err.to_string().contains(&source_path.display().to_string()));
}

#[test]
fn missing_tools_are_typed_errors() {
    match hidet_cuda::Nvrtc::load("/nonexistent/libnvrtc.so.12") {
        Err(CudaError::NvrtcNotFound { searched }) => {
            assert_eq!(searched, vec!["/nonexistent/libnvrtc.so.12".to_string()]);
        }
        other => panic!("expected NvrtcNotFound, got {other:?}"),
    }
    let ptx = hidet_cuda::Ptx {
        text: String::new(),
        arch: Arch::SM80,
        log: String::new(),
    };
    let err = assemble_with(std::path::Path::new("/nonexistent/ptxas"), "none", &ptx)
        .expect_err("no such ptxas");
    assert!(matches!(err, CudaError::Io { .. }), "{err:?}");
}
