//! Gemm: `Y = alpha * A' B' + beta * C` with optional transposes and C broadcast to `[M, N]`.
//!
//! Opset 7–10: C is required; opset 11+: C is optional. Integer types (opset 9+) accumulate in
//! i128 and wrap to the output width when alpha and beta are 1; otherwise every type is
//! computed in f64.

use crate::dtype::DType;
use crate::kernels::broadcast::{broadcast_offsets, broadcast_shapes};
use crate::kernels::gemm::{gemm, Strides};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError,
    Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{
    broadcast_read, dims, finish, input, konst, math_dtype, opt_input, placeholders,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{broadcast_dims, Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::value::Datum;
use crate::{dispatch_float, dispatch_int};
use hidet_ir::compute::{grid, reduce, ReduceKind};

#[derive(Debug)]
struct Gemm {
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
    c_required: bool,
}

fn flag(c: &OpContext<'_>, name: &str) -> Result<bool, OpError> {
    match c.attrs.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

/// Registers Gemm.
pub fn register(r: &mut Registry) {
    let build = |c_required: bool| {
        move |c: &OpContext<'_>| -> Result<Box<dyn Operator>, OpError> {
            Ok(Box::new(Gemm {
                alpha: c.attrs.float_or("alpha", 1.0)? as f64,
                beta: c.attrs.float_or("beta", 1.0)? as f64,
                trans_a: flag(c, "transA")?,
                trans_b: flag(c, "transB")?,
                c_required,
            }))
        }
    };
    r.register("", "Gemm", 7..=10, build(true));
    r.register("", "Gemm", 11..=LATEST_OPSET, build(false));
}

fn accepted(d: DType) -> bool {
    d.is_float() || matches!(d, DType::I32 | DType::I64 | DType::U32 | DType::U64)
}

impl Gemm {
    fn check(&self, dts: [Option<DType>; 3]) -> Result<DType, OpError> {
        let a = dts[0].ok_or(OpError::MissingInput(0))?;
        check_dtype(0, a, accepted)?;
        for (i, d) in dts.iter().enumerate().skip(1) {
            match d {
                Some(d) if *d != a => {
                    return Err(OpError::DType {
                        index: i,
                        dtype: *d,
                    })
                }
                None if i == 1 || (i == 2 && self.c_required) => {
                    return Err(OpError::MissingInput(i))
                }
                _ => {}
            }
        }
        Ok(a)
    }
}

impl Operator for Gemm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let dt = |i| infer_opt(inputs, i).map(|v: InferInput<'_>| v.ty.dtype);
        let dtype = self.check([dt(0), dt(1), dt(2)])?;
        let (a, b) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        let (Some(sa), Some(sb)) = (&a.ty.shape, &b.ty.shape) else {
            return Ok(vec![TensorType {
                dtype,
                shape: Some(vec![Dim::Unknown, Dim::Unknown]),
            }]);
        };
        if sa.len() != 2 || sb.len() != 2 {
            return Err(OpError::Shape(format!(
                "Gemm needs 2-D A and B, got ranks {} and {}",
                sa.len(),
                sb.len()
            )));
        }
        let (m, ka) = if self.trans_a {
            (&sa[1], &sa[0])
        } else {
            (&sa[0], &sa[1])
        };
        let (kb, n) = if self.trans_b {
            (&sb[1], &sb[0])
        } else {
            (&sb[0], &sb[1])
        };
        if let (Dim::Fixed(x), Dim::Fixed(y)) = (ka, kb) {
            if x != y {
                return Err(OpError::Shape(format!(
                    "Gemm inner dimensions {x} and {y} differ"
                )));
            }
        }
        let out = vec![m.clone(), n.clone()];
        if let Some(Some(sc)) = infer_opt(inputs, 2).map(|c| c.ty.shape.as_ref()) {
            let merged = broadcast_dims(&out, sc).ok_or_else(|| {
                OpError::Shape(format!("C does not broadcast to [M, N] = [{m}, {n}]"))
            })?;
            if merged.len() != 2
                || matches!((&merged[0], &out[0]), (Dim::Fixed(x), Dim::Fixed(y)) if x != y)
                || matches!((&merged[1], &out[1]), (Dim::Fixed(x), Dim::Fixed(y)) if x != y)
            {
                return Err(OpError::Shape(format!(
                    "C does not broadcast to [M, N] = [{m}, {n}]"
                )));
            }
        }
        Ok(vec![TensorType {
            dtype,
            shape: Some(out),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let dt = |i| opt_arg(inputs, i).map(|t: &Tensor| t.dtype());
        let dtype = self.check([dt(0), dt(1), dt(2)])?;
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (m, k, n) = self.sizes(a.shape(), b.shape())?;
        let c_off = c_offsets(opt_arg(inputs, 2), m, n)?;
        let exact_int =
            dtype.is_int() && self.alpha == 1.0 && (self.beta == 1.0 || c_off.is_none());
        let out = if exact_int {
            dispatch_int!(dtype, T => {
                let (xa, xb) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
                let xc = match &c_off { Some((c, _)) => c.as_slice::<T>()?, None => &[] };
                let mut y = Vec::with_capacity(m * n);
                for i in 0..m {
                    for j in 0..n {
                        let mut acc: i128 = 0;
                        for p in 0..k {
                            let av = if self.trans_a { xa[p * m + i] } else { xa[i * k + p] };
                            let bv = if self.trans_b { xb[j * k + p] } else { xb[p * n + j] };
                            acc = acc.wrapping_add(av.to_i128().wrapping_mul(bv.to_i128()));
                        }
                        if let Some((_, off)) = &c_off {
                            acc = acc.wrapping_add(xc[off[i * n + j]].to_i128());
                        }
                        y.push(T::from_i128(acc));
                    }
                }
                Tensor::new(vec![m, n], y)?
            }, else return Err(OpError::DType { index: 0, dtype }))
        } else {
            let y = self.float_gemm(
                a,
                b,
                m,
                n,
                k,
                c_off.as_ref().map(|(c, o)| (c.to_f64_vec(), o)),
            );
            dispatch_float!(dtype, T => Tensor::new(vec![m, n], y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
                else dispatch_int!(dtype, T => Tensor::new(vec![m, n], y.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
                    else return Err(OpError::DType { index: 0, dtype })))
        };
        Ok(vec![out])
    }
    /// `f32` operands (and `C`) are multiplied and summed in `f32` (`matrixmultiply`'s
    /// `sgemm`), as the compiled kernel does; other dtypes run [`Operator::eval`].
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let tensor = |i: usize| match inputs.get(i) {
            Some(Some(Datum::Tensor(t))) => Some(t),
            _ => None,
        };
        let f32s = (0..inputs.len()).all(|i| tensor(i).is_some_and(|t| t.dtype() == DType::F32));
        let (Some(a), Some(b)) = (tensor(0), tensor(1)) else {
            return self.eval_data(inputs);
        };
        if !f32s || inputs.len() > 3 {
            return self.eval_data(inputs);
        }
        let (m, k, n) = self.sizes(a.shape(), b.shape())?;
        let mut y: Vec<f32> = match c_offsets(tensor(2), m, n)? {
            Some((c, off)) => {
                let cv = c.as_slice::<f32>()?;
                let beta = self.beta as f32;
                off.iter().map(|&o| beta * cv[o]).collect()
            }
            None => vec![0f32; m * n],
        };
        let (sa, sb) = self.strides(m, k, n);
        let (xa, xb) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
        gemm(self.alpha as f32, xa, sa, xb, sb, &mut y, k, n);
        Ok(vec![Datum::Tensor(Tensor::new(vec![m, n], y)?)])
    }

    /// Float Gemm: `acc[i, j] = Σ_r A'[i, r] · B'[r, j]` (transposes as index swaps;
    /// accumulated in f32 for 16-bit floats), then `alpha · acc + beta · C[broadcast]` and the
    /// cast; `alpha`/`beta` of 1 and `beta = 0` (or no C) add no operation. Integer Gemm has
    /// no definition (its wrapping i128 accumulation has no IR form).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let dt = |i| opt_input(inputs, i).map(|v: ComputeInput<'_>| v.dtype);
        let dtype = self.check([dt(0), dt(1), dt(2)])?;
        if !dtype.is_float() {
            return Ok(None);
        }
        let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
        let (m, k, n) = self.sizes(a.shape, b.shape)?;
        let c = opt_input(inputs, 2).filter(|_| self.beta != 0.0);
        if let Some(c) = opt_input(inputs, 2) {
            if broadcast_shapes(&[c.shape, &[m, n]])? != [m, n] {
                return Err(OpError::Shape(format!(
                    "C {:?} does not broadcast to [{m}, {n}]",
                    c.shape
                )));
            }
        }
        let t = dtype.to_ir();
        let acc = math_dtype(t);
        let vars = placeholders(inputs);
        let (va, vb) = (vars[0].clone(), vars[1].clone());
        let (ta, tb) = (self.trans_a, self.trans_b);
        let (sum, sum_node) = reduce(
            "acc",
            acc,
            dims(&[m, n]),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let ia = if ta {
                    [r[0].clone(), i[0].clone()]
                } else {
                    [i[0].clone(), r[0].clone()]
                };
                let ib = if tb {
                    [i[1].clone(), r[0].clone()]
                } else {
                    [r[0].clone(), i[1].clone()]
                };
                let (x, y) = (va.at(ia), vb.at(ib));
                if acc == t {
                    x * y
                } else {
                    x.cast(acc) * y.cast(acc)
                }
            },
        );
        if c.is_none() && self.alpha == 1.0 && acc == t {
            return finish(vars, vec![(sum.clone(), sum_node)], vec![sum]).map(Some);
        }
        let (alpha, beta) = (self.alpha, self.beta);
        let (out, out_node) = grid("out", t, dims(&[m, n]), |i| {
            let mut v = sum.at(i.to_vec());
            if alpha != 1.0 {
                v = konst(alpha, acc) * v;
            }
            if let Some(c) = c {
                let cv = broadcast_read(&vars[2], c.shape, i);
                let cv = if acc == t { cv } else { cv.cast(acc) };
                v = v + if beta == 1.0 {
                    cv
                } else {
                    konst(beta, acc) * cv
                };
            }
            if acc == t {
                v
            } else {
                v.cast(t)
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

impl Gemm {
    /// `(M, K, N)` of `A' B'`, checking ranks and the inner dimensions.
    fn sizes(&self, sa: &[usize], sb: &[usize]) -> Result<(usize, usize, usize), OpError> {
        if sa.len() != 2 || sb.len() != 2 {
            return Err(OpError::Shape(format!(
                "Gemm needs 2-D A and B, got {sa:?} and {sb:?}"
            )));
        }
        let (m, k) = if self.trans_a {
            (sa[1], sa[0])
        } else {
            (sa[0], sa[1])
        };
        let (k2, n) = if self.trans_b {
            (sb[1], sb[0])
        } else {
            (sb[0], sb[1])
        };
        if k != k2 {
            return Err(OpError::Shape(format!(
                "Gemm inner dimensions {k} and {k2} differ"
            )));
        }
        Ok((m, k, n))
    }

    /// How `A` and `B` lie in their tensors as the `[M, K]` and `[K, N]` operands of the
    /// product (a transpose swaps the strides).
    fn strides(&self, m: usize, k: usize, n: usize) -> (Strides, Strides) {
        let sa = if self.trans_a {
            Strides::col_major(m)
        } else {
            Strides::row_major(k)
        };
        let sb = if self.trans_b {
            Strides::col_major(k)
        } else {
            Strides::row_major(n)
        };
        (sa, sb)
    }

    fn float_gemm(
        &self,
        a: &Tensor,
        b: &Tensor,
        m: usize,
        n: usize,
        k: usize,
        c: Option<(Vec<f64>, &Vec<usize>)>,
    ) -> Vec<f64> {
        let mut y = match &c {
            Some((cv, off)) => off.iter().map(|&o| self.beta * cv[o]).collect(),
            None => vec![0f64; m * n],
        };
        let (sa, sb) = self.strides(m, k, n);
        let (xa, xb) = (a.to_f64_vec(), b.to_f64_vec());
        gemm(self.alpha, &xa, sa, &xb, sb, &mut y, k, n);
        y
    }
}

/// The element of `c` (if given) read for each element of the `[m, n]` output.
fn c_offsets(c: Option<&Tensor>, m: usize, n: usize) -> Result<Option<(&Tensor, Vec<usize>)>, OpError> {
    let Some(c) = c else {
        return Ok(None);
    };
    if broadcast_shapes(&[c.shape(), &[m, n]])? != [m, n] {
        return Err(OpError::Shape(format!(
            "C {:?} does not broadcast to [{m}, {n}]",
            c.shape()
        )));
    }
    Ok(Some((c, broadcast_offsets(c.shape(), &[m, n]))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(opset: i64, attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        build_op("", "Gemm", opset, attrs, 3, 1)
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

    #[test]
    fn transposes_alpha_beta_and_row_broadcast_match_f64_loops() {
        let (m, n, k) = (5, 7, 3);
        let a = pseudo(k * m, 3); // stored [K, M] (transA)
        let b = pseudo(n * k, 4); // stored [N, K] (transB)
        let c = pseudo(n, 5); // [N] broadcast over rows
        let op = build(
            13,
            &[
                ("alpha", Attribute::Float(0.5)),
                ("beta", Attribute::Float(-2.0)),
                ("transA", Attribute::Int(1)),
                ("transB", Attribute::Int(1)),
            ],
        )
        .unwrap();
        let ta = Tensor::new(vec![k, m], a.clone()).unwrap();
        let tb = Tensor::new(vec![n, k], b.clone()).unwrap();
        let tc = Tensor::new(vec![n], c.clone()).unwrap();
        let y = op
            .eval(&[Some(&ta), Some(&tb), Some(&tc)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[m, n]);
        let got = y.to_f64_vec();
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|p| a[p * m + i] as f64 * b[j * k + p] as f64)
                    .sum();
                let want = 0.5 * dot - 2.0 * c[j] as f64;
                assert!(
                    (got[i * n + j] - want).abs() < 1e-5,
                    "{} vs {want}",
                    got[i * n + j]
                );
            }
        }
    }

    #[test]
    fn integer_gemm_is_exact_and_c_is_optional_from_opset_11() {
        let a = Tensor::new(vec![2, 3], vec![1i64, -2, 3, 4, 5, -6]).unwrap();
        let b = Tensor::new(vec![3, 1], vec![7i64, 8, -9]).unwrap();
        let y = build(11, &[])
            .unwrap()
            .eval(&[Some(&a), Some(&b)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[7 - 16 - 27, 28 + 40 + 54]);
        assert!(matches!(
            build(9, &[]).unwrap().eval(&[Some(&a), Some(&b)]),
            Err(OpError::MissingInput(2))
        ));
    }

    #[test]
    fn errors_are_typed() {
        let a = Tensor::new(vec![2, 3], vec![1.0f32; 6]).unwrap();
        let b = Tensor::new(vec![2, 3], vec![1.0f32; 6]).unwrap();
        assert!(matches!(
            build(13, &[]).unwrap().eval(&[Some(&a), Some(&b)]),
            Err(OpError::Shape(_))
        ));
        let b = Tensor::new(vec![3, 2], vec![1.0f32; 6]).unwrap();
        let c = Tensor::new(vec![3], vec![1.0f32; 3]).unwrap();
        assert!(matches!(
            build(13, &[])
                .unwrap()
                .eval(&[Some(&a), Some(&b), Some(&c)]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(
            build(13, &[("transA", Attribute::Int(2))]),
            Err(OpError::Attribute { .. })
        ));
        let bi = Tensor::new(vec![3, 2], vec![1i32; 6]).unwrap();
        assert!(matches!(
            build(13, &[]).unwrap().eval(&[Some(&a), Some(&bi)]),
            Err(OpError::DType { .. })
        ));
    }

    /// The host-step evaluation (`f32` sums) agrees with the reference (`f64`) for every
    /// transpose combination, with `alpha`, `beta` and a broadcast `C`.
    #[test]
    fn host_evaluation_matches_the_reference() {
        let (m, k, n) = (13usize, 29usize, 7usize);
        for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let op = build(
                13,
                &[
                    ("transA", Attribute::Int(ta)),
                    ("transB", Attribute::Int(tb)),
                    ("alpha", Attribute::Float(0.75)),
                    ("beta", Attribute::Float(-1.5)),
                ],
            )
            .unwrap();
            let sa = if ta == 1 { vec![k, m] } else { vec![m, k] };
            let sb = if tb == 1 { vec![n, k] } else { vec![k, n] };
            let a = Tensor::new(sa, pseudo(m * k, 1)).unwrap();
            let b = Tensor::new(sb, pseudo(k * n, 2)).unwrap();
            let c = Tensor::new(vec![1, n], pseudo(n, 3)).unwrap();
            let want = op.eval(&[Some(&a), Some(&b), Some(&c)]).unwrap();
            let data = [a, b, c].map(Datum::Tensor);
            let refs: Vec<Option<&Datum>> = data.iter().map(Some).collect();
            let got = op.eval_host(&refs).unwrap();
            let Datum::Tensor(got) = &got[0] else {
                panic!("a tensor")
            };
            assert_eq!(got.shape(), want[0].shape());
            for (g, w) in got.to_f64_vec().iter().zip(want[0].to_f64_vec()) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{ta}{tb}: {g} vs {w}");
            }
        }
    }
}
