//! `hidet::OffsetGather`: a matrix gathered from a tensor at separable flat offsets.
//!
//! `OffsetGather(X, R, C)` with `R` a 1-D and `C` a 1-D `int32` tensor gives `Y` of shape
//! `[len(R), len(C)]` with `Y[i, j] = X_flat[R[i] + C[j]]`, where `X_flat` is `X` read in
//! row-major order; with `C` 2-D, `[G, K]` (one column table per group), `Y` is `[G, len(R),
//! K]` with `Y[g, i, j] = X_flat[R[i] + C[g, j]]`. Every offset must lie inside `X` (an error
//! otherwise).
//!
//! The operator is internal (domain [`HIDET_DOMAIN`]): the implicit-GEMM pass gives a direct
//! convolution's pixels-as-rows operand this form, `R` the offsets of the output pixels'
//! window origins and `C` those of the window elements (per group of channels for a grouped
//! convolution, whose product is batched over the groups), so a matrix-product kernel that
//! broadcasts the operand where it is finds each address as one table read per row and one
//! per column, with no division (the flat offset's row-major unravel recombines in the
//! emitted address, see `hidet_ir::passes::simplify`).

use crate::graph_ops::HIDET_DOMAIN;
use hidet_graph::dispatch_float;
use hidet_graph::dtype::DType;
use hidet_graph::fusion::StoredLayout;
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::compute_util::{grid_def, input, placeholders, unravel};
use hidet_graph::ops::window_compute::fits_i32;
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::{Element, Tensor};

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "OffsetGather";

/// An `OffsetGather` node (see the module docs).
#[derive(Debug)]
struct OffsetGather;

/// Registers `hidet::OffsetGather` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |_: &OpContext<'_>| Ok(Box::new(OffsetGather)),
    );
}

/// The length of the row table (input 1) of shape `shape`, or a shape error.
fn rows_len(shape: &[usize]) -> Result<usize, OpError> {
    match *shape {
        [n] => Ok(n),
        _ => Err(OpError::Shape(format!(
            "OffsetGather needs input 1 to be a 1-D offset table, got shape {shape:?}"
        ))),
    }
}

/// The groups (absent for a 1-D table) and length of the column table (input 2) of shape
/// `shape`, or a shape error.
fn cols_dims(shape: &[usize]) -> Result<(Option<usize>, usize), OpError> {
    match *shape {
        [n] => Ok((None, n)),
        [g, n] => Ok((Some(g), n)),
        _ => Err(OpError::Shape(format!(
            "OffsetGather needs input 2 to be a 1-D or 2-D offset table, got shape {shape:?}"
        ))),
    }
}

/// The output shape for `rows` rows and a column table of `cols` dims.
fn output_shape<T: Copy>(rows: T, (groups, cols): (Option<T>, T)) -> Vec<T> {
    match groups {
        Some(g) => vec![g, rows, cols],
        None => vec![rows, cols],
    }
}

impl Operator for OffsetGather {
    /// The matrix product reading the gather broadcasts from `X` where it is stored.
    fn reads_input_in_place(&self) -> bool {
        true
    }

    /// `X` gathered at the offsets of the two tables.
    fn stored_layout(&self) -> Option<StoredLayout> {
        Some(StoredLayout::OffsetGather)
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, DType::is_float)?;
        let (r, c) = (infer_arg(inputs, 1)?, infer_arg(inputs, 2)?);
        for (index, t) in [(1, &r), (2, &c)] {
            check_dtype(index, t.ty.dtype, |d| d == DType::I32)?;
        }
        let shape = match (r.ty.fixed_shape(), c.ty.fixed_shape()) {
            (Some(rs), Some(cs)) => {
                let (groups, cols) = cols_dims(&cs)?;
                let dims = output_shape(rows_len(&rs)?, (groups, cols));
                Some(dims.into_iter().map(Dim::Fixed).collect())
            }
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), DType::is_float)?;
        let (r, c) = (arg(inputs, 1)?, arg(inputs, 2)?);
        for (index, t) in [(1, r), (2, c)] {
            check_dtype(index, t.dtype(), |d| d == DType::I32)?;
        }
        rows_len(r.shape())?;
        let (groups, width) = cols_dims(c.shape())?;
        let (rows, cols) = (r.to_i64_vec(), c.to_i64_vec());
        let n = x.numel();
        let mut at = Vec::with_capacity(rows.len() * cols.len());
        for group in cols.chunks(width.max(1)) {
            for &r in &rows {
                for &c in group {
                    let offset =
                        usize::try_from(r + c)
                            .ok()
                            .filter(|&o| o < n)
                            .ok_or_else(|| {
                                OpError::Shape(format!(
                                    "OffsetGather offset {r} + {c} is outside X of {n} elements"
                                ))
                            })?;
                    at.push(offset);
                }
            }
        }
        let shape = output_shape(rows.len(), (groups, width));
        let xv = x.to_f64_vec();
        let dtype = x.dtype();
        let out = dispatch_float!(dtype,
            T => Tensor::new(shape, at.iter().map(|&o| T::from_f64(xv[o])).collect::<Vec<T>>())?,
            else return Err(OpError::DType { index: 0, dtype }));
        Ok(vec![out])
    }

    /// `Y[i, j] = X[unravel(R[i] + C[j])]` (row-major over `X`'s shape), or `Y[g, i, j] =
    /// X[unravel(R[i] + C[g, j])]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, DType::is_float)?;
        let (r, c) = (input(inputs, 1)?, input(inputs, 2)?);
        let (groups, cols) = cols_dims(c.shape)?;
        let shape = output_shape(rows_len(r.shape)?, (groups, cols));
        if !fits_i32(&[x.shape, &shape]) {
            return Ok(None);
        }
        let vars = placeholders(inputs);
        let (vx, vr, vc) = (vars[0].clone(), vars[1].clone(), vars[2].clone());
        let dims = x.shape.to_vec();
        grid_def(vars, x.dtype.to_ir(), &shape, |i| {
            let (row, col) = match i {
                [g, row, col] => (row, vc.at([g.clone(), col.clone()])),
                [row, col] => (row, vc.at([col.clone()])),
                _ => unreachable!("the grid has the rank of `output_shape`, 2 or 3"),
            };
            let flat = vr.at([row.clone()]) + col;
            vx.at(unravel(&flat, &dims))
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_ops::build_op;

    fn op() -> Box<dyn Operator> {
        build_op(HIDET_DOMAIN, OP_TYPE, 1, &[], 3, 1).unwrap()
    }

    #[test]
    fn rows_and_columns_add_their_offsets() {
        let xv: Vec<f32> = (0..24).map(|i| 0.5 * i as f32 - 2.7).collect();
        let x = Tensor::new(vec![2, 3, 4], xv.clone()).unwrap();
        let r = Tensor::new(vec![3], vec![0i32, 5, 13]).unwrap();
        let c = Tensor::new(vec![2], vec![1i32, 10]).unwrap();
        let y = op()
            .eval(&[Some(&x), Some(&r), Some(&c)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 2]);
        let want: Vec<f32> = [1, 10, 6, 15, 14, 23].iter().map(|&o| xv[o]).collect();
        assert_eq!(y.as_slice::<f32>().unwrap(), want.as_slice());
        let ty = |dtype, shape: &[usize]| TensorType::fixed(dtype, shape);
        let (tx, tr, tc) = (
            ty(DType::F32, &[2, 3, 4]),
            ty(DType::I32, &[3]),
            ty(DType::I32, &[2]),
        );
        let inputs: Vec<_> = [&tx, &tr, &tc]
            .into_iter()
            .map(|ty| Some(InferInput { ty, value: None }))
            .collect();
        let inferred = op().infer(&inputs).unwrap();
        assert_eq!(inferred[0], ty(DType::F32, &[3, 2]));
    }

    #[test]
    fn a_two_dimensional_column_table_gathers_one_matrix_per_group() {
        let xv: Vec<f32> = (0..24).map(|i| 0.25 * i as f32 - 1.1).collect();
        let x = Tensor::new(vec![24], xv.clone()).unwrap();
        let r = Tensor::new(vec![2], vec![0i32, 3]).unwrap();
        let c = Tensor::new(vec![3, 2], vec![0i32, 1, 8, 9, 16, 20]).unwrap();
        let y = op()
            .eval(&[Some(&x), Some(&r), Some(&c)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 2, 2]);
        let want: Vec<f32> = [0, 1, 3, 4, 8, 9, 11, 12, 16, 20, 19, 23]
            .iter()
            .map(|&o| xv[o])
            .collect();
        assert_eq!(y.as_slice::<f32>().unwrap(), want.as_slice());
        let ty = |dtype, shape: &[usize]| TensorType::fixed(dtype, shape);
        let (tx, tr, tc) = (
            ty(DType::F32, &[24]),
            ty(DType::I32, &[2]),
            ty(DType::I32, &[3, 2]),
        );
        let inputs: Vec<_> = [&tx, &tr, &tc]
            .into_iter()
            .map(|ty| Some(InferInput { ty, value: None }))
            .collect();
        assert_eq!(op().infer(&inputs).unwrap()[0], ty(DType::F32, &[3, 2, 2]));
    }

    #[test]
    fn offsets_outside_the_input_and_bad_tables_are_errors() {
        let x = Tensor::new(vec![2, 3], vec![1.0f32; 6]).unwrap();
        let r = Tensor::new(vec![2], vec![0i32, 4]).unwrap();
        let past = Tensor::new(vec![1], vec![2i32]).unwrap();
        let before = Tensor::new(vec![1], vec![-1i32]).unwrap();
        for c in [&past, &before] {
            let err = op().eval(&[Some(&x), Some(&r), Some(c)]).unwrap_err();
            assert!(matches!(err, OpError::Shape(_)), "{err:?}");
        }
        let cube = Tensor::new(vec![1, 1, 1], vec![0i32]).unwrap();
        assert!(matches!(
            op().eval(&[Some(&x), Some(&r), Some(&cube)]),
            Err(OpError::Shape(_))
        ));
        let wide_rows = Tensor::new(vec![1, 1], vec![0i32]).unwrap();
        let c = Tensor::new(vec![1], vec![0i32]).unwrap();
        assert!(matches!(
            op().eval(&[Some(&x), Some(&wide_rows), Some(&c)]),
            Err(OpError::Shape(_))
        ));
        let int64 = Tensor::new(vec![1], vec![0i64]).unwrap();
        assert!(matches!(
            op().eval(&[Some(&x), Some(&r), Some(&int64)]),
            Err(OpError::DType { .. })
        ));
    }
}
