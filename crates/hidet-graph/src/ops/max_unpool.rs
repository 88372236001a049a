//! MaxUnpool: scatters pooled values `X [N, C, d...]` to the flat positions `I` (MaxPool's
//! `Indices`) of a zero tensor.
//!
//! The unpooled shape is `[N, C, (d_i - 1) * stride_i - pad_begin_i - pad_end_i + kernel_i]`
//! and the indices are flat offsets into it. With the optional `output_shape` input, the
//! unpooled tensor is placed at the origin of a zero tensor of that shape (as the ONNX
//! reference implementation does; `output_shape` must not be smaller).

use crate::kernels::movement::{numel, opt_offsets, take_or_fill};
use crate::operator::{arg, infer_arg, infer_opt, opt_arg, InferInput, OpError, Operator};
use crate::ops::common::int_list;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct MaxUnpool {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    /// `[begin..., end...]`.
    pads: Vec<usize>,
}

fn positive(name: &str, v: &[i64], allow_zero: bool) -> Result<Vec<usize>, OpError> {
    v.iter()
        .map(|&x| match usize::try_from(x) {
            Ok(u) if u > 0 || allow_zero => Ok(u),
            _ => Err(OpError::attr(name, format!("invalid value {x} in {v:?}"))),
        })
        .collect()
}

/// Registers MaxUnpool.
pub fn register(r: &mut Registry) {
    r.register("", "MaxUnpool", 9..=LATEST_OPSET, |c| {
        let kernel = positive(
            "kernel_shape",
            c.attrs
                .ints("kernel_shape")?
                .ok_or_else(|| OpError::attr("kernel_shape", "required attribute is missing"))?,
            false,
        )?;
        let n = kernel.len();
        let strides = match c.attrs.ints("strides")? {
            Some(s) => positive("strides", s, false)?,
            None => vec![1; n],
        };
        let pads = match c.attrs.ints("pads")? {
            Some(p) => positive("pads", p, true)?,
            None => vec![0; 2 * n],
        };
        if strides.len() != n || pads.len() != 2 * n {
            return Err(OpError::attr(
                "strides",
                format!(
                    "{} strides and {} pads for {n} kernel dimensions",
                    strides.len(),
                    pads.len()
                ),
            ));
        }
        Ok(Box::new(MaxUnpool {
            kernel,
            strides,
            pads,
        }))
    });
}

impl MaxUnpool {
    /// The unpooled size of spatial axis `i` of size `d` (0 for an empty axis).
    fn unpooled(&self, d: usize, i: usize) -> Result<usize, OpError> {
        if d == 0 {
            return Ok(0);
        }
        let n = self.kernel.len();
        ((d - 1) * self.strides[i] + self.kernel[i])
            .checked_sub(self.pads[i] + self.pads[n + i])
            .ok_or_else(|| OpError::Shape(format!("pads exceed the unpooled size of axis {i}")))
    }
}

impl Operator for MaxUnpool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let idx = infer_arg(inputs, 1)?;
        if idx.ty.dtype != crate::DType::I64 {
            return Err(OpError::DType {
                index: 1,
                dtype: idx.ty.dtype,
            });
        }
        let shape = match infer_opt(inputs, 2) {
            Some(o) => match o.value {
                Some(v) => Some(
                    int_list(v, "output_shape")?
                        .into_iter()
                        .map(|d| Dim::Fixed(d.max(0) as usize))
                        .collect(),
                ),
                None => x.ty.rank().map(|r| vec![Dim::Unknown; r]),
            },
            None => match &x.ty.shape {
                None => None,
                Some(d) => {
                    if d.len() != self.kernel.len() + 2 {
                        return Err(OpError::Shape(format!(
                            "X has rank {}, kernel_shape has {} dimensions",
                            d.len(),
                            self.kernel.len()
                        )));
                    }
                    let mut out = d[..2].to_vec();
                    for (i, dim) in d[2..].iter().enumerate() {
                        out.push(match dim {
                            Dim::Fixed(v) => Dim::Fixed(self.unpooled(*v, i)?),
                            _ => Dim::Unknown,
                        });
                    }
                    Some(out)
                }
            },
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let idx = arg(inputs, 1)?;
        let xs = x.shape();
        if xs.len() != self.kernel.len() + 2 || idx.shape() != xs {
            return Err(OpError::Shape(format!(
                "X {xs:?} and I {:?} must have equal shapes of rank {}",
                idx.shape(),
                self.kernel.len() + 2
            )));
        }
        let mut unpooled = xs[..2].to_vec();
        for (i, &d) in xs[2..].iter().enumerate() {
            unpooled.push(self.unpooled(d, i)?);
        }
        let total = numel(&unpooled)?;
        // For each unpooled position, the (last) X element scattered there.
        let mut source: Vec<Option<usize>> = vec![None; total];
        for (k, &i) in idx.to_i64_vec().iter().enumerate() {
            let slot = usize::try_from(i)
                .ok()
                .filter(|&i| i < total)
                .ok_or_else(|| {
                    OpError::Invalid(format!(
                        "index {i} is out of range for the unpooled shape {unpooled:?}"
                    ))
                })?;
            source[slot] = Some(k);
        }
        let out_shape = match opt_arg(inputs, 2) {
            None => unpooled.clone(),
            Some(o) => {
                let s: Vec<usize> = int_list(o, "output_shape")?
                    .into_iter()
                    .map(|d| usize::try_from(d).unwrap_or(0))
                    .collect();
                if s.len() != unpooled.len() || s.iter().zip(&unpooled).any(|(a, b)| a < b) {
                    return Err(OpError::Shape(format!(
                        "output_shape {s:?} is smaller than the unpooled shape {unpooled:?}"
                    )));
                }
                s
            }
        };
        let src = opt_offsets(&out_shape, |i| {
            let mut off = 0usize;
            for (k, &o) in i.iter().enumerate() {
                if o >= unpooled[k] {
                    return Ok(None);
                }
                off = off * unpooled[k] + o;
            }
            Ok(source[off])
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
    fn scatters_to_indices_and_pads_to_output_shape() {
        let op = build_op(
            "",
            "MaxUnpool",
            11,
            &[
                ("kernel_shape", Attribute::Ints(vec![2, 2])),
                ("strides", Attribute::Ints(vec![2, 2])),
            ],
            3,
            1,
        )
        .unwrap();
        let x = Tensor::new(vec![1, 1, 2, 2], vec![5f32, 6., 7., 8.]).unwrap();
        let i = Tensor::new(vec![1, 1, 2, 2], vec![5i64, 7, 13, 15]).unwrap();
        let y = op.eval(&[Some(&x), Some(&i)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 1, 4, 4]);
        let mut want = vec![0f32; 16];
        for (p, v) in [(5, 5.), (7, 6.), (13, 7.), (15, 8.)] {
            want[p] = v;
        }
        assert_eq!(y.as_slice::<f32>().unwrap(), want.as_slice());
        let shape = Tensor::new(vec![4], vec![1i64, 1, 5, 5]).unwrap();
        let y = op.eval(&[Some(&x), Some(&i), Some(&shape)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 1, 5, 5]);
        let got = y.as_slice::<f32>().unwrap();
        assert_eq!((got[6], got[8], got[16], got[18]), (5., 6., 7., 8.));
        assert_eq!(got.iter().filter(|&&v| v != 0.0).count(), 4);
        let bad = Tensor::new(vec![1, 1, 2, 2], vec![5i64, 7, 13, 16]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&bad)]).is_err());
    }
}
