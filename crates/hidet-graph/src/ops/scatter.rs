//! Indexed writes: ScatterElements (and its deprecated alias Scatter) and ScatterND, with the
//! `reduction` attribute (`add`/`mul` from opset 16, `max`/`min` from opset 18). Updates are
//! applied in row-major order of the indices, so with `none` the last duplicate wins.

use crate::kernels::movement::{
    element_offsets, index_values, is_index_dtype, offsets, scatter, strides, wrap_index,
    Reduction,
};
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::norm_axis;
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
