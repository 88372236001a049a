//! Binding a graph's runtime inputs to concrete shapes: the graph a backend compiles for one
//! set of input shapes, with every symbolic dimension replaced by its size and every type
//! and import-time constant inferred again, so shape computations (`Shape` → `Gather` →
//! `Concat` → `Reshape`) fold to constants and every later decision sees concrete shapes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph::{Graph, GraphBuilder, GraphError, NodeSpec};
use crate::registry::Registry;
use crate::shape::{Dim, TensorType};
use crate::value::ValueKind;

/// Input shapes that contradict the graph, or a graph that its bound shapes make invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    #[error("{given} input shapes given for {expected} runtime inputs")]
    Count { expected: usize, given: usize },
    #[error(
        "input `{input}`: the model declares rank {expected} ({declared}), given shape {given:?}"
    )]
    Rank {
        input: String,
        expected: usize,
        declared: String,
        given: Vec<usize>,
    },
    #[error(
        "input `{input}`: dimension {axis} is fixed at {expected} in the model, given {given}"
    )]
    Fixed {
        input: String,
        axis: usize,
        expected: usize,
        given: usize,
    },
    #[error(
        "input `{input}`: dimension {axis} (`{symbol}`) is {given}, but {previous} in input `{other}`"
    )]
    Symbol {
        input: String,
        axis: usize,
        symbol: String,
        given: usize,
        previous: usize,
        other: String,
    },
    /// Inference rejects the bound shapes (for example a sequence longer than a position
    /// table): the input shapes, the node and its reason.
    #[error("with input shapes {shapes}: {source}")]
    Graph {
        /// `name=[d, …]` for every runtime input, comma-separated.
        shapes: String,
        #[source]
        source: Box<GraphError>,
    },
}

impl Graph {
    /// A [`BindError::Graph`] for `source`, naming the input shapes `shapes` (one per runtime
    /// input, in input order) it arose with.
    pub fn bind_error(&self, shapes: &[Vec<usize>], source: GraphError) -> BindError {
        let shapes = self
            .inputs()
            .iter()
            .zip(shapes)
            .map(|(&id, s)| format!("{}={s:?}", self.value(id).name))
            .collect::<Vec<_>>()
            .join(", ");
        BindError::Graph {
            shapes,
            source: Box::new(source),
        }
    }
}

impl Graph {
    /// Whether every runtime tensor input has a known rank and only fixed dimensions.
    pub fn has_static_inputs(&self) -> bool {
        self.inputs().iter().all(|&id| {
            let v = self.value(id);
            v.kind != ValueKind::Tensor || v.ty.fixed_shape().is_some()
        })
    }

    /// Checks `shapes` (one per runtime input, in input order) against the inputs' declared
    /// shapes without rebuilding the graph: the count, each tensor input's rank, its fixed
    /// dimensions, and every symbolic dimension equal wherever it recurs. The errors are
    /// [`Graph::with_input_shapes`]'s, naming the input and the dimension.
    pub fn check_input_shapes(&self, shapes: &[Vec<usize>]) -> Result<(), BindError> {
        self.bound_input_types(shapes).map(drop)
    }

    /// This graph with runtime input `i` fixed at `shapes[i]` (one entry per input, in input
    /// order; ignored for sequence and optional inputs), every type and import-time constant
    /// inferred again. Nodes without subgraphs keep their operators (inferred again in place,
    /// without a registry); a graph with subgraphs is rebuilt with operators
    /// from `registry` ([`Graph::rebuilt_with_input_shapes`]), which then must build every
    /// node from its domain, type, opset and attributes (an imported graph; graph passes may
    /// add internal operators that it does not). Promises: the same inputs, outputs, node
    /// names and initializers (shared, not copied); an error naming the input and the
    /// dimension when a shape contradicts a fixed dimension or a symbol bound by another
    /// input, and naming the node when inference rejects the bound shapes.
    pub fn with_input_shapes(
        &self,
        shapes: &[Vec<usize>],
        registry: &Registry,
    ) -> Result<Graph, BindError> {
        let input_types = self.bound_input_types(shapes)?;
        match self.with_inputs_reinferred(&input_types) {
            Some(bound) => bound.map_err(|e| self.bind_error(shapes, e)),
            None => self.rebuilt(input_types, registry, shapes),
        }
    }

    /// What [`Graph::with_input_shapes`] gives, always by rebuilding the graph through
    /// [`GraphBuilder`] with operators from `registry` (same requirements and promises).
    pub fn rebuilt_with_input_shapes(
        &self,
        shapes: &[Vec<usize>],
        registry: &Registry,
    ) -> Result<Graph, BindError> {
        let input_types = self.bound_input_types(shapes)?;
        self.rebuilt(input_types, registry, shapes)
    }

    /// The type of each runtime input at `shapes`, checked against its declaration.
    fn bound_input_types(&self, shapes: &[Vec<usize>]) -> Result<Vec<TensorType>, BindError> {
        if shapes.len() != self.inputs().len() {
            return Err(BindError::Count {
                expected: self.inputs().len(),
                given: shapes.len(),
            });
        }
        let mut symbols: HashMap<Arc<str>, (usize, String)> = HashMap::new();
        let mut input_types = Vec::with_capacity(shapes.len());
        for (&id, shape) in self.inputs().iter().zip(shapes) {
            let v = self.value(id);
            input_types.push(match (&v.ty.shape, v.kind) {
                (Some(dims), ValueKind::Tensor) => {
                    check_dims(&v.name, dims, shape, &mut symbols)?;
                    TensorType::fixed(v.ty.dtype, shape)
                }
                (None, ValueKind::Tensor) => TensorType::fixed(v.ty.dtype, shape),
                // Sequences and optionals keep their element type; their shapes vary per run.
                _ => v.ty.clone(),
            });
        }
        Ok(input_types)
    }

    /// This graph rebuilt through [`GraphBuilder`] with runtime input `i` of type
    /// `input_types[i]`; errors name the input shapes `shapes`.
    fn rebuilt(
        &self,
        input_types: Vec<TensorType>,
        registry: &Registry,
        shapes: &[Vec<usize>],
    ) -> Result<Graph, BindError> {
        let mut builder = GraphBuilder::new(self.name.clone());
        for (&id, ty) in self.inputs().iter().zip(input_types) {
            let v = self.value(id);
            builder.input_of_kind(v.name.clone(), ty, v.kind);
        }
        for (id, tensor) in self.initializers() {
            builder.initializer(self.value(id).name.clone(), tensor.clone());
        }
        let name_of = |slot: &Option<crate::graph::ValueId>| {
            slot.map_or(String::new(), |id| self.value(id).name.clone())
        };
        for node in self.nodes() {
            let captures = crate::graph::node_free_names(&node.attrs).len();
            let declared = node.inputs.len().saturating_sub(captures);
            builder.node(NodeSpec {
                name: node.name.clone(),
                domain: node.domain.clone(),
                op_type: node.op_type.clone(),
                opset: node.opset,
                attrs: node.attrs.clone(),
                inputs: node.inputs[..declared].iter().map(name_of).collect(),
                outputs: node.outputs.iter().map(name_of).collect(),
            });
        }
        for &o in self.outputs() {
            builder.output(self.value(o).name.clone());
        }
        builder
            .build(registry)
            .map_err(|e| self.bind_error(shapes, e))
    }
}

/// Checks `shape`, given for input `input` declared with `dims`, and binds its symbols.
fn check_dims(
    input: &str,
    dims: &[Dim],
    shape: &[usize],
    symbols: &mut HashMap<Arc<str>, (usize, String)>,
) -> Result<(), BindError> {
    if dims.len() != shape.len() {
        return Err(BindError::Rank {
            input: input.to_string(),
            expected: dims.len(),
            declared: crate::shape::fmt_dims(dims),
            given: shape.to_vec(),
        });
    }
    for (axis, (dim, &given)) in dims.iter().zip(shape).enumerate() {
        match dim {
            Dim::Fixed(expected) if *expected != given => {
                return Err(BindError::Fixed {
                    input: input.to_string(),
                    axis,
                    expected: *expected,
                    given,
                })
            }
            Dim::Symbol(symbol) => match symbols.get(symbol) {
                Some((previous, other)) if *previous != given => {
                    return Err(BindError::Symbol {
                        input: input.to_string(),
                        axis,
                        symbol: symbol.to_string(),
                        given,
                        previous: *previous,
                        other: other.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    symbols.insert(symbol.clone(), (given, input.to_string()));
                }
            },
            _ => {}
        }
    }
    Ok(())
}
