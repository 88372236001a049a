//! `hidet::ColumnPanels`: a matrix stored as panels of [`PANEL_WIDTH`] columns.
//!
//! `ColumnPanels(P; columns = N)` with `P` of shape `[⌈N / 16⌉, K, 16]` gives the matrix `B`
//! of shape `[K, N]` with `B[k, j] = P[j / 16, k, j % 16]`: panel `p` holds columns
//! `16·p .. 16·p + 16` row after row (the last panel's columns past `N` are padding).
//!
//! The operator is internal (domain [`HIDET_DOMAIN`]): the weight-prepacking pass
//! ([`crate::passes::PanelConstantWeights`]) stores a constant right operand of a matrix
//! product this way, once, at compile time. Each row of a panel is one 64-byte line, and a
//! matrix-product kernel whose micro-kernel is a whole number of panels wide reads them in
//! place, row after row, where it would otherwise copy (pack) the operand on every call.

use crate::dtype::DType;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{grid_def, input, placeholders};
use crate::ops::im2col::HIDET_DOMAIN;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "ColumnPanels";

/// Columns per panel: one 64-byte line of `f32`, a whole number of SIMD vectors of 4, 8 or
/// 16 lanes.
pub const PANEL_WIDTH: usize = 16;

/// A `ColumnPanels` node (see the module docs).
#[derive(Debug)]
struct ColumnPanels {
    columns: usize,
}

/// Registers `hidet::ColumnPanels` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let columns = c.attrs.req_int("columns")?;
            let columns = usize::try_from(columns)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| OpError::attr("columns", format!("must be >= 1, got {columns}")))?;
            Ok(Box::new(ColumnPanels { columns }))
        },
    );
}

/// `b` as panels `[⌈N / 16⌉, K, 16]`, padded with zeros; `None` unless `b` is an `f32`
/// matrix `[K, N]`.
pub fn to_panels(b: &Tensor) -> Option<Tensor> {
    let [k, n] = *b.shape() else {
        return None;
    };
    let values = b.as_slice::<f32>().ok()?;
    let panels = n.div_ceil(PANEL_WIDTH);
    let mut data = vec![0f32; panels * k * PANEL_WIDTH];
    for (row, chunk) in values.chunks(n.max(1)).enumerate().take(k) {
        for (j, v) in chunk.iter().enumerate() {
            data[((j / PANEL_WIDTH) * k + row) * PANEL_WIDTH + j % PANEL_WIDTH] = *v;
        }
    }
    Tensor::new(vec![panels, k, PANEL_WIDTH], data).ok()
}

impl ColumnPanels {
    /// `K` for panels of shape `ps`, after checking them against `columns`.
    fn rows(&self, ps: &[usize]) -> Result<usize, OpError> {
        let want = self.columns.div_ceil(PANEL_WIDTH);
        match *ps {
            [p, k, w] if p == want && w == PANEL_WIDTH => Ok(k),
            _ => Err(OpError::Shape(format!(
                "ColumnPanels of {} columns needs P of shape [{want}, K, {PANEL_WIDTH}], got {ps:?}",
                self.columns
            ))),
        }
    }
}

impl Operator for ColumnPanels {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let p = infer_arg(inputs, 0)?;
        check_dtype(0, p.ty.dtype, |d| d == DType::F32)?;
        let rows = match p.ty.fixed_shape() {
            Some(ps) => Dim::Fixed(self.rows(&ps)?),
            None => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape: Some(vec![rows, Dim::Fixed(self.columns)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let p = arg(inputs, 0)?;
        let values = p.as_slice::<f32>().map_err(|_| OpError::DType {
            index: 0,
            dtype: p.dtype(),
        })?;
        let k = self.rows(p.shape())?;
        let n = self.columns;
        let data: Vec<f32> = (0..k * n)
            .map(|i| {
                let (row, j) = (i / n, i % n);
                values[((j / PANEL_WIDTH) * k + row) * PANEL_WIDTH + j % PANEL_WIDTH]
            })
            .collect();
        Ok(vec![Tensor::new(vec![k, n], data)?])
    }

    /// `B[k, j] = P[j / 16, k, j % 16]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let p = input(inputs, 0)?;
        check_dtype(0, p.dtype, |d| d == DType::F32)?;
        let k = self.rows(p.shape)?;
        let vars = placeholders(inputs);
        let vp = vars[0].clone();
        let width = Expr::int(PANEL_WIDTH as i64);
        grid_def(vars, DataType::F32, &[k, self.columns], |i| {
            vp.at([
                i[1].clone() / width.clone(),
                i[0].clone(),
                i[1].clone() % width.clone(),
            ])
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(columns: i64) -> Result<Box<dyn Operator>, OpError> {
        build_op(HIDET_DOMAIN, OP_TYPE, 1, &[("columns", Attribute::Int(columns))], 1, 1)
    }

    #[test]
    fn panels_round_trip_and_pad_with_zeros() {
        let (k, n) = (5usize, 37usize);
        let values: Vec<f32> = (0..k * n).map(|i| i as f32 * 0.5 - 7.25).collect();
        let b = Tensor::new(vec![k, n], values.clone()).unwrap();
        let panels = to_panels(&b).unwrap();
        assert_eq!(panels.shape(), &[3, k, PANEL_WIDTH]);
        let p = panels.as_slice::<f32>().unwrap();
        assert_eq!(p[(2 * k + 4) * PANEL_WIDTH + 4], values[4 * n + 36]);
        assert!(p[(2 * k) * PANEL_WIDTH + 5..(2 * k + 1) * PANEL_WIDTH]
            .iter()
            .all(|v| *v == 0.0));
        let op = build(n as i64).unwrap();
        let back = op.eval(&[Some(&panels)]).unwrap().remove(0);
        assert_eq!(back.shape(), &[k, n]);
        assert_eq!(back.as_slice::<f32>().unwrap(), values.as_slice());
    }

    #[test]
    fn wrong_panel_shapes_and_column_counts_are_errors() {
        let op = build(20).unwrap();
        let p = Tensor::new(vec![1, 3, 16], vec![1f32; 48]).unwrap();
        assert!(matches!(op.eval(&[Some(&p)]), Err(OpError::Shape(_))));
        assert!(matches!(build(0), Err(OpError::Attribute { .. })));
        assert!(to_panels(&Tensor::new(vec![4], vec![1f32; 4]).unwrap()).is_none());
    }
}
