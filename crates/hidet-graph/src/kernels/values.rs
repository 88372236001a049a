//! Building tensors from f64 values computed by reference kernels.

use crate::dispatch_float;
use crate::dtype::DType;
use crate::operator::OpError;
use crate::tensor::{Element, Tensor};

/// A tensor of the float type `dtype` holding `v` rounded to it; `index` names the input
/// whose dtype is reported if `dtype` is not an arithmetic float type.
pub fn float_tensor(
    dtype: DType,
    shape: Vec<usize>,
    v: &[f64],
    index: usize,
) -> Result<Tensor, OpError> {
    Ok(dispatch_float!(dtype, T => Tensor::new(
        shape,
        v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>(),
    )?, else return Err(OpError::DType { index, dtype })))
}
