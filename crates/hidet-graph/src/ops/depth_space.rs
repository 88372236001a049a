//! DepthToSpace and SpaceToDepth: move `blocksize × blocksize` blocks between the channel
//! dimension and the spatial dimensions of an NCHW tensor.

use crate::kernels::movement::{offsets, strides, take};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

/// Channel order of DepthToSpace's input blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// depth-column-row: channel `(i * b + j) * C' + c`.
    Dcr,
    /// column-row-depth: channel `c * b * b + i * b + j`.
    Crd,
}

/// `[N, C, H, W] → [N, C / b², H·b, W·b]`.
#[derive(Debug)]
struct DepthToSpace {
    block: usize,
    order: Order,
}

/// `[N, C, H, W] → [N, C·b², H / b, W / b]` (channel `(i * b + j) * C + c`).
#[derive(Debug)]
struct SpaceToDepth {
    block: usize,
}

fn blocksize(c: &crate::operator::OpContext<'_>) -> Result<usize, OpError> {
    let b = c.attrs.req_int("blocksize")?;
    usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| OpError::attr("blocksize", format!("must be positive, got {b}")))
}

/// Registers DepthToSpace and SpaceToDepth.
pub fn register(r: &mut Registry) {
    r.register("", "DepthToSpace", 1..=10, |c| {
        Ok(Box::new(DepthToSpace {
            block: blocksize(c)?,
            order: Order::Dcr,
        }))
    });
    r.register("", "DepthToSpace", 11..=LATEST_OPSET, |c| {
        let order = match c.attrs.string_or("mode", "DCR")?.as_str() {
            "DCR" => Order::Dcr,
            "CRD" => Order::Crd,
            m => {
                return Err(OpError::attr(
                    "mode",
                    format!("must be DCR or CRD, got `{m}`"),
                ))
            }
        };
        Ok(Box::new(DepthToSpace {
            block: blocksize(c)?,
            order,
        }))
    });
    r.register("", "SpaceToDepth", 1..=LATEST_OPSET, |c| {
        let mode = c.attrs.string_or("mode", "DCR")?;
        if mode != "DCR" {
            return Err(OpError::Unsupported(format!("SpaceToDepth with mode `{mode}`")));
        }
        Ok(Box::new(SpaceToDepth {
            block: blocksize(c)?,
        }))
    });
}

/// `d / b` for a dimension that must be divisible, `d * b` for `mul`; unknown stays unknown.
fn scale(d: &Dim, b: usize, mul: bool, what: &str) -> Result<Dim, OpError> {
    match d {
        Dim::Fixed(n) if mul => Ok(n.checked_mul(b).map(Dim::Fixed).unwrap_or(Dim::Unknown)),
        Dim::Fixed(n) if n / b * b == *n => Ok(Dim::Fixed(n / b)),
        Dim::Fixed(n) => Err(OpError::Shape(format!(
            "{what}: dimension {n} is not divisible by {b}"
        ))),
        _ => Ok(Dim::Unknown),
    }
}

fn nchw(shape: &[usize], what: &str) -> Result<[usize; 4], OpError> {
    <[usize; 4]>::try_from(shape)
        .map_err(|_| OpError::Shape(format!("{what}: input {shape:?} is not 4-D")))
}

/// The output type of `what` for a 4-D input and block size `b`: DepthToSpace (`to_space`)
/// divides the channels by `b²` and multiplies height and width by `b`, SpaceToDepth the
/// reverse.
fn infer4(
    inputs: &[Option<InferInput<'_>>],
    what: &str,
    b: usize,
    to_space: bool,
) -> Result<Vec<TensorType>, OpError> {
    let x = infer_arg(inputs, 0)?;
    let shape = match &x.ty.shape {
        Some(d) if d.len() == 4 => {
            let bb = b
                .checked_mul(b)
                .ok_or_else(|| OpError::Shape(format!("{what}: blocksize overflow")))?;
            vec![
                d[0].clone(),
                scale(&d[1], bb, !to_space, what)?,
                scale(&d[2], b, to_space, what)?,
                scale(&d[3], b, to_space, what)?,
            ]
        }
        Some(d) => {
            return Err(OpError::Shape(format!(
                "{what}: input of rank {} is not 4-D",
                d.len()
            )))
        }
        None => vec![Dim::Unknown; 4],
    };
    Ok(vec![TensorType {
        dtype: x.ty.dtype,
        shape: Some(shape),
    }])
}

impl Operator for DepthToSpace {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer4(inputs, "DepthToSpace", self.block, true)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let [n, c, h, w] = nchw(x.shape(), "DepthToSpace")?;
        let b = self.block;
        let bb = b
            .checked_mul(b)
            .ok_or_else(|| OpError::Shape("DepthToSpace: blocksize overflow".into()))?;
        if c / bb * bb != c {
            return Err(OpError::Shape(format!(
                "DepthToSpace: {c} channels are not divisible by {bb}"
            )));
        }
        let oc = c / bb;
        let shape = vec![
            n,
            oc,
            h.checked_mul(b)
                .ok_or_else(|| OpError::Shape("overflow".into()))?,
            w.checked_mul(b)
                .ok_or_else(|| OpError::Shape("overflow".into()))?,
        ];
        let st = strides(x.shape());
        let order = self.order;
        let src = offsets(&shape, |o| {
            let (i, j) = (o[2] % b, o[3] % b);
            let ch = match order {
                Order::Dcr => (i * b + j) * oc + o[1],
                Order::Crd => o[1] * bb + i * b + j,
            };
            Ok(o[0] * st[0] + ch * st[1] + (o[2] / b) * st[2] + o[3] / b)
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[n, c, h, w] = x[n, channel(c, h % b, w % b), h / b, w / b]` with the channel of
    /// the block order (DCR or CRD).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let [n, c, h, w] = nchw(x.shape, "DepthToSpace")?;
        let b = self.block;
        let bb = b
            .checked_mul(b)
            .ok_or_else(|| OpError::Shape("DepthToSpace: blocksize overflow".into()))?;
        if c / bb * bb != c {
            return Err(OpError::Shape(format!(
                "DepthToSpace: {c} channels are not divisible by {bb}"
            )));
        }
        let oc = c / bb;
        let grow = |d: usize| {
            d.checked_mul(b)
                .ok_or_else(|| OpError::Shape("DepthToSpace: size overflow".into()))
        };
        let shape = [n, oc, grow(h)?, grow(w)?];
        let vars = placeholders(inputs);
        let order = self.order;
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |o| {
            let k = |v: usize| Expr::int(v as i64);
            let (i, j) = (&o[2] % k(b), &o[3] % k(b));
            let ch = match order {
                Order::Dcr => (i * k(b) + j) * k(oc) + o[1].clone(),
                Order::Crd => &o[1] * k(bb) + i * k(b) + j,
            };
            vars[0].at([o[0].clone(), ch, &o[2] / k(b), &o[3] / k(b)])
        })?;
        Ok(Some(def))
    }
}

impl Operator for SpaceToDepth {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer4(inputs, "SpaceToDepth", self.block, false)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let [n, c, h, w] = nchw(x.shape(), "SpaceToDepth")?;
        let b = self.block;
        if h / b * b != h || w / b * b != w {
            return Err(OpError::Shape(format!(
                "SpaceToDepth: spatial size {h}x{w} is not divisible by {b}"
            )));
        }
        let bb = b
            .checked_mul(b)
            .ok_or_else(|| OpError::Shape("SpaceToDepth: blocksize overflow".into()))?;
        let cc = c
            .checked_mul(bb)
            .ok_or_else(|| OpError::Shape("SpaceToDepth: size overflow".into()))?;
        let shape = vec![n, cc, h / b, w / b];
        let st = strides(x.shape());
        let src = offsets(&shape, |o| {
            let (blk, ch) = (o[1] / c, o[1] % c);
            let (i, j) = (blk / b, blk % b);
            Ok(o[0] * st[0] + ch * st[1] + (o[2] * b + i) * st[2] + o[3] * b + j)
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[n, (i * b + j) * C + c, h, w] = x[n, c, h * b + i, w * b + j]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let [n, c, h, w] = nchw(x.shape, "SpaceToDepth")?;
        let b = self.block;
        if h / b * b != h || w / b * b != w {
            return Err(OpError::Shape(format!(
                "SpaceToDepth: spatial size {h}x{w} is not divisible by {b}"
            )));
        }
        let bb = b
            .checked_mul(b)
            .ok_or_else(|| OpError::Shape("SpaceToDepth: blocksize overflow".into()))?;
        let cc = c
            .checked_mul(bb)
            .ok_or_else(|| OpError::Shape("SpaceToDepth: size overflow".into()))?;
        let shape = [n, cc, h / b, w / b];
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |o| {
            let k = |v: usize| Expr::int(v as i64);
            if c == 0 {
                return Expr::zero(x.dtype.to_ir());
            }
            let (blk, ch) = (&o[1] / k(c), &o[1] % k(c));
            let (i, j) = (&blk / k(b), &blk % k(b));
            vars[0].at([o[0].clone(), ch, &o[2] * k(b) + i, &o[3] * k(b) + j])
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    /// The ONNX definition of DepthToSpace as reshape/transpose/reshape, written with explicit
    /// six-dimensional loops.
    fn depth_to_space_ref(x: &[f32], [n, c, h, w]: [usize; 4], b: usize, crd: bool) -> Vec<f32> {
        let oc = c / (b * b);
        let mut out = vec![0.0; x.len()];
        for ni in 0..n {
            for ci in 0..oc {
                for hi in 0..h {
                    for bi in 0..b {
                        for wi in 0..w {
                            for bj in 0..b {
                                let ch = if crd {
                                    ci * b * b + bi * b + bj
                                } else {
                                    bi * b * oc + bj * oc + ci
                                };
                                let src = ((ni * c + ch) * h + hi) * w + wi;
                                let dst =
                                    ((ni * oc + ci) * h * b + hi * b + bi) * w * b + wi * b + bj;
                                out[dst] = x[src];
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn depth_to_space_both_orders_and_round_trip() {
        let dims = [2, 8, 3, 5];
        let x = Rng::new(71).tensor(&dims);
        let xs = x.as_slice::<f32>().unwrap();
        for (order, crd) in [(Order::Dcr, false), (Order::Crd, true)] {
            let y = DepthToSpace { block: 2, order }
                .eval(&[Some(&x)])
                .unwrap()
                .remove(0);
            assert_eq!(y.shape(), &[2, 2, 6, 10]);
            assert_eq!(
                y.as_slice::<f32>().unwrap(),
                &depth_to_space_ref(xs, dims, 2, crd)[..]
            );
        }
        // SpaceToDepth inverts DCR DepthToSpace.
        let y = DepthToSpace {
            block: 2,
            order: Order::Dcr,
        }
        .eval(&[Some(&x)])
        .unwrap()
        .remove(0);
        let z = SpaceToDepth { block: 2 }
            .eval(&[Some(&y)])
            .unwrap()
            .remove(0);
        assert_eq!(z, x);
    }

    #[test]
    fn errors() {
        let x = Rng::new(72).tensor(&[1, 3, 2, 2]);
        assert!(DepthToSpace {
            block: 2,
            order: Order::Dcr
        }
        .eval(&[Some(&x)])
        .is_err());
        let y = Rng::new(73).tensor(&[1, 2, 3, 4]);
        assert!(SpaceToDepth { block: 2 }.eval(&[Some(&y)]).is_err());
        let z = Rng::new(74).tensor(&[4, 4]);
        assert!(SpaceToDepth { block: 2 }.eval(&[Some(&z)]).is_err());
    }
}
