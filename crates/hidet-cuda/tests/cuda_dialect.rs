//! The CUDA C dialect: kernels using each CUDA construct are emitted from IR,
//! compiled by NVRTC for sm_80 and sm_90 and assembled by `ptxas` (which
//! checks the inline PTX operands that NVRTC passes through unchecked).
//! Fails (never skips) when NVRTC or ptxas is missing.

mod common;

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

fn kernel(name: &str, threads: i64) -> FunctionBuilder {
    FunctionBuilder::cuda_kernel(name, [1, 1, 1], [threads, 1, 1])
}

fn tid() -> Expr {
    Expr::thread_idx(Dim::X)
}

#[test]
fn warp_shuffles_of_every_kind_and_type() {
    let mut fb = kernel("shuffles", 64);
    let xf = fb.tensor_param("xf", DataType::F32, [64]);
    let xi = fb.tensor_param("xi", DataType::I32, [64]);
    let xh = fb.tensor_param("xh", DataType::F16, [64]);
    let out = fb.tensor_param("out", DataType::F32, [64, 4]);
    let vf = fb.var("vf", xf.at([tid()]));
    for offset in [16, 8, 4, 2, 1] {
        let shfl = Expr::call(
            Intrinsic::WarpShuffle {
                kind: ShuffleKind::Xor,
                width: 32,
            },
            vec![vf.expr(), Expr::int(offset)],
        );
        fb.assign(&vf, vf.expr() + shfl);
    }
    let down = Expr::call(
        Intrinsic::WarpShuffle {
            kind: ShuffleKind::Down,
            width: 16,
        },
        vec![xi.at([tid()]), Expr::int(1)],
    );
    let up = Expr::call(
        Intrinsic::WarpShuffle {
            kind: ShuffleKind::Up,
            width: 8,
        },
        vec![xh.at([tid()]), Expr::int(2)],
    );
    let idx = Expr::call(
        Intrinsic::WarpShuffle {
            kind: ShuffleKind::Idx,
            width: 32,
        },
        vec![xf.at([tid()]), Expr::int(0)],
    );
    fb.store(&out, [tid(), Expr::int(0)], vf.expr());
    fb.store(&out, [tid(), Expr::int(1)], down.cast(DataType::F32));
    fb.store(&out, [tid(), Expr::int(2)], up.cast(DataType::F32));
    fb.store(&out, [tid(), Expr::int(3)], idx);
    fb.sync_warp();
    let module = IRModule::new("shuffles", Target::Cuda).with(fb.finish());
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
    let mut fb = kernel("half_math", 128);
    let xh = fb.tensor_param("xh", DataType::F16, [128]);
    let xb = fb.tensor_param("xb", DataType::BF16, [128]);
    let yh = fb.tensor_param("yh", DataType::F16, [128]);
    let yb = fb.tensor_param("yb", DataType::BF16, [128]);
    let h = xh.at([tid()]);
    let b = xb.at([tid()]);
    let c_h = Expr::float_of(0.1, DataType::F16);
    let c_b = Expr::float_of(-3.25, DataType::BF16);
    fb.store(
        &yh,
        [tid()],
        h.exp().fma(c_h.clone(), h.clone()).max(c_h) * h.clone(),
    );
    let sum = Expr::math(MathFunc::Tanh, vec![b.clone()]) + b.sqrt().cast(DataType::BF16);
    fb.store(
        &yb,
        [tid()],
        Expr::select(b.gt(c_b.clone()), sum, h.cast(DataType::BF16) / c_b),
    );
    let module = IRModule::new("half_math", Target::Cuda).with(fb.finish());
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
    let funcs = [
        MathFunc::Exp,
        MathFunc::Exp2,
        MathFunc::Log,
        MathFunc::Log2,
        MathFunc::Sqrt,
        MathFunc::Rsqrt,
        MathFunc::Tanh,
        MathFunc::Sigmoid,
        MathFunc::Erf,
        MathFunc::Sin,
        MathFunc::Cos,
        MathFunc::Tan,
        MathFunc::Asin,
        MathFunc::Acos,
        MathFunc::Atan,
        MathFunc::Sinh,
        MathFunc::Cosh,
        MathFunc::Asinh,
        MathFunc::Acosh,
        MathFunc::Atanh,
        MathFunc::Abs,
        MathFunc::Floor,
        MathFunc::Ceil,
        MathFunc::Round,
        MathFunc::Trunc,
        MathFunc::Pow,
        MathFunc::Min,
        MathFunc::Max,
        MathFunc::Atan2,
        MathFunc::Fma,
    ];
    for dtype in [DataType::F32, DataType::F64] {
        let name = format!("math_{dtype}");
        let mut fb = kernel(&name, 32);
        let x = fb.tensor_param("x", dtype, [32]);
        let y = fb.tensor_param("y", dtype, [32, funcs.len() as i64 + 2]);
        for (i, f) in funcs.iter().enumerate() {
            let args = vec![x.at([tid()]); f.arity()];
            fb.store(&y, [tid(), Expr::int(i as i64)], Expr::math(*f, args));
        }
        let nan = Expr::math(MathFunc::IsNan, vec![x.at([tid()])]);
        let inf = Expr::float_of(f64::INFINITY, dtype);
        fb.store(
            &y,
            [tid(), Expr::int(funcs.len() as i64)],
            Expr::select(nan, inf, x.at([tid()]) % Expr::float_of(0.75, dtype)),
        );
        let ints = (tid() - 7) / 3 % 5;
        fb.store(
            &y,
            [tid(), Expr::int(funcs.len() as i64 + 1)],
            ints.max(-1).cast(dtype),
        );
        let module = IRModule::new(name, Target::Cuda).with(fb.finish());
        let src = compile_everywhere(&module);
        assert!(
            src.contains("hidet_floordiv_i32"),
            "negative operands need floor division"
        );
    }
}

/// A kernel with fragment registers filled from global memory, one `mma`,
/// and the accumulators stored back.
fn mma_module(
    shape: MmaShape,
    input: DataType,
    acc: DataType,
    a_len: i64,
    b_len: i64,
    c_len: i64,
) -> IRModule {
    let name = format!("mma_{shape:?}_{input}_{acc}").to_lowercase();
    let mut fb = kernel(&name, 32);
    let a = fb.tensor_param("a", input, [32, a_len]);
    let b = fb.tensor_param("b", input, [32, b_len]);
    let c = fb.tensor_param("c", acc, [32, c_len]);
    let ra = fb.register_tensor("ra", input, row_major([a_len]));
    let rb = fb.register_tensor("rb", input, row_major([b_len]));
    let rc = fb.register_tensor("rc", acc, row_major([c_len]));
    for (regs, src, len) in [(&ra, &a, a_len), (&rb, &b, b_len), (&rc, &c, c_len)] {
        let m = repeat_unrolled([len]).expect("positive extent");
        fb.for_each(m.on(0), |fb, i| {
            fb.store(regs, [i[0].clone()], src.at([tid(), i[0].clone()]));
        });
    }
    fb.call(
        Intrinsic::Mma { shape, input, acc },
        vec![
            ra.at([0]).address(),
            rb.at([0]).address(),
            rc.at([0]).address(),
        ],
    );
    let m = repeat_unrolled([c_len]).expect("positive extent");
    fb.for_each(m.on(0), |fb, i| {
        fb.store(&c, [tid(), i[0].clone()], rc.at([i[0].clone()]));
    });
    IRModule::new(name, Target::Cuda).with(fb.finish())
}

#[test]
fn mma_sync_variants_assemble() {
    let cases = [
        (
            MmaShape::M16N8K16,
            DataType::F16,
            DataType::F32,
            8,
            4,
            4,
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        ),
        (
            MmaShape::M16N8K8,
            DataType::F16,
            DataType::F32,
            4,
            2,
            4,
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
        ),
        (
            MmaShape::M16N8K16,
            DataType::BF16,
            DataType::F32,
            8,
            4,
            4,
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        ),
        (
            MmaShape::M16N8K16,
            DataType::F16,
            DataType::F16,
            8,
            4,
            4,
            "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
        ),
        (
            MmaShape::M16N8K8,
            DataType::F32,
            DataType::F32,
            4,
            2,
            4,
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
        ),
    ];
    for (shape, input, acc, a_len, b_len, c_len, ptx) in cases {
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
        let name = format!("ldmatrix_x{count}_{trans}");
        let mut fb = kernel(&name, 32);
        let g = fb.tensor_param("g", DataType::F16, [32, 8]);
        let out = fb.tensor_param("out", DataType::F16, [32, 8]);
        let smem = fb.shared_tensor("smem", DataType::F16, row_major([32, 8]));
        let regs = fb.register_tensor("regs", DataType::F16, row_major([8]));
        let cols = repeat_unrolled([8]).expect("positive extent");
        fb.for_each(cols.on(0), |fb, j| {
            fb.store(&smem, [tid(), j[0].clone()], g.at([tid(), j[0].clone()]));
        });
        fb.sync_threads();
        fb.call(
            Intrinsic::LdMatrix { count, trans },
            vec![
                regs.at([0]).address(),
                smem.at([tid(), Expr::int(0)]).address(),
            ],
        );
        let used = repeat_unrolled([2 * i64::from(count)]).expect("positive extent");
        fb.for_each(used.on(0), |fb, j| {
            fb.store(&out, [tid(), j[0].clone()], regs.at([j[0].clone()]));
        });
        let module = IRModule::new(name, Target::Cuda).with(fb.finish());
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
    let mut fb = kernel("cp_async", 64);
    let g = fb.tensor_param("g", DataType::F32, [64, 8]);
    let out = fb.tensor_param("out", DataType::F32, [64, 7]);
    let n = fb.param("n", DataType::I32);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([64, 8]));
    let valid_bytes = Expr::select(tid().lt(n.expr()), Expr::int(16), Expr::int(0));
    fb.call(
        Intrinsic::CpAsync { bytes: 16 },
        vec![
            smem.at([tid(), Expr::int(0)]).address(),
            g.at([tid(), Expr::int(0)]).address(),
            valid_bytes,
        ],
    );
    fb.call(
        Intrinsic::CpAsync { bytes: 8 },
        vec![
            smem.at([tid(), Expr::int(4)]).address(),
            g.at([tid(), Expr::int(4)]).address(),
            Expr::int(8),
        ],
    );
    fb.call(
        Intrinsic::CpAsync { bytes: 4 },
        vec![
            smem.at([tid(), Expr::int(6)]).address(),
            g.at([tid(), Expr::int(6)]).address(),
            Expr::int(4),
        ],
    );
    fb.call(Intrinsic::CpAsyncCommit, vec![]);
    fb.call(Intrinsic::CpAsyncWait { n: 0 }, vec![]);
    fb.sync_threads();
    let cols = repeat_unrolled([7]).expect("positive extent");
    fb.for_each(cols.on(0), |fb, j| {
        fb.store(
            &out,
            [tid(), j[0].clone()],
            smem.at([(tid() + 1) % 64, j[0].clone()]),
        );
    });
    let module = IRModule::new("cp_async", Target::Cuda).with(fb.finish());
    let src = compile_everywhere(&module);
    assert!(src.contains("cp.async.cg.shared.global [%0], [%1], 16, %2;"));
    assert!(src.contains("cp.async.ca.shared.global [%0], [%1], 8, %2;"));
    assert!(src.contains("cp.async.commit_group;") && src.contains("cp.async.wait_group 0;"));
}

#[test]
fn vector_loads_stores_and_float4_arithmetic() {
    let mut fb = kernel("vectors", 32);
    let x = fb.tensor_param("x", DataType::F32, [32, 4]);
    let y = fb.tensor_param("y", DataType::F32, [32, 4]);
    let h = fb.tensor_param("h", DataType::F16, [32, 2]);
    let load = |t: &Var, dtype: DataType| {
        Expr::call(
            Intrinsic::VectorLoad { dtype },
            vec![t.at([tid(), Expr::int(0)]).address()],
        )
    };
    let v = fb.var("v", load(&x, DataType::F32X4));
    fb.assign(
        &v,
        v.expr() * load(&y, DataType::F32X4) + Expr::f32(2.0).broadcast(4),
    );
    fb.call(
        Intrinsic::VectorStore,
        vec![y.at([tid(), Expr::int(0)]).address(), v.expr()],
    );
    let hv = fb.var("hv", load(&h, DataType::F16X2));
    fb.call(
        Intrinsic::VectorStore,
        vec![h.at([tid(), Expr::int(0)]).address(), hv.expr() + hv.expr()],
    );
    let module = IRModule::new("vectors", Target::Cuda).with(fb.finish());
    let src = compile_everywhere(&module);
    assert!(src.contains("float4 v = hidet_load_f32x4("), "{src}");
    assert!(src.contains("make_float4(2e0f, 2e0f, 2e0f, 2e0f)"));
    assert!(src.contains("half2 hv"));
}

#[test]
fn dynamic_shared_memory_views_and_launch_bounds() {
    let mut fb = kernel("dynamic_smem", 128);
    fb.min_blocks_per_sm(2);
    fb.dynamic_shared_bytes(Expr::int(128 * 4 * 2));
    let x = fb.tensor_param("x", DataType::F32, [128]);
    let y = fb.tensor_param("y", DataType::F32, [128]);
    let dynamic = fb.declare(
        "dyn",
        Type::pointer_to(Type::Data(DataType::F32)),
        Scope::Shared,
    );
    let first = fb.view(
        "first",
        DataType::F32,
        row_major([128]),
        dynamic.at([0]).address(),
    );
    let second = fb.view(
        "second",
        DataType::F32,
        row_major([128]),
        dynamic.at([128]).address(),
    );
    fb.store(&first, [tid()], x.at([tid()]));
    fb.store(&second, [tid()], x.at([tid()]) * 2.0f32);
    fb.sync_threads();
    fb.store(
        &y,
        [tid()],
        first.at([(tid() + 5) % 128]) + second.at([(tid() + 7) % 128]),
    );
    let module = IRModule::new("dynamic_smem", Target::Cuda).with(fb.finish());
    let src = compile_everywhere(&module);
    assert!(
        src.contains("extern __shared__ __align__(16) unsigned char"),
        "{src}"
    );
    assert!(src.contains("__launch_bounds__(128, 2)"));
}

#[test]
fn host_launchers_are_hidden_from_nvrtc() {
    let mut fb = FunctionBuilder::cuda_kernel(
        "scale",
        [Expr::int(4), Expr::int(1), Expr::int(1)],
        [256, 1, 1],
    );
    let x = fb.tensor_param("x", DataType::F32, [1024]);
    let i = Expr::block_idx(Dim::X) * 256 + tid();
    fb.store(&x, [i.clone()], x.at([i]) * 3.0f32);
    let k = fb.finish();
    let mut host = FunctionBuilder::host_launcher("scale_launch");
    let hx = host.tensor_param("x", DataType::F32, [1024]);
    host.launch(&k, vec![hx.expr()]);
    let module = IRModule::new("scale", Target::Cuda)
        .with(k)
        .with(host.finish());
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
    let mut fb = kernel("checked", 32);
    let x = fb.tensor_param("x", DataType::I32, [32]);
    fb.assert(x.at([tid()]).ge(0), "x must be \"non-negative\"");
    fb.store(&x, [tid()], x.at([tid()]) + 1);
    let module = IRModule::new("checked", Target::Cuda).with(fb.finish());
    let src = compile_everywhere(&module);
    assert!(src.contains("__trap()") && src.contains("hidet_assert_fail(\"checked\""));
}

#[test]
fn cpu_constructs_are_rejected_before_nvrtc() {
    let mut fb = kernel("parallel", 32);
    let x = fb.tensor_param("x", DataType::F32, [32]);
    fb.for_range_with("i", 32, LoopKind::Parallel, |fb, i| {
        fb.store(&x, [i.clone()], Expr::f32(1.0));
    });
    let module = IRModule::new("parallel", Target::Cuda).with(fb.finish());
    let err = emit_cuda(&module).expect_err("parallel loops are CPU only");
    assert!(err.to_string().contains("parallel"), "{err}");

    let mut cpu = FunctionBuilder::cpu_kernel("cpu_only");
    let y = cpu.tensor_param("y", DataType::F32, [4]);
    cpu.store(&y, [0], Expr::f32(1.0));
    let module = IRModule::new("cpu_only", Target::Cpu).with(cpu.finish());
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
