//! DeformConv (opset 19+), 2-D: convolution whose kernel taps are moved by learned offsets.
//!
//! `X [N, C, H, W]`, `W [M, C/group, kH, kW]`, `offset [N, G·kH·kW·2, oH, oW]` (per offset
//! group `G`, per tap, `(Δy, Δx)`), optional `B [M]` and `mask [N, G·kH·kW, oH, oW]`
//! (default 1). Output `(n, m, i, j) = B[m] + Σ_{c, a, b} W[m, c, a, b]·mask·X̃(n, c, y, x)` over
//! the input channels `c` of `m`'s group, with `y = i·stride_h - pad_top + a·dilation_h + Δy`,
//! `x` likewise, and `X̃` the bilinear interpolation of channel `c` at `(y, x)` where pixels
//! outside the image read 0. Input channel `c` uses offset group `c / (C / G)`. Computed in
//! f64.

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, opt_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct DeformConv {
    dilations: [usize; 2],
    strides: [usize; 2],
    /// `[top, left, bottom, right]`.
    pads: [usize; 4],
    group: usize,
    offset_group: usize,
    kernel: Option<[usize; 2]>,
}

fn pair(c: &OpContext<'_>, name: &str, n: usize, default: usize, min: i64) -> Result<Vec<usize>, OpError> {
    match c.attrs.ints(name)? {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n && v.iter().all(|&x| x >= min) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => Err(OpError::attr(
            name,
            format!("needs {n} values >= {min} (2-D only), got {v:?}"),
        )),
    }
}

/// Registers DeformConv.
pub fn register(r: &mut Registry) {
    r.register("", "DeformConv", 19..=LATEST_OPSET, |c| {
        let d = pair(c, "dilations", 2, 1, 1)?;
        let s = pair(c, "strides", 2, 1, 1)?;
        let p = pair(c, "pads", 4, 0, 0)?;
        let kernel = match c.attrs.ints("kernel_shape")? {
            None => None,
            Some(_) => {
                let k = pair(c, "kernel_shape", 2, 1, 1)?;
                Some([k[0], k[1]])
            }
        };
        let positive = |name: &str| -> Result<usize, OpError> {
            let v = c.attrs.int_or(name, 1)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| OpError::attr(name, format!("must be positive, got {v}")))
        };
        Ok(Box::new(DeformConv {
            dilations: [d[0], d[1]],
            strides: [s[0], s[1]],
            pads: [p[0], p[1], p[2], p[3]],
            group: positive("group")?,
            offset_group: positive("offset_group")?,
            kernel,
        }))
    });
}

/// Bilinear interpolation of the `h × w` plane at `(y, x)`, pixels outside reading 0.
fn sample(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ty, tx) = (y - y0, x - x0);
    let (y0, x0) = (y0 as i64, x0 as i64);
    let at = |yy: i64, xx: i64| -> f64 {
        if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
            0.0
        } else {
            plane[yy as usize * w + xx as usize]
        }
    };
    (1.0 - ty) * ((1.0 - tx) * at(y0, x0) + tx * at(y0, x0 + 1))
        + ty * ((1.0 - tx) * at(y0 + 1, x0) + tx * at(y0 + 1, x0 + 1))
}

impl Operator for DeformConv {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let w = infer_arg(inputs, 1)?;
        let off = infer_arg(inputs, 2)?;
        check_dtype(0, x.ty.dtype, float)?;
        for (i, t) in [(1, &w), (2, &off)] {
            if t.ty.dtype != x.ty.dtype {
                return Err(OpError::DType {
                    index: i,
                    dtype: t.ty.dtype,
                });
            }
        }
        let get = |t: &InferInput<'_>, i: usize| -> Dim {
            t.ty.shape
                .as_ref()
                .and_then(|s| s.get(i).cloned())
                .unwrap_or(Dim::Unknown)
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(vec![get(&x, 0), get(&w, 0), get(&off, 2), get(&off, 3)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let w = arg(inputs, 1)?;
        let off = arg(inputs, 2)?;
        check_dtype(0, x.dtype(), float)?;
        let (&[n, c, h, iw], &[m, cg, kh, kw], &[on, oc, oh, ow]) =
            (x.shape(), w.shape(), off.shape())
        else {
            return Err(OpError::Shape(format!(
                "DeformConv is 2-D: X {:?}, W {:?}, offset {:?} must all be 4-D",
                x.shape(),
                w.shape(),
                off.shape()
            )));
        };
        let (g, og) = (self.group, self.offset_group);
        let taps = kh * kw;
        let bad = |why: String| Err(OpError::Shape(why));
        if self.kernel.is_some_and(|k| k != [kh, kw]) {
            return bad(format!("kernel_shape {:?} != W's [{kh}, {kw}]", self.kernel));
        }
        if cg * g != c || m % g != 0 || c % og != 0 || on != n || oc != og * taps * 2 {
            return bad(format!(
                "inconsistent shapes for group {g}, offset_group {og}: X {:?}, W {:?}, offset {:?}",
                x.shape(),
                w.shape(),
                off.shape()
            ));
        }
        let span = |k: usize, d: usize| (k - 1) * d + 1;
        let expect = |size: usize, p: usize, k: usize, d: usize, s: usize| {
            (size + p).checked_sub(span(k, d)).map(|v| v / s + 1)
        };
        let (ph, pw) = (self.pads[0] + self.pads[2], self.pads[1] + self.pads[3]);
        if expect(h, ph, kh, self.dilations[0], self.strides[0]) != Some(oh)
            || expect(iw, pw, kw, self.dilations[1], self.strides[1]) != Some(ow)
        {
            return bad(format!(
                "offset's output size [{oh}, {ow}] does not match the convolution geometry"
            ));
        }
        let bias = match opt_arg(inputs, 3) {
            Some(b) if b.shape() == [m] => b.to_f64_vec(),
            Some(b) => return bad(format!("B must be [{m}], got {:?}", b.shape())),
            None => vec![0.0; m],
        };
        let mask = match opt_arg(inputs, 4) {
            Some(k) if k.shape() == [n, og * taps, oh, ow] => Some(k.to_f64_vec()),
            Some(k) => return bad(format!("mask has shape {:?}", k.shape())),
            None => None,
        };
        let (xv, wv, ov) = (x.to_f64_vec(), w.to_f64_vec(), off.to_f64_vec());
        let (mg, cpo) = (m / g, c / og);
        let mut out = vec![0.0f64; n * m * oh * ow];
        for b in 0..n {
            for ci in 0..c {
                let plane = &xv[(b * c + ci) * h * iw..(b * c + ci + 1) * h * iw];
                let ogi = ci / cpo;
                let gi = ci / cg;
                for i in 0..oh {
                    for j in 0..ow {
                        for a in 0..kh {
                            for bb in 0..kw {
                                let t = a * kw + bb;
                                let o_at = |comp: usize| {
                                    ov[(((b * og + ogi) * taps + t) * 2 + comp) * oh * ow + i * ow + j]
                                };
                                let y = (i * self.strides[0] + a * self.dilations[0]) as f64
                                    - self.pads[0] as f64
                                    + o_at(0);
                                let xx = (j * self.strides[1] + bb * self.dilations[1]) as f64
                                    - self.pads[1] as f64
                                    + o_at(1);
                                let mut v = sample(plane, h, iw, y, xx);
                                if let Some(mk) = &mask {
                                    v *= mk[((b * og + ogi) * taps + t) * oh * ow + i * ow + j];
                                }
                                if v == 0.0 {
                                    continue;
                                }
                                for mo in gi * mg..(gi + 1) * mg {
                                    let wt = wv[((mo * cg + ci % cg) * kh + a) * kw + bb];
                                    out[((b * m + mo) * oh + i) * ow + j] += wt * v;
                                }
                            }
                        }
                    }
                }
            }
        }
        for b in 0..n {
            for (mo, &bv) in bias.iter().enumerate() {
                for v in &mut out[(b * m + mo) * oh * ow..(b * m + mo + 1) * oh * ow] {
                    *v += bv;
                }
            }
        }
        Ok(vec![float_tensor(x.dtype(), vec![n, m, oh, ow], &out, 0)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::kernels::movement::testing::Rng;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    /// With zero offsets and no mask, DeformConv is a plain convolution; an offset of exactly
    /// one pixel shifts the taps by one.
    #[test]
    fn zero_offsets_are_a_convolution() {
        let mut rng = Rng::new(2);
        let (n, c, h, w, m, k) = (1usize, 4usize, 5usize, 6usize, 2usize, 3usize);
        let x = rng.tensor(&[n, c, h, w]);
        let wt = rng.tensor(&[m, c / 2, k, k]);
        let b = rng.tensor(&[m]);
        let op = build_op(
            "",
            "DeformConv",
            19,
            &[
                ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
                ("group", Attribute::Int(2)),
                ("offset_group", Attribute::Int(2)),
            ],
            5,
            1,
        )
        .unwrap();
        let zero = Tensor::new(vec![n, 2 * k * k * 2, h, w], vec![0f32; 2 * k * k * 2 * h * w]).unwrap();
        let y = op
            .eval(&[Some(&x), Some(&wt), Some(&zero), Some(&b)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[n, m, h, w]);
        let (xv, wv, bv, yv) = (x.to_f64_vec(), wt.to_f64_vec(), b.to_f64_vec(), y.to_f64_vec());
        for mo in 0..m {
            for i in 0..h {
                for j in 0..w {
                    let mut want = bv[mo];
                    for cl in 0..c / 2 {
                        let ci = mo * (c / 2) + cl;
                        for a in 0..k {
                            for bb in 0..k {
                                let (yy, xx) = (i as i64 + a as i64 - 1, j as i64 + bb as i64 - 1);
                                if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
                                    continue;
                                }
                                want += wv[((mo * (c / 2) + cl) * k + a) * k + bb]
                                    * xv[(ci * h + yy as usize) * w + xx as usize];
                            }
                        }
                    }
                    let got = yv[(mo * h + i) * w + j];
                    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
                }
            }
        }
        let bad = Tensor::new(vec![n, 3, h, w], vec![0f32; 3 * h * w]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&wt), Some(&bad)]).is_err());
    }
}
