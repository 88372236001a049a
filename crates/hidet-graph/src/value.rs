//! Values beyond tensors: ONNX sequences and optionals.
//!
//! A graph value has a [`ValueKind`] next to its [`crate::TensorType`]; for a sequence (or an
//! optional) that type describes the tensors inside it (the element dtype, usually with an
//! unknown shape). At run time a value is a [`Datum`]. Operators see tensors through
//! [`crate::Operator::eval`]; the few that take or produce sequences and optionals implement
//! [`crate::Operator::infer_kinds`] and [`crate::Operator::eval_data`].

use std::fmt;

use crate::tensor::Tensor;

/// What a graph value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ValueKind {
    Tensor,
    /// An ordered list of tensors of one dtype.
    Sequence,
    /// A tensor or nothing.
    OptionalTensor,
    /// A sequence or nothing.
    OptionalSequence,
}

impl ValueKind {
    /// The kind an optional of this kind has (`None` for an optional: ONNX has no optional of
    /// an optional).
    pub fn optional(self) -> Option<ValueKind> {
        match self {
            ValueKind::Tensor => Some(ValueKind::OptionalTensor),
            ValueKind::Sequence => Some(ValueKind::OptionalSequence),
            _ => None,
        }
    }

    /// The kind of an optional's element (`None` if this is not an optional).
    pub fn element(self) -> Option<ValueKind> {
        match self {
            ValueKind::OptionalTensor => Some(ValueKind::Tensor),
            ValueKind::OptionalSequence => Some(ValueKind::Sequence),
            _ => None,
        }
    }
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueKind::Tensor => "tensor",
            ValueKind::Sequence => "sequence",
            ValueKind::OptionalTensor => "optional tensor",
            ValueKind::OptionalSequence => "optional sequence",
        })
    }
}

/// A run-time value: a tensor, a sequence of tensors, or an optional. Cloning shares the
/// tensors' buffers.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Tensor(Tensor),
    Sequence(Vec<Tensor>),
    /// An optional tensor or sequence (`None`: empty).
    Optional(Option<Box<Datum>>),
}

impl Datum {
    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Datum::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// True if this datum can be a value of `kind`.
    pub fn is_kind(&self, kind: ValueKind) -> bool {
        match (self, kind) {
            (Datum::Tensor(_), ValueKind::Tensor) | (Datum::Sequence(_), ValueKind::Sequence) => {
                true
            }
            (Datum::Optional(None), ValueKind::OptionalTensor | ValueKind::OptionalSequence) => {
                true
            }
            (Datum::Optional(Some(inner)), k) => k.element().is_some_and(|e| inner.is_kind(e)),
            _ => false,
        }
    }

    /// Every tensor inside (one for a tensor, the elements of a sequence, none for an empty
    /// optional).
    pub fn tensors(&self) -> Vec<&Tensor> {
        match self {
            Datum::Tensor(t) => vec![t],
            Datum::Sequence(s) => s.iter().collect(),
            Datum::Optional(None) => vec![],
            Datum::Optional(Some(d)) => d.tensors(),
        }
    }

    /// A short description for messages (`f32[2, 3]`, `sequence of 4`, `empty optional`).
    pub fn describe(&self) -> String {
        match self {
            Datum::Tensor(t) => format!("{}{:?}", t.dtype(), t.shape()),
            Datum::Sequence(s) => format!("sequence of {}", s.len()),
            Datum::Optional(None) => "empty optional".into(),
            Datum::Optional(Some(d)) => format!("optional {}", d.describe()),
        }
    }
}

impl From<Tensor> for Datum {
    fn from(t: Tensor) -> Datum {
        Datum::Tensor(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_data() {
        let t = Tensor::scalar(1.0f32);
        assert!(Datum::Tensor(t.clone()).is_kind(ValueKind::Tensor));
        assert!(Datum::Sequence(vec![t.clone()]).is_kind(ValueKind::Sequence));
        assert!(Datum::Optional(None).is_kind(ValueKind::OptionalSequence));
        let opt = Datum::Optional(Some(Box::new(Datum::Tensor(t.clone()))));
        assert!(opt.is_kind(ValueKind::OptionalTensor));
        assert!(!opt.is_kind(ValueKind::OptionalSequence));
        assert_eq!(opt.tensors(), vec![&t]);
        assert_eq!(
            ValueKind::Sequence.optional(),
            Some(ValueKind::OptionalSequence)
        );
        assert_eq!(ValueKind::OptionalTensor.element(), Some(ValueKind::Tensor));
    }
}
