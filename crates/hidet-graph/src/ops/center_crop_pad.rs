//! CenterCropPad: crops or zero-pads each listed axis to a target size, centered.
//!
//! For an axis of size `d` and target `s`: if `s < d` the output keeps `[(d - s) / 2, ... + s)`
//! (floor), if `s > d` the input lands at `[(s - d) / 2, ... + d)` of a zero output.

use crate::kernels::movement::{opt_offsets, take_or_fill};
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::{int_list, norm_axis};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct CenterCropPad {
    /// The axes the `shape` input lists sizes for (all axes when absent).
    axes: Option<Vec<i64>>,
}

/// Registers CenterCropPad.
pub fn register(r: &mut Registry) {
    r.register("", "CenterCropPad", 18..=LATEST_OPSET, |c| {
        Ok(Box::new(CenterCropPad {
            axes: c.attrs.ints("axes")?.cloned(),
        }))
    });
}

impl CenterCropPad {
    /// The normalized axes for a tensor of `rank` with `n` target sizes.
    fn axes(&self, rank: usize, n: usize) -> Result<Vec<usize>, OpError> {
        let axes: Vec<usize> = match &self.axes {
            None => (0..rank).collect(),
            Some(a) => a
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<Result<_, _>>()?,
        };
        if axes.len() != n {
            return Err(OpError::Shape(format!(
                "shape has {n} sizes for {} axes",
                axes.len()
            )));
        }
        let mut seen = vec![false; rank];
        for &a in &axes {
            if std::mem::replace(&mut seen[a], true) {
                return Err(OpError::attr("axes", format!("axis {a} is repeated")));
            }
        }
        Ok(axes)
    }
}

fn sizes(t: &Tensor) -> Result<Vec<usize>, OpError> {
    int_list(t, "shape")?
        .into_iter()
        .map(|s| {
            usize::try_from(s).map_err(|_| OpError::Invalid(format!("negative target size {s}")))
        })
        .collect()
}

impl Operator for CenterCropPad {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let s = infer_arg(inputs, 1)?;
        if !s.ty.dtype.is_int() {
            return Err(OpError::DType {
                index: 1,
                dtype: s.ty.dtype,
            });
        }
        let Some(dims) = &x.ty.shape else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let mut out = dims.clone();
        match s.value {
            Some(v) => {
                let sizes = sizes(v)?;
                for (a, s) in self.axes(dims.len(), sizes.len())?.into_iter().zip(sizes) {
                    out[a] = Dim::Fixed(s);
                }
            }
            None => match &self.axes {
                Some(_) => {
                    let n = self.axes.as_ref().map_or(0, Vec::len);
                    for a in self.axes(dims.len(), n)? {
                        out[a] = Dim::Unknown;
                    }
                }
                None => out = vec![Dim::Unknown; dims.len()],
            },
        }
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(out),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let sizes = sizes(arg(inputs, 1)?)?;
        let in_shape = x.shape();
        let mut out_shape = in_shape.to_vec();
        for (a, s) in self.axes(x.rank(), sizes.len())?.into_iter().zip(sizes) {
            out_shape[a] = s;
        }
        // Per axis: input index = output index + shift (shift < 0 when padding).
        let shift: Vec<i64> = in_shape
            .iter()
            .zip(&out_shape)
            .map(|(&d, &s)| {
                if d >= s {
                    ((d - s) / 2) as i64
                } else {
                    -(((s - d) / 2) as i64)
                }
            })
            .collect();
        let src = opt_offsets(&out_shape, |i| {
            let mut off = 0usize;
            for (k, &o) in i.iter().enumerate() {
                let j = o as i64 + shift[k];
                if j < 0 || j >= in_shape[k] as i64 {
                    return Ok(None);
                }
                off = off * in_shape[k] + j as usize;
            }
            Ok(Some(off))
        })?;
        Ok(vec![take_or_fill(x, None, out_shape, &src)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn crops_and_pads_centered() {
        let x = Tensor::new(vec![3, 4], (1..=12).map(|v| v as f32).collect()).unwrap();
        let op = build_op("", "CenterCropPad", 18, &[], 2, 1).unwrap();
        // Rows 3 -> 1 (keep row 1), columns 4 -> 7 (offset 1, one more zero at the end).
        let s = Tensor::new(vec![2], vec![1i64, 7]).unwrap();
        let y = op.eval(&[Some(&x), Some(&s)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 7]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[0.0, 5.0, 6.0, 7.0, 8.0, 0.0, 0.0]
        );
        let op = build_op(
            "",
            "CenterCropPad",
            18,
            &[("axes", Attribute::Ints(vec![-1]))],
            2,
            1,
        )
        .unwrap();
        let s = Tensor::new(vec![1], vec![1i64]).unwrap();
        let y = op.eval(&[Some(&x), Some(&s)]).unwrap().remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[2.0, 6.0, 10.0]);
        let bad = Tensor::new(vec![3], vec![1i64, 1, 1]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&bad)]).is_err());
    }
}
