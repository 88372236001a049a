//! LabelEncoder (`ai.onnx.ml` opsets 2–4): maps each element through a key → value table.
//!
//! Keys come from one of `keys_strings`, `keys_int64s`, `keys_floats` or (opset 4)
//! `keys_tensor`; values, parallel to the keys, from `values_strings`, `values_int64s`,
//! `values_floats` or `values_tensor`. The input's type must be the keys' type; the output has
//! the values' type (string, int64, float, or the tensor's type) and the input's shape.
//! Elements without a key get the default: `default_tensor`, or by value type
//! `default_string` (`"_Unused"`), `default_int64` (-1), `default_float` (-0.0). Float keys
//! match by value (NaN matches NaN).

use std::collections::HashMap;

use crate::dispatch_all;
use crate::dtype::DType;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::registry::Registry;
use crate::shape::TensorType;
use crate::string::Str;
use crate::tensor::Tensor;

/// A hashable key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Int(i64),
    /// f32 bits, with every NaN mapped to one pattern and -0.0 to 0.0.
    Float(u32),
    Text(Str),
}

fn float_key(v: f32) -> Key {
    Key::Float(if v.is_nan() {
        f32::NAN.to_bits()
    } else if v == 0.0 {
        0
    } else {
        v.to_bits()
    })
}

#[derive(Debug)]
struct LabelEncoder {
    key_dtype: DType,
    map: HashMap<Key, usize>,
    /// The values (1-D) followed by the default as its last element.
    values: Tensor,
}

/// Keys of a tensor of `dtype` (string, int64 or f32 only).
fn keys_of(t: &Tensor) -> Result<Vec<Key>, OpError> {
    Ok(match t.dtype() {
        DType::String => t.as_slice::<Str>()?.iter().map(|&s| Key::Text(s)).collect(),
        DType::I64 => t.as_slice::<i64>()?.iter().map(|&v| Key::Int(v)).collect(),
        DType::F32 => t.as_slice::<f32>()?.iter().map(|&v| float_key(v)).collect(),
        d => {
            return Err(OpError::attr(
                "keys_tensor",
                format!("keys must be strings, int64 or float, got {d}"),
            ))
        }
    })
}

fn build(c: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
    let a = c.attrs;
    let one = |t: Vec<Option<Tensor>>, what: &str| -> Result<Tensor, OpError> {
        let mut given = t.into_iter().flatten();
        match (given.next(), given.next()) {
            (Some(t), None) => Ok(t),
            (None, _) => Err(OpError::attr(what, "no keys/values attribute is set")),
            (Some(_), Some(_)) => Err(OpError::attr(what, "more than one attribute is set")),
        }
    };
    let strings = |name: &str| -> Result<Option<Tensor>, OpError> {
        a.strings(name)?
            .map(|s| {
                let v: Vec<Str> = s.iter().map(|x| Str::new(x)).collect();
                Tensor::new(vec![v.len()], v).map_err(OpError::from)
            })
            .transpose()
    };
    let ints = |name: &str| -> Result<Option<Tensor>, OpError> {
        a.ints(name)?
            .map(|s| Tensor::new(vec![s.len()], s.clone()).map_err(OpError::from))
            .transpose()
    };
    let floats = |name: &str| -> Result<Option<Tensor>, OpError> {
        a.floats(name)?
            .map(|s| Tensor::new(vec![s.len()], s.clone()).map_err(OpError::from))
            .transpose()
    };
    let tensor = |name: &str| -> Result<Option<Tensor>, OpError> {
        Ok(a.tensor(name)?.map(|t| t.reshape(vec![t.numel()])).transpose()?)
    };
    let keys = one(
        vec![
            strings("keys_strings")?,
            ints("keys_int64s")?,
            floats("keys_floats")?,
            tensor("keys_tensor")?,
        ],
        "keys_*",
    )?;
    let values = one(
        vec![
            strings("values_strings")?,
            ints("values_int64s")?,
            floats("values_floats")?,
            tensor("values_tensor")?,
        ],
        "values_*",
    )?;
    if keys.numel() != values.numel() {
        return Err(OpError::attr(
            "values_*",
            format!("{} keys but {} values", keys.numel(), values.numel()),
        ));
    }
    let vd = values.dtype();
    let default = match a.tensor("default_tensor")? {
        Some(t) if t.numel() == 1 && t.dtype() == vd => t.reshape(vec![1])?,
        Some(t) => {
            return Err(OpError::attr(
                "default_tensor",
                format!("must be one {vd} element, got {}{:?}", t.dtype(), t.shape()),
            ))
        }
        None => match vd {
            DType::String => Tensor::new(vec![1], vec![Str::new(&a.string_or("default_string", "_Unused")?)])?,
            DType::I64 => Tensor::new(vec![1], vec![a.int_or("default_int64", -1)?])?,
            DType::F32 => Tensor::new(vec![1], vec![a.float_or("default_float", -0.0)?])?,
            d => return Err(OpError::attr("default_tensor", format!("required for {d} values"))),
        },
    };
    let mut map = HashMap::new();
    for (i, k) in keys_of(&keys)?.into_iter().enumerate() {
        map.entry(k).or_insert(i);
    }
    let values = dispatch_all!(vd, T => {
        let mut v: Vec<T> = values.as_slice::<T>()?.to_vec();
        v.extend_from_slice(default.as_slice::<T>()?);
        Tensor::new(vec![v.len()], v)?
    });
    Ok(Box::new(LabelEncoder {
        key_dtype: keys.dtype(),
        map,
        values,
    }))
}

/// Registers LabelEncoder.
pub fn register(r: &mut Registry) {
    r.register("ai.onnx.ml", "LabelEncoder", 2..=4, build);
}

impl Operator for LabelEncoder {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if x.ty.dtype != self.key_dtype {
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
        }
        Ok(vec![TensorType {
            dtype: self.values.dtype(),
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        if x.dtype() != self.key_dtype {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype(),
            });
        }
        let default = self.values.numel() - 1;
        let idx: Vec<usize> = keys_of(x)?
            .iter()
            .map(|k| self.map.get(k).copied().unwrap_or(default))
            .collect();
        let out = dispatch_all!(self.values.dtype(), T => {
            let v = self.values.as_slice::<T>()?;
            Tensor::new(x.shape().to_vec(), idx.iter().map(|&i| v[i]).collect::<Vec<T>>())?
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::string::Str;
    use crate::tensor::Tensor;

    #[test]
    fn maps_with_defaults() {
        let x = Tensor::new(
            vec![5],
            ["a", "b", "d", "c", "g"].iter().map(|s| Str::new(s)).collect::<Vec<_>>(),
        )
        .unwrap();
        let attrs = vec![
            ("keys_strings", Attribute::Strings(vec!["a".into(), "b".into(), "c".into()])),
            ("values_int64s", Attribute::Ints(vec![0, 1, 2])),
        ];
        let op = build_op("ai.onnx.ml", "LabelEncoder", 2, &attrs, 1, 1).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 1, -1, 2, -1]);
        // Float keys to string values, with a NaN key and the default string.
        let attrs = vec![
            ("keys_floats", Attribute::Floats(vec![1.5, f32::NAN, -0.0])),
            (
                "values_strings",
                Attribute::Strings(vec!["one".into(), "nan".into(), "zero".into()]),
            ),
        ];
        let op = build_op("ai.onnx.ml", "LabelEncoder", 2, &attrs, 1, 1).unwrap();
        let f = Tensor::new(vec![4], vec![f32::NAN, 0.0, 1.5, 2.0]).unwrap();
        let y = op.eval(&[Some(&f)]).unwrap().remove(0);
        let got: Vec<&str> = y.as_slice::<Str>().unwrap().iter().map(|s| s.as_str()).collect();
        assert_eq!(got, ["nan", "zero", "one", "_Unused"]);
        assert!(op.eval(&[Some(&x)]).is_err(), "string input for float keys");
        let bad = vec![("keys_int64s", Attribute::Ints(vec![1, 2]))];
        assert!(build_op("ai.onnx.ml", "LabelEncoder", 2, &bad, 1, 1).is_err());
    }
}
