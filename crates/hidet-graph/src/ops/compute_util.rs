//! Building blocks of operator compute definitions ([`crate::Operator::compute`]): input
//! placeholders, numpy-broadcast reads, row-major linearize/unravel, single-grid definitions,
//! and scalar expressions with ONNX semantics that the IR does not have as one operation
//! (C-style integer division, numpy's saturating float-to-int conversion).

use hidet_ir::compute::{grid, reduce, tensor_input, ComputeDef, ComputeNode, ReduceKind};
use std::ops::Range;

use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::intrinsic::MathFunc;

use crate::kernels::broadcast::broadcast_shapes;
use crate::operator::{ComputeInput, OpError};

/// The required input `i`, or [`OpError::MissingInput`].
pub fn input<'a>(
    inputs: &[Option<ComputeInput<'a>>],
    i: usize,
) -> Result<ComputeInput<'a>, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or(OpError::MissingInput(i))
}

/// The optional input `i` (`None` if absent or beyond the slice).
pub fn opt_input<'a>(inputs: &[Option<ComputeInput<'a>>], i: usize) -> Option<ComputeInput<'a>> {
    inputs.get(i).copied().flatten()
}

/// One placeholder per input slot, as [`crate::Operator::compute`]'s contract requires:
/// `in{i}`, row-major, with the slot's dtype and shape; an absent slot gets a rank-0 `bool`
/// placeholder.
pub fn placeholders(inputs: &[Option<ComputeInput<'_>>]) -> Vec<Var> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let name = format!("in{i}");
            match x {
                Some(x) => tensor_input(&name, x.dtype.to_ir(), dims(x.shape)),
                None => tensor_input(&name, DataType::BOOL, Vec::<i64>::new()),
            }
        })
        .collect()
}

/// A concrete shape as IR dimension values.
pub fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// The numpy broadcast of `shapes`, or [`OpError::Shape`].
pub fn broadcast(shapes: &[&[usize]]) -> Result<Vec<usize>, OpError> {
    broadcast_shapes(shapes)
}

/// The index into a tensor of shape `in_shape` that numpy broadcasting reads for the output
/// element at `out_index`: dimensions are right-aligned, leading output axes the input lacks
/// are dropped and size-1 input dimensions are read at 0.
///
/// Requires `in_shape.len() <= out_index.len()`.
pub fn broadcast_index(out_index: &[Expr], in_shape: &[usize]) -> Vec<Expr> {
    let skip = out_index.len().saturating_sub(in_shape.len());
    in_shape
        .iter()
        .zip(&out_index[skip..])
        .map(|(&d, i)| if d == 1 { Expr::int(0) } else { i.clone() })
        .collect()
}

/// `t[broadcast_index(out_index, in_shape)]`, where `in_shape` is `t`'s shape.
pub fn broadcast_read(t: &Var, in_shape: &[usize], out_index: &[Expr]) -> Expr {
    t.at(broadcast_index(out_index, in_shape))
}

/// The index type that holds every linear offset of a tensor of `numel` elements: `i32`
/// where it fits, `i64` beyond.
pub fn index_dtype(numel: usize) -> DataType {
    if numel <= i32::MAX as usize {
        DataType::I32
    } else {
        DataType::I64
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

/// The row-major offset of `index` in a tensor of `shape`, as an expression of
/// [`index_dtype`]`(numel)`. Size-1 dimensions contribute nothing.
///
/// Requires `index.len() == shape.len()`.
pub fn linearize(index: &[Expr], shape: &[usize]) -> Expr {
    let ty = index_dtype(numel(shape));
    let mut stride = 1usize;
    let mut terms: Vec<Expr> = Vec::new();
    for (i, &d) in index.iter().zip(shape).rev() {
        if d != 1 {
            let i = if ty == DataType::I32 {
                i.clone()
            } else {
                i.cast(ty)
            };
            terms.push(if stride == 1 {
                i
            } else {
                i * Expr::int_of(stride as i64, ty)
            });
        }
        stride = stride.saturating_mul(d);
    }
    terms
        .into_iter()
        .rev()
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| Expr::int_of(0, ty))
}

/// The row-major index in a tensor of `shape` of the element at offset `linear` (the inverse
/// of [`linearize`]). Size-1 dimensions are 0; the outermost non-trivial dimension is not
/// reduced modulo its extent, so `linear` must be in range.
pub fn unravel(linear: &Expr, shape: &[usize]) -> Vec<Expr> {
    let ty = linear.dtype().unwrap_or(DataType::I32);
    let outermost = shape.iter().position(|&d| d != 1);
    let mut stride = 1usize;
    let mut out = vec![Expr::int(0); shape.len()];
    for (k, &d) in shape.iter().enumerate().rev() {
        if d != 1 {
            let q = if stride == 1 {
                linear.clone()
            } else {
                linear / Expr::int_of(stride as i64, ty)
            };
            out[k] = if Some(k) == outermost {
                q
            } else {
                q % Expr::int_of(d as i64, ty)
            };
        }
        stride = stride.saturating_mul(d);
    }
    out
}

/// A definition of one grid output `out[i…] = f(i…)` of `dtype` over `shape`, with `inputs`
/// as its placeholders.
pub fn grid_def(
    inputs: Vec<Var>,
    dtype: DataType,
    shape: &[usize],
    f: impl FnOnce(&[Expr]) -> Expr,
) -> Result<ComputeDef, OpError> {
    let (out, node) = grid("out", dtype, dims(shape), f);
    finish(inputs, vec![(out.clone(), node)], vec![out])
}

/// Like [`grid_def`] for an element function that may have no IR form: `Ok(None)` when `f`
/// returns `None`.
pub fn try_grid_def(
    inputs: Vec<Var>,
    dtype: DataType,
    shape: &[usize],
    f: impl FnOnce(&[Expr]) -> Option<Expr>,
) -> Result<Option<ComputeDef>, OpError> {
    let mut expressible = true;
    let (out, node) = grid("out", dtype, dims(shape), |i| {
        f(i).unwrap_or_else(|| {
            expressible = false;
            Expr::zero(dtype)
        })
    });
    if !expressible {
        return Ok(None);
    }
    finish(inputs, vec![(out.clone(), node)], vec![out]).map(Some)
}

/// [`ComputeDef::new`], with a validation failure (a bug in the operator's definition)
/// reported as [`OpError::Invalid`].
pub fn finish(
    inputs: Vec<Var>,
    nodes: Vec<(Var, ComputeNode)>,
    outputs: Vec<Var>,
) -> Result<ComputeDef, OpError> {
    ComputeDef::new(inputs, nodes, outputs)
        .map_err(|e| OpError::Invalid(format!("invalid compute definition: {e}")))
}

/// The type float math of `dtype` is carried out in: `f32` for `f16`/`bf16`, else `dtype`.
pub fn math_dtype(dtype: DataType) -> DataType {
    if dtype == DataType::F16 || dtype == DataType::BF16 {
        DataType::F32
    } else {
        dtype
    }
}

/// The constant `v` of `dtype`: rounded for floats, truncated for integers, `v != 0` for bool.
pub fn konst(v: f64, dtype: DataType) -> Expr {
    if dtype.is_float() {
        Expr::float_of(v, dtype)
    } else if dtype.is_bool() {
        Expr::bool(v != 0.0)
    } else {
        Expr::int_of(v as i64, dtype)
    }
}

/// `f(x)` for a one-argument math function.
pub fn math1(f: MathFunc, x: Expr) -> Expr {
    Expr::math(f, vec![x])
}

/// `lo` where `x < lo`, `hi` where `x > hi`, else `x` (NaN stays NaN).
pub fn clamp(x: Expr, lo: Expr, hi: Expr) -> Expr {
    let upper = Expr::select(x.gt(hi.clone()), hi, x.clone());
    Expr::select(x.lt(lo.clone()), lo, upper)
}

/// Integer division rounding toward zero (C and ONNX semantics; the IR's `/` floors) of
/// signed integers of `dtype`.
pub fn trunc_div(a: Expr, b: Expr, dtype: DataType) -> Expr {
    let q = &a / b.clone();
    let zero = Expr::int_of(0, dtype);
    let inexact = (&a % b.clone()).ne(zero.clone());
    let signs_differ = a.lt(zero.clone()).ne(b.lt(zero));
    Expr::select(inexact.and(signs_differ), &q + Expr::int_of(1, dtype), q)
}

/// The integer remainder with the sign of the dividend (C `%`, ONNX `Mod` with `fmod=1`;
/// the IR's `%` takes the divisor's sign) of signed integers of `dtype`.
pub fn trunc_rem(a: Expr, b: Expr, dtype: DataType) -> Expr {
    let r = &a % b.clone();
    let zero = Expr::int_of(0, dtype);
    let signs_differ = a.lt(zero.clone()).ne(b.lt(zero.clone()));
    Expr::select(r.ne(zero).and(signs_differ), &r - b, r)
}

/// The smallest and largest values of the integer type `dtype`.
pub fn int_bounds(dtype: DataType) -> (i128, i128) {
    let bits = (dtype.bytes() * 8) as u32;
    if dtype.scalar.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

/// `x` (of float type `from`) converted to the integer type `to` like numpy's `astype` (and
/// [`crate::Element::from_f64`]): truncated toward zero, saturated at the type's bounds, NaN
/// to 0. `None` for `u64`, whose maximum the IR's 64-bit signed constants cannot hold.
pub fn float_to_int(x: Expr, from: DataType, to: DataType) -> Option<Expr> {
    let (lo, max) = int_bounds(to);
    let (lo, max) = (i64::try_from(lo).ok()?, i64::try_from(max).ok()?);
    let above = max as f64 + 1.0;
    let saturated = Expr::select(
        x.le(Expr::float_of(lo as f64, from)),
        Expr::int_of(lo, to),
        Expr::select(
            x.ge(Expr::float_of(above, from)),
            Expr::int_of(max, to),
            x.cast(to),
        ),
    );
    Some(Expr::select(
        math1(MathFunc::IsNan, x),
        Expr::int_of(0, to),
        saturated,
    ))
}

/// The index into an axis of size `dim` that an ONNX index value `idx` (any integer
/// expression, e.g. a read of an `indices` tensor) names: negative values count from the end
/// (`select(idx < 0, idx + dim, idx)`), and the result is clamped into `[0, dim)` so that a
/// kernel never reads outside the tensor. Indices that `eval` rejects as out of range thus
/// read some element of the axis instead of failing. The result has type
/// [`index_dtype`]`(dim)`.
///
/// Requires `dim > 0` (an empty axis has no element to read; callers reject that case).
pub fn wrap_index(idx: Expr, dim: usize) -> Expr {
    let wide = if idx.dtype() == Some(DataType::I64) {
        idx
    } else {
        idx.cast(DataType::I64)
    };
    let n = Expr::int_of(dim as i64, DataType::I64);
    let zero = Expr::int_of(0, DataType::I64);
    let wrapped = Expr::select(wide.lt(zero.clone()), &wide + n.clone(), wide);
    let hi = Expr::int_of(dim.saturating_sub(1) as i64, DataType::I64);
    clamp(wrapped, zero, hi).cast(index_dtype(dim))
}

/// The index into a tensor of `in_shape` of the element that a reshape to `out_shape` puts
/// at `out_index` (row-major order is kept). The shapes are split into [`reshape_groups`]
/// and each group goes through its own linear offset ([`linearize`], then [`unravel`]), so
/// axes that a reshape does not merge or split map one to one, and a merge or split costs
/// index arithmetic on its own axes only. The inverse of a reshape is the reshape back:
/// `reshape_index(j, in_shape, out_shape)`.
///
/// Requires `out_index.len() == out_shape.len()` and equal element counts.
pub fn reshape_index(out_index: &[Expr], out_shape: &[usize], in_shape: &[usize]) -> Vec<Expr> {
    if out_shape == in_shape {
        return out_index.to_vec();
    }
    let mut index = Vec::with_capacity(in_shape.len());
    for (in_dims, out_dims) in reshape_groups(in_shape, out_shape) {
        let linear = linearize(&out_index[out_dims.clone()], &out_shape[out_dims]);
        index.extend(unravel(&linear, &in_shape[in_dims]));
    }
    index
}

/// The finest split of a row-major reshape between shapes `a` and `b` (equal element counts)
/// into groups `(a_dims, b_dims)` of consecutive dimensions with equal products: the
/// elements of a group's `a` dimensions are exactly those of its `b` dimensions, so each
/// group can be reshaped on its own. The groups cover both shapes in order; size-1
/// dimensions may form groups of their own. A shape with a zero extent (or mismatched
/// counts) gives one group over everything.
pub fn reshape_groups(a: &[usize], b: &[usize]) -> Vec<(Range<usize>, Range<usize>)> {
    let whole = vec![(0..a.len(), 0..b.len())];
    if a.contains(&0) || b.contains(&0) {
        return whole;
    }
    let (mut i, mut j) = (0, 0);
    let mut groups = Vec::new();
    while i < a.len() || j < b.len() {
        let (gi, gj) = (i, j);
        let (mut pa, mut pb) = (1usize, 1usize);
        if i < a.len() {
            pa = a[i];
            i += 1;
        }
        if j < b.len() {
            pb = b[j];
            j += 1;
        }
        while pa != pb {
            if pa < pb && i < a.len() {
                pa = pa.saturating_mul(a[i]);
                i += 1;
            } else if pb < pa && j < b.len() {
                pb = pb.saturating_mul(b[j]);
                j += 1;
            } else {
                return whole;
            }
        }
        groups.push((gi..i, gj..j));
    }
    groups
}

/// The first element of `t` as an IR constant of `t`'s dtype (floats exact, since every
/// element value is representable in `f64`); `None` for an empty tensor or a `u64` value
/// above `i64::MAX`, which the IR's integer constants cannot hold.
pub fn scalar_const(t: &crate::tensor::Tensor) -> Option<Expr> {
    let dtype = t.dtype().to_ir();
    if t.numel() == 0 {
        return None;
    }
    if dtype.is_float() || dtype.is_bool() {
        let v = *t.to_f64_vec().first()?;
        return Some(konst(v, dtype));
    }
    let v: i128 = crate::dispatch_int!(t.dtype(), T => {
        crate::tensor::Element::to_i128(*t.as_slice::<T>().ok()?.first()?)
    }, else return None);
    i64::try_from(v).ok().map(|v| Expr::int_of(v, dtype))
}

/// The type integer sums and products of `dtype` accumulate in: the unsigned type of its
/// width, whose arithmetic wraps like numpy's; 64-bit types stay as they are (the IR's
/// constants and interpreter hold only values of `i64`, so an i64 sum must not overflow).
pub fn wrapping_type(dtype: DataType) -> DataType {
    match dtype.bytes() {
        1 => DataType::U8,
        2 => DataType::U16,
        4 => DataType::U32,
        _ => dtype,
    }
}

/// A reduction over some axes of a row-major tensor, as definitions lay it out: each output
/// element (a *row*) folds the input elements that agree with it on the kept axes. The output
/// keeps the reduced axes as size 1 (`keepdims`) or drops them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisReduction {
    shape: Vec<usize>,
    mask: Vec<bool>,
    keepdims: bool,
}

impl AxisReduction {
    /// The reduction of a tensor of `shape` over the axes where `mask` is true.
    ///
    /// Requires `mask.len() == shape.len()`.
    pub fn new(shape: &[usize], mask: &[bool], keepdims: bool) -> AxisReduction {
        AxisReduction {
            shape: shape.to_vec(),
            mask: mask.to_vec(),
            keepdims,
        }
    }

    /// The reduction over the trailing axes `start..` of `shape`.
    pub fn trailing(shape: &[usize], start: usize, keepdims: bool) -> AxisReduction {
        let mask: Vec<bool> = (0..shape.len()).map(|d| d >= start).collect();
        AxisReduction::new(shape, &mask, keepdims)
    }

    /// The output (row) shape.
    pub fn out_shape(&self) -> Vec<usize> {
        self.shape
            .iter()
            .zip(&self.mask)
            .filter(|(_, &m)| self.keepdims || !m)
            .map(|(&d, &m)| if m { 1 } else { d })
            .collect()
    }

    /// The extents of the reduced axes, in axis order.
    pub fn reduce_shape(&self) -> Vec<usize> {
        self.shape
            .iter()
            .zip(&self.mask)
            .filter(|(_, &m)| m)
            .map(|(&d, _)| d)
            .collect()
    }

    /// How many input elements each row folds.
    pub fn count(&self) -> usize {
        self.reduce_shape().iter().product()
    }

    /// The input index that row `row` reads at reduction index `r`.
    ///
    /// Requires `row.len() == self.out_shape().len()` and `r.len() == self.reduce_shape().len()`.
    pub fn input_index(&self, row: &[Expr], r: &[Expr]) -> Vec<Expr> {
        let (mut rows, mut rs) = (row.iter(), r.iter());
        self.mask
            .iter()
            .map(|&m| {
                let next = if m {
                    if self.keepdims {
                        rows.next();
                    }
                    rs.next()
                } else {
                    rows.next()
                };
                next.cloned().unwrap_or_else(|| Expr::int(0))
            })
            .collect()
    }

    /// The row that the input element at `index` belongs to.
    ///
    /// Requires `index.len()` to be the input's rank.
    pub fn row_index(&self, index: &[Expr]) -> Vec<Expr> {
        index
            .iter()
            .zip(&self.mask)
            .filter(|(_, &m)| self.keepdims || !m)
            .map(|(i, &m)| if m { Expr::int(0) } else { i.clone() })
            .collect()
    }

    /// The reduction index (the components on the reduced axes) of the input element at
    /// `index`: the inverse of [`AxisReduction::input_index`] for a fixed row.
    ///
    /// Requires `index.len()` to be the input's rank.
    pub fn reduced_index(&self, index: &[Expr]) -> Vec<Expr> {
        index
            .iter()
            .zip(&self.mask)
            .filter(|(_, &m)| m)
            .map(|(i, _)| i.clone())
            .collect()
    }

    /// The reduce node `name[row] = ⊕_r f(input_index(row, r))` of `dtype` over the rows.
    pub fn node(
        &self,
        name: &str,
        dtype: DataType,
        kind: ReduceKind,
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> (Var, ComputeNode) {
        reduce(
            name,
            dtype,
            dims(&self.out_shape()),
            dims(&self.reduce_shape()),
            kind,
            |row, r| f(&self.input_index(row, r)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_int(e: &Expr, vars: &[(&Var, i64)]) -> i64 {
        use hidet_ir::builder::FunctionBuilder;
        use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let mut map = std::collections::HashMap::new();
        for (v, _) in vars {
            map.insert((*v).clone(), fb.param(v.name(), v.ty().clone()).expr());
        }
        let out = fb.tensor_param("out", DataType::I64, [1i64]);
        fb.store(&out, [Expr::int(0)], e.substitute(&map).cast(DataType::I64));
        let f = fb.finish();
        let mut args: Vec<Arg> = vars
            .iter()
            .map(|(_, x)| Arg::Scalar(Scalar::Int(*x)))
            .collect();
        args.push(Arg::Buffer(Buffer::zeros(DataType::I64, 1)));
        run_function(&f, &mut args).expect("expression evaluates");
        match args.pop() {
            Some(Arg::Buffer(b)) => b.to_i64()[0],
            _ => unreachable!("the last argument is the output buffer"),
        }
    }

    #[test]
    fn linearize_and_unravel_are_inverse() {
        let shape = [3usize, 1, 5, 2];
        let l = Var::new("l", DataType::I32);
        let idx = unravel(&l.expr(), &shape);
        for off in 0..30i64 {
            let got: Vec<i64> = idx.iter().map(|e| eval_int(e, &[(&l, off)])).collect();
            let want = [off / 10, 0, off / 2 % 5, off % 2];
            assert_eq!(got, want, "offset {off}");
        }
        let vars: Vec<Var> = (0..4)
            .map(|k| Var::new(format!("i{k}"), DataType::I32))
            .collect();
        let index: Vec<Expr> = vars.iter().map(Var::expr).collect();
        let lin = linearize(&index, &shape);
        let got = eval_int(
            &lin,
            &[(&vars[0], 2), (&vars[1], 0), (&vars[2], 3), (&vars[3], 1)],
        );
        assert_eq!(got, 2 * 10 + 3 * 2 + 1);
        assert_eq!(linearize(&[], &[]).as_int(), Some(0));
    }

    #[test]
    fn broadcast_index_drops_leading_and_zeroes_unit_axes() {
        let i: Vec<Expr> = (0..3).map(|k| Expr::int(k + 4)).collect();
        let b = broadcast_index(&i, &[1, 7]);
        assert_eq!(
            b.iter().map(|e| e.as_int()).collect::<Vec<_>>(),
            vec![Some(0), Some(6)]
        );
        assert!(broadcast_index(&i, &[]).is_empty());
    }

    #[test]
    fn wrap_index_counts_negatives_from_the_end_and_stays_in_range() {
        for dtype in [DataType::I32, DataType::I64] {
            let v = Var::new("v", dtype);
            let e = wrap_index(v.expr(), 5);
            for (idx, want) in [(-5, 0), (-1, 4), (0, 0), (3, 3), (4, 4), (-9, 0), (7, 4)] {
                assert_eq!(eval_int(&e, &[(&v, idx)]), want, "{dtype} index {idx}");
            }
            assert_eq!(e.dtype(), Some(DataType::I32));
        }
    }

    /// The row-major offset of `index` in `shape`.
    fn offset(index: &[i64], shape: &[usize]) -> i64 {
        index
            .iter()
            .zip(shape)
            .fold(0, |acc, (&i, &d)| acc * d as i64 + i)
    }

    #[test]
    fn reshape_groups_pair_merges_and_splits() {
        assert_eq!(
            reshape_groups(&[512, 784], &[1, 512, 28, 28]),
            vec![(0..1, 0..2), (1..2, 2..4)]
        );
        assert_eq!(
            reshape_groups(&[6, 4, 5], &[3, 8, 5]),
            vec![(0..2, 0..2), (2..3, 2..3)]
        );
        assert_eq!(
            reshape_groups(&[6], &[6, 1]),
            vec![(0..1, 0..1), (1..1, 1..2)]
        );
        assert_eq!(reshape_groups(&[0, 3], &[3, 0]), vec![(0..2, 0..2)]);
    }

    #[test]
    fn reshape_index_keeps_untouched_axes_local() {
        let ax: Vec<Var> = (0..4)
            .map(|d| Var::new(format!("i{d}"), DataType::I32))
            .collect();
        let index: Vec<Expr> = ax.iter().map(|a| a.expr()).collect();
        let got = reshape_index(&index, &[1, 12, 5, 7], &[12, 35]);
        assert_eq!(got[0], ax[1].expr());
        assert!(!format!("{}", got[1]).contains("i1"));
    }

    #[test]
    fn reshape_index_keeps_row_major_order() {
        for (out_shape, in_shape) in [
            (vec![3usize, 1, 5], vec![1usize, 3, 5, 1]),
            (vec![6, 5], vec![2, 3, 5]),
            (vec![7], vec![7]),
            (vec![2, 1, 3], vec![3, 2]),
            (vec![1, 4, 3, 5], vec![4, 15]),
            (vec![3, 8, 5], vec![6, 4, 5]),
            (vec![4, 6, 1], vec![2, 12]),
            (vec![2, 3, 4], vec![4, 3, 2]),
        ] {
            let vars: Vec<Var> = (0..out_shape.len())
                .map(|k| Var::new(format!("i{k}"), DataType::I32))
                .collect();
            let index: Vec<Expr> = vars.iter().map(Var::expr).collect();
            let mapped = reshape_index(&index, &out_shape, &in_shape);
            assert_eq!(mapped.len(), in_shape.len());
            let total: usize = out_shape.iter().product();
            for lin in 0..total as i64 {
                let mut rest = lin;
                let mut at = vec![0i64; out_shape.len()];
                for (k, &d) in out_shape.iter().enumerate().rev() {
                    at[k] = rest % d as i64;
                    rest /= d as i64;
                }
                let env: Vec<(&Var, i64)> = vars.iter().zip(at.iter().copied()).collect();
                let got: Vec<i64> = mapped.iter().map(|e| eval_int(e, &env)).collect();
                assert_eq!(
                    offset(&got, &in_shape),
                    lin,
                    "{out_shape:?} -> {in_shape:?} at {at:?}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn scalar_const_is_exact_or_absent() {
        use crate::tensor::Tensor;
        let c = scalar_const(&Tensor::scalar(-5i8)).expect("i8 fits");
        assert_eq!((c.as_int(), c.dtype()), (Some(-5), Some(DataType::I8)));
        let big = scalar_const(&Tensor::scalar(u64::MAX - 3));
        assert!(big.is_none(), "u64 beyond i64::MAX has no IR constant");
        let c = scalar_const(&Tensor::scalar(half::f16::from_f32(2.5))).expect("f16");
        assert_eq!(c.dtype(), Some(DataType::F16));
        assert!(scalar_const(&Tensor::new(vec![0], Vec::<f32>::new()).unwrap()).is_none());
        let t = scalar_const(&Tensor::scalar(true)).expect("bool");
        assert_eq!(t.dtype(), Some(DataType::BOOL));
    }

    #[test]
    fn trunc_div_and_rem_follow_c() {
        let (a, b) = (Var::new("a", DataType::I32), Var::new("b", DataType::I32));
        for (x, y) in [
            (-7i64, 2i64),
            (7, -2),
            (-7, -2),
            (7, 2),
            (-6, 3),
            (5, 7),
            (-5, 7),
        ] {
            let q = eval_int(
                &trunc_div(a.expr(), b.expr(), DataType::I32),
                &[(&a, x), (&b, y)],
            );
            let r = eval_int(
                &trunc_rem(a.expr(), b.expr(), DataType::I32),
                &[(&a, x), (&b, y)],
            );
            assert_eq!((q, r), (x / y, x % y), "{x} / {y}");
        }
    }
}
