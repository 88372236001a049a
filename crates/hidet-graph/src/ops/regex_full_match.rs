//! RegexFullMatch (opset 20): whether each string matches `pattern` as a whole.
//!
//! The pattern is compiled by the `regex` crate, whose syntax follows RE2 (the engine the
//! spec names). One known difference: Perl classes (`\w`, `\d`, `\s`, `\b`) are
//! Unicode-aware where RE2's are ASCII-only. An invalid pattern is an attribute error.
//! Output: bool, the input's shape.

use regex::Regex;

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::check_dtype;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::string::Str;
use crate::tensor::Tensor;

#[derive(Debug)]
struct RegexFullMatch {
    /// The pattern anchored at both ends.
    re: Regex,
}

/// Registers RegexFullMatch.
pub fn register(r: &mut Registry) {
    r.register("", "RegexFullMatch", 20..=LATEST_OPSET, |c| {
        let pattern = c
            .attrs
            .string("pattern")?
            .ok_or_else(|| OpError::attr("pattern", "required attribute is missing"))?;
        let re = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| OpError::attr("pattern", format!("invalid regular expression: {e}")))?;
        Ok(Box::new(RegexFullMatch { re }))
    });
}

impl Operator for RegexFullMatch {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, DType::is_string)?;
        Ok(vec![TensorType {
            dtype: DType::Bool,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), DType::is_string)?;
        let v: Vec<bool> = x
            .as_slice::<Str>()?
            .iter()
            .map(|s| self.re.is_match(s.as_str()))
            .collect();
        Ok(vec![Tensor::new(x.shape().to_vec(), v)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::string::Str;
    use crate::tensor::Tensor;

    #[test]
    fn matches_whole_strings_only() {
        let op = build_op(
            "",
            "RegexFullMatch",
            20,
            &[("pattern", Attribute::String(r"a+|b\d".into()))],
            1,
            1,
        )
        .unwrap();
        let x = Tensor::new(
            vec![2, 2],
            ["aaa", "b1", "aab", "xb2"].iter().map(|s| Str::new(s)).collect::<Vec<_>>(),
        )
        .unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_slice::<bool>().unwrap(), &[true, true, false, false]);
        let bad = [("pattern", Attribute::String("(".into()))];
        assert!(build_op("", "RegexFullMatch", 20, &bad, 1, 1).is_err());
    }
}
