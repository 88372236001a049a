//! Constant and Identity.

use crate::attribute::Attribute;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::compute_util::{grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

/// Produces a fixed tensor.
#[derive(Debug)]
struct Constant {
    value: Tensor,
}

/// Returns its input.
#[derive(Debug)]
struct Identity;

/// Registers Constant and Identity.
pub fn register(r: &mut Registry) {
    r.register("", "Constant", 1..=LATEST_OPSET, build_constant);
    r.register("", "Identity", 1..=LATEST_OPSET, |_| Ok(Box::new(Identity)));
}

fn build_constant(c: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
    let mut found = Vec::new();
    for (name, a) in c.attrs.iter() {
        let t = match (name, a) {
            ("value", Attribute::Tensor(t)) => t.clone(),
            ("value_float", Attribute::Float(f)) => Tensor::scalar(*f),
            ("value_floats", Attribute::Floats(v)) => Tensor::new(vec![v.len()], v.clone())?,
            ("value_int", Attribute::Int(i)) => Tensor::scalar(*i),
            ("value_ints", Attribute::Ints(v)) => Tensor::new(vec![v.len()], v.clone())?,
            ("value_string" | "value_strings" | "sparse_value", _) => {
                return Err(OpError::Unsupported(format!("Constant with `{name}`")))
            }
            (n, _) => {
                return Err(OpError::attr(
                    n,
                    "unexpected attribute or kind for Constant",
                ))
            }
        };
        found.push(t);
    }
    if found.len() != 1 {
        return Err(OpError::Invalid(format!(
            "Constant needs exactly one value attribute, found {}",
            found.len()
        )));
    }
    Ok(Box::new(Constant {
        value: found.remove(0),
    }))
}

impl Operator for Constant {
    fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(vec![TensorType::fixed(
            self.value.dtype(),
            self.value.shape(),
        )])
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.value.clone()])
    }
}

impl Operator for Identity {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(vec![infer_arg(inputs, 0)?.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![arg(inputs, 0)?.clone()])
    }

    /// Identity passes sequences and optionals through (opset 14+ types; earlier models
    /// cannot declare such values).
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        _num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        Ok(vec![inputs
            .first()
            .copied()
            .flatten()
            .ok_or(OpError::MissingInput(0))?])
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        Ok(vec![arg(inputs, 0)?.clone()])
    }

    /// A copy (`out[i] = x[i]`), so that the output is a tensor of its own.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), x.shape, |i| {
            vars[0].at(i.to_vec())
        })?;
        Ok(Some(def))
    }
}
