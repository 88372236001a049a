//! Sequence operators (opset 11+): SequenceConstruct, SequenceEmpty, SequenceAt,
//! SequenceInsert, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence.
//!
//! A sequence holds tensors of one dtype (its element type, see [`crate::value`]); shapes may
//! differ between elements, so inference gives elements an unknown shape. Positions may be
//! negative (counting from the end): SequenceAt and SequenceErase accept `[-n, n)`,
//! SequenceInsert `[-n, n]`; out-of-range positions are errors. SequenceInsert appends and
//! SequenceErase removes the last element when the position is absent.
//! - SplitToSequence splits `input` along `axis` into pieces of the sizes in `split` (1-D), of
//!   `split` (scalar; the last piece may be smaller) or of size 1 (no `split`; the axis is then
//!   removed unless `keepdims`).
//! - ConcatFromSequence concatenates the elements along `axis`, or stacks them along a new
//!   axis (`new_axis = 1`; `axis` may then be `r`, appending the axis).

use crate::dtype::DType;
use crate::kernels::movement::scalar_i64;
use crate::operator::{infer_arg, infer_opt, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{int_list, norm_axis};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Construct,
    Empty(DType),
    At,
    Insert,
    Erase,
    Length,
    Split { axis: i64, keepdims: bool },
    Concat { axis: i64, new_axis: bool },
}

#[derive(Debug)]
struct SequenceOp {
    kind: Kind,
}

fn flag(c: &OpContext<'_>, name: &str, default: i64) -> Result<bool, OpError> {
    match c.attrs.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

/// Registers the sequence operators.
pub fn register(r: &mut Registry) {
    let simple = [
        ("SequenceConstruct", Kind::Construct),
        ("SequenceAt", Kind::At),
        ("SequenceInsert", Kind::Insert),
        ("SequenceErase", Kind::Erase),
        ("SequenceLength", Kind::Length),
    ];
    for (name, kind) in simple {
        r.register("", name, 11..=LATEST_OPSET, move |_| {
            Ok(Box::new(SequenceOp { kind }))
        });
    }
    r.register("", "SequenceEmpty", 11..=LATEST_OPSET, |c| {
        let code = c.attrs.int_or("dtype", 1)?;
        let dtype = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| OpError::Unsupported(format!("SequenceEmpty of ONNX data type {code}")))?;
        Ok(Box::new(SequenceOp {
            kind: Kind::Empty(dtype),
        }))
    });
    r.register("", "SplitToSequence", 11..=LATEST_OPSET, |c| {
        Ok(Box::new(SequenceOp {
            kind: Kind::Split {
                axis: c.attrs.int_or("axis", 0)?,
                keepdims: flag(c, "keepdims", 1)?,
            },
        }))
    });
    r.register("", "ConcatFromSequence", 11..=LATEST_OPSET, |c| {
        Ok(Box::new(SequenceOp {
            kind: Kind::Concat {
                axis: c
                    .attrs
                    .int("axis")?
                    .copied()
                    .ok_or_else(|| OpError::attr("axis", "required attribute is missing"))?,
                new_axis: flag(c, "new_axis", 0)?,
            },
        }))
    });
}

fn unknown(dtype: DType) -> TensorType {
    TensorType::unknown_shape(dtype)
}

/// A position input normalized for a sequence of `n` (`end_ok`: `n` itself is allowed).
fn position(t: &Tensor, n: usize, end_ok: bool) -> Result<usize, OpError> {
    let p = scalar_i64(t, "position", false)?;
    let limit = if end_ok { n as i64 } else { n as i64 - 1 };
    let q = if p < 0 { p + n as i64 } else { p };
    if q < 0 || q > limit {
        return Err(OpError::Invalid(format!(
            "position {p} is out of range for a sequence of {n}"
        )));
    }
    Ok(q as usize)
}

fn tensor_arg<'a>(inputs: &[Option<&'a Datum>], i: usize) -> Result<&'a Tensor, OpError> {
    match inputs.get(i).copied().flatten() {
        Some(Datum::Tensor(t)) => Ok(t),
        Some(other) => Err(OpError::Invalid(format!(
            "input #{i} is a {}, expected a tensor",
            other.describe()
        ))),
        None => Err(OpError::MissingInput(i)),
    }
}

fn opt_tensor<'a>(inputs: &[Option<&'a Datum>], i: usize) -> Result<Option<&'a Tensor>, OpError> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(_) => tensor_arg(inputs, i).map(Some),
    }
}

fn sequence_arg<'a>(inputs: &[Option<&'a Datum>], i: usize) -> Result<&'a [Tensor], OpError> {
    match inputs.get(i).copied().flatten() {
        Some(Datum::Sequence(s)) => Ok(s),
        Some(other) => Err(OpError::Invalid(format!(
            "input #{i} is a {}, expected a sequence",
            other.describe()
        ))),
        None => Err(OpError::MissingInput(i)),
    }
}

/// The sizes SplitToSequence cuts an axis of size `d` into.
fn split_sizes(d: usize, split: Option<&Tensor>) -> Result<Vec<usize>, OpError> {
    match split {
        None => Ok(vec![1; d]),
        Some(s) if s.rank() == 0 => {
            let k = scalar_i64(s, "split", false)?;
            let k = usize::try_from(k)
                .ok()
                .filter(|&k| k > 0)
                .ok_or_else(|| OpError::Invalid(format!("split must be positive, got {k}")))?;
            let mut v = vec![k; d / k];
            if !d.is_multiple_of(k) {
                v.push(d % k);
            }
            Ok(v)
        }
        Some(s) => {
            let v: Vec<usize> = int_list(s, "split")?
                .into_iter()
                .map(|x| {
                    usize::try_from(x)
                        .map_err(|_| OpError::Invalid(format!("negative split size {x}")))
                })
                .collect::<Result<_, _>>()?;
            if v.iter().sum::<usize>() != d {
                return Err(OpError::Invalid(format!(
                    "split sizes {v:?} do not add up to the axis size {d}"
                )));
            }
            Ok(v)
        }
    }
}

/// The `[start, start + len)` slice of `x` along `axis`.
fn slice_axis(x: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor, OpError> {
    let s = x.shape();
    let (outer, d, inner): (usize, usize, usize) =
        (s[..axis].iter().product(), s[axis], s[axis + 1..].iter().product());
    let src: Vec<usize> = (0..outer)
        .flat_map(|o| (start..start + len).flat_map(move |j| (0..inner).map(move |i| (o * d + j) * inner + i)))
        .collect();
    let mut shape = s.to_vec();
    shape[axis] = len;
    crate::kernels::movement::take(x, shape, &src)
}

/// Concatenates `items` (equal shapes except along `axis`) along `axis`.
fn concat(items: &[Tensor], axis: usize) -> Result<Tensor, OpError> {
    let first = items
        .first()
        .ok_or_else(|| OpError::Invalid("ConcatFromSequence of an empty sequence".into()))?;
    let rank = first.rank();
    let mut shape = first.shape().to_vec();
    shape[axis] = 0;
    for t in items {
        let ok = t.dtype() == first.dtype()
            && t.rank() == rank
            && t.shape().iter().zip(first.shape()).enumerate().all(|(k, (a, b))| k == axis || a == b);
        if !ok {
            return Err(OpError::Shape(format!(
                "cannot concatenate {}{:?} with {}{:?} along axis {axis}",
                t.dtype(),
                t.shape(),
                first.dtype(),
                first.shape()
            )));
        }
        shape[axis] += t.shape()[axis];
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    crate::dispatch_all!(first.dtype(), T => {
        let slices: Vec<&[T]> = items
            .iter()
            .map(|t| t.as_slice::<T>())
            .collect::<Result<_, _>>()?;
        let mut out: Vec<T> = Vec::with_capacity(shape.iter().product());
        for o in 0..outer {
            for (t, s) in items.iter().zip(&slices) {
                let run = t.shape()[axis] * inner;
                out.extend_from_slice(&s[o * run..(o + 1) * run]);
            }
        }
        Ok(Tensor::new(shape, out)?)
    })
}

impl Operator for SequenceOp {
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        use ValueKind::{Sequence, Tensor as T};
        let expect = |i: usize, want: ValueKind| -> Result<(), OpError> {
            match inputs.get(i).copied().flatten() {
                Some(k) if k != want => Err(OpError::Invalid(format!(
                    "input #{i} is a {k}, expected a {want}"
                ))),
                _ => Ok(()),
            }
        };
        let out = match self.kind {
            Kind::Construct | Kind::Split { .. } => {
                for i in 0..inputs.len() {
                    expect(i, T)?;
                }
                Sequence
            }
            Kind::Empty(_) => Sequence,
            Kind::At | Kind::Length | Kind::Concat { .. } => {
                expect(0, Sequence)?;
                expect(1, T)?;
                T
            }
            Kind::Insert | Kind::Erase => {
                expect(0, Sequence)?;
                for i in 1..inputs.len() {
                    expect(i, T)?;
                }
                Sequence
            }
        };
        if num_outputs > 1 {
            return Err(OpError::Invalid(format!(
                "the node declares {num_outputs} outputs, the operator has one"
            )));
        }
        Ok(vec![out])
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let ty = match self.kind {
            Kind::Construct => {
                let first = infer_arg(inputs, 0)?.ty.dtype;
                if let Some((i, t)) = inputs
                    .iter()
                    .enumerate()
                    .find_map(|(i, t)| t.filter(|t| t.ty.dtype != first).map(|t| (i, t)))
                {
                    return Err(OpError::DType {
                        index: i,
                        dtype: t.ty.dtype,
                    });
                }
                unknown(first)
            }
            Kind::Empty(d) => unknown(d),
            Kind::At | Kind::Erase | Kind::Split { .. } => unknown(infer_arg(inputs, 0)?.ty.dtype),
            Kind::Insert => {
                let seq = infer_arg(inputs, 0)?.ty.dtype;
                let t = infer_arg(inputs, 1)?.ty.dtype;
                if t != seq {
                    return Err(OpError::Invalid(format!(
                        "inserting a {t} tensor into a sequence of {seq}"
                    )));
                }
                unknown(seq)
            }
            Kind::Length => TensorType::fixed(DType::I64, &[]),
            Kind::Concat { .. } => unknown(infer_arg(inputs, 0)?.ty.dtype),
        };
        if let Kind::Split { .. } = self.kind {
            let _ = infer_opt(inputs, 1);
        }
        Ok(vec![ty])
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Err(OpError::Invalid(
            "sequence operators run on sequences (eval_data)".into(),
        ))
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let out = match self.kind {
            Kind::Construct => {
                let items: Vec<Tensor> = (0..inputs.len())
                    .map(|i| tensor_arg(inputs, i).cloned())
                    .collect::<Result<_, _>>()?;
                if let Some(t) = items.iter().find(|t| t.dtype() != items[0].dtype()) {
                    return Err(OpError::Invalid(format!(
                        "SequenceConstruct of {} and {} tensors",
                        items[0].dtype(),
                        t.dtype()
                    )));
                }
                Datum::Sequence(items)
            }
            Kind::Empty(_) => Datum::Sequence(Vec::new()),
            Kind::At => {
                let s = sequence_arg(inputs, 0)?;
                let p = position(tensor_arg(inputs, 1)?, s.len(), false)?;
                Datum::Tensor(s[p].clone())
            }
            Kind::Insert => {
                let s = sequence_arg(inputs, 0)?;
                let t = tensor_arg(inputs, 1)?;
                if let Some(first) = s.first() {
                    if first.dtype() != t.dtype() {
                        return Err(OpError::Invalid(format!(
                            "inserting a {} tensor into a sequence of {}",
                            t.dtype(),
                            first.dtype()
                        )));
                    }
                }
                let p = match opt_tensor(inputs, 2)? {
                    Some(p) => position(p, s.len(), true)?,
                    None => s.len(),
                };
                let mut v = s.to_vec();
                v.insert(p, t.clone());
                Datum::Sequence(v)
            }
            Kind::Erase => {
                let s = sequence_arg(inputs, 0)?;
                if s.is_empty() {
                    return Err(OpError::Invalid("SequenceErase on an empty sequence".into()));
                }
                let p = match opt_tensor(inputs, 1)? {
                    Some(p) => position(p, s.len(), false)?,
                    None => s.len() - 1,
                };
                let mut v = s.to_vec();
                v.remove(p);
                Datum::Sequence(v)
            }
            Kind::Length => Datum::Tensor(Tensor::scalar(sequence_arg(inputs, 0)?.len() as i64)),
            Kind::Split { axis, keepdims } => {
                let x = tensor_arg(inputs, 0)?;
                let a = norm_axis(axis, x.rank())?;
                let split = opt_tensor(inputs, 1)?;
                let sizes = split_sizes(x.shape()[a], split)?;
                let mut start = 0;
                let mut items = Vec::with_capacity(sizes.len());
                for len in sizes {
                    let mut piece = slice_axis(x, a, start, len)?;
                    start += len;
                    if split.is_none() && !keepdims {
                        let mut s = piece.shape().to_vec();
                        s.remove(a);
                        piece = piece.reshape(s)?;
                    }
                    items.push(piece);
                }
                Datum::Sequence(items)
            }
            Kind::Concat { axis, new_axis } => {
                let s = sequence_arg(inputs, 0)?;
                let first = s.first().ok_or_else(|| {
                    OpError::Invalid("ConcatFromSequence of an empty sequence".into())
                })?;
                if new_axis {
                    let a = norm_axis(axis, first.rank() + 1)?;
                    let items: Vec<Tensor> = s
                        .iter()
                        .map(|t| {
                            let mut sh = t.shape().to_vec();
                            sh.insert(a.min(sh.len()), 1);
                            t.reshape(sh)
                        })
                        .collect::<Result<_, _>>()?;
                    Datum::Tensor(concat(&items, a)?)
                } else {
                    let a = norm_axis(axis, first.rank())?;
                    Datum::Tensor(concat(s, a)?)
                }
            }
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::new(shape.to_vec(), v.to_vec()).unwrap()
    }

    fn run(op: &dyn Operator, inputs: &[Option<&Datum>]) -> Datum {
        op.eval_data(inputs).unwrap().remove(0)
    }

    #[test]
    fn construct_insert_at_erase_length() {
        let (a, b, c) = (t(&[2], &[1., 2.]), t(&[1], &[3.]), t(&[3], &[4., 5., 6.]));
        let construct = build_op("", "SequenceConstruct", 11, &[], 2, 1).unwrap();
        let s = run(
            construct.as_ref(),
            &[Some(&Datum::Tensor(a.clone())), Some(&Datum::Tensor(b.clone()))],
        );
        let insert = build_op("", "SequenceInsert", 11, &[], 3, 1).unwrap();
        let front = Datum::Tensor(Tensor::scalar(-2i64));
        let s2 = run(
            insert.as_ref(),
            &[Some(&s), Some(&Datum::Tensor(c.clone())), Some(&front)],
        );
        assert_eq!(s2, Datum::Sequence(vec![c.clone(), a.clone(), b.clone()]));
        let at = build_op("", "SequenceAt", 11, &[], 2, 1).unwrap();
        let last = Datum::Tensor(Tensor::scalar(-1i64));
        assert_eq!(run(at.as_ref(), &[Some(&s2), Some(&last)]), Datum::Tensor(b.clone()));
        let erase = build_op("", "SequenceErase", 11, &[], 2, 1).unwrap();
        assert_eq!(
            run(erase.as_ref(), &[Some(&s2)]),
            Datum::Sequence(vec![c.clone(), a.clone()])
        );
        let len = build_op("", "SequenceLength", 11, &[], 1, 1).unwrap();
        assert_eq!(
            run(len.as_ref(), &[Some(&s2)]),
            Datum::Tensor(Tensor::scalar(3i64))
        );
        let bad = Datum::Tensor(Tensor::scalar(3i64));
        assert!(at.eval_data(&[Some(&s2), Some(&bad)]).is_err());
        assert!(at.eval(&[]).is_err(), "tensor eval refuses");
        assert!(at
            .infer_kinds(&[Some(ValueKind::Tensor), Some(ValueKind::Tensor)], 1)
            .is_err());
    }

    #[test]
    fn split_and_concat_round_trip() {
        let x = t(&[2, 5], &[0., 1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let split = build_op("", "SplitToSequence", 11, &[("axis", Attribute::Int(1))], 2, 1)
            .unwrap();
        let two = Datum::Tensor(Tensor::scalar(2i64));
        let s = run(split.as_ref(), &[Some(&Datum::Tensor(x.clone())), Some(&two)]);
        let Datum::Sequence(items) = &s else { panic!("{s:?}") };
        let shapes: Vec<&[usize]> = items.iter().map(|t| t.shape()).collect();
        assert_eq!(shapes, [&[2, 2][..], &[2, 2], &[2, 1]]);
        assert_eq!(items[2].as_slice::<f32>().unwrap(), &[4., 9.]);
        let concat = build_op(
            "",
            "ConcatFromSequence",
            11,
            &[("axis", Attribute::Int(-1))],
            1,
            1,
        )
        .unwrap();
        assert_eq!(run(concat.as_ref(), &[Some(&s)]), Datum::Tensor(x.clone()));
        // No split, keepdims 0: rows without the axis; stacking them back on a new axis 0.
        let rows = build_op(
            "",
            "SplitToSequence",
            11,
            &[("keepdims", Attribute::Int(0))],
            1,
            1,
        )
        .unwrap();
        let s = run(rows.as_ref(), &[Some(&Datum::Tensor(x.clone()))]);
        let stack = build_op(
            "",
            "ConcatFromSequence",
            11,
            &[("axis", Attribute::Int(0)), ("new_axis", Attribute::Int(1))],
            1,
            1,
        )
        .unwrap();
        assert_eq!(run(stack.as_ref(), &[Some(&s)]), Datum::Tensor(x));
        let sizes = Datum::Tensor(Tensor::new(vec![2], vec![2i64, 2]).unwrap());
        let y = Datum::Tensor(t(&[5], &[0.; 5]));
        assert!(split.eval_data(&[Some(&y), Some(&sizes)]).is_err());
    }
}
