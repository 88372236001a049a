//! The C dialect: GNU C11 for CPU kernels, compiled by GCC or Clang.
//!
//! # CPU kernel ABI
//! For every [`FunctionKind::CpuKernel`] named `NAME` the translation unit
//! contains
//! - `static void NAME(<typed params>)`: tensors and pointers are
//!   `T* __restrict__`, scalars are passed by value;
//! - `void NAME__packed(void *const *args)`, exported: `args[i]` is the data
//!   pointer of the i-th parameter for tensors and pointers, and a pointer to
//!   the value for scalars (a `uint16_t` holding the bits for `bf16`);
//!
//! and, once per module, `int hidet_set_launcher(hidet_launch_fn launch, int threads)`,
//! exported, which installs the runtime's task launcher and the number of threads
//! its parallel loops may use (atomically: kernels may be running), and returns the
//! previous number. Everything else is
//! `static`.
//!
//! # Parallel loops
//! A `LoopKind::Parallel` loop is outlined (see [`Dialect::parallel_launch`]): its body
//! becomes a task function `static void TASK(void *env, int32_t task)` and the loop a
//! call `hidet_parallel_for(TASK, &env, extent)`, which hands the tasks to the installed
//! launcher `void launch(hidet_task_fn task, void *env, int32_t tasks, int32_t threads)`
//! when there is one and `threads > 1`, and otherwise runs them in order on the calling
//! thread. The launcher must run every task exactly once and return when all have
//! finished; the library owns no threads.
//!
//! # Compiling
//! Compile as GNU C (`-std=gnu11`, the GCC default) with `-fopenmp-simd` (the
//! `omp simd` pragmas, no OpenMP runtime), and `-ffp-contract=fast` (the GNU-mode default) so
//! that vector `Fma`, spelled `a * b + c`, becomes one fused instruction on
//! hosts with FMA (`-march=native`); without contraction it is a multiply
//! and an add (two roundings).
//!
//! # Types
//! Scalars are `<stdint.h>` types, `bool`, `float`, `double`; `f16` is
//! `_Float16`; `bf16` is stored as `uint16_t` and computed in `float`
//! (converted on every load and store, round-to-nearest-even; a cast to
//! `bf16` rounds). Vectors are GCC/Clang vector extensions
//! (`typedef float hidet_f32x8 __attribute__((vector_size(32)))`) with a
//! power-of-two lane count; vector loads/stores are unaligned (`memcpy`).
//! Vectors of `bool` and `bf16` are not supported, nor is `Select` on vectors.
//!
//! # Math
//! `Exp`, `Log`, `Tanh`, `Sigmoid` and `Erf` on `f32` (and on `f16`/`bf16`,
//! which compute in `float`) call the branch-free inline helpers of
//! [`crate::c_math`], which vectorize inside `#pragma omp simd` loops; their
//! error bounds are documented there. Other `f32` math uses the `expf`
//! family, `f64` the `exp` family (libm accuracy), `f16` computes in `float`.
//! `Round` rounds half to even (`rintf`), `Min`/`Max` on floats are
//! `fminf`/`fmaxf`. Vector math other than `Fma` is a per-lane loop in an
//! inline helper, which the compiler vectorizes where it can (always for the
//! [`crate::c_math`] functions).
//!
//! # Assert
//! A failed `Assert` prints `hidet: assertion failed in kernel `NAME`: MSG`
//! to stderr and calls `abort()`; a runtime that must survive it can catch
//! `SIGABRT` or run kernels in a child process.
//!
//! CUDA-only constructs (built-ins, barriers, shared memory, warp and tensor
//! core intrinsics, CUDA kernels, launches) are [`Unsupported`].

use crate::c_math;
use crate::dialect::{Declaration, Dialect, EmittedFunction, EmittedParam, ParamClass, Uses};
use crate::error::Unsupported;
use crate::literal::{c_string, finite_float_literal};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::Builtin;
use hidet_ir::function::{Function, FunctionKind, IRModule};
use hidet_ir::intrinsic::{Intrinsic, MathFunc};
use hidet_ir::stmt::{Barrier, LoopKind, Scope};
use hidet_ir::ty::Type;
use std::fmt::Write as _;

/// GNU C11 for CPU kernels; see the [module documentation](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct CDialect;

/// An elementwise function the dialect spells: a [`MathFunc`] or `fmod`.
#[derive(Clone, Copy)]
enum Func {
    Math(MathFunc),
    Fmod,
}

impl Func {
    fn name(self) -> &'static str {
        match self {
            Func::Math(m) => m.name(),
            Func::Fmod => "fmod",
        }
    }

    fn arity(self) -> usize {
        match self {
            Func::Math(m) => m.arity(),
            Func::Fmod => 2,
        }
    }
}

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
        ScalarType::F16 => "_Float16",
        ScalarType::BF16 => "float",
        ScalarType::F32 => "float",
        ScalarType::F64 => "double",
    }
}

/// The name of the vector typedef for `d` (lanes > 1).
fn vector_name(d: DataType) -> String {
    format!("hidet_{d}")
}

fn require_bf16_helpers(uses: &mut Uses) {
    uses.require_helper("hidet_bf16_to_f32", || {
        "static inline float hidet_bf16_to_f32(uint16_t h) {\n    \
         uint32_t u = (uint32_t)h << 16;\n    float f;\n    \
         __builtin_memcpy(&f, &u, sizeof f);\n    return f;\n}"
            .to_string()
    });
    uses.require_helper("hidet_f32_to_bf16", || {
        "/* round to nearest even; NaN stays NaN */\n\
         static inline uint16_t hidet_f32_to_bf16(float f) {\n    \
         uint32_t u;\n    __builtin_memcpy(&u, &f, sizeof u);\n    \
         if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n    \
         u += 0x7fffu + ((u >> 16) & 1u);\n    return (uint16_t)(u >> 16);\n}"
            .to_string()
    });
    uses.require_helper("hidet_bf16_round", || {
        "static inline float hidet_bf16_round(float f) {\n    \
         return hidet_bf16_to_f32(hidet_f32_to_bf16(f));\n}"
            .to_string()
    });
}

/// `f` rounded to the nearest bf16 (ties to even), as an f32.
fn round_to_bf16(f: f32) -> f32 {
    if f.is_nan() {
        return f;
    }
    let u = f.to_bits();
    let r = u.wrapping_add(0x7fff + ((u >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r)
}

impl CDialect {
    /// A scalar call of `func` on arguments of the scalar type `dtype`.
    fn scalar_func(
        &self,
        func: Func,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let s = dtype.scalar;
        if s.is_integer() {
            return self.int_func(func, dtype, args, uses);
        }
        let (suffix, one) = match s {
            ScalarType::F32 | ScalarType::BF16 | ScalarType::F16 => ("f", "1.0f"),
            ScalarType::F64 => ("", "1.0"),
            _ => return Err(Unsupported::new(format!("{} of {dtype}", func.name()))),
        };
        // f16 computes in float and converts back.
        let promoted: Vec<String> = if s == ScalarType::F16 {
            args.iter().map(|a| format!("(float){a}")).collect()
        } else {
            args.to_vec()
        };
        let a = |i: usize| promoted[i].as_str();
        let call = |name: &str| format!("{name}{suffix}({})", promoted.join(", "));
        let f32_helper = match func {
            Func::Math(m) if s != ScalarType::F64 => c_math::require_f32(m, uses),
            _ => None,
        };
        let text = match (func, f32_helper) {
            (_, Some(helper)) => format!("{helper}({})", a(0)),
            (Func::Fmod, None) => call("fmod"),
            (Func::Math(m), None) => match m {
                MathFunc::Exp => call("exp"),
                MathFunc::Exp2 => call("exp2"),
                MathFunc::Log => call("log"),
                MathFunc::Log2 => call("log2"),
                MathFunc::Sqrt => call("sqrt"),
                MathFunc::Rsqrt => format!("({one} / sqrt{suffix}({}))", a(0)),
                MathFunc::Tanh => call("tanh"),
                MathFunc::Sigmoid => format!("({one} / ({one} + exp{suffix}(-{})))", a(0)),
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
                MathFunc::IsNan => return Ok(format!("(isnan({}) != 0)", a(0))),
                MathFunc::IsInf => return Ok(format!("(isinf({}) != 0)", a(0))),
                MathFunc::Pow => call("pow"),
                MathFunc::Min => call("fmin"),
                MathFunc::Max => call("fmax"),
                MathFunc::Atan2 => call("atan2"),
                MathFunc::Fma => call("fma"),
            },
        };
        Ok(if s == ScalarType::F16 {
            format!("((_Float16){text})")
        } else {
            text
        })
    }

    /// `Min`, `Max` and `Abs` of integers, through inline helpers.
    fn int_func(
        &self,
        func: Func,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let ty = scalar_name(dtype.scalar);
        let (op, body) = match func {
            Func::Math(MathFunc::Min) => ("min", "return a < b ? a : b;"),
            Func::Math(MathFunc::Max) => ("max", "return a > b ? a : b;"),
            Func::Math(MathFunc::Abs) => ("abs", "return a < 0 ? -a : a;"),
            other => {
                return Err(Unsupported::new(format!(
                    "{} of integer type {dtype}",
                    other.name()
                )))
            }
        };
        let name = format!("hidet_{op}_{}", dtype.scalar.name());
        let params = if func.arity() == 2 {
            format!("{ty} a, {ty} b")
        } else {
            format!("{ty} a")
        };
        uses.require_helper(&name, || {
            format!("static inline {ty} {name}({params}) {{\n    {body}\n}}")
        });
        Ok(format!("{name}({})", args.join(", ")))
    }

    /// `func` on vectors: `Fma` as `a * b + c`, everything else a per-lane
    /// loop in an inline helper.
    fn vector_func(
        &self,
        func: Func,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if let Func::Math(MathFunc::Fma) = func {
            if dtype.is_float() {
                self.value_type(dtype, uses)?;
                return Ok(format!("({} * {} + {})", args[0], args[1], args[2]));
            }
        }
        if let Func::Math(MathFunc::IsNan | MathFunc::IsInf) = func {
            return Err(Unsupported::new(format!(
                "{} of vector {dtype}",
                func.name()
            )));
        }
        let vty = self.value_type(dtype, uses)?;
        let name = format!("hidet_{}_{dtype}", func.name());
        if !uses.has_helper(&name) {
            let lane_args: Vec<String> = (0..func.arity()).map(|i| format!("a{i}[i]")).collect();
            let lane = self.scalar_func(func, dtype.element(), &lane_args, uses)?;
            let params: Vec<String> = (0..func.arity()).map(|i| format!("{vty} a{i}")).collect();
            let lanes = dtype.lanes;
            uses.require_helper(&name, || {
                format!(
                    "static inline {vty} {name}({}) {{\n    {vty} r;\n    \
                     for (int i = 0; i < {lanes}; i++) r[i] = {lane};\n    return r;\n}}",
                    params.join(", ")
                )
            });
        }
        Ok(format!("{name}({})", args.join(", ")))
    }

    fn func(
        &self,
        func: Func,
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
            self.vector_func(func, dtype, args, uses)
        } else {
            self.scalar_func(func, dtype, args, uses)
        }
    }
}

impl Dialect for CDialect {
    fn name(&self) -> &'static str {
        "C"
    }

    fn value_type(&self, dtype: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        if dtype.lanes <= 1 {
            return Ok(scalar_name(dtype.scalar).to_string());
        }
        if dtype.is_bool() || dtype.scalar == ScalarType::BF16 {
            return Err(Unsupported::new(format!("vector type {dtype}")));
        }
        if !dtype.lanes.is_power_of_two() {
            return Err(Unsupported::new(format!(
                "vector type {dtype} (lanes must be a power of two)"
            )));
        }
        uses.vector_types.insert(dtype);
        Ok(vector_name(dtype))
    }

    fn storage_type(&self, dtype: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        if dtype == DataType::BF16 {
            return Ok("uint16_t".to_string());
        }
        self.value_type(dtype, uses)
    }

    fn load(
        &self,
        dtype: DataType,
        lvalue: String,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if dtype == DataType::BF16 {
            require_bf16_helpers(uses);
            return Ok(format!("hidet_bf16_to_f32({lvalue})"));
        }
        Ok(lvalue)
    }

    fn store(
        &self,
        dtype: DataType,
        value: String,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if dtype == DataType::BF16 {
            require_bf16_helpers(uses);
            return Ok(format!("hidet_f32_to_bf16({value})"));
        }
        Ok(value)
    }

    fn float_literal(
        &self,
        v: f64,
        dtype: DataType,
        _uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if let Some(text) = finite_float_literal(v, dtype) {
            return Ok(text);
        }
        let non_finite = |suffix: &str| {
            if v.is_nan() {
                format!("__builtin_nan{suffix}(\"\")")
            } else if v > 0.0 {
                format!("__builtin_inf{suffix}()")
            } else {
                format!("(-__builtin_inf{suffix}())")
            }
        };
        match (dtype.scalar, dtype.lanes) {
            (ScalarType::F32, 1) => Ok(non_finite("f")),
            (ScalarType::F64, 1) => Ok(non_finite("")),
            (ScalarType::F16, 1) => {
                let inner =
                    finite_float_literal(v, DataType::F64).unwrap_or_else(|| non_finite(""));
                Ok(format!("((_Float16){inner})"))
            }
            (ScalarType::BF16, 1) => {
                let r = round_to_bf16(v as f32);
                Ok(
                    finite_float_literal(r as f64, DataType::F32)
                        .unwrap_or_else(|| non_finite("f")),
                )
            }
            _ => Err(Unsupported::new(format!("float constant of type {dtype}"))),
        }
    }

    fn offset_type(&self) -> Option<&'static str> {
        Some("int64_t")
    }

    fn unconditional_gather(
        &self,
        ptr: &str,
        offset: &str,
        cond: &str,
        other: &str,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Option<String> {
        if dtype != DataType::F32 {
            return None;
        }
        let name = "hidet_load_or_f32";
        uses.require_helper(name, || {
            format!(
                "static inline float {name}(const float *p, int32_t i, int32_t c, float other) {{\n    float v = p[i & -c];\n    return c ? v : other;\n}}"
            )
        });
        Some(format!("{name}({ptr}, {offset}, {cond}, {other})"))
    }

    fn guard_select(
        &self,
        cond: &str,
        a: &str,
        b: &str,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Option<String> {
        if dtype != DataType::F32 {
            return None;
        }
        let name = "hidet_guard_select_f32";
        uses.require_helper(name, || {
            format!(
                "static inline float {name}(bool c, float a, float b) {{\n    \
                 union {{ float f; uint32_t u; }} x = {{ a }}, y = {{ b }};\n    \
                 uint32_t keep = -(uint32_t)c;\n    \
                 x.u = (x.u & keep) | (y.u & ~keep);\n    \
                 return x.f;\n}}"
            )
        });
        Some(format!("{name}({cond}, {a}, {b})"))
    }

    fn helper_qualifier(&self) -> &'static str {
        "static inline"
    }

    fn prelude(&self, module: &IRModule, uses: &Uses) -> String {
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
        let mut out = format!(
            "/* module {module_name}: generated by hidet-codegen (C dialect).\n   \
             Compile as GNU C11 with -fopenmp-simd -ffp-contract=fast. */\n\
             #include <stdint.h>\n#include <stdbool.h>\n#include <stddef.h>\n\
             #include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n\
             #define HIDET_EXPORT __attribute__((visibility(\"default\")))\n\
             typedef void (*hidet_task_fn)(void *env, int32_t task);\n\
             typedef void (*hidet_launch_fn)(hidet_task_fn task, void *env, int32_t tasks, \
             int32_t threads);\n\
             static hidet_launch_fn hidet_launcher = NULL;\n\
             static int32_t hidet_threads = 1;\n"
        );
        for v in &uses.vector_types {
            let _ = writeln!(
                out,
                "typedef {} {} __attribute__((vector_size({})));",
                scalar_name(v.scalar),
                vector_name(*v),
                v.bytes()
            );
        }
        out
    }

    fn function_head(
        &self,
        function: &Function,
        ret: &str,
        params: &[EmittedParam],
    ) -> Result<String, Unsupported> {
        let qualifier = match &function.kind {
            FunctionKind::CpuKernel => "static",
            FunctionKind::Internal => "static inline",
            FunctionKind::CudaKernel(_) => {
                return Err(Unsupported::new("a CUDA kernel (use the CUDA dialect)"))
            }
            FunctionKind::HostLauncher => {
                return Err(Unsupported::new(
                    "a CUDA host launcher (use the CUDA dialect)",
                ))
            }
        };
        let list = if params.is_empty() {
            "void".to_string()
        } else {
            params
                .iter()
                .map(|p| format!("{} {}", p.c_type, p.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Ok(format!("{qualifier} {ret} {}({list})", function.name))
    }

    fn epilogue(
        &self,
        _module: &IRModule,
        functions: &[EmittedFunction<'_>],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let mut out = String::new();
        for f in functions {
            if f.function.kind != FunctionKind::CpuKernel {
                continue;
            }
            let mut args = Vec::new();
            for (i, p) in f.params.iter().enumerate() {
                let arg = match &p.class {
                    ParamClass::Pointer { .. } => {
                        let ty = p.c_type.trim_end_matches(" __restrict__");
                        format!("({ty})args[{i}]")
                    }
                    ParamClass::Value { dtype } => {
                        let storage = self.storage_type(*dtype, uses)?;
                        self.load(*dtype, format!("*(const {storage}*)args[{i}]"), uses)?
                    }
                };
                args.push(arg);
            }
            let name = &f.function.name;
            let _ = writeln!(
                out,
                "HIDET_EXPORT void {name}__packed(void *const *args) {{\n    \
                 {}{name}({});\n}}\n",
                if f.params.is_empty() {
                    "(void)args;\n    "
                } else {
                    ""
                },
                args.join(", ")
            );
        }
        out.push_str(
            "HIDET_EXPORT int hidet_set_launcher(hidet_launch_fn launch, int threads) {\n    \
             int previous = __atomic_exchange_n(&hidet_threads, threads > 0 ? threads : 1, \
             __ATOMIC_RELAXED);\n    \
             __atomic_store_n(&hidet_launcher, launch, __ATOMIC_RELEASE);\n    \
             return previous;\n}\n",
        );
        Ok(out)
    }

    fn parallel_launch(&self, uses: &mut Uses) -> Result<Option<String>, Unsupported> {
        let name = "hidet_parallel_for";
        uses.require_helper(name, || {
            format!(
                "static void {name}(hidet_task_fn task, void *env, int32_t tasks) {{\n    \
                 hidet_launch_fn launch = __atomic_load_n(&hidet_launcher, __ATOMIC_ACQUIRE);\n    \
                 int32_t threads = __atomic_load_n(&hidet_threads, __ATOMIC_RELAXED);\n    \
                 if (launch != NULL && threads > 1 && tasks > 1) {{\n        \
                 launch(task, env, tasks, threads);\n    \
                 }} else {{\n        \
                 for (int32_t t = 0; t < tasks; t++) task(env, t);\n    \
                 }}\n}}"
            )
        });
        Ok(Some(name.to_string()))
    }

    fn builtin(&self, builtin: Builtin) -> Result<String, Unsupported> {
        Err(Unsupported::new(format!("the CUDA built-in {builtin}")))
    }

    fn barrier(&self, barrier: Barrier) -> Result<String, Unsupported> {
        Err(Unsupported::new(format!("the CUDA barrier {barrier:?}")))
    }

    fn loop_pragma(
        &self,
        kind: LoopKind,
        extent: Option<i64>,
    ) -> Result<Option<String>, Unsupported> {
        Ok(match kind {
            LoopKind::Serial => None,
            LoopKind::Unroll(Some(n)) => Some(format!("#pragma GCC unroll {}", n.clamp(1, 65534))),
            LoopKind::Unroll(None) => {
                extent.map(|n| format!("#pragma GCC unroll {}", n.clamp(1, 65534)))
            }
            // Parallel loops are outlined (`parallel_launch`), never emitted as loops.
            LoopKind::Parallel => None,
            LoopKind::Vectorize => Some("#pragma omp simd".to_string()),
        })
    }

    fn declare(&self, decl: &Declaration) -> Result<String, Unsupported> {
        if decl.scope == Scope::Shared {
            return Err(Unsupported::new(format!(
                "shared memory (`{}`) on the CPU",
                decl.name
            )));
        }
        Ok(match (decl.array_len, &decl.init) {
            (Some(len), _) => format!(
                "{} {}[{len}] __attribute__((aligned({})))",
                decl.ty, decl.name, decl.align
            ),
            (None, Some(init)) => format!("{} {} = {init}", decl.ty, decl.name),
            (None, None) => format!("{} {}", decl.ty, decl.name),
        })
    }

    fn math(
        &self,
        func: MathFunc,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        self.func(Func::Math(func), dtype, args, uses)
    }

    fn float_mod(
        &self,
        dtype: DataType,
        a: &str,
        b: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        self.func(Func::Fmod, dtype, &[a.to_string(), b.to_string()], uses)
    }

    fn cast(
        &self,
        value: &str,
        from: DataType,
        to: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if to.is_vector() {
            let from_ty = self.value_type(from, uses)?;
            let to_ty = self.value_type(to, uses)?;
            // GCC 12 converts vectors of 8-bit integers lane by lane (a scalar conversion and
            // insert per lane) when they go straight to floats, or come from a load; widened
            // to 32 bits in a register first, each step is one vector instruction
            // (`vpmovzxbd` then `vcvtdq2ps`; `vcvttps2dq` then `vpmovdb` the other way), with
            // the same values.
            let byte = |t: DataType| t.is_integer() && t.scalar.bytes() == 1;
            let wide_t = DataType::vector(ScalarType::I32, to.lanes);
            if byte(from) && (to.is_float() || to.scalar.bytes() >= 4) {
                let wide = self.value_type(wide_t, uses)?;
                let name = format!("hidet_widen_{from}");
                uses.require_helper(&name, || {
                    format!(
                        "static inline {wide} {name}({from_ty} v) {{\n\
                         #if defined(__x86_64__) || defined(__i386__)\n    \
                         __asm__(\"\" : \"+x\"(v));\n\
                         #endif\n    \
                         return __builtin_convertvector(v, {wide});\n}}"
                    )
                });
                return Ok(if to == wide_t {
                    format!("{name}({value})")
                } else {
                    format!("__builtin_convertvector({name}({value}), {to_ty})")
                });
            }
            if from.is_float() && byte(to) {
                let wide = self.value_type(wide_t, uses)?;
                return Ok(format!(
                    "__builtin_convertvector(__builtin_convertvector({value}, {wide}), {to_ty})"
                ));
            }
            return Ok(format!("__builtin_convertvector({value}, {to_ty})"));
        }
        if to.scalar == ScalarType::BF16 {
            require_bf16_helpers(uses);
            return Ok(format!("hidet_bf16_round((float){value})"));
        }
        Ok(format!("(({}){value})", scalar_name(to.scalar)))
    }

    fn broadcast(&self, value: &str, to: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        let vty = self.value_type(to, uses)?;
        let sty = scalar_name(to.scalar);
        let name = format!("hidet_broadcast_{to}");
        let lanes = vec!["x"; to.lanes as usize].join(", ");
        uses.require_helper(&name, || {
            format!("static inline {vty} {name}({sty} x) {{\n    {vty} v = {{{lanes}}};\n    return v;\n}}")
        });
        Ok(format!("{name}({value})"))
    }

    fn intrinsic(
        &self,
        intrinsic: &Intrinsic,
        args: &[String],
        arg_types: &[Type],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        match intrinsic {
            Intrinsic::VectorLoad { dtype } => {
                let [ptr] = args else {
                    return Err(Unsupported::new("vector_load with other than 1 argument"));
                };
                let vty = self.value_type(*dtype, uses)?;
                let name = format!("hidet_load_{dtype}");
                uses.require_helper(&name, || {
                    format!(
                        "/* unaligned load */\nstatic inline {vty} {name}(const void *p) {{\n    \
                         {vty} v;\n    __builtin_memcpy(&v, p, sizeof v);\n    return v;\n}}"
                    )
                });
                Ok(format!("{name}({ptr})"))
            }
            Intrinsic::VectorStore => {
                let ([ptr, value], [_, value_ty]) = (args, arg_types) else {
                    return Err(Unsupported::new("vector_store with other than 2 arguments"));
                };
                let Some(dtype) = value_ty.as_data() else {
                    return Err(Unsupported::new(format!("vector_store of a {value_ty}")));
                };
                let vty = self.value_type(dtype, uses)?;
                let name = format!("hidet_store_{dtype}");
                uses.require_helper(&name, || {
                    format!(
                        "/* unaligned store */\nstatic inline void {name}(void *p, {vty} v) {{\n    \
                         __builtin_memcpy(p, &v, sizeof v);\n}}"
                    )
                });
                Ok(format!("{name}({ptr}, {value})"))
            }
            Intrinsic::ExtractLane { lane } => {
                let [value] = args else {
                    return Err(Unsupported::new("extract_lane of other than one vector"));
                };
                Ok(format!("({value})[{lane}]"))
            }
            Intrinsic::PackLanes { dtype } => {
                let vty = self.value_type(*dtype, uses)?;
                if args.len() != usize::from(dtype.lanes) {
                    return Err(Unsupported::new(format!(
                        "pack_lanes<{dtype}> of {} values",
                        args.len()
                    )));
                }
                Ok(format!("(({vty}){{{}}})", args.join(", ")))
            }
            Intrinsic::DotU8I8 { lanes } => {
                let vty = self.value_type(DataType::vector(ScalarType::I32, *lanes), uses)?;
                let helper = MultiplyAdd {
                    name: "dot_u8i8",
                    what: "four-way u8 x i8",
                    b_type: vty.clone(),
                    body: dot_u8i8_body(*lanes, &vty),
                };
                helper.call(*lanes, &vty, args, uses)
            }
            Intrinsic::DotI16I8 { lanes } => {
                let vty = self.value_type(DataType::vector(ScalarType::I32, *lanes), uses)?;
                let helper = MultiplyAdd {
                    name: "dot_i16i8",
                    what: "two-way i16 x i8",
                    b_type: self.value_type(DataType::vector(ScalarType::I8, 2 * lanes), uses)?,
                    body: dot_i16i8_body(*lanes, &vty),
                };
                helper.call(*lanes, &vty, args, uses)
            }
            Intrinsic::DotI16 { lanes } => {
                let vty = self.value_type(DataType::vector(ScalarType::I32, *lanes), uses)?;
                let helper = MultiplyAdd {
                    name: "dot_i16",
                    what: "two-way i16 x i16",
                    b_type: vty.clone(),
                    body: dot_i16_body(*lanes, &vty),
                };
                helper.call(*lanes, &vty, args, uses)
            }
            other => Err(Unsupported::new(format!("the intrinsic {other}"))),
        }
    }

    fn assert_fail(
        &self,
        function: &str,
        message: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        uses.require_helper("hidet_assert_fail", || {
            "__attribute__((noreturn, cold)) static void hidet_assert_fail(\n    \
             const char *function, const char *message) {\n    \
             fprintf(stderr, \"hidet: assertion failed in kernel `%s`: %s\\n\", function, message);\n    \
             fflush(stderr);\n    abort();\n}"
                .to_string()
        });
        Ok(format!(
            "hidet_assert_fail({}, {})",
            c_string(function),
            c_string(message)
        ))
    }
}

/// A multiply-add intrinsic emitted as a static inline helper `hidet_{name}_{lanes}(acc, a, b)`
/// on `i32` vectors (`b` of `b_type`), defined once per module.
struct MultiplyAdd {
    name: &'static str,
    /// The products it adds, for the helper's comment.
    what: &'static str,
    b_type: String,
    body: String,
}

impl MultiplyAdd {
    /// The call of the helper on `args` (`acc, a, b`), requiring its definition.
    fn call(
        self,
        lanes: u16,
        vty: &str,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let [acc, a, b] = args else {
            return Err(Unsupported::new(format!(
                "{} with other than 3 arguments",
                self.name
            )));
        };
        let name = format!("hidet_{}_{lanes}", self.name);
        let MultiplyAdd {
            what, b_type, body, ..
        } = self;
        uses.require_helper(&name, || {
            format!(
                "/* acc + {what} products per 32-bit lane */\n\
                 #if defined(__x86_64__)\n#include <immintrin.h>\n#endif\n\
                 static inline {vty} {name}({vty} acc, {vty} a, {b_type} b) {{\n{body}}}"
            )
        });
        Ok(format!("{name}({acc}, {a}, {b})"))
    }
}

/// The body of the `dot_u8i8` helper on `lanes` 32-bit lanes of vector type `vty`: VNNI's
/// `vpdpbusd` where the compiler targets it (`__AVX512VNNI__`, or `__AVXVNNI__` for 256 bits),
/// else, on AVX2/AVX-512BW, exact 16-bit multiply-adds (`vpmaddwd`) of the even and the odd
/// bytes, widened (zero-extended `a`, sign-extended `b`), else a per-lane loop.
fn dot_u8i8_body(lanes: u16, vty: &str) -> String {
    let portable = format!(
        "    {vty} r;\n    for (int l = 0; l < {lanes}; ++l) {{\n        \
         uint32_t ua = (uint32_t)a[l], ub = (uint32_t)b[l], s = (uint32_t)acc[l];\n        \
         for (int q = 0; q < 4; ++q)\n            \
         s += (uint32_t)((int32_t)(uint8_t)(ua >> (8 * q)) * (int32_t)(int8_t)(uint8_t)(ub >> (8 * q)));\n        \
         r[l] = (int32_t)s;\n    }}\n    return r;\n"
    );
    let (vnni, vnni_call, madd_guard, p) = match lanes {
        16 => (
            "defined(__AVX512VNNI__)",
            "_mm512_dpbusd_epi32",
            "defined(__AVX512BW__)",
            "_mm512",
        ),
        8 => (
            "defined(__AVX512VNNI__) && defined(__AVX512VL__)",
            "_mm256_dpbusd_epi32",
            "defined(__AVX2__)",
            "_mm256",
        ),
        _ => return portable,
    };
    let si = if lanes == 16 { "si512" } else { "si256" };
    let m = if lanes == 16 { "__m512i" } else { "__m256i" };
    let avx_vnni = if lanes == 8 {
        format!(
            "#elif defined(__AVXVNNI__)\n    return ({vty})_mm256_dpbusd_avx_epi32(({m})acc, ({m})a, ({m})b);\n"
        )
    } else {
        String::new()
    };
    format!(
        "#if {vnni}\n    return ({vty}){vnni_call}(({m})acc, ({m})a, ({m})b);\n{avx_vnni}\
         #elif {madd_guard}\n    \
         {m} low = {p}_set1_epi16(0x00ff);\n    \
         {m} a_even = {p}_and_{si}(({m})a, low), a_odd = {p}_srli_epi16(({m})a, 8);\n    \
         {m} b_even = {p}_srai_epi16({p}_slli_epi16(({m})b, 8), 8), b_odd = {p}_srai_epi16(({m})b, 8);\n    \
         {m} s = {p}_add_epi32({p}_madd_epi16(a_even, b_even), {p}_madd_epi16(a_odd, b_odd));\n    \
         return ({vty}){p}_add_epi32(({m})acc, s);\n#else\n{portable}#endif\n"
    )
}

/// The body of the `dot_i16i8` helper on `lanes` 32-bit lanes of vector type `vty`: the bytes
/// of `b` sign-extended to 16 bits (`vpmovsxbw`) and multiplied into `a`'s 16-bit pairs by one
/// `vpmaddwd` on AVX2 (8 lanes) or AVX-512BW (16 lanes), else a per-lane loop.
fn dot_i16i8_body(lanes: u16, vty: &str) -> String {
    let portable = format!(
        "    {vty} r;\n    for (int l = 0; l < {lanes}; ++l) {{\n        \
         uint32_t ua = (uint32_t)a[l];\n        \
         int32_t p = (int32_t)(int16_t)(uint16_t)ua * (int32_t)b[2 * l]\n            \
         + (int32_t)(int16_t)(uint16_t)(ua >> 16) * (int32_t)b[2 * l + 1];\n        \
         r[l] = (int32_t)((uint32_t)acc[l] + (uint32_t)p);\n    }}\n    return r;\n"
    );
    let (guard, p, m, half) = match lanes {
        16 => ("defined(__AVX512BW__)", "_mm512", "__m512i", "__m256i"),
        8 => ("defined(__AVX2__)", "_mm256", "__m256i", "__m128i"),
        _ => return portable,
    };
    format!(
        "#if {guard}\n    \
         {m} wide = {p}_cvtepi8_epi16(({half})b);\n    \
         return ({vty}){p}_add_epi32(({m})acc, {p}_madd_epi16(({m})a, wide));\n\
         #else\n{portable}#endif\n"
    )
}

/// The body of the `dot_i16` helper on `lanes` 32-bit lanes of vector type `vty`: one
/// `vpmaddwd` on AVX2 (8 lanes) or AVX-512BW (16 lanes), else a per-lane loop.
fn dot_i16_body(lanes: u16, vty: &str) -> String {
    let portable = format!(
        "    {vty} r;\n    for (int l = 0; l < {lanes}; ++l) {{\n        \
         uint32_t ua = (uint32_t)a[l], ub = (uint32_t)b[l];\n        \
         uint32_t lo = (uint32_t)((int32_t)(int16_t)(uint16_t)ua * (int32_t)(int16_t)(uint16_t)ub);\n        \
         uint32_t hi = (uint32_t)((int32_t)(int16_t)(uint16_t)(ua >> 16) * (int32_t)(int16_t)(uint16_t)(ub >> 16));\n        \
         r[l] = (int32_t)((uint32_t)acc[l] + lo + hi);\n    }}\n    return r;\n"
    );
    let (guard, p, m) = match lanes {
        16 => ("defined(__AVX512BW__)", "_mm512", "__m512i"),
        8 => ("defined(__AVX2__)", "_mm256", "__m256i"),
        _ => return portable,
    };
    format!(
        "#if {guard}\n    \
         return ({vty}){p}_add_epi32(({m})acc, {p}_madd_epi16(({m})a, ({m})b));\n\
         #else\n{portable}#endif\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        assert_eq!(round_to_bf16(1.0), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round_to_bf16(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_to_bf16(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
    }
}
