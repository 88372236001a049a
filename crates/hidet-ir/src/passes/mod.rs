//! IR passes: the rewrites between a kernel template and code generation.
//!
//! A pass is a [`FunctionPass`]: it takes a function and returns the
//! rewritten function or a [`PassError`]. [`lowering_passes`] is the one
//! ordered list every function goes through before code generation;
//! [`lower_function`] and [`lower_module`] run it. After lowering, no
//! `Stmt::ForMapping` remains and every expression is simplified.

pub mod bounds;
pub mod hoist_gather_bases;
pub mod hoist_invariant_loads;
pub mod lower_task_mappings;
pub mod simplify;
pub mod split_divided_loops;
pub mod split_guarded_loops;

pub use bounds::{bound_of, is_non_negative, Interval, VarRanges};
pub use hoist_gather_bases::HoistGatherBases;
pub use hoist_invariant_loads::HoistInvariantLoads;
pub use lower_task_mappings::LowerTaskMappings;
pub use simplify::{simplify_expr, Simplify};
pub use split_divided_loops::SplitDividedLoops;
pub use split_guarded_loops::SplitGuardedLoops;

use crate::dtype::DataType;
use crate::expr::{Expr, Var};
use crate::function::{Function, IRModule};
use crate::stmt::{LoopKind, Stmt};

/// Why a pass rejected a function. Every variant names the function; those
/// about one statement show it (its mapping and worker).
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum PassError {
    #[error(
        "in function `{function}`: `for {vars:?} in ({mapping}).on({worker})` binds {} \
         variables but the mapping has rank {rank}",
        vars.len()
    )]
    MappingRankMismatch {
        function: String,
        vars: Vec<String>,
        mapping: String,
        worker: String,
        rank: usize,
    },
    #[error(
        "in function `{function}`: the worker of `({mapping}).on({worker})` has type {ty}; \
         workers must be scalar integers"
    )]
    NonIntegerWorker {
        function: String,
        mapping: String,
        worker: String,
        ty: String,
    },
    #[error(
        "in function `{function}`: after pass `{pass}`, the task-mapping loop \
         `({mapping}).on({worker})` is still there"
    )]
    Unlowered {
        function: String,
        pass: &'static str,
        mapping: String,
        worker: String,
    },
}

/// `extent > 0`: whether a loop of `extent` iterations runs at least once, the guard of a read
/// hoisted out of it (a loop that never runs reads nothing).
pub(crate) fn runs_at_least_once(extent: &Expr) -> Expr {
    extent.gt(Expr::int_of(0, extent.dtype().unwrap_or(DataType::I32)))
}

/// `(variable, extent, body, variable type)` when `s` is a vectorized loop over a scalar
/// integer variable: what the loop-splitting passes rewrite.
pub(crate) fn vectorized_loop(s: &Stmt) -> Option<(&Var, &Expr, &Stmt, DataType)> {
    let Stmt::For {
        var,
        extent,
        kind: LoopKind::Vectorize,
        body,
    } = s
    else {
        return None;
    };
    let ty = var
        .ty()
        .as_data()
        .filter(|t| t.is_integer() && t.lanes == 1)?;
    Some((var, extent, body, ty))
}

/// A rewrite of one function.
pub trait FunctionPass {
    /// A short, stable name (used in errors and IR dumps).
    fn name(&self) -> &'static str;

    /// Rewrites `f`. The result computes the same thing as `f`.
    fn run(&self, f: Function) -> Result<Function, PassError>;
}

/// The passes every function goes through before code generation, in order:
/// task mappings become loops, the arithmetic is simplified, vectorized loops
/// that divide their variable are cut at row boundaries (on simplified
/// indices), vectorized loops whose store reads under an affine guard are cut
/// where the guard holds, and the cut loops' bounds and indices are simplified
/// again; last, loads that gather through a loop-invariant table read get base pointers
/// declared before their loop.
pub fn lowering_passes() -> Vec<Box<dyn FunctionPass>> {
    vec![
        Box::new(LowerTaskMappings),
        Box::new(Simplify),
        Box::new(SplitDividedLoops),
        Box::new(Simplify),
        Box::new(SplitGuardedLoops),
        Box::new(Simplify),
        Box::new(HoistGatherBases),
        Box::new(HoistInvariantLoads),
    ]
}

/// Runs [`lowering_passes`] on `f`. The result has no `Stmt::ForMapping`.
pub fn lower_function(f: Function) -> Result<Function, PassError> {
    let mut f = f;
    let mut last = "none";
    for pass in lowering_passes() {
        f = pass.run(f)?;
        last = pass.name();
    }
    if let Some((mapping, worker)) = first_for_mapping(&f.body) {
        return Err(PassError::Unlowered {
            function: f.name,
            pass: last,
            mapping,
            worker,
        });
    }
    Ok(f)
}

/// Runs [`lower_function`] on every function of `m`.
pub fn lower_module(m: IRModule) -> Result<IRModule, PassError> {
    let IRModule {
        name,
        target,
        functions,
    } = m;
    let functions = functions
        .into_iter()
        .map(lower_function)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule {
        name,
        target,
        functions,
    })
}

fn first_for_mapping(s: &Stmt) -> Option<(String, String)> {
    let mut found = None;
    s.visit(&mut |s| {
        if let (
            None,
            Stmt::ForMapping {
                mapping, worker, ..
            },
        ) = (&found, s)
        {
            found = Some((mapping.to_string(), worker.to_string()));
        }
    });
    found
}
