//! Tensor values: a dtype, a shape and owned, reference-counted element data.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::narrow::{F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, I4, U4};
use crate::string::Str;

/// Errors from constructing or accessing a [`Tensor`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// The number of elements does not match the product of the shape.
    #[error("shape {shape:?} needs {expected} elements, got {given}")]
    LengthMismatch {
        shape: Vec<usize>,
        expected: usize,
        given: usize,
    },
    /// Typed access with the wrong element type.
    #[error("tensor has dtype {actual}, accessed as {requested}")]
    DTypeMismatch { actual: DType, requested: DType },
    /// The element count overflows `usize`.
    #[error("shape {0:?} has too many elements")]
    TooLarge(Vec<usize>),
    /// Byte buffer of the wrong length for the dtype and shape.
    #[error("expected {expected} bytes, got {given}")]
    ByteLength { expected: usize, given: usize },
    /// The dtype (string) has no byte encoding.
    #[error("{0} tensors have no byte encoding")]
    NoBytes(DType),
}

/// Typed element storage of a tensor. Cloning is cheap (the buffer is shared).
#[derive(Clone, PartialEq)]
pub enum TensorData {
    F32(Arc<Buffer<f32>>),
    F64(Arc<Buffer<f64>>),
    F16(Arc<Buffer<f16>>),
    BF16(Arc<Buffer<bf16>>),
    I8(Arc<Buffer<i8>>),
    I16(Arc<Buffer<i16>>),
    I32(Arc<Buffer<i32>>),
    I64(Arc<Buffer<i64>>),
    U8(Arc<Buffer<u8>>),
    U16(Arc<Buffer<u16>>),
    U32(Arc<Buffer<u32>>),
    U64(Arc<Buffer<u64>>),
    Bool(Arc<Buffer<bool>>),
    F8E4M3FN(Arc<Buffer<F8E4M3FN>>),
    F8E4M3FNUZ(Arc<Buffer<F8E4M3FNUZ>>),
    F8E5M2(Arc<Buffer<F8E5M2>>),
    F8E5M2FNUZ(Arc<Buffer<F8E5M2FNUZ>>),
    I4(Arc<Buffer<I4>>),
    U4(Arc<Buffer<U4>>),
    String(Arc<Buffer<Str>>),
}

/// A Rust element type that a tensor can hold.
///
/// Conversions follow numpy `astype` semantics: `from_f64` truncates toward zero and saturates
/// for integers (NaN gives 0), `from_i128` wraps for integers, and `bool` is `x != 0`. The
/// storage-only types follow the ONNX Cast rules instead (see [`crate::narrow`]): float8
/// rounds to nearest even and saturates, 4-bit integers round to nearest even and clamp.
pub trait Element:
    Copy + Send + Sync + PartialEq + PartialOrd + fmt::Debug + Default + 'static
{
    /// The dtype tag of this element type.
    const DTYPE: DType;
    /// Wraps a typed buffer.
    fn wrap(v: Arc<Buffer<Self>>) -> TensorData;
    /// The typed buffer, if `d` holds this element type.
    fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>>;
    /// Value as f64 (exact for every type except i64/u64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 (see the trait docs for rounding rules).
    fn from_f64(v: f64) -> Self;
    /// Value as i128 (floats truncate toward zero, saturating; NaN gives 0).
    fn to_i128(self) -> i128;
    /// Converts from i128, wrapping for integer types.
    fn from_i128(v: i128) -> Self;
    /// Decodes one element from little-endian bytes; `b.len() == DTYPE.size_in_bytes()`.
    fn from_le_slice(b: &[u8]) -> Self;
    /// Appends the element's little-endian encoding (`DTYPE.size_in_bytes()` bytes), the
    /// inverse of [`Element::from_le_slice`]. Strings have no byte encoding and append nothing.
    fn extend_le(self, out: &mut Vec<u8>);
}

macro_rules! impl_int_element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(v: Arc<Buffer<Self>>) -> TensorData {
                TensorData::$variant(v)
            }
            fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>> {
                match d {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_i128(v: i128) -> Self {
                v as $t
            }
            fn from_le_slice(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
impl_int_element!(i8, I8);
impl_int_element!(i16, I16);
impl_int_element!(i32, I32);
impl_int_element!(i64, I64);
impl_int_element!(u8, U8);
impl_int_element!(u16, U16);
impl_int_element!(u32, U32);
impl_int_element!(u64, U64);

macro_rules! impl_float_element {
    ($t:ty, $variant:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(v: Arc<Buffer<Self>>) -> TensorData {
                TensorData::$variant(v)
            }
            fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>> {
                match d {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_i128(self) -> i128 {
                $to(self) as i128
            }
            fn from_i128(v: i128) -> Self {
                $from(v as f64)
            }
            fn from_le_slice(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
impl_float_element!(f32, F32, |x: f32| x as f64, |v: f64| v as f32);
impl_float_element!(f64, F64, |x: f64| x, |v: f64| v);
impl_float_element!(f16, F16, |x: f16| x.to_f64(), f16::from_f64);
impl_float_element!(bf16, BF16, |x: bf16| x.to_f64(), bf16::from_f64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn wrap(v: Arc<Buffer<Self>>) -> TensorData {
        TensorData::Bool(v)
    }
    fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>> {
        match d {
            TensorData::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn from_i128(v: i128) -> Self {
        v != 0
    }
    fn from_le_slice(b: &[u8]) -> Self {
        b[0] != 0
    }
    fn extend_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

macro_rules! impl_narrow_element {
    ($t:ident, $to:expr, $from:expr, $from_int:expr, $from_byte:expr, $to_byte:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$t;
            fn wrap(v: Arc<Buffer<Self>>) -> TensorData {
                TensorData::$t(v)
            }
            fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>> {
                match d {
                    TensorData::$t(v) => Some(v),
                    _ => None,
                }
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v as f32)
            }
            fn to_i128(self) -> i128 {
                $to(self) as i128
            }
            fn from_i128(v: i128) -> Self {
                $from_int(v)
            }
            fn from_le_slice(b: &[u8]) -> Self {
                $from_byte(b[0])
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.push($to_byte(self));
            }
        }
    };
}
// Float8: saturating round-to-nearest-even (the ONNX Cast default), via f32 like the ONNX
// reference; 4-bit integers: round to nearest even and clamp, from floats and integers alike.
impl_narrow_element!(
    F8E4M3FN,
    |x: F8E4M3FN| x.to_f32() as f64,
    |v| F8E4M3FN::from_f32(v, true),
    |v: i128| F8E4M3FN::from_f32(v as f32, true),
    F8E4M3FN,
    |x: F8E4M3FN| x.0
);
impl_narrow_element!(
    F8E4M3FNUZ,
    |x: F8E4M3FNUZ| x.to_f32() as f64,
    |v| F8E4M3FNUZ::from_f32(v, true),
    |v: i128| F8E4M3FNUZ::from_f32(v as f32, true),
    F8E4M3FNUZ,
    |x: F8E4M3FNUZ| x.0
);
impl_narrow_element!(
    F8E5M2,
    |x: F8E5M2| x.to_f32() as f64,
    |v| F8E5M2::from_f32(v, true),
    |v: i128| F8E5M2::from_f32(v as f32, true),
    F8E5M2,
    |x: F8E5M2| x.0
);
impl_narrow_element!(
    F8E5M2FNUZ,
    |x: F8E5M2FNUZ| x.to_f32() as f64,
    |v| F8E5M2FNUZ::from_f32(v, true),
    |v: i128| F8E5M2FNUZ::from_f32(v as f32, true),
    F8E5M2FNUZ,
    |x: F8E5M2FNUZ| x.0
);
impl_narrow_element!(
    I4,
    |x: I4| x.0 as f64,
    I4::from_f32,
    |v: i128| I4(v.clamp(I4::MIN as i128, I4::MAX as i128) as i8),
    I4::from_nibble,
    |x: I4| x.0 as u8 & 0x0f
);
impl_narrow_element!(
    U4,
    |x: U4| x.0 as f64,
    U4::from_f32,
    |v: i128| U4(v.clamp(U4::MIN as i128, U4::MAX as i128) as u8),
    U4::from_nibble,
    |x: U4| x.0 & 0x0f
);

impl Element for Str {
    const DTYPE: DType = DType::String;
    fn wrap(v: Arc<Buffer<Self>>) -> TensorData {
        TensorData::String(v)
    }
    fn unwrap(d: &TensorData) -> Option<&Arc<Buffer<Self>>> {
        match d {
            TensorData::String(v) => Some(v),
            _ => None,
        }
    }
    /// The number the text spells (NaN if none), as ONNX Cast parses strings.
    fn to_f64(self) -> f64 {
        self.parse_f64()
    }
    /// numpy's `str` of the value as f64 (see [`crate::string`]).
    fn from_f64(v: f64) -> Self {
        Str::new(&crate::string::format_f64(v))
    }
    fn to_i128(self) -> i128 {
        self.parse_i128()
    }
    fn from_i128(v: i128) -> Self {
        Str::new(&v.to_string())
    }
    /// Strings have no byte encoding; [`Tensor::from_le_bytes`] refuses them before any
    /// element is decoded, so this returns the empty string.
    fn from_le_slice(_: &[u8]) -> Self {
        Str::default()
    }
    /// Strings have no byte encoding; [`Tensor::to_le_bytes`] refuses them.
    fn extend_le(self, _: &mut Vec<u8>) {}
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`, for the dtypes listed
/// after `;` (as `Variant: type`); any other dtype evaluates `$fallback`.
///
/// Op families normally use the narrower wrappers [`dispatch_all!`], [`dispatch_float!`],
/// [`dispatch_int!`] and [`dispatch_numeric!`].
#[macro_export]
macro_rules! dispatch_dtypes {
    ($dtype:expr, $T:ident => $body:expr, else $fallback:expr; $($variant:ident : $ty:ty),* $(,)?) => {
        {
            #[allow(unreachable_patterns)]
            let __dispatch_result = match $dtype {
                $( $crate::DType::$variant => { type $T = $ty; $body } )*
                _ => $fallback,
            };
            __dispatch_result
        }
    };
}

/// [`dispatch_dtypes!`] over every dtype, the storage-only ones and strings included (no
/// fallback needed). Bodies must not assume arithmetic element types.
#[macro_export]
macro_rules! dispatch_all {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::dispatch_dtypes!($dtype, $T => $body, else unreachable!("all dtypes are listed");
            F32: f32, F64: f64, F16: $crate::half::f16, BF16: $crate::half::bf16,
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64, Bool: bool,
            F8E4M3FN: $crate::narrow::F8E4M3FN, F8E4M3FNUZ: $crate::narrow::F8E4M3FNUZ,
            F8E5M2: $crate::narrow::F8E5M2, F8E5M2FNUZ: $crate::narrow::F8E5M2FNUZ,
            I4: $crate::narrow::I4, U4: $crate::narrow::U4, String: $crate::string::Str)
    };
}

/// [`dispatch_dtypes!`] over f16, bf16, f32, f64.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, else $fallback:expr) => {
        $crate::dispatch_dtypes!($dtype, $T => $body, else $fallback;
            F32: f32, F64: f64, F16: $crate::half::f16, BF16: $crate::half::bf16)
    };
}

/// [`dispatch_dtypes!`] over the signed and unsigned integer types.
#[macro_export]
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, else $fallback:expr) => {
        $crate::dispatch_dtypes!($dtype, $T => $body, else $fallback;
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64)
    };
}

/// [`dispatch_dtypes!`] over every dtype except bool.
#[macro_export]
macro_rules! dispatch_numeric {
    ($dtype:expr, $T:ident => $body:expr, else $fallback:expr) => {
        $crate::dispatch_dtypes!($dtype, $T => $body, else $fallback;
            F32: f32, F64: f64, F16: $crate::half::f16, BF16: $crate::half::bf16,
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64)
    };
}

/// A dense, row-major tensor with owned element data.
///
/// Cloning a tensor never copies its elements: the buffer is reference-counted, so
/// initializers are shared between the graph and every execution.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// Number of elements of `shape`, or `None` on overflow.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// Builds a tensor from a typed buffer; fails if `data.len()` is not the shape's product.
    pub fn new<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Tensor, TensorError> {
        Tensor::from_data(shape, T::wrap(Arc::new(Buffer::from(data))))
    }

    /// A tensor whose elements `make` computes when they are first read ([`Buffer::deferred`]):
    /// a constant kept only in case it is read again. Fails if the shape overflows; `make`
    /// must return as many elements as `shape` holds, the same every call.
    pub fn deferred<T: Element>(
        shape: Vec<usize>,
        make: impl Fn() -> Vec<T> + Send + Sync + 'static,
    ) -> Result<Tensor, TensorError> {
        let len = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
        Ok(Tensor {
            shape,
            data: T::wrap(Arc::new(Buffer::deferred(len, Box::new(make)))),
        })
    }

    /// Whether the elements are deferred ([`Tensor::deferred`]) and not computed yet.
    pub fn is_deferred(&self) -> bool {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => v.is_deferred(),
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// Whether the elements were deferred ([`Tensor::deferred`]) and have been computed since
    /// (something read them).
    pub fn is_rebuilt(&self) -> bool {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => v.is_rebuilt(),
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// Builds a tensor from shared storage; fails if the element count does not match.
    pub fn from_data(shape: Vec<usize>, data: TensorData) -> Result<Tensor, TensorError> {
        let expected = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
        let given = data_len(&data);
        if expected != given {
            return Err(TensorError::LengthMismatch {
                shape,
                expected,
                given,
            });
        }
        Ok(Tensor { shape, data })
    }

    /// A rank-0 tensor holding `v`.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor {
            shape: vec![],
            data: T::wrap(Arc::new(Buffer::from(vec![v]))),
        }
    }

    /// A tensor of `dtype` filled with zeros (false for bool).
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Tensor, TensorError> {
        let n = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
        crate::dispatch_all!(dtype, T => Tensor::new(shape, vec![T::default(); n]))
    }

    /// Decodes little-endian bytes (ONNX `raw_data`, external data) into a tensor.
    pub fn from_le_bytes(
        dtype: DType,
        shape: Vec<usize>,
        bytes: &[u8],
    ) -> Result<Tensor, TensorError> {
        let n = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
        let size = dtype.size_in_bytes();
        let expected = n
            .checked_mul(size)
            .ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
        if dtype == DType::String {
            return Err(TensorError::NoBytes(dtype));
        }
        if bytes.len() != expected {
            return Err(TensorError::ByteLength {
                expected,
                given: bytes.len(),
            });
        }
        crate::dispatch_all!(dtype, T => {
            let v: Vec<T> = bytes.chunks_exact(size).map(T::from_le_slice).collect();
            Tensor::new(shape, v)
        })
    }

    /// The elements as little-endian bytes, the inverse of [`Tensor::from_le_bytes`]. Fails
    /// for strings, which have no byte encoding.
    pub fn to_le_bytes(&self) -> Result<Vec<u8>, TensorError> {
        if self.dtype() == DType::String {
            return Err(TensorError::NoBytes(self.dtype()));
        }
        let mut out = Vec::with_capacity(self.size_in_bytes());
        crate::dispatch_all!(self.dtype(), T => {
            for &x in self.as_slice::<T>()? {
                x.extend_le(&mut out);
            }
        });
        Ok(out)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        data_dtype(&self.data)
    }

    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        data_len(&self.data)
    }

    /// Bytes occupied by the elements.
    pub fn size_in_bytes(&self) -> usize {
        self.numel() * self.dtype().size_in_bytes()
    }

    /// A tensor of `shape` over `len` elements at `ptr` that the caller owns (a numpy
    /// array's memory), without copying them: kernels and every reader see that memory.
    /// `owner` is dropped when the last clone of the tensor is. Fails, without taking
    /// `owner`'s memory, when `len` is not the element count of `shape`.
    ///
    /// # Safety
    /// `ptr` must be non-null, aligned for `T` and point to `len` initialized elements that
    /// stay valid and are not written by anyone for as long as `owner` is alive.
    pub unsafe fn from_external<T: Element>(
        shape: Vec<usize>,
        ptr: *const T,
        len: usize,
        owner: Box<dyn Send + Sync>,
    ) -> Result<Tensor, TensorError> {
        // SAFETY: the caller's guarantee, passed on.
        let buffer = unsafe { Buffer::external(ptr, len, owner) };
        Tensor::from_data(shape, T::wrap(Arc::new(buffer)))
    }

    /// Whether the elements are memory the caller owns ([`Tensor::from_external`]).
    pub fn is_external(&self) -> bool {
        crate::dispatch_all!(self.dtype(), T => T::unwrap(&self.data).is_some_and(|b| b.is_external()))
    }

    /// The address of the shared storage: equal for two tensors exactly when they share it
    /// (clones and reshapes of one tensor), for as long as either is alive.
    pub fn storage_address(&self) -> usize {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => Arc::as_ptr(v) as usize,
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// The tensor with its first element at the start of a 64-byte cache line: itself when
    /// it is, else a copy ([`Buffer::aligned_copy`]). For constants a pass derives for hot
    /// kernel loops (packed weight panels), which kernels read where they lie.
    pub fn aligned(self) -> Tensor {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) if !(v.as_ptr() as usize).is_multiple_of(64) => Tensor {
                shape: self.shape.clone(),
                data: T::wrap(Arc::new(Buffer::aligned_copy(&v[..]))),
            },
            _ => self,
        })
    }

    /// How many tensors share this one's storage, itself included (clones and views of it,
    /// wherever they are held: a graph, a compiled model, a memo).
    pub fn storage_holders(&self) -> usize {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => Arc::strong_count(v),
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// Whether `self` and `other` share their storage (so hold the same elements).
    pub fn same_storage(&self, other: &Tensor) -> bool {
        self.storage_address() == other.storage_address()
    }

    /// Whether `self` and `other` have the same dtype, shape and elements, floats compared
    /// by their bits (so `-0.0` differs from `0.0`, and a NaN equals the same NaN): whether
    /// one can stand for the other as a constant. `==` compares floats as numbers.
    pub fn bitwise_eq(&self, other: &Tensor) -> bool {
        fn bits<T: Copy, B: PartialEq>(a: &[T], b: &[T], f: impl Fn(T) -> B) -> bool {
            a.iter().zip(b).all(|(x, y)| f(*x) == f(*y))
        }
        if self.dtype() != other.dtype() || self.shape != other.shape {
            return false;
        }
        if self.same_storage(other) {
            return true;
        }
        match (&self.data, &other.data) {
            (TensorData::F32(a), TensorData::F32(b)) => bits(a, b, f32::to_bits),
            (TensorData::F64(a), TensorData::F64(b)) => bits(a, b, f64::to_bits),
            (TensorData::F16(a), TensorData::F16(b)) => bits(a, b, f16::to_bits),
            (TensorData::BF16(a), TensorData::BF16(b)) => bits(a, b, bf16::to_bits),
            // Integers, booleans, strings and the 8-bit floats (compared by their bits).
            _ => self == other,
        }
    }

    /// The shared storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The elements as a typed slice; fails if `T` is not the tensor's element type.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], TensorError> {
        T::unwrap(&self.data)
            .map(|v| &***v)
            .ok_or(TensorError::DTypeMismatch {
                actual: self.dtype(),
                requested: T::DTYPE,
            })
    }

    /// The same elements with another shape of equal element count (no copy).
    pub fn reshape(&self, shape: Vec<usize>) -> Result<Tensor, TensorError> {
        Tensor::from_data(shape, self.data.clone())
    }

    /// Elements converted to f64, row-major.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => v.iter().map(|x| x.to_f64()).collect(),
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// Elements converted to i64 (floats truncate), row-major. Used for shape-like inputs.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        crate::dispatch_all!(self.dtype(), T => match T::unwrap(&self.data) {
            Some(v) => v.iter().map(|x| x.to_i128() as i64).collect(),
            None => unreachable!("dtype() reports the stored variant"),
        })
    }

    /// Converts every element to `dtype` (numpy `astype` semantics, see [`Element`]).
    ///
    /// Strings parse and format as ONNX Cast specifies (see [`crate::string`]): floats print
    /// numpy's shortest round-trip text for their own precision, booleans `True`/`False`.
    pub fn cast(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        if dtype == DType::String {
            let text: Vec<Str> = match &self.data {
                TensorData::Bool(v) => v
                    .iter()
                    .map(|&b| Str::new(if b { "True" } else { "False" }))
                    .collect(),
                TensorData::F32(v) => v
                    .iter()
                    .map(|&x| Str::new(&crate::string::format_f32(x)))
                    .collect(),
                TensorData::F16(v) => v
                    .iter()
                    .map(|&x| {
                        Str::new(&crate::string::format_shortest(x.to_f64(), |d| {
                            f16::from_f64(d) == x
                        }))
                    })
                    .collect(),
                TensorData::BF16(v) => v
                    .iter()
                    .map(|&x| {
                        Str::new(&crate::string::format_shortest(x.to_f64(), |d| {
                            bf16::from_f64(d) == x
                        }))
                    })
                    .collect(),
                _ => crate::dispatch_all!(self.dtype(), S => match S::unwrap(&self.data) {
                    Some(v) if self.dtype().is_int() || self.dtype().is_int4() => {
                        v.iter().map(|x| Str::from_i128(x.to_i128())).collect()
                    }
                    Some(v) => v.iter().map(|x| Str::from_f64(x.to_f64())).collect(),
                    None => unreachable!("dtype() reports the stored variant"),
                }),
            };
            return Tensor {
                shape: self.shape.clone(),
                data: TensorData::String(Arc::new(Buffer::from(text))),
            };
        }
        let src_float = self.dtype().is_float() || self.dtype().is_float8();
        let dst_float = dtype.is_float() || dtype.is_float8();
        crate::dispatch_all!(self.dtype(), S => {
            let src: &[S] = match S::unwrap(&self.data) {
                Some(v) => v,
                None => unreachable!("dtype() reports the stored variant"),
            };
            crate::dispatch_all!(dtype, D => {
                let out: Vec<D> = if src_float || dst_float {
                    src.iter().map(|x| D::from_f64(x.to_f64())).collect()
                } else {
                    src.iter().map(|x| D::from_i128(x.to_i128())).collect()
                };
                Tensor { shape: self.shape.clone(), data: D::wrap(Arc::new(Buffer::from(out))) }
            })
        })
    }
}

fn data_len(d: &TensorData) -> usize {
    match d {
        TensorData::F32(v) => v.len(),
        TensorData::F64(v) => v.len(),
        TensorData::F16(v) => v.len(),
        TensorData::BF16(v) => v.len(),
        TensorData::I8(v) => v.len(),
        TensorData::I16(v) => v.len(),
        TensorData::I32(v) => v.len(),
        TensorData::I64(v) => v.len(),
        TensorData::U8(v) => v.len(),
        TensorData::U16(v) => v.len(),
        TensorData::U32(v) => v.len(),
        TensorData::U64(v) => v.len(),
        TensorData::Bool(v) => v.len(),
        TensorData::F8E4M3FN(v) => v.len(),
        TensorData::F8E4M3FNUZ(v) => v.len(),
        TensorData::F8E5M2(v) => v.len(),
        TensorData::F8E5M2FNUZ(v) => v.len(),
        TensorData::I4(v) => v.len(),
        TensorData::U4(v) => v.len(),
        TensorData::String(v) => v.len(),
    }
}

fn data_dtype(d: &TensorData) -> DType {
    match d {
        TensorData::F32(_) => DType::F32,
        TensorData::F64(_) => DType::F64,
        TensorData::F16(_) => DType::F16,
        TensorData::BF16(_) => DType::BF16,
        TensorData::I8(_) => DType::I8,
        TensorData::I16(_) => DType::I16,
        TensorData::I32(_) => DType::I32,
        TensorData::I64(_) => DType::I64,
        TensorData::U8(_) => DType::U8,
        TensorData::U16(_) => DType::U16,
        TensorData::U32(_) => DType::U32,
        TensorData::U64(_) => DType::U64,
        TensorData::Bool(_) => DType::Bool,
        TensorData::F8E4M3FN(_) => DType::F8E4M3FN,
        TensorData::F8E4M3FNUZ(_) => DType::F8E4M3FNUZ,
        TensorData::F8E5M2(_) => DType::F8E5M2,
        TensorData::F8E5M2FNUZ(_) => DType::F8E5M2FNUZ,
        TensorData::I4(_) => DType::I4,
        TensorData::U4(_) => DType::U4,
        TensorData::String(_) => DType::String,
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_f64_vec();
        let head: Vec<f64> = v.iter().copied().take(8).collect();
        write!(
            f,
            "Tensor({}, {:?}, {:?}{})",
            self.dtype(),
            self.shape,
            head,
            if v.len() > 8 { "..." } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_tensor_starts_a_cache_line_and_keeps_its_elements() {
        let t = Tensor::new(vec![3, 7], (0..21).map(|i| i as f32 - 4.5).collect()).unwrap();
        let a = t.clone().aligned();
        assert_eq!(a.as_slice::<f32>().unwrap().as_ptr() as usize % 64, 0);
        assert_eq!(a, t);
        // Already aligned: the same storage, no copy.
        assert!(a.clone().aligned().same_storage(&a));
    }

    #[test]
    fn le_bytes_round_trip_for_every_dtype_with_bytes() {
        let source = Tensor::new(
            vec![2, 7],
            (0..14).map(|i| i as f32 * 0.37 - 2.1).collect::<Vec<f32>>(),
        )
        .unwrap();
        for dtype in DType::ALL {
            let t = source.cast(dtype);
            if dtype == DType::String {
                assert!(matches!(t.to_le_bytes(), Err(TensorError::NoBytes(_))));
                continue;
            }
            let bytes = t.to_le_bytes().unwrap();
            assert_eq!(bytes.len(), t.size_in_bytes(), "{dtype}");
            let back = Tensor::from_le_bytes(dtype, vec![2, 7], &bytes).unwrap();
            assert_eq!(back.to_f64_vec(), t.to_f64_vec(), "{dtype}");
        }
    }

    #[test]
    fn an_external_tensor_reads_the_callers_memory() {
        let data: Arc<Vec<f32>> = Arc::new((0..6).map(|i| i as f32 * 0.5).collect());
        // SAFETY: six floats, kept alive and unwritten by the owner (an `Arc` clone).
        let t = unsafe {
            Tensor::from_external(vec![2, 3], data.as_ptr(), 6, Box::new(Arc::clone(&data)))
        }
        .unwrap();
        assert!(t.is_external());
        assert_eq!(t.as_slice::<f32>().unwrap().as_ptr(), data.as_ptr());
        assert_eq!(t.reshape(vec![3, 2]).unwrap().to_f64_vec()[5], 2.5);
        // SAFETY: as above.
        let wrong = unsafe {
            Tensor::from_external(vec![4, 3], data.as_ptr(), 6, Box::new(Arc::clone(&data)))
        };
        assert!(wrong.is_err(), "6 elements do not fill [4, 3]");
        assert!(!Tensor::new(vec![1], vec![1f32]).unwrap().is_external());
    }

    #[test]
    fn new_checks_length() {
        assert!(Tensor::new(vec![2, 3], vec![1.0f32; 5]).is_err());
        let t = Tensor::new(vec![2, 3], vec![1.5f32; 6]).unwrap();
        assert_eq!(t.dtype(), DType::F32);
        assert_eq!(t.numel(), 6);
    }

    #[test]
    fn cast_follows_numpy() {
        let t = Tensor::new(vec![4], vec![-1.7f32, 2.9, 300.0, f32::NAN]).unwrap();
        assert_eq!(
            t.cast(DType::I32).as_slice::<i32>().unwrap(),
            &[-1, 2, 300, 0]
        );
        let i = Tensor::new(vec![2], vec![300i64, -1]).unwrap();
        assert_eq!(i.cast(DType::U8).as_slice::<u8>().unwrap(), &[44, 255]);
        assert_eq!(
            i.cast(DType::Bool).as_slice::<bool>().unwrap(),
            &[true, true]
        );
    }

    #[test]
    fn le_bytes_roundtrip() {
        let b: Vec<u8> = [1.25f32, -3.5]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let t = Tensor::from_le_bytes(DType::F32, vec![2], &b).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.25, -3.5]);
        assert!(Tensor::from_le_bytes(DType::F32, vec![3], &b).is_err());
    }
}
