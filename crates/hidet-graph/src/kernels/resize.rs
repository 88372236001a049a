//! Separable N-d resampling (nearest, linear, cubic; optional antialias) in f64, following the
//! ONNX `Resize` definition: per axis, an output coordinate is mapped back to a fractional
//! input coordinate, then a small 1-D filter is applied around it.

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordMode {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
    /// Opset 11–12 only: `(x + 0.5) / scale`.
    TfHalfPixelForNn,
}

/// Rounding of the input coordinate in nearest mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// The interpolation filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Filter {
    Nearest(NearestMode),
    Linear,
    /// Keys cubic convolution with coefficient `a` (ONNX default -0.75).
    Cubic {
        a: f64,
    },
}

/// Everything but the sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResizeParams {
    pub filter: Filter,
    pub coord: CoordMode,
    /// Drop taps outside the input and renormalize the remaining weights.
    pub exclude_outside: bool,
    /// Widen linear/cubic filters by `1 / scale` when downsampling.
    pub antialias: bool,
    /// Output value where `TfCropAndResize` maps outside the input.
    pub extrapolation: f64,
}

/// One axis of a resize: the taps of each output coordinate, or `None` to extrapolate.
pub type AxisPlan = Vec<Option<Vec<(usize, f64)>>>;

fn cubic_kernel(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The input coordinate output coordinate `x` maps to, or `None` when it must extrapolate.
/// `roi` is (start, end) in normalized coordinates (only `TfCropAndResize` reads it).
pub fn source_coord(
    p: &ResizeParams,
    x: f64,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> Option<f64> {
    let l = in_len as f64;
    let out_w = scale * l;
    Some(match p.coord {
        CoordMode::AlignCorners => {
            if out_w == 1.0 {
                0.0
            } else {
                x * (l - 1.0) / (out_w - 1.0)
            }
        }
        CoordMode::Asymmetric => x / scale,
        CoordMode::TfCropAndResize => {
            let v = if out_w == 1.0 {
                (roi.1 - roi.0) * (l - 1.0) / 2.0
            } else {
                x * (roi.1 - roi.0) * (l - 1.0) / (out_w - 1.0)
            } + roi.0 * (l - 1.0);
            if v < 0.0 || v > l - 1.0 {
                return None;
            }
            v
        }
        CoordMode::PytorchHalfPixel => {
            if out_w == 1.0 {
                -0.5
            } else {
                (x + 0.5) / scale - 0.5
            }
        }
        CoordMode::HalfPixel => (x + 0.5) / scale - 0.5,
        CoordMode::TfHalfPixelForNn => (x + 0.5) / scale,
        CoordMode::HalfPixelSymmetric => {
            let adjustment = out_len as f64 / out_w;
            let offset = l / 2.0 * (1.0 - adjustment);
            offset + (x + 0.5) / scale - 0.5
        }
    })
}

/// Taps (input index, weight) around input coordinate `xo` for an axis of `len` elements.
fn taps(p: &ResizeParams, xo: f64, len: usize, scale: f64) -> Vec<(usize, f64)> {
    // Integer coordinates use base = x - 1 with ratio 1, so every filter is evaluated on
    // offsets `i - ratio` from the same base (this matches the ONNX reference's neighbor sets).
    let fl = xo.floor();
    let (base, ratio) = if xo == fl {
        (fl as i64 - 1, 1.0)
    } else {
        (fl as i64, xo - fl)
    };
    let mut w: Vec<(i64, f64)> = match p.filter {
        Filter::Nearest(mode) => {
            let up = ratio == 1.0
                || match mode {
                    NearestMode::RoundPreferFloor => ratio > 0.5,
                    NearestMode::RoundPreferCeil => ratio >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                };
            vec![(base + i64::from(up), 1.0)]
        }
        Filter::Linear | Filter::Cubic { .. } => {
            let support = if matches!(p.filter, Filter::Linear) {
                1.0
            } else {
                2.0
            };
            let s = if p.antialias { scale.min(1.0) } else { 1.0 };
            let start = (-support / s).floor() as i64 + 1;
            let count = 2 - 2 * start;
            let mut v: Vec<(i64, f64)> = (start..start + count)
                .map(|i| {
                    let t = (i as f64 - ratio) * s;
                    let c = match p.filter {
                        Filter::Cubic { a } => cubic_kernel(t, a),
                        _ => (1.0 - t.abs()).clamp(0.0, 1.0),
                    };
                    (base + i, c)
                })
                .collect();
            if p.antialias {
                let sum: f64 = v.iter().map(|t| t.1).sum();
                v.iter_mut().for_each(|t| t.1 /= sum);
            }
            v
        }
    };
    let last = len as i64 - 1;
    if p.exclude_outside {
        w.iter_mut()
            .filter(|t| t.0 < 0 || t.0 > last)
            .for_each(|t| t.1 = 0.0);
        let sum: f64 = w.iter().map(|t| t.1).sum();
        w.iter_mut().for_each(|t| t.1 /= sum);
    }
    w.into_iter()
        .filter(|t| t.1 != 0.0)
        .map(|(i, c)| (i.clamp(0, last.max(0)) as usize, c))
        .collect()
}

pub fn plan_axis(
    p: &ResizeParams,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> AxisPlan {
    (0..out_len)
        .map(|x| {
            source_coord(p, x as f64, in_len, out_len, scale, roi)
                .map(|xo| taps(p, xo, in_len, scale))
        })
        .collect()
}

/// Resizes `data` of shape `shape` to `out_shape`. `scales[d]` is the scale of axis `d`
/// used by the coordinate transform and `roi[d]` its (start, end) region.
///
/// Requires `data.len() == prod(shape)` and all slices to have `shape.len()` entries.
pub fn resize_nd(
    p: &ResizeParams,
    data: &[f64],
    shape: &[usize],
    out_shape: &[usize],
    scales: &[f64],
    roi: &[(f64, f64)],
) -> Vec<f64> {
    let mut cur = data.to_vec();
    let mut cur_shape = shape.to_vec();
    let track = p.coord == CoordMode::TfCropAndResize;
    let mut mask = vec![false; if track { cur.len() } else { 0 }];
    for d in 0..shape.len() {
        let plan = plan_axis(p, shape[d], out_shape[d], scales[d], roi[d]);
        let identity = shape[d] == out_shape[d]
            && plan
                .iter()
                .enumerate()
                .all(|(j, t)| matches!(t, Some(v) if v.len() == 1 && v[0] == (j, 1.0)));
        if identity {
            continue;
        }
        let outer: usize = cur_shape[..d].iter().product();
        let inner: usize = cur_shape[d + 1..].iter().product();
        let (l, o) = (shape[d], out_shape[d]);
        let mut next = vec![0f64; outer * o * inner];
        let mut next_mask = vec![false; if track { next.len() } else { 0 }];
        for a in 0..outer {
            for (j, t) in plan.iter().enumerate() {
                let dst = (a * o + j) * inner;
                match t {
                    None => {
                        next[dst..dst + inner]
                            .iter_mut()
                            .for_each(|v| *v = p.extrapolation);
                        next_mask[dst..dst + inner]
                            .iter_mut()
                            .for_each(|v| *v = true);
                    }
                    Some(taps) => {
                        for &(i, c) in taps {
                            let src = (a * l + i) * inner;
                            for k in 0..inner {
                                next[dst + k] += c * cur[src + k];
                            }
                            if track {
                                for k in 0..inner {
                                    next_mask[dst + k] |= mask[src + k];
                                }
                            }
                        }
                    }
                }
            }
        }
        cur = next;
        mask = next_mask;
        cur_shape[d] = o;
    }
    if track {
        for (v, &m) in cur.iter_mut().zip(&mask) {
            if m {
                *v = p.extrapolation;
            }
        }
    }
    cur
}
