//! Dropout in inference: the output is the input and the optional mask is all ones.
//!
//! Opsets 7–9 give the mask the input's dtype, 10–11 make it bool; from opset 12 `ratio` and
//! `training_mode` are inputs. Training mode with a non-zero ratio draws random numbers
//! whose generator ONNX leaves to the implementation; it is reported as unsupported.

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, opt_arg, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::ops::compute_util::{dims, finish, input, konst, opt_input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use hidet_ir::compute::{grid, ComputeDef};

/// Dropout; `mask_as_input_dtype` for opsets before 10.
#[derive(Debug)]
struct Dropout {
    mask_as_input_dtype: bool,
    /// Opset >= 12: `ratio` and `training_mode` are inputs #1 and #2.
    inputs_control: bool,
}

/// Registers Dropout.
pub fn register(r: &mut Registry) {
    let reg = |r: &mut Registry,
               range: std::ops::RangeInclusive<i64>,
               mask_as_input_dtype: bool,
               inputs_control: bool| {
        r.register("", "Dropout", range, move |c| {
            if !inputs_control {
                let ratio = c.attrs.float_or("ratio", 0.5)?;
                if !(0.0..1.0).contains(&ratio) {
                    return Err(OpError::attr(
                        "ratio",
                        format!("must be in [0, 1), got {ratio}"),
                    ));
                }
            }
            Ok(Box::new(Dropout {
                mask_as_input_dtype,
                inputs_control,
            }))
        });
    };
    reg(r, 7..=9, true, false);
    reg(r, 10..=11, false, false);
    reg(r, 12..=LATEST_OPSET, false, true);
}

/// A one-element tensor's value as f64.
fn scalar_value(t: &Tensor, what: &str) -> Result<f64, OpError> {
    match t.to_f64_vec().as_slice() {
        &[v] => Ok(v),
        _ => Err(OpError::Invalid(format!(
            "Dropout {what} must hold one value, got shape {:?}",
            t.shape()
        ))),
    }
}

impl Dropout {
    fn mask_dtype(&self, x: DType) -> DType {
        if self.mask_as_input_dtype {
            x
        } else {
            DType::Bool
        }
    }

    /// Checks the `ratio` and `training_mode` inputs (opset >= 12): a ratio in `[0, 1)`, a
    /// bool mode; training with a non-zero ratio (random masks) is unsupported.
    fn check_control(
        &self,
        ratio: Option<&Tensor>,
        training: Option<&Tensor>,
    ) -> Result<(), OpError> {
        if !self.inputs_control {
            return Ok(());
        }
        let ratio = ratio
            .map(|t| scalar_value(t, "ratio"))
            .transpose()?
            .unwrap_or(0.5);
        if !(0.0..1.0).contains(&ratio) {
            return Err(OpError::Invalid(format!(
                "Dropout ratio must be in [0, 1), got {ratio}"
            )));
        }
        let training = match training {
            None => false,
            Some(t) if t.dtype() == DType::Bool => scalar_value(t, "training_mode")? != 0.0,
            Some(t) => {
                return Err(OpError::DType {
                    index: 2,
                    dtype: t.dtype(),
                })
            }
        };
        if training && ratio != 0.0 {
            return Err(OpError::Unsupported(
                "Dropout in training mode with a non-zero ratio (random masks)".into(),
            ));
        }
        Ok(())
    }
}

impl Operator for Dropout {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let mask = TensorType {
            dtype: self.mask_dtype(x.ty.dtype),
            shape: x.ty.shape.clone(),
        };
        Ok(vec![x.ty.clone(), mask])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        self.check_control(opt_arg(inputs, 1), opt_arg(inputs, 2))?;
        let ones = Tensor::new(x.shape().to_vec(), vec![true; x.numel()])?;
        let mask = if self.mask_as_input_dtype {
            ones.cast(x.dtype())
        } else {
            ones
        };
        Ok(vec![x.clone(), mask])
    }

    /// A copy grid for the output and a constant grid of ones for the mask. `Ok(None)` when
    /// `ratio` or `training_mode` is given but not known when compiling.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let (ratio, training) = (opt_input(inputs, 1), opt_input(inputs, 2));
        if self.inputs_control {
            let known = |i: Option<ComputeInput<'_>>| i.is_none_or(|i| i.value.is_some());
            if !known(ratio) || !known(training) {
                return Ok(None);
            }
            self.check_control(ratio.and_then(|r| r.value), training.and_then(|t| t.value))?;
        }
        let vars = placeholders(inputs);
        let dt = x.dtype.to_ir();
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| vars[0].at(i.to_vec()));
        let mask_dt = self.mask_dtype(x.dtype).to_ir();
        let (mask, mask_node) = grid("mask", mask_dt, dims(x.shape), |_| konst(1.0, mask_dt));
        finish(
            vars,
            vec![(y.clone(), y_node), (mask.clone(), mask_node)],
            vec![y, mask],
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::tests::random;

    fn x() -> Tensor {
        Tensor::new(
            vec![3, 5],
            random(4, 15).into_iter().map(|v| v as f32).collect(),
        )
        .unwrap()
    }

    #[test]
    fn identity_with_all_true_mask() {
        let x = x();
        let op = Dropout {
            mask_as_input_dtype: false,
            inputs_control: true,
        };
        let ratio = Tensor::scalar(0.3f32);
        let t = Tensor::scalar(false);
        let out = op.eval(&[Some(&x), Some(&ratio), Some(&t)]).unwrap();
        assert_eq!(out[0], x);
        assert_eq!(out[1].as_slice::<bool>().unwrap(), &[true; 15]);
        // Training with ratio 0 is the identity too.
        let (zero, on) = (Tensor::scalar(0.0f32), Tensor::scalar(true));
        assert_eq!(op.eval(&[Some(&x), Some(&zero), Some(&on)]).unwrap()[0], x);
        let old = Dropout {
            mask_as_input_dtype: true,
            inputs_control: false,
        };
        let out = old.eval(&[Some(&x)]).unwrap();
        assert_eq!(out[1].dtype(), DType::F32);
        assert!(out[1].to_f64_vec().iter().all(|&v| v == 1.0));
    }

    #[test]
    fn training_and_bad_inputs() {
        let x = x();
        let op = Dropout {
            mask_as_input_dtype: false,
            inputs_control: true,
        };
        let (half, on) = (Tensor::scalar(0.5f32), Tensor::scalar(true));
        assert!(matches!(
            op.eval(&[Some(&x), Some(&half), Some(&on)]),
            Err(OpError::Unsupported(_))
        ));
        let bad = Tensor::scalar(1.5f32);
        assert!(matches!(
            op.eval(&[Some(&x), Some(&bad)]),
            Err(OpError::Invalid(_))
        ));
        let i = Tensor::new(vec![1], vec![1i32]).unwrap();
        assert!(matches!(op.eval(&[Some(&i)]), Err(OpError::DType { .. })));
    }
}
