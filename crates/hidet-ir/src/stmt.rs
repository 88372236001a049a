//! Statements.

use crate::expr::{Expr, ExprKind, Var};
use crate::mapping::TaskMapping;

/// Where a declared variable lives.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Scope {
    /// Device/host global memory (kernel parameters and views of them).
    Global,
    /// Memory shared by the threads of a CUDA block. Not available on the CPU.
    Shared,
    /// Registers / thread-local storage.
    Register,
}

/// How a `for` loop is executed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum LoopKind {
    #[default]
    Serial,
    /// Fully unrolled (`None`) or unrolled by a factor.
    Unroll(Option<u32>),
    /// Iterations distributed over CPU threads. Only valid in CPU kernels.
    Parallel,
    /// Iterations are independent and may be vectorized by the compiler.
    Vectorize,
}

/// Synchronization barriers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Barrier {
    /// All threads of a CUDA block (`__syncthreads`).
    Block,
    /// All lanes of a warp (`__syncwarp`).
    Warp,
}

/// A statement. Compound statements own their bodies.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Declares `var` in `scope`. A tensor-typed var declared with `init`
    /// is a view: its storage starts at the pointer `init`.
    Declare {
        var: Var,
        scope: Scope,
        init: Option<Expr>,
    },
    /// `tensor[indices] = value` (through the layout); for a pointer, one index.
    Store {
        tensor: Var,
        indices: Vec<Expr>,
        value: Expr,
    },
    /// `var = value` for a scalar/vector variable.
    Assign {
        var: Var,
        value: Expr,
    },
    /// Binds an immutable `var = value` for `body`.
    Let {
        var: Var,
        value: Expr,
        body: Box<Stmt>,
    },
    /// `for var in 0..extent`.
    For {
        var: Var,
        extent: Expr,
        kind: LoopKind,
        body: Box<Stmt>,
    },
    /// `for vars in mapping.on(worker)`: runs `body` for each task of
    /// `worker`, in the mapping's order, binding the task index to `vars`
    /// (one per task dimension). Removed by `lower_task_mappings`.
    ForMapping {
        vars: Vec<Var>,
        mapping: TaskMapping,
        worker: Expr,
        body: Box<Stmt>,
    },
    If {
        cond: Expr,
        then_body: Box<Stmt>,
        else_body: Option<Box<Stmt>>,
    },
    Seq(Vec<Stmt>),
    Barrier(Barrier),
    /// Evaluates an expression for its effect (an intrinsic call).
    Evaluate(Expr),
    /// Aborts the kernel with `message` if `cond` is false.
    Assert {
        cond: Expr,
        message: String,
    },
    /// Launches the CUDA kernel `kernel` of the same module (host launchers only).
    Launch {
        kernel: String,
        grid: [Expr; 3],
        block: [Expr; 3],
        shared_bytes: Expr,
        args: Vec<Expr>,
    },
    Return(Option<Expr>),
}

impl Stmt {
    /// An empty statement.
    pub fn nop() -> Stmt {
        Stmt::Seq(Vec::new())
    }

    /// A sequence, flattening nested sequences.
    pub fn seq(stmts: Vec<Stmt>) -> Stmt {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                Stmt::Seq(inner) => out.extend(inner),
                other => out.push(other),
            }
        }
        if out.len() == 1 {
            out.pop().expect("length checked to be 1")
        } else {
            Stmt::Seq(out)
        }
    }

    /// The statements directly nested in this one.
    pub fn children(&self) -> Vec<&Stmt> {
        match self {
            Stmt::Let { body, .. } | Stmt::For { body, .. } | Stmt::ForMapping { body, .. } => {
                vec![body]
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                let mut v: Vec<&Stmt> = vec![then_body];
                if let Some(e) = else_body {
                    v.push(e);
                }
                v
            }
            Stmt::Seq(s) => s.iter().collect(),
            _ => vec![],
        }
    }

    /// The expressions this statement evaluates directly (not those of nested statements).
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            Stmt::Declare { init, .. } => init.iter().collect(),
            Stmt::Store { indices, value, .. } => indices.iter().chain([value]).collect(),
            Stmt::Assign { value, .. } | Stmt::Let { value, .. } => vec![value],
            Stmt::For { extent, .. } => vec![extent],
            Stmt::ForMapping { worker, .. } => vec![worker],
            Stmt::If { cond, .. } | Stmt::Assert { cond, .. } => vec![cond],
            Stmt::Evaluate(e) => vec![e],
            Stmt::Launch {
                grid,
                block,
                shared_bytes,
                args,
                ..
            } => grid
                .iter()
                .chain(block.iter())
                .chain([shared_bytes])
                .chain(args.iter())
                .collect(),
            Stmt::Return(e) => e.iter().collect(),
            Stmt::Seq(_) | Stmt::Barrier(_) => vec![],
        }
    }

    /// The variables this statement (with everything nested in it) mentions but does
    /// not define, in order of first mention: what a body lifted out of its
    /// function must be given. A variable is defined by `Declare`, `Let`, `For` and
    /// `ForMapping`; it is mentioned by an expression, a `Store`'s tensor, an
    /// `Assign`'s target, or the layout of a tensor mentioned or declared (a layout whose
    /// extents are scalar parameters needs them). Relies on variables being unique
    /// (identity by id), so a variable defined anywhere inside is never free.
    pub fn free_vars(&self) -> Vec<Var> {
        let mut defined = std::collections::HashSet::new();
        let mut mentioned = Vec::new();
        self.visit(&mut |s| {
            match s {
                Stmt::Declare { var, .. } => {
                    defined.insert(var.clone());
                    mentioned.push(var.clone());
                }
                Stmt::Let { var, .. } | Stmt::For { var, .. } => {
                    defined.insert(var.clone());
                }
                Stmt::ForMapping { vars, .. } => defined.extend(vars.iter().cloned()),
                Stmt::Store { tensor, .. } => mentioned.push(tensor.clone()),
                Stmt::Assign { var, .. } => mentioned.push(var.clone()),
                _ => {}
            }
            for e in s.exprs() {
                e.visit(&mut |e| match e.kind() {
                    ExprKind::Var(v) | ExprKind::TensorElement { tensor: v, .. } => {
                        mentioned.push(v.clone())
                    }
                    _ => {}
                });
            }
        });
        let in_layouts: Vec<Var> = mentioned
            .iter()
            .flat_map(|v| match v.ty() {
                crate::ty::Type::Tensor(t) => t.layout.vars(),
                _ => Vec::new(),
            })
            .collect();
        mentioned.extend(in_layouts);
        let mut seen = std::collections::HashSet::new();
        mentioned
            .into_iter()
            .filter(|v| !defined.contains(v) && seen.insert(v.clone()))
            .collect()
    }

    /// The variables this statement (with everything nested in it) assigns with `Assign`.
    pub fn assigned_vars(&self) -> std::collections::HashSet<Var> {
        let mut assigned = std::collections::HashSet::new();
        self.visit(&mut |s| {
            if let Stmt::Assign { var, .. } = s {
                assigned.insert(var.clone());
            }
        });
        assigned
    }

    /// Visits this statement and every nested one in pre-order.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        for c in self.children() {
            c.visit(f);
        }
    }

    /// Rebuilds the statement tree bottom-up, applying `fs` to every statement
    /// (after its children were rebuilt) and `fe` to every expression it holds.
    pub fn rewrite(
        &self,
        fs: &mut impl FnMut(Stmt) -> Stmt,
        fe: &mut impl FnMut(&Expr) -> Expr,
    ) -> Stmt {
        let rebuilt = match self {
            Stmt::Declare { var, scope, init } => Stmt::Declare {
                var: var.clone(),
                scope: *scope,
                init: init.as_ref().map(&mut *fe),
            },
            Stmt::Store {
                tensor,
                indices,
                value,
            } => Stmt::Store {
                tensor: tensor.clone(),
                indices: indices.iter().map(&mut *fe).collect(),
                value: fe(value),
            },
            Stmt::Assign { var, value } => Stmt::Assign {
                var: var.clone(),
                value: fe(value),
            },
            Stmt::Let { var, value, body } => Stmt::Let {
                var: var.clone(),
                value: fe(value),
                body: Box::new(body.rewrite(fs, fe)),
            },
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => Stmt::For {
                var: var.clone(),
                extent: fe(extent),
                kind: *kind,
                body: Box::new(body.rewrite(fs, fe)),
            },
            Stmt::ForMapping {
                vars,
                mapping,
                worker,
                body,
            } => Stmt::ForMapping {
                vars: vars.clone(),
                mapping: mapping.clone(),
                worker: fe(worker),
                body: Box::new(body.rewrite(fs, fe)),
            },
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: fe(cond),
                then_body: Box::new(then_body.rewrite(fs, fe)),
                else_body: else_body.as_ref().map(|e| Box::new(e.rewrite(fs, fe))),
            },
            Stmt::Seq(stmts) => Stmt::Seq(stmts.iter().map(|s| s.rewrite(fs, fe)).collect()),
            Stmt::Barrier(b) => Stmt::Barrier(*b),
            Stmt::Evaluate(e) => Stmt::Evaluate(fe(e)),
            Stmt::Assert { cond, message } => Stmt::Assert {
                cond: fe(cond),
                message: message.clone(),
            },
            Stmt::Launch {
                kernel,
                grid,
                block,
                shared_bytes,
                args,
            } => Stmt::Launch {
                kernel: kernel.clone(),
                grid: grid.clone().map(|e| fe(&e)),
                block: block.clone().map(|e| fe(&e)),
                shared_bytes: fe(shared_bytes),
                args: args.iter().map(&mut *fe).collect(),
            },
            Stmt::Return(e) => Stmt::Return(e.as_ref().map(&mut *fe)),
        };
        fs(rebuilt)
    }
}
