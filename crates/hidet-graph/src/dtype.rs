//! Element data types of graph tensors.

use std::fmt;

/// The element type of a [`crate::Tensor`].
///
/// This is the set of ONNX tensor element types hidet can hold in memory. Complex types are
/// not supported; importing a tensor of such a type is an error. The 8-bit floats and 4-bit
/// integers are storage-only types (see [`crate::narrow`]): one byte per element, no
/// arithmetic, no kernel IR type ([`DType::is_storage_only`]). Strings ([`crate::string`])
/// are handles to interned text: no byte encoding, no kernel IR type.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
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
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    I4,
    U4,
    String,
}

impl DType {
    /// Every supported dtype, in declaration order.
    pub const ALL: [DType; 20] = [
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
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::I4,
        DType::U4,
        DType::String,
    ];

    /// The kernel IR's data type for this dtype. A storage-only dtype has none: it maps to the
    /// integer type of its bytes (u8 for the float8 types and u4, i8 for i4), which is only
    /// right for moving the bytes; the compiled path runs every node that reads or writes a
    /// storage-only value on the host ([`DType::is_storage_only`]).
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
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::U4 => {
                D::U8
            }
            DType::I4 => D::I8,
            // A string element is a pointer-sized handle pair; strings never reach kernels.
            DType::String => D::U64,
        }
    }

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::I4
            | DType::U4 => 1,
            DType::String => std::mem::size_of::<crate::string::Str>(),
        }
    }

    /// True for strings.
    pub fn is_string(self) -> bool {
        self == DType::String
    }

    /// True for the dtypes kernels compute on: everything but the storage-only types and
    /// strings, whose nodes run their reference `eval` on the host.
    pub fn has_kernel_type(self) -> bool {
        !self.is_storage_only() && !self.is_string()
    }

    /// True for the 8-bit float types.
    pub fn is_float8(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ
        )
    }

    /// True for the 4-bit integer types.
    pub fn is_int4(self) -> bool {
        matches!(self, DType::I4 | DType::U4)
    }

    /// True for the storage-only types (float8 and 4-bit integers): they have no kernel IR
    /// type and no arithmetic; only conversions and data movement accept them.
    pub fn is_storage_only(self) -> bool {
        self.is_float8() || self.is_int4()
    }

    /// True for the arithmetic floating-point types (f16, bf16, f32, f64; not float8).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the arithmetic signed and unsigned integer types (not bool, not 4-bit).
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
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::String => "string",
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
            DType::F8E4M3FN => 17,
            DType::F8E4M3FNUZ => 18,
            DType::F8E5M2 => 19,
            DType::F8E5M2FNUZ => 20,
            DType::U4 => 21,
            DType::I4 => 22,
            DType::String => 8,
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
