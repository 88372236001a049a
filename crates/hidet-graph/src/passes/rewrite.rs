//! The one rewrite mechanism of the graph passes: a [`Rewriter`] collects edits (replace a
//! value by another, add nodes, remove nodes, add constants) against a graph and applies them
//! at once in [`Rewriter::finish`], which orders the nodes and hands them to
//! [`Graph::with_nodes`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{FusionHints, Graph, GraphError, Node, NodeId, ValueId};
use crate::operator::{InferInput, OpContext, OpError};
use crate::registry::Registry;
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Opset whose semantics every node a pass creates follows (for example Squeeze/Unsqueeze
/// axes and Reshape shapes as inputs).
pub const NEW_NODE_OPSET: i64 = 17;

/// Pending edits of one graph. Nothing changes in the graph's node list until
/// [`Rewriter::finish`]; values and constants added in between are visible through
/// [`Rewriter::graph`] at once.
pub struct Rewriter {
    graph: Graph,
    registry: &'static Registry,
    removed: Vec<bool>,
    added: Vec<(NodeId, Node)>,
    replaced: HashMap<ValueId, ValueId>,
    counter: usize,
    focus: Option<NodeId>,
    /// Values created for the outputs of added nodes.
    new_values: HashSet<ValueId>,
}

/// Identifies what a node computes: its operator type, opset, attributes and inputs. Two
/// nodes with equal keys compute equal outputs (for deterministic operators).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeKey {
    op: (String, String, i64),
    attrs: Vec<u8>,
    hints: FusionHints,
    inputs: Vec<Option<ValueId>>,
    outputs: usize,
}

impl Rewriter {
    /// Starts rewriting `graph`; new nodes are built with operators of
    /// [`Registry::global`].
    pub fn new(graph: Graph) -> Rewriter {
        Rewriter::with_registry(graph, Registry::global())
    }

    /// Starts rewriting `graph`; new nodes are built with operators of `registry` (a
    /// backend's registry, which adds its internal operators to the built-in ones).
    pub fn with_registry(graph: Graph, registry: &'static Registry) -> Rewriter {
        let n = graph.nodes().len();
        Rewriter {
            graph,
            registry,
            removed: vec![false; n],
            added: Vec::new(),
            replaced: HashMap::new(),
            counter: 0,
            focus: None,
            new_values: HashSet::new(),
        }
    }

    /// The graph as it was when rewriting started, plus the values added since.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Places the nodes added from now on after node `n` (the node being rewritten), unless
    /// [`Rewriter::add_node`] is told otherwise.
    pub fn focus(&mut self, n: NodeId) {
        self.focus = Some(n);
    }

    /// True when some edit has been recorded.
    pub fn changed(&self) -> bool {
        !self.added.is_empty() || !self.replaced.is_empty() || self.removed.iter().any(|r| *r)
    }

    /// True when node `n` is marked for removal.
    pub fn is_removed(&self, n: NodeId) -> bool {
        self.removed.get(n.0).copied().unwrap_or(false)
    }

    /// The tensor of `v` if it is a constant: an initializer (or a value known at import time
    /// that is produced by a node without inputs, such as `Constant`).
    pub fn constant(&self, v: ValueId) -> Option<&Tensor> {
        constant_of(&self.graph, v)
    }

    /// The rank-2 constant `Wᵀ` when `v` is `Transpose(Wᵀ)` (a default-domain transpose that
    /// swaps the two axes): a matrix read through a transpose of how it is stored.
    pub fn transposed_constant(&self, v: ValueId) -> Option<ValueId> {
        let (p, _) = self.graph.value(v).producer?;
        let node = &self.graph.nodes()[p.0];
        let perm = node.attrs.ints("perm").ok()?;
        let swaps = perm.is_none_or(|p| *p == [1, 0]);
        if node.op_type != "Transpose" || !node.domain.is_empty() || !swaps {
            return None;
        }
        let stored = node.inputs.first().copied().flatten()?;
        (self.constant(stored)?.rank() == 2).then_some(stored)
    }

    /// Adds a constant initializer; `hint` names it (a unique suffix is appended).
    pub fn add_constant(&mut self, hint: &str, tensor: Tensor) -> ValueId {
        let name = self.fresh(hint);
        self.graph.add_initializer(name, tensor)
    }

    /// Adds a 1-D `i64` constant holding `dims` (the shape input of a `Reshape` or `Expand`).
    pub fn add_shape(&mut self, dims: &[usize]) -> ValueId {
        let values: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let tensor = Tensor::new(vec![values.len()], values)
            .expect("a 1-D tensor as long as its data always matches its shape");
        self.add_constant("shape", tensor)
    }

    /// Adds a node `op_type` (default domain, [`NEW_NODE_OPSET`]) with `attrs` reading
    /// `inputs`, placed after the producers of its inputs and after node `after` (by default
    /// the node of the last [`Rewriter::focus`]).
    /// Returns its `num_outputs` output values, typed by the operator's shape inference.
    ///
    /// Errors: the operator is not registered, or its construction or inference fails.
    pub fn add_node(
        &mut self,
        op_type: &str,
        attrs: Attributes,
        inputs: &[Option<ValueId>],
        num_outputs: usize,
        after: Option<NodeId>,
    ) -> Result<Vec<ValueId>, GraphError> {
        self.add_node_in(
            "",
            op_type,
            NEW_NODE_OPSET,
            attrs,
            inputs,
            num_outputs,
            after,
        )
    }

    /// [`Rewriter::add_op`] for an operator of `domain` (opset [`NEW_NODE_OPSET`] of that
    /// domain), such as hidet's internal operators.
    pub fn add_domain_op(
        &mut self,
        domain: &str,
        op_type: &str,
        attrs: Attributes,
        inputs: &[ValueId],
    ) -> Result<ValueId, GraphError> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|v| Some(*v)).collect();
        let out = self.add_node_in(domain, op_type, NEW_NODE_OPSET, attrs, &ins, 1, None)?;
        Ok(out[0])
    }

    /// Adds a copy of node `n` (its domain, operator, opset and attributes) reading `inputs`
    /// instead, placed like [`Rewriter::add_node`]; returns its outputs, one per output slot
    /// of `n`, typed by shape inference on the new inputs.
    ///
    /// Errors: as [`Rewriter::add_node`].
    pub fn add_copy_of(
        &mut self,
        n: NodeId,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<ValueId>, GraphError> {
        let node = &self.graph.nodes()[n.0];
        let (domain, op_type, opset) = (node.domain.clone(), node.op_type.clone(), node.opset);
        let (attrs, outputs, hints) = (node.attrs.clone(), node.outputs.len(), node.hints);
        let op = (inputs.len() == node.inputs.len()).then(|| Arc::clone(&node.op));
        let new = self.add_node_with(&domain, &op_type, opset, attrs, op, inputs, outputs, None)?;
        if let Some(&first) = new.first() {
            self.set_hints(first, hints)?;
        }
        Ok(new)
    }

    /// Sets the [`FusionHints`] of the added node that defines `v`.
    ///
    /// Errors: `v` is not an output of a node added by this rewriter.
    pub fn set_hints(&mut self, v: ValueId, hints: FusionHints) -> Result<(), GraphError> {
        let node = self
            .added
            .iter_mut()
            .map(|(_, node)| node)
            .find(|node| node.outputs.contains(&Some(v)));
        match node {
            Some(node) => {
                node.hints = hints;
                Ok(())
            }
            None => Err(GraphError::NotAdded(self.graph.value(v).name.clone())),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add_node_in(
        &mut self,
        domain: &str,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[Option<ValueId>],
        num_outputs: usize,
        after: Option<NodeId>,
    ) -> Result<Vec<ValueId>, GraphError> {
        self.add_node_with(
            domain,
            op_type,
            opset,
            attrs,
            None,
            inputs,
            num_outputs,
            after,
        )
    }

    /// [`Rewriter::add_node_in`] with the operator already built (`op`), or built from the
    /// registry when `op` is `None`.
    #[allow(clippy::too_many_arguments)]
    fn add_node_with(
        &mut self,
        domain: &str,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        op: Option<Arc<dyn crate::operator::Operator>>,
        inputs: &[Option<ValueId>],
        num_outputs: usize,
        after: Option<NodeId>,
    ) -> Result<Vec<ValueId>, GraphError> {
        let name = self.fresh(op_type);
        let node_err = |source: OpError| GraphError::Node {
            node: name.clone(),
            op_type: op_type.to_string(),
            source,
        };
        let op: Arc<dyn crate::operator::Operator> = match op {
            Some(op) => op,
            None => {
                let schema = self
                    .registry
                    .lookup(domain, op_type, opset)
                    .ok_or_else(|| {
                        node_err(OpError::Unsupported(format!("{op_type} is not registered")))
                    })?;
                let ctx = OpContext {
                    domain,
                    op_type,
                    opset,
                    attrs: &attrs,
                    num_inputs: inputs.len(),
                    num_outputs,
                };
                Arc::from(schema.build(&ctx).map_err(node_err)?)
            }
        };
        let types: Vec<TensorType> = {
            let info: Vec<Option<InferInput<'_>>> = inputs
                .iter()
                .map(|i| {
                    i.map(|id| {
                        let v = self.graph.value(id);
                        InferInput {
                            ty: &v.ty,
                            value: v.known.as_ref().or(v.initializer.as_ref()),
                        }
                    })
                })
                .collect();
            op.infer(&info).map_err(node_err)?
        };
        if types.len() < num_outputs {
            return Err(node_err(OpError::Invalid(format!(
                "{op_type} infers {} outputs, {num_outputs} requested",
                types.len()
            ))));
        }
        let outputs: Vec<ValueId> = types
            .into_iter()
            .take(num_outputs)
            .enumerate()
            .map(|(i, ty)| self.graph.add_value(format!("{name}:{i}"), ty))
            .collect();
        self.new_values.extend(outputs.iter().copied());
        let anchor = inputs
            .iter()
            .flatten()
            .filter_map(|v| self.graph.value(*v).producer.map(|p| p.0))
            .chain(after.or(self.focus))
            .max()
            .unwrap_or(NodeId(0));
        self.added.push((
            anchor,
            Node {
                name,
                domain: domain.to_string(),
                op_type: op_type.to_string(),
                opset,
                attrs,
                inputs: inputs.to_vec(),
                outputs: outputs.iter().map(|o| Some(*o)).collect(),
                op,
                hints: FusionHints::default(),
            },
        ));
        Ok(outputs)
    }

    /// [`Rewriter::add_node`] for a single-output node reading only present inputs.
    pub fn add_op(
        &mut self,
        op_type: &str,
        attrs: Attributes,
        inputs: &[ValueId],
    ) -> Result<ValueId, GraphError> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|v| Some(*v)).collect();
        let out = self.add_node(op_type, attrs, &ins, 1, None)?;
        Ok(out[0])
    }

    /// [`Rewriter::add_op`] at `opset` instead of [`NEW_NODE_OPSET`], for operators that
    /// newer opsets introduced (`Col2Im`, 18).
    pub fn add_op_at(
        &mut self,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[ValueId],
    ) -> Result<ValueId, GraphError> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|v| Some(*v)).collect();
        let out = self.add_node_in("", op_type, opset, attrs, &ins, 1, None)?;
        Ok(out[0])
    }

    /// A `Cast` of `v` to `dtype`.
    pub fn add_cast(&mut self, v: ValueId, dtype: DType) -> Result<ValueId, GraphError> {
        let mut attrs = Attributes::new();
        attrs.insert("to", Attribute::Int(i64::from(dtype.onnx_code())));
        self.add_op("Cast", attrs, &[v])
    }

    /// Marks node `n` for removal. Every value it defines that is still read must be
    /// replaced ([`Rewriter::replace`]), or [`Rewriter::finish`] fails.
    pub fn remove_node(&mut self, n: NodeId) {
        if let Some(r) = self.removed.get_mut(n.0) {
            *r = true;
        }
    }

    /// Makes every reader of `old` (nodes and graph outputs) read `new` instead. `new` must
    /// compute the same tensor as `old`.
    pub fn replace(&mut self, old: ValueId, new: ValueId) {
        if old != new {
            self.replaced.insert(old, new);
        }
    }

    /// True when replacing `old` by `new` keeps the graph's interface without an extra
    /// `Identity`: `old` is not a graph output, or `new` is computed by a node (an existing or
    /// an added one) and is neither a graph input, an initializer nor a graph output, so that
    /// node can define `old` directly.
    pub fn replaceable(&self, old: ValueId, new: ValueId) -> bool {
        let g = &self.graph;
        let computed = g.value(new).producer.is_some() || self.new_values.contains(&new);
        !g.outputs().contains(&old) || (computed && !g.outputs().contains(&new))
    }

    /// A key identifying what node `n` computes after the replacements recorded so far;
    /// `None` for nodes holding subgraphs or attributes that cannot be compared.
    pub fn node_key(&self, n: NodeId) -> Option<NodeKey> {
        let node = &self.graph.nodes()[n.0];
        Some(NodeKey {
            op: (node.domain.clone(), node.op_type.clone(), node.opset),
            attrs: attrs_key(&node.attrs)?,
            hints: node.hints,
            inputs: node
                .inputs
                .iter()
                .map(|i| i.map(|v| self.resolve(v)))
                .collect(),
            outputs: node.outputs.len(),
        })
    }

    /// `v` after the replacements recorded so far.
    pub fn resolve(&self, mut v: ValueId) -> ValueId {
        let mut steps = 0;
        while let Some(&n) = self.replaced.get(&v) {
            v = n;
            steps += 1;
            if steps > self.replaced.len() {
                break;
            }
        }
        v
    }

    /// Applies every edit at once: removes the marked nodes, adds the new ones, redirects
    /// readers of replaced values, and orders the nodes topologically (kept nodes in their
    /// old order, each new node right after the last producer of its inputs).
    ///
    /// A replaced graph output keeps its value: the node defining the replacement defines the
    /// output instead where [`Rewriter::replaceable`] allows it, otherwise an `Identity` node
    /// copies the replacement into it.
    ///
    /// Errors: a node reads a value nothing defines any more, a replacement cycle, or the
    /// checks of [`Graph::with_nodes`].
    /// The one-node-at-a-time rewrite most passes are: for every node `n` of the graph as it
    /// was (in order) for which `plan` gives a plan `p`, the nodes `rewrite` adds (placed after
    /// `n`, see [`Rewriter::focus`]) compute a value that replaces `n`'s output `output(&p)`,
    /// and `n` is removed; then [`Rewriter::finish`].
    pub fn replace_each<P>(
        mut self,
        plan: impl Fn(&Rewriter, NodeId) -> Option<P>,
        output: impl Fn(&P) -> ValueId,
        mut rewrite: impl FnMut(&mut Rewriter, &P) -> Result<ValueId, GraphError>,
    ) -> Result<Graph, GraphError> {
        for i in 0..self.graph().nodes().len() {
            let Some(p) = plan(&self, NodeId(i)) else {
                continue;
            };
            self.focus(NodeId(i));
            let out = rewrite(&mut self, &p)?;
            self.replace(output(&p), out);
            self.remove_node(NodeId(i));
        }
        self.finish()
    }

    pub fn finish(mut self) -> Result<Graph, GraphError> {
        if !self.changed() {
            return Ok(self.graph);
        }
        let outputs: Vec<ValueId> = self.graph.outputs().to_vec();
        // Entries: (order key, node); the key sorts kept nodes by position and new ones after
        // their anchor.
        let mut entries: Vec<((usize, usize), Node)> =
            Vec::with_capacity(self.graph.nodes().len() + self.added.len());
        for (i, n) in self.graph.take_nodes().into_iter().enumerate() {
            if !self.removed[i] {
                entries.push(((i, 0), n));
            }
        }
        for (k, (anchor, n)) in std::mem::take(&mut self.added).into_iter().enumerate() {
            entries.push(((anchor.0, k + 1), n));
        }
        let mut remap: HashMap<ValueId, ValueId> = HashMap::new();
        for &v in self.replaced.keys() {
            let r = self.resolve(v);
            if self.replaced.contains_key(&r) {
                return Err(GraphError::Cycle(self.graph.value(v).name.clone()));
            }
            remap.insert(v, r);
        }
        for (_, n) in entries.iter_mut() {
            for i in n.inputs.iter_mut().flatten() {
                if let Some(r) = remap.get(i) {
                    *i = *r;
                }
            }
        }
        // Graph outputs that were replaced: let the replacement's producer define them.
        let defined_by: HashMap<ValueId, usize> = if outputs.iter().any(|o| remap.contains_key(o)) {
            entries
                .iter()
                .enumerate()
                .flat_map(|(e, (_, n))| n.outputs.iter().flatten().map(move |v| (*v, e)))
                .collect()
        } else {
            HashMap::new()
        };
        let mut taken: HashMap<ValueId, ValueId> = HashMap::new();
        for &o in &outputs {
            if defined_by.contains_key(&o) {
                continue;
            }
            let Some(&r) = remap.get(&o) else { continue };
            let r = taken.get(&r).copied().unwrap_or(r);
            let redirect = defined_by.contains_key(&r)
                && !outputs.contains(&r)
                && !self.graph.inputs().contains(&r)
                && !taken.values().any(|t| *t == r);
            if redirect {
                let e = defined_by[&r];
                for s in entries[e].1.outputs.iter_mut().flatten() {
                    if *s == r {
                        *s = o;
                    }
                }
                for (_, n) in entries.iter_mut() {
                    for i in n.inputs.iter_mut().flatten() {
                        if *i == r {
                            *i = o;
                        }
                    }
                }
                taken.insert(r, o);
            } else {
                let schema = self.registry.lookup("", "Identity", NEW_NODE_OPSET);
                let Some(schema) = schema else {
                    return Err(GraphError::UndefinedOutput(
                        self.graph.value(o).name.clone(),
                    ));
                };
                let attrs = Attributes::new();
                let ctx = OpContext {
                    domain: "",
                    op_type: "Identity",
                    opset: NEW_NODE_OPSET,
                    attrs: &attrs,
                    num_inputs: 1,
                    num_outputs: 1,
                };
                let name = self.fresh("Identity");
                let op = schema.build(&ctx).map_err(|source| GraphError::Node {
                    node: name.clone(),
                    op_type: "Identity".into(),
                    source,
                })?;
                let anchor = self.graph.value(r).producer.map(|p| p.0 .0).unwrap_or(0);
                entries.push((
                    (anchor, usize::MAX),
                    Node {
                        name,
                        domain: String::new(),
                        op_type: "Identity".into(),
                        opset: NEW_NODE_OPSET,
                        attrs,
                        inputs: vec![Some(r)],
                        outputs: vec![Some(o)],
                        op: Arc::from(op),
                        hints: FusionHints::default(),
                    },
                ));
            }
        }
        let nodes = topo_sort(&self.graph, &self.new_values, entries)?;
        self.graph.with_nodes(nodes)
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.counter += 1;
        format!("{hint}~{}.{}", self.graph.values().len(), self.counter)
    }
}

/// The tensor of `v` if it is constant: an initializer, or the known value of an output of a
/// node without inputs (`Constant`).
pub fn constant_of(graph: &Graph, v: ValueId) -> Option<&Tensor> {
    let val = graph.value(v);
    if let Some(t) = &val.initializer {
        return Some(t);
    }
    let (n, _) = val.producer?;
    let node = graph.nodes().get(n.0)?;
    if node.inputs.is_empty() && node.op_type == "Constant" {
        val.known.as_ref()
    } else {
        None
    }
}

/// True when an attribute holds a graph or a subgraph definition (If branches, Loop/Scan
/// bodies).
pub fn holds_subgraph(attrs: &Attributes) -> bool {
    attrs.iter().any(|(_, a)| {
        !matches!(
            a,
            Attribute::Float(_)
                | Attribute::Int(_)
                | Attribute::String(_)
                | Attribute::Tensor(_)
                | Attribute::Floats(_)
                | Attribute::Ints(_)
                | Attribute::Strings(_)
                | Attribute::Tensors(_)
        )
    })
}

/// A byte string equal for structurally equal attribute sets; `None` when one holds a
/// (sub)graph (which is never compared).
pub fn attrs_key(attrs: &Attributes) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for (name, a) in attrs.iter() {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        match a {
            Attribute::Float(f) => {
                out.push(1);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Attribute::Int(i) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Attribute::String(s) => {
                out.push(3);
                push_bytes(&mut out, s.as_bytes());
            }
            Attribute::Tensor(t) => {
                out.push(4);
                push_tensor(&mut out, t);
            }
            Attribute::Floats(v) => {
                out.push(5);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for f in v {
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
            }
            Attribute::Ints(v) => {
                out.push(6);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for i in v {
                    out.extend_from_slice(&i.to_le_bytes());
                }
            }
            Attribute::Strings(v) => {
                out.push(7);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for s in v {
                    push_bytes(&mut out, s.as_bytes());
                }
            }
            Attribute::Tensors(v) => {
                out.push(8);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for t in v {
                    push_tensor(&mut out, t);
                }
            }
            // Graphs and subgraph definitions.
            _ => return None,
        }
    }
    Some(out)
}

fn push_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

/// Appends dtype, shape and the exact element values of `t` (floats by the bits of their
/// exact f64 value, so -0.0 and 0.0 differ).
pub(crate) fn push_tensor(out: &mut Vec<u8>, t: &Tensor) {
    out.extend_from_slice(&t.dtype().onnx_code().to_le_bytes());
    out.extend_from_slice(&(t.rank() as u64).to_le_bytes());
    for d in t.shape() {
        out.extend_from_slice(&(*d as u64).to_le_bytes());
    }
    if t.dtype().is_float() {
        for x in t.to_f64_vec() {
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
    } else {
        for x in t.to_i64_vec() {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// Kahn's algorithm over `entries`, preferring the smallest order key among ready nodes.
/// Sources are the values no node of the graph defined (inputs, initializers, captures), not
/// the outputs of added nodes (`new_values`).
/// The name of value `v`, or its number when the graph has no such value.
fn value_name(graph: &Graph, v: ValueId) -> String {
    graph
        .values()
        .get(v.0)
        .map_or_else(|| format!("#{}", v.0), |x| x.name.clone())
}

fn topo_sort(
    graph: &Graph,
    new_values: &HashSet<ValueId>,
    entries: Vec<((usize, usize), Node)>,
) -> Result<Vec<Node>, GraphError> {
    let values = graph.values().len();
    let is_source = |v: ValueId| graph.value(v).producer.is_none() && !new_values.contains(&v);
    // Dense ids: the producing entry of every value, `usize::MAX` for none.
    let mut producer: Vec<usize> = vec![usize::MAX; values];
    for (e, (_, n)) in entries.iter().enumerate() {
        for o in n.outputs.iter().flatten() {
            let slot = producer.get_mut(o.0).filter(|p| **p == usize::MAX);
            match slot {
                Some(p) if !is_source(*o) => *p = e,
                _ => return Err(GraphError::DuplicateValue(value_name(graph, *o))),
            }
        }
    }
    let mut pending = vec![0usize; entries.len()];
    let mut dependents: Vec<Vec<usize>> = vec![vec![]; entries.len()];
    for (e, (_, n)) in entries.iter().enumerate() {
        for i in n.inputs.iter().flatten() {
            match producer.get(i.0) {
                Some(&p) if p != usize::MAX => {
                    pending[e] += 1;
                    dependents[p].push(e);
                }
                _ if i.0 < values && is_source(*i) => {}
                _ => {
                    return Err(GraphError::UndefinedValue {
                        node: n.name.clone(),
                        value: value_name(graph, *i),
                    })
                }
            }
        }
    }
    let mut ready: BTreeSet<((usize, usize), usize)> = entries
        .iter()
        .enumerate()
        .filter(|(e, _)| pending[*e] == 0)
        .map(|(e, (k, _))| (*k, e))
        .collect();
    let mut order = Vec::with_capacity(entries.len());
    while let Some((_, e)) = ready.pop_first() {
        order.push(e);
        for &d in &dependents[e] {
            pending[d] -= 1;
            if pending[d] == 0 {
                ready.insert((entries[d].0, d));
            }
        }
    }
    if order.len() != entries.len() {
        let stuck = (0..entries.len())
            .find(|&e| pending[e] > 0)
            .map(|e| entries[e].1.name.clone())
            .unwrap_or_default();
        return Err(GraphError::Cycle(stuck));
    }
    let mut slots: Vec<Option<Node>> = entries.into_iter().map(|(_, n)| Some(n)).collect();
    Ok(order.into_iter().filter_map(|e| slots[e].take()).collect())
}
