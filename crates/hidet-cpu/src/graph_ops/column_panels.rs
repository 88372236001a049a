//! `hidet::ColumnPanels`: a matrix stored as panels of a few columns.
//!
//! `ColumnPanels(P; columns = N, width = W)` with `P` of shape `[⌈N / W⌉, K, W]` gives the
//! matrix `B` of shape `[K, N]` with `B[k, j] = P[j / W, k, j % W]`: panel `p` holds columns
//! `W·p .. W·p + W` row after row (the last panel's columns past `N` are padding). `width`
//! defaults to [`PANEL_WIDTH`]. A batch of matrices, `P` of shape `[L, ⌈N / W⌉, K, W]`,
//! gives `B[l, k, j] = P[l, j / W, k, j % W]`, `[L, K, N]`.
//!
//! The operator is internal (domain [`HIDET_DOMAIN`]): the weight-prepacking pass
//! ([`hidet_graph::passes::PanelConstantWeights`]) stores a constant operand of a matrix product
//! this way, once, at compile time. A right operand's panels are [`PANEL_WIDTH`] wide, so each
//! row of a panel is one 64-byte line; a left operand is stored transposed, as panels as wide
//! as the CPU micro-kernel's register tile is tall, so each tile reads one contiguous panel.
//! A matrix-product kernel reads the panels in place, row after row, where it would
//! otherwise copy (pack) the operand on every call.

use crate::graph_ops::{count_attr, HIDET_DOMAIN};
use hidet_graph::dtype::DType;
use hidet_graph::fusion::StoredLayout;
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::common::typed_input;
use hidet_graph::ops::compute_util::{grid_def, input, placeholders};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::Tensor;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "ColumnPanels";

/// Columns per panel by default: one 64-byte line of `f32`, a whole number of SIMD vectors of
/// 4, 8 or 16 lanes.
pub const PANEL_WIDTH: usize = 16;

/// The widest panels the operator accepts.
pub const MAX_PANEL_WIDTH: usize = 64;

/// A `ColumnPanels` node (see the module docs).
#[derive(Debug)]
struct ColumnPanels {
    columns: usize,
    width: usize,
}

/// Registers `hidet::ColumnPanels` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let columns = count_attr(c, "columns")?;
            let width = c.attrs.int_or("width", PANEL_WIDTH as i64)?;
            let width = usize::try_from(width)
                .ok()
                .filter(|w| (1..=MAX_PANEL_WIDTH).contains(w))
                .ok_or_else(|| {
                    OpError::attr(
                        "width",
                        format!("must be in 1..={MAX_PANEL_WIDTH}, got {width}"),
                    )
                })?;
            Ok(Box::new(ColumnPanels { columns, width }))
        },
    );
}

/// Where element `(l, row, j)` of a batch of `[K, N]` matrices lies in their panels
/// `width` columns wide, each matrix's panels taking `matrix` elements: the one layout
/// [`to_panels`] writes and [`from_panels`] reads.
fn panel_index(l: usize, row: usize, j: usize, k: usize, width: usize, matrix: usize) -> usize {
    l * matrix + ((j / width) * k + row) * width + j % width
}

/// `b` as panels `[⌈N / width⌉, K, width]` (a batch `[L, K, N]` as `[L, ⌈N / width⌉, K,
/// width]`), padded with zeros; `None` unless `b` is an `f32` matrix `[K, N]` or batch of
/// matrices `[L, K, N]` and `width` is in `1..=MAX_PANEL_WIDTH`.
pub fn to_panels(b: &Tensor, width: usize) -> Option<Tensor> {
    let (batch, k, n) = match *b.shape() {
        [k, n] => (None, k, n),
        [l, k, n] => (Some(l), k, n),
        _ => return None,
    };
    if !(1..=MAX_PANEL_WIDTH).contains(&width) {
        return None;
    }
    let values = b.as_slice::<f32>().ok()?;
    let panels = n.div_ceil(width);
    let matrix = panels * k * width;
    let mut data = vec![0f32; batch.unwrap_or(1) * matrix];
    for (i, v) in values.iter().enumerate() {
        let (l, row, j) = (i / (k * n).max(1), i / n.max(1) % k.max(1), i % n.max(1));
        data[panel_index(l, row, j, k, width, matrix)] = *v;
    }
    let shape = match batch {
        Some(l) => vec![l, panels, k, width],
        None => vec![panels, k, width],
    };
    Tensor::new(shape, data).ok()
}

/// The matrix (or batch of matrices) of `columns` columns that [`to_panels`] stored as
/// `panels` (`[P, K, W]` or `[L, P, K, W]`, `P = ⌈columns / W⌉`): its elements, bit for bit,
/// row-major. `None` if `panels` is not `f32` of such a shape.
pub fn from_panels(panels: &Tensor, columns: usize) -> Option<Vec<f32>> {
    let (batch, p, k, width) = match *panels.shape() {
        [p, k, w] => (1, p, k, w),
        [l, p, k, w] => (l, p, k, w),
        _ => return None,
    };
    if width == 0 || p != columns.div_ceil(width) {
        return None;
    }
    let data = panels.as_slice::<f32>().ok()?;
    let matrix = p * k * width;
    let mut out = Vec::with_capacity(batch * k * columns);
    for l in 0..batch {
        for row in 0..k {
            for j in 0..columns {
                out.push(data[panel_index(l, row, j, k, width, matrix)]);
            }
        }
    }
    Some(out)
}

impl ColumnPanels {
    /// The batch (if `P` is a batch of panels) and `K` for panels of shape `ps`, after
    /// checking them against `columns`.
    fn rows(&self, ps: &[usize]) -> Result<(Option<usize>, usize), OpError> {
        let width = self.width;
        let want = self.columns.div_ceil(width);
        match *ps {
            [p, k, w] if p == want && w == width => Ok((None, k)),
            [l, p, k, w] if p == want && w == width => Ok((Some(l), k)),
            _ => Err(OpError::Shape(format!(
                "ColumnPanels of {} columns needs P of shape [{want}, K, {width}] or [L, \
                 {want}, K, {width}], got {ps:?}",
                self.columns
            ))),
        }
    }
}

impl Operator for ColumnPanels {
    /// The matrix is `P` read as panels of `width` columns.
    fn stored_layout(&self) -> Option<StoredLayout> {
        Some(StoredLayout::ColumnPanels { width: self.width })
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let p = infer_arg(inputs, 0)?;
        check_dtype(0, p.ty.dtype, |d| d == DType::F32)?;
        let shape = match p.ty.fixed_shape() {
            Some(ps) => {
                let (batch, k) = self.rows(&ps)?;
                batch
                    .into_iter()
                    .chain([k, self.columns])
                    .map(Dim::Fixed)
                    .collect()
            }
            None => match p.ty.shape.as_ref().map(Vec::len) {
                Some(4) => vec![Dim::Unknown, Dim::Unknown, Dim::Fixed(self.columns)],
                _ => vec![Dim::Unknown, Dim::Fixed(self.columns)],
            },
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let p = arg(inputs, 0)?;
        let values = typed_input::<f32>(p, 0)?;
        let (batch, k) = self.rows(p.shape())?;
        let n = self.columns;
        let matrix = n.div_ceil(self.width) * k * self.width;
        let data: Vec<f32> = (0..batch.unwrap_or(1) * k * n)
            .map(|i| {
                let (l, row, j) = (i / (k * n), i / n % k, i % n);
                values[l * matrix + ((j / self.width) * k + row) * self.width + j % self.width]
            })
            .collect();
        let shape = batch.into_iter().chain([k, n]).collect();
        Ok(vec![Tensor::new(shape, data)?])
    }

    /// `B[k, j] = P[j / W, k, j % W]` (`B[l, k, j] = P[l, j / W, k, j % W]`).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let p = input(inputs, 0)?;
        check_dtype(0, p.dtype, |d| d == DType::F32)?;
        let (batch, k) = self.rows(p.shape)?;
        let vars = placeholders(inputs);
        let vp = vars[0].clone();
        let width = Expr::int(self.width as i64);
        let shape: Vec<usize> = batch.into_iter().chain([k, self.columns]).collect();
        grid_def(vars, DataType::F32, &shape, |i| {
            let (lead, kj) = i.split_at(i.len() - 2);
            let panel = [
                kj[1].clone() / width.clone(),
                kj[0].clone(),
                kj[1].clone() % width.clone(),
            ];
            vp.at(lead.iter().cloned().chain(panel))
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_ops::build_op;
    use hidet_graph::attribute::Attribute;

    fn build(columns: i64) -> Result<Box<dyn Operator>, OpError> {
        build_op(
            HIDET_DOMAIN,
            OP_TYPE,
            1,
            &[("columns", Attribute::Int(columns))],
            1,
            1,
        )
    }

    fn build_width(columns: i64, width: i64) -> Result<Box<dyn Operator>, OpError> {
        let attrs = [
            ("columns", Attribute::Int(columns)),
            ("width", Attribute::Int(width)),
        ];
        build_op(HIDET_DOMAIN, OP_TYPE, 1, &attrs, 1, 1)
    }

    #[test]
    fn panels_round_trip_and_pad_with_zeros() {
        let (k, n) = (5usize, 37usize);
        let values: Vec<f32> = (0..k * n).map(|i| i as f32 * 0.5 - 7.25).collect();
        let b = Tensor::new(vec![k, n], values.clone()).unwrap();
        let panels = to_panels(&b, PANEL_WIDTH).unwrap();
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
    fn narrow_panels_round_trip() {
        let (k, n, width) = (7usize, 23usize, 6usize);
        let values: Vec<f32> = (0..k * n).map(|i| (i as f32).sin() + 0.25).collect();
        let b = Tensor::new(vec![k, n], values.clone()).unwrap();
        let panels = to_panels(&b, width).unwrap();
        assert_eq!(panels.shape(), &[4, k, width]);
        let p = panels.as_slice::<f32>().unwrap();
        assert_eq!(p[(3 * k + 2) * width + 4], values[2 * n + 22]);
        assert_eq!(p[(3 * k + 2) * width + 5], 0.0);
        let op = build_width(n as i64, width as i64).unwrap();
        let back = op.eval(&[Some(&panels)]).unwrap().remove(0);
        assert_eq!(back.as_slice::<f32>().unwrap(), values.as_slice());
    }

    #[test]
    fn batched_panels_round_trip() {
        let (l, k, n) = (3usize, 4usize, 21usize);
        let values: Vec<f32> = (0..l * k * n)
            .map(|i| (i as f32 * 0.37).cos() - 0.1)
            .collect();
        let b = Tensor::new(vec![l, k, n], values.clone()).unwrap();
        let panels = to_panels(&b, PANEL_WIDTH).unwrap();
        assert_eq!(panels.shape(), &[l, 2, k, PANEL_WIDTH]);
        let p = panels.as_slice::<f32>().unwrap();
        let at = |li: usize, row: usize, j: usize| {
            p[((li * 2 + j / PANEL_WIDTH) * k + row) * PANEL_WIDTH + j % PANEL_WIDTH]
        };
        assert_eq!(at(2, 3, 20), values[(2 * k + 3) * n + 20]);
        assert_eq!(at(1, 0, 17), values[k * n + 17]);
        assert_eq!(at(1, 2, 21), 0.0);
        let op = build(n as i64).unwrap();
        let back = op.eval(&[Some(&panels)]).unwrap().remove(0);
        assert_eq!(back.shape(), &[l, k, n]);
        assert_eq!(back.as_slice::<f32>().unwrap(), values.as_slice());
    }

    #[test]
    fn wrong_panel_shapes_and_column_counts_are_errors() {
        let op = build(20).unwrap();
        let p = Tensor::new(vec![1, 3, 16], vec![1f32; 48]).unwrap();
        assert!(matches!(op.eval(&[Some(&p)]), Err(OpError::Shape(_))));
        assert!(matches!(build(0), Err(OpError::Attribute { .. })));
        assert!(to_panels(&Tensor::new(vec![4], vec![1f32; 4]).unwrap(), 16).is_none());
        let b = Tensor::new(vec![2, 3], vec![1f32; 6]).unwrap();
        assert!(to_panels(&b, 0).is_none() && to_panels(&b, MAX_PANEL_WIDTH + 1).is_none());
        assert!(matches!(build_width(20, 0), Err(OpError::Attribute { .. })));
        assert!(matches!(
            build_width(20, 65),
            Err(OpError::Attribute { .. })
        ));
        let sixteen_wide = Tensor::new(vec![2, 3, 16], vec![1f32; 96]).unwrap();
        let op = build_width(20, 6).unwrap();
        assert!(matches!(
            op.eval(&[Some(&sixteen_wide)]),
            Err(OpError::Shape(_))
        ));
    }
}
