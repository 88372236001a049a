//! `hidet::IntegerLinear`: the 8-bit product of activations by a constant weight stored in
//! panels, accumulated in 32 bits, that the quantized-product pass
//! ([`crate::graph_passes::QuantizedProducts`]) makes of a quantized `MatMul` or `Gemm`.
//!
//! `IntegerLinear(X, W; columns = N, depth_group = G)` with `X` of `uint8` `[R, K]` and `W`
//! of `int8` `[⌈N/32⌉, Kp/G, 32, G]` (`Kp` = `K` rounded up to a multiple of 4, `G` = 4 or 2,
//! 4 when absent: column `n`'s weights for `k = Gg … Gg+G-1` side by side at
//! `W[n / 32, g, n % 32, 0…G-1]`) gives `int32` `[R, N]`:
//! `Y[r, n] = Σ_{k<K} X[r, k] · W[n / 32, k / G, n % 32, k % G]`, wrapping on `int32` overflow;
//! entries of `W` past `N` or `K` are never part of the result. Groups of four suit a target
//! that multiplies four byte pairs per 32-bit lane in one instruction (VNNI), pairs one that
//! multiplies 16-bit pairs (see [`crate::templates::integer_linear::depth_group_for`]). Its
//! kernel is [`crate::templates::integer_linear`].

use crate::graph_ops::{count_attr, HIDET_DOMAIN};
use crate::templates::integer_linear::LINEAR_PANEL_WIDTH;
use crate::templates::integer_matmul::padded_depth;
use hidet_graph::dtype::DType;
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::common::typed_input;
use hidet_graph::ops::compute_util::{dims, finish, input, placeholders};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::Tensor;
use hidet_ir::compute::{reduce, ReduceKind};
use hidet_ir::dtype::DataType;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "IntegerLinear";

/// An `IntegerLinear` node (see the module docs).
#[derive(Debug)]
struct IntegerLinear {
    columns: usize,
    depth_group: usize,
}

/// Registers `hidet::IntegerLinear` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let columns = count_attr(c, "columns")?;
            let depth_group = match c.attrs.int_or("depth_group", 4)? {
                2 => 2,
                4 => 4,
                other => {
                    return Err(OpError::attr(
                        "depth_group",
                        format!("must be 2 or 4, got {other}"),
                    ))
                }
            };
            Ok(Box::new(IntegerLinear {
                columns,
                depth_group,
            }))
        },
    );
}

/// The weight's shape for `columns` columns, a depth of `k` and `depth_group` (2 or 4)
/// consecutive `k` of a column side by side.
pub fn panel_shape(columns: usize, k: usize, depth_group: usize) -> Vec<usize> {
    let width = LINEAR_PANEL_WIDTH as usize;
    let groups = padded_depth(k as i64) as usize / depth_group;
    vec![columns.div_ceil(width), groups, width, depth_group]
}

/// The offset in the weight panels (of `groups` depth groups of `depth_group`) of column `n`'s
/// weight for depth `k`.
pub fn panel_offset(n: usize, k: usize, groups: usize, depth_group: usize) -> usize {
    let width = LINEAR_PANEL_WIDTH as usize;
    (((n / width) * groups + k / depth_group) * width + n % width) * depth_group + k % depth_group
}

impl IntegerLinear {
    /// `(R, K)` of operands of shapes `x` and `w`, after checking them.
    fn sizes(&self, x: &[usize], w: &[usize]) -> Result<(usize, usize), OpError> {
        let [rows, k] = x else {
            return Err(OpError::Shape(format!(
                "IntegerLinear needs X [R, K], got {x:?}"
            )));
        };
        let want = panel_shape(self.columns, *k, self.depth_group);
        if w != want.as_slice() {
            return Err(OpError::Shape(format!(
                "IntegerLinear: W of shape {w:?} is not {want:?}, the panels of {} columns of \
                 depth {k} in groups of {}",
                self.columns, self.depth_group
            )));
        }
        Ok((*rows, *k))
    }
}

impl Operator for IntegerLinear {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, w) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_dtype(0, x.ty.dtype, |d| d == DType::U8)?;
        check_dtype(1, w.ty.dtype, |d| d == DType::I8)?;
        let shape = match (x.ty.fixed_shape(), w.ty.fixed_shape()) {
            (Some(x), Some(w)) => {
                let (rows, _) = self.sizes(&x, &w)?;
                vec![Dim::Fixed(rows), Dim::Fixed(self.columns)]
            }
            _ => vec![Dim::Unknown, Dim::Fixed(self.columns)],
        };
        Ok(vec![TensorType {
            dtype: DType::I32,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (rows, k) = self.sizes(x.shape(), w.shape())?;
        let xv = typed_input::<u8>(x, 0)?;
        let wv = typed_input::<i8>(w, 1)?;
        let (groups, group) = (w.shape()[1], self.depth_group);
        let weight = |n: usize, k: usize| i64::from(wv[panel_offset(n, k, groups, group)]);
        let mut y = Vec::with_capacity(rows * self.columns);
        for r in 0..rows {
            for n in 0..self.columns {
                let sum: i64 = (0..k)
                    .map(|kk| i64::from(xv[r * k + kk]) * weight(n, kk))
                    .sum();
                // Wrapping, as the kernel's 32-bit accumulators.
                y.push(sum as i32);
            }
        }
        Ok(vec![Tensor::new(vec![rows, self.columns], y)?])
    }

    /// `Y[r, n] = Σ_{k<K} i32(X[r, k]) · i32(W[n / 32, k / G, n % 32, k % G])`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
        check_dtype(0, x.dtype, |d| d == DType::U8)?;
        check_dtype(1, w.dtype, |d| d == DType::I8)?;
        let (rows, k) = self.sizes(x.shape, w.shape)?;
        let vars = placeholders(inputs);
        let (vx, vw) = (vars[0].clone(), vars[1].clone());
        let (width, group) = (LINEAR_PANEL_WIDTH, self.depth_group as i64);
        let (sum, node) = reduce(
            "acc",
            DataType::I32,
            dims(&[rows, self.columns]),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let (n, kk) = (&i[1], &r[0]);
                let v = vx.at([i[0].clone(), kk.clone()]).cast(DataType::I32);
                let wi = [n / width, kk / group, n % width, kk % group];
                v * vw.at(wi).cast(DataType::I32)
            },
        );
        finish(vars, vec![(sum.clone(), node)], vec![sum]).map(Some)
    }
}
