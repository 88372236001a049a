//! Types of IR values: data (scalar/vector), pointers and tensors.

use crate::dtype::DataType;
use crate::layout::Layout;
use std::fmt;

/// The type of a variable or expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// A scalar or SIMD vector value.
    Data(DataType),
    /// A pointer to values of the inner type.
    Pointer(Box<Type>),
    /// A tensor: elements of `dtype` addressed through `layout`.
    Tensor(TensorType),
    /// No value (the result of a function or intrinsic that returns nothing).
    Void,
}

/// A tensor whose multi-index is mapped to storage by a [`Layout`].
#[derive(Clone, Debug, PartialEq)]
pub struct TensorType {
    pub dtype: DataType,
    pub layout: Layout,
}

impl Type {
    pub fn pointer_to(inner: Type) -> Type {
        Type::Pointer(Box::new(inner))
    }

    /// A tensor type with the given element type and layout.
    pub fn tensor(dtype: DataType, layout: Layout) -> Type {
        Type::Tensor(TensorType { dtype, layout })
    }

    /// The data type, if this is a scalar/vector type.
    pub fn as_data(&self) -> Option<DataType> {
        match self {
            Type::Data(d) => Some(*d),
            _ => None,
        }
    }

    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The element type of a tensor or the pointee data type of a pointer.
    pub fn element_dtype(&self) -> Option<DataType> {
        match self {
            Type::Tensor(t) => Some(t.dtype),
            Type::Pointer(inner) => inner.as_data(),
            _ => None,
        }
    }
}

impl From<DataType> for Type {
    fn from(d: DataType) -> Self {
        Type::Data(d)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Data(d) => write!(f, "{d}"),
            Type::Pointer(inner) => write!(f, "{inner}*"),
            Type::Tensor(t) => write!(f, "tensor<{}, {}>", t.dtype, t.layout),
            Type::Void => f.write_str("void"),
        }
    }
}
