//! Pooling: MaxPool (with Indices), AveragePool, LpPool and their global variants.

use crate::dtype::DType;
use crate::kernels::pool::{pool_nd, PoolKind};
use crate::kernels::window::{WindowAttrs, WindowSpec};
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{
    dims, finish, input, konst, math1, math_dtype, placeholders, AxisReduction,
};
use crate::ops::window_compute::{fits_i32, guarded, reads_padding, window_read};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};
use hidet_ir::compute::{grid, reduce, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::intrinsic::MathFunc;

/// Which reduction a pooling node applies (the window's parameters are separate).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reduce {
    Max,
    Average { count_include_pad: bool },
    Lp { p: f64 },
}

/// A windowed pooling node.
#[derive(Debug)]
struct Pool {
    reduce: Reduce,
    window: WindowAttrs,
    /// MaxPool `storage_order`: indices are column-major over spatial dimensions.
    column_major: bool,
    /// The node declares the MaxPool `Indices` output.
    indices: bool,
}

/// A global pooling node (the window is the whole spatial extent).
#[derive(Debug)]
struct GlobalPool {
    reduce: Reduce,
}

fn bool_attr(c: &OpContext<'_>, name: &str) -> Result<bool, OpError> {
    match c.attrs.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

fn lp_p(c: &OpContext<'_>) -> Result<f64, OpError> {
    let p = c.attrs.int_or("p", 2)?;
    if p < 1 {
        return Err(OpError::attr("p", format!("must be >= 1, got {p}")));
    }
    Ok(p as f64)
}

fn windowed(c: &OpContext<'_>, reduce: Reduce) -> Result<Box<dyn Operator>, OpError> {
    let spec = WindowSpec::from_attrs(c.attrs)?;
    let kernel = spec
        .kernel
        .clone()
        .ok_or_else(|| OpError::attr("kernel_shape", "required attribute is missing"))?;
    let fallback: Vec<usize> = kernel.iter().map(|&k| k.max(0) as usize).collect();
    let window = spec.attrs(&fallback)?;
    Ok(Box::new(Pool {
        reduce,
        window,
        column_major: bool_attr(c, "storage_order")?,
        indices: reduce == Reduce::Max && c.num_outputs >= 2,
    }))
}

/// Registers the pooling family.
pub fn register(r: &mut Registry) {
    r.register("", "MaxPool", 1..=LATEST_OPSET, |c: &OpContext<'_>| {
        windowed(c, Reduce::Max)
    });
    r.register("", "AveragePool", 1..=LATEST_OPSET, |c: &OpContext<'_>| {
        let count_include_pad = bool_attr(c, "count_include_pad")?;
        windowed(c, Reduce::Average { count_include_pad })
    });
    r.register("", "LpPool", 2..=LATEST_OPSET, |c: &OpContext<'_>| {
        windowed(c, Reduce::Lp { p: lp_p(c)? })
    });
    r.register("", "GlobalMaxPool", 1..=LATEST_OPSET, |_| {
        Ok(Box::new(GlobalPool {
            reduce: Reduce::Max,
        }))
    });
    r.register("", "GlobalAveragePool", 1..=LATEST_OPSET, |_| {
        Ok(Box::new(GlobalPool {
            reduce: Reduce::Average {
                count_include_pad: false,
            },
        }))
    });
    r.register("", "GlobalLpPool", 2..=LATEST_OPSET, |c: &OpContext<'_>| {
        Ok(Box::new(GlobalPool {
            reduce: Reduce::Lp { p: lp_p(c)? },
        }))
    });
}

fn accepts(reduce: Reduce) -> fn(DType) -> bool {
    match reduce {
        Reduce::Max => |d: DType| d.is_float() || matches!(d, DType::I8 | DType::U8),
        _ => |d: DType| d.is_float(),
    }
}

fn kind(reduce: Reduce) -> PoolKind {
    match reduce {
        Reduce::Max => PoolKind::Max,
        Reduce::Average { count_include_pad } => PoolKind::Average { count_include_pad },
        Reduce::Lp { p } => PoolKind::Lp { p },
    }
}

fn to_tensor(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Result<Tensor, OpError> {
    Ok(
        dispatch_float!(dtype, T => Tensor::new(shape, v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>())?,
        else dispatch_int!(dtype, T => Tensor::new(shape, v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>())?,
            else return Err(OpError::DType { index: 0, dtype }))),
    )
}

impl Operator for Pool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, accepts(self.reduce))?;
        let shape = match &x.ty.shape {
            None => None,
            Some(d) => {
                if d.len() != self.window.rank() + 2 {
                    return Err(OpError::Shape(format!(
                        "input rank {} does not match kernel_shape rank {}",
                        d.len(),
                        self.window.rank()
                    )));
                }
                let mut out = d[..2].to_vec();
                out.extend(self.window.infer(&d[2..])?);
                Some(out)
            }
        };
        let mut out = vec![TensorType {
            dtype: x.ty.dtype,
            shape: shape.clone(),
        }];
        if self.reduce == Reduce::Max {
            out.push(TensorType {
                dtype: DType::I64,
                shape,
            });
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), accepts(self.reduce))?;
        let xs = x.shape();
        if xs.len() != self.window.rank() + 2 {
            return Err(OpError::Shape(format!(
                "input shape {xs:?} does not match kernel_shape rank {}",
                self.window.rank()
            )));
        }
        let geom = self.window.resolve(&xs[2..])?;
        let planes = xs[0] * xs[1];
        let r = pool_nd(kind(self.reduce), &geom, planes, &x.to_f64_vec())?;
        let mut shape = xs[..2].to_vec();
        shape.extend(&geom.output);
        let mut out = vec![to_tensor(x.dtype(), shape.clone(), &r.values)?];
        if self.reduce == Reduce::Max {
            let (ni, no) = (geom.input_size(), geom.output_size());
            let idx: Vec<i64> = r
                .argmax
                .iter()
                .enumerate()
                .map(|(i, &off)| {
                    let spatial = if self.column_major {
                        column_major(off, &geom.input)
                    } else {
                        off
                    };
                    ((i / no.max(1)) * ni + spatial) as i64
                })
                .collect();
            out.push(Tensor::new(shape, idx)?);
        }
        Ok(out)
    }
    /// Max, average and Lp pooling as a reduction over the kernel window, padding excluded
    /// by a select on the index bounds (see [`pool_def`]); `Ok(None)` when the node declares
    /// MaxPool's `Indices` output (an argmax has no definition here), and the definition then
    /// covers only `Y`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        if self.indices {
            return Ok(None);
        }
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, accepts(self.reduce))?;
        if x.shape.len() != self.window.rank() + 2 {
            return Err(OpError::Shape(format!(
                "input shape {:?} does not match kernel_shape rank {}",
                x.shape,
                self.window.rank()
            )));
        }
        let geom = self.window.resolve(&x.shape[2..])?;
        pool_def(self.reduce, &geom, inputs, x.dtype.to_ir(), x.shape)
    }
}

/// The type a pooling of `dtype` folds in: f32 for 16-bit floats, else `dtype`.
fn fold_dtype(dtype: DataType) -> DataType {
    if dtype.is_float() {
        math_dtype(dtype)
    } else {
        dtype
    }
}

/// `|x|^p` for the Lp reductions.
fn abs_pow(x: Expr, p: f64, dtype: DataType) -> Expr {
    let a = math1(MathFunc::Abs, x);
    match p {
        1.0 => a,
        2.0 => a.clone() * a,
        _ => Expr::math(MathFunc::Pow, vec![a, konst(p, dtype)]),
    }
}

/// `s^(1/p)` for the Lp reductions.
fn root(s: Expr, p: f64, dtype: DataType) -> Expr {
    match p {
        1.0 => s,
        2.0 => math1(MathFunc::Sqrt, s),
        _ => Expr::math(MathFunc::Pow, vec![s, konst(1.0 / p, dtype)]),
    }
}

/// The definition of a windowed pooling of `x` (`inputs[0]`, of `dtype` and shape `xs`) with
/// geometry `g`: a reduce over the kernel positions of every output element (Max with the
/// padding read as the identity; Sum for Average and Lp, padding read as 0), then a grid that
/// divides by the window's element count (all kernel positions with `count_include_pad`, the
/// positions inside the input otherwise: a second Sum reduce), takes the Lp root and casts.
fn pool_def(
    reduce_kind: Reduce,
    g: &crate::kernels::window::Geometry,
    inputs: &[Option<ComputeInput<'_>>],
    dtype: DataType,
    xs: &[usize],
) -> Result<Option<ComputeDef>, OpError> {
    let mut shape = xs[..2].to_vec();
    shape.extend(&g.output);
    if !fits_i32(&[xs, &shape]) {
        return Ok(None);
    }
    let acc = fold_dtype(dtype);
    let vars = placeholders(inputs);
    let vx = vars[0].clone();
    let read_x = |i: &[Expr], r: &[Expr]| {
        let read = window_read(g, &i[2..], r);
        let mut idx = i[..2].to_vec();
        idx.extend(read.index);
        let v = vx.at(idx);
        let v = if acc == dtype { v } else { v.cast(acc) };
        (v, read.inside)
    };
    let kind = match reduce_kind {
        Reduce::Max => ReduceKind::Max,
        _ => ReduceKind::Sum,
    };
    let (sum, sum_node) = reduce("acc", acc, dims(&shape), dims(&g.kernel), kind, |i, r| {
        let (v, inside) = read_x(i, r);
        match reduce_kind {
            Reduce::Max => guarded(&inside, v, ReduceKind::Max.identity(acc)),
            Reduce::Average { .. } => guarded(&inside, v, Expr::zero(acc)),
            Reduce::Lp { p } => guarded(&inside, abs_pow(v, p, acc), Expr::zero(acc)),
        }
    });
    let mut nodes = vec![(sum.clone(), sum_node)];
    let count: Option<Var> = match reduce_kind {
        Reduce::Average {
            count_include_pad: false,
        } if reads_padding(g) => {
            let (count, count_node) = reduce(
                "count",
                acc,
                dims(&shape),
                dims(&g.kernel),
                ReduceKind::Sum,
                |i, r| {
                    let inside = window_read(g, &i[2..], r).inside;
                    guarded(&inside, konst(1.0, acc), Expr::zero(acc))
                },
            );
            nodes.push((count.clone(), count_node));
            Some(count)
        }
        _ => None,
    };
    let nk = g.kernel_size() as f64;
    let (out, out_node) = grid("out", dtype, dims(&shape), |i| {
        let s = sum.at(i.to_vec());
        let v = match reduce_kind {
            Reduce::Max => s,
            Reduce::Average { .. } => match &count {
                Some(c) => s / c.at(i.to_vec()),
                None => s / konst(nk, acc),
            },
            Reduce::Lp { p } => root(s, p, acc),
        };
        if acc == dtype {
            v
        } else {
            v.cast(dtype)
        }
    });
    nodes.push((out.clone(), out_node));
    finish(vars, nodes, vec![out]).map(Some)
}

/// Converts a row-major offset within `dims` into the column-major offset of the same element.
fn column_major(mut off: usize, dims: &[usize]) -> usize {
    let mut idx = vec![0usize; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = off % dims[d].max(1);
        off /= dims[d].max(1);
    }
    let (mut result, mut stride) = (0, 1);
    for (i, &d) in idx.iter().zip(dims) {
        result += i * stride;
        stride *= d;
    }
    result
}

impl Operator for GlobalPool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, accepts(self.reduce))?;
        let shape = match &x.ty.shape {
            None => None,
            Some(d) if d.len() < 2 => {
                return Err(OpError::Shape(format!(
                    "global pooling needs rank >= 2, got {}",
                    d.len()
                )))
            }
            Some(d) => Some(
                d.iter()
                    .enumerate()
                    .map(|(i, v)| if i < 2 { v.clone() } else { Dim::Fixed(1) })
                    .collect(),
            ),
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), accepts(self.reduce))?;
        let xs = x.shape();
        if xs.len() < 2 {
            return Err(OpError::Shape(format!(
                "global pooling needs rank >= 2, got {xs:?}"
            )));
        }
        let plane: usize = xs[2..].iter().product();
        let v = x.to_f64_vec();
        let values: Vec<f64> = if plane == 0 {
            vec![f64::NAN; xs[0] * xs[1]]
        } else {
            v.chunks(plane)
                .map(|c| match self.reduce {
                    Reduce::Max => c.iter().copied().fold(f64::NEG_INFINITY, |a, b| {
                        if b > a || b.is_nan() {
                            b
                        } else {
                            a
                        }
                    }),
                    Reduce::Average { .. } => c.iter().sum::<f64>() / plane as f64,
                    Reduce::Lp { p } => {
                        c.iter().map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p)
                    }
                })
                .collect()
        };
        let shape: Vec<usize> = xs
            .iter()
            .enumerate()
            .map(|(i, &d)| if i < 2 { d } else { 1 })
            .collect();
        Ok(vec![to_tensor(x.dtype(), shape, &values)?])
    }
    /// A reduce over the spatial axes of each `[n, c]` plane (kept as size 1), then the
    /// mean's division, the Lp root and the cast (see [`pool_def`]); no definition for empty
    /// planes (whose result `eval` defines as NaN).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, accepts(self.reduce))?;
        let xs = x.shape;
        if xs.len() < 2 {
            return Err(OpError::Shape(format!(
                "global pooling needs rank >= 2, got {xs:?}"
            )));
        }
        let plane: usize = xs[2..].iter().product();
        if plane == 0 || !fits_i32(&[xs]) {
            return Ok(None);
        }
        let dtype = x.dtype.to_ir();
        let acc = fold_dtype(dtype);
        let vars = placeholders(inputs);
        let vx = vars[0].clone();
        let rows = AxisReduction::trailing(xs, 2, true);
        let kind = match self.reduce {
            Reduce::Max => ReduceKind::Max,
            _ => ReduceKind::Sum,
        };
        let reduce_kind = self.reduce;
        let (sum, sum_node) = rows.node("acc", acc, kind, |idx| {
            let v = vx.at(idx.to_vec());
            let v = if acc == dtype { v } else { v.cast(acc) };
            match reduce_kind {
                Reduce::Lp { p } => abs_pow(v, p, acc),
                _ => v,
            }
        });
        let (out, out_node) = grid("out", dtype, dims(&rows.out_shape()), |i| {
            let s = sum.at(i.to_vec());
            let v = match reduce_kind {
                Reduce::Max => s,
                Reduce::Average { .. } => s / konst(plane as f64, acc),
                Reduce::Lp { p } => root(s, p, acc),
            };
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
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(name: &str, attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        build_op("", name, 19, attrs, 1, 2)
    }

    fn pseudo(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 1.8 - 0.9 + 0.05
            })
            .collect()
    }

    /// Direct 2-D pooling with explicit pads (no ceil mode) in f64: (max, argmax, avg, avg_incl).
    fn reference(
        x: &[f32],
        h: usize,
        w: usize,
        k: [usize; 2],
        s: [usize; 2],
        d: [usize; 2],
        p: [usize; 4],
    ) -> (Vec<f64>, Vec<usize>, Vec<f64>, Vec<f64>) {
        let oh = (h + p[0] + p[2] - (k[0] - 1) * d[0] - 1) / s[0] + 1;
        let ow = (w + p[1] + p[3] - (k[1] - 1) * d[1] - 1) / s[1] + 1;
        let (mut mx, mut am, mut avg, mut inc) = (vec![], vec![], vec![], vec![]);
        for i in 0..oh {
            for j in 0..ow {
                let (mut best, mut arg, mut sum, mut cnt) = (f64::NEG_INFINITY, 0, 0.0, 0);
                for a in 0..k[0] {
                    for b in 0..k[1] {
                        let hi = (i * s[0] + a * d[0]) as i64 - p[0] as i64;
                        let wi = (j * s[1] + b * d[1]) as i64 - p[1] as i64;
                        if hi < 0 || wi < 0 || hi >= h as i64 || wi >= w as i64 {
                            continue;
                        }
                        let v = x[hi as usize * w + wi as usize] as f64;
                        if v > best {
                            best = v;
                            arg = hi as usize * w + wi as usize;
                        }
                        sum += v;
                        cnt += 1;
                    }
                }
                mx.push(best);
                am.push(arg);
                avg.push(sum / cnt as f64);
                inc.push(sum / (k[0] * k[1]) as f64);
            }
        }
        (mx, am, avg, inc)
    }

    #[test]
    fn max_and_average_match_direct_loops_on_odd_shapes() {
        let (h, w) = (9, 7);
        let x = pseudo(2 * h * w, 11);
        let tx = Tensor::new(vec![1, 2, h, w], x.clone()).unwrap();
        let attrs = |extra: Vec<(&'static str, Attribute)>| {
            let mut v = vec![
                ("kernel_shape", Attribute::Ints(vec![3, 2])),
                ("strides", Attribute::Ints(vec![2, 3])),
                ("dilations", Attribute::Ints(vec![1, 2])),
                ("pads", Attribute::Ints(vec![1, 1, 1, 0])),
            ];
            v.extend(extra);
            v
        };
        let mx = build("MaxPool", &attrs(vec![]))
            .unwrap()
            .eval(&[Some(&tx)])
            .unwrap();
        let av = build("AveragePool", &attrs(vec![]))
            .unwrap()
            .eval(&[Some(&tx)])
            .unwrap();
        let inc = build(
            "AveragePool",
            &attrs(vec![("count_include_pad", Attribute::Int(1))]),
        )
        .unwrap()
        .eval(&[Some(&tx)])
        .unwrap();
        let plane = h * w;
        let (mut wmx, mut wam, mut wav, mut winc) = (vec![], vec![], vec![], vec![]);
        for c in 0..2 {
            let (a, b, d, e) = reference(
                &x[c * plane..(c + 1) * plane],
                h,
                w,
                [3, 2],
                [2, 3],
                [1, 2],
                [1, 1, 1, 0],
            );
            wmx.extend(a);
            wam.extend(b.into_iter().map(|i| (i + c * plane) as i64));
            wav.extend(d);
            winc.extend(e);
        }
        assert_eq!(mx[0].to_f64_vec(), wmx);
        assert_eq!(mx[1].as_slice::<i64>().unwrap(), &wam[..]);
        for (got, want) in [(&av[0], &wav), (&inc[0], &winc)] {
            for (g, w) in got.to_f64_vec().iter().zip(want.iter()) {
                assert!((g - w).abs() < 1e-6, "{g} vs {w}");
            }
        }
    }

    #[test]
    fn ceil_mode_storage_order_and_uint8() {
        // 1x1x3x3, kernel 2, stride 2, ceil: output 2x2; last windows are partial.
        let x = Tensor::new(vec![1, 1, 3, 3], vec![1u8, 9, 3, 4, 5, 6, 7, 8, 2]).unwrap();
        let op = build(
            "MaxPool",
            &[
                ("kernel_shape", Attribute::Ints(vec![2, 2])),
                ("strides", Attribute::Ints(vec![2, 2])),
                ("ceil_mode", Attribute::Int(1)),
                ("storage_order", Attribute::Int(1)),
            ],
        )
        .unwrap();
        let y = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].as_slice::<u8>().unwrap(), &[9, 6, 8, 2]);
        // Row-major positions (0,1), (1,2), (2,1), (2,2) → column-major h + 3w.
        assert_eq!(y[1].as_slice::<i64>().unwrap(), &[3, 7, 5, 8]);
    }

    #[test]
    fn lp_and_global_pools() {
        let x = Tensor::new(
            vec![1, 2, 2, 2],
            vec![3.0f32, -4.0, 0.0, 0.0, 1.0, 2.0, -2.0, 4.0],
        )
        .unwrap();
        let lp = build("GlobalLpPool", &[])
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(lp.shape(), &[1, 2, 1, 1]);
        assert_eq!(lp.to_f64_vec(), vec![5.0, 5.0]);
        let avg = build("GlobalAveragePool", &[])
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(avg.to_f64_vec(), vec![-0.25, 1.25]);
        let mx = build("GlobalMaxPool", &[])
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(mx.to_f64_vec(), vec![3.0, 4.0]);
        let op = build(
            "LpPool",
            &[
                ("kernel_shape", Attribute::Ints(vec![2])),
                ("p", Attribute::Int(1)),
            ],
        )
        .unwrap();
        let x1 = Tensor::new(vec![1, 1, 3], vec![1.0f32, -2.0, 5.0]).unwrap();
        assert_eq!(
            op.eval(&[Some(&x1)]).unwrap()[0].to_f64_vec(),
            vec![3.0, 7.0]
        );
    }

    #[test]
    fn errors_are_typed() {
        assert!(matches!(
            build("MaxPool", &[]),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(
            build(
                "LpPool",
                &[
                    ("kernel_shape", Attribute::Ints(vec![2])),
                    ("p", Attribute::Int(0))
                ]
            ),
            Err(OpError::Attribute { .. })
        ));
        let op = build(
            "AveragePool",
            &[("kernel_shape", Attribute::Ints(vec![4, 4]))],
        )
        .unwrap();
        let x = Tensor::new(vec![1, 1, 3, 3], vec![1.0f32; 9]).unwrap();
        assert!(matches!(op.eval(&[Some(&x)]), Err(OpError::Shape(_))));
        let x3 = Tensor::new(vec![1, 3, 3], vec![1.0f32; 9]).unwrap();
        assert!(matches!(op.eval(&[Some(&x3)]), Err(OpError::Shape(_))));
        let xi = Tensor::new(vec![1, 1, 3, 3], vec![1i32; 9]).unwrap();
        assert!(matches!(op.eval(&[Some(&xi)]), Err(OpError::DType { .. })));
    }
}
