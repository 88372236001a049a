//! The training optimizers of `ai.onnx.preview.training` (opset 1): Adagrad, Momentum, Adam.
//!
//! Inputs are the learning rate `R` (float scalar), the update count `T` (int64 scalar), then
//! `n` tensors of each kind in blocks: `X...` (weights), `G...` (gradients) and the optimizer
//! states (`H...` for Adagrad, `V...` for Momentum, `V..., H...` for Adam). Outputs are the
//! new weights followed by the new states, in the same block order. With `g = λ·x + grad`
//! (`λ = norm_coefficient`), per element:
//! - Adagrad: `r' = r / (1 + t·decay_factor)`, `h' = h + g²`, `x' = x - r'·g / (√h' + ε)`.
//! - Momentum: `v' = α·v + β'·g` with `β' = β` if `t > 0` else 1; standard `x' = x - r·v'`,
//!   nesterov `x' = x - r·(g + α·v')`.
//! - Adam: `v' = α·v + (1-α)·g`, `h' = β·h + (1-β)·g²`, `r' = r·√(1-βᵗ)/(1-αᵗ)` if `t > 0`
//!   else `r`, `x' = (1 - norm_coefficient_post)·(x - r'·v'/(√h' + ε))`.
//!
//! Attribute defaults are the schema's (Adagrad and Adam `epsilon` 1e-6). Computed in f64,
//! rounded to each tensor's float type.

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::Registry;
use crate::shape::TensorType;
use crate::tensor::Tensor;

const DOMAIN: &str = "ai.onnx.preview.training";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    Adagrad {
        decay_factor: f64,
        epsilon: f64,
        norm_coefficient: f64,
    },
    Momentum {
        alpha: f64,
        beta: f64,
        nesterov: bool,
        norm_coefficient: f64,
    },
    Adam {
        alpha: f64,
        beta: f64,
        epsilon: f64,
        norm_coefficient: f64,
        norm_coefficient_post: f64,
    },
}

impl Rule {
    /// Tensors per optimized weight: X, G and the states.
    fn per_weight(self) -> usize {
        match self {
            Rule::Adagrad { .. } | Rule::Momentum { .. } => 3,
            Rule::Adam { .. } => 4,
        }
    }
}

#[derive(Debug)]
struct Optimizer {
    rule: Rule,
    /// Number of optimized weights.
    n: usize,
}

fn req_float(c: &OpContext<'_>, name: &str) -> Result<f64, OpError> {
    match c.attrs.get(name) {
        None => Err(OpError::attr(name, "required attribute is missing")),
        Some(_) => Ok(c.attrs.float_or(name, 0.0)? as f64),
    }
}

fn build(c: &OpContext<'_>, rule: Rule) -> Result<Box<dyn Operator>, OpError> {
    let k = rule.per_weight();
    let inputs = c.num_inputs.saturating_sub(2);
    if inputs == 0 || !inputs.is_multiple_of(k) || c.num_outputs != inputs / k * (k - 1) {
        return Err(OpError::Invalid(format!(
            "{}: {} inputs and {} outputs do not form R, T and {k} tensors per weight \
             ({} outputs per weight)",
            c.op_type,
            c.num_inputs,
            c.num_outputs,
            k - 1
        )));
    }
    Ok(Box::new(Optimizer {
        rule,
        n: inputs / k,
    }))
}

/// Registers Adagrad, Momentum and Adam.
pub fn register(r: &mut Registry) {
    r.register(DOMAIN, "Adagrad", 1..=1, |c| {
        let f = |n: &str, d: f32| -> Result<f64, OpError> { Ok(c.attrs.float_or(n, d)? as f64) };
        build(
            c,
            Rule::Adagrad {
                decay_factor: f("decay_factor", 0.0)?,
                epsilon: f("epsilon", 1e-6)?,
                norm_coefficient: f("norm_coefficient", 0.0)?,
            },
        )
    });
    r.register(DOMAIN, "Momentum", 1..=1, |c| {
        let nesterov = match c.attrs.string("mode")?.map(String::as_str) {
            Some("standard") => false,
            Some("nesterov") => true,
            Some(other) => {
                return Err(OpError::attr(
                    "mode",
                    format!("must be standard or nesterov, got `{other}`"),
                ))
            }
            None => return Err(OpError::attr("mode", "required attribute is missing")),
        };
        build(
            c,
            Rule::Momentum {
                alpha: req_float(c, "alpha")?,
                beta: req_float(c, "beta")?,
                nesterov,
                norm_coefficient: req_float(c, "norm_coefficient")?,
            },
        )
    });
    r.register(DOMAIN, "Adam", 1..=1, |c| {
        let f = |n: &str, d: f32| -> Result<f64, OpError> { Ok(c.attrs.float_or(n, d)? as f64) };
        build(
            c,
            Rule::Adam {
                alpha: f("alpha", 0.9)?,
                beta: f("beta", 0.999)?,
                epsilon: f("epsilon", 1e-6)?,
                norm_coefficient: f("norm_coefficient", 0.0)?,
                norm_coefficient_post: f("norm_coefficient_post", 0.0)?,
            },
        )
    });
}

fn scalar(t: &Tensor, index: usize) -> Result<f64, OpError> {
    match t.to_f64_vec().as_slice() {
        [v] => Ok(*v),
        _ => Err(OpError::Shape(format!(
            "input #{index} must be a scalar, got shape {:?}",
            t.shape()
        ))),
    }
}

impl Operator for Optimizer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        check_dtype(0, infer_arg(inputs, 0)?.ty.dtype, float)?;
        check_dtype(1, infer_arg(inputs, 1)?.ty.dtype, |d| d.is_int())?;
        let k = self.rule.per_weight();
        let mut out = Vec::with_capacity(self.n * (k - 1));
        // Outputs: X..., then each state block; they have the types of the matching inputs.
        for block in (0..k).filter(|&b| b != 1) {
            for i in 0..self.n {
                let slot = 2 + block * self.n + i;
                let t = infer_arg(inputs, slot)?;
                check_dtype(slot, t.ty.dtype, float)?;
                out.push(t.ty.clone());
            }
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let r = scalar(arg(inputs, 0)?, 0)?;
        let t = arg(inputs, 1)?;
        check_dtype(1, t.dtype(), |d| d.is_int())?;
        let t = scalar(t, 1)?;
        let k = self.rule.per_weight();
        let n = self.n;
        let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); k - 1];
        for i in 0..n {
            let get = |block: usize| -> Result<&Tensor, OpError> {
                let slot = 2 + block * n + i;
                let v = arg(inputs, slot)?;
                check_dtype(slot, v.dtype(), float)?;
                Ok(v)
            };
            let ts: Vec<&Tensor> = (0..k).map(get).collect::<Result<_, _>>()?;
            if let Some(bad) = ts.iter().find(|v| v.shape() != ts[0].shape()) {
                return Err(OpError::Shape(format!(
                    "weight #{i}: shapes {:?} and {:?} differ",
                    ts[0].shape(),
                    bad.shape()
                )));
            }
            let vals: Vec<Vec<f64>> = ts.iter().map(|v| v.to_f64_vec()).collect();
            let (x, g) = (&vals[0], &vals[1]);
            let mut new: Vec<Vec<f64>> = vec![Vec::with_capacity(x.len()); k - 1];
            for e in 0..x.len() {
                match self.rule {
                    Rule::Adagrad {
                        decay_factor,
                        epsilon,
                        norm_coefficient,
                    } => {
                        let gr = norm_coefficient * x[e] + g[e];
                        let h = vals[2][e] + gr * gr;
                        let rr = r / (1.0 + t * decay_factor);
                        new[0].push(x[e] - rr * gr / (h.sqrt() + epsilon));
                        new[1].push(h);
                    }
                    Rule::Momentum {
                        alpha,
                        beta,
                        nesterov,
                        norm_coefficient,
                    } => {
                        let gr = norm_coefficient * x[e] + g[e];
                        let b = if t > 0.0 { beta } else { 1.0 };
                        let v = alpha * vals[2][e] + b * gr;
                        new[0].push(if nesterov {
                            x[e] - r * (gr + alpha * v)
                        } else {
                            x[e] - r * v
                        });
                        new[1].push(v);
                    }
                    Rule::Adam {
                        alpha,
                        beta,
                        epsilon,
                        norm_coefficient,
                        norm_coefficient_post,
                    } => {
                        let gr = norm_coefficient * x[e] + g[e];
                        let v = alpha * vals[2][e] + (1.0 - alpha) * gr;
                        let h = beta * vals[3][e] + (1.0 - beta) * gr * gr;
                        let rr = if t > 0.0 {
                            r * (1.0 - beta.powf(t)).sqrt() / (1.0 - alpha.powf(t))
                        } else {
                            r
                        };
                        let xn = x[e] - rr * (v / (h.sqrt() + epsilon));
                        new[0].push((1.0 - norm_coefficient_post) * xn);
                        new[1].push(v);
                        new[2].push(h);
                    }
                }
            }
            for (j, v) in new.into_iter().enumerate() {
                // Output j has the type of input block 0 (X) or of state block j + 1.
                let like = ts[if j == 0 { 0 } else { j + 1 }];
                outs[j].push(float_tensor(like.dtype(), like.shape().to_vec(), &v, 2)?);
            }
        }
        Ok(outs.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::DOMAIN;
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(vec![v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn adagrad_two_weights() {
        let op = build_op(
            DOMAIN,
            "Adagrad",
            1,
            &[
                ("decay_factor", Attribute::Float(0.1)),
                ("epsilon", Attribute::Float(1e-6)),
                ("norm_coefficient", Attribute::Float(0.01)),
            ],
            8,
            4,
        )
        .unwrap();
        let (r, step) = (Tensor::scalar(0.5f32), Tensor::scalar(3i64));
        let (x1, x2) = (t(&[1.0, -2.0]), t(&[0.5]));
        let (g1, g2) = (t(&[0.3, 0.7]), t(&[-1.5]));
        let (h1, h2) = (t(&[0.2, 0.4]), t(&[1.1]));
        let ins = [&r, &step, &x1, &x2, &g1, &g2, &h1, &h2].map(Some);
        let out = op.eval(&ins).unwrap();
        assert_eq!(out.len(), 4);
        let rr = 0.5 / (1.0 + 3.0 * 0.1f64);
        for (x, g, h, xo, ho) in [(1.0f64, 0.3f64, 0.2f64, 0, 0), (-2.0, 0.7, 0.4, 0, 1)] {
            let gr = 0.01 * x + g;
            let hn = h + gr * gr;
            let xn = x - rr * gr / (hn.sqrt() + 1e-6);
            assert!((out[xo].to_f64_vec()[ho] - xn).abs() < 1e-6);
            assert!((out[2].to_f64_vec()[ho] - hn).abs() < 1e-6);
        }
        assert_eq!(out[1].shape(), &[1]);
        assert_eq!(out[3].shape(), &[1]);
        // 7 inputs cannot form the blocks.
        assert!(build_op(DOMAIN, "Adagrad", 1, &[], 7, 4).is_err());
    }

    #[test]
    fn momentum_first_step_and_adam() {
        let op = build_op(
            DOMAIN,
            "Momentum",
            1,
            &[
                ("alpha", Attribute::Float(0.9)),
                ("beta", Attribute::Float(0.1)),
                ("mode", Attribute::String("nesterov".into())),
                ("norm_coefficient", Attribute::Float(0.0)),
            ],
            5,
            2,
        )
        .unwrap();
        let (r, t0) = (Tensor::scalar(0.1f32), Tensor::scalar(0i64));
        let (x, g, v) = (t(&[1.0]), t(&[2.0]), t(&[0.5]));
        let out = op.eval(&[&r, &t0, &x, &g, &v].map(Some)).unwrap();
        // t = 0: beta' = 1, v' = 0.45 + 2 = 2.45, x' = 1 - 0.1 * (2 + 0.9 * 2.45).
        assert!((out[1].to_f64_vec()[0] - 2.45).abs() < 1e-6);
        assert!((out[0].to_f64_vec()[0] - (1.0 - 0.1 * (2.0 + 0.9 * 2.45))).abs() < 1e-6);
        let op = build_op(DOMAIN, "Adam", 1, &[], 6, 3).unwrap();
        let t2 = Tensor::scalar(2i64);
        let h = t(&[0.25]);
        let out = op.eval(&[&r, &t2, &x, &g, &v, &h].map(Some)).unwrap();
        let vn: f64 = 0.9 * 0.5 + 0.1 * 2.0;
        let hn: f64 = 0.999 * 0.25 + 0.001 * 4.0;
        let rr = 0.1 * (1.0 - 0.999f64.powi(2)).sqrt() / (1.0 - 0.9f64.powi(2));
        let xn = 1.0 - rr * vn / (hn.sqrt() + 1e-6);
        for (o, want) in out.iter().zip([xn, vn, hn]) {
            assert!((o.to_f64_vec()[0] - want).abs() < 1e-6, "{o:?} vs {want}");
        }
        assert!(build_op(DOMAIN, "Momentum", 1, &[], 5, 2).is_err(), "alpha is required");
    }
}
