//! `hidet::Int4Linear`: the product of `float32` activations by a constant weight quantized
//! to 4 bits in blocks along the depth, read as stored, that the block-quantized product pass
//! ([`crate::graph_passes::BlockQuantizedProducts`]) makes of a `MatMul` by
//! `hidet::DequantizeBlocks` (ONNX Runtime's `MatMulNBits`).
//!
//! `Int4Linear(X, W, S, Z; columns = N)` with `X` of `float32` `[R, K]`, `W` of `uint8`
//! `[⌈N/16⌉, B, bs/8, 16, 4]` (`B = ⌈K/bs⌉` blocks of `bs` depths, `bs` a multiple of 8; byte
//! `W[p, b, g, j, u]` holds `q(k, 16p + j)` for `k = b·bs + 8g + 2u` in its low four bits and for
//! `k + 1` in its high four; depths past `K` are never read) and `S`, `Z` of `float32` `[⌈N/16⌉, B, 16]` (column
//! `16p + j`'s scale and zero point for block `b` at `[p, b, j]`) gives `float32` `[R, N]`:
//! `Y[r, n] = Σ_{k<K} X[r, k] · ((q(k, n) − Z[p, k / bs, j]) · S[p, k / bs, j])` with
//! `p = n / 16`, `j = n % 16`. Its kernel is [`crate::templates::int4_linear`].

use crate::graph_ops::{count_attr, HIDET_DOMAIN};
use crate::templates::int4_linear::INT4_PANEL_WIDTH;
use hidet_graph::dtype::DType;
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::{check_dtype, typed_input};
use hidet_graph::ops::compute_util::{dims, finish, input, placeholders};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::Tensor;
use hidet_ir::compute::{reduce, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "Int4Linear";

const WIDTH: usize = INT4_PANEL_WIDTH as usize;

/// An `Int4Linear` node (see the module docs).
#[derive(Debug)]
struct Int4Linear {
    columns: usize,
}

/// Registers `hidet::Int4Linear` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let columns = count_attr(c, "columns")?;
            Ok(Box::new(Int4Linear { columns }))
        },
    );
}

/// The shapes of `W` and of `S` (and `Z`) for `columns` columns, a depth of `k` and blocks of
/// `block_size`.
pub fn operand_shapes(columns: usize, k: usize, block_size: usize) -> (Vec<usize>, Vec<usize>) {
    let (panels, blocks) = (columns.div_ceil(WIDTH), k.div_ceil(block_size));
    (
        vec![panels, blocks, block_size / 8, WIDTH, 4],
        vec![panels, blocks, WIDTH],
    )
}

impl Int4Linear {
    /// `(R, K, bs)` of operands of shapes `shapes` (`X`, `W`, `S`, `Z`), after checking them.
    fn sizes(&self, shapes: [&[usize]; 4]) -> Result<(usize, usize, usize), OpError> {
        let [x, w, s, z] = shapes;
        let ([rows, k], Some(block_size)) = (x, w.get(2).map(|g| g * 8)) else {
            return Err(OpError::Shape(format!(
                "Int4Linear needs X [R, K] and W [P, B, bs/8, 16, 4], got {x:?} and {w:?}"
            )));
        };
        let (w_shape, s_shape) = operand_shapes(self.columns, *k, block_size.max(1));
        if w != w_shape.as_slice() || s != s_shape.as_slice() || z != s_shape.as_slice() {
            return Err(OpError::Shape(format!(
                "Int4Linear: W {w:?}, S {s:?}, Z {z:?} are not {w_shape:?}, {s_shape:?}, \
                 {s_shape:?} ({} columns, depth {k}, blocks of {block_size})",
                self.columns
            )));
        }
        Ok((*rows, *k, block_size))
    }
}

impl Operator for Int4Linear {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, |d| d == DType::F32)?;
        check_dtype(1, infer_arg(inputs, 1)?.ty.dtype, |d| d == DType::U8)?;
        for i in [2, 3] {
            check_dtype(i, infer_arg(inputs, i)?.ty.dtype, |d| d == DType::F32)?;
        }
        let rows = match x.ty.fixed_shape() {
            Some(s) => Dim::Fixed(s.first().copied().unwrap_or(0)),
            None => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape: Some(vec![rows, Dim::Fixed(self.columns)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let args = [
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            arg(inputs, 2)?,
            arg(inputs, 3)?,
        ];
        let (rows, k, bs) = self.sizes(args.map(|t| t.shape()))?;
        let x = typed_input::<f32>(args[0], 0)?;
        let w = typed_input::<u8>(args[1], 1)?;
        let (s, z) = (
            typed_input::<f32>(args[2], 2)?,
            typed_input::<f32>(args[3], 3)?,
        );
        let blocks = k.div_ceil(bs);
        let weight = |kk: usize, n: usize| {
            let (p, j) = (n / WIDTH, n % WIDTH);
            let word = ((p * blocks + kk / bs) * (bs / 8) + kk % bs / 8) * WIDTH + j;
            let byte = w[word * 4 + kk % 8 / 2];
            let q = if kk.is_multiple_of(2) {
                byte & 15
            } else {
                byte >> 4
            };
            let b = (p * blocks + kk / bs) * WIDTH + j;
            (f32::from(q) - z[b]) * s[b]
        };
        let mut y = Vec::with_capacity(rows * self.columns);
        for r in 0..rows {
            for n in 0..self.columns {
                let sum: f64 = (0..k)
                    .map(|kk| f64::from(x[r * k + kk]) * f64::from(weight(kk, n)))
                    .sum();
                y.push(sum as f32);
            }
        }
        Ok(vec![Tensor::new(vec![rows, self.columns], y)?])
    }

    /// `Y[r, n] = Σ_k X[r, k] · ((f32(nibble k % 2 of W[n / 16, k / bs, k % bs / 8, n % 16,
    /// k % 8 / 2]) − Z[…]) · S[…])`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
        let (s, z) = (input(inputs, 2)?, input(inputs, 3)?);
        check_dtype(0, x.dtype, |d| d == DType::F32)?;
        check_dtype(1, w.dtype, |d| d == DType::U8)?;
        let (rows, k, bs) = self.sizes([x.shape, w.shape, s.shape, z.shape])?;
        let vars = placeholders(inputs);
        let (width, bs) = (INT4_PANEL_WIDTH, bs as i64);
        let (f32, i32) = (DataType::F32, DataType::I32);
        let (sum, node) = reduce(
            "acc",
            f32,
            dims(&[rows, self.columns]),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let (n, kk) = (&i[1], &r[0]);
                let (p, j) = (n / width, n % width);
                let at = [p.clone(), kk / bs, kk % bs / 8, j.clone(), kk % 8 / 2];
                let byte = vars[1].at(at).cast(i32);
                let shift = (kk % 2) * 4;
                let q = ((byte >> shift.cast(i32)) & Expr::int(15).cast(i32)).cast(f32);
                let at = [p, kk / bs, j];
                let weight = (q - vars[3].at(at.clone())) * vars[2].at(at);
                vars[0].at([i[0].clone(), kk.clone()]) * weight
            },
        );
        finish(vars, vec![(sum.clone(), node)], vec![sum]).map(Some)
    }
}
