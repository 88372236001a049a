//! The operator abstraction: attribute parsing, shape/dtype inference and reference evaluation.

use std::fmt;

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::shape::TensorType;
use crate::tensor::{Tensor, TensorError};
use crate::value::{Datum, ValueKind};

/// Errors raised by operators (construction, inference or evaluation).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// An attribute is missing, of the wrong kind, or has an invalid value.
    #[error("attribute `{name}`: {reason}")]
    Attribute { name: String, reason: String },
    /// A required input (by position) is absent.
    #[error("required input #{0} is missing")]
    MissingInput(usize),
    /// An input has a dtype the operator does not accept.
    #[error("input #{index}: dtype {dtype} is not supported")]
    DType { index: usize, dtype: DType },
    /// Shapes are inconsistent (e.g. not broadcastable, wrong rank).
    #[error("shape error: {0}")]
    Shape(String),
    /// Any other invalid input or attribute combination.
    #[error("{0}")]
    Invalid(String),
    /// A valid case this implementation does not support (yet).
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// Building a subgraph attribute (If branch, Loop/Scan body) failed.
    #[error("subgraph `{attr}`: {source}")]
    Subgraph {
        attr: String,
        source: Box<crate::graph::GraphError>,
    },
    /// Running a subgraph attribute failed.
    #[error("subgraph `{attr}`: {source}")]
    SubgraphExec {
        attr: String,
        source: Box<crate::executor::ExecError>,
    },
}

impl OpError {
    /// Shorthand for [`OpError::Attribute`].
    pub fn attr(name: &str, reason: impl Into<String>) -> OpError {
        OpError::Attribute {
            name: name.to_string(),
            reason: reason.into(),
        }
    }
}

/// What an operator constructor sees of the node it is built for.
#[derive(Debug, Clone, Copy)]
pub struct OpContext<'a> {
    /// Operator domain, normalized: `""` for the default ONNX domain.
    pub domain: &'a str,
    pub op_type: &'a str,
    /// The opset version the model imports for `domain`. Constructors use it to pick the
    /// semantics of that version (e.g. axes as attribute before opset 13, as input after).
    pub opset: i64,
    pub attrs: &'a Attributes,
    /// Number of input slots (including absent optional inputs).
    pub num_inputs: usize,
    /// Number of output slots the node declares.
    pub num_outputs: usize,
}

/// An input as seen by shape inference: its static type and, when known at import time
/// (initializers, constants, small folded values), its value.
#[derive(Debug, Clone, Copy)]
pub struct InferInput<'a> {
    pub ty: &'a TensorType,
    pub value: Option<&'a Tensor>,
}

pub use hidet_ir::compute::ComputeDef;

/// An input as seen by [`Operator::compute`]: a concrete dtype and shape and, when known
/// when the graph is compiled (initializers, folded constants), its value.
#[derive(Debug, Clone, Copy)]
pub struct ComputeInput<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub value: Option<&'a Tensor>,
}

/// An operator instance: one ONNX node's op type with its attributes already parsed.
///
/// Contract: for inputs whose types satisfy [`Operator::infer`], [`Operator::eval`] returns
/// tensors whose dtypes and shapes match what `infer` returned (where `infer` knew them).
/// Absent optional inputs are `None` in both methods; the input slices may be shorter than the
/// node's declared inputs when trailing optional inputs are omitted.
pub trait Operator: Send + Sync + fmt::Debug {
    /// Static output types from static input types. Unknown dimensions must be tolerated
    /// (return [`crate::Dim::Unknown`] or an unknown rank), never guessed.
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError>;

    /// Reference implementation (the test oracle): computes every output from concrete inputs.
    /// Must never panic on any input; invalid inputs are errors.
    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError>;

    /// Operators with subgraph attributes ([`crate::Attribute::GraphDef`]): builds them for
    /// this node and returns the operator that holds them, before [`Operator::infer`] is
    /// called. `inputs` are the node's declared inputs followed by its captures (the
    /// outer-scope values the subgraphs read, see [`crate::Graph`]). The graph builder calls
    /// this once per node that has subgraph attributes; `Ok(None)` keeps `self`.
    fn instantiate(
        &self,
        inputs: &[Option<InferInput<'_>>],
        sub: &crate::graph::SubgraphContext<'_>,
    ) -> Result<Option<Box<dyn Operator>>, OpError> {
        let _ = (inputs, sub);
        Ok(None)
    }

    /// The kinds (tensor, sequence, optional) of the node's `num_outputs` outputs from the
    /// kinds of its inputs. [`Operator::infer`] then sees, for a sequence or optional input,
    /// the type of the tensors inside and returns, for a sequence or optional output, the type
    /// of the tensors inside. The default takes tensors only: any other input kind is
    /// [`OpError::Unsupported`].
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        if let Some(k) = inputs.iter().flatten().find(|k| **k != ValueKind::Tensor) {
            return Err(OpError::Unsupported(format!("{k} inputs")));
        }
        Ok(vec![ValueKind::Tensor; num_outputs])
    }

    /// Evaluation in a compiled model's host step (a node whose shapes are known only at
    /// run time, or that has no compute definition). Defaults to [`Operator::eval_data`];
    /// an operator may override it to trade the reference's float64 arithmetic for the
    /// precision its compiled kernel would have (`f32` products summed in `f32`) and for
    /// speed. Same contract as [`Operator::eval_data`].
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        self.eval_data(inputs)
    }

    /// Evaluation on run-time values; what the executors call. The default runs
    /// [`Operator::eval`] on tensor inputs; operators with sequence or optional inputs or
    /// outputs override it (and [`Operator::infer_kinds`]).
    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let mut tensors = Vec::with_capacity(inputs.len());
        for (i, d) in inputs.iter().enumerate() {
            tensors.push(match d {
                None => None,
                Some(Datum::Tensor(t)) => Some(t),
                Some(other) => {
                    return Err(OpError::Invalid(format!(
                        "input #{i} is a {}, expected a tensor",
                        other.describe()
                    )))
                }
            });
        }
        Ok(self
            .eval(&tensors)?
            .into_iter()
            .map(Datum::Tensor)
            .collect())
    }

    /// The declarative compute definition (DESIGN §2) for concrete input types, where the
    /// operator is expressible that way; `Ok(None)` where it is not.
    ///
    /// Contract: `def.inputs[i]` stands for input slot `i` (one tensor variable per slot of
    /// `inputs`, with that input's dtype and shape; an absent optional input gets a rank-0
    /// placeholder that no node reads), `def.outputs[j]` for output `j`, with the dtypes and
    /// shapes [`Operator::infer`] gives. Evaluating `def` must agree with [`Operator::eval`].
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let _ = inputs;
        Ok(None)
    }

    /// Whether a kernel reading this operator's output as a fused prologue reads its first
    /// input where it is stored (a gather at precomputed offsets a matrix product broadcasts
    /// from in place): fusion then never inlines that input's producer into it, since
    /// recomputing the producer at every gathered address would force the consumer to pack
    /// the operand. The default, `false`, lets fusion decide.
    fn reads_input_in_place(&self) -> bool {
        false
    }

    /// How the output re-lays out the first input, for an operator a backend adds so that a
    /// template reads the stored input in place ([`crate::fusion::StoredLayout`]); fusion
    /// then records it on the anchor operand it becomes
    /// ([`crate::fusion::AnchorInfo::layouts`]). The default, `None`: no such layout.
    fn stored_layout(&self) -> Option<crate::fusion::StoredLayout> {
        None
    }
}

/// The required input `i` of `inputs`, or [`OpError::MissingInput`].
pub fn arg<'a, T: ?Sized>(inputs: &[Option<&'a T>], i: usize) -> Result<&'a T, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or(OpError::MissingInput(i))
}

/// The optional input `i` of `inputs` (`None` if absent or beyond the slice).
pub fn opt_arg<'a, T: ?Sized>(inputs: &[Option<&'a T>], i: usize) -> Option<&'a T> {
    inputs.get(i).copied().flatten()
}

/// The required input `i` of shape inference, or [`OpError::MissingInput`].
pub fn infer_arg<'a>(
    inputs: &[Option<InferInput<'a>>],
    i: usize,
) -> Result<InferInput<'a>, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or(OpError::MissingInput(i))
}

/// The optional input `i` of shape inference.
pub fn infer_opt<'a>(inputs: &[Option<InferInput<'a>>], i: usize) -> Option<InferInput<'a>> {
    inputs.get(i).copied().flatten()
}
