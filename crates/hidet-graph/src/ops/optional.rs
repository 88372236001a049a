//! OptionalHasElement and OptionalGetElement (opset 18+) on the values hidet represents.
//!
//! Since opset 18 both accept a plain tensor as well as an optional. hidet has no optional
//! (or sequence) values yet (importing a model that declares one is unsupported), so the input
//! is either a tensor or absent: OptionalHasElement gives `true` for a tensor and `false` for
//! an absent input (an empty optional); OptionalGetElement returns its tensor input unchanged
//! (an absent input is an error, as getting the element of an empty optional is).

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, infer_opt, opt_arg, InferInput, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Debug)]
struct HasElement;

#[derive(Debug)]
struct GetElement;

/// Registers OptionalHasElement and OptionalGetElement.
pub fn register(r: &mut Registry) {
    r.register("", "OptionalHasElement", 18..=LATEST_OPSET, |_| {
        Ok(Box::new(HasElement))
    });
    r.register("", "OptionalGetElement", 18..=LATEST_OPSET, |_| {
        Ok(Box::new(GetElement))
    });
}

impl Operator for HasElement {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let _ = infer_opt(inputs, 0);
        Ok(vec![TensorType::fixed(DType::Bool, &[])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![Tensor::scalar(opt_arg(inputs, 0).is_some())])
    }
}

impl Operator for GetElement {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(vec![infer_arg(inputs, 0)?.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![arg(inputs, 0)?.clone()])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn tensors_are_present_elements() {
        let has = build_op("", "OptionalHasElement", 18, &[], 1, 1).unwrap();
        let get = build_op("", "OptionalGetElement", 18, &[], 1, 1).unwrap();
        let x = Tensor::new(vec![2], vec![1.5f32, -2.0]).unwrap();
        assert_eq!(has.eval(&[Some(&x)]).unwrap()[0], Tensor::scalar(true));
        assert_eq!(has.eval(&[None]).unwrap()[0], Tensor::scalar(false));
        assert_eq!(has.eval(&[]).unwrap()[0], Tensor::scalar(false));
        assert_eq!(get.eval(&[Some(&x)]).unwrap()[0], x);
        assert!(get.eval(&[None]).is_err());
    }
}
