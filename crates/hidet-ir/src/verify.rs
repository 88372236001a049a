//! The IR verifier: rejects ill-formed kernels with an error that names the
//! function, prints the offending statement (with its enclosing statements)
//! and says what is wrong, before any C or CUDA C is generated.
//!
//! Checks, per function:
//! - **types**: operands of binary operators are compatible (same type; or
//!   one side a constant, where a float constant never meets an integer; or
//!   two integers, which widen as [`Expr::ty`] documents; vector lanes equal
//!   or one side scalar); conditions of `if`, `select` and `assert` are
//!   scalar `bool`; values stored, assigned, bound or returned have the
//!   target's type (constants excepted); element access uses as many indices
//!   as the layout's rank (pointers: one); only scalar/vector variables
//!   declared with `Declare` (or parameters) are assigned; math functions and
//!   intrinsics get their number of arguments;
//! - **scoping**: every variable is a parameter or defined (declared, bound
//!   by `let`, a loop or a task mapping) in an enclosing scope before use;
//! - **target**: no shared memory, barriers, CUDA-only intrinsics or launch
//!   builtins (`threadIdx`, …) outside CUDA device code; no parallel loops in
//!   CUDA device code; kernel launches only in host launchers;
//! - **launch shape**: a task mapping iterated on a worker expression whose
//!   largest value can be bounded (from the block shape for `threadIdx`, from
//!   constant loop extents, by interval arithmetic through `+ - * / %`,
//!   shifts, masks, `min`/`max`) has at most as many workers as the
//!   expression takes values; a CUDA block has 1 to 1024 threads;
//! - **memory**: register tensors have constant shapes; static shared tensors
//!   have constant sizes and, with constant dynamic shared memory, fit in
//!   [`MAX_SHARED_BYTES`].
//!
//! [`verify_module`] adds what needs the whole module: unique function
//! names, launched kernels and called functions that exist with matching
//! argument counts, launch blocks equal to the kernel's.

use crate::dtype::{DataType, ScalarType};
use crate::expr::{floor_div, BinaryOp, Builtin, Constant, Dim, Expr, ExprKind, UnaryOp, Var};
use crate::function::{CudaLaunch, Function, FunctionKind, IRModule, Target};
use crate::intrinsic::{Intrinsic, MathFunc};
use crate::layout::{Layout, LayoutNode};
use crate::mapping::{MappingNode, TaskMapping};
use crate::print::{scope_name, Printer};
use crate::stmt::{Barrier, LoopKind, Scope, Stmt};
use crate::ty::Type;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// Shared memory a CUDA block may use, in bytes (228 KiB).
pub const MAX_SHARED_BYTES: i64 = 228 * 1024;

/// Threads a CUDA block may have.
pub const MAX_THREADS_PER_BLOCK: i64 = 1024;

/// A verification failure: which function, what is wrong, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("in function `{function}`: {problem}{}", location_suffix(.location))]
pub struct VerifyError {
    /// The function the problem was found in.
    pub function: String,
    /// What is wrong (boxed to keep `Result<_, VerifyError>` small).
    pub problem: Box<Problem>,
    /// The offending statement, printed after the headers of the statements
    /// enclosing it (see [`Printer::stmt_path`]); empty when the problem
    /// concerns the function's signature or launch configuration.
    pub location: String,
}

fn location_suffix(location: &str) -> String {
    if location.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = location.lines().map(|l| format!("    {l}")).collect();
    format!("\n  at:\n{}", lines.join("\n"))
}

/// What the verifier found wrong. Expressions, variables and types are
/// given as printed by the function's [`Printer`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error(
        "undefined variable `{name}`: not a parameter, nor declared or bound in an enclosing scope"
    )]
    UndefinedVariable { name: String },
    #[error(
        "operands of `{op}` have incompatible types: `{lhs}` is {lhs_ty} but `{rhs}` is {rhs_ty}"
    )]
    IncompatibleOperands {
        op: String,
        lhs: String,
        lhs_ty: String,
        rhs: String,
        rhs_ty: String,
    },
    #[error("`{expr}` has type {found}, but {expected} is required here")]
    WrongType {
        expr: String,
        found: String,
        expected: String,
    },
    #[error("{target} has type {expected}, but the value `{value}` has type {found}")]
    ValueMismatch {
        target: String,
        expected: String,
        value: String,
        found: String,
    },
    #[error("`{tensor}` of type {ty} has rank {rank} but is indexed with {got} indices")]
    IndexCount {
        tensor: String,
        ty: String,
        rank: usize,
        got: usize,
    },
    #[error("`{var}` of type {ty} is neither a tensor nor a pointer and cannot be indexed")]
    NotIndexable { var: String, ty: String },
    #[error("`{var}` of type {ty} cannot be assigned: only scalar and vector variables can")]
    AssignNonScalar { var: String, ty: String },
    #[error("`{var}` is bound by a `let`, a loop or a task mapping and cannot be assigned")]
    AssignImmutable { var: String },
    #[error("`{func}` takes {expected} argument(s) but is given {got}")]
    Arity {
        func: String,
        expected: usize,
        got: usize,
    },
    #[error("bad intrinsic `{intrinsic}`: {detail}")]
    BadIntrinsic { intrinsic: String, detail: String },
    #[error("{what} is not available in {place}")]
    NotAvailable { what: String, place: String },
    #[error(
        "parallel loops are not available in CUDA device code (map the work onto threads instead)"
    )]
    ParallelInCuda,
    #[error("kernel launches are only allowed in host launchers, not in {place}")]
    LaunchOutsideHostLauncher { place: String },
    #[error("mapping {mapping} has {workers} workers but {provider}")]
    TooManyWorkers {
        mapping: String,
        workers: i64,
        available: i64,
        provider: String,
    },
    #[error("the loop binds {vars} variable(s) but mapping {mapping} has rank {rank}")]
    MappingRank {
        vars: usize,
        mapping: String,
        rank: usize,
    },
    #[error("register tensor `{var}` of type {ty} needs a constant shape")]
    RegisterShape { var: String, ty: String },
    #[error(
        "shared tensor `{var}` of type {ty} needs a constant size (or declare a view of dynamic shared memory)"
    )]
    SharedSize { var: String, ty: String },
    #[error(
        "shared memory use reaches {bytes} bytes ({dynamic} of them dynamic), more than the {limit} bytes (228 KiB) a block can use"
    )]
    SharedMemoryExceeded {
        bytes: i64,
        dynamic: i64,
        limit: i64,
    },
    #[error("a {kind} cannot be part of a {target} module")]
    KindNotForTarget { kind: String, target: String },
    #[error("CUDA block ({}, {}, {}) has {threads} threads; a block needs 1 to 1024 threads", .block[0], .block[1], .block[2])]
    BadBlock { block: [i64; 3], threads: i64 },
    #[error("{what} must not return a value")]
    UnexpectedReturnValue { what: String },
    #[error("`return` without a value in a function returning {ret}")]
    MissingReturnValue { ret: String },
    #[error("launch of `{kernel}`: {detail}")]
    BadLaunch { kernel: String, detail: String },
    #[error("call of `{name}`: {detail}")]
    BadCall { name: String, detail: String },
    #[error("the module has more than one function named `{name}`")]
    DuplicateFunction { name: String },
}

/// Verifies one function for `target` (see the module docs for the checks).
/// Launches and calls of other functions are checked only by
/// [`verify_module`], which knows them.
pub fn verify_function(f: &Function, target: Target) -> Result<(), VerifyError> {
    Checker::new(f, target, None).run()
}

/// Verifies every function of `m` for the module's target, and the
/// references between them.
pub fn verify_module(m: &IRModule) -> Result<(), VerifyError> {
    let mut names = HashSet::new();
    for f in &m.functions {
        if !names.insert(f.name.as_str()) {
            return Err(VerifyError {
                function: f.name.clone(),
                problem: Box::new(Problem::DuplicateFunction {
                    name: f.name.clone(),
                }),
                location: String::new(),
            });
        }
    }
    for f in &m.functions {
        Checker::new(f, m.target, Some(m)).run()?;
    }
    Ok(())
}

/// Where a function's code runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    Cpu,
    CudaDevice,
    Host,
}

impl Place {
    fn describe(self) -> String {
        match self {
            Place::Cpu => "CPU code".to_string(),
            Place::CudaDevice => "CUDA device code".to_string(),
            Place::Host => "host launcher code".to_string(),
        }
    }
}

/// A closed range of integers; `None` bounds are unknown.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Interval {
    lo: Option<i64>,
    hi: Option<i64>,
}

impl Interval {
    const UNKNOWN: Interval = Interval { lo: None, hi: None };

    fn exact(v: i64) -> Interval {
        Interval {
            lo: Some(v),
            hi: Some(v),
        }
    }

    fn range(lo: i64, hi: Option<i64>) -> Interval {
        Interval { lo: Some(lo), hi }
    }

    fn constant(self) -> Option<i64> {
        match (self.lo, self.hi) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        }
    }
}

fn both<T>(a: Option<T>, b: Option<T>, f: impl FnOnce(T, T) -> Option<T>) -> Option<T> {
    a.zip(b).and_then(|(x, y)| f(x, y))
}

/// Interval of `a * k` for a constant `k`.
fn scale(a: Interval, k: i64) -> Interval {
    let lo = a.lo.and_then(|v| v.checked_mul(k));
    let hi = a.hi.and_then(|v| v.checked_mul(k));
    if k >= 0 {
        Interval { lo, hi }
    } else {
        Interval { lo: hi, hi: lo }
    }
}

/// Interval of the floor division `a / k` for a constant `k > 0`.
fn divide(a: Interval, k: i64) -> Interval {
    Interval {
        lo: a.lo.map(|v| floor_div(v, k)),
        hi: a.hi.map(|v| floor_div(v, k)),
    }
}

struct Checker<'f> {
    func: &'f Function,
    target: Target,
    module: Option<&'f IRModule>,
    place: Place,
    launch: Option<&'f CudaLaunch>,
    /// How many enclosing scopes define each variable (by id).
    defined: HashMap<u64, usize>,
    /// The variables each open scope defined.
    scopes: Vec<Vec<u64>>,
    /// Variables bound by `let`, loops and task mappings.
    immutable: HashSet<u64>,
    /// Variables of `for` loops.
    loop_vars: HashSet<u64>,
    /// Known value ranges of immutable integer variables.
    bounds: HashMap<u64, Interval>,
    /// The statement being checked and those enclosing it.
    path: Vec<&'f Stmt>,
    static_shared_bytes: i64,
    printer: RefCell<Option<Printer>>,
}

impl<'f> Checker<'f> {
    fn new(func: &'f Function, target: Target, module: Option<&'f IRModule>) -> Checker<'f> {
        let launch = match &func.kind {
            FunctionKind::CudaKernel(l) => Some(l),
            _ => None,
        };
        Checker {
            func,
            target,
            module,
            place: Place::Cpu,
            launch,
            defined: HashMap::new(),
            scopes: vec![Vec::new()],
            immutable: HashSet::new(),
            loop_vars: HashSet::new(),
            bounds: HashMap::new(),
            path: Vec::new(),
            static_shared_bytes: 0,
            printer: RefCell::new(None),
        }
    }

    fn with_printer<T>(&self, f: impl FnOnce(&mut Printer) -> T) -> T {
        let mut slot = self.printer.borrow_mut();
        let printer = slot.get_or_insert_with(|| Printer::for_function(self.func));
        f(printer)
    }

    fn show(&self, e: &Expr) -> String {
        self.with_printer(|p| p.expr(e))
    }

    fn show_ty(&self, t: &Type) -> String {
        self.with_printer(|p| p.ty(t))
    }

    fn show_var(&self, v: &Var) -> String {
        self.with_printer(|p| p.name(v))
    }

    fn show_mapping(&self, m: &TaskMapping) -> String {
        self.with_printer(|p| p.mapping(m))
    }

    /// The error for `problem` at the statement on top of the path.
    fn fail(&self, problem: Problem) -> VerifyError {
        let location = self.with_printer(|p| p.stmt_path(&self.path));
        VerifyError {
            function: self.func.name.clone(),
            problem: Box::new(problem),
            location,
        }
    }

    /// The error for a problem of the signature or launch configuration.
    fn fail_signature(&self, problem: Problem) -> VerifyError {
        VerifyError {
            function: self.func.name.clone(),
            problem: Box::new(problem),
            location: String::new(),
        }
    }

    fn run(mut self) -> Result<(), VerifyError> {
        self.place = self.place_of().map_err(|p| self.fail_signature(p))?;
        let f = self.func;
        for p in &f.params {
            self.define(p);
        }
        for p in &f.params {
            self.check_type(p.ty())
                .map_err(|e| self.fail_signature(e))?;
        }
        if let Some(launch) = self.launch {
            self.check_launch_config(launch)
                .map_err(|e| self.fail_signature(e))?;
        }
        self.stmt(&f.body)?;
        Ok(())
    }

    fn place_of(&self) -> Result<Place, Problem> {
        let kind_name = match self.func.kind {
            FunctionKind::CpuKernel => "CPU kernel",
            FunctionKind::CudaKernel(_) => "CUDA kernel",
            FunctionKind::Internal => "internal function",
            FunctionKind::HostLauncher => "host launcher",
        };
        let place = match (&self.func.kind, self.target) {
            (FunctionKind::CpuKernel | FunctionKind::Internal, Target::Cpu) => Place::Cpu,
            (FunctionKind::CudaKernel(_) | FunctionKind::Internal, Target::Cuda) => {
                Place::CudaDevice
            }
            (FunctionKind::HostLauncher, Target::Cuda) => Place::Host,
            (_, target) => {
                return Err(Problem::KindNotForTarget {
                    kind: kind_name.to_string(),
                    target: match target {
                        Target::Cpu => "CPU".to_string(),
                        Target::Cuda => "CUDA".to_string(),
                    },
                })
            }
        };
        Ok(place)
    }

    fn check_launch_config(&self, launch: &CudaLaunch) -> Result<(), Problem> {
        let threads =
            launch.block.iter().try_fold(
                1i64,
                |acc, &b| if b >= 1 { acc.checked_mul(b) } else { None },
            );
        match threads {
            Some(t) if t <= MAX_THREADS_PER_BLOCK => {}
            _ => {
                return Err(Problem::BadBlock {
                    block: launch.block,
                    threads: launch
                        .block
                        .iter()
                        .fold(1i64, |acc, &b| acc.saturating_mul(b)),
                })
            }
        }
        for e in launch.grid.iter().chain([&launch.dynamic_shared_bytes]) {
            self.expr(e)?;
            self.expect_int_scalar(e, "an integer launch dimension")?;
        }
        Ok(())
    }

    fn define(&mut self, v: &Var) {
        *self.defined.entry(v.id()).or_insert(0) += 1;
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(v.id());
        }
    }

    fn enter(&mut self) {
        self.scopes.push(Vec::new());
    }

    fn exit(&mut self) {
        for id in self.scopes.pop().unwrap_or_default() {
            if let Some(n) = self.defined.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.defined.remove(&id);
                }
            }
        }
    }

    fn check_defined(&self, v: &Var) -> Result<(), Problem> {
        if self.defined.contains_key(&v.id()) {
            Ok(())
        } else {
            Err(Problem::UndefinedVariable {
                name: self.show_var(v),
            })
        }
    }

    /// Checks the expressions inside a type (layout extents and strides).
    fn check_type(&self, t: &Type) -> Result<(), Problem> {
        match t {
            Type::Pointer(inner) => self.check_type(inner),
            Type::Tensor(tt) => {
                for e in layout_exprs(&tt.layout) {
                    self.expr(&e)?;
                    self.expect_int_scalar(&e, "an integer layout extent or stride")?;
                }
                Ok(())
            }
            Type::Data(_) | Type::Void => Ok(()),
        }
    }

    fn not_available(&self, what: String) -> Problem {
        Problem::NotAvailable {
            what,
            place: self.place.describe(),
        }
    }

    // ----- statements -------------------------------------------------------

    fn stmt(&mut self, s: &'f Stmt) -> Result<(), VerifyError> {
        self.path.push(s);
        self.stmt_inner(s)?;
        self.path.pop();
        Ok(())
    }

    /// Checks `body` in a new scope, after `bind` defined the variables it binds.
    fn scoped(&mut self, body: &'f Stmt, bind: impl FnOnce(&mut Self)) -> Result<(), VerifyError> {
        self.enter();
        bind(self);
        let result = self.stmt(body);
        self.exit();
        result
    }

    fn stmt_inner(&mut self, s: &'f Stmt) -> Result<(), VerifyError> {
        match s {
            Stmt::Declare { var, scope, init } => {
                self.declare(var, *scope, init.as_ref())
                    .map_err(|p| self.fail(p))?;
                self.define(var);
            }
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                self.store(tensor, indices, value)
                    .map_err(|p| self.fail(p))?;
            }
            Stmt::Assign { var, value } => self.assign(var, value).map_err(|p| self.fail(p))?,
            Stmt::Let { var, value, body } => {
                let range = self.let_binding(var, value).map_err(|p| self.fail(p))?;
                self.scoped(body, |c| {
                    c.define(var);
                    c.immutable.insert(var.id());
                    c.bounds.insert(var.id(), range);
                })?;
            }
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => {
                let range = self
                    .for_header(var, extent, *kind)
                    .map_err(|p| self.fail(p))?;
                self.scoped(body, |c| {
                    c.define(var);
                    c.immutable.insert(var.id());
                    c.loop_vars.insert(var.id());
                    c.bounds.insert(var.id(), range);
                })?;
            }
            Stmt::ForMapping {
                vars,
                mapping,
                worker,
                body,
            } => {
                self.for_mapping_header(vars, mapping, worker)
                    .map_err(|p| self.fail(p))?;
                let shape = mapping.task_shape();
                self.scoped(body, |c| {
                    for (v, extent) in vars.iter().zip(shape) {
                        c.define(v);
                        c.immutable.insert(v.id());
                        c.bounds
                            .insert(v.id(), Interval::range(0, Some(extent - 1)));
                    }
                })?;
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.condition(cond).map_err(|p| self.fail(p))?;
                self.scoped(then_body, |_| {})?;
                if let Some(e) = else_body {
                    self.scoped(e, |_| {})?;
                }
            }
            Stmt::Seq(stmts) => {
                for c in stmts {
                    self.stmt(c)?;
                }
            }
            Stmt::Barrier(b) => {
                if self.place != Place::CudaDevice {
                    let what = match b {
                        Barrier::Block => "the block barrier `sync_threads()`",
                        Barrier::Warp => "the warp barrier `sync_warp()`",
                    };
                    return Err(self.fail(self.not_available(what.to_string())));
                }
            }
            Stmt::Evaluate(e) => self.expr(e).map_err(|p| self.fail(p))?,
            Stmt::Assert { cond, .. } => self.condition(cond).map_err(|p| self.fail(p))?,
            Stmt::Launch {
                kernel,
                grid,
                block,
                shared_bytes,
                args,
            } => self
                .launch_stmt(kernel, grid, block, shared_bytes, args)
                .map_err(|p| self.fail(p))?,
            Stmt::Return(value) => self.return_stmt(value.as_ref()).map_err(|p| self.fail(p))?,
        }
        Ok(())
    }

    fn declare(&mut self, var: &Var, scope: Scope, init: Option<&Expr>) -> Result<(), Problem> {
        if scope == Scope::Shared && self.place != Place::CudaDevice {
            return Err(self.not_available(format!(
                "shared memory (`{} {}`)",
                scope_name(scope),
                self.show_var(var)
            )));
        }
        self.check_type(var.ty())?;
        if let Some(init) = init {
            self.expr(init)?;
            match var.ty() {
                Type::Data(d) => {
                    self.expect_value(*d, init, || format!("variable `{}`", self.show_var(var)))?
                }
                Type::Tensor(_) | Type::Pointer(_) => {
                    if !matches!(init.ty(), Type::Pointer(_) | Type::Tensor(_)) {
                        return Err(Problem::WrongType {
                            expr: self.show(init),
                            found: self.show_ty(&init.ty()),
                            expected: "a pointer or tensor to view".to_string(),
                        });
                    }
                }
                Type::Void => {
                    return Err(Problem::WrongType {
                        expr: self.show_var(var),
                        found: "void".to_string(),
                        expected: "a value type".to_string(),
                    })
                }
            }
        }
        let tensor = var.ty().as_tensor();
        if scope == Scope::Register {
            if let Some(tt) = tensor {
                if tt.layout.const_shape().is_none() {
                    return Err(Problem::RegisterShape {
                        var: self.show_var(var),
                        ty: self.show_ty(var.ty()),
                    });
                }
            }
        }
        if scope == Scope::Shared && init.is_none() {
            let bytes = match var.ty() {
                Type::Tensor(tt) => tt
                    .layout
                    .size()
                    .as_int()
                    .and_then(|n| n.checked_mul(tt.dtype.bytes() as i64)),
                Type::Data(d) => Some(d.bytes() as i64),
                Type::Pointer(_) => Some(8),
                Type::Void => Some(0),
            };
            let Some(bytes) = bytes else {
                return Err(Problem::SharedSize {
                    var: self.show_var(var),
                    ty: self.show_ty(var.ty()),
                });
            };
            self.static_shared_bytes = self.static_shared_bytes.saturating_add(bytes);
            let dynamic = self
                .launch
                .and_then(|l| l.dynamic_shared_bytes.as_int())
                .unwrap_or(0);
            let total = self.static_shared_bytes.saturating_add(dynamic);
            if total > MAX_SHARED_BYTES {
                return Err(Problem::SharedMemoryExceeded {
                    bytes: total,
                    dynamic,
                    limit: MAX_SHARED_BYTES,
                });
            }
        }
        Ok(())
    }

    fn store(&self, tensor: &Var, indices: &[Expr], value: &Expr) -> Result<(), Problem> {
        for i in indices {
            self.expr(i)?;
        }
        self.expr(value)?;
        let elem = self.element_access(tensor, indices)?;
        self.expect_value(elem, value, || {
            format!("an element of `{}`", self.show_var(tensor))
        })
    }

    fn assign(&self, var: &Var, value: &Expr) -> Result<(), Problem> {
        self.check_defined(var)?;
        self.expr(value)?;
        let Type::Data(d) = var.ty() else {
            return Err(Problem::AssignNonScalar {
                var: self.show_var(var),
                ty: self.show_ty(var.ty()),
            });
        };
        if self.immutable.contains(&var.id()) {
            return Err(Problem::AssignImmutable {
                var: self.show_var(var),
            });
        }
        self.expect_value(*d, value, || format!("variable `{}`", self.show_var(var)))
    }

    fn let_binding(&self, var: &Var, value: &Expr) -> Result<Interval, Problem> {
        self.expr(value)?;
        match var.ty() {
            Type::Data(d) => self.expect_value(*d, value, || {
                format!("`let` variable `{}`", self.show_var(var))
            })?,
            t if *t != value.ty() => {
                return Err(Problem::ValueMismatch {
                    target: format!("`let` variable `{}`", self.show_var(var)),
                    expected: self.show_ty(t),
                    value: self.show(value),
                    found: self.show_ty(&value.ty()),
                })
            }
            _ => {}
        }
        Ok(self.interval(value))
    }

    fn for_header(&self, var: &Var, extent: &Expr, kind: LoopKind) -> Result<Interval, Problem> {
        self.expr(extent)?;
        self.expect_int_scalar(extent, "an integer loop extent")?;
        if !var
            .ty()
            .as_data()
            .is_some_and(|d| d.is_integer() && !d.is_vector())
        {
            return Err(Problem::WrongType {
                expr: self.show_var(var),
                found: self.show_ty(var.ty()),
                expected: "an integer loop variable".to_string(),
            });
        }
        if kind == LoopKind::Parallel && self.place == Place::CudaDevice {
            return Err(Problem::ParallelInCuda);
        }
        let hi = self.interval(extent).hi.and_then(|h| h.checked_sub(1));
        Ok(Interval::range(0, hi))
    }

    fn for_mapping_header(
        &self,
        vars: &[Var],
        mapping: &TaskMapping,
        worker: &Expr,
    ) -> Result<(), Problem> {
        self.expr(worker)?;
        self.expect_int_scalar(worker, "an integer worker index")?;
        if vars.len() != mapping.rank() {
            return Err(Problem::MappingRank {
                vars: vars.len(),
                mapping: self.show_mapping(mapping),
                rank: mapping.rank(),
            });
        }
        if let Some(v) = vars.iter().find(|v| {
            !v.ty()
                .as_data()
                .is_some_and(|d| d.is_integer() && !d.is_vector())
        }) {
            return Err(Problem::WrongType {
                expr: self.show_var(v),
                found: self.show_ty(v.ty()),
                expected: "an integer task index variable".to_string(),
            });
        }
        if self.place == Place::CudaDevice && mapping_has_parallel_loop(mapping) {
            return Err(Problem::ParallelInCuda);
        }
        let workers = mapping.num_workers();
        if let Some(hi) = self.interval(worker).hi {
            let available = hi.saturating_add(1).max(0);
            if workers > available {
                return Err(Problem::TooManyWorkers {
                    mapping: self.show_mapping(mapping),
                    workers,
                    available,
                    provider: self.worker_provider(worker, available),
                });
            }
        }
        Ok(())
    }

    /// Who provides the workers of a mapping, for the error message.
    fn worker_provider(&self, worker: &Expr, available: i64) -> String {
        match worker.kind() {
            ExprKind::Builtin(Builtin::ThreadIdx(Dim::X)) if self.launch.is_some() => {
                format!("the launch provides {available} threads")
            }
            ExprKind::Builtin(b @ Builtin::ThreadIdx(_)) if self.launch.is_some() => {
                format!("the launch provides {available} values of {b}")
            }
            ExprKind::Var(v) if self.loop_vars.contains(&v.id()) => format!(
                "the loop over `{}` provides {available} workers",
                self.show_var(v)
            ),
            _ => {
                let mut uses_builtin = false;
                worker.visit(&mut |e| uses_builtin |= matches!(e.kind(), ExprKind::Builtin(_)));
                if uses_builtin && self.launch.is_some() {
                    format!(
                        "the launch provides {available} workers for `{}`",
                        self.show(worker)
                    )
                } else {
                    format!(
                        "the worker `{}` takes at most {available} values",
                        self.show(worker)
                    )
                }
            }
        }
    }

    fn condition(&self, cond: &Expr) -> Result<(), Problem> {
        self.expr(cond)?;
        self.expect_bool(cond)
    }

    fn launch_stmt(
        &self,
        kernel: &str,
        grid: &[Expr; 3],
        block: &[Expr; 3],
        shared_bytes: &Expr,
        args: &[Expr],
    ) -> Result<(), Problem> {
        if self.place != Place::Host {
            return Err(Problem::LaunchOutsideHostLauncher {
                place: self.place.describe(),
            });
        }
        for e in grid.iter().chain(block).chain([shared_bytes]) {
            self.expr(e)?;
            self.expect_int_scalar(e, "an integer launch dimension")?;
        }
        for a in args {
            self.expr(a)?;
        }
        let Some(module) = self.module else {
            return Ok(());
        };
        let bad = |detail: String| Problem::BadLaunch {
            kernel: kernel.to_string(),
            detail,
        };
        let Some(target) = module.function(kernel) else {
            return Err(bad("the module has no function of that name".to_string()));
        };
        let FunctionKind::CudaKernel(l) = &target.kind else {
            return Err(bad("it is not a CUDA kernel".to_string()));
        };
        if args.len() != target.params.len() {
            return Err(bad(format!(
                "the kernel takes {} argument(s) but is given {}",
                target.params.len(),
                args.len()
            )));
        }
        let launched: Vec<Option<i64>> = block.iter().map(Expr::as_int).collect();
        if launched.iter().zip(&l.block).any(|(a, b)| *a != Some(*b)) {
            return Err(bad(format!(
                "the launch block ({}) differs from the kernel's block ({}, {}, {})",
                block
                    .iter()
                    .map(|e| self.show(e))
                    .collect::<Vec<_>>()
                    .join(", "),
                l.block[0],
                l.block[1],
                l.block[2]
            )));
        }
        Ok(())
    }

    fn return_stmt(&self, value: Option<&Expr>) -> Result<(), Problem> {
        let ret = &self.func.ret;
        match (value, ret) {
            (None, Type::Void) => Ok(()),
            (None, t) => Err(Problem::MissingReturnValue {
                ret: self.show_ty(t),
            }),
            (Some(_), Type::Void) => Err(Problem::UnexpectedReturnValue {
                what: format!("function `{}` (returns void)", self.func.name),
            }),
            (Some(v), t) => {
                self.expr(v)?;
                let target = || format!("the result of `{}`", self.func.name);
                match t {
                    Type::Data(d) => self.expect_value(*d, v, target),
                    t if *t == v.ty() => Ok(()),
                    t => Err(Problem::ValueMismatch {
                        target: target(),
                        expected: self.show_ty(t),
                        value: self.show(v),
                        found: self.show_ty(&v.ty()),
                    }),
                }
            }
        }
    }

    // ----- expressions ------------------------------------------------------

    /// Checks `e` and all its sub-expressions.
    fn expr(&self, e: &Expr) -> Result<(), Problem> {
        for c in e.children() {
            self.expr(c)?;
        }
        match e.kind() {
            ExprKind::Const(_) => Ok(()),
            ExprKind::Var(v) => self.check_defined(v),
            ExprKind::Builtin(b) => {
                if self.place == Place::CudaDevice {
                    Ok(())
                } else {
                    Err(self.not_available(format!("the CUDA builtin `{b}`")))
                }
            }
            ExprKind::Unary(op, a) => self.unary(*op, a),
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b),
            ExprKind::Select(c, a, b) => {
                self.expect_bool(c)?;
                let (ta, tb) = (self.data(a)?, self.data(b)?);
                if compatible(a, ta, b, tb) {
                    Ok(())
                } else {
                    Err(self.incompatible("select", a, b))
                }
            }
            ExprKind::Cast(a, t) => {
                let ta = self.data(a)?;
                if ta.lanes == t.lanes || ta.lanes == 1 {
                    Ok(())
                } else {
                    Err(Problem::WrongType {
                        expr: self.show(a),
                        found: ta.to_string(),
                        expected: format!("a scalar or {} lanes to cast to {t}", t.lanes),
                    })
                }
            }
            ExprKind::Broadcast(a, _) => {
                let ta = self.data(a)?;
                if ta.is_vector() {
                    Err(Problem::WrongType {
                        expr: self.show(a),
                        found: ta.to_string(),
                        expected: "a scalar to broadcast".to_string(),
                    })
                } else {
                    Ok(())
                }
            }
            ExprKind::Math(f, args) => self.math(*f, args),
            ExprKind::Call(intrinsic, args) => self.call(intrinsic, args),
            ExprKind::TensorElement { tensor, indices } => {
                self.element_access(tensor, indices).map(|_| ())
            }
            ExprKind::Address(a) => match a.kind() {
                ExprKind::TensorElement { .. } | ExprKind::Var(_) => Ok(()),
                _ => Err(Problem::WrongType {
                    expr: self.show(a),
                    found: self.show_ty(&a.ty()),
                    expected: "a tensor element or variable to take the address of".to_string(),
                }),
            },
        }
    }

    /// The element type of `tensor[indices]`, after checking the access.
    fn element_access(&self, tensor: &Var, indices: &[Expr]) -> Result<DataType, Problem> {
        self.check_defined(tensor)?;
        let (rank, elem) = match tensor.ty() {
            Type::Tensor(tt) => (tt.layout.rank(), Some(tt.dtype)),
            Type::Pointer(inner) => (1, inner.as_data()),
            _ => (0, None),
        };
        let Some(elem) = elem else {
            return Err(Problem::NotIndexable {
                var: self.show_var(tensor),
                ty: self.show_ty(tensor.ty()),
            });
        };
        if indices.len() != rank {
            return Err(Problem::IndexCount {
                tensor: self.show_var(tensor),
                ty: self.show_ty(tensor.ty()),
                rank,
                got: indices.len(),
            });
        }
        for i in indices {
            self.expect_int_scalar(i, "an integer index")?;
        }
        Ok(elem)
    }

    fn unary(&self, op: UnaryOp, a: &Expr) -> Result<(), Problem> {
        let t = self.data(a)?;
        let (ok, expected) = match op {
            UnaryOp::Neg => (!t.is_bool(), "a number to negate"),
            UnaryOp::Not => (t.is_bool(), "a bool for `!`"),
            UnaryOp::BitNot => (t.is_integer(), "an integer for `~`"),
        };
        if ok {
            Ok(())
        } else {
            Err(Problem::WrongType {
                expr: self.show(a),
                found: t.to_string(),
                expected: expected.to_string(),
            })
        }
    }

    fn binary(&self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<(), Problem> {
        let (ta, tb) = (a.ty(), b.ty());
        if let (Type::Pointer(_), Some(d)) = (&ta, tb.as_data()) {
            if matches!(op, BinaryOp::Add | BinaryOp::Sub) && d.is_integer() && !d.is_vector() {
                return Ok(());
            }
        }
        let (da, db) = (self.data(a)?, self.data(b)?);
        let kinds_ok = match op {
            BinaryOp::And | BinaryOp::Or => da.is_bool() && db.is_bool(),
            BinaryOp::Eq | BinaryOp::Ne => da.is_bool() == db.is_bool(),
            BinaryOp::Shl | BinaryOp::Shr => da.is_integer() && db.is_integer(),
            BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor => {
                (da.is_integer() && db.is_integer()) || (da.is_bool() && db.is_bool())
            }
            _ => !da.is_bool() && !db.is_bool(),
        };
        let shift = matches!(op, BinaryOp::Shl | BinaryOp::Shr);
        let lanes_ok = da.lanes == db.lanes || da.lanes == 1 || db.lanes == 1;
        if kinds_ok && ((shift && lanes_ok) || compatible(a, da, b, db)) {
            Ok(())
        } else {
            Err(self.incompatible(op.symbol(), a, b))
        }
    }

    fn math(&self, f: MathFunc, args: &[Expr]) -> Result<(), Problem> {
        if args.len() != f.arity() {
            return Err(Problem::Arity {
                func: f.name().to_string(),
                expected: f.arity(),
                got: args.len(),
            });
        }
        let integer_ok = matches!(f, MathFunc::Abs | MathFunc::Min | MathFunc::Max);
        for a in args {
            let t = self.data(a)?;
            let ok = t.is_float() || (integer_ok && t.is_integer()) || is_int_constant(a);
            if !ok {
                return Err(Problem::WrongType {
                    expr: self.show(a),
                    found: t.to_string(),
                    expected: format!(
                        "{} argument of `{}`",
                        if integer_ok { "a numeric" } else { "a float" },
                        f.name()
                    ),
                });
            }
        }
        let first = &args[0];
        let t0 = self.data(first)?;
        for a in &args[1..] {
            let t = self.data(a)?;
            if !compatible(first, t0, a, t) {
                return Err(self.incompatible(f.name(), first, a));
            }
        }
        Ok(())
    }

    fn call(&self, intrinsic: &Intrinsic, args: &[Expr]) -> Result<(), Problem> {
        if intrinsic.is_cuda_only() && self.place != Place::CudaDevice {
            return Err(self.not_available(format!("the CUDA intrinsic `{intrinsic}`")));
        }
        let name = intrinsic.to_string();
        let bad = |detail: String| Problem::BadIntrinsic {
            intrinsic: name.clone(),
            detail,
        };
        // (number of arguments, indices of the arguments that are pointers)
        let (arity, pointers): (usize, &[usize]) = match intrinsic {
            Intrinsic::WarpShuffle { width, .. } => {
                if !(width.is_power_of_two() && *width <= 32) {
                    return Err(bad(format!("width {width} is not a power of two up to 32")));
                }
                (2, &[])
            }
            Intrinsic::VectorLoad { .. } => (1, &[0]),
            Intrinsic::VectorStore => (2, &[0]),
            Intrinsic::ExtractLane { lane } => {
                let [v] = args else {
                    return Err(Problem::Arity {
                        func: name.clone(),
                        expected: 1,
                        got: args.len(),
                    });
                };
                let t = self.data(v)?;
                if *lane >= t.lanes {
                    return Err(bad(format!("lane {lane} of a {t} value")));
                }
                (1, &[])
            }
            Intrinsic::PackLanes { dtype } => {
                if dtype.lanes < 2 {
                    return Err(bad(format!("{dtype} is not a vector type")));
                }
                for (i, a) in args.iter().enumerate() {
                    if a.ty() != Type::Data(dtype.element()) {
                        return Err(Problem::WrongType {
                            expr: self.show(a),
                            found: self.show_ty(&a.ty()),
                            expected: format!("{} (argument {i} of `{name}`)", dtype.element()),
                        });
                    }
                }
                (usize::from(dtype.lanes), &[])
            }
            Intrinsic::Mma { .. } => (3, &[0, 1, 2]),
            Intrinsic::LdMatrix { count, .. } => {
                if !matches!(count, 1 | 2 | 4) {
                    return Err(bad(format!("{count} matrices; ldmatrix loads 1, 2 or 4")));
                }
                (2, &[0, 1])
            }
            Intrinsic::CpAsync { bytes } => {
                if !matches!(bytes, 4 | 8 | 16) {
                    return Err(bad(format!("{bytes} bytes; cp.async copies 4, 8 or 16")));
                }
                (3, &[0, 1])
            }
            Intrinsic::CpAsyncCommit | Intrinsic::CpAsyncWait { .. } => (0, &[]),
            Intrinsic::DotU8I8 { lanes }
            | Intrinsic::DotI16I8 { lanes }
            | Intrinsic::DotI16 { lanes } => {
                if self.place == Place::CudaDevice {
                    return Err(self.not_available(format!("the CPU intrinsic `{intrinsic}`")));
                }
                let words = DataType::vector(ScalarType::I32, *lanes);
                let bytes = DataType::vector(ScalarType::I8, lanes.saturating_mul(2));
                for (i, a) in args.iter().enumerate() {
                    let want = match intrinsic {
                        Intrinsic::DotI16I8 { .. } if i == 2 => bytes,
                        _ => words,
                    };
                    if a.ty() != Type::Data(want) {
                        return Err(Problem::WrongType {
                            expr: self.show(a),
                            found: self.show_ty(&a.ty()),
                            expected: format!("{want} (argument {i} of `{name}`)"),
                        });
                    }
                }
                (3, &[])
            }
            Intrinsic::Function { name, ret } => return self.function_call(name, ret, args),
        };
        if args.len() != arity {
            return Err(Problem::Arity {
                func: name.clone(),
                expected: arity,
                got: args.len(),
            });
        }
        if let Intrinsic::WarpShuffle { .. } = intrinsic {
            self.data(&args[0])?;
            self.expect_int_scalar(&args[1], "an integer lane, delta or mask")?;
        }
        for &i in pointers {
            let a = &args[i];
            if !matches!(a.ty(), Type::Pointer(_) | Type::Tensor(_)) {
                return Err(Problem::WrongType {
                    expr: self.show(a),
                    found: self.show_ty(&a.ty()),
                    expected: format!("a pointer (argument {i} of `{name}`)"),
                });
            }
        }
        Ok(())
    }

    fn function_call(&self, name: &str, ret: &Type, args: &[Expr]) -> Result<(), Problem> {
        let Some(module) = self.module else {
            return Ok(());
        };
        let bad = |detail: String| Problem::BadCall {
            name: name.to_string(),
            detail,
        };
        let Some(callee) = module.function(name) else {
            return Err(bad("the module has no function of that name".to_string()));
        };
        if callee.kind != FunctionKind::Internal {
            return Err(bad("only internal functions can be called".to_string()));
        }
        if callee.params.len() != args.len() {
            return Err(Problem::Arity {
                func: name.to_string(),
                expected: callee.params.len(),
                got: args.len(),
            });
        }
        if callee.ret != *ret {
            return Err(bad(format!(
                "the call expects a result of type {} but the function returns {}",
                self.show_ty(ret),
                self.show_ty(&callee.ret)
            )));
        }
        Ok(())
    }

    // ----- type helpers -----------------------------------------------------

    fn data(&self, e: &Expr) -> Result<DataType, Problem> {
        e.ty().as_data().ok_or_else(|| Problem::WrongType {
            expr: self.show(e),
            found: self.show_ty(&e.ty()),
            expected: "a scalar or vector value".to_string(),
        })
    }

    fn expect_int_scalar(&self, e: &Expr, expected: &str) -> Result<(), Problem> {
        match e.ty().as_data() {
            Some(d) if d.is_integer() && !d.is_vector() => Ok(()),
            _ => Err(Problem::WrongType {
                expr: self.show(e),
                found: self.show_ty(&e.ty()),
                expected: expected.to_string(),
            }),
        }
    }

    fn expect_bool(&self, e: &Expr) -> Result<(), Problem> {
        if e.ty() == Type::Data(DataType::BOOL) {
            Ok(())
        } else {
            Err(Problem::WrongType {
                expr: self.show(e),
                found: self.show_ty(&e.ty()),
                expected: "a scalar bool condition".to_string(),
            })
        }
    }

    /// Checks that `value` can be written to a place of type `target`: the
    /// same type, or a scalar constant of a compatible kind when `target` is
    /// a scalar.
    fn expect_value(
        &self,
        target: DataType,
        value: &Expr,
        describe: impl FnOnce() -> String,
    ) -> Result<(), Problem> {
        let found = value.ty();
        let ok = match found.as_data() {
            Some(d) if d == target => true,
            Some(_) => match value.kind() {
                ExprKind::Const(c) => !target.is_vector() && constant_fits(c, target),
                _ => false,
            },
            None => false,
        };
        if ok {
            Ok(())
        } else {
            Err(Problem::ValueMismatch {
                target: describe(),
                expected: target.to_string(),
                value: self.show(value),
                found: self.show_ty(&found),
            })
        }
    }

    fn incompatible(&self, op: &str, a: &Expr, b: &Expr) -> Problem {
        Problem::IncompatibleOperands {
            op: op.to_string(),
            lhs: self.show(a),
            lhs_ty: self.show_ty(&a.ty()),
            rhs: self.show(b),
            rhs_ty: self.show_ty(&b.ty()),
        }
    }

    // ----- value ranges -----------------------------------------------------

    /// A range containing every value `e` can take (integers only; unknown
    /// bounds where the analysis cannot tell).
    fn interval(&self, e: &Expr) -> Interval {
        match e.kind() {
            ExprKind::Const(Constant::Int(v, _)) => Interval::exact(*v),
            ExprKind::Const(_) => Interval::UNKNOWN,
            ExprKind::Var(v) => self
                .bounds
                .get(&v.id())
                .copied()
                .unwrap_or(Interval::UNKNOWN),
            ExprKind::Builtin(b) => self.builtin_interval(*b),
            ExprKind::Cast(a, t) if t.is_integer() => self.interval(a),
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.interval(a), self.interval(b));
                match op {
                    BinaryOp::Add => Interval {
                        lo: both(x.lo, y.lo, i64::checked_add),
                        hi: both(x.hi, y.hi, i64::checked_add),
                    },
                    BinaryOp::Sub => Interval {
                        lo: both(x.lo, y.hi, i64::checked_sub),
                        hi: both(x.hi, y.lo, i64::checked_sub),
                    },
                    BinaryOp::Mul => match (x.constant(), y.constant()) {
                        (_, Some(k)) => scale(x, k),
                        (Some(k), _) => scale(y, k),
                        _ => multiply(x, y),
                    },
                    BinaryOp::Div => match y.constant() {
                        Some(k) if k > 0 => divide(x, k),
                        _ => Interval::UNKNOWN,
                    },
                    BinaryOp::Mod => match y.constant() {
                        Some(k) if k > 0 => match (x.lo, x.hi) {
                            (Some(lo), Some(hi)) if lo >= 0 && hi < k => x,
                            _ => Interval::range(0, Some(k - 1)),
                        },
                        _ => Interval::UNKNOWN,
                    },
                    BinaryOp::Shr => match y.constant() {
                        Some(s) if (0..63).contains(&s) => divide(x, 1 << s),
                        _ => Interval::UNKNOWN,
                    },
                    BinaryOp::Shl => match y.constant() {
                        Some(s) if (0..63).contains(&s) => scale(x, 1 << s),
                        _ => Interval::UNKNOWN,
                    },
                    BinaryOp::BitAnd => {
                        let mask = |m: Interval, other: Interval| match m.constant() {
                            Some(k) if k >= 0 => {
                                let hi = match other.lo {
                                    Some(lo) if lo >= 0 => other.hi.map_or(k, |h| h.min(k)),
                                    _ => k,
                                };
                                Some(Interval::range(0, Some(hi)))
                            }
                            _ => None,
                        };
                        mask(y, x)
                            .or_else(|| mask(x, y))
                            .unwrap_or(Interval::UNKNOWN)
                    }
                    _ => Interval::UNKNOWN,
                }
            }
            ExprKind::Math(MathFunc::Min, args) if args.len() == 2 => {
                let (x, y) = (self.interval(&args[0]), self.interval(&args[1]));
                Interval {
                    lo: both(x.lo, y.lo, |a, b| Some(a.min(b))),
                    hi: match (x.hi, y.hi) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                }
            }
            ExprKind::Math(MathFunc::Max, args) if args.len() == 2 => {
                let (x, y) = (self.interval(&args[0]), self.interval(&args[1]));
                Interval {
                    lo: match (x.lo, y.lo) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    },
                    hi: both(x.hi, y.hi, |a, b| Some(a.max(b))),
                }
            }
            ExprKind::Select(_, a, b) => {
                let (x, y) = (self.interval(a), self.interval(b));
                Interval {
                    lo: both(x.lo, y.lo, |a, b| Some(a.min(b))),
                    hi: both(x.hi, y.hi, |a, b| Some(a.max(b))),
                }
            }
            _ => Interval::UNKNOWN,
        }
    }

    fn builtin_interval(&self, b: Builtin) -> Interval {
        let dim = |d: Dim| match d {
            Dim::X => 0,
            Dim::Y => 1,
            Dim::Z => 2,
        };
        let Some(launch) = self.launch else {
            return match b {
                Builtin::ThreadIdx(_) | Builtin::BlockIdx(_) => Interval::range(0, None),
                Builtin::BlockDim(_) | Builtin::GridDim(_) => Interval::range(1, None),
            };
        };
        match b {
            Builtin::ThreadIdx(d) => {
                Interval::range(0, Some(launch.block[dim(d)].saturating_sub(1)))
            }
            Builtin::BlockDim(d) => Interval::exact(launch.block[dim(d)]),
            Builtin::BlockIdx(d) => {
                Interval::range(0, launch.grid[dim(d)].as_int().map(|g| g.saturating_sub(1)))
            }
            Builtin::GridDim(d) => match launch.grid[dim(d)].as_int() {
                Some(g) => Interval::exact(g),
                None => Interval::range(1, None),
            },
        }
    }
}

/// Interval of `a * b` when both are bounded on both sides.
fn multiply(a: Interval, b: Interval) -> Interval {
    let (Some(al), Some(ah), Some(bl), Some(bh)) = (a.lo, a.hi, b.lo, b.hi) else {
        return Interval::UNKNOWN;
    };
    let products = [
        al.checked_mul(bl),
        al.checked_mul(bh),
        ah.checked_mul(bl),
        ah.checked_mul(bh),
    ];
    let Some(products) = products.into_iter().collect::<Option<Vec<i64>>>() else {
        return Interval::UNKNOWN;
    };
    Interval {
        lo: products.iter().min().copied(),
        hi: products.iter().max().copied(),
    }
}

fn is_int_constant(e: &Expr) -> bool {
    matches!(e.kind(), ExprKind::Const(Constant::Int(..)))
}

/// Whether constant `c` can stand for a value of `target`'s element type:
/// integers fit integers and floats, floats only floats, bools only bools.
fn constant_fits(c: &Constant, target: DataType) -> bool {
    match c {
        Constant::Bool(_) => target.is_bool(),
        Constant::Int(..) => target.is_integer() || target.is_float(),
        Constant::Float(..) => target.is_float(),
    }
}

/// The compatibility rule for the operands of a binary operator (and of
/// `select`, `min`, …): lanes equal or one side scalar, and element types
/// equal, or one side a constant that fits the other's type, or both
/// integers.
fn compatible(a: &Expr, ta: DataType, b: &Expr, tb: DataType) -> bool {
    if !(ta.lanes == tb.lanes || ta.lanes == 1 || tb.lanes == 1) {
        return false;
    }
    if ta.scalar == tb.scalar {
        return true;
    }
    match (a.kind(), b.kind()) {
        (ExprKind::Const(c), _) => constant_fits(c, tb),
        (_, ExprKind::Const(c)) => constant_fits(c, ta),
        _ => ta.is_integer() && tb.is_integer(),
    }
}

fn mapping_has_parallel_loop(m: &TaskMapping) -> bool {
    match m.node() {
        MappingNode::Spatial { .. } => false,
        MappingNode::Repeat { attrs, .. } => attrs.contains(&LoopKind::Parallel),
        MappingNode::Compose(a, b) => mapping_has_parallel_loop(a) || mapping_has_parallel_loop(b),
    }
}

/// The expressions a layout is built from (extents and strides).
fn layout_exprs(l: &Layout) -> Vec<Expr> {
    match l.node() {
        LayoutNode::Strided { shape, strides } => shape.iter().chain(strides).cloned().collect(),
        LayoutNode::Local { .. } => Vec::new(),
        LayoutNode::Compose(a, b) => {
            let mut v = layout_exprs(a);
            v.extend(layout_exprs(b));
            v
        }
        LayoutNode::Swizzle { base, .. } => layout_exprs(base),
    }
}
