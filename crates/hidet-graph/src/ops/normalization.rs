//! Normalization operators: BatchNormalization (inference and training statistics),
//! LayerNormalization, InstanceNormalization, GroupNormalization,
//! MeanVarianceNormalization and LRN.
//!
//! Inputs are read as f64, statistics use the two-pass population variance, and results are
//! rounded once to the output dtype.

use crate::dispatch_float;
use crate::dtype::DType;
use crate::kernels::axis::{axes_mask, Lanes, Reduction};
use crate::kernels::broadcast::{broadcast_offsets, broadcast_shapes};
use crate::operator::{arg, infer_arg, opt_arg, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float, infer_same, norm_axis};
use crate::ops::compute_util::{
    broadcast, broadcast_read, clamp, dims, finish, input, linearize, math_dtype, opt_input,
    placeholders, unravel, AxisReduction,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use hidet_ir::compute::{grid, reduce, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::intrinsic::MathFunc;

/// The elements of float input `index` as f64.
fn floats(t: &Tensor, index: usize) -> Result<Vec<f64>, OpError> {
    check_dtype(index, t.dtype(), float)?;
    Ok(t.to_f64_vec())
}

/// A float tensor of `dtype` from f64 values (rounded once).
fn tensor_of(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Result<Tensor, OpError> {
    dispatch_float!(dtype, T => Ok(Tensor::new(shape, v.into_iter().map(T::from_f64).collect::<Vec<T>>())?),
        else Err(OpError::DType { index: 0, dtype }))
}

/// Per-group mean and population variance of `xs`, where element `i` belongs to group
/// `groups_of[i] < groups`.
fn moments(xs: &[f64], group_of: &[usize], groups: usize) -> (Vec<f64>, Vec<f64>) {
    let mut count = vec![0usize; groups];
    let mut mean = vec![0.0; groups];
    for (&x, &g) in xs.iter().zip(group_of) {
        mean[g] += x;
        count[g] += 1;
    }
    for (m, &c) in mean.iter_mut().zip(&count) {
        *m /= c as f64;
    }
    let mut var = vec![0.0; groups];
    for (&x, &g) in xs.iter().zip(group_of) {
        var[g] += (x - mean[g]) * (x - mean[g]);
    }
    for (v, &c) in var.iter_mut().zip(&count) {
        *v /= c as f64;
    }
    (mean, var)
}

/// Requires rank >= 2 (`N x C x ...`); returns (C, product of the spatial dimensions).
fn channels(x: &Tensor, op: &str) -> Result<(usize, usize), OpError> {
    if x.rank() < 2 {
        return Err(OpError::Shape(format!(
            "{op} input must have rank >= 2, got {:?}",
            x.shape()
        )));
    }
    Ok((x.shape()[1], x.shape()[2..].iter().product()))
}

/// A per-channel (or per-group) parameter with exactly `n` elements.
fn param(
    inputs: &[Option<&Tensor>],
    index: usize,
    n: usize,
    op: &str,
) -> Result<Vec<f64>, OpError> {
    let t = arg(inputs, index)?;
    if t.numel() != n {
        return Err(OpError::Shape(format!(
            "{op} input #{index} has shape {:?}, expected {n} elements",
            t.shape()
        )));
    }
    floats(t, index)
}

/// A parameter's values and, for every element of X, the offset of its value.
type Broadcast = (Vec<f64>, Vec<usize>);

/// How BatchNormalization computes its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BnMode {
    /// Running mean/var from the inputs.
    Inference,
    /// Opsets 7–13 with several outputs: Y, running mean, running var, batch mean, batch var.
    TrainingLegacy,
    /// Opset >= 14, `training_mode = 1`: Y, running mean, running var.
    Training,
}

#[derive(Debug)]
struct BatchNorm {
    epsilon: f64,
    momentum: f64,
    mode: BnMode,
    /// Opsets 7–8 with `spatial = 0`: parameters have shape `[C, D1, ...]`.
    per_activation: bool,
}

#[derive(Debug)]
struct LayerNorm {
    axis: i64,
    epsilon: f64,
    stash: DType,
}

#[derive(Debug)]
struct InstanceNorm {
    epsilon: f64,
}

#[derive(Debug)]
struct GroupNorm {
    num_groups: i64,
    epsilon: f64,
    /// Opset >= 21: scale and bias have one value per channel (before: per group).
    per_channel: bool,
}

#[derive(Debug)]
struct MeanVarianceNorm {
    axes: Vec<i64>,
}

#[derive(Debug)]
struct Lrn {
    size: usize,
    alpha: f64,
    beta: f64,
    bias: f64,
}

/// `e` as `dtype` (a cast only where its type differs).
fn as_type(e: Expr, dtype: DataType) -> Expr {
    if e.dtype() == Some(dtype) {
        e
    } else {
        e.cast(dtype)
    }
}

/// `f(a, b)` for a two-argument math function.
fn math2(f: MathFunc, a: Expr, b: Expr) -> Expr {
    Expr::math(f, vec![a, b])
}

/// The channel count of an `N x C x ...` input (rank >= 2 required).
fn channel_count(shape: &[usize], op: &str) -> Result<usize, OpError> {
    match shape {
        [_, c, ..] => Ok(*c),
        _ => Err(OpError::Shape(format!(
            "{op} input must have rank >= 2, got {shape:?}"
        ))),
    }
}

/// The shape of float parameter input `index`, which must have exactly `n` elements.
fn channel_param<'a>(
    inputs: &[Option<ComputeInput<'a>>],
    index: usize,
    n: usize,
    op: &str,
) -> Result<&'a [usize], OpError> {
    let p = input(inputs, index)?;
    check_dtype(index, p.dtype, float)?;
    if p.shape.iter().product::<usize>() != n {
        return Err(OpError::Shape(format!(
            "{op} input #{index} has shape {:?}, expected {n} elements",
            p.shape
        )));
    }
    Ok(p.shape)
}

/// Per-row statistics of a definition: the sum, then the sum of squared deviations from the
/// row mean (two-pass population variance, the second reduction reading the first at its own
/// row), both in `t`.
struct Moments {
    sum: Var,
    sq: Var,
    count: Expr,
}

impl Moments {
    /// The two reduce nodes over `red`'s rows of `read` (an element of `t` at an input
    /// index).
    fn new(
        red: &AxisReduction,
        t: DataType,
        read: impl Fn(&[Expr]) -> Expr,
    ) -> (Moments, Vec<(Var, ComputeNode)>) {
        let count = Expr::float_of(red.count() as f64, t);
        let (sum, sum_node) = red.node("sum", t, ReduceKind::Sum, &read);
        let mean = |i: &[Expr]| sum.at(red.row_index(i)) / count.clone();
        let (sq, sq_node) = red.node("sq", t, ReduceKind::Sum, |i| {
            let d = read(i) - mean(i);
            d.clone() * d
        });
        let nodes = vec![(sum.clone(), sum_node), (sq.clone(), sq_node)];
        (Moments { sum, sq, count }, nodes)
    }

    /// The mean of row `row`.
    fn mean(&self, row: &[Expr]) -> Expr {
        self.sum.at(row.to_vec()) / self.count.clone()
    }

    /// The population variance of row `row`.
    fn var(&self, row: &[Expr]) -> Expr {
        self.sq.at(row.to_vec()) / self.count.clone()
    }
}

/// Registers the normalization family.
pub fn register(r: &mut Registry) {
    let bn = |c: &crate::OpContext<'_>,
              spatial_attr: bool,
              legacy: bool|
     -> Result<Box<dyn Operator>, OpError> {
        let spatial = if spatial_attr {
            c.attrs.int_or("spatial", 1)?
        } else {
            1
        };
        let mode = if legacy {
            if c.num_outputs > 1 {
                BnMode::TrainingLegacy
            } else {
                BnMode::Inference
            }
        } else {
            match c.attrs.int_or("training_mode", 0)? {
                0 => BnMode::Inference,
                1 => BnMode::Training,
                v => {
                    return Err(OpError::attr(
                        "training_mode",
                        format!("must be 0 or 1, got {v}"),
                    ))
                }
            }
        };
        Ok(Box::new(BatchNorm {
            epsilon: c.attrs.float_or("epsilon", 1e-5)? as f64,
            momentum: c.attrs.float_or("momentum", 0.9)? as f64,
            mode,
            per_activation: spatial == 0,
        }))
    };
    r.register("", "BatchNormalization", 7..=8, move |c| bn(c, true, true));
    r.register("", "BatchNormalization", 9..=13, move |c| {
        bn(c, false, true)
    });
    r.register("", "BatchNormalization", 14..=LATEST_OPSET, move |c| {
        bn(c, false, false)
    });
    r.register("", "LayerNormalization", 17..=LATEST_OPSET, |c| {
        let code = c.attrs.int_or("stash_type", 1)?;
        let stash = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .filter(|d| d.is_float())
            .ok_or_else(|| OpError::attr("stash_type", format!("unsupported type code {code}")))?;
        Ok(Box::new(LayerNorm {
            axis: c.attrs.int_or("axis", -1)?,
            epsilon: c.attrs.float_or("epsilon", 1e-5)? as f64,
            stash,
        }))
    });
    r.register("", "InstanceNormalization", 6..=LATEST_OPSET, |c| {
        Ok(Box::new(InstanceNorm {
            epsilon: c.attrs.float_or("epsilon", 1e-5)? as f64,
        }))
    });
    for (range, per_channel) in [(18..=20, false), (21..=LATEST_OPSET, true)] {
        r.register("", "GroupNormalization", range, move |c| {
            Ok(Box::new(GroupNorm {
                num_groups: c.attrs.req_int("num_groups")?,
                epsilon: c.attrs.float_or("epsilon", 1e-5)? as f64,
                per_channel,
            }))
        });
    }
    r.register("", "MeanVarianceNormalization", 9..=LATEST_OPSET, |c| {
        let axes = c
            .attrs
            .ints("axes")?
            .cloned()
            .unwrap_or_else(|| vec![0, 2, 3]);
        Ok(Box::new(MeanVarianceNorm { axes }))
    });
    r.register("", "LRN", 1..=LATEST_OPSET, |c| {
        let size = c.attrs.req_int("size")?;
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| OpError::attr("size", format!("must be positive, got {size}")))?;
        Ok(Box::new(Lrn {
            size,
            alpha: c.attrs.float_or("alpha", 1e-4)? as f64,
            beta: c.attrs.float_or("beta", 0.75)? as f64,
            bias: c.attrs.float_or("bias", 1.0)? as f64,
        }))
    });
}

impl Operator for BatchNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let mean = infer_arg(inputs, 3)?;
        check_dtype(3, mean.ty.dtype, float)?;
        let stat = mean.ty.clone();
        let mut out = vec![x.ty.clone()];
        match self.mode {
            BnMode::Inference => {}
            BnMode::Training => out.extend([stat.clone(), stat]),
            BnMode::TrainingLegacy => out.extend([stat.clone(), stat.clone(), stat.clone(), stat]),
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        let (c, spatial) = channels(x, "BatchNormalization")?;
        // Parameter index of element i, and the number of parameters.
        let (n_params, group_of): (usize, Vec<usize>) = if self.per_activation {
            let p = c * spatial;
            (p, (0..xs.len()).map(|i| i % p).collect())
        } else {
            (
                c,
                (0..xs.len())
                    .map(|i| (i / spatial.max(1)) % c.max(1))
                    .collect(),
            )
        };
        let scale = param(inputs, 1, n_params, "BatchNormalization")?;
        let bias = param(inputs, 2, n_params, "BatchNormalization")?;
        let run_mean = param(inputs, 3, n_params, "BatchNormalization")?;
        let run_var = param(inputs, 4, n_params, "BatchNormalization")?;
        let (mean, var) = match self.mode {
            BnMode::Inference => (run_mean.clone(), run_var.clone()),
            _ => moments(&xs, &group_of, n_params),
        };
        let y: Vec<f64> = xs
            .iter()
            .zip(&group_of)
            .map(|(&v, &p)| scale[p] * (v - mean[p]) / (var[p] + self.epsilon).sqrt() + bias[p])
            .collect();
        let mut out = vec![tensor_of(x.dtype(), x.shape().to_vec(), y)?];
        if self.mode == BnMode::Inference {
            return Ok(out);
        }
        let stat_t = arg(inputs, 3)?;
        let stat = |v: Vec<f64>| tensor_of(stat_t.dtype(), stat_t.shape().to_vec(), v);
        let m = self.momentum;
        let blend = |run: &[f64], cur: &[f64]| {
            run.iter()
                .zip(cur)
                .map(|(r, b)| r * m + b * (1.0 - m))
                .collect()
        };
        out.push(stat(blend(&run_mean, &mean))?);
        out.push(stat(blend(&run_var, &var))?);
        if self.mode == BnMode::TrainingLegacy {
            out.push(stat(mean)?);
            out.push(stat(var)?);
        }
        Ok(out)
    }

    /// A grid in inference mode (statistics are inputs); in training modes, the batch mean
    /// and two-pass variance as reductions over every axis but the channel (or, with
    /// `spatial = 0`, over the batch axis), then grids for Y and the statistics outputs.
    /// Math in f32 (f64 for f64 inputs). Parameters are read by their linear position, so
    /// any shape with the right element count works, like `eval`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let shape = x.shape;
        if shape.len() < 2 {
            return Err(OpError::Shape(format!(
                "BatchNormalization input must have rank >= 2, got {shape:?}"
            )));
        }
        // The parameter axes: the channel, or every axis but the batch.
        let mask: Vec<bool> = (0..shape.len())
            .map(|d| if self.per_activation { d == 0 } else { d != 1 })
            .collect();
        let red = AxisReduction::new(shape, &mask, false);
        let param_shape = red.out_shape();
        let n_params: usize = param_shape.iter().product();
        let mut params = Vec::new();
        for k in 1..=4 {
            let p = input(inputs, k)?;
            check_dtype(k, p.dtype, float)?;
            if p.shape.iter().product::<usize>() != n_params {
                return Err(OpError::Shape(format!(
                    "BatchNormalization input #{k} has shape {:?}, expected {n_params} elements",
                    p.shape
                )));
            }
            params.push(p);
        }
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let read = |i: &[Expr]| as_type(vars[0].at(i.to_vec()), t);
        // Parameter `k` at the parameter index `row` (an index into `param_shape`).
        let param = |k: usize, row: &[Expr]| -> Expr {
            let at = linearize(row, &param_shape);
            as_type(vars[k].at(unravel(&at, params[k - 1].shape)), t)
        };
        let mut nodes = Vec::new();
        let stats = (self.mode != BnMode::Inference).then(|| {
            let (m, m_nodes) = Moments::new(&red, t, read);
            nodes.extend(m_nodes);
            m
        });
        let eps = Expr::float_of(self.epsilon, t);
        let (y, y_node) = grid("y", dt, dims(shape), |i| {
            let row = red.row_index(i);
            let (mean, var) = match &stats {
                Some(m) => (m.mean(&row), m.var(&row)),
                None => (param(3, &row), param(4, &row)),
            };
            let v = param(1, &row) * (read(i) - mean) / (var + eps).sqrt() + param(2, &row);
            as_type(v, dt)
        });
        nodes.push((y.clone(), y_node));
        let mut outputs = vec![y];
        if let Some(m) = &stats {
            let stat_dt = params[2].dtype.to_ir();
            let keep = Expr::float_of(self.momentum, t);
            let blend = Expr::float_of(1.0 - self.momentum, t);
            let stat_grid = |name: &str, f: &dyn Fn(&[Expr]) -> Expr| {
                grid(name, stat_dt, dims(params[2].shape), |i| {
                    let row = unravel(&linearize(i, params[2].shape), &param_shape);
                    as_type(f(&row), stat_dt)
                })
            };
            let mut stat_nodes = vec![
                stat_grid("running_mean", &|r| {
                    param(3, r) * keep.clone() + m.mean(r) * blend.clone()
                }),
                stat_grid("running_var", &|r| {
                    param(4, r) * keep.clone() + m.var(r) * blend.clone()
                }),
            ];
            if self.mode == BnMode::TrainingLegacy {
                stat_nodes.push(stat_grid("saved_mean", &|r| m.mean(r)));
                stat_nodes.push(stat_grid("saved_var", &|r| m.var(r)));
            }
            for (v, node) in stat_nodes {
                outputs.push(v.clone());
                nodes.push((v, node));
            }
        }
        finish(vars, nodes, outputs).map(Some)
    }
}

impl Operator for LayerNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let stat_shape = match &x.ty.shape {
            Some(dims) => {
                let axis = norm_axis(self.axis, dims.len())?;
                Some(
                    dims.iter()
                        .enumerate()
                        .map(|(d, n)| if d < axis { n.clone() } else { Dim::Fixed(1) })
                        .collect(),
                )
            }
            None => None,
        };
        let stat = TensorType {
            dtype: self.stash,
            shape: stat_shape,
        };
        Ok(vec![x.ty.clone(), stat.clone(), stat])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        let axis = norm_axis(self.axis, x.rank())?;
        let shape = x.shape();
        let lanes = Lanes::spanning(shape, axis, x.rank())?;
        let group_of: Vec<usize> = (0..xs.len()).map(|i| i / lanes.len.max(1)).collect();
        let (mean, var) = moments(&xs, &group_of, lanes.outer);
        let inv_std: Vec<f64> = var
            .iter()
            .map(|v| 1.0 / (v + self.epsilon).sqrt())
            .collect();
        // Scale and bias broadcast to X (unidirectionally).
        let affine = |index: usize| -> Result<Option<Broadcast>, OpError> {
            let Some(t) = opt_arg(inputs, index) else {
                return Ok(None);
            };
            if broadcast_shapes(&[shape, t.shape()])? != shape {
                return Err(OpError::Shape(format!(
                    "LayerNormalization input #{index} of shape {:?} does not broadcast to {shape:?}",
                    t.shape()
                )));
            }
            Ok(Some((
                floats(t, index)?,
                broadcast_offsets(t.shape(), shape),
            )))
        };
        let scale = affine(1)?.ok_or(OpError::MissingInput(1))?;
        let bias = affine(2)?;
        let y: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let g = group_of[i];
                let b = bias.as_ref().map_or(0.0, |(bv, bo)| bv[bo[i]]);
                (v - mean[g]) * inv_std[g] * scale.0[scale.1[i]] + b
            })
            .collect();
        let stat_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if d < axis { n } else { 1 })
            .collect();
        Ok(vec![
            tensor_of(x.dtype(), shape.to_vec(), y)?,
            tensor_of(self.stash, stat_shape.clone(), mean)?,
            tensor_of(self.stash, stat_shape, inv_std)?,
        ])
    }

    /// The mean and two-pass variance as reductions over the normalized (trailing) axes into
    /// the statistics' shape, then grids for Y, Mean and InvStdDev: the rule-based CPU
    /// scheduler's "reduce over the last axes, then a grid reading the row's values"
    /// pattern. Statistics in f64 when X or `stash_type` is f64, else f32.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let shape = x.shape;
        let axis = norm_axis(self.axis, shape.len())?;
        for (k, p) in [(1, Some(input(inputs, 1)?)), (2, opt_input(inputs, 2))] {
            let Some(p) = p else { continue };
            check_dtype(k, p.dtype, float)?;
            if broadcast(&[shape, p.shape])? != shape {
                return Err(OpError::Shape(format!(
                    "LayerNormalization input #{k} of shape {:?} does not broadcast to {shape:?}",
                    p.shape
                )));
            }
        }
        let scale_shape = input(inputs, 1)?.shape;
        let bias_shape = opt_input(inputs, 2).map(|b| b.shape);
        let dt = x.dtype.to_ir();
        let stash = self.stash.to_ir();
        let t = if dt == DataType::F64 || stash == DataType::F64 {
            DataType::F64
        } else {
            DataType::F32
        };
        let vars = placeholders(inputs);
        let read = |i: &[Expr]| as_type(vars[0].at(i.to_vec()), t);
        let red = AxisReduction::trailing(shape, axis, true);
        let (m, mut nodes) = Moments::new(&red, t, read);
        let inv_std = |row: &[Expr]| {
            Expr::float_of(1.0, t) / (m.var(row) + Expr::float_of(self.epsilon, t)).sqrt()
        };
        let (y, y_node) = grid("y", dt, dims(shape), |i| {
            let row = red.row_index(i);
            let scale = as_type(broadcast_read(&vars[1], scale_shape, i), t);
            let v = (read(i) - m.mean(&row)) * inv_std(&row) * scale;
            let v = match bias_shape {
                Some(b) => v + as_type(broadcast_read(&vars[2], b, i), t),
                None => v,
            };
            as_type(v, dt)
        });
        let stat_shape = dims(&red.out_shape());
        let (mean, mean_node) = grid("mean", stash, stat_shape.clone(), |i| {
            as_type(m.mean(i), stash)
        });
        let (inv, inv_node) = grid("inv_std_dev", stash, stat_shape, |i| {
            as_type(inv_std(i), stash)
        });
        nodes.extend([
            (y.clone(), y_node),
            (mean.clone(), mean_node),
            (inv.clone(), inv_node),
        ]);
        finish(vars, nodes, vec![y, mean, inv]).map(Some)
    }
}

impl Operator for InstanceNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_same(inputs, float)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        let (c, spatial) = channels(x, "InstanceNormalization")?;
        let scale = param(inputs, 1, c, "InstanceNormalization")?;
        let bias = param(inputs, 2, c, "InstanceNormalization")?;
        let group_of: Vec<usize> = (0..xs.len()).map(|i| i / spatial.max(1)).collect();
        let groups = x.shape()[0] * c;
        let (mean, var) = moments(&xs, &group_of, groups);
        let y = xs
            .iter()
            .zip(&group_of)
            .map(|(&v, &g)| {
                scale[g % c] * (v - mean[g]) / (var[g] + self.epsilon).sqrt() + bias[g % c]
            })
            .collect();
        Ok(vec![tensor_of(x.dtype(), x.shape().to_vec(), y)?])
    }

    /// Mean and two-pass variance over the spatial axes per (batch, channel), then a grid.
    /// Math in f32 (f64 for f64 inputs).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let c = channel_count(x.shape, "InstanceNormalization")?;
        let (scale, bias) = (
            channel_param(inputs, 1, c, "InstanceNormalization")?,
            channel_param(inputs, 2, c, "InstanceNormalization")?,
        );
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let read = |i: &[Expr]| as_type(vars[0].at(i.to_vec()), t);
        let red = AxisReduction::trailing(x.shape, 2, false);
        let (m, mut nodes) = Moments::new(&red, t, read);
        let p = |k: usize, shape: &[usize], ch: &Expr| as_type(vars[k].at(unravel(ch, shape)), t);
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| {
            let row = red.row_index(i);
            let norm =
                (read(i) - m.mean(&row)) / (m.var(&row) + Expr::float_of(self.epsilon, t)).sqrt();
            as_type(p(1, scale, &i[1]) * norm + p(2, bias, &i[1]), dt)
        });
        nodes.push((y.clone(), y_node));
        finish(vars, nodes, vec![y]).map(Some)
    }
}

impl Operator for GroupNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_same(inputs, float)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        let (c, spatial) = channels(x, "GroupNormalization")?;
        let groups = usize::try_from(self.num_groups)
            .ok()
            .filter(|&g| g > 0 && c % g == 0)
            .ok_or_else(|| {
                OpError::Invalid(format!(
                    "num_groups {} does not divide {c} channels",
                    self.num_groups
                ))
            })?;
        let n_params = if self.per_channel { c } else { groups };
        let scale = param(inputs, 1, n_params, "GroupNormalization")?;
        let bias = param(inputs, 2, n_params, "GroupNormalization")?;
        let per_group = (c / groups) * spatial;
        let group_of: Vec<usize> = (0..xs.len()).map(|i| i / per_group.max(1)).collect();
        let (mean, var) = moments(&xs, &group_of, x.shape()[0] * groups);
        let y = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let g = group_of[i];
                let p = if self.per_channel {
                    (i / spatial.max(1)) % c
                } else {
                    g % groups
                };
                scale[p] * (v - mean[g]) / (var[g] + self.epsilon).sqrt() + bias[p]
            })
            .collect();
        Ok(vec![tensor_of(x.dtype(), x.shape().to_vec(), y)?])
    }

    /// Statistics per (batch, channel) over the channel's whole group (each channel of a
    /// group folds the same elements: `C / num_groups` times the work of per-group
    /// statistics, in exchange for the "reduce, then a grid reading its row" form the CPU
    /// scheduler runs as one kernel), then a grid. Math in f32 (f64 for f64 inputs).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let c = channel_count(x.shape, "GroupNormalization")?;
        let groups = usize::try_from(self.num_groups)
            .ok()
            .filter(|&g| g > 0 && c % g == 0)
            .ok_or_else(|| {
                OpError::Invalid(format!(
                    "num_groups {} does not divide {c} channels",
                    self.num_groups
                ))
            })?;
        let per_group = c / groups;
        let n_params = if self.per_channel { c } else { groups };
        let (scale, bias) = (
            channel_param(inputs, 1, n_params, "GroupNormalization")?,
            channel_param(inputs, 2, n_params, "GroupNormalization")?,
        );
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let rows = dims(&x.shape[..2]);
        let mut folded = vec![per_group as i64];
        folded.extend(dims(&x.shape[2..]));
        let cpg = Expr::int(per_group.max(1) as i64);
        // The element at position `r` of the group of channel row[1].
        let member = |row: &[Expr], r: &[Expr]| -> Expr {
            let mut index = vec![
                row[0].clone(),
                &row[1] / cpg.clone() * cpg.clone() + r[0].clone(),
            ];
            index.extend(r[1..].iter().cloned());
            as_type(vars[0].at(index), t)
        };
        let count = Expr::float_of(folded.iter().product::<i64>() as f64, t);
        let (sum, sum_node) = reduce(
            "sum",
            t,
            rows.clone(),
            folded.clone(),
            ReduceKind::Sum,
            |i, r| member(i, r),
        );
        let mean = |row: &[Expr]| sum.at(row.to_vec()) / count.clone();
        let (sq, sq_node) = reduce("sq", t, rows, folded, ReduceKind::Sum, |i, r| {
            let d = member(i, r) - mean(i);
            d.clone() * d
        });
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| {
            let row = &i[..2];
            let var = sq.at(row.to_vec()) / count.clone();
            let norm = (as_type(vars[0].at(i.to_vec()), t) - mean(row))
                / (var + Expr::float_of(self.epsilon, t)).sqrt();
            let p = if self.per_channel {
                i[1].clone()
            } else {
                &i[1] / cpg.clone()
            };
            let param = |k: usize, shape: &[usize]| as_type(vars[k].at(unravel(&p, shape)), t);
            as_type(param(1, scale) * norm + param(2, bias), dt)
        });
        finish(
            vars,
            vec![(sum, sum_node), (sq, sq_node), (y.clone(), y_node)],
            vec![y],
        )
        .map(Some)
    }
}

impl Operator for MeanVarianceNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let out = infer_same(inputs, float)?;
        if let Some(rank) = out[0].rank() {
            axes_mask(&self.axes, rank)?;
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        let mask = axes_mask(&self.axes, x.rank())?;
        let red = Reduction::new(x.shape(), &mask)?;
        let (mean, var) = moments(&xs, &red.offsets, red.out_len());
        let y = xs
            .iter()
            .zip(&red.offsets)
            .map(|(&v, &g)| (v - mean[g]) / (var[g].sqrt() + 1e-9))
            .collect();
        Ok(vec![tensor_of(x.dtype(), x.shape().to_vec(), y)?])
    }

    /// Mean and two-pass variance over `axes`, then a grid. Math in f32 (f64 for f64
    /// inputs).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let mask = axes_mask(&self.axes, x.shape.len())?;
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let read = |i: &[Expr]| as_type(vars[0].at(i.to_vec()), t);
        let red = AxisReduction::new(x.shape, &mask, false);
        let (m, mut nodes) = Moments::new(&red, t, read);
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| {
            let row = red.row_index(i);
            let v = (read(i) - m.mean(&row)) / (m.var(&row).sqrt() + Expr::float_of(1e-9, t));
            as_type(v, dt)
        });
        nodes.push((y.clone(), y_node));
        finish(vars, nodes, vec![y]).map(Some)
    }
}

impl Operator for Lrn {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_same(inputs, float)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xs = floats(x, 0)?;
        channels(x, "LRN")?;
        let lanes = Lanes::along(x.shape(), 1)?;
        let (before, after) = ((self.size - 1) / 2, self.size / 2);
        let mut y = vec![0.0; xs.len()];
        for lane in 0..lanes.count() {
            for ch in 0..lanes.len {
                let lo = ch.saturating_sub(before);
                let hi = (ch + after).min(lanes.len - 1);
                let sq: f64 = (lo..=hi).map(|k| xs[lanes.at(lane, k)].powi(2)).sum();
                let i = lanes.at(lane, ch);
                y[i] = xs[i] / (self.bias + self.alpha / self.size as f64 * sq).powf(self.beta);
            }
        }
        Ok(vec![tensor_of(x.dtype(), x.shape().to_vec(), y)?])
    }

    /// The windowed sum of squares across channels as a reduction over the window (channels
    /// outside the tensor contribute 0) per element, then a grid. Math in f32 (f64 for f64
    /// inputs).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let c = channel_count(x.shape, "LRN")?;
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let before = ((self.size - 1) / 2) as i64;
        let (sq, sq_node) = reduce(
            "sq",
            t,
            dims(x.shape),
            [self.size as i64],
            ReduceKind::Sum,
            |i, r| {
                let ch = &i[1] - Expr::int(before) + r[0].clone();
                let inside = ch.ge(Expr::int(0)).and(ch.lt(Expr::int(c as i64)));
                let mut index = i.to_vec();
                index[1] = clamp(ch, Expr::int(0), Expr::int(c.saturating_sub(1) as i64));
                let v = as_type(vars[0].at(index), t);
                Expr::select(inside, v.clone() * v, Expr::float_of(0.0, t))
            },
        );
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| {
            let base = Expr::float_of(self.bias, t)
                + Expr::float_of(self.alpha / self.size as f64, t) * sq.at(i.to_vec());
            let denom = math2(MathFunc::Pow, base, Expr::float_of(self.beta, t));
            as_type(as_type(vars[0].at(i.to_vec()), t) / denom, dt)
        });
        finish(vars, vec![(sq, sq_node), (y.clone(), y_node)], vec![y]).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::tests::{random, unravel};

    fn tensor(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            random(seed, n).into_iter().map(|v| v as f32).collect(),
        )
        .unwrap()
    }

    fn positive(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            random(seed, n)
                .into_iter()
                .map(|v| v.abs() as f32)
                .collect(),
        )
        .unwrap()
    }

    fn assert_close(got: &Tensor, want: &[f64], tol: f64) {
        let g = got.to_f64_vec();
        assert_eq!(g.len(), want.len());
        for (i, (a, b)) in g.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= tol * (1.0 + b.abs()), "#{i}: {a} vs {b}");
        }
    }

    /// Mean and population variance of the elements whose multi-index satisfies `pick`.
    fn stats(x: &Tensor, pick: impl Fn(&[usize]) -> bool) -> (f64, f64) {
        let v = x.to_f64_vec();
        let sel: Vec<f64> = (0..v.len())
            .filter(|&i| pick(&unravel(i, x.shape())))
            .map(|i| v[i])
            .collect();
        let m = sel.iter().sum::<f64>() / sel.len() as f64;
        (
            m,
            sel.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / sel.len() as f64,
        )
    }

    #[test]
    fn batchnorm_inference_and_training() {
        let x = tensor(&[2, 3, 5], 1);
        let (s, b, m) = (tensor(&[3], 2), tensor(&[3], 3), tensor(&[3], 4));
        let v = positive(&[3], 5);
        let ins = [Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)];
        let (sv, bv, mv, vv) = (
            s.to_f64_vec(),
            b.to_f64_vec(),
            m.to_f64_vec(),
            v.to_f64_vec(),
        );
        let xv = x.to_f64_vec();
        let op = BatchNorm {
            epsilon: 1e-3,
            momentum: 0.8,
            mode: BnMode::Inference,
            per_activation: false,
        };
        let y = op.eval(&ins).unwrap();
        assert_eq!(y.len(), 1);
        let want: Vec<f64> = (0..30)
            .map(|i| {
                let c = unravel(i, &[2, 3, 5])[1];
                sv[c] * (xv[i] - mv[c]) / (vv[c] + 1e-3).sqrt() + bv[c]
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);

        let op = BatchNorm {
            epsilon: 1e-3,
            momentum: 0.8,
            mode: BnMode::Training,
            per_activation: false,
        };
        let out = op.eval(&ins).unwrap();
        assert_eq!(out.len(), 3);
        let st: Vec<(f64, f64)> = (0..3).map(|c| stats(&x, |idx| idx[1] == c)).collect();
        let want: Vec<f64> = (0..30)
            .map(|i| {
                let c = unravel(i, &[2, 3, 5])[1];
                sv[c] * (xv[i] - st[c].0) / (st[c].1 + 1e-3).sqrt() + bv[c]
            })
            .collect();
        assert_close(&out[0], &want, 1e-5);
        assert_close(
            &out[1],
            &(0..3)
                .map(|c| mv[c] * 0.8 + st[c].0 * 0.2)
                .collect::<Vec<_>>(),
            1e-5,
        );
        assert_close(
            &out[2],
            &(0..3)
                .map(|c| vv[c] * 0.8 + st[c].1 * 0.2)
                .collect::<Vec<_>>(),
            1e-5,
        );

        let bad = tensor(&[4], 6);
        assert!(matches!(
            op.eval(&[Some(&x), Some(&bad), Some(&b), Some(&m), Some(&v)]),
            Err(OpError::Shape(_))
        ));
        let flat = tensor(&[5], 7);
        assert!(op
            .eval(&[Some(&flat), Some(&s), Some(&b), Some(&m), Some(&v)])
            .is_err());
    }

    #[test]
    fn batchnorm_per_activation_legacy_outputs() {
        let x = tensor(&[3, 2, 3], 8);
        let p = |seed| tensor(&[2, 3], seed);
        let (s, b, m, v) = (p(9), p(10), p(11), positive(&[2, 3], 12));
        let op = BatchNorm {
            epsilon: 1e-5,
            momentum: 0.9,
            mode: BnMode::TrainingLegacy,
            per_activation: true,
        };
        let out = op
            .eval(&[Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)])
            .unwrap();
        assert_eq!(out.len(), 5);
        let want_mean: Vec<f64> = (0..6)
            .map(|k| stats(&x, |idx| idx[1] * 3 + idx[2] == k).0)
            .collect();
        assert_close(&out[3], &want_mean, 1e-6);
    }

    #[test]
    fn layernorm_matches_reference_for_every_axis() {
        let shape = [2, 3, 5];
        let x = tensor(&shape, 13);
        for axis in [-3i64, -2, -1, 1] {
            let a = norm_axis(axis, 3).unwrap();
            let norm_shape = &shape[a..];
            let s = tensor(norm_shape, 14);
            let b = tensor(&norm_shape[norm_shape.len() - 1..], 15);
            let op = LayerNorm {
                axis,
                epsilon: 1e-5,
                stash: DType::F32,
            };
            let out = op.eval(&[Some(&x), Some(&s), Some(&b)]).unwrap();
            let (xv, sv, bv) = (x.to_f64_vec(), s.to_f64_vec(), b.to_f64_vec());
            let inner: usize = norm_shape.iter().product();
            let want: Vec<f64> = (0..30)
                .map(|i| {
                    let idx = unravel(i, &shape);
                    let (m, v) = stats(&x, |j| j[..a] == idx[..a]);
                    (xv[i] - m) / (v + 1e-5).sqrt() * sv[i % inner] + bv[i % shape[2]]
                })
                .collect();
            assert_close(&out[0], &want, 1e-5);
            let mut stat_shape = shape.to_vec();
            stat_shape[a..].fill(1);
            assert_eq!(out[1].shape(), stat_shape.as_slice());
            assert_eq!(out[2].dtype(), DType::F32);
        }
        let op = LayerNorm {
            axis: 3,
            epsilon: 1e-5,
            stash: DType::F32,
        };
        assert!(op.eval(&[Some(&x), Some(&x)]).is_err());
        let op = LayerNorm {
            axis: -1,
            epsilon: 1e-5,
            stash: DType::F32,
        };
        let wrong = tensor(&[4], 16);
        assert!(matches!(
            op.eval(&[Some(&x), Some(&wrong)]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(
            op.eval(&[Some(&x)]),
            Err(OpError::MissingInput(1))
        ));
    }

    #[test]
    fn instance_and_group_norm() {
        let shape = [2, 4, 3];
        let x = tensor(&shape, 17);
        let xv = x.to_f64_vec();
        let (s, b) = (tensor(&[4], 18), tensor(&[4], 19));
        let (sv, bv) = (s.to_f64_vec(), b.to_f64_vec());
        let y = InstanceNorm { epsilon: 1e-4 }
            .eval(&[Some(&x), Some(&s), Some(&b)])
            .unwrap();
        let want: Vec<f64> = (0..24)
            .map(|i| {
                let idx = unravel(i, &shape);
                let (m, v) = stats(&x, |j| j[0] == idx[0] && j[1] == idx[1]);
                sv[idx[1]] * (xv[i] - m) / (v + 1e-4).sqrt() + bv[idx[1]]
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);

        let y = GroupNorm {
            num_groups: 2,
            epsilon: 1e-4,
            per_channel: true,
        }
        .eval(&[Some(&x), Some(&s), Some(&b)])
        .unwrap();
        let want: Vec<f64> = (0..24)
            .map(|i| {
                let idx = unravel(i, &shape);
                let (m, v) = stats(&x, |j| j[0] == idx[0] && j[1] / 2 == idx[1] / 2);
                sv[idx[1]] * (xv[i] - m) / (v + 1e-4).sqrt() + bv[idx[1]]
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);
        let (sg, bg) = (tensor(&[2], 20), tensor(&[2], 21));
        let y = GroupNorm {
            num_groups: 2,
            epsilon: 1e-4,
            per_channel: false,
        }
        .eval(&[Some(&x), Some(&sg), Some(&bg)])
        .unwrap();
        let (sgv, bgv) = (sg.to_f64_vec(), bg.to_f64_vec());
        let want: Vec<f64> = (0..24)
            .map(|i| {
                let idx = unravel(i, &shape);
                let g = idx[1] / 2;
                let (m, v) = stats(&x, |j| j[0] == idx[0] && j[1] / 2 == g);
                sgv[g] * (xv[i] - m) / (v + 1e-4).sqrt() + bgv[g]
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);
        assert!(GroupNorm {
            num_groups: 3,
            epsilon: 1e-4,
            per_channel: true
        }
        .eval(&[Some(&x), Some(&s), Some(&b)])
        .is_err());
        assert!(GroupNorm {
            num_groups: 2,
            epsilon: 1e-4,
            per_channel: true
        }
        .eval(&[Some(&x), Some(&sg), Some(&bg)])
        .is_err());
    }

    #[test]
    fn mvn_and_lrn() {
        let shape = [2, 3, 2, 3];
        let x = tensor(&shape, 22);
        let xv = x.to_f64_vec();
        let y = MeanVarianceNorm {
            axes: vec![0, 2, -1],
        }
        .eval(&[Some(&x)])
        .unwrap();
        let want: Vec<f64> = (0..36)
            .map(|i| {
                let c = unravel(i, &shape)[1];
                let (m, v) = stats(&x, |j| j[1] == c);
                (xv[i] - m) / (v.sqrt() + 1e-9)
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);
        assert!(MeanVarianceNorm { axes: vec![4] }
            .eval(&[Some(&x)])
            .is_err());

        let op = Lrn {
            size: 4,
            alpha: 0.3,
            beta: 0.6,
            bias: 1.5,
        };
        let y = op.eval(&[Some(&x)]).unwrap();
        let want: Vec<f64> = (0..36)
            .map(|i| {
                let idx = unravel(i, &shape);
                let c = idx[1] as i64;
                // Window [c - 1, c + 2] for size 4, clipped to the 3 channels.
                let sq: f64 = (c - 1..=c + 2)
                    .filter(|&k| (0..3).contains(&k))
                    .map(|k| {
                        let mut j = idx.clone();
                        j[1] = k as usize;
                        let flat = j.iter().zip(&shape).fold(0, |acc, (&a, &n)| acc * n + a);
                        xv[flat] * xv[flat]
                    })
                    .sum();
                xv[i] / (1.5 + 0.3 / 4.0 * sq).powf(0.6)
            })
            .collect();
        assert_close(&y[0], &want, 1e-5);
        let v = tensor(&[3], 23);
        assert!(matches!(op.eval(&[Some(&v)]), Err(OpError::Shape(_))));
    }
}
