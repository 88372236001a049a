//! Einsum (opset 12): Einstein summation over any number of inputs, with `...` (broadcast
//! batch dimensions), repeated labels inside one term (diagonals) and the implicit output
//! form (no `->`: the ellipsis dimensions, then the labels used once, in ASCII order).
//!
//! The reference evaluates the full iteration space: every combination of label values,
//! multiplying in f64 (floats) or wrapping i128 (integers).

use crate::operator::{arg, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, numeric};
use crate::ops::compute_util::{
    dims, finish, input, konst, math_dtype, placeholders, wrapping_type,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};
use hidet_ir::compute::{grid, reduce, ComputeDef, ReduceKind};
use hidet_ir::expr::Expr;

/// One term of the equation: labels in order, with the position of `...` if present.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    labels: Vec<u8>,
    ellipsis: Option<usize>,
}

#[derive(Debug)]
struct Einsum {
    inputs: Vec<Term>,
    /// `None`: implicit output.
    output: Option<Term>,
}

/// Registers Einsum.
pub fn register(r: &mut Registry) {
    r.register("", "Einsum", 12..=LATEST_OPSET, |c| {
        let eq = c
            .attrs
            .string("equation")?
            .ok_or_else(|| OpError::attr("equation", "required attribute is missing"))?;
        let op = Einsum::parse(eq).map_err(|e| OpError::attr("equation", e))?;
        if op.inputs.len() != c.num_inputs {
            return Err(OpError::attr(
                "equation",
                format!("has {} terms for {} inputs", op.inputs.len(), c.num_inputs),
            ));
        }
        Ok(Box::new(op))
    });
}

/// The labels of a two-operand equation without ellipses or repeated labels — `(a, b, out)`,
/// the output's implicit form resolved — or `None` for any other equation.
pub(crate) fn product_labels(eq: &str) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let op = Einsum::parse(eq).ok()?;
    let out = op.output_term();
    let plain = |t: &Term| {
        t.ellipsis.is_none()
            && t.labels
                .iter()
                .enumerate()
                .all(|(i, l)| !t.labels[..i].contains(l))
    };
    match op.inputs.as_slice() {
        [a, b] if plain(a) && plain(b) && plain(&out) => {
            Some((a.labels.clone(), b.labels.clone(), out.labels))
        }
        _ => None,
    }
}

fn parse_term(s: &str) -> Result<Term, String> {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let mut rest = s.as_bytes();
    while let Some(&ch) = rest.first() {
        if rest.starts_with(b"...") {
            if ellipsis.is_some() {
                return Err(format!("term `{s}` has two ellipses"));
            }
            ellipsis = Some(labels.len());
            rest = &rest[3..];
        } else if ch.is_ascii_alphabetic() {
            labels.push(ch);
            rest = &rest[1..];
        } else {
            return Err(format!(
                "term `{s}` has an invalid character `{}`",
                ch as char
            ));
        }
    }
    Ok(Term { labels, ellipsis })
}

/// The iteration space of an equation bound to input shapes.
struct Binding {
    /// Size of every iteration axis (ellipsis dimensions first, then labels).
    sizes: Vec<usize>,
    operands: Vec<Operand>,
    /// The output's axes, in output order; the other axes are summed.
    out_axes: Vec<usize>,
}

/// Sizes and strides of one operand's dimensions, each bound to an iteration axis.
struct Operand {
    /// (iteration axis, stride); broadcast dimensions (size 1 against a larger axis) have
    /// stride 0.
    dims: Vec<(usize, usize)>,
}

impl Einsum {
    fn parse(eq: &str) -> Result<Einsum, String> {
        let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let inputs = lhs
            .split(',')
            .map(parse_term)
            .collect::<Result<Vec<_>, _>>()?;
        let output = rhs.map(parse_term).transpose()?;
        if let Some(out) = &output {
            for (i, l) in out.labels.iter().enumerate() {
                if out.labels[..i].contains(l) {
                    return Err(format!("output label `{}` appears twice", *l as char));
                }
                if !inputs.iter().any(|t| t.labels.contains(l)) {
                    return Err(format!("output label `{}` is not in any input", *l as char));
                }
            }
        }
        Ok(Einsum { inputs, output })
    }

    /// The output term (explicit, or derived from the inputs).
    fn output_term(&self) -> Term {
        if let Some(t) = &self.output {
            return t.clone();
        }
        let mut once: Vec<u8> = Vec::new();
        let all: Vec<u8> = self
            .inputs
            .iter()
            .flat_map(|t| t.labels.iter().copied())
            .collect();
        for &l in &all {
            if all.iter().filter(|&&m| m == l).count() == 1 {
                once.push(l);
            }
        }
        once.sort_unstable();
        let ellipsis = self
            .inputs
            .iter()
            .any(|t| t.ellipsis.is_some())
            .then_some(0);
        Term {
            labels: once,
            ellipsis,
        }
    }

    /// Binds every input dimension to an iteration axis. Ellipsis dimensions an explicit
    /// output leaves out are summed like any other axis missing from the output.
    fn bind(&self, shapes: &[&[usize]]) -> Result<Binding, OpError> {
        if shapes.len() != self.inputs.len() {
            return Err(OpError::Invalid(format!(
                "Einsum has {} terms, got {} inputs",
                self.inputs.len(),
                shapes.len()
            )));
        }
        // Ellipsis rank of each input and the broadcast ellipsis shape.
        let mut ell_ranks = Vec::new();
        for (t, s) in self.inputs.iter().zip(shapes) {
            let e = s
                .len()
                .checked_sub(t.labels.len())
                .filter(|&e| e == 0 || t.ellipsis.is_some());
            let e = e.ok_or_else(|| {
                OpError::Shape(format!(
                    "Einsum term with {} labels does not match input shape {s:?}",
                    t.labels.len()
                ))
            })?;
            ell_ranks.push(e);
        }
        let n_ell = ell_ranks.iter().copied().max().unwrap_or(0);
        let mut sizes = vec![1usize; n_ell];
        let mut letters: Vec<u8> = Vec::new();
        let axis_of_letter = |letters: &mut Vec<u8>, sizes: &mut Vec<usize>, l: u8| -> usize {
            match letters.iter().position(|&m| m == l) {
                Some(p) => n_ell + p,
                None => {
                    letters.push(l);
                    sizes.push(usize::MAX);
                    n_ell + letters.len() - 1
                }
            }
        };
        // First pass: axes of every dimension, sizes with broadcast checks.
        let mut bound: Vec<Vec<(usize, usize)>> = Vec::new(); // (axis, dim size)
        for ((t, s), &e) in self.inputs.iter().zip(shapes).zip(&ell_ranks) {
            let mut dims = Vec::with_capacity(s.len());
            let split = t.ellipsis.unwrap_or(t.labels.len());
            for (i, &l) in t.labels[..split].iter().enumerate() {
                dims.push((axis_of_letter(&mut letters, &mut sizes, l), s[i]));
            }
            for k in 0..e {
                dims.push((n_ell - e + k, s[split + k]));
            }
            for (i, &l) in t.labels[split..].iter().enumerate() {
                dims.push((
                    axis_of_letter(&mut letters, &mut sizes, l),
                    s[split + e + i],
                ));
            }
            for &(axis, d) in &dims {
                let cur = &mut sizes[axis];
                if axis < n_ell {
                    if *cur == 1 {
                        *cur = d;
                    } else if d != 1 && d != *cur {
                        return Err(OpError::Shape(format!(
                            "Einsum ellipsis dimensions {d} and {cur} do not broadcast"
                        )));
                    }
                } else if *cur == usize::MAX {
                    *cur = d;
                } else if *cur != d {
                    let l = letters[axis - n_ell] as char;
                    return Err(OpError::Shape(format!(
                        "Einsum label `{l}` has sizes {cur} and {d}"
                    )));
                }
            }
            bound.push(dims);
        }
        let operands = bound
            .into_iter()
            .map(|dims| {
                let mut stride = 1usize;
                let mut out = vec![(0, 0); dims.len()];
                for (k, &(axis, d)) in dims.iter().enumerate().rev() {
                    out[k] = (
                        axis,
                        if d == 1 && sizes[axis] != 1 {
                            0
                        } else {
                            stride
                        },
                    );
                    stride *= d;
                }
                Operand { dims: out }
            })
            .collect();
        let out_term = self.output_term();
        let mut out_axes: Vec<usize> = Vec::new();
        let split = out_term.ellipsis.unwrap_or(out_term.labels.len());
        let find = |l: u8| letters.iter().position(|&m| m == l).map(|p| n_ell + p);
        for &l in &out_term.labels[..split] {
            out_axes.push(find(l).ok_or_else(|| {
                OpError::Invalid(format!("output label `{}` is unused", l as char))
            })?);
        }
        if out_term.ellipsis.is_some() {
            out_axes.extend(0..n_ell);
        }
        for &l in &out_term.labels[split..] {
            out_axes.push(find(l).ok_or_else(|| {
                OpError::Invalid(format!("output label `{}` is unused", l as char))
            })?);
        }
        Ok(Binding {
            sizes,
            operands,
            out_axes,
        })
    }

    /// Sum over the full iteration space; `(zero, one)` are the identities of `add`/`mul`.
    fn contract<A: Copy>(
        sizes: &[usize],
        operands: &[Operand],
        values: &[Vec<A>],
        out_axes: &[usize],
        (zero, one): (A, A),
        mul: impl Fn(A, A) -> A,
        add: impl Fn(A, A) -> A,
    ) -> Vec<A> {
        let out_len: usize = out_axes.iter().map(|&a| sizes[a]).product();
        let mut out = vec![zero; out_len];
        let total: usize = sizes.iter().product();
        let mut idx = vec![0usize; sizes.len()];
        for _ in 0..total {
            let mut p = one;
            for (op, v) in operands.iter().zip(values) {
                let off: usize = op.dims.iter().map(|&(a, s)| idx[a] * s).sum();
                p = mul(p, v[off]);
            }
            let o = out_axes.iter().fold(0, |acc, &a| acc * sizes[a] + idx[a]);
            out[o] = add(out[o], p);
            for d in (0..sizes.len()).rev() {
                idx[d] += 1;
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }
}

impl Operator for Einsum {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = crate::operator::infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, numeric)?;
        let fixed: Option<Vec<Vec<usize>>> = inputs
            .iter()
            .map(|i| i.and_then(|i| i.ty.fixed_shape()))
            .collect();
        let shape = match fixed {
            Some(shapes) => {
                let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
                let Binding {
                    sizes, out_axes, ..
                } = self.bind(&refs)?;
                Some(
                    out_axes
                        .iter()
                        .map(|&a| crate::Dim::Fixed(sizes[a]))
                        .collect(),
                )
            }
            None => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let ts: Vec<&Tensor> = (0..self.inputs.len())
            .map(|i| arg(inputs, i))
            .collect::<Result<_, _>>()?;
        let dt = ts[0].dtype();
        for (i, t) in ts.iter().enumerate() {
            if t.dtype() != dt {
                return Err(OpError::Invalid(format!(
                    "Einsum input #{i} has dtype {}, input #0 has {dt}",
                    t.dtype()
                )));
            }
        }
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
        let Binding {
            sizes,
            operands,
            out_axes,
        } = self.bind(&shapes)?;
        sizes
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s))
            .ok_or_else(|| OpError::Unsupported("Einsum iteration space is too large".into()))?;
        let shape: Vec<usize> = out_axes.iter().map(|&a| sizes[a]).collect();
        let out = dispatch_float!(dt, T => {
            let vals: Vec<Vec<f64>> = ts.iter().map(|t| t.to_f64_vec()).collect();
            let v = Einsum::contract(&sizes, &operands, &vals, &out_axes, (0.0, 1.0), |a, b| a * b, |a, b| a + b);
            Tensor::new(shape, v.into_iter().map(T::from_f64).collect::<Vec<T>>())?
        }, else dispatch_int!(dt, T => {
            let vals: Vec<Vec<i128>> = ts.iter().map(|t| t.as_slice::<T>().map(|s| s.iter().map(|x| x.to_i128()).collect())).collect::<Result<_, _>>()?;
            let v = Einsum::contract(&sizes, &operands, &vals, &out_axes, (0i128, 1i128), i128::wrapping_mul, i128::wrapping_add);
            Tensor::new(shape, v.into_iter().map(T::from_i128).collect::<Vec<T>>())?
        }, else return Err(OpError::DType { index: 0, dtype: dt })));
        Ok(vec![out])
    }

    /// One reduce node over the summed axes (a grid when every axis is in the output) of the
    /// product of the operands, each read at its dimensions' iteration indices (0 where it
    /// broadcasts). Floats multiply and accumulate in f32 (f64 for f64 inputs); integers
    /// wrap like `eval`'s (see [`wrapping_type`]).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let xs: Vec<ComputeInput<'_>> = (0..self.inputs.len())
            .map(|i| input(inputs, i))
            .collect::<Result<_, _>>()?;
        let dt = xs[0].dtype;
        check_dtype(0, dt, numeric)?;
        if let Some((i, x)) = xs.iter().enumerate().find(|(_, x)| x.dtype != dt) {
            return Err(OpError::Invalid(format!(
                "Einsum input #{i} has dtype {}, input #0 has {dt}",
                x.dtype
            )));
        }
        let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape).collect();
        let Binding {
            sizes,
            operands,
            out_axes,
        } = self.bind(&shapes)?;
        let summed: Vec<usize> = (0..sizes.len()).filter(|a| !out_axes.contains(a)).collect();
        let out_shape: Vec<usize> = out_axes.iter().map(|&a| sizes[a]).collect();
        let reduce_shape: Vec<usize> = summed.iter().map(|&a| sizes[a]).collect();
        let ir = dt.to_ir();
        let acc = if ir.is_float() {
            math_dtype(ir)
        } else {
            wrapping_type(ir)
        };
        let vars = placeholders(inputs);
        // The product of the operands at iteration indices `at` (one per axis).
        let product = |at: &[Expr]| -> Expr {
            operands
                .iter()
                .zip(&vars)
                .map(|(op, v)| {
                    let index: Vec<Expr> = op
                        .dims
                        .iter()
                        .map(|&(axis, stride)| {
                            if stride == 0 {
                                Expr::int(0)
                            } else {
                                at[axis].clone()
                            }
                        })
                        .collect();
                    let e = v.at(index);
                    if acc == ir {
                        e
                    } else {
                        e.cast(acc)
                    }
                })
                .reduce(|a, b| a * b)
                .unwrap_or_else(|| konst(1.0, acc))
        };
        let iteration = |i: &[Expr], r: &[Expr]| -> Vec<Expr> {
            let mut at = vec![Expr::int(0); sizes.len()];
            for (&a, e) in out_axes.iter().zip(i) {
                at[a] = e.clone();
            }
            for (&a, e) in summed.iter().zip(r) {
                at[a] = e.clone();
            }
            at
        };
        let (sum, node) = if summed.is_empty() {
            grid("sum", acc, dims(&out_shape), |i| {
                product(&iteration(i, &[]))
            })
        } else {
            reduce(
                "sum",
                acc,
                dims(&out_shape),
                dims(&reduce_shape),
                ReduceKind::Sum,
                |i, r| product(&iteration(i, r)),
            )
        };
        if acc == ir {
            return finish(vars, vec![(sum.clone(), node)], vec![sum]).map(Some);
        }
        let (out, cast) = grid("out", ir, dims(&out_shape), |i| sum.at(i.to_vec()).cast(ir));
        finish(vars, vec![(sum, node), (out.clone(), cast)], vec![out]).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::tests::random;

    fn t(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(shape.to_vec(), random(seed, n)).unwrap()
    }

    fn run(eq: &str, xs: &[&Tensor]) -> Result<Tensor, OpError> {
        let op = Einsum::parse(eq).map_err(OpError::Invalid)?;
        let ins: Vec<Option<&Tensor>> = xs.iter().map(|&x| Some(x)).collect();
        Ok(op.eval(&ins)?.remove(0))
    }

    fn close(got: &Tensor, want: &[f64]) {
        let g = got.as_slice::<f64>().unwrap();
        assert_eq!(g.len(), want.len());
        for (a, b) in g.iter().zip(want) {
            assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn batch_matmul_transpose_and_implicit_output() {
        let (a, b) = (t(&[2, 3, 5], 1), t(&[2, 5, 4], 2));
        let (av, bv) = (a.as_slice::<f64>().unwrap(), b.as_slice::<f64>().unwrap());
        let mut want = vec![0.0; 2 * 3 * 4];
        for n in 0..2 {
            for i in 0..3 {
                for j in 0..4 {
                    want[(n * 3 + i) * 4 + j] = (0..5)
                        .map(|k| av[(n * 3 + i) * 5 + k] * bv[(n * 5 + k) * 4 + j])
                        .sum();
                }
            }
        }
        let y = run("bik,bkj->bij", &[&a, &b]).unwrap();
        assert_eq!(y.shape(), &[2, 3, 4]);
        close(&y, &want);
        // Implicit output: labels used once, sorted (b is used twice and summed).
        let y = run("bik, bkj", &[&a, &b]).unwrap();
        assert_eq!(y.shape(), &[3, 4]);
        let summed: Vec<f64> = (0..12).map(|o| want[o] + want[12 + o]).collect();
        close(&y, &summed);
        let y = run("ij->ji", &[&t(&[3, 5], 3)]).unwrap();
        assert_eq!(y.shape(), &[5, 3]);
        assert_eq!(
            y.as_slice::<f64>().unwrap()[5],
            t(&[3, 5], 3).as_slice::<f64>().unwrap()[2 * 5 + 1]
        );
    }

    #[test]
    fn diagonal_ellipsis_and_scalar_output() {
        let x = t(&[2, 3, 3], 4);
        let xv = x.as_slice::<f64>().unwrap();
        let y = run("...ii->...i", &[&x]).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        let want: Vec<f64> = (0..6).map(|o| xv[(o / 3) * 9 + (o % 3) * 4]).collect();
        close(&y, &want);
        let y = run("...ij->", &[&x]).unwrap();
        assert_eq!(y.shape(), &[] as &[usize]);
        close(&y, &[xv.iter().sum()]);
        // Broadcast ellipsis: [2,1,3] with [4,3].
        let (p, q) = (t(&[2, 1, 3], 5), t(&[4, 3], 6));
        let y = run("...i,...i->...", &[&p, &q]).unwrap();
        assert_eq!(y.shape(), &[2, 4]);
        let (pv, qv) = (p.as_slice::<f64>().unwrap(), q.as_slice::<f64>().unwrap());
        let want: Vec<f64> = (0..8)
            .map(|o| {
                (0..3)
                    .map(|i| pv[(o / 4) * 3 + i] * qv[(o % 4) * 3 + i])
                    .sum()
            })
            .collect();
        close(&y, &want);
    }

    #[test]
    fn integers_and_errors() {
        let a = Tensor::new(vec![3], vec![2i32, -3, 4]).unwrap();
        let b = Tensor::new(vec![3], vec![5i32, 7, -1]).unwrap();
        assert_eq!(
            run("i,i", &[&a, &b]).unwrap().as_slice::<i32>().unwrap(),
            &[10 - 21 - 4]
        );
        let m = t(&[3, 4], 7);
        assert!(matches!(
            run("ij,jk->ik", &[&m, &m]),
            Err(OpError::Shape(_))
        ));
        assert!(matches!(run("ijk->i", &[&m]), Err(OpError::Shape(_))));
        assert!(Einsum::parse("ij->iz").is_err());
        assert!(Einsum::parse("i.j->i").is_err());
        assert!(Einsum::parse("ij->ii").is_err());
        let f = Tensor::new(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
        assert!(run("i,i", &[&a, &f]).is_err());
    }
}
