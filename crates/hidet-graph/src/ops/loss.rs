//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! Both take scores `x` of shape `[N, C, d1, ..., dk]` (k >= 0), integer `target` of shape
//! `[N, d1, ..., dk]` with values in `[0, C)` (or equal to `ignore_index`), and optional
//! per-class `weight` of shape `[C]`. The per-element loss is
//! `-w[target] * logp[n, target, d...]`, where `logp` is `x` itself (NLL) or
//! `log_softmax(x, axis 1)` (SCE), and `w` is 1 without weights; elements whose target is
//! `ignore_index` get loss 0 and weight 0. `reduction` is `none` (the element losses, shape of
//! `target`), `sum`, or `mean` (sum of losses / sum of the weights of the non-ignored
//! elements). SCE's optional second output is `logp`. Values are computed in f64 and rounded
//! to `x`'s float type.

use crate::dtype::DType;
use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, infer_opt, opt_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

#[derive(Debug)]
struct Loss {
    /// SoftmaxCrossEntropyLoss (log-softmax first) rather than NegativeLogLikelihoodLoss.
    softmax: bool,
    reduction: Reduction,
    ignore_index: Option<i64>,
    /// SCE declares the `log_prob` output.
    log_prob: bool,
}

/// Registers NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
pub fn register(r: &mut Registry) {
    for (name, softmax) in [
        ("NegativeLogLikelihoodLoss", false),
        ("SoftmaxCrossEntropyLoss", true),
    ] {
        r.register("", name, 12..=LATEST_OPSET, move |c| {
            let reduction = match c.attrs.string_or("reduction", "mean")?.as_str() {
                "none" => Reduction::None,
                "sum" => Reduction::Sum,
                "mean" => Reduction::Mean,
                other => {
                    return Err(OpError::attr(
                        "reduction",
                        format!("must be none, sum or mean, got `{other}`"),
                    ))
                }
            };
            if !softmax && c.num_outputs > 1 {
                return Err(OpError::Invalid(format!(
                    "NegativeLogLikelihoodLoss has one output, the node declares {}",
                    c.num_outputs
                )));
            }
            Ok(Box::new(Loss {
                softmax,
                reduction,
                ignore_index: c.attrs.int("ignore_index")?.copied(),
                log_prob: softmax && c.num_outputs > 1,
            }))
        });
    }
}

fn target_dtype(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

impl Operator for Loss {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let t = infer_arg(inputs, 1)?;
        check_dtype(0, x.ty.dtype, float)?;
        check_dtype(1, t.ty.dtype, target_dtype)?;
        if let Some(w) = infer_opt(inputs, 2) {
            if w.ty.dtype != x.ty.dtype {
                return Err(OpError::Invalid(format!(
                    "weight has dtype {}, scores have {}",
                    w.ty.dtype, x.ty.dtype
                )));
            }
        }
        if let Some(r) = x.ty.rank() {
            if r < 2 {
                return Err(OpError::Shape(format!(
                    "scores must have rank >= 2 ([N, C, ...]), got rank {r}"
                )));
            }
        }
        let loss_shape = match self.reduction {
            Reduction::Sum | Reduction::Mean => Some(vec![]),
            Reduction::None => match (&t.ty.shape, &x.ty.shape) {
                (Some(s), _) => Some(s.clone()),
                (None, Some(xs)) => {
                    let mut s: Vec<Dim> = xs.clone();
                    s.remove(1);
                    Some(s)
                }
                (None, None) => None,
            },
        };
        let mut out = vec![TensorType {
            dtype: x.ty.dtype,
            shape: loss_shape,
        }];
        if self.log_prob {
            out.push(x.ty.clone());
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let target = arg(inputs, 1)?;
        let weight = opt_arg(inputs, 2);
        check_dtype(0, x.dtype(), float)?;
        check_dtype(1, target.dtype(), target_dtype)?;
        let shape = x.shape();
        if shape.len() < 2 {
            return Err(OpError::Shape(format!(
                "scores must have rank >= 2 ([N, C, ...]), got {shape:?}"
            )));
        }
        let (n, c) = (shape[0], shape[1]);
        let d: usize = shape[2..].iter().product();
        let mut want_t = vec![n];
        want_t.extend_from_slice(&shape[2..]);
        if target.shape() != want_t.as_slice() {
            return Err(OpError::Shape(format!(
                "target has shape {:?}, expected {want_t:?} for scores {shape:?}",
                target.shape()
            )));
        }
        let w = match weight {
            None => None,
            Some(w) => {
                if w.dtype() != x.dtype() || w.shape() != [c] {
                    return Err(OpError::Invalid(format!(
                        "weight must be {}[{c}], got {}{:?}",
                        x.dtype(),
                        w.dtype(),
                        w.shape()
                    )));
                }
                Some(w.to_f64_vec())
            }
        };
        let mut logp = x.to_f64_vec();
        if self.softmax {
            log_softmax_axis1(&mut logp, n, c, d);
        }
        let tv = target.to_i64_vec();
        let mut losses = Vec::with_capacity(tv.len());
        let mut weight_sum = 0.0;
        for (i, &t) in tv.iter().enumerate() {
            if Some(t) == self.ignore_index {
                losses.push(0.0);
                continue;
            }
            let class = usize::try_from(t)
                .ok()
                .filter(|&k| k < c)
                .ok_or_else(|| {
                    OpError::Invalid(format!(
                        "target value {t} at element {i} is outside [0, {c}) and is not ignore_index"
                    ))
                })?;
            let (batch, pos) = (i / d.max(1), i % d.max(1));
            let wk = w.as_ref().map_or(1.0, |w| w[class]);
            weight_sum += wk;
            losses.push(-wk * logp[(batch * c + class) * d + pos]);
        }
        let dtype = x.dtype();
        let loss = match self.reduction {
            Reduction::None => float_tensor(dtype, target.shape().to_vec(), &losses, 0)?,
            Reduction::Sum => float_tensor(dtype, vec![], &[losses.iter().sum()], 0)?,
            Reduction::Mean => {
                float_tensor(dtype, vec![], &[losses.iter().sum::<f64>() / weight_sum], 0)?
            }
        };
        let mut out = vec![loss];
        if self.log_prob {
            out.push(float_tensor(dtype, shape.to_vec(), &logp, 0)?);
        }
        Ok(out)
    }
}

/// In place: each `[n, :, p]` lane of an `[N, C, D]` buffer becomes its log-softmax.
fn log_softmax_axis1(v: &mut [f64], n: usize, c: usize, d: usize) {
    for b in 0..n {
        for p in 0..d {
            let at = |k: usize| (b * c + k) * d + p;
            let max = (0..c).map(|k| v[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..c).map(|k| (v[at(k)] - max).exp()).sum();
            let log_sum = sum.ln();
            for k in 0..c {
                v[at(k)] = v[at(k)] - max - log_sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::{Attribute, Attributes};
    use crate::operator::OpContext;

    fn build(op: &str, attrs: Attributes, outputs: usize) -> Result<Box<dyn Operator>, OpError> {
        let ctx = OpContext {
            domain: "",
            op_type: op,
            opset: 13,
            attrs: &attrs,
            num_inputs: 3,
            num_outputs: outputs,
        };
        crate::registry::Registry::global()
            .lookup("", op, 13)
            .expect("registered")
            .build(&ctx)
    }

    /// Deterministic non-zero pseudo-random values in (-2, 2).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 33) as f64 / (1u64 << 31) as f64 * 4.0 - 2.0) as f32
            })
            .collect()
    }

    #[test]
    fn nll_mean_weighted_with_ignore_index_matches_loops() {
        let (n, c, d) = (3usize, 5usize, 7usize);
        let x = data(n * c * d, 1);
        let t: Vec<i64> = (0..n * d).map(|i| ((i * 7 + 3) % c) as i64).collect();
        let w = data(c, 2).iter().map(|v| v.abs() + 0.1).collect::<Vec<f32>>();
        let mut attrs = Attributes::new();
        attrs.insert("ignore_index", Attribute::Int(2));
        let op = build("NegativeLogLikelihoodLoss", attrs, 1).unwrap();
        let xt = Tensor::new(vec![n, c, d], x.clone()).unwrap();
        let tt = Tensor::new(vec![n, d], t.clone()).unwrap();
        let wt = Tensor::new(vec![c], w.clone()).unwrap();
        let y = op.eval(&[Some(&xt), Some(&tt), Some(&wt)]).unwrap();
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for b in 0..n {
            for p in 0..d {
                let k = t[b * d + p] as usize;
                if k == 2 {
                    continue;
                }
                num -= w[k] as f64 * x[(b * c + k) * d + p] as f64;
                den += w[k] as f64;
            }
        }
        let got = y[0].as_slice::<f32>().unwrap()[0] as f64;
        assert!(y[0].shape().is_empty());
        assert!((got - num / den).abs() < 1e-5, "{got} vs {}", num / den);
    }

    #[test]
    fn sce_none_gives_elementwise_losses_and_log_prob() {
        let (n, c) = (4usize, 3usize);
        let x = data(n * c, 3);
        let t: Vec<i32> = vec![0, 2, 1, 2];
        let mut attrs = Attributes::new();
        attrs.insert("reduction", Attribute::String("none".into()));
        let op = build("SoftmaxCrossEntropyLoss", attrs, 2).unwrap();
        let xt = Tensor::new(vec![n, c], x.clone()).unwrap();
        let tt = Tensor::new(vec![n], t.clone()).unwrap();
        let y = op.eval(&[Some(&xt), Some(&tt)]).unwrap();
        assert_eq!(y[0].shape(), &[n]);
        assert_eq!(y[1].shape(), &[n, c]);
        for b in 0..n {
            let row: Vec<f64> = (0..c).map(|k| x[b * c + k] as f64).collect();
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            let want = lse - row[t[b] as usize];
            let got = y[0].as_slice::<f32>().unwrap()[b] as f64;
            assert!((got - want).abs() < 1e-5);
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut attrs = Attributes::new();
        attrs.insert("reduction", Attribute::String("avg".into()));
        assert!(matches!(
            build("NegativeLogLikelihoodLoss", attrs, 1),
            Err(OpError::Attribute { .. })
        ));
        let op = build("NegativeLogLikelihoodLoss", Attributes::new(), 1).unwrap();
        let x = Tensor::new(vec![2, 3], data(6, 4)).unwrap();
        let out_of_range = Tensor::new(vec![2], vec![0i64, 3]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&out_of_range)]),
            Err(OpError::Invalid(_))
        ));
        let wrong_shape = Tensor::new(vec![3], vec![0i64, 1, 2]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&wrong_shape)]),
            Err(OpError::Shape(_))
        ));
        let x1 = Tensor::new(vec![3], data(3, 5)).unwrap();
        assert!(op.eval(&[Some(&x1), Some(&wrong_shape)]).is_err());
    }
}
