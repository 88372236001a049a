//! TreeEnsemble (`ai.onnx.ml` opset 5): sums (or averages, min, max) leaf weights of decision
//! trees per target.
//!
//! Interior nodes are the parallel `nodes_*` attributes: a node compares feature
//! `nodes_featureids[i]` of a row with `nodes_splits[i]` by `nodes_modes[i]` (0 `<=`, 1 `<`,
//! 2 `>=`, 3 `>`, 4 `==`, 5 `!=`, 6 set membership: the next NaN-delimited group of
//! `membership_values`, groups taken in node order); a NaN feature follows the true branch
//! when `nodes_missing_value_tracks_true[i]`. Branches point at nodes or, when
//! `nodes_trueleafs`/`nodes_falseleafs` say so, at leaves (`leaf_weights`, `leaf_targetids`).
//! A root whose two branches are the same leaf is a one-leaf tree. Output `[N, n_targets]` in
//! X's type: per target, `aggregate_function` 0 average (sum / number of trees), 1 sum,
//! 2 min, 3 max of the reached leaves (min/max start from the type's largest/lowest finite
//! value, as the ONNX reference does). `post_transform` 0 (none), 1 (softmax over targets) and
//! 2 (logistic) are supported.

use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::Registry;
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Post {
    None,
    Softmax,
    Logistic,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Cmp(u8, f64),
    Member(Vec<f64>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Branch {
    Node(usize),
    Leaf(usize),
}

#[derive(Debug, Clone)]
struct TreeNode {
    feature: usize,
    test: Test,
    nan_true: bool,
    on_true: Branch,
    on_false: Branch,
}

#[derive(Debug)]
struct TreeEnsemble {
    nodes: Vec<TreeNode>,
    /// Per tree, its root.
    roots: Vec<Branch>,
    leaves: Vec<(f64, usize)>,
    targets: usize,
    aggregate: Aggregate,
    post: Post,
}

fn ints(c: &OpContext<'_>, name: &str) -> Result<Vec<i64>, OpError> {
    c.attrs
        .ints(name)?
        .cloned()
        .ok_or_else(|| OpError::attr(name, "required attribute is missing"))
}

fn tensor_values(c: &OpContext<'_>, name: &str, required: bool) -> Result<Option<Vec<f64>>, OpError> {
    match c.attrs.tensor(name)? {
        Some(t) => Ok(Some(t.to_f64_vec())),
        None if required => Err(OpError::attr(name, "required attribute is missing")),
        None => Ok(None),
    }
}

fn index(v: i64, len: usize, what: &str) -> Result<usize, OpError> {
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| OpError::attr(what, format!("index {v} is out of range for {len} entries")))
}

fn build(c: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
    let features = ints(c, "nodes_featureids")?;
    let n = features.len();
    let splits = tensor_values(c, "nodes_splits", true)?.unwrap_or_default();
    let modes = tensor_values(c, "nodes_modes", true)?.unwrap_or_default();
    let (t_ids, f_ids) = (ints(c, "nodes_truenodeids")?, ints(c, "nodes_falsenodeids")?);
    let (t_leaf, f_leaf) = (ints(c, "nodes_trueleafs")?, ints(c, "nodes_falseleafs")?);
    let missing = c.attrs.ints("nodes_missing_value_tracks_true")?.cloned();
    let weights = tensor_values(c, "leaf_weights", true)?.unwrap_or_default();
    let leaf_targets = ints(c, "leaf_targetids")?;
    let targets = c.attrs.int_or("n_targets", 1)?;
    let targets = usize::try_from(targets)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(|| OpError::attr("n_targets", format!("must be positive, got {targets}")))?;
    let lens = [splits.len(), modes.len(), t_ids.len(), f_ids.len(), t_leaf.len(), f_leaf.len()];
    if lens.iter().any(|&l| l != n)
        || missing.as_ref().is_some_and(|m| m.len() != n)
        || weights.len() != leaf_targets.len()
    {
        return Err(OpError::attr(
            "nodes_featureids",
            "the nodes_* (and the leaf_*) attributes must have equal lengths",
        ));
    }
    let leaves: Vec<(f64, usize)> = weights
        .iter()
        .zip(&leaf_targets)
        .map(|(&w, &t)| Ok((w, index(t, targets, "leaf_targetids")?)))
        .collect::<Result<_, OpError>>()?;
    let mut members = tensor_values(c, "membership_values", false)?
        .unwrap_or_default()
        .into_iter();
    let branch = |leaf: i64, id: i64| -> Result<Branch, OpError> {
        Ok(if leaf != 0 {
            Branch::Leaf(index(id, leaves.len(), "leaf index")?)
        } else {
            Branch::Node(index(id, n, "node index")?)
        })
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = modes[i];
        let test = match mode as i64 {
            0..=5 if mode.fract() == 0.0 => Test::Cmp(mode as u8, splits[i]),
            6 => {
                let set: Vec<f64> = members.by_ref().take_while(|v| !v.is_nan()).collect();
                Test::Member(set)
            }
            _ => return Err(OpError::attr("nodes_modes", format!("invalid mode {mode}"))),
        };
        nodes.push(TreeNode {
            feature: usize::try_from(features[i]).map_err(|_| {
                OpError::attr("nodes_featureids", format!("negative feature {}", features[i]))
            })?,
            test,
            nan_true: missing.as_ref().is_some_and(|m| m[i] != 0),
            on_true: branch(t_leaf[i], t_ids[i])?,
            on_false: branch(f_leaf[i], f_ids[i])?,
        });
    }
    let roots = ints(c, "tree_roots")?
        .into_iter()
        .map(|r| {
            let r = index(r, n, "tree_roots")?;
            let nd = &nodes[r];
            Ok(match (nd.on_true, nd.on_false) {
                (Branch::Leaf(a), Branch::Leaf(b)) if a == b => Branch::Leaf(a),
                _ => Branch::Node(r),
            })
        })
        .collect::<Result<_, OpError>>()?;
    let aggregate = match c.attrs.int_or("aggregate_function", 1)? {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        v => return Err(OpError::attr("aggregate_function", format!("invalid value {v}"))),
    };
    let post = match c.attrs.int_or("post_transform", 0)? {
        0 => Post::None,
        1 => Post::Softmax,
        2 => Post::Logistic,
        v @ (3 | 4) => {
            return Err(OpError::Unsupported(format!(
                "TreeEnsemble post_transform {v}"
            )))
        }
        v => return Err(OpError::attr("post_transform", format!("invalid value {v}"))),
    };
    Ok(Box::new(TreeEnsemble {
        nodes,
        roots,
        leaves,
        targets,
        aggregate,
        post,
    }))
}

/// Registers TreeEnsemble.
pub fn register(r: &mut Registry) {
    r.register("ai.onnx.ml", "TreeEnsemble", 5..=5, build);
}

impl TreeEnsemble {
    /// The leaf a row reaches from `root`; an error on a cycle or a missing feature.
    fn leaf(&self, root: Branch, row: &[f64]) -> Result<usize, OpError> {
        let mut at = root;
        for _ in 0..=self.nodes.len() {
            let i = match at {
                Branch::Leaf(l) => return Ok(l),
                Branch::Node(i) => i,
            };
            let nd = &self.nodes[i];
            let x = *row.get(nd.feature).ok_or_else(|| {
                OpError::Invalid(format!("feature {} is out of range for {} features", nd.feature, row.len()))
            })?;
            let hit = (nd.nan_true && x.is_nan())
                || match &nd.test {
                    Test::Cmp(0, s) => x <= *s,
                    Test::Cmp(1, s) => x < *s,
                    Test::Cmp(2, s) => x >= *s,
                    Test::Cmp(3, s) => x > *s,
                    Test::Cmp(4, s) => x == *s,
                    Test::Cmp(_, s) => x != *s,
                    Test::Member(set) => set.contains(&x),
                };
            at = if hit { nd.on_true } else { nd.on_false };
        }
        Err(OpError::Invalid("the trees contain a cycle".into()))
    }
}

impl Operator for TreeEnsemble {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, float)?;
        let n = match x.ty.shape.as_deref() {
            Some([n, _]) => n.clone(),
            _ => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(vec![n, Dim::Fixed(self.targets)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), float)?;
        let &[n, f] = x.shape() else {
            return Err(OpError::Shape(format!("X must be [N, F], got {:?}", x.shape())));
        };
        let xv = x.to_f64_vec();
        let (lo, hi) = match x.dtype() {
            crate::DType::F64 => (f64::MIN, f64::MAX),
            crate::DType::F16 => (-65504.0, 65504.0),
            crate::DType::BF16 => (half::bf16::MIN.to_f64(), half::bf16::MAX.to_f64()),
            _ => (f32::MIN as f64, f32::MAX as f64),
        };
        let init = match self.aggregate {
            Aggregate::Min => hi,
            Aggregate::Max => lo,
            _ => 0.0,
        };
        let mut out = vec![init; n * self.targets];
        for r in 0..n {
            let row = &xv[r * f..(r + 1) * f];
            let res = &mut out[r * self.targets..(r + 1) * self.targets];
            for &root in &self.roots {
                let (w, t) = self.leaves[self.leaf(root, row)?];
                res[t] = match self.aggregate {
                    Aggregate::Sum => res[t] + w,
                    Aggregate::Average => res[t] + w / self.roots.len() as f64,
                    Aggregate::Min => res[t].min(w),
                    Aggregate::Max => res[t].max(w),
                };
            }
            match self.post {
                Post::None => {}
                Post::Logistic => res.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
                Post::Softmax => {
                    let m = res.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = res.iter().map(|v| (v - m).exp()).sum();
                    res.iter_mut().for_each(|v| *v = (*v - m).exp() / s);
                }
            }
        }
        Ok(vec![float_tensor(x.dtype(), vec![n, self.targets], &out, 0)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    fn t(v: &[f32]) -> Attribute {
        Attribute::Tensor(Tensor::new(vec![v.len()], v.to_vec()).unwrap())
    }

    /// Two trees over one feature: tree 0 splits at x <= 1 (leaves 0/1 for targets 0/1),
    /// tree 1 tests membership in {2, 5} (leaf 2 for target 0, else leaf 3 for target 1).
    #[test]
    fn sums_leaves_per_target() {
        let attrs = |agg: i64| {
            vec![
                ("nodes_featureids", Attribute::Ints(vec![0, 0])),
                ("nodes_splits", t(&[1.0, f32::NAN])),
                (
                    "nodes_modes",
                    Attribute::Tensor(Tensor::new(vec![2], vec![0u8, 6]).unwrap()),
                ),
                ("nodes_truenodeids", Attribute::Ints(vec![0, 2])),
                ("nodes_falsenodeids", Attribute::Ints(vec![1, 3])),
                ("nodes_trueleafs", Attribute::Ints(vec![1, 1])),
                ("nodes_falseleafs", Attribute::Ints(vec![1, 1])),
                ("leaf_weights", t(&[1.0, 10.0, 100.0, 1000.0])),
                ("leaf_targetids", Attribute::Ints(vec![0, 1, 0, 1])),
                ("membership_values", t(&[2.0, 5.0, f32::NAN])),
                ("tree_roots", Attribute::Ints(vec![0, 1])),
                ("n_targets", Attribute::Int(2)),
                ("aggregate_function", Attribute::Int(agg)),
            ]
        };
        let x = Tensor::new(vec![3, 1], vec![0.5f32, 2.0, 7.0]).unwrap();
        let y = build_op("ai.onnx.ml", "TreeEnsemble", 5, &attrs(1), 1, 1)
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[1.0, 1000.0, 100.0, 10.0, 0.0, 1010.0]
        );
        let y = build_op("ai.onnx.ml", "TreeEnsemble", 5, &attrs(3), 1, 1)
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap()[5], 1000.0);
        let mut bad = attrs(1);
        bad[3] = ("nodes_truenodeids", Attribute::Ints(vec![0]));
        assert!(build_op("ai.onnx.ml", "TreeEnsemble", 5, &bad, 1, 1).is_err());
    }
}
