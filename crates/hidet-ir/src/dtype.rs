//! Scalar and SIMD vector data types.

use std::fmt;

/// The element type of a scalar or of one SIMD lane.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum ScalarType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl ScalarType {
    /// Every scalar type, in declaration order.
    pub const ALL: [ScalarType; 13] = [
        ScalarType::Bool,
        ScalarType::I8,
        ScalarType::I16,
        ScalarType::I32,
        ScalarType::I64,
        ScalarType::U8,
        ScalarType::U16,
        ScalarType::U32,
        ScalarType::U64,
        ScalarType::F16,
        ScalarType::BF16,
        ScalarType::F32,
        ScalarType::F64,
    ];

    /// Size of one value in bytes (`bool` takes one byte).
    pub fn bytes(self) -> usize {
        match self {
            ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 | ScalarType::F16 | ScalarType::BF16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            ScalarType::F16 | ScalarType::BF16 | ScalarType::F32 | ScalarType::F64
        )
    }

    /// True for signed and unsigned integers (not for `bool`).
    pub fn is_integer(self) -> bool {
        !self.is_float() && self != ScalarType::Bool
    }

    pub fn is_signed(self) -> bool {
        matches!(
            self,
            ScalarType::I8 | ScalarType::I16 | ScalarType::I32 | ScalarType::I64
        ) || self.is_float()
    }

    /// The short name used by the printer and in error messages (`f32`, `i64`, …).
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "i8",
            ScalarType::I16 => "i16",
            ScalarType::I32 => "i32",
            ScalarType::I64 => "i64",
            ScalarType::U8 => "u8",
            ScalarType::U16 => "u16",
            ScalarType::U32 => "u32",
            ScalarType::U64 => "u64",
            ScalarType::F16 => "f16",
            ScalarType::BF16 => "bf16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }
}

/// A scalar type, or a SIMD vector of `lanes` scalars when `lanes > 1`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct DataType {
    pub scalar: ScalarType,
    pub lanes: u16,
}

impl DataType {
    pub const BOOL: DataType = DataType::scalar(ScalarType::Bool);
    pub const I8: DataType = DataType::scalar(ScalarType::I8);
    pub const I16: DataType = DataType::scalar(ScalarType::I16);
    pub const I32: DataType = DataType::scalar(ScalarType::I32);
    pub const I64: DataType = DataType::scalar(ScalarType::I64);
    pub const U8: DataType = DataType::scalar(ScalarType::U8);
    pub const U16: DataType = DataType::scalar(ScalarType::U16);
    pub const U32: DataType = DataType::scalar(ScalarType::U32);
    pub const U64: DataType = DataType::scalar(ScalarType::U64);
    pub const F16: DataType = DataType::scalar(ScalarType::F16);
    pub const BF16: DataType = DataType::scalar(ScalarType::BF16);
    pub const F32: DataType = DataType::scalar(ScalarType::F32);
    pub const F64: DataType = DataType::scalar(ScalarType::F64);
    pub const F32X4: DataType = DataType::vector(ScalarType::F32, 4);
    pub const F32X8: DataType = DataType::vector(ScalarType::F32, 8);
    pub const F32X16: DataType = DataType::vector(ScalarType::F32, 16);
    pub const F16X2: DataType = DataType::vector(ScalarType::F16, 2);
    pub const BF16X2: DataType = DataType::vector(ScalarType::BF16, 2);

    pub const fn scalar(scalar: ScalarType) -> DataType {
        DataType { scalar, lanes: 1 }
    }

    /// A vector of `lanes` elements of `scalar`. Requires `lanes >= 1`.
    pub const fn vector(scalar: ScalarType, lanes: u16) -> DataType {
        DataType { scalar, lanes }
    }

    /// This type's element type with `lanes` lanes.
    pub fn with_lanes(self, lanes: u16) -> DataType {
        DataType::vector(self.scalar, lanes)
    }

    /// The type of one lane.
    pub fn element(self) -> DataType {
        DataType::scalar(self.scalar)
    }

    pub fn is_vector(self) -> bool {
        self.lanes > 1
    }

    pub fn is_float(self) -> bool {
        self.scalar.is_float()
    }

    pub fn is_integer(self) -> bool {
        self.scalar.is_integer()
    }

    pub fn is_bool(self) -> bool {
        self.scalar == ScalarType::Bool
    }

    /// Size in bytes of the whole value (all lanes).
    pub fn bytes(self) -> usize {
        self.scalar.bytes() * self.lanes as usize
    }
}

impl From<ScalarType> for DataType {
    fn from(s: ScalarType) -> Self {
        DataType::scalar(s)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lanes == 1 {
            write!(f, "{}", self.scalar.name())
        } else {
            write!(f, "{}x{}", self.scalar.name(), self.lanes)
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_types_report_size_and_name() {
        assert_eq!(DataType::F32X8.bytes(), 32);
        assert_eq!(DataType::F16X2.to_string(), "f16x2");
        assert_eq!(DataType::BF16.bytes(), 2);
        assert!(DataType::F32X4.is_vector());
        assert_eq!(DataType::F32X4.element(), DataType::F32);
    }
}
