//! Control flow: If, Loop and Scan, whose bodies are subgraphs.
//!
//! The constructor keeps the subgraph definitions; [`Operator::instantiate`] builds them for
//! the node (formal input types from the node's inputs, outer-scope values as captures, see
//! [`crate::Graph`]) and returns the operator that runs them with
//! [`crate::executor::run_graph`]. The node's inputs are its declared inputs followed by its
//! captures, which every subgraph run receives unchanged.

use std::sync::Arc;

use crate::dtype::DType;
use crate::executor::{run_graph, run_graph_data_as, Evaluation, ExecError};
use crate::graph::{Graph, GraphBuilder, GraphError, SubgraphContext};
use crate::kernels::stack::{empty, select, stack};
use crate::operator::{arg, infer_arg, infer_opt, opt_arg, InferInput, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

/// Registers If and Loop (opset 1+: If-1 and Loop-1 are the versions of opsets 1–10), Scan-8
/// (batched) and Scan (9+).
pub fn register(r: &mut Registry) {
    r.register("", "If", 1..=LATEST_OPSET, |c| {
        Ok(Box::new(Unbuilt::If {
            then_branch: c.attrs.req_graph_def("then_branch")?.clone(),
            else_branch: c.attrs.req_graph_def("else_branch")?.clone(),
            num_outputs: c.num_outputs,
        }))
    });
    r.register("", "Loop", 1..=LATEST_OPSET, |c| {
        Ok(Box::new(Unbuilt::Loop {
            body: c.attrs.req_graph_def("body")?.clone(),
            num_inputs: c.num_inputs,
            num_outputs: c.num_outputs,
        }))
    });
    r.register("", "Scan", 8..=8, |c| {
        let directions = c.attrs.ints("directions")?.cloned();
        if directions
            .as_ref()
            .is_some_and(|d| d.iter().any(|&x| x != 0))
        {
            return Err(OpError::Unsupported(
                "Scan-8 with reverse directions".into(),
            ));
        }
        Ok(Box::new(Unbuilt::Scan {
            body: c.attrs.req_graph_def("body")?.clone(),
            spec: scan_spec(c.attrs, c.num_inputs, c.num_outputs, true)?,
        }))
    });
    r.register("", "Scan", 9..=LATEST_OPSET, |c| {
        Ok(Box::new(Unbuilt::Scan {
            body: c.attrs.req_graph_def("body")?.clone(),
            spec: scan_spec(c.attrs, c.num_inputs, c.num_outputs, false)?,
        }))
    });
}

/// An operator whose subgraphs are not built yet (only [`Operator::instantiate`] works).
#[derive(Debug)]
enum Unbuilt {
    If {
        then_branch: Arc<GraphBuilder>,
        else_branch: Arc<GraphBuilder>,
        num_outputs: usize,
    },
    Loop {
        body: Arc<GraphBuilder>,
        num_inputs: usize,
        num_outputs: usize,
    },
    Scan {
        body: Arc<GraphBuilder>,
        spec: ScanSpec,
    },
}

fn build_err(attr: &str) -> impl Fn(GraphError) -> OpError + '_ {
    move |e| OpError::Subgraph {
        attr: attr.to_string(),
        source: Box::new(e),
    }
}

fn exec_err(attr: &str) -> impl Fn(ExecError) -> OpError + '_ {
    move |e| OpError::SubgraphExec {
        attr: attr.to_string(),
        source: Box::new(e),
    }
}

impl Operator for Unbuilt {
    fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Err(OpError::Invalid(
            "subgraphs are not built (instantiate first)".into(),
        ))
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Err(OpError::Invalid(
            "subgraphs are not built (instantiate first)".into(),
        ))
    }

    fn instantiate(
        &self,
        inputs: &[Option<InferInput<'_>>],
        sub: &SubgraphContext<'_>,
    ) -> Result<Option<Box<dyn Operator>>, OpError> {
        let declared = inputs.len().saturating_sub(sub.num_captures());
        let op: Box<dyn Operator> = match self {
            Unbuilt::If {
                then_branch,
                else_branch,
                num_outputs,
            } => {
                let then_g = sub
                    .build(then_branch, &[])
                    .map_err(build_err("then_branch"))?;
                let else_g = sub
                    .build(else_branch, &[])
                    .map_err(build_err("else_branch"))?;
                let (nt, ne) = (then_g.outputs().len(), else_g.outputs().len());
                if nt != ne || nt < *num_outputs {
                    return Err(OpError::Invalid(format!(
                        "then_branch has {nt} outputs, else_branch {ne}, the node {num_outputs}"
                    )));
                }
                Box::new(If {
                    then_branch: then_g,
                    else_branch: else_g,
                    declared,
                })
            }
            Unbuilt::Loop {
                body,
                num_inputs,
                num_outputs,
            } => {
                let carried = num_inputs.checked_sub(2).ok_or_else(|| {
                    OpError::Invalid("Loop needs inputs M and cond (possibly empty)".into())
                })?;
                let mut formal = vec![
                    (TensorType::fixed(DType::I64, &[]), ValueKind::Tensor),
                    (TensorType::fixed(DType::Bool, &[]), ValueKind::Tensor),
                ];
                for i in 2..*num_inputs {
                    let kind = sub.input_kind(i).unwrap_or(ValueKind::Tensor);
                    formal.push((infer_arg(inputs, i)?.ty.clone(), kind));
                }
                let g = build_invariant(sub, body, formal, 2, 1)?;
                let outs = g.outputs().len();
                if outs < 1 + carried || outs - 1 < *num_outputs {
                    return Err(OpError::Invalid(format!(
                        "Loop body has {outs} outputs; needs cond, {carried} carried values \
                         and the node's {num_outputs} outputs"
                    )));
                }
                Box::new(Loop {
                    body: g,
                    carried,
                    declared,
                })
            }
            Unbuilt::Scan { body, spec } => {
                let mut formal = Vec::with_capacity(spec.states + spec.scans);
                for i in 0..spec.states {
                    let mut t = infer_arg(inputs, spec.first + i)?.ty.clone();
                    if spec.batched {
                        t.shape = t.shape.map(|d| d.into_iter().skip(1).collect());
                    }
                    formal.push(t);
                }
                for j in 0..spec.scans {
                    let v = infer_arg(inputs, spec.first + spec.states + j)?;
                    let shape = match &v.ty.shape {
                        Some(dims) => {
                            let axis = spec.input_axis(j, dims.len())?;
                            let mut d = dims.clone();
                            d.remove(axis);
                            if spec.batched {
                                d.remove(0);
                            }
                            Some(d)
                        }
                        None => None,
                    };
                    formal.push(TensorType {
                        dtype: v.ty.dtype,
                        shape,
                    });
                }
                let formal = formal.into_iter().map(|t| (t, ValueKind::Tensor)).collect();
                let g = build_invariant(sub, body, formal, 0, 0)?;
                let outs = g.outputs().len();
                if outs != spec.states + spec.scan_outputs {
                    return Err(OpError::Invalid(format!(
                        "Scan body has {outs} outputs, the node {} states and {} scan outputs",
                        spec.states, spec.scan_outputs
                    )));
                }
                Box::new(Scan {
                    body: g,
                    spec: spec.clone(),
                    declared,
                })
            }
        };
        Ok(Some(op))
    }
}

/// Subgraphs nested deeper than this are built only once (see [`build_invariant`]), which
/// bounds the building work of nested loops by `2^RETRY_DEPTH` times the model size.
const RETRY_DEPTH: usize = 4;

/// Builds a loop body whose formal inputs `first..first + n` are loop-carried and come back as
/// outputs `out_first..out_first + n`. The body is first built with the carried values'
/// initial types; if any carried output's type differs from its input's (the value changes
/// shape across iterations), it is rebuilt with those inputs' shapes unknown, the body's own
/// declarations of them included (they describe the first iteration). Below
/// [`RETRY_DEPTH`] nested subgraphs it builds once, with unknown shapes.
fn build_invariant(
    sub: &SubgraphContext<'_>,
    body: &GraphBuilder,
    mut formal: Vec<(TensorType, ValueKind)>,
    first: usize,
    out_first: usize,
) -> Result<Graph, OpError> {
    let n = body.num_inputs().min(formal.len()).saturating_sub(first);
    let varying = || {
        let mut body = body.clone();
        body.forget_input_shapes(first..first + n);
        body
    };
    if sub.depth() > RETRY_DEPTH {
        for (t, _) in formal.iter_mut().skip(first) {
            t.shape = None;
        }
        return sub
            .build_kinds(&varying(), &formal)
            .map_err(build_err("body"));
    }
    let g = sub.build_kinds(body, &formal).map_err(build_err("body"))?;
    let outs = output_types(&g);
    let invariant = (0..n).all(|j| {
        let input = g.value(g.inputs()[first + j]);
        outs.get(out_first + j) == Some(&input.ty)
    });
    if invariant {
        return Ok(g);
    }
    for (t, _) in formal.iter_mut().skip(first) {
        t.shape = None;
    }
    sub.build_kinds(&varying(), &formal)
        .map_err(build_err("body"))
}

/// The output kinds of a subgraph.
fn output_kinds(g: &Graph) -> Vec<ValueKind> {
    g.outputs().iter().map(|&o| g.value(o).kind).collect()
}

/// The kind a loop-carried value has after the loop: the body's output kind, which may be
/// the initial value's kind or the element kind of an optional initial value.
fn merge_kinds(init: ValueKind, body: ValueKind) -> Result<ValueKind, OpError> {
    if init == body || init.element() == Some(body) || body.element() == Some(init) {
        Ok(body)
    } else {
        Err(OpError::Invalid(format!(
            "a loop-carried value starts as a {init} and the body returns a {body}"
        )))
    }
}

/// `d` as a value of `kind`: an optional wraps a plain value, a plain value unwraps a
/// non-empty optional (optional and element kinds meet across Loop iterations).
fn coerce(d: Datum, kind: ValueKind, what: &str) -> Result<Datum, OpError> {
    if d.is_kind(kind) {
        return Ok(d);
    }
    match d {
        Datum::Optional(Some(inner)) if inner.is_kind(kind) => Ok(*inner),
        plain if kind.element().is_some_and(|e| plain.is_kind(e)) => {
            Ok(Datum::Optional(Some(Box::new(plain))))
        }
        other => Err(OpError::Invalid(format!(
            "{what} is a {}, expected a {kind}",
            other.describe()
        ))),
    }
}

/// Runs `op`'s [`Operator::eval_data`] on tensors (the tensor API of If and Loop).
fn eval_tensors(op: &dyn Operator, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let data: Vec<Option<Datum>> = inputs.iter().map(|t| t.map(|t| Datum::Tensor(t.clone()))).collect();
    let refs: Vec<Option<&Datum>> = data.iter().map(Option::as_ref).collect();
    op.eval_data(&refs)?
        .into_iter()
        .map(|d| match d {
            Datum::Tensor(t) => Ok(t),
            other => Err(OpError::Invalid(format!(
                "an output is a {}, not a tensor",
                other.describe()
            ))),
        })
        .collect()
}

/// The tensor input `i` of a datum slice.
fn tensor_in<'a>(inputs: &[Option<&'a Datum>], i: usize) -> Result<&'a Tensor, OpError> {
    match arg(inputs, i)? {
        Datum::Tensor(t) => Ok(t),
        other => Err(OpError::Invalid(format!(
            "input #{i} is a {}, expected a tensor",
            other.describe()
        ))),
    }
}

/// The optional tensor input `i` of a datum slice.
fn opt_tensor_in<'a>(inputs: &[Option<&'a Datum>], i: usize) -> Result<Option<&'a Tensor>, OpError> {
    match opt_arg(inputs, i) {
        None => Ok(None),
        Some(_) => tensor_in(inputs, i).map(Some),
    }
}

/// The output types of a subgraph (from its own inference).
fn output_types(g: &Graph) -> Vec<TensorType> {
    g.outputs().iter().map(|&o| g.value(o).ty.clone()).collect()
}

/// The type two values may both have: equal dtypes required, dimensions kept where equal.
fn merge(a: &TensorType, b: &TensorType) -> Result<TensorType, OpError> {
    if a.dtype != b.dtype {
        return Err(OpError::Invalid(format!(
            "dtypes differ between iterations or branches: {} and {}",
            a.dtype, b.dtype
        )));
    }
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => Some(
            x.iter()
                .zip(y)
                .map(|(p, q)| if p == q { p.clone() } else { Dim::Unknown })
                .collect(),
        ),
        _ => None,
    };
    Ok(TensorType {
        dtype: a.dtype,
        shape,
    })
}

/// The single value of a one-element tensor of `dtype`, as i64 (bool: 0/1).
fn scalar(t: &Tensor, dtype: DType, what: &str) -> Result<i64, OpError> {
    if t.dtype() != dtype || t.numel() != 1 {
        return Err(OpError::Invalid(format!(
            "{what} must be one {dtype} element, got {}{:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t.to_i64_vec().first().copied().unwrap_or(0))
}

/// The node's captures (trailing inputs), all present.
fn captures<'a>(
    inputs: &[Option<&'a Tensor>],
    declared: usize,
) -> Result<Vec<&'a Tensor>, OpError> {
    (declared..inputs.len().max(declared))
        .map(|i| arg(inputs, i))
        .collect()
}

/// If: runs `then_branch` when the condition is true, `else_branch` otherwise.
#[derive(Debug)]
struct If {
    then_branch: Graph,
    else_branch: Graph,
    /// Number of declared inputs (1: the condition).
    declared: usize,
}

impl Operator for If {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let c = infer_arg(inputs, 0)?;
        if c.ty.dtype != DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: c.ty.dtype,
            });
        }
        let (t, e) = (
            output_types(&self.then_branch),
            output_types(&self.else_branch),
        );
        if let Some(v) = c.value {
            return Ok(if scalar(v, DType::Bool, "cond")? != 0 {
                t
            } else {
                e
            });
        }
        t.iter().zip(&e).map(|(a, b)| merge(a, b)).collect()
    }

    /// The branches' output kinds, which must agree.
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        if inputs.first().copied().flatten() != Some(ValueKind::Tensor) {
            return Err(OpError::Invalid("If's condition must be a tensor".into()));
        }
        let (t, e) = (output_kinds(&self.then_branch), output_kinds(&self.else_branch));
        if let Some((a, b)) = t.iter().zip(&e).find(|(a, b)| a != b) {
            return Err(OpError::Invalid(format!(
                "then_branch returns a {a} where else_branch returns a {b}"
            )));
        }
        Ok(t.into_iter().take(num_outputs).collect())
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval_tensors(self, inputs)
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        self.run(inputs, Evaluation::Reference)
    }

    /// The taken branch runs as host steps do ([`Operator::eval_host`]).
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        self.run(inputs, Evaluation::Host)
    }
}

impl If {
    /// The taken branch, its nodes evaluated as `evaluation` says.
    fn run(&self, inputs: &[Option<&Datum>], evaluation: Evaluation) -> Result<Vec<Datum>, OpError> {
        let cond = scalar(tensor_in(inputs, 0)?, DType::Bool, "cond")? != 0;
        let caps: Vec<&Datum> = (self.declared..inputs.len().max(self.declared))
            .map(|i| arg(inputs, i))
            .collect::<Result<_, _>>()?;
        let (g, attr) = if cond {
            (&self.then_branch, "then_branch")
        } else {
            (&self.else_branch, "else_branch")
        };
        run_graph_data_as(g, &[], &caps, evaluation).map_err(exec_err(attr))
    }
}

/// Loop: `for (i = 0; i < M && cond; ++i) (cond, v..., scan...) = body(i, cond, v...)`.
/// Without M it runs while `cond`; without cond it runs M times (the body's cond output is
/// then ignored); without both it runs until the body fails (the ONNX semantics: forever).
#[derive(Debug)]
struct Loop {
    body: Graph,
    /// Number of loop-carried values (N).
    carried: usize,
    /// Number of declared inputs (2 + N).
    declared: usize,
}

impl Operator for Loop {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        if let Some(m) = infer_opt(inputs, 0) {
            if m.ty.dtype != DType::I64 {
                return Err(OpError::DType {
                    index: 0,
                    dtype: m.ty.dtype,
                });
            }
        }
        if let Some(c) = infer_opt(inputs, 1) {
            if c.ty.dtype != DType::Bool {
                return Err(OpError::DType {
                    index: 1,
                    dtype: c.ty.dtype,
                });
            }
        }
        let body = output_types(&self.body);
        let mut out = Vec::with_capacity(body.len().saturating_sub(1));
        for j in 0..self.carried {
            let init = infer_arg(inputs, 2 + j)?;
            // Zero iterations return the initial value.
            out.push(merge(init.ty, &body[1 + j])?);
        }
        for t in &body[1 + self.carried..] {
            let shape = t.shape.as_ref().map(|d| {
                let mut d = d.clone();
                d.insert(0, Dim::Unknown);
                d
            });
            out.push(TensorType {
                dtype: t.dtype,
                shape,
            });
        }
        Ok(out)
    }

    /// Carried values keep the body's kinds (sequences, optionals); scan outputs are tensors.
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        for i in 0..2 {
            if inputs.get(i).copied().flatten().is_some_and(|k| k != ValueKind::Tensor) {
                return Err(OpError::Invalid(format!("Loop input #{i} must be a tensor")));
            }
        }
        let body = output_kinds(&self.body);
        let mut out = Vec::with_capacity(num_outputs);
        for j in 0..self.carried {
            let init = inputs
                .get(2 + j)
                .copied()
                .flatten()
                .ok_or(OpError::MissingInput(2 + j))?;
            out.push(merge_kinds(init, body[1 + j])?);
        }
        for k in &body[1 + self.carried..] {
            if *k != ValueKind::Tensor {
                return Err(OpError::Unsupported(format!("Loop scan outputs of {k}s")));
            }
            out.push(ValueKind::Tensor);
        }
        out.truncate(num_outputs);
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval_tensors(self, inputs)
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        self.run(inputs, Evaluation::Reference)
    }

    /// The body runs as host steps do ([`Operator::eval_host`]).
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        self.run(inputs, Evaluation::Host)
    }
}

impl Loop {
    /// The iterations, the body's nodes evaluated as `evaluation` says.
    fn run(&self, inputs: &[Option<&Datum>], evaluation: Evaluation) -> Result<Vec<Datum>, OpError> {
        let max_trip = opt_tensor_in(inputs, 0)?
            .map(|m| scalar(m, DType::I64, "M"))
            .transpose()?;
        let mut cond = opt_tensor_in(inputs, 1)?
            .map(|c| scalar(c, DType::Bool, "cond").map(|v| v != 0))
            .transpose()?;
        let use_cond = cond.is_some();
        let mut carried: Vec<Datum> = (0..self.carried)
            .map(|j| arg(inputs, 2 + j).cloned())
            .collect::<Result<_, _>>()?;
        let caps: Vec<&Datum> = (self.declared..inputs.len().max(self.declared))
            .map(|i| arg(inputs, i))
            .collect::<Result<_, _>>()?;
        let formal_kinds: Vec<ValueKind> = self
            .body
            .inputs()
            .iter()
            .map(|&v| self.body.value(v).kind)
            .collect();
        let out_kinds = output_kinds(&self.body);
        let num_scans = self.body.outputs().len() - 1 - self.carried;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); num_scans];
        let mut i: i64 = 0;
        while max_trip.is_none_or(|m| i < m) && cond.unwrap_or(true) {
            let iter = Datum::Tensor(Tensor::scalar(i));
            let cond_in = Datum::Tensor(Tensor::scalar(cond.unwrap_or(true)));
            let mut ins: Vec<Datum> = Vec::with_capacity(2 + self.carried);
            ins.push(iter);
            ins.push(cond_in);
            for (j, d) in carried.iter().enumerate() {
                let kind = formal_kinds.get(2 + j).copied().unwrap_or(ValueKind::Tensor);
                ins.push(coerce(d.clone(), kind, "a loop-carried value")?);
            }
            let args: Vec<&Datum> = ins.iter().collect();
            let mut outs = run_graph_data_as(&self.body, &args, &caps, evaluation)
                .map_err(exec_err("body"))?
                .into_iter();
            let c = outs
                .next()
                .ok_or_else(|| OpError::Invalid("Loop body returned no cond".into()))?;
            if use_cond {
                let c = c.as_tensor().ok_or_else(|| {
                    OpError::Invalid("the Loop body's cond output is not a tensor".into())
                })?;
                cond = Some(scalar(c, DType::Bool, "body cond")? != 0);
            }
            for (slot, d) in carried.iter_mut().zip(outs.by_ref()) {
                *slot = d;
            }
            for (acc, d) in scans.iter_mut().zip(outs) {
                match d {
                    Datum::Tensor(t) => acc.push(t),
                    other => {
                        return Err(OpError::Invalid(format!(
                            "a Loop scan output is a {}",
                            other.describe()
                        )))
                    }
                }
            }
            i = i
                .checked_add(1)
                .ok_or_else(|| OpError::Invalid("Loop iteration count overflows".into()))?;
        }
        let mut result: Vec<Datum> = carried
            .into_iter()
            .enumerate()
            .map(|(j, d)| coerce(d, out_kinds[1 + j], "a Loop result"))
            .collect::<Result<_, _>>()?;
        let body_types = output_types(&self.body);
        for (k, acc) in scans.into_iter().enumerate() {
            result.push(Datum::Tensor(if acc.is_empty() {
                empty_scan(&body_types[1 + self.carried + k], 0)?
            } else {
                stack(&acc, 0)?
            }));
        }
        Ok(result)
    }
}

/// The scan output of zero iterations: the per-iteration type with the iteration axis (at
/// `axis`) of size 0; unknown dimensions become 0 too.
fn empty_scan(per_iter: &TensorType, axis: usize) -> Result<Tensor, OpError> {
    let mut shape: Vec<usize> = match &per_iter.shape {
        Some(d) => d.iter().map(|d| d.fixed().unwrap_or(0)).collect(),
        None => vec![],
    };
    shape.insert(axis.min(shape.len()), 0);
    empty(per_iter.dtype, shape)
}

/// The attributes and input layout of a Scan node.
#[derive(Debug, Clone)]
struct ScanSpec {
    /// Scan-8: a leading batch axis on every input and output, and input 0 is sequence_lens.
    batched: bool,
    /// Index of the first state input (1 for Scan-8, 0 after).
    first: usize,
    states: usize,
    scans: usize,
    scan_outputs: usize,
    input_directions: Vec<i64>,
    output_directions: Vec<i64>,
    input_axes: Vec<i64>,
    output_axes: Vec<i64>,
}

fn scan_spec(
    attrs: &crate::Attributes,
    num_inputs: usize,
    num_outputs: usize,
    batched: bool,
) -> Result<ScanSpec, OpError> {
    let scans = usize::try_from(attrs.req_int("num_scan_inputs")?)
        .map_err(|_| OpError::attr("num_scan_inputs", "must be non-negative"))?;
    let first = usize::from(batched);
    let states = num_inputs
        .checked_sub(first + scans)
        .ok_or_else(|| OpError::attr("num_scan_inputs", "exceeds the number of inputs"))?;
    if scans == 0 {
        return Err(OpError::attr("num_scan_inputs", "must be at least 1"));
    }
    let scan_outputs = num_outputs
        .checked_sub(states)
        .ok_or_else(|| OpError::Invalid("Scan has fewer outputs than states".into()))?;
    let list = |name: &str, len: usize| -> Result<Vec<i64>, OpError> {
        match attrs.ints(name)? {
            None => Ok(vec![0; len]),
            Some(v) if v.len() == len => Ok(v.clone()),
            Some(v) => Err(OpError::attr(
                name,
                format!("has {} entries, expected {len}", v.len()),
            )),
        }
    };
    let dir = |name: &str, len: usize| -> Result<Vec<i64>, OpError> {
        let v = list(name, len)?;
        if v.iter().any(|&d| d != 0 && d != 1) {
            return Err(OpError::attr(name, "directions are 0 or 1"));
        }
        Ok(v)
    };
    Ok(ScanSpec {
        batched,
        first,
        states,
        scans,
        scan_outputs,
        input_directions: if batched {
            vec![0; scans]
        } else {
            dir("scan_input_directions", scans)?
        },
        output_directions: if batched {
            vec![0; scan_outputs]
        } else {
            dir("scan_output_directions", scan_outputs)?
        },
        input_axes: if batched {
            vec![1; scans]
        } else {
            list("scan_input_axes", scans)?
        },
        output_axes: if batched {
            vec![1; scan_outputs]
        } else {
            list("scan_output_axes", scan_outputs)?
        },
    })
}

/// Normalizes a possibly negative axis into `0..rank`.
fn norm(axis: i64, rank: usize, what: &str) -> Result<usize, OpError> {
    let r = i64::try_from(rank).map_err(|_| OpError::Shape("rank too large".into()))?;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(OpError::attr(
            what,
            format!("axis {axis} out of range for rank {rank}"),
        ))
    }
}

impl ScanSpec {
    /// The scanned axis of scan input `j` of rank `rank` (including a Scan-8 batch axis).
    fn input_axis(&self, j: usize, rank: usize) -> Result<usize, OpError> {
        norm(self.input_axes[j], rank, "scan_input_axes")
    }

    /// Where scan output `k` of per-iteration rank `rank` stacks its iterations.
    fn output_axis(&self, k: usize, rank: usize) -> Result<usize, OpError> {
        if self.batched {
            return Ok(0); // within one batch entry; the batch axis is added around it
        }
        norm(self.output_axes[k], rank + 1, "scan_output_axes")
    }
}

/// Scan: iterates the body over slices of the scan inputs, threading the states.
#[derive(Debug)]
struct Scan {
    body: Graph,
    spec: ScanSpec,
    /// Number of declared inputs.
    declared: usize,
}

impl Scan {
    /// One (unbatched) scan: states and full scan inputs → final states and scan outputs.
    fn run(
        &self,
        states: Vec<Tensor>,
        scans: &[&Tensor],
        caps: &[&Tensor],
    ) -> Result<Vec<Tensor>, OpError> {
        let s = &self.spec;
        let axes: Vec<usize> = scans
            .iter()
            .enumerate()
            .map(|(j, t)| {
                let extra = usize::from(s.batched);
                norm(s.input_axes[j] - extra as i64, t.rank(), "scan_input_axes")
            })
            .collect::<Result<_, _>>()?;
        let len = match scans.first() {
            Some(t) => t.shape()[axes[0]],
            None => 0,
        };
        for (j, t) in scans.iter().enumerate() {
            if t.shape()[axes[j]] != len {
                return Err(OpError::Shape(format!(
                    "scan input #{j} has {} iterations, scan input #0 has {len}",
                    t.shape()[axes[j]]
                )));
            }
        }
        let mut states = states;
        let mut outs: Vec<Vec<Tensor>> = vec![Vec::new(); s.scan_outputs];
        for it in 0..len {
            let slices: Vec<Tensor> = scans
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    let idx = if s.input_directions[j] == 1 {
                        len - 1 - it
                    } else {
                        it
                    };
                    select(t, axes[j], idx)
                })
                .collect::<Result<_, _>>()?;
            let args: Vec<&Tensor> = states.iter().chain(slices.iter()).collect();
            let mut res = run_graph(&self.body, &args, caps)
                .map_err(exec_err("body"))?
                .into_iter();
            states = res.by_ref().take(s.states).collect();
            for (acc, t) in outs.iter_mut().zip(res) {
                acc.push(t);
            }
        }
        let body_types = output_types(&self.body);
        for (k, mut acc) in outs.into_iter().enumerate() {
            if s.output_directions[k] == 1 {
                acc.reverse();
            }
            let out = match acc.first() {
                Some(t) => stack(&acc, s.output_axis(k, t.rank())?)?,
                None => {
                    let per_iter = &body_types[s.states + k];
                    let rank = per_iter.rank().unwrap_or(0);
                    empty_scan(per_iter, s.output_axis(k, rank)?)?
                }
            };
            states.push(out);
        }
        Ok(states)
    }
}

impl Operator for Scan {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let s = &self.spec;
        if s.batched && infer_opt(inputs, 0).is_some() {
            return Err(OpError::Unsupported("Scan-8 with sequence_lens".into()));
        }
        let body = output_types(&self.body);
        let batch =
            |t: &TensorType| -> Option<Dim> { t.shape.as_ref().and_then(|d| d.first().cloned()) };
        let mut out = Vec::with_capacity(body.len());
        for (i, body_ty) in body.iter().enumerate().take(s.states) {
            let init = infer_arg(inputs, s.first + i)?;
            let mut b = body_ty.clone();
            if s.batched {
                b.shape = b.shape.map(|mut d| {
                    d.insert(0, batch(init.ty).unwrap_or(Dim::Unknown));
                    d
                });
            }
            out.push(merge(init.ty, &b)?);
        }
        // Iteration count: the scanned dimension of scan input 0.
        let x0 = infer_arg(inputs, s.first + s.states)?;
        let len = match &x0.ty.shape {
            Some(d) => d[s.input_axis(0, d.len())?].clone(),
            None => Dim::Unknown,
        };
        for k in 0..s.scan_outputs {
            let t = &body[s.states + k];
            let shape = match &t.shape {
                Some(d) => {
                    let mut d = d.clone();
                    d.insert(s.output_axis(k, d.len())?, len.clone());
                    if s.batched {
                        d.insert(0, batch(x0.ty).unwrap_or(Dim::Unknown));
                    }
                    Some(d)
                }
                None => None,
            };
            out.push(TensorType {
                dtype: t.dtype,
                shape,
            });
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let s = &self.spec;
        let caps = captures(inputs, self.declared)?;
        let states: Vec<Tensor> = (0..s.states)
            .map(|i| arg(inputs, s.first + i).cloned())
            .collect::<Result<_, _>>()?;
        let scans: Vec<&Tensor> = (0..s.scans)
            .map(|j| arg(inputs, s.first + s.states + j))
            .collect::<Result<_, _>>()?;
        for (j, t) in scans.iter().enumerate() {
            s.input_axis(j, t.rank())?;
        }
        if !s.batched {
            return self.run(states, &scans, &caps);
        }
        if opt_arg(inputs, 0).is_some() {
            return Err(OpError::Unsupported("Scan-8 with sequence_lens".into()));
        }
        let batch = scans
            .first()
            .and_then(|t| t.shape().first().copied())
            .unwrap_or(0);
        for (i, t) in states.iter().chain(scans.iter().copied()).enumerate() {
            if t.shape().first() != Some(&batch) {
                return Err(OpError::Shape(format!(
                    "Scan-8 input #{i} has shape {:?}, expected batch {batch}",
                    t.shape()
                )));
            }
        }
        let mut per_batch: Vec<Vec<Tensor>> = Vec::with_capacity(batch);
        for b in 0..batch {
            let st: Vec<Tensor> = states
                .iter()
                .map(|t| select(t, 0, b))
                .collect::<Result<_, _>>()?;
            let sc: Vec<Tensor> = scans
                .iter()
                .map(|t| select(t, 0, b))
                .collect::<Result<_, _>>()?;
            let sc: Vec<&Tensor> = sc.iter().collect();
            per_batch.push(self.run(st, &sc, &caps)?);
        }
        if batch == 0 {
            return Err(OpError::Unsupported("Scan-8 with an empty batch".into()));
        }
        (0..s.states + s.scan_outputs)
            .map(|o| {
                let parts: Vec<Tensor> = per_batch.iter().map(|r| r[o].clone()).collect();
                stack(&parts, 0)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{
        run_reference, Attribute, Attributes, DType, Datum, Dim, GraphBuilder, GraphError,
        NodeSpec, Registry, Tensor, TensorType,
    };

    /// Random non-zero values in [0.25, 2.25) from a small LCG (deterministic).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 + 0.25
            })
            .collect()
    }

    fn node(op: &str, opset: i64, inputs: &[&str], outputs: &[&str]) -> NodeSpec {
        NodeSpec {
            name: format!("{op}_{}", outputs.join("_")),
            domain: String::new(),
            op_type: op.into(),
            opset,
            attrs: Attributes::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn with(mut n: NodeSpec, name: &str, a: Attribute) -> NodeSpec {
        n.attrs.insert(name, a);
        n
    }

    fn def(g: GraphBuilder) -> Attribute {
        Attribute::GraphDef(Arc::new(g))
    }

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType::fixed(DType::F32, shape)
    }

    fn run(g: &crate::Graph, inputs: Vec<(&str, Tensor)>) -> Result<Vec<Tensor>, crate::ExecError> {
        let named: Vec<(String, Tensor)> = inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect();
        Ok(run_reference(g, &named)?
            .into_iter()
            .map(|(_, t)| t)
            .collect())
    }

    fn vals(t: &Tensor) -> Vec<f64> {
        t.to_f64_vec()
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "element {i}: {x} vs {y}"
            );
        }
    }

    /// If: branches read outer values (`x`, `y`) and a local initializer; the untaken branch
    /// never runs. Reference: float64 loops.
    #[test]
    fn if_with_captures_picks_the_branch() {
        let (r, c) = (3, 5);
        let (xv, yv, wv) = (data(r * c, 1), data(c, 2), data(r * c, 3));
        let mut then_b = GraphBuilder::new("then");
        then_b
            .node(node("Add", 14, &["x", "y"], &["t"]))
            .output("t");
        let mut else_b = GraphBuilder::new("else");
        else_b
            .initializer("w", Tensor::new(vec![r, c], wv.clone()).unwrap())
            .node(node("Mul", 14, &["x", "w"], &["e"]))
            .output("e");
        let mut g = GraphBuilder::new("g");
        g.input("cond", TensorType::fixed(DType::Bool, &[]))
            .input("x", f32s(&[r, c]))
            .input("y", f32s(&[c]));
        let n = with(
            node("If", 13, &["cond"], &["out"]),
            "then_branch",
            def(then_b),
        );
        g.node(with(n, "else_branch", def(else_b))).output("out");
        let g = g.build(Registry::global()).unwrap();
        // Captures x and y are the node's trailing inputs.
        assert_eq!(g.nodes()[0].inputs.len(), 3);
        assert_eq!(
            g.value(g.outputs()[0]).ty.shape,
            Some(vec![Dim::Fixed(r), Dim::Fixed(c)])
        );
        let x = Tensor::new(vec![r, c], xv.clone()).unwrap();
        let y = Tensor::new(vec![c], yv.clone()).unwrap();
        for cond in [true, false] {
            let out = run(
                &g,
                vec![
                    ("cond", Tensor::scalar(cond)),
                    ("x", x.clone()),
                    ("y", y.clone()),
                ],
            )
            .unwrap();
            let mut want = vec![0f64; r * c];
            for i in 0..r {
                for j in 0..c {
                    let xi = xv[i * c + j] as f64;
                    want[i * c + j] = if cond {
                        xi + yv[j] as f64
                    } else {
                        xi * wv[i * c + j] as f64
                    };
                }
            }
            close(&vals(&out[0]), &want);
        }
        // A condition with two elements is an error, not a panic.
        let two = Tensor::new(vec![2], vec![true, false]).unwrap();
        let g2 = {
            let mut then_b = GraphBuilder::new("then");
            then_b
                .node(node("Identity", 14, &["x"], &["t"]))
                .output("t");
            let mut else_b = GraphBuilder::new("else");
            else_b.node(node("Neg", 14, &["x"], &["e"])).output("e");
            let mut g = GraphBuilder::new("g");
            g.input("cond", TensorType::fixed(DType::Bool, &[2]))
                .input("x", f32s(&[r, c]));
            let n = with(
                node("If", 13, &["cond"], &["out"]),
                "then_branch",
                def(then_b),
            );
            g.node(with(n, "else_branch", def(else_b))).output("out");
            g.build(Registry::global()).unwrap()
        };
        assert!(run(&g2, vec![("cond", two), ("x", x)]).is_err());
    }

    /// Branches with different output counts, a non-bool condition and a missing branch are
    /// build errors.
    #[test]
    fn if_build_errors() {
        let mut one = GraphBuilder::new("one");
        one.node(node("Identity", 14, &["x"], &["a"])).output("a");
        let mut two = GraphBuilder::new("two");
        two.node(node("Identity", 14, &["x"], &["a"]))
            .node(node("Neg", 14, &["x"], &["b"]))
            .output("a")
            .output("b");
        let build = |cond: DType, then_b: &GraphBuilder, else_b: Option<&GraphBuilder>| {
            let mut g = GraphBuilder::new("g");
            g.input("c", TensorType::fixed(cond, &[]))
                .input("x", f32s(&[7]));
            let mut n = with(
                node("If", 13, &["c"], &["o"]),
                "then_branch",
                def(then_b.clone()),
            );
            if let Some(e) = else_b {
                n = with(n, "else_branch", def(e.clone()));
            }
            g.node(n).output("o");
            g.build(Registry::global())
        };
        assert!(build(DType::Bool, &one, Some(&one)).is_ok());
        assert!(matches!(
            build(DType::Bool, &one, Some(&two)),
            Err(GraphError::Node { .. })
        ));
        assert!(build(DType::F32, &one, Some(&one)).is_err());
        assert!(build(DType::Bool, &one, None).is_err());
        // A branch reading a name defined nowhere.
        let mut bad = GraphBuilder::new("bad");
        bad.node(node("Identity", 14, &["nowhere"], &["a"]))
            .output("a");
        assert!(matches!(
            build(DType::Bool, &bad, Some(&one)),
            Err(GraphError::UndefinedValue { .. })
        ));
    }

    /// The body of `Loop(M, cond, acc)`: `acc' = acc * 0.5 + x * i`, `cond' = sum(acc') <
    /// limit`, scan output `acc'`; `x` and `limit` come from the outer graph, the carried
    /// input is untyped (its type comes from the node).
    fn loop_graph(use_m: bool, use_cond: bool, shape: &[usize]) -> crate::Graph {
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input_untyped("acc")
            .initializer("half", Tensor::scalar(0.5f32))
            .node(with(
                node("Cast", 13, &["i"], &["fi"]),
                "to",
                Attribute::Int(1),
            ))
            .node(node("Mul", 14, &["x", "fi"], &["xi"]))
            .node(node("Mul", 14, &["acc", "half"], &["ah"]))
            .node(node("Add", 14, &["ah", "xi"], &["acc2"]))
            .node(with(
                node("ReduceSum", 13, &["acc2"], &["s"]),
                "keepdims",
                Attribute::Int(0),
            ))
            .node(node("Less", 13, &["s", "limit"], &["c2"]))
            .node(node("Identity", 14, &["acc2"], &["scan"]))
            .output("c2")
            .output("acc2")
            .output("scan");
        let mut g = GraphBuilder::new("g");
        g.input("x", f32s(shape))
            .input("acc0", f32s(shape))
            .input("limit", f32s(&[]));
        if use_m {
            g.input("m", TensorType::fixed(DType::I64, &[]));
        }
        if use_cond {
            g.input("c0", TensorType::fixed(DType::Bool, &[]));
        }
        let n = node(
            "Loop",
            16,
            &[
                if use_m { "m" } else { "" },
                if use_cond { "c0" } else { "" },
                "acc0",
            ],
            &["acc_out", "scans"],
        );
        g.node(with(n, "body", def(body)))
            .output("acc_out")
            .output("scans");
        g.build(Registry::global()).unwrap()
    }

    /// Float64 reference of [`loop_graph`]: (final acc, per-iteration accs).
    fn loop_reference(
        x: &[f32],
        acc0: &[f32],
        limit: f64,
        m: Option<i64>,
        cond: Option<bool>,
    ) -> (Vec<f64>, Vec<Vec<f64>>) {
        let mut acc: Vec<f64> = acc0.iter().map(|&v| v as f64).collect();
        let mut scans = vec![];
        let mut c = cond.unwrap_or(true);
        let mut i = 0i64;
        while m.is_none_or(|m| i < m) && c {
            acc = acc
                .iter()
                .zip(x)
                .map(|(a, &xv)| a * 0.5 + xv as f64 * i as f64)
                .collect();
            if cond.is_some() {
                c = acc.iter().sum::<f64>() < limit;
            }
            scans.push(acc.clone());
            i += 1;
        }
        (acc, scans)
    }

    #[test]
    fn loop_trip_count_condition_captures_and_scan_outputs() {
        let shape = [2usize, 3];
        let xv = data(6, 11);
        let a0 = data(6, 12);
        let x = Tensor::new(shape.to_vec(), xv.clone()).unwrap();
        let acc0 = Tensor::new(shape.to_vec(), a0.clone()).unwrap();
        // (M, cond, limit): M bounds; cond stops early; both; M = 0.
        let cases: [(Option<i64>, Option<bool>, f32); 5] = [
            (Some(5), None, 0.0),
            (None, Some(true), 60.0),
            (Some(3), Some(true), 1e9),
            (Some(0), Some(true), 1e9),
            (Some(4), Some(false), 1e9),
        ];
        for (m, cond, limit) in cases {
            let g = loop_graph(m.is_some(), cond.is_some(), &shape);
            let mut inputs = vec![
                ("x", x.clone()),
                ("acc0", acc0.clone()),
                ("limit", Tensor::scalar(limit)),
            ];
            if let Some(m) = m {
                inputs.push(("m", Tensor::scalar(m)));
            }
            if let Some(c) = cond {
                inputs.push(("c0", Tensor::scalar(c)));
            }
            let out = run(&g, inputs).unwrap();
            let (want_acc, want_scans) = loop_reference(&xv, &a0, limit as f64, m, cond);
            assert!(!want_scans.is_empty() || m == Some(0) || cond == Some(false));
            close(&vals(&out[0]), &want_acc);
            let mut scan_shape = vec![want_scans.len()];
            scan_shape.extend_from_slice(&shape);
            assert_eq!(out[1].shape(), scan_shape.as_slice(), "case {m:?} {cond:?}");
            close(&vals(&out[1]), &want_scans.concat());
        }
    }

    /// A branch or body that a control-flow node runs evaluates its nodes the way the node is
    /// evaluated: the reference's `eval_data`, or a compiled model's host-step `eval_host`.
    #[test]
    fn bodies_are_evaluated_as_their_node_is() {
        #[derive(Debug)]
        struct Probe;
        impl crate::Operator for Probe {
            fn infer(
                &self,
                _: &[Option<crate::InferInput<'_>>],
            ) -> Result<Vec<TensorType>, crate::OpError> {
                Ok(vec![f32s(&[])])
            }
            fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, crate::OpError> {
                Ok(vec![Tensor::scalar(0f32)])
            }
            fn eval_host(&self, _: &[Option<&Datum>]) -> Result<Vec<Datum>, crate::OpError> {
                Ok(vec![Datum::Tensor(Tensor::scalar(1f32))])
            }
        }
        let mut registry = Registry::new();
        crate::ops::register_all(&mut registry);
        registry.register("test", "Probe", 1..=1, |_| Ok(Box::new(Probe)));
        let probe = |outputs: &[&str]| NodeSpec {
            domain: "test".into(),
            opset: 1,
            ..node("Probe", 1, &["k"], outputs)
        };
        let mut branch = GraphBuilder::new("then");
        branch
            .initializer("k", Tensor::scalar(5f32))
            .node(probe(&["y"]))
            .output("y");
        let mut other = GraphBuilder::new("else");
        other
            .initializer("k", Tensor::scalar(5f32))
            .node(node("Identity", 14, &["k"], &["y"]))
            .output("y");
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input("acc", f32s(&[]))
            .initializer("k", Tensor::scalar(5f32))
            .node(node("Identity", 14, &["c"], &["c2"]))
            .node(probe(&["acc2"]))
            .output("c2")
            .output("acc2");
        let mut g = GraphBuilder::new("g");
        g.input("c", TensorType::fixed(DType::Bool, &[]))
            .input("m", TensorType::fixed(DType::I64, &[]))
            .initializer("acc0", Tensor::scalar(7f32));
        let branches = with(node("If", 16, &["c"], &["a"]), "then_branch", def(branch));
        g.node(with(branches, "else_branch", def(other)));
        g.node(with(node("Loop", 16, &["m", "", "acc0"], &["b"]), "body", def(body)));
        g.output("a").output("b");
        let g = g.build(&registry).unwrap();
        let (cond, trips) = (
            Datum::Tensor(Tensor::scalar(true)),
            Datum::Tensor(Tensor::scalar(2i64)),
        );
        let acc0 = Datum::Tensor(Tensor::scalar(7f32));
        let node_inputs = [vec![Some(&cond)], vec![Some(&trips), None, Some(&acc0)]];
        for (n, inputs) in g.nodes().iter().zip(&node_inputs) {
            let value = |d: Vec<Datum>| d[0].as_tensor().unwrap().to_f64_vec();
            assert_eq!(value(n.op.eval_data(inputs).unwrap()), [0.0], "{}", n.op_type);
            assert_eq!(value(n.op.eval_host(inputs).unwrap()), [1.0], "{}", n.op_type);
        }
    }

    /// A carried value that grows by a row per iteration, declared by the body with its
    /// first-iteration shape `[0, 4]` (as torchvision's exported mask pasting does): the
    /// declaration does not hold from the second iteration on and is not enforced.
    #[test]
    fn loop_carried_value_may_outgrow_its_declared_shape() {
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input("acc", f32s(&[0, 4]))
            .initializer("row_shape", Tensor::new(vec![2], vec![1i64, 4]).unwrap())
            .node(node("Identity", 14, &["c"], &["c2"]))
            .node(with(
                node("Cast", 13, &["i"], &["fi"]),
                "to",
                Attribute::Int(1),
            ))
            .node(node("Expand", 13, &["fi", "row_shape"], &["row"]))
            .node(with(
                node("Concat", 13, &["acc", "row"], &["acc2"]),
                "axis",
                Attribute::Int(0),
            ))
            .output("c2")
            .output("acc2");
        let mut g = GraphBuilder::new("g");
        g.input("m", TensorType::fixed(DType::I64, &[]))
            .initializer("acc0", Tensor::new(vec![0, 4], Vec::<f32>::new()).unwrap());
        let n = node("Loop", 16, &["m", "", "acc0"], &["acc_out"]);
        g.node(with(n, "body", def(body))).output("acc_out");
        let g = g.build(Registry::global()).unwrap();
        for m in [1i64, 3] {
            let out = run(&g, vec![("m", Tensor::scalar(m))]).unwrap();
            assert_eq!(out[0].shape(), &[m as usize, 4]);
            let want: Vec<f64> = (0..m).flat_map(|i| [i as f64; 4]).collect();
            close(&vals(&out[0]), &want);
        }
    }

    #[test]
    fn loop_errors() {
        let g = loop_graph(true, false, &[3]);
        let ok = |m: Tensor| {
            run(
                &g,
                vec![
                    ("x", Tensor::new(vec![3], data(3, 1)).unwrap()),
                    ("acc0", Tensor::new(vec![3], data(3, 2)).unwrap()),
                    ("limit", Tensor::scalar(1f32)),
                    ("m", m),
                ],
            )
        };
        assert!(ok(Tensor::scalar(2i64)).is_ok());
        // A negative trip count runs zero times.
        assert_eq!(ok(Tensor::scalar(-3i64)).unwrap()[1].shape(), &[0, 3]);
        // Body with too few outputs for the node.
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input("v", f32s(&[3]))
            .output("c");
        let mut g = GraphBuilder::new("g");
        g.input("m", TensorType::fixed(DType::I64, &[]))
            .input("v0", f32s(&[3]));
        let n = with(
            node("Loop", 16, &["m", "", "v0"], &["v", "s"]),
            "body",
            def(body),
        );
        g.node(n).output("v");
        assert!(g.build(Registry::global()).is_err());
        // A declared body input whose dtype contradicts the carried value.
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input("v", TensorType::fixed(DType::I32, &[3]))
            .output("c")
            .output("v");
        let mut g = GraphBuilder::new("g");
        g.input("m", TensorType::fixed(DType::I64, &[]))
            .input("v0", f32s(&[3]));
        let n = with(
            node("Loop", 16, &["m", "", "v0"], &["v"]),
            "body",
            def(body),
        );
        g.node(n).output("v");
        assert!(matches!(
            g.build(Registry::global()),
            Err(GraphError::Node { .. })
        ));
    }

    /// Scan-9 over axis 1 of `x` (3x5x2) in reverse, stacking the running sum on the last
    /// axis (negative output axis); the state is a running sum of the slices.
    #[test]
    fn scan9_axes_directions_against_loops() {
        let (a, t, b) = (3usize, 5usize, 2usize);
        let xv = data(a * t * b, 21);
        let s0 = data(a * b, 22);
        let mut body = GraphBuilder::new("body");
        body.input("s", f32s(&[a, b]))
            .input_untyped("xs")
            .node(node("Add", 14, &["s", "xs"], &["s2"]))
            .node(node("Mul", 14, &["s2", "k"], &["o"]))
            .output("s2")
            .output("o");
        let mut g = GraphBuilder::new("g");
        g.input("s0", f32s(&[a, b]))
            .input("x", f32s(&[a, t, b]))
            .input("k", f32s(&[b]));
        let mut n = with(
            node("Scan", 16, &["s0", "x"], &["sf", "ys"]),
            "body",
            def(body),
        );
        n.attrs.insert("num_scan_inputs", Attribute::Int(1));
        n.attrs.insert("scan_input_axes", Attribute::Ints(vec![-2]));
        n.attrs
            .insert("scan_input_directions", Attribute::Ints(vec![1]));
        n.attrs
            .insert("scan_output_axes", Attribute::Ints(vec![-1]));
        g.node(n).output("sf").output("ys");
        let g = g.build(Registry::global()).unwrap();
        assert_eq!(
            g.value(g.outputs()[1]).ty.shape,
            Some(vec![Dim::Fixed(a), Dim::Fixed(b), Dim::Fixed(t)])
        );
        let kv = data(b, 23);
        let out = run(
            &g,
            vec![
                ("s0", Tensor::new(vec![a, b], s0.clone()).unwrap()),
                ("x", Tensor::new(vec![a, t, b], xv.clone()).unwrap()),
                ("k", Tensor::new(vec![b], kv.clone()).unwrap()),
            ],
        )
        .unwrap();
        let mut s: Vec<f64> = s0.iter().map(|&v| v as f64).collect();
        let mut ys = vec![0f64; a * b * t];
        for it in 0..t {
            let step = t - 1 - it;
            for i in 0..a {
                for j in 0..b {
                    s[i * b + j] += xv[(i * t + step) * b + j] as f64;
                    ys[(i * b + j) * t + it] = s[i * b + j] * kv[j] as f64;
                }
            }
        }
        close(&vals(&out[0]), &s);
        close(&vals(&out[1]), &ys);
    }

    /// Scan-8: a batch axis in front of states and scan inputs.
    #[test]
    fn scan8_batched_against_loops() {
        let (n, t, c) = (2usize, 3usize, 4usize);
        let xv = data(n * t * c, 31);
        let s0 = data(n * c, 32);
        let mut body = GraphBuilder::new("body");
        body.input("s", f32s(&[c]))
            .input("xs", f32s(&[c]))
            .node(node("Mul", 7, &["s", "xs"], &["s2"]))
            .node(node("Identity", 1, &["s2"], &["o"]))
            .output("s2")
            .output("o");
        let mut g = GraphBuilder::new("g");
        g.input("s0", f32s(&[n, c])).input("x", f32s(&[n, t, c]));
        let mut nd = with(
            node("Scan", 8, &["", "s0", "x"], &["sf", "ys"]),
            "body",
            def(body),
        );
        nd.attrs.insert("num_scan_inputs", Attribute::Int(1));
        g.node(nd).output("sf").output("ys");
        let g = g.build(Registry::global()).unwrap();
        let out = run(
            &g,
            vec![
                ("s0", Tensor::new(vec![n, c], s0.clone()).unwrap()),
                ("x", Tensor::new(vec![n, t, c], xv.clone()).unwrap()),
            ],
        )
        .unwrap();
        let mut s: Vec<f64> = s0.iter().map(|&v| v as f64).collect();
        let mut ys = vec![0f64; n * t * c];
        for bi in 0..n {
            for it in 0..t {
                for j in 0..c {
                    s[bi * c + j] *= xv[(bi * t + it) * c + j] as f64;
                    ys[(bi * t + it) * c + j] = s[bi * c + j];
                }
            }
        }
        close(&vals(&out[0]), &s);
        assert_eq!(out[1].shape(), &[n, t, c]);
        close(&vals(&out[1]), &ys);
    }

    /// An If nested in a Loop body reads a value of the outermost graph (`z`): the capture
    /// passes through the Loop node into its body and from there into the If.
    #[test]
    fn nested_subgraphs_capture_from_the_outermost_scope() {
        let zv = data(4, 41);
        let mut then_b = GraphBuilder::new("then");
        then_b
            .node(node("Add", 14, &["acc", "z"], &["t"]))
            .output("t");
        let mut else_b = GraphBuilder::new("else");
        else_b
            .node(node("Sub", 14, &["acc", "z"], &["e"]))
            .output("e");
        let mut body = GraphBuilder::new("body");
        body.input("i", TensorType::fixed(DType::I64, &[]))
            .input("c", TensorType::fixed(DType::Bool, &[]))
            .input_untyped("acc")
            .initializer("two", Tensor::scalar(2i64))
            .node(node("Less", 13, &["i", "two"], &["early"]));
        let n = with(
            node("If", 13, &["early"], &["acc2"]),
            "then_branch",
            def(then_b),
        );
        body.node(with(n, "else_branch", def(else_b)))
            .output("c")
            .output("acc2");
        let mut g = GraphBuilder::new("g");
        g.input("m", TensorType::fixed(DType::I64, &[]))
            .input("a0", f32s(&[4]))
            .input("z", f32s(&[4]));
        let n = with(
            node("Loop", 16, &["m", "", "a0"], &["out"]),
            "body",
            def(body),
        );
        g.node(n).output("out");
        let g = g.build(Registry::global()).unwrap();
        let a0 = data(4, 42);
        let out = run(
            &g,
            vec![
                ("m", Tensor::scalar(5i64)),
                ("a0", Tensor::new(vec![4], a0.clone()).unwrap()),
                ("z", Tensor::new(vec![4], zv.clone()).unwrap()),
            ],
        )
        .unwrap();
        // Iterations 0, 1 add z, iterations 2, 3, 4 subtract it: a0 - z.
        let want: Vec<f64> = a0
            .iter()
            .zip(&zv)
            .map(|(&a, &z)| a as f64 + 2.0 * z as f64 - 3.0 * z as f64)
            .collect();
        close(&vals(&out[0]), &want);
    }
}
