//! Discrete Fourier transforms: DFT (opset 17: `axis` attribute, default 1; opset 20+: `axis`
//! input, default -2) and STFT (opset 17).
//!
//! Signals carry a trailing complex axis of size 1 (real) or 2 (real, imaginary); outputs are
//! complex (`..., 2`).
//! - DFT transforms along `axis` (`[-r, -2] ∪ [0, r - 2]`) with length `dft_length` (default the
//!   axis size; the signal is truncated or zero-padded to it): `X[k] = Σ_n x[n]·e^{∓2πikn/N}`,
//!   the inverse (`inverse = 1`) using `+` and dividing by `N`. `onesided = 1` keeps bins
//!   `0..=N/2` of a real input's forward transform.
//! - STFT of `signal [batch, len, 1|2]` (or a real `[batch, len]`, as PyTorch's exporter writes
//!   it and ONNX Runtime accepts) with `frame_step`, optional `window [W]` and
//!   `frame_length` (default `W`, or `len` without a window): `frames = 1 + (len - L) / step`
//!   frames, each `x[f·step + n]·window[n]` for `n < L`, DFT of length `L`; output
//!   `[batch, frames, L/2 + 1 (onesided, default) or L, 2]`.
//!
//! Direct O(N²) sums in f64 (the reference, not a fast transform).

use std::f64::consts::PI;

use crate::kernels::movement::scalar_i64;
use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, infer_opt, opt_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

fn flag(c: &crate::operator::OpContext<'_>, name: &str, default: i64) -> Result<bool, OpError> {
    match c.attrs.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

#[derive(Debug)]
struct Dft {
    /// Opset 17: the `axis` attribute; opset 20+: `None` (input 2, default -2).
    axis_attr: Option<i64>,
    inverse: bool,
    onesided: bool,
}

#[derive(Debug)]
struct Stft {
    onesided: bool,
}

/// Registers DFT and STFT.
pub fn register(r: &mut Registry) {
    r.register("", "DFT", 17..=19, |c| {
        Ok(Box::new(Dft {
            axis_attr: Some(c.attrs.int_or("axis", 1)?),
            inverse: flag(c, "inverse", 0)?,
            onesided: flag(c, "onesided", 0)?,
        }))
    });
    r.register("", "DFT", 20..=LATEST_OPSET, |c| {
        Ok(Box::new(Dft {
            axis_attr: None,
            inverse: flag(c, "inverse", 0)?,
            onesided: flag(c, "onesided", 0)?,
        }))
    });
    r.register("", "STFT", 17..=LATEST_OPSET, |c| {
        Ok(Box::new(Stft {
            onesided: flag(c, "onesided", 1)?,
        }))
    });
}

/// The DFT of `n` complex points `(re, im)` read by `at(j)` (`None` = zero padding), `bins`
/// output bins, sign -1 (forward) or +1 (inverse), scaled by `scale`.
fn dft(n: usize, bins: usize, inverse: bool, at: impl Fn(usize) -> Option<(f64, f64)>) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    let x: Vec<(f64, f64)> = (0..n).map(|j| at(j).unwrap_or((0.0, 0.0))).collect();
    // The n angles `2π·m/n` once; `k·j` is reduced mod n first so each angle stays exact.
    let turns: Vec<(f64, f64)> = (0..n)
        .map(|m| (sign * 2.0 * PI * m as f64 / n as f64).sin_cos())
        .collect();
    (0..bins)
        .map(|k| {
            let (mut re, mut im) = (0.0, 0.0);
            for (j, &(a, b)) in x.iter().enumerate() {
                let (s, c) = turns[(k * j) % n];
                re += a * c - b * s;
                im += a * s + b * c;
            }
            (re * scale, im * scale)
        })
        .collect()
}

fn positive(t: &Tensor, what: &str) -> Result<usize, OpError> {
    let v = scalar_i64(t, what, false)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| OpError::Invalid(format!("{what} must be positive, got {v}")))
}

impl Dft {
    fn axis_value(&self, axis_input: Option<&Tensor>) -> Result<i64, OpError> {
        match (self.axis_attr, axis_input) {
            (Some(a), _) => Ok(a),
            (None, Some(t)) => scalar_i64(t, "axis", false),
            (None, None) => Ok(-2),
        }
    }

    fn bins(&self, n: usize) -> usize {
        if self.onesided {
            n / 2 + 1
        } else {
            n
        }
    }
}

/// Normalizes a DFT axis: `[-r, -2] ∪ [0, r - 2]`.
fn dft_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a > r - 2 {
        return Err(OpError::Invalid(format!(
            "DFT axis {axis} is outside [-{r}, -2] ∪ [0, {}] for rank {r}",
            r - 2
        )));
    }
    Ok(a as usize)
}

impl Operator for Dft {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let Some(dims) = &x.ty.shape else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let axis = match (self.axis_attr, infer_opt(inputs, 2)) {
            (Some(a), _) => Some(a),
            (None, None) => Some(-2),
            (None, Some(t)) => t.value.map(|v| scalar_i64(v, "axis", false)).transpose()?,
        };
        let mut out = dims.clone();
        if let Some(last) = out.last_mut() {
            *last = Dim::Fixed(2);
        }
        match axis {
            Some(a) => {
                let a = dft_axis(a, dims.len())?;
                let n = match infer_opt(inputs, 1) {
                    Some(l) => match l.value {
                        Some(v) => Some(positive(v, "dft_length")?),
                        None => None,
                    },
                    None => dims[a].fixed(),
                };
                out[a] = n.map_or(Dim::Unknown, |n| Dim::Fixed(self.bins(n)));
            }
            None => {
                for d in out.iter_mut().rev().skip(1) {
                    *d = Dim::Unknown;
                }
            }
        }
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(out),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        let s = x.shape();
        let complex = match s.last() {
            Some(1) => false,
            Some(2) => true,
            _ => {
                return Err(OpError::Shape(format!(
                    "the last axis must have size 1 (real) or 2 (complex), got {s:?}"
                )))
            }
        };
        if self.onesided && (complex || self.inverse) {
            return Err(OpError::Invalid(
                "onesided applies to the forward transform of a real input".into(),
            ));
        }
        let axis = dft_axis(self.axis_value(opt_arg(inputs, 2))?, s.len())?;
        let n = match opt_arg(inputs, 1) {
            Some(l) => positive(l, "dft_length")?,
            None => s[axis],
        };
        let bins = self.bins(n);
        let (outer, len, inner): (usize, usize, usize) = (
            s[..axis].iter().product(),
            s[axis],
            s[axis + 1..s.len() - 1].iter().product(),
        );
        let c = s[s.len() - 1];
        let xv = x.to_f64_vec();
        let mut out = vec![0.0f64; outer * bins * inner * 2];
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| {
                    (j < len).then(|| {
                        let base = ((o * len + j) * inner + i) * c;
                        (xv[base], if complex { xv[base + 1] } else { 0.0 })
                    })
                };
                for (k, (re, im)) in dft(n, bins, self.inverse, at).into_iter().enumerate() {
                    let base = ((o * bins + k) * inner + i) * 2;
                    out[base] = re;
                    out[base + 1] = im;
                }
            }
        }
        let mut shape = s.to_vec();
        shape[axis] = bins;
        let last = shape.len() - 1;
        shape[last] = 2;
        Ok(vec![float_tensor(x.dtype(), shape, &out, 0)?])
    }
}

impl Operator for Stft {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let value = |i: usize| infer_opt(inputs, i).and_then(|t| t.value);
        let (batch, len) = match x.ty.shape.as_deref() {
            Some([b, l, _] | [b, l]) => (b.clone(), l.fixed()),
            _ => (Dim::Unknown, None),
        };
        let frame = match (infer_opt(inputs, 3), infer_opt(inputs, 2)) {
            (Some(l), _) => l.value.map(|v| positive(v, "frame_length")).transpose()?,
            (None, Some(w)) => w.ty.shape.as_deref().and_then(|s| s.first()?.fixed()),
            (None, None) => len,
        };
        let step = value(1).map(|v| positive(v, "frame_step")).transpose()?;
        let frames = match (len, frame, step) {
            (Some(l), Some(f), Some(s)) if l >= f => Dim::Fixed(1 + (l - f) / s),
            _ => Dim::Unknown,
        };
        let bins = frame.map_or(Dim::Unknown, |f| {
            Dim::Fixed(if self.onesided { f / 2 + 1 } else { f })
        });
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(vec![batch, frames, bins, Dim::Fixed(2)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        let (batch, len, c) = match *x.shape() {
            [batch, len, c] => (batch, len, c),
            [batch, len] => (batch, len, 1),
            _ => {
                return Err(OpError::Shape(format!(
                    "signal must be [batch, length, 1 or 2] (or a real [batch, length]), got {:?}",
                    x.shape()
                )))
            }
        };
        if c != 1 && c != 2 {
            return Err(OpError::Shape(format!(
                "signal's last axis must be 1 or 2, got {c}"
            )));
        }
        let step = positive(arg(inputs, 1)?, "frame_step")?;
        let window = opt_arg(inputs, 2)
            .map(|w| {
                if w.rank() != 1 {
                    return Err(OpError::Shape(format!(
                        "window must be 1-D, got {:?}",
                        w.shape()
                    )));
                }
                Ok(w.to_f64_vec())
            })
            .transpose()?;
        let frame = match (opt_arg(inputs, 3), &window) {
            (Some(l), _) => positive(l, "frame_length")?,
            (None, Some(w)) => w.len(),
            (None, None) => len,
        };
        if let Some(w) = &window {
            if w.len() != frame {
                return Err(OpError::Shape(format!(
                    "window has {} points, frame_length is {frame}",
                    w.len()
                )));
            }
        }
        if frame > len || (self.onesided && c == 2) {
            return Err(OpError::Invalid(format!(
                "frame_length {frame} exceeds the signal length {len}, or onesided on a complex signal"
            )));
        }
        let frames = 1 + (len - frame) / step;
        let bins = if self.onesided { frame / 2 + 1 } else { frame };
        let xv = x.to_f64_vec();
        let mut out = Vec::with_capacity(batch * frames * bins * 2);
        for b in 0..batch {
            for f in 0..frames {
                let at = |n: usize| {
                    let w = window.as_ref().map_or(1.0, |w| w[n]);
                    let base = (b * len + f * step + n) * c;
                    Some((xv[base] * w, if c == 2 { xv[base + 1] * w } else { 0.0 }))
                };
                for (re, im) in dft(frame, bins, false, at) {
                    out.push(re);
                    out.push(im);
                }
            }
        }
        Ok(vec![float_tensor(
            x.dtype(),
            vec![batch, frames, bins, 2],
            &out,
            0,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::kernels::movement::testing::Rng;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    /// Forward then inverse DFT gives the signal back; a unit impulse transforms to ones.
    #[test]
    fn dft_round_trip_and_impulse() {
        let mut rng = Rng::new(9);
        let x = rng.tensor(&[2, 7, 2]);
        let fwd = build_op("", "DFT", 20, &[], 3, 1).unwrap();
        let inv = build_op("", "DFT", 20, &[("inverse", Attribute::Int(1))], 3, 1).unwrap();
        let y = fwd.eval(&[Some(&x)]).unwrap().remove(0);
        let z = inv.eval(&[Some(&y)]).unwrap().remove(0);
        for (a, b) in z.to_f64_vec().iter().zip(x.to_f64_vec()) {
            assert!((a - b).abs() < 1e-5);
        }
        let mut imp = vec![0f32; 5];
        imp[0] = 1.0;
        let imp = Tensor::new(vec![1, 5, 1], imp).unwrap();
        let one = build_op("", "DFT", 20, &[("onesided", Attribute::Int(1))], 3, 1).unwrap();
        let y = one.eval(&[Some(&imp)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 3, 2]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
        // Opset 17 default axis 1; a padded length and the axis input of opset 20.
        let old = build_op("", "DFT", 17, &[], 2, 1).unwrap();
        let n8 = Tensor::scalar(8i64);
        let a = old.eval(&[Some(&x), Some(&n8)]).unwrap().remove(0);
        let ax = Tensor::scalar(1i64);
        let b = fwd.eval(&[Some(&x), Some(&n8), Some(&ax)]).unwrap().remove(0);
        assert_eq!(a.shape(), &[2, 8, 2]);
        assert_eq!(a, b);
        assert!(fwd.eval(&[Some(&x), None, Some(&Tensor::scalar(2i64))]).is_err());
    }

    /// STFT frames equal DFTs of the windowed slices.
    #[test]
    fn stft_matches_framed_dft() {
        let mut rng = Rng::new(4);
        let x = rng.tensor(&[1, 10, 1]);
        let w = rng.tensor(&[4]);
        let op = build_op("", "STFT", 17, &[], 4, 1).unwrap();
        let step = Tensor::scalar(3i64);
        let y = op.eval(&[Some(&x), Some(&step), Some(&w)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 3, 3, 2]);
        let (xv, wv, yv) = (x.to_f64_vec(), w.to_f64_vec(), y.to_f64_vec());
        for f in 0..3 {
            for k in 0..3 {
                let (mut re, mut im) = (0.0, 0.0);
                for n in 0..4 {
                    let v = xv[f * 3 + n] * wv[n];
                    let ang = -2.0 * std::f64::consts::PI * (k * n) as f64 / 4.0;
                    re += v * ang.cos();
                    im += v * ang.sin();
                }
                let o = (f * 3 + k) * 2;
                assert!((yv[o] - re).abs() < 1e-5 && (yv[o + 1] - im).abs() < 1e-5);
            }
        }
        let long = Tensor::scalar(11i64);
        assert!(op.eval(&[Some(&x), Some(&step), None, Some(&long)]).is_err());
    }
}
