//! GridSample: samples `X [N, C, d_1..d_r]` at the normalized locations of
//! `grid [N, o_1..o_r, r]`, giving `Y [N, C, o_1..o_r]`.
//!
//! `grid[n, o, :]` lists coordinates in reverse axis order (`x` for `d_r` first, as PyTorch).
//! A normalized coordinate `u ∈ [-1, 1]` maps to the pixel coordinate
//! `(u + 1)/2·(d - 1)` with `align_corners`, else `((u + 1)·d - 1)/2`. Coordinates outside the
//! valid range `[0, d - 1]` (`align_corners`) or `[-0.5, d - 0.5]` are clamped to `[0, d - 1]`
//! (`padding_mode = border`), reflected into the range (`reflection`), or kept (`zeros`).
//! Then:
//! - `nearest`: the pixel at the coordinate rounded half to even;
//! - `linear` (`bilinear` before opset 20): tensor-product linear interpolation of the 2^r
//!   neighbours;
//! - `cubic` (`bicubic`): tensor-product Keys cubic convolution (`a = -0.75`) of the 4^r
//!   neighbours.
//!
//! A neighbour index outside the image reads 0 (`zeros`), the clamped index (`border`) or the
//! reflected index (`reflection`). Opsets 16–19 take 4-D inputs only; 20+ any rank >= 3.
//! Computed in f64 by `eval`; the compute definition (2-D samples, `nearest` or `linear`,
//! `zeros` or `border` padding: a spatial transformer's, an optical-flow warp's, deformable
//! attention's sampling) computes the coordinates and weights in f32 (as PyTorch does), so a
//! coordinate within f32 rounding of a tie may pick the other pixel.

use crate::kernels::values::float_tensor;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::{check_dtype, float};
use crate::ops::compute_util::{clamp, grid_def, input, math_dtype, placeholders};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use hidet_ir::intrinsic::MathFunc;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

#[derive(Debug)]
struct GridSample {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
    /// Opsets 16–19: 4-D inputs only.
    only_2d: bool,
}

fn build(c: &OpContext<'_>, modern: bool) -> Result<Box<dyn Operator>, OpError> {
    let (linear, cubic) = if modern {
        ("linear", "cubic")
    } else {
        ("bilinear", "bicubic")
    };
    let mode = match c.attrs.string_or("mode", linear)?.as_str() {
        "nearest" => Mode::Nearest,
        m if m == linear => Mode::Linear,
        m if m == cubic => Mode::Cubic,
        other => {
            return Err(OpError::attr(
                "mode",
                format!("must be {linear}, nearest or {cubic}, got `{other}`"),
            ))
        }
    };
    let padding = match c.attrs.string_or("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(OpError::attr(
                "padding_mode",
                format!("must be zeros, border or reflection, got `{other}`"),
            ))
        }
    };
    let align_corners = match c.attrs.int_or("align_corners", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::attr(
                "align_corners",
                format!("must be 0 or 1, got {v}"),
            ))
        }
    };
    Ok(Box::new(GridSample {
        mode,
        padding,
        align_corners,
        only_2d: !modern,
    }))
}

/// Registers GridSample.
pub fn register(r: &mut Registry) {
    r.register("", "GridSample", 16..=19, |c| build(c, false));
    r.register("", "GridSample", 20..=LATEST_OPSET, |c| build(c, true));
}

/// Reflects `x` into `[lo, hi]` by repeated mirroring at the nearer bound.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    let (dist, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let flips = (dist / span).trunc();
    let r = dist - flips * span;
    // An even number of full spans leaves the point mirrored at the bound it crossed.
    if (flips as u64).is_multiple_of(2) == from_lo {
        lo + r
    } else {
        hi - r
    }
}

/// Keys cubic convolution weights (`a = -0.75`) of the taps at offsets -1, 0, 1, 2 from the
/// floor, for the fractional position `t ∈ [0, 1)`.
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

impl GridSample {
    /// The valid coordinate range of an axis of size `d`.
    fn bounds(&self, d: usize) -> (f64, f64) {
        if self.align_corners {
            (0.0, d as f64 - 1.0)
        } else {
            (-0.5, d as f64 - 0.5)
        }
    }

    /// The pixel coordinate of normalized `u` on an axis of size `d`, after padding.
    fn coordinate(&self, u: f64, d: usize) -> f64 {
        let mut x = if self.align_corners {
            (u + 1.0) / 2.0 * (d as f64 - 1.0)
        } else {
            ((u + 1.0) * d as f64 - 1.0) / 2.0
        };
        if self.mode == Mode::Nearest {
            x = x.round_ties_even();
        }
        let (lo, hi) = self.bounds(d);
        if x < lo || x > hi {
            x = match self.padding {
                Padding::Zeros => x,
                Padding::Border => x.clamp(0.0, d as f64 - 1.0),
                Padding::Reflection => reflect(x, lo, hi),
            };
        }
        x
    }

    /// The index to read for integer position `i` on an axis of size `d`; `None` reads 0.
    fn tap(&self, i: i64, d: usize) -> Option<usize> {
        let inside = |j: i64| (j >= 0 && (j as usize) < d).then_some(j as usize);
        match self.padding {
            Padding::Zeros => inside(i),
            Padding::Border => Some(i.clamp(0, d as i64 - 1) as usize),
            Padding::Reflection => {
                let (lo, hi) = self.bounds(d);
                inside(reflect(i as f64, lo, hi).trunc() as i64)
            }
        }
    }

    /// Per axis, the (index, weight) taps of coordinate `x`.
    fn taps(&self, x: f64, d: usize) -> Vec<(Option<usize>, f64)> {
        match self.mode {
            Mode::Nearest => vec![(self.tap(x.trunc() as i64, d), 1.0)],
            Mode::Linear => {
                let f = x.floor();
                let t = x - f;
                let f = f as i64;
                vec![(self.tap(f, d), 1.0 - t), (self.tap(f + 1, d), t)]
            }
            Mode::Cubic => {
                let f = x.floor();
                let w = cubic_weights(x - f);
                let f = f as i64;
                (0..4)
                    .map(|k| (self.tap(f - 1 + k as i64, d), w[k]))
                    .collect()
            }
        }
    }
}

impl GridSample {
    /// The pixel coordinate of normalized `u` (an f32-or-wider expression of `math` type) on
    /// an axis of size `d`, after rounding (`nearest`) and `border` padding, as
    /// [`GridSample::coordinate`] computes it.
    fn coordinate_expr(&self, u: Expr, d: usize, math: DataType) -> Expr {
        let f = |v: f64| Expr::float_of(v, math);
        let one = f(1.0);
        let mut x = if self.align_corners {
            (u + one) * f((d as f64 - 1.0) / 2.0)
        } else {
            ((u + one) * f(d as f64) - f(1.0)) * f(0.5)
        };
        if self.mode == Mode::Nearest {
            x = Expr::math(MathFunc::Round, vec![x]);
        }
        if self.padding == Padding::Border {
            let (lo, hi) = self.bounds(d);
            let outside = x.lt(f(lo)).or(x.gt(f(hi)));
            x = Expr::select(outside, clamp(x.clone(), f(0.0), f(d as f64 - 1.0)), x);
        }
        x
    }

    /// The value read at integer position `i` (`i32`) of axis `d` as [`GridSample::tap`]
    /// maps it: the clamped index, and for `zeros` padding whether the position is inside.
    fn tap_expr(&self, i: Expr, d: usize) -> (Expr, Option<Expr>) {
        let last = Expr::int(d as i64 - 1);
        let clamped = clamp(i.clone(), Expr::int(0), last.clone());
        match self.padding {
            Padding::Border => (clamped, None),
            _ => (clamped, Some(i.ge(Expr::int(0)).and(i.le(last)))),
        }
    }

    /// `Y[n, c, i, j]` for a 2-D sample (see the module docs), or `None` for the modes and
    /// paddings only `eval` computes.
    fn definition(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, grid) = (input(inputs, 0)?, input(inputs, 1)?);
        check_dtype(0, x.dtype, float)?;
        check_dtype(1, grid.dtype, float)?;
        if self.mode == Mode::Cubic || self.padding == Padding::Reflection {
            return Ok(None);
        }
        let (&[n, c, h, w], &[gn, oh, ow, 2]) = (x.shape, grid.shape) else {
            return Ok(None);
        };
        if gn != n || h == 0 || w == 0 || i32::try_from(h.max(w)).is_err() {
            return Ok(None);
        }
        let dtype = x.dtype.to_ir();
        let math = math_dtype(dtype);
        let vars = placeholders(inputs);
        let (vx, vg) = (vars[0].clone(), vars[1].clone());
        grid_def(vars, dtype, &[n, c, oh, ow], |o| {
            let (b, ch, i, j) = (&o[0], &o[1], &o[2], &o[3]);
            let at = |k: i64| vg.at([b.clone(), i.clone(), j.clone(), Expr::int(k)]).cast(math);
            // Per axis (rows, then columns): the (index, inside?, weight) taps.
            let axes = [(at(1), h), (at(0), w)].map(|(u, d)| {
                let x = self.coordinate_expr(u, d, math);
                // Positions are cast to integers within [-2, d + 1], where every one outside
                // the image still reads outside it (and a NaN reads an edge): no cast of an
                // out-of-range float.
                let bounded = |v: Expr| {
                    v.max(Expr::float_of(-2.0, math))
                        .min(Expr::float_of(d as f64 + 1.0, math))
                        .cast(DataType::I32)
                };
                match self.mode {
                    Mode::Nearest => {
                        let (idx, inside) = self.tap_expr(bounded(x), d);
                        vec![(idx, inside, None)]
                    }
                    _ => {
                        let floor = Expr::math(MathFunc::Floor, vec![x.clone()]);
                        let t = x - floor.clone();
                        let f0 = bounded(floor);
                        let f1 = f0.clone() + Expr::int(1);
                        let (i0, in0) = self.tap_expr(f0, d);
                        let (i1, in1) = self.tap_expr(f1, d);
                        let w0 = Expr::float_of(1.0, math) - t.clone();
                        vec![(i0, in0, Some(w0)), (i1, in1, Some(t))]
                    }
                }
            });
            let mut sum: Option<Expr> = None;
            for (r, r_in, r_w) in &axes[0] {
                for (s, s_in, s_w) in &axes[1] {
                    let read = vx.at([b.clone(), ch.clone(), r.clone(), s.clone()]).cast(math);
                    let mut term = match (r_w, s_w) {
                        (Some(a), Some(z)) => read * (a.clone() * z.clone()),
                        _ => read,
                    };
                    let inside = match (r_in, s_in) {
                        (Some(p), Some(q)) => Some(p.and(q.clone())),
                        (p, q) => p.clone().or(q.clone()),
                    };
                    if let Some(inside) = inside {
                        term = Expr::select(inside, term, Expr::float_of(0.0, math));
                    }
                    sum = Some(match sum {
                        None => term,
                        Some(acc) => acc + term,
                    });
                }
            }
            sum.expect("each axis has a tap").cast(dtype)
        })
        .map(Some)
    }
}

impl Operator for GridSample {
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        self.definition(inputs)
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let g = infer_arg(inputs, 1)?;
        check_dtype(0, x.ty.dtype, float)?;
        check_dtype(1, g.ty.dtype, float)?;
        let shape = match (&x.ty.shape, &g.ty.shape) {
            (Some(xs), Some(gs)) => {
                if xs.len() < 3 || gs.len() != xs.len() || (self.only_2d && xs.len() != 4) {
                    return Err(OpError::Shape(format!(
                        "X has rank {} and grid rank {}: need equal ranks >= 3{}",
                        xs.len(),
                        gs.len(),
                        if self.only_2d { " (4 before opset 20)" } else { "" }
                    )));
                }
                let mut s = vec![xs[0].clone(), xs[1].clone()];
                s.extend(gs[1..gs.len() - 1].iter().cloned());
                Some(s)
            }
            (Some(xs), None) => Some(vec![Dim::Unknown; xs.len()]),
            (None, Some(gs)) => Some(vec![Dim::Unknown; gs.len()]),
            (None, None) => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let grid = arg(inputs, 1)?;
        check_dtype(0, x.dtype(), float)?;
        check_dtype(1, grid.dtype(), float)?;
        let (xs, gs) = (x.shape(), grid.shape());
        let r = xs.len().saturating_sub(2);
        if r == 0
            || gs.len() != xs.len()
            || gs[0] != xs[0]
            || gs[gs.len() - 1] != r
            || (self.only_2d && r != 2)
        {
            return Err(OpError::Shape(format!(
                "X {xs:?} and grid {gs:?}: need X [N, C, d_1..d_r] and grid [N, o_1..o_r, {r}]"
            )));
        }
        let (n, c) = (xs[0], xs[1]);
        let dims = &xs[2..];
        let pixels: usize = dims.iter().product();
        let outs: usize = gs[1..gs.len() - 1].iter().product();
        let xv = x.to_f64_vec();
        let gv = grid.to_f64_vec();
        let mut y = vec![0.0f64; n * c * outs];
        for b in 0..n {
            for p in 0..outs {
                let u = &gv[(b * outs + p) * r..(b * outs + p + 1) * r];
                // Axis i (of d_1..d_r) reads grid component r - 1 - i.
                let taps: Vec<Vec<(Option<usize>, f64)>> = (0..r)
                    .map(|i| self.taps(self.coordinate(u[r - 1 - i], dims[i]), dims[i]))
                    .collect();
                // Every combination of one tap per axis: (flat pixel offset or None, weight).
                let mut combos: Vec<(Option<usize>, f64)> = vec![(Some(0), 1.0)];
                for (i, axis) in taps.iter().enumerate() {
                    combos = combos
                        .iter()
                        .flat_map(|&(off, w)| {
                            axis.iter().map(move |&(idx, wt)| {
                                let off = match (off, idx) {
                                    (Some(o), Some(j)) => Some(o * dims[i] + j),
                                    _ => None,
                                };
                                (off, w * wt)
                            })
                        })
                        .collect();
                }
                for ch in 0..c {
                    let plane = &xv[(b * c + ch) * pixels..(b * c + ch + 1) * pixels];
                    y[(b * c + ch) * outs + p] = combos
                        .iter()
                        .map(|&(off, w)| off.map_or(0.0, |o| w * plane[o]))
                        .sum();
                }
            }
        }
        let mut shape = vec![n, c];
        shape.extend_from_slice(&gs[1..gs.len() - 1]);
        Ok(vec![float_tensor(x.dtype(), shape, &y, 0)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;

    fn op(mode: &str, padding: &str, align: i64) -> Box<dyn Operator> {
        build_op(
            "",
            "GridSample",
            20,
            &[
                ("mode", Attribute::String(mode.into())),
                ("padding_mode", Attribute::String(padding.into())),
                ("align_corners", Attribute::Int(align)),
            ],
            2,
            1,
        )
        .unwrap()
    }

    #[test]
    fn reflect_mirrors_at_bounds() {
        assert_eq!(reflect(-0.25, 0.0, 2.0), 0.25);
        assert_eq!(reflect(2.5, 0.0, 2.0), 1.5);
        assert_eq!(reflect(4.5, 0.0, 2.0), 0.5);
        assert_eq!(reflect(-2.5, 0.0, 2.0), 1.5);
        assert_eq!(reflect(1.0, 0.0, 2.0), 1.0);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_interpolate() {
        for t in [0.0, 0.25, 0.5, 0.9] {
            let w = cubic_weights(t);
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert_eq!(cubic_weights(0.0), [0.0, 1.0, 0.0, 0.0]);
    }

    /// Sampling at the pixel centers reproduces X; off-grid points interpolate; outside
    /// points follow the padding mode.
    #[test]
    fn samples_2d() {
        // X: 1x1x2x3 = [[1, 2, 3], [4, 5, 6]].
        let x = Tensor::new(vec![1, 1, 2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        // align_corners = 1: x = -1, 0, 1 -> columns 0, 1, 2; y = -1, 1 -> rows 0, 1.
        let centers: Vec<f32> = [-1f32, 1.]
            .iter()
            .flat_map(|&yv| [-1f32, 0., 1.].into_iter().flat_map(move |xv| [xv, yv]))
            .collect();
        let g = Tensor::new(vec![1, 2, 3, 2], centers).unwrap();
        for mode in ["nearest", "linear", "cubic"] {
            let y = op(mode, "zeros", 1).eval(&[Some(&x), Some(&g)]).unwrap().remove(0);
            assert_eq!(y.shape(), &[1, 1, 2, 3]);
            let got = y.to_f64_vec();
            for (a, b) in got.iter().zip([1., 2., 3., 4., 5., 6.]) {
                assert!((a - b).abs() < 1e-6, "{mode}: {got:?}");
            }
        }
        // Midpoint of the four top-left pixels (align_corners = 1: x = -0.5, y = 0).
        let g = Tensor::new(vec![1, 1, 1, 2], vec![-0.5f32, 0.0]).unwrap();
        let y = op("linear", "zeros", 1).eval(&[Some(&x), Some(&g)]).unwrap();
        assert!((y[0].to_f64_vec()[0] - 3.0).abs() < 1e-6);
        // Far right outside: zeros -> 0, border -> the right column's value.
        let g = Tensor::new(vec![1, 1, 1, 2], vec![3.0f32, -1.0]).unwrap();
        let z = op("linear", "zeros", 1).eval(&[Some(&x), Some(&g)]).unwrap();
        let b = op("linear", "border", 1).eval(&[Some(&x), Some(&g)]).unwrap();
        assert_eq!(z[0].to_f64_vec(), vec![0.0]);
        assert_eq!(b[0].to_f64_vec(), vec![3.0]);
        // Reflection: x = 3 -> pixel 4 -> reflected at 2 -> pixel 0.
        let rf = op("nearest", "reflection", 1).eval(&[Some(&x), Some(&g)]).unwrap();
        assert_eq!(rf[0].to_f64_vec(), vec![1.0]);
        let bad = Tensor::new(vec![1, 1, 1, 3], vec![0f32; 3]).unwrap();
        assert!(op("linear", "zeros", 0).eval(&[Some(&x), Some(&bad)]).is_err());
        assert!(build_op("", "GridSample", 20, &[("mode", Attribute::String("bilinear".into()))], 2, 1).is_err());
    }
}
