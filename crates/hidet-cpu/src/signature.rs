//! Kernel signatures taken from IR functions, and the check of call
//! arguments against them.

use crate::arg::KernelArg;
use crate::error::{ArgError, CpuError};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::stmt::Stmt;
use hidet_ir::ty::Type;
use std::collections::{HashMap, HashSet};

/// What one kernel parameter accepts.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    /// A tensor of `dtype` whose logical shape is `shape` and whose storage
    /// spans `size` elements; both may be expressions of integer scalar
    /// parameters.
    Tensor {
        dtype: DataType,
        shape: Vec<Expr>,
        size: Expr,
        written: bool,
    },
    /// A raw pointer to elements of `dtype` (no shape).
    Pointer { dtype: DataType, written: bool },
    /// A scalar passed by value.
    Scalar(DataType),
}

/// One parameter: its IR variable and what it accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub var: Var,
    pub kind: ParamKind,
}

impl ParamSpec {
    pub fn name(&self) -> &str {
        self.var.name()
    }

    /// Whether the kernel may write through this parameter. Conservative:
    /// true when the IR stores to it, takes its address for anything but a
    /// vector load or the initializer of a view or pointer, or declares a view or
    /// pointer of it through which the same holds.
    pub fn is_written(&self) -> bool {
        match &self.kind {
            ParamKind::Tensor { written, .. } | ParamKind::Pointer { written, .. } => *written,
            ParamKind::Scalar(_) => false,
        }
    }
}

/// The parameters of a CPU kernel, in call order.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSignature {
    pub kernel: String,
    pub params: Vec<ParamSpec>,
}

impl KernelSignature {
    /// The signature of `function`. Fails for parameter types the CPU
    /// calling convention cannot pass (void, pointers to non-data types,
    /// vector-typed scalars).
    pub fn of(function: &Function) -> Result<KernelSignature, CpuError> {
        let written = written_params(&function.body);
        let params = function
            .params
            .iter()
            .map(|var| {
                let is_written = written.contains(&var.id());
                let kind = match var.ty() {
                    Type::Tensor(t) => ParamKind::Tensor {
                        dtype: t.dtype,
                        shape: t.layout.shape(),
                        size: t.layout.size(),
                        written: is_written,
                    },
                    Type::Pointer(inner) => match inner.as_data() {
                        Some(dtype) => ParamKind::Pointer {
                            dtype,
                            written: is_written,
                        },
                        None => return Err(unsupported(function, var)),
                    },
                    Type::Data(d) if !d.is_vector() => ParamKind::Scalar(*d),
                    _ => return Err(unsupported(function, var)),
                };
                Ok(ParamSpec {
                    var: var.clone(),
                    kind,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KernelSignature {
            kernel: function.name.clone(),
            params,
        })
    }

    /// Checks `args` against this signature: count, kinds, dtypes, shapes
    /// (evaluated with the integer scalar arguments), buffer sizes and
    /// mutability. Succeeds only if the kernel may be called with them.
    pub fn check(&self, args: &[KernelArg<'_>]) -> Result<(), ArgError> {
        if args.len() != self.params.len() {
            return Err(ArgError::Count {
                kernel: self.kernel.clone(),
                expected: self.params.len(),
                given: args.len(),
            });
        }
        let mut env = HashMap::new();
        for (param, arg) in self.params.iter().zip(args) {
            if let (ParamKind::Scalar(expected), KernelArg::Scalar(s)) = (&param.kind, arg) {
                if s.dtype() != *expected {
                    return Err(ArgError::DType {
                        param: param.name().to_string(),
                        expected: *expected,
                        given: s.dtype(),
                    });
                }
                if let Some(v) = s.as_index() {
                    env.insert(param.var.id(), v);
                }
            }
        }
        for (param, arg) in self.params.iter().zip(args) {
            check_one(param, arg, &env)?;
        }
        Ok(())
    }
}

fn unsupported(function: &Function, var: &Var) -> CpuError {
    CpuError::Unsupported(format!(
        "kernel `{}`: parameter `{}` of type {} cannot be passed to a CPU kernel",
        function.name,
        var.name(),
        var.ty()
    ))
}

fn check_one(
    param: &ParamSpec,
    arg: &KernelArg<'_>,
    env: &HashMap<u64, i64>,
) -> Result<(), ArgError> {
    let name = || param.name().to_string();
    let tensor = match (&param.kind, arg) {
        (ParamKind::Scalar(_), KernelArg::Scalar(_)) => return Ok(()),
        (ParamKind::Scalar(d), KernelArg::Tensor(t)) => {
            return Err(ArgError::Kind {
                param: name(),
                expected: format!("a scalar {d}"),
                given: format!("a tensor of {}", t.dtype()),
            })
        }
        (
            ParamKind::Tensor { dtype, .. } | ParamKind::Pointer { dtype, .. },
            KernelArg::Scalar(s),
        ) => {
            return Err(ArgError::Kind {
                param: name(),
                expected: format!("a tensor of {dtype}"),
                given: format!("a scalar {}", s.dtype()),
            })
        }
        (_, KernelArg::Tensor(t)) => t,
    };
    let expected_dtype = match &param.kind {
        ParamKind::Tensor { dtype, .. } | ParamKind::Pointer { dtype, .. } => *dtype,
        ParamKind::Scalar(d) => *d,
    };
    if tensor.dtype() != expected_dtype {
        return Err(ArgError::DType {
            param: name(),
            expected: expected_dtype,
            given: tensor.dtype(),
        });
    }
    if param.is_written() && !tensor.is_mutable() {
        return Err(ArgError::ReadOnly { param: name() });
    }
    let given_len: usize = tensor.shape().iter().product();
    if given_len > tensor.len() {
        return Err(ArgError::BufferTooSmall {
            param: name(),
            needed: given_len,
            given: tensor.len(),
        });
    }
    if let ParamKind::Tensor { shape, size, .. } = &param.kind {
        let eval = |e: &Expr| {
            eval_index(e, env).map_err(|reason| ArgError::ShapeExpr {
                param: name(),
                reason,
            })
        };
        let expected: Vec<i64> = shape.iter().map(eval).collect::<Result<_, _>>()?;
        let matches = expected.len() == tensor.shape().len()
            && expected
                .iter()
                .zip(tensor.shape())
                .all(|(&e, &g)| u64::try_from(e).is_ok_and(|e| e == g as u64));
        if !matches {
            return Err(ArgError::Shape {
                param: name(),
                expected,
                given: tensor.shape().to_vec(),
            });
        }
        let needed = usize::try_from(eval(size)?.max(0)).unwrap_or(usize::MAX);
        let all_nonempty = expected.iter().all(|&e| e > 0);
        if all_nonempty && needed > tensor.len() {
            return Err(ArgError::BufferTooSmall {
                param: name(),
                needed,
                given: tensor.len(),
            });
        }
    }
    Ok(())
}

/// Evaluates an integer expression over constants and integer scalar
/// parameters (`env` maps variable ids to values): [`Expr::eval_int`].
pub fn eval_index(e: &Expr, env: &HashMap<u64, i64>) -> Result<i64, String> {
    e.eval_int(&|v| env.get(&v.id()).copied())
}

/// Ids of variables the statement may write through (see
/// [`ParamSpec::is_written`]).
fn written_params(body: &Stmt) -> HashSet<u64> {
    let mut written = HashSet::new();
    // Pointers and views declared from other variables' addresses: each aliases every
    // variable its initializer mentions, and a write through it is a write to all of them.
    let mut aliases: Vec<(u64, Vec<u64>)> = Vec::new();
    body.visit(&mut |s| {
        match s {
            Stmt::Store { tensor, .. } => {
                written.insert(tensor.id());
            }
            // A scalar declared from loaded values holds a value, not an address; any other
            // declaration (a pointer, a view) may write through what its initializer reads.
            Stmt::Declare {
                var,
                init: Some(init),
                ..
            } if !matches!(var.ty(), Type::Data(_)) => {
                let mut sources = Vec::new();
                init.visit(&mut |e| {
                    if let ExprKind::Var(v) | ExprKind::TensorElement { tensor: v, .. } = e.kind() {
                        sources.push(v.id());
                    }
                });
                aliases.push((var.id(), sources));
                return;
            }
            _ => {}
        }
        for e in s.exprs() {
            mark_escaping(e, &mut written);
        }
    });
    // A view of a view: repeat until no write reaches a further variable.
    loop {
        let before = written.len();
        for (alias, sources) in &aliases {
            if written.contains(alias) {
                written.extend(sources.iter().copied());
            }
        }
        if written.len() == before {
            return written;
        }
    }
}

/// Marks tensors whose address (or whose pointer value) escapes `e` other
/// than into a vector load.
fn mark_escaping(e: &Expr, written: &mut HashSet<u64>) {
    match e.kind() {
        ExprKind::Call(Intrinsic::VectorLoad { .. }, args) => {
            for arg in args {
                match arg.kind() {
                    ExprKind::Address(inner) => {
                        for c in inner.children() {
                            mark_escaping(c, written);
                        }
                    }
                    _ => mark_escaping(arg, written),
                }
            }
        }
        ExprKind::Address(inner) => {
            inner.visit(&mut |x| {
                if let ExprKind::Var(v) | ExprKind::TensorElement { tensor: v, .. } = x.kind() {
                    written.insert(v.id());
                }
            });
        }
        ExprKind::Var(v) if !matches!(v.ty(), Type::Data(_)) => {
            written.insert(v.id());
        }
        _ => {
            for c in e.children() {
                mark_escaping(c, written);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::prelude::*;

    #[test]
    fn shapes_evaluate_with_floor_semantics_and_params() {
        let n = Var::new("n", DataType::I32);
        let mut env = HashMap::new();
        env.insert(n.id(), 7);
        assert_eq!(eval_index(&(&n * 2 + 1), &env), Ok(15));
        assert_eq!(eval_index(&(Expr::int(-7) / 2), &env), Ok(-4));
        assert_eq!(eval_index(&(Expr::int(-7) % 2), &env), Ok(1));
        assert!(eval_index(&(&n / 0), &env).is_err());
        let other = Var::new("m", DataType::I32);
        assert!(eval_index(&other.expr(), &env).is_err());
    }

    /// A view of a parameter only read is no write to it (the base pointers the lowering
    /// hoists for gathers are such views); a view stored to, or a view of that view stored
    /// to, writes its source.
    #[test]
    fn views_write_their_source_only_when_written_through() {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let a = fb.tensor_param("a", DataType::F32, [16]);
        let b = fb.tensor_param("b", DataType::F32, [16]);
        let c = fb.tensor_param("c", DataType::F32, [16]);
        let read = fb.view("read", DataType::F32, row_major([12]), a.at([4]).address());
        let written = fb.view(
            "written",
            DataType::F32,
            row_major([14]),
            b.at([2]).address(),
        );
        let nested = fb.view(
            "nested",
            DataType::F32,
            row_major([13]),
            written.at([1]).address(),
        );
        fb.store(&nested, [0], read.at([3]));
        fb.store(&c, [0], read.at([1]));
        let sig = KernelSignature::of(&fb.finish()).expect("all params are passable");
        let flags: Vec<bool> = sig.params.iter().map(ParamSpec::is_written).collect();
        assert_eq!(flags, vec![false, true, true]);
    }

    #[test]
    fn written_params_are_found_conservatively() {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let a = fb.tensor_param("a", DataType::F32, [16]);
        let b = fb.tensor_param("b", DataType::F32, [16]);
        let c = fb.tensor_param("c", DataType::F32, [16]);
        let v = Expr::call(
            Intrinsic::VectorLoad {
                dtype: DataType::F32X8,
            },
            vec![a.at([0]).address()],
        );
        fb.call(Intrinsic::VectorStore, vec![b.at([0]).address(), v]);
        fb.store(&c, [1], a.at([1]));
        let sig = KernelSignature::of(&fb.finish()).expect("all params are passable");
        let written: Vec<bool> = sig.params.iter().map(ParamSpec::is_written).collect();
        assert_eq!(written, vec![false, true, true]);
    }
}
