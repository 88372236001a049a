//! AffineGrid: the sampling grid of an affine transform, for GridSample.
//!
//! `theta` is `[N, 2, 3]` (2-D) or `[N, 3, 4]` (3-D); `size` is `[N, C, H, W]` or
//! `[N, C, D, H, W]`. The output `[N, H, W, 2]` / `[N, D, H, W, 3]` holds
//! `theta[n] @ (x, y[, z], 1)` for the normalized base coordinates of each output position
//! (x along W, y along H, z along D): with `align_corners` the `k`-th of `L` positions is
//! `-1 + 2k / (L - 1)` (`-1` when `L = 1`), otherwise `-1 + (2k + 1) / L` (pixel centers).

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float, int_list};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct AffineGrid {
    align_corners: bool,
}

/// Registers AffineGrid.
pub fn register(r: &mut Registry) {
    r.register("", "AffineGrid", 20..=LATEST_OPSET, |c| {
        let align_corners = match c.attrs.int_or("align_corners", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attr(
                    "align_corners",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        Ok(Box::new(AffineGrid { align_corners }))
    });
}

/// The normalized coordinate of position `k` of `len`.
fn base(k: usize, len: usize, align_corners: bool) -> f64 {
    if align_corners {
        if len <= 1 {
            -1.0
        } else {
            -1.0 + 2.0 * k as f64 / (len - 1) as f64
        }
    } else {
        -1.0 + (2 * k + 1) as f64 / len as f64
    }
}

/// The spatial sizes of a `size` input (`[N, C, spatial...]`, 2 or 3 spatial dims).
fn spatial(size: &[i64]) -> Result<Vec<usize>, OpError> {
    if size.len() != 4 && size.len() != 5 {
        return Err(OpError::Shape(format!(
            "size must have 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]) elements, got {size:?}"
        )));
    }
    size.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| OpError::Invalid(format!("negative size in {size:?}")))
        })
        .collect()
}

impl Operator for AffineGrid {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let theta = infer_arg(inputs, 0)?;
        let size = infer_arg(inputs, 1)?;
        check_dtype(0, theta.ty.dtype, float)?;
        check_dtype(1, size.ty.dtype, |d| d.is_int())?;
        let shape = match size.value {
            Some(v) => {
                let s = spatial(&int_list(v, "size")?)?;
                let nd = s.len() - 2;
                let mut out: Vec<Dim> = vec![Dim::Fixed(s[0])];
                out.extend(s[2..].iter().map(|&d| Dim::Fixed(d)));
                out.push(Dim::Fixed(nd));
                Some(out)
            }
            None => match size.ty.shape.as_deref() {
                Some([Dim::Fixed(n @ (4 | 5))]) => {
                    let nd = n - 2;
                    let mut out = vec![Dim::Unknown; nd + 1];
                    out.push(Dim::Fixed(nd));
                    Some(out)
                }
                _ => None,
            },
        };
        Ok(vec![TensorType {
            dtype: theta.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let theta = arg(inputs, 0)?;
        check_dtype(0, theta.dtype(), float)?;
        let s = spatial(&int_list(arg(inputs, 1)?, "size")?)?;
        let (n, dims) = (s[0], &s[2..]);
        let nd = dims.len();
        if theta.shape() != [n, nd, nd + 1] {
            return Err(OpError::Shape(format!(
                "theta must be [{n}, {nd}, {}] for size {s:?}, got {:?}",
                nd + 1,
                theta.shape()
            )));
        }
        let t = theta.to_f64_vec();
        let points: usize = dims.iter().product();
        let mut out = Vec::with_capacity(n * points * nd);
        for b in 0..n {
            let m = &t[b * nd * (nd + 1)..(b + 1) * nd * (nd + 1)];
            for p in 0..points {
                // Base coordinates in (x, y[, z], 1) order: x is the last spatial axis.
                let mut rest = p;
                let mut coord = vec![1.0; nd + 1];
                for (axis, &len) in dims.iter().enumerate().rev() {
                    let k = rest % len;
                    rest /= len;
                    coord[nd - 1 - axis] = base(k, len, self.align_corners);
                }
                for row in m.chunks(nd + 1) {
                    out.push(row.iter().zip(&coord).map(|(a, c)| a * c).sum::<f64>());
                }
            }
        }
        let mut shape = vec![n];
        shape.extend_from_slice(dims);
        shape.push(nd);
        Ok(vec![float_tensor(theta.dtype(), shape, &out, 0)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn identity_theta_gives_base_grid() {
        for align in [0, 1] {
            let op = build_op(
                "",
                "AffineGrid",
                20,
                &[("align_corners", Attribute::Int(align))],
                2,
                1,
            )
            .unwrap();
            let theta = Tensor::new(vec![1, 2, 3], vec![1f32, 0., 0., 0., 1., 0.]).unwrap();
            let size = Tensor::new(vec![4], vec![1i64, 1, 2, 3]).unwrap();
            let g = op.eval(&[Some(&theta), Some(&size)]).unwrap().remove(0);
            assert_eq!(g.shape(), &[1, 2, 3, 2]);
            let want: Vec<f32> = if align == 1 {
                vec![-1., -1., 0., -1., 1., -1., -1., 1., 0., 1., 1., 1.]
            } else {
                let (x, y) = ([-2. / 3., 0., 2. / 3.], [-0.5, 0.5]);
                y.iter()
                    .flat_map(|&yv| x.iter().flat_map(move |&xv| [xv, yv]))
                    .collect()
            };
            let got = g.as_slice::<f32>().unwrap();
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-6, "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn translation_and_bad_theta() {
        let op = build_op("", "AffineGrid", 20, &[], 2, 1).unwrap();
        // 3-D: x' = x + 0.5, y' = 2y, z' = -z.
        let theta = Tensor::new(
            vec![1, 3, 4],
            vec![1f32, 0., 0., 0.5, 0., 2., 0., 0., 0., 0., -1., 0.],
        )
        .unwrap();
        let size = Tensor::new(vec![5], vec![1i64, 1, 1, 1, 2]).unwrap();
        let g = op.eval(&[Some(&theta), Some(&size)]).unwrap().remove(0);
        assert_eq!(g.shape(), &[1, 1, 1, 2, 3]);
        assert_eq!(g.as_slice::<f32>().unwrap(), &[0.0, 0.0, -0.0, 1.0, 0.0, -0.0]);
        let bad = Tensor::new(vec![1, 2, 3], vec![0f32; 6]).unwrap();
        assert!(op.eval(&[Some(&bad), Some(&size)]).is_err());
    }
}
