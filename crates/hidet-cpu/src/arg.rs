//! Arguments of a kernel call: borrowed tensors and scalars.

use hidet_ir::dtype::DataType;
use std::ffi::c_void;
use std::marker::PhantomData;

/// A Rust type with a fixed IR data type, usable as a tensor element or a
/// scalar argument.
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DataType;
}

macro_rules! impl_element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DataType = DataType::$d;
        })*
    };
}

impl_element!(
    bool => BOOL, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64, f32 => F32, f64 => F64,
);

/// A scalar argument, passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl Scalar {
    pub fn dtype(&self) -> DataType {
        match self {
            Scalar::Bool(_) => DataType::BOOL,
            Scalar::I8(_) => DataType::I8,
            Scalar::I16(_) => DataType::I16,
            Scalar::I32(_) => DataType::I32,
            Scalar::I64(_) => DataType::I64,
            Scalar::U8(_) => DataType::U8,
            Scalar::U16(_) => DataType::U16,
            Scalar::U32(_) => DataType::U32,
            Scalar::U64(_) => DataType::U64,
            Scalar::F32(_) => DataType::F32,
            Scalar::F64(_) => DataType::F64,
        }
    }

    /// The value as an `i64`, for integers and booleans that fit.
    pub fn as_index(&self) -> Option<i64> {
        match *self {
            Scalar::Bool(v) => Some(v as i64),
            Scalar::I8(v) => Some(v.into()),
            Scalar::I16(v) => Some(v.into()),
            Scalar::I32(v) => Some(v.into()),
            Scalar::I64(v) => Some(v),
            Scalar::U8(v) => Some(v.into()),
            Scalar::U16(v) => Some(v.into()),
            Scalar::U32(v) => Some(v.into()),
            Scalar::U64(v) => i64::try_from(v).ok(),
            Scalar::F32(_) | Scalar::F64(_) => None,
        }
    }

    /// The integer (or boolean) scalar of type `dtype` holding `value`; `None` for other
    /// types and for values `dtype` cannot hold. The inverse of [`Scalar::as_index`].
    pub fn from_index(dtype: DataType, value: i64) -> Option<Scalar> {
        Some(match dtype {
            DataType::BOOL if value == 0 || value == 1 => Scalar::Bool(value == 1),
            DataType::I8 => Scalar::I8(i8::try_from(value).ok()?),
            DataType::I16 => Scalar::I16(i16::try_from(value).ok()?),
            DataType::I32 => Scalar::I32(i32::try_from(value).ok()?),
            DataType::I64 => Scalar::I64(value),
            DataType::U8 => Scalar::U8(u8::try_from(value).ok()?),
            DataType::U16 => Scalar::U16(u16::try_from(value).ok()?),
            DataType::U32 => Scalar::U32(u32::try_from(value).ok()?),
            DataType::U64 => Scalar::U64(u64::try_from(value).ok()?),
            _ => return None,
        })
    }

    /// The value's bytes in native order, in an 8-byte aligned slot whose
    /// address the packed calling convention passes.
    pub(crate) fn to_slot(self) -> ScalarSlot {
        let mut slot = ScalarSlot([0; 8]);
        let mut put = |bytes: &[u8]| slot.0[..bytes.len()].copy_from_slice(bytes);
        match self {
            Scalar::Bool(v) => put(&[v as u8]),
            Scalar::I8(v) => put(&v.to_ne_bytes()),
            Scalar::I16(v) => put(&v.to_ne_bytes()),
            Scalar::I32(v) => put(&v.to_ne_bytes()),
            Scalar::I64(v) => put(&v.to_ne_bytes()),
            Scalar::U8(v) => put(&[v]),
            Scalar::U16(v) => put(&v.to_ne_bytes()),
            Scalar::U32(v) => put(&v.to_ne_bytes()),
            Scalar::U64(v) => put(&v.to_ne_bytes()),
            Scalar::F32(v) => put(&v.to_ne_bytes()),
            Scalar::F64(v) => put(&v.to_ne_bytes()),
        }
        slot
    }
}

/// Storage for one scalar argument with the alignment of any C scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(8))]
pub(crate) struct ScalarSlot(pub(crate) [u8; 8]);

macro_rules! impl_scalar_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Scalar {
                Scalar::$v(v)
            }
        })*
    };
}

impl_scalar_from!(
    bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64, f32 => F32, f64 => F64,
);

/// A borrowed tensor: a data pointer with its dtype, logical shape, the
/// number of elements the buffer holds and whether it may be written.
#[derive(Debug)]
pub struct TensorArg<'a> {
    ptr: *mut c_void,
    len: usize,
    dtype: DataType,
    shape: Vec<usize>,
    mutable: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl TensorArg<'_> {
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements the buffer holds.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_mutable(&self) -> bool {
        self.mutable
    }

    pub(crate) fn data_ptr(&self) -> *mut c_void {
        self.ptr
    }
}

/// One argument of a kernel call.
#[derive(Debug)]
pub enum KernelArg<'a> {
    Tensor(TensorArg<'a>),
    Scalar(Scalar),
}

impl<'a> KernelArg<'a> {
    /// A read-only tensor of shape `shape` over `data`.
    pub fn tensor<T: Element>(data: &'a [T], shape: &[usize]) -> KernelArg<'a> {
        KernelArg::Tensor(TensorArg {
            ptr: data.as_ptr() as *mut c_void,
            len: data.len(),
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            mutable: false,
            _borrow: PhantomData,
        })
    }

    /// A tensor of shape `shape` over `data` that the kernel may write.
    pub fn tensor_mut<T: Element>(data: &'a mut [T], shape: &[usize]) -> KernelArg<'a> {
        KernelArg::Tensor(TensorArg {
            ptr: data.as_mut_ptr() as *mut c_void,
            len: data.len(),
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            mutable: true,
            _borrow: PhantomData,
        })
    }

    /// A tensor over a raw buffer of `len` elements of `dtype` (for element
    /// types without a Rust [`Element`], such as `f16`).
    ///
    /// # Safety
    /// `ptr` must point to `len` initialized elements of `dtype`, valid for
    /// reads (and for writes when `mutable`) and not accessed by anything
    /// else for the lifetime `'a`.
    pub unsafe fn raw(
        ptr: *mut c_void,
        len: usize,
        dtype: DataType,
        shape: &[usize],
        mutable: bool,
    ) -> KernelArg<'a> {
        KernelArg::Tensor(TensorArg {
            ptr,
            len,
            dtype,
            shape: shape.to_vec(),
            mutable,
            _borrow: PhantomData,
        })
    }

    /// A scalar argument.
    pub fn scalar(value: impl Into<Scalar>) -> KernelArg<'a> {
        KernelArg::Scalar(value.into())
    }
}
