//! Element data types of graph tensors.

use std::fmt;

/// The element type of a [`crate::Tensor`].
///
/// This is the set of ONNX tensor element types hidet can hold in memory. String, complex and
/// 8-/4-bit float types are not supported; importing a tensor of such a type is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl DType {
    /// Every supported dtype, in declaration order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// The kernel IR's data type for this dtype.
    pub fn to_ir(self) -> hidet_ir::dtype::DataType {
        use hidet_ir::dtype::DataType as D;
        match self {
            DType::F32 => D::F32,
            DType::F64 => D::F64,
            DType::F16 => D::F16,
            DType::BF16 => D::BF16,
            DType::I8 => D::I8,
            DType::I16 => D::I16,
            DType::I32 => D::I32,
            DType::I64 => D::I64,
            DType::U8 => D::U8,
            DType::U16 => D::U16,
            DType::U32 => D::U32,
            DType::U64 => D::U64,
            DType::Bool => D::BOOL,
        }
    }

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// True for the floating-point types (f16, bf16, f32, f64).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for signed and unsigned integer types (not bool).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// True for i8, i16, i32, i64.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// True for u8, u16, u32, u64.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Short lowercase name (`f32`, `i64`, `bool`, ...), as printed by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }

    /// The ONNX `TensorProto.DataType` code of this dtype.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
        }
    }

    /// The dtype of an ONNX `TensorProto.DataType` code, or `None` if unsupported.
    pub fn from_onnx_code(code: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.onnx_code() == code)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
