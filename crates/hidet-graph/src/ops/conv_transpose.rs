//! ConvTranspose: groups, strides, dilations, pads, output_padding, output_shape, auto_pad.

use crate::attribute::Attributes;
use crate::dispatch_float;
use crate::kernels::conv::{conv_transpose_nd, ConvShape};
use crate::kernels::window::AutoPad;
use crate::operator::{arg, infer_arg, opt_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::check_dtype;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};

#[derive(Debug)]
struct ConvTranspose {
    kernel: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    output_padding: Option<Vec<i64>>,
    output_shape: Option<Vec<i64>>,
    auto_pad: AutoPad,
    group: usize,
}

/// Registers ConvTranspose.
pub fn register(r: &mut Registry) {
    r.register(
        "",
        "ConvTranspose",
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| Ok(Box::new(ConvTranspose::parse(c.attrs)?)),
    );
}

/// The geometry of a ConvTranspose node with attributes `attrs` over spatial input sizes
/// `input` and a weight of spatial kernel `kernel`: the resolved per-axis parameters and the
/// group count (what a graph rewrite of the node needs).
pub(crate) fn geometry(
    attrs: &Attributes,
    input: &[usize],
    kernel: &[usize],
) -> Result<(Plan, usize), OpError> {
    let op = ConvTranspose::parse(attrs)?;
    Ok((op.plan(input, kernel)?, op.group))
}

/// Resolved per-dimension parameters: output position `i·stride + k·dilation - pad_begin`
/// receives input position `i` through kernel position `k`.
pub(crate) struct Plan {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<i64>,
    /// Output sizes.
    pub out: Vec<usize>,
}

fn list(
    name: &str,
    v: &Option<Vec<i64>>,
    n: usize,
    default: i64,
    min: i64,
) -> Result<Vec<i64>, OpError> {
    let v = v.clone().unwrap_or_else(|| vec![default; n]);
    if v.len() != n {
        return Err(OpError::attr(
            name,
            format!("expected {n} values, got {}", v.len()),
        ));
    }
    if let Some(x) = v.iter().find(|&&x| x < min) {
        return Err(OpError::attr(
            name,
            format!("values must be >= {min}, got {x}"),
        ));
    }
    Ok(v)
}

impl ConvTranspose {
    fn parse(a: &Attributes) -> Result<ConvTranspose, OpError> {
        let group = a.int_or("group", 1)?;
        let group = usize::try_from(group)
            .ok()
            .filter(|&g| g >= 1)
            .ok_or_else(|| OpError::attr("group", format!("must be >= 1, got {group}")))?;
        Ok(ConvTranspose {
            kernel: a.ints("kernel_shape")?.cloned(),
            strides: a.ints("strides")?.cloned(),
            dilations: a.ints("dilations")?.cloned(),
            pads: a.ints("pads")?.cloned(),
            output_padding: a.ints("output_padding")?.cloned(),
            output_shape: a.ints("output_shape")?.cloned(),
            auto_pad: AutoPad::parse(&a.string_or("auto_pad", "NOTSET")?)?,
            group,
        })
    }

    /// Output sizes and begin paddings for spatial input sizes `input` and weights' kernel.
    fn plan(&self, input: &[usize], wkernel: &[usize]) -> Result<Plan, OpError> {
        let n = input.len();
        let kernel = match &self.kernel {
            Some(k) => list("kernel_shape", &Some(k.clone()), n, 1, 1)?,
            None => wkernel.iter().map(|&k| k as i64).collect(),
        };
        if kernel.iter().zip(wkernel).any(|(&k, &w)| k as usize != w) {
            return Err(OpError::Shape(format!(
                "kernel_shape {kernel:?} differs from W's {wkernel:?}"
            )));
        }
        let strides = list("strides", &self.strides, n, 1, 1)?;
        let dil = list("dilations", &self.dilations, n, 1, 1)?;
        let opad = list("output_padding", &self.output_padding, n, 0, 0)?;
        let pads = list("pads", &self.pads, 2 * n, 0, 0)?;
        let requested: Option<Vec<i64>> = match &self.output_shape {
            Some(s) if s.len() == n => Some(s.clone()),
            Some(s) if s.len() == n + 2 => Some(s[2..].to_vec()),
            Some(s) => {
                return Err(OpError::attr(
                    "output_shape",
                    format!("expected {n} values, got {}", s.len()),
                ))
            }
            None if matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) => Some(
                input
                    .iter()
                    .zip(&strides)
                    .map(|(&i, &s)| i as i64 * s)
                    .collect(),
            ),
            None => None,
        };
        let mut plan = Plan {
            kernel: kernel.iter().map(|&k| k as usize).collect(),
            strides: strides.iter().map(|&s| s as usize).collect(),
            dilations: dil.iter().map(|&d| d as usize).collect(),
            pads_begin: vec![],
            out: vec![],
        };
        for i in 0..n {
            let full = strides[i] * (input[i] as i64 - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1;
            let (begin, out) = match &requested {
                Some(req) => {
                    let total = full - req[i];
                    let begin = if self.auto_pad == AutoPad::SameUpper {
                        total.div_euclid(2)
                    } else {
                        total - total.div_euclid(2)
                    };
                    (begin, req[i])
                }
                None => {
                    let (b, e) = if self.auto_pad == AutoPad::Valid {
                        (0, 0)
                    } else {
                        (pads[i], pads[i + n])
                    };
                    (b, full - b - e)
                }
            };
            if out < 0 {
                return Err(OpError::Shape(format!(
                    "spatial dimension {i}: output size {out} is negative"
                )));
            }
            plan.pads_begin.push(begin);
            plan.out.push(out as usize);
        }
        Ok(plan)
    }
}

impl Operator for ConvTranspose {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, w) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_dtype(0, x.ty.dtype, |d| d.is_float())?;
        if w.ty.dtype != x.ty.dtype {
            return Err(OpError::DType {
                index: 1,
                dtype: w.ty.dtype,
            });
        }
        let dtype = x.ty.dtype;
        let (Some(xd), Some(wd)) = (&x.ty.shape, &w.ty.shape) else {
            return Ok(vec![TensorType::unknown_shape(dtype)]);
        };
        if xd.len() < 3 || wd.len() != xd.len() {
            return Err(OpError::Shape(format!(
                "ConvTranspose of ranks {} and {}",
                xd.len(),
                wd.len()
            )));
        }
        let channels = match &wd[1] {
            Dim::Fixed(m) => Dim::Fixed(m * self.group),
            _ => Dim::Unknown,
        };
        let mut out = vec![xd[0].clone(), channels];
        let input: Option<Vec<usize>> = xd[2..].iter().map(Dim::fixed).collect();
        let kernel: Option<Vec<usize>> = wd[2..].iter().map(Dim::fixed).collect();
        match (input, kernel) {
            (Some(i), Some(k)) => out.extend(self.plan(&i, &k)?.out.into_iter().map(Dim::Fixed)),
            _ => out.extend(std::iter::repeat_n(Dim::Unknown, xd.len() - 2)),
        }
        Ok(vec![TensorType {
            dtype,
            shape: Some(out),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let dtype = x.dtype();
        check_dtype(0, dtype, |d| d.is_float())?;
        if w.dtype() != dtype {
            return Err(OpError::DType {
                index: 1,
                dtype: w.dtype(),
            });
        }
        let (xs, ws) = (x.shape(), w.shape());
        if xs.len() < 3 || ws.len() != xs.len() {
            return Err(OpError::Shape(format!(
                "ConvTranspose of shapes {xs:?} and {ws:?}"
            )));
        }
        if ws[0] != xs[1] || xs[1] % self.group != 0 {
            return Err(OpError::Shape(format!(
                "X has {} channels; W {ws:?} and group {} do not match",
                xs[1], self.group
            )));
        }
        let s = ConvShape {
            batch: xs[0],
            in_ch: xs[1],
            out_ch: ws[1] * self.group,
            groups: self.group,
        };
        let p = self.plan(&xs[2..], &ws[2..])?;
        let mut y = conv_transpose_nd(
            &s,
            &xs[2..],
            &p.out,
            &p.kernel,
            &p.strides,
            &p.dilations,
            &p.pads_begin,
            &x.to_f64_vec(),
            &w.to_f64_vec(),
        )?;
        if let Some(b) = opt_arg(inputs, 2) {
            if b.dtype() != dtype {
                return Err(OpError::DType {
                    index: 2,
                    dtype: b.dtype(),
                });
            }
            let b = b.to_f64_vec();
            if b.len() != s.out_ch {
                return Err(OpError::Shape(format!(
                    "bias has {} elements, expected {}",
                    b.len(),
                    s.out_ch
                )));
            }
            let plane: usize = p.out.iter().product();
            for (i, v) in y.iter_mut().enumerate() {
                *v += b[(i / plane.max(1)) % s.out_ch];
            }
        }
        let mut shape = vec![s.batch, s.out_ch];
        shape.extend(&p.out);
        let out = dispatch_float!(dtype, T => Tensor::new(shape, y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
            else return Err(OpError::DType { index: 0, dtype }));
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        build_op("", "ConvTranspose", 17, attrs, 3, 1)
    }

    fn pseudo(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 1.8 - 0.9 + 0.05
            })
            .collect()
    }

    /// Scatter definition of a 1-D grouped transposed convolution in f64.
    #[allow(clippy::too_many_arguments)]
    fn reference_1d(
        x: &[f32],
        c: usize,
        l: usize,
        w: &[f32],
        mg: usize,
        k: usize,
        g: usize,
        s: usize,
        d: usize,
        pb: i64,
        out: usize,
    ) -> Vec<f64> {
        let cg = c / g;
        let mut y = vec![0f64; mg * g * out];
        for ci in 0..c {
            let grp = ci / cg;
            for m in 0..mg {
                for i in 0..l {
                    for kk in 0..k {
                        let o = (i * s + kk * d) as i64 - pb;
                        if o >= 0 && (o as usize) < out {
                            y[(grp * mg + m) * out + o as usize] +=
                                x[ci * l + i] as f64 * w[(ci * mg + m) * k + kk] as f64;
                        }
                    }
                }
            }
        }
        y
    }

    #[test]
    fn grouped_strided_dilated_padded_matches_scatter_definition() {
        let (c, l, mg, k, g) = (4, 7, 3, 3, 2);
        let x = pseudo(c * l, 1);
        let w = pseudo(c * mg * k, 2);
        let op = build(&[
            ("group", Attribute::Int(2)),
            ("strides", Attribute::Ints(vec![3])),
            ("dilations", Attribute::Ints(vec![2])),
            ("pads", Attribute::Ints(vec![2, 1])),
            ("output_padding", Attribute::Ints(vec![1])),
        ])
        .unwrap();
        let tx = Tensor::new(vec![1, c, l], x.clone()).unwrap();
        let tw = Tensor::new(vec![c, mg, k], w.clone()).unwrap();
        let y = op.eval(&[Some(&tx), Some(&tw)]).unwrap().remove(0);
        let out = 3 * (l - 1) + 1 + (k - 1) * 2 + 1 - 3;
        assert_eq!(y.shape(), &[1, mg * g, out]);
        let want = reference_1d(&x, c, l, &w, mg, k, g, 3, 2, 2, out);
        for (a, b) in y.to_f64_vec().iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn output_shape_pads_at_the_end_and_same_upper_doubles_size() {
        let x = Tensor::new(vec![1, 1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let w = Tensor::new(vec![1, 1, 2], vec![1.0f32, 10.0]).unwrap();
        // natural size 2*2+2 = 6; requested 7: the extra element is at the end (zero).
        let op = build(&[
            ("strides", Attribute::Ints(vec![2])),
            ("output_shape", Attribute::Ints(vec![7])),
        ])
        .unwrap();
        let y = op.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        assert_eq!(y.to_f64_vec(), vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 0.0]);
        let op = build(&[
            ("strides", Attribute::Ints(vec![2])),
            ("auto_pad", Attribute::String("SAME_UPPER".into())),
        ])
        .unwrap();
        let y = op.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 1, 6]);
    }

    #[test]
    fn errors_are_typed() {
        let x = Tensor::new(vec![1, 3, 3], vec![1.0f32; 9]).unwrap();
        let w = Tensor::new(vec![2, 1, 2], vec![1.0f32; 4]).unwrap();
        assert!(matches!(
            build(&[]).unwrap().eval(&[Some(&x), Some(&w)]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(
            build(&[("group", Attribute::Int(-1))]),
            Err(OpError::Attribute { .. })
        ));
        let w = Tensor::new(vec![3, 1, 2], vec![1.0f32; 6]).unwrap();
        let op = build(&[("strides", Attribute::Ints(vec![0]))]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&w)]),
            Err(OpError::Attribute { .. })
        ));
    }
}
