//! The graph IR: values, nodes in topological order, use lists, named inputs and outputs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::attribute::{Attribute, Attributes};
use crate::expansion::Expansion;
use crate::operator::{InferInput, OpContext, OpError, Operator};
use crate::registry::{normalize_domain, Registry};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::value::ValueKind;

/// Index of a value in [`Graph::values`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// Index of a node in [`Graph::nodes`] (which is in topological order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// One operator whose opset is not registered, with how many nodes use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedOp {
    pub domain: String,
    pub op_type: String,
    pub opset: i64,
    pub count: usize,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = if self.domain.is_empty() {
            "ai.onnx"
        } else {
            &self.domain
        };
        write!(
            f,
            "{} x{} (opset {} {})",
            self.op_type, self.count, d, self.opset
        )
    }
}

fn list_unsupported(ops: &[UnsupportedOp]) -> String {
    ops.iter()
        .map(|o| o.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Errors building or rewriting a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// Every operator without a registration, with counts and opsets, in one error.
    #[error("unsupported operators: {}", list_unsupported(.0))]
    UnsupportedOps(Vec<UnsupportedOp>),
    /// A node reads a value nothing defines.
    #[error("node `{node}` reads undefined value `{value}`")]
    UndefinedValue { node: String, value: String },
    /// A value name is defined twice (by inputs, initializers or node outputs).
    #[error("value `{0}` is defined more than once")]
    DuplicateValue(String),
    /// The nodes contain a cycle.
    #[error("graph has a cycle through node `{0}`")]
    Cycle(String),
    /// A graph output names no value.
    #[error("graph output `{0}` is not defined")]
    UndefinedOutput(String),
    /// A rewrite set the hints of a value no node it added defines.
    #[error("value `{0}` is not defined by a node of this rewrite")]
    NotAdded(String),
    /// Building or inferring an operator failed.
    #[error("node `{node}` ({op_type}): {source}")]
    Node {
        node: String,
        op_type: String,
        source: OpError,
    },
    /// A graph input has no type, and no operator supplied one (only subgraph inputs may be
    /// untyped; see [`SubgraphContext::build`]).
    #[error("input `{0}` has no type")]
    UntypedInput(String),
    /// A subgraph declares another number of formal inputs than its operator binds.
    #[error("subgraph `{graph}` declares {declared} inputs, its operator binds {given}")]
    SubgraphArity {
        graph: String,
        declared: usize,
        given: usize,
    },
    /// A subgraph input's declared dtype differs from the one its operator binds.
    #[error("subgraph input `{name}` is declared {declared}, its operator binds {given}")]
    SubgraphInputType {
        name: String,
        declared: String,
        given: String,
    },
}

/// A value: a graph input, an initializer, or a node output.
#[derive(Debug, Clone)]
pub struct Value {
    pub name: String,
    /// Static type from inference (or the declaration, for graph inputs); for a sequence or
    /// optional, the type of the tensors inside.
    pub ty: TensorType,
    /// Tensor, sequence or optional.
    pub kind: ValueKind,
    /// The node output defining this value; `None` for inputs and initializers.
    pub producer: Option<(NodeId, usize)>,
    /// Every (node, input slot) reading this value, in node order.
    pub users: Vec<(NodeId, usize)>,
    /// The weights, for initializers (shared, never copied).
    pub initializer: Option<Tensor>,
    /// A value known at import time (initializers and small folded constants), used only
    /// by shape inference.
    pub known: Option<Tensor>,
}

/// A node: an operator applied to values.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    /// Normalized domain (`""` = default ONNX domain).
    pub domain: String,
    pub op_type: String,
    /// The model's opset for `domain`.
    pub opset: i64,
    pub attrs: Attributes,
    /// Input slots; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Output slots; `None` for an unused optional output.
    pub outputs: Vec<Option<ValueId>>,
    pub op: Arc<dyn Operator>,
    /// How fusion treats the node: the default for imported nodes, set by the backend pass
    /// that created it otherwise ([`crate::passes::Rewriter::set_hints`]).
    pub hints: FusionHints,
}

/// Constraints a backend's graph pass puts on how fusion treats a node it creates: typed
/// data the partition and specialization read, never recovered from attributes. The
/// default constrains nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FusionHints {
    /// The node is stored by a kernel of its own, never inlined into a consumer's (a padded
    /// copy a direct convolution gathers from without guards).
    pub materialize: bool,
    /// The node is never an epilogue of its producer's kernel: it stays for its consumer to
    /// read as a prologue (a transpose a matrix product reads its operand through).
    pub prologue_only: bool,
    /// Specialization never folds the node into a constant, though its inputs are constant:
    /// the layout it reads is the one a kernel expects (a weight stored transposed, column
    /// panels).
    pub keep_layout: bool,
}

/// A computation graph. Invariants (established by [`GraphBuilder::build`] and kept by
/// [`Graph::with_nodes`]): nodes are in topological order, every node input is a graph input,
/// an initializer, a capture or an output of an earlier node, and `producer`/`users` are exact.
///
/// A node whose attributes hold subgraph definitions ([`Attribute::GraphDef`]) reads, after
/// its declared inputs, one extra input per outer-scope value its subgraphs read (its
/// *captures*, in the order of [`GraphBuilder::free_names`] of the union), so that ordering,
/// use lists and dead-code elimination see those dependencies.
#[derive(Debug, Clone)]
pub struct Graph {
    pub name: String,
    values: Vec<Value>,
    nodes: Vec<Node>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    captures: Vec<Option<ValueId>>,
}

/// A node as described by an importer: values referenced by name, `""` for absent.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub domain: String,
    pub op_type: String,
    /// The model's opset for this node's domain.
    pub opset: i64,
    pub attrs: Attributes,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// Collects a graph by names and builds it (topological sort, operator construction,
/// shape inference) in [`GraphBuilder::build`]. Unbuilt builders are also how subgraph
/// attributes are stored ([`Attribute::GraphDef`]): their types depend on the owning node.
#[derive(Debug, Default, Clone)]
pub struct GraphBuilder {
    pub name: String,
    /// Formal inputs; `None` for an undeclared type (allowed in subgraphs only).
    inputs: Vec<(String, Option<(TensorType, ValueKind)>)>,
    initializers: Vec<(String, Tensor)>,
    nodes: Vec<NodeSpec>,
    outputs: Vec<String>,
}

/// Values up to this many elements are folded at import time to help shape inference.
const FOLD_LIMIT: usize = 4096;

impl GraphBuilder {
    /// An empty builder.
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Declares a runtime tensor input.
    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        self.inputs
            .push((name.into(), Some((ty, ValueKind::Tensor))));
        self
    }

    /// Declares a runtime input of any kind; for a sequence or optional, `ty` is the type of
    /// the tensors inside.
    pub fn input_of_kind(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        kind: ValueKind,
    ) -> &mut Self {
        self.inputs.push((name.into(), Some((ty, kind))));
        self
    }

    /// Declares an input without a type. Only a subgraph may have one: the operator that owns
    /// the subgraph supplies the type ([`SubgraphContext::build`]); [`GraphBuilder::build`]
    /// rejects it with [`GraphError::UntypedInput`].
    pub fn input_untyped(&mut self, name: impl Into<String>) -> &mut Self {
        self.inputs.push((name.into(), None));
        self
    }

    /// Drops the declared shapes (keeping dtypes and kinds) of the formal inputs in `inputs`:
    /// a loop body's declaration of a value that changes shape across iterations holds only
    /// for the first (exporters declare the initial shape), so the shapes come from the
    /// operator that runs the body instead ([`SubgraphContext::build`]).
    pub fn forget_input_shapes(&mut self, inputs: std::ops::Range<usize>) {
        for (_, decl) in self.inputs.iter_mut().take(inputs.end).skip(inputs.start) {
            if let Some((ty, _)) = decl {
                ty.shape = None;
            }
        }
    }

    /// Number of declared formal inputs.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Names of the declared outputs, in order.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(String::as_str)
    }

    /// The outer-scope names this graph reads: names used by its nodes (and, recursively, by
    /// subgraph definitions in their attributes) or listed as outputs, that none of its inputs,
    /// initializers or node outputs defines. Sorted, without duplicates.
    pub fn free_names(&self) -> Vec<String> {
        let mut defined: HashSet<&str> = HashSet::new();
        defined.extend(self.inputs.iter().map(|(n, _)| n.as_str()));
        defined.extend(self.initializers.iter().map(|(n, _)| n.as_str()));
        for n in &self.nodes {
            defined.extend(n.outputs.iter().map(String::as_str));
        }
        let mut free: BTreeSet<String> = BTreeSet::new();
        for n in &self.nodes {
            for i in n.inputs.iter().filter(|i| !i.is_empty()) {
                if !defined.contains(i.as_str()) {
                    free.insert(i.clone());
                }
            }
            free.extend(
                node_free_names(&n.attrs)
                    .into_iter()
                    .filter(|f| !defined.contains(f.as_str())),
            );
        }
        for o in &self.outputs {
            if !defined.contains(o.as_str()) {
                free.insert(o.clone());
            }
        }
        free.into_iter().collect()
    }

    /// Adds a weight.
    pub fn initializer(&mut self, name: impl Into<String>, value: Tensor) -> &mut Self {
        self.initializers.push((name.into(), value));
        self
    }

    /// Adds a node (any order; `build` sorts them).
    pub fn node(&mut self, node: NodeSpec) -> &mut Self {
        self.nodes.push(node);
        self
    }

    /// Declares a graph output.
    pub fn output(&mut self, name: impl Into<String>) -> &mut Self {
        self.outputs.push(name.into());
        self
    }

    /// Builds the graph with operators from `registry`.
    ///
    /// Errors: every unregistered operator at once ([`GraphError::UnsupportedOps`]), then
    /// structural errors, then the first failing operator construction or inference.
    pub fn build(self, registry: &Registry) -> Result<Graph, GraphError> {
        self.build_scoped(registry, None, &[], 0)
    }

    /// [`GraphBuilder::build`] for a subgraph: `formal` types the formal inputs (a declared
    /// type keeps its shape when it has one, and must agree on the dtype), and `captures` are
    /// the outer-scope values bound by name, in the owning node's capture order. `depth` is
    /// the number of enclosing graphs.
    fn build_scoped(
        self,
        registry: &Registry,
        formal: Option<&[(TensorType, ValueKind)]>,
        captures: &[(&str, InferInput<'_>, ValueKind)],
        depth: usize,
    ) -> Result<Graph, GraphError> {
        if let Some(f) = formal {
            if f.len() != self.inputs.len() {
                return Err(GraphError::SubgraphArity {
                    graph: self.name.clone(),
                    declared: self.inputs.len(),
                    given: f.len(),
                });
            }
        }
        // 1. Every unsupported operator, with counts.
        let mut missing: Vec<UnsupportedOp> = Vec::new();
        for n in &self.nodes {
            let domain = normalize_domain(&n.domain);
            if !registry.supports(domain, &n.op_type, n.opset) {
                match missing
                    .iter_mut()
                    .find(|m| m.domain == domain && m.op_type == n.op_type && m.opset == n.opset)
                {
                    Some(m) => m.count += 1,
                    None => missing.push(UnsupportedOp {
                        domain: domain.to_string(),
                        op_type: n.op_type.clone(),
                        opset: n.opset,
                        count: 1,
                    }),
                }
            }
        }
        if !missing.is_empty() {
            missing.sort_by(|a, b| (&a.domain, &a.op_type).cmp(&(&b.domain, &b.op_type)));
            return Err(GraphError::UnsupportedOps(missing));
        }

        // 2. Values for inputs and initializers. An input that is also an initializer is an
        //    initializer (ONNX IR < 4 lists weights as inputs too).
        let mut values: Vec<Value> = Vec::new();
        let mut by_name: HashMap<String, ValueId> = HashMap::new();
        let mut inputs = Vec::new();
        for (name, t) in self.initializers {
            if by_name.contains_key(&name) {
                return Err(GraphError::DuplicateValue(name));
            }
            by_name.insert(name.clone(), ValueId(values.len()));
            values.push(Value {
                name,
                ty: TensorType::fixed(t.dtype(), t.shape()),
                kind: ValueKind::Tensor,
                producer: None,
                users: vec![],
                initializer: Some(t.clone()),
                known: Some(t),
            });
        }
        for (i, (name, declared)) in self.inputs.into_iter().enumerate() {
            let (ty, kind) = formal_type(&name, declared, formal.and_then(|f| f.get(i)))?;
            if by_name.contains_key(&name) {
                if values[by_name[&name].0].initializer.is_some() {
                    continue;
                }
                return Err(GraphError::DuplicateValue(name));
            }
            let id = ValueId(values.len());
            by_name.insert(name.clone(), id);
            values.push(Value {
                name,
                ty,
                kind,
                producer: None,
                users: vec![],
                initializer: None,
                known: None,
            });
            inputs.push(id);
        }
        // Outer-scope values, unless this graph defines the name itself.
        let local_outputs: HashSet<&str> = self
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().map(String::as_str))
            .collect();
        let mut capture_ids = Vec::with_capacity(captures.len());
        for (name, input, kind) in captures {
            if by_name.contains_key(*name) || local_outputs.contains(name) {
                capture_ids.push(None);
                continue;
            }
            let id = ValueId(values.len());
            by_name.insert(name.to_string(), id);
            values.push(Value {
                name: name.to_string(),
                ty: input.ty.clone(),
                kind: *kind,
                producer: None,
                users: vec![],
                initializer: None,
                known: input.value.cloned(),
            });
            capture_ids.push(Some(id));
        }

        // 3. Topological order (stable: keeps the given order where it is valid).
        let node_captures: Vec<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| node_free_names(&n.attrs))
            .collect();
        let order = topo_order(&self.nodes, &node_captures, &by_name)?;

        // 4. Nodes, values, operators and inference; expansions are replaced by the nodes
        //    they emit, built in their place.
        let mut taken: HashSet<String> = by_name.keys().cloned().collect();
        for n in &self.nodes {
            taken.extend(n.inputs.iter().chain(&n.outputs).cloned());
        }
        let mut st = BuildState {
            registry,
            depth,
            values,
            by_name,
            nodes: Vec::with_capacity(order.len()),
            taken,
        };
        let mut specs: Vec<Option<NodeSpec>> = self.nodes.into_iter().map(Some).collect();
        for idx in order {
            let Some(spec) = specs[idx].take() else {
                unreachable!("topo_order yields each node once")
            };
            st.add_node(spec, &node_captures[idx], 0)?;
        }
        let BuildState {
            values,
            by_name,
            nodes,
            ..
        } = st;
        let outputs = self
            .outputs
            .into_iter()
            .map(|n| {
                by_name
                    .get(&n)
                    .copied()
                    .ok_or(GraphError::UndefinedOutput(n))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Graph {
            name: self.name,
            values,
            nodes,
            inputs,
            outputs,
            captures: capture_ids,
        })
    }
}

/// How many expansions may nest (an expansion emitting nodes that are expanded again).
const MAX_EXPANSION_DEPTH: usize = 8;

/// The graph under construction in [`GraphBuilder::build_scoped`] step 4.
struct BuildState<'r> {
    registry: &'r Registry,
    depth: usize,
    values: Vec<Value>,
    by_name: HashMap<String, ValueId>,
    nodes: Vec<Node>,
    /// Every name in use, so that expansions name their values apart.
    taken: HashSet<String>,
}

impl BuildState<'_> {
    /// Adds `spec` (whose subgraphs read the outer-scope names `captured`), or the nodes its
    /// expansion emits; `nested` counts the expansions that led to it.
    fn add_node(
        &mut self,
        spec: NodeSpec,
        captured: &[String],
        nested: usize,
    ) -> Result<(), GraphError> {
        let registry = self.registry;
        let node_err = |source: OpError| GraphError::Node {
            node: spec.name.clone(),
            op_type: spec.op_type.clone(),
            source,
        };
        let domain = normalize_domain(&spec.domain).to_string();
        if let Some(expansion) = registry.lookup_expansion(&domain, &spec.op_type, spec.opset) {
            if nested >= MAX_EXPANSION_DEPTH {
                return Err(node_err(OpError::Invalid(format!(
                    "expansions nest more than {MAX_EXPANSION_DEPTH} deep"
                ))));
            }
            let emitted = {
                let mut types = Vec::with_capacity(spec.inputs.len());
                for name in &spec.inputs {
                    if name.is_empty() {
                        types.push(None);
                        continue;
                    }
                    let id = *self
                        .by_name
                        .get(name)
                        .ok_or_else(|| GraphError::UndefinedValue {
                            node: spec.name.clone(),
                            value: name.clone(),
                        })?;
                    let v = &self.values[id.0];
                    if v.kind != ValueKind::Tensor {
                        return Err(node_err(OpError::Unsupported(format!(
                            "input `{name}` is a {}",
                            v.kind
                        ))));
                    }
                    types.push(Some(InferInput {
                        ty: &v.ty,
                        value: v.known.as_ref(),
                    }));
                }
                let mut e = Expansion::new(&spec, &types, &mut self.taken);
                expansion.expand(&mut e).map_err(node_err)?;
                e.finish()
            };
            for out in spec.outputs.iter().filter(|o| !o.is_empty()) {
                if !emitted.iter().any(|n| n.outputs.contains(out)) {
                    return Err(node_err(OpError::Invalid(format!(
                        "the expansion of {} defines no output `{out}`",
                        spec.op_type
                    ))));
                }
            }
            for n in emitted {
                let captured = node_free_names(&n.attrs);
                self.add_node(n, &captured, nested + 1)?;
            }
            return Ok(());
        }
        let values = &mut self.values;
        let by_name = &mut self.by_name;
        let nodes = &mut self.nodes;
        let nid = NodeId(nodes.len());
        let mut ins = Vec::with_capacity(spec.inputs.len());
        for (slot, name) in spec.inputs.iter().enumerate() {
            if name.is_empty() {
                ins.push(None);
                continue;
            }
            let id = *by_name
                .get(name)
                .ok_or_else(|| GraphError::UndefinedValue {
                    node: spec.name.clone(),
                    value: name.clone(),
                })?;
            values[id.0].users.push((nid, slot));
            ins.push(Some(id));
        }
        for name in captured {
            let id = *by_name
                .get(name)
                .ok_or_else(|| GraphError::UndefinedValue {
                    node: spec.name.clone(),
                    value: name.clone(),
                })?;
            values[id.0].users.push((nid, ins.len()));
            ins.push(Some(id));
        }
        let ctx = OpContext {
            domain: &domain,
            op_type: &spec.op_type,
            opset: spec.opset,
            attrs: &spec.attrs,
            num_inputs: spec.inputs.len(),
            num_outputs: spec.outputs.len(),
        };
        let schema = registry
            .lookup(&domain, &spec.op_type, spec.opset)
            .ok_or_else(|| {
                node_err(OpError::Unsupported(format!(
                    "{} at opset {} is not registered",
                    spec.op_type, spec.opset
                )))
            })?;
        let mut op: Box<dyn Operator> = schema.build(&ctx).map_err(node_err)?;
        let in_info: Vec<Option<InferInput<'_>>> = ins
            .iter()
            .map(|i| {
                i.map(|id: ValueId| InferInput {
                    ty: &values[id.0].ty,
                    value: values[id.0].known.as_ref(),
                })
            })
            .collect();
        let in_kinds: Vec<Option<ValueKind>> = ins
            .iter()
            .map(|i| i.map(|id: ValueId| values[id.0].kind))
            .collect();
        let has_subgraphs = spec
            .attrs
            .iter()
            .any(|(_, a)| matches!(a, Attribute::GraphDef(_)));
        if has_subgraphs {
            let sub = SubgraphContext {
                registry,
                depth: self.depth + 1,
                captures: captured
                    .iter()
                    .map(String::as_str)
                    .zip(in_info[spec.inputs.len()..].iter().flatten().copied())
                    .zip(in_kinds[spec.inputs.len()..].iter().flatten().copied())
                    .map(|((n, i), k)| (n, i, k))
                    .collect(),
                input_kinds: in_kinds.clone(),
            };
            match op.instantiate(&in_info, &sub) {
                Ok(Some(specialized)) => op = specialized,
                Ok(None) => {}
                Err(OpError::Subgraph { source, .. }) if source.is_unsupported() => {
                    return Err(*source)
                }
                Err(e) => return Err(node_err(e)),
            }
        }
        let op: Arc<dyn Operator> = Arc::from(op);
        let out_kinds = op
            .infer_kinds(&in_kinds, spec.outputs.len())
            .map_err(node_err)?;
        let out_types = op.infer(&in_info).map_err(node_err)?;
        // Subgraphs may loop for as long as their inputs say: never run them at import.
        let all_tensors = in_kinds
            .iter()
            .flatten()
            .chain(&out_kinds)
            .all(|k| *k == ValueKind::Tensor);
        let known = if has_subgraphs || !all_tensors {
            None
        } else {
            let kind = (domain.as_str(), spec.op_type.as_str(), spec.opset);
            known_outputs(kind, &spec.attrs, op.as_ref(), &ins, values, &out_types)
        };
        let mut outs = Vec::with_capacity(spec.outputs.len());
        for (slot, name) in spec.outputs.iter().enumerate() {
            if name.is_empty() {
                outs.push(None);
                continue;
            }
            if by_name.contains_key(name) {
                return Err(GraphError::DuplicateValue(name.clone()));
            }
            let (ty, kind) = output_type(&out_types, &out_kinds, slot).map_err(node_err)?;
            let id = ValueId(values.len());
            by_name.insert(name.clone(), id);
            values.push(Value {
                name: name.clone(),
                ty,
                kind,
                producer: Some((nid, slot)),
                users: vec![],
                initializer: None,
                known: known.as_ref().and_then(|k| k.get(slot).cloned()),
            });
            outs.push(Some(id));
        }
        nodes.push(Node {
            name: spec.name,
            domain,
            op_type: spec.op_type,
            opset: spec.opset,
            attrs: spec.attrs,
            inputs: ins,
            outputs: outs,
            op,
            hints: FusionHints::default(),
        });
        Ok(())
    }
}

/// The type and kind of formal input `name`: the declared ones (shape from `formal` where
/// undeclared), else `formal`'s; the dtypes and kinds must agree.
fn formal_type(
    name: &str,
    declared: Option<(TensorType, ValueKind)>,
    formal: Option<&(TensorType, ValueKind)>,
) -> Result<(TensorType, ValueKind), GraphError> {
    match (declared, formal) {
        (Some((d, dk)), Some((f, fk))) if d.dtype != f.dtype || dk != *fk => {
            Err(GraphError::SubgraphInputType {
                name: name.to_string(),
                declared: format!("{dk} of {d}"),
                given: format!("{fk} of {f}"),
            })
        }
        (Some((d, dk)), Some((f, _))) if d.shape.is_none() => Ok((
            TensorType {
                dtype: d.dtype,
                shape: f.shape.clone(),
            },
            dk,
        )),
        (Some(d), _) => Ok(d),
        (None, Some(f)) => Ok(f.clone()),
        (None, None) => Err(GraphError::UntypedInput(name.to_string())),
    }
}

/// The free names of every subgraph definition among `attrs`, sorted, without duplicates.
pub(crate) fn node_free_names(attrs: &Attributes) -> Vec<String> {
    let mut free: BTreeSet<String> = BTreeSet::new();
    for (_, a) in attrs.iter() {
        if let Attribute::GraphDef(g) = a {
            free.extend(g.free_names());
        }
    }
    free.into_iter().collect()
}

impl GraphError {
    /// True when the error reports something valid that hidet does not support (unregistered
    /// operators or an operator's [`OpError::Unsupported`]), also inside subgraphs.
    pub fn is_unsupported(&self) -> bool {
        match self {
            GraphError::UnsupportedOps(_) => true,
            GraphError::Node { source, .. } => match source {
                OpError::Unsupported(_) => true,
                OpError::Subgraph { source, .. } => source.is_unsupported(),
                _ => false,
            },
            _ => false,
        }
    }
}

/// What an operator with subgraph attributes gets to build them for one node (see
/// [`Operator::instantiate`]).
pub struct SubgraphContext<'a> {
    registry: &'a Registry,
    /// Nesting depth of the subgraphs built here (1 for subgraphs of a top-level node).
    depth: usize,
    /// The node's captures: outer-scope names, their types and kinds, in the order of the
    /// node's trailing inputs.
    captures: Vec<(&'a str, InferInput<'a>, ValueKind)>,
    /// The kind of each of the node's inputs (declared inputs, then captures).
    input_kinds: Vec<Option<ValueKind>>,
}

impl<'a> SubgraphContext<'a> {
    /// Number of captured outer-scope values (the node's trailing inputs).
    pub fn num_captures(&self) -> usize {
        self.captures.len()
    }

    /// Nesting depth of the subgraphs built here: 1 for a node of the top-level graph. An
    /// operator that may build a subgraph more than once must not do so at every depth (the
    /// work would grow exponentially with the nesting).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Builds the subgraph `def` for this node. `formal` gives one type per formal input of
    /// `def` (undeclared input types come from it; declared dtypes must equal it). The built
    /// graph's [`Graph::captures`] align with the node's captures, so running it with
    /// [`crate::executor::run_graph`] takes the node's trailing inputs as they are.
    pub fn build(&self, def: &GraphBuilder, formal: &[TensorType]) -> Result<Graph, GraphError> {
        let formal: Vec<(TensorType, ValueKind)> = formal
            .iter()
            .map(|t| (t.clone(), ValueKind::Tensor))
            .collect();
        self.build_kinds(def, &formal)
    }

    /// [`SubgraphContext::build`] with a kind per formal input (sequences, optionals).
    pub fn build_kinds(
        &self,
        def: &GraphBuilder,
        formal: &[(TensorType, ValueKind)],
    ) -> Result<Graph, GraphError> {
        def.clone()
            .build_scoped(self.registry, Some(formal), &self.captures, self.depth)
    }

    /// The kind of the node's input `i` (`None` if absent or out of range).
    pub fn input_kind(&self, i: usize) -> Option<ValueKind> {
        self.input_kinds.get(i).copied().flatten()
    }
}

/// Evaluates a node at import time if all its inputs are known and small and inference fixed
/// every output's shape within the same limit (for inference). Inputs come from untrusted
/// files: an output whose size inference cannot bound is never computed here.
fn fold_small(
    op: &dyn Operator,
    ins: &[Option<ValueId>],
    values: &[Value],
    out_types: &[TensorType],
) -> Option<Vec<Tensor>> {
    let bounded = out_types.iter().all(|t| {
        t.fixed_shape()
            .and_then(|s| crate::tensor::checked_numel(&s))
            .is_some_and(|n| n <= FOLD_LIMIT)
    });
    if !bounded {
        return None;
    }
    let mut args = Vec::with_capacity(ins.len());
    for i in ins {
        match i {
            None => args.push(None),
            Some(id) => {
                let t = values[id.0].known.as_ref()?;
                if t.numel() > FOLD_LIMIT {
                    return None;
                }
                args.push(Some(t));
            }
        }
    }
    let out = op.eval(&args).ok()?;
    out.iter().all(|t| t.numel() <= FOLD_LIMIT).then_some(out)
}

/// Infers `node`'s output types, kinds and import-time constants from its inputs' entries in
/// `values` as [`BuildState::add_node`] does for a node without subgraphs, and stores them in
/// the outputs' entries.
fn reinfer_node(node: &Node, values: &mut [Value]) -> Result<(), GraphError> {
    let node_err = |source: OpError| GraphError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        source,
    };
    let in_info: Vec<Option<InferInput<'_>>> = node
        .inputs
        .iter()
        .map(|i| {
            i.map(|id| InferInput {
                ty: &values[id.0].ty,
                value: values[id.0].known.as_ref(),
            })
        })
        .collect();
    let in_kinds: Vec<Option<ValueKind>> = node
        .inputs
        .iter()
        .map(|i| i.map(|id| values[id.0].kind))
        .collect();
    let out_kinds = node
        .op
        .infer_kinds(&in_kinds, node.outputs.len())
        .map_err(node_err)?;
    let out_types = node.op.infer(&in_info).map_err(node_err)?;
    let all_tensors = in_kinds
        .iter()
        .flatten()
        .chain(&out_kinds)
        .all(|k| *k == ValueKind::Tensor);
    let known = all_tensors
        .then(|| {
            let kind = (node.domain.as_str(), node.op_type.as_str(), node.opset);
            known_outputs(
                kind,
                &node.attrs,
                node.op.as_ref(),
                &node.inputs,
                values,
                &out_types,
            )
        })
        .flatten();
    for (slot, out) in node.outputs.iter().enumerate() {
        let Some(id) = out else { continue };
        let (ty, kind) = output_type(&out_types, &out_kinds, slot).map_err(node_err)?;
        let value = &mut values[id.0];
        value.ty = ty;
        value.kind = kind;
        value.known = known.as_ref().and_then(|k| k.get(slot).cloned());
    }
    Ok(())
}

/// The import-time constants of the outputs of a node of `(domain, op type, opset)` whose
/// inputs and outputs are all tensors: a `Shape` or `Size` of an input of fixed shape, else
/// the node evaluated when its inputs are known and every tensor is small ([`fold_small`]).
fn known_outputs(
    (domain, op_type, opset): (&str, &str, i64),
    attrs: &Attributes,
    op: &dyn Operator,
    ins: &[Option<ValueId>],
    values: &[Value],
    out_types: &[TensorType],
) -> Option<Vec<Tensor>> {
    if domain.is_empty() && matches!(op_type, "Shape" | "Size") {
        let shape = values[ins.first().copied().flatten()?.0].ty.fixed_shape()?;
        crate::passes::shape_of(op_type, opset, attrs, &shape)
    } else {
        fold_small(op, ins, values, out_types)
    }
}

/// The inferred type and kind of output `slot`; an error when inference gave fewer outputs
/// than the node declares.
fn output_type(
    out_types: &[TensorType],
    out_kinds: &[ValueKind],
    slot: usize,
) -> Result<(TensorType, ValueKind), OpError> {
    let ty = out_types.get(slot).cloned().ok_or_else(|| {
        OpError::Invalid(format!(
            "node declares output #{slot} but the operator has {}",
            out_types.len()
        ))
    })?;
    let kind = out_kinds.get(slot).copied().ok_or_else(|| {
        OpError::Invalid(format!(
            "node declares output #{slot} but the operator gives {} kinds",
            out_kinds.len()
        ))
    })?;
    Ok((ty, kind))
}

/// Kahn's algorithm over names (node inputs and the captures of each node's subgraphs);
/// prefers the given order.
fn topo_order(
    nodes: &[NodeSpec],
    captures: &[Vec<String>],
    defined: &HashMap<String, ValueId>,
) -> Result<Vec<usize>, GraphError> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if defined.contains_key(o) || producer.insert(o.as_str(), i).is_some() {
                return Err(GraphError::DuplicateValue(o.clone()));
            }
        }
    }
    let mut pending = vec![0usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![vec![]; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let captured = captures.get(i).map(Vec::as_slice).unwrap_or(&[]);
        for inp in n.inputs.iter().chain(captured).filter(|s| !s.is_empty()) {
            if let Some(&p) = producer.get(inp.as_str()) {
                pending[i] += 1;
                dependents[p].push(i);
            } else if !defined.contains_key(inp) {
                return Err(GraphError::UndefinedValue {
                    node: n.name.clone(),
                    value: inp.clone(),
                });
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..nodes.len()).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &d in &dependents[i] {
            pending[d] -= 1;
            if pending[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if order.len() != nodes.len() {
        let stuck = (0..nodes.len())
            .find(|&i| pending[i] > 0)
            .map(|i| nodes[i].name.clone())
            .unwrap_or_default();
        return Err(GraphError::Cycle(stuck));
    }
    Ok(order)
}

impl Graph {
    /// All values, indexed by [`ValueId`].
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The value `id`.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    /// `x` when `v` is `Reshape(x, [1, s…])` of an `x` of static shape `[s…]`: a value viewed
    /// as a batch of one (as `FlattenBatchedMatMul` views a matrix beside a batch of them).
    pub fn batch_of_one_source(&self, v: ValueId) -> Option<ValueId> {
        let (p, _) = self.value(v).producer?;
        let node = &self.nodes[p.0];
        if node.op_type != "Reshape" || !node.domain.is_empty() {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        let (outer, inner) = (
            self.value(v).ty.fixed_shape()?,
            self.value(x).ty.fixed_shape()?,
        );
        (outer.len() == inner.len() + 1 && outer[0] == 1 && outer[1..] == inner[..]).then_some(x)
    }

    /// Nodes in topological order, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Runtime inputs (initializers excluded), in declaration order.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// Graph outputs, in declaration order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// For a subgraph: the value bound to each of the owning node's captures (`None` where
    /// the subgraph defines that name itself and does not read the outer value). Empty for a
    /// top-level graph.
    pub fn captures(&self) -> &[Option<ValueId>] {
        &self.captures
    }

    /// Initializers (weights) as (value, tensor).
    pub fn initializers(&self) -> impl Iterator<Item = (ValueId, &Tensor)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.initializer.as_ref().map(|t| (ValueId(i), t)))
    }

    /// Takes the nodes out, leaving none; values keep their producers and users until
    /// [`Graph::with_nodes`] sets the nodes again.
    pub(crate) fn take_nodes(&mut self) -> Vec<Node> {
        std::mem::take(&mut self.nodes)
    }

    /// Replaces the node list (the rewrite primitive every pass uses): checks that `nodes`
    /// are in topological order over this graph's values and recomputes producers and use
    /// lists. Values no node defines any more stay in the table but are unreachable.
    pub fn with_nodes(mut self, nodes: Vec<Node>) -> Result<Graph, GraphError> {
        let mut defined: Vec<bool> = self.values.iter().map(|v| v.producer.is_none()).collect();
        // Values produced by removed nodes become undefined.
        for v in &mut self.values {
            v.users.clear();
            v.producer = None;
        }
        for (ni, n) in nodes.iter().enumerate() {
            for (slot, i) in n.inputs.iter().enumerate() {
                let Some(id) = i else { continue };
                if !defined.get(id.0).copied().unwrap_or(false) {
                    return Err(GraphError::UndefinedValue {
                        node: n.name.clone(),
                        value: self
                            .values
                            .get(id.0)
                            .map(|v| v.name.clone())
                            .unwrap_or_default(),
                    });
                }
                self.values[id.0].users.push((NodeId(ni), slot));
            }
            for (slot, o) in n.outputs.iter().enumerate() {
                let Some(id) = o else { continue };
                if id.0 >= self.values.len() || self.values[id.0].producer.is_some() {
                    return Err(GraphError::DuplicateValue(
                        self.values
                            .get(id.0)
                            .map(|v| v.name.clone())
                            .unwrap_or_default(),
                    ));
                }
                self.values[id.0].producer = Some((NodeId(ni), slot));
                defined[id.0] = true;
            }
        }
        for o in &self.outputs {
            let v = &self.values[o.0];
            let is_source = v.initializer.is_some()
                || self.inputs.contains(o)
                || self.captures.contains(&Some(*o));
            if v.producer.is_none() && !is_source {
                return Err(GraphError::UndefinedOutput(v.name.clone()));
            }
        }
        self.nodes = nodes;
        Ok(self)
    }

    /// This graph with runtime input `i` of type `input_types[i]` and every node's output
    /// types, kinds and import-time constants inferred again, in node order, by the node's
    /// own operator: what rebuilding the graph through [`GraphBuilder`] with those input types
    /// gives, without looking up or building operators. `None` when a node holds a subgraph
    /// (its operator is instantiated for its input types: only a rebuild does that) or the
    /// graph reads an outer scope. Requires nodes in topological order (every built graph's).
    pub(crate) fn with_inputs_reinferred(
        &self,
        input_types: &[TensorType],
    ) -> Option<Result<Graph, GraphError>> {
        let has_subgraphs = self.nodes.iter().any(|n| {
            n.attrs
                .iter()
                .any(|(_, a)| matches!(a, Attribute::GraphDef(_)))
        });
        if has_subgraphs || !self.captures.is_empty() || input_types.len() != self.inputs.len() {
            return None;
        }
        let mut graph = self.clone();
        for (&id, ty) in graph.inputs.iter().zip(input_types) {
            graph.values[id.0].ty = ty.clone();
        }
        let Graph { values, nodes, .. } = &mut graph;
        for node in nodes.iter() {
            if let Err(e) = reinfer_node(node, values) {
                return Some(Err(e));
            }
        }
        Some(Ok(graph))
    }

    /// Binds every symbolic dimension of the runtime inputs to the sizes in `given`
    /// (`(input value, actual shape)`). Fails with a description on conflict.
    pub fn bind_symbols(
        &self,
        given: &[(ValueId, &[usize])],
    ) -> Result<HashMap<Arc<str>, usize>, String> {
        let mut env: HashMap<Arc<str>, usize> = HashMap::new();
        for (id, shape) in given {
            let Some(dims) = &self.values[id.0].ty.shape else {
                continue;
            };
            for (d, &n) in dims.iter().zip(shape.iter()) {
                if let Dim::Symbol(s) = d {
                    if let Some(&prev) = env.get(s) {
                        if prev != n {
                            return Err(format!(
                                "dimension `{s}` is {prev} in one input and {n} in `{}`",
                                self.values[id.0].name
                            ));
                        }
                    } else {
                        env.insert(s.clone(), n);
                    }
                }
            }
        }
        Ok(env)
    }
}

/// Value-table growth for graph rewrites (see `passes::rewrite`). The value table only grows;
/// [`Graph::with_nodes`] then decides which values nodes define.
impl Graph {
    /// Adds a value that no node defines yet, for the output of a node that the next
    /// [`Graph::with_nodes`] introduces. Until a node defines it, nothing may read it.
    pub fn add_value(&mut self, name: impl Into<String>, ty: TensorType) -> ValueId {
        let id = ValueId(self.values.len());
        self.values.push(Value {
            name: name.into(),
            ty,
            kind: ValueKind::Tensor,
            producer: None,
            users: vec![],
            initializer: None,
            known: None,
        });
        id
    }

    /// Adds an initializer (a constant weight) and returns its value.
    pub fn add_initializer(&mut self, name: impl Into<String>, tensor: Tensor) -> ValueId {
        let id = ValueId(self.values.len());
        self.values.push(Value {
            name: name.into(),
            ty: TensorType::fixed(tensor.dtype(), tensor.shape()),
            kind: ValueKind::Tensor,
            producer: None,
            users: vec![],
            initializer: Some(tensor.clone()),
            known: Some(tensor),
        });
        id
    }

    /// Replaces the tensor of initializer `id` (and the shape-inference copy of it) by
    /// `tensor`, which must have the same dtype and shape (the same elements, in another
    /// storage); returns whether it did (`false`: `id` is no initializer, or the type differs).
    pub fn replace_initializer(&mut self, id: ValueId, tensor: Tensor) -> bool {
        let Some(v) = self.values.get_mut(id.0) else {
            return false;
        };
        let Some(old) = &v.initializer else {
            return false;
        };
        if old.dtype() != tensor.dtype() || old.shape() != tensor.shape() {
            return false;
        }
        if v.known.as_ref().is_some_and(|k| k.same_storage(old)) {
            v.known = Some(tensor.clone());
        }
        v.initializer = Some(tensor);
        true
    }

    /// Drops the tensors of initializers that no node reads and no graph output names, so
    /// [`Graph::initializers`] lists only weights the graph still needs. Use lists must be
    /// current (they are after [`Graph::with_nodes`]).
    pub fn prune_initializers(&mut self) {
        for (i, v) in self.values.iter_mut().enumerate() {
            if v.initializer.is_some() && v.users.is_empty() && !self.outputs.contains(&ValueId(i))
            {
                v.initializer = None;
                v.known = None;
            }
        }
    }
}
