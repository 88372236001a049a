//! Pad: grows (or, with negative pads, crops) every axis. Modes `constant`, `reflect`
//! (mirror without repeating the edge), `edge` (repeat the edge) and, from opset 19, `wrap`
//! (periodic). Pads are an attribute before opset 11 and input #1 from opset 11; the constant
//! value is input #2 from opset 11 and `axes` input #3 from opset 18.

use crate::kernels::movement::{opt_offsets, strides, take_or_fill};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator,
};
use crate::ops::common::int_list;
use crate::ops::compute_util::{clamp, grid_def, input, opt_input, placeholders, scalar_const};
use crate::ops::squeeze::norm_axes;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// Pad; `attr` holds (`pads`, `value`) before opset 11.
#[derive(Debug)]
struct Pad {
    mode: Mode,
    attr: Option<(Vec<i64>, f32)>,
}

/// Registers Pad.
pub fn register(r: &mut Registry) {
    r.register("", "Pad", 2..=10, |c| {
        let pads = c
            .attrs
            .ints("pads")?
            .cloned()
            .ok_or_else(|| OpError::attr("pads", "required attribute is missing"))?;
        Ok(Box::new(Pad {
            mode: mode(c.attrs.string_or("mode", "constant")?, c.opset)?,
            attr: Some((pads, c.attrs.float_or("value", 0.0)?)),
        }))
    });
    for range in [11..=17, 18..=18, 19..=LATEST_OPSET] {
        r.register("", "Pad", range, |c| {
            Ok(Box::new(Pad {
                mode: mode(c.attrs.string_or("mode", "constant")?, c.opset)?,
                attr: None,
            }))
        });
    }
}

fn mode(s: String, opset: i64) -> Result<Mode, OpError> {
    Ok(match s.as_str() {
        "constant" => Mode::Constant,
        "reflect" => Mode::Reflect,
        "edge" => Mode::Edge,
        "wrap" if opset >= 19 => Mode::Wrap,
        _ => {
            return Err(OpError::attr(
                "mode",
                format!("`{s}` is not a padding mode of opset {opset}"),
            ))
        }
    })
}

/// Source index along one axis of size `dim` for the (possibly out-of-range) position `i`;
/// `None` means the constant value.
fn source(mode: Mode, i: i64, dim: usize) -> Option<usize> {
    let d = dim as i64;
    if (0..d).contains(&i) {
        return Some(i as usize);
    }
    match mode {
        Mode::Constant => None,
        Mode::Edge => Some(i.clamp(0, d - 1) as usize),
        Mode::Wrap => Some(i.rem_euclid(d) as usize),
        Mode::Reflect if d == 1 => Some(0),
        Mode::Reflect => {
            let m = i.rem_euclid(2 * (d - 1));
            Some(if m >= d { 2 * (d - 1) - m } else { m } as usize)
        }
    }
}

impl Pad {
    /// Per-axis (begin, end) pads for a tensor of `rank`, from the attribute or the inputs.
    fn pads(
        &self,
        rank: usize,
        pads: Option<&Tensor>,
        axes: Option<&Tensor>,
    ) -> Result<Vec<(i64, i64)>, OpError> {
        let list = match (&self.attr, pads) {
            (Some((p, _)), _) => p.clone(),
            (None, Some(t)) => int_list(t, "Pad pads")?,
            (None, None) => return Err(OpError::MissingInput(1)),
        };
        let axes = match axes {
            Some(t) => norm_axes(&int_list(t, "Pad axes")?, rank, "Pad")?,
            None => (0..rank).collect(),
        };
        let n = axes.len();
        if list.len() != 2 * n {
            return Err(OpError::Invalid(format!(
                "Pad: {} pads for {n} axes (need {})",
                list.len(),
                2 * n
            )));
        }
        let mut out = vec![(0, 0); rank];
        for (i, &a) in axes.iter().enumerate() {
            out[a] = (list[i], list[n + i]);
        }
        Ok(out)
    }
}

/// Output size of an axis of size `d` padded by `(b, e)`, or an error if negative.
fn padded(d: usize, (b, e): (i64, i64)) -> Result<usize, OpError> {
    let n = d as i128 + b as i128 + e as i128;
    usize::try_from(n).map_err(|_| {
        OpError::Shape(format!(
            "Pad: axis of size {d} padded by ({b}, {e}) has size {n}"
        ))
    })
}

impl Operator for Pad {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let Some(dims) = &x.ty.shape else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let value = |i: usize| infer_opt(inputs, i).map(|v| v.value);
        let known = match (value(1), value(3)) {
            (Some(None), _) | (_, Some(None)) => None,
            (p, a) => Some(self.pads(dims.len(), p.flatten(), a.flatten())?),
        };
        let shape = match known {
            None => vec![Dim::Unknown; dims.len()],
            Some(p) => dims
                .iter()
                .zip(p)
                .map(|(d, p)| match d {
                    Dim::Fixed(n) => padded(*n, p).map(Dim::Fixed),
                    d if p == (0, 0) => Ok(d.clone()),
                    _ => Ok(Dim::Unknown),
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let pads = self.pads(x.rank(), opt_arg(inputs, 1), opt_arg(inputs, 3))?;
        let shape: Vec<usize> = x
            .shape()
            .iter()
            .zip(&pads)
            .map(|(&d, &p)| padded(d, p))
            .collect::<Result<_, _>>()?;
        if self.mode != Mode::Constant {
            for (a, (&d, &n)) in x.shape().iter().zip(&shape).enumerate() {
                if d == 0 && n > 0 {
                    return Err(OpError::Invalid(format!(
                        "Pad: cannot pad empty axis {a} in mode {:?}",
                        self.mode
                    )));
                }
            }
        }
        let fill = match (&self.attr, opt_arg(inputs, 2)) {
            (Some((_, v)), _) => Some(Tensor::scalar(*v).cast(x.dtype())),
            (None, Some(t)) if t.numel() > 0 => Some(t.clone()),
            (None, _) => None,
        };
        let st = strides(x.shape());
        let dims = x.shape().to_vec();
        let mode = self.mode;
        let src = opt_offsets(&shape, |o| {
            let mut off = 0usize;
            for (a, &i) in o.iter().enumerate() {
                let pos = i as i64 - pads[a].0;
                match source(mode, pos, dims[a]) {
                    Some(j) => off += j * st[a],
                    None => return Ok(None),
                }
            }
            Ok(Some(off))
        })?;
        Ok(vec![take_or_fill(x, fill.as_ref(), shape, &src)?])
    }

    /// `out[i] = x[source(i - pad_begin)]` per axis, with the mode's source index
    /// (`clamp` for edge, `%` for wrap, a fold for reflect); in constant mode a select of the
    /// fill value (input #2's first element, the `value` attribute before opset 11, else 0)
    /// where a padded axis is outside `x`. Needs the values of `pads` and `axes`, and pads
    /// that fit the `i32` index arithmetic.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let known = |i: usize| match opt_input(inputs, i) {
            None => Ok(None),
            Some(ComputeInput { value: Some(v), .. }) => Ok(Some(v)),
            Some(_) => Err(()),
        };
        let (Ok(pads), Ok(axes)) = (known(1), known(3)) else {
            return Ok(None);
        };
        let pads = self.pads(x.shape.len(), pads, axes)?;
        let fits = |v: i64| i32::try_from(v).is_ok();
        if !pads.iter().all(|&(b, e)| fits(b) && fits(e)) {
            return Ok(None);
        }
        let shape: Vec<usize> = x
            .shape
            .iter()
            .zip(&pads)
            .map(|(&d, &p)| padded(d, p))
            .collect::<Result<_, _>>()?;
        if self.mode != Mode::Constant {
            for (a, (&d, &n)) in x.shape.iter().zip(&shape).enumerate() {
                if d == 0 && n > 0 {
                    return Err(OpError::Invalid(format!(
                        "Pad: cannot pad empty axis {a} in mode {:?}",
                        self.mode
                    )));
                }
            }
        }
        let dtype = x.dtype.to_ir();
        let vars = placeholders(inputs);
        let fill = match (&self.attr, opt_input(inputs, 2)) {
            (Some((_, v)), _) => {
                scalar_const(&Tensor::scalar(*v).cast(x.dtype)).unwrap_or_else(|| Expr::zero(dtype))
            }
            (None, Some(f)) if f.dtype != x.dtype => {
                return Err(OpError::Invalid(format!(
                    "fill value has dtype {}, data has {}",
                    f.dtype, x.dtype
                )))
            }
            (None, Some(f)) if f.shape.iter().product::<usize>() > 0 => {
                vars[2].at(vec![Expr::int(0); f.shape.len()])
            }
            (None, _) => Expr::zero(dtype),
        };
        let mode = self.mode;
        let def = grid_def(vars.clone(), dtype, &shape, |i| {
            let mut inside: Option<Expr> = None;
            let mut j = Vec::with_capacity(i.len());
            for ((i, &(b, e)), &d) in i.iter().zip(&pads).zip(x.shape) {
                let pos = if b == 0 { i.clone() } else { i - Expr::int(b) };
                if b <= 0 && e <= 0 {
                    j.push(pos);
                    continue;
                }
                let k = |v: usize| Expr::int(v as i64);
                j.push(match mode {
                    Mode::Constant => {
                        let mut conds = Vec::new();
                        if b > 0 {
                            conds.push(pos.ge(Expr::int(0)));
                        }
                        if e > 0 {
                            conds.push(pos.lt(k(d)));
                        }
                        for c in conds {
                            inside = Some(match inside {
                                Some(acc) => acc.and(c),
                                None => c,
                            });
                        }
                        pos
                    }
                    Mode::Edge => clamp(pos, Expr::int(0), k(d.saturating_sub(1))),
                    Mode::Wrap => pos % k(d),
                    Mode::Reflect if d <= 1 => Expr::int(0),
                    Mode::Reflect => {
                        let period = 2 * (d - 1);
                        let m = pos % k(period);
                        Expr::select(m.ge(k(d)), k(period) - m.clone(), m)
                    }
                });
            }
            let read = vars[0].at(j);
            match inside {
                Some(c) => Expr::select(c, read, fill.clone()),
                None => read,
            }
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    fn list(v: &[i64]) -> Tensor {
        Tensor::new(vec![v.len()], v.to_vec()).unwrap()
    }

    /// numpy.pad on one axis, written as explicit index sequences.
    fn reference(mode: Mode, d: usize, b: usize, e: usize) -> Vec<Option<usize>> {
        (0..d + b + e)
            .map(|o| {
                let i = o as i64 - b as i64;
                let di = d as i64;
                match mode {
                    Mode::Constant => (0..di).contains(&i).then_some(i as usize),
                    Mode::Edge => Some(i.max(0).min(di - 1) as usize),
                    Mode::Wrap => Some((((i % di) + di) % di) as usize),
                    Mode::Reflect => {
                        // Bounce between 0 and d - 1.
                        let mut j = i;
                        while j < 0 || j >= di {
                            j = if j < 0 { -j } else { 2 * (di - 1) - j };
                        }
                        Some(j as usize)
                    }
                }
            })
            .collect()
    }

    #[test]
    fn modes_match_reference_on_2d() {
        let x = Rng::new(51).tensor(&[3, 4]);
        let xs = x.as_slice::<f32>().unwrap();
        let fill = Tensor::scalar(2.5f32);
        for mode in [Mode::Constant, Mode::Reflect, Mode::Edge, Mode::Wrap] {
            let op = Pad { mode, attr: None };
            // Axes -1 only (opset 18 style): 5 before, 2 after on the last axis.
            let y = op
                .eval(&[
                    Some(&x),
                    Some(&list(&[5, 2])),
                    Some(&fill),
                    Some(&list(&[-1])),
                ])
                .unwrap()
                .remove(0);
            assert_eq!(y.shape(), &[3, 11]);
            let cols = reference(mode, 4, 5, 2);
            let ys = y.as_slice::<f32>().unwrap();
            for r in 0..3 {
                for (c, src) in cols.iter().enumerate() {
                    let want = src.map(|s| xs[r * 4 + s]).unwrap_or(2.5);
                    assert_eq!(ys[r * 11 + c], want, "{mode:?} ({r}, {c})");
                }
            }
        }
    }

    #[test]
    fn negative_pads_crop_and_attr_value() {
        let x = Rng::new(52).tensor(&[3, 4]);
        let xs = x.as_slice::<f32>().unwrap();
        let op = Pad {
            mode: Mode::Constant,
            attr: Some((vec![-1, 1, 0, -2], 1.5)),
        };
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[1.5, xs[4], xs[5], 1.5, xs[8], xs[9]]
        );
        let op = Pad {
            mode: Mode::Constant,
            attr: None,
        };
        assert!(op.eval(&[Some(&x), Some(&list(&[0, 0, -4, 0]))]).is_err());
        assert!(op.eval(&[Some(&x), Some(&list(&[1, 1]))]).is_err());
        assert!(op.eval(&[Some(&x)]).is_err());
        let e = Tensor::new(vec![0, 2], Vec::<f32>::new()).unwrap();
        let reflect = Pad {
            mode: Mode::Reflect,
            attr: None,
        };
        assert!(reflect
            .eval(&[Some(&e), Some(&list(&[1, 0, 0, 0]))])
            .is_err());
        assert!(mode("wrap".into(), 18).is_err());
    }
}
