//! Math functions and named hardware intrinsics.
//!
//! Hardware-specific operations (tensor-core `mma`, `ldmatrix`, `cp.async`,
//! warp shuffles, vector memory access) are opaque to the IR: they are calls
//! to a named [`Intrinsic`] whose meaning each backend implements. Passes only
//! need their result type, which [`Intrinsic::result_type`] gives.

use crate::dtype::{DataType, ScalarType};
use crate::ty::Type;
use std::fmt;

/// Elementwise math functions. Every argument and the result share one type
/// (scalar or vector), except [`MathFunc::Pow`] and [`MathFunc::Fma`], whose
/// arguments all share it too.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MathFunc {
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Erf,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Abs,
    Floor,
    Ceil,
    /// Round to the nearest integer, halfway cases to even (C `rint`).
    Round,
    Trunc,
    IsNan,
    IsInf,
    Pow,
    Min,
    Max,
    Atan2,
    /// `fma(a, b, c) = a * b + c` with one rounding.
    Fma,
}

impl MathFunc {
    /// Number of arguments the function takes.
    pub fn arity(self) -> usize {
        match self {
            MathFunc::Pow | MathFunc::Min | MathFunc::Max | MathFunc::Atan2 => 2,
            MathFunc::Fma => 3,
            _ => 1,
        }
    }

    /// True when the result is `bool` rather than the argument type.
    pub fn returns_bool(self) -> bool {
        matches!(self, MathFunc::IsNan | MathFunc::IsInf)
    }

    pub fn name(self) -> &'static str {
        match self {
            MathFunc::Exp => "exp",
            MathFunc::Exp2 => "exp2",
            MathFunc::Log => "log",
            MathFunc::Log2 => "log2",
            MathFunc::Sqrt => "sqrt",
            MathFunc::Rsqrt => "rsqrt",
            MathFunc::Tanh => "tanh",
            MathFunc::Sigmoid => "sigmoid",
            MathFunc::Erf => "erf",
            MathFunc::Sin => "sin",
            MathFunc::Cos => "cos",
            MathFunc::Tan => "tan",
            MathFunc::Asin => "asin",
            MathFunc::Acos => "acos",
            MathFunc::Atan => "atan",
            MathFunc::Sinh => "sinh",
            MathFunc::Cosh => "cosh",
            MathFunc::Asinh => "asinh",
            MathFunc::Acosh => "acosh",
            MathFunc::Atanh => "atanh",
            MathFunc::Abs => "abs",
            MathFunc::Floor => "floor",
            MathFunc::Ceil => "ceil",
            MathFunc::Round => "round",
            MathFunc::Trunc => "trunc",
            MathFunc::IsNan => "isnan",
            MathFunc::IsInf => "isinf",
            MathFunc::Pow => "pow",
            MathFunc::Min => "min",
            MathFunc::Max => "max",
            MathFunc::Atan2 => "atan2",
            MathFunc::Fma => "fma",
        }
    }
}

/// Kind of a warp shuffle (`__shfl_*_sync`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ShuffleKind {
    /// Read from an absolute lane.
    Idx,
    /// Read from `lane - delta`.
    Up,
    /// Read from `lane + delta`.
    Down,
    /// Read from `lane ^ mask`.
    Xor,
}

/// Shape of a tensor-core `mma.sync` instruction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MmaShape {
    M16N8K8,
    M16N8K16,
}

impl MmaShape {
    /// `(m, n, k)`.
    pub fn mnk(self) -> (i64, i64, i64) {
        match self {
            MmaShape::M16N8K8 => (16, 8, 8),
            MmaShape::M16N8K16 => (16, 8, 16),
        }
    }
}

/// A named, backend-implemented operation. Arguments are described per variant.
#[derive(Clone, PartialEq, Debug)]
pub enum Intrinsic {
    /// `shfl(value, lane_or_delta_or_mask)` over the full warp (`width` lanes,
    /// a power of two ≤ 32). Returns the value's type. CUDA only.
    WarpShuffle { kind: ShuffleKind, width: u32 },
    /// `vector_load(ptr)`: loads `dtype.lanes` consecutive elements starting at
    /// `ptr` (no alignment required). Returns `dtype`.
    VectorLoad { dtype: DataType },
    /// `vector_store(ptr, value)`: stores all lanes of `value` at `ptr`. Returns void.
    VectorStore,
    /// `extract_lane(vector)`: lane `lane` of a vector value. Returns the vector's element
    /// type.
    ExtractLane { lane: u16 },
    /// `pack_lanes(x0, x1, …)`: the `dtype` vector whose lane `l` is `xl` (`dtype.lanes`
    /// arguments of `dtype`'s element type). Returns `dtype`.
    PackLanes { dtype: DataType },
    /// `mma(a_regs, b_regs, c_regs)`: `C += A·B` for one warp-level tile, where
    /// each argument is a pointer to this thread's fragment registers
    /// (`a`/`b` of `input` type, `c` of `acc` type). CUDA only. Returns void.
    Mma {
        shape: MmaShape,
        input: DataType,
        acc: DataType,
    },
    /// `ldmatrix(dst_regs, smem_ptr)`: loads `count` (1, 2 or 4) 8×8 b16
    /// matrices from shared memory into registers, transposed if `trans`.
    /// CUDA only. Returns void.
    LdMatrix { count: u32, trans: bool },
    /// `cp_async(dst_smem, src_global, src_bytes)`: asynchronously copies
    /// `bytes` (4, 8 or 16) from global to shared memory, zero-filling beyond
    /// `src_bytes`. CUDA only. Returns void.
    CpAsync { bytes: u32 },
    /// Commits the outstanding `cp.async` copies as one group. Returns void.
    CpAsyncCommit,
    /// Waits until at most `n` committed groups are still in flight. Returns void.
    CpAsyncWait { n: u32 },
    /// `dot_u8i8(acc, a, b)` on vectors of `lanes` 32-bit integers (`i32` lanes), each lane
    /// of `a` and `b` holding four bytes (little-endian): lane `l` of the result is
    /// `acc[l] + Σ_{q<4} u8(a[l] byte q) · i8(b[l] byte q)`, wrapping on `i32` overflow. The
    /// four-way multiply-add of an 8-bit product. CPU only: x86 VNNI (`vpdpbusd`) where the
    /// target has it, else exact 16-bit multiply-adds. Returns `i32` × `lanes`.
    DotU8I8 { lanes: u16 },
    /// `dot_i16i8(acc, a, b)` on `lanes` 32-bit lanes: `a` an `i32 × lanes` vector whose lanes
    /// each hold two signed 16-bit values (little-endian), `b` an `i8 × 2·lanes` vector: lane
    /// `l` of the result is `acc[l] + i16(a[l] low half) · b[2l] + i16(a[l] high half) ·
    /// b[2l+1]`, wrapping on `i32` overflow. The two-way multiply-add of an 8-bit product whose
    /// unsigned operand was widened to 16 bits ahead: on x86 the bytes of `b` sign-extended
    /// (`vpmovsxbw`) into one 16-bit multiply-add (`vpmaddwd`), which the emulation of
    /// [`Intrinsic::DotU8I8`] without VNNI needs two of. CPU only. Returns `i32` × `lanes`.
    DotI16I8 { lanes: u16 },
    /// `dot_i16(acc, a, b)` on vectors of `lanes` 32-bit integers, each lane of `a` and `b`
    /// holding two signed 16-bit values (little-endian): lane `l` of the result is `acc[l] +
    /// i16(a[l] low)·i16(b[l] low) + i16(a[l] high)·i16(b[l] high)`, wrapping on `i32`
    /// overflow. The multiply-add of an 8-bit product whose operands were both widened to 16
    /// bits ahead (`vpmaddwd` on x86). CPU only. Returns `i32` × `lanes`.
    DotI16 { lanes: u16 },
    /// A call to a device/internal function of the same module, by name,
    /// returning `ret`.
    Function { name: String, ret: Type },
}

impl Intrinsic {
    /// The type of the call's result, given the types of its arguments.
    pub fn result_type(&self, args: &[Type]) -> Type {
        match self {
            Intrinsic::WarpShuffle { .. } => args.first().cloned().unwrap_or(Type::Void),
            Intrinsic::VectorLoad { dtype } | Intrinsic::PackLanes { dtype } => Type::Data(*dtype),
            Intrinsic::ExtractLane { .. } => match args.first() {
                Some(Type::Data(d)) => Type::Data(d.element()),
                _ => Type::Void,
            },
            Intrinsic::DotU8I8 { lanes }
            | Intrinsic::DotI16I8 { lanes }
            | Intrinsic::DotI16 { lanes } => Type::Data(DataType::vector(ScalarType::I32, *lanes)),
            Intrinsic::Function { ret, .. } => ret.clone(),
            Intrinsic::VectorStore
            | Intrinsic::Mma { .. }
            | Intrinsic::LdMatrix { .. }
            | Intrinsic::CpAsync { .. }
            | Intrinsic::CpAsyncCommit
            | Intrinsic::CpAsyncWait { .. } => Type::Void,
        }
    }

    /// True when the intrinsic exists only on CUDA devices.
    pub fn is_cuda_only(&self) -> bool {
        matches!(
            self,
            Intrinsic::WarpShuffle { .. }
                | Intrinsic::Mma { .. }
                | Intrinsic::LdMatrix { .. }
                | Intrinsic::CpAsync { .. }
                | Intrinsic::CpAsyncCommit
                | Intrinsic::CpAsyncWait { .. }
        )
    }
}

impl fmt::Display for Intrinsic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Intrinsic::WarpShuffle { kind, width } => {
                write!(f, "shfl_{}<{width}>", format!("{kind:?}").to_lowercase())
            }
            Intrinsic::VectorLoad { dtype } => write!(f, "vector_load<{dtype}>"),
            Intrinsic::VectorStore => f.write_str("vector_store"),
            Intrinsic::ExtractLane { lane } => write!(f, "extract_lane<{lane}>"),
            Intrinsic::PackLanes { dtype } => write!(f, "pack_lanes<{dtype}>"),
            Intrinsic::Mma { shape, input, acc } => write!(f, "mma<{shape:?}, {input}, {acc}>"),
            Intrinsic::LdMatrix { count, trans } => write!(f, "ldmatrix<x{count}, trans={trans}>"),
            Intrinsic::CpAsync { bytes } => write!(f, "cp_async<{bytes}>"),
            Intrinsic::CpAsyncCommit => f.write_str("cp_async_commit"),
            Intrinsic::CpAsyncWait { n } => write!(f, "cp_async_wait<{n}>"),
            Intrinsic::DotU8I8 { lanes } => write!(f, "dot_u8i8<{lanes}>"),
            Intrinsic::DotI16I8 { lanes } => write!(f, "dot_i16i8<{lanes}>"),
            Intrinsic::DotI16 { lanes } => write!(f, "dot_i16<{lanes}>"),
            Intrinsic::Function { name, .. } => f.write_str(name),
        }
    }
}
