//! Static tensor types with symbolic dimensions, used by shape/dtype inference.

use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;

/// One dimension of a static tensor type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known size.
    Fixed(usize),
    /// A named size (ONNX `dim_param`), bound to a number when the graph runs.
    Symbol(Arc<str>),
    /// A size nothing is known about.
    Unknown,
}

impl Dim {
    /// The size, if fixed.
    pub fn fixed(&self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbol(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// The static type of a graph value: its dtype and, if known, its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorType {
    pub dtype: DType,
    /// `None` when even the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

impl TensorType {
    /// A type with a fully known shape.
    pub fn fixed(dtype: DType, shape: &[usize]) -> TensorType {
        TensorType {
            dtype,
            shape: Some(shape.iter().map(|&d| Dim::Fixed(d)).collect()),
        }
    }

    /// A type of unknown rank.
    pub fn unknown_shape(dtype: DType) -> TensorType {
        TensorType { dtype, shape: None }
    }

    /// The rank, if known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }

    /// The shape as numbers, if every dimension is fixed.
    pub fn fixed_shape(&self) -> Option<Vec<usize>> {
        self.shape.as_ref()?.iter().map(Dim::fixed).collect()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype)?;
        match &self.shape {
            None => write!(f, "[*]"),
            Some(s) => {
                let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
                write!(f, "[{}]", dims.join(", "))
            }
        }
    }
}

/// Numpy broadcasting of two static shapes. Returns `None` if two fixed sizes conflict.
///
/// A symbol broadcast against 1 stays the symbol; two different symbols give `Unknown`.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n].clone()
        } else {
            Dim::Fixed(1)
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n].clone()
        } else {
            Dim::Fixed(1)
        };
        let d = match (&da, &db) {
            (Dim::Fixed(1), _) => db,
            (_, Dim::Fixed(1)) => da,
            (Dim::Fixed(x), Dim::Fixed(y)) if x == y => da,
            (Dim::Fixed(_), Dim::Fixed(_)) => return None,
            (Dim::Fixed(_), _) => da,
            (_, Dim::Fixed(_)) => db,
            (Dim::Symbol(x), Dim::Symbol(y)) if x == y => da,
            _ => Dim::Unknown,
        };
        out.push(d);
    }
    Some(out)
}

/// Broadcasts optional shapes: unknown rank on either side gives unknown rank.
pub fn broadcast_types(shapes: &[Option<&Vec<Dim>>]) -> Result<Option<Vec<Dim>>, String> {
    let mut acc: Vec<Dim> = Vec::new();
    for s in shapes {
        let Some(s) = s else { return Ok(None) };
        acc = broadcast_dims(&acc, s).ok_or_else(|| {
            format!(
                "shapes {} and {} do not broadcast",
                fmt_dims(&acc),
                fmt_dims(s)
            )
        })?;
    }
    Ok(Some(acc))
}

/// Formats dims as `[a, b, c]`.
pub fn fmt_dims(d: &[Dim]) -> String {
    let v: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_symbolic() {
        let n: Arc<str> = Arc::from("N");
        let a = vec![Dim::Symbol(n.clone()), Dim::Fixed(1), Dim::Fixed(4)];
        let b = vec![Dim::Fixed(3), Dim::Fixed(1)];
        assert_eq!(
            broadcast_dims(&a, &b).unwrap(),
            vec![Dim::Symbol(n), Dim::Fixed(3), Dim::Fixed(4)]
        );
        assert!(broadcast_dims(&[Dim::Fixed(2)], &[Dim::Fixed(3)]).is_none());
    }
}
