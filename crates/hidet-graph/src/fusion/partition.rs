//! The fusion partition (DESIGN §2): which operators of a specialized graph run together in
//! one kernel.
//!
//! - An *anchor* is a node whose compute definition reduces (matmul, reductions, …). Its
//!   *prologues* are the injective producers of its inputs whose output has a single use
//!   (transitively); its *epilogues* are the chain of single-use consumers of its output that
//!   are injective and read it through a bijection ([`super::index_map`]).
//! - The remaining injective nodes form trees (a node with its single-use injective
//!   producers, transitively); each tree is one injective kernel. A tree made only of
//!   reshape-like operators becomes an *alias*: its output shares its input's buffer.
//! - A node whose [`FusionHints::materialize`] is set is never inlined into a consumer's
//!   kernel (as a prologue or a tree member): its output is stored, and its consumers read it
//!   from memory.
//! - A node whose [`FusionHints::prologue_only`] is set is never an epilogue: it stays for its
//!   consumer's kernel.
//! - The producer of an operator that reads its input in place
//!   ([`crate::Operator::reads_input_in_place`]) is never inlined into it.
//! - An injective node that reads more than [`MAX_PROLOGUE_READS`] tensor elements per output
//!   element (a RoiAlign's or a GridSample's interpolation) is never an anchor's prologue: an
//!   anchor may read an operand element many times (a product's packing per column block, an
//!   implicit-GEMM convolution's per window tap), and recomputing such a node at each read
//!   costs more than storing it once.
//! - Nodes without a compute definition (or with data-dependent shapes) run their reference
//!   `eval` on the host, each alone; folded nodes do not run at all.
//!
//! Every group has one output value, except host groups (a node's outputs). Groups are listed
//! in an order in which they can run: each group runs at the position of its last member.

use std::collections::HashSet;
use std::fmt;

use hidet_ir::compute::ComputeNode;

use super::index_map::invert_read;
use super::specialize::{HostReason, NodeMode, Specialization};
use crate::graph::{FusionHints, Graph, NodeId, ValueId};
use crate::shape::fmt_dims;

/// Operators that only reinterpret the shape of their first input (row-major, no copy).
pub const RESHAPE_LIKE: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

/// What kind of kernel a group becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKind {
    /// A reducing operator with its prologues and epilogues.
    Anchored,
    /// A tree of injective operators.
    Injective,
    /// A chain of reshape-like operators: no kernel, the output aliases the input buffer.
    Alias,
    /// One node evaluated on the host, with the reason.
    Host(HostReason),
}

/// One group of the partition.
#[derive(Debug, Clone)]
pub struct Group {
    pub kind: GroupKind,
    /// Every member, in topological order.
    pub nodes: Vec<NodeId>,
    /// The anchor of an anchored group.
    pub anchor: Option<NodeId>,
    /// Prologue members of an anchored group (topological order).
    pub prologues: Vec<NodeId>,
    /// Epilogue members of an anchored group, in chain order.
    pub epilogues: Vec<NodeId>,
    /// Values read by members and defined outside the group, in first-use order.
    pub inputs: Vec<ValueId>,
    /// Values defined by members and read outside the group or returned by the graph.
    pub outputs: Vec<ValueId>,
}

/// A partition of a specialized graph into groups.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Groups in an order in which they can run.
    pub groups: Vec<Group>,
    /// Nodes evaluated at compile time.
    pub folded: Vec<NodeId>,
}

/// The most tensor reads per output element of an injective node that an anchor recomputes
/// as its prologue (see the module docs).
pub const MAX_PROLOGUE_READS: usize = 12;

/// Tensor reads of `def`'s output per element, counting each read as often as the
/// expression tree repeats it, up to `limit + 1`.
fn reads_per_element(def: &hidet_ir::compute::ComputeDef, limit: usize) -> usize {
    fn count(e: &hidet_ir::expr::Expr, limit: usize, n: &mut usize) {
        if *n > limit {
            return;
        }
        if matches!(e.kind(), hidet_ir::expr::ExprKind::TensorElement { .. }) {
            *n += 1;
        }
        for c in e.children() {
            count(c, limit, n);
        }
    }
    let mut n = 0;
    for (_, node) in &def.inline_grids().nodes {
        count(node.value(), limit, &mut n);
    }
    n
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Folded,
    Host,
    Anchor,
    Injective,
}

/// Partitions `graph` as specialized by `spec` (see the module docs).
pub fn partition(graph: &Graph, spec: &Specialization) -> Partition {
    partition_with(graph, spec, true)
}

/// [`partition`], or with `fuse == false` one group per node (anchors alone, each injective
/// node alone; reshape-like nodes still become aliases) — the unfused baseline.
pub fn partition_with(graph: &Graph, spec: &Specialization, fuse: bool) -> Partition {
    let n = graph.nodes().len();
    let class: Vec<Class> = spec
        .nodes
        .iter()
        .map(|m| match m {
            NodeMode::Folded => Class::Folded,
            NodeMode::Host(_) => Class::Host,
            NodeMode::Compute(def) if def.nodes.iter().any(|(_, n)| n.is_reduce()) => Class::Anchor,
            NodeMode::Compute(_) => Class::Injective,
        })
        .collect();
    let graph_outputs: HashSet<ValueId> = graph.outputs().iter().copied().collect();
    let single_output = |node: NodeId| single_output(graph, node);
    // The single consumer of a value, when it has exactly one use.
    let single_use = |v: ValueId| -> Option<NodeId> {
        let users = &graph.value(v).users;
        let distinct: HashSet<NodeId> = users.iter().map(|(n, _)| *n).collect();
        (users.len() == 1 && !graph_outputs.contains(&v) && distinct.len() == 1).then(|| users[0].0)
    };
    let hints = |p: NodeId| -> FusionHints { graph.nodes()[p.0].hints };
    let inlinable = |p: NodeId| class[p.0] == Class::Injective && !hints(p).materialize;
    let light = |p: NodeId| match &spec.nodes[p.0] {
        NodeMode::Compute(def) => reads_per_element(def, MAX_PROLOGUE_READS) <= MAX_PROLOGUE_READS,
        _ => true,
    };
    let mut owner: Vec<Option<usize>> = vec![None; n];
    let mut drafts: Vec<Draft> = Vec::new();

    // 1. Anchors with prologues and epilogues.
    for a in 0..n {
        if class[a] != Class::Anchor || owner[a].is_some() {
            continue;
        }
        let gi = drafts.len();
        owner[a] = Some(gi);
        let mut draft = Draft {
            kind: GroupKind::Anchored,
            members: vec![NodeId(a)],
            anchor: Some(NodeId(a)),
            prologues: vec![],
            epilogues: vec![],
        };
        let mut stack = if fuse { vec![NodeId(a)] } else { vec![] };
        while let Some(m) = stack.pop() {
            if reads_in_place(graph, m) {
                continue;
            }
            for v in graph.nodes()[m.0].inputs.iter().flatten() {
                let Some((p, _)) = graph.value(*v).producer else {
                    continue;
                };
                if inlinable(p)
                    && !is_wide_concat(graph, p)
                    && owner[p.0].is_none()
                    && single_output(p) == Some(*v)
                    && single_use(*v) == Some(m)
                    && light(p)
                {
                    owner[p.0] = Some(gi);
                    draft.prologues.push(p);
                    draft.members.push(p);
                    stack.push(p);
                }
            }
        }
        let mut tail = NodeId(a);
        while let Some(out) = single_output(tail).filter(|_| fuse) {
            let absorbable = |c: NodeId| {
                class[c.0] == Class::Injective
                    && owner[c.0].is_none()
                    && single_output(c).is_some()
                    && !hints(c).prologue_only
            };
            let region = match single_use(out) {
                Some(c) if absorbable(c) && is_bijective_consumer(graph, spec, c, out) => vec![c],
                Some(_) => break,
                None => match closed_region(graph, spec, NodeId(a), out, &absorbable) {
                    Some(region) => region,
                    None => break,
                },
            };
            for &c in &region {
                owner[c.0] = Some(gi);
                draft.epilogues.push(c);
                draft.members.push(c);
            }
            tail = *region.last().expect("a region has at least one node");
        }
        drafts.push(draft);
    }

    // 2. Injective trees, from their sinks.
    for s in (0..n).rev() {
        if class[s] != Class::Injective || owner[s].is_some() {
            continue;
        }
        let gi = drafts.len();
        owner[s] = Some(gi);
        let mut draft = Draft {
            kind: GroupKind::Injective,
            members: vec![NodeId(s)],
            anchor: None,
            prologues: vec![],
            epilogues: vec![],
        };
        if fuse && single_output(NodeId(s)).is_some() {
            let mut stack = vec![NodeId(s)];
            while let Some(m) = stack.pop() {
                for v in graph.nodes()[m.0].inputs.iter().flatten() {
                    let Some((p, _)) = graph.value(*v).producer else {
                        continue;
                    };
                    if inlinable(p)
                        && owner[p.0].is_none()
                        && single_output(p) == Some(*v)
                        && single_use(*v) == Some(m)
                    {
                        owner[p.0] = Some(gi);
                        draft.members.push(p);
                        stack.push(p);
                    }
                }
            }
        }
        if draft.members.iter().all(|m| is_alias_node(graph, spec, *m)) {
            draft.kind = GroupKind::Alias;
        }
        drafts.push(draft);
    }

    // 3. Host nodes, one group each.
    let mut folded = Vec::new();
    for (i, c) in class.iter().enumerate() {
        match c {
            Class::Host => {
                let NodeMode::Host(why) = &spec.nodes[i] else {
                    continue;
                };
                owner[i] = Some(drafts.len());
                drafts.push(Draft {
                    kind: GroupKind::Host(why.clone()),
                    members: vec![NodeId(i)],
                    anchor: None,
                    prologues: vec![],
                    epilogues: vec![],
                });
            }
            Class::Folded => folded.push(NodeId(i)),
            _ => {}
        }
    }

    let mut groups: Vec<Group> = drafts
        .into_iter()
        .map(|mut d| {
            d.members.sort();
            d.prologues.sort();
            let inputs = group_inputs(graph, &d.members);
            let outputs = group_outputs(graph, &d.members, &graph_outputs);
            Group {
                kind: d.kind,
                nodes: d.members,
                anchor: d.anchor,
                prologues: d.prologues,
                epilogues: d.epilogues,
                inputs,
                outputs,
            }
        })
        .collect();
    groups.sort_by_key(|g| g.nodes.last().copied());
    Partition { groups, folded }
}

struct Draft {
    kind: GroupKind,
    members: Vec<NodeId>,
    anchor: Option<NodeId>,
    prologues: Vec<NodeId>,
    epilogues: Vec<NodeId>,
}

fn group_inputs(graph: &Graph, members: &[NodeId]) -> Vec<ValueId> {
    let inside: HashSet<NodeId> = members.iter().copied().collect();
    let mut out = Vec::new();
    for m in members {
        for v in graph.nodes()[m.0].inputs.iter().flatten() {
            let internal = graph
                .value(*v)
                .producer
                .is_some_and(|(p, _)| inside.contains(&p));
            if !internal && !out.contains(v) {
                out.push(*v);
            }
        }
    }
    out
}

fn group_outputs(
    graph: &Graph,
    members: &[NodeId],
    graph_outputs: &HashSet<ValueId>,
) -> Vec<ValueId> {
    let inside: HashSet<NodeId> = members.iter().copied().collect();
    let mut out = Vec::new();
    for m in members {
        for v in graph.nodes()[m.0].outputs.iter().flatten() {
            let escapes = graph_outputs.contains(v)
                || graph
                    .value(*v)
                    .users
                    .iter()
                    .any(|(u, _)| !inside.contains(u));
            if escapes {
                out.push(*v);
            }
        }
    }
    out
}

/// Whether `node` is reshape-like with a static, same-dtype, same-size output.
fn is_alias_node(graph: &Graph, spec: &Specialization, node: NodeId) -> bool {
    let n = &graph.nodes()[node.0];
    if !RESHAPE_LIKE.contains(&n.op_type.as_str()) {
        return false;
    }
    let (Some(Some(i)), [Some(o)]) = (n.inputs.first(), n.outputs.as_slice()) else {
        return false;
    };
    let (a, b) = (spec.value(*i), spec.value(*o));
    a.dtype == b.dtype && a.size_in_bytes().is_some() && a.size_in_bytes() == b.size_in_bytes()
}

/// Most nodes an epilogue region ([`closed_region`]) may hold.
const REGION_LIMIT: usize = 24;

/// The nodes, in topological order, of the smallest region of `absorbable` nodes that
/// consumes every use of `out` (the output of `anchor`) and lets exactly one value, the
/// last node's output, escape: an elementwise diamond such as GELU
/// (`x · ½(1 + erf(x/√2))` reads `x` twice). Every member reads each of its inputs from the
/// region through a bijection, and its other inputs are computed before `anchor` (so the
/// region can run inside the anchor's kernel); `None` when there is no such region of at
/// most [`REGION_LIMIT`] nodes.
fn closed_region(
    graph: &Graph,
    spec: &Specialization,
    anchor: NodeId,
    out: ValueId,
    absorbable: &dyn Fn(NodeId) -> bool,
) -> Option<Vec<NodeId>> {
    let users = |v: ValueId| graph.value(v).users.iter().map(|(n, _)| *n);
    let graph_outputs: HashSet<ValueId> = graph.outputs().iter().copied().collect();
    let mut inside: HashSet<ValueId> = HashSet::from([out]);
    let mut region: Vec<NodeId> = Vec::new();
    let mut pending: std::collections::BTreeSet<NodeId> = users(out).collect();
    while let Some(c) = pending.pop_first() {
        if region.len() == REGION_LIMIT || !absorbable(c) {
            return None;
        }
        let node = &graph.nodes()[c.0];
        for v in node.inputs.iter().flatten() {
            let from_region = inside.contains(v);
            let earlier = graph.value(*v).producer.is_none_or(|(p, _)| p.0 < anchor.0);
            if !(earlier || from_region && is_bijective_consumer(graph, spec, c, *v)) {
                return None;
            }
        }
        let produced = single_output(graph, c)?;
        region.push(c);
        inside.insert(produced);
        let open: Vec<ValueId> = inside
            .iter()
            .copied()
            .filter(|v| graph_outputs.contains(v) || users(*v).any(|u| !region.contains(&u)))
            .collect();
        if open == [produced] {
            return Some(region);
        }
        pending.extend(users(produced));
    }
    None
}

/// The only output of `node`, when it has exactly one (omitted optional outputs aside).
fn single_output(graph: &Graph, node: NodeId) -> Option<ValueId> {
    let mut outputs = graph.nodes()[node.0].outputs.iter().flatten();
    match (outputs.next(), outputs.next()) {
        (Some(o), None) => Some(*o),
        _ => None,
    }
}

/// Inputs from which a `Concat` is stored by a kernel of its own rather than inlined into an
/// anchor's prologue (see [`is_wide_concat`]).
pub const WIDE_CONCAT_INPUTS: usize = 3;

/// Whether node `m` is a default-domain `Concat` of at least [`WIDE_CONCAT_INPUTS`] inputs.
/// Inlined into an anchor's loads (a matrix product packing its operand), each element
/// would select among all the inputs, and vectorized, load from every one of them; stored,
/// it is read back with one load, and where its slices are contiguous its producers compute
/// into it in place (no copy at all). Measured on DenseNet-121 (AVX-512, two threads, sum of
/// kernel medians): one image 100 → 33 ms, eight 860 → 267 ms.
fn is_wide_concat(graph: &Graph, m: NodeId) -> bool {
    let node = &graph.nodes()[m.0];
    node.op_type == "Concat"
        && node.domain.is_empty()
        && node.inputs.iter().flatten().count() >= WIDE_CONCAT_INPUTS
}

/// Whether node `m` reads its input in place ([`crate::Operator::reads_input_in_place`]), so
/// its input is never inlined into it.
fn reads_in_place(graph: &Graph, m: NodeId) -> bool {
    graph.nodes()[m.0].op.reads_input_in_place()
}

/// Whether injective `node` reads `src` through a bijection (all reads at one invertible
/// index) in the grid defining its output.
fn is_bijective_consumer(graph: &Graph, spec: &Specialization, node: NodeId, src: ValueId) -> bool {
    let NodeMode::Compute(def) = &spec.nodes[node.0] else {
        return false;
    };
    let n = &graph.nodes()[node.0];
    let Some(slot) = n.inputs.iter().position(|i| *i == Some(src)) else {
        return false;
    };
    if n.inputs.iter().filter(|i| **i == Some(src)).count() != 1 {
        return false;
    }
    let (Some(src_var), Some(out_var)) = (def.inputs.get(slot), def.outputs.first()) else {
        return false;
    };
    let inlined = def.inline_grids();
    let Some(ComputeNode::Grid { axes, value }) = inlined.node(out_var) else {
        return false;
    };
    let (Some(src_shape), Some(out_shape)) =
        (spec.shape(src), n.outputs[0].and_then(|o| spec.shape(o)))
    else {
        return false;
    };
    invert_read(axes, out_shape, value, src_var, src_shape).is_some()
}

impl Partition {
    /// Groups that become kernels (anchored and injective).
    pub fn kernel_count(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| matches!(g.kind, GroupKind::Anchored | GroupKind::Injective))
            .count()
    }

    /// Groups run on the host.
    pub fn host_count(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| matches!(g.kind, GroupKind::Host(_)))
            .count()
    }

    /// A readable listing of the groups of `graph` (which operators in which kernel).
    pub fn dump<'a>(&'a self, graph: &'a Graph, spec: &'a Specialization) -> PartitionDump<'a> {
        PartitionDump {
            partition: self,
            graph,
            spec,
        }
    }
}

/// The [`fmt::Display`] of a partition (see [`Partition::dump`]).
pub struct PartitionDump<'a> {
    partition: &'a Partition,
    graph: &'a Graph,
    spec: &'a Specialization,
}

impl fmt::Display for PartitionDump<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, g) = (self.partition, self.graph);
        let count = |k: fn(&GroupKind) -> bool| p.groups.iter().filter(|x| k(&x.kind)).count();
        writeln!(
            f,
            "fused graph `{}`: {} kernels ({} anchored, {} injective), {} aliases, {} host nodes, {} folded nodes",
            g.name,
            p.kernel_count(),
            count(|k| *k == GroupKind::Anchored),
            count(|k| *k == GroupKind::Injective),
            count(|k| *k == GroupKind::Alias),
            p.host_count(),
            p.folded.len()
        )?;
        let node = |id: &NodeId| {
            let n = &g.nodes()[id.0];
            format!("{} `{}`", n.op_type, n.name)
        };
        let list = |ids: &[NodeId]| ids.iter().map(node).collect::<Vec<_>>().join(", ");
        let value = |v: &ValueId| {
            let info = self.spec.value(*v);
            let shape = match &info.shape {
                Some(s) => format!("{s:?}"),
                None => fmt_dims(g.value(*v).ty.shape.as_deref().unwrap_or(&[])),
            };
            let tag = if info.constant.is_some() {
                " (const)"
            } else {
                ""
            };
            format!("{} {}{}{}", g.value(*v).name, info.dtype, shape, tag)
        };
        let values = |ids: &[ValueId]| ids.iter().map(value).collect::<Vec<_>>().join(", ");
        let mut kernel = 0usize;
        for group in &p.groups {
            match &group.kind {
                GroupKind::Anchored => {
                    let anchor = group.anchor.as_ref().map(node).unwrap_or_default();
                    writeln!(f, "kernel {kernel} [anchored] {anchor}")?;
                    if !group.prologues.is_empty() {
                        writeln!(f, "    prologues: {}", list(&group.prologues))?;
                    }
                    if !group.epilogues.is_empty() {
                        writeln!(f, "    epilogues: {}", list(&group.epilogues))?;
                    }
                    kernel += 1;
                }
                GroupKind::Injective => {
                    writeln!(f, "kernel {kernel} [injective] {}", list(&group.nodes))?;
                    kernel += 1;
                }
                GroupKind::Alias => writeln!(f, "alias {}", list(&group.nodes))?,
                GroupKind::Host(why) => writeln!(f, "host {} ({why})", list(&group.nodes))?,
            }
            writeln!(f, "    in:  {}", values(&group.inputs))?;
            writeln!(f, "    out: {}", values(&group.outputs))?;
        }
        if !p.folded.is_empty() {
            writeln!(f, "folded at compile time: {}", list(&p.folded))?;
        }
        Ok(())
    }
}

impl Group {
    /// A group of `members` (any order) with its inputs and outputs computed from `graph`.
    pub fn from_members(
        graph: &Graph,
        kind: GroupKind,
        mut members: Vec<NodeId>,
        anchor: Option<NodeId>,
        mut prologues: Vec<NodeId>,
        epilogues: Vec<NodeId>,
    ) -> Group {
        members.sort();
        prologues.sort();
        let graph_outputs: HashSet<ValueId> = graph.outputs().iter().copied().collect();
        Group {
            inputs: group_inputs(graph, &members),
            outputs: group_outputs(graph, &members, &graph_outputs),
            kind,
            nodes: members,
            anchor,
            prologues,
            epilogues,
        }
    }

    /// Splits an anchored group whose fused kernel a backend refused. With `keep_prologues`,
    /// the anchor keeps its prologues and only the epilogue chain becomes a separate
    /// injective group; otherwise every prologue tree (the prologues feeding one operand)
    /// becomes its own injective group too. Other groups are returned unchanged. The result
    /// is in an order in which the pieces can run.
    pub fn split(&self, graph: &Graph, keep_prologues: bool) -> Vec<Group> {
        let Some(anchor) = self.anchor else {
            return vec![self.clone()];
        };
        let mut pieces = Vec::new();
        let mut anchor_members = vec![anchor];
        let mut kept_prologues = Vec::new();
        if keep_prologues {
            anchor_members.extend(&self.prologues);
            kept_prologues = self.prologues.clone();
        } else {
            let prologues: HashSet<NodeId> = self.prologues.iter().copied().collect();
            for v in graph.nodes()[anchor.0].inputs.iter().flatten() {
                let Some((root, _)) = graph.value(*v).producer else {
                    continue;
                };
                if !prologues.contains(&root) {
                    continue;
                }
                let mut tree = vec![root];
                let mut stack = vec![root];
                while let Some(m) = stack.pop() {
                    for i in graph.nodes()[m.0].inputs.iter().flatten() {
                        if let Some((p, _)) = graph.value(*i).producer {
                            if prologues.contains(&p) && !tree.contains(&p) {
                                tree.push(p);
                                stack.push(p);
                            }
                        }
                    }
                }
                pieces.push(Group::from_members(
                    graph,
                    GroupKind::Injective,
                    tree,
                    None,
                    vec![],
                    vec![],
                ));
            }
        }
        pieces.push(Group::from_members(
            graph,
            GroupKind::Anchored,
            anchor_members,
            Some(anchor),
            kept_prologues,
            vec![],
        ));
        if !self.epilogues.is_empty() {
            pieces.push(Group::from_members(
                graph,
                GroupKind::Injective,
                self.epilogues.clone(),
                None,
                vec![],
                vec![],
            ));
        }
        pieces.sort_by_key(|g| g.nodes.last().copied());
        pieces
    }

    /// An anchored group cut after its first `keep` epilogue members: the anchor with its
    /// prologues and those epilogues, and a group of the rest (an alias when the rest only
    /// reshapes, else injective). `None` unless `keep < epilogues.len()` and each piece
    /// has exactly one output (a cut inside an elementwise region leaves several).
    pub fn cut_epilogues(
        &self,
        graph: &Graph,
        spec: &Specialization,
        keep: usize,
    ) -> Option<(Group, Group)> {
        let anchor = self.anchor?;
        if keep >= self.epilogues.len() {
            return None;
        }
        let (kept, rest) = self.epilogues.split_at(keep);
        let members: Vec<NodeId> = [anchor]
            .into_iter()
            .chain(self.prologues.iter().copied())
            .chain(kept.iter().copied())
            .collect();
        let head = Group::from_members(
            graph,
            GroupKind::Anchored,
            members,
            Some(anchor),
            self.prologues.clone(),
            kept.to_vec(),
        );
        let kind = if rest.iter().all(|n| is_alias_node(graph, spec, *n)) {
            GroupKind::Alias
        } else {
            GroupKind::Injective
        };
        let tail = Group::from_members(graph, kind, rest.to_vec(), None, vec![], vec![]);
        (head.outputs.len() == 1 && tail.outputs.len() == 1).then_some((head, tail))
    }

    /// Whether the group has anything fused around its anchor.
    pub fn has_fusion(&self) -> bool {
        !self.prologues.is_empty() || !self.epilogues.is_empty()
    }
}
