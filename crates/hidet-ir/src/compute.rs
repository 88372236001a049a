//! Compute definitions: *what* an operator computes, declaratively (DESIGN §2).
//!
//! A [`ComputeDef`] is a small dataflow graph of tensors. Its inputs are
//! tensor variables (placeholders); every other tensor is defined by a node:
//!
//! - a [`ComputeNode::Grid`] gives each element as an expression of its
//!   indices (`out[axes] = value`), reading inputs and earlier nodes through
//!   `tensor.at(indices)`; grids are injective and can be inlined anywhere;
//! - a [`ComputeNode::Reduce`] folds an expression over a reduction domain
//!   (`out[axes] = ⊕_{r ∈ reduce_shape} value(axes, r)`); it is what makes an
//!   operator an *anchor* of fusion.
//!
//! Compute definitions serve three ends: the reference for generated kernels
//! ([`ComputeDef::node_function`] gives a naive kernel per node that the
//! interpreter runs), the rule-based scheduler (operators without a template),
//! and fusion (prologues are inlined from grids; epilogues need the inverse of
//! a grid's index map).
//!
//! All tensors are row-major; shapes are expressions, so a dimension may be a
//! scalar variable bound at run time.

use crate::builder::FunctionBuilder;
use crate::dtype::DataType;
use crate::expr::{Expr, ExprKind, Var};
use crate::function::Function;
use crate::layout::row_major;
use crate::ty::Type;
use std::collections::{HashMap, HashSet};

/// Errors in a compute definition.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ComputeError {
    #[error("`{0}` is not a tensor variable with a row-major layout")]
    NotATensor(String),
    #[error("node `{node}` reads `{tensor}`, which is neither an input nor an earlier node")]
    UnknownTensor { node: String, tensor: String },
    #[error("node `{node}` reads `{tensor}` with {given} indices; it has rank {rank}")]
    IndexCount {
        node: String,
        tensor: String,
        given: usize,
        rank: usize,
    },
    #[error("node `{node}` binds {axes} axes for a tensor of rank {rank}")]
    AxisCount {
        node: String,
        axes: usize,
        rank: usize,
    },
    #[error("output `{0}` is not defined by a node or an input")]
    UndefinedOutput(String),
    #[error("`{0}` is defined twice")]
    Redefined(String),
}

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceKind {
    /// The identity of the reduction for `dtype` (`-inf` for `Max` of floats,
    /// the type's minimum for integers).
    pub fn identity(self, dtype: DataType) -> Expr {
        let float = dtype.is_float();
        match (self, float) {
            (ReduceKind::Sum, true) => Expr::float_of(0.0, dtype),
            (ReduceKind::Sum, false) => Expr::int_of(0, dtype),
            (ReduceKind::Prod, true) => Expr::float_of(1.0, dtype),
            (ReduceKind::Prod, false) => Expr::int_of(1, dtype),
            (ReduceKind::Max, true) => Expr::float_of(f64::NEG_INFINITY, dtype),
            (ReduceKind::Min, true) => Expr::float_of(f64::INFINITY, dtype),
            (ReduceKind::Max, false) => Expr::int_of(
                crate::passes::bounds::type_range(dtype)
                    .lo
                    .unwrap_or(i64::MIN),
                dtype,
            ),
            (ReduceKind::Min, false) => Expr::int_of(
                crate::passes::bounds::type_range(dtype)
                    .hi
                    .unwrap_or(i64::MAX),
                dtype,
            ),
        }
    }

    /// `acc ⊕ value`.
    pub fn combine(self, acc: Expr, value: Expr) -> Expr {
        match self {
            ReduceKind::Sum => acc + value,
            ReduceKind::Prod => acc * value,
            ReduceKind::Max => acc.max(value),
            ReduceKind::Min => acc.min(value),
        }
    }
}

/// How one tensor of a compute definition is defined.
#[derive(Clone, Debug, PartialEq)]
pub enum ComputeNode {
    /// `out[axes] = value`.
    Grid { axes: Vec<Var>, value: Expr },
    /// `out[axes] = ⊕_{reduce_axes ∈ reduce_shape} value`.
    Reduce {
        axes: Vec<Var>,
        reduce_axes: Vec<Var>,
        reduce_shape: Vec<Expr>,
        kind: ReduceKind,
        value: Expr,
    },
}

impl ComputeNode {
    /// The same node with its element expression replaced by `f(value)`.
    pub fn map_value(&self, f: impl FnOnce(&Expr) -> Expr) -> ComputeNode {
        match self {
            ComputeNode::Grid { axes, value } => ComputeNode::Grid {
                axes: axes.clone(),
                value: f(value),
            },
            ComputeNode::Reduce {
                axes,
                reduce_axes,
                reduce_shape,
                kind,
                value,
            } => ComputeNode::Reduce {
                axes: axes.clone(),
                reduce_axes: reduce_axes.clone(),
                reduce_shape: reduce_shape.clone(),
                kind: *kind,
                value: f(value),
            },
        }
    }

    /// The expression that gives an element (before any reduction).
    pub fn value(&self) -> &Expr {
        match self {
            ComputeNode::Grid { value, .. } | ComputeNode::Reduce { value, .. } => value,
        }
    }

    /// The output axes.
    pub fn axes(&self) -> &[Var] {
        match self {
            ComputeNode::Grid { axes, .. } | ComputeNode::Reduce { axes, .. } => axes,
        }
    }

    pub fn is_reduce(&self) -> bool {
        matches!(self, ComputeNode::Reduce { .. })
    }
}

/// A declarative definition of an operator's outputs from its inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeDef {
    /// Tensor placeholders, in the operator's input order.
    pub inputs: Vec<Var>,
    /// Defined tensors, each after every tensor it reads.
    pub nodes: Vec<(Var, ComputeNode)>,
    /// The operator's outputs, in order (nodes, or inputs passed through).
    pub outputs: Vec<Var>,
}

/// A row-major tensor variable of `dtype` and `shape`, used as a compute input.
pub fn tensor_input<I: Into<Expr>>(
    name: &str,
    dtype: DataType,
    shape: impl IntoIterator<Item = I>,
) -> Var {
    Var::new(name, Type::tensor(dtype, row_major(shape)))
}

fn fresh_axes(prefix: &str, rank: usize) -> Vec<Var> {
    (0..rank)
        .map(|d| Var::new(format!("{prefix}{d}"), DataType::I32))
        .collect()
}

/// `name[i…] = f(i…)` over `shape`: returns the tensor variable and its node.
pub fn grid<I: Into<Expr>>(
    name: &str,
    dtype: DataType,
    shape: impl IntoIterator<Item = I>,
    f: impl FnOnce(&[Expr]) -> Expr,
) -> (Var, ComputeNode) {
    let out = tensor_input(name, dtype, shape);
    let axes = fresh_axes("i", tensor_rank(&out));
    let index: Vec<Expr> = axes.iter().map(Var::expr).collect();
    let value = f(&index);
    (out, ComputeNode::Grid { axes, value })
}

/// `name[i…] = ⊕_{r ∈ reduce_shape} f(i…, r…)` over `shape`.
pub fn reduce<I: Into<Expr>, J: Into<Expr>>(
    name: &str,
    dtype: DataType,
    shape: impl IntoIterator<Item = I>,
    reduce_shape: impl IntoIterator<Item = J>,
    kind: ReduceKind,
    f: impl FnOnce(&[Expr], &[Expr]) -> Expr,
) -> (Var, ComputeNode) {
    let out = tensor_input(name, dtype, shape);
    let reduce_shape: Vec<Expr> = reduce_shape.into_iter().map(Into::into).collect();
    let axes = fresh_axes("i", tensor_rank(&out));
    let reduce_axes = fresh_axes("r", reduce_shape.len());
    let index: Vec<Expr> = axes.iter().map(Var::expr).collect();
    let rindex: Vec<Expr> = reduce_axes.iter().map(Var::expr).collect();
    let value = f(&index, &rindex);
    (
        out,
        ComputeNode::Reduce {
            axes,
            reduce_axes,
            reduce_shape,
            kind,
            value,
        },
    )
}

fn tensor_rank(v: &Var) -> usize {
    v.ty().as_tensor().map_or(0, |t| t.layout.rank())
}

/// The shape of a tensor variable (empty for non-tensors).
pub fn tensor_shape(v: &Var) -> Vec<Expr> {
    v.ty()
        .as_tensor()
        .map_or_else(Vec::new, |t| t.layout.shape())
}

/// The element type of a tensor variable.
pub fn tensor_dtype(v: &Var) -> Option<DataType> {
    v.ty().as_tensor().map(|t| t.dtype)
}

/// Every `(tensor, indices)` read in `e`, in pre-order.
pub fn reads(e: &Expr) -> Vec<(Var, Vec<Expr>)> {
    let mut out = Vec::new();
    e.visit(&mut |x| {
        if let ExprKind::TensorElement { tensor, indices } = x.kind() {
            out.push((tensor.clone(), indices.clone()));
        }
    });
    out
}

impl ComputeDef {
    /// A definition; checked by [`ComputeDef::validate`].
    pub fn new(
        inputs: Vec<Var>,
        nodes: Vec<(Var, ComputeNode)>,
        outputs: Vec<Var>,
    ) -> Result<ComputeDef, ComputeError> {
        let def = ComputeDef {
            inputs,
            nodes,
            outputs,
        };
        def.validate()?;
        Ok(def)
    }

    /// Floating-point operations of the reductions, counting a multiply-add as two: the sum
    /// over every reduce node of (output elements × reduced elements × 2). `None` when there
    /// is no reduction or an extent is not a constant. Element-wise work is not counted.
    pub fn reduction_flops(&self) -> Option<f64> {
        let mut total = None;
        for (out, node) in &self.nodes {
            let ComputeNode::Reduce { reduce_shape, .. } = node else {
                continue;
            };
            let out_elems: i64 = out.ty().as_tensor()?.layout.const_shape()?.iter().product();
            let reduced = reduce_shape
                .iter()
                .map(Expr::as_int)
                .try_fold(1i64, |acc, e| e.map(|e| acc * e))?;
            *total.get_or_insert(0.0) += 2.0 * out_elems as f64 * reduced as f64;
        }
        total
    }

    /// Checks that every read names an input or an earlier node with the
    /// right number of indices, that axes match ranks, and that every output
    /// is defined.
    pub fn validate(&self) -> Result<(), ComputeError> {
        let mut defined: HashSet<Var> = HashSet::new();
        for v in &self.inputs {
            if v.ty().as_tensor().is_none() {
                return Err(ComputeError::NotATensor(v.name().to_string()));
            }
            if !defined.insert(v.clone()) {
                return Err(ComputeError::Redefined(v.name().to_string()));
            }
        }
        for (out, node) in &self.nodes {
            let rank = tensor_rank(out);
            if out.ty().as_tensor().is_none() {
                return Err(ComputeError::NotATensor(out.name().to_string()));
            }
            if node.axes().len() != rank {
                return Err(ComputeError::AxisCount {
                    node: out.name().to_string(),
                    axes: node.axes().len(),
                    rank,
                });
            }
            for (tensor, indices) in reads(node.value()) {
                if !defined.contains(&tensor) {
                    return Err(ComputeError::UnknownTensor {
                        node: out.name().to_string(),
                        tensor: tensor.name().to_string(),
                    });
                }
                if indices.len() != tensor_rank(&tensor) {
                    return Err(ComputeError::IndexCount {
                        node: out.name().to_string(),
                        tensor: tensor.name().to_string(),
                        given: indices.len(),
                        rank: tensor_rank(&tensor),
                    });
                }
            }
            if !defined.insert(out.clone()) {
                return Err(ComputeError::Redefined(out.name().to_string()));
            }
        }
        match self.outputs.iter().find(|o| !defined.contains(o)) {
            Some(o) => Err(ComputeError::UndefinedOutput(o.name().to_string())),
            None => Ok(()),
        }
    }

    /// The node defining `v`, if any.
    pub fn node(&self, v: &Var) -> Option<&ComputeNode> {
        self.nodes.iter().find(|(o, _)| o == v).map(|(_, n)| n)
    }

    /// True when no node reduces: every output element depends on input
    /// elements through index expressions only.
    pub fn is_injective(&self) -> bool {
        self.nodes.iter().all(|(_, n)| !n.is_reduce())
    }

    /// The definition of `outputs` alone: the same inputs, and only the nodes the outputs
    /// read (directly or through other nodes), in their order. Requires every output to be
    /// an input or a node of this definition.
    pub fn restricted_to(&self, outputs: Vec<Var>) -> ComputeDef {
        let mut needed: HashSet<Var> = outputs.iter().cloned().collect();
        let mut kept = vec![false; self.nodes.len()];
        for (i, (out, node)) in self.nodes.iter().enumerate().rev() {
            if needed.contains(out) {
                kept[i] = true;
                node.value().visit(&mut |x| {
                    if let ExprKind::TensorElement { tensor, .. } = x.kind() {
                        needed.insert(tensor.clone());
                    }
                });
            }
        }
        ComputeDef {
            inputs: self.inputs.clone(),
            nodes: self
                .nodes
                .iter()
                .zip(kept)
                .filter(|(_, k)| *k)
                .map(|(n, _)| n.clone())
                .collect(),
            outputs,
        }
    }

    /// The definition with every grid node read by another node inlined into
    /// its readers (its axes replaced by the read's indices). Grids that are
    /// outputs stay defined; reduce nodes are never inlined.
    pub fn inline_grids(&self) -> ComputeDef {
        let outputs: HashSet<&Var> = self.outputs.iter().collect();
        let mut inlinable: HashMap<Var, (Vec<Var>, Expr)> = HashMap::new();
        let mut nodes = Vec::new();
        for (out, node) in &self.nodes {
            let node = inline_reads(node, &inlinable);
            if let ComputeNode::Grid { axes, value } = &node {
                inlinable.insert(out.clone(), (axes.clone(), value.clone()));
            }
            nodes.push((out.clone(), node));
        }
        let used: HashSet<Var> = nodes
            .iter()
            .flat_map(|(_, n)| reads(n.value()).into_iter().map(|(t, _)| t))
            .collect();
        nodes.retain(|(out, _)| outputs.contains(out) || used.contains(out));
        ComputeDef {
            inputs: self.inputs.clone(),
            nodes,
            outputs: self.outputs.clone(),
        }
    }

    /// A naive CPU kernel computing node `index` into its own buffer:
    /// parameters are every input, every earlier node, then the node's
    /// output, in that order; plus any scalar variables the shapes use
    /// (appended last, in order of first appearance). Serial loops, one
    /// accumulator per element for reductions — the reference that
    /// scheduled kernels are checked against.
    ///
    /// Requires `index < self.nodes.len()`.
    pub fn node_function(&self, index: usize, name: &str) -> Function {
        let (out, node) = &self.nodes[index];
        let mut fb = FunctionBuilder::cpu_kernel(name);
        for t in self
            .inputs
            .iter()
            .chain(self.nodes[..index].iter().map(|(v, _)| v))
        {
            fb.param_var(t.clone());
        }
        let out_param = fb.param_var(out.clone());
        let mut scalars: Vec<Var> = Vec::new();
        let mut note_scalars = |e: &Expr| {
            e.visit(&mut |x| {
                if let ExprKind::Var(v) = x.kind() {
                    if v.ty().as_data().is_some() && !scalars.contains(v) {
                        scalars.push(v.clone());
                    }
                }
            })
        };
        for t in self.inputs.iter().chain(self.nodes.iter().map(|(v, _)| v)) {
            for d in tensor_shape(t) {
                note_scalars(&d);
            }
        }
        if let ComputeNode::Reduce { reduce_shape, .. } = node {
            reduce_shape.iter().for_each(&mut note_scalars);
        }
        for s in scalars {
            fb.param_var(s);
        }
        let shape = tensor_shape(out);
        let dtype = tensor_dtype(out).unwrap_or(DataType::F32);
        emit_nest(&mut fb, &shape, Vec::new(), &mut |fb, index| {
            let mut env: HashMap<Var, Expr> = node
                .axes()
                .iter()
                .cloned()
                .zip(index.iter().cloned())
                .collect();
            match node {
                ComputeNode::Grid { value, .. } => {
                    let v = value.substitute(&env);
                    fb.store(&out_param, index.to_vec(), v);
                }
                ComputeNode::Reduce {
                    reduce_axes,
                    reduce_shape,
                    kind,
                    value,
                    ..
                } => {
                    let acc = fb.var("acc", kind.identity(dtype));
                    emit_nest(fb, reduce_shape, Vec::new(), &mut |fb, rindex| {
                        for (a, r) in reduce_axes.iter().zip(rindex) {
                            env.insert(a.clone(), r.clone());
                        }
                        let v = value.substitute(&env);
                        fb.assign(&acc, kind.combine(acc.expr(), v));
                    });
                    fb.store(&out_param, index.to_vec(), acc.expr());
                }
            }
        });
        fb.finish()
    }
}

fn emit_nest(
    fb: &mut FunctionBuilder,
    shape: &[Expr],
    prefix: Vec<Expr>,
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
) {
    match shape.split_first() {
        None => body(fb, &prefix),
        Some((extent, rest)) => fb.for_range("i", extent.clone(), |fb, i| {
            let mut index = prefix;
            index.push(i);
            emit_nest(fb, rest, index, body);
        }),
    }
}

fn inline_reads(node: &ComputeNode, grids: &HashMap<Var, (Vec<Var>, Expr)>) -> ComputeNode {
    let inline = |e: &Expr| -> Expr {
        e.rewrite(&mut |x| match x.kind() {
            ExprKind::TensorElement { tensor, indices } => {
                grids.get(tensor).map(|(axes, value)| {
                    let map: HashMap<Var, Expr> =
                        axes.iter().cloned().zip(indices.iter().cloned()).collect();
                    value.substitute(&map)
                })
            }
            _ => None,
        })
    };
    node.map_value(inline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run_function, Arg, Buffer};

    /// softmax-like: m = max_j x[i, j]; e = exp(x - m); s = Σ e; out = e / s.
    fn softmax(rows: i64, cols: i64) -> ComputeDef {
        let x = tensor_input("x", DataType::F32, [rows, cols]);
        let (m, m_node) = reduce(
            "m",
            DataType::F32,
            [rows],
            [cols],
            ReduceKind::Max,
            |i, r| x.at([i[0].clone(), r[0].clone()]),
        );
        let (e, e_node) = grid("e", DataType::F32, [rows, cols], |i| {
            (x.at(i.to_vec()) - m.at([i[0].clone()])).exp()
        });
        let (s, s_node) = reduce(
            "s",
            DataType::F32,
            [rows],
            [cols],
            ReduceKind::Sum,
            |i, r| e.at([i[0].clone(), r[0].clone()]),
        );
        let (y, y_node) = grid("y", DataType::F32, [rows, cols], |i| {
            e.at(i.to_vec()) / s.at([i[0].clone()])
        });
        ComputeDef::new(
            vec![x],
            vec![(m, m_node), (e, e_node), (s, s_node), (y.clone(), y_node)],
            vec![y],
        )
        .expect("valid definition")
    }

    fn evaluate(def: &ComputeDef, inputs: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
        let mut buffers: Vec<Buffer> = def
            .inputs
            .iter()
            .zip(inputs)
            .map(|(v, data)| Buffer::from_f64(tensor_dtype(v).unwrap(), &data))
            .collect();
        for (i, (out, _)) in def.nodes.iter().enumerate() {
            let f = def.node_function(i, "node");
            let len: i64 = tensor_shape(out)
                .iter()
                .map(|d| d.as_int().unwrap())
                .product();
            let mut args: Vec<Arg> = buffers.iter().cloned().map(Arg::Buffer).collect();
            args.push(Arg::Buffer(Buffer::zeros(
                tensor_dtype(out).unwrap(),
                len as usize,
            )));
            run_function(&f, &mut args).expect("naive node kernel runs");
            match args.pop() {
                Some(Arg::Buffer(b)) => buffers.push(b),
                _ => unreachable!("the output argument is a buffer"),
            }
        }
        buffers.iter().map(Buffer::to_f64).collect()
    }

    #[test]
    fn naive_node_kernels_compute_softmax() {
        let def = softmax(3, 5);
        let x: Vec<f64> = (0..15)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.37)
            .collect();
        let all = evaluate(&def, vec![x.clone()]);
        let y = all.last().unwrap();
        for r in 0..3 {
            let row = &x[r * 5..r * 5 + 5];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for c in 0..5 {
                let want = (row[c] - m).exp() / s;
                assert!(
                    (y[r * 5 + c] - want).abs() < 1e-6,
                    "{} vs {want}",
                    y[r * 5 + c]
                );
            }
        }
    }

    #[test]
    fn inlining_grids_keeps_results_and_drops_intermediates() {
        let def = softmax(2, 7);
        let inlined = def.inline_grids();
        assert_eq!(inlined.nodes.len(), 3, "e is inlined into s and y");
        assert!(inlined.validate().is_ok());
        let x: Vec<f64> = (0..14).map(|i| (i as f64 * 0.61).sin() * 3.0).collect();
        let a = evaluate(&def, vec![x.clone()]);
        let b = evaluate(&inlined, vec![x]);
        let (ya, yb) = (a.last().unwrap(), b.last().unwrap());
        for (p, q) in ya.iter().zip(yb) {
            assert!((p - q).abs() < 1e-6);
        }
    }

    #[test]
    fn restricting_keeps_only_what_the_outputs_read() {
        let def = softmax(3, 4);
        let names = |d: &ComputeDef| {
            d.nodes
                .iter()
                .map(|(v, _)| v.name().to_string())
                .collect::<Vec<_>>()
        };
        let e = def.nodes[1].0.clone();
        let only_e = def.restricted_to(vec![e.clone()]);
        assert_eq!(names(&only_e), ["m", "e"]);
        assert!(only_e.validate().is_ok());
        assert_eq!(only_e.inputs, def.inputs);
        let m = def.nodes[0].0.clone();
        assert_eq!(names(&def.restricted_to(vec![m])), ["m"]);
        let x = def.inputs[0].clone();
        assert!(def.restricted_to(vec![x]).nodes.is_empty());
        assert_eq!(
            names(&def.restricted_to(def.outputs.clone())),
            ["m", "e", "s", "y"]
        );
        // Inlining the restricted definition gives `e` as inlining the whole one does.
        let whole = ComputeDef {
            outputs: vec![e.clone()],
            ..def.clone()
        }
        .inline_grids();
        assert_eq!(only_e.inline_grids().node(&e), whole.node(&e));
    }

    #[test]
    fn invalid_reads_are_reported() {
        let x = tensor_input("x", DataType::F32, [4i64]);
        let ghost = tensor_input("ghost", DataType::F32, [4i64]);
        let (y, node) = grid("y", DataType::F32, [4i64], |i| {
            x.at(i.to_vec()) + ghost.at(i.to_vec())
        });
        let err = ComputeDef::new(vec![x.clone()], vec![(y.clone(), node)], vec![y]).unwrap_err();
        assert!(matches!(err, ComputeError::UnknownTensor { .. }), "{err}");
        let (z, node) = grid("z", DataType::F32, [4i64], |i| {
            x.at([i[0].clone(), i[0].clone()])
        });
        let err = ComputeDef::new(vec![x], vec![(z.clone(), node)], vec![z]).unwrap_err();
        assert!(
            matches!(
                err,
                ComputeError::IndexCount {
                    given: 2,
                    rank: 1,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn node_kernels_take_run_time_shapes_as_parameters() {
        let n = Var::new("n", DataType::I32);
        let x = tensor_input("x", DataType::F32, [n.expr(), Expr::int(3)]);
        let (y, node) = reduce(
            "y",
            DataType::F32,
            [n.expr()],
            [3i64],
            ReduceKind::Sum,
            |i, r| x.at([i[0].clone(), r[0].clone()]),
        );
        let def = ComputeDef::new(vec![x], vec![(y.clone(), node)], vec![y]).unwrap();
        let f = def.node_function(0, "row_sum");
        assert_eq!(f.params.len(), 3, "x, y and the shape variable n");
        let xs: Vec<f64> = (0..12).map(|i| i as f64 * 0.5 - 2.0).collect();
        let mut args = vec![
            Arg::Buffer(Buffer::from_f64(DataType::F32, &xs)),
            Arg::Buffer(Buffer::zeros(DataType::F32, 4)),
            Arg::Scalar(crate::interp::Scalar::Int(4)),
        ];
        run_function(&f, &mut args).expect("runs with n = 4");
        let Arg::Buffer(y) = &args[1] else {
            unreachable!("argument 1 is a buffer")
        };
        let want: Vec<f64> = (0..4).map(|r| xs[r * 3..r * 3 + 3].iter().sum()).collect();
        assert_eq!(y.to_f64(), want);
    }
}
