//! RoiAlign (opset 10; 16+ with `coordinate_transformation_mode`): pools each region of
//! interest of `X [N, C, H, W]` into `[output_height, output_width]` bins.
//!
//! `rois [R, 4]` are `(x1, y1, x2, y2)` scaled by `spatial_scale` and shifted by -0.5 in
//! `half_pixel` mode (the default from opset 16; `output_half_pixel`, the only mode of opset
//! 10, does not shift and stretches regions smaller than one pixel to one pixel);
//! `batch_indices [R]` pick the image. Each bin averages (`mode = avg`) or takes the maximum
//! (`max`) of `g_h × g_w` bilinear samples at the centers of a regular sub-grid, with
//! `g = sampling_ratio` or, when it is 0, `ceil(bin size)`. A sample farther than one pixel
//! outside the image contributes 0; others are clamped into it. In `max` mode the maximum is
//! taken over the four weighted corner terms of every sample (as ONNX Runtime and the ONNX
//! reference define it). Output `[R, C, output_height, output_width]`, computed in f64.

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::value::Datum;
use crate::DType;

#[derive(Debug)]
struct RoiAlign {
    half_pixel: bool,
    max: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: usize,
    spatial_scale: f64,
}

fn build(c: &OpContext<'_>, modern: bool) -> Result<Box<dyn Operator>, OpError> {
    let half_pixel = if modern {
        match c
            .attrs
            .string_or("coordinate_transformation_mode", "half_pixel")?
            .as_str()
        {
            "half_pixel" => true,
            "output_half_pixel" => false,
            other => {
                return Err(OpError::attr(
                    "coordinate_transformation_mode",
                    format!("must be half_pixel or output_half_pixel, got `{other}`"),
                ))
            }
        }
    } else {
        false
    };
    let max = match c.attrs.string_or("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(OpError::attr("mode", format!("must be avg or max, got `{other}`"))),
    };
    let size = |name: &str, default: i64, min: i64| -> Result<usize, OpError> {
        let v = c.attrs.int_or(name, default)?;
        if v < min {
            return Err(OpError::attr(name, format!("must be >= {min}, got {v}")));
        }
        Ok(v as usize)
    };
    Ok(Box::new(RoiAlign {
        half_pixel,
        max,
        out_h: size("output_height", 1, 1)?,
        out_w: size("output_width", 1, 1)?,
        sampling_ratio: size("sampling_ratio", 0, 0)?,
        spatial_scale: c.attrs.float_or("spatial_scale", 1.0)? as f64,
    }))
}

/// Registers RoiAlign.
pub fn register(r: &mut Registry) {
    r.register("", "RoiAlign", 10..=15, |c| build(c, false));
    r.register("", "RoiAlign", 16..=LATEST_OPSET, |c| build(c, true));
}

/// The (flat offset, weight) corner terms of one bilinear sample.
type Terms = [(usize, f64); 4];

/// The four (flat offset, weight) corner terms of a bilinear sample at `(y, x)` in an
/// `h × w` plane, or `None` if the sample lies more than a pixel outside.
fn corner_terms(y: f64, x: f64, h: usize, w: usize) -> Option<Terms> {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return None;
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut yl, mut xl) = (y as usize, x as usize);
    let yh = if yl >= h - 1 {
        yl = h - 1;
        y = yl as f64;
        yl
    } else {
        yl + 1
    };
    let xh = if xl >= w - 1 {
        xl = w - 1;
        x = xl as f64;
        xl
    } else {
        xl + 1
    };
    let (ly, lx) = (y - yl as f64, x - xl as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some([
        (yl * w + xl, hy * hx),
        (yl * w + xh, hy * lx),
        (yh * w + xl, ly * hx),
        (yh * w + xh, ly * lx),
    ])
}

impl Operator for RoiAlign {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let rois = infer_arg(inputs, 1)?;
        let idx = infer_arg(inputs, 2)?;
        check_dtype(0, x.ty.dtype, float)?;
        check_dtype(2, idx.ty.dtype, |d| d.is_int())?;
        if rois.ty.dtype != x.ty.dtype {
            return Err(OpError::DType {
                index: 1,
                dtype: rois.ty.dtype,
            });
        }
        let r = match rois.ty.shape.as_deref() {
            Some([r, _]) => r.clone(),
            _ => Dim::Unknown,
        };
        let c = match x.ty.shape.as_deref() {
            Some([_, c, _, _]) => c.clone(),
            _ => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(vec![r, c, Dim::Fixed(self.out_h), Dim::Fixed(self.out_w)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, rois, idx) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let (images, [c, h, w]) = self.check(x, rois, idx)?;
        let (xv, rv) = (x.to_f64_vec(), rois.to_f64_vec());
        let (oh, ow) = (self.out_h, self.out_w);
        let mut out = Vec::with_capacity(images.len() * c * oh * ow);
        for (k, &b) in images.iter().enumerate() {
            let (bins, per_bin, count) = self.samples(&rv[k * 4..k * 4 + 4], h, w);
            for ch in 0..c {
                let plane = &xv[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
                for p in 0..oh * ow {
                    let samples = &bins[p * per_bin..(p + 1) * per_bin];
                    let values = samples.iter().map(|t| match t {
                        None => 0.0,
                        Some(t) if self.max => t
                            .iter()
                            .map(|&(o, wt)| wt * plane[o])
                            .fold(f64::NEG_INFINITY, f64::max),
                        Some(t) => t.iter().map(|&(o, wt)| wt * plane[o]).sum(),
                    });
                    out.push(if self.max {
                        values.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                            .unwrap_or(0.0)
                    } else {
                        values.sum::<f64>() / count
                    });
                }
            }
        }
        Ok(vec![float_tensor(x.dtype(), vec![images.len(), c, oh, ow], &out, 0)?])
    }

    /// `f32` features pooled in `f32` (sample positions and weights still computed in f64),
    /// the regions split over the host's threads; other dtypes run [`Operator::eval`].
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let tensor = |i: usize| match inputs.get(i) {
            Some(Some(Datum::Tensor(t))) => Some(t),
            _ => None,
        };
        let (Some(x), Some(rois), Some(idx)) = (tensor(0), tensor(1), tensor(2)) else {
            return self.eval_data(inputs);
        };
        if x.dtype() != DType::F32 {
            return self.eval_data(inputs);
        }
        let (images, [c, h, w]) = self.check(x, rois, idx)?;
        let (xv, rv) = (x.as_slice::<f32>()?, rois.to_f64_vec());
        let per_roi = c * self.out_h * self.out_w;
        let mut out = vec![0f32; images.len() * per_roi];
        let pool = |k: usize, dst: &mut [f32]| {
            let b = images[k];
            let (bins, per_bin, count) = self.samples(&rv[k * 4..k * 4 + 4], h, w);
            let inv = (1.0 / count) as f32;
            let mut at = 0;
            for ch in 0..c {
                let plane = &xv[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
                for p in 0..self.out_h * self.out_w {
                    let samples = &bins[p * per_bin..(p + 1) * per_bin];
                    let mut acc = if self.max { f32::NEG_INFINITY } else { 0.0 };
                    for t in samples {
                        match t {
                            None if self.max => acc = acc.max(0.0),
                            None => {}
                            Some(t) if self.max => {
                                for &(o, wt) in t {
                                    acc = acc.max(wt as f32 * plane[o]);
                                }
                            }
                            Some(t) => {
                                for &(o, wt) in t {
                                    acc += wt as f32 * plane[o];
                                }
                            }
                        }
                    }
                    dst[at] = if self.max {
                        if samples.is_empty() {
                            0.0
                        } else {
                            acc
                        }
                    } else {
                        acc * inv
                    };
                    at += 1;
                }
            }
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(images.len().max(1));
        if threads <= 1 || out.len() < 1 << 16 {
            for (k, dst) in out.chunks_mut(per_roi.max(1)).enumerate() {
                pool(k, dst);
            }
        } else {
            let per_thread = images.len().div_ceil(threads);
            std::thread::scope(|scope| {
                for (t, part) in out.chunks_mut(per_thread * per_roi).enumerate() {
                    let pool = &pool;
                    scope.spawn(move || {
                        for (i, dst) in part.chunks_mut(per_roi).enumerate() {
                            pool(t * per_thread + i, dst);
                        }
                    });
                }
            });
        }
        let shape = vec![images.len(), c, self.out_h, self.out_w];
        Ok(vec![Datum::Tensor(Tensor::new(shape, out)?)])
    }
}

impl RoiAlign {
    /// Checks the inputs' shapes and batch indices: the image of each region and the
    /// feature map's `[C, H, W]`.
    fn check(
        &self,
        x: &Tensor,
        rois: &Tensor,
        idx: &Tensor,
    ) -> Result<(Vec<usize>, [usize; 3]), OpError> {
        check_dtype(0, x.dtype(), float)?;
        let &[n, c, h, w] = x.shape() else {
            return Err(OpError::Shape(format!("X must be [N, C, H, W], got {:?}", x.shape())));
        };
        let &[r, 4] = rois.shape() else {
            return Err(OpError::Shape(format!("rois must be [R, 4], got {:?}", rois.shape())));
        };
        if idx.shape() != [r] || h == 0 || w == 0 {
            return Err(OpError::Shape(format!(
                "batch_indices must be [{r}] and the image non-empty, got {:?} and X {:?}",
                idx.shape(),
                x.shape()
            )));
        }
        let images = idx
            .to_i64_vec()
            .into_iter()
            .map(|b| {
                usize::try_from(b).ok().filter(|&b| b < n).ok_or_else(|| {
                    OpError::Invalid(format!("batch index {b} is out of range for {n} images"))
                })
            })
            .collect::<Result<Vec<usize>, OpError>>()?;
        Ok((images, [c, h, w]))
    }

    /// The bilinear samples of one region (`roi`: its `(x1, y1, x2, y2)`) over an `h × w`
    /// plane: for every output bin in row-major order its `g_h · g_w` samples' corner terms
    /// (`None`: outside the image), shared by every channel; the samples per bin (possibly
    /// 0); and the count an average divides by.
    fn samples(&self, roi: &[f64], h: usize, w: usize) -> (Vec<Option<Terms>>, usize, f64) {
        let (oh, ow) = (self.out_h, self.out_w);
        let off = if self.half_pixel { 0.5 } else { 0.0 };
        let (x0, y0) = (roi[0] * self.spatial_scale - off, roi[1] * self.spatial_scale - off);
        let (x1, y1) = (roi[2] * self.spatial_scale - off, roi[3] * self.spatial_scale - off);
        let (mut rw, mut rh) = (x1 - x0, y1 - y0);
        if !self.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / oh as f64, rw / ow as f64);
        let grid = |bin: f64| {
            if self.sampling_ratio > 0 {
                self.sampling_ratio
            } else {
                bin.ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(bh), grid(bw));
        let count = (gh * gw).max(1) as f64;
        let mut bins = Vec::with_capacity(oh * ow * gh * gw);
        for p in 0..oh * ow {
            let (ph, pw) = (p / ow, p % ow);
            for s in 0..gh * gw {
                let (iy, ix) = (s / gw, s % gw);
                let y = y0 + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                let xx = x0 + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                bins.push(corner_terms(y, xx, h, w));
            }
        }
        (bins, gh * gw, count)
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    /// On a linear ramp, bilinear sampling is exact, so an average over a bin is the ramp's
    /// value at the bin center.
    #[test]
    fn average_of_a_linear_ramp() {
        let (h, w) = (6usize, 8usize);
        let v: Vec<f32> = (0..h * w).map(|i| (2 * (i / w) + 3 * (i % w)) as f32).collect();
        let x = Tensor::new(vec![1, 1, h, w], v).unwrap();
        let op = build_op(
            "",
            "RoiAlign",
            16,
            &[
                ("output_height", Attribute::Int(2)),
                ("output_width", Attribute::Int(2)),
                ("sampling_ratio", Attribute::Int(2)),
            ],
            3,
            1,
        )
        .unwrap();
        // Region x in [1.5, 5.5], y in [1.5, 3.5] after the half-pixel shift.
        let rois = Tensor::new(vec![1, 4], vec![2.0f32, 2.0, 6.0, 4.0]).unwrap();
        let idx = Tensor::new(vec![1], vec![0i64]).unwrap();
        let y = op
            .eval(&[Some(&x), Some(&rois), Some(&idx)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[1, 1, 2, 2]);
        let got = y.to_f64_vec();
        for (p, g) in got.iter().enumerate() {
            let (ph, pw) = (p / 2, p % 2);
            let (cy, cx) = (1.5 + 0.5 + ph as f64, 1.5 + 1.0 + 2.0 * pw as f64);
            let want = 2.0 * cy + 3.0 * cx;
            assert!((g - want).abs() < 1e-9, "{got:?}");
        }
        let bad = Tensor::new(vec![1], vec![1i64]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&rois), Some(&bad)]).is_err());
    }

    /// The host step's `f32` pooling (split over threads) agrees with the float64 reference:
    /// averages and maxima, both coordinate modes, fixed and adaptive sampling grids, regions
    /// reaching outside the image and degenerate ones, two images.
    #[test]
    fn host_pooling_matches_the_reference() {
        use crate::value::Datum;
        let mut state = 3u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let (n, c, h, w, r) = (2usize, 48usize, 13usize, 11usize, 41usize);
        let x: Vec<f32> = (0..n * c * h * w).map(|_| next() * 4.0 - 2.0).collect();
        let mut rois = Vec::new();
        for i in 0..r {
            let (x0, y0) = (next() * 14.0 - 2.0, next() * 16.0 - 2.0);
            let (bw, bh) = if i % 10 == 0 { (0.0, 0.0) } else { (next() * 9.0, next() * 9.0) };
            rois.extend([x0, y0, x0 + bw, y0 + bh]);
        }
        let x = Tensor::new(vec![n, c, h, w], x).unwrap();
        let rois = Tensor::new(vec![r, 4], rois).unwrap();
        let idx = Tensor::new(vec![r], (0..r as i64).map(|i| i % 2).collect()).unwrap();
        for (mode, transform, ratio) in [
            ("avg", "half_pixel", 2),
            ("avg", "output_half_pixel", 0),
            ("max", "half_pixel", 0),
            ("max", "output_half_pixel", 3),
        ] {
            let op = build_op(
                "",
                "RoiAlign",
                16,
                &[
                    ("mode", Attribute::String(mode.into())),
                    ("coordinate_transformation_mode", Attribute::String(transform.into())),
                    ("sampling_ratio", Attribute::Int(ratio)),
                    ("output_height", Attribute::Int(7)),
                    ("output_width", Attribute::Int(5)),
                    ("spatial_scale", Attribute::Float(0.75)),
                ],
                3,
                1,
            )
            .unwrap();
            let want = op.eval(&[Some(&x), Some(&rois), Some(&idx)]).unwrap();
            let data = [x.clone(), rois.clone(), idx.clone()].map(Datum::Tensor);
            let refs: Vec<Option<&Datum>> = data.iter().map(Some).collect();
            let got = op.eval_host(&refs).unwrap();
            let Datum::Tensor(got) = &got[0] else {
                panic!("a tensor")
            };
            assert_eq!(got.shape(), want[0].shape());
            for (i, (g, w)) in got.to_f64_vec().iter().zip(want[0].to_f64_vec()).enumerate() {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{mode} {transform} {ratio} [{i}]: {g} vs {w}");
            }
        }
    }
}
