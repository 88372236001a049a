//! Convolution: Conv (float), ConvInteger and QLinearConv (8-bit quantized).
//!
//! All three share one f64 kernel ([`crate::kernels::conv::conv_nd`]); integer operands are
//! exact in f64 (see that module).

use crate::dispatch_float;
use crate::dtype::DType;
use crate::kernels::conv::{conv_nd, ConvShape};
use crate::kernels::quant::{per_channel, quantize_to, scalar_f64};
use crate::kernels::window::WindowSpec;
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError,
    Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{dims, finish, input, math_dtype, opt_input, placeholders};
use crate::ops::window_compute::{fits_i32, guarded, window_read};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use hidet_ir::compute::{grid, reduce, ReduceKind};
use hidet_ir::expr::Expr;

/// Which convolution operator a [`Conv`] node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Conv(X, W, B?)`, float.
    Float,
    /// `ConvInteger(x, w, x_zero_point?, w_zero_point?)` → int32.
    Integer,
    /// `QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?)`.
    QLinear,
}

#[derive(Debug)]
struct Conv {
    kind: Kind,
    window: WindowSpec,
    group: usize,
}

/// Registers Conv, ConvInteger and QLinearConv.
pub fn register(r: &mut Registry) {
    let build = |kind: Kind| {
        move |c: &OpContext<'_>| -> Result<Box<dyn Operator>, OpError> {
            let group = c.attrs.int_or("group", 1)?;
            let group = usize::try_from(group)
                .ok()
                .filter(|&g| g >= 1)
                .ok_or_else(|| OpError::attr("group", format!("must be >= 1, got {group}")))?;
            let window = WindowSpec::from_attrs(c.attrs)?;
            if window.ceil_mode {
                return Err(OpError::attr(
                    "ceil_mode",
                    "is not an attribute of convolutions",
                ));
            }
            Ok(Box::new(Conv {
                kind,
                window,
                group,
            }))
        }
    };
    r.register("", "Conv", 1..=LATEST_OPSET, build(Kind::Float));
    r.register("", "ConvInteger", 10..=LATEST_OPSET, build(Kind::Integer));
    r.register("", "QLinearConv", 10..=LATEST_OPSET, build(Kind::QLinear));
}

fn int8(d: DType) -> bool {
    matches!(d, DType::I8 | DType::U8)
}

impl Conv {
    /// Input slots of X and W.
    fn xw_slots(&self) -> (usize, usize) {
        match self.kind {
            Kind::QLinear => (0, 3),
            _ => (0, 1),
        }
    }

    fn check_dtypes(&self, dt: &dyn Fn(usize) -> Option<DType>) -> Result<DType, OpError> {
        let (xs, ws) = self.xw_slots();
        let x = dt(xs).ok_or(OpError::MissingInput(xs))?;
        let w = dt(ws).ok_or(OpError::MissingInput(ws))?;
        match self.kind {
            Kind::Float => {
                check_dtype(xs, x, DType::is_float)?;
                if w != x {
                    return Err(OpError::DType {
                        index: ws,
                        dtype: w,
                    });
                }
                if let Some(b) = dt(2) {
                    if b != x {
                        return Err(OpError::DType { index: 2, dtype: b });
                    }
                }
                Ok(x)
            }
            Kind::Integer => {
                check_dtype(xs, x, int8)?;
                check_dtype(ws, w, int8)?;
                Ok(DType::I32)
            }
            Kind::QLinear => {
                check_dtype(xs, x, int8)?;
                check_dtype(ws, w, int8)?;
                if let Some(b) = dt(8) {
                    check_dtype(8, b, |d| d == DType::I32)?;
                }
                Ok(dt(7).unwrap_or(x))
            }
        }
    }
}

impl Operator for Conv {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (xs, ws) = self.xw_slots();
        let out_dtype = self.check_dtypes(&|i| infer_opt(inputs, i).map(|v| v.ty.dtype))?;
        let (x, w) = (infer_arg(inputs, xs)?, infer_arg(inputs, ws)?);
        let (Some(xd), Some(wd)) = (&x.ty.shape, &w.ty.shape) else {
            return Ok(vec![TensorType::unknown_shape(out_dtype)]);
        };
        if xd.len() < 3 || wd.len() != xd.len() {
            return Err(OpError::Shape(format!(
                "convolution needs X of rank >= 3 and W of the same rank, got ranks {} and {}",
                xd.len(),
                wd.len()
            )));
        }
        let kernel: Option<Vec<usize>> = wd[2..].iter().map(Dim::fixed).collect();
        let mut out = vec![xd[0].clone(), wd[0].clone()];
        match kernel.or_else(|| {
            self.window
                .kernel
                .as_ref()
                .map(|k| k.iter().map(|&v| v.max(0) as usize).collect())
        }) {
            Some(k) => out.extend(self.window.attrs(&k)?.infer(&xd[2..])?),
            None => out.extend(std::iter::repeat_n(Dim::Unknown, xd.len() - 2)),
        }
        Ok(vec![TensorType {
            dtype: out_dtype,
            shape: Some(out),
        }])
    }

    /// Float convolutions only (see `Conv::float_compute`); the integer variants have no
    /// definition.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        match self.kind {
            Kind::Float => self.float_compute(inputs),
            Kind::Integer | Kind::QLinear => Ok(None),
        }
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (xs, ws) = self.xw_slots();
        let out_dtype = self.check_dtypes(&|i| opt_arg(inputs, i).map(|t| t.dtype()))?;
        let (x, w) = (arg(inputs, xs)?, arg(inputs, ws)?);
        let (xsh, wsh) = (x.shape(), w.shape());
        if xsh.len() < 3 || wsh.len() != xsh.len() {
            return Err(OpError::Shape(format!(
                "convolution of shapes {xsh:?} and {wsh:?}"
            )));
        }
        let s = ConvShape {
            batch: xsh[0],
            in_ch: xsh[1],
            out_ch: wsh[0],
            groups: self.group,
        };
        if s.in_ch != wsh[1] * self.group {
            return Err(OpError::Shape(format!(
                "X has {} channels, W expects {} x group {}",
                s.in_ch, wsh[1], self.group
            )));
        }
        let attrs = self.window.attrs(&wsh[2..])?;
        if attrs.kernel != wsh[2..] {
            return Err(OpError::Shape(format!(
                "kernel_shape {:?} differs from W's {:?}",
                attrs.kernel,
                &wsh[2..]
            )));
        }
        let geom = attrs.resolve(&xsh[2..])?;
        let mut shape = vec![s.batch, s.out_ch];
        shape.extend(&geom.output);
        let no = geom.output_size();
        match self.kind {
            Kind::Float => {
                let mut y = conv_nd(&s, &geom, &x.to_f64_vec(), &w.to_f64_vec())?;
                if let Some(b) = opt_arg(inputs, 2) {
                    add_bias(&mut y, &b.to_f64_vec(), s.out_ch, no)?;
                }
                let out = dispatch_float!(out_dtype, T => Tensor::new(shape, y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
                    else return Err(OpError::DType { index: 0, dtype: out_dtype }));
                Ok(vec![out])
            }
            Kind::Integer => {
                let xz = match opt_arg(inputs, 2) {
                    Some(t) => scalar_f64(t, "x_zero_point")?,
                    None => 0.0,
                };
                let wz = match opt_arg(inputs, 3) {
                    Some(t) => per_channel(t, s.out_ch, "w_zero_point")?,
                    None => vec![0.0; s.out_ch],
                };
                let y = integer_conv(&s, &geom, x, w, xz, &wz)?;
                Ok(vec![Tensor::new(
                    shape,
                    y.iter().map(|&v| v as i32).collect(),
                )?])
            }
            Kind::QLinear => {
                let xsc = scalar_f64(arg(inputs, 1)?, "x_scale")?;
                let xz = scalar_f64(arg(inputs, 2)?, "x_zero_point")?;
                let wsc = per_channel(arg(inputs, 4)?, s.out_ch, "w_scale")?;
                let wz = per_channel(arg(inputs, 5)?, s.out_ch, "w_zero_point")?;
                let ysc = scalar_f64(arg(inputs, 6)?, "y_scale")?;
                let yz = scalar_f64(arg(inputs, 7)?, "y_zero_point")?;
                let mut acc = integer_conv(&s, &geom, x, w, xz, &wz)?;
                if let Some(b) = opt_arg(inputs, 8) {
                    add_bias(&mut acc, &b.to_f64_vec(), s.out_ch, no)?;
                }
                for (i, v) in acc.iter_mut().enumerate() {
                    let m = (i / no.max(1)) % s.out_ch;
                    *v = *v * xsc * wsc[m] / ysc;
                }
                Ok(vec![quantize_to(&acc, shape, yz, out_dtype)?])
            }
        }
    }
}

impl Conv {
    /// The definition of a float convolution: `acc[n, m, o…] = Σ_{c, k…} x[n, g·C/G + c,
    /// o·s + k·d - pad] · w[m, c, k…]` over the channels of `m`'s group `g` and the kernel
    /// window, with reads in the padding replaced by zero (a select on the index bounds);
    /// accumulated in f32 for 16-bit floats; then `+ bias[m]` and the cast to the output type.
    fn float_compute(
        &self,
        inputs: &[Option<ComputeInput<'_>>],
    ) -> Result<Option<ComputeDef>, OpError> {
        let dtype = self.check_dtypes(&|i| opt_input(inputs, i).map(|v| v.dtype))?;
        let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
        let (xsh, wsh) = (x.shape, w.shape);
        if xsh.len() < 3 || wsh.len() != xsh.len() {
            return Err(OpError::Shape(format!(
                "convolution of shapes {xsh:?} and {wsh:?}"
            )));
        }
        let (in_ch, out_ch, cg) = (xsh[1], wsh[0], wsh[1]);
        if in_ch != cg * self.group || out_ch % self.group != 0 {
            return Err(OpError::Shape(format!(
                "X has {in_ch} channels, W {wsh:?} with group {}",
                self.group
            )));
        }
        let attrs = self.window.attrs(&wsh[2..])?;
        if attrs.kernel != wsh[2..] {
            return Err(OpError::Shape(format!(
                "kernel_shape {:?} differs from W's {:?}",
                attrs.kernel,
                &wsh[2..]
            )));
        }
        let geom = attrs.resolve(&xsh[2..])?;
        let bias = opt_input(inputs, 2);
        if let Some(b) = bias {
            if b.shape != [out_ch] {
                return Err(OpError::Shape(format!(
                    "bias has shape {:?}, expected [{out_ch}]",
                    b.shape
                )));
            }
        }
        let mut shape = vec![xsh[0], out_ch];
        shape.extend(&geom.output);
        if !fits_i32(&[xsh, wsh, &shape]) {
            return Ok(None);
        }
        let t = dtype.to_ir();
        let acc = math_dtype(t);
        let vars = placeholders(inputs);
        let (vx, vw) = (vars[0].clone(), vars[1].clone());
        let per_group = out_ch / self.group;
        let mut reduce_shape = vec![cg];
        reduce_shape.extend(&geom.kernel);
        let group = self.group;
        let (sum, sum_node) = reduce(
            "acc",
            acc,
            dims(&shape),
            dims(&reduce_shape),
            ReduceKind::Sum,
            |i, r| {
                let read = window_read(&geom, &i[2..], &r[1..]);
                let channel = if group == 1 {
                    r[0].clone()
                } else {
                    i[1].clone() / Expr::int(per_group as i64) * Expr::int(cg as i64) + r[0].clone()
                };
                let mut xi = vec![i[0].clone(), channel];
                xi.extend(read.index);
                let mut wi = vec![i[1].clone()];
                wi.extend(r.iter().cloned());
                let (xv, wv) = (vx.at(xi), vw.at(wi));
                let product = if acc == t {
                    xv * wv
                } else {
                    xv.cast(acc) * wv.cast(acc)
                };
                guarded(&read.inside, product, Expr::zero(acc))
            },
        );
        if bias.is_none() && acc == t {
            return finish(vars, vec![(sum.clone(), sum_node)], vec![sum]).map(Some);
        }
        let vb = vars[2].clone();
        let (out, out_node) = grid("out", t, dims(&shape), |i| {
            let mut v = sum.at(i.to_vec());
            if bias.is_some() {
                let b = vb.at([i[1].clone()]);
                v = v + if acc == t { b } else { b.cast(acc) };
            }
            if acc == t {
                v
            } else {
                v.cast(t)
            }
        });
        finish(
            vars,
            vec![(sum, sum_node), (out.clone(), out_node)],
            vec![out],
        )
        .map(Some)
    }
}

/// `conv(x - xz, w - wz[m])` in exact f64 arithmetic.
fn integer_conv(
    s: &ConvShape,
    geom: &crate::kernels::window::Geometry,
    x: &Tensor,
    w: &Tensor,
    xz: f64,
    wz: &[f64],
) -> Result<Vec<f64>, OpError> {
    let xv: Vec<f64> = x.to_f64_vec().iter().map(|v| v - xz).collect();
    let per = w.numel() / s.out_ch.max(1);
    let wv: Vec<f64> = w
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, v)| v - wz[i / per.max(1)])
        .collect();
    conv_nd(s, geom, &xv, &wv)
}

/// `y[n, m, :] += b[m]` for `y` of shape `[_, channels, plane]`.
fn add_bias(y: &mut [f64], b: &[f64], channels: usize, plane: usize) -> Result<(), OpError> {
    if b.len() != channels {
        return Err(OpError::Shape(format!(
            "bias has {} elements, expected {channels}",
            b.len()
        )));
    }
    for (i, v) in y.iter_mut().enumerate() {
        *v += b[(i / plane.max(1)) % channels];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n)
                .map(|_| {
                    let v = self.next();
                    if v.abs() < 0.05 {
                        0.5
                    } else {
                        v
                    }
                } as f32)
                .collect()
        }
    }

    fn build(kind: Kind, attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        let name = match kind {
            Kind::Float => "Conv",
            Kind::Integer => "ConvInteger",
            Kind::QLinear => "QLinearConv",
        };
        build_op("", name, 17, attrs, 3, 1)
    }

    /// Direct 2-D definition in f64 with explicit pads.
    #[allow(clippy::too_many_arguments)]
    fn reference_2d(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        b: &[f32],
        g: usize,
        st: [usize; 2],
        dl: [usize; 2],
        pads: [usize; 4],
    ) -> (Vec<usize>, Vec<f64>) {
        let [n, c, h, wd] = xs;
        let [m, cg, kh, kw] = ws;
        let oh = (h + pads[0] + pads[2] - (kh - 1) * dl[0] - 1) / st[0] + 1;
        let ow = (wd + pads[1] + pads[3] - (kw - 1) * dl[1] - 1) / st[1] + 1;
        let mg = m / g;
        let mut y = vec![0f64; n * m * oh * ow];
        for ni in 0..n {
            for mi in 0..m {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = b.get(mi).map_or(0.0, |&v| v as f64);
                        let grp = mi / mg;
                        for ci in 0..cg {
                            for a in 0..kh {
                                for bb in 0..kw {
                                    let hi = (i * st[0] + a * dl[0]) as i64 - pads[0] as i64;
                                    let wi = (j * st[1] + bb * dl[1]) as i64 - pads[1] as i64;
                                    if hi < 0 || wi < 0 || hi >= h as i64 || wi >= wd as i64 {
                                        continue;
                                    }
                                    let xv = x[((ni * c + grp * cg + ci) * h + hi as usize) * wd
                                        + wi as usize]
                                        as f64;
                                    acc += xv * w[((mi * cg + ci) * kh + a) * kw + bb] as f64;
                                }
                            }
                        }
                        y[((ni * m + mi) * oh + i) * ow + j] = acc;
                    }
                }
            }
        }
        (vec![n, m, oh, ow], y)
    }

    #[test]
    fn conv2d_groups_strides_dilations_pads_match_direct_loops() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        let (xs, ws) = ([2, 6, 11, 9], [4, 3, 3, 2]);
        let x = rng.vec(xs.iter().product());
        let w = rng.vec(ws.iter().product());
        let b = rng.vec(4);
        let op = build(
            Kind::Float,
            &[
                ("group", Attribute::Int(2)),
                ("strides", Attribute::Ints(vec![2, 1])),
                ("dilations", Attribute::Ints(vec![1, 2])),
                ("pads", Attribute::Ints(vec![1, 0, 2, 3])),
            ],
        )
        .unwrap();
        let tx = Tensor::new(xs.to_vec(), x.clone()).unwrap();
        let tw = Tensor::new(ws.to_vec(), w.clone()).unwrap();
        let tb = Tensor::new(vec![4], b.clone()).unwrap();
        let y = op
            .eval(&[Some(&tx), Some(&tw), Some(&tb)])
            .unwrap()
            .remove(0);
        let (shape, want) = reference_2d(&x, xs, &w, ws, &b, 2, [2, 1], [1, 2], [1, 0, 2, 3]);
        assert_eq!(y.shape(), &shape[..]);
        for (g, w) in y.to_f64_vec().iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
        }
        let inferred = op
            .infer(&[
                Some(InferInput {
                    ty: &TensorType::fixed(DType::F32, &xs),
                    value: None,
                }),
                Some(InferInput {
                    ty: &TensorType::fixed(DType::F32, &ws),
                    value: None,
                }),
            ])
            .unwrap();
        assert_eq!(inferred[0], TensorType::fixed(DType::F32, &shape));
    }

    #[test]
    fn same_upper_and_lower_pad_the_odd_element_on_opposite_sides() {
        // 1-D, input 5, kernel 2, stride 1: total pad 1, SAME_UPPER pads after, SAME_LOWER before.
        let x = Tensor::new(vec![1, 1, 5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let w = Tensor::new(vec![1, 1, 2], vec![1.0f32, 10.0]).unwrap();
        let up = build(
            Kind::Float,
            &[("auto_pad", Attribute::String("SAME_UPPER".into()))],
        )
        .unwrap();
        let lo = build(
            Kind::Float,
            &[("auto_pad", Attribute::String("SAME_LOWER".into()))],
        )
        .unwrap();
        let yu = up.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        let yl = lo.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        assert_eq!(yu.to_f64_vec(), vec![21.0, 32.0, 43.0, 54.0, 5.0]);
        assert_eq!(yl.to_f64_vec(), vec![10.0, 21.0, 32.0, 43.0, 54.0]);
    }

    #[test]
    fn conv_integer_subtracts_zero_points_exactly() {
        let x = Tensor::new(vec![1, 1, 2, 3], vec![200u8, 3, 17, 90, 255, 1]).unwrap();
        let w = Tensor::new(vec![2, 1, 1, 2], vec![1u8, 2, 250, 7]).unwrap();
        let xz = Tensor::scalar(5u8);
        let wz = Tensor::new(vec![2], vec![1u8, 9]).unwrap();
        let op = build(Kind::Integer, &[]).unwrap();
        let y = op
            .eval(&[Some(&x), Some(&w), Some(&xz), Some(&wz)])
            .unwrap()
            .remove(0);
        assert_eq!(y.dtype(), DType::I32);
        // channel 0: (x-5)*(0) + (x'-5)*1 ; channel 1: (x-5)*241 + (x'-5)*(-2)
        let xs: Vec<i32> = vec![195, -2, 12, 85, 250, -4];
        let mut want = vec![];
        for (w0, w1) in [(0, 1), (241, -2)] {
            for r in 0..2 {
                for c in 0..2 {
                    want.push(xs[r * 3 + c] * w0 + xs[r * 3 + c + 1] * w1);
                }
            }
        }
        assert_eq!(y.as_slice::<i32>().unwrap(), &want[..]);
    }

    #[test]
    fn errors_are_typed() {
        let op = build(Kind::Float, &[("group", Attribute::Int(4))]).unwrap();
        let x = Tensor::new(vec![1, 6, 3, 3], vec![1.0f32; 54]).unwrap();
        let w = Tensor::new(vec![2, 3, 1, 1], vec![1.0f32; 6]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&w)]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(
            build(Kind::Float, &[("group", Attribute::Int(0))]),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(
            build(
                Kind::Float,
                &[("auto_pad", Attribute::String("BOGUS".into()))]
            ),
            Err(OpError::Attribute { .. })
        ));
        let op = build(Kind::Float, &[("pads", Attribute::Ints(vec![0, 0]))]).unwrap();
        let w = Tensor::new(vec![2, 6, 1, 1], vec![1.0f32; 12]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&w)]),
            Err(OpError::Attribute { .. })
        ));
        let xi = Tensor::new(vec![1, 6, 3, 3], vec![1i32; 54]).unwrap();
        assert!(matches!(
            build(Kind::Float, &[])
                .unwrap()
                .eval(&[Some(&xi), Some(&w)]),
            Err(OpError::DType { .. })
        ));
        let big = Tensor::new(vec![1, 6, 1, 1], vec![1.0f32; 6]).unwrap();
        let w3 = Tensor::new(vec![1, 6, 3, 3], vec![1.0f32; 54]).unwrap();
        assert!(matches!(
            build(Kind::Float, &[])
                .unwrap()
                .eval(&[Some(&big), Some(&w3)]),
            Err(OpError::Shape(_))
        ));
    }
}
