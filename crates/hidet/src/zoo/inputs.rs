//! Synthetic inputs for any graph (zoo models come without data; `hidet bench` fills the
//! inputs a user does not give).
//!
//! What each missing input gets, by what the graph does with it:
//! - an integer input whose values index a `Gather` table (directly or through `Cast`,
//!   `Reshape`, `Unsqueeze`, `Squeeze`, `Flatten`, `Identity`): ids uniform in
//!   `[0, rows)` of the smallest such table (token ids, token types);
//! - an input whose name contains `mask` (any dtype): ones (attend everywhere);
//! - other integers: uniform in `[0, 10)`; bools: fair coin flips;
//! - floats: standard normal samples.
//!
//! Symbolic dimensions take the size a given input binds them to, else 1.

use std::collections::HashMap;

use hidet_graph::half::{bf16, f16};
use hidet_graph::{DType, Dim, Graph, Tensor, TensorError, ValueId};

use super::rng::Rng;

/// Errors of synthesizing inputs.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The input's rank is unknown, so no shape can be chosen.
    #[error("input `{0}` has an unknown rank; give it with --input NAME=FILE.npy")]
    UnknownRank(String),
    /// A given input names no graph input.
    #[error("`{name}` is not an input of the model (inputs: {inputs})")]
    Unknown { name: String, inputs: String },
    #[error("input `{name}`: {source}")]
    Tensor { name: String, source: TensorError },
}

/// What a synthesized input holds (for reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Given by the caller.
    Given,
    /// Ids in `[0, rows)` of a gathered table.
    Ids { rows: usize },
    /// All ones (a mask).
    Ones,
    /// Random values of the dtype's default distribution.
    Random,
}

/// Every graph input, in input order: the one in `given` if present, else a synthesized one
/// drawn from `seed` (see the module docs), with what it holds. A given name that is not a
/// graph input is an error.
pub fn complete_inputs(
    graph: &Graph,
    given: &[(String, Tensor)],
    seed: u64,
) -> Result<Vec<(String, Tensor, InputKind)>, InputError> {
    let names: Vec<&str> = graph
        .inputs()
        .iter()
        .map(|&id| graph.value(id).name.as_str())
        .collect();
    if let Some((name, _)) = given.iter().find(|(n, _)| !names.contains(&n.as_str())) {
        return Err(InputError::Unknown {
            name: name.clone(),
            inputs: names.join(", "),
        });
    }
    let symbols = bind_symbols(graph, given);
    let mut out = Vec::with_capacity(graph.inputs().len());
    for &id in graph.inputs() {
        let v = graph.value(id);
        if let Some((_, t)) = given.iter().find(|(n, _)| *n == v.name) {
            out.push((v.name.clone(), t.clone(), InputKind::Given));
            continue;
        }
        let dims =
            v.ty.shape
                .as_ref()
                .ok_or_else(|| InputError::UnknownRank(v.name.clone()))?;
        let shape: Vec<usize> = dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => *n,
                Dim::Symbol(s) => symbols.get(s.as_ref()).copied().unwrap_or(1),
                Dim::Unknown => 1,
            })
            .collect();
        let dtype = v.ty.dtype;
        let kind = if dtype.is_int() {
            match gather_rows(graph, id) {
                Some(rows) => InputKind::Ids { rows },
                None if is_mask(&v.name) => InputKind::Ones,
                None => InputKind::Random,
            }
        } else if is_mask(&v.name) {
            InputKind::Ones
        } else {
            InputKind::Random
        };
        let mut rng = Rng::derived(seed, &v.name);
        let t = synthesize(dtype, shape, kind, &mut rng).map_err(|source| InputError::Tensor {
            name: v.name.clone(),
            source,
        })?;
        out.push((v.name.clone(), t, kind));
    }
    Ok(out)
}

/// Inputs for a model known only by its declared inputs (a saved compiled model), as
/// `(name, dtype, shape)` in input order: the one in `given` if present, else synthesized
/// like [`complete_inputs`] does, except that with no graph to find the tables an integer
/// id input gets ids in `[0, 2)` (valid for any table of two rows or more).
pub fn complete_declared_inputs(
    declared: &[(String, DType, Vec<usize>)],
    given: &[(String, Tensor)],
    seed: u64,
) -> Result<Vec<(String, Tensor, InputKind)>, InputError> {
    if let Some((name, _)) = given
        .iter()
        .find(|(n, _)| !declared.iter().any(|(d, _, _)| d == n))
    {
        return Err(InputError::Unknown {
            name: name.clone(),
            inputs: declared
                .iter()
                .map(|(n, _, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    declared
        .iter()
        .map(|(name, dtype, shape)| {
            if let Some((_, t)) = given.iter().find(|(n, _)| n == name) {
                return Ok((name.clone(), t.clone(), InputKind::Given));
            }
            let kind = if is_mask(name) {
                InputKind::Ones
            } else if dtype.is_int() {
                InputKind::Ids { rows: 2 }
            } else {
                InputKind::Random
            };
            let mut rng = Rng::derived(seed, name);
            let t = synthesize(*dtype, shape.clone(), kind, &mut rng).map_err(|source| {
                InputError::Tensor {
                    name: name.clone(),
                    source,
                }
            })?;
            Ok((name.clone(), t, kind))
        })
        .collect()
}

fn is_mask(name: &str) -> bool {
    name.to_ascii_lowercase().contains("mask")
}

/// Sizes of the symbolic dimensions bound by the given inputs.
fn bind_symbols(graph: &Graph, given: &[(String, Tensor)]) -> HashMap<String, usize> {
    let mut symbols = HashMap::new();
    for &id in graph.inputs() {
        let v = graph.value(id);
        let (Some(dims), Some((_, t))) = (&v.ty.shape, given.iter().find(|(n, _)| *n == v.name))
        else {
            continue;
        };
        if dims.len() != t.rank() {
            continue;
        }
        for (d, &n) in dims.iter().zip(t.shape()) {
            if let Dim::Symbol(s) = d {
                symbols.entry(s.to_string()).or_insert(n);
            }
        }
    }
    symbols
}

/// Value-preserving operators through which an id input may reach a `Gather`.
const PASS_THROUGH: &[&str] = &[
    "Cast",
    "Reshape",
    "Unsqueeze",
    "Squeeze",
    "Flatten",
    "Identity",
];

/// The smallest number of rows (along the gather axis) of a table indexed by `v`'s values.
fn gather_rows(graph: &Graph, v: ValueId) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut stack = vec![v];
    let mut seen = vec![v];
    while let Some(cur) = stack.pop() {
        for &(nid, slot) in &graph.value(cur).users {
            let node = &graph.nodes()[nid.0];
            if node.domain.is_empty() && node.op_type == "Gather" && slot == 1 {
                let rows = node.inputs.first().copied().flatten().and_then(|table| {
                    let dims = graph.value(table).ty.shape.as_ref()?;
                    let axis = node.attrs.int_or("axis", 0).ok()?;
                    let axis = if axis < 0 {
                        axis + dims.len() as i64
                    } else {
                        axis
                    };
                    dims.get(usize::try_from(axis).ok()?)?.fixed()
                });
                if let Some(r) = rows.filter(|&r| r > 0) {
                    best = Some(best.map_or(r, |b| b.min(r)));
                }
            } else if node.domain.is_empty()
                && PASS_THROUGH.contains(&node.op_type.as_str())
                && slot == 0
            {
                for out in node.outputs.iter().flatten() {
                    if !seen.contains(out) {
                        seen.push(*out);
                        stack.push(*out);
                    }
                }
            }
        }
    }
    best
}

fn synthesize(
    dtype: DType,
    shape: Vec<usize>,
    kind: InputKind,
    rng: &mut Rng,
) -> Result<Tensor, TensorError> {
    let n = hidet_graph::tensor::checked_numel(&shape)
        .ok_or_else(|| TensorError::TooLarge(shape.clone()))?;
    if kind == InputKind::Ones {
        return Ok(Tensor::new(shape, vec![1f64; n])?.cast(dtype));
    }
    let t = match dtype {
        DType::Bool => Tensor::new(
            shape,
            (0..n).map(|_| rng.below(2) == 1).collect::<Vec<bool>>(),
        )?,
        DType::F32 => Tensor::new(shape, rng.normal_vec(n, 1.0))?,
        DType::F64 => Tensor::new(shape, (0..n).map(|_| rng.normal()).collect::<Vec<f64>>())?,
        DType::F16 => Tensor::new(
            shape,
            (0..n)
                .map(|_| f16::from_f64(rng.normal()))
                .collect::<Vec<f16>>(),
        )?,
        DType::BF16 => Tensor::new(
            shape,
            (0..n)
                .map(|_| bf16::from_f64(rng.normal()))
                .collect::<Vec<bf16>>(),
        )?,
        _ => {
            let range = match kind {
                InputKind::Ids { rows } => rows as u64,
                _ => 10,
            };
            let ids: Vec<i64> = (0..n).map(|_| rng.below(range) as i64).collect();
            Tensor::new(shape, ids)?.cast(dtype)
        }
    };
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_graph::{Attributes, GraphBuilder, NodeSpec, Registry, TensorType};

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            domain: String::new(),
            op_type: op.into(),
            opset: 17,
            attrs: Attributes::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![name.into()],
        }
    }

    /// ids (int64[N, 5]) → Cast → Gather into a 7-row table; mask (int64[N, 5]) added after
    /// a cast; x (f32[N, 5, 3]).
    fn graph() -> Graph {
        let mut b = GraphBuilder::new("g");
        let sym = |d: &[Result<usize, &str>], dt| TensorType {
            dtype: dt,
            shape: Some(
                d.iter()
                    .map(|x| match x {
                        Ok(n) => Dim::Fixed(*n),
                        Err(s) => Dim::Symbol((*s).into()),
                    })
                    .collect(),
            ),
        };
        b.input("ids", sym(&[Err("N"), Ok(5)], DType::I64));
        b.input("attention_mask", sym(&[Err("N"), Ok(5)], DType::I64));
        b.input("x", sym(&[Err("N"), Ok(5), Ok(3)], DType::F32));
        b.initializer(
            "table",
            Tensor::new(vec![7, 3], vec![0.5f32; 21]).expect("21 elements"),
        );
        let mut cast = node("ids32", "Cast", &["ids"]);
        cast.attrs.insert("to", hidet_graph::Attribute::Int(6));
        b.node(cast);
        b.node(node("emb", "Gather", &["table", "ids32"]));
        b.node(node("sum", "Add", &["emb", "x"]));
        b.output("sum");
        b.output("attention_mask");
        b.build(Registry::global()).expect("valid test graph")
    }

    #[test]
    fn ids_stay_in_table_masks_are_ones_symbols_follow_given_inputs() {
        let g = graph();
        let given_x = Tensor::new(vec![4, 5, 3], vec![0.25f32; 60]).expect("60 elements");
        let inputs = complete_inputs(&g, &[("x".into(), given_x.clone())], 11).expect("inputs");
        assert_eq!(inputs.len(), 3);
        let (_, ids, kind) = &inputs[0];
        assert_eq!(*kind, InputKind::Ids { rows: 7 });
        assert_eq!(ids.shape(), &[4, 5]);
        let v = ids.to_i64_vec();
        assert!(v.iter().all(|&i| (0..7).contains(&i)), "{v:?}");
        assert!(v.iter().any(|&i| i != v[0]), "ids are not all equal: {v:?}");
        let (_, mask, kind) = &inputs[1];
        assert_eq!(*kind, InputKind::Ones);
        assert_eq!(mask.to_i64_vec(), vec![1; 20]);
        assert_eq!(inputs[2].2, InputKind::Given);
        assert_eq!(inputs[2].1.to_f64_vec(), given_x.to_f64_vec());
    }

    #[test]
    fn unknown_given_inputs_are_rejected() {
        let t = Tensor::new(vec![1], vec![1f32]).expect("1 element");
        let e = complete_inputs(&graph(), &[("idz".into(), t)], 1).expect_err("unknown input");
        assert!(
            e.to_string().contains("`idz`") && e.to_string().contains("ids"),
            "{e}"
        );
    }

    #[test]
    fn floats_are_seeded_normals() {
        let g = graph();
        let a = complete_inputs(&g, &[], 5).expect("inputs");
        let b = complete_inputs(&g, &[], 5).expect("inputs");
        let c = complete_inputs(&g, &[], 6).expect("inputs");
        let x = a[2].1.to_f64_vec();
        assert_eq!(a[2].1.shape(), &[1, 5, 3]);
        assert_eq!(x, b[2].1.to_f64_vec());
        assert_ne!(x, c[2].1.to_f64_vec());
        assert!(x.iter().all(|v| v.is_finite() && v.abs() < 10.0));
        assert!(x.iter().any(|v| *v != 0.0));
    }
}
