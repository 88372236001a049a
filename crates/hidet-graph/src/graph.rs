//! The graph IR: values, nodes in topological order, use lists, named inputs and outputs.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::attribute::Attributes;
use crate::operator::{InferInput, OpContext, OpError, Operator};
use crate::registry::{normalize_domain, Registry};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

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
    /// Building or inferring an operator failed.
    #[error("node `{node}` ({op_type}): {source}")]
    Node {
        node: String,
        op_type: String,
        source: OpError,
    },
}

/// A value: a graph input, an initializer, or a node output.
#[derive(Debug, Clone)]
pub struct Value {
    pub name: String,
    /// Static type from inference (or the declaration, for graph inputs).
    pub ty: TensorType,
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
}

/// A computation graph. Invariants (established by [`GraphBuilder::build`] and kept by
/// [`Graph::with_nodes`]): nodes are in topological order, every node input is a graph input,
/// an initializer or an output of an earlier node, and `producer`/`users` are exact.
#[derive(Debug, Clone)]
pub struct Graph {
    pub name: String,
    values: Vec<Value>,
    nodes: Vec<Node>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
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
/// shape inference) in [`GraphBuilder::build`].
#[derive(Debug, Default)]
pub struct GraphBuilder {
    pub name: String,
    inputs: Vec<(String, TensorType)>,
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

    /// Declares a runtime input.
    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        self.inputs.push((name.into(), ty));
        self
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
        // 1. Every unsupported operator, with counts.
        let mut missing: Vec<UnsupportedOp> = Vec::new();
        for n in &self.nodes {
            let domain = normalize_domain(&n.domain);
            if registry.lookup(domain, &n.op_type, n.opset).is_none() {
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
                producer: None,
                users: vec![],
                initializer: Some(t.clone()),
                known: Some(t),
            });
        }
        for (name, ty) in self.inputs {
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
                producer: None,
                users: vec![],
                initializer: None,
                known: None,
            });
            inputs.push(id);
        }

        // 3. Topological order (stable: keeps the given order where it is valid).
        let order = topo_order(&self.nodes, &by_name)?;

        // 4. Nodes, values, operators and inference.
        let mut nodes: Vec<Node> = Vec::with_capacity(order.len());
        let mut specs: Vec<Option<NodeSpec>> = self.nodes.into_iter().map(Some).collect();
        for idx in order {
            let Some(spec) = specs[idx].take() else {
                unreachable!("topo_order yields each node once")
            };
            let nid = NodeId(nodes.len());
            let node_err = |source: OpError| GraphError::Node {
                node: spec.name.clone(),
                op_type: spec.op_type.clone(),
                source,
            };
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
            let domain = normalize_domain(&spec.domain).to_string();
            let ctx = OpContext {
                domain: &domain,
                op_type: &spec.op_type,
                opset: spec.opset,
                attrs: &spec.attrs,
                num_inputs: spec.inputs.len(),
                num_outputs: spec.outputs.len(),
            };
            let Some(schema) = registry.lookup(&domain, &spec.op_type, spec.opset) else {
                unreachable!("step 1 checked every node has a registration")
            };
            let op: Arc<dyn Operator> = Arc::from(schema.build(&ctx).map_err(node_err)?);
            let in_info: Vec<Option<InferInput<'_>>> = ins
                .iter()
                .map(|i| {
                    i.map(|id: ValueId| InferInput {
                        ty: &values[id.0].ty,
                        value: values[id.0].known.as_ref(),
                    })
                })
                .collect();
            let out_types = op.infer(&in_info).map_err(node_err)?;
            let known = fold_small(op.as_ref(), &ins, &values);
            let mut outs = Vec::with_capacity(spec.outputs.len());
            for (slot, name) in spec.outputs.iter().enumerate() {
                if name.is_empty() {
                    outs.push(None);
                    continue;
                }
                if by_name.contains_key(name) {
                    return Err(GraphError::DuplicateValue(name.clone()));
                }
                let ty = out_types.get(slot).cloned().ok_or_else(|| {
                    node_err(OpError::Invalid(format!(
                        "node declares output #{slot} but the operator has {}",
                        out_types.len()
                    )))
                })?;
                let id = ValueId(values.len());
                by_name.insert(name.clone(), id);
                values.push(Value {
                    name: name.clone(),
                    ty,
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
            });
        }
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
        })
    }
}

/// Evaluates a node at import time if all its inputs are known and small (for inference).
fn fold_small(op: &dyn Operator, ins: &[Option<ValueId>], values: &[Value]) -> Option<Vec<Tensor>> {
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

/// Kahn's algorithm over names; prefers the given order.
fn topo_order(
    nodes: &[NodeSpec],
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
        for inp in n.inputs.iter().filter(|s| !s.is_empty()) {
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

    /// Initializers (weights) as (value, tensor).
    pub fn initializers(&self) -> impl Iterator<Item = (ValueId, &Tensor)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.initializer.as_ref().map(|t| (ValueId(i), t)))
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
            let is_source = v.initializer.is_some() || self.inputs.contains(o);
            if v.producer.is_none() && !is_source {
                return Err(GraphError::UndefinedOutput(v.name.clone()));
            }
        }
        self.nodes = nodes;
        Ok(self)
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
            producer: None,
            users: vec![],
            initializer: Some(tensor.clone()),
            known: Some(tensor),
        });
        id
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
