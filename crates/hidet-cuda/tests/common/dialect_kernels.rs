//! The kernels of the CUDA C dialect tests, one builder per construct, shared by
//! `cuda_dialect.rs` (which emits them, compiles them with NVRTC and ptxas and checks the
//! source text) and `sim_constructs.rs` (which runs them in the GPU simulator against
//! scalar references). Each module is named after its kernel, so `module.name` is the
//! kernel to launch.

use hidet_ir::prelude::*;

/// A kernel of one block of `threads` threads along x.
pub fn kernel(name: &str, threads: i64) -> FunctionBuilder {
    FunctionBuilder::cuda_kernel(name, [1, 1, 1], [threads, 1, 1])
}

/// `threadIdx.x`.
pub fn tid() -> Expr {
    Expr::thread_idx(Dim::X)
}

/// The CUDA module holding just the kernel of `fb`, named after it.
pub fn module_of(fb: FunctionBuilder) -> IRModule {
    let f = fb.finish();
    IRModule::new(f.name.clone(), Target::Cuda).with(f)
}

/// Issues `cp.async` of `bytes` bytes from `src[tid, col]` to `dst[tid, col]`, of which
/// the first `src_size` bytes are read and the rest zero-filled.
pub fn cp_async_row(
    fb: &mut FunctionBuilder,
    bytes: u32,
    dst: &Var,
    src: &Var,
    col: i64,
    src_size: Expr,
) {
    fb.call(
        Intrinsic::CpAsync { bytes },
        vec![
            dst.at([tid(), Expr::int(col)]).address(),
            src.at([tid(), Expr::int(col)]).address(),
            src_size,
        ],
    );
}

/// `shuffles`, two warps: `out[t, 0]` is the butterfly (xor 16, 8, 4, 2, 1) sum of the
/// warp's `xf`, `out[t, 1]` is `xi` shuffled down by 1 in segments of 16, `out[t, 2]` is
/// `xh` (f16) shuffled up by 2 in segments of 8, `out[t, 3]` is lane 0's `xf`; ends with
/// `__syncwarp()`.
pub fn shuffles() -> IRModule {
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
    module_of(fb)
}

/// `half_math`, 128 threads, 16-bit float storage and math: with `h = xh[t]` (f16) and
/// `b = xb[t]` (bf16), `yh[t] = max(fma(exp(h), 0.1, h), 0.1) * h` and
/// `yb[t] = b > -3.25 ? tanh(b) + sqrt(b) : bf16(h) / -3.25`.
pub fn half_math() -> IRModule {
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
    module_of(fb)
}

/// The math functions `math_functions` applies, in the order of its output columns.
pub const MATH_FUNCS: [MathFunc; 30] = [
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

/// `math_{dtype}`, one warp, `y[32, MATH_FUNCS.len() + 2]` of `dtype`: column `i` is
/// `MATH_FUNCS[i]` applied to `x[t]` (as every argument), then `isnan(x) ? inf : x % 0.75`,
/// then the integer `max((t - 7) / 3 % 5, -1)` (floor division and modulo) cast to `dtype`.
pub fn math_functions(dtype: DataType) -> IRModule {
    let funcs = MATH_FUNCS;
    let mut fb = kernel(&format!("math_{dtype}"), 32);
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
    module_of(fb)
}

/// The `mma` variants the dialect supports, as `mma_module`'s arguments: shape, input
/// and accumulator types, and the registers per lane of A, B and C.
pub const MMA_VARIANTS: [(MmaShape, DataType, DataType, i64, i64, i64); 5] = [
    (MmaShape::M16N8K16, DataType::F16, DataType::F32, 8, 4, 4),
    (MmaShape::M16N8K8, DataType::F16, DataType::F32, 4, 2, 4),
    (MmaShape::M16N8K16, DataType::BF16, DataType::F32, 8, 4, 4),
    (MmaShape::M16N8K16, DataType::F16, DataType::F16, 8, 4, 4),
    (MmaShape::M16N8K8, DataType::F32, DataType::F32, 4, 2, 4),
];

/// `mma_{shape}_{input}_{acc}`, one warp: each lane loads its fragment registers from its
/// row of `a[32, a_len]`, `b[32, b_len]` and `c[32, c_len]`, issues one `mma`
/// (`C += A · B`) and stores the accumulators back to `c`.
pub fn mma_module(
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
    module_of(fb)
}

/// `ldmatrix_x{count}_{trans}`, one warp: each lane copies its row of `g[32, row_elems]`
/// (f16) into shared memory, and after a barrier `ldmatrix` (`count` 8×8 matrices,
/// transposed if `trans`) loads from the lane's shared row into registers, whose
/// `2 · count` halves are stored to the lane's row of `out[32, 8]`.
pub fn ldmatrix_module(count: u32, trans: bool, row_elems: i64) -> IRModule {
    let name = format!("ldmatrix_x{count}_{trans}");
    let mut fb = kernel(&name, 32);
    let g = fb.tensor_param("g", DataType::F16, [32, row_elems]);
    let out = fb.tensor_param("out", DataType::F16, [32, 8]);
    let smem = fb.shared_tensor("smem", DataType::F16, row_major([32, row_elems]));
    let regs = fb.register_tensor("regs", DataType::F16, row_major([8]));
    let cols = repeat_unrolled([row_elems]).expect("positive extent");
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
    module_of(fb)
}

/// `cp_async`, 64 threads, rows of `row_floats` floats in `g[64, row_floats]` (8 in the
/// dialect's kernel; 7 misaligns the 16-byte copies of odd rows): thread `t` copies
/// `g[t, 0..4]` (16 bytes, zero-filled unless `t < n`), `g[t, 4..6]` (8 bytes) and
/// `g[t, 6]` (4 bytes) into `smem[64, 8]` with `cp.async`, commits, waits for all groups,
/// and after a barrier stores `smem[(t + 1) % 64, 0..7]` to `out[t, 0..7]`.
pub fn cp_async_module(row_floats: i64) -> IRModule {
    let mut fb = kernel("cp_async", 64);
    let g = fb.tensor_param("g", DataType::F32, [64, row_floats]);
    let out = fb.tensor_param("out", DataType::F32, [64, 7]);
    let n = fb.param("n", DataType::I32);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([64, 8]));
    let valid_bytes = Expr::select(tid().lt(n.expr()), Expr::int(16), Expr::int(0));
    cp_async_row(&mut fb, 16, &smem, &g, 0, valid_bytes);
    cp_async_row(&mut fb, 8, &smem, &g, 4, Expr::int(8));
    cp_async_row(&mut fb, 4, &smem, &g, 6, Expr::int(4));
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
    module_of(fb)
}

/// `vectors`, one warp: `y[t, 0..4] = x[t, 0..4] * y[t, 0..4] + 2` as `float4` loads,
/// arithmetic and store, and `h[t, 0..2] += h[t, 0..2]` as `half2`.
pub fn vectors() -> IRModule {
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
    module_of(fb)
}

/// `dynamic_smem`, 128 threads, `__launch_bounds__(128, 2)`: two f32 views `first` and
/// `second` of 1 KiB of dynamic shared memory hold `x[t]` and `2 · x[t]`; after a barrier
/// `y[t] = first[(t + 5) % 128] + second[(t + 7) % 128]`.
pub fn dynamic_shared() -> IRModule {
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
    module_of(fb)
}

/// Module `scale`: kernel `scale` (4 blocks of 256 threads) triples `x[1024]` in place,
/// and the host function `scale_launch(x)` launches it.
pub fn host_launcher() -> IRModule {
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
    IRModule::new("scale", Target::Cuda)
        .with(k)
        .with(host.finish())
}

/// `checked`, one warp: asserts `x[t] >= 0` (message `x must be "non-negative"`), then
/// increments `x[t]`.
pub fn asserts() -> IRModule {
    let mut fb = kernel("checked", 32);
    let x = fb.tensor_param("x", DataType::I32, [32]);
    fb.assert(x.at([tid()]).ge(0), "x must be \"non-negative\"");
    fb.store(&x, [tid()], x.at([tid()]) + 1);
    module_of(fb)
}

/// The CUDA kernel `parallel`, whose loop over `x[32]` is a CPU-only parallel loop.
pub fn parallel_loop_kernel() -> Function {
    let mut fb = kernel("parallel", 32);
    let x = fb.tensor_param("x", DataType::F32, [32]);
    fb.for_range_with("i", 32, LoopKind::Parallel, |fb, i| {
        fb.store(&x, [i.clone()], Expr::f32(1.0));
    });
    fb.finish()
}

/// The CPU kernel `cpu_only`, setting `y[0]` of `y[4]` to 1.
pub fn cpu_only_kernel() -> Function {
    let mut cpu = FunctionBuilder::cpu_kernel("cpu_only");
    let y = cpu.tensor_param("y", DataType::F32, [4]);
    cpu.store(&y, [0], Expr::f32(1.0));
    cpu.finish()
}
