//! The reference executor: runs a graph node by node with the operators' `eval`.

use crate::dtype::DType;
use crate::graph::{Graph, Value, ValueId};
use crate::operator::OpError;
use crate::shape::{fmt_dims, Dim};
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

/// Errors of a graph execution. Input errors name the input and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("missing input `{0}`")]
    MissingInput(String),
    #[error("`{0}` is not an input of the model")]
    UnknownInput(String),
    #[error("input `{name}`: expected dtype {expected}, given {given}")]
    WrongDType {
        name: String,
        expected: DType,
        given: DType,
    },
    #[error("input `{name}`: expected shape {expected}, given {given:?}")]
    WrongShape {
        name: String,
        expected: String,
        given: Vec<usize>,
    },
    /// A named dimension has different sizes in different inputs.
    #[error("inconsistent inputs: {0}")]
    SymbolConflict(String),
    #[error("node `{node}` ({op_type}): {source}")]
    Node {
        node: String,
        op_type: String,
        source: OpError,
    },
    /// A subgraph was given another number of inputs or captures than it declares.
    #[error("graph `{graph}` takes {expected} {what}, given {given}")]
    Arity {
        graph: String,
        what: &'static str,
        expected: usize,
        given: usize,
    },
    /// An input or output is of another kind (tensor, sequence, optional) than the graph
    /// declares, or a tensor was asked of a value that is not one.
    #[error("`{name}`: expected a {expected}, given {given}")]
    WrongKind {
        name: String,
        expected: ValueKind,
        given: String,
    },
    /// An operator's result contradicts its own shape inference (an operator bug).
    #[error("node `{node}` ({op_type}): output #{slot} is {given} but inference said {expected}")]
    InferenceMismatch {
        node: String,
        op_type: String,
        slot: usize,
        expected: String,
        given: String,
    },
}

/// Checks `inputs` against the graph's declared inputs: every input present, no unknown
/// names, dtypes equal, ranks and fixed dimensions equal, symbolic dimensions consistent.
pub fn check_inputs(graph: &Graph, inputs: &[(String, Tensor)]) -> Result<(), ExecError> {
    let data: Vec<(String, Datum)> = inputs
        .iter()
        .map(|(n, t)| (n.clone(), Datum::Tensor(t.clone())))
        .collect();
    check_input_data(graph, &data)
}

/// [`check_inputs`] for inputs of any kind: each must be of its input's kind, and every tensor
/// inside a sequence or optional must have the declared dtype.
pub fn check_input_data(graph: &Graph, inputs: &[(String, Datum)]) -> Result<(), ExecError> {
    let declared: Vec<InputDecl<'_>> = graph
        .inputs()
        .iter()
        .map(|&id| InputDecl::of(graph.value(id)))
        .collect();
    let tensors = match_inputs(&declared, inputs)?;
    let given: Vec<(ValueId, &[usize])> = tensors
        .into_iter()
        .map(|(i, t)| (graph.inputs()[i], t.shape()))
        .collect();
    graph
        .bind_symbols(&given)
        .map_err(ExecError::SymbolConflict)?;
    Ok(())
}

/// The shape a graph input is declared with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DeclaredShape<'a> {
    /// Any shape (an unknown rank).
    Any,
    /// No shape: no tensor fits (a compiled value whose shape was never made concrete).
    Unknown,
    /// Fixed or symbolic dimensions (symbols are bound by the caller).
    Dims(&'a [Dim]),
    /// Concrete sizes (a graph compiled for one set of input shapes).
    Sizes(&'a [usize]),
}

/// What a graph input is declared as.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputDecl<'a> {
    pub name: &'a str,
    pub kind: ValueKind,
    pub dtype: DType,
    pub shape: DeclaredShape<'a>,
}

impl<'a> InputDecl<'a> {
    /// The declaration of graph value `v`.
    fn of(v: &'a Value) -> InputDecl<'a> {
        InputDecl {
            name: &v.name,
            kind: v.kind,
            dtype: v.ty.dtype,
            shape: v
                .ty
                .shape
                .as_deref()
                .map_or(DeclaredShape::Any, DeclaredShape::Dims),
        }
    }
}

/// Matches named `inputs` with the `declared` inputs (the one input check of both
/// executors): no unknown names, every declared input present, each of its declared kind,
/// every tensor (also those inside a sequence or optional) of the declared dtype, and a
/// tensor input of the declared rank, fixed dimensions and sizes. Returns `(index in
/// declared, tensor)` for every tensor input, in declared order.
pub(crate) fn match_inputs<'d>(
    declared: &[InputDecl<'_>],
    inputs: &'d [(String, Datum)],
) -> Result<Vec<(usize, &'d Tensor)>, ExecError> {
    if let Some((n, _)) = inputs
        .iter()
        .find(|(n, _)| !declared.iter().any(|d| d.name == n))
    {
        return Err(ExecError::UnknownInput(n.clone()));
    }
    let mut tensors = Vec::new();
    for (i, decl) in declared.iter().enumerate() {
        let d = inputs
            .iter()
            .find(|(n, _)| n == decl.name)
            .map(|(_, d)| d)
            .ok_or_else(|| ExecError::MissingInput(decl.name.to_string()))?;
        if let Some(t) = check_input(decl, d)? {
            tensors.push((i, t));
        }
    }
    Ok(tensors)
}

/// Checks `d`, given for the input `decl`: its kind, its dtype (every tensor of a sequence or
/// optional), and for a tensor its rank and fixed dimensions. Returns the tensor when `d`
/// is one.
fn check_input<'d>(decl: &InputDecl<'_>, d: &'d Datum) -> Result<Option<&'d Tensor>, ExecError> {
    if !d.is_kind(decl.kind) {
        return Err(ExecError::WrongKind {
            name: decl.name.to_string(),
            expected: decl.kind,
            given: d.describe(),
        });
    }
    if let Some(t) = d.tensors().into_iter().find(|t| t.dtype() != decl.dtype) {
        return Err(ExecError::WrongDType {
            name: decl.name.to_string(),
            expected: decl.dtype,
            given: t.dtype(),
        });
    }
    let Datum::Tensor(t) = d else {
        return Ok(None);
    };
    let (fits, expected) = match decl.shape {
        DeclaredShape::Any => (true, String::new()),
        DeclaredShape::Unknown => (false, "unknown".to_string()),
        DeclaredShape::Dims(dims) => (
            dims.len() == t.rank()
                && dims
                    .iter()
                    .zip(t.shape())
                    .all(|(d, &n)| !matches!(d, Dim::Fixed(f) if *f != n)),
            fmt_dims(dims),
        ),
        DeclaredShape::Sizes(sizes) => (sizes == t.shape(), format!("{sizes:?}")),
    };
    if !fits {
        return Err(ExecError::WrongShape {
            name: decl.name.to_string(),
            expected,
            given: t.shape().to_vec(),
        });
    }
    Ok(Some(t))
}

/// Runs `graph` on named inputs with the reference implementations and returns every graph
/// output as (name, tensor), in the graph's output order. Intermediate values are dropped
/// after their last use.
pub fn run_reference(
    graph: &Graph,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, ExecError> {
    into_tensors(run_reference_data(graph, &as_data(inputs))?)
}

/// Named tensors as named data (the form every `run_data` takes).
pub(crate) fn as_data(inputs: &[(String, Tensor)]) -> Vec<(String, Datum)> {
    inputs
        .iter()
        .map(|(n, t)| (n.clone(), Datum::Tensor(t.clone())))
        .collect()
}

/// Named outputs that must all be tensors (what every tensor-only `run` returns); a sequence
/// or optional among them is [`ExecError::WrongKind`] naming it.
pub(crate) fn into_tensors(
    outputs: Vec<(String, Datum)>,
) -> Result<Vec<(String, Tensor)>, ExecError> {
    outputs
        .into_iter()
        .map(|(name, d)| match d {
            Datum::Tensor(t) => Ok((name, t)),
            other => Err(ExecError::WrongKind {
                name,
                expected: ValueKind::Tensor,
                given: other.describe(),
            }),
        })
        .collect()
}

/// [`run_reference`] for inputs and outputs of any kind (tensors, sequences, optionals).
pub fn run_reference_data(
    graph: &Graph,
    inputs: &[(String, Datum)],
) -> Result<Vec<(String, Datum)>, ExecError> {
    check_input_data(graph, inputs)?;
    let mut slots: Vec<Option<Datum>> = vec![None; graph.values().len()];
    for (name, t) in inputs {
        if let Some(&id) = graph
            .inputs()
            .iter()
            .find(|id| graph.value(**id).name == *name)
        {
            slots[id.0] = Some(t.clone());
        }
    }
    let outs = execute(graph, slots, Evaluation::Reference)?;
    Ok(graph
        .outputs()
        .iter()
        .map(|&id| graph.value(id).name.clone())
        .zip(outs)
        .collect())
}

/// Runs a subgraph with positional `inputs` (one per [`Graph::inputs`]) and `captures` (one
/// per [`Graph::captures`], the owning node's trailing inputs) and returns its outputs in
/// order. Each input must have the declared dtype and the declared fixed dimensions.
pub fn run_graph(
    graph: &Graph,
    inputs: &[&Tensor],
    captures: &[&Tensor],
) -> Result<Vec<Tensor>, ExecError> {
    let ins: Vec<Datum> = inputs.iter().map(|&t| Datum::Tensor(t.clone())).collect();
    let caps: Vec<Datum> = captures.iter().map(|&t| Datum::Tensor(t.clone())).collect();
    let ins: Vec<&Datum> = ins.iter().collect();
    let caps: Vec<&Datum> = caps.iter().collect();
    run_graph_data(graph, &ins, &caps)?
        .into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            Datum::Tensor(t) => Ok(t),
            other => Err(ExecError::WrongKind {
                name: graph
                    .outputs()
                    .get(i)
                    .map(|&o| graph.value(o).name.clone())
                    .unwrap_or_default(),
                expected: ValueKind::Tensor,
                given: other.describe(),
            }),
        })
        .collect()
}

/// How the nodes of a graph are evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluation {
    /// The reference: every operator's [`Operator::eval_data`](crate::Operator::eval_data).
    Reference,
    /// As a compiled model's host steps: [`Operator::eval_host`](crate::Operator::eval_host)
    /// (a subgraph of a control-flow node that runs on the host).
    Host,
}

/// [`run_graph`] for inputs, captures and outputs of any kind.
pub fn run_graph_data(
    graph: &Graph,
    inputs: &[&Datum],
    captures: &[&Datum],
) -> Result<Vec<Datum>, ExecError> {
    run_graph_data_as(graph, inputs, captures, Evaluation::Reference)
}

/// [`run_graph_data`] with the nodes evaluated as `evaluation` says.
pub fn run_graph_data_as(
    graph: &Graph,
    inputs: &[&Datum],
    captures: &[&Datum],
    evaluation: Evaluation,
) -> Result<Vec<Datum>, ExecError> {
    let arity = |what, expected: usize, given: usize| -> Result<(), ExecError> {
        if expected == given {
            Ok(())
        } else {
            Err(ExecError::Arity {
                graph: graph.name.clone(),
                what,
                expected,
                given,
            })
        }
    };
    arity("inputs", graph.inputs().len(), inputs.len())?;
    arity("captures", graph.captures().len(), captures.len())?;
    let mut slots: Vec<Option<Datum>> = vec![None; graph.values().len()];
    for (&id, &d) in graph.inputs().iter().zip(inputs) {
        check_input(&InputDecl::of(graph.value(id)), d)?;
        slots[id.0] = Some(d.clone());
    }
    for (id, &t) in graph.captures().iter().zip(captures) {
        if let Some(id) = id {
            slots[id.0] = Some(t.clone());
        }
    }
    execute(graph, slots, evaluation)
}

/// Runs every node of `graph` with `slots` holding its inputs (and captures) and returns the
/// graph outputs in order. Intermediate values are dropped after their last use.
fn execute(
    graph: &Graph,
    mut slots: Vec<Option<Datum>>,
    evaluation: Evaluation,
) -> Result<Vec<Datum>, ExecError> {
    let mut remaining: Vec<usize> = graph.values().iter().map(|v| v.users.len()).collect();
    for &o in graph.outputs() {
        remaining[o.0] += 1; // graph outputs are never freed
    }
    for (id, t) in graph.initializers() {
        slots[id.0] = Some(Datum::Tensor(t.clone()));
    }
    for node in graph.nodes() {
        let node_err = |source: OpError| ExecError::Node {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            source,
        };
        let outs = {
            let args: Vec<Option<&Datum>> = node
                .inputs
                .iter()
                .map(|i| i.and_then(|id| slots[id.0].as_ref()))
                .collect();
            if let Some(slot) = node
                .inputs
                .iter()
                .zip(&args)
                .position(|(i, a)| i.is_some() && a.is_none())
            {
                return Err(node_err(OpError::MissingInput(slot)));
            }
            match evaluation {
                Evaluation::Reference => node.op.eval_data(&args),
                Evaluation::Host => node.op.eval_host(&args),
            }
            .map_err(node_err)?
        };
        for (slot, id) in node.outputs.iter().enumerate() {
            let Some(id) = id else { continue };
            let t = outs.get(slot).ok_or_else(|| {
                node_err(OpError::Invalid(format!(
                    "operator returned {} outputs, node declares #{slot}",
                    outs.len()
                )))
            })?;
            check_inferred(graph, node, slot, *id, t)?;
            slots[id.0] = Some(t.clone());
        }
        for id in node.inputs.iter().flatten() {
            remaining[id.0] = remaining[id.0].saturating_sub(1);
            if remaining[id.0] == 0 {
                slots[id.0] = None;
            }
        }
    }
    graph
        .outputs()
        .iter()
        .map(|&id: &ValueId| {
            slots[id.0]
                .clone()
                .ok_or_else(|| ExecError::MissingInput(graph.value(id).name.clone()))
        })
        .collect()
}

/// Checks an operator's output against the value's inferred kind and type (for a sequence
/// or optional: every tensor inside has the element dtype; shapes inside are not checked).
fn check_inferred(
    graph: &Graph,
    node: &crate::graph::Node,
    slot: usize,
    id: ValueId,
    d: &Datum,
) -> Result<(), ExecError> {
    let v = graph.value(id);
    let mismatch = |given: String| ExecError::InferenceMismatch {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        slot,
        expected: format!("{} of {}", v.kind, v.ty),
        given,
    };
    if !d.is_kind(v.kind) {
        return Err(mismatch(d.describe()));
    }
    let Datum::Tensor(t) = d else {
        return match d.tensors().into_iter().find(|t| t.dtype() != v.ty.dtype) {
            Some(t) => Err(mismatch(format!("{} holding {}", d.describe(), t.dtype()))),
            None => Ok(()),
        };
    };
    let ty = &v.ty;
    let shape_ok = match &ty.shape {
        None => true,
        Some(d) => {
            d.len() == t.rank()
                && d.iter()
                    .zip(t.shape())
                    .all(|(d, &n)| !matches!(d, Dim::Fixed(f) if *f != n))
        }
    };
    if ty.dtype != t.dtype() || !shape_ok {
        return Err(ExecError::InferenceMismatch {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            slot,
            expected: ty.to_string(),
            given: format!("{}{:?}", t.dtype(), t.shape()),
        });
    }
    Ok(())
}
