//! Resize (opset 10, 11+) and Upsample (opset 7–9).
//!
//! Opset 10 Resize and Upsample use the `asymmetric` coordinate transform with `floor`
//! nearest rounding (for integer upsampling factors this is element repetition, the
//! definition of Upsample). Opset 11+ follows the ONNX reference: output sizes are
//! `floor(in * scale)` from `scales`, or `sizes` (with `keep_aspect_ratio_policy`, opset 18+).
//!
//! Compute definition (nearest and linear, without antialias or `tf_crop_and_resize`, with
//! constant scales/sizes/roi): per resized axis, the input coordinate of output coordinate
//! `o` is written as an exact fraction `(a·o + b) / c` of integers, found by rationalizing
//! the reference's own coordinate transform and accepted only when the taps it gives (nearest
//! index; linear indices and weights) equal the reference plan's for every `o` of the axis
//! ([`RationalAxis::fit`]). Kernels then compute indices with integer division and remainder
//! and linear weights as `rem / c`, so they pick exactly the reference's source elements.
//! An axis with no such fraction (a scale that is no ratio of small integers) leaves the node
//! on the host.

use crate::dtype::DType;
use crate::kernels::resize::{
    plan_axis, resize_nd, source_coord, AxisPlan, CoordMode, Filter, NearestMode, ResizeParams,
};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError,
    Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{clamp, grid_def, input, math_dtype, opt_input, placeholders};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AspectPolicy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where the operator finds its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `Upsample` 7–8: scales attribute.
    ScalesAttr,
    /// `Upsample` 9, `Resize` 10: `(X, scales)`.
    XScales,
    /// `Resize` 11+: `(X, roi, scales, sizes)`.
    Full,
}

#[derive(Debug)]
struct Resize {
    params: ResizeParams,
    layout: Layout,
    scales_attr: Vec<f64>,
    axes: Option<Vec<i64>>,
    policy: AspectPolicy,
}

fn parse_filter(mode: &str, nearest: NearestMode, a: f64) -> Result<Filter, OpError> {
    match mode {
        "nearest" => Ok(Filter::Nearest(nearest)),
        "linear" | "bilinear" | "trilinear" => Ok(Filter::Linear),
        "cubic" => Ok(Filter::Cubic { a }),
        other => Err(OpError::attr("mode", format!("unknown mode `{other}`"))),
    }
}

fn legacy(c: &OpContext<'_>, layout: Layout) -> Result<Box<dyn Operator>, OpError> {
    let filter = parse_filter(
        &c.attrs.string_or("mode", "nearest")?,
        NearestMode::Floor,
        -0.75,
    )?;
    if matches!(filter, Filter::Cubic { .. }) {
        return Err(OpError::attr("mode", "cubic needs opset 11"));
    }
    let scales_attr = match layout {
        Layout::ScalesAttr => c
            .attrs
            .floats("scales")?
            .ok_or_else(|| OpError::attr("scales", "required attribute is missing"))?
            .iter()
            .map(|&v| v as f64)
            .collect(),
        _ => vec![],
    };
    Ok(Box::new(Resize {
        params: ResizeParams {
            filter,
            coord: CoordMode::Asymmetric,
            exclude_outside: false,
            antialias: false,
            extrapolation: 0.0,
        },
        layout,
        scales_attr,
        axes: None,
        policy: AspectPolicy::Stretch,
    }))
}

fn full(c: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
    let a = c.attrs;
    let nearest = match a.string_or("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => {
            return Err(OpError::attr(
                "nearest_mode",
                format!("unknown value `{other}`"),
            ))
        }
    };
    let filter = parse_filter(
        &a.string_or("mode", "nearest")?,
        nearest,
        a.float_or("cubic_coeff_a", -0.75)? as f64,
    )?;
    let coord = match a
        .string_or("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => CoordMode::HalfPixel,
        "half_pixel_symmetric" if c.opset >= 19 => CoordMode::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
        "align_corners" => CoordMode::AlignCorners,
        "asymmetric" => CoordMode::Asymmetric,
        "tf_crop_and_resize" => CoordMode::TfCropAndResize,
        "tf_half_pixel_for_nn" if c.opset <= 12 => CoordMode::TfHalfPixelForNn,
        other => {
            return Err(OpError::attr(
                "coordinate_transformation_mode",
                format!("`{other}` is not valid at opset {}", c.opset),
            ))
        }
    };
    let flag = |name: &str| -> Result<bool, OpError> {
        match a.int_or(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
        }
    };
    let antialias = c.opset >= 18 && flag("antialias")?;
    if antialias && matches!(filter, Filter::Nearest(_)) {
        return Err(OpError::Unsupported("antialias with nearest mode".into()));
    }
    let policy = match (c.opset >= 18)
        .then(|| a.string_or("keep_aspect_ratio_policy", "stretch"))
        .transpose()?
        .as_deref()
    {
        None | Some("stretch") => AspectPolicy::Stretch,
        Some("not_larger") => AspectPolicy::NotLarger,
        Some("not_smaller") => AspectPolicy::NotSmaller,
        Some(other) => {
            return Err(OpError::attr(
                "keep_aspect_ratio_policy",
                format!("unknown value `{other}`"),
            ))
        }
    };
    Ok(Box::new(Resize {
        params: ResizeParams {
            filter,
            coord,
            exclude_outside: flag("exclude_outside")?,
            antialias,
            extrapolation: a.float_or("extrapolation_value", 0.0)? as f64,
        },
        layout: Layout::Full,
        scales_attr: vec![],
        axes: if c.opset >= 18 {
            a.ints("axes")?.cloned()
        } else {
            None
        },
        policy,
    }))
}

/// Registers Resize and Upsample.
pub fn register(r: &mut Registry) {
    r.register("", "Upsample", 7..=8, |c: &OpContext<'_>| {
        legacy(c, Layout::ScalesAttr)
    });
    r.register("", "Upsample", 9..=9, |c: &OpContext<'_>| {
        legacy(c, Layout::XScales)
    });
    r.register("", "Resize", 10..=10, |c: &OpContext<'_>| {
        legacy(c, Layout::XScales)
    });
    r.register("", "Resize", 11..=LATEST_OPSET, full);
}

/// The resolved sizes of one application: output shape, per-axis scales and rois.
struct Sizes {
    out: Vec<usize>,
    scales: Vec<f64>,
    roi: Vec<(f64, f64)>,
}

fn non_empty(t: Option<&Tensor>) -> Option<&Tensor> {
    t.filter(|t| t.numel() > 0)
}

impl Resize {
    fn axes(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        match &self.axes {
            None => Ok((0..rank).collect()),
            Some(a) => {
                let mut out = Vec::with_capacity(a.len());
                for &x in a {
                    let v = if x < 0 { x + rank as i64 } else { x };
                    if v < 0 || v >= rank as i64 || out.contains(&(v as usize)) {
                        return Err(OpError::attr(
                            "axes",
                            format!("{a:?} is invalid for rank {rank}"),
                        ));
                    }
                    out.push(v as usize);
                }
                Ok(out)
            }
        }
    }

    /// Computes sizes from the input shape and the scales/sizes/roi values (inputs as
    /// tensors; `scales`/`sizes` are `None` or empty when absent).
    fn sizes(
        &self,
        shape: &[usize],
        roi: Option<&Tensor>,
        scales: Option<&Tensor>,
        sizes: Option<&Tensor>,
    ) -> Result<Sizes, OpError> {
        let rank = shape.len();
        let axes = self.axes(rank)?;
        let mut s = Sizes {
            out: shape.to_vec(),
            scales: vec![1.0; rank],
            roi: vec![(0.0, 1.0); rank],
        };
        if let Some(r) = non_empty(roi) {
            let v = r.to_f64_vec();
            if v.len() != 2 * axes.len() {
                return Err(OpError::Shape(format!(
                    "roi has {} values, expected {}",
                    v.len(),
                    2 * axes.len()
                )));
            }
            for (i, &d) in axes.iter().enumerate() {
                s.roi[d] = (v[i], v[i + axes.len()]);
            }
        }
        let scale_values: Option<Vec<f64>> = match self.layout {
            Layout::ScalesAttr => Some(self.scales_attr.clone()),
            _ => non_empty(scales).map(Tensor::to_f64_vec),
        };
        if let Some(sc) = scale_values {
            if non_empty(sizes).is_some() {
                return Err(OpError::Invalid(
                    "only one of scales and sizes may be given".into(),
                ));
            }
            if sc.len() != axes.len() {
                return Err(OpError::Shape(format!(
                    "scales has {} values, expected {}",
                    sc.len(),
                    axes.len()
                )));
            }
            for (&d, &v) in axes.iter().zip(&sc) {
                if !(v > 0.0 && v.is_finite()) {
                    return Err(OpError::Invalid(format!(
                        "scales must be positive, got {v}"
                    )));
                }
                s.scales[d] = v;
                s.out[d] = (v * shape[d] as f64) as usize;
            }
            return Ok(s);
        }
        let Some(sz) = non_empty(sizes) else {
            return Err(OpError::Invalid(
                "one of scales and sizes is required".into(),
            ));
        };
        if !sz.dtype().is_int() {
            return Err(OpError::DType {
                index: 3,
                dtype: sz.dtype(),
            });
        }
        let v = sz.to_i64_vec();
        if v.len() != axes.len() || v.iter().any(|&x| x < 0) {
            return Err(OpError::Shape(format!(
                "sizes {v:?} does not give one size >= 0 per resized axis ({})",
                axes.len()
            )));
        }
        for (&d, &o) in axes.iter().zip(&v) {
            s.out[d] = o as usize;
            s.scales[d] = o as f64 / shape[d] as f64;
        }
        if self.policy != AspectPolicy::Stretch {
            let it = axes.iter().map(|&d| s.scales[d]);
            let common = if self.policy == AspectPolicy::NotLarger {
                it.fold(f64::INFINITY, f64::min)
            } else {
                it.fold(0.0, f64::max)
            };
            for &d in &axes {
                s.scales[d] = common;
                s.out[d] = (common * shape[d] as f64 + 0.5) as usize;
            }
        }
        Ok(s)
    }

    fn slots(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        match self.layout {
            Layout::ScalesAttr => (None, None, None),
            Layout::XScales => (None, Some(1), None),
            Layout::Full => (Some(1), Some(2), Some(3)),
        }
    }
}

/// The largest denominator tried when rationalizing a coordinate transform.
const MAX_DENOMINATOR: i64 = 4096;

/// Resized axes of a linear resize a kernel interpolates over at most (`2^3` taps).
const MAX_LINEAR_AXES: usize = 3;

/// One axis's coordinate transform as integer arithmetic: output coordinate `o` maps to the
/// input coordinate `(a·o + b) / c` exactly, on an input axis of `len` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RationalAxis {
    a: i64,
    b: i64,
    c: i64,
    len: i64,
}

impl RationalAxis {
    /// An axis that is not resized: `o ↦ o`.
    const IDENTITY: RationalAxis = RationalAxis {
        a: 1,
        b: 0,
        c: 1,
        len: 0,
    };

    /// The fraction reproducing `plan` (the reference's taps of every output coordinate of
    /// the axis), if one with a denominator up to [`MAX_DENOMINATOR`] does and its numerators
    /// fit `i32`.
    fn fit(
        p: &ResizeParams,
        plan: &AxisPlan,
        in_len: usize,
        out_len: usize,
        scale: f64,
        roi: (f64, f64),
    ) -> Option<RationalAxis> {
        let len = i64::try_from(in_len).ok()?;
        let identity = in_len == out_len
            && plan
                .iter()
                .enumerate()
                .all(|(o, t)| matches!(t, Some(v) if v.as_slice() == [(o, 1.0)]));
        if identity {
            return Some(RationalAxis::IDENTITY);
        }
        let src = |o: usize| source_coord(p, o as f64, in_len, out_len, scale, roi);
        let start = src(0)?;
        let slope = if out_len > 1 { src(1)? - start } else { 0.0 };
        let near = |v: f64| (v - v.round()).abs() <= 1e-6;
        (1..=MAX_DENOMINATOR)
            .filter(|&c| near(slope * c as f64) && near(start * c as f64))
            .map(|c| RationalAxis {
                a: (slope * c as f64).round() as i64,
                b: (start * c as f64).round() as i64,
                c,
                len,
            })
            .find(|r| r.fits(out_len) && r.reproduces(p, plan))
    }

    /// Whether `a·o + b` fits `i32` for every output coordinate.
    fn fits(&self, out_len: usize) -> bool {
        let Ok(n) = i64::try_from(out_len) else {
            return false;
        };
        let ends = [self.b, self.a.saturating_mul(n).saturating_add(self.b)];
        ends.iter().all(|&v| i32::try_from(v).is_ok())
    }

    /// `(floor((a·o + b) / c), (a·o + b) mod c)` for a concrete `o`.
    fn split(&self, o: i64) -> (i64, i64) {
        let n = self.a * o + self.b;
        (n.div_euclid(self.c), n.rem_euclid(self.c))
    }

    fn clamped(&self, i: i64) -> i64 {
        i.clamp(0, (self.len - 1).max(0))
    }

    /// The nearest input index of a floor `fl` and remainder `rem` (the reference's
    /// rounding: an exact coordinate is itself; otherwise by the mode).
    fn rounds_up(mode: NearestMode, rem: i64, c: i64) -> bool {
        match mode {
            NearestMode::RoundPreferFloor => 2 * rem > c,
            NearestMode::RoundPreferCeil => 2 * rem >= c && rem > 0,
            NearestMode::Floor => false,
            NearestMode::Ceil => rem > 0,
        }
    }

    /// Whether the taps this fraction gives equal `plan`'s at every output coordinate.
    fn reproduces(&self, p: &ResizeParams, plan: &AxisPlan) -> bool {
        plan.iter().enumerate().all(|(o, taps)| {
            let Some(taps) = taps else {
                return false;
            };
            let (fl, rem) = self.split(o as i64);
            let mine: Vec<(i64, f64)> = match p.filter {
                Filter::Nearest(mode) => {
                    let up = i64::from(Self::rounds_up(mode, rem, self.c));
                    vec![(self.clamped(fl + up), 1.0)]
                }
                Filter::Linear if rem == 0 => vec![(self.clamped(fl), 1.0)],
                Filter::Linear => {
                    let w = rem as f64 / self.c as f64;
                    vec![(self.clamped(fl), 1.0 - w), (self.clamped(fl + 1), w)]
                }
                Filter::Cubic { .. } => return false,
            };
            // Taps of negligible weight (a coordinate a rounding error away from an integer)
            // change no output beyond that error.
            let theirs: Vec<&(usize, f64)> = taps.iter().filter(|t| t.1.abs() > 1e-9).collect();
            mine.len() == theirs.len()
                && mine
                    .iter()
                    .zip(theirs)
                    .all(|(&(i, w), &(j, v))| i == j as i64 && (w - v).abs() <= 1e-9)
        })
    }

    /// The floor and remainder of `(a·o + b) / c` for the output coordinate `o`.
    fn split_expr(&self, o: &Expr) -> (Expr, Expr) {
        let mut n = o.clone();
        if self.a != 1 {
            n = n * self.a;
        }
        if self.b != 0 {
            n = n + self.b;
        }
        if self.c == 1 {
            return (n, Expr::int(0));
        }
        (&n / Expr::int(self.c), &n % Expr::int(self.c))
    }

    fn clamp_expr(&self, i: Expr) -> Expr {
        clamp(i, Expr::int(0), Expr::int((self.len - 1).max(0)))
    }

    /// The nearest input index of output coordinate `o`.
    fn nearest(&self, mode: NearestMode, o: &Expr) -> Expr {
        let (fl, rem) = self.split_expr(o);
        let c = Expr::int(self.c);
        let up = match mode {
            _ if self.c == 1 => None,
            NearestMode::Floor => None,
            NearestMode::RoundPreferFloor => Some((rem * 2).gt(c)),
            NearestMode::RoundPreferCeil => Some((rem.clone() * 2).ge(c).and(rem.gt(0))),
            NearestMode::Ceil => Some(rem.gt(0)),
        };
        match up {
            None => self.clamp_expr(fl),
            Some(up) => self.clamp_expr(fl + Expr::select(up, Expr::int(1), Expr::int(0))),
        }
    }

    /// The linear taps (input index, weight of `dtype`) of output coordinate `o`.
    fn linear(&self, o: &Expr, dtype: DataType) -> Vec<(Expr, Expr)> {
        let (fl, rem) = self.split_expr(o);
        if self.c == 1 {
            return vec![(self.clamp_expr(fl), Expr::float_of(1.0, dtype))];
        }
        let w = rem.cast(dtype) * Expr::float_of(1.0 / self.c as f64, dtype);
        vec![
            (
                self.clamp_expr(fl.clone()),
                Expr::float_of(1.0, dtype) - w.clone(),
            ),
            (self.clamp_expr(fl + 1), w),
        ]
    }
}

impl Resize {
    /// The compute definition (see the module docs), or `None` where the node stays on the
    /// host.
    fn definition(
        &self,
        inputs: &[Option<ComputeInput<'_>>],
    ) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let p = &self.params;
        if p.antialias
            || p.coord == CoordMode::TfCropAndResize
            || matches!(p.filter, Filter::Cubic { .. })
        {
            return Ok(None);
        }
        if matches!(p.filter, Filter::Linear) && !x.dtype.is_float() {
            return Ok(None);
        }
        let (roi, scales, sizes) = self.slots();
        let mut known = Vec::new();
        for slot in [roi, scales, sizes] {
            match slot.and_then(|i| opt_input(inputs, i)) {
                None => known.push(None),
                Some(ComputeInput { value: Some(v), .. }) => known.push(Some(v)),
                Some(_) => return Ok(None),
            }
        }
        if self.layout == Layout::XScales && known[1].is_none() {
            return Ok(None);
        }
        let s = self.sizes(x.shape, known[0], known[1], known[2])?;
        let mut axes = Vec::with_capacity(x.shape.len());
        for d in 0..x.shape.len() {
            let plan = plan_axis(p, x.shape[d], s.out[d], s.scales[d], s.roi[d]);
            match RationalAxis::fit(p, &plan, x.shape[d], s.out[d], s.scales[d], s.roi[d]) {
                Some(r) => axes.push(r),
                None => return Ok(None),
            }
        }
        let identity = |r: &RationalAxis| *r == RationalAxis::IDENTITY;
        let dtype = x.dtype.to_ir();
        let vars = placeholders(inputs);
        let def = match p.filter {
            Filter::Nearest(mode) => grid_def(vars.clone(), dtype, &s.out, |o| {
                let index: Vec<Expr> = axes
                    .iter()
                    .zip(o)
                    .map(|(r, o)| {
                        if identity(r) {
                            o.clone()
                        } else {
                            r.nearest(mode, o)
                        }
                    })
                    .collect();
                vars[0].at(index)
            })?,
            _ => {
                if axes.iter().filter(|r| !identity(r)).count() > MAX_LINEAR_AXES {
                    return Ok(None);
                }
                let math = math_dtype(dtype);
                grid_def(vars.clone(), dtype, &s.out, |o| {
                    let per_axis: Vec<Vec<(Expr, Expr)>> = axes
                        .iter()
                        .zip(o)
                        .map(|(r, o)| {
                            if identity(r) {
                                vec![(o.clone(), Expr::float_of(1.0, math))]
                            } else {
                                r.linear(o, math)
                            }
                        })
                        .collect();
                    let mut sum: Option<Expr> = None;
                    let mut pick = vec![0usize; per_axis.len()];
                    loop {
                        let index: Vec<Expr> =
                            per_axis.iter().zip(&pick).map(|(t, &k)| t[k].0.clone()).collect();
                        let mut term = vars[0].at(index).cast(math);
                        for (t, &k) in per_axis.iter().zip(&pick) {
                            if t.len() > 1 {
                                term = term * t[k].1.clone();
                            }
                        }
                        sum = Some(match sum {
                            None => term,
                            Some(acc) => acc + term,
                        });
                        let Some(d) = (0..pick.len()).rev().find(|&d| pick[d] + 1 < per_axis[d].len())
                        else {
                            break;
                        };
                        pick[d] += 1;
                        pick[d + 1..].iter_mut().for_each(|k| *k = 0);
                    }
                    let value = sum.unwrap_or_else(|| Expr::zero(math));
                    if math == dtype {
                        value
                    } else {
                        value.cast(dtype)
                    }
                })?
            }
        };
        Ok(Some(def))
    }
}

impl Operator for Resize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, |d| d != DType::Bool)?;
        let Some(dims) = &x.ty.shape else {
            return Ok(vec![x.ty.clone()]);
        };
        let (roi, scales, sizes) = self.slots();
        let known = |slot: Option<usize>| -> Result<Option<&Tensor>, ()> {
            match slot.and_then(|i| infer_opt(inputs, i)) {
                None => Ok(None),
                Some(v) => v.value.map(Some).ok_or(()),
            }
        };
        let fixed: Option<Vec<usize>> = dims.iter().map(Dim::fixed).collect();
        let shape = match (fixed, known(roi), known(scales), known(sizes)) {
            (Some(f), Ok(r), Ok(sc), Ok(sz)) => self
                .sizes(&f, r, sc, sz)?
                .out
                .into_iter()
                .map(Dim::Fixed)
                .collect(),
            _ => vec![Dim::Unknown; dims.len()],
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dtype = x.dtype();
        check_dtype(0, dtype, |d| d != DType::Bool)?;
        let (roi, scales, sizes) = self.slots();
        let get = |slot: Option<usize>| slot.and_then(|i| opt_arg(inputs, i));
        if self.layout == Layout::XScales {
            arg(inputs, 1)?;
        }
        let s = self.sizes(x.shape(), get(roi), get(scales), get(sizes))?;
        let y = resize_nd(
            &self.params,
            &x.to_f64_vec(),
            x.shape(),
            &s.out,
            &s.scales,
            &s.roi,
        );
        let out = dispatch_float!(dtype, T => Tensor::new(s.out, y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
            else dispatch_int!(dtype, T => Tensor::new(s.out, y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
                else return Err(OpError::DType { index: 0, dtype })));
        Ok(vec![out])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        self.definition(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(
        name: &str,
        opset: i64,
        attrs: &[(&str, Attribute)],
    ) -> Result<Box<dyn Operator>, OpError> {
        build_op("", name, opset, attrs, 4, 1)
    }

    fn s(v: &str) -> Attribute {
        Attribute::String(v.into())
    }

    fn pseudo(n: usize, seed: u64) -> Vec<f32> {
        let mut st = seed;
        (0..n)
            .map(|_| {
                st = st
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((st >> 40) as f32 / (1u64 << 24) as f32) * 1.8 - 0.9 + 0.05
            })
            .collect()
    }

    #[test]
    fn bilinear_half_pixel_matches_direct_formula() {
        let (h, w, oh, ow) = (5, 7, 8, 4);
        let x = pseudo(h * w, 7);
        let tx = Tensor::new(vec![1, 1, h, w], x.clone()).unwrap();
        let sizes = Tensor::new(vec![4], vec![1i64, 1, oh as i64, ow as i64]).unwrap();
        let op = build("Resize", 13, &[("mode", s("linear"))]).unwrap();
        let y = op
            .eval(&[Some(&tx), None, None, Some(&sizes)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[1, 1, oh, ow]);
        let src = |o: usize, l: usize, n: usize| {
            let v = ((o as f64 + 0.5) * l as f64 / n as f64 - 0.5).max(0.0);
            let i0 = (v.floor() as usize).min(l - 1);
            let i1 = (i0 + 1).min(l - 1);
            (i0, i1, v - v.floor())
        };
        let got = y.to_f64_vec();
        for i in 0..oh {
            let (a0, a1, fa) = src(i, h, oh);
            for j in 0..ow {
                let (b0, b1, fb) = src(j, w, ow);
                let at = |r: usize, c: usize| x[r * w + c] as f64;
                let want = (1.0 - fa) * ((1.0 - fb) * at(a0, b0) + fb * at(a0, b1))
                    + fa * ((1.0 - fb) * at(a1, b0) + fb * at(a1, b1));
                assert!(
                    (got[i * ow + j] - want).abs() < 1e-6,
                    "({i},{j}): {} vs {want}",
                    got[i * ow + j]
                );
            }
        }
    }

    #[test]
    fn nearest_modes_and_upsample_repeat() {
        let x = Tensor::new(vec![1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let scales = Tensor::new(vec![2], vec![1.0f32, 2.0]).unwrap();
        // half_pixel, scale 2: sources -0.25, 0.25, 0.75, 1.25, 1.75, 2.25
        let floor = build("Resize", 13, &[("nearest_mode", s("floor"))]).unwrap();
        let y = floor
            .eval(&[Some(&x), None, Some(&scales)])
            .unwrap()
            .remove(0);
        assert_eq!(y.to_f64_vec(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 3.0]);
        let ceil = build("Resize", 13, &[("nearest_mode", s("ceil"))]).unwrap();
        let y = ceil
            .eval(&[Some(&x), None, Some(&scales)])
            .unwrap()
            .remove(0);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 2.0, 3.0, 3.0, 3.0]);
        let up = build("Upsample", 9, &[]).unwrap();
        let xi = Tensor::new(vec![1, 2], vec![7i32, -4]).unwrap();
        let sc = Tensor::new(vec![2], vec![2.0f32, 3.0]).unwrap();
        let y = up.eval(&[Some(&xi), Some(&sc)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 6]);
        assert_eq!(
            y.as_slice::<i32>().unwrap(),
            &[7, 7, 7, -4, -4, -4, 7, 7, 7, -4, -4, -4]
        );
    }

    #[test]
    fn crop_and_resize_extrapolates_outside_roi() {
        let x = Tensor::new(vec![1, 4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let roi = Tensor::new(vec![4], vec![0.0f32, 0.5, 1.0, 1.5]).unwrap();
        let sizes = Tensor::new(vec![2], vec![1i64, 3]).unwrap();
        let op = build(
            "Resize",
            13,
            &[
                ("mode", s("linear")),
                ("coordinate_transformation_mode", s("tf_crop_and_resize")),
                ("extrapolation_value", Attribute::Float(-9.0)),
            ],
        )
        .unwrap();
        let y = op
            .eval(&[Some(&x), Some(&roi), None, Some(&sizes)])
            .unwrap()
            .remove(0);
        // axis 1: sources 1.5, 3.0, 4.5 (outside)
        assert_eq!(y.to_f64_vec(), vec![2.5, 4.0, -9.0]);
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            build("Resize", 13, &[("mode", s("bogus"))]),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(
            build(
                "Resize",
                13,
                &[("coordinate_transformation_mode", s("tf_half_pixel_for_nn"))]
            ),
            Err(OpError::Attribute { .. })
        ));
        let x = Tensor::new(vec![1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let op = build("Resize", 13, &[]).unwrap();
        assert!(matches!(op.eval(&[Some(&x)]), Err(OpError::Invalid(_))));
        let bad = Tensor::new(vec![3], vec![1.0f32, 2.0, 2.0]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), None, Some(&bad)]),
            Err(OpError::Shape(_))
        ));
        let neg = Tensor::new(vec![2], vec![1.0f32, -2.0]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), None, Some(&neg)]),
            Err(OpError::Invalid(_))
        ));
    }
}
