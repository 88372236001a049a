//! Specialization of a graph for concrete input shapes: the concrete type of every value,
//! the values known before any run (weights and folded constants), and each node's compute
//! definition — or why it has none and runs on the host ([`HostReason`]).
//!
//! A node runs on the host only for a reason that no compute definition could remove: a
//! value that is not a tensor, a shape that depends on run-time data, a dtype without a
//! kernel type, or an operator that defines no computation for its inputs
//! ([`crate::Operator::compute`] returns `Ok(None)`). A compute definition that fails or
//! contradicts shape inference is an error of specialization naming the node
//! ([`SpecializeError::Compute`]), never a silent fall back to the host.

use crate::dtype::DType;
use crate::graph::{Graph, NodeId, ValueId};
use crate::operator::{ComputeDef, ComputeInput, InferInput};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use crate::value::ValueKind;

/// Nodes whose inputs are all known are evaluated at compile time when every output has at
/// most this many elements.
pub const FOLD_LIMIT: usize = 1 << 22;

/// Errors of specialization.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecializeError {
    /// An input shape was given for a value that is not a runtime input of the graph.
    #[error("value #{0} is not a runtime input of the graph")]
    NotAnInput(usize),
    /// A runtime input got no shape.
    #[error("no shape given for input `{0}`")]
    MissingInput(String),
    /// A node's shape inference rejects the concrete input types.
    #[error("node `{node}` ({op_type}): {reason}")]
    Node {
        node: String,
        op_type: String,
        reason: String,
    },
    /// A node's compute definition failed, or disagrees with its shape inference.
    #[error("node `{node}` ({op_type}): compute definition: {reason}")]
    Compute {
        node: String,
        op_type: String,
        reason: String,
    },
}

/// Why a node runs its reference `eval` on the host instead of a kernel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HostReason {
    /// The value is a sequence or an optional (kept in a host slot).
    NotATensor { value: String, kind: ValueKind },
    /// The value's shape depends on run-time data.
    DataDependentShape { value: String },
    /// The value's dtype has no kernel IR type (strings, float8, 4-bit integers).
    NoKernelType { value: String, dtype: DType },
    /// The operator defines no computation for these inputs
    /// ([`crate::Operator::compute`] returned `Ok(None)`).
    NoComputeDefinition,
}

impl HostReason {
    /// The kind of reason, without the value it names (for counting reasons across graphs).
    pub fn kind(&self) -> &'static str {
        match self {
            HostReason::NotATensor { .. } => "a sequence or optional value",
            HostReason::DataDependentShape { .. } => "a data-dependent shape",
            HostReason::NoKernelType { .. } => "a dtype without a kernel type",
            HostReason::NoComputeDefinition => "no compute definition",
        }
    }
}

impl std::fmt::Display for HostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostReason::NotATensor { value, kind } => {
                write!(f, "`{value}` is a {kind:?} value, kept on the host")
            }
            HostReason::DataDependentShape { value } => {
                write!(f, "`{value}` has a data-dependent shape")
            }
            HostReason::NoKernelType { value, dtype } => {
                write!(
                    f,
                    "`{value}` has the dtype {dtype}, which kernels do not compute on"
                )
            }
            HostReason::NoComputeDefinition => f.write_str("no compute definition"),
        }
    }
}

/// What specialization knows about one value.
#[derive(Debug, Clone)]
pub struct ValueInfo {
    pub dtype: DType,
    /// The concrete shape; `None` when it depends on run-time data (the value then lives on
    /// the host, and so does every node reading it).
    pub shape: Option<Vec<usize>>,
    /// The value itself when known before any run (initializers, folded constants).
    pub constant: Option<Tensor>,
}

impl ValueInfo {
    /// Bytes of the value when its shape is static and its elements have a byte encoding
    /// (strings have none: they live in host slots of a compiled graph).
    pub fn size_in_bytes(&self) -> Option<usize> {
        if self.dtype.is_string() {
            return None;
        }
        let n = crate::tensor::checked_numel(self.shape.as_ref()?)?;
        n.checked_mul(self.dtype.size_in_bytes())
    }
}

/// How a node of a specialized graph runs.
#[derive(Debug, Clone)]
pub enum NodeMode {
    /// Every output is known at compile time; the node never runs.
    Folded,
    /// Compiled from this compute definition.
    Compute(ComputeDef),
    /// Runs its reference `eval` on the host, for the stated reason.
    Host(HostReason),
}

/// A graph specialized for concrete input shapes (see the module docs).
#[derive(Debug, Clone)]
pub struct Specialization {
    /// Indexed by [`ValueId`]; values no node defines any more keep their graph type.
    pub values: Vec<ValueInfo>,
    /// Indexed by [`NodeId`].
    pub nodes: Vec<NodeMode>,
}

impl Specialization {
    /// Specializes `graph` for `inputs` (`(runtime input, shape)`, one per runtime input).
    ///
    /// Shape inference runs again with concrete types; nodes whose inputs are all known and
    /// whose outputs are small enough are folded ([`FOLD_LIMIT`]); every other node gets its
    /// compute definition when its input shapes are static and the operator provides one;
    /// the others run on the host for a [`HostReason`]. A failing or inconsistent compute
    /// definition is an error ([`SpecializeError::Compute`]).
    pub fn new(graph: &Graph, inputs: &[(ValueId, Vec<usize>)]) -> Result<Self, SpecializeError> {
        let mut values: Vec<ValueInfo> = graph
            .values()
            .iter()
            .map(|v| ValueInfo {
                dtype: v.ty.dtype,
                shape: v.initializer.as_ref().map(|t| t.shape().to_vec()),
                constant: v.initializer.clone(),
            })
            .collect();
        for (id, shape) in inputs {
            if !graph.inputs().contains(id) {
                return Err(SpecializeError::NotAnInput(id.0));
            }
            values[id.0].shape = Some(shape.clone());
        }
        for id in graph.inputs() {
            // Sequences and optionals have no static shape: they live in host slots.
            if graph.value(*id).kind != ValueKind::Tensor {
                values[id.0].shape = None;
            } else if values[id.0].shape.is_none() {
                return Err(SpecializeError::MissingInput(graph.value(*id).name.clone()));
            }
        }
        let mut nodes = Vec::with_capacity(graph.nodes().len());
        for index in 0..graph.nodes().len() {
            nodes.push(specialize_node(graph, NodeId(index), &mut values)?);
        }
        Ok(Specialization { values, nodes })
    }

    /// The value's info.
    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.0]
    }

    /// The static shape of `id`, if any.
    pub fn shape(&self, id: ValueId) -> Option<&[usize]> {
        self.values[id.0].shape.as_deref()
    }
}

/// A static input of a node: dtype, shape and known value.
type StaticInput<'a> = (DType, &'a [usize], Option<&'a Tensor>);

fn specialize_node(
    graph: &Graph,
    id: NodeId,
    values: &mut [ValueInfo],
) -> Result<NodeMode, SpecializeError> {
    let node = &graph.nodes()[id.0];
    let types: Vec<Option<TensorType>> = node
        .inputs
        .iter()
        .map(|i| {
            i.map(|v| {
                let info = &values[v.0];
                match &info.shape {
                    Some(s) => TensorType::fixed(info.dtype, s),
                    None => graph.value(v).ty.clone(),
                }
            })
        })
        .collect();
    let infer_inputs: Vec<Option<InferInput<'_>>> = node
        .inputs
        .iter()
        .zip(&types)
        .map(|(i, t)| {
            i.zip(t.as_ref()).map(|(v, ty)| InferInput {
                ty,
                value: values[v.0].constant.as_ref(),
            })
        })
        .collect();
    let out_types = node
        .op
        .infer(&infer_inputs)
        .map_err(|e| SpecializeError::Node {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            reason: e.to_string(),
        })?;
    drop(infer_inputs);
    for (slot, out) in node.outputs.iter().enumerate() {
        let Some(out) = out else { continue };
        if let Some(ty) = out_types.get(slot) {
            values[out.0].dtype = ty.dtype;
            // A sequence or optional has no static shape (its type is its elements').
            values[out.0].shape = if graph.value(*out).kind == ValueKind::Tensor {
                ty.fixed_shape()
            } else {
                None
            };
        }
    }

    let all_known = node
        .inputs
        .iter()
        .flatten()
        .all(|v| values[v.0].constant.is_some());
    let small = node.outputs.iter().flatten().all(|o| {
        values[o.0]
            .shape
            .as_ref()
            .and_then(|s| crate::tensor::checked_numel(s))
            .is_some_and(|n| n <= FOLD_LIMIT)
    });
    let keep = node.hints.keep_layout;
    if all_known && small && !keep && node.outputs.iter().flatten().next().is_some() {
        let args: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|v| values[v.0].constant.as_ref()))
            .collect();
        if let Ok(outs) = node.op.eval(&args) {
            let consistent = node.outputs.iter().enumerate().all(|(slot, o)| match o {
                None => true,
                Some(o) => outs.get(slot).is_some_and(|t| {
                    t.dtype() == values[o.0].dtype
                        && values[o.0].shape.as_deref() == Some(t.shape())
                }),
            });
            if consistent {
                for (slot, o) in node.outputs.iter().enumerate() {
                    if let (Some(o), Some(t)) = (o, outs.get(slot)) {
                        values[o.0].constant = Some(t.clone());
                    }
                }
                return Ok(NodeMode::Folded);
            }
        }
    }

    if let Some(v) = node
        .inputs
        .iter()
        .chain(&node.outputs)
        .flatten()
        .find(|v| graph.value(**v).kind != ValueKind::Tensor)
    {
        return Ok(NodeMode::Host(HostReason::NotATensor {
            value: graph.value(*v).name.clone(),
            kind: graph.value(*v).kind,
        }));
    }
    let mut shapes: Vec<Option<StaticInput<'_>>> = Vec::new();
    for i in &node.inputs {
        match i {
            None => shapes.push(None),
            Some(v) => match &values[v.0].shape {
                Some(s) => shapes.push(Some((values[v.0].dtype, s, values[v.0].constant.as_ref()))),
                None => {
                    return Ok(NodeMode::Host(HostReason::DataDependentShape {
                        value: graph.value(*v).name.clone(),
                    }))
                }
            },
        }
    }
    if let Some(o) = node
        .outputs
        .iter()
        .flatten()
        .find(|o| values[o.0].shape.is_none())
    {
        return Ok(NodeMode::Host(HostReason::DataDependentShape {
            value: graph.value(*o).name.clone(),
        }));
    }
    if let Some(v) = node
        .inputs
        .iter()
        .chain(&node.outputs)
        .flatten()
        .find(|v| !values[v.0].dtype.has_kernel_type())
    {
        return Ok(NodeMode::Host(HostReason::NoKernelType {
            value: graph.value(*v).name.clone(),
            dtype: values[v.0].dtype,
        }));
    }
    let compute_inputs: Vec<Option<ComputeInput<'_>>> = shapes
        .iter()
        .map(|s| {
            s.map(|(dtype, shape, value)| ComputeInput {
                dtype,
                shape,
                value,
            })
        })
        .collect();
    let failed = |reason: String| SpecializeError::Compute {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        reason,
    };
    match node.op.compute(&compute_inputs) {
        Ok(Some(def)) => {
            check_def(&def, node, values).map_err(failed)?;
            Ok(NodeMode::Compute(def))
        }
        Ok(None) => Ok(NodeMode::Host(HostReason::NoComputeDefinition)),
        Err(e) => Err(failed(e.to_string())),
    }
}

/// Checks the [`crate::Operator::compute`] contract against the specialized types: a
/// definition that disagrees with inference is an error, never compiled.
fn check_def(
    def: &ComputeDef,
    node: &crate::graph::Node,
    values: &[ValueInfo],
) -> Result<(), String> {
    def.validate()
        .map_err(|e| format!("invalid compute definition: {e}"))?;
    if def.inputs.len() < node.inputs.iter().filter(|i| i.is_some()).count()
        || def.outputs.len() < node.outputs.iter().filter(|o| o.is_some()).count()
    {
        return Err("compute definition has too few inputs or outputs".to_string());
    }
    let matches = |var: &hidet_ir::expr::Var, info: &ValueInfo| -> bool {
        let Some(t) = var.ty().as_tensor() else {
            return false;
        };
        let Some(shape) = t.layout.const_shape() else {
            return false;
        };
        let want = info.shape.as_deref().unwrap_or(&[]);
        t.dtype == info.dtype.to_ir()
            && shape.len() == want.len()
            && shape
                .iter()
                .zip(want)
                .all(|(a, b)| usize::try_from(*a) == Ok(*b))
    };
    for (slot, v) in node.inputs.iter().enumerate() {
        if let Some(v) = v {
            if !def
                .inputs
                .get(slot)
                .is_some_and(|var| matches(var, &values[v.0]))
            {
                return Err(format!(
                    "compute definition input #{slot} has the wrong type"
                ));
            }
        }
    }
    for (slot, v) in node.outputs.iter().enumerate() {
        if let Some(v) = v {
            if !def
                .outputs
                .get(slot)
                .is_some_and(|var| matches(var, &values[v.0]))
            {
                return Err(format!(
                    "compute definition output #{slot} has the wrong type"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Attributes;
    use crate::graph::{GraphBuilder, NodeSpec};
    use crate::operator::{OpError, Operator};
    use crate::registry::Registry;

    /// An identity whose compute definition is `compute` (`eval` copies its input).
    #[derive(Debug)]
    struct Copy {
        compute: Result<(), &'static str>,
    }

    impl Operator for Copy {
        fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
            let x = inputs
                .first()
                .copied()
                .flatten()
                .ok_or(OpError::MissingInput(0))?;
            Ok(vec![x.ty.clone()])
        }

        fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
            let x = inputs
                .first()
                .copied()
                .flatten()
                .ok_or(OpError::MissingInput(0))?;
            Ok(vec![x.clone()])
        }

        fn compute(&self, _: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
            match self.compute {
                Ok(()) => Ok(None),
                Err(why) => Err(OpError::Invalid(why.to_string())),
            }
        }
    }

    /// `x: f32[2] → op_type → y`, with `Opaque` (no compute definition) and `Broken` (a
    /// failing one) registered.
    fn graph(op_type: &str) -> Graph {
        let mut r = Registry::new();
        r.register("", "Opaque", 1..=30, |_| {
            Ok(Box::new(Copy { compute: Ok(()) }))
        });
        r.register("", "Broken", 1..=30, |_| {
            Ok(Box::new(Copy {
                compute: Err("no rule for this layout"),
            }))
        });
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(DType::F32, &[2]));
        b.node(NodeSpec {
            name: "the_node".into(),
            domain: String::new(),
            op_type: op_type.into(),
            opset: 17,
            attrs: Attributes::new(),
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
        });
        b.output("y");
        b.build(&r).expect("the graph builds")
    }

    #[test]
    fn no_compute_definition_runs_on_the_host() {
        let g = graph("Opaque");
        let spec = Specialization::new(&g, &[(g.inputs()[0], vec![2])]).expect("specializes");
        assert!(matches!(
            spec.nodes[..],
            [NodeMode::Host(HostReason::NoComputeDefinition)]
        ));
    }

    #[test]
    fn a_failing_compute_definition_is_an_error_naming_the_node() {
        let g = graph("Broken");
        let e = Specialization::new(&g, &[(g.inputs()[0], vec![2])]).unwrap_err();
        assert_eq!(
            e,
            SpecializeError::Compute {
                node: "the_node".into(),
                op_type: "Broken".into(),
                reason: "no rule for this layout".into(),
            }
        );
        assert!(e.to_string().contains("`the_node` (Broken)"), "{e}");
    }
}
