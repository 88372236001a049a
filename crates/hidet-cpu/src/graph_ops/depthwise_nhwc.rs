//! `hidet::DepthwiseConvNhwc`: a depthwise convolution on channels-last data.
//!
//! `DepthwiseConvNhwc(X, W, B?; kernel_shape, strides, dilations, pads)` with `X` of shape
//! `[N, d…, C]`, `W` of shape `[k…, C]` and `B` of shape `[C]` gives `Y` of shape `[N, o…, C]`:
//!
//! ```text
//! Y[n, o…, c] = Σ_k X[n, o·s + k·d - pad, c] · W[k…, c] + B[c]      (0 in the padding)
//! ```
//!
//! This is ONNX `Conv` with `group = C` and one output channel per group, with the channel
//! axis moved last in the data and the weight. The window geometry is the convolution's
//! ([`hidet_graph::kernels::window`]) with explicit pads.
//!
//! The operator is internal (domain [`HIDET_DOMAIN`]): the channels-last pass
//! ([`crate::graph_passes::channels_last`]) creates it, because the channel axis innermost makes a
//! depthwise convolution vectorize over channels with contiguous loads, where the `NCHW`
//! form vectorizes along short, strided image rows.

use crate::graph_ops::HIDET_DOMAIN;
use hidet_graph::dtype::DType;
use hidet_graph::kernels::window::{Geometry, WindowAttrs, WindowSpec, BEYOND_PADDING};
use hidet_graph::operator::{
    arg, infer_arg, opt_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::common::typed_input;
use hidet_graph::ops::compute_util::{dims, finish, input, opt_input, placeholders};
use hidet_graph::ops::window_compute::{clamp_into_input, fits_i32, guarded, window_read};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::Tensor;
use hidet_ir::compute::{grid, reduce, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "DepthwiseConvNhwc";

/// A `DepthwiseConvNhwc` node (see the module docs).
#[derive(Debug)]
struct DepthwiseConvNhwc {
    window: WindowAttrs,
}

/// Registers `hidet::DepthwiseConvNhwc` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            Ok(Box::new(DepthwiseConvNhwc {
                window: WindowSpec::explicit(c.attrs, OP_TYPE)?,
            }))
        },
    );
}

impl DepthwiseConvNhwc {
    /// The geometry and channel count for `X` of shape `xs` and `W` of shape `ws`, after
    /// checking both (and `B`'s shape `bs`, when given).
    fn geometry(
        &self,
        xs: &[usize],
        ws: &[usize],
        bs: Option<&[usize]>,
    ) -> Result<(Geometry, usize), OpError> {
        let rank = self.window.rank();
        if xs.len() != rank + 2 {
            return Err(OpError::Shape(format!(
                "DepthwiseConvNhwc needs X of shape [N, d…, C] with {rank} spatial dimensions, \
                 got {xs:?}"
            )));
        }
        let channels = xs[rank + 1];
        let mut want = self.window.kernel.clone();
        want.push(channels);
        if ws != want.as_slice() {
            return Err(OpError::Shape(format!(
                "DepthwiseConvNhwc needs W of shape {want:?} (kernel…, C), got {ws:?}"
            )));
        }
        if let Some(bs) = bs {
            if bs != [channels] {
                return Err(OpError::Shape(format!(
                    "DepthwiseConvNhwc needs B of shape [{channels}], got {bs:?}"
                )));
            }
        }
        Ok((self.window.resolve(&xs[1..=rank])?, channels))
    }

    fn output_shape(batch: usize, g: &Geometry, channels: usize) -> Vec<usize> {
        let mut shape = vec![batch];
        shape.extend(&g.output);
        shape.push(channels);
        shape
    }
}

impl Operator for DepthwiseConvNhwc {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, w) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        for (i, t) in [(0, x.ty), (1, w.ty)] {
            check_dtype(i, t.dtype, |d| d == DType::F32)?;
        }
        let b = inputs.get(2).copied().flatten();
        if let Some(b) = b {
            check_dtype(2, b.ty.dtype, |d| d == DType::F32)?;
        }
        let shape = match (x.ty.fixed_shape(), w.ty.fixed_shape()) {
            (Some(xs), Some(ws)) => {
                let bs = b.and_then(|b| b.ty.fixed_shape());
                let (g, channels) = self.geometry(&xs, &ws, bs.as_deref())?;
                Self::output_shape(xs[0], &g, channels)
                    .into_iter()
                    .map(Dim::Fixed)
                    .collect()
            }
            _ => vec![Dim::Unknown; self.window.rank() + 2],
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let b = opt_arg(inputs, 2);
        let xv = typed_input::<f32>(x, 0)?;
        let wv = typed_input::<f32>(w, 1)?;
        let bv = match b {
            Some(b) => Some(typed_input::<f32>(b, 2)?),
            None => None,
        };
        let (g, channels) = self.geometry(x.shape(), w.shape(), b.map(Tensor::shape))?;
        let (ni, no, nk) = (g.input_size(), g.output_size(), g.kernel_size());
        let batch = x.shape()[0];
        let offsets = g.offsets()?;
        let mut y = Vec::with_capacity(batch * no * channels);
        for n in 0..batch {
            let image = &xv[n * ni * channels..];
            for o in 0..no {
                for c in 0..channels {
                    let mut acc = bv.map_or(0.0, |b| f64::from(b[c]));
                    for k in 0..nk {
                        let off = offsets[k * no + o];
                        if off < BEYOND_PADDING {
                            acc += f64::from(image[off * channels + c])
                                * f64::from(wv[k * channels + c]);
                        }
                    }
                    y.push(acc as f32);
                }
            }
        }
        Ok(vec![Tensor::new(
            Self::output_shape(batch, &g, channels),
            y,
        )?])
    }

    /// `acc[n, o…, c] = Σ_k x[n, o·s + k·d - pad, c] · w[k…, c]` (0 in the padding: a select
    /// on the index bounds), then `out = acc + b[c]` when there is a bias. The read itself is
    /// clamped into the input, so that it is a plain load whatever the bounds: the select
    /// then only discards it, and the lanes (channels) of a padded window still vectorize.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
        check_dtype(0, x.dtype, |d| d == DType::F32)?;
        check_dtype(1, w.dtype, |d| d == DType::F32)?;
        let bias = opt_input(inputs, 2);
        if let Some(b) = bias {
            check_dtype(2, b.dtype, |d| d == DType::F32)?;
        }
        let (g, channels) = self.geometry(x.shape, w.shape, bias.map(|b| b.shape))?;
        let shape = Self::output_shape(x.shape[0], &g, channels);
        if !fits_i32(&[x.shape, w.shape, &shape]) {
            return Ok(None);
        }
        let vars = placeholders(inputs);
        let (vx, vw) = (vars[0].clone(), vars[1].clone());
        let rank = g.kernel.len();
        let (sum, sum_node) = reduce(
            "acc",
            DataType::F32,
            dims(&shape),
            dims(&g.kernel),
            ReduceKind::Sum,
            |i, r| {
                let read = window_read(&g, &i[1..=rank], r);
                let mut xi = vec![i[0].clone()];
                xi.extend(
                    read.index
                        .into_iter()
                        .enumerate()
                        .map(|(d, pos)| clamp_into_input(&g, d, pos)),
                );
                xi.push(i[rank + 1].clone());
                let mut wi = r.to_vec();
                wi.push(i[rank + 1].clone());
                guarded(
                    &read.inside,
                    vx.at(xi) * vw.at(wi),
                    Expr::zero(DataType::F32),
                )
            },
        );
        if bias.is_none() {
            return finish(vars, vec![(sum.clone(), sum_node)], vec![sum]).map(Some);
        }
        let vb = vars[2].clone();
        let (out, out_node) = grid("out", DataType::F32, dims(&shape), |i| {
            sum.at(i.to_vec()) + vb.at([i[rank + 1].clone()])
        });
        finish(
            vars,
            vec![(sum, sum_node), (out.clone(), out_node)],
            vec![out],
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_ops::build_op;
    use hidet_graph::attribute::Attribute;

    fn build(attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        build_op(HIDET_DOMAIN, OP_TYPE, 1, attrs, 3, 1)
    }

    #[test]
    fn matches_direct_loops_with_strides_dilations_and_uneven_pads() {
        let (h, w, c) = (6usize, 7usize, 3usize);
        let (kh, kw) = (3usize, 2usize);
        let xv: Vec<f32> = (0..h * w * c)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.13)
            .collect();
        let wv: Vec<f32> = (0..kh * kw * c)
            .map(|i| ((i * 11 % 7) as f32 - 3.0) * 0.29)
            .collect();
        let bv = vec![0.5f32, -1.25, 2.0];
        let op = build(&[
            ("kernel_shape", Attribute::Ints(vec![3, 2])),
            ("strides", Attribute::Ints(vec![2, 1])),
            ("dilations", Attribute::Ints(vec![1, 2])),
            ("pads", Attribute::Ints(vec![1, 2, 0, 1])),
        ])
        .unwrap();
        let x = Tensor::new(vec![1, h, w, c], xv.clone()).unwrap();
        let wt = Tensor::new(vec![kh, kw, c], wv.clone()).unwrap();
        let b = Tensor::new(vec![c], bv.clone()).unwrap();
        let y = op.eval(&[Some(&x), Some(&wt), Some(&b)]).unwrap().remove(0);
        let (oh, ow) = ((h + 1 - 3) / 2 + 1, (w + 3 - 3) + 1);
        assert_eq!(y.shape(), &[1, oh, ow, c]);
        let got = y.as_slice::<f32>().unwrap();
        for i in 0..oh {
            for j in 0..ow {
                for ch in 0..c {
                    let mut want = f64::from(bv[ch]);
                    for a in 0..kh {
                        for bb in 0..kw {
                            let hi = (i * 2 + a) as i64 - 1;
                            let wi = (j + 2 * bb) as i64 - 2;
                            if (0..h as i64).contains(&hi) && (0..w as i64).contains(&wi) {
                                let xi = (hi as usize * w + wi as usize) * c + ch;
                                want += f64::from(xv[xi]) * f64::from(wv[(a * kw + bb) * c + ch]);
                            }
                        }
                    }
                    let g = got[(i * ow + j) * c + ch];
                    assert!(
                        (f64::from(g) - want).abs() < 1e-5,
                        "({i}, {j}, {ch}): {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_weight_shapes_dtypes_and_auto_pad_are_errors() {
        let op = build(&[("kernel_shape", Attribute::Ints(vec![3, 3]))]).unwrap();
        let x = Tensor::new(vec![1, 4, 4, 2], vec![1.0f32; 32]).unwrap();
        let w = Tensor::new(vec![2, 3, 3], vec![1.0f32; 18]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&w), None]),
            Err(OpError::Shape(_))
        ));
        let xi = Tensor::new(vec![1, 4, 4, 2], vec![1i32; 32]).unwrap();
        let w = Tensor::new(vec![3, 3, 2], vec![1.0f32; 18]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&xi), Some(&w), None]),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            build(&[
                ("kernel_shape", Attribute::Ints(vec![3, 3])),
                ("auto_pad", Attribute::String("SAME_UPPER".into())),
            ]),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(build(&[]), Err(OpError::Attribute { .. })));
    }
}
