//! Optional (15+), OptionalHasElement and OptionalGetElement (15–17: optional input; 18+: an
//! optional, a tensor or a sequence, or for OptionalHasElement an absent input).
//!
//! - Optional wraps its input (a tensor or a sequence); without an input it is an empty
//!   optional of the `type` attribute.
//! - OptionalHasElement: whether the optional holds a value; a tensor or sequence input
//!   (18+) always does, an absent input (18+) never.
//! - OptionalGetElement: the value an optional holds (an error when it is empty); a tensor or
//!   sequence input (18+) is returned as it is.

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

#[derive(Debug)]
struct MakeOptional {
    /// The `type` attribute (required without an input).
    declared: Option<(TensorType, ValueKind)>,
}

#[derive(Debug)]
struct HasElement {
    /// Opset 18+: plain tensors, sequences and an absent input are accepted.
    lenient: bool,
}

#[derive(Debug)]
struct GetElement {
    lenient: bool,
}

/// Registers Optional, OptionalHasElement and OptionalGetElement.
pub fn register(r: &mut Registry) {
    r.register("", "Optional", 15..=LATEST_OPSET, |c: &OpContext<'_>| {
        let declared = c.attrs.value_type("type")?.map(|(t, k)| (t.clone(), k));
        if let Some((_, k)) = &declared {
            if k.optional().is_none() {
                return Err(OpError::attr("type", format!("an optional of a {k}")));
            }
        }
        Ok(Box::new(MakeOptional { declared }))
    });
    for (range, lenient) in [(15..=17, false), (18..=LATEST_OPSET, true)] {
        r.register("", "OptionalHasElement", range.clone(), move |_| {
            Ok(Box::new(HasElement { lenient }))
        });
        r.register("", "OptionalGetElement", range, move |_| {
            Ok(Box::new(GetElement { lenient }))
        });
    }
}

fn refuse_tensor_eval() -> OpError {
    OpError::Invalid("optional operators run on optionals (eval_data)".into())
}

impl Operator for MakeOptional {
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        _num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        let inner = match (inputs.first().copied().flatten(), &self.declared) {
            (Some(k), _) => k,
            (None, Some((_, k))) => *k,
            (None, None) => {
                return Err(OpError::attr(
                    "type",
                    "required when Optional has no input",
                ))
            }
        };
        let kind = inner
            .optional()
            .ok_or_else(|| OpError::Invalid(format!("an optional of a {inner}")))?;
        Ok(vec![kind])
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        match (inputs.first().copied().flatten(), &self.declared) {
            (Some(x), _) => Ok(vec![x.ty.clone()]),
            (None, Some((t, _))) => Ok(vec![t.clone()]),
            (None, None) => Err(OpError::attr("type", "required when Optional has no input")),
        }
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Err(refuse_tensor_eval())
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        Ok(vec![Datum::Optional(
            inputs.first().copied().flatten().map(|d| Box::new(d.clone())),
        )])
    }
}

impl HasElement {
    fn check(&self, kind: Option<ValueKind>) -> Result<(), OpError> {
        match kind {
            Some(ValueKind::OptionalTensor | ValueKind::OptionalSequence) => Ok(()),
            _ if self.lenient => Ok(()),
            Some(k) => Err(OpError::Invalid(format!(
                "the input is a {k}; before opset 18 it must be an optional"
            ))),
            None => Err(OpError::MissingInput(0)),
        }
    }
}

impl Operator for HasElement {
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        _num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        self.check(inputs.first().copied().flatten())?;
        Ok(vec![ValueKind::Tensor])
    }

    fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(vec![TensorType::fixed(DType::Bool, &[])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let present = inputs.first().copied().flatten().is_some();
        if !present && !self.lenient {
            return Err(OpError::MissingInput(0));
        }
        Ok(vec![Tensor::scalar(present)])
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let has = match inputs.first().copied().flatten() {
            Some(Datum::Optional(v)) => v.is_some(),
            Some(_) => true,
            None if self.lenient => false,
            None => return Err(OpError::MissingInput(0)),
        };
        Ok(vec![Datum::Tensor(Tensor::scalar(has))])
    }
}

impl Operator for GetElement {
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        _num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        let k = inputs
            .first()
            .copied()
            .flatten()
            .ok_or(OpError::MissingInput(0))?;
        match k.element() {
            Some(e) => Ok(vec![e]),
            None if self.lenient => Ok(vec![k]),
            None => Err(OpError::Invalid(format!(
                "the input is a {k}; before opset 18 it must be an optional"
            ))),
        }
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(vec![infer_arg(inputs, 0)?.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        if !self.lenient {
            return Err(refuse_tensor_eval());
        }
        Ok(vec![arg(inputs, 0)?.clone()])
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        match arg(inputs, 0)? {
            Datum::Optional(Some(v)) => Ok(vec![(**v).clone()]),
            Datum::Optional(None) => Err(OpError::Invalid(
                "OptionalGetElement of an empty optional".into(),
            )),
            other => Ok(vec![other.clone()]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;

    #[test]
    fn wrap_query_and_unwrap() {
        let x = Datum::Tensor(Tensor::new(vec![2], vec![1.5f32, -2.0]).unwrap());
        let seq = Datum::Sequence(vec![Tensor::scalar(1i64)]);
        let make = build_op("", "Optional", 15, &[], 1, 1).unwrap();
        assert_eq!(
            make.infer_kinds(&[Some(ValueKind::Sequence)], 1).unwrap(),
            [ValueKind::OptionalSequence]
        );
        let opt = make.eval_data(&[Some(&seq)]).unwrap().remove(0);
        assert!(opt.is_kind(ValueKind::OptionalSequence));
        let typed = build_op(
            "",
            "Optional",
            15,
            &[(
                "type",
                Attribute::Type(TensorType::unknown_shape(DType::F32), ValueKind::Tensor),
            )],
            0,
            1,
        )
        .unwrap();
        assert_eq!(typed.infer_kinds(&[], 1).unwrap(), [ValueKind::OptionalTensor]);
        let empty = typed.eval_data(&[]).unwrap().remove(0);
        assert_eq!(empty, Datum::Optional(None));
        let has = build_op("", "OptionalHasElement", 18, &[], 1, 1).unwrap();
        let yes = Datum::Tensor(Tensor::scalar(true));
        let no = Datum::Tensor(Tensor::scalar(false));
        assert_eq!(has.eval_data(&[Some(&opt)]).unwrap()[0], yes);
        assert_eq!(has.eval_data(&[Some(&empty)]).unwrap()[0], no);
        assert_eq!(has.eval_data(&[Some(&x)]).unwrap()[0], yes);
        assert_eq!(has.eval_data(&[None]).unwrap()[0], no);
        let get = build_op("", "OptionalGetElement", 18, &[], 1, 1).unwrap();
        assert_eq!(get.eval_data(&[Some(&opt)]).unwrap()[0], seq);
        assert_eq!(get.eval_data(&[Some(&x)]).unwrap()[0], x);
        assert!(get.eval_data(&[Some(&empty)]).is_err());
        let old_get = build_op("", "OptionalGetElement", 15, &[], 1, 1).unwrap();
        assert!(old_get.infer_kinds(&[Some(ValueKind::Tensor)], 1).is_err());
        assert!(build_op("", "Optional", 15, &[], 0, 1)
            .unwrap()
            .infer_kinds(&[], 1)
            .is_err());
    }
}
