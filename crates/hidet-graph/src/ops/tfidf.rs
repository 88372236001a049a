//! TfIdfVectorizer (opset 9+) over integer tokens: counts pool n-grams in each row.
//!
//! The pool (`pool_int64s`) lists the n-grams by size: `ngram_counts[k]` is the pool offset of
//! the (k+1)-grams. Pool n-gram `g` (numbered in pool order) is counted at output coordinate
//! `ngram_indexes[g]`. In a row `x`, the n-grams with `min_gram_length <= n <=
//! max_gram_length` are `(x[s], x[s + d], ..., x[s + (n-1)·d])` for every start `s` and every
//! step `d = 1 ..= max_skip_count + 1` (1-grams once, whatever the step). Output `[C']` or
//! `[B, C']` (`C' = max(ngram_indexes) + 1`, f32): the counts (`TF`), `1` for present n-grams
//! (`IDF`), or counts scaled (`TFIDF`); `IDF`/`TFIDF` scale by `weights[j]` for coordinate `j`
//! when weights are given (ONNX Runtime and the ONNX reference index the weights by output
//! coordinate). String pools are not supported.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

#[derive(Debug)]
struct TfIdf {
    mode: Mode,
    min_n: usize,
    max_n: usize,
    max_skip: usize,
    /// Pool n-gram → output coordinate, for sizes in `[min_n, max_n]`.
    grams: HashMap<Vec<i64>, usize>,
    width: usize,
    weights: Option<Vec<f32>>,
}

fn build(c: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
    if c.attrs.strings("pool_strings")?.is_some() {
        return Err(OpError::Unsupported("TfIdfVectorizer with pool_strings".into()));
    }
    let mode = match c.attrs.string_or("mode", "")?.as_str() {
        "TF" => Mode::Tf,
        "IDF" => Mode::Idf,
        "TFIDF" => Mode::TfIdf,
        other => {
            return Err(OpError::attr(
                "mode",
                format!("must be TF, IDF or TFIDF, got `{other}`"),
            ))
        }
    };
    let req = |name: &str| -> Result<usize, OpError> {
        let v = c.attrs.req_int(name)?;
        usize::try_from(v).map_err(|_| OpError::attr(name, format!("negative value {v}")))
    };
    let (min_n, max_n, max_skip) = (
        req("min_gram_length")?,
        req("max_gram_length")?,
        req("max_skip_count")?,
    );
    if min_n == 0 || min_n > max_n {
        return Err(OpError::attr(
            "min_gram_length",
            format!("need 1 <= min_gram_length ({min_n}) <= max_gram_length ({max_n})"),
        ));
    }
    let empty = Vec::new();
    let pool = c.attrs.ints("pool_int64s")?.unwrap_or(&empty);
    let counts = c.attrs.ints("ngram_counts")?.unwrap_or(&empty);
    let indexes = c
        .attrs
        .ints("ngram_indexes")?
        .ok_or_else(|| OpError::attr("ngram_indexes", "required attribute is missing"))?;
    let width = indexes.iter().map(|&i| i + 1).max().unwrap_or(0).max(0) as usize;
    let mut grams = HashMap::new();
    let mut gram_id = 0usize;
    for (k, &start) in counts.iter().enumerate() {
        let n = k + 1;
        let end = counts.get(k + 1).copied().unwrap_or(pool.len() as i64);
        let (start, end) = (start.max(0) as usize, end.max(0) as usize);
        if start > end || end > pool.len() || (end - start) % n != 0 {
            return Err(OpError::attr(
                "ngram_counts",
                format!("{counts:?} does not split a pool of {} into whole n-grams", pool.len()),
            ));
        }
        for g in pool[start..end].chunks(n) {
            if (min_n..=max_n).contains(&n) {
                let coord = indexes.get(gram_id).copied().ok_or_else(|| {
                    OpError::attr("ngram_indexes", format!("no entry for pool n-gram {gram_id}"))
                })?;
                let coord = usize::try_from(coord).map_err(|_| {
                    OpError::attr("ngram_indexes", format!("negative index {coord}"))
                })?;
                grams.insert(g.to_vec(), coord);
            }
            gram_id += 1;
        }
    }
    let weights = c.attrs.floats("weights")?.cloned();
    if let Some(w) = &weights {
        if w.len() < width {
            return Err(OpError::attr(
                "weights",
                format!("{} weights for {width} output coordinates", w.len()),
            ));
        }
    }
    Ok(Box::new(TfIdf {
        mode,
        min_n,
        max_n,
        max_skip,
        grams,
        width,
        weights,
    }))
}

/// Registers TfIdfVectorizer.
pub fn register(r: &mut Registry) {
    r.register("", "TfIdfVectorizer", 9..=LATEST_OPSET, build);
}

impl TfIdf {
    fn count_row(&self, x: &[i64], out: &mut [f32]) {
        let mut counts = vec![0u32; self.width];
        for step in 1..=self.max_skip + 1 {
            let from = if step == 1 { self.min_n } else { self.min_n.max(2) };
            for start in 0..x.len() {
                for n in from..=self.max_n {
                    let last = start + (n - 1) * step;
                    if last >= x.len() {
                        break;
                    }
                    let gram: Vec<i64> = (0..n).map(|k| x[start + k * step]).collect();
                    if let Some(&coord) = self.grams.get(&gram) {
                        counts[coord] += 1;
                    }
                }
            }
        }
        for (j, (&cnt, o)) in counts.iter().zip(out.iter_mut()).enumerate() {
            let w = self.weights.as_ref().map_or(1.0, |w| w[j]);
            *o = match self.mode {
                Mode::Tf => cnt as f32,
                Mode::Idf => {
                    if cnt > 0 {
                        w
                    } else {
                        0.0
                    }
                }
                Mode::TfIdf => w * cnt as f32,
            };
        }
    }
}

fn token_dtype(d: DType) -> bool {
    matches!(d, DType::I32 | DType::I64)
}

impl Operator for TfIdf {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if !token_dtype(x.ty.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
        }
        let shape = match x.ty.shape.as_deref() {
            Some([_]) | Some([]) => Some(vec![Dim::Fixed(self.width)]),
            Some([b, _]) => Some(vec![b.clone(), Dim::Fixed(self.width)]),
            Some(s) => {
                return Err(OpError::Shape(format!(
                    "input must be [C] or [B, C], got rank {}",
                    s.len()
                )))
            }
            None => None,
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        if !token_dtype(x.dtype()) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype(),
            });
        }
        let v = x.to_i64_vec();
        let (rows, cols, shape) = match x.shape() {
            [] => (1, 1, vec![self.width]),
            &[c] => (1, c, vec![self.width]),
            &[b, c] => (b, c, vec![b, self.width]),
            s => {
                return Err(OpError::Shape(format!(
                    "input must be [C] or [B, C], got {s:?}"
                )))
            }
        };
        let mut out = vec![0f32; rows * self.width];
        for r in 0..rows {
            self.count_row(
                &v[r * cols..(r + 1) * cols],
                &mut out[r * self.width..(r + 1) * self.width],
            );
        }
        Ok(vec![Tensor::new(shape, out)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    /// The spec's example: with skips, [94, 12] and [17, 28] are 2-grams of
    /// [94, 17, 36, 12, 28] at step 3.
    #[test]
    fn counts_skip_grams() {
        let attrs = |mode: &str, skip: i64| {
            vec![
                ("mode", Attribute::String(mode.into())),
                ("min_gram_length", Attribute::Int(1)),
                ("max_gram_length", Attribute::Int(2)),
                ("max_skip_count", Attribute::Int(skip)),
                // 1-grams: 94, 28; 2-grams: (94, 12), (17, 28), (17, 36).
                ("pool_int64s", Attribute::Ints(vec![94, 28, 94, 12, 17, 28, 17, 36])),
                ("ngram_counts", Attribute::Ints(vec![0, 2])),
                ("ngram_indexes", Attribute::Ints(vec![0, 1, 2, 3, 4])),
                ("weights", Attribute::Floats(vec![0.5, 1.0, 2.0, 3.0, 4.0])),
            ]
        };
        let x = Tensor::new(vec![2, 5], vec![94i64, 17, 36, 12, 28, 94, 94, 28, 1, 2]).unwrap();
        let eval = |mode: &str, skip: i64| {
            build_op("", "TfIdfVectorizer", 9, &attrs(mode, skip), 1, 1)
                .unwrap()
                .eval(&[Some(&x)])
                .unwrap()
                .remove(0)
        };
        let y = eval("TF", 2);
        assert_eq!(y.shape(), &[2, 5]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[1., 1., 1., 1., 1., 2., 1., 0., 0., 0.]
        );
        // Without skips only the adjacent (17, 36) is found among the 2-grams.
        let y = eval("TF", 0);
        assert_eq!(&y.as_slice::<f32>().unwrap()[..5], &[1., 1., 0., 0., 1.]);
        let y = eval("TFIDF", 2);
        assert_eq!(&y.as_slice::<f32>().unwrap()[5..], &[1., 1., 0., 0., 0.]);
        let y = eval("IDF", 2);
        assert_eq!(&y.as_slice::<f32>().unwrap()[5..], &[0.5, 1., 0., 0., 0.]);
        let mut bad = attrs("TF", 0);
        bad[5] = ("ngram_counts", Attribute::Ints(vec![0, 3]));
        assert!(build_op("", "TfIdfVectorizer", 9, &bad, 1, 1).is_err());
    }
}
