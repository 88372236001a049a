//! The parameters of a scheduled kernel and the renaming of compute
//! expressions into kernel expressions.

use super::error::ScheduleError;
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_shape, ComputeDef, ComputeNode};
use hidet_ir::expr::{Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::layout::{strided, LayoutNode};
use hidet_ir::ty::Type;
use std::collections::HashMap;

/// The parameters of a kernel under construction, standing for the
/// definition's tensors and shape variables.
///
/// Parameter order: every input of the definition (in order), then one
/// parameter per output position (in order, even when an output repeats or
/// is an input), then the scalar variables the shapes use, in order of
/// first appearance over the input shapes, the node shapes and the
/// reduction shapes.
pub(crate) struct Kernel {
    /// Input tensor of the definition → its parameter.
    inputs: HashMap<Var, Var>,
    /// One parameter per output position.
    pub outputs: Vec<Var>,
    scalars: HashMap<Var, Var>,
    scalar_params: Vec<Var>,
}

impl Kernel {
    /// The parameters of kernel `name`: tensor parameters declared in the
    /// returned builder; the scalar parameters are appended by
    /// [`Kernel::finish`]. Tensor types whose shapes use scalar variables
    /// refer to the kernel's scalar parameters; such a tensor must have a
    /// strided (e.g. row-major) layout.
    pub fn new(def: &ComputeDef, name: &str) -> Result<(Kernel, FunctionBuilder), ScheduleError> {
        let mut order: Vec<Var> = Vec::new();
        let mut note = |e: &Expr| {
            e.visit(&mut |x| {
                if let ExprKind::Var(v) = x.kind() {
                    if v.ty().as_data().is_some() && !order.contains(v) {
                        order.push(v.clone());
                    }
                }
            })
        };
        for t in def.inputs.iter().chain(def.nodes.iter().map(|(v, _)| v)) {
            tensor_shape(t).iter().for_each(&mut note);
        }
        for (_, node) in &def.nodes {
            if let ComputeNode::Reduce { reduce_shape, .. } = node {
                reduce_shape.iter().for_each(&mut note);
            }
        }
        let scalar_params: Vec<Var> = order
            .iter()
            .map(|v| Var::new(v.name(), v.ty().clone()))
            .collect();
        let scalars: HashMap<Var, Var> = order
            .into_iter()
            .zip(scalar_params.iter().cloned())
            .collect();
        let substitution: HashMap<Var, Expr> =
            scalars.iter().map(|(v, p)| (v.clone(), p.expr())).collect();
        let mut fb = FunctionBuilder::cpu_kernel(name);
        let mut param = |v: &Var| -> Result<Var, ScheduleError> {
            Ok(fb.param(v.name(), retype(v, &substitution)?))
        };
        let inputs = def
            .inputs
            .iter()
            .map(|v| Ok((v.clone(), param(v)?)))
            .collect::<Result<HashMap<Var, Var>, ScheduleError>>()?;
        let outputs = def
            .outputs
            .iter()
            .map(&mut param)
            .collect::<Result<Vec<Var>, _>>()?;
        let kernel = Kernel {
            inputs,
            outputs,
            scalars,
            scalar_params,
        };
        Ok((kernel, fb))
    }

    /// The finished kernel, with the scalar parameters last.
    pub fn finish(self, fb: FunctionBuilder) -> Function {
        let mut f = fb.finish();
        f.params.extend(self.scalar_params);
        f
    }

    /// `e` as a kernel expression: variables in `vars` replaced by their
    /// expressions, reads of tensors in `reads` replaced by their scalar
    /// values (whatever the indices), reads of inputs redirected to the
    /// input parameters and shape variables to the scalar parameters.
    pub fn rename(&self, e: &Expr, vars: &HashMap<Var, Expr>, reads: &HashMap<Var, Expr>) -> Expr {
        e.rewrite(&mut |x| match x.kind() {
            ExprKind::Var(v) => vars
                .get(v)
                .cloned()
                .or_else(|| self.scalars.get(v).map(Var::expr)),
            ExprKind::TensorElement { tensor, indices } => reads
                .get(tensor)
                .cloned()
                .or_else(|| self.inputs.get(tensor).map(|p| p.at(indices.clone()))),
            _ => None,
        })
    }

    /// A shape or extent expression of the definition as a kernel expression.
    pub fn extent(&self, e: &Expr) -> Expr {
        self.rename(e, &HashMap::new(), &HashMap::new())
    }

    /// The parameter of input `v`, if `v` is an input of the definition.
    pub fn input(&self, v: &Var) -> Option<&Var> {
        self.inputs.get(v)
    }
}

/// The type of `v` with the shape variables of its layout replaced.
fn retype(v: &Var, substitution: &HashMap<Var, Expr>) -> Result<Type, ScheduleError> {
    let Type::Tensor(t) = v.ty() else {
        return Ok(v.ty().clone());
    };
    let uses_scalars = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| found |= x.as_var().is_some_and(|s| substitution.contains_key(s)));
        found
    };
    match t.layout.node() {
        LayoutNode::Strided { shape, strides } => {
            if !shape.iter().chain(strides).any(uses_scalars) {
                return Ok(v.ty().clone());
            }
            let shape: Vec<Expr> = shape.iter().map(|e| e.substitute(substitution)).collect();
            let strides: Vec<Expr> = strides.iter().map(|e| e.substitute(substitution)).collect();
            let layout = strided(shape, strides).map_err(|e| {
                ScheduleError::unsupported(format!("layout of `{}`: {e}", v.name()))
            })?;
            Ok(Type::tensor(t.dtype, layout))
        }
        _ if t.layout.shape().iter().any(uses_scalars) => Err(ScheduleError::unsupported(format!(
            "`{}` has a non-strided layout with a run-time shape",
            v.name()
        ))),
        _ => Ok(v.ty().clone()),
    }
}
