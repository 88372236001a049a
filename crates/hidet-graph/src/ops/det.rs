//! Det: determinants of square matrices `[*, M, M]` → `[*]`, by LU decomposition with
//! partial pivoting in f64.

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct Det;

/// Registers Det.
pub fn register(r: &mut Registry) {
    r.register("", "Det", 11..=LATEST_OPSET, |_| Ok(Box::new(Det)));
}

/// The determinant of the row-major `m × m` matrix `a` (consumed as scratch space).
pub fn determinant(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
            .unwrap_or(col);
        if a[pivot * m + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..m {
                a.swap(pivot * m + k, col * m + k);
            }
            det = -det;
        }
        let p = a[col * m + col];
        det *= p;
        for row in col + 1..m {
            let f = a[row * m + col] / p;
            for k in col..m {
                a[row * m + k] -= f * a[col * m + k];
            }
        }
    }
    det
}

impl Operator for Det {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let shape = match &x.ty.shape {
            None => None,
            Some(d) if d.len() < 2 => {
                return Err(OpError::Shape(format!(
                    "Det needs rank >= 2, got rank {}",
                    d.len()
                )))
            }
            Some(d) => {
                if let (Dim::Fixed(a), Dim::Fixed(b)) = (&d[d.len() - 2], &d[d.len() - 1]) {
                    if a != b {
                        return Err(OpError::Shape(format!(
                            "Det needs square matrices, got {a}x{b}"
                        )));
                    }
                }
                Some(d[..d.len() - 2].to_vec())
            }
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        let s = x.shape();
        if s.len() < 2 || s[s.len() - 1] != s[s.len() - 2] {
            return Err(OpError::Shape(format!(
                "Det needs [*, M, M], got {s:?}"
            )));
        }
        let m = s[s.len() - 1];
        let v = x.to_f64_vec();
        let dets: Vec<f64> = if m == 0 {
            vec![1.0; s[..s.len() - 2].iter().product()]
        } else {
            v.chunks(m * m)
                .map(|c| determinant(&mut c.to_vec(), m))
                .collect()
        };
        Ok(vec![float_tensor(x.dtype(), s[..s.len() - 2].to_vec(), &dets, 0)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    /// Laplace expansion along the first row (exact definition, for small matrices).
    fn laplace(a: &[f64], m: usize) -> f64 {
        if m == 1 {
            return a[0];
        }
        (0..m)
            .map(|j| {
                let minor: Vec<f64> = (1..m)
                    .flat_map(|r| (0..m).filter(move |&c| c != j).map(move |c| a[r * m + c]))
                    .collect();
                let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                sign * a[j] * laplace(&minor, m - 1)
            })
            .sum()
    }

    #[test]
    fn matches_laplace_expansion() {
        let mut rng = Rng::new(7);
        let x = rng.tensor(&[2, 3, 5, 5]);
        let y = Det.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 3]);
        let v = x.to_f64_vec();
        for (k, got) in y.to_f64_vec().into_iter().enumerate() {
            let want = laplace(&v[k * 25..(k + 1) * 25], 5);
            assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{got} vs {want}");
        }
        let singular = Tensor::new(vec![2, 2], vec![1f32, 2., 2., 4.]).unwrap();
        assert_eq!(Det.eval(&[Some(&singular)]).unwrap()[0].to_f64_vec(), vec![0.0]);
        let rect = Tensor::new(vec![2, 3], vec![1f32; 6]).unwrap();
        assert!(Det.eval(&[Some(&rect)]).is_err());
    }
}
