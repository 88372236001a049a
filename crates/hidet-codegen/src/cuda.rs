//! The CUDA C dialect: C++17 CUDA for NVRTC (and NVCC), `sm_80` and newer.
//!
//! # Functions
//! - [`FunctionKind::CudaKernel`] → `extern "C" __global__ void
//!   __launch_bounds__(threads[, min_blocks]) NAME(params)`; the unmangled
//!   name is what the driver API looks up.
//! - [`FunctionKind::Internal`] → `static __device__ __forceinline__`.
//! - [`FunctionKind::HostLauncher`] → `extern "C" void NAME(params)` inside
//!   `#if !defined(__CUDACC_RTC__)`, launching with `<<<grid, block, smem>>>`
//!   (after raising `cudaFuncAttributeMaxDynamicSharedMemorySize` when the
//!   launch requests dynamic shared memory). NVRTC never sees host code, so
//!   every emitted file is one translation unit NVRTC compiles as is.
//! - CPU kernels are [`Unsupported`].
//!
//! # Memory
//! Shared tensors are `__shared__ __align__(16) T name[size]` (static shared
//! memory). A shared-scope *pointer* declared without initializer is the
//! kernel's dynamic shared memory: `extern __shared__ __align__(16) unsigned
//! char name_storage[]; T* name = (T*)name_storage;`; tensors placed in it
//! are views (`Declare` with an initializer) of that pointer.
//!
//! # Types
//! Scalars are the `<cstdint>` types (declared by the prelude under NVRTC),
//! `bool`, `float`, `double`, `half` and `__nv_bfloat16` (from
//! `cuda_fp16.h`/`cuda_bf16.h`, included only when used; NVRTC needs their
//! directory as `-I`). Vectors are CUDA's built-in vector types: `float2`,
//! `float4`, `double2`, `int2`, `int4`, `uint2`, `uint4`, `half2`,
//! `__nv_bfloat162`; `float2`/`float4` get elementwise `+ - * /`. Built-ins
//! such as `threadIdx.x` are `int` (the IR's `i32`).
//!
//! # Math
//! `f32` uses the `expf` family (`rsqrtf`, `fmaf`, `fminf`/`fmaxf`), `f64`
//! the `exp` family, `f16`/`bf16` compute in `float` and round back, except
//! `Fma`, which is `__hfma` (one rounding). Integer `Min`/`Max`/`Abs` are
//! CUDA's `min`/`max`/`abs`/`llabs`. Vector math is [`Unsupported`].
//! Non-finite `f32`/`f64` constants are spelled from their bits
//! (`__int_as_float`, `__longlong_as_double`); `f16`/`bf16` constants are
//! rounded to nearest-even at emission and spelled from their bits too.
//!
//! # Intrinsics
//! - `WarpShuffle` → `__shfl{,_up,_down,_xor}_sync(0xffffffffu, value, arg, width)`;
//! - `VectorLoad`/`VectorStore` → one vector access when the address is
//!   aligned to the vector size, else element by element (the IR requires no
//!   alignment);
//! - `Mma` → inline PTX `mma.sync.aligned.m16n8k{8,16}.row.col` for
//!   f16×f16→f32, bf16×bf16→f32, f16×f16→f16 and (m16n8k8) tf32×tf32→f32,
//!   the tf32 inputs given as `f32`; fragments are this thread's registers
//!   in PTX order (`a`: 2 or 4 32-bit registers, `b`: 1 or 2, `c`: 4 `f32`
//!   or 2 `f16x2`);
//! - `LdMatrix` → `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`
//!   with the address converted by `__cvta_generic_to_shared`;
//! - `CpAsync` → `cp.async.{ca,cg}.shared.global` (`cg` for 16 bytes) with
//!   the source size operand, so bytes past `src_bytes` are zero-filled;
//!   `CpAsyncCommit`/`CpAsyncWait` → `cp.async.commit_group` /
//!   `cp.async.wait_group N`.
//!
//! # Assert
//! A failed `Assert` prints `hidet: assertion failed in kernel `NAME`: MSG`
//! with device `printf` and executes `__trap()` (on the host: `abort()`).

use crate::dialect::{Declaration, Dialect, EmittedFunction, EmittedParam, Uses};
use crate::error::Unsupported;
use crate::literal::{c_string, finite_float_literal};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::{Builtin, Dim};
use hidet_ir::function::{Function, FunctionKind, IRModule};
use hidet_ir::intrinsic::{Intrinsic, MathFunc, MmaShape, ShuffleKind};
use hidet_ir::stmt::{Barrier, LoopKind, Scope};
use hidet_ir::ty::Type;

/// CUDA C++ for NVRTC; see the [module documentation](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaDialect;

/// The preprocessor condition under which host-only code is compiled.
pub const HOST_ONLY: &str = "!defined(__CUDACC_RTC__)";

const QUALIFIER: &str = "static __host__ __device__ __forceinline__";
const DEVICE_QUALIFIER: &str = "static __device__ __forceinline__";

fn scalar_name(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bool => "bool",
        ScalarType::I8 => "int8_t",
        ScalarType::I16 => "int16_t",
        ScalarType::I32 => "int32_t",
        ScalarType::I64 => "int64_t",
        ScalarType::U8 => "uint8_t",
        ScalarType::U16 => "uint16_t",
        ScalarType::U32 => "uint32_t",
        ScalarType::U64 => "uint64_t",
        ScalarType::F16 => "half",
        ScalarType::BF16 => "__nv_bfloat16",
        ScalarType::F32 => "float",
        ScalarType::F64 => "double",
    }
}

/// CUDA's built-in vector type for `d`, if there is one the dialect supports.
fn vector_name(d: DataType) -> Option<&'static str> {
    Some(match (d.scalar, d.lanes) {
        (ScalarType::F32, 2) => "float2",
        (ScalarType::F32, 4) => "float4",
        (ScalarType::F64, 2) => "double2",
        (ScalarType::I32, 2) => "int2",
        (ScalarType::I32, 4) => "int4",
        (ScalarType::U32, 2) => "uint2",
        (ScalarType::U32, 4) => "uint4",
        (ScalarType::F16, 2) => "half2",
        (ScalarType::BF16, 2) => "__nv_bfloat162",
        _ => return None,
    })
}

/// The `make_T` constructor of a built-in vector type (not for half2/bf16x2).
fn vector_make(d: DataType) -> Option<String> {
    match d.scalar {
        ScalarType::F16 | ScalarType::BF16 => None,
        _ => vector_name(d).map(|n| format!("make_{n}")),
    }
}

fn require_fp16(uses: &mut Uses) {
    uses.require_helper("hidet_include_cuda_fp16", || {
        "#include <cuda_fp16.h>".to_string()
    });
}

fn require_bf16(uses: &mut Uses) {
    uses.require_helper("hidet_include_cuda_bf16", || {
        "#include <cuda_bf16.h>".to_string()
    });
}

/// Requires the header that declares `s`, if any.
fn require_scalar(s: ScalarType, uses: &mut Uses) {
    match s {
        ScalarType::F16 => require_fp16(uses),
        ScalarType::BF16 => require_bf16(uses),
        _ => {}
    }
}

/// Elementwise operators for `float2`/`float4`, which CUDA does not define.
fn require_float_vector_ops(d: DataType, uses: &mut Uses) {
    let (ty, fields): (&str, &[&str]) = match (d.scalar, d.lanes) {
        (ScalarType::F32, 2) => ("float2", &["x", "y"]),
        (ScalarType::F32, 4) => ("float4", &["x", "y", "z", "w"]),
        _ => return,
    };
    let name = format!("hidet_{ty}_operators");
    uses.require_helper(&name, || {
        let mut out = String::new();
        for op in ["+", "-", "*", "/"] {
            let parts: Vec<String> = fields.iter().map(|f| format!("a.{f} {op} b.{f}")).collect();
            out.push_str(&format!(
                "{QUALIFIER} {ty} operator{op}({ty} a, {ty} b) {{\n    return make_{ty}({});\n}}\n",
                parts.join(", ")
            ));
        }
        out
    });
}

/// The bits of the IEEE binary format with `exp_bits` exponent and
/// `mant_bits` mantissa bits nearest to `v` (ties to even; overflow to
/// infinity; NaN to a quiet NaN). Requires `exp_bits + mant_bits < 16`.
fn small_float_bits(v: f64, exp_bits: u32, mant_bits: u32) -> u16 {
    let sign: u16 = if v.is_sign_negative() {
        1 << (exp_bits + mant_bits)
    } else {
        0
    };
    let exp_all_ones: u16 = ((1u32 << exp_bits) - 1) as u16;
    if v.is_nan() {
        return (exp_all_ones << mant_bits) | (1 << (mant_bits - 1));
    }
    let a = v.abs();
    let bias = (1i32 << (exp_bits - 1)) - 1;
    let min_exp = 1 - bias;
    if a.is_infinite() {
        return sign | (exp_all_ones << mant_bits);
    }
    if a == 0.0 {
        return sign;
    }
    // The spacing of representable values around `a`: 2^(e - mant_bits),
    // with e the exponent of `a` clamped to the normal range.
    let e = (a.log2().floor() as i32).max(min_exp);
    let ulp = 2f64.powi(e - mant_bits as i32);
    let q = a / ulp;
    let mut n = q.floor();
    let frac = q - n;
    if frac > 0.5 || (frac == 0.5 && n % 2.0 == 1.0) {
        n += 1.0;
    }
    // `n * ulp` is the rounded magnitude; re-encode it.
    let rounded = n * ulp;
    let max_finite = (2.0 - 2f64.powi(-(mant_bits as i32))) * 2f64.powi(bias);
    if rounded > max_finite {
        return sign | (exp_all_ones << mant_bits);
    }
    let re = (rounded.log2().floor() as i32).max(min_exp);
    let subnormal = rounded < 2f64.powi(min_exp);
    let mant = if subnormal {
        (rounded / 2f64.powi(min_exp - mant_bits as i32)).round() as u16
    } else {
        ((rounded / 2f64.powi(re) - 1.0) * 2f64.powi(mant_bits as i32)).round() as u16
    };
    let biased = if subnormal { 0 } else { (re + bias) as u16 };
    sign | (biased << mant_bits) | mant
}

/// A call of `func` in `float` on `args` (already `float` values).
fn f32_func(func: MathFunc, args: &[String]) -> String {
    let a = |i: usize| args[i].as_str();
    let call = |name: &str| format!("{name}({})", args.join(", "));
    match func {
        MathFunc::Exp => call("expf"),
        MathFunc::Exp2 => call("exp2f"),
        MathFunc::Log => call("logf"),
        MathFunc::Log2 => call("log2f"),
        MathFunc::Sqrt => call("sqrtf"),
        MathFunc::Rsqrt => call("rsqrtf"),
        MathFunc::Tanh => call("tanhf"),
        MathFunc::Sigmoid => format!("(1.0f / (1.0f + expf(-{})))", a(0)),
        MathFunc::Erf => call("erff"),
        MathFunc::Sin => call("sinf"),
        MathFunc::Cos => call("cosf"),
        MathFunc::Tan => call("tanf"),
        MathFunc::Asin => call("asinf"),
        MathFunc::Acos => call("acosf"),
        MathFunc::Atan => call("atanf"),
        MathFunc::Sinh => call("sinhf"),
        MathFunc::Cosh => call("coshf"),
        MathFunc::Asinh => call("asinhf"),
        MathFunc::Acosh => call("acoshf"),
        MathFunc::Atanh => call("atanhf"),
        MathFunc::Abs => call("fabsf"),
        MathFunc::Floor => call("floorf"),
        MathFunc::Ceil => call("ceilf"),
        MathFunc::Round => call("rintf"),
        MathFunc::Trunc => call("truncf"),
        MathFunc::IsNan => format!("isnan({})", a(0)),
        MathFunc::IsInf => format!("isinf({})", a(0)),
        MathFunc::Pow => call("powf"),
        MathFunc::Min => call("fminf"),
        MathFunc::Max => call("fmaxf"),
        MathFunc::Atan2 => call("atan2f"),
        MathFunc::Fma => call("fmaf"),
    }
}

/// A call of `func` in `double`.
fn f64_func(func: MathFunc, args: &[String]) -> String {
    let a = |i: usize| args[i].as_str();
    let call = |name: &str| format!("{name}({})", args.join(", "));
    match func {
        MathFunc::Exp => call("exp"),
        MathFunc::Exp2 => call("exp2"),
        MathFunc::Log => call("log"),
        MathFunc::Log2 => call("log2"),
        MathFunc::Sqrt => call("sqrt"),
        MathFunc::Rsqrt => call("rsqrt"),
        MathFunc::Tanh => call("tanh"),
        MathFunc::Sigmoid => format!("(1.0 / (1.0 + exp(-{})))", a(0)),
        MathFunc::Erf => call("erf"),
        MathFunc::Sin => call("sin"),
        MathFunc::Cos => call("cos"),
        MathFunc::Tan => call("tan"),
        MathFunc::Asin => call("asin"),
        MathFunc::Acos => call("acos"),
        MathFunc::Atan => call("atan"),
        MathFunc::Sinh => call("sinh"),
        MathFunc::Cosh => call("cosh"),
        MathFunc::Asinh => call("asinh"),
        MathFunc::Acosh => call("acosh"),
        MathFunc::Atanh => call("atanh"),
        MathFunc::Abs => call("fabs"),
        MathFunc::Floor => call("floor"),
        MathFunc::Ceil => call("ceil"),
        MathFunc::Round => call("rint"),
        MathFunc::Trunc => call("trunc"),
        MathFunc::IsNan => format!("isnan({})", a(0)),
        MathFunc::IsInf => format!("isinf({})", a(0)),
        MathFunc::Pow => call("pow"),
        MathFunc::Min => call("fmin"),
        MathFunc::Max => call("fmax"),
        MathFunc::Atan2 => call("atan2"),
        MathFunc::Fma => call("fma"),
    }
}

/// `value` of the 16-bit float type `s` as a `float` expression.
fn to_float(s: ScalarType, value: &str) -> String {
    match s {
        ScalarType::F16 => format!("__half2float({value})"),
        _ => format!("__bfloat162float({value})"),
    }
}

/// The `float` expression `value` rounded to the 16-bit float type `s`.
fn from_float(s: ScalarType, value: &str) -> String {
    match s {
        ScalarType::F16 => format!("__float2half_rn({value})"),
        _ => format!("__float2bfloat16_rn({value})"),
    }
}

/// The PTX type names and fragment register counts of one `mma.sync` variant.
struct MmaVariant {
    /// `m16n8k16`.
    shape: &'static str,
    /// `.f32.f16.f16.f32` (D, A, B, C types).
    types: &'static str,
    a_regs: usize,
    b_regs: usize,
    /// Accumulator registers and whether they are `f32` (`"f"`) or 32-bit (`"r"`).
    c_regs: usize,
    c_constraint: &'static str,
}

fn mma_variant(shape: MmaShape, input: DataType, acc: DataType) -> Option<MmaVariant> {
    let (shape_name, k16) = match shape {
        MmaShape::M16N8K8 => ("m16n8k8", false),
        MmaShape::M16N8K16 => ("m16n8k16", true),
    };
    let (ab_regs, types, c_regs, c_constraint) = match (input, acc) {
        (DataType::F16, DataType::F32) => ((2, 1), ".f32.f16.f16.f32", 4, "f"),
        (DataType::BF16, DataType::F32) => ((2, 1), ".f32.bf16.bf16.f32", 4, "f"),
        (DataType::F16, DataType::F16) => ((2, 1), ".f16.f16.f16.f16", 2, "r"),
        (DataType::F32, DataType::F32) if !k16 => ((4, 2), ".f32.tf32.tf32.f32", 4, "f"),
        _ => return None,
    };
    let scale = if k16 { 2 } else { 1 };
    Some(MmaVariant {
        shape: shape_name,
        types,
        a_regs: ab_regs.0 * scale,
        b_regs: ab_regs.1 * scale,
        c_regs,
        c_constraint,
    })
}

/// `{%first, …, %first+n-1}`.
fn reg_list(first: usize, n: usize) -> String {
    let regs: Vec<String> = (first..first + n).map(|i| format!("%{i}")).collect();
    format!("{{{}}}", regs.join(", "))
}

impl CudaDialect {
    fn scalar_math(
        &self,
        func: MathFunc,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let s = dtype.scalar;
        match s {
            ScalarType::F32 => Ok(f32_func(func, args)),
            ScalarType::F64 => Ok(f64_func(func, args)),
            ScalarType::F16 | ScalarType::BF16 => {
                require_scalar(s, uses);
                if func == MathFunc::Fma {
                    return Ok(format!("__hfma({}, {}, {})", args[0], args[1], args[2]));
                }
                let promoted: Vec<String> = args.iter().map(|a| to_float(s, a)).collect();
                let r = f32_func(func, &promoted);
                Ok(if func.returns_bool() {
                    r
                } else {
                    from_float(s, &r)
                })
            }
            _ if s.is_integer() => {
                let wide = matches!(s, ScalarType::I64 | ScalarType::U64);
                match func {
                    MathFunc::Min => Ok(format!("min({}, {})", args[0], args[1])),
                    MathFunc::Max => Ok(format!("max({}, {})", args[0], args[1])),
                    MathFunc::Abs if !s.is_signed() => Ok(args[0].clone()),
                    MathFunc::Abs if wide => Ok(format!("llabs({})", args[0])),
                    MathFunc::Abs => Ok(format!("abs({})", args[0])),
                    other => Err(Unsupported::new(format!(
                        "{} of integer type {dtype}",
                        other.name()
                    ))),
                }
            }
            _ => Err(Unsupported::new(format!("{} of {dtype}", func.name()))),
        }
    }

    fn vector_access(
        &self,
        load: bool,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let vty = self.value_type(dtype, uses)?;
        let sty = self.value_type(dtype.element(), uses)?;
        let bytes = dtype.bytes();
        let lanes = dtype.lanes as usize;
        let name = format!("hidet_{}_{dtype}", if load { "load" } else { "store" });
        uses.require_helper(&name, || {
            let lane_ptr = |i: usize| format!("reinterpret_cast<const {sty}*>(p)[{i}]");
            if load {
                let make = match vector_make(dtype) {
                    Some(make) => {
                        let parts: Vec<String> = (0..lanes).map(lane_ptr).collect();
                        format!("{make}({})", parts.join(", "))
                    }
                    None => format!("{vty}({}, {})", lane_ptr(0), lane_ptr(1)),
                };
                format!(
                    "/* {bytes}-byte load; one vector access when aligned */\n\
                     {QUALIFIER} {vty} {name}(const void* p) {{\n    \
                     if ((reinterpret_cast<uintptr_t>(p) & {}u) == 0u) {{\n        \
                     return *reinterpret_cast<const {vty}*>(p);\n    }}\n    \
                     return {make};\n}}",
                    bytes - 1
                )
            } else {
                let fields = ["x", "y", "z", "w"];
                let stores: Vec<String> = (0..lanes)
                    .map(|i| format!("reinterpret_cast<{sty}*>(p)[{i}] = v.{};", fields[i]))
                    .collect();
                format!(
                    "/* {bytes}-byte store; one vector access when aligned */\n\
                     {QUALIFIER} void {name}(void* p, {vty} v) {{\n    \
                     if ((reinterpret_cast<uintptr_t>(p) & {}u) == 0u) {{\n        \
                     *reinterpret_cast<{vty}*>(p) = v;\n        return;\n    }}\n    \
                     {}\n}}",
                    bytes - 1,
                    stores.join("\n    ")
                )
            }
        });
        Ok(match (load, args) {
            (true, [ptr]) => format!("{name}({ptr})"),
            (false, [ptr, value]) => format!("{name}({ptr}, {value})"),
            _ => {
                return Err(Unsupported::new(format!(
                    "vector_{} with {} arguments",
                    if load { "load" } else { "store" },
                    args.len()
                )))
            }
        })
    }

    fn mma(
        &self,
        shape: MmaShape,
        input: DataType,
        acc: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let v = mma_variant(shape, input, acc).ok_or_else(|| {
            Unsupported::new(format!(
                "mma {shape:?} with {input} inputs and {acc} accumulators"
            ))
        })?;
        let [a, b, c] = args else {
            return Err(Unsupported::new("mma with other than 3 arguments"));
        };
        require_scalar(input.scalar, uses);
        require_scalar(acc.scalar, uses);
        let name = format!("hidet_mma_{}_{}_{}", v.shape, input, acc);
        uses.require_helper(&name, || {
            let (na, nb, nc) = (v.a_regs, v.b_regs, v.c_regs);
            let outs: Vec<String> = (0..nc)
                .map(|i| {
                    if v.c_constraint == "f" {
                        format!("\"+f\"(c[{i}])")
                    } else {
                        format!("\"+r\"(c[{i}])")
                    }
                })
                .collect();
            let ins: Vec<String> = (0..na)
                .map(|i| format!("\"r\"(a[{i}])"))
                .chain((0..nb).map(|i| format!("\"r\"(b[{i}])")))
                .collect();
            let c_type = if v.c_constraint == "f" { "float" } else { "uint32_t" };
            format!(
                "/* D = A * B + C on tensor cores; a, b, c: this thread's fragment registers */\n\
                 {DEVICE_QUALIFIER} void {name}(const void* a_regs, const void* b_regs, void* c_regs) {{\n    \
                 const uint32_t* a = reinterpret_cast<const uint32_t*>(a_regs);\n    \
                 const uint32_t* b = reinterpret_cast<const uint32_t*>(b_regs);\n    \
                 {c_type}* c = reinterpret_cast<{c_type}*>(c_regs);\n    \
                 asm volatile(\"mma.sync.aligned.{}.row.col{} {}, {}, {}, {};\\n\"\n        \
                 : {}\n        : {});\n}}",
                v.shape,
                v.types,
                reg_list(0, nc),
                reg_list(nc, na),
                reg_list(nc + na, nb),
                reg_list(0, nc),
                outs.join(", "),
                ins.join(", ")
            )
        });
        Ok(format!("{name}({a}, {b}, {c})"))
    }

    fn ldmatrix(
        &self,
        count: u32,
        trans: bool,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if !matches!(count, 1 | 2 | 4) {
            return Err(Unsupported::new(format!("ldmatrix of {count} matrices")));
        }
        let [dst, src] = args else {
            return Err(Unsupported::new("ldmatrix with other than 2 arguments"));
        };
        let n = count as usize;
        let t = if trans { ".trans" } else { "" };
        let name = format!(
            "hidet_ldmatrix_x{count}{}",
            if trans { "_trans" } else { "" }
        );
        uses.require_helper(&name, || {
            let outs: Vec<String> = (0..n).map(|i| format!("\"=r\"(r[{i}])")).collect();
            format!(
                "/* loads {count} 8x8 b16 matrices from shared memory into this thread's registers */\n\
                 {DEVICE_QUALIFIER} void {name}(void* dst_regs, const void* smem) {{\n    \
                 uint32_t* r = reinterpret_cast<uint32_t*>(dst_regs);\n    \
                 uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));\n    \
                 asm volatile(\"ldmatrix.sync.aligned.m8n8.x{count}{t}.shared.b16 {}, [%{n}];\\n\"\n        \
                 : {}\n        : \"r\"(addr));\n}}",
                reg_list(0, n),
                outs.join(", ")
            )
        });
        Ok(format!("{name}({dst}, {src})"))
    }

    fn cp_async(
        &self,
        bytes: u32,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if !matches!(bytes, 4 | 8 | 16) {
            return Err(Unsupported::new(format!("cp.async of {bytes} bytes")));
        }
        let [dst, src, src_bytes] = args else {
            return Err(Unsupported::new("cp_async with other than 3 arguments"));
        };
        let cache = if bytes == 16 { "cg" } else { "ca" };
        let name = format!("hidet_cp_async_{bytes}");
        uses.require_helper(&name, || {
            format!(
                "/* copies {bytes} bytes global -> shared asynchronously; bytes past src_bytes are zero */\n\
                 {DEVICE_QUALIFIER} void {name}(void* dst_smem, const void* src, int32_t src_bytes) {{\n    \
                 uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst_smem));\n    \
                 asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\\n\"\n        \
                 :\n        : \"r\"(addr), \"l\"(src), \"r\"(src_bytes)\n        : \"memory\");\n}}"
            )
        });
        Ok(format!("{name}({dst}, {src}, {src_bytes})"))
    }
}

impl Dialect for CudaDialect {
    fn name(&self) -> &'static str {
        "CUDA C"
    }

    fn value_type(&self, dtype: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        require_scalar(dtype.scalar, uses);
        if dtype.lanes <= 1 {
            return Ok(scalar_name(dtype.scalar).to_string());
        }
        let name = vector_name(dtype).ok_or_else(|| {
            Unsupported::new(format!(
                "vector type {dtype} (CUDA C supports f32x2, f32x4, f64x2, i32x2, i32x4, u32x2, u32x4, f16x2, bf16x2)"
            ))
        })?;
        require_float_vector_ops(dtype, uses);
        Ok(name.to_string())
    }

    fn float_literal(
        &self,
        v: f64,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if dtype.is_vector() {
            return Err(Unsupported::new(format!("float constant of type {dtype}")));
        }
        match dtype.scalar {
            ScalarType::F32 | ScalarType::F64 => {
                if let Some(text) = finite_float_literal(v, dtype) {
                    return Ok(text);
                }
                let text = match (dtype.scalar, v.is_nan(), v < 0.0) {
                    (ScalarType::F32, true, _) => "__int_as_float(0x7fffffff)",
                    (ScalarType::F32, false, false) => "__int_as_float(0x7f800000)",
                    (ScalarType::F32, false, true) => "__int_as_float((int)0xff800000u)",
                    (_, true, _) => "__longlong_as_double(0x7fffffffffffffffLL)",
                    (_, false, false) => "__longlong_as_double(0x7ff0000000000000LL)",
                    (_, false, true) => "__longlong_as_double((long long)0xfff0000000000000ull)",
                };
                Ok(text.to_string())
            }
            ScalarType::F16 => {
                require_fp16(uses);
                Ok(format!(
                    "__ushort_as_half((unsigned short)0x{:04x}u)",
                    small_float_bits(v, 5, 10)
                ))
            }
            ScalarType::BF16 => {
                require_bf16(uses);
                Ok(format!(
                    "__ushort_as_bfloat16((unsigned short)0x{:04x}u)",
                    small_float_bits(v, 8, 7)
                ))
            }
            _ => Err(Unsupported::new(format!("float constant of type {dtype}"))),
        }
    }

    fn helper_qualifier(&self) -> &'static str {
        QUALIFIER
    }

    fn prelude(&self, module: &IRModule, _uses: &Uses) -> String {
        let module_name: String = module
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!(
            "/* module {module_name}: generated by hidet-codegen (CUDA C dialect).\n   \
             One translation unit for NVRTC (C++17, compute_80 or newer); host launchers\n   \
             are compiled only outside NVRTC. */\n\
             #if defined(__CUDACC_RTC__)\n\
             typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\n\
             typedef long long int64_t;\ntypedef unsigned char uint8_t;\n\
             typedef unsigned short uint16_t;\ntypedef unsigned int uint32_t;\n\
             typedef unsigned long long uint64_t;\ntypedef unsigned long long uintptr_t;\n\
             #else\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n\
             #include <cuda_runtime.h>\n#endif\n"
        )
    }

    fn function_head(
        &self,
        function: &Function,
        ret: &str,
        params: &[EmittedParam],
    ) -> Result<String, Unsupported> {
        let list = params
            .iter()
            .map(|p| format!("{} {}", p.c_type, p.name))
            .collect::<Vec<_>>()
            .join(", ");
        let name = &function.name;
        Ok(match &function.kind {
            FunctionKind::CudaKernel(launch) => {
                let threads = launch.threads_per_block();
                if !(1..=1024).contains(&threads) {
                    return Err(Unsupported::new(format!(
                        "a kernel with {threads} threads per block (1..=1024)"
                    )));
                }
                if ret != "void" {
                    return Err(Unsupported::new(format!("a kernel returning {ret}")));
                }
                let bounds = match launch.min_blocks_per_sm {
                    Some(b) => format!("__launch_bounds__({threads}, {b})"),
                    None => format!("__launch_bounds__({threads})"),
                };
                format!("extern \"C\" __global__ void {bounds} {name}({list})")
            }
            FunctionKind::Internal => format!("{DEVICE_QUALIFIER} {ret} {name}({list})"),
            FunctionKind::HostLauncher => format!("extern \"C\" {ret} {name}({list})"),
            FunctionKind::CpuKernel => {
                return Err(Unsupported::new("a CPU kernel (use the C dialect)"))
            }
        })
    }

    fn function_guard(&self, function: &Function) -> Option<String> {
        match function.kind {
            FunctionKind::HostLauncher => Some(HOST_ONLY.to_string()),
            _ => None,
        }
    }

    fn epilogue(
        &self,
        _module: &IRModule,
        _functions: &[EmittedFunction<'_>],
        _uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        Ok(String::new())
    }

    fn builtin(&self, builtin: Builtin) -> Result<String, Unsupported> {
        let (name, dim) = match builtin {
            Builtin::ThreadIdx(d) => ("threadIdx", d),
            Builtin::BlockIdx(d) => ("blockIdx", d),
            Builtin::BlockDim(d) => ("blockDim", d),
            Builtin::GridDim(d) => ("gridDim", d),
        };
        let dim = match dim {
            Dim::X => "x",
            Dim::Y => "y",
            Dim::Z => "z",
        };
        Ok(format!("((int32_t){name}.{dim})"))
    }

    fn barrier(&self, barrier: Barrier) -> Result<String, Unsupported> {
        Ok(match barrier {
            Barrier::Block => "__syncthreads()",
            Barrier::Warp => "__syncwarp()",
        }
        .to_string())
    }

    fn loop_pragma(
        &self,
        kind: LoopKind,
        _extent: Option<i64>,
    ) -> Result<Option<String>, Unsupported> {
        match kind {
            LoopKind::Serial | LoopKind::Vectorize => Ok(None),
            LoopKind::Unroll(None) => Ok(Some("#pragma unroll".to_string())),
            LoopKind::Unroll(Some(n)) => Ok(Some(format!("#pragma unroll {}", n.max(1)))),
            LoopKind::Parallel => Err(Unsupported::new(
                "a parallel loop (CPU threads) in CUDA code",
            )),
        }
    }

    fn declare(&self, decl: &Declaration) -> Result<String, Unsupported> {
        let Declaration {
            scope,
            ty,
            name,
            array_len,
            align,
            init,
        } = decl;
        Ok(match (scope, array_len, init) {
            (Scope::Shared, Some(len), _) => {
                format!("__shared__ __align__({align}) {ty} {name}[{len}]")
            }
            (Scope::Shared, None, None) if ty.ends_with('*') => format!(
                "extern __shared__ __align__(16) unsigned char {name}_storage[];\n    \
                 {ty} {name} = reinterpret_cast<{ty}>({name}_storage)"
            ),
            (Scope::Shared, None, None) => format!("__shared__ {ty} {name}"),
            (Scope::Shared, None, Some(init)) if ty.ends_with('*') => {
                format!("{ty} {name} = {init}")
            }
            (Scope::Shared, None, Some(_)) => {
                return Err(Unsupported::new(format!(
                    "an initializer for the shared variable `{name}`"
                )))
            }
            (_, Some(len), _) => format!("__align__({align}) {ty} {name}[{len}]"),
            (_, None, Some(init)) => format!("{ty} {name} = {init}"),
            (_, None, None) => format!("{ty} {name}"),
        })
    }

    fn math(
        &self,
        func: MathFunc,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if args.len() != func.arity() {
            return Err(Unsupported::new(format!(
                "{} with {} arguments",
                func.name(),
                args.len()
            )));
        }
        if dtype.is_vector() {
            return Err(Unsupported::new(format!(
                "{} of vector type {dtype}",
                func.name()
            )));
        }
        self.scalar_math(func, dtype, args, uses)
    }

    fn float_mod(
        &self,
        dtype: DataType,
        a: &str,
        b: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        match (dtype.scalar, dtype.lanes) {
            (ScalarType::F32, 1) => Ok(format!("fmodf({a}, {b})")),
            (ScalarType::F64, 1) => Ok(format!("fmod({a}, {b})")),
            (s @ (ScalarType::F16 | ScalarType::BF16), 1) => {
                require_scalar(s, uses);
                Ok(from_float(
                    s,
                    &format!("fmodf({}, {})", to_float(s, a), to_float(s, b)),
                ))
            }
            _ => Err(Unsupported::new(format!("fmod of {dtype}"))),
        }
    }

    fn cast(
        &self,
        value: &str,
        from: DataType,
        to: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if from.is_vector() || to.is_vector() {
            return Err(Unsupported::new(format!("cast from {from} to {to}")));
        }
        require_scalar(from.scalar, uses);
        require_scalar(to.scalar, uses);
        let half_like = |s: ScalarType| matches!(s, ScalarType::F16 | ScalarType::BF16);
        // Through `float` (or `double` for f64 → 16-bit floats, one rounding).
        let as_float = if half_like(from.scalar) {
            to_float(from.scalar, value)
        } else {
            value.to_string()
        };
        if half_like(to.scalar) {
            return Ok(match (from.scalar, to.scalar) {
                (ScalarType::F64, ScalarType::F16) => format!("__double2half({value})"),
                (ScalarType::F64, ScalarType::BF16) => format!("__double2bfloat16({value})"),
                (ScalarType::Bool, t) => from_float(t, &format!("({value} ? 1.0f : 0.0f)")),
                (_, t) => from_float(t, &format!("((float){as_float})")),
            });
        }
        if to.scalar == ScalarType::Bool {
            return Ok(format!("({as_float} != 0)"));
        }
        Ok(format!("(({}){as_float})", scalar_name(to.scalar)))
    }

    fn broadcast(&self, value: &str, to: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        self.value_type(to, uses)?;
        match to.scalar {
            ScalarType::F16 => Ok(format!("__half2half2({value})")),
            ScalarType::BF16 => Ok(format!("__bfloat162bfloat162({value})")),
            _ => {
                let make = vector_make(to)
                    .ok_or_else(|| Unsupported::new(format!("broadcast to {to}")))?;
                let parts = vec![value; to.lanes as usize].join(", ");
                Ok(format!("{make}({parts})"))
            }
        }
    }

    fn select(
        &self,
        cond: &str,
        a: &str,
        b: &str,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        self.value_type(dtype, uses)?;
        Ok(format!("({cond} ? {a} : {b})"))
    }

    fn intrinsic(
        &self,
        intrinsic: &Intrinsic,
        args: &[String],
        arg_types: &[Type],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        match intrinsic {
            Intrinsic::WarpShuffle { kind, width } => {
                if !width.is_power_of_two() || *width > 32 {
                    return Err(Unsupported::new(format!("a warp shuffle of width {width}")));
                }
                let [value, arg] = args else {
                    return Err(Unsupported::new(
                        "a warp shuffle with other than 2 arguments",
                    ));
                };
                if let Some(d) = arg_types.first().and_then(Type::as_data) {
                    self.value_type(d, uses)?;
                }
                let f = match kind {
                    ShuffleKind::Idx => "__shfl_sync",
                    ShuffleKind::Up => "__shfl_up_sync",
                    ShuffleKind::Down => "__shfl_down_sync",
                    ShuffleKind::Xor => "__shfl_xor_sync",
                };
                Ok(format!("{f}(0xffffffffu, {value}, {arg}, {width})"))
            }
            Intrinsic::VectorLoad { dtype } => self.vector_access(true, *dtype, args, uses),
            Intrinsic::VectorStore => {
                let Some(dtype) = arg_types.get(1).and_then(Type::as_data) else {
                    return Err(Unsupported::new("vector_store without a data-typed value"));
                };
                self.vector_access(false, dtype, args, uses)
            }
            Intrinsic::ExtractLane { lane } => {
                let ([value], Some(dtype)) = (args, arg_types.first().and_then(Type::as_data))
                else {
                    return Err(Unsupported::new("extract_lane of other than one vector"));
                };
                self.value_type(dtype, uses)?;
                let half = match dtype.scalar {
                    ScalarType::F16 => Some("half"),
                    ScalarType::BF16 => Some("bfloat16"),
                    _ => None,
                };
                match (half, *lane) {
                    (Some(h), 0) => Ok(format!("__low2{h}({value})")),
                    (Some(h), 1) => Ok(format!("__high2{h}({value})")),
                    (None, l @ 0..=3) if l < dtype.lanes => Ok(format!(
                        "({value}).{}",
                        ["x", "y", "z", "w"][usize::from(l)]
                    )),
                    _ => Err(Unsupported::new(format!("lane {lane} of {dtype}"))),
                }
            }
            Intrinsic::PackLanes { dtype } => {
                self.value_type(*dtype, uses)?;
                if args.len() != usize::from(dtype.lanes) {
                    return Err(Unsupported::new(format!(
                        "pack_lanes<{dtype}> of {} values",
                        args.len()
                    )));
                }
                let make = match dtype.scalar {
                    ScalarType::F16 => "__halves2half2".to_string(),
                    ScalarType::BF16 => "__halves2bfloat162".to_string(),
                    _ => vector_make(*dtype)
                        .ok_or_else(|| Unsupported::new(format!("pack_lanes<{dtype}>")))?,
                };
                Ok(format!("{make}({})", args.join(", ")))
            }
            Intrinsic::Mma { shape, input, acc } => self.mma(*shape, *input, *acc, args, uses),
            Intrinsic::LdMatrix { count, trans } => self.ldmatrix(*count, *trans, args, uses),
            Intrinsic::CpAsync { bytes } => self.cp_async(*bytes, args, uses),
            Intrinsic::CpAsyncCommit => {
                Ok("asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\")".to_string())
            }
            Intrinsic::CpAsyncWait { n } => Ok(format!(
                "asm volatile(\"cp.async.wait_group {n};\\n\" ::: \"memory\")"
            )),
            Intrinsic::DotU8I8 { .. } | Intrinsic::DotI16I8 { .. } | Intrinsic::DotI16 { .. } => {
                Err(Unsupported::new(format!("the CPU intrinsic {intrinsic}")))
            }
            Intrinsic::Function { name, .. } => Err(Unsupported::new(format!(
                "the function call `{name}` as an intrinsic"
            ))),
        }
    }

    fn assert_fail(
        &self,
        function: &str,
        message: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        uses.require_helper("hidet_assert_fail", || {
            "static __host__ __device__ __noinline__ void hidet_assert_fail(\n    \
             const char* function, const char* message) {\n    \
             printf(\"hidet: assertion failed in kernel `%s`: %s\\n\", function, message);\n\
             #if defined(__CUDA_ARCH__)\n    __trap();\n#else\n    abort();\n#endif\n}"
                .to_string()
        });
        Ok(format!(
            "hidet_assert_fail({}, {})",
            c_string(function),
            c_string(message)
        ))
    }

    fn launch(
        &self,
        kernel: &str,
        grid: &[String; 3],
        block: &[String; 3],
        shared_bytes: &str,
        args: &[String],
        _uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let dims = |d: &[String; 3]| format!("dim3({}, {}, {})", d[0], d[1], d[2]);
        let launch = format!(
            "{kernel}<<<{}, {}, {shared_bytes}>>>({})",
            dims(grid),
            dims(block),
            args.join(", ")
        );
        if shared_bytes.trim() == "0" {
            return Ok(launch);
        }
        Ok(format!(
            "cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, {shared_bytes});\n    {launch}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_and_bf16_constants_round_to_nearest_even() {
        assert_eq!(small_float_bits(1.0, 5, 10), 0x3c00);
        assert_eq!(small_float_bits(-2.0, 5, 10), 0xc000);
        assert_eq!(small_float_bits(65504.0, 5, 10), 0x7bff);
        assert_eq!(small_float_bits(65520.0, 5, 10), 0x7c00);
        assert_eq!(small_float_bits(f64::INFINITY, 5, 10), 0x7c00);
        assert_eq!(small_float_bits(2f64.powi(-24), 5, 10), 0x0001);
        assert_eq!(small_float_bits(2f64.powi(-25), 5, 10), 0x0000);
        assert_eq!(small_float_bits(0.1, 5, 10), 0x2e66);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
        assert_eq!(small_float_bits(1.0 + 2f64.powi(-11), 5, 10), 0x3c00);
        assert_eq!(small_float_bits(1.0 + 3.0 * 2f64.powi(-11), 5, 10), 0x3c02);
        assert_eq!(small_float_bits(1.0, 8, 7), 0x3f80);
        assert_eq!(small_float_bits(3.140625, 8, 7), 0x4049);
        assert_eq!(small_float_bits(-0.0, 8, 7), 0x8000);
        assert_eq!(small_float_bits(f64::NAN, 8, 7) & 0x7fc0, 0x7fc0);
    }

    #[test]
    fn mma_variants_have_ptx_register_counts() {
        let v = mma_variant(MmaShape::M16N8K16, DataType::F16, DataType::F32).unwrap();
        assert_eq!((v.a_regs, v.b_regs, v.c_regs), (4, 2, 4));
        let v = mma_variant(MmaShape::M16N8K8, DataType::BF16, DataType::F32).unwrap();
        assert_eq!((v.a_regs, v.b_regs, v.c_regs), (2, 1, 4));
        let v = mma_variant(MmaShape::M16N8K16, DataType::F16, DataType::F16).unwrap();
        assert_eq!(v.c_regs, 2);
        let v = mma_variant(MmaShape::M16N8K8, DataType::F32, DataType::F32).unwrap();
        assert_eq!((v.a_regs, v.b_regs), (4, 2));
        assert!(mma_variant(MmaShape::M16N8K16, DataType::F32, DataType::F32).is_none());
        assert!(mma_variant(MmaShape::M16N8K16, DataType::I8, DataType::I32).is_none());
    }
}
