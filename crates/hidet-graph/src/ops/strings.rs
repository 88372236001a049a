//! String operators: StringConcat (20+), StringSplit (20+), StringNormalizer (10+).
//!
//! - StringConcat: elementwise `a + b` with numpy broadcasting.
//! - StringSplit: splits each element by `delimiter` (Python `str.split(delimiter,
//!   maxsplit)`: consecutive delimiters give empty strings), or, when `delimiter` is absent or
//!   empty, by runs of whitespace with leading/trailing whitespace ignored. At most `maxsplit`
//!   splits (the remainder stays whole). Outputs `Y [*X.shape, K]` (the pieces, padded with
//!   empty strings to the largest count `K`) and `Z [*X.shape]` int64 (each element's count).
//! - StringNormalizer on `[C]` or `[1, C]`: drops the elements equal to a `stopwords` entry
//!   (compared case-insensitively unless `is_case_sensitive`), then applies
//!   `case_change_action` (`LOWER`, `UPPER`, `NONE`; Unicode default case mapping, `locale` is
//!   not consulted). If everything is dropped the output is one empty string (`[1]` or
//!   `[1, 1]`).

use crate::dtype::DType;
use crate::kernels::broadcast::map2;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, infer_broadcast};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::string::Str;
use crate::tensor::Tensor;

fn string(d: DType) -> bool {
    d.is_string()
}

#[derive(Debug)]
struct StringConcat;

#[derive(Debug)]
struct StringSplit {
    /// `None`: split on whitespace runs.
    delimiter: Option<String>,
    maxsplit: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    None,
    Lower,
    Upper,
}

#[derive(Debug)]
struct StringNormalizer {
    case: Case,
    case_sensitive: bool,
    stopwords: Vec<String>,
}

/// Registers the string operators.
pub fn register(r: &mut Registry) {
    r.register("", "StringConcat", 20..=LATEST_OPSET, |_| Ok(Box::new(StringConcat)));
    r.register("", "StringSplit", 20..=LATEST_OPSET, |c: &OpContext<'_>| {
        let delimiter = c.attrs.string("delimiter")?.filter(|d| !d.is_empty()).cloned();
        let maxsplit = match c.attrs.int("maxsplit")? {
            None => None,
            Some(&m) => Some(usize::try_from(m).map_err(|_| {
                OpError::attr("maxsplit", format!("must be >= 0, got {m}"))
            })?),
        };
        Ok(Box::new(StringSplit { delimiter, maxsplit }))
    });
    r.register("", "StringNormalizer", 10..=LATEST_OPSET, |c: &OpContext<'_>| {
        let case = match c.attrs.string_or("case_change_action", "NONE")?.as_str() {
            "NONE" => Case::None,
            "LOWER" => Case::Lower,
            "UPPER" => Case::Upper,
            other => {
                return Err(OpError::attr(
                    "case_change_action",
                    format!("must be NONE, LOWER or UPPER, got `{other}`"),
                ))
            }
        };
        let case_sensitive = match c.attrs.int_or("is_case_sensitive", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attr(
                    "is_case_sensitive",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        let stopwords = c.attrs.strings("stopwords")?.cloned().unwrap_or_default();
        Ok(Box::new(StringNormalizer {
            case,
            case_sensitive,
            stopwords,
        }))
    });
}

impl Operator for StringConcat {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        check_dtype(0, infer_arg(inputs, 0)?.ty.dtype, string)?;
        check_dtype(1, infer_arg(inputs, 1)?.ty.dtype, string)?;
        infer_broadcast(inputs, None, true)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_dtype(0, a.dtype(), string)?;
        check_dtype(1, b.dtype(), string)?;
        Ok(vec![map2::<Str, Str, Str>(a, b, |x, y| {
            Str::new(&[x.as_str(), y.as_str()].concat())
        })?])
    }
}

impl StringSplit {
    fn split(&self, s: &str) -> Vec<String> {
        let limit = self.maxsplit.unwrap_or(usize::MAX);
        match &self.delimiter {
            Some(d) => {
                let mut parts = Vec::new();
                let mut rest = s;
                while parts.len() < limit {
                    match rest.find(d.as_str()) {
                        Some(i) => {
                            parts.push(rest[..i].to_string());
                            rest = &rest[i + d.len()..];
                        }
                        None => break,
                    }
                }
                parts.push(rest.to_string());
                parts
            }
            None => {
                let mut parts = Vec::new();
                let mut rest = s.trim_start();
                while !rest.is_empty() {
                    if parts.len() == limit {
                        parts.push(rest.to_string());
                        break;
                    }
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    parts.push(rest[..end].to_string());
                    rest = rest[end..].trim_start();
                }
                parts
            }
        }
    }
}

impl Operator for StringSplit {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, string)?;
        let y = x.ty.shape.as_ref().map(|s| {
            let mut s = s.clone();
            s.push(Dim::Unknown);
            s
        });
        Ok(vec![
            TensorType {
                dtype: DType::String,
                shape: y,
            },
            TensorType {
                dtype: DType::I64,
                shape: x.ty.shape.clone(),
            },
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), string)?;
        let pieces: Vec<Vec<String>> = x
            .as_slice::<Str>()?
            .iter()
            .map(|s| self.split(s.as_str()))
            .collect();
        let k = pieces.iter().map(Vec::len).max().unwrap_or(0);
        let mut y = Vec::with_capacity(pieces.len() * k);
        for p in &pieces {
            y.extend(p.iter().map(|s| Str::new(s)));
            y.extend(std::iter::repeat_n(Str::default(), k - p.len()));
        }
        let mut shape = x.shape().to_vec();
        shape.push(k);
        let counts: Vec<i64> = pieces.iter().map(|p| p.len() as i64).collect();
        Ok(vec![
            Tensor::new(shape, y)?,
            Tensor::new(x.shape().to_vec(), counts)?,
        ])
    }
}

impl StringNormalizer {
    fn is_stopword(&self, s: &str) -> bool {
        if self.case_sensitive {
            self.stopwords.iter().any(|w| w == s)
        } else {
            let lower = s.to_lowercase();
            self.stopwords.iter().any(|w| w.to_lowercase() == lower)
        }
    }
}

impl Operator for StringNormalizer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, string)?;
        let shape = match x.ty.shape.as_deref() {
            Some([_]) => Some(vec![Dim::Unknown]),
            Some([one, _]) if *one == Dim::Fixed(1) => Some(vec![Dim::Fixed(1), Dim::Unknown]),
            Some(s) => {
                return Err(OpError::Shape(format!(
                    "StringNormalizer takes [C] or [1, C], got rank {} ({})",
                    s.len(),
                    crate::shape::fmt_dims(s)
                )))
            }
            None => None,
        };
        Ok(vec![TensorType {
            dtype: DType::String,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), string)?;
        let two_d = match x.shape() {
            [_] => false,
            [1, _] => true,
            s => {
                return Err(OpError::Shape(format!(
                    "StringNormalizer takes [C] or [1, C], got {s:?}"
                )))
            }
        };
        let mut kept: Vec<Str> = x
            .as_slice::<Str>()?
            .iter()
            .filter(|s| !self.is_stopword(s.as_str()))
            .map(|s| match self.case {
                Case::None => *s,
                Case::Lower => Str::new(&s.as_str().to_lowercase()),
                Case::Upper => Str::new(&s.as_str().to_uppercase()),
            })
            .collect();
        if kept.is_empty() {
            kept.push(Str::default());
        }
        let shape = if two_d {
            vec![1, kept.len()]
        } else {
            vec![kept.len()]
        };
        Ok(vec![Tensor::new(shape, kept)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::string::Str;
    use crate::tensor::Tensor;

    fn strs(shape: Vec<usize>, v: &[&str]) -> Tensor {
        Tensor::new(shape, v.iter().map(|s| Str::new(s)).collect::<Vec<Str>>()).unwrap()
    }

    fn texts(t: &Tensor) -> Vec<&'static str> {
        t.as_slice::<Str>().unwrap().iter().map(|s| s.as_str()).collect()
    }

    #[test]
    fn concat_broadcasts() {
        let op = build_op("", "StringConcat", 20, &[], 2, 1).unwrap();
        let a = strs(vec![3], &["cat", "dög", ""]);
        let b = strs(vec![1], &["s"]);
        let y = op.eval(&[Some(&a), Some(&b)]).unwrap().remove(0);
        assert_eq!(texts(&y), ["cats", "dögs", "s"]);
        let n = Tensor::new(vec![1], vec![1f32]).unwrap();
        assert!(op.eval(&[Some(&a), Some(&n)]).is_err());
    }

    #[test]
    fn split_like_python() {
        let x = strs(vec![2, 2], &["a,b,,c,", "x", " lead  mid tail ", ""]);
        let op = build_op(
            "",
            "StringSplit",
            20,
            &[("delimiter", Attribute::String(",".into()))],
            1,
            2,
        )
        .unwrap();
        let o = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(o[0].shape(), &[2, 2, 5]);
        assert_eq!(&texts(&o[0])[..5], ["a", "b", "", "c", ""]);
        assert_eq!(o[1].as_slice::<i64>().unwrap(), &[5, 1, 1, 1]);
        let op = build_op("", "StringSplit", 20, &[("maxsplit", Attribute::Int(1))], 1, 2).unwrap();
        let o = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(o[0].shape(), &[2, 2, 2]);
        assert_eq!(&texts(&o[0])[4..6], ["lead", "mid tail "]);
        assert_eq!(o[1].as_slice::<i64>().unwrap(), &[1, 1, 2, 0]);
    }

    #[test]
    fn normalizer_drops_stopwords_and_changes_case() {
        let op = build_op(
            "",
            "StringNormalizer",
            10,
            &[
                ("case_change_action", Attribute::String("UPPER".into())),
                ("stopwords", Attribute::Strings(vec!["monday".into()])),
            ],
            1,
            1,
        )
        .unwrap();
        let x = strs(vec![1, 3], &["Monday", "tuesday", "MONDAY"]);
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 1]);
        assert_eq!(texts(&y), ["TUESDAY"]);
        let x = strs(vec![2], &["monday", "Monday"]);
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(texts(&y), [""]);
        let x = strs(vec![2, 2], &["a", "b", "c", "d"]);
        assert!(op.eval(&[Some(&x)]).is_err());
    }
}
