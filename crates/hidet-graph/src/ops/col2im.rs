//! Col2Im (opset 18): the inverse of im2col, summing overlapping blocks.
//!
//! Input `[N, C·∏block, L]` holds, for each channel, block element and block position, one
//! value; `image_shape` (`[d...]`) and `block_shape` (`[k...]`) are 1-D integer inputs. With
//! `dilations` (default 1), `strides` (default 1) and `pads` (`[begin..., end...]`, default 0),
//! axis `i` has `b_i = (d_i + pad_begin_i + pad_end_i - dilation_i·(k_i - 1) - 1) / stride_i + 1`
//! block positions and `L = ∏ b_i`. Output `[N, C, d...]`: element
//! `(n, c, p·stride - pad_begin + o·dilation)` accumulates input `(n, c·∏k + o, p)` for every
//! block offset `o` and position `p` that lands inside the image.

use crate::kernels::values::float_tensor;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::compute_util::{dims, finish, input, linearize, math_dtype, placeholders};
use crate::ops::window_compute::fits_i32;
use crate::ops::common::{check_dtype, float, int_list};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::compute::{grid, reduce, ReduceKind};
use hidet_ir::expr::Expr;

#[derive(Debug)]
struct Col2Im {
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// Registers Col2Im.
pub fn register(r: &mut Registry) {
    r.register("", "Col2Im", 18..=LATEST_OPSET, |c: &OpContext<'_>| {
        Ok(Box::new(Col2Im {
            dilations: c.attrs.ints("dilations")?.cloned(),
            pads: c.attrs.ints("pads")?.cloned(),
            strides: c.attrs.ints("strides")?.cloned(),
        }))
    });
}

/// The checked geometry of one Col2Im call.
struct Geometry {
    image: Vec<usize>,
    block: Vec<usize>,
    dilations: Vec<usize>,
    strides: Vec<usize>,
    pad_begin: Vec<usize>,
    /// Block positions per axis.
    positions: Vec<usize>,
}

fn sizes(t: &Tensor, what: &str) -> Result<Vec<usize>, OpError> {
    int_list(t, what)?
        .into_iter()
        .map(|v| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| OpError::Invalid(format!("{what} must be positive, got {v}")))
        })
        .collect()
}

impl Col2Im {
    fn geometry(&self, image: Vec<usize>, block: Vec<usize>) -> Result<Geometry, OpError> {
        let n = image.len();
        if block.len() != n || n == 0 {
            return Err(OpError::Shape(format!(
                "image_shape {image:?} and block_shape {block:?} must have the same non-zero length"
            )));
        }
        let attr = |name: &str, v: &Option<Vec<i64>>, len: usize, default: i64, min: i64| {
            let v = v.clone().unwrap_or_else(|| vec![default; len]);
            if v.len() != len || v.iter().any(|&x| x < min) {
                return Err(OpError::attr(
                    name,
                    format!("needs {len} values >= {min}, got {v:?}"),
                ));
            }
            Ok(v.into_iter().map(|x| x as usize).collect::<Vec<usize>>())
        };
        let dilations = attr("dilations", &self.dilations, n, 1, 1)?;
        let strides = attr("strides", &self.strides, n, 1, 1)?;
        let pads = attr("pads", &self.pads, 2 * n, 0, 0)?;
        let mut positions = Vec::with_capacity(n);
        for i in 0..n {
            let span = dilations[i] * (block[i] - 1) + 1;
            let padded = image[i] + pads[i] + pads[n + i];
            if padded < span {
                return Err(OpError::Shape(format!(
                    "axis {i}: block span {span} exceeds the padded image size {padded}"
                )));
            }
            positions.push((padded - span) / strides[i] + 1);
        }
        Ok(Geometry {
            image,
            block,
            dilations,
            strides,
            pad_begin: pads[..n].to_vec(),
            positions,
        })
    }
}

/// Row-major multi-index of `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        idx[i] = flat % d;
        flat /= d;
    }
    idx
}

impl Operator for Col2Im {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let image = infer_arg(inputs, 1)?;
        let block = infer_arg(inputs, 2)?;
        let batch = x
            .ty
            .shape
            .as_ref()
            .and_then(|s| s.first().cloned())
            .unwrap_or(Dim::Unknown);
        let channels = match (x.ty.shape.as_deref(), block.value) {
            (Some([_, Dim::Fixed(cb), _]), Some(b)) => {
                let k: usize = sizes(b, "block_shape")?.iter().product();
                if cb % k != 0 {
                    return Err(OpError::Shape(format!(
                        "input dimension 1 ({cb}) is not a multiple of the block size {k}"
                    )));
                }
                Dim::Fixed(cb / k)
            }
            _ => Dim::Unknown,
        };
        let shape = match image.value {
            Some(v) => {
                let mut s = vec![batch, channels];
                s.extend(sizes(v, "image_shape")?.into_iter().map(Dim::Fixed));
                Some(s)
            }
            None => match image.ty.shape.as_deref() {
                Some([Dim::Fixed(n)]) => {
                    let mut s = vec![batch, channels];
                    s.extend(std::iter::repeat_n(Dim::Unknown, *n));
                    Some(s)
                }
                _ => None,
            },
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        let g = self.geometry(
            sizes(arg(inputs, 1)?, "image_shape")?,
            sizes(arg(inputs, 2)?, "block_shape")?,
        )?;
        let k: usize = g.block.iter().product();
        let l: usize = g.positions.iter().product();
        let &[n, cb, len] = x.shape() else {
            return Err(OpError::Shape(format!(
                "input must be [N, C * prod(block_shape), L], got {:?}",
                x.shape()
            )));
        };
        if cb % k != 0 || len != l {
            return Err(OpError::Shape(format!(
                "input {:?} does not match {k} block elements and {l} block positions {:?}",
                x.shape(),
                g.positions
            )));
        }
        let c = cb / k;
        let pixels: usize = g.image.iter().product();
        let xv = x.to_f64_vec();
        let mut out = vec![0.0f64; n * c * pixels];
        for o in 0..k {
            let offset = unravel(o, &g.block);
            for p in 0..l {
                let pos = unravel(p, &g.positions);
                let mut dst = Some(0usize);
                for i in 0..g.image.len() {
                    let at = (pos[i] * g.strides[i] + offset[i] * g.dilations[i]) as i64
                        - g.pad_begin[i] as i64;
                    dst = match dst {
                        Some(d) if at >= 0 && (at as usize) < g.image[i] => {
                            Some(d * g.image[i] + at as usize)
                        }
                        _ => None,
                    };
                }
                let Some(dst) = dst else { continue };
                for b in 0..n {
                    for ch in 0..c {
                        out[(b * c + ch) * pixels + dst] += xv[(b * cb + ch * k + o) * l + p];
                    }
                }
            }
        }
        let mut shape = vec![n, c];
        shape.extend_from_slice(&g.image);
        Ok(vec![float_tensor(x.dtype(), shape, &out, 0)?])
    }

    /// With constant `image_shape` and `block_shape`: `out[n, c, d…]` sums, over the block
    /// offsets `o…`, the input `(n, c·∏k + o, p)` at the block position `p` with
    /// `p·stride = d + pad_begin - o·dilation` on every axis (where that is a position).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let (Some(image), Some(block)) = (
            input(inputs, 1)?.value,
            input(inputs, 2)?.value,
        ) else {
            return Ok(None);
        };
        let g = self.geometry(sizes(image, "image_shape")?, sizes(block, "block_shape")?)?;
        let k: usize = g.block.iter().product();
        let l: usize = g.positions.iter().product();
        let &[n, cb, len] = x.shape else {
            return Err(OpError::Shape(format!(
                "input must be [N, C * prod(block_shape), L], got {:?}",
                x.shape
            )));
        };
        if cb % k != 0 || len != l {
            return Err(OpError::Shape(format!(
                "input {:?} does not match {k} block elements and {l} block positions {:?}",
                x.shape, g.positions
            )));
        }
        let mut shape = vec![n, cb / k];
        shape.extend_from_slice(&g.image);
        if !fits_i32(&[x.shape, &shape]) {
            return Ok(None);
        }
        let dtype = x.dtype.to_ir();
        let acc = math_dtype(dtype);
        let vars = placeholders(inputs);
        let (sum, sum_node) = reduce("acc", acc, dims(&shape), dims(&g.block), ReduceKind::Sum, |i, r| {
            let mut inside: Option<Expr> = None;
            let mut at = Vec::with_capacity(r.len());
            for (a, (d, o)) in i[2..].iter().zip(r).enumerate() {
                let (stride, dil) = (g.strides[a] as i64, g.dilations[a] as i64);
                let mut t = d.clone();
                if g.pad_begin[a] != 0 {
                    t = t + g.pad_begin[a] as i64;
                }
                if g.block[a] > 1 {
                    t = t - o.clone() * dil;
                }
                let mut cond = t.ge(0).and(t.lt(g.positions[a] as i64 * stride));
                if stride > 1 {
                    cond = cond.and((&t % Expr::int(stride)).eq(0));
                    t = &t / Expr::int(stride);
                }
                inside = Some(match inside {
                    None => cond,
                    Some(c) => c.and(cond),
                });
                at.push(t);
            }
            let channel = i[1].clone() * k as i64 + linearize(r, &g.block);
            let v = vars[0].at([i[0].clone(), channel, linearize(&at, &g.positions)]);
            let v = if acc == dtype { v } else { v.cast(acc) };
            match inside {
                Some(c) => Expr::select(c, v, Expr::zero(acc)),
                None => v,
            }
        });
        let (out, out_node) = grid("out", dtype, dims(&shape), |i| {
            let v = sum.at(i.to_vec());
            if acc == dtype {
                v
            } else {
                v.cast(dtype)
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

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::kernels::movement::testing::Rng;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    /// Col2Im of im2col(image) with non-overlapping blocks gives the image back; with overlap,
    /// each pixel is multiplied by the number of blocks covering it.
    #[test]
    fn inverts_im2col() {
        let mut rng = Rng::new(3);
        let (h, w) = (5usize, 7usize);
        let img = rng.tensor(&[1, 2, h, w]).to_f64_vec();
        // 2x3 blocks, stride 1, pad 1 on every side, dilation (2, 1).
        let (kh, kw, dh, dw, pad) = (2usize, 3usize, 2usize, 1usize, 1usize);
        let bh = (h + 2 * pad - dh * (kh - 1) - 1) + 1;
        let bw = (w + 2 * pad - dw * (kw - 1) - 1) + 1;
        let mut cols = vec![0f32; 2 * kh * kw * bh * bw];
        let mut cover = vec![0f64; h * w];
        for c in 0..2 {
            for oy in 0..kh {
                for ox in 0..kw {
                    for py in 0..bh {
                        for px in 0..bw {
                            let y = (py + oy * dh) as i64 - pad as i64;
                            let x = (px + ox * dw) as i64 - pad as i64;
                            if y < 0 || x < 0 || y >= h as i64 || x >= w as i64 {
                                continue;
                            }
                            let (y, x) = (y as usize, x as usize);
                            let row = (c * kh + oy) * kw + ox;
                            cols[(row * bh + py) * bw + px] = img[(c * h + y) * w + x] as f32;
                            if c == 0 {
                                cover[y * w + x] += 1.0;
                            }
                        }
                    }
                }
            }
        }
        let op = build_op(
            "",
            "Col2Im",
            18,
            &[
                ("dilations", Attribute::Ints(vec![2, 1])),
                ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
            ],
            3,
            1,
        )
        .unwrap();
        let x = Tensor::new(vec![1, 2 * kh * kw, bh * bw], cols).unwrap();
        let image = Tensor::new(vec![2], vec![h as i64, w as i64]).unwrap();
        let block = Tensor::new(vec![2], vec![kh as i64, kw as i64]).unwrap();
        let y = op
            .eval(&[Some(&x), Some(&image), Some(&block)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[1, 2, h, w]);
        for (i, got) in y.to_f64_vec().into_iter().enumerate() {
            let want = img[i] * cover[i % (h * w)];
            assert!((got - want).abs() < 1e-5, "{i}: {got} vs {want}");
        }
        let wrong = Tensor::new(vec![2], vec![h as i64, w as i64 + 1]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&wrong), Some(&block)]).is_err());
    }
}
