//! Fused tasks: one group of the partition as one compute definition, ready for a backend.
//!
//! The operators' definitions are composed: every read of an operator's input placeholder
//! is redirected to the tensor that defines it inside the task (an earlier member's node) or
//! to the task input that stands for the graph value. An anchored task also carries what a
//! backend needs to fuse into a template kernel of its anchor ([`AnchorInfo`]): each anchor
//! operand as a task input or as an inlined prologue expression, and the epilogue as a value
//! written through the inverse of its index map.

use std::collections::HashMap;

use hidet_ir::compute::{tensor_input, ComputeDef, ComputeNode};
use hidet_ir::expr::{Expr, ExprKind, Var};

use super::index_map::{invert_chain, invert_read, ChainStep};
use super::layout::{OperandLayout, StoredLayout};
use super::partition::{Group, GroupKind};
use super::specialize::{NodeMode, Specialization};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, ValueId};

/// Why a group could not be turned into a task.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    /// The group runs no kernel (host or alias group).
    #[error("group of `{0}` is not a kernel group")]
    NotAKernel(String),
    /// A member has no compute definition or a value has no static shape.
    #[error("node `{node}`: {reason}")]
    Node { node: String, reason: String },
    /// The composed definition is invalid (an operator broke the `compute` contract).
    #[error("task `{task}`: {reason}")]
    Invalid { task: String, reason: String },
}

/// How the anchor reads one of its operands.
#[derive(Debug, Clone)]
pub enum AnchorOperand {
    /// Task input `index` (`task.def.inputs[index]`), read directly.
    Input(usize),
    /// An inlined prologue: the operand's element at `axes` is `value`, which reads only
    /// task inputs.
    Prologue { axes: Vec<Var>, value: Expr },
}

/// The epilogue of an anchored task: where and what to write for each anchor output element.
#[derive(Debug, Clone)]
pub struct TaskEpilogue {
    /// One `i32` variable per dimension of the anchor output.
    pub axes: Vec<Var>,
    /// Stands for the anchor's output element inside `value`.
    pub stored: Var,
    /// The index of the task output (`def.outputs[0]`) written for anchor element `axes`.
    pub indices: Vec<Expr>,
    /// The value written: reads `stored`, `axes` and task inputs only.
    pub value: Expr,
}

/// What a backend needs to put an anchored task into a template kernel of its anchor.
#[derive(Debug, Clone)]
pub struct AnchorInfo {
    pub node: NodeId,
    pub op_type: String,
    /// The anchor operator's own definition (inputs are its operand placeholders).
    pub def: ComputeDef,
    /// One entry per `def.inputs` (absent optional inputs are `None`).
    pub operands: Vec<Option<AnchorOperand>>,
    /// The epilogue, when the task has epilogue members; the task output is the anchor
    /// output otherwise.
    pub epilogue: Option<TaskEpilogue>,
    /// One entry per `def.inputs`: the stored layout of the operand, when its prologue is
    /// exactly an operator declaring one ([`crate::Operator::stored_layout`]), possibly
    /// transposed (see [`OperandLayout`]).
    pub layouts: Vec<Option<OperandLayout>>,
}

/// One kernel's worth of work.
#[derive(Debug, Clone)]
pub struct FusedTask {
    /// A C-identifier-safe name, unique in its graph (`k<index>_<ops>`).
    pub name: String,
    /// The composed definition: `def.inputs[i]` stands for `inputs[i]`, `def.outputs[j]`
    /// for `outputs[j]`.
    pub def: ComputeDef,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Members in topological order.
    pub nodes: Vec<NodeId>,
    pub anchor: Option<AnchorInfo>,
}

impl FusedTask {
    /// The task of kernel group `group`, named after `index` and its operators.
    pub fn new(
        graph: &Graph,
        spec: &Specialization,
        group: &Group,
        index: usize,
    ) -> Result<FusedTask, TaskError> {
        let first = group
            .nodes
            .first()
            .map(|n| graph.nodes()[n.0].name.clone())
            .unwrap_or_default();
        if !matches!(group.kind, GroupKind::Anchored | GroupKind::Injective) {
            return Err(TaskError::NotAKernel(first));
        }
        let name = task_name(graph, group, index);
        let invalid = |reason: String| TaskError::Invalid {
            task: name.clone(),
            reason,
        };
        let mut var_of: HashMap<ValueId, Var> = HashMap::new();
        let mut inputs = Vec::new();
        let mut input_values = Vec::new();
        let mut literals: HashMap<Var, Expr> = HashMap::new();
        let anchor_operands: Vec<ValueId> = group
            .anchor
            .map(|a| {
                graph.nodes()[a.0]
                    .inputs
                    .iter()
                    .flatten()
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        for (i, v) in group.inputs.iter().enumerate() {
            let var = value_var(graph, spec, *v, &format!("in{i}"))?;
            var_of.insert(*v, var.clone());
            let literal = scalar_literal(spec, *v)
                .filter(|_| !anchor_operands.contains(v) && !group.outputs.contains(v));
            match literal {
                Some(literal) => {
                    literals.insert(var, literal);
                }
                None => {
                    inputs.push(var);
                    input_values.push(*v);
                }
            }
        }
        let mut nodes: Vec<(Var, ComputeNode)> = Vec::new();
        let mut anchor_def = None;
        for id in &group.nodes {
            let node = &graph.nodes()[id.0];
            let NodeMode::Compute(def) = &spec.nodes[id.0] else {
                return Err(TaskError::Node {
                    node: node.name.clone(),
                    reason: "no compute definition".into(),
                });
            };
            let mut map: HashMap<Var, Var> = HashMap::new();
            for (slot, v) in node.inputs.iter().enumerate() {
                if let (Some(v), Some(placeholder)) = (v, def.inputs.get(slot)) {
                    let target = var_of
                        .get(v)
                        .cloned()
                        .ok_or_else(|| invalid(format!("value #{} is not defined", v.0)))?;
                    map.insert(placeholder.clone(), target);
                }
            }
            for (var, n) in &def.nodes {
                let node = n.map_value(|v| inline_literals(&redirect_reads(v, &map), &literals));
                nodes.push((var.clone(), node));
            }
            for (slot, v) in node.outputs.iter().enumerate() {
                if let (Some(v), Some(out)) = (v, def.outputs.get(slot)) {
                    let var = map.get(out).cloned().unwrap_or_else(|| out.clone());
                    var_of.insert(*v, var);
                }
            }
            if group.anchor == Some(*id) {
                anchor_def = Some(def.clone());
            }
        }
        let outputs: Vec<Var> = group
            .outputs
            .iter()
            .map(|v| {
                var_of
                    .get(v)
                    .cloned()
                    .ok_or_else(|| invalid(format!("output value #{} is not defined", v.0)))
            })
            .collect::<Result<_, _>>()?;
        let def = ComputeDef::new(inputs, nodes, outputs).map_err(|e| invalid(e.to_string()))?;
        let anchor = match (group.anchor, anchor_def) {
            (Some(a), Some(adef)) => Some(anchor_info(graph, group, &def, &var_of, a, adef)),
            _ => None,
        };
        Ok(FusedTask {
            name,
            def,
            inputs: input_values,
            outputs: group.outputs.clone(),
            nodes: group.nodes.clone(),
            anchor,
        })
    }
}

/// `name` with a leading `k<digits>_` (the position of a task in its model, see
/// [`FusedTask::name`]) shortened to `k_`, which keeps it a C identifier that no library
/// function or keyword can take. Backends name kernels this way so that identical tasks (the
/// repeated blocks of a network, the steps of a recurrent layer) emit identical source, which
/// compiles once and shares one entry of a content-addressed cache across models.
pub fn content_name(name: &str) -> String {
    let tail = name.strip_prefix('k').and_then(|rest| {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        rest[digits..]
            .strip_prefix('_')
            .filter(|t| digits > 0 && !t.is_empty())
    });
    match tail {
        Some(tail) => format!("k_{tail}"),
        None => name.to_string(),
    }
}

fn task_name(graph: &Graph, group: &Group, index: usize) -> String {
    let mut name = format!("k{index}");
    let ops = group
        .anchor
        .iter()
        .chain(group.nodes.iter().filter(|n| Some(**n) != group.anchor));
    for id in ops.take(4) {
        name.push('_');
        name.extend(
            graph.nodes()[id.0]
                .op_type
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .map(|c| c.to_ascii_lowercase()),
        );
    }
    name
}

fn value_var(
    graph: &Graph,
    spec: &Specialization,
    v: ValueId,
    name: &str,
) -> Result<Var, TaskError> {
    let info = spec.value(v);
    let shape = info.shape.as_ref().ok_or_else(|| TaskError::Node {
        node: graph.value(v).name.clone(),
        reason: "data-dependent shape".into(),
    })?;
    Ok(tensor_input(
        name,
        info.dtype.to_ir(),
        shape.iter().map(|&d| d as i64),
    ))
}

/// The literal of a constant one-element `f32`, `f64`, `i32` or `i64` value with a finite
/// value: kernels read it as a constant instead of from memory, so that the C compiler (and
/// the simplifier) see it, e.g. `pow(x, 3)` or a scale.
fn scalar_literal(spec: &Specialization, v: ValueId) -> Option<Expr> {
    let t = spec.value(v).constant.as_ref().filter(|t| t.numel() == 1)?;
    let dtype = t.dtype();
    match dtype {
        DType::F32 | DType::F64 => {
            let x = *t.to_f64_vec().first()?;
            x.is_finite().then(|| Expr::float_of(x, dtype.to_ir()))
        }
        DType::I32 | DType::I64 => Some(Expr::int_of(*t.to_i64_vec().first()?, dtype.to_ir())),
        _ => None,
    }
}

/// `e` with every read of a key of `literals` replaced by its literal.
fn inline_literals(e: &Expr, literals: &HashMap<Var, Expr>) -> Expr {
    if literals.is_empty() {
        return e.clone();
    }
    e.rewrite(&mut |x| match x.kind() {
        ExprKind::TensorElement { tensor, .. } => literals.get(tensor).cloned(),
        _ => None,
    })
}

/// `e` with every read of a key of `map` reading the mapped tensor instead.
pub fn redirect_reads(e: &Expr, map: &HashMap<Var, Var>) -> Expr {
    e.rewrite(&mut |x| match x.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            map.get(tensor).map(|t| t.at(indices.iter().cloned()))
        }
        _ => None,
    })
}

fn anchor_info(
    graph: &Graph,
    group: &Group,
    def: &ComputeDef,
    var_of: &HashMap<ValueId, Var>,
    anchor: NodeId,
    anchor_def: ComputeDef,
) -> AnchorInfo {
    let node = &graph.nodes()[anchor.0];
    // Only grid nodes of prologue members, inlined into each other.
    let prologue_vars: Vec<Var> = group
        .prologues
        .iter()
        .flat_map(|p| graph.nodes()[p.0].outputs.iter().flatten())
        .filter_map(|v| var_of.get(v).cloned())
        .collect();
    let operands = node
        .inputs
        .iter()
        .map(|slot| {
            let v = (*slot)?;
            let var = var_of.get(&v)?;
            if let Some(i) = def.inputs.iter().position(|x| x == var) {
                return Some(AnchorOperand::Input(i));
            }
            if !prologue_vars.contains(var) {
                return None;
            }
            let sub = def.restricted_to(vec![var.clone()]).inline_grids();
            match sub.node(var)? {
                ComputeNode::Grid { axes, value } => {
                    let pure = hidet_ir::compute::reads(value)
                        .iter()
                        .all(|(t, _)| def.inputs.contains(t));
                    pure.then(|| AnchorOperand::Prologue {
                        axes: axes.clone(),
                        value: value.clone(),
                    })
                }
                ComputeNode::Reduce { .. } => None,
            }
        })
        .collect();
    let epilogue = group.epilogues.last().and_then(|_| {
        let anchor_out = node.outputs.iter().flatten().next()?;
        let src = var_of.get(anchor_out)?;
        let out = def.outputs.first()?;
        let sub = ComputeDef {
            inputs: def.inputs.iter().cloned().chain([src.clone()]).collect(),
            nodes: def
                .nodes
                .iter()
                .skip_while(|(v, _)| v != src)
                .skip(1)
                .cloned()
                .collect(),
            outputs: vec![out.clone()],
        }
        .inline_grids();
        let ComputeNode::Grid { axes, value } = sub.node(out)? else {
            return None;
        };
        let src_shape = const_shape(src)?;
        let out_shape = const_shape(out)?;
        let inv = invert_read(axes, &out_shape, value, src, &src_shape)
            .or_else(|| epilogue_chain(def, src).and_then(|c| invert_chain(&c, src, &src_shape)))?;
        let stored = Var::new("stored", src.ty().as_tensor()?.dtype);
        let map: HashMap<Var, Expr> = axes
            .iter()
            .cloned()
            .zip(inv.out_index.iter().cloned())
            .collect();
        let replaced = value.rewrite(&mut |x| match x.kind() {
            ExprKind::TensorElement { tensor, .. } if tensor == src => Some(stored.expr()),
            _ => None,
        });
        let value = replaced.substitute(&map);
        let pure = hidet_ir::compute::reads(&value)
            .iter()
            .all(|(t, _)| def.inputs.contains(t));
        pure.then_some(TaskEpilogue {
            axes: inv.src_axes,
            stored,
            indices: inv.out_index,
            value,
        })
    });
    let layouts = node
        .inputs
        .iter()
        .map(|slot| operand_layout(graph, group, def, var_of, (*slot)?))
        .collect();
    AnchorInfo {
        node: anchor,
        op_type: node.op_type.clone(),
        def: anchor_def,
        operands,
        epilogue,
        layouts,
    }
}

/// The stored layout of anchor operand `v` (see [`AnchorInfo::layouts`]): `v` is the output
/// of a prologue member whose operator declares a layout of task inputs (panels with as many
/// axes, or the transpose of their last two axes; a gather at offset tables), possibly viewed
/// as a batch of one.
fn operand_layout(
    graph: &Graph,
    group: &Group,
    def: &ComputeDef,
    var_of: &HashMap<ValueId, Var>,
    v: ValueId,
) -> Option<OperandLayout> {
    let prologue_producer = |v: ValueId| {
        let (p, _) = graph.value(v).producer?;
        group.prologues.contains(&p).then(|| &graph.nodes()[p.0])
    };
    let mut rank = graph.value(v).ty.rank()?;
    let mut node = prologue_producer(v)?;
    // A matrix viewed as a batch of one (`[r, c]` as `[1, r, c]`): a weight beside a batch.
    if let Some(matrix) = graph.batch_of_one_source(v) {
        rank = graph.value(matrix).ty.rank()?;
        node = prologue_producer(matrix)?;
    }
    let mut transposed = false;
    if node.domain.is_empty() && node.op_type == "Transpose" {
        let mut swap: Vec<i64> = (0..rank as i64).collect();
        swap.swap(rank.checked_sub(2)?, rank - 1);
        let perm: Vec<i64> = match node.attrs.ints("perm").ok()? {
            Some(perm) => perm.clone(),
            None => (0..rank as i64).rev().collect(),
        };
        if perm != swap {
            return None;
        }
        node = prologue_producer((*node.inputs.first()?)?)?;
        transposed = true;
    }
    let position = |slot: usize| -> Option<usize> {
        let v = (*node.inputs.get(slot)?)?;
        def.inputs.iter().position(|x| Some(x) == var_of.get(&v))
    };
    match node.op.stored_layout()? {
        StoredLayout::ColumnPanels { width } => {
            let stored = (*node.inputs.first()?)?;
            let panels_rank = graph.value(stored).ty.rank()?;
            (panels_rank == rank + 1).then_some(OperandLayout::Panels {
                input: position(0)?,
                width,
                transposed,
            })
        }
        StoredLayout::OffsetGather => (!transposed).then_some(OperandLayout::Gathered {
            source: position(0)?,
            rows: position(1)?,
            cols: position(2)?,
        }),
    }
}

/// The grids of `def` after `src`, when each reads the one before it (the first `src`) and
/// nothing else of the task but its inputs: an epilogue chain, as [`invert_chain`] takes it.
fn epilogue_chain(def: &ComputeDef, src: &Var) -> Option<Vec<ChainStep>> {
    let mut prev = src.clone();
    let mut chain = Vec::new();
    for (v, node) in def.nodes.iter().skip_while(|(v, _)| v != src).skip(1) {
        let ComputeNode::Grid { axes, value } = node else {
            return None;
        };
        let chained = hidet_ir::compute::reads(value)
            .iter()
            .all(|(t, _)| *t == prev || def.inputs.contains(t));
        if !chained {
            return None;
        }
        chain.push(ChainStep {
            out: v.clone(),
            shape: const_shape(v)?,
            axes: axes.clone(),
            value: value.clone(),
        });
        prev = v.clone();
    }
    Some(chain)
}

fn const_shape(v: &Var) -> Option<Vec<usize>> {
    v.ty()
        .as_tensor()?
        .layout
        .const_shape()?
        .into_iter()
        .map(|d| usize::try_from(d).ok())
        .collect()
}
