//! Indexed writes: ScatterElements (and its deprecated alias Scatter) and ScatterND, with the
//! `reduction` attribute (`add`/`mul` from opset 16, `max`/`min` from opset 18). Updates are
//! applied in row-major order of the indices, so with `none` the last duplicate wins.
//!
//! Both have a compute definition in gather form, for scatters small enough
//! ([`MAX_SCATTER_MATCHES`]): each output element looks for the index entries that name it
//! (the last one with `none`, all of them reduced otherwise). As for the gathers, an index
//! that `eval` rejects as out of range matches no element in a kernel.

use crate::kernels::movement::{
    element_offsets, index_values, is_index_dtype, offsets, scatter, strides, wrap_index,
    Reduction,
};
use crate::dtype::DType;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::norm_axis;
use crate::ops::compute_util::{dims, finish, input, placeholders, unravel};
use hidet_ir::compute::{grid, reduce, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// `data[i with i[axis] = indices[i]] ⊕= updates[i]` for every position `i` of `indices`.
#[derive(Debug)]
struct ScatterElements {
    axis: i64,
    reduction: Reduction,
}

/// `data[indices[i.., :], t..] ⊕= updates[i.., t..]`.
#[derive(Debug)]
struct ScatterNd {
    reduction: Reduction,
}

/// Parses `reduction`, accepting `add`/`mul` from opset 16 and `max`/`min` from opset 18.
fn reduction(c: &OpContext<'_>) -> Result<Reduction, OpError> {
    if c.opset < 16 {
        return Ok(Reduction::None);
    }
    let s = c.attrs.string_or("reduction", "none")?;
    let r = Reduction::parse(&s);
    match r {
        Some(Reduction::Max | Reduction::Min) if c.opset < 18 => Err(OpError::attr(
            "reduction",
            format!("`{s}` needs opset 18, the model imports {}", c.opset),
        )),
        Some(r) => Ok(r),
        None => Err(OpError::attr(
            "reduction",
            format!("unknown reduction `{s}`"),
        )),
    }
}

/// Registers Scatter, ScatterElements and ScatterND.
pub fn register(r: &mut Registry) {
    let elements = |c: &OpContext<'_>| -> Result<Box<dyn Operator>, OpError> {
        Ok(Box::new(ScatterElements {
            axis: c.attrs.int_or("axis", 0)?,
            reduction: reduction(c)?,
        }))
    };
    r.register("", "Scatter", 9..=10, elements);
    r.register("", "ScatterElements", 11..=15, elements);
    r.register("", "ScatterElements", 16..=17, elements);
    r.register("", "ScatterElements", 18..=LATEST_OPSET, elements);
    let nd = |c: &OpContext<'_>| -> Result<Box<dyn Operator>, OpError> {
        Ok(Box::new(ScatterNd {
            reduction: reduction(c)?,
        }))
    };
    r.register("", "ScatterND", 11..=15, nd);
    r.register("", "ScatterND", 16..=17, nd);
    r.register("", "ScatterND", 18..=LATEST_OPSET, nd);
}

/// Shared inference: output = data's type; indices int32/int64; updates of data's dtype.
fn infer_scatter(inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
    let (x, i, u) = (
        infer_arg(inputs, 0)?,
        infer_arg(inputs, 1)?,
        infer_arg(inputs, 2)?,
    );
    if !is_index_dtype(i.ty.dtype) {
        return Err(OpError::DType {
            index: 1,
            dtype: i.ty.dtype,
        });
    }
    if u.ty.dtype != x.ty.dtype {
        return Err(OpError::DType {
            index: 2,
            dtype: u.ty.dtype,
        });
    }
    Ok(vec![x.ty.clone()])
}

impl Operator for ScatterElements {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_scatter(inputs)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, ind, upd) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        if ind.shape() != upd.shape() || ind.rank() != x.rank() {
            return Err(OpError::Shape(format!(
                "ScatterElements: data {:?}, indices {:?} and updates {:?} must have one rank, \
                 indices and updates one shape",
                x.shape(),
                ind.shape(),
                upd.shape()
            )));
        }
        let a = norm_axis(self.axis, x.rank())?;
        let dst = element_offsets("ScatterElements", x.shape(), ind, a)?;
        Ok(vec![scatter(x, upd, &dst, self.reduction)?])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        self.gather_form(inputs)
    }
}

impl Operator for ScatterNd {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_scatter(inputs)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, ind, upd) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let (r, q) = (x.rank(), ind.rank());
        let k = ind.shape().last().copied().unwrap_or(0);
        if q == 0 || k > r {
            return Err(OpError::Shape(format!(
                "ScatterND: indices {:?} do not index data {:?}",
                ind.shape(),
                x.shape()
            )));
        }
        let want = [&ind.shape()[..q - 1], &x.shape()[k..]].concat();
        if upd.shape() != want {
            return Err(OpError::Shape(format!(
                "ScatterND: updates have shape {:?}, expected {want:?}",
                upd.shape()
            )));
        }
        let idx = index_values(ind)?;
        let st = strides(x.shape());
        let ist = strides(&ind.shape()[..q - 1]);
        let dst = offsets(&want, |u| {
            let tuple: usize = u[..q - 1]
                .iter()
                .zip(&ist)
                .map(|(i, s)| i * s)
                .sum::<usize>()
                * k;
            let mut off = 0usize;
            for j in 0..k {
                off += wrap_index(idx[tuple + j], x.shape()[j], "ScatterND")? * st[j];
            }
            let inner: usize = u[q - 1..].iter().zip(&st[k..]).map(|(i, s)| i * s).sum();
            Ok(off + inner)
        })?;
        Ok(vec![scatter(x, upd, &dst, self.reduction)?])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        self.gather_form(inputs)
    }
}

/// The most (output prefix element, index tuple) pairs a ScatterND kernel compares: above
/// it the host's `eval`, linear in the updates, runs instead.
pub const MAX_SCATTER_MATCHES: usize = 1 << 24;

impl ScatterNd {
    /// `out[i] = updates[u, i[k..]]` for the last index tuple `u` equal to `i[..k]` (negative
    /// entries counting from the end), else `data[i]`; with a reduction, `data[i] ⊕` the
    /// reduction of every matching update. `None` for non-numeric data, booleans, or more
    /// than [`MAX_SCATTER_MATCHES`] comparisons.
    fn gather_form(
        &self,
        inputs: &[Option<ComputeInput<'_>>],
    ) -> Result<Option<ComputeDef>, OpError> {
        let (x, ind, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
        let (r, q) = (x.shape.len(), ind.shape.len());
        let k = ind.shape.last().copied().unwrap_or(0);
        if q == 0 || k > r || k == 0 {
            return Ok(None);
        }
        let tuples_shape = &ind.shape[..q - 1];
        let want = [tuples_shape, &x.shape[k..]].concat();
        let tuples: usize = tuples_shape.iter().product();
        let prefix: usize = x.shape[..k].iter().product();
        let compared = if self.reduction == Reduction::None {
            prefix
        } else {
            x.shape.iter().product()
        };
        if upd.shape != want.as_slice() || !scatterable(x.dtype, tuples, compared) {
            return Ok(None);
        }
        let vars = placeholders(inputs);
        let (vi, vu) = (vars[1].clone(), vars[2].clone());
        let idx_ty = ind.dtype.to_ir();
        let shape = x.shape.to_vec();
        // Whether index tuple `u` (flat over the tuples) names the prefix `i[..k]`.
        let matches = |i: &[Expr], u: &Expr| -> Expr {
            let mut at = unravel(u, tuples_shape);
            at.push(Expr::int(0));
            let mut all = Expr::bool(true);
            for (j, ij) in i.iter().take(k).enumerate() {
                at[q - 1] = Expr::int(j as i64);
                all = all.and(wrapped(vi.at(at.clone()), shape[j], idx_ty).eq(ij.cast(idx_ty)));
            }
            all
        };
        let update_at = |i: &[Expr], u: &Expr| -> Expr {
            let mut at = unravel(u, tuples_shape);
            at.extend(i[k..].iter().cloned());
            vu.at(at)
        };
        gathered_scatter(vars, x.dtype, &shape, k, tuples, self.reduction, matches, update_at)
            .map(Some)
    }
}

impl ScatterElements {
    /// `out[i] = updates[j]` for the last position `j` of the indices with `j = i` off the
    /// axis and `indices[j] = i[axis]` (negative entries counting from the end), else
    /// `data[i]`; with a reduction, `data[i] ⊕` the reduction of every matching update.
    /// `None` for non-numeric data, booleans, empty indices, or more than
    /// [`MAX_SCATTER_MATCHES`] comparisons.
    fn gather_form(
        &self,
        inputs: &[Option<ComputeInput<'_>>],
    ) -> Result<Option<ComputeDef>, OpError> {
        let (x, ind, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
        let r = x.shape.len();
        if ind.shape != upd.shape || ind.shape.len() != r || r == 0 {
            return Ok(None);
        }
        let axis = norm_axis(self.axis, r)?;
        let extent = ind.shape.to_vec();
        let along = extent[axis];
        let numel: usize = x.shape.iter().product();
        if extent.contains(&0) || !scatterable(x.dtype, along, numel) {
            return Ok(None);
        }
        let vars = placeholders(inputs);
        let (vi, vu) = (vars[1].clone(), vars[2].clone());
        let idx_ty = ind.dtype.to_ir();
        let shape = x.shape.to_vec();
        // The position of the indices at `i` off the axis and `t` on it, clamped into the
        // indices (a clamped position is never a match, see `matches`).
        let position = |i: &[Expr], t: &Expr| -> Vec<Expr> {
            (0..r)
                .map(|d| {
                    if d == axis {
                        t.clone()
                    } else if extent[d] >= shape[d] {
                        i[d].clone()
                    } else {
                        let last = Expr::int(extent[d] as i64 - 1);
                        Expr::select(i[d].lt(Expr::int(extent[d] as i64)), i[d].clone(), last)
                    }
                })
                .collect()
        };
        let matches = |i: &[Expr], t: &Expr| -> Expr {
            let mut all = wrapped(vi.at(position(i, t)), shape[axis], idx_ty)
                .eq(i[axis].cast(idx_ty));
            for d in (0..r).filter(|&d| d != axis && extent[d] < shape[d]) {
                all = all.and(i[d].lt(Expr::int(extent[d] as i64)));
            }
            all
        };
        let update_at = |i: &[Expr], t: &Expr| vu.at(position(i, t));
        gathered_scatter(vars, x.dtype, &shape, r, along, self.reduction, matches, update_at)
            .map(Some)
    }
}

/// Whether a scatter of `dtype` data comparing `candidates` index entries for each of
/// `compared` elements has a gather form: numeric, not storage-only, non-empty, at most
/// [`MAX_SCATTER_MATCHES`] comparisons.
fn scatterable(dtype: DType, candidates: usize, compared: usize) -> bool {
    let numeric = dtype.is_float()
        || matches!(
            dtype,
            DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
        );
    let fits = candidates
        .checked_mul(compared)
        .is_some_and(|n| n <= MAX_SCATTER_MATCHES);
    numeric && !dtype.is_storage_only() && fits && candidates > 0
}

/// Index entry `v` of a dimension of `dim` elements, a negative one counted from the end.
fn wrapped(v: Expr, dim: usize, idx_ty: DataType) -> Expr {
    let size = Expr::int_of(dim as i64, idx_ty);
    Expr::select(v.lt(Expr::zero(idx_ty)), v.clone() + size, v)
}

/// The gather form of a scatter into data `vars[0]` of `shape`: each output element `i`
/// compares the `candidates` updates `t` for which `matches(i, t)` (a function of `i[..key]`
/// only where the reduction is `none`) and takes the last matching `update_at(i, t)`, or
/// reduces them all into `data[i]`.
#[allow(clippy::too_many_arguments)]
fn gathered_scatter(
    vars: Vec<hidet_ir::expr::Var>,
    dtype: DType,
    shape: &[usize],
    key: usize,
    candidates: usize,
    reduction: Reduction,
    matches: impl Fn(&[Expr], &Expr) -> Expr,
    update_at: impl Fn(&[Expr], &Expr) -> Expr,
) -> Result<ComputeDef, OpError> {
    let vx = vars[0].clone();
    let dtype = dtype.to_ir();
    if reduction == Reduction::None {
        let (last, last_node) = reduce(
            "last",
            DataType::I32,
            dims(&shape[..key]),
            [candidates as i64],
            ReduceKind::Max,
            |i, t| Expr::select(matches(i, &t[0]), t[0].clone(), Expr::int(-1)),
        );
        let (out, out_node) = grid("out", dtype, dims(shape), |i| {
            let l = last.at(i[..key].to_vec());
            let safe = Expr::select(l.lt(Expr::int(0)), Expr::int(0), l.clone());
            Expr::select(l.ge(Expr::int(0)), update_at(i, &safe), vx.at(i.to_vec()))
        });
        return finish(vars, vec![(last, last_node), (out.clone(), out_node)], vec![out]);
    }
    let kind = match reduction {
        Reduction::Add => ReduceKind::Sum,
        Reduction::Mul => ReduceKind::Prod,
        Reduction::Max => ReduceKind::Max,
        Reduction::Min => ReduceKind::Min,
        Reduction::None => unreachable!("handled above"),
    };
    let (acc, acc_node) = reduce("acc", dtype, dims(shape), [candidates as i64], kind, |i, t| {
        Expr::select(matches(i, &t[0]), update_at(i, &t[0]), kind.identity(dtype))
    });
    let (out, out_node) = grid("out", dtype, dims(shape), |i| {
        let (d, a) = (vx.at(i.to_vec()), acc.at(i.to_vec()));
        match kind {
            ReduceKind::Sum => d + a,
            ReduceKind::Prod => d * a,
            ReduceKind::Max => d.max(a),
            ReduceKind::Min => d.min(a),
        }
    });
    finish(vars, vec![(acc, acc_node), (out.clone(), out_node)], vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    fn ints(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn scatter_elements_axis1_with_duplicates_and_reductions() {
        let mut rng = Rng::new(31);
        let x = rng.tensor(&[3, 5]);
        let u = rng.tensor(&[2, 3]);
        let ind = ints(&[2, 3], &[4, -1, 0, 2, -5, 1]);
        let (xs, us) = (x.as_slice::<f32>().unwrap(), u.as_slice::<f32>().unwrap());
        for red in [Reduction::None, Reduction::Add, Reduction::Max] {
            let y = ScatterElements {
                axis: -1,
                reduction: red,
            }
            .eval(&[Some(&x), Some(&ind), Some(&u)])
            .unwrap()
            .remove(0);
            let mut want: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
            let targets = [4usize, 4, 0, 5 + 2, 5, 5 + 1];
            for (t, &v) in targets.iter().zip(us) {
                let v = v as f64;
                want[*t] = match red {
                    Reduction::None => v,
                    Reduction::Add => want[*t] + v,
                    _ => want[*t].max(v),
                };
            }
            let got: Vec<f64> = y.to_f64_vec();
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "{red:?}: {got:?} vs {want:?}");
            }
        }
        let bad = ints(&[2, 3], &[5, 0, 0, 0, 0, 0]);
        assert!(ScatterElements {
            axis: 1,
            reduction: Reduction::None
        }
        .eval(&[Some(&x), Some(&bad), Some(&u)])
        .is_err());
        let short = rng.tensor(&[2, 2]);
        assert!(ScatterElements {
            axis: 1,
            reduction: Reduction::None
        }
        .eval(&[Some(&x), Some(&ind), Some(&short)])
        .is_err());
    }

    #[test]
    fn scatter_nd_slices_and_mul() {
        let mut rng = Rng::new(32);
        let x = rng.tensor(&[4, 3]);
        let u = rng.tensor(&[2, 3]);
        let ind = ints(&[2, 1], &[-1, 1]);
        let (xs, us) = (x.as_slice::<f32>().unwrap(), u.as_slice::<f32>().unwrap());
        let y = ScatterNd {
            reduction: Reduction::Mul,
        }
        .eval(&[Some(&x), Some(&ind), Some(&u)])
        .unwrap()
        .remove(0);
        let ys = y.as_slice::<f32>().unwrap();
        for c in 0..3 {
            assert_eq!(ys[c], xs[c]);
            assert_eq!(ys[3 + c], xs[3 + c] * us[3 + c]);
            assert_eq!(ys[6 + c], xs[6 + c]);
            assert_eq!(ys[9 + c], xs[9 + c] * us[c]);
        }
        // Element tuples.
        let ind = ints(&[2, 2], &[0, 2, 3, -3]);
        let u2 = Tensor::new(vec![2], vec![7.5f32, -1.25]).unwrap();
        let y = ScatterNd {
            reduction: Reduction::None,
        }
        .eval(&[Some(&x), Some(&ind), Some(&u2)])
        .unwrap()
        .remove(0);
        let ys = y.as_slice::<f32>().unwrap();
        assert_eq!((ys[2], ys[9]), (7.5, -1.25));
        assert!(ScatterNd {
            reduction: Reduction::None
        }
        .eval(&[Some(&x), Some(&ind), Some(&u)])
        .is_err());
        assert!(ScatterNd {
            reduction: Reduction::None
        }
        .eval(&[
            Some(&x),
            Some(&ints(&[1, 2], &[4, 0])),
            Some(&ints(&[1], &[1]))
        ])
        .is_err());
    }
}
